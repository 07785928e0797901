"""The ``hlnas`` command line. Parses arguments, then calls the library; what it prints comes from
:mod:`hlnas.cli.console`. Heavy imports stay inside the subcommands so ``hlnas --help`` is instant."""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from hlnas.cli.args import accept_negative_index_lists, placement_arg, port, positive_seconds, space_from_args
from hlnas.cli.bench import add_bench
from hlnas.cli.corpus import add_corpus
from hlnas.cli.export_cmd import add_export, front_export_hint
from hlnas.cli.layout import add_layout
from hlnas.cli.validate import add_validate
from hlnas.cli.warm import add_warm
from hlnas.errors import HlnasError
from hlnas.outputs import output_dir as _out_dir, write_output as _write_text

__all__ = ["main", "build_parser"]


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train one layout and write a checkpoint and metrics JSON",
        description="Train one candidate (flags or a YAML recipe, see hlnas/pipeline/recipe.py) and write OUT/checkpoint.pt, "
        "OUT/train_metrics.json and OUT/recipe.yaml; with --score also OUT/metrics.json. Re-running with the same "
        "OUT resumes an interrupted run.",
    )
    p.add_argument("mixer", nargs="?", help="linear mixer or 'transformer' (overrides the recipe's layout)")
    p.add_argument("--ratio", help="linear:full ratio, e.g. 6:1 or pure")
    accept_negative_index_lists(p)
    p.add_argument("--placement", type=placement_arg, help="paper, front, back, middle, spread or indices 5,11")
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
    """The shortcut flags of ``hlnas train`` as the --set items they stand for, then the --set items themselves."""
    sets = []
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
    import yaml

    from hlnas.cli.console import train_summary
    from hlnas.pipeline.recipe import DEFAULT_LAYOUT, load_recipe
    from hlnas.pipeline.run import run

    base = {"layout": DEFAULT_LAYOUT} if not (args.config or args.layout or args.mixer) else {}
    recipe = load_recipe(args.config, _train_sets(args), base, layout=args.layout)
    out = _out_dir(args.out)
    _write_text(out / "recipe.yaml", yaml.safe_dump(recipe.to_dict(), sort_keys=False))
    result = run(recipe, out_dir=out, progress=not args.no_progress, score=args.score).record(recipe)
    _write_text(out / "metrics.json", json.dumps(result, indent=1, default=str))
    print(train_summary(result))
    print(f"wrote {out / 'metrics.json'} and {out / 'checkpoint.pt'}", file=sys.stderr)
    return 0 if result["status"] in ("ok", "interrupted") else 1


