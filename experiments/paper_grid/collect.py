"""A stored grid study -> one CSV row per candidate and seed (the columns issue #20 point 4 asks for).

    python -m experiments.paper_grid.collect --storage sqlite:///.gpu_state/h200.db --study paper_grid_h200_lr \
        --seed-study paper_grid_h200_lr_s1 --concurrency 6 --out experiments/paper_grid/results/grid_h200_<date>.csv

Every layout of the study's space gets a row per seed, trained or not (``status`` says which: ok, failed with
its error kind, or not run), so a partial grid is visible as such. ``ratio`` and ``placement`` are the layout's own
(``hlnas.model.layout.placement_of``: ``paper``, ``front``, ..., ``explicit:i,j``; blank for pure models and the
Transformer), so a placement study's rows group by them (``placement.py``). KV-cache bytes are recomputed with the cost
model at 4k and 32k context (batch 1, bf16); the rest is what the run recorded.

Seeds (``seed``, ``source`` columns):

* the study's own seed (its space's ``train.seed``, 0): the study's trials (calibration's seed-0 runs of the
  space's layouts are trials too);
* each other seed ``s``, per layout, the first of:
  1. ``--seed-study``: a second study of the same space trained with ``--set train.seed=s`` (its stored space
     must equal the study's except ``train.seed``): the full candidate, LM and recall. Where the calibration ran
     the layout at seed ``s``, that study trained only the LM and took the calibration run's recall (the same
     layout, protocol and seed; ``source`` names the run, ``mqar_s`` is that run's, spent once);
     a ``--seed-study`` the storage does not hold yet is a warning, and the rows come from 2. and 3.;
  2. the study's calibration run of that layout at seed ``s`` (``hlnas_calibration``; it covers the control, each
     mixer's pure model, 3:1 hybrid and graded ratios): **recall only** (a fresh recall model; no LM was
     trained, so ``val_loss`` and ``train_wall_s`` are blank and ``source`` says ``recall only``);
  3. else ``not run``.

A study that borrowed its calibration (``--calibrated-by``: a grid's second seed, a placement extension) holds no
runs of its own; its rows fall back to the lending study's calibration runs (read from the same storage), and so
does its own seed for a layout it has not trained yet: a placement study's ``paper`` rows show the calibration's
recall, the same measurement its trial will take (``hlnas.search.calibration.calibrated_recall``), before that
trial has trained its LM half.

GPU-seconds (``gpu_s``) are the recall proxy's ``mqar_s`` (divided among the runs trained with it as replicas,
``mqar_replicas``) plus the LM's ``train_wall_s``. Both are **wall
seconds** of the run: when N runs share one GPU (time-slicing) each run's wall time holds the others' work too,
so ``gpu_s`` overstates what a candidate costs alone. ``--concurrency N`` (how many runs shared the GPU) adds
``gpu_s_est`` = ``gpu_s`` / N, an estimate that assumes the GPU was kept full. ``--util FILE...`` (h200.sh's
``logs/gpu_util.csv`` of every call the studies ran in) adds ``gpu_s_util``: the GPU's sampled utilisation split
among the jobs active at each sample (``gpu_share``; a trial from its ``started_at`` to its ``finished_at``, a
calibration run that is no trial over its recall run's clock), a measurement instead of an estimate; a row whose
recall came from a calibration run adds that run's share. Jobs of other studies sharing those calls are unknown to it
and would be charged to these: pass the files of calls that ran these studies alone. ``compare.py`` reports the cost
from the best column given. ``device_name`` is the card the run trained on (the GPU's model; blank for runs from
before hlnas stored it): one study's calls may land on different cards, whose seconds differ.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import optuna

from experiments.paper_grid.gpu_share import attribute, calibration_spans, read_util
from hlnas.model.cost import layout_metrics
from hlnas.errors import HlnasError
from hlnas.model.layout import placement_of
from hlnas.recall.ruler import RULER_TASKS
from hlnas.space import space_from_dict
from hlnas.search.calibration import calibration_lender as lender  # the study whose calibration a study borrowed
from hlnas.search.storage import UnknownStudyError, load_study

COLUMNS = ["mixer", "ratio", "placement", "layout", "seed", "source", "attention_layers", "params", "kv_cache_bytes_4k", "kv_cache_bytes_32k",
           "state_bytes", "val_loss", "recall_raw", "recall_baseline", "recall_baseline_name", "recall", "recall_auc",
           "mqar_steps_to_target", "mqar_s", "train_wall_s", "gpu_s", "concurrency", "gpu_s_est", "gpu_s_util", "device_name",
           "ruler_avg", *[f"ruler_{t}" for t in RULER_TASKS], "mqar_acc", "mqar_mixed_acc", "mqar_mixed_by_length",
           "tokens_per_s", "steady_tokens_per_s", "status", "error_kind", "trial"]


def _protocol_baseline(space, attrs: list[dict]) -> tuple[float, str] | None:
    """The strongest no-recall baseline of the space's recall protocol, for studies from before hlnas stored it
    with each trial: recomputed on the same test instances (mqar_mixed only; None otherwise)."""
    if any(a.get("recall_baseline") is not None for a in attrs) or "mqar_mixed" not in space.score.objectives:
        return None
    from hlnas.data.tokenizer import load_tokenizer
    from hlnas.recall.baselines import strongest
    from hlnas.lm.recall_mix import mqar_recall_config
    from hlnas.score.mqar_mixed import mixed_baselines

    tok = load_tokenizer(space.data.tokenizer)
    base = mixed_baselines(mqar_recall_config(space.train, tok), space.score, tok.eos_id)
    name, b = strongest(base["mean"])
    return b, name


def _recall_columns(a: dict, baseline: tuple[float, str] | None) -> dict:
    """Raw recall, its no-recall baseline and the corrected recall; an older trial's 'recall' was the raw score."""
    from hlnas.recall.baselines import corrected

    if a.get("recall_raw") is not None:
        return {k: a.get(k) for k in ("recall_raw", "recall_baseline", "recall_baseline_name", "recall")}
    raw = a.get("mqar_mixed_acc", a.get("recall"))
    if raw is None or baseline is None:
        return {"recall_raw": raw, "recall_baseline": None, "recall_baseline_name": None, "recall": None}
    return {"recall_raw": raw, "recall_baseline": baseline[0], "recall_baseline_name": baseline[1],
            "recall": corrected(raw, baseline[0])}


