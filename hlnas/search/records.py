"""How the search records trials in the study: the spec a trial's parameters make, its objective and constraint values,
telling a result, re-queueing what a stop or a lost worker left unfinished (within :data:`MAX_REQUEUES`), the
repeats (a layout reused, failed again, stopped at a rung, or waiting for its twin), and the front.
Used by the loop (:mod:`hlnas.search.loop`), the calibration (:mod:`hlnas.search.calibration`) and the study
(:mod:`hlnas.search.study`).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence

import optuna
from optuna.trial import TrialState

from hlnas.model.layout import Layout
from hlnas.search.rungs import RUNG_ATTR, RungScheduler
from hlnas.search import optuna_adapter
from hlnas.search.storage import study_slug
from hlnas.search.trial import TrialResult, TrialSpec
from hlnas.space import CONSTRAINTS, SearchSpace

__all__ = ["layout_spec", "trial_spec", "objective_values", "constraint_values", "tell_result", "stop_record",
           "requeue", "requeued_waiting", "tell_paused", "rung_kept", "recover", "front_rows", "paused_root", "REPEATS_BEFORE_FALLBACK",
           "MAX_REPEATS", "MAX_REQUEUES", "COUNTABLE", "RETRY_KINDS", "SHARED_ATTR", "ask_trial", "failed_by_layout", "completed_by_layout",
           "reuse", "repeat_failure", "repeat_stopped", "settle_waiting", "rung_scheduler", "rung_result"]  # fmt: skip

#: repeat proposals in a row (known layouts) after which an untried candidate is enqueued
REPEATS_BEFORE_FALLBACK = 10
#: repeat proposals in a row after which the loop gives up (a sampler that only repeats, on an uncountable space)
MAX_REPEATS = 200
#: how many times a layout is re-queued after the search or its worker stopped under it (a layout that kills
#: its worker or the driver would otherwise be retried on every resume); then it is recorded as failed
MAX_REQUEUES = 2
#: spaces up to this many candidates are enumerated: the loop knows when they are exhausted and can fall back
COUNTABLE = 512
# failures where the layout itself may be fine: the driver stopped (interrupted) or the worker died
_REQUEUED_KINDS = ("interrupted", "worker_died")
# failures worth another attempt: the process stopped under the trial, or a concurrent duplicate failed
RETRY_KINDS = ("interrupted", "worker_died", "duplicate_failed", "paused", None)
#: study attr: the trials that failed for a cause every trial shared (hlnas.search.shared); not failures of their layouts
SHARED_ATTR = "hlnas_shared_failure"


def layout_spec(space: SearchSpace, number: int, layout: str, *, placement: str | None = None, seed: int | None = None,
                out_root: str | None = None, recall_only: bool = False) -> TrialSpec:
    """What a worker needs to train and score ``layout`` at the space's scale (``seed``: the training seed, when not
    the space's own: calibration's extra seeds). The one place a space becomes a trial's configs."""
    from hlnas.pipeline.recipe import RunConfig

    train = space.train if seed is None else dataclasses.replace(space.train, seed=seed)
    recipe = RunConfig(layout=Layout.parse(layout), model=space.model, train=train, data=space.data, score=space.score,
                       preset=space.preset)
    return TrialSpec(
        number=number, recipe=recipe, kv_context=space.kv_context, placement=placement, out_dir=None if out_root is None else os.path.join(out_root, layout), recall_only=recall_only,
    )


def trial_spec(space: SearchSpace, number: int, params: dict, out_root: str | None = None) -> TrialSpec:
    """The spec of the layout of the space point ``params``."""
    return layout_spec(space, number, str(space.layout(params)), placement=params.get("placement"), out_root=out_root)


def objective_values(metrics_names: Sequence[str], metrics: dict) -> list[float] | None:
    """The objective values read from a trial's metrics; None when one is missing or not finite."""
    vals = []
    for name in metrics_names:
        v = metrics.get(name)
        if isinstance(v, dict):  # e.g. "ruler": its average
            v = v.get("average")
        if v is None or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
            return None
        vals.append(float(v))
    return vals


def constraint_values(space: SearchSpace, cost: dict) -> dict[str, float]:
    """Each of the space's constraints as optuna reads it: > 0 violates, <= 0 is feasible."""
    return {k: float(cost[CONSTRAINTS[k]]) - float(limit) for k, limit in space.constraints.items()}


