"""What one search is asked to do: :class:`SearchOptions`, the settings of :func:`hlnas.search.study.run_search` (the
study, where its trials run, its budget and clock, and its calibration choice), read by the driver and the calibration
runner alike. Free of torch and Optuna: the command line builds one before anything heavy is imported."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hlnas.search.storage import DEFAULT_STORAGE, check_study_name

if TYPE_CHECKING:
    from hlnas.search.executors import Executor

__all__ = ["SearchOptions"]


@dataclass(frozen=True, kw_only=True)
class SearchOptions:
    """One search's settings.

    The study: ``storage`` (an Optuna storage URL), ``study_name``, ``resume`` (continue a stored study), ``sampler``
    (None: the space's) and its ``seed`` (None: 0); a resume keeps the sampler and seed stored with the study, and refuses
    others given (as it refuses a changed space), ``out_root`` (checkpoints and paused recall models), ``results_from``
    (studies whose results of the same layouts, measured the same way, this one adopts: :mod:`hlnas.search.adopt`).

    Where trials run: ``executor`` (``inline``, ``processes``, ``ray``, or an
    :class:`~hlnas.search.executors.Executor` object used as given and shut down at the end), ``workers``,
    ``address`` (a Ray cluster), ``cpus_per_trial``, ``gpus_per_trial``.

    The budget and clock: ``n_trials`` distinct layouts trained and COMPLETE; after ``time_limit`` seconds (the
    calibration included) nothing new starts and running recall models pause at their next check, a later resume
    continuing them; ``drain``: those in flight go on this many seconds more before pausing (a machine's last lease);
    ``retry_failed``: queue the layouts that failed once more; ``fail_fast``: stop on a failure every trial shares
    (:mod:`hlnas.search.shared`).

    The calibration: ``skip_calibration`` (stored with the study, kept by a resume), ``calibrate`` (run the controls of
    a resumed study now), ``calibrated_by`` (another study's valid calibration of the same protocol, borrowed),
    ``calibrate_only`` (stop after it: ``hlnas calibrate``). ``on_event(kind, data)``: what the search reports as it
    goes (the terminal's live lines)."""

    study_name: str
    n_trials: int
    storage: str = DEFAULT_STORAGE
    resume: bool = False
    sampler: str | None = None
    seed: int | None = None
    out_root: str | None = None
    results_from: Sequence[str] = ()
    executor: str | Executor = "inline"
    workers: int = 1
    address: str | None = None
    cpus_per_trial: float = 1.0
    gpus_per_trial: float | None = None
    time_limit: float | None = None
    drain: float = 0.0
    retry_failed: bool = False
    fail_fast: bool = True
    skip_calibration: bool = False
    calibrate: bool = False
    calibrated_by: str | None = None
    calibrate_only: bool = False
    on_event: Callable[[str, dict], None] | None = None

    def __post_init__(self) -> None:
        check_study_name(self.study_name)  # where a search first reads it: before anything is opened or written
