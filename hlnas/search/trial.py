"""One search trial: layout -> cost -> model -> train -> score, as a picklable function.

``run_trial(TrialSpec) -> TrialResult`` never raises: a failure (NaN loss, out-of-memory, a kernel
that cannot run, any exception) comes back as a result with ``status`` and ``error_kind`` so the
study records it and goes on. Specs hold frozen config objects and results plain data (no tensors,
no optuna objects), so both pickle across process boundaries (Ray workers) unchanged.
"""

from __future__ import annotations

import dataclasses
import os
import time
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the recipe's config modules pull in torch; the driver imports them when it reads a space
    from hlnas.model.config import ModelConfig
    from hlnas.pipeline.recipe import RunConfig

__all__ = ["TrialSpec", "TrialResult", "run_trial", "recall_metrics", "ERROR_KINDS"]

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
    # other runs of the same model and recall settings (a calibration's other seeds of this layout, or with
    # --replicas family other layouts of its depth too: hlnas.search.calibration): the fresh-model recall of this spec
    # and of these is trained as replicas of one model (hlnas.recall.replicas), then each run goes on as it
    # would alone with its recall given (its LM half too, where it has one); their results come back in
    # TrialResult.replicas
    replicas: tuple[TrialSpec, ...] = ()
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
    replicas: tuple[TrialResult, ...] = ()  # the results of TrialSpec.replicas, in order

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def layout_metrics(layout_str: str, model: ModelConfig, kv_context: int, placement: str | None = None) -> dict:
    """:func:`hlnas.model.cost.layout_metrics` (imported when called: this module stays free of torch)."""
    from hlnas.model.cost import layout_metrics as cost_view

    return cost_view(layout_str, model, kv_context, placement)


def recall_metrics(scores: dict, sources=None) -> dict:
    """:func:`hlnas.recall.baselines.recall_metrics` (imported when called: this module stays free of torch)."""
    from hlnas.recall.baselines import recall_metrics as summary

    return summary(scores, sources)


