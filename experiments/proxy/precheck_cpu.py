"""A CPU check of a protocol's mechanism before it spends GPU time: a 2-layer, d=64 pure model of one mixer learns
MQAR (K=8 in 64 tokens, 1500 steps at lr 3e-3, hlnas's PyTorch kernels), with a fraction of its keys overwritten
(assigned a new value before the queries; 0 for plain MQAR) and optionally a key-count curriculum (CURRICULUM_KV
pairs at first, doubling to 8 by a quarter of the steps). One JSON line: test accuracy beside its strongest no-recall
baseline, and the corrected recall.

    python experiments/proxy/precheck_cpu.py MIXER OVERWRITE [SEED [CURRICULUM_KV]]   # e.g. deltanet 0.5; hgrn2 0 0 2
"""
from __future__ import annotations

import json
import sys
import time


def main(mixer: str, overwrite: float, seed: int = 0, curriculum_kv: int | None = None) -> dict:
    from hlnas.metrics import corrected
    from hlnas.model.config import ModelConfig
    from hlnas.model.layout import build_layout
    from hlnas.recall.proxy import MqarConfig, train_mqar

    cfg = MqarConfig(seq_len=64, kv_pairs=8, vocab=64, batch=32, steps=1500, eval_every=250, test=256, val=128, lr=3e-3,
                     overwrite=overwrite, kernels="torch", curriculum_kv=curriculum_kv)
    # the short convolutions the grid's recall models use (GLA and HGRN-2 learn no MQAR here without them)
    model = ModelConfig(d_model=64, n_heads=2, vocab_size=64,
                        mixer_hparams={"gla": {"use_short_conv": True}, "hgrn2": {"use_short_conv": True}})
    t0 = time.time()
    r = train_mqar(build_layout(mixer, "pure", 2), model, cfg, seed=seed, device="cpu")
    row = {"mixer": mixer, "overwrite": overwrite, "seed": seed, "curriculum_kv": curriculum_kv, "acc": round(r["mqar_acc"], 3),
           "baseline": round(r["mqar_baseline"], 3), "baseline_name": r.get("mqar_baseline_name"),
           "recall": round(corrected(r["mqar_acc"], r["mqar_baseline"]), 3), "cpu_s": round(time.time() - t0)}
    print(json.dumps(row), flush=True)
    return row


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4, 5) or sys.argv[1] in ("-h", "--help"):
        sys.exit(__doc__)
    main(sys.argv[1], float(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 0,
         int(sys.argv[4]) if len(sys.argv) > 4 else None)
