"""The search: an Optuna study asked and told on the driver, trials run by an executor.

Everything needed to continue is stored with the study (the space, objectives, hlnas version), so
``resume_search(storage, name)`` needs nothing else. After a crash or ``kill -9`` of the driver,
completed trials are kept; trials left RUNNING are marked FAIL and their parameters re-queued; the
study then runs until it holds the requested number of COMPLETE trials. One driver per study at a time
(:mod:`hlnas.lease`: a heartbeat in study attr ``hlnas_driver``; a second live driver is refused).

Stored schema (read by the dashboard): study user attrs ``hlnas_version``, ``hlnas_space``,
``hlnas_space_hash``, ``hlnas_objectives``, ``hlnas_kv_context``, ``hlnas_preset``,
``hlnas_paper_grid``, ``hlnas_trials`` (the latest target), ``hlnas_calibration``, ``hlnas_driver``; every trial's user attrs hold the layout's cost and its scores
(:func:`hlnas.budget.layout_metrics` plus :func:`hlnas.score.objectives.score`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import signal
import threading
import time
from collections.abc import Callable

import optuna
from optuna.trial import TrialState

import hlnas
from hlnas.errors import ConfigError, HlnasError
from hlnas.executors import make_executor
from hlnas.lease import DriverLease, StudyBusy
from hlnas.storage import DEFAULT_STORAGE, StorageError, load_study, study_names
from hlnas.storage import open_storage as _open_storage
from hlnas.space import SAMPLERS, SearchSpace, space_from_dict
from hlnas.trial import TrialResult, TrialSpec, layout_metrics
import hlnas.calibrate as calib

__all__ = ["StorageError", "open_storage", "run_search", "load_hlnas_study", "front_rows", "DEFAULT_STORAGE"]

def open_storage(url: str):
    """The search's storage: like :func:`hlnas.storage.open_storage`, but a new SQLite/journal file may be created."""
    return _open_storage(url, create=True)


def _sampler(name: str, seed: int, n_objectives: int):
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=8)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=5)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=5)
    if name in ("random", "grid"):  # grid: every candidate is enqueued; random fills anything beyond
        return optuna.samplers.RandomSampler(seed=seed)
    raise ConfigError(f"unknown sampler '{name}'; allowed: {', '.join(SAMPLERS)}")


def _spec(space: SearchSpace, number: int, params: dict, out_root: str | None) -> TrialSpec:
    from hlnas.recipe import model_from_spec
    from hlnas.score.objectives import ScoreConfig
    from hlnas.train import TrainConfig
    from hlnas.data.sources import DataConfig

    layout = space.layout(params)
    model = model_from_spec({"preset": space.preset, **space.model})
    return TrialSpec(
        number=number, layout=str(layout), model=model.to_dict(),
        train=TrainConfig.from_dict(space.train).to_dict(), data=DataConfig.from_dict(space.data).to_dict(),
        score=ScoreConfig.from_dict(space.score).to_dict(), kv_context=space.kv_context,
        placement=params.get("placement"),
        out_dir=None if out_root is None else os.path.join(out_root, str(layout)),
    )


def _layout_spec(space: SearchSpace, number: int, layout: str, *, seed: int, recall_only: bool = False) -> TrialSpec:
    """A run of ``layout`` at the space's scale with training seed ``seed`` (calibration runs)."""
    from hlnas.data.sources import DataConfig
    from hlnas.recipe import model_from_spec
    from hlnas.score.objectives import ScoreConfig
    from hlnas.train import TrainConfig

    model = model_from_spec({"preset": space.preset, **space.model, "n_layers": space.n_layers})
    train = {**TrainConfig.from_dict(space.train).to_dict(), "seed": seed}
    return TrialSpec(number=number, layout=layout, model=model.to_dict(), train=train,
                     data=DataConfig.from_dict(space.data).to_dict(), score=ScoreConfig.from_dict(space.score).to_dict(),
                     kv_context=space.kv_context, recall_only=recall_only)


def needs_calibration(space: SearchSpace) -> bool:
    """A space with a recall objective and calibration enabled is calibrated before its search."""
    return space.calibration_config().enabled and any(o.metric == "recall" for o in space.objectives)


