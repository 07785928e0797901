"""The CPU default study's recall-model step, this tree against a baseline git revision, measured in the same run
(issue #21 point 4: plain ``hlnas search`` on 2 cores is nearly all fresh-model MQAR steps).

    python -m experiments.bench.cpu_recall_step                          # against main's merge base, 1 core
    python -m experiments.bench.cpu_recall_step --baseline b1bd855 --layouts HHHHHH,NNNNNN,AAAAAA,HHAHHA --rounds 5
    python -m experiments.bench.cpu_recall_step --search               # also the whole default job, both trees

Each row trains the space's (``--space``, default ``tiny``) fresh recall model of a layout on its MQAR batches, through
``hlnas.training.step`` as the recall proxy does (``make_optimizer``, eager ``make_step``), in a fresh Python process
pinned to one core (``taskset``; one torch thread, as a search worker), and reports ms per step after a warm-up. The
baseline revision is checked out in a temporary git worktree and imported from there; rounds alternate the two trees
(baseline, this tree, baseline, ...) so a shared machine's load falls on both, and each row keeps the fastest round.
``ratio`` is baseline ms / this tree's ms (above 1: faster now).

With ``--search``, both trees also run the whole default job (``hlnas search`` in an empty folder: calibration and
search, SQLite, two worker processes) pinned to ``--search-cores``, one after the other, and the wall times and their
ratio are printed and added to the table.

Writes ``OUT/cpu_recall_step_<device>_<date>.csv`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from experiments.bench.results import write_results

RESULT = "CPU_RECALL_STEP "
HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# run in a fresh process with PYTHONPATH at the tree measured: the space's recall model, optimizer and step
_CHILD = r"""
import json, sys, time, torch
torch.set_num_threads(1)
from hlnas.model.layout import Layout
from hlnas.model.build import seeded_model
from hlnas.recall.mqar import MqarTask, mqar_loss
from hlnas.recall.proxy import recall_model_config
try:  # the batch stream's name since the GPU feed (2026-12-02); baseline revisions before it call it _batches
    from hlnas.recall.proxy import mqar_train_batches as _batches
except ImportError:
    from hlnas.recall.proxy import _batches
from hlnas.space import builtin_spaces, load_space
from hlnas.training.step import make_optimizer, make_step
space_name, layouts, warm, steps = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), int(sys.argv[4])
space = load_space(builtin_spaces().get(space_name, space_name))
cfg = space.score.mqar
task = MqarTask(vocab_size=cfg.vocab, seq_len=cfg.seq_len, num_kv_pairs=cfg.kv_pairs)
rcfg = recall_model_config(space.model, dict(cfg.model), cfg.vocab)
for lay in layouts:
    model = seeded_model(Layout.parse(lay), rcfg, 0)
    model.train()
    opt = make_optimizer(model, cfg.lr, betas=(0.9, cfg.beta2), weight_decay=cfg.weight_decay, graph=False)
    batches = _batches(task, cfg.batch, 0)
    step, _ = make_step(model, opt, mqar_loss, next(batches), graph=False)
    for _ in range(warm):
        step(*next(batches))
    t = time.perf_counter()
    for _ in range(steps):
        loss = step(*next(batches))
    ms = (time.perf_counter() - t) / steps * 1e3
    print("CPU_RECALL_STEP " + json.dumps({"layout": lay, "ms_per_step": ms, "loss": float(loss)}), flush=True)