def stored_space(study: optuna.Study):
    raw = study.user_attrs.get("hlnas_space")
    if raw is None:
        raise HlnasError(f"study '{study.study_name}' has no stored hlnas space (hlnas_space): not an hlnas study")
    return space_from_dict(json.loads(raw) if isinstance(raw, str) else raw, where=f"study '{study.study_name}'")


def gpu_seconds(a: dict, concurrency: int | None) -> dict:
    """``mqar_s`` / ``mqar_replicas`` + ``train_wall_s`` (wall seconds; a missing part counts 0, both missing: blank),
    and / N. A run trained as one of R replicas has the set's whole recall time as its ``mqar_s``: its share is 1/R."""
    mqar, lm = a.get("mqar_s"), a.get("train_wall_s")
    g = None if mqar is None and lm is None else round(
        (0.0 if mqar is None else float(mqar) / int(a.get("mqar_replicas") or 1)) + float(lm or 0.0), 2)
    return {"mqar_s": mqar, "train_wall_s": lm, "gpu_s": g, "concurrency": concurrency,
            "gpu_s_est": None if g is None or not concurrency else round(g / concurrency, 2)}


def util_shares(studies: list[optuna.Study], util_paths) -> dict[tuple, float]:
    """GPU-seconds per job of ``studies`` from the utilisation files (``gpu_share.attribute``): ``("trial", study,
    number)`` for each trial that trained (``started_at`` to ``finished_at``: its LM half and recall run), ``("cal",
    study, key)`` for each calibration run that is not also a trial (a seed-0 run is its layout's trial: counted once)."""
    spans: dict[tuple, tuple[float, float]] = {}
    for st in studies:
        as_trial = {t.user_attrs["calibration"] for t in st.trials if t.user_attrs.get("calibration")}
        for t in st.trials:
            a = t.user_attrs
            if "reused_from" not in a and a.get("started_at") is not None and a.get("finished_at") is not None:
                spans[("trial", st.study_name, t.number)] = (float(a["started_at"]), float(a["finished_at"]))
        spans.update({("cal", st.study_name, key): span
                      for key, span in calibration_spans(st).items() if key not in as_trial})
    return attribute(spans, read_util(util_paths))[0]


def _trial_util(shares: dict | None, study_name: str, t: optuna.trial.FrozenTrial) -> float | None:
    """A trial's measured GPU-seconds, plus the calibration run's whose recall it took (``recall_from``)."""
    g = None if shares is None else shares.get(("trial", study_name, t.number))
    src = t.user_attrs.get("recall_from")
    if g is not None and src and ":" in src:
        cal = shares.get(("cal", *src.split(":", 1)))  # None: that run's call is not in the files, or it has no clock
        g = None if cal is None else g + cal  # the LM half alone would undercount the candidate
    return None if g is None else round(g, 1)


def _by_layout(study: optuna.Study) -> dict[str, optuna.trial.FrozenTrial]:
    """The latest finished attempt of each layout; COMPLETE beats anything else; reused repeats are skipped."""
    out: dict[str, optuna.trial.FrozenTrial] = {}
    for t in study.trials:
        lay = t.user_attrs.get("layout")
        if lay is None or "reused_from" in t.user_attrs:
            continue
        old = out.get(lay)
        if old is None or t.state == optuna.trial.TrialState.COMPLETE or old.state != optuna.trial.TrialState.COMPLETE:
            out[lay] = t
    return out