def tell_result(study: optuna.Study, metrics_names: Sequence[str], trial, result: TrialResult) -> None:
    """Store a finished trial's metrics and tell it: COMPLETE with its objective values, else FAIL."""
    for k, v in result.metrics.items():
        trial.set_user_attr(k, v)
    trial.set_user_attr("wall_s", round(result.wall_s, 2))
    if "mqar" in result.metrics and "hlnas_checks" not in trial.user_attrs:  # the recall run's checks (hlnas.search.rungs.checks)
        from hlnas.search.rungs import checks

        trial.set_user_attr("hlnas_checks", checks(result.metrics))
    values = objective_values(metrics_names, result.metrics) if result.ok else None
    if values is None:
        if result.ok:
            trial.set_user_attr("status", "failed")
            trial.set_user_attr("error_kind", "other")
            trial.set_user_attr("error", f"objective metrics missing or not finite: {list(metrics_names)}")
        study.tell(trial, state=TrialState.FAIL)
    else:
        study.tell(trial, values)


def tell_paused(study: optuna.Study, trial, result: TrialResult) -> None:
    """A trial paused by the search's time limit: FAIL (kind ``paused``, not a failure of its layout and not counted
    against :data:`MAX_REQUEUES`), its parameters re-queued so that a resume trains it on from its kept state."""
    steps = result.metrics.get("mqar_steps_done")
    trial.set_user_attr("status", "paused")
    trial.set_user_attr("error_kind", "paused")
    trial.set_user_attr("error", f"out of time at recall step {steps}; its recall model is kept and a resume continues it")
    study.tell(trial, state=TrialState.FAIL)
    requeue(study, trial.params, trial.number)


def stop_record(study: optuna.Study, params: dict, what: str, kind: str = "interrupted") -> tuple[str, str]:
    """``(error_kind, error)`` for a trial stopped under its layout: ``kind`` (re-queued) while the layout has been
    stopped at most :data:`MAX_REQUEUES` times before, ``requeue_limit`` (a failure of the layout) after that."""
    earlier = [t for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
               if t.params == params and t.user_attrs.get("error_kind") in _REQUEUED_KINDS]
    if len(earlier) < MAX_REQUEUES:
        return kind, f"{what}; re-queued"
    kinds = ", ".join(sorted({kind, *(t.user_attrs.get("error_kind") for t in earlier)}))
    return "requeue_limit", (f"{what}: stopped {len(earlier) + 1} times ({kinds}); re-queued {MAX_REQUEUES} times, not "
                             "again (a layout that kills its worker or the search would be retried forever). Fix the "
                             "cause, then --resume --retry-failed")


def requeue(study: optuna.Study, params: dict, number: int) -> None:
    """Enqueue ``params`` again unless already WAITING. (Not ``skip_if_exists``: it matches the failed trial
    itself, so nothing would ever be re-queued.) A trial stopped before the sampler chose its layout (no params:
    asked, then the process died) has nothing to train again, and is not re-queued."""
    if not params:
        return
    if any(t.system_attrs.get("fixed_params") == params for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,))):
        return
    study.enqueue_trial(params, user_attrs={"requeued_from": number})


def requeued_waiting(study: optuna.Study) -> list:
    """The re-queued trials (user attr ``requeued_from``) still WAITING, oldest first."""
    return [t for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)) if "requeued_from" in t.user_attrs]


def ask_trial(study: optuna.Study, dists: dict, requeued: list) -> optuna.trial.Trial:
    """``study.ask(dists)``, but a re-queued trial of ``requeued`` is taken before any other WAITING one (optuna
    pops the oldest, which may be a grid or fallback candidate enqueued before the crash)."""
    for t in requeued:
        trial = optuna_adapter.claim_waiting(study, t)
        if trial is None:
            continue  # taken by another process, or finished
        for name, dist in dists.items():  # its fixed params, as ask(fixed_distributions) would suggest them
            trial.suggest_categorical(name, dist.choices)
        return trial
    return study.ask(dists)


