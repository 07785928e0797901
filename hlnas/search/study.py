"""The search: an Optuna study on the driver (created or resumed, held by one driver, calibrated), asked and told
by the loop in :mod:`hlnas.search.loop` (shared with the sampler benchmark), trials run by an executor.

Everything needed to continue is stored with the study (the space, objectives, hlnas version), so
``run_search(None, SearchOptions(storage=..., study_name=..., n_trials=..., resume=True))`` needs nothing else. After a crash or ``kill -9`` of the driver,
completed trials are kept; trials left RUNNING are marked FAIL and their parameters re-queued; the
study then runs until it holds the requested number of COMPLETE trials. One driver per study at a time
(:mod:`hlnas.search.lease`: a heartbeat in study attr ``hlnas_driver``; a second live driver is refused).

Stored schema (read by the dashboard): study user attrs ``hlnas_version``, ``hlnas_space``, ``hlnas_space_hash``,
``hlnas_objectives``, ``hlnas_kv_context``, ``hlnas_preset``, ``hlnas_paper_grid`` (``SearchSpace.is_paper_grid``; read via
``StudyData.paper_grid``), ``hlnas_trials`` (a search's latest target), ``hlnas_sampler`` (the sampler and seed, kept by a
resume), ``hlnas_calibration``, ``hlnas_driver``; every trial's
user attrs hold the layout's cost and its scores (:func:`hlnas.model.cost.layout_metrics` plus :func:`hlnas.score.objectives.score`).
"""

from __future__ import annotations

import shlex
import signal
import threading
import time
from collections.abc import Callable

import optuna
from optuna.trial import TrialState

import hlnas
from hlnas.errors import ConfigError, HlnasError
from hlnas.outputs import output_dir
from hlnas.overrides import is_int, is_number
from hlnas.search.executors import Executor, InlineExecutor, executor_from_options
from hlnas.search.lease import DriverLease
from hlnas.search.adopt import check_results_from, result_origins, store_results_from
from hlnas.search.calibration import (PAUSED, borrowable_calibration, calibrate_if_needed,
                                     needs_calibration)
from hlnas.search.loop import LoopSettings, search_loop
from hlnas.search.options import SearchOptions
from hlnas.search.records import MAX_REQUEUES, front_rows, recover
from hlnas.search.shared import only_shared_failures
from hlnas.search.samplers import make_sampler
from hlnas.search import optuna_adapter
from hlnas.search.storage import (DEFAULT_STORAGE, StorageError, UnknownStudyError, check_storage_url, check_study_name,
                                  load_study, open_storage, resumable, study_names)
from hlnas.space import SearchSpace, space_from_dict
import hlnas.calibration.protocol as calib

__all__ = ["SearchOptions", "choose_executor", "default_trials", "trial_target", "resumable", "StorageError", "open_or_create_storage", "run_search", "calibrate_study",
           "load_hlnas_study", "study_summary", "front_rows", "DEFAULT_STORAGE", "MAX_REQUEUES"]

def open_or_create_storage(url: str):
    """The search's storage: like :func:`hlnas.search.storage.open_storage`, but a new SQLite/journal file may be created."""
    return open_storage(url, create=True)


def check_data_source(space: SearchSpace) -> None:
    """Refuse a local ``scale.data.source`` that does not exist, before a search writes anything: else every trial
    fails alike. 'synthetic' and 'hf:' datasets are left to the trials (a dataset is only known once loaded)."""
    from pathlib import Path

    from hlnas.data.sources import FILE_EXTENSIONS

    src = space.data.source
    if src == "synthetic" or src.startswith("hf:"):
        return
    if Path(src).expanduser().exists():
        _check_training_documents(space.data)
        return
    raise ConfigError(f"scale.data.source '{src}' does not exist; give 'synthetic', an existing file "
                      f"({', '.join(FILE_EXTENSIONS)}) or directory of such files, or 'hf:NAME[:CONFIG]' for a Hugging "
                      "Face dataset")


