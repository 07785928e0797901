"""Does multi-hop variable tracking grade layouts by their number of attention layers? (issue #20, CPU check)

Trains one fresh recall model per layout on VT (hlnas.recall.vt) with a hop range, through the recall proxy's own
training (hlnas.recall.proxy.train_mqar: AdamW, warmup + cosine, validation checks, stop at the target), then
scores the test instances *per hop count* of the query: hop 0 is one lookup (MQAR with an '='), hop h is h + 1
lookups in order. The hop-0 column is the MQAR-like control inside the same run.

One process per layout (one torch thread each), ``--jobs`` at a time:

    python experiments/vt_grading.py --layouts HHHH HHHA HAHA AAAA --hops 0 2 --chains 4 --seq-len 44 \\
        --vocab 64 --steps 1500 --lr 3e-3 --seeds 0 1 --jobs 2 --out experiments/results/vt_grading_cpu.json

Each row is ``train_mqar``'s result (the path a calibration or search run takes): test accuracy per hop count, each
hop beside its own strongest no-recall baseline (``mqar_by_hop``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor


def one(a) -> dict:
    """One layout and seed through the protocol's own path (``train_mqar``: training, test accuracy, its split by hops
    and the no-recall baselines of every hop, as a calibration or search run stores them)."""
    import torch

    torch.set_num_threads(1)
    from hlnas.model.config import preset
    from hlnas.model.layout import Layout
    from hlnas.score.objectives import MqarConfig
    from hlnas.recall.proxy import train_mqar

    hmix = {m: {"use_short_conv": True} for m in ("hgrn", "hgrn2", "gla")}
    model = {"d_model": a.d, "n_heads": 2, "mlp_hidden": 2 * a.d, "residual_init": "zero",
             "mixer_hparams": {"attention": {"input_conv": 4}, **hmix}}
    cfg = MqarConfig(task="vt", vt={"chains": a.chains, "hops": [a.hops[0], a.hops[-1]], "curriculum_steps": a.curriculum_steps,
                                   "curriculum": a.curriculum},
                     seq_len=a.seq_len, vocab=a.vocab,
                     batch=a.batch, steps=a.steps, eval_every=a.eval_every, lr=a.lr, target=a.target, test=a.test, val=a.val,
                     model=model, graph=False)
    out = train_mqar(Layout.parse(a.layout), preset("proxy-tiny"), cfg, seed=a.seed, device="cpu")
    run = out["mqar"]["runs"][-1]
    return {"layout": a.layout, "attention_layers": a.layout.count("A"), "seed": a.seed, "steps": out["mqar_steps_done"],
            "steps_to_target": out["mqar_steps_to_target"], "auc": out["mqar_auc"], "test_acc": out["mqar_acc"],
            "baseline": out["mqar_baseline"], "baseline_name": out["mqar_baseline_name"], "by_hop": out["mqar_by_hop"],
            "curve": run["curve"], "wall_s": out["mqar_s"], "params": out["mqar"]["params"], "error": out.get("mqar_error"),
            "settings": {k: v for k, v in vars(a).items() if k not in ("layouts", "seeds", "out", "jobs", "layout")}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layouts", nargs="+", default=["HHHH", "HHHA", "HAHA", "AAAA"])
    p.add_argument("--hops", nargs="+", type=int, default=[0, 2], help="lo [hi]")
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--curriculum-steps", type=int, default=0, help="train on the range's shortest chains for this many "
                   "steps first (score.mqar.vt.curriculum_steps)")
    p.add_argument("--curriculum", default="shortest", help="shortest (hops lo first) or staged (one hop more each "
                   "--curriculum-steps; score.mqar.vt.curriculum)")
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
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)  # one run (a child process)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", default=None)
    p.add_argument("--layout", default=None, help=argparse.SUPPRESS)  # one run (a child process)
    a = p.parse_args()
    if a.layout:
        print(json.dumps(one(a)))
        return
    base = [x for x in sys.argv[1:]]

    def child(job: tuple[str, int]) -> dict:
        layout, seed = job
        out = subprocess.run([sys.executable, __file__, *base, "--layout", layout, "--seed", str(seed)], capture_output=True,
                             text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        if out.returncode:
            return {"layout": layout, "seed": seed, "error": out.stderr[-2000:]}
        r = json.loads(out.stdout.strip().splitlines()[-1])
        hops = {h: v["acc"] for h, v in r["by_hop"].items()}
        print(f"{layout} seed {seed}: acc {r['test_acc']:.3f} (baseline {r['baseline']:.3f}) by hop {hops} "
              f"to target {r['steps_to_target']} auc {r['auc']} {r['wall_s']} s", flush=True)
        return r

    with ThreadPoolExecutor(a.jobs) as ex:
        rows = list(ex.map(child, [(lay, seed) for lay in a.layouts for seed in a.seeds]))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)
    print(table(rows))


def table(rows: list[dict]) -> str:
    """Markdown: per layout and seed, test accuracy per hop count with that hop's no-recall baseline in brackets."""
    hop_keys = sorted({h for r in rows for h in r.get("by_hop", {})}, key=int)
    lines = ["| layout | attention layers | seed | " + " | ".join(f"hop {h} ({int(h) + 1} lookups)" for h in hop_keys)
             + " | all [no-recall] | steps to target | AUC | wall s |", "|---" * (len(hop_keys) + 7) + "|"]
    for r in rows:
        if "by_hop" not in r:
            lines.append(f"| {r['layout']} | | {r.get('seed')} | failed: {r.get('error', '')[-200:]!r} |")
            continue
        cells = [f"{r['by_hop'][h]['acc']:.3f} [{r['by_hop'][h]['baseline']:.3f}]" if h in r["by_hop"] else "-"
                 for h in hop_keys]
        lines.append(f"| {r['layout']} | {r['attention_layers']} | {r['seed']} | " + " | ".join(cells)
                     + f" | {r['test_acc']:.3f} [{r['baseline']:.3f}] | {r['steps_to_target'] or 'never'} | {r['auc']:.3f} "
                       f"| {r['wall_s']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
