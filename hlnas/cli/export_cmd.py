"""``hlnas export``: its options and what it runs (:mod:`hlnas.analysis.export`). Registered by
:func:`hlnas.cli.main.build_parser`; heavy imports stay inside the command."""

from __future__ import annotations

import argparse
import json
import os

from hlnas.cli.args import positive_int as _positive
from hlnas.errors import HlnasError

__all__ = ["add_export", "front_export_hint"]


def add_export(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export", help="take a trial, the front or a layout to scale as fla model configs",
        description="Write OUT/<name>/config.json, the config of fla's model family of the layout's linear mixer (attn: "
        "the attention layers' indices, heads and windows; the mixer's heads and short convolutions as trained), and "
        "OUT/<name>/README.md, which says how to train it and what hlnas's cost model counts at that scale. A layout fla "
        "cannot express is refused in one line naming what is missing. See docs/export.md.")
    src = p.add_argument_group("what to export (one of)")
    src.add_argument("layout", nargs="?", help="a layout string (e.g. ZZZZZA...; hlnas defaults, or --study's settings)")
    src.add_argument("--trial", type=int, action="append", default=[], metavar="N", help="a trial of --study (repeatable)")
    src.add_argument("--front", action="store_true", help="every member of --study's Pareto front (as hlnas status lists it)")
    p.add_argument("--storage", help="storage URL (default sqlite:///hlnas.db)")
    p.add_argument("--study", help="study name (default: the storage's only study, with --trial or --front)")
    scale = p.add_argument_group("the scale (a preset, explicit widths, or a preset with some replaced)")
    scale.add_argument("--scale", help="paper-340m or paper-1.3b: the paper's widths at 24 layers (default paper-340m "
                       "unless --width is given)")
    scale.add_argument("--width", type=_positive, help="d_model")
    scale.add_argument("--depth", type=_positive, help="layers (the layout is re-laid at this depth)")
    scale.add_argument("--heads", type=_positive, help="attention heads")
    scale.add_argument("--kv-heads", type=_positive, help="attention kv heads (GQA; default: --heads)")
    scale.add_argument("--vocab", type=_positive, help="vocabulary size")
    scale.add_argument("--mlp-hidden", type=_positive, help="MLP width (default: the preset's parameter target, else fla's rule)")
    p.add_argument("--context", type=_positive, default=4096, help="max_position_embeddings and the context the "
                   "README's KV-cache bytes are counted at (default 4096)")
    p.add_argument("--out", help="output folder (each export in OUT/<name>/); without it, print the configs")
    p.add_argument("--check", action="store_true", help="build each config with fla's AutoModelForCausalLM on the meta "
                   "device and compare with hlnas's cost: parameters within 1%%, KV cache and state exact")
    p.set_defaults(func=cmd_export)


def front_export_hint(study, storage: str | None) -> list[dict]:
    """``hlnas status``: per front member, its export command at paper-340m or why fla cannot build it."""
    from hlnas.analysis.export import front_exports, study_model
    from hlnas.search.records import front_rows

    try:
        trained = study_model(study)
    except (HlnasError, TypeError, ValueError):  # a stored space this version no longer reads: no hint, status still prints
        return []
    return front_exports(front_rows(study), trained, study.study_name, storage)


def cmd_export(args: argparse.Namespace) -> int:
    from hlnas.analysis.export import Candidate, compare_costs, export, study_candidates, write_export
    from hlnas.analysis.fla_config import Scale
    from hlnas.model.layout import Layout
    from hlnas.search.storage import DEFAULT_STORAGE, only_study_name

    given = [bool(args.layout), bool(args.trial), args.front]
    if sum(given) != 1:
        raise HlnasError("give one of: a layout string, --trial N (with --study), --front (with --study)")
    from hlnas.outputs import check_output_dir
    from hlnas.search.storage import check_study_name

    if args.study is not None:  # escaped in the message, as search and status do
        check_study_name(args.study)
    if args.out:  # before any work: a folder that cannot be made must not cost the exports
        check_output_dir(args.out)
    storage = args.storage or DEFAULT_STORAGE
    if args.layout:
        layout = Layout.parse(args.layout)
        trained = None
        if args.study:  # a layout string with a study's settings
            from hlnas.analysis.export import study_model
            from hlnas.search.study import load_hlnas_study

            trained = study_model(load_hlnas_study(storage, args.study))
        source = "a layout string" + (f", with the settings of study '{args.study}'" if trained else "")
        cands = [Candidate(layout.key, layout, trained, source)]
    else:
        name = args.study or only_study_name(storage)
        cands = study_candidates(storage, name, trials=tuple(args.trial), front=args.front)
    scale = Scale(preset=args.scale or (None if args.width else "paper-340m"), width=args.width, depth=args.depth,
                  heads=args.heads, kv_heads=args.kv_heads, vocab=args.vocab, mlp_hidden=args.mlp_hidden)
    exports = [export(c, scale, context=args.context) for c in cands]
    ok = [e for e in exports if e.config is not None]
    if len(exports) == 1 and not ok:
        raise HlnasError(exports[0].refusal)
    for e in exports:  # of several: each refusal on its line, the others exported
        if e.refusal:
            print(f"{e.candidate.label}: cannot export: {e.refusal}")
    if not ok:
        raise HlnasError("no candidate could be exported (reasons above)")
    failed = 0
    for e in ok:
        where = os.path.join(args.out, e.candidate.label) if args.out else None
        if where:
            write_export(e, where)
            print(f"{e.candidate.label}: {e.layout} -> {where}/config.json ({e.config['model_type']}, "
                  f"{e.cost.params:,} parameters)")
        else:
            print(f"{e.candidate.label}: {e.layout}\n{json.dumps(e.config, indent=2)}")
        if args.check:
            problems = compare_costs(e)
            failed += bool(problems)
            print(f"  fla check: {'; '.join(problems) if problems else 'parameters, KV cache and state match'}")
    return 1 if failed else 0
