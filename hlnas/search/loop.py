"""The search loop: the proposal policy shared by ``hlnas search`` (:func:`hlnas.search.study.run_search`) and the
sampler benchmark (``hlnas bench-samplers``, :func:`hlnas.tabular.run_sampler`), so the benchmark measures the
search's own rules.

:func:`search_loop` asks a trial from the study's sampler, turns its parameters into a layout, and:

* a layout already trained is told that trial's values (``reused_from``), one that failed or broke a constraint
  is told FAIL again, one still training waits for it; none of these is trained again nor counts;
* a layout that breaks a constraint is told FAIL (``infeasible``, ``error_kind: constraint``) without training;
* anything else is submitted to an executor (:class:`hlnas.search.executors.Executor`) and told its result.

After :data:`REPEATS_BEFORE_FALLBACK` repeats in a row an untried candidate, picked at random, is enqueued (GP and
TPE on small categorical spaces keep proposing known layouts); after :data:`MAX_REPEATS` in a row the loop gives
up. It ends when the target number of layouts is trained, the space is exhausted, the time limit passed, or an
extra ``stop`` condition holds. Ctrl-C/SIGTERM stop it between storage writes, leaving nothing RUNNING: the
trials under way are failed and re-queued (within :data:`MAX_REQUEUES`), so a resume trains them again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Sequence

import optuna
from optuna.trial import TrialState

from hlnas.layout import Layout
from hlnas.search import optuna_adapter
from hlnas.rungs import RUNG_ATTR, RungScheduler
from hlnas.space import CONSTRAINTS, SearchSpace
from hlnas.search.trial import TrialResult, TrialSpec, layout_metrics

__all__ = ["search_loop", "paused_root", "trial_spec", "objective_values", "constraint_values", "tell_result", "recover", "rung_kept",
           "stop_record", "requeue", "StopSignals", "front_rows", "countable", "REPEATS_BEFORE_FALLBACK",
           "MAX_REPEATS", "MAX_REQUEUES"]  # fmt: skip

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
_RETRY = ("interrupted", "worker_died", "duplicate_failed", None)


def layout_spec(space: SearchSpace, number: int, layout: str, *, placement: str | None = None, seed: int | None = None,
                out_root: str | None = None, recall_only: bool = False) -> TrialSpec:
    """What a worker needs to train and score ``layout`` at the space's scale (``seed``: the training seed, when not
    the space's own: calibration's extra seeds). The one place a space becomes a trial's configs."""
    from hlnas.recipe import RunConfig

    train = space.train if seed is None else dataclasses.replace(space.train, seed=seed)
    recipe = RunConfig(layout=Layout.parse(layout), model=space.model, train=train, data=space.data, score=space.score,
                       preset=space.preset)
    return TrialSpec(
        number=number, recipe=recipe, kv_context=space.kv_context, placement=placement, out_dir=None if out_root is None else os.path.join(out_root, layout), recall_only=recall_only,
    )


def trial_spec(space: SearchSpace, number: int, params: dict, out_root: str | None = None) -> TrialSpec:
    """The spec of the layout of the space point ``params``."""
    return layout_spec(space, number, str(space.layout(params)), placement=params.get("placement"), out_root=out_root)


def countable(space: SearchSpace) -> int | None:
    """How many distinct layouts the space has, when small enough to enumerate (else None)."""
    n = len(space.grid())
    return n if n <= COUNTABLE else None


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
    if "mqar" in result.metrics and "hlnas_checks" not in trial.user_attrs:  # the recall run's checks (hlnas.rungs.checks)
        from hlnas.rungs import checks

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


def _ask(study: optuna.Study, dists: dict, requeued: list) -> optuna.trial.Trial:
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


