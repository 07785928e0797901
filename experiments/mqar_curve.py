"""MQAR learning curve of one fresh candidate: loss and held-out accuracy every N steps, to see when (and whether)
a model leaves the ln(K) plateau. Trains through the recall proxy itself (``hlnas.recall.proxy.train_mqar``,
the ``mqar`` objective's loop: the same optimizer groups, schedule, clipping and autocast), so a curve seen here is
the one a trial gets. One torch thread on CPU.

    python experiments/mqar_curve.py --L 64 --K 8 --V 64 --layers 2 --lr 1e-3 --steps 3000 --cand transformer
    python experiments/mqar_curve.py --cand gla:3:1 --layers 6 --residual-init zero --attention-conv 4
    python experiments/mqar_curve.py --layers 6 --L 64 --K 16 --V 64 --lr 1e-3 --residual-init zero --attention-conv 4 \
        --attention-conv-init shift --seed 1
"""

from __future__ import annotations

import argparse
import os


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--L", type=int, default=64, help="MQAR sequence length")
    ap.add_argument("--K", type=int, default=8, help="key-value pairs")
    ap.add_argument("--V", type=int, default=64, help="MQAR symbols")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d", type=int, default=64, help="the recall model's d_model")
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--bs", type=int, default=32)
    ap.add_argument("--wd", type=float, default=0.1, help="weight decay (matrices only, as every hlnas run)")
    ap.add_argument("--warm", type=float, default=0.1, help="warmup fraction")
    ap.add_argument("--every", type=int, default=250, help="steps between checks")
    ap.add_argument("--cand", default="transformer", help="mixer[:ratio] at --layers")
    ap.add_argument("--residual-init", default="fla", choices=("fla", "zero"))
    ap.add_argument("--attention-conv", type=int, default=0, help="width of the attention-input conv (0: none)")
    ap.add_argument("--attention-conv-init", default="normal", choices=("normal", "shift"),
                    help="how that conv starts: the model's init, or the previous-token shift h_t + h_{t-1}")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    os.environ["HLNAS_RECALL_PROGRESS"] = "1"  # the recall proxy prints a line per check
    from hlnas.model.config import ModelConfig
    from hlnas.model.layout import build_layout
    from hlnas.score.objectives import MqarConfig
    from hlnas.recall.proxy import train_mqar

    mixer, _, ratio = a.cand.partition(":")
    layout = build_layout(mixer, None if mixer == "transformer" else (ratio or "pure"), a.layers)
    model = {"d_model": a.d, "n_heads": a.heads, "mlp_hidden": 2 * a.d, "residual_init": a.residual_init}
    if a.attention_conv:
        model["mixer_hparams"] = {"attention": {"input_conv": a.attention_conv, "input_conv_init": a.attention_conv_init}}
    cfg = MqarConfig(seq_len=a.L, kv_pairs=a.K, vocab=a.V, steps=a.steps, batch=a.bs, lr=a.lr, eval_every=a.every,
                     test=256, val=256, warmup_frac=a.warm, weight_decay=a.wd, model=model)
    out = train_mqar(layout, ModelConfig(d_model=a.d, vocab_size=256, n_heads=a.heads), cfg, seed=a.seed)
    print(f"{a.cand} {layout}: test accuracy {out['mqar_acc']:.3f} (no-recall baseline {out['mqar_baseline']:.3f}, "
          f"{out['mqar_baseline_name']}); learning AUC {out['mqar_auc']:.3f}; {out['mqar_steps_done']} steps in {out['mqar_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