def _check_training_documents(cfg) -> None:
    """A local source must hold a document past the ``val_docs`` held out, or every LM trial fails alike; counted up
    to the first such document only (a built token corpus has its own split)."""
    import itertools

    from hlnas.data.sources import iter_documents
    from hlnas.data.token_corpus import is_token_corpus

    if is_token_corpus(cfg.source):
        return
    n = sum(1 for _ in itertools.islice(iter_documents(cfg), cfg.val_docs + 1))
    if n <= cfg.val_docs:
        raise ConfigError(f"scale.data.source '{cfg.source}' holds {n} document(s), and the first data.val_docs="
                          f"{cfg.val_docs} are held out for validation, so none is left to train on; lower "
                          "data.val_docs or add data")


def _existing_storage(url):
    """``url``'s storage opened when it exists already, or None: a SQLite or journal file not created yet (so that
    refusing an option does not leave a new empty file behind)."""
    import os

    if isinstance(url, str):
        kind, path = check_storage_url(url, create=True)
        if path is not None and not os.path.exists(path):
            return None
    return open_or_create_storage(url)


def _study_attrs(space: SearchSpace) -> dict:
    """Everything a resume needs, derived from the space alone (so a half-written set can be rebuilt)."""
    return {
        "hlnas_version": hlnas.__version__, "hlnas_space_hash": space.fingerprint(),
        "hlnas_objectives": [{"name": o.name, "metric": o.metric, "direction": o.direction} for o in space.objectives],
        "hlnas_kv_context": space.kv_context, "hlnas_preset": space.preset, "hlnas_paper_grid": space.is_paper_grid,
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


def _create_or_load(space: SearchSpace | None, storage, name: str, resume: bool,
                    skip_calibration: bool = False) -> tuple[optuna.Study, SearchSpace]:
    exists = name in study_names(storage)
    if exists:
        study = optuna.load_study(study_name=name, storage=storage)
        if _husk(study):
            if space is None:
                raise HlnasError(f"study '{name}' was left half-created by an interrupted start (no settings, no trials); "
                                 f"start it again without --resume (hlnas search --study {shlex.quote(name)} --space ...), "
                                 "which replaces it")
            optuna.delete_study(study_name=name, storage=storage)  # nothing in it to lose
            exists = False
        elif not resume and space is not None and only_shared_failures(study):  # a setting failed all: nothing to lose
            optuna.delete_study(study_name=name, storage=storage)
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
        return study, stored.with_start_order(space)
    if exists:
        stored = space_from_dict(study.user_attrs["hlnas_space"], where=f"study '{name}'")
        # a study holding only a calibration (``hlnas calibrate``) of this very space continues into its search
        only_calibrated = all("calibration" in t.user_attrs for t in study.get_trials(deepcopy=False))
        if only_calibrated and space is not None and stored.fingerprint() == space.fingerprint():
            _repair(study, stored)
            return study, stored.with_start_order(space)
        raise HlnasError(f"study '{name}' already exists in this storage; pass --resume to continue it, or choose another --study name")
    assert space is not None
    with _deferred_stop_signals():  # Ctrl-C/SIGTERM land after the study is whole; kill -9 leaves a husk, repaired above
        study = optuna.create_study(study_name=name, storage=storage, directions=[o.direction for o in space.objectives])
        study.set_user_attr("hlnas_space", space.to_dict())  # first: with it the rest can be rebuilt
        if skip_calibration:  # the study's choice, kept by every resume (a later --calibrate overrides it)
            study.set_user_attr("hlnas_calibration", {"status": "skipped"})
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


def check_search(space: SearchSpace | None, options: SearchOptions) -> None:
    """Every refusal a search can make before it opens or writes anything: its options, the calibration options, the
    data source, the studies ``--calibrated-by`` and ``--results-from`` name, and ``--out``. ``hlnas search`` calls it
    before its banner, so a refusal is the one line printed; :func:`run_search` calls it unless told it ran."""
    o = options
    validate_options(n_trials=o.n_trials, workers=o.workers, executor=o.executor, cpus_per_trial=o.cpus_per_trial,
                     gpus_per_trial=o.gpus_per_trial, time_limit=o.time_limit, address=o.address, drain=o.drain)
    _check_calibration_options(o.calibrate, o.skip_calibration, o.calibrated_by)
    if o.calibrate and space is not None:
        _check_calibrate(space)
    if space is not None:
        check_data_source(space)
    # the studies these options name are checked before a study is created for nothing, and before a new storage
    # file is: a file not yet there holds no study
    if o.calibrated_by is not None or (space is not None and o.results_from):
        named = _existing_storage(o.storage)
        if named is None:
            missing = o.calibrated_by if o.calibrated_by is not None else o.results_from[0]
            raise UnknownStudyError(f"no study named '{missing}' in {o.storage}. Available: none (the storage does not "
                                    "exist yet)")
        if o.calibrated_by is not None:
            if space is not None and needs_calibration(space):
                borrowable_calibration(named, space, o.calibrated_by)
            else:  # nothing to borrow, but a name that is not there is a mistake all the same
                load_study(named, o.calibrated_by)
    if o.out_root is not None:  # as hlnas train --out: the folder made now, or one line why not (a file, read-only)
        output_dir(str(o.out_root))


def run_search(space: SearchSpace | None, options: SearchOptions, *, checked: bool = False) -> optuna.Study:
    """Run (or resume) the study ``options`` names until ``options.n_trials`` distinct layouts are trained and COMPLETE,
    or the space is exhausted (``space`` None: a resume, against the study's stored space). Trials that propose an
    already-trained layout are told its stored result (``reused_from``) and do not count. Layouts that failed (NaN, a
    crash, a CUDA fault) are not tried again unless ``retry_failed``: after fixing the cause, each is queued once more
    (infeasible ones, which broke a constraint, stay out).

    Before any search trial, a space with a recall objective is calibrated (:mod:`hlnas.calibration.protocol`): its
    controls run through the same executor, the verdict is stored with the study (and reused on resume), seed-0 runs
    of the space's layouts become trials, and an invalid protocol raises
    :class:`~hlnas.calibration.protocol.CalibrationFailed` before the search starts; ``calibrated_by`` borrows another
    study's valid calibration of the same protocol instead (:func:`hlnas.search.calibration.borrow_calibration`).
    Every setting: :class:`~hlnas.search.options.SearchOptions`; ``checked``: :func:`check_search` ran on them already."""
    o = options
    if not checked:
        check_search(space, o)
    stored_space_only = space is None  # a resume without --space: its stored space is checked once loaded
    store = open_or_create_storage(o.storage)
    # a resume without a space: against its stored one, once loaded
    sources = None if space is None else check_results_from(store, space, o.results_from)
    existed = o.study_name in study_names(store)
    study, space = _create_or_load(space, store, o.study_name, o.resume, o.skip_calibration)
    if o.resume:  # before anything is written to the study
        _check_resumed_sampler(study, space, o)
    store_results_from(study, check_results_from(store, space, o.results_from) if sources is None else sources)
    if stored_space_only:
        if o.calibrate:
            _check_calibrate(space)
        check_data_source(space)  # its file may have moved since
    lease = DriverLease(study).acquire()  # StudyBusy while another live driver holds it
    try:
        return _drive(study, space, options, fresh=not existed)
    finally:
        lease.release()


def calibrate_study(space: SearchSpace, *, storage: str = DEFAULT_STORAGE, study_name: str, workers: int | None = None,
                    executor: str = "auto", cpus_per_trial: float = 1.0,
                    on_event: Callable[[str, dict], None] | None = None,
                    time_limit: float | None = None, drain: float = 0.0) -> tuple[dict | None, str | None]:
    """Run the calibration of ``space`` and nothing else (``hlnas calibrate``), in study ``study_name``: a new one,
    or an existing one continued with the runs it lacks. ``executor`` and ``workers`` are resolved by
    :func:`choose_executor`. Returns the stored verdict and, when the protocol failed its controls, the message
    of :class:`~hlnas.calibration.protocol.CalibrationFailed` (``None`` when valid). A search of the same space and study
    reuses the runs. After ``time_limit`` seconds no run starts and those in flight pause (see
    :func:`hlnas.search.calibration.run_calibration`; ``drain``: seconds more for those in flight to finish before
    they pause); the verdict is then None and calling again continues."""
    if not needs_calibration(space):
        raise HlnasError(f"space '{space.name}' has no recall objective or has calibration.enabled: false; nothing to calibrate")
    check_study_name(study_name)
    executor, workers = choose_executor(executor, workers)
    exists = study_name in study_names(open_or_create_storage(storage))
    try:
        study = run_search(space, SearchOptions(
            storage=storage, study_name=study_name, n_trials=1, workers=workers, executor=executor, resume=exists,
            cpus_per_trial=cpus_per_trial, on_event=on_event, calibrate=True, calibrate_only=True, time_limit=time_limit,
            drain=drain))
        message = None
    except calib.CalibrationFailed as e:
        study, message = load_hlnas_study(storage, study_name), str(e)
    return (study.user_attrs.get("hlnas_calibration") or {}).get("verdict"), message


def choose_executor(executor: str, workers: int | None, address: str | None = None) -> tuple[str, int]:
    """``(executor, workers)`` for a search: unset ``workers`` is both cores of a small CPU-only machine (worker
    processes, no Ray start-up: the default space's candidates use one core each), else one; ``auto`` is inline
    for one worker, else Ray when installed (always with ``address``), else worker processes."""
    import importlib.util
    import os

    if workers is None:
        import torch

        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        workers = 2 if not torch.cuda.is_available() and cores >= 2 and not address else 1
        if workers > 1 and executor == "auto":
            return "processes", workers
    if executor == "auto":
        if workers == 1 and not address:
            return "inline", workers
        return ("ray" if address or importlib.util.find_spec("ray") else "processes"), workers
    return executor, workers


def default_trials(space: SearchSpace | None) -> int:
    """Trials a search runs when not told: the whole space when it has at most 40 layouts, else 12."""
    n = len(space.grid()) if space is not None else None  # grid() enumerates the space: once
    return n if n is not None and n <= 40 else 12


def trial_target(space: SearchSpace | None, storage: str, name: str, resume: bool) -> int:
    """Trials a search runs when not told: a resumed study continues to the target stored with it
    (``hlnas_trials``), else :func:`default_trials`."""
    trials = load_hlnas_study(storage, name).user_attrs.get("hlnas_trials") if resume else None
    return default_trials(space) if trials is None else trials


def validate_options(*, n_trials: int, workers: int, executor: str | Executor, cpus_per_trial: float = 1.0,
                     gpus_per_trial: float | None = None, time_limit: float | None = None, address: str | None = None,
                     drain: float = 0.0) -> None:
    """Every search option, checked before anything is written to the storage (one-line errors)."""
    from hlnas.search.executors import EXECUTORS

    def whole(x) -> bool:
        return is_int(x)

    if not whole(n_trials) or n_trials < 1:
        raise ConfigError(f"--trials must be a whole number >= 1, got {n_trials!r}")
    if not isinstance(executor, str):
        lacking = [a for a in ("capacity", "submit", "wait", "shutdown") if not hasattr(executor, a)]
        if lacking:
            raise ConfigError(f"executor {type(executor).__name__} is not an Executor: it lacks {', '.join(lacking)}")
    elif executor not in EXECUTORS:
        raise ConfigError(f"--executor {executor!r} is not allowed; allowed: {', '.join(EXECUTORS)}")
    if not whole(workers) or workers < 1:
        raise ConfigError(f"--workers must be a whole number >= 1, got {workers!r}")
    if executor == "inline" and workers != 1:
        raise ConfigError(f"--executor inline runs one trial at a time; got --workers {workers} (use --executor processes or ray)")
    if not cpus_per_trial > 0:
        raise ConfigError(f"--cpus-per-trial must be > 0 (CPUs reserved and torch threads per trial), got {cpus_per_trial}")
    if gpus_per_trial is not None and not gpus_per_trial >= 0:
        raise ConfigError(f"--gpus-per-trial must be >= 0, got {gpus_per_trial}")
    if gpus_per_trial is not None and executor != "ray":  # the other executors would ignore it without a word
        raise ConfigError(f"--gpus-per-trial sets what Ray reserves per trial; it needs --executor ray (got {executor!r})")
    if time_limit is not None and not time_limit > 0:
        raise ConfigError(f"--timeout must be a positive number of seconds, got {time_limit}")
    if not is_number(drain) or not drain >= 0:
        raise ConfigError(f"--drain must be a number of seconds >= 0, got {drain!r}")
    if drain and time_limit is None:
        raise ConfigError(f"--drain {drain} lets runs in flight at --timeout finish; it needs --timeout")
    if address:
        if executor != "ray":
            raise ConfigError(f"--address {address} joins a Ray cluster, which needs --executor ray "
                              f"(got {executor if isinstance(executor, str) else type(executor).__name__})")
        _probe_ray(address)


RAY_PROBE_S = 5.0


def _probe_ray(address: str) -> None:
    """Fail fast on an unreachable Ray address (ray.init itself waits about 85 s before giving up)."""
    import socket

    if address == "auto":  # ray.init finds the local cluster itself
        return
    hostport = address.split("://", 1)[-1].rsplit("/", 1)[0]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"--address {address!r} is not HOST:PORT (e.g. 127.0.0.1:6379 or ray://head:10001)")
    try:
        with socket.create_connection((host, int(port)), timeout=RAY_PROBE_S):
            pass
    except OSError as e:
        raise HlnasError(f"cannot reach the Ray cluster at --address {address}: a TCP connection to {host}:{port} failed "
                         f"within {RAY_PROBE_S:.0f} s ({type(e).__name__}: {e}); start its head with "
                         f"`ray start --head --port {port}` there, or fix the address") from None