def _run_calibration(study: optuna.Study, space: SearchSpace, ex, emit, check_stop) -> dict:
    """Run the calibration runs not yet stored with the study (all of them the first time), through the
    search's executor; store each as it finishes; tell seed-0 runs of the space's layouts as trials.
    Returns the verdict (also stored as study attr ``hlnas_calibration``)."""
    stored = dict(study.user_attrs.get("hlnas_calibration") or {})
    runs: dict = dict(stored.get("runs") or {})
    plan = calib.plan(space)
    todo = [r for r in plan if r.key not in runs]
    recall_only = space.recall_source() == "mqar_acc"  # a fresh-model recall does not need the LM trained
    if todo:
        emit("calibration_started", {"n": len(todo), "total": len(plan), "reused": len(plan) - len(todo)})
    queue, pending = list(todo), {}
    by_number = {-(i + 1): r for i, r in enumerate(plan)}
    number_of = {r.key: n for n, r in by_number.items()}

    def save(status: str = "running", result: dict | None = None) -> None:
        study.set_user_attr("hlnas_calibration", {"status": status, "runs": runs, **({"verdict": result} if result else {})})

    while queue or pending:
        check_stop()
        while queue and len(pending) < ex.capacity:
            check_stop()
            run = queue.pop(0)
            spec = _layout_spec(space, number_of[run.key], run.layout, seed=run.seed,
                                recall_only=recall_only and run.params is None)
            pending[spec.number] = run
            emit("calibration_run_started", {"key": run.key, "layout": run.layout, "seed": run.seed})
            ex.submit(spec)
        for result in ex.wait(timeout=1.0):
            if result.status == "interrupted":
                raise KeyboardInterrupt
            run = pending.pop(result.number)
            summary = calib.run_summary(run, result.status, result.metrics)
            if run.params is not None and result.status in ("ok", "failed", "infeasible"):
                summary["trial"] = _tell_calibration_trial(study, space, run, result)
            runs[run.key] = summary
            save()
            emit("calibration_run", summary)
    result = calib.verdict(space, runs)
    save("valid" if result["valid"] else "invalid", result)
    emit("calibration", result)
    return result


def _tell_calibration_trial(study: optuna.Study, space: SearchSpace, run, result: TrialResult) -> int:
    """Store a seed-0 calibration run of one of the space's layouts as the study's trial of that layout
    (added whole, not asked: a WAITING trial queued by the grid or a resume must not take its place)."""
    cost = layout_metrics(run.layout, _layout_spec(space, 0, run.layout, seed=0).model, space.kv_context,
                          run.params.get("placement"))
    attrs = {**cost, **result.metrics, "wall_s": round(result.wall_s, 2), "calibration": run.key}
    values = _values(space, result.metrics) if result.ok else None
    if values is None and result.ok:
        attrs.update(status="failed", error_kind="other",
                     error=f"objective metrics missing or not finite: {[o.metric for o in space.objectives]}")
    dims = space.params()
    study.add_trial(optuna.trial.create_trial(
        state=TrialState.COMPLETE if values is not None else TrialState.FAIL, values=values, params=run.params,
        distributions={k: optuna.distributions.CategoricalDistribution(dims[k]) for k in run.params},
        user_attrs=attrs, constraints=_constraints(space, cost) or None))
    return max(t.number for t in study.get_trials(deepcopy=False) if t.user_attrs.get("calibration") == run.key)


def calibration_failed_message(space: SearchSpace, result: dict, storage: str, name: str) -> str:
    lines = [f"the recall protocol of space '{space.name}' failed its controls, so its recall numbers would not "
             "measure recall:"]
    lines += [f"  - {m}" for m in result["failures"]]
    lines.append(f"Change: {calib.advice(space, result)}.")
    lines.append(f"The calibration is stored in study '{name}' ({storage}); no search trial was trained beyond its "
                 "controls. Start a new --study with the changed settings, or pass --skip-calibration to search anyway.")
    return "\n".join(lines)


def _values(space: SearchSpace, metrics: dict) -> list[float] | None:
    vals = []
    for o in space.objectives:
        v = metrics.get(o.metric)
        if isinstance(v, dict):  # e.g. "ruler": its average
            v = v.get("average")
        if v is None or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
            return None
        vals.append(float(v))
    return vals


