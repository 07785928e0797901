"""The calibration runner: the space's control runs (:func:`hlnas.calibration.protocol.plan`), submitted through the search's
executor by the same :class:`~hlnas.search.dispatch.Dispatch` as the search's trials, each stored with the study as
it finishes, then the verdict (:func:`hlnas.calibration.protocol.verdict`). Seed-0 runs of the space's layouts become the study's
trials of those layouts.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time

import optuna
from optuna.trial import TrialState

import hlnas.calibration.protocol as calib
from hlnas.errors import HlnasError
from hlnas.metrics import RECALL_OBJECTIVES
from hlnas.recall.result import finished_result
from hlnas.search.dispatch import Dispatch, StopSignals
from hlnas.search.order import expected_length
from hlnas.search.records import constraint_values, layout_spec, objective_values, paused_root
from hlnas.search.options import SearchOptions
from hlnas.search.trial import TrialResult
from hlnas.space import SearchSpace

__all__ = ["PAUSED", "needs_calibration", "calibrate_if_needed", "run_calibration",
           "calibration_failed_message", "borrow_calibration", "borrowable_calibration", "protocol_differences",
           "RECALL_ATTR", "calibrated_recall", "calibration_lender", "close_calibration"]

#: what :func:`calibrate_if_needed` returns when the time limit paused the calibration
PAUSED = "paused"
#: study user attr prefix: ``RECALL_ATTR + run key`` holds a finished calibration run's fresh-model recall result
#: (:func:`hlnas.recall.result.finished_result`), one attr a run so the calibration's own attr stays small
RECALL_ATTR = "hlnas_calibration_recall:"


def needs_calibration(space: SearchSpace) -> bool:
    """A space with a recall objective and calibration enabled is calibrated before its search."""
    return space.calibration.enabled and any(o.metric in RECALL_OBJECTIVES for o in space.objectives)


#: what a recall protocol is, for --calibrated-by: every setting of the space but these (the candidates and how they
#: are searched; the seed, which the calibration's own seeds already vary; the runs trained beside it and not judged)
_NOT_PROTOCOL = ("name", "source", "mixers", "ratios", "placements", "attention_sets", "transformer", "hetero",
                 "objectives", "constraints", "sampler", "rungs", "scale.train.seed", "calibration.order",
                 "calibration.mixer_order", "calibration.extra_ratios")


def protocol_differences(space: SearchSpace, other: SearchSpace) -> list[str]:
    """How ``other``'s recall protocol differs from ``space``'s, one ``key: a -> b`` line each ([] when the same): the
    depth, the scale (model, training, data, scoring) and the calibration's thresholds, not the candidates."""
    return space.diff(other, ignore=_NOT_PROTOCOL)


def borrowable_calibration(storage, space: SearchSpace, source: str) -> dict:
    """Study ``source``'s calibration (in ``storage``, an Optuna storage object) if ``space`` may take it as its own:
    valid, the same recall protocol (:func:`protocol_differences`), ``space``'s mixers among those it calibrated. Else
    a one-line :class:`~hlnas.errors.HlnasError` saying what stands in the way."""
    from hlnas.search.storage import load_study
    import shlex

    from hlnas.space import space_from_dict

    src = load_study(storage, source)  # UnknownStudyError lists the studies there
    cal = src.user_attrs.get("hlnas_calibration") or {}
    if cal.get("status") != "valid":
        raise HlnasError(f"--calibrated-by {source}: that study's calibration is {cal.get('status') or 'absent'}, not "
                         f"valid; calibrate it first (hlnas calibrate SPACE --study {shlex.quote(source)})")
    other = space_from_dict(src.user_attrs["hlnas_space"], where=f"study '{source}'")
    diffs = protocol_differences(other, space)
    if diffs:
        raise HlnasError(f"--calibrated-by {source}: its recall protocol differs from this space's, so its controls do "
                         f"not vouch for it: {'; '.join(diffs[:3])}{' ...' if len(diffs) > 3 else ''}")
    missing = [m for m in space.mixers if m not in other.mixers]
    if missing:
        raise HlnasError(f"--calibrated-by {source}: it did not calibrate mixer(s) {', '.join(missing)} (it has "
                         f"{', '.join(other.mixers)})")
    return cal