SAMPLER_ATTR = "hlnas_sampler"  # {"sampler": name, "seed": n}: what a study is searched with, kept by a resume


def _sampler_and_seed(study: optuna.Study, space: SearchSpace, o: SearchOptions) -> tuple[str, int]:
    """The sampler and seed this search runs: those stored with the study, else the options' (the space's sampler
    and seed 0 when not given)."""
    stored = study.user_attrs.get(SAMPLER_ATTR) or {}
    return (stored.get("sampler") or o.sampler or space.sampler,
            stored["seed"] if "seed" in stored else (0 if o.seed is None else o.seed))


def _check_resumed_sampler(study: optuna.Study, space: SearchSpace, o: SearchOptions) -> None:
    """A resume continues with the sampler and seed stored with the study: one given that differs is refused, as a
    changed space or --set is, rather than silently used or dropped. A study stored before these were kept compares
    the sampler with its space's and takes any seed."""
    stored = study.user_attrs.get(SAMPLER_ATTR) or {}
    sampler = stored.get("sampler") or space.sampler
    given = [(flag, new, old) for flag, new, old in (("--sampler", o.sampler, sampler), ("--seed", o.seed, stored.get("seed")))
             if new is not None and old is not None and new != old]
    if given:
        what = ", ".join(f"{flag} {old}" for flag, _, old in given)
        raise HlnasError(f"{' and '.join(f'{flag} {new}' for flag, new, _ in given)}: study '{o.study_name}' is searched "
                         f"with {what}; a resumed study keeps the sampler and seed stored with it (resume without "
                         "them, or start a new --study to change them)")