def _constraints(space: SearchSpace, metrics: dict) -> dict[str, float]:
    keys = {"max_params": "params", "max_kv_bytes": "kv_cache_bytes", "max_state_bytes": "state_bytes"}
    return {k: float(metrics[keys[k]]) - float(limit) for k, limit in space.constraints.items()}


def _study_attrs(space: SearchSpace) -> dict:
    """Everything a resume needs, derived from the space alone (so a half-written set can be rebuilt)."""
    return {
        "hlnas_version": hlnas.__version__, "hlnas_space_hash": space.fingerprint(),
        "hlnas_objectives": [{"name": o.name, "metric": o.metric, "direction": o.direction} for o in space.objectives],
        "hlnas_kv_context": space.kv_context, "hlnas_preset": space.preset, "hlnas_paper_grid": space.name == "paper_grid",
    }


def _repair(study: optuna.Study, space: SearchSpace) -> list[str]:
    """Write the attrs an interrupted creation left out (the space was written first); returns their names."""
    missing = {k: v for k, v in _study_attrs(space).items() if k not in study.user_attrs and k != "hlnas_version"}
    for k, v in missing.items():
        study.set_user_attr(k, v)
    if missing and not study.metric_names:
        study.set_metric_names([o.name for o in space.objectives])
    return sorted(missing)


def _husk(study: optuna.Study) -> bool:
    """A study whose creation was interrupted before its space was stored, with nothing in it."""
    return "hlnas_space" not in study.user_attrs and not study.get_trials(deepcopy=False)


def _create_or_load(space: SearchSpace | None, storage, name: str, resume: bool) -> tuple[optuna.Study, SearchSpace]:
    exists = name in study_names(storage)
    if exists:
        study = optuna.load_study(study_name=name, storage=storage)
        if _husk(study):
            if space is None:
                raise HlnasError(f"study '{name}' was left half-created by an interrupted start (no settings, no trials); "
                                 f"start it again without --resume (hlnas search --study {name} --space ...), which replaces it")
            optuna.delete_study(study_name=name, storage=storage)  # nothing in it to lose
            exists = False
        elif "hlnas_space" not in study.user_attrs:
            raise HlnasError(f"study '{name}' was not created by hlnas (it has trials but no hlnas_space attribute); "
                             "choose another --study name")
    if resume:
        if not exists:
            names = study_names(storage)
            raise HlnasError(f"no study '{name}' to resume in this storage; studies there: {', '.join(names) or 'none'}")
        stored = space_from_dict(study.user_attrs["hlnas_space"], where=f"study '{name}'")
        if space is not None and space.fingerprint() != stored.fingerprint():
            raise HlnasError(
                f"study '{name}' was created with another search space; resuming with a changed space is refused.\n  "
                + "\n  ".join(stored.diff(space)) + "\nResume without --space to use the stored one, or start a new --study."
            )
        _repair(study, stored)
        return study, stored
    if exists:
        stored = space_from_dict(study.user_attrs["hlnas_space"], where=f"study '{name}'")
        # a study holding only a calibration (``hlnas calibrate``) of this very space continues into its search
        only_calibrated = all("calibration" in t.user_attrs for t in study.get_trials(deepcopy=False))
        if only_calibrated and space is not None and stored.fingerprint() == space.fingerprint():
            _repair(study, stored)
            return study, stored
        raise HlnasError(f"study '{name}' already exists in this storage; pass --resume to continue it, or choose another --study name")
    assert space is not None
    with _deferred_stop_signals():  # Ctrl-C/SIGTERM land after the study is whole; kill -9 leaves a husk, repaired above
        study = optuna.create_study(study_name=name, storage=storage, directions=[o.direction for o in space.objectives])
        study.set_user_attr("hlnas_space", space.to_dict())  # first: with it the rest can be rebuilt
        for k, v in _study_attrs(space).items():
            study.set_user_attr(k, v)
        study.set_metric_names([o.name for o in space.objectives])
    return study, space


class _deferred_stop_signals:
    """Hold SIGINT/SIGTERM back for a few storage writes, then deliver them (main thread only)."""

    def __enter__(self):
        self.got: list[int] = []
        self.old = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.old[sig] = signal.signal(sig, lambda signum, frame: self.got.append(signum))
        return self

    def __exit__(self, *exc):
        for sig, handler in self.old.items():
            signal.signal(sig, handler)
        if self.got:
            signal.raise_signal(self.got[0])


