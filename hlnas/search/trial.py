"""One search trial: its cost, then the candidate through the pipeline (:mod:`hlnas.pipeline.run`), as a picklable
function.

``run_trial(TrialSpec) -> TrialResult`` never raises: a failure (NaN loss, out-of-memory, a kernel
that cannot run, any exception) comes back as a result with ``status`` and ``error_kind`` so the
study records it and goes on. Specs hold frozen config objects and results plain data (no tensors,
no optuna objects), so both pickle across process boundaries (Ray workers) unchanged.
"""

from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the recipe's config modules pull in torch; the driver imports them when it reads a space
    from hlnas.pipeline.recipe import RunConfig

__all__ = ["TrialSpec", "TrialResult", "run_trial", "ERROR_KINDS"]

#: what a failed trial's ``error_kind`` says: the trial's own (first line) or the search loop's (second)
ERROR_KINDS = ("nan", "oom", "kernel", "config", "disk", "cuda_error", "worker_died", "other",
               "interrupted", "requeue_limit", "constraint", "duplicate_failed", "no_row", "no_score", "marked")


@dataclass(frozen=True)
class TrialSpec:
    """One trial's work: the recipe (layout and frozen model/train/data/score configs) and where to put it."""

    number: int
    recipe: RunConfig
    kv_context: int = 4096
    placement: str | None = None
    out_dir: str | None = None  # checkpoints; a re-run of the same trial resumes from them
    # score the fresh-model recall objective only (no LM training): calibration's extra seeds, whose
    # recall does not depend on the trained candidate
    recall_only: bool = False
    # the rung scheduler (hlnas.search.rungs): the recall model's state is kept in state_dir and continued from it; with
    # rung_steps, only the recall model trains, up to that many steps, and the result is partial (metrics
    # ``rung_steps``); without, the whole trial runs, its recall model continuing from state_dir
    rung_steps: int | None = None
    state_dir: str | None = None
    # a time.time() after which the recall model pauses at its next check, its state kept in state_dir; the
    # result is then ``paused`` (nothing measured yet) and the same spec run again continues it
    pause_by: float | None = None
    # this layout's fresh-model recall at this seed and protocol, measured already (a calibration run:
    # hlnas.search.calibration.calibrated_recall), taken instead of training it again; recall_from names that run
    recall: dict | None = None
    recall_from: str | None = None

    @property
    def layout(self) -> str:
        """The compact layout string: what the search loop dedupes by, and the trial's checkpoint folder."""
        return str(self.recipe.layout)


@dataclass(frozen=True)
class TrialResult:
    number: int
    status: str  # ok | failed | infeasible | paused (spec.pause_by passed before its recall model finished)
    metrics: dict = field(default_factory=dict)  # everything measured; goes to the trial's user attrs
    error_kind: str | None = None
    error: str | None = None
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _out_of_memory(e: BaseException) -> bool:
    """Whether ``e`` is the GPU running out of memory: the caching allocator's ``OutOfMemoryError``, or a CUDA call's
    own ``cudaErrorMemoryAllocation`` (``AcceleratorError: CUDA error: out of memory``, e.g. a graph or a library
    workspace, has been seen so). CUDA does not count that error as sticky: the process's
    context stays usable, so it is out of memory, not a poisoned worker."""
    import torch

    return isinstance(e, torch.OutOfMemoryError) or (isinstance(e, RuntimeError) and "CUDA error: out of memory" in str(e))


def _classify(e: BaseException) -> str:
    from hlnas.errors import ConfigError, DiskFull, KernelUnavailable, no_room

    if _out_of_memory(e):
        return "oom"
    if isinstance(e, DiskFull) or no_room(e) is not None:  # a full disk: every trial writing there fails
        return "disk"
    if isinstance(e, KernelUnavailable):
        return "kernel"
    if isinstance(e, ConfigError):
        return "config"
    if type(e).__name__ == "AcceleratorError" or "CUDA error" in str(e):
        return "cuda_error"  # sticky: this process's CUDA context is unusable; executors replace the worker
    return "other"


def run_trial(spec: TrialSpec) -> TrialResult:
    """``spec`` through the pipeline: its cost counted, then its recall stage (unless its recall is given) and its LM
    stage. A recall stage paused by ``pause_by`` comes back ``paused`` before its LM is trained."""
    from hlnas.pipeline.run import RecallPause, run

    t0 = time.perf_counter()
    # which process ran it and when (wall clock): shows long-lived workers and trials overlapping
    metrics: dict = {"worker_pid": os.getpid(), "started_at": time.time()}
    try:
        rung = spec.state_dir is not None and spec.rung_steps is not None  # a rung: the recall model alone, to its steps
        pause = None if spec.state_dir is None else RecallPause(spec.state_dir, spec.rung_steps, spec.pause_by)
        if spec.recall is not None:
            metrics["recall_from"] = spec.recall_from
        result = run(spec.recipe, out_dir=spec.out_dir, recall_only=spec.recall_only or rung, recall=spec.recall,
                     recall_pause=pause, kv_context=spec.kv_context)
        metrics.update(result.metrics, placement=spec.placement)
        if rung:
            metrics["rung_steps"] = spec.rung_steps
        elif spec.state_dir is not None and (result.status == "paused" or result.metrics.get("mqar_finished") is False):
            metrics.update(status="paused", finished_at=time.time())
            return TrialResult(spec.number, "paused", metrics, wall_s=time.perf_counter() - t0)
        if result.status != "ok":
            metrics.update(status=result.status, error_kind=result.error_kind, error=result.error, finished_at=time.time())
            return TrialResult(spec.number, result.status, metrics, result.error_kind, result.error, time.perf_counter() - t0)
        if isinstance(metrics.get("ruler"), dict):  # the per-length detail stays out of the study's attrs
            metrics["ruler"] = {k: metrics["ruler"][k] for k in ("tasks", "groups", "average") if k in metrics["ruler"]}
        metrics.update(status="ok", finished_at=time.time())
        return TrialResult(spec.number, "ok", metrics, wall_s=time.perf_counter() - t0)
    except Exception as e:  # a failing trial is data: record it, never kill the study
        return _failure(spec, metrics, e, t0)


def _failure(spec: TrialSpec, metrics: dict, e: Exception, t0: float) -> TrialResult:
    """A trial that raised, as data: its error kind and message, and what the cost model says of its layout (where
    the layout itself is not what failed)."""
    from hlnas.model.cost import layout_metrics

    try:
        metrics = {**layout_metrics(spec.layout, spec.recipe.model, spec.kv_context, spec.placement), **metrics}
    except Exception:  # noqa: BLE001 - the layout or config is what failed: the error below says so
        pass
    kind = _classify(e)
    status = "infeasible" if kind == "oom" else "failed"
    msg = f"{type(e).__name__}: {e}\n" + "".join(traceback.format_exception(e)[-3:])
    metrics.update(status=status, error_kind=kind, error=msg[-2000:], finished_at=time.time())
    return TrialResult(spec.number, status, metrics, kind, msg[-2000:], time.perf_counter() - t0)