def _drive(study: optuna.Study, space: SearchSpace, o: SearchOptions, *, fresh: bool) -> optuna.Study:
    """The search itself, on a study this driver holds (see :func:`run_search`): recovery, the executor, the
    calibration, then :func:`hlnas.search.loop.search_loop`."""
    t_start = time.monotonic()
    sampler_name, seed = _sampler_and_seed(study, space, o)
    if SAMPLER_ATTR not in study.user_attrs and not o.calibrate_only:  # kept from now on: a resume continues with them
        study.set_user_attr(SAMPLER_ATTR, {"sampler": sampler_name, "seed": seed})
    study.sampler = make_sampler(sampler_name, seed, len(space.objectives))
    if not o.calibrate_only:  # the target a plain --resume continues to; a calibration's own 1 is not a search's
        study.set_user_attr("hlnas_trials", o.n_trials)
    emit = o.on_event or (lambda kind, data: None)
    requeued = recover(study)
    if requeued:
        emit("requeued", {"n": requeued})
    try:
        ex = executor_from_options(o.executor, o.workers, address=o.address, cpus_per_trial=o.cpus_per_trial,
                       gpus_per_trial=o.gpus_per_trial)
    except BaseException:
        if fresh and not study.get_trials(deepcopy=False):  # created just now for nothing: leave no empty study
            optuna.delete_study(study_name=o.study_name, storage=optuna_adapter.storage_of(study))
        raise
    inline = isinstance(ex, InlineExecutor)  # its submit() runs the trial here: a signal must raise at once
    try:
        verdict = calibrate_if_needed(study, space, ex, emit, o, fresh=fresh, inline=inline)
        if verdict is PAUSED:  # out of time before every control run finished: a resume continues it
            return study
        if o.calibrate_only:
            return study
        if o.time_limit is not None and time.monotonic() - t_start >= o.time_limit:  # the calibration's time counts
            emit("time_limit", {"seconds": o.time_limit, "trained": 0})
            return study
        search_loop(study, space, ex, LoopSettings(
            n_trials=o.n_trials, seed=seed, out_root=o.out_root, on_event=emit, time_limit=o.time_limit,
            drain=o.drain, clock_start=t_start, retry_failed=o.retry_failed, enqueue_grid=sampler_name == "grid",
            interruptible=inline, fail_fast=o.fail_fast,
            # several trials at once: the order decides when the workers finish (one worker: the sampler's)
            longest_first=getattr(ex, "capacity", 1) > 1))
    finally:
        ex.shutdown()
    return study