def borrow_calibration(study: optuna.Study, space: SearchSpace, source: str) -> dict:
    """``--calibrated-by``: study ``source``'s valid calibration (same storage, :func:`borrowable_calibration`), stored
    as ``study``'s with ``borrowed_from``; returns what was stored."""
    from hlnas.search import optuna_adapter

    cal = borrowable_calibration(optuna_adapter.storage_of(study), space, source)
    borrowed = {"status": "valid", "verdict": cal["verdict"], "borrowed_from": {"study": source}}
    study.set_user_attr("hlnas_calibration", borrowed)
    return borrowed


def close_calibration(study: optuna.Study, reason: str) -> dict:
    """``hlnas calibrate --close REASON``: give up a calibration still running, for a ``reason`` its own runs do not
    show (probes outside the study ruled the protocol out). Its runs stay stored; the study's status says ``closed``
    with the reason, and neither ``hlnas calibrate`` nor ``hlnas search`` continues it. Returns what was stored."""
    if not isinstance(reason, str) or not reason.strip():
        raise HlnasError("--close needs a reason: say why the protocol cannot pass (e.g. which probe ruled it out)")
    cal = study.user_attrs.get("hlnas_calibration") or {}
    if cal.get("status") != "running":
        raise HlnasError(f"study '{study.study_name}': its calibration is {cal.get('status') or 'not started'}; only a "
                         "running calibration can be closed")
    closed = {**cal, "status": "closed", "reason": reason.strip(), "closed_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    study.set_user_attr("hlnas_calibration", closed)
    return closed


def closed_message(study_name: str, cal: dict) -> str:
    """Why a closed calibration is neither continued nor searched, in one line."""
    return (f"the calibration of study '{study_name}' was closed on {cal.get('closed_at', '?')} with "
            f"{len(cal.get('runs') or {})} runs stored: {cal.get('reason')}; calibrate this protocol again in a new "
            "--study")


def calibration_lender(study: optuna.Study) -> str | None:
    """The study whose calibration ``study`` borrowed (``--calibrated-by``, :func:`borrow_calibration`), or None."""
    return ((study.user_attrs.get("hlnas_calibration") or {}).get("borrowed_from") or {}).get("study")


def calibrated_recall(study: optuna.Study, space: SearchSpace) -> dict[str, tuple[str, dict]]:
    """The fresh-model recall results that the calibration ``study`` relies on (its own, or the one it borrowed with
    ``--calibrated-by``) finished at ``space``'s training seed: ``{layout: (where, result)}``, ``where`` naming the run
    (``study:key``). A trial of such a layout takes that result instead of training its recall again: the same layout,
    recall protocol (a borrowed calibration's is checked equal but for the seed) and seed give the same measurement.
    Seed 1 of the paper grid (``--set train.seed=1 --calibrated-by``) so trains only the LM half of the 19 layouts the
    calibration covered. Runs stored before such results were kept have none: their layouts train as before."""
    from hlnas.search import optuna_adapter
    from hlnas.search.storage import load_study

    source_name = calibration_lender(study)
    source = study if source_name is None else load_study(optuna_adapter.storage_of(study), source_name)
    name = source_name or study.study_name
    out = {}
    for attr, rec in source.user_attrs.items():
        if attr.startswith(RECALL_ATTR) and isinstance(rec, dict) and rec.get("seed") == space.train.seed:
            out.setdefault(rec["layout"], (f"{name}:{attr[len(RECALL_ATTR):]}", rec["result"]))
    return out


def calibrate_if_needed(study: optuna.Study, space: SearchSpace, ex, emit, options: SearchOptions, *, fresh: bool,
                        inline: bool):
    """Before a search: the stored verdict, a new one, another study's (``calibrated_by``: :func:`borrow_calibration`),
    or none (skipped, disabled, not needed: recorded as such); :data:`PAUSED` when ``time_limit`` stopped it first. An
    invalid protocol raises :class:`~hlnas.calibration.protocol.CalibrationFailed` naming what to change. ``options``:
    the search's (its storage and study name, calibration choice, time limit); ``fresh``: the study was created now;
    ``inline``: trials run in this process (a signal raises at once)."""
    storage, study_name, calibrated_by = options.storage, options.study_name, options.calibrated_by
    calibrate, skip_calibration = options.calibrate, options.skip_calibration
    if calibrated_by and needs_calibration(space):
        stored = study.user_attrs.get("hlnas_calibration") or {}
        if (stored.get("borrowed_from") or {}).get("study") != calibrated_by:
            if stored.get("status") not in (None, "skipped") or stored.get("runs"):
                raise HlnasError(f"--calibrated-by {calibrated_by}: study '{study_name}' has a calibration of its own "
                                 f"({stored.get('status')}); start a new --study to borrow one")
            stored = borrow_calibration(study, space, calibrated_by)
        emit("calibration", {**stored["verdict"], "reused": True, "borrowed_from": calibrated_by})
        return stored["verdict"]
    if (study.user_attrs.get("hlnas_calibration") or {}).get("status") == "closed":  # given up by hand: never continued
        raise calib.CalibrationFailed(closed_message(study_name, study.user_attrs["hlnas_calibration"]))
    # a resume keeps the study's own choice: one started with --skip-calibration is not calibrated unless told
    kept_skip = (not fresh and not calibrate and needs_calibration(space)
                 and (study.user_attrs.get("hlnas_calibration") or {}).get("status") == "skipped")
    if kept_skip and not skip_calibration:
        emit("calibration_kept", {"status": "skipped", "storage": storage, "study": study_name})
    if skip_calibration or kept_skip or not needs_calibration(space):
        if "hlnas_calibration" not in study.user_attrs:
            why = ("skipped" if skip_calibration else "disabled" if not space.calibration.enabled else "not needed")
            study.set_user_attr("hlnas_calibration", {"status": why})
        return None
    stored = study.user_attrs.get("hlnas_calibration") or {}
    if stored.get("status") in ("valid", "invalid"):
        emit("calibration", {**stored["verdict"], "reused": True})
        verdict = stored["verdict"]
    else:
        with StopSignals(inline) as stops:
            verdict = run_calibration(study, space, ex, emit, stops, time_limit=options.time_limit, drain=options.drain)
        if verdict is None:
            return PAUSED
    if not verdict["valid"]:
        raise calib.CalibrationFailed(calibration_failed_message(space, verdict, storage, study_name))
    return verdict


def run_calibration(study: optuna.Study, space: SearchSpace, ex, emit, stops: StopSignals,
                    time_limit: float | None = None, drain: float = 0.0) -> dict | None:
    """Run the calibration runs not yet stored with the study (all of them the first time), through the
    search's executor; store each as it finishes; tell seed-0 runs of the space's layouts as trials.
    Returns the verdict (also stored as study attr ``hlnas_calibration``), or None when ``time_limit`` seconds
    passed first: no run starts after that, and the runs in flight pause at their next validation check, their
    recall models kept in the study's folder of paused runs (:func:`hlnas.search.records.paused_root`), so the next
    call continues them from there (on the same machine; elsewhere they start again, with the same result).
    ``drain``: the runs in flight at ``time_limit`` go on for up to this many seconds more before pausing, so those
    that finish in time are stored (the last call on a machine that goes back, which takes paused runs with it)."""
    return _Calibration(study, space, ex, emit, stops, time_limit, drain).run()


class _Calibration:
    def __init__(self, study, space: SearchSpace, ex, emit, stops: StopSignals, time_limit, drain: float = 0.0):
        self.study, self.space, self.emit = study, space, emit
        stored = dict(study.user_attrs.get("hlnas_calibration") or {})
        self.runs: dict = dict(stored.get("runs") or {})
        self.plan = calib.plan(space)
        self.todo = [r for r in self.plan if r.key not in self.runs]
        self.recall_only = space.recall_source() == "mqar_acc"  # a fresh-model recall does not need the LM trained
        self.number_of = {r.key: -(i + 1) for i, r in enumerate(self.plan)}  # negative: never a trial's number
        # no run starts after start_by; the runs in flight pause at their first check after pause_by
        self.start_by = None if time_limit is None else time.time() + time_limit
        self.pause_by = None if time_limit is None else self.start_by + drain
        # where paused runs keep their recall models: made when a time limit may pause them, else only read
        self.root = paused_root(study, create=time_limit is not None)
        self.dispatch = Dispatch(ex, stops)
        self.paused = 0

    def state_dir(self, run) -> str | None:
        return None if self.root is None else os.path.join(self.root, "calibration", run.key.replace(":", "_"))

    def save(self, status: str = "running", result: dict | None = None) -> None:
        self.study.set_user_attr("hlnas_calibration", {"status": status, "runs": self.runs,
                                                       **({"verdict": result} if result else {})})

    def in_time(self) -> bool:
        return self.start_by is None or time.time() < self.start_by

    def run(self) -> dict | None:
        emit, plan, dispatch = self.emit, self.plan, self.dispatch
        if self.todo:
            emit("calibration_started", {"n": len(self.todo), "total": len(plan), "reused": len(plan) - len(self.todo)})
        # the controls first (a calibration spread over several GPU calls learns soonest whether its protocol can pass
        # at all), then the pure models: where the protocol separates they train to the step budget, the longest runs,
        # so the last runs before the search (which waits for the verdict) are short and the workers finish together.
        # Within a role, longest expected first (hlnas.search.order: the costlier mixer's runs before the cheaper one's,
        # so one worker is not left with both slow pure models while the other finishes early and waits), or in the
        # space's listed mixer order (calibration.order: listed)
        queue = sorted(self.todo, key=self.start_key)
        # a control that failed decides the verdict: stop starting runs then (the ones in flight finish and are stored)
        hopeless = calib.hopeless(self.space, self.runs)
        while (queue and not hopeless) or dispatch.pending:
            dispatch.stops.check()
            if not self.in_time() and not dispatch.pending:
                break  # out of time: the runs not started stay for the next call
            while queue and dispatch.free() and self.in_time() and not hopeless:
                self.submit(queue.pop(0))
            for run, result in dispatch.finished():
                self.record(run, result)
            if not hopeless and (hopeless := calib.hopeless(self.space, self.runs)):
                emit("calibration_hopeless", {"reason": hopeless, "skipped": len(queue),
                                              "running": len(dispatch.pending)})
        if len(self.runs) < len(plan) and not hopeless:  # stopped by the time limit
            emit("calibration_paused", {"done": len(self.runs), "total": len(plan), "paused": self.paused})
            return None
        result = calib.verdict(self.space, self.runs, stopped=hopeless if len(self.runs) < len(plan) else None)
        self.save("valid" if result["valid"] else "invalid", result)
        emit("calibration", result)
        return result

    def start_key(self, run) -> tuple:
        """Where ``run`` starts in the queue (calibration.order, calibration.mixer_order): controls first, then by
        role and expected length or listed mixer, or (pairs) mixer by mixer its pure model and hybrid seed by seed,
        then its ladder: each mixer's checks are decided before the next mixer starts."""
        cfg = self.space.calibration
        first = [*cfg.mixer_order, *(m for m in self.space.mixers if m not in cfg.mixer_order)]
        mixer = first.index(run.mixer) if run.mixer in first else -1
        if run.role == "control":
            return (0,)
        if cfg.order == "pairs":  # a mixer's pure/hybrid pairs seed by seed, then its ladder, then the next mixer
            return (1, mixer, 0, run.seed, run.role != "pure") if run.role in ("pure", "hybrid") else (1, mixer, 1, run.seed)
        rank = 1 if run.role == "pure" else 2
        return (rank, expected_length(self.space, run.layout)) if cfg.order == "longest" else (rank, run.seed, mixer)

    def spec(self, run):
        return dataclasses.replace(layout_spec(self.space, self.number_of[run.key], run.layout, seed=run.seed,
                                               recall_only=self.recall_only and run.params is None),
                                   state_dir=self.state_dir(run), pause_by=self.pause_by)

    def submit(self, run) -> None:
        def announce():
            self.emit("calibration_run_started", {"key": run.key, "layout": run.layout, "seed": run.seed})

        self.dispatch.submit(self.spec(run), run, announce)

    def record(self, run, result: TrialResult) -> None:
        if result.status == "paused":  # its recall model is kept; the next call continues it
            self.paused += 1
            self.emit("calibration_run_paused", {"key": run.key, "steps": result.metrics.get("mqar_steps_done")})
            return
        summary = calib.run_summary(run, result.status, result.metrics)
        if run.params is not None and result.status in ("ok", "failed", "infeasible"):
            summary["trial"] = _tell_calibration_trial(self.study, self.space, run, result)
        given = finished_result(result.metrics) if result.ok else None
        if given is not None:  # a search of this protocol at this seed takes it (calibrated_recall), not trains it again
            self.study.set_user_attr(RECALL_ATTR + run.key, {"layout": run.layout, "seed": run.seed, "result": given})
        self.runs[run.key] = summary
        self.save()
        if self.state_dir(run) is not None:  # stored: its paused state (if any) is of no more use
            shutil.rmtree(self.state_dir(run), ignore_errors=True)
        self.emit("calibration_run", summary)


def _tell_calibration_trial(study: optuna.Study, space: SearchSpace, run, result: TrialResult) -> int:
    """Store a seed-0 calibration run of one of the space's layouts as the study's trial of that layout
    (added whole, not asked: a WAITING trial queued by the grid or a resume must not take its place)."""
    from hlnas.model.cost import layout_metrics  # torch, when a run is told: the driver starts without it

    cost = layout_metrics(run.layout, space.model, space.kv_context, run.params.get("placement"))
    attrs = {**cost, **result.metrics, "wall_s": round(result.wall_s, 2), "calibration": run.key}
    values = objective_values([o.metric for o in space.objectives], result.metrics) if result.ok else None
    if values is None and result.ok:
        attrs.update(status="failed", error_kind="other",
                     error=f"objective metrics missing or not finite: {[o.metric for o in space.objectives]}")
    dims = space.params()
    study.add_trial(optuna.trial.create_trial(
        state=TrialState.COMPLETE if values is not None else TrialState.FAIL, values=values, params=run.params,
        distributions={k: optuna.distributions.CategoricalDistribution(dims[k]) for k in run.params},
        user_attrs=attrs, constraints=constraint_values(space, cost) or None))
    return max(t.number for t in study.get_trials(deepcopy=False) if t.user_attrs.get("calibration") == run.key)


def calibration_failed_message(space: SearchSpace, result: dict, storage: str, name: str) -> str:
    lines = [f"the recall protocol of space '{space.name}' failed its controls, so its recall numbers would not "
             "measure recall:"]
    lines += [f"  - {m}" for m in result["failures"]]
    lines.append(f"Change: {calib.advice(space, result)}.")
    lines.append(f"The calibration is stored in study '{name}' ({storage}); no search trial was trained beyond its "
                 "controls. Start a new --study with the changed settings, or pass --skip-calibration to search anyway.")
    return "\n".join(lines)