def rung_kept(t) -> bool:
    """A RUNNING trial the rung scheduler keeps across a stop (it reached a rung: paused there, or promoted and
    training to the next); the search loop continues it instead of failing and re-queueing it."""
    return (t.user_attrs.get(RUNG_ATTR) or {}).get("at", -1) >= 0


def recover(study: optuna.Study) -> int:
    """Fail trials a dead driver left RUNNING and re-queue their parameters (within :data:`MAX_REQUEUES`); rung
    trials that reached a rung are kept (:func:`rung_kept`)."""
    n = 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if rung_kept(t):
            continue
        kind, error = stop_record(study, t.params, "the search process stopped while this trial ran")
        optuna_adapter.fail_stored(study, t, {"error": error, "error_kind": kind})
        if kind != "requeue_limit":
            requeue(study, t.params, t.number)
        n += 1
    return n


def front_rows(study: optuna.Study) -> list[dict]:
    """The Pareto front (feasible COMPLETE trials), one dict per trial, sorted by KV-cache bytes; ``result_from``
    (``STUDY#N``) where the trial adopted another study's result (:mod:`hlnas.search.adopt`), else None."""
    objs = study.user_attrs["hlnas_objectives"]
    rows = []
    for t in study.best_trials:
        a = t.user_attrs
        if "reused_from" in a:  # a copy of a trained trial's result: list the layout once
            continue
        rows.append({"number": t.number, "layout": a.get("layout"), "ratio": a.get("ratio"),
                     **{o["name"]: v for o, v in zip(objs, t.values)},
                     "recall": a.get("recall"), "recall_raw": a.get("recall_raw"), "recall_baseline": a.get("recall_baseline"),
                     **({"recall_auc": a["recall_auc"]} if "recall_auc" in {o["metric"] for o in objs} else {}),
                     "recall_baseline_name": a.get("recall_baseline_name"),
                     "kv_cache_bytes": a.get("kv_cache_bytes"), "val_loss": a.get("val_loss"),
                     "params": a.get("params"), "result_from": a.get("result_from"),
                     "kernel_fallbacks": (a.get("mqar") or {}).get("kernel_fallbacks") or []})
    rows.sort(key=lambda r: (r["kv_cache_bytes"] or 0, -(r["recall"] or 0)))
    return rows


def failed_by_layout(study: optuna.Study) -> dict:
    """layout -> its FAIL trial, for failures not worth retrying (the layout itself failed or is infeasible; a
    failure every trial shared, :data:`SHARED_ATTR`, is not the layout's)."""
    out = {}
    shared = set((study.user_attrs.get(SHARED_ATTR) or {}).get("trials", ()))
    for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
        a = t.user_attrs
        if "layout" in a and "reused_from" not in a and a.get("error_kind") not in RETRY_KINDS and t.number not in shared:
            out.setdefault(a["layout"], t)
    return out


def completed_by_layout(study: optuna.Study) -> dict:
    """layout -> its trained COMPLETE trial (reused copies excluded): what counts towards the target."""
    out = {}
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if "layout" in t.user_attrs and "reused_from" not in t.user_attrs:
            out.setdefault(t.user_attrs["layout"], t)
    return out


def reuse(study, trial, prev, emit) -> None:
    for k, v in prev.user_attrs.items():
        if k not in ("requeued_from",):
            trial.set_user_attr(k, v)
    trial.set_user_attr("reused_from", prev.number)
    study.tell(trial, prev.values)
    emit("reused", {"number": trial.number, "layout": prev.user_attrs.get("layout"), "from": prev.number})


def repeat_failure(study, trial, prev, emit) -> None:
    for k in ("status", "error_kind", "error"):
        if k in prev.user_attrs:
            trial.set_user_attr(k, prev.user_attrs[k])
    trial.set_user_attr("reused_from", prev.number)
    study.tell(trial, state=TrialState.FAIL)
    # "from": a repeat of a known failure, not a newly found infeasible layout
    emit("infeasible", {"number": trial.number, "layout": prev.user_attrs.get("layout"), "from": prev.number,
                        "error": f"the same layout failed in trial {prev.number} ({prev.user_attrs.get('error_kind')}); not retried"})