def _check_calibration_options(calibrate: bool, skip_calibration: bool, calibrated_by) -> None:
    if calibrate and skip_calibration:
        raise ConfigError("--calibrate and --skip-calibration contradict each other; pass one of them")
    bad_source = calibrated_by is not None and (not isinstance(calibrated_by, str) or not calibrated_by)
    if bad_source or (calibrated_by is not None and (calibrate or skip_calibration)):
        raise ConfigError(f"--calibrated-by takes a study name and excludes --calibrate and --skip-calibration; got "
                          f"{calibrated_by!r}{' with one of them' if calibrate or skip_calibration else ''}")


def _check_calibrate(space: SearchSpace) -> None:
    if not needs_calibration(space):
        raise ConfigError(f"--calibrate: space '{space.name}' has no recall objective or has calibration.enabled: false; "
                          "nothing to calibrate")


def load_hlnas_study(storage: str, name: str) -> optuna.Study:
    """A stored hlnas study (for reading: the storage must exist)."""
    study = load_study(storage, name)
    if "hlnas_objectives" not in study.user_attrs:
        raise HlnasError(f"study '{name}' was not created by hlnas (no hlnas_objectives attribute)")
    return study


def study_summary(study: optuna.Study) -> dict:
    """What ``hlnas status`` shows of a stored hlnas study: its trials counted by state (the complete ones also by
    origin: trained or adopted, :func:`~hlnas.search.adopt.result_origins`), objectives, calibration (attr
    ``hlnas_calibration``) and Pareto front (:func:`front_rows`)."""
    trials = study.get_trials(deepcopy=False)
    counts = {s.name.lower(): sum(t.state == s for t in trials)
              for s in (TrialState.COMPLETE, TrialState.FAIL, TrialState.RUNNING, TrialState.WAITING)}
    rungs = [t for t in trials if "hlnas_rung" in t.user_attrs]
    stopped = sum(t.state == TrialState.PRUNED and "reused_from" not in t.user_attrs for t in trials)
    if rungs or stopped:  # stopped early (PRUNED, partial results) by the rung scheduler or by Tune (hlnas.search.tune)
        counts["stopped"] = stopped
    if rungs:  # the rung scheduler's trials paused at a rung (RUNNING)
        counts["paused"] = sum(t.state == TrialState.RUNNING and t.user_attrs["hlnas_rung"].get("state") == "paused"
                               for t in rungs)
        counts["running"] -= counts["paused"]
    front = front_rows(study)
    cal = study.user_attrs.get("hlnas_calibration") or {}
    progress = advice = None
    space = space_from_dict(study.user_attrs["hlnas_space"], where=f"study '{study.study_name}'")
    if cal.get("status") == "running":  # split over several calls: how far along
        progress = calib.progress(space, cal.get("runs") or {})
    if cal.get("status") == "invalid" and cal.get("verdict") and not cal.get("borrowed_from"):
        advice = calib.advice(space, cal["verdict"])  # what hlnas calibrate printed when it failed, for a later reader
    return {"study": study.study_name, "trials": counts, "origins": result_origins(trials),
            "objectives": study.user_attrs["hlnas_objectives"], "calibration": study.user_attrs.get("hlnas_calibration"),
            "calibration_progress": progress, "calibration_advice": advice, "front": front,
            "target": study.user_attrs.get("hlnas_trials")}
