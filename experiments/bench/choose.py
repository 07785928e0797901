"""How to run recall models on this GPU, decided from the ``proxy_throughput_*.csv`` tables a ``bench_proxy`` step
wrote (experiments/bench/proxy_throughput.py). One rule for every choice ``experiments/paper_grid/h200.sh`` makes
(``mps:auto``, ``RUNS_PER_WORKER=auto``, ``CAL_REPLICAS=auto``): a way of running wins when its **gain**, its
aggregate steps/s over its baseline's at the same number of runs, reaches a threshold on **every** layout measured.

* The rate is the steady one (``steady_steps_per_s``: only while every run trained) where the table has it, else the
  whole round's: builds and captures dilute a gain that 4000-step runs would see in full.
* A mode's baseline is the same workers without it: ``compiled`` for ``mps_compiled`` (compile's own gain is not
  MPS's), ``processes`` for ``mps``, ``streams`` and ``replicas``.
* The number of runs is the largest the table measured, unless a choice names one (replicas: 2).

    python -m experiments.bench.choose mps DIR        # exit 0 where MPS wins by 1.3x
    python -m experiments.bench.choose workers DIR    # prints "WORKERS RUNS_PER_WORKER MPS" (3 1 0 where nothing wins)
    python -m experiments.bench.choose replicas DIR   # prints 1 where 2 replicas win by 1.2x, else 0
"""

from __future__ import annotations

import argparse
import csv
import glob
import os

BASELINE = {"mps": "processes", "streams": "processes", "replicas": "processes", "compiled": "processes",
            "mps_compiled": "compiled", "replicas_compiled": "compiled"}


def read_rows(folder: str) -> list[dict]:
    """Every row of the folder's ``proxy_throughput_*.csv`` tables."""
    rows = []
    for path in sorted(glob.glob(os.path.join(folder, "proxy_throughput_*.csv"))):
        with open(path) as f:
            rows.extend(csv.DictReader(f))
    return rows


def _rate(row: dict) -> float | None:
    for key in ("steady_steps_per_s", "steps_per_s"):
        if row.get(key):
            return float(row[key])
    return None


def largest_n(rows: list[dict]) -> int:
    """The most runs at once that some row measured (0: none)."""
    return max((int(r["n_runs"]) for r in rows if _rate(r)), default=0)


def gains(rows: list[dict], mode: str, n: int) -> dict[str, float]:
    """Layout -> ``mode``'s rate over its baseline's (:data:`BASELINE`) at ``n`` runs, where both were measured."""
    if mode not in BASELINE:
        raise ValueError(f"mode {mode!r} has no baseline to gain over; modes: {', '.join(BASELINE)}")
    rate = {(r["layout"], r["mode"]): _rate(r) for r in rows if int(r["n_runs"]) == n and _rate(r)}
    return {layout: v / rate[(layout, BASELINE[m])] for (layout, m), v in rate.items()
            if m == mode and (layout, BASELINE[m]) in rate}


def worst_gain(rows: list[dict], modes: tuple[str, ...], n: int) -> float:
    """Over the layouts, the lowest of each layout's best gain among ``modes`` at ``n`` runs (0 where none ran)."""
    best: dict[str, float] = {}
    for mode in modes:
        for layout, g in gains(rows, mode, n).items():
            best[layout] = max(best.get(layout, 0.0), g)
    return min(best.values()) if best else 0.0


def mps_wins(rows: list[dict], threshold: float = 1.3) -> bool:
    """MPS (``mps`` or ``mps_compiled``) gains at least ``threshold`` on every layout, at the largest N measured."""
    return worst_gain(rows, ("mps", "mps_compiled"), largest_n(rows)) >= threshold


def workers(rows: list[dict], threshold: float = 1.3) -> tuple[int, int, int]:
    """``(workers, runs per worker, MPS on)`` for N runs at once, N the largest measured: N runs on N CUDA streams of
    one worker, or N workers under MPS, whichever gains more on its worst layout, where that reaches ``threshold``;
    else 3 workers of one run each, time-slicing the GPU."""
    n = largest_n(rows)
    best = max(("streams", "mps"), key=lambda m: worst_gain(rows, (m,), n))
    if worst_gain(rows, (best,), n) < threshold:
        return 3, 1, 0
    return (1, n, 0) if best == "streams" else (n, 1, 1)


def replicas_win(rows: list[dict], threshold: float = 1.2) -> bool:
    """Two runs as replicas of one model gain at least ``threshold`` over 2 processes on every layout."""
    return worst_gain(rows, ("replicas",), 2) >= threshold


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("choice", choices=("mps", "workers", "replicas"))
    p.add_argument("folder", help="where the bench's proxy_throughput_*.csv tables are")
    args = p.parse_args(argv)
    rows = read_rows(args.folder)
    if args.choice == "mps":
        return 0 if mps_wins(rows) else 1
    print(*workers(rows)) if args.choice == "workers" else print(1 if replicas_win(rows) else 0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