def _trial_row(study_name: str, t: optuna.trial.FrozenTrial | None, baseline, concurrency, shares=None) -> dict:
    a = t.user_attrs if t is not None else {}
    tasks = (a.get("ruler") or {}).get("tasks", {})
    row = {"val_loss": a.get("val_loss"), "ruler_avg": (a.get("ruler") or {}).get("average"), "mqar_acc": a.get("mqar_acc"),
           **_recall_columns(a, baseline), "recall_auc": a.get("recall_auc"), "mqar_steps_to_target": a.get("mqar_steps_to_target"),
           **(gpu_seconds(a, concurrency) if t is not None else {"concurrency": concurrency}),
           "gpu_s_util": None if t is None else _trial_util(shares, study_name, t), "device_name": a.get("device_name"),
           "mqar_mixed_acc": a.get("mqar_mixed_acc"),
           "mqar_mixed_by_length": " ".join(f"{L}:{v:.4f}" for L, v in (a.get("mqar_mixed") or {}).get("by_length", {}).items()) or None,
           "tokens_per_s": a.get("tokens_per_s"), "steady_tokens_per_s": a.get("steady_tokens_per_s"),
           "status": ("not run" if t is None else a.get("status") or t.state.name.lower()),
           "error_kind": a.get("error_kind"), "trial": None if t is None else t.number,
           "source": None if t is None else f"{study_name}#{t.number}"
                     + (f" (recall of {a['recall_from']})" if a.get("recall_from") else "")
                     + (f" (result of {a['result_from']})" if a.get("result_from") else "")}
    if t is not None and t.state == optuna.trial.TrialState.RUNNING:
        row["status"] = "running when the lease ended"
    row.update({f"ruler_{k}": v for k, v in tasks.items()})
    return row


def _calibration_row(study_name: str, run: dict, concurrency, shares=None) -> dict:
    """A stored calibration run (hlnas.calibration.protocol.run_summary) as a row: a fresh recall model, no LM trained."""
    keep = ("val_loss", "recall_raw", "recall_baseline", "recall_baseline_name", "recall", "recall_auc", "mqar_steps_to_target",
            "error_kind")
    return {**{k: run.get(k) for k in keep}, **gpu_seconds(run, concurrency), "status": run.get("status"),
            "gpu_s_util": None if shares is None else shares.get(("cal", study_name, run["key"])),
            "device_name": run.get("device_name"),
            "source": f"{study_name} calibration {run['key']}" + ("" if run.get("train_wall_s") is not None else " (recall only)")}


def _same_space_but_seed(a, b) -> list[str]:
    """The keys where two spaces differ, ``train.seed`` aside."""
    da, db = a.to_dict(), b.to_dict()
    for d in (da, db):
        d["scale"]["train"].pop("seed", None)
    keys = sorted(set(da) | set(db))
    out = [k for k in keys if k != "scale" and da.get(k) != db.get(k)]
    sa, sb = da.get("scale", {}), db.get("scale", {})
    out += [f"scale.{k}" for k in sorted(set(sa) | set(sb)) if sa.get(k) != sb.get(k)]
    return out