#: how many times a layout is re-queued after the search or its worker stopped under it (a layout that kills
#: its worker or the driver would otherwise be retried on every resume); then it is recorded as failed
MAX_REQUEUES = 2
#: failures where the layout itself may be fine: the driver stopped (interrupted) or the worker died
_REQUEUED_KINDS = ("interrupted", "worker_died")


def _recover(study: optuna.Study) -> int:
    """Fail trials a dead driver left RUNNING and re-queue their parameters (within :data:`MAX_REQUEUES`)."""
    storage = study._storage
    n = 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        kind, error = _stop_record(study, t.params, "the search process stopped while this trial ran")
        storage.set_trial_user_attr(t._trial_id, "error", error)
        storage.set_trial_user_attr(t._trial_id, "error_kind", kind)
        storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
        if kind != "requeue_limit":
            _requeue(study, t.params, t.number)
        n += 1
    return n


def _stop_record(study: optuna.Study, params: dict, what: str, kind: str = "interrupted") -> tuple[str, str]:
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


def _requeue(study: optuna.Study, params: dict, number: int) -> None:
    """Enqueue ``params`` again unless already WAITING. (Not ``skip_if_exists``: it matches the failed trial
    itself, so nothing would ever be re-queued.)"""
    if any(t.system_attrs.get("fixed_params") == params for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,))):
        return
    study.enqueue_trial(params, user_attrs={"requeued_from": number})


def run_search(
    space: SearchSpace | None,
    *,
    storage: str = DEFAULT_STORAGE,
    study_name: str,
    n_trials: int,
    workers: int = 1,
    executor: str = "inline",
    sampler: str | None = None,
    resume: bool = False,
    seed: int = 0,
    address: str | None = None,
    cpus_per_trial: float = 1.0,
    gpus_per_trial: float | None = None,
    out_root: str | None = None,
    on_event: Callable[[str, dict], None] | None = None,
    time_limit: float | None = None,
    retry_failed: bool = False,
    skip_calibration: bool = False,
    calibrate_only: bool = False,
) -> optuna.Study:
    """Run (or resume) a study until ``n_trials`` distinct layouts are trained and COMPLETE, or the space is
    exhausted. Trials that propose an already-trained layout are told its stored result (``reused_from``)
    and do not count. After ``time_limit`` seconds no new trial starts; those running finish and are
    stored, and a later ``resume`` continues (a run split over several machine leases). Layouts that failed
    (NaN, a crash, a CUDA fault) are not tried again unless ``retry_failed``: after fixing the cause, each is
    queued once more (infeasible ones, which broke a constraint, stay out).

    Before any search trial, a space with a recall objective is calibrated (:mod:`hlnas.calibrate`): its
    controls run through the same executor, the verdict is stored with the study (and reused on resume),
    seed-0 runs of the space's layouts become trials, and an invalid protocol raises
    :class:`~hlnas.calibrate.CalibrationFailed` before the search starts. ``skip_calibration`` opts out;
    ``calibrate_only`` stops after the calibration (``hlnas calibrate``)."""
    validate_options(n_trials=n_trials, workers=workers, executor=executor, cpus_per_trial=cpus_per_trial,
                     gpus_per_trial=gpus_per_trial, time_limit=time_limit, address=address)
    store = open_storage(storage)
    existed = study_name in study_names(store)
    study, space = _create_or_load(space, store, study_name, resume)
    lease = DriverLease(study).acquire()  # StudyBusy while another live driver holds it
    try:
        return _drive(study, space, storage=storage, study_name=study_name, n_trials=n_trials, workers=workers,
                      executor=executor, sampler=sampler, seed=seed, address=address, cpus_per_trial=cpus_per_trial,
                      gpus_per_trial=gpus_per_trial, out_root=out_root, on_event=on_event, time_limit=time_limit,
                      retry_failed=retry_failed, skip_calibration=skip_calibration, calibrate_only=calibrate_only,
                      fresh=not existed)
    finally:
        lease.release()


