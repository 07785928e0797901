"""A CPU check of a protocol's mechanism before it spends GPU time: a 2-layer, d=64 model of one mixer (pure, or
with its second layer attention: ``--hybrid``) learns MQAR (by default K=8 in 64 tokens, 1500 steps at lr 3e-3,
hlnas's PyTorch kernels), with a fraction of its keys overwritten (assigned a new value before the queries; 0 for
plain MQAR) and optionally a key-count curriculum (CURRICULUM_KV pairs at first, doubling to K by a quarter of the
steps). One JSON line: test accuracy beside its strongest no-recall baseline, and the corrected recall.

    python experiments/proxy/precheck_cpu.py MIXER OVERWRITE [SEED [CURRICULUM_KV]]   # e.g. deltanet 0.5; hgrn2 0 0 2
    python experiments/proxy/precheck_cpu.py deltanet 0 0 8 --kv 64 --seq-len 256 --hybrid   # K above the key width
    python experiments/proxy/precheck_cpu.py gla 0 0 8 --kv 64 --seq-len 256 --hybrid --beyond 512x64,1024x64
"""
from __future__ import annotations

import argparse
import json
import time


def main(mixer: str, overwrite: float, seed: int = 0, curriculum_kv: int | None = None, kv: int = 8,
         seq_len: int = 64, hybrid: bool = False, beyond: tuple = ()) -> dict:
    from hlnas.metrics import corrected
    from hlnas.model.config import ModelConfig
    from hlnas.model.layout import Layout, build_layout
    from hlnas.recall.proxy import MqarConfig, train_mqar

    cfg = MqarConfig(seq_len=seq_len, kv_pairs=kv, vocab=max(64, 4 * kv), batch=32, steps=1500, eval_every=250,
                     test=256, val=128, lr=3e-3, overwrite=overwrite, kernels="torch", curriculum_kv=curriculum_kv,
                     beyond=beyond)
    # the short convolutions the grid's recall models use (GLA and HGRN-2 learn no MQAR here without them); the
    # delta rules keep their own heads (2 of 32 here: a key width of 32 per head)
    model = ModelConfig(d_model=64, n_heads=2, vocab_size=cfg.vocab,
                        mixer_hparams={"gla": {"use_short_conv": True}, "hgrn2": {"use_short_conv": True},
                                       "attention": {"input_conv": 4, "input_conv_init": "shift"}})
    t0 = time.time()
    pure = build_layout(mixer, "pure", 2)
    layout = Layout((pure.mixers[0], "attention")) if hybrid else pure
    r = train_mqar(layout, model, cfg, seed=seed, device="cpu")
    row = {"mixer": mixer, "overwrite": overwrite, "seed": seed, "curriculum_kv": curriculum_kv, "acc": round(r["mqar_acc"], 3),
           "baseline": round(r["mqar_baseline"], 3), "baseline_name": r.get("mqar_baseline_name"),
           "recall": round(corrected(r["mqar_acc"], r["mqar_baseline"]), 3), "cpu_s": round(time.time() - t0)}
    if (kv, seq_len, hybrid) != (8, 64, False):  # rows of the default setting keep their first form
        row.update(kv=kv, seq_len=seq_len, layout=str(layout))
    if beyond:  # the trained model at longer settings: each corrected for its own baseline, and their mean
        row["beyond"] = r["mqar_beyond"]
        row["beyond_settings"] = {k: round(v["corrected"], 3) for k, v in r["mqar_beyond_settings"].items()}
    print(json.dumps(row), flush=True)
    return row


def _settings(text: str) -> tuple[tuple[int, int], ...]:
    try:
        return tuple(tuple(int(n) for n in s.split("x")) for s in text.split(",") if s.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give LENxK settings, comma-separated (e.g. 512x64,1024x64)") from None


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mixer")
    p.add_argument("overwrite", type=float)
    p.add_argument("seed", type=int, nargs="?", default=0)
    p.add_argument("curriculum_kv", type=int, nargs="?", default=None)
    p.add_argument("--kv", type=int, default=8, help="key-value pairs K (default 8)")
    p.add_argument("--seq-len", type=int, default=64, help="sequence length (at least 4K; default 64)")
    p.add_argument("--hybrid", action="store_true", help="the second layer attention (1:1) instead of a pure model")
    p.add_argument("--beyond", type=_settings, default=(), help="also score the trained model at these settings, "
                   "LENxK comma-separated (e.g. 512x64,1024x64)")
    a = p.parse_args()
    main(a.mixer, a.overwrite, a.seed, a.curriculum_kv, a.kv, a.seq_len, a.hybrid, a.beyond)
