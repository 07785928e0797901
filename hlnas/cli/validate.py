"""``hlnas validate``: score a proxy (a results CSV, or stored studies as seeds) against a table of at-scale results
(:mod:`hlnas.analysis.validate`). Registered by :func:`hlnas.cli.main.build_parser`; heavy imports stay inside."""

from __future__ import annotations

import argparse
import json
import sys

from hlnas.analysis.validation_data import REFERENCES
from hlnas.cli.args import fraction, positive_int
from hlnas.errors import HlnasError

__all__ = ["add_validate", "cmd_validate"]


def add_validate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate", help="score a proxy's ranking against at-scale results (the paper's Table 7, or your own)",
        description="Compare a proxy (a results CSV, one row per candidate and seed, or stored studies, one per seed) "
        "with a reference table of at-scale results over the cells both have, and print: Spearman rho with a bootstrap "
        "interval; the same for a predictor that trains nothing (the layout's share of attention layers) and the partial "
        "rho with that share held fixed; the mixer order within each ratio (Kendall tau); the cells tied with the best "
        "(saturation); seed self-consistency, split cells and rho over random seed choices; GPU-seconds per candidate. "
        "Recall values are printed beside their no-recall baseline. With --out, also a figure (HTML, PNG).")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--csv", metavar="FILE", help="results CSV: columns mixer and ratio (or layout), the scored measure, "
                     "optionally seed, status, recall_raw, recall_baseline, gpu_s_util/gpu_s_est/gpu_s/wall_s, device_name")
    src.add_argument("--study", action="append", metavar="NAME",
                     help="a stored study (with --storage); repeat it for more seeds, one study per seed")
    p.add_argument("--storage", help="storage URL of --study (default sqlite:///hlnas.db)")
    p.add_argument("--reference", default="table7", metavar="TABLE",
                   help=f"{', '.join(REFERENCES)} (the paper's RULER averages, shipped; the second adds the "
                        "Transformer's 0.423), or a CSV of your own: columns mixer, ratio or layout, value (default table7)")
    p.add_argument("--measure", help="the proxy column scored (default: a study's recall objective, recall or "
                   "recall_auc; a CSV's recall)")
    p.add_argument("--tolerance", type=fraction, default=None, help="cells this close to the best count as saturated "
                   "(default 0.02)")
    p.add_argument("--max-saturated", type=fraction, default=None,
                   help="flag the proxy as saturated when more than this share of its cells are (default 0.2)")
    p.add_argument("--learned", type=fraction, default=None, help="corrected recall at which a run has learned; a "
                   "cell with seeds on both sides is split (default 0.5)")
    p.add_argument("--resamples", type=positive_int, default=None, help="bootstrap resamples (default 2000)")
    p.add_argument("--draws", type=positive_int, default=None, help="random seed choices for the rho spread (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap and the seed draws (default 0)")
    p.add_argument("--state-bar", metavar="PRESET", help="also score a second predictor that trains nothing: the "
                   "attention share, ties broken by each layout's recurrent-state bytes at PRESET's widths (e.g. "
                   "paper-340m; cells by mixer and ratio are built at 24 layers)")
    p.add_argument("--out", metavar="DIR", help="also write validation.md and the figure (hlnas_validation.html, .png)")
    p.add_argument("--no-png", action="store_true", help="with --out: the HTML figure only (no Chromium needed)")
    p.add_argument("--json", action="store_true", help="print the numbers as JSON")
    p.set_defaults(func=cmd_validate)


def cmd_validate(args: argparse.Namespace) -> int:
    from pathlib import Path

    from hlnas.analysis import validate as v
    from hlnas.analysis.validation_data import load_reference, read_proxy_csv, read_proxy_studies
    from hlnas.analysis.validation_report import validation_record, validation_text

    if args.storage and not args.study:
        raise HlnasError("--storage goes with --study NAME (a CSV is read with --csv FILE)")
    if args.csv:
        proxy = read_proxy_csv(args.csv, args.measure or "recall")
    else:
        from hlnas.search.storage import DEFAULT_STORAGE

        proxy = read_proxy_studies(args.storage or DEFAULT_STORAGE, args.study, args.measure)
    given = {"tolerance": args.tolerance, "max_saturated": args.max_saturated, "learned": args.learned,
             "resamples": args.resamples, "draws": args.draws}
    result = v.validate(proxy, load_reference(args.reference), seed=args.seed, state_preset=args.state_bar,
                        **{k: x for k, x in given.items() if x is not None})
    text = validation_text(result)
    print(json.dumps(validation_record(result), indent=1, default=str) if args.json else text)
    if args.out:
        from hlnas.analysis.validation_figure import write_validation_figure
        from hlnas.outputs import write_atomic

        out = Path(args.out)
        paths = write_validation_figure(result, out, png=not args.no_png)
        write_atomic(out / "validation.md", text)  # whole or not at all; a full disk is one line naming it
        for path in [out / "validation.md", *paths]:
            print(f"wrote {path}", file=sys.stderr)
    return 0