def _add_eval(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval",
        help="score a trained checkpoint on chosen objectives",
        description="Score a checkpoint written by 'hlnas train' on objectives val_loss, ruler, mqar, mqar_mixed, lm_eval "
        "and write JSON (default: CHECKPOINT_DIR/eval.json).",
    )
    p.add_argument("checkpoint", help="a training output folder (hlnas train --out) or its checkpoint.pt")
    p.add_argument("--objectives", help="comma-separated: val_loss, ruler, mqar, mqar_mixed, lm_eval (default: the recipe's)")
    p.add_argument("--set", action="append", default=[], metavar="score.KEY=VALUE", help="override score settings")
    p.add_argument("--out", help="JSON output path")
    p.set_defaults(func=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> int:
    from pathlib import Path

    from hlnas.pipeline.run import checkpoint_dir, checkpoint_score_config, score_checkpoint

    ckpt_dir = checkpoint_dir(args.checkpoint)
    objectives = [o.strip() for o in args.objectives.split(",") if o.strip()] if args.objectives else None
    scores = score_checkpoint(ckpt_dir, checkpoint_score_config(ckpt_dir, args.set, objectives),
                              progress=lambda name: print(f"scoring: {name}", file=sys.stderr, flush=True))
    out = Path(args.out) if args.out else ckpt_dir / "eval.json"
    _write_text(out, json.dumps(scores, indent=1, default=str))
    print(json.dumps({k: v for k, v in scores.items() if k not in ("ruler",)}, indent=1, default=str))
    print(f"wrote {out}", file=sys.stderr)
    return 0


def _add_search(sub: argparse._SubParsersAction) -> None:
    from hlnas.search.samplers import SAMPLERS

    p = sub.add_parser(
        "search",
        help="multi-objective architecture search (the main job)",
        description="Search hybrid layouts with an Optuna sampler, trials inline, on local worker processes or on Ray workers, results in "
        "the study storage. With no arguments: the embedded default (search_spaces/tiny.yaml: tiny CPU candidates, "
        "SQLite file hlnas.db in the current directory, a few minutes on 2 cores). Resume after a crash with "
        "--resume --storage URL --study NAME; the space, settings and calibration choice come from the storage.",
    )
    p.add_argument("--space", help="search space YAML, or a shipped name: tiny, paper_grid, placement, hetero (default tiny)")
    p.add_argument("--storage", help="sqlite:///FILE.db (default sqlite:///hlnas.db), postgresql://..., journal:///FILE.log")
    p.add_argument("--study", help="study name (default: the space's name)")
    p.add_argument("--trials", type=int, help="distinct layouts to train (default: the whole space if small, else 12)")
    _add_worker_options(p, "trials")
    p.add_argument("--retry-failed", action="store_true",
                   help="with --resume: train again the layouts whose trials failed (after fixing the cause)")
    p.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="start no new trial after this long; running trials pause at their next recall check, keeping "
                        "their recall models, and --resume continues them")
    p.add_argument("--drain", type=float, default=0.0, metavar="SECONDS",
                   help="with --timeout: let the trials in flight at the timeout go on this many seconds more before pausing, "
                        "so those that finish are stored (for a machine that goes back and takes paused runs with it)")
    p.add_argument("--address", help="join an existing Ray cluster (ray://HOST:PORT or HOST:PORT)")
    p.add_argument("--gpus-per-trial", type=float, default=None, help="GPUs Ray reserves per trial (default 1 if CUDA is visible, else 0)")
    p.add_argument("--sampler", choices=SAMPLERS, help="default: the space's (nsga2 unless it says otherwise)")
    p.add_argument("--seed", type=int, default=None, help="the sampler's seed (default 0; --resume keeps the stored one)")
    p.add_argument("--resume", action="store_true", help="continue a stored study (needs --storage and --study)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override the space's scale, e.g. train.tokens=100000 or score.mqar.steps=50")
    p.add_argument("--out", help="folder for trial checkpoints (default: none kept)")
    cal = p.add_mutually_exclusive_group()
    cal.add_argument("--skip-calibration", action="store_true",
                     help="do not run the recall protocol's controls first (hlnas calibrate); the front is then unvalidated. "
                     "The choice is stored with the study: --resume keeps it")
    cal.add_argument("--calibrate", action="store_true",
                     help="with --resume: run the controls now on a study started with --skip-calibration")
    cal.add_argument("--calibrated-by", metavar="STUDY",
                     help="take the valid calibration of STUDY (same storage) instead of running the controls: refused "
                          "unless it ran the same recall protocol (depth, scale, calibration; seed, candidates, sampler "
                          "may differ) over these mixers; for a grid's second seed or a placement extension. Stored. "
                          "Layouts it ran at this study's seed take its recall result and train only their LM half")
    p.add_argument("--results-from", action="append", default=[], metavar="STUDY",
                   help="adopt STUDY's results (same storage; repeatable; stored) for layouts it trained with the same "
                        "depth, scale and seed, instead of training them (a placement extension's paper cells)")
    p.add_argument("--keep-going", action="store_true", help="train on when the first trials all fail the same way (by "
                   "default the search stops there, naming the cause, and re-queues them for --resume)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_search)


def cmd_search(args: argparse.Namespace) -> int:
    from hlnas.cli.console import SearchProgress, command, front_table, interrupted_text, stored_text
    from hlnas.space import load_space
    from hlnas.search.shared import SharedFailure
    from hlnas.search.storage import check_storage_url, check_study_name, resumable
    from hlnas.search.study import check_search, choose_executor, front_rows, run_search, trial_target
    from hlnas.search.options import SearchOptions

    storage = _storage_url(args)
    check_storage_url(storage, create=not args.resume)  # before the banner: a bad URL is the one line printed
    if not args.resume and (args.retry_failed or args.calibrate):  # meaningful only for a stored study
        raise HlnasError(f"{'--retry-failed' if args.retry_failed else '--calibrate'} acts on a stored study; it needs "
                         "--resume (a new study trains every layout, and calibrates unless --skip-calibration)")
    space = None
    if args.resume:
        if not args.study:
            raise HlnasError("--resume needs --study NAME (and --storage URL unless it is the default sqlite:///hlnas.db)")
        if args.space:
            space = load_space(args.space)
        elif args.set:  # silently dropping them would train with settings the user did not ask for
            raise HlnasError("--set changes the search space; a resumed study keeps the settings stored with it "
                             "(start a new --study to change them)")
    else:
        space = load_space(args.space or "tiny")
    if space is not None and args.set:
        space = space.with_sets(args.set)
    name = check_study_name(args.study if args.study is not None else space.name)
    trials = args.trials if args.trials is not None else trial_target(space, storage, name, args.resume)
    executor, args.workers = choose_executor(args.executor, args.workers, args.address)
    ui = SearchProgress(trials, progress=not args.no_progress)
    options = SearchOptions(
        storage=storage, study_name=name, n_trials=trials, workers=args.workers, executor=executor,
        sampler=args.sampler, resume=args.resume, seed=args.seed, address=args.address,
        cpus_per_trial=args.cpus_per_trial, gpus_per_trial=args.gpus_per_trial, out_root=args.out, on_event=ui.event,
        time_limit=args.timeout, drain=args.drain, retry_failed=args.retry_failed,
        skip_calibration=args.skip_calibration, calibrate=args.calibrate, calibrated_by=args.calibrated_by,
        results_from=args.results_from, fail_fast=not args.keep_going)
    check_search(space, options)  # before the banner: a refusal is the one line printed
    print(f"hlnas search: study '{name}' in {storage} ({'resuming' if args.resume else 'new'}), {trials} trials, "
          f"{args.workers} worker(s), {executor} executor", file=sys.stderr, flush=True)

    try:  # run_search turns Ctrl-C and SIGTERM (a scheduler, `timeout`) into a clean stop: nothing lost
        study = run_search(space, options, checked=True)
    except KeyboardInterrupt:
        ui.close()
        print(interrupted_text(resumable(storage, name), storage, name), file=sys.stderr)  # stored, unknown or not
        return 130
    except SharedFailure as e:  # the command that resumes, with the --out it used
        ui.close()
        e.resume = command("search", "--resume", "--storage", storage, "--study", name,
                           *(("--out", args.out) if args.out else ()))
        raise
    ui.close()
    print(front_table(front_rows(study), study.user_attrs.get("hlnas_calibration")))
    print(stored_text(storage, name))
    return 0


def _storage_url(args: argparse.Namespace) -> str:
    """The --storage given, or the default when none was: an empty --storage '' is a mistake (a variable left unset),
    refused by the URL check as no URL, never quietly the default file."""
    from hlnas.search.storage import DEFAULT_STORAGE

    return DEFAULT_STORAGE if args.storage is None else args.storage


def _add_worker_options(p: argparse.ArgumentParser, what: str) -> None:
    """Where runs happen: the options search and calibrate share (resolved by hlnas.search.study.choose_executor)."""
    p.add_argument("--workers", type=int, default=None,
                   help=f"{what} at once (worker processes or Ray actors); default: 2 worker processes on a CPU-only "
                        "machine with 2+ cores (the small default candidates use one core each), else 1")
    p.add_argument("--executor", choices=("auto", "inline", "processes", "ray"), default="auto",
                   help="inline: this process; processes: local worker processes sharing this machine's GPUs; ray: Ray actors "
                        "(auto: ray with --address; inline for 1 worker; for more, ray when installed, else processes, and "
                        "processes when --workers is not given on a CPU-only machine)")
    p.add_argument("--cpus-per-trial", type=float, default=1.0, help="CPUs per trial: what Ray reserves, and the torch threads of each worker (default 1)")


def _add_calibrate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate", help="run a space's recall controls and say whether its recall protocol measures recall",
        description="Train, at the space's exact scale and protocol, the all-attention control, each of its mixers pure "
        "and its 3:1 hybrid (2 seeds; the space's 'calibration' section changes these), and print recall, no-recall "
        "baselines, seed spread and the verdict. Valid when the control reaches 0.9 at the training length and every "
        "pure model and hybrid is more than twice its seed spread from its baseline or from its partner; per mixer it also "
        "reports whether the pure model sits below its hybrid beyond the seed spread and whether the graded measure "
        "(recall_auc) rises along calibration.graded_ratios, each required where the space's calibration section asks "
        "(pure_below_min_mixers, graded_min_mixers). The controls run first, then the rest in calibration.order; no "
        "other run starts once the verdict cannot be valid: a control seed fell short of control_min, a pure model or "
        "hybrid failed its separation with every seed of it and its partner scored, too few mixers can still have "
        "their pure model below the hybrid (a pure seed within the seed spread of recall 1, not below its hybrid's, "
        "or a finished pair too close), or too few can still have a rising graded measure. The runs are "
        "stored in the study, so a following 'hlnas search' with the same space and study reuses them (seed-0 runs "
        "become its trials). Exit code 0 when valid, 1 when not, 3 when --timeout stopped it first (run it again to "
        "continue: runs paused by the timeout continue where they stopped).")
    p.add_argument("space", nargs="?", default="tiny", help="search space YAML or a shipped name (default tiny)")
    p.add_argument("--storage", help="sqlite:///FILE.db (default sqlite:///hlnas.db), postgresql://..., journal:///FILE.log")
    p.add_argument("--study", help="study name (default: the space's name)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override the space's scale")
    _add_worker_options(p, "control runs")
    p.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="start no run after this long, and pause those running at their next validation check (their "
                        "recall models are kept, and the same command continues them)")
    p.add_argument("--drain", type=float, default=0.0, metavar="SECONDS",
                   help="with --timeout: let the runs in flight at the timeout go on this many seconds more before pausing, "
                        "so those that finish are stored (for a machine that goes back and takes paused runs with it)")
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.add_argument("--close", metavar="REASON",
                   help="train nothing: give up the study's running calibration for REASON (e.g. a probe outside "
                        "the study ruled the protocol out); its runs stay stored, hlnas status shows it closed with "
                        "REASON, and neither calibrate nor search continues it")
    p.add_argument("--no-progress", action="store_true", help="accepted as by hlnas search (calibrate prints a line per run, no bar)")
    p.set_defaults(func=cmd_calibrate)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from hlnas.cli.console import SearchProgress, command
    from hlnas.search.storage import check_study_name
    from hlnas.search.study import calibrate_study

    space = space_from_args(args)
    storage = _storage_url(args)
    name = check_study_name(args.study if args.study is not None else space.name)
    if args.close is not None:
        return _close_calibration(storage, name, args.close)
    ui = SearchProgress(0, progress=False) if not args.json else None
    # the same space, overrides included: a resume refuses a space that differs from the stored one
    again = shlex.join(["hlnas", "calibrate", args.space, "--storage", storage, "--study", name,
                        *(a for kv in args.set or () for a in ("--set", kv))])
    try:
        verdict, message = calibrate_study(space, storage=storage, study_name=name, workers=args.workers,
                                           executor=args.executor, cpus_per_trial=args.cpus_per_trial,
                                           time_limit=args.timeout, drain=args.drain,
                                           on_event=ui.event if ui else None)
    except KeyboardInterrupt:
        print(f"\ninterrupted; finished control runs are stored. Continue with: {again}", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps({"study": name, "storage": storage, "verdict": verdict}, indent=1, default=str))
    elif verdict is None and message is None:
        print(f"\nstopped by --timeout before every control run finished; continue with: {again}", file=sys.stderr)
    else:  # the table itself was printed by the "calibration" event
        if message:
            print(f"\n{message}", file=sys.stderr)
        else:
            print(f"\nthe protocol is valid; search it with:\n  {command('search', '--space', args.space, '--storage', storage, '--study', name)}")
    return 1 if message is not None else 3 if verdict is None else 0


