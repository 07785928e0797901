"""``hlnas bench-samplers``: its options and what it runs (the sampler benchmark, :mod:`hlnas.analysis.tabular` and
:mod:`hlnas.analysis.comparison`; with ``--study``, the replay of a stored study's recall curves, :mod:`hlnas.analysis.mftabular`).
Registered by :func:`hlnas.cli.main.build_parser`; heavy imports stay inside the command."""

from __future__ import annotations

import argparse
import json
import sys

from hlnas.errors import HlnasError
from hlnas.outputs import output_dir as _out_dir

__all__ = ["add_bench"]


def add_bench(sub: argparse._SubParsersAction) -> None:
    from hlnas.search.samplers import SAMPLERS

    p = sub.add_parser(
        "bench-samplers", help="compare samplers on a table of results or a stored study's recall curves (look-up "
        "instead of training, CPU seconds)",
        description="Run real optuna studies over a search space whose candidates are looked up in a results table "
        "instead of trained, and compare samplers by hypervolume (recall vs KV cache) over the number of distinct "
        "candidates evaluated: mean and std over seeds, evaluations to reach 95%/100% of the table's hypervolume. "
        "Writes OUT/hv_vs_evals.html (and .csv, _runs.csv, with --png .png). See hlnas/analysis/tabular.py for the rules. "
        "With --study: replay the recall curves a stored study's trials hold, on a simulated clock in the seconds "
        "they took and --workers asynchronous workers, full fidelity against the rung scheduler (each sampler both "
        "ways), hypervolume against simulated seconds; writes OUT/hv_vs_gpu_s.md (table), .csv and .svg "
        "(hlnas/analysis/mftabular.py).")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--paper", action="store_true", help="the paper's Table 7 recall, 21 candidates (the default)")
    src.add_argument("--table", metavar="CSV", help="a results CSV, one row per candidate (layout or mixer/ratio/"
                     "placement columns, plus the objective columns)")
    src.add_argument("--study", metavar="NAME", help="replay the stored recall curves of study NAME in --storage "
                     "(every candidate of its space needs a COMPLETE trial, or --missing infeasible)")
    p.add_argument("--storage", help="with --study: sqlite:///FILE.db (default sqlite:///hlnas.db), postgresql://..., "
                   "journal:///FILE.log")
    p.add_argument("--workers", type=int, default=4, help="with --study: simulated asynchronous workers (default 4)")
    p.add_argument("--min-steps", type=int, help="with --study: the first rung's recall-model steps (default: the "
                   "space's rungs section, else the smallest check at or above score.mqar.steps / eta^2)")
    p.add_argument("--eta", type=int, help="with --study: the rungs' reduction factor (default: the space's, else 3)")
    p.add_argument("--space", help="the search space the CSV's rows came from (YAML or shipped name; default: "
                   "inferred from the rows)")
    p.add_argument("--objectives", default="recall,kv_cache_bytes",
                   help="comma-separated columns, COL or COL:max/COL:min (default recall,kv_cache_bytes; "
                   "kv_cache_bytes reads kv_cache_bytes_4k if needed)")
    p.add_argument("--missing", choices=("error", "infeasible"), default="error",
                   help="candidates of --space (or of the --study's space) without a row (a complete trial): an error "
                   "(default) or infeasible (not evaluated)")
    p.add_argument("--samplers",
                   help=f"comma-separated: {', '.join(SAMPLERS)}, or your own as module:attr or file.py:attr "
                   "(an optuna sampler instance, class, or function seed -> sampler); default all of them "
                   "(with --study: random,nsga2, built-in names only)")
    p.add_argument("--evals", type=int, help="distinct candidates per run (with --study: layouts decided; default: all)")
    p.add_argument("--seeds", type=int, help="seeds per sampler, 0..K-1 (default 5; with --study 20)")
    p.add_argument("--scale", choices=("table", "front"), default="table",
                   help="scale objectives to [0, 1] by the whole table (default) or by its Pareto front")
    p.add_argument("--out", default="bench-samplers", help="output folder (default bench-samplers)")
    p.add_argument("--png", action="store_true", help="also write a PNG (kaleido; needs Chromium)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_bench_samplers)


def cmd_bench_samplers(args: argparse.Namespace) -> int:
    import time

    from hlnas.cli.console import bench_run_line, bench_summary
    from hlnas.analysis.comparison import compare, load_sampler, write_outputs
    from hlnas.search.samplers import SAMPLERS
    from hlnas.analysis.tabular import TabularBenchmark

    if args.study is not None:  # an empty name is refused there, not taken for no --study
        return _bench_replay(args)
    replay_only = [f for f, v in (("--storage", args.storage), ("--min-steps", args.min_steps), ("--eta", args.eta))
                   if v is not None] + (["--workers"] if args.workers != 4 else [])
    if replay_only:
        raise HlnasError(f"{', '.join(replay_only)} apply to --study (a replay of stored curves)")
    for flag, v in (("--evals", args.evals), ("--seeds", args.seeds)):  # before anything is read or created
        if v is not None and v < 1:
            raise HlnasError(f"{flag} must be >= 1, got {v}")
    objectives = [o.strip() for o in args.objectives.split(",") if o.strip()]
    args.samplers = args.samplers or ",".join(SAMPLERS)
    args.seeds = 5 if args.seeds is None else args.seeds
    if args.table:
        bench = TabularBenchmark.from_csv(args.table, space=args.space, objectives=objectives, missing=args.missing)
    else:
        if args.space or args.objectives != "recall,kv_cache_bytes":
            raise HlnasError("--space and --objectives apply to --table; the paper table is recall vs KV-cache bytes")
        bench = TabularBenchmark.from_paper()
    bench = bench.with_scale(args.scale)
    names = [s.strip() for s in args.samplers.split(",") if s.strip()]
    samplers = {name: load_sampler(name) for name in names}
    if args.seeds < 1:
        raise HlnasError(f"--seeds must be >= 1, got {args.seeds}")
    _out_dir(args.out)  # before the runs: a bad folder must not cost them
    print(bench.describe(), file=sys.stderr)
    t0 = time.perf_counter()
    result = compare(bench, samplers, args.evals, args.seeds,
                     on_run=lambda r: print(bench_run_line(r, time.perf_counter() - t0), file=sys.stderr, flush=True))
    paths = write_outputs(result, _out_dir(args.out), png=args.png)
    if args.json:
        print(json.dumps({"benchmark": bench.describe(), "n_evals": result.n_evals, "seeds": list(result.seeds),
                          "summary": result.summary()}, indent=1, default=str))
    else:
        print(bench_summary(result))
    for path in paths:
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _bench_replay(args: argparse.Namespace) -> int:
    """``bench-samplers --study``: the multi-fidelity replay of a stored study's curves (hlnas.analysis.mftabular)."""
    import os
    import shlex
    import time

    from hlnas.errors import did_you_mean
    from hlnas.analysis.mftabular import CurveBenchmark, compare_mf, default_rungs, write_mf_outputs
    from hlnas.search.samplers import SAMPLERS
    from hlnas.search.storage import check_study_name
    from hlnas.search.study import DEFAULT_STORAGE, load_hlnas_study

    if args.table or args.space or args.objectives != "recall,kv_cache_bytes" or args.png:
        raise HlnasError("--space, --objectives and --png apply to --table/--paper; a --study replay is recall vs "
                         "KV-cache bytes over the study's stored space and writes an SVG")
    seeds = 20 if args.seeds is None else args.seeds
    for flag, v, low in (("--seeds", seeds, 1), ("--workers", args.workers, 1), ("--eta", args.eta, 2),
                         ("--min-steps", args.min_steps, 1), ("--evals", args.evals, 1)):
        if v is not None and v < low:
            raise HlnasError(f"{flag} must be >= {low}, got {v}")
    names = [s.strip() for s in (args.samplers or "random,nsga2").split(",") if s.strip()]
    for name in names:
        if name not in SAMPLERS:
            raise HlnasError(f"--samplers: '{name}' is not a built-in sampler; a --study replay takes {', '.join(SAMPLERS)}"
                             f".{did_you_mean(name, list(SAMPLERS))}")
    storage = args.storage or DEFAULT_STORAGE
    bench = CurveBenchmark.from_study(load_hlnas_study(storage, check_study_name(args.study)), missing=args.missing)
    rungs = default_rungs(bench.space, args.eta or 3)
    if args.eta is not None:
        rungs["eta"] = args.eta
    if args.min_steps is not None:
        rungs["min_steps"] = args.min_steps
    bench.space.with_overrides(rungs=rungs)  # a bad rung setting fails here, before the runs
    methods = {**{f"full {n}": (n, None) for n in names}, **{f"rungs + {n}": (n, rungs) for n in names}}
    out = _out_dir(args.out)
    print(bench.describe(), file=sys.stderr)
    t0 = time.perf_counter()
    result = compare_mf(bench, methods, seeds, workers=args.workers, n_trials=args.evals, scale=args.scale,
                        reference=f"full {'nsga2' if 'nsga2' in names else names[0]}",
                        on_run=lambda r: print(f"  {r.method:<16} seed {r.seed}: {r.complete} complete, {r.stopped} stopped, "
                                               f"{r.gpu_s:,.0f} s  [{time.perf_counter() - t0:.1f}s]", file=sys.stderr, flush=True))
    command = "hlnas " + " ".join(shlex.quote(a) for a in args.argv)
    paths = write_mf_outputs(result, os.path.join(out, "hv_vs_gpu_s"), command=command)
    if args.json:
        print(json.dumps({"benchmark": bench.describe(), "rungs": rungs, "workers": args.workers, "seeds": seeds,
                          "reference": result.reference, "summary": result.summary()}, indent=1, default=str))
    else:
        print(open(paths[0]).read())
    for path in paths:
        print(f"wrote {path}", file=sys.stderr)
    return 0