def validate_options(*, n_trials: int, workers: int, executor: str, cpus_per_trial: float = 1.0,
                     gpus_per_trial: float | None = None, time_limit: float | None = None, address: str | None = None) -> None:
    """Every search option, checked before anything is written to the storage (one-line errors)."""
    from hlnas.executors import EXECUTORS

    def whole(x) -> bool:
        return isinstance(x, int) and not isinstance(x, bool)

    if not whole(n_trials) or n_trials < 1:
        raise ConfigError(f"--trials must be a whole number >= 1, got {n_trials!r}")
    if executor not in EXECUTORS:
        raise ConfigError(f"--executor {executor!r} is not allowed; allowed: {', '.join(EXECUTORS)}")
    if not whole(workers) or workers < 1:
        raise ConfigError(f"--workers must be a whole number >= 1, got {workers!r}")
    if executor == "inline" and workers != 1:
        raise ConfigError(f"--executor inline runs one trial at a time; got --workers {workers} (use --executor processes or ray)")
    if not cpus_per_trial > 0:
        raise ConfigError(f"--cpus-per-trial must be > 0 (CPUs reserved and torch threads per trial), got {cpus_per_trial}")
    if gpus_per_trial is not None and not gpus_per_trial >= 0:
        raise ConfigError(f"--gpus-per-trial must be >= 0, got {gpus_per_trial}")
    if time_limit is not None and not time_limit > 0:
        raise ConfigError(f"--timeout must be a positive number of seconds, got {time_limit}")
    if address:
        if executor != "ray":
            raise ConfigError(f"--address {address} joins a Ray cluster, which needs --executor ray (got {executor})")
        _probe_ray(address)


RAY_PROBE_S = 5.0


def _probe_ray(address: str) -> None:
    """Fail fast on an unreachable Ray address (ray.init itself waits about 85 s before giving up)."""
    import socket

    hostport = address.split("://", 1)[-1].rsplit("/", 1)[0]
    host, _, port = hostport.rpartition(":")
    if address == "auto":
        return
    if not host or not port.isdigit():
        raise ConfigError(f"--address {address!r} is not HOST:PORT (e.g. 127.0.0.1:6379 or ray://head:10001)")
    try:
        with socket.create_connection((host, int(port)), timeout=RAY_PROBE_S):
            pass
    except OSError as e:
        raise HlnasError(f"cannot reach the Ray cluster at --address {address}: a TCP connection to {host}:{port} failed "
                         f"within {RAY_PROBE_S:.0f} s ({type(e).__name__}: {e}); start its head with "
                         f"`ray start --head --port {port}` there, or fix the address") from None


