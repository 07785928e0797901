"""Samplers compared on a tabular benchmark: hypervolume of recall vs KV cache over distinct evaluations.

Look-up instead of training (``hlnas.analysis.tabular``): every sampler runs a real optuna study over the space, each
proposal is answered from the table, and the hypervolume after each distinct evaluation is recorded, for
NSGA-II, TPE, GP, random and the grid (``hlnas search``'s settings for each), over several seeds. Always runs
the paper's published Table 7 recall (21 candidates, KV bytes from hlnas's cost model for paper-1.3b at 4k);
``--table`` adds a results CSV (e.g. the GPU grid run's). Writes, per table, into ``--out``:
``tabular_bench_<name>.md`` (command, date, the table, both hypervolume scales), ``.png``, ``.html``,
``.csv`` (mean/std per evaluation count), ``_runs.csv`` (every run) and ``_front.png`` (front-scaled curves).

    python experiments/paper_grid/tabular_bench.py                       # the paper table, 10 seeds
    python experiments/paper_grid/tabular_bench.py --table experiments/results/paper_grid_h200.csv
    python experiments/paper_grid/tabular_bench.py --no-paper --seed 0 --objectives recall_auc,kv_cache_bytes \
        --table experiments/paper_grid/results/grid_h200_<date>.csv     # one seed of a collect.py table
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from pathlib import Path

from hlnas.analysis.comparison import compare, load_sampler, write_outputs
from hlnas.analysis.figure_style import write_png
from hlnas.analysis.tabular import DEFAULT_SAMPLERS, TabularBenchmark


def _mib(x) -> str:
    return "-" if x is None else f"{float(x) / 2**20:,.0f}"


def _cell(column: str, value) -> str:
    """params with thousands separators, val_loss to 3 decimals, blank where the row has none."""
    if value in (None, ""):
        return ""
    return f"{float(value):,.0f}" if column == "params" else f"{float(value):.3f}"


def table_md(bench: TabularBenchmark) -> str:
    front = set(bench.front())
    cols = [c for c in ("val_loss", "params") if c in next(iter(bench.table.values()))]
    head = ["layout", "mixer", "ratio", *bench.objectives, *cols, "front"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for layout, row in bench.table.items():
        vals = [(_mib(row[o]) + " MiB") if o.startswith("kv_") else ("-" if row[o] is None else f"{row[o]:.3f}")
                for o in bench.objectives]
        extra = [_cell(c, row.get(c)) for c in cols]
        lines.append(f"| `{layout}` | {row.get('mixer', '')} | {row.get('ratio', '')} | " + " | ".join(vals + extra)
                     + f" | {'yes' if layout in front else ''} |")
    return "\n".join(lines)


def expected_random_to_full_front(n: int, k: int) -> float:
    """Evaluations until all k front members are drawn, candidates taken uniformly without replacement: k(n+1)/(k+1)."""
    return k * (n + 1) / (k + 1)


def run(bench: TabularBenchmark, args, stem: str, out: Path, command: str) -> Path:
    t0 = time.perf_counter()
    timing: dict[str, float] = {}

    def progress(r):
        timing[r.sampler] = time.perf_counter() - t0
        print(f"  {bench.name} {r.sampler:<8} seed {r.seed}: 100% after {r.evals_to(1.0)} ({r.asked} asked)  "
              f"[{time.perf_counter() - t0:.0f}s]", file=sys.stderr, flush=True)

    samplers = {s: load_sampler(s) for s in args.samplers.split(",") if s.strip()}
    result = compare(bench, samplers, args.evals, args.seeds, on_run=progress)
    wall = time.perf_counter() - t0
    front = result.rescored(bench.with_scale("front"))
    write_outputs(result, out, png=not args.no_png, html_js="cdn", stem=stem)
    if not args.no_png:
        write_png(front.plot(), out / f"{stem}_front.png", width=1000, height=600, scale=2)
    per_sampler, last = {}, 0.0
    for label in result.runs:  # seconds per sampler (all its seeds)
        per_sampler[label], last = timing[label] - last, timing[label]
    k, n = len(bench.front()), bench.n_candidates
    summary = result.summary()
    reached = [r for r in summary if r["evals_to"][1.0][0] is not None]
    best = min(reached, key=lambda r: r["evals_to"][1.0][0]) if reached else None
    best_auc = max(summary, key=lambda r: r["auc"])
    fewest = ("no sampler found the whole front in every run" if best is None else
              f"{best['sampler']} ({best['evals_to'][1.0][0]:.1f} ± {best['evals_to'][1.0][1]:.1f}, "
              f"{best['evals_to'][1.0][2]}/{best['seeds']} seeds)")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    md = out / f"{stem}.md"
    md.write_text(f"""# Tabular sampler benchmark: {bench.name} ({stamp})