def _close_calibration(storage: str, name: str, reason: str) -> int:
    from hlnas.search.calibration import close_calibration
    from hlnas.search.study import load_hlnas_study

    closed = close_calibration(load_hlnas_study(storage, name), reason)
    print(f"closed the calibration of study '{name}' ({len(closed.get('runs') or {})} runs stored): {closed['reason']}")
    return 0


def _add_status(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="print a stored study's Pareto front",
                       description="Print the Pareto front of a stored hlnas study: layout, recall, KV-cache bytes, LM loss.")
    p.add_argument("--storage", help="storage URL (default sqlite:///hlnas.db)")
    p.add_argument("--study", help="study name (default: the storage's only study)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--as-if", action="append", default=[], metavar="calibration.KEY=VALUE",
                   help="also judge the stored calibration runs as if the space's calibration section said this "
                        "(control_min, spread_floor, pure_below_min_mixers, graded_min_mixers; repeatable); printed "
                        "only, the stored verdict is unchanged")
    p.set_defaults(func=cmd_status)


def cmd_status(args: argparse.Namespace) -> int:
    from hlnas.cli.console import status_text
    from hlnas.search.storage import check_study_name, only_study_name
    from hlnas.search.study import load_hlnas_study, study_summary

    storage = _storage_url(args)
    study = load_hlnas_study(storage, only_study_name(storage) if args.study is None else check_study_name(args.study))
    summary, as_if = {**study_summary(study), "export": front_export_hint(study, args.storage)}, ""
    if args.as_if:  # the stored runs judged under other thresholds, printed after the stored verdict
        from hlnas.calibration.whatif import study_as_if

        as_if, summary["as_if"] = study_as_if(study, summary["calibration"], args.as_if)
    print(json.dumps(summary, indent=1, default=str) if args.json else status_text(summary) + (as_if and f"\n\n{as_if}"))
    return 0