"""


def _worktree(rev: str) -> str:
    path = tempfile.mkdtemp(prefix="hlnas-baseline-")
    subprocess.run(["git", "-C", HERE, "worktree", "add", "--detach", path, rev], check=True, capture_output=True)
    return path


def _drop_worktree(path: str) -> None:
    subprocess.run(["git", "-C", HERE, "worktree", "remove", "--force", path], capture_output=True)
    shutil.rmtree(path, ignore_errors=True)


def _steps(tree: str, args) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": tree, "OMP_NUM_THREADS": "1"}
    cmd = ["taskset", "-c", args.core, sys.executable, "-c", _CHILD, args.space, args.layouts, str(args.warmup),
           str(args.steps)]
    out = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"the step run in {tree} failed:\n{out.stderr[-3000:]}")
    rows = [json.loads(line[len(RESULT):]) for line in out.stdout.splitlines() if line.startswith(RESULT)]
    return {r["layout"]: r["ms_per_step"] for r in rows}


def _search(tree: str, cores: str) -> float:
    """Wall seconds of plain ``hlnas search`` (the default job) from an empty folder, on ``cores``."""
    folder = tempfile.mkdtemp(prefix="hlnas-job-")
    env = {**os.environ, "PYTHONPATH": tree}
    t = time.perf_counter()
    out = subprocess.run(["taskset", "-c", cores, sys.executable, "-m", "hlnas", "search"], cwd=folder, env=env,
                         capture_output=True, text=True)
    wall = time.perf_counter() - t
    shutil.rmtree(folder, ignore_errors=True)
    if out.returncode:
        raise SystemExit(f"hlnas search in {tree} failed:\n{out.stderr[-3000:]}")
    return wall


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", default="b1bd855", help="git revision to compare with (default: before issue 21's "
                   "step changes)")
    p.add_argument("--space", default="tiny")
    p.add_argument("--layouts", default="HHHHHH,NNNNNN,AAAAAA,HHAHHA,NNANNA")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--core", default="0", help="the core the step runs are pinned to")
    p.add_argument("--search", action="store_true", help="also time the whole default job in both trees")
    p.add_argument("--search-cores", default="0,1")
    p.add_argument("--device-name", default="cpu")
    p.add_argument("--out", default="experiments/bench")
    args = p.parse_args(argv)

    base = _worktree(args.baseline)
    try:
        best: dict[str, dict[str, float]] = {"baseline": {}, "now": {}}
        for r in range(args.rounds):
            for name, tree in (("baseline", base), ("now", HERE)):
                for lay, ms in _steps(tree, args).items():
                    best[name][lay] = min(ms, best[name].get(lay, float("inf")))
            print(f"round {r + 1}/{args.rounds}: " + ", ".join(
                f"{lay} {best['baseline'][lay]:.1f} -> {best['now'][lay]:.1f} ms" for lay in best["now"]), flush=True)
        rows = [{"layout": lay, "baseline_ms": round(best["baseline"][lay], 2), "now_ms": round(best["now"][lay], 2),
                 "ratio": round(best["baseline"][lay] / best["now"][lay], 3)} for lay in best["now"]]
        if args.search:
            walls = {name: _search(tree, args.search_cores) for name, tree in (("baseline", base), ("now", HERE))}
            rows.append({"layout": "hlnas search (whole default job, wall s)", "baseline_ms": round(walls["baseline"], 1),
                         "now_ms": round(walls["now"], 1), "ratio": round(walls["baseline"] / walls["now"], 3)})
    finally:
        _drop_worktree(base)
    for r in rows:
        print(f"{r['layout']:>44}  baseline {r['baseline_ms']:>8}  now {r['now_ms']:>8}  ratio {r['ratio']}")
    note = (f"Recall-model step of space '{args.space}' (ms per step, fastest of {args.rounds} alternating rounds, "
            f"{args.steps} steps after {args.warmup}, one core, one torch thread) in this tree and at {args.baseline}; "
            "ratio = baseline / now. The search row, if any, is wall seconds of plain `hlnas search` on "
            f"cores {args.search_cores}.")
    write_results(args.out, "cpu_recall_step", args.device_name, "CPU recall-model step vs baseline",
                  "python -m experiments.bench.cpu_recall_step " + " ".join(argv if argv is not None else sys.argv[1:]),
                  note, ["layout", "baseline", "now", "ratio"],
                  lambda r: [r["layout"], r["baseline_ms"], r["now_ms"], r["ratio"]], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