def settle_waiting(study, waiting, done_by_layout, emit, finished: str | None = None) -> list:
    """Duplicates waiting on a layout: reuse its result once it completed, else fail them (resume retries)."""
    keep = []
    for trial, layout in waiting:
        if layout in done_by_layout:
            reuse(study, trial, done_by_layout[layout], emit)
        elif finished is None or layout == finished:
            trial.set_user_attr("status", "failed")
            trial.set_user_attr("error_kind", "duplicate_failed")
            trial.set_user_attr("error", "the same layout failed in a concurrent trial")
            study.tell(trial, state=TrialState.FAIL)
        else:
            keep.append((trial, layout))
    return keep


def repeat_stopped(study, trial, prev, emit) -> None:
    """A proposal of a layout stopped at a rung: told PRUNED again, as a repeat (not trained)."""
    for k in ("status", "stopped_at_steps"):
        if k in prev.user_attrs:
            trial.set_user_attr(k, prev.user_attrs[k])
    trial.set_user_attr("reused_from", prev.number)
    study.tell(trial, state=TrialState.PRUNED)
    emit("reused", {"number": trial.number, "layout": prev.user_attrs.get("layout"), "from": prev.number, "stopped": True})


def paused_root(study: optuna.Study, *, out_root: str | None = None, given: str | None = None,
                create: bool = True) -> str | None:
    """The study's folder of paused recall models (rung trials, calibration runs paused by a time limit): chosen
    once per study and stored (``hlnas_rung_root``), so a resume finds them and a new study never continues
    another's. Default ``OUT_ROOT/rungs`` or ``hlnas-rungs/``, in a folder named by the study's slug and id
    (:func:`~hlnas.search.storage.study_slug`; a name is never a path). None when not stored yet and not ``create``."""
    import uuid

    root = study.user_attrs.get("hlnas_rung_root")
    if root is None and create:
        base = given or (os.path.join(out_root, "rungs") if out_root else "hlnas-rungs")
        folder = f"{study_slug(study.study_name, optuna_adapter.study_id(study))}-{uuid.uuid4().hex[:8]}"
        root = os.path.abspath(os.path.join(base, folder))
        study.set_user_attr("hlnas_rung_root", root)
    return root


def rung_scheduler(study: optuna.Study, space: SearchSpace, metrics_names, out_root, rung_root) -> RungScheduler:
    """The study's rung scheduler, its bookkeeping read back from the trials (paused models in :func:`paused_root`)."""
    root = paused_root(study, out_root=out_root, given=rung_root)
    sched = RungScheduler(space.rungs, space.score.mqar.steps, metrics_names,
                          [d.name.lower() for d in study.directions], root)
    # FAIL trials left the rungs; RUNNING (paused or training to a rung), PRUNED (stopped) and COMPLETE stay
    sched.load([t for t in study.get_trials(deepcopy=False) if t.state != TrialState.FAIL])
    return sched


def rung_result(study, sched: RungScheduler, trial, layout: str, result: TrialResult, emit) -> bool:
    """Book a rung trial's result. True: the trial stays open (paused at its rung, or to run that rung again after
    its worker died); False: the search loop tells it as usual (complete at the top rung, or failed)."""
    from hlnas.search.rungs import checks

    number = result.number
    rec = sched.records[number]
    if result.error_kind == "worker_died" and rec["at"] >= 0:  # it reached a rung before: train that rung again
        tries = rec.get("retries", 0) + 1
        if tries <= MAX_REQUEUES:
            rec["retries"] = tries
            trial.set_user_attr(RUNG_ATTR, rec)
            emit("requeued", {"n": 1, "layout": layout, "why": "its worker died", "rung": rec["next"]})
            return True
    values = sched.rung_values(result.metrics) if result.ok else None
    if values is None:  # failed (or a result without the rung's values): the trial leaves the rungs
        sched.forget(number)
        if result.ok:
            result.metrics.setdefault("error", f"rung values missing or not finite: {sched.metrics}")
        return False
    rec = sched.reached(number, values)
    trial.set_user_attr(RUNG_ATTR, rec)
    trial.set_user_attr("hlnas_checks", checks(result.metrics))
    if rec["state"] == "complete":
        return False
    for k, v in result.metrics.items():  # the partial results, beside the rung record
        trial.set_user_attr(k, v)
    emit("rung", {"number": number, "layout": layout, "rung": rec["at"], "steps": rec["ladder"][rec["at"]],
                  "metrics": result.metrics})
    return True
