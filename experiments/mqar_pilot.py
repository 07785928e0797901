"""MQAR learnability pilot on CPU: does a fresh model of a layout learn Zoology's MQAR within a step budget?

    python experiments/mqar_pilot.py SEQ_LEN KV_PAIRS VOCAB STEPS LAYERS D_MODEL LR transformer,gla:3:1,gla:pure
"""
import sys, time, torch
if len(sys.argv) != 9 or sys.argv[1] in ("-h", "--help"):
    sys.exit(__doc__)  # the usage line above; the positional arguments are all required
torch.set_num_threads(1)
from hlnas.model.config import ModelConfig
from hlnas.model.layout import build_layout
from hlnas.score.objectives import MqarConfig, ScoreConfig, mqar_objective
L, K, V, steps, layers, d, lr = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), float(sys.argv[7])
cands = sys.argv[8].split(",")
cfg = ModelConfig(d_model=d, vocab_size=256, n_heads=2, mlp_hidden=2*d)
for c in cands:
    m, r = (c.split(":",1)+[None])[:2]
    lay = build_layout(m, None if m=="transformer" else (r or "pure"), layers)
    sc = ScoreConfig(objectives=('mqar',), mqar=MqarConfig(seq_len=L, kv_pairs=K, vocab=V, steps=steps, batch=32, lr=lr, test=256))
    t=time.time(); out = mqar_objective(lay, cfg, sc, device='cpu')
    print(c, str(lay), f"L{L} K{K} V{V} steps{steps} d{d} lr{lr}", round(out['mqar_acc'],3), round(out['mqar_final_loss'],3), f"{time.time()-t:.0f}s", flush=True)
