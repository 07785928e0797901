"""The search loop: the proposal policy shared by ``hlnas search`` (:func:`hlnas.search.study.run_search`) and the
sampler benchmark (``hlnas bench-samplers``, :func:`hlnas.analysis.tabular.run_sampler`), so the benchmark measures the
search's own rules.

:func:`search_loop` asks a trial from the study's sampler, turns its parameters into a layout, and:

* a layout already trained is told that trial's values (``reused_from``), one that failed or broke a constraint
  is told FAIL again, one still training waits for it; none of these is trained again nor counts;
* a layout that breaks a constraint is told FAIL (``infeasible``, ``error_kind: constraint``) without training;
* anything else is submitted to an executor (:class:`hlnas.search.executors.Executor`) and told its result.

After :data:`REPEATS_BEFORE_FALLBACK` repeats in a row an untried candidate, picked at random, is enqueued (GP and
TPE on small categorical spaces keep proposing known layouts); after :data:`MAX_REPEATS` in a row the loop gives
up. It ends when the target number of layouts is trained, the space is exhausted, the time limit passed, or an
extra ``stop`` condition holds; when the first trials all fail the same way it starts no more and raises
:class:`~hlnas.search.shared.SharedFailure` (:mod:`hlnas.search.shared`). Ctrl-C/SIGTERM stop it between storage
writes, leaving nothing RUNNING: the trials under way are failed and re-queued (within :data:`MAX_REQUEUES`), so a
resume trains them again.
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import optuna
from optuna.trial import TrialState

from hlnas.search.rungs import RUNG_ATTR
from hlnas.search import optuna_adapter
from hlnas.search.adopt import adopt, adoptable_results
from hlnas.search.calibration import calibrated_recall
from hlnas.search.dispatch import Dispatch, StopSignals
from hlnas.search.order import longest_first
from hlnas.search.shared import SharedCause
from hlnas.search.records import (COUNTABLE, MAX_REPEATS, REPEATS_BEFORE_FALLBACK, RETRY_KINDS, ask_trial,
                                  completed_by_layout, constraint_values, failed_by_layout, front_rows, paused_root,
                                  repeat_failure, repeat_stopped, requeue, requeued_waiting, reuse, rung_result,
                                  rung_scheduler, settle_waiting, stop_record, recover, tell_paused, tell_result,
                                  trial_spec)
from hlnas.space import SearchSpace

__all__ = ["search_loop", "LoopSettings"]

_COUNT = object()  # search_loop(unique=...) default: count the space's layouts when it is small


@dataclass(frozen=True, kw_only=True)
class LoopSettings:
    """How :func:`search_loop` runs: its target, clock and policies (each documented there)."""

    n_trials: int
    seed: int = 0
    objectives: Sequence[str] | None = None
    out_root: str | None = None
    on_event: Callable[[str, dict], None] | None = None
    time_limit: float | None = None
    retry_failed: bool = False
    enqueue_grid: bool = False
    interruptible: bool = False
    unique: object = _COUNT
    stop: Callable[[], bool] | None = None
    rung_root: str | None = None
    clock_start: float | None = None
    drain: float = 0.0
    longest_first: bool = False
    fail_fast: bool = True


def search_loop(study: optuna.Study, space: SearchSpace, executor, settings: LoopSettings) -> None:
    """Ask, dedupe, submit and tell on ``study`` (its sampler already set) until ``settings.n_trials`` distinct layouts
    of ``space`` are trained and COMPLETE; see the module docstring for the rules. Does not shut ``executor`` down.

    ``objectives``: the metric names read as the objective values (default: the space's objectives' metrics).
    ``enqueue_grid``: enqueue every candidate first (sampler ``grid``) unless the study already holds search
    trials. ``interruptible``: ``executor.submit`` runs the trial in this process (inline), so a signal raises at
    once instead of waiting for the next storage write. ``unique``: how many distinct layouts exist (None: too
    many to count; default: the space's own count, up to :data:`~hlnas.search.records.COUNTABLE`). ``stop``: an extra
    end condition, checked with the target.
    ``retry_failed``: re-queue the layouts that failed (infeasible ones stay out), raising the target if needed.
    Re-queued trials (a resume's, a lost worker's) are asked before anything else and always run before the target
    is judged met, raising it when they would pass it (event ``target_raised`` with ``requeued``).
    ``on_event(kind, data)``: trained (the distinct layouts stored before the loop starts), started, finished,
    reused, infeasible, front, requeued, retry, target_raised, time_limit, and with rungs: rung (a trial paused at
    a rung), promoted, stopped.

    A space with ``rungs`` is searched by the rung scheduler (:mod:`hlnas.search.rungs`): new trials train their recall
    model to the first rung and pause, a free worker takes a promotion before a new trial, and the target counts
    layouts decided (COMPLETE at the top rung, or stopped at a lower one). ``rung_root``: where the paused recall
    models are kept (default ``OUT_ROOT/rungs`` or ``hlnas-rungs/``, in a folder of the study's own, stored as study
    attr ``hlnas_rung_root``). ``clock_start``: the ``time.monotonic()`` the time limit counts from (default: now).

    With ``time_limit``, trials in flight when it passes pause at their next recall check instead of finishing:
    told FAIL as ``paused`` (no failure of the layout), re-queued, their recall models kept in the study's folder of
    paused runs (:func:`~hlnas.search.records.paused_root`); a resume trains them on from there. ``drain``: they go on
    for up to this many seconds past ``time_limit`` before pausing, so those that finish in time are told.

    ``longest_first``: once the target covers every untried candidate of a countable space (the search will train each
    of them whatever the sampler proposes, e.g. the default space's 11 trials over 11 candidates), each new trial is the
    untried candidate expected to train longest (:mod:`hlnas.search.order`), enqueued before it is asked: the workers
    finish together, and no repeat proposals are asked and told on the way (event ``longest_first``, once). The
    layouts trained and their results are the same; only the order differs. A grid sampler's enqueued candidates take
    that order too, those whose recall a calibration run measured (LM half only) last. ``hlnas search`` turns it on
    where trials run several at once (with one at a time the order changes no wall time); the sampler benchmark leaves
    it off, its measure being the order a sampler finds good layouts in.

    ``fail_fast``: when the first trials all fail the same way (:mod:`hlnas.search.shared`), start no more, store
    them as failures of that cause (re-queued) and raise :class:`~hlnas.search.shared.SharedFailure` once those in
    flight are told; False trains on, each failure the layout's own."""
    s = settings
    search = _Search(study, space, executor, n_trials=s.n_trials, seed=s.seed, out_root=s.out_root,
                     time_limit=s.time_limit,
                     metrics_names=list(s.objectives) if s.objectives is not None else [o.metric for o in space.objectives],
                     emit=s.on_event or (lambda kind, data: None),
                     unique=space.countable(COUNTABLE) if s.unique is _COUNT else s.unique,
                     stop=s.stop or (lambda: False), rung_root=s.rung_root, interruptible=s.interruptible,
                     longest_first=s.longest_first, fail_fast=s.fail_fast)
    search.prepare(retry_failed=s.retry_failed, enqueue_grid=s.enqueue_grid, clock_start=s.clock_start, drain=s.drain)
    search.run()


class _Search:
    """One run of :func:`search_loop`: what is trained, dead, stopped, waiting or in flight, and the rules that move a
    trial between them."""

    def __init__(self, study: optuna.Study, space: SearchSpace, executor, *, n_trials: int, seed: int, out_root, time_limit,
                 metrics_names: list, emit, unique, stop, rung_root, interruptible: bool, longest_first: bool = False,
                 fail_fast: bool = True):
        self.study, self.space, self.ex, self.n_trials, self.out_root = study, space, executor, n_trials, out_root
        self.time_limit, self.metrics_names, self.emit, self.unique, self.stop = time_limit, metrics_names, emit, unique, stop
        self.rung_root = rung_root
        self.stops = StopSignals(interruptible)
        self.dispatch = Dispatch(executor, self.stops)  # trial number -> (trial, layout) being trained
        self.pending = self.dispatch.pending
        self.waiting: list[tuple[optuna.trial.Trial, str]] = []  # duplicates of a layout still training
        self.dup_streak = 0
        self.rng = random.Random(seed)
        self.last_front: tuple = ()
        self.dists = {k: optuna.distributions.CategoricalDistribution(v) for k, v in space.params().items()}
        self.longest_first = longest_first and unique is not None
        self.covering = False  # the target covers every untried candidate: they start longest expected first
        self.shared = SharedCause() if fail_fast else None  # watches for a failure every trial shares

    def _raise_target(self, to: int, **why) -> None:
        self.emit("target_raised", {"from": self.n_trials, "to": to, **why})
        self.n_trials = to
        self.study.set_user_attr("hlnas_trials", to)

    def prepare(self, *, retry_failed: bool, enqueue_grid: bool, clock_start: float | None = None,
                drain: float = 0.0) -> None:
        """Read the study: what is trained, failed, re-queued (raising the target to run it), paused at a rung."""
        study, space, emit = self.study, self.space, self.emit
        # layouts whose recall the calibration measured at this seed already: their trials train only the LM half
        self.measured_recall = calibrated_recall(study, space) if space.rungs is None else {}
        # layouts a --results-from study measured with the same settings: told that result, not trained
        self.adopted = adoptable_results(study, self.metrics_names) if space.rungs is None else {}
        self.done_by_layout = completed_by_layout(study)  # queueing the grid below completes nothing
        if enqueue_grid and not any("calibration" not in t.user_attrs for t in study.get_trials(deepcopy=False)):
            # the calibration's seed-0 runs are trials already: queueing their layouts again only made copies of
            # them and left WAITING trials behind once the target was met (a grid once held 19 such)
            grid = [p for p in space.grid() if str(space.layout(p)) not in self.done_by_layout]
            if self.longest_first:  # several at once: the grid in the order that finishes the workers together
                grid = longest_first(space, grid, lambda p: str(space.layout(p)), measured=self.measured_recall.keys())
            for params in grid:
                study.enqueue_trial(params)
        self.t_start = time.monotonic() if clock_start is None else clock_start  # the time limit's clock
        # with a time limit, trials in flight pause at their next recall check past it, keeping their recall model in
        # the study's folder of paused runs; a resume re-runs them from there (and a resume without a limit too)
        self.pause_by = (None if self.time_limit is None
                         else time.time() + self.time_limit + drain - (time.monotonic() - self.t_start))
        self.paused_dir = None
        if space.rungs is None:  # the rung scheduler keeps its own paused models
            root = paused_root(study, out_root=self.out_root, given=self.rung_root, create=self.time_limit is not None)
            self.paused_dir = None if root is None else (lambda layout: os.path.join(root, "trials", layout))
        self.dead = failed_by_layout(study)  # layouts that failed or broke a constraint: not trained again
        if retry_failed:
            retried = 0
            for layout, t in list(self.dead.items()):
                if t.user_attrs.get("error_kind") != "constraint":
                    del self.dead[layout]
                    requeue(study, t.params, t.number)
                    retried += 1
                    emit("retry", {"number": t.number, "layout": layout, "error_kind": t.user_attrs.get("error_kind")})
            if retried and len(self.done_by_layout) + retried > self.n_trials:  # retry them even where the target is met
                self._raise_target(len(self.done_by_layout) + retried, retried=retried)
        self.requeued = requeued_waiting(study)
        to_train = ({str(space.layout(t.system_attrs["fixed_params"])) for t in self.requeued}
                    - set(self.done_by_layout) - set(self.dead))
        if len(self.done_by_layout) + len(to_train) > self.n_trials:  # the target counts what was re-queued: run it
            self._raise_target(len(self.done_by_layout) + len(to_train), requeued=len(to_train))
        # the rung scheduler; its undecided trials; stopped layouts
        self.sched, self.open_trials, self.stopped_by_layout = None, {}, {}
        if space.rungs is not None:
            self.sched = rung_scheduler(study, space, self.metrics_names, self.out_root, self.rung_root)
            for t in study.get_trials(deepcopy=False):
                if t.number in self.sched.records and t.state == TrialState.RUNNING:
                    self.open_trials[t.number] = (optuna_adapter.trial_of(study, t), t.user_attrs.get("layout"))
                elif t.state == TrialState.PRUNED and "layout" in t.user_attrs and "reused_from" not in t.user_attrs:
                    self.stopped_by_layout.setdefault(t.user_attrs["layout"], t)
        emit("trained", {"n": len(self.done_by_layout) + len(self.stopped_by_layout), "of": self.n_trials})  # stored

    def open_layouts(self) -> set:  # layouts training, or paused at a rung
        return {lay for _, lay in self.pending.values()} | {lay for _, lay in self.open_trials.values()}

    def untried(self) -> list[dict]:  # the space's candidates not trained, failed, stopped or training, in grid order
        seen = set(self.done_by_layout) | set(self.dead) | set(self.stopped_by_layout) | self.open_layouts()
        return [p for p in self.space.grid() if str(self.space.layout(p)) not in seen]

    def exhausted(self) -> bool:  # every distinct layout is trained, failed/infeasible, stopped, or training
        return self.unique is not None and (len(self.done_by_layout) + len(self.dead) + len(self.stopped_by_layout)
                                            + len(self.open_layouts()) >= self.unique)

    def decided(self) -> int:  # what the target counts: COMPLETE layouts, and with rungs those stopped at a rung
        return len(self.done_by_layout) + len(self.stopped_by_layout)

    def can_start_new(self) -> bool:
        return self.requeued_left() or (self.decided() + len(self.open_layouts()) < self.n_trials and not self.exhausted()
                                        and not self.stop())

    def out_of_time(self) -> bool:
        return self.time_limit is not None and time.monotonic() - self.t_start >= self.time_limit

    def requeued_left(self) -> bool:  # read again only while some were waiting: a resume's, or a lost worker's
        if self.requeued:
            self.requeued = requeued_waiting(self.study)
        return bool(self.requeued)

    def store_rung(self, number: int, rec: dict) -> None:
        self.open_trials[number][0].set_user_attr(RUNG_ATTR, rec)

    def submit_rung(self, number: int) -> None:
        trial, layout = self.open_trials[number]
        sched = self.sched
        spec = trial_spec(self.space, trial.number, trial.params, self.out_root)
        spec = dataclasses.replace(spec, rung_steps=sched.steps(number), state_dir=sched.state_dir(layout))
        self.dispatch.submit(spec, (trial, layout), lambda: self.emit("started", {
            "number": number, "layout": layout, "rung": sched.records[number]["next"],
            "steps": sched.steps(number) or self.space.score.mqar.steps}))

    def stop_paused(self) -> None:  # nothing can be promoted any more: the paused trials are stopped, with partial results
        study = self.study
        for number in self.sched.paused():
            trial, layout = self.open_trials.pop(number)
            rec = self.sched.stop(number)
            trial.set_user_attr(RUNG_ATTR, rec)
            trial.set_user_attr("status", "stopped")
            trial.set_user_attr("stopped_at_steps", rec["ladder"][rec["at"]])
            study.tell(trial, state=TrialState.PRUNED)
            self.stopped_by_layout[layout] = optuna_adapter.frozen_of(study, trial)
            self.emit("stopped", {"number": number, "layout": layout, "rung": rec["at"], "steps": rec["ladder"][rec["at"]]})
        keep = []
        for trial, layout in self.waiting:  # duplicates of a stopped layout: stopped too
            if layout in self.stopped_by_layout:
                repeat_stopped(study, trial, self.stopped_by_layout[layout], self.emit)
            else:
                keep.append((trial, layout))
        self.waiting = keep

    def run(self) -> None:
        self.stops.install()
        try:
            while self._round():
                pass
            if self.stopped_by_shared_cause():
                raise self.shared.record(self.study)
        except KeyboardInterrupt:
            self._interrupted()
            raise
        finally:
            self.stops.restore()

    def _settle(self) -> None:
        self.waiting = settle_waiting(self.study, self.waiting, self.done_by_layout, self.emit)

    def stopped_by_shared_cause(self) -> bool:
        return self.shared is not None and self.shared.tripped

    def _round(self) -> bool:
        """Check the end, start what the free workers can take, tell what finished; False once the search is over."""
        self.stops.check()
        trained = self.decided()
        if self.stopped_by_shared_cause() and not self.pending:  # those in flight were told: stop here
            self._settle()
            return False
        if self.out_of_time() and not self.pending:  # paused rung trials stay paused: a resume continues them
            self.emit("time_limit", {"seconds": self.time_limit, "trained": trained})
            self._settle()
            return False
        sched = self.sched
        if sched is not None and not self.pending and self.open_trials and not self.can_start_new() \
                and sched.next_promotion(drain=True) is None and not sched.running():
            self.stop_paused()  # draining, and nothing left to promote: the rest stop where they are
            trained = self.decided()
        if self.dup_streak >= MAX_REPEATS or (not self.requeued_left() and not self.open_trials
                                              and (trained >= self.n_trials or (self.exhausted() and not self.pending)
                                                   or (self.stop() and not self.pending))):
            self._settle()
            return False
        self._continue_rungs()
        self._fill(trained)
        self._collect()
        return True

    def _continue_rungs(self) -> None:
        """Rung scheduler: runs to resume, then promotions, before any new trial (asynchronous successive halving)."""
        sched = self.sched
        while sched is not None and self.dispatch.free() and not self.out_of_time() and not self.stopped_by_shared_cause():
            self.stops.check()
            number = next((n for n in sched.running() if n not in self.pending and n in self.open_trials), None)
            if number is None:
                number = sched.next_promotion(drain=not self.can_start_new())
                if number is None:
                    break
                self.store_rung(number, sched.promote(number))
                self.emit("promoted", {"number": number, "layout": self.open_trials[number][1],
                                       "to": sched.records[number]["next"]})
            self.submit_rung(number)

    def _may_start(self, trained: int) -> bool:
        if self.sched is not None:
            return self.can_start_new()
        return self.requeued_left() or (trained + len(self.pending) < self.n_trials and not self.exhausted()
                                        and not self.stop())

    def _fill(self, trained: int) -> None:
        """Fill free workers with new trials."""
        while (self.dispatch.free() and self.dup_streak < MAX_REPEATS and not self.out_of_time()
               and not self.stopped_by_shared_cause() and self._may_start(trained)):
            self.stops.check()
            if self.dup_streak and self.dup_streak % REPEATS_BEFORE_FALLBACK == 0 and self.unique is not None:
                # the sampler keeps proposing layouts already seen (GP/TPE on small categorical spaces do):
                # queue an untried candidate so the search keeps covering the space
                fresh = self.untried()
                if fresh:
                    self.study.enqueue_trial(fresh[self.rng.randrange(len(fresh))])
            elif self.longest_first and self.sched is None and not self.requeued:
                self._enqueue_longest(trained)
            self._start(ask_trial(self.study, self.dists, self.requeued))

    def _enqueue_longest(self, trained: int) -> None:
        """Where the target covers every untried candidate, enqueue the one expected to train longest (the next ask
        takes it; one at a time, so a stop leaves at most one WAITING, which a resume's ask takes like any other)."""
        untried = self.untried()
        if not untried or trained + len(self.pending) + len(untried) > self.n_trials:
            return
        if self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            return  # one is queued already (a fallback's, an earlier enqueue): the ask takes that first
        if not self.covering:
            self.covering = True
            self.emit("longest_first", {"n": len(untried), "target": self.n_trials})
        self.study.enqueue_trial(longest_first(self.space, untried, lambda p: str(self.space.layout(p)),
                                               measured=self.measured_recall.keys())[0])

    def _start(self, trial: optuna.trial.Trial) -> None:
        """A trial asked: reused, repeated, waiting for its twin, infeasible, or submitted."""
        study, space, emit = self.study, self.space, self.emit
        spec = trial_spec(space, trial.number, trial.params, self.out_root)
        from hlnas.model.cost import layout_metrics  # torch, when first needed: the driver starts without it

        cost = layout_metrics(spec.layout, spec.recipe.model, spec.kv_context, spec.placement)
        cons = constraint_values(space, cost)
        for k, v in cons.items():
            trial.set_constraint(k, v)
        for k, v in cost.items():
            trial.set_user_attr(k, v)
        if spec.layout in self.done_by_layout:  # never train the same layout twice in one study
            reuse(study, trial, self.done_by_layout[spec.layout], emit)
        elif spec.layout in self.dead:  # a failure is deterministic enough (NaN, OOM, constraint): don't retry it
            repeat_failure(study, trial, self.dead[spec.layout], emit)
        elif spec.layout in self.stopped_by_layout:  # stopped at a rung: not trained again
            repeat_stopped(study, trial, self.stopped_by_layout[spec.layout], emit)
        elif spec.layout in self.open_layouts():
            self.waiting.append((trial, spec.layout))
        else:
            self.dup_streak = 0
            self._submit_new(trial, spec, cons)
            return
        self.dup_streak += 1

    def _submit_new(self, trial: optuna.trial.Trial, spec, cons: dict) -> None:
        if any(v > 0 for v in cons.values()):
            bad = ", ".join(f"{k} (by {v:,.0f})" for k, v in cons.items() if v > 0)
            trial.set_user_attr("status", "infeasible")
            trial.set_user_attr("error_kind", "constraint")
            trial.set_user_attr("error", f"violates {bad}; not trained")
            self.study.tell(trial, state=TrialState.FAIL)
            self.dead[spec.layout] = optuna_adapter.frozen_of(self.study, trial)
            self.emit("infeasible", {"number": trial.number, "layout": spec.layout, "error": bad})
        elif spec.layout in self.adopted:
            adopt(self.study, self.metrics_names, trial, *self.adopted[spec.layout], self.emit)
            self._told(trial, spec.layout)
        elif self.sched is not None:  # a new trial starts at the first rung
            self.open_trials[trial.number] = (trial, spec.layout)
            self.store_rung(trial.number, self.sched.start(trial.number))
            self.submit_rung(trial.number)
        else:  # a signal while submitting: this trial is pending, so it is re-queued
            if self.paused_dir is not None:
                spec = dataclasses.replace(spec, state_dir=self.paused_dir(spec.layout), pause_by=self.pause_by)
            where, result = self.measured_recall.get(spec.layout, (None, None))
            if result is not None:
                spec = dataclasses.replace(spec, recall=result, recall_from=where)
            started = {"number": trial.number, "layout": spec.layout, **({"recall_from": where} if where else {})}
            self.dispatch.submit(spec, (trial, spec.layout), lambda: self.emit("started", started))

    def _collect(self) -> None:
        """Tell each trial that finished (a rung trial paused at its rung stays open)."""
        study, emit = self.study, self.emit
        for (trial, layout), result in self.dispatch.finished():
            if self.sched is not None and result.number in self.open_trials:
                if rung_result(study, self.sched, trial, layout, result, emit):
                    continue  # paused at a rung (or its worker died after a rung: run again from there)
                del self.open_trials[result.number]
            if result.status == "paused":  # out of time: told FAIL and re-queued; a resume continues its model
                tell_paused(study, trial, result)
                self.requeued = requeued_waiting(study)
                emit("paused", {"number": result.number, "layout": layout, "steps": result.metrics.get("mqar_steps_done")})
                continue
            if result.error_kind == "worker_died":  # the layout may be fine: re-queued, within the bound
                kind, error = stop_record(study, trial.params, result.error or "its worker died", "worker_died")
                result = dataclasses.replace(result, error_kind=kind, error=error,
                                             metrics={**result.metrics, "error_kind": kind, "error": error})
            tell_result(study, self.metrics_names, trial, result)
            frozen = optuna_adapter.frozen_of(study, trial)
            if self.shared is not None:
                self.shared.told(frozen, layout)
            if self.paused_dir is not None:  # told: a state it paused with earlier is of no more use
                shutil.rmtree(self.paused_dir(layout), ignore_errors=True)
            if frozen.state == TrialState.COMPLETE:
                self._told(trial, layout, frozen)
            elif frozen.user_attrs.get("error_kind") == "worker_died":
                requeue(study, trial.params, trial.number)
                self.requeued = requeued_waiting(study)
                emit("requeued", {"n": 1, "layout": layout, "why": "its worker died"})
            elif frozen.user_attrs.get("error_kind") not in RETRY_KINDS:
                self.dead[layout] = frozen
            emit("finished", {"number": result.number, "layout": layout, "status": result.status,
                              "metrics": result.metrics, "error": result.error})
            self._front_and_waiting(layout)

    def _told(self, trial, layout: str, frozen=None) -> None:
        """A trial of ``layout`` told COMPLETE (trained, or adopted): it is the layout's result from now on."""
        self.done_by_layout[layout] = frozen or optuna_adapter.frozen_of(self.study, trial)
        if frozen is None:  # adopted: no finished event follows
            self._front_and_waiting(layout)

    def _front_and_waiting(self, layout: str) -> None:
        """After a trial of ``layout`` was told: the live front when it changed, duplicates that waited on it."""
        front_now = tuple(sorted(t.number for t in self.study.best_trials))
        if front_now != self.last_front:
            self.last_front = front_now
            self.emit("front", {"rows": front_rows(self.study)})
        self.waiting = settle_waiting(self.study, self.waiting, self.done_by_layout, self.emit, finished=layout)

    def _interrupted(self) -> None:
        """Ctrl-C/SIGTERM: leave nothing RUNNING; what was under way is failed and re-queued for a resume."""
        study = self.study
        for number in list(self.pending):  # trials promoted past a rung stay RUNNING: a resume trains them from there
            if self.sched is not None and number in self.open_trials and self.sched.records[number]["at"] >= 0:
                del self.pending[number]
        for trial, _ in list(self.pending.values()) + self.waiting:  # leave nothing RUNNING; resume re-queues these
            kind, error = stop_record(study, trial.params, "the search was interrupted while this trial ran")
            trial.set_user_attr("error_kind", kind)
            trial.set_user_attr("error", error)
            study.tell(trial, state=TrialState.FAIL)
            if kind != "requeue_limit":
                requeue(study, trial.params, trial.number)
        recover(study)  # a trial asked but not yet submitted when the signal came is RUNNING too