def _add_dashboard(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dashboard", help="serve optuna-dashboard with hlnas's Pareto figures",
                       description="Serve optuna-dashboard over the study storage; hlnas figures (recall vs KV cache, LM vs KV, "
                       "ratio curves, RULER breakdown, hypervolume, layouts, paper overlay) are attached to every hlnas study "
                       "and refreshed as trials complete.")
    p.add_argument("--storage", help="storage URL (default sqlite:///hlnas.db)")
    p.add_argument("--study", help="only this study (default: every hlnas study in the storage)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=port, default=8080, help="1-65535 (default 8080)")
    p.add_argument("--refresh", type=positive_seconds, default=5.0, help="seconds between checks for new trials (default 5)")
    p.set_defaults(func=cmd_dashboard)


def cmd_dashboard(args: argparse.Namespace) -> int:
    from hlnas.analysis.dashboard import serve
    from hlnas.search.storage import check_storage_url, check_study_name

    if args.study is not None:  # an empty name is not "every study"
        check_study_name(args.study)

    check_storage_url(_storage_url(args))  # before the server starts: a bad URL is the one line printed
    serve(_storage_url(args), host=args.host, port=args.port, refresh_s=args.refresh, study_name=args.study)
    return 0


def _add_report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="write a self-contained HTML report and PNG figures",
                       description="Write OUT/report.html (plotly embedded, no network needed to view) and one PNG per figure "
                       "(kaleido; needs Chromium: apt-get install chromium).")
    p.add_argument("--storage", help="storage URL (default sqlite:///hlnas.db)")
    p.add_argument("--study", help="study name (default: the storage's only study)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--no-png", action="store_true", help="HTML only (no Chromium needed)")
    p.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    from hlnas.analysis.report import write_report
    from hlnas.search.storage import check_study_name, only_study_name

    storage = _storage_url(args)
    name = only_study_name(storage) if args.study is None else check_study_name(args.study)
    paths = write_report(storage, name, args.out, png=not args.no_png)
    for p in paths:
        print(p)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hlnas",
        description="Neural architecture search over hybrid linear-attention language models.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for add in (add_layout, _add_train, _add_eval, _add_search, _add_calibrate, _add_status, _add_dashboard,
                _add_report, add_validate, add_export, add_bench, add_warm, add_corpus):  # the order of `hlnas --help`
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the command as given, for outputs that name it
    try:
        return int(args.func(args) or 0)
    except Exception as e:  # a storage failing once open (read-only, full, damaged, locked) is one line as well
        error = e if isinstance(e, HlnasError) else _storage_failure(e, args) or _file_failure(e)
        if error is None:
            raise
        print(f"hlnas {args.command}: error: {str(error).strip()}", file=sys.stderr)
        return 2


def _file_failure(e: Exception) -> HlnasError | None:
    """A file a command could not write or read, in one line naming it (a full disk as :class:`DiskFull` does); None
    for an error that names no file."""
    from hlnas.errors import DiskFull, no_room

    full = no_room(e)
    if full is not None:  # a write to an open file names none
        return DiskFull(full.filename, full) if full.filename else HlnasError(
            f"no room to write an output ({full.strerror}); free space on the disk it writes to, or write elsewhere")
    if isinstance(e, OSError) and e.filename:
        return HlnasError(f"{e.filename}: {e.strerror or type(e).__name__}")
    return None


def _storage_failure(e: Exception, args: argparse.Namespace) -> HlnasError | None:
    if not hasattr(args, "storage"):  # a command without a storage
        return None
    from hlnas.search.storage import storage_failure

    return storage_failure(e, _storage_url(args))


if __name__ == "__main__":
    sys.exit(main())