machine: {platform.machine()}, {platform.python_implementation()} {platform.python_version()}, CPU only
command: `{command}`
source: {bench.source}
wall time: {wall:.0f} s for {len(result.runs)} samplers x {len(result.seeds)} seeds ({', '.join(f'{s} {t:.1f} s' for s, t in per_sampler.items())})

{bench.describe()}. Every sampler runs a real in-memory optuna study over the space's categorical
dimensions with `hlnas search`'s settings (NSGA-II population 8; TPE multivariate, 5 start-up trials; GP 5
start-up trials; grid = every candidate enqueued in space order, so it does not depend on the seed). A
proposal is answered from the table; a layout proposed again is told its stored values and is not counted;
after 10 repeats in a row an untried candidate is enqueued. x = distinct candidates evaluated; y = hypervolume
as a fraction of the whole table's. Seeds {result.seeds[0]}..{result.seeds[-1]}; the samplers with a random
start share it for the same seed (random, NSGA-II's first generation, TPE's and GP's start-up trials).

## The table

{table_md(bench)}

## Hypervolume, objectives scaled by the whole table (best 0, worst 1, reference 1.1)

![hypervolume vs evaluations]({stem}.png) ([interactive]({stem}.html), [curves]({stem}.csv), [runs]({stem}_runs.csv))

{result.to_markdown()}

## The same runs, objectives scaled by the Pareto front (ideal 0, nadir 1, reference 1.1)

Only rows near the front add volume here, so the curves spread out (rows worse than the front's worst
recall or KV bytes add nothing).

![front-scaled hypervolume]({stem}_front.png)

{front.to_markdown()}

## Reading

* `evals to 100%` is when the whole front ({k} of {n} rows) has been evaluated. Drawing candidates uniformly
  without replacement needs k(n+1)/(k+1) = {expected_random_to_full_front(n, k):.1f} evaluations on average for
  that; the grid needs the position of its last front member in space order.
* `mean HV` is the mean of the curve over 1..{result.n_evals} evaluations (area under it / {result.n_evals});
  higher is better. `asked` counts trials including repeats (free here, and free in `hlnas search` too, which
  reuses a trained layout's result).
* Differences smaller than the ± (std over seeds) are noise at this number of seeds.
* Computed from the tables above: fewest evaluations to the whole front on average: {fewest}; highest mean HV
  (table scale): {best_auc['sampler']} ({best_auc['auc']:.3f}).
""")
    return md


def seed_rows(path: str, seed: str | None) -> list[dict]:
    """The rows of one seed: a collect.py table holds a row per candidate and seed, the benchmark one per candidate."""
    import csv

    if not Path(path).is_file():
        raise SystemExit(f"tabular_bench.py: results table '{path}' not found")
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    seeds = sorted({r.get("seed", "") for r in rows if r.get("seed", "") != ""})
    if seed is None:
        if len(seeds) > 1:
            raise SystemExit(f"tabular_bench.py: {path} holds seeds {', '.join(seeds)}; pick one with --seed")
        return rows
    if seed not in seeds:
        raise SystemExit(f"tabular_bench.py: {path} has no rows of seed {seed} (seeds: {', '.join(seeds) or 'no seed column'})")
    return [r for r in rows if r.get("seed") == seed]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", help="also run a results CSV (one row per candidate)")
    ap.add_argument("--space", help="the space the CSV's rows came from (default: inferred from the rows)")
    ap.add_argument("--objectives", default="recall,kv_cache_bytes", help="objective columns of the CSV")
    ap.add_argument("--missing", choices=("error", "infeasible"), default="error")
    ap.add_argument("--seed", help="with a collect.py table of several seeds: the seed whose rows to use (its 'seed' column)")
    ap.add_argument("--samplers", default=",".join(DEFAULT_SAMPLERS))
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--evals", type=int, default=None, help="default: every candidate")
    ap.add_argument("--out", default="experiments/results")
    ap.add_argument("--no-paper", action="store_true", help="only the --table CSV")
    ap.add_argument("--no-png", action="store_true")
    args = ap.parse_args()
    command = "python " + " ".join([sys.argv[0].replace(str(Path.cwd()) + "/", ""), *sys.argv[1:]])
    out = Path(args.out)
    written = []
    if not args.no_paper:
        written.append(run(TabularBenchmark.from_paper(), args, "tabular_bench_paper", out, command))
    if args.table:
        objectives = [o for o in args.objectives.split(",") if o]
        rows = seed_rows(args.table, args.seed)
        stem = f"tabular_bench_{Path(args.table).stem}" + (f"_s{args.seed}" if args.seed is not None else "")
        bench = TabularBenchmark.from_rows(rows, space=args.space, missing=args.missing, objectives=objectives,
                                           name=Path(args.table).stem, source=args.table)
        written.append(run(bench, args, stem, out, command))
    for p in written:
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