def _drive(study: optuna.Study, space: SearchSpace, *, storage, study_name: str, n_trials: int, workers: int, executor: str,
           sampler, seed: int, address, cpus_per_trial: float, gpus_per_trial, out_root, on_event, time_limit,
           retry_failed: bool, skip_calibration: bool, calibrate_only: bool, fresh: bool) -> optuna.Study:
    """The search itself, on a study this driver holds (see :func:`run_search`)."""
    sampler_name = sampler or space.sampler
    study.sampler = _sampler(sampler_name, seed, len(space.objectives))
    study.set_user_attr("hlnas_trials", n_trials)  # the target a plain --resume continues to
    emit = on_event or (lambda kind, data: None)
    requeued = _recover(study)
    if requeued:
        emit("requeued", {"n": requeued})
    unique = len(space.grid()) if _small(space) else None  # how many distinct layouts exist, when countable
    ray_kwargs = {}
    if executor == "ray":
        # one GPU per trial when the driver sees CUDA, unless told otherwise
        gpus = gpus_per_trial if gpus_per_trial is not None else (1.0 if _cuda_available() else 0.0)
        ray_kwargs = {"address": address, "cpus_per_trial": cpus_per_trial, "gpus_per_trial": gpus}
    elif executor == "processes":
        ray_kwargs = {"cpus_per_trial": cpus_per_trial}
    try:
        ex = make_executor(executor, workers, **ray_kwargs)
    except BaseException:
        if fresh and not study.get_trials(deepcopy=False):  # created just now for nothing: leave no empty study
            optuna.delete_study(study_name=study_name, storage=study._storage)
        raise
    calibrating = not skip_calibration and needs_calibration(space)
    if not calibrating:
        if "hlnas_calibration" not in study.user_attrs:
            why = ("skipped" if skip_calibration else "disabled" if not space.calibration_config().enabled else "not needed")
            study.set_user_attr("hlnas_calibration", {"status": why})
    else:
        stored = study.user_attrs.get("hlnas_calibration") or {}
        if stored.get("status") in ("valid", "invalid"):
            emit("calibration", {**stored["verdict"], "reused": True})
            verdict = stored["verdict"]
        else:
            stop_flag: list[int] = []
            old = _catch_stop_signals(stop_flag, [executor == "inline"])

            def check_calibration_stop() -> None:
                if stop_flag:
                    raise KeyboardInterrupt
            try:
                verdict = _run_calibration(study, space, ex, emit, check_calibration_stop)
            except BaseException:
                ex.shutdown()
                raise
            finally:
                for sig, handler in old.items():
                    signal.signal(sig, handler)
        if not verdict["valid"]:
            ex.shutdown()
            raise calib.CalibrationFailed(calibration_failed_message(space, verdict, storage, study_name))
    if calibrate_only:
        ex.shutdown()
        return study
    if sampler_name == "grid" and not any("calibration" not in t.user_attrs for t in study.get_trials(deepcopy=False)):
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
                _requeue(study, t.params, t.number)
                retried += 1
                emit("retry", {"number": t.number, "layout": layout, "error_kind": t.user_attrs.get("error_kind")})
        if retried and len(done_by_layout) + retried > n_trials:  # retry them even where the target is already met
            emit("target_raised", {"from": n_trials, "to": len(done_by_layout) + retried, "retried": retried})
            n_trials = len(done_by_layout) + retried
            study.set_user_attr("hlnas_trials", n_trials)
    dup_streak = 0
    rng = random.Random(seed)
    last_front: tuple = ()

    def exhausted() -> bool:  # every distinct layout is trained, failed/infeasible, or training
        return unique is not None and len(done_by_layout) + len(dead) + len(pending) >= unique

    def out_of_time() -> bool:
        return time_limit is not None and time.monotonic() - t_start >= time_limit

    # Ctrl-C and SIGTERM only set a flag, checked between storage writes: a KeyboardInterrupt raised in
    # the middle of a write can leave SQLite locked, and then the interrupted trials could not be re-queued.
    # While an inline trial runs in this process (no storage writes then) they raise at once, so a stop
    # during scoring does not wait for it to finish (the trainer installs its own checkpointing handler).
    stop_signal: list[int] = []
    raise_now = [False]
    old_handlers = _catch_stop_signals(stop_signal, raise_now)

    def check_stop() -> None:
        if stop_signal:
            raise KeyboardInterrupt

    try:
        while True:
            check_stop()
            trained = len(done_by_layout)
            if out_of_time() and not pending:
                emit("time_limit", {"seconds": time_limit, "trained": trained})
                waiting = _settle_waiting(study, waiting, done_by_layout, emit)
                break
            if trained >= n_trials or (exhausted() and not pending) or dup_streak >= 200:
                waiting = _settle_waiting(study, waiting, done_by_layout, emit)
                break
            # fill free workers
            while (len(pending) < ex.capacity and trained + len(pending) < n_trials and not exhausted() and dup_streak < 200
                   and not out_of_time()):
                check_stop()
                if dup_streak and dup_streak % _DUP_FALLBACK == 0 and unique is not None:
                    # the sampler keeps proposing layouts already seen (GP/TPE on small categorical spaces do):
                    # queue an untried candidate so the search keeps covering the space
                    seen = set(done_by_layout) | set(dead) | {lay for _, lay in pending.values()}
                    fresh = [p for p in space.grid() if str(space.layout(p)) not in seen]
                    if fresh:
                        study.enqueue_trial(fresh[rng.randrange(len(fresh))])
                trial = study.ask({k: optuna.distributions.CategoricalDistribution(v) for k, v in space.params().items()})
                spec = _spec(space, trial.number, trial.params, out_root)
                cost = layout_metrics(spec.layout, spec.model, spec.kv_context, spec.placement)
                cons = _constraints(space, cost)
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
                if spec.layout in {lay for _, lay in pending.values()}:
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
                    dead[spec.layout] = study._storage.get_trial(trial._trial_id)
                    emit("infeasible", {"number": trial.number, "layout": spec.layout, "error": bad})
                    continue
                pending[trial.number] = (trial, spec.layout)
                emit("started", {"number": trial.number, "layout": spec.layout})  # before: inline submit() runs the trial
                raise_now[0] = executor == "inline"
                try:
                    check_stop()  # a signal since the last check: this trial is pending, so it is re-queued
                    ex.submit(spec)
                finally:
                    raise_now[0] = False
            for result in ex.wait(timeout=1.0):
                if result.status == "interrupted":  # Ctrl-C/SIGTERM caught by the trainer (inline): stop the search
                    raise KeyboardInterrupt
                trial, layout = pending.pop(result.number)
                if result.error_kind == "worker_died":  # the layout may be fine: re-queued, within the bound
                    kind, error = _stop_record(study, trial.params, result.error or "its worker died", "worker_died")
                    result = dataclasses.replace(result, error_kind=kind, error=error,
                                                 metrics={**result.metrics, "error_kind": kind, "error": error})
                _tell(study, space, trial, result)
                frozen = study._storage.get_trial(trial._trial_id)
                if frozen.state == TrialState.COMPLETE:
                    done_by_layout[layout] = frozen
                elif frozen.user_attrs.get("error_kind") == "worker_died":
                    _requeue(study, trial.params, trial.number)
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
        for trial, _ in list(pending.values()) + waiting:  # leave nothing RUNNING; resume re-queues these
            kind, error = _stop_record(study, trial.params, "the search was interrupted while this trial ran")
            trial.set_user_attr("error_kind", kind)
            trial.set_user_attr("error", error)
            study.tell(trial, state=TrialState.FAIL)
            if kind != "requeue_limit":
                _requeue(study, trial.params, trial.number)
        _recover(study)  # a trial asked but not yet submitted when the signal came is RUNNING too
        raise
    finally:
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)
        ex.shutdown()
    return study


