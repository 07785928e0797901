"""``hlnas layout``: build a hybrid layout and print its exact cost (:mod:`hlnas.model.cost`), and the argument types
of layouts the other commands share. Registered by :func:`hlnas.cli.main.build_parser`."""

from __future__ import annotations

import argparse
import json

from hlnas.cli.args import accept_negative_index_lists, placement_arg, positive_int
from hlnas.errors import HlnasError
from hlnas.model.catalog import code_table, linear_mixer_names

__all__ = ["add_layout", "cmd_layout"]


def add_layout(sub: argparse._SubParsersAction) -> None:
    from hlnas.model.layout import PAPER_RATIOS, PLACEMENTS

    p = sub.add_parser(
        "layout",
        help="build a hybrid layout and print its exact cost",
        description=(
            "Build the per-layer mixer layout of a hybrid model and print its parameters, KV-cache bytes, "
            "recurrent-state bytes and forward FLOPs per token. Layout codes: " + code_table() + "."
        ),
    )
    p.add_argument("mixer", nargs="?", help=f"linear mixer ({', '.join(linear_mixer_names())}) or 'transformer'")
    p.add_argument("--ratio", default="pure", help=f"linear:full ratio r:1, one attention layer every r-th layer ({', '.join(PAPER_RATIOS)}, ...)")
    p.add_argument("--layers", type=positive_int, default=None, help="number of layers (default: the preset's, 24)")
    accept_negative_index_lists(p)
    p.add_argument("--placement", type=placement_arg, default="paper", help=f"{', '.join(PLACEMENTS)}, or explicit indices like 5,11,17,23")
    p.add_argument("--string", help="describe an existing layout string instead (e.g. ZZZZZAZZZZZA...)")
    p.add_argument("--preset", default="paper-340m", help="model preset for the widths (default: paper-340m)")
    p.add_argument("--context", type=int, default=4096, help="context length L for KV-cache bytes and FLOPs (default 4096)")
    p.add_argument("--batch", type=int, default=1, help="batch size for cache bytes (default 1)")
    p.add_argument("--dtype", default="bf16", help="activation dtype: bf16, fp16, fp32 (default bf16)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_layout)


def cmd_layout(args: argparse.Namespace) -> int:
    from hlnas.model.cost import layout_cost
    from hlnas.model.config import preset
    from hlnas.cli.console import layout_card, layout_record
    from hlnas.model.layout import Layout, build_layout

    cfg = preset(args.preset)
    if args.string and (args.mixer or args.layers is not None):  # --string is the whole layout: the rest would be ignored
        raise HlnasError("--string describes the whole layout; drop the mixer and --layers, or drop --string")
    if args.string:
        layout = Layout.parse(args.string)
    elif args.mixer:
        layout = build_layout(args.mixer, None if args.mixer == "transformer" else args.ratio,
                              args.layers if args.layers is not None else cfg.n_layers,
                              "paper" if args.mixer == "transformer" else args.placement)
    else:
        raise HlnasError("give a mixer (e.g. 'hlnas layout gla --ratio 6:1') or --string LAYOUT")
    cost = layout_cost(layout, cfg, context=args.context, batch=args.batch, dtype=args.dtype)
    print(json.dumps(layout_record(layout, args.preset, cost), indent=2) if args.json else layout_card(layout, args.preset, cost))
    return 0