def rows(study: optuna.Study, seed_study: optuna.Study | None = None, concurrency: int | None = None,
         util_paths=(), lent: optuna.Study | None = None) -> list[dict]:
    """One row per candidate of the study's space and seed: the study's own seed first, then the other seeds
    (the seed study's, then calibration's) in order; ``lent``: the study whose calibration ``study`` borrowed
    (:func:`lender`), whose runs stand in for the calibration's; see the module docstring."""
    if concurrency is not None and concurrency < 1:
        raise HlnasError(f"--concurrency must be >= 1, got {concurrency}")
    space = stored_space(study)
    seed0 = space.train.seed
    studies = [study, *(s for s in (seed_study, lent) if s is not None)]
    shares = util_shares(studies, util_paths) if util_paths else None
    by_layout = _by_layout(study)
    baseline = _protocol_baseline(space, [t.user_attrs for t in by_layout.values()])
    calibrated = lent if lent is not None else study
    fallback: dict[int, dict[str, dict]] = {}  # seed -> layout -> a calibration run's row fields
    for run in ((calibrated.user_attrs.get("hlnas_calibration") or {}).get("runs") or {}).values():
        fallback.setdefault(run["seed"], {})[run["layout"]] = \
            _calibration_row(calibrated.study_name, run, concurrency, shares)
    other = {s: dict(by) for s, by in fallback.items() if s != seed0}  # seed -> layout -> row fields
    if seed_study is not None:
        s_space = stored_space(seed_study)
        s = s_space.train.seed
        if s == seed0:
            raise HlnasError(f"seed study '{seed_study.study_name}' trained with train.seed={s}, the same seed as study "
                             f"'{study.study_name}'; start it with --set train.seed=1")
        differ = _same_space_but_seed(space, s_space)
        if differ:
            raise HlnasError(f"seed study '{seed_study.study_name}' has another space than '{study.study_name}' "
                             f"(differs in {', '.join(differ)}); its rows would not be a second seed of the same grid")
        for lay, t in _by_layout(seed_study).items():
            if t.state != optuna.trial.TrialState.RUNNING:
                other.setdefault(s, {})[lay] = _trial_row(seed_study.study_name, t, baseline, concurrency, shares)
    out = []
    for seed in [seed0, *sorted(other)]:
        for params in space.grid():
            lay = space.layout(params)
            layout = str(lay)
            m4 = layout_metrics(layout, space.model, 4096)
            m32 = layout_metrics(layout, space.model, 32768)
            # the ratio and placement the layout has: an explicit index set's params carry whichever ratio the grid
            # listed first (space.grid keeps one point per layout), not its own
            row = {"mixer": params["mixer"], "ratio": "full" if params["mixer"] == "transformer" else lay.ratio,
                   "placement": placement_of(lay), "layout": layout, "seed": seed, "attention_layers": " ".join(map(str, m4["attention_layers"])),
                   "params": m4["params"], "kv_cache_bytes_4k": m4["kv_cache_bytes"],
                   "kv_cache_bytes_32k": m32["kv_cache_bytes"], "state_bytes": m4["state_bytes"]}
            if seed == seed0:
                t, cal = by_layout.get(layout), fallback.get(seed0, {}).get(layout)
                row.update(cal if t is None and cal is not None else
                           _trial_row(study.study_name, t, baseline, concurrency, shares))
            else:
                row.update(other[seed].get(layout) or {"status": "not run", "concurrency": concurrency})
            out.append(row)
    return out


def write_csv(data: list[dict], path: str | Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in data:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in COLUMNS})


def _fmt(v, spec: str = ".4f") -> str:
    return "-" if v is None else format(v, spec)


def _optional_study(storage: str, name: str, without: str) -> optuna.Study | None:
    """The study, or None with a warning naming what the rows do ``without`` it when the storage lacks it: a seed
    study not started yet (the other seeds' rows then come from the calibration alone, as for a layout the seed study
    has not trained), or a lender of a calibration kept in another storage."""
    try:
        return load_study(storage, name)
    except UnknownStudyError as e:
        print(f"collect.py: warning: {e}; {without}", file=sys.stderr)
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--storage", required=True)
    ap.add_argument("--study", required=True, help="the grid's study (its own seed, and its calibration's other seeds)")
    ap.add_argument("--seed-study", help="a study of the same space trained with --set train.seed=S: seed S's rows")
    ap.add_argument("--seed-storage", help="the seed study's storage (default: --storage)")
    ap.add_argument("--concurrency", type=int, help="runs that shared one GPU: adds gpu_s_est = gpu_s / N")
    ap.add_argument("--util", nargs="*", default=[], help="h200.sh's gpu_util.csv of every call the studies ran in: "
                    "adds gpu_s_util, each job's share of the measured GPU time")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = load_study(args.storage, args.study)
        seed_study = _optional_study(args.seed_storage or args.storage, args.seed_study,
                                     "the other seeds' rows come from the calibration's runs alone (recall only)") \
            if args.seed_study else None
        lent_name = lender(study)
        lent = _optional_study(args.storage, lent_name, "rows it has not trained are 'not run'") if lent_name else None
        data = rows(study, seed_study, args.concurrency, args.util, lent)
    except (HlnasError, ValueError, OSError) as e:
        print(f"collect.py: {e}", file=sys.stderr)
        return 2
    write_csv(data, args.out)
    seeds = list(dict.fromkeys(r["seed"] for r in data))
    print(f"{args.out}: {len(data) // len(seeds)} candidates x seeds {', '.join(map(str, seeds))}; ok per seed: "
          + ", ".join(f"{s}: {sum(r['status'] == 'ok' for r in data if r['seed'] == s)}" for s in seeds))
    for r in data:
        print(f"  s{r['seed']} {r['layout']}  {r['mixer']:<15} {str(r['ratio']):<5} val_loss {_fmt(r.get('val_loss'), '.3f'):>6}  "
              f"recall raw {_fmt(r.get('recall_raw')):>7} no-recall {_fmt(r.get('recall_baseline')):>7} corrected "
              f"{_fmt(r.get('recall')):>7} auc {_fmt(r.get('recall_auc')):>7}  gpu_s {_fmt(r.get('gpu_s'), '.0f'):>5}  "
              f"{r['status']} {r.get('error_kind') or ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
