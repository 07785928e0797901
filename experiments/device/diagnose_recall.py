"""One recall-proxy case trained for a few steps in this process, with the full traceback where it fails: the device
diagnosis of a case that failed inside a sweep, where only the error's tail comes back (and a sticky CUDA error takes
every later run of its worker with it).

    CUDA_LAUNCH_BLOCKING=1 python -m experiments.device.diagnose_recall --case '{"layout": "gated_deltanet:pure", ...}'
    python -m experiments.device.diagnose_recall --cases experiments/paper_grid/delta_capacity_keys.json --index 8 --seeds 0,1

A case is recall_sweep.py's (the same keys and defaults); ``--seeds`` with two or more trains them as replicas of one
model (hlnas.recall.replicas), as ``recall_sweep.py --replicas`` does. Prints one line: ``ok`` with the steps,
validation accuracy, step mode and seconds, or ``FAILED`` after the traceback; exit status 0 or 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", help="the case as JSON")
    p.add_argument("--cases", help="a case file; with --index")
    p.add_argument("--index", type=int, default=0)
    p.add_argument("--seeds", default=None, help="comma-separated seeds (two or more: replicas of one model)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--no-compile", action="store_true", help="the recall model eager (the case's compile off)")
    p.add_argument("--label", default="", help="printed with the result line")
    args = p.parse_args(argv)
    if not (args.case or args.cases):
        p.error("give --case or --cases")
    case = json.loads(args.case) if args.case else json.load(open(args.cases))[args.index]

    from experiments import recall_sweep
    from hlnas.recall.proxy import train_mqar
    from hlnas.recall.replicas import train_mqar_seeds

    sweep_args = recall_sweep._parser().parse_args(["--eval-every", str(args.eval_every), "--target", "1"])
    case = {"lr": 5e-4, **case, "steps": args.steps, "budget_s": None}
    if args.no_compile:
        case["compile"] = False
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else [case.get("seed", 0)]
    t0 = time.perf_counter()
    try:  # the case's own mistakes (a layout, a mixer setting) print their traceback too
        recipe = recall_sweep._spec(0, {**case, "layout": recall_sweep._layout(case["layout"], 24)}, sweep_args).recipe
        if len(seeds) > 1:
            out = train_mqar_seeds(recipe.layout, recipe.model, recipe.score.mqar, seeds)[0]
        else:
            out = train_mqar(recipe.layout, recipe.model, recipe.score.mqar, seed=seeds[0])
    except Exception:  # noqa: BLE001 - the point is the whole traceback
        traceback.print_exc()
        print(f"{args.label} FAILED after {time.perf_counter() - t0:.1f} s", flush=True)
        return 1
    run = (out.get("mqar") or {}).get("runs", [{}])[-1] if isinstance(out.get("mqar"), dict) else {}
    print(f"{args.label} ok: {run.get('steps', '?')} steps, val {run.get('val_acc', out.get('mqar_acc'))}, "
          f"mode {run.get('mode', '?')}, {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