class StopSignals:
    """Ctrl-C and SIGTERM while a driver holds a study (``with StopSignals(inline) as stops:``, main thread only).

    They only set a flag, checked between storage writes (:meth:`check`): a KeyboardInterrupt raised in the
    middle of a write can leave SQLite locked, and then the interrupted trials could not be re-queued. While
    an inline trial runs in this process (:meth:`submitting`; no storage writes then) they raise at once, so
    a stop during scoring does not wait for it to finish (the trainer installs its own checkpointing handler).
    """

    def __init__(self, inline: bool):
        self.inline = inline
        self.got: list[int] = []
        self._raise = False
        self._old: dict = {}

    def install(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def restore(self) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        self._old = {}

    def __enter__(self) -> "StopSignals":
        return self.install()

    def __exit__(self, *exc) -> None:
        self.restore()

    def _handle(self, signum, frame) -> None:
        self.got.append(signum)
        if self._raise:
            raise KeyboardInterrupt

    def check(self) -> None:
        """Raise KeyboardInterrupt if a stop signal came since the driver started."""
        if self.got:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def submitting(self):
        """Around ``executor.submit``: a signal since the last check stops before the trial starts, and one
        during an inline trial raises at once."""
        self._raise = self.inline
        try:
            self.check()
            yield
        finally:
            self._raise = False


def front_rows(study: optuna.Study) -> list[dict]:
    """The Pareto front (feasible COMPLETE trials), one dict per trial, sorted by KV-cache bytes."""
    objs = study.user_attrs["hlnas_objectives"]
    rows = []
    for t in study.best_trials:
        a = t.user_attrs
        if "reused_from" in a:  # a copy of a trained trial's result: list the layout once
            continue
        rows.append({"number": t.number, "layout": a.get("layout"), "ratio": a.get("ratio"),
                     **{o["name"]: v for o, v in zip(objs, t.values)},
                     "recall": a.get("recall"), "recall_raw": a.get("recall_raw"), "recall_baseline": a.get("recall_baseline"),
                     "recall_baseline_name": a.get("recall_baseline_name"),
                     "kv_cache_bytes": a.get("kv_cache_bytes"), "val_loss": a.get("val_loss"),
                     "params": a.get("params")})
    rows.sort(key=lambda r: (r["kv_cache_bytes"] or 0, -(r["recall"] or 0)))
    return rows


def _failed_by_layout(study: optuna.Study) -> dict:
    """layout -> its FAIL trial, for failures not worth retrying (the layout itself failed or is infeasible)."""
    out = {}
    for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
        a = t.user_attrs
        if "layout" in a and "reused_from" not in a and a.get("error_kind") not in _RETRY:
            out.setdefault(a["layout"], t)
    return out


def _completed_by_layout(study: optuna.Study) -> dict:
    """layout -> its trained COMPLETE trial (reused copies excluded): what counts towards the target."""
    out = {}
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if "layout" in t.user_attrs and "reused_from" not in t.user_attrs:
            out.setdefault(t.user_attrs["layout"], t)
    return out


def _reuse(study, trial, prev, emit) -> None:
    for k, v in prev.user_attrs.items():
        if k not in ("requeued_from",):
            trial.set_user_attr(k, v)
    trial.set_user_attr("reused_from", prev.number)
    study.tell(trial, prev.values)
    emit("reused", {"number": trial.number, "layout": prev.user_attrs.get("layout"), "from": prev.number})


def _repeat_failure(study, trial, prev, emit) -> None:
    for k in ("status", "error_kind", "error"):
        if k in prev.user_attrs:
            trial.set_user_attr(k, prev.user_attrs[k])
    trial.set_user_attr("reused_from", prev.number)
    study.tell(trial, state=TrialState.FAIL)
    # "from": a repeat of a known failure, not a newly found infeasible layout
    emit("infeasible", {"number": trial.number, "layout": prev.user_attrs.get("layout"), "from": prev.number,
                        "error": f"the same layout failed in trial {prev.number} ({prev.user_attrs.get('error_kind')}); not retried"})


def _settle_waiting(study, waiting, done_by_layout, emit, finished: str | None = None) -> list:
    """Duplicates waiting on a layout: reuse its result once it completed, else fail them (resume retries)."""
    keep = []
    for trial, layout in waiting:
        if layout in done_by_layout:
            _reuse(study, trial, done_by_layout[layout], emit)
        elif finished is None or layout == finished:
            trial.set_user_attr("status", "failed")
            trial.set_user_attr("error_kind", "duplicate_failed")
            trial.set_user_attr("error", "the same layout failed in a concurrent trial")
            study.tell(trial, state=TrialState.FAIL)
        else:
            keep.append((trial, layout))
    return keep


_COUNT = object()  # search_loop(unique=...) default: count the space's layouts when it is small


def _repeat_stopped(study, trial, prev, emit) -> None:
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
    another's. Default ``OUT_ROOT/rungs`` or ``hlnas-rungs/``. None when not stored yet and not ``create``."""
    import uuid

    root = study.user_attrs.get("hlnas_rung_root")
    if root is None and create:
        base = given or (os.path.join(out_root, "rungs") if out_root else "hlnas-rungs")
        root = os.path.abspath(os.path.join(base, f"{study.study_name}-{uuid.uuid4().hex[:8]}"))
        study.set_user_attr("hlnas_rung_root", root)
    return root


def _rung_scheduler(study: optuna.Study, space: SearchSpace, metrics_names, out_root, rung_root) -> RungScheduler:
    """The study's rung scheduler, its bookkeeping read back from the trials (paused models in :func:`paused_root`)."""
    root = paused_root(study, out_root=out_root, given=rung_root)
    sched = RungScheduler(space.rungs, space.score.mqar.steps, metrics_names,
                          [d.name.lower() for d in study.directions], root)
    # FAIL trials left the rungs; RUNNING (paused or training to a rung), PRUNED (stopped) and COMPLETE stay
    sched.load([t for t in study.get_trials(deepcopy=False) if t.state != TrialState.FAIL])
    return sched


def _rung_result(study, sched: RungScheduler, trial, layout: str, result: TrialResult, emit) -> bool:
    """Book a rung trial's result. True: the trial stays open (paused at its rung, or to run that rung again after
    its worker died); False: the search loop tells it as usual (complete at the top rung, or failed)."""
    from hlnas.rungs import checks

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


def search_loop(study: optuna.Study, space: SearchSpace, executor, *, n_trials: int, seed: int = 0,
                objectives: Sequence[str] | None = None, out_root: str | None = None,
                on_event: Callable[[str, dict], None] | None = None, time_limit: float | None = None,
                retry_failed: bool = False, enqueue_grid: bool = False, interruptible: bool = False,
                unique=_COUNT, stop: Callable[[], bool] | None = None, rung_root: str | None = None) -> None:
    """Ask, dedupe, submit and tell on ``study`` (its sampler already set) until ``n_trials`` distinct layouts of
    ``space`` are trained and COMPLETE; see the module docstring for the rules. Does not shut ``executor`` down.

    ``objectives``: the metric names read as the objective values (default: the space's objectives' metrics).
    ``enqueue_grid``: enqueue every candidate first (sampler ``grid``) unless the study already holds search
    trials. ``interruptible``: ``executor.submit`` runs the trial in this process (inline), so a signal raises at
    once instead of waiting for the next storage write. ``unique``: how many distinct layouts exist (None: too
    many to count; default :func:`countable`). ``stop``: an extra end condition, checked with the target.
    ``retry_failed``: re-queue the layouts that failed (infeasible ones stay out), raising the target if needed.
    Re-queued trials (a resume's, a lost worker's) are asked before anything else and always run before the target
    is judged met, raising it when they would pass it (event ``target_raised`` with ``requeued``).
    ``on_event(kind, data)``: trained (the distinct layouts stored before the loop starts), started, finished,
    reused, infeasible, front, requeued, retry, target_raised, time_limit, and with rungs: rung (a trial paused at
    a rung), promoted, stopped.

    A space with ``rungs`` is searched by the rung scheduler (:mod:`hlnas.rungs`): new trials train their recall
    model to the first rung and pause, a free worker takes a promotion before a new trial, and the target counts
    layouts decided (COMPLETE at the top rung, or stopped at a lower one). ``rung_root``: where the paused recall
    models are kept (default ``OUT_ROOT/rungs`` or ``hlnas-rungs/``, in a folder of the study's own, stored as study
    attr ``hlnas_rung_root``)."""
    emit = on_event or (lambda kind, data: None)
    metrics_names = list(objectives) if objectives is not None else [o.metric for o in space.objectives]
    unique = countable(space) if unique is _COUNT else unique
    stop = stop or (lambda: False)
    ex = executor
    if enqueue_grid and not any("calibration" not in t.user_attrs for t in study.get_trials(deepcopy=False)):
        for params in space.grid():
            study.enqueue_trial(params)
    t_start = time.monotonic()
    pending: dict[int, tuple[optuna.trial.Trial, str]] = {}  # trial number -> (trial, layout) being trained
    waiting: list[tuple[optuna.trial.Trial, str]] = []  # duplicates of a layout still training
    done_by_layout = _completed_by_layout(study)
    dead = _failed_by_layout(study)  # layouts that failed or broke a constraint: not trained again
    if retry_failed:
        retried = 0
        for layout, t in list(dead.items()):
            if t.user_attrs.get("error_kind") != "constraint":
                del dead[layout]
                requeue(study, t.params, t.number)
                retried += 1
                emit("retry", {"number": t.number, "layout": layout, "error_kind": t.user_attrs.get("error_kind")})
        if retried and len(done_by_layout) + retried > n_trials:  # retry them even where the target is already met
            emit("target_raised", {"from": n_trials, "to": len(done_by_layout) + retried, "retried": retried})
            n_trials = len(done_by_layout) + retried
            study.set_user_attr("hlnas_trials", n_trials)
    requeued = requeued_waiting(study)
    to_train = {str(space.layout(t.system_attrs["fixed_params"])) for t in requeued} - set(done_by_layout) - set(dead)
    if len(done_by_layout) + len(to_train) > n_trials:  # the target counts what was re-queued: run it, not leave it
        emit("target_raised", {"from": n_trials, "to": len(done_by_layout) + len(to_train), "requeued": len(to_train)})
        n_trials = len(done_by_layout) + len(to_train)
        study.set_user_attr("hlnas_trials", n_trials)
    sched, open_trials, stopped_by_layout = None, {}, {}  # the rung scheduler; its undecided trials; stopped layouts
    if space.rungs is not None:
        sched = _rung_scheduler(study, space, metrics_names, out_root, rung_root)
        for t in study.get_trials(deepcopy=False):
            if t.number in sched.records and t.state == TrialState.RUNNING:
                open_trials[t.number] = (optuna_adapter.trial_of(study, t), t.user_attrs.get("layout"))
            elif t.state == TrialState.PRUNED and "layout" in t.user_attrs and "reused_from" not in t.user_attrs:
                stopped_by_layout.setdefault(t.user_attrs["layout"], t)
    emit("trained", {"n": len(done_by_layout) + len(stopped_by_layout), "of": n_trials})  # already stored
    dup_streak = 0
    rng = random.Random(seed)
    last_front: tuple = ()
    dists = {k: optuna.distributions.CategoricalDistribution(v) for k, v in space.params().items()}

    def open_layouts() -> set:  # layouts training, or paused at a rung
        return {lay for _, lay in pending.values()} | {lay for _, lay in open_trials.values()}

    def exhausted() -> bool:  # every distinct layout is trained, failed/infeasible, stopped, or training
        return unique is not None and len(done_by_layout) + len(dead) + len(stopped_by_layout) + len(open_layouts()) >= unique

    def decided() -> int:  # what the target counts: COMPLETE layouts, and with rungs those stopped at a rung
        return len(done_by_layout) + len(stopped_by_layout)

    def can_start_new() -> bool:
        return requeued_left() or (decided() + len(open_layouts()) < n_trials and not exhausted() and not stop())

    def store_rung(number: int, rec: dict) -> None:
        trial = open_trials[number][0]
        trial.set_user_attr(RUNG_ATTR, rec)

    def submit_rung(number: int) -> None:
        trial, layout = open_trials[number]
        spec = trial_spec(space, trial.number, trial.params, out_root)
        spec = dataclasses.replace(spec, rung_steps=sched.steps(number), state_dir=sched.state_dir(layout))
        pending[number] = (trial, layout)
        emit("started", {"number": number, "layout": layout, "rung": sched.records[number]["next"],
                         "steps": sched.steps(number) or space.score.mqar.steps})
        with stops.submitting():
            ex.submit(spec)

    def stop_paused() -> None:  # nothing can be promoted any more: the paused trials are stopped, with partial results
        nonlocal waiting
        for number in sched.paused():
            trial, layout = open_trials.pop(number)
            rec = sched.stop(number)
            trial.set_user_attr(RUNG_ATTR, rec)
            trial.set_user_attr("status", "stopped")
            trial.set_user_attr("stopped_at_steps", rec["ladder"][rec["at"]])
            study.tell(trial, state=TrialState.PRUNED)
            stopped_by_layout[layout] = optuna_adapter.frozen_of(study, trial)
            emit("stopped", {"number": number, "layout": layout, "rung": rec["at"], "steps": rec["ladder"][rec["at"]]})
        keep = []
        for trial, layout in waiting:  # duplicates of a stopped layout: stopped too
            if layout in stopped_by_layout:
                _repeat_stopped(study, trial, stopped_by_layout[layout], emit)
            else:
                keep.append((trial, layout))
        waiting = keep

    def out_of_time() -> bool:
        return time_limit is not None and time.monotonic() - t_start >= time_limit

    def requeued_left() -> bool:  # read again only while some were waiting: a resume's, or a lost worker's
        nonlocal requeued
        if requeued:
            requeued = requeued_waiting(study)
        return bool(requeued)

    stops = StopSignals(interruptible).install()
    try:
        while True:
            stops.check()
            trained = decided()
            if out_of_time() and not pending:  # paused rung trials stay paused: a resume continues them
                emit("time_limit", {"seconds": time_limit, "trained": trained})
                waiting = _settle_waiting(study, waiting, done_by_layout, emit)
                break
            if sched is not None and not pending and open_trials and not can_start_new() \
                    and sched.next_promotion(drain=True) is None and not sched.running():
                stop_paused()  # draining, and nothing left to promote: the rest stop where they are
                trained = decided()
            if dup_streak >= MAX_REPEATS or (not requeued_left() and not open_trials
                                             and (trained >= n_trials or (exhausted() and not pending)
                                                  or (stop() and not pending))):
                waiting = _settle_waiting(study, waiting, done_by_layout, emit)
                break
            # rung scheduler: runs to resume, then promotions, before any new trial (asynchronous successive halving)
            while sched is not None and len(pending) < ex.capacity and not out_of_time():
                stops.check()
                number = next((n for n in sched.running() if n not in pending and n in open_trials), None)
                if number is None:
                    number = sched.next_promotion(drain=not can_start_new())
                    if number is None:
                        break
                    store_rung(number, sched.promote(number))
                    emit("promoted", {"number": number, "layout": open_trials[number][1], "to": sched.records[number]["next"]})
                submit_rung(number)
            # fill free workers
            while (len(pending) < ex.capacity and dup_streak < MAX_REPEATS and not out_of_time()
                   and (can_start_new() if sched is not None else
                        (requeued_left() or (trained + len(pending) < n_trials and not exhausted() and not stop())))):
                stops.check()
                if dup_streak and dup_streak % REPEATS_BEFORE_FALLBACK == 0 and unique is not None:
                    # the sampler keeps proposing layouts already seen (GP/TPE on small categorical spaces do):
                    # queue an untried candidate so the search keeps covering the space
                    seen = set(done_by_layout) | set(dead) | set(stopped_by_layout) | open_layouts()
                    fresh = [p for p in space.grid() if str(space.layout(p)) not in seen]
                    if fresh:
                        study.enqueue_trial(fresh[rng.randrange(len(fresh))])
                trial = _ask(study, dists, requeued)
                spec = trial_spec(space, trial.number, trial.params, out_root)
                cost = layout_metrics(spec.layout, spec.recipe.model, spec.kv_context, spec.placement)
                cons = constraint_values(space, cost)
                for k, v in cons.items():
                    trial.set_constraint(k, v)
                for k, v in cost.items():
                    trial.set_user_attr(k, v)
                if spec.layout in done_by_layout:  # never train the same layout twice in one study
                    _reuse(study, trial, done_by_layout[spec.layout], emit)
                    dup_streak += 1
                    continue
                if spec.layout in dead:  # a failure is deterministic enough (NaN, OOM, constraint): don't retry it
                    _repeat_failure(study, trial, dead[spec.layout], emit)
                    dup_streak += 1
                    continue
                if spec.layout in stopped_by_layout:  # stopped at a rung: not trained again
                    _repeat_stopped(study, trial, stopped_by_layout[spec.layout], emit)
                    dup_streak += 1
                    continue
                if spec.layout in open_layouts():
                    waiting.append((trial, spec.layout))
                    dup_streak += 1
                    continue
                dup_streak = 0
                if any(v > 0 for v in cons.values()):
                    bad = ", ".join(f"{k} (by {v:,.0f})" for k, v in cons.items() if v > 0)
                    trial.set_user_attr("status", "infeasible")
                    trial.set_user_attr("error_kind", "constraint")
                    trial.set_user_attr("error", f"violates {bad}; not trained")
                    study.tell(trial, state=TrialState.FAIL)
                    dead[spec.layout] = optuna_adapter.frozen_of(study, trial)
                    emit("infeasible", {"number": trial.number, "layout": spec.layout, "error": bad})
                    continue
                if sched is not None:  # a new trial starts at the first rung
                    open_trials[trial.number] = (trial, spec.layout)
                    store_rung(trial.number, sched.start(trial.number))
                    submit_rung(trial.number)
                    continue
                pending[trial.number] = (trial, spec.layout)
                emit("started", {"number": trial.number, "layout": spec.layout})  # before: inline submit() runs the trial
                with stops.submitting():  # a signal now: this trial is pending, so it is re-queued
                    ex.submit(spec)
            for result in ex.wait(timeout=1.0):
                if result.status == "interrupted":  # Ctrl-C/SIGTERM caught by the trainer (inline): stop the search
                    raise KeyboardInterrupt
                trial, layout = pending.pop(result.number)
                if sched is not None and result.number in open_trials:
                    if _rung_result(study, sched, trial, layout, result, emit):
                        continue  # paused at a rung (or its worker died after a rung: run again from there)
                    del open_trials[result.number]
                if result.error_kind == "worker_died":  # the layout may be fine: re-queued, within the bound
                    kind, error = stop_record(study, trial.params, result.error or "its worker died", "worker_died")
                    result = dataclasses.replace(result, error_kind=kind, error=error,
                                                 metrics={**result.metrics, "error_kind": kind, "error": error})
                tell_result(study, metrics_names, trial, result)
                frozen = optuna_adapter.frozen_of(study, trial)
                if frozen.state == TrialState.COMPLETE:
                    done_by_layout[layout] = frozen
                elif frozen.user_attrs.get("error_kind") == "worker_died":
                    requeue(study, trial.params, trial.number)
                    requeued = requeued_waiting(study)
                    emit("requeued", {"n": 1, "layout": layout, "why": "its worker died"})
                elif frozen.user_attrs.get("error_kind") not in _RETRY:
                    dead[layout] = frozen
                emit("finished", {"number": result.number, "layout": layout, "status": result.status,
                                  "metrics": result.metrics, "error": result.error})
                front_now = tuple(sorted(t.number for t in study.best_trials))
                if front_now != last_front:  # the live front, whenever it changes
                    last_front = front_now
                    emit("front", {"rows": front_rows(study)})
                waiting = _settle_waiting(study, waiting, done_by_layout, emit, finished=layout)
    except KeyboardInterrupt:
        for number in list(pending):  # trials promoted past a rung stay RUNNING: a resume trains them from there
            if sched is not None and number in open_trials and sched.records[number]["at"] >= 0:
                del pending[number]
        for trial, _ in list(pending.values()) + waiting:  # leave nothing RUNNING; resume re-queues these
            kind, error = stop_record(study, trial.params, "the search was interrupted while this trial ran")
            trial.set_user_attr("error_kind", kind)
            trial.set_user_attr("error", error)
            study.tell(trial, state=TrialState.FAIL)
            if kind != "requeue_limit":
                requeue(study, trial.params, trial.number)
        recover(study)  # a trial asked but not yet submitted when the signal came is RUNNING too
        raise
    finally:
        stops.restore()