def _out_of_memory(e: BaseException) -> bool:
    """Whether ``e`` is the GPU running out of memory: the caching allocator's ``OutOfMemoryError``, or a CUDA call's
    own ``cudaErrorMemoryAllocation`` (``AcceleratorError: CUDA error: out of memory``, e.g. a graph or a library
    workspace: one unit of the 2026-12-06 bench failed so). CUDA does not count that error as sticky: the process's
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
    """``spec`` and its :attr:`~TrialSpec.replicas`: with replicas, their recall halves first, as replicas of one model
    in ``spec``'s state folder (a unit paused by ``pause_by`` pauses whole, before any LM half is trained), then each
    run with its recall given; without, the one run trains its own recall."""
    t0 = time.perf_counter()
    specs = (spec, *spec.replicas)
    recall, why = [None] * len(specs), None
    if spec.replicas:
        try:
            recall = _replica_recall(spec)
        except Exception as e:  # each run trains its own recall, as without replicas
            why = f"{type(e).__name__}: {e}"[:500]
            if _classify(e) == "cuda_error":  # sticky: every run in this process would fail; the executor replaces it
                failed = [_failure(s, {"replicas_error": why}, e, t0) for s in specs]
                return dataclasses.replace(failed[0], replicas=tuple(failed[1:]))
    if any(r is not None and r.get("mqar_finished") is False for r in recall):  # paused: the next call continues them
        wall = time.perf_counter() - t0
        paused = [TrialResult(s.number, "paused", {"status": "paused", **r}, wall_s=wall) for s, r in zip(specs, recall)]
        return dataclasses.replace(paused[0], replicas=tuple(paused[1:]))
    recall_wall = time.perf_counter() - t0  # each run's recall took the unit's whole recall time, shared
    results = [_run_one(spec, recall[0]), *(_run_one(s, r) for s, r in zip(spec.replicas, recall[1:]))]
    if spec.replicas and why is None:  # the runs timed only their LM halves: their wall time includes their recall
        results = [dataclasses.replace(r, wall_s=r.wall_s + recall_wall) for r in results]
    if why is not None:
        results = [dataclasses.replace(r, metrics={**r.metrics, "replicas_error": why}) for r in results]
    return dataclasses.replace(results[0], replicas=tuple(results[1:]))


def _replica_recall(spec: TrialSpec) -> list[dict]:
    """The fresh-model recall of ``spec`` and of its replicas, trained as replicas of one model (one layout's seeds), or
    of one mixed model where their layouts differ (one depth): one result a run, in order. Out of GPU memory, the runs
    are split in two halves trained one after the other, and so on down to single runs (:func:`_in_halves`). Raises
    where replicas cannot train (a single run out of memory, a module with no replicated form, a replica with other
    model or recall settings): each run then trains alone."""
    from hlnas.errors import ConfigError

    for other in spec.replicas:
        if (other.recipe.model != spec.recipe.model or other.recipe.score.mqar != spec.recipe.score.mqar
                or other.recipe.layout.n_layers != spec.recipe.layout.n_layers or other.replicas):
            raise ConfigError(f"trial {other.number} does not share trial {spec.number}'s model, depth and recall "
                              "settings: it cannot be its replica")
    runs = [(s.recipe.layout, s.recipe.train.seed) for s in (spec, *spec.replicas)]
    with _paused(spec):
        return _in_halves(spec, runs, tag_layouts=len({lay for lay, _ in runs}) > 1)


def _in_halves(spec: TrialSpec, runs: list, tag_layouts: bool) -> list[dict]:
    """``runs`` (layout, seed) as replicas of one model; out of GPU memory, each half of them so (the first half, then
    the second: a family unit's seed-0 runs, then its seed-1 runs), and so on while more than one run is left. A run
    keeps its state files under any split: named by layout and seed where the unit has several layouts
    (``tag_layouts``), its optimizer state by parameter name."""
    import torch

    from hlnas.recall.replicas import train_mqar_layouts

    units: dict = {}  # layout -> its runs' seeds, in the order given
    for lay, seed in runs:
        units.setdefault(lay, []).append(seed)
    try:
        got = train_mqar_layouts(list(units.items()), spec.recipe.model, spec.recipe.score.mqar, tag_layouts=tag_layouts)
    except RuntimeError as e:  # OutOfMemoryError and AcceleratorError are RuntimeErrors
        if len(runs) == 1 or not _out_of_memory(e):
            raise
        torch.cuda.empty_cache()
        half = (len(runs) + 1) // 2
        return _in_halves(spec, runs[:half], tag_layouts) + _in_halves(spec, runs[half:], tag_layouts)
    by_run = {(lay, seed): r for (lay, seeds), rs in zip(units.items(), got) for seed, r in zip(seeds, rs)}
    return [by_run[run] for run in runs]


def _paused(spec: TrialSpec):
    """``paused_at`` over the spec's recall model when it has a state folder (else nothing)."""
    import contextlib

    if spec.state_dir is None:
        return contextlib.nullcontext()
    from hlnas.recall.proxy import paused_at

    os.makedirs(spec.state_dir, exist_ok=True)
    return paused_at(spec.state_dir, spec.rung_steps, spec.pause_by)


def _run_one(spec: TrialSpec, recall: dict | None = None) -> TrialResult:
    """One trial (``recall``: its fresh-model recall, already trained: see :func:`hlnas.pipeline.run.run`)."""
    t0 = time.perf_counter()
    # which process ran it and when (wall clock): shows long-lived Ray workers and trials overlapping
    metrics: dict = {"worker_pid": os.getpid(), "started_at": time.time()}
    try:
        from hlnas.pipeline.run import run

        metrics.update(layout_metrics(spec.layout, spec.recipe.model, spec.kv_context, spec.placement))
        # a rung trains the recall model alone, up to its steps, kept in state_dir (_paused)
        rung = spec.state_dir is not None and spec.rung_steps is not None
        if recall is None and spec.recall is not None:
            recall = spec.recall
            metrics["recall_from"] = spec.recall_from
        with _paused(spec):
            result = run(spec.recipe, out_dir=spec.out_dir, recall_only=spec.recall_only or rung, recall=recall)
        if rung:
            metrics["rung_steps"] = spec.rung_steps
        elif spec.state_dir is not None and result.status == "ok" and result.metrics.get("mqar_finished") is False:
            metrics.update(result.metrics, status="paused", finished_at=time.time())
            return TrialResult(spec.number, "paused", metrics, wall_s=time.perf_counter() - t0)
        metrics.update(result.metrics)
        if result.status != "ok":
            metrics.update(status=result.status, error_kind=result.error_kind, error=result.error, finished_at=time.time())
            return TrialResult(spec.number, result.status, metrics, result.error_kind, result.error, time.perf_counter() - t0)
        if isinstance(metrics.get("ruler"), dict):  # the per-length detail stays out of the study's attrs
            metrics["ruler"] = {k: metrics["ruler"][k] for k in ("tasks", "groups", "average") if k in metrics["ruler"]}
        metrics["status"] = "ok"
        metrics["finished_at"] = time.time()
        return TrialResult(spec.number, "ok", metrics, wall_s=time.perf_counter() - t0)
    except Exception as e:  # a failing trial is data: record it, never kill the study
        return _failure(spec, metrics, e, t0)


def _failure(spec: TrialSpec, metrics: dict, e: Exception, t0: float) -> TrialResult:
    kind = _classify(e)
    status = "infeasible" if kind == "oom" else "failed"
    msg = f"{type(e).__name__}: {e}\n" + "".join(traceback.format_exception(e)[-3:])
    metrics.update(status=status, error_kind=kind, error=msg[-2000:], finished_at=time.time())
    return TrialResult(spec.number, status, metrics, kind, msg[-2000:], time.perf_counter() - t0)
