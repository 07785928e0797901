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


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train one layout and write a checkpoint and metrics JSON",
        description="Train one candidate (flags or a YAML recipe, see hlnas/recipe.py) and write OUT/checkpoint.pt, "
        "OUT/train_metrics.json and OUT/recipe.yaml; with --score also OUT/metrics.json. Re-running with the same "
        "OUT resumes an interrupted run.",
    )
    p.add_argument("mixer", nargs="?", help="linear mixer or 'transformer' (overrides the recipe's layout)")
    p.add_argument("--ratio", help="linear:full ratio, e.g. 6:1 or pure")
    p.add_argument("--placement", type=_placement, help="paper, front, back, middle, spread or indices 5,11")
    p.add_argument("--layout", help="a compact layout string instead of mixer/ratio")
    p.add_argument("--config", help="YAML recipe with sections model, layout, train, data, score")
    p.add_argument("--preset", help="model preset (default proxy-tiny)")
    p.add_argument("--tokens", type=int, help="token budget")
    p.add_argument("--seq-len", type=int, help="training sequence length")
    p.add_argument("--batch-size", type=int, help="sequences per step")
    p.add_argument("--lr", type=float, help="peak learning rate")
    p.add_argument("--device", help="auto, cpu, cuda")
    p.add_argument("--data", help="synthetic, a local txt/jsonl/parquet file or folder, or hf:NAME[:CONFIG]")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override any recipe field")
    p.add_argument("--score", action="store_true", help="score the trained model on the recipe's objectives")
    p.add_argument("--out", default="runs/train", help="output directory (default runs/train)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_train)


def _train_sets(args: argparse.Namespace) -> list[str]:
    sets = []
    if args.layout:
        sets.append(f"layout.__string__={args.layout}")
    if args.mixer:
        sets.append(f"layout.mixer={args.mixer}")
    if args.ratio:
        sets.append(f"layout.ratio={args.ratio}")
    if args.placement is not None:
        sets.append(f"layout.placement={args.placement if isinstance(args.placement, str) else list(args.placement)}")
    for flag, key in (("preset", "model.preset"), ("tokens", "train.tokens"), ("seq_len", "train.seq_len"),
                      ("batch_size", "train.batch_size"), ("lr", "train.lr"), ("device", "train.device"),
                      ("data", "data.source")):
        if getattr(args, flag) is not None:
            sets.append(f"{key}={getattr(args, flag)}")
    return sets + list(args.set)


def cmd_train(args: argparse.Namespace) -> int:
    from pathlib import Path

    import yaml

    from hlnas.recipe import load_recipe

    sets = _train_sets(args)
    base: dict = {}
    if not args.config and not args.layout and not args.mixer:
        base = {"layout": {"mixer": "gla", "ratio": "6:1"}}
    string = next((s.split("=", 1)[1] for s in sets if s.startswith("layout.__string__=")), None)
    sets = [s for s in sets if not s.startswith("layout.__string__=")]
    if string:
        base["layout"] = string
    recipe = load_recipe(args.config, sets, base)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "recipe.yaml").write_text(yaml.safe_dump(recipe.to_dict(), sort_keys=False))
    result = _train_recipe(recipe, out, progress=not args.no_progress)
    if args.score and result["status"] == "ok":
        result["scores"] = _score_dir(out, recipe.score)
    (out / "metrics.json").write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps({k: v for k, v in result.items() if k not in ("losses",)}, indent=1, default=str))
    return 0 if result["status"] in ("ok", "interrupted") else 1


def _train_recipe(recipe, out, progress: bool) -> dict:
    from hlnas.train import train

    extra = None
    if recipe.train.recall_every:
        from hlnas.data.tokenizer import load_tokenizer
        from hlnas.score.ruler import ruler_training_documents

        tok = load_tokenizer(recipe.data.tokenizer)
        length = recipe.train.recall_length or recipe.train.seq_len
        extra = lambda seed: ruler_training_documents(tok, length, seed)  # noqa: E731
    r = train(recipe.layout, recipe.model, recipe.train, recipe.data, out_dir=out, progress=progress, extra_docs=extra)
    d = r.to_dict()
    d["recipe"] = recipe.to_dict()
    return d


def _score_dir(ckpt_dir, score_cfg) -> dict:
    from hlnas.data.packing import TokenStream
    from hlnas.data.sources import DataConfig
    from hlnas.data.tokenizer import load_tokenizer
    from hlnas.score.objectives import score
    from hlnas.train import TrainConfig, load_checkpoint, resolve_device

    model, meta = load_checkpoint(ckpt_dir)
    tcfg, dcfg = TrainConfig.from_dict(meta["train"]), DataConfig.from_dict(meta["data"])
    device = resolve_device(tcfg.device)
    model.to(device)
    val = None
    if "val_loss" in score_cfg.objectives:
        val = TokenStream(dcfg, tcfg.seq_len).val_batches(tcfg.batch_size, tcfg.val_batches)
    return score(model, load_tokenizer(dcfg.tokenizer), score_cfg, val_batches=val, device=device, seed=tcfg.seed,
                 progress=lambda name: print(f"scoring: {name}", file=sys.stderr, flush=True))


def _add_eval(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval",
        help="score a trained checkpoint on chosen objectives",
        description="Score a checkpoint written by 'hlnas train' on objectives val_loss, ruler, mqar, lm_eval "
        "and write JSON (default: CHECKPOINT_DIR/eval.json).",
    )
    p.add_argument("checkpoint", help="a training output directory or its checkpoint.pt")
    p.add_argument("--objectives", help="comma-separated: val_loss, ruler, mqar, lm_eval (default: the recipe's)")
    p.add_argument("--set", action="append", default=[], metavar="score.KEY=VALUE", help="override score settings")
    p.add_argument("--out", help="JSON output path")
    p.set_defaults(func=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> int:
    from pathlib import Path

    import yaml

    from hlnas.recipe import yaml_load
    from hlnas.score.objectives import ScoreConfig

    ckpt = Path(args.checkpoint)
    ckpt_dir = ckpt if ckpt.is_dir() else ckpt.parent
    recipe_file = ckpt_dir / "recipe.yaml"
    raw = (yaml_load(recipe_file.read_text()) or {}).get("score", {}) if recipe_file.exists() else {}
    for item in args.set:
        key, eq, value = item.partition("=")
        if not eq or not key.startswith("score."):
            raise HlnasError(f"--set {item!r}: write score.KEY=VALUE")
        raw[key[len("score."):]] = yaml_load(value)
    if args.objectives:
        raw["objectives"] = [o.strip() for o in args.objectives.split(",") if o.strip()]
    scores = _score_dir(ckpt_dir, ScoreConfig.from_dict(raw))
    out = Path(args.out) if args.out else ckpt_dir / "eval.json"
    out.write_text(json.dumps(scores, indent=1, default=str))
    print(json.dumps({k: v for k, v in scores.items() if k not in ("ruler",)}, indent=1, default=str))
    print(f"wrote {out}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hlnas",
        description="Neural architecture search over hybrid linear-attention language models.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    _add_layout(sub)
    _add_train(sub)
    _add_eval(sub)
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
