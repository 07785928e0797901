"""MQAR learning curve of one fresh candidate on CPU: loss and held-out accuracy every N steps, to see
when (and whether) a model leaves the ln(K) plateau. One torch thread.

    python experiments/mqar_curve.py --L 64 --K 8 --V 64 --layers 2 --lr 1e-3 --steps 3000 --cand transformer
"""
import argparse
import time

import torch

torch.set_num_threads(1)
from hlnas.config import ModelConfig
from hlnas.layout import build_layout
from hlnas.model import build_model
from hlnas.score.mqar import MQARConfig, make_mqar, mqar_accuracy, mqar_loss
from hlnas.train import cosine_lr
ap=argparse.ArgumentParser()
ap.add_argument('--L',type=int,default=64);ap.add_argument('--K',type=int,default=8);ap.add_argument('--V',type=int,default=64)
ap.add_argument('--steps',type=int,default=3000);ap.add_argument('--layers',type=int,default=2);ap.add_argument('--d',type=int,default=64)
ap.add_argument('--lr',type=float,default=3e-3);ap.add_argument('--bs',type=int,default=32);ap.add_argument('--cand',default='transformer')
ap.add_argument('--heads',type=int,default=2);ap.add_argument('--wd',type=float,default=0.1);ap.add_argument('--warm',type=float,default=0.1)
ap.add_argument('--every',type=int,default=250)
a=ap.parse_args()
cfg=ModelConfig(d_model=a.d, vocab_size=256, n_heads=a.heads, mlp_hidden=2*a.d)
m,r=(a.cand.split(":",1)+[None])[:2]
lay=build_layout(m, None if m=='transformer' else (r or 'pure'), a.layers)
mc=MQARConfig(vocab_size=a.V, seq_len=a.L, num_kv_pairs=a.K)
torch.manual_seed(0); model=build_model(lay,cfg)
opt=torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.wd)
x,y=make_mqar(mc,a.steps*a.bs,0,split='train'); xt,yt=make_mqar(mc,256,0)
t0=time.time()
for s in range(a.steps):
    for g in opt.param_groups: g['lr']=cosine_lr(s,a.steps,a.lr,a.warm,0.0)
    sl=slice(s*a.bs,(s+1)*a.bs); loss=mqar_loss(model(x[sl]),y[sl]); loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(),1.0); opt.step(); opt.zero_grad()
    if (s+1)%a.every==0:
        print(a.cand,lay,s+1,round(loss.item(),3),round(mqar_accuracy(model,xt,yt),3),f"{time.time()-t0:.0f}s",flush=True)
