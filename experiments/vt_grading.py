"""Does multi-hop variable tracking grade layouts by their number of attention layers? (issue #20, CPU check)

Trains one fresh recall model per layout on VT (hlnas.score.vt) with a hop range, through the recall proxy's own
training (hlnas.score.recall_proxy._one_rate: AdamW, warmup + cosine, validation checks, stop at the target), then
scores the test instances *per hop count* of the query: hop 0 is one lookup (MQAR with an '='), hop h is h + 1
lookups in order. The hop-0 column is the MQAR-like control inside the same run.

One process per layout (one torch thread each), ``--jobs`` at a time:

    python experiments/vt_grading.py --layouts HHHH HHHA HAHA AAAA --hops 0 2 --chains 4 --seq-len 44 \\
        --vocab 64 --steps 1500 --lr 3e-3 --jobs 2 --out experiments/results/vt_grading_cpu.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor


def one(a) -> dict:
    import torch

    torch.set_num_threads(1)
    from hlnas.config import preset
    from hlnas.layout import Layout
    from hlnas.score.objectives import MqarConfig
    from hlnas.score.recall_proxy import _one_rate, learning_auc, make_task, recall_setup, steps_to_target, task_baselines
    from hlnas.score.baselines import strongest
    from hlnas.score.vt import IGNORE, trace_answers

    hmix = {m: {"use_short_conv": True} for m in ("hgrn", "hgrn2", "gla")}
    model = {"d_model": a.d, "n_heads": 2, "mlp_hidden": 2 * a.d, "residual_init": "zero",
             "mixer_hparams": {"attention": {"input_conv": 4}, **hmix}}
    cfg = MqarConfig(task="vt", vt={"chains": a.chains, "hops": [a.hops[0], a.hops[-1]]}, seq_len=a.seq_len, vocab=a.vocab,
                     batch=a.batch, steps=a.steps, eval_every=a.eval_every, lr=a.lr, target=a.target, test=a.test, val=a.val,
                     model=model, graph=False)
    setup = recall_setup(Layout.parse(a.layout), preset("proxy-tiny"), cfg)
    task = setup.task
    val = make_task(task, cfg.val, (2**31 - 1 - a.seed) % 2**31, split="train")
    _, val_base = strongest(task_baselines(task, *val))
    t0 = time.perf_counter()
    r = _one_rate(setup, cfg.lr, a.seed, torch.device("cpu"), val)
    wall = time.perf_counter() - t0
    xt, yt = make_task(task, cfg.test, cfg.test_seed, split="test")
    m = r["model"].eval()
    with torch.no_grad():
        pred = torch.cat([m(xt[i:i + 64]).argmax(-1) for i in range(0, len(xt), 64)])
    hops = [h for row in trace_answers(xt, yt, cfg.vocab) for _, _, h in row]
    hit = (pred == yt)[yt != IGNORE].tolist()  # row-major, as trace_answers
    per_hop = {}
    for h, ok in zip(hops, hit):
        n, k = per_hop.get(h, (0, 0))
        per_hop[h] = (n + 1, k + ok)
    stt = steps_to_target(r["curve"], cfg.target)
    base = task_baselines(task, xt, yt)
    return {"layout": a.layout, "attention_layers": a.layout.count("A"), "seed": a.seed, "steps": r["steps"],
            "steps_to_target": stt, "auc": learning_auc(r["curve"], cfg.steps, val_base, stt is not None),
            "test_acc": sum(hit) / len(hit), "baseline": strongest(base)[1],
            "acc_by_hop": {str(h): round(k / n, 4) for h, (n, k) in sorted(per_hop.items())},
            "n_by_hop": {str(h): n for h, (n, _) in sorted(per_hop.items())},
            "curve": r["curve"], "wall_s": round(wall, 1), "params": m.num_params(), "error": r["error"],
            "settings": {k: v for k, v in vars(a).items() if k not in ("layouts", "out", "jobs", "layout")}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layouts", nargs="+", default=["HHHH", "HHHA", "HAHA", "AAAA"])
    p.add_argument("--hops", nargs="+", type=int, default=[0, 2], help="lo [hi]")
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=44)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--target", type=float, default=0.98)
    p.add_argument("--test", type=int, default=512)
    p.add_argument("--val", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", default=None)
    p.add_argument("--layout", default=None, help=argparse.SUPPRESS)  # one run (a child process)
    a = p.parse_args()
    if a.layout:
        print(json.dumps(one(a)))
        return
    base = [x for x in sys.argv[1:]]

    def child(layout: str) -> dict:
        out = subprocess.run([sys.executable, __file__, *base, "--layout", layout], capture_output=True, text=True,
                             env={**os.environ, "OMP_NUM_THREADS": "1"})
        if out.returncode:
            return {"layout": layout, "error": out.stderr[-2000:]}
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{layout}: acc {r['test_acc']:.3f} by hop {r['acc_by_hop']} stt {r['steps_to_target']} auc {r['auc']} "
              f"{r['wall_s']} s", flush=True)
        return r

    with ThreadPoolExecutor(a.jobs) as ex:
        rows = list(ex.map(child, a.layouts))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)
    hop_keys = sorted({h for r in rows for h in r.get("acc_by_hop", {})}, key=int)
    print("| layout | attention layers | " + " | ".join(f"hop {h} ({int(h) + 1} lookups)" for h in hop_keys)
          + " | all | no-recall | steps to 0.98 | AUC | wall s |")
    print("|---" * (len(hop_keys) + 7) + "|")
    for r in rows:
        if "acc_by_hop" not in r:
            print(f"| {r['layout']} | failed: {r.get('error', '')[-200:]!r} |")
            continue
        print(f"| {r['layout']} | {r['attention_layers']} | " + " | ".join(f"{r['acc_by_hop'].get(h, math.nan):.3f}" for h in hop_keys)
              + f" | {r['test_acc']:.3f} | {r['baseline']:.3f} | {r['steps_to_target'] or 'never'} | {r['auc']:.3f} | {r['wall_s']} |")


if __name__ == "__main__":
    main()