def _catch_stop_signals(flag: list[int], raise_now: list[bool]) -> dict:
    """SIGINT/SIGTERM append to ``flag`` and raise KeyboardInterrupt only while ``raise_now[0]`` (main
    thread only); returns the old handlers."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def handle(signum, frame):
        flag.append(signum)
        if raise_now[0]:
            raise KeyboardInterrupt

    old = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        old[sig] = signal.signal(sig, handle)
    return old


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


#: consecutive proposals of known layouts after which an untried candidate is queued
_DUP_FALLBACK = 10


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
    emit("infeasible", {"number": trial.number, "layout": prev.user_attrs.get("layout"),
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


def _small(space: SearchSpace) -> bool:
    return len(space.grid()) <= 512


# failures worth another attempt: the process stopped under the trial, or a concurrent duplicate failed
_RETRY = ("interrupted", "worker_died", "duplicate_failed", None)


def _failed_by_layout(study: optuna.Study) -> dict:
    """layout -> its FAIL trial, for failures not worth retrying (the layout itself failed or is infeasible)."""
    out = {}
    for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
        a = t.user_attrs
        if "layout" in a and "reused_from" not in a and a.get("error_kind") not in _RETRY:
            out.setdefault(a["layout"], t)
    return out


def _completed_by_layout(study: optuna.Study) -> dict:
    """layout -> its trained COMPLETE trial (reused copies excluded): what counts towards --trials."""
    out = {}
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if "layout" in t.user_attrs and "reused_from" not in t.user_attrs:
            out.setdefault(t.user_attrs["layout"], t)
    return out


def _tell(study: optuna.Study, space: SearchSpace, trial, result: TrialResult) -> None:
    for k, v in result.metrics.items():
        trial.set_user_attr(k, v)
    trial.set_user_attr("wall_s", round(result.wall_s, 2))
    values = _values(space, result.metrics) if result.ok else None
    if values is None:
        if result.ok:
            trial.set_user_attr("status", "failed")
            trial.set_user_attr("error_kind", "other")
            trial.set_user_attr("error", f"objective metrics missing or not finite: {[o.metric for o in space.objectives]}")
        study.tell(trial, state=TrialState.FAIL)
    else:
        study.tell(trial, values)


def load_hlnas_study(storage: str, name: str) -> optuna.Study:
    """A stored hlnas study (for reading: the storage must exist)."""
    study = load_study(storage, name)
    if "hlnas_objectives" not in study.user_attrs:
        raise HlnasError(f"study '{name}' was not created by hlnas (no hlnas_objectives attribute)")
    return study


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
