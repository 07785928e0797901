"""The ``hlnas`` command line. Parses arguments, then calls the library; heavy imports stay inside
the subcommands so ``hlnas --help`` is instant."""

from __future__ import annotations

import argparse
import json
import sys

from hlnas.catalog import code_table, linear_mixer_names
from hlnas.errors import HlnasError

__all__ = ["main", "build_parser"]


def _placement(text: str) -> str | list[int]:
    """A strategy name, or comma-separated 0-based attention indices ("5,11,17,23")."""
    if text and (text[0].isdigit() or "," in text):
        try:
            return [int(t) for t in text.split(",") if t.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"bad attention indices {text!r}; write e.g. 5,11,17,23") from None
    return text


def _add_layout(sub: argparse._SubParsersAction) -> None:
    from hlnas.layout import PAPER_RATIOS, PLACEMENTS

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
    p.add_argument("--layers", type=int, default=None, help="number of layers (default: the preset's, 24)")
    p.add_argument("--placement", type=_placement, default="paper", help=f"{', '.join(PLACEMENTS)}, or explicit indices like 5,11,17,23")
    p.add_argument("--string", help="describe an existing layout string instead (e.g. ZZZZZAZZZZZA...)")
    p.add_argument("--preset", default="paper-340m", help="model preset for the widths (default: paper-340m)")
    p.add_argument("--context", type=int, default=4096, help="context length L for KV-cache bytes and FLOPs (default 4096)")
    p.add_argument("--batch", type=int, default=1, help="batch size for cache bytes (default 1)")
    p.add_argument("--dtype", default="bf16", help="activation dtype: bf16, fp16, fp32 (default bf16)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_layout)


def cmd_layout(args: argparse.Namespace) -> int:
    from hlnas.budget import layout_cost
    from hlnas.config import preset
    from hlnas.layout import Layout, build_layout

    cfg = preset(args.preset)
    if args.string:
        layout = Layout.parse(args.string)
    elif args.mixer:
        layout = build_layout(args.mixer, None if args.mixer == "transformer" else args.ratio,
                              args.layers or cfg.n_layers,
                              "paper" if args.mixer == "transformer" else args.placement)
    else:
        raise HlnasError("give a mixer (e.g. 'hlnas layout gla --ratio 6:1') or --string LAYOUT")
    cost = layout_cost(layout, cfg, context=args.context, batch=args.batch, dtype=args.dtype)
    out = {
        "layout": str(layout),
        "mixers": list(layout.mixers),
        "attention_layers": list(layout.attention_layers),
        "ratio": layout.ratio,
        "preset": args.preset,
        **{k: v for k, v in cost.to_dict().items() if k not in ("layout", "attention_layers")},
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    picture = "".join("█" if m == "attention" else "·" for m in layout.mixers)
    print(f"layout         {layout}   ({layout.describe()})")
    print(f"layers         {picture}   █ attention  · linear")
    print(f"preset         {args.preset} (MLP width {cost.mlp_hidden})")
    print(f"params         {cost.params:,}")
    print(f"KV cache       {_bytes(cost.kv_cache_bytes)}  (context {cost.context}, batch {cost.batch}, {cost.dtype})")
    print(f"linear state   {_bytes(cost.state_bytes)}  (constant in context)")
    print(f"inference mem  {_bytes(cost.inference_bytes)}  (weights + KV + state)")
    print(f"FLOPs/token    {cost.flops_per_token:,}  (forward)")
    return 0


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit} ({n:,} B)"
    return f"{n} B"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hlnas",
        description="Neural architecture search over hybrid linear-attention language models.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    _add_layout(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except HlnasError as e:
        print(f"hlnas {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
