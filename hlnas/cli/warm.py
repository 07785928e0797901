"""``hlnas warm``: compile a space's kernels at every shape its trials and calibration use (:mod:`hlnas.search.warm`).
Registered by :func:`hlnas.cli.main.build_parser`; heavy imports stay inside the command."""

from __future__ import annotations

import argparse
import json
import sys

from hlnas.cli.args import space_from_args

__all__ = ["add_warm"]


def add_warm(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "warm", help="compile a space's kernels once (one short trial per mixer at the space's shapes)",
        description="Run one short trial per mixer of a space, in its densest hybrid, at the space's own shapes with "
        "only the budgets cut (two LM steps, one recall validation check, then scoring as a trial scores), so that "
        "fla's Triton autotune and inductor's compiles land in their on-disk caches before a search: its trials then "
        "start warm. Nothing is stored in a study. On a CPU it runs the same code and compiles nothing.")
    p.add_argument("--space", default="tiny", help="a YAML file or a shipped space name (default tiny)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a setting of the space, as hlnas search --set (the shapes must match the search's)")
    p.add_argument("--mixers", help="comma-separated mixers of the space to warm (default: all, then the all-attention "
                   "model; name it as transformer)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(func=cmd_warm)


def cmd_warm(args: argparse.Namespace) -> int:
    from hlnas.search.warm import warm_layouts, warm_space

    space = space_from_args(args)
    mixers = [m.strip() for m in args.mixers.split(",") if m.strip()] if args.mixers else None
    if not args.json:
        print(f"hlnas warm: {len(warm_layouts(space, mixers))} layout(s) of space {space.name!r}", file=sys.stderr)

    def show(row: dict) -> None:
        if not args.json:
            tail = f"  {row['error']}" if row["error"] else ""
            print(f"  {row['layout']}  {row['status']}  {row['seconds']:.1f} s{tail}", flush=True)

    rows = warm_space(space, mixers, on_row=show)
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0 if all(r["status"] == "ok" for r in rows) else 1
