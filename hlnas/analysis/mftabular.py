"""A multi-fidelity tabular benchmark: replay stored recall curves through the search loop, with a simulated clock in
GPU-seconds and N asynchronous workers, to compare full-fidelity search against the rung scheduler (:mod:`hlnas.search.rungs`).

A :class:`CurveBenchmark` holds, per candidate layout of a space, its recall curve (``[[step, corrected recall],
...]`` at every check, up to the space's ``score.mqar.steps``), its KV-cache bytes, the GPU-seconds one recall
training step costs, and the fixed GPU-seconds of the rest of a whole trial (the LM half, paid at the top rung only).
:func:`run_multi_fidelity` runs :func:`hlnas.search.loop.search_loop` (the search's own sampler settings, dedupe and
rung scheduler) on an in-memory study with a :class:`SimulatedExecutor`: ``submit`` schedules the trial on the
earliest free of N simulated workers for the steps it trains beyond its last pause, ``wait`` advances the clock to
the next finish. The hypervolume of the COMPLETE trials (recall vs KV bytes, scaled as in :mod:`hlnas.analysis.tabular`,
as a fraction of the whole table's) is recorded against GPU-seconds held (clock x workers). Stopped trials add no
volume: their values are partial.

:meth:`CurveBenchmark.from_study` reads the curves a stored study holds (``hlnas bench-samplers --study``): each
COMPLETE trial's kept recall run (:func:`hlnas.search.rungs.kept_run`: ``curve`` = ``[[step, val_acc, loss], ...]``)
corrected for its ``mqar_val_baseline`` (:func:`hlnas.search.rungs.checks`), its measured seconds, and the trial's stored
``recall`` at the top rung (see :func:`stored_row`). :func:`compare_mf` runs several methods over seeds and
:func:`write_mf_outputs` writes the table, the CSV and the figure.
"""

from __future__ import annotations

import heapq
import math
import os
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import optuna

from hlnas.errors import ConfigError, did_you_mean
from hlnas.metrics import RECALL_OBJECTIVES
from hlnas.outputs import write_atomic
from hlnas.search.rungs import checks, kept_run
from hlnas.search.loop import LoopSettings, search_loop
from hlnas.space import SearchSpace, space_from_dict
from hlnas.analysis.tabular import TabularBenchmark
from hlnas.search.trial import TrialResult, TrialSpec

__all__ = ["CurveBenchmark", "SimulatedExecutor", "MFRun", "run_multi_fidelity", "curve_value", "auc_at", "hv_at", "svg_plot",
           "stored_row", "default_rungs", "MFComparison", "compare_mf", "write_mf_outputs"]


def curve_value(curve: Sequence[Sequence[float]], steps: int) -> float:
    """The recall of the last check at or before ``steps`` (0 before the first check)."""
    v = 0.0
    for c in curve:
        if c[0] <= steps:
            v = float(c[1])
    return v


def auc_at(curve: Sequence[Sequence[float]], steps: int, held: bool) -> float:
    """The graded measure a run reports after ``steps`` steps (a rung's ``recall_auc``, as :func:`hlnas.search.rungs.checks`
    computes it): the area under its corrected recall ``curve`` (``[[step, recall], ...]``, 0 at step 0, linear
    between checks) up to ``steps``, over ``steps``; ``held``: a run stopped at its target keeps its last value
    after its last check, others add nothing there: :func:`hlnas.recall.proxy.learning_auc` over ``steps`` of an
    already corrected curve (baseline 0), so the measure is defined in one place."""
    from hlnas.recall.proxy import learning_auc

    return learning_auc([c for c in curve if c[0] <= steps], steps, 0.0, held) if steps > 0 else 0.0


def stored_row(attrs: Mapping, top: int) -> dict | None:
    """A curve-table row from a COMPLETE trial's user attrs (None without a recall run): ``curve`` is the kept
    run's corrected recall per check (:func:`hlnas.search.rungs.checks`), held at its last check to ``top`` (a run
    stopped at its target trains no more), and at ``top`` the trial's stored ``recall`` objective (the test-set
    score the study's front holds; the checks are on the validation instances); ``steps_run`` the steps the run
    trained; ``s_per_step`` its recall seconds (``mqar_s``: every rate trained and the test scoring) per step of the
    kept run, so a whole replay costs what the trial's recall half cost; ``lm_s`` the rest of the trial's
    ``wall_s`` (the LM half, paid at the top rung); ``recall_auc`` the trial's stored graded measure (None if it has
    none) and ``held`` whether its run stopped at its target, for a study that optimizes ``recall_auc``."""
    run, cs = kept_run(attrs), checks(attrs)
    if run is None or not cs:
        return None
    steps = int(run.get("steps") or cs[-1]["step"])
    recall_s = float(attrs.get("mqar_s") or run.get("wall_s") or 0.0)
    curve = [[c["step"], c["recall"]] for c in cs if c["step"] < top]
    final = attrs.get("recall")
    curve.append([top, float(final) if isinstance(final, (int, float)) else cs[-1]["recall"]])
    auc = attrs.get("recall_auc")
    return {"curve": curve, "steps_run": min(steps, top), "s_per_step": recall_s / max(1, steps),
            "lm_s": max(0.0, float(attrs.get("wall_s") or 0.0) - recall_s), "kv_cache_bytes": attrs["kv_cache_bytes"],
            "recall_auc": float(auc) if isinstance(auc, (int, float)) else None,
            "held": attrs.get("mqar_steps_to_target") is not None}


@dataclass(frozen=True, eq=False)
class CurveBenchmark:
    """``rows``: layout -> {"curve": [[step, recall], ...], "kv_cache_bytes": int, "s_per_step": float, "lm_s": float,
    optional "steps_run": the steps the run trained (a run stopped at its target costs no more; default the top)}.
    ``missing="infeasible"``: a candidate without a row is answered infeasible (not trained, no cost, no volume).
    ``metric``: what the replay's recall objective measures, the study's own (:meth:`value`): ``recall`` (the curve)
    or ``recall_auc`` (the graded measure: :func:`auc_at` of the curve at a rung, the row's stored ``recall_auc`` at
    the top; rows then also hold "recall_auc" and "held", as :func:`stored_row` writes them)."""

    name: str
    space: SearchSpace  # its score.mqar.steps is the top rung; its rungs section (if any) is replaced per run
    rows: Mapping[str, Mapping]
    missing: str = "error"
    source: str = ""
    unit: str = "GPU-s"  # what the rows' seconds are: "CPU worker-s" for a study trained on CPUs
    metric: str = "recall"

    def __post_init__(self) -> None:
        top = self.space.score.mqar.steps
        if self.metric not in RECALL_OBJECTIVES:
            raise ConfigError(f"curve benchmark '{self.name}': metric {self.metric!r} is not allowed; allowed: "
                              f"{', '.join(RECALL_OBJECTIVES)}")
        layouts = {str(self.space.layout(p)) for p in self.space.grid()}
        missing = sorted(layouts - set(self.rows))
        if missing and self.missing != "infeasible":
            raise ConfigError(f"curve benchmark '{self.name}': {len(missing)} candidate(s) without a curve: {', '.join(missing[:5])}"
                              " (--missing infeasible answers them as not trainable)")
        for lay, row in self.rows.items():
            curve = row.get("curve") or []
            if not curve or curve[-1][0] < top:
                raise ConfigError(f"curve benchmark '{self.name}': the curve of {lay} ends before score.mqar.steps={top}")
            if self.metric == "recall_auc" and row.get("recall_auc") is None:
                raise ConfigError(f"curve benchmark '{self.name}': {lay}'s trial stored no recall_auc to replay")

    def value(self, row: Mapping, steps: int) -> float:
        """``row``'s recall objective after ``steps`` recall-model steps (see :attr:`metric`)."""
        top = self.space.score.mqar.steps
        if self.metric == "recall":
            return curve_value(row["curve"], steps)
        if steps >= top:
            return row["recall_auc"]
        # held only once the run has stopped at its target: before that it reports what it has, as a paused run does
        held = row.get("held", False) and row.get("steps_run", top) <= steps
        return auc_at([c for c in row["curve"] if c[0] < top], steps, held)

    @classmethod
    def from_study(cls, study: optuna.Study, *, missing: str = "error") -> "CurveBenchmark":
        """The curves a stored hlnas study holds (:func:`stored_row` of each layout's first COMPLETE trial; reused
        results and stopped or failed trials give none), over the study's stored space."""
        if "hlnas_space" not in study.user_attrs:
            raise ConfigError(f"study '{study.study_name}' holds no hlnas_space attribute: not an hlnas search study")
        space = space_from_dict(study.user_attrs["hlnas_space"], where=f"study '{study.study_name}'")
        if "mqar" not in space.score.objectives:
            raise ConfigError(f"study '{study.study_name}': its space trains no recall model (score.objectives has no "
                              "'mqar'), so its trials store no recall curves to replay")
        top = space.score.mqar.steps
        rows: dict[str, dict] = {}
        complete = optuna.trial.TrialState.COMPLETE
        for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
            a = t.user_attrs
            if t.state != complete or a.get("reused_from") is not None or a.get("layout") in rows or not a.get("layout"):
                continue
            row = stored_row(a, top)
            if row is not None:
                rows[a["layout"]] = row
        wanted = {str(space.layout(p)) for p in space.grid()}
        lacking = sorted(wanted - set(rows))
        if lacking and missing != "infeasible":
            pruned = any(t.state == optuna.trial.TrialState.PRUNED for t in study.get_trials(deepcopy=False))
            raise ConfigError(f"study '{study.study_name}': {len(lacking)} of its space's {len(wanted)} candidates have no "
                              f"complete trial with a recall curve: {', '.join(lacking[:5])}"
                              + (" (stopped rung trials hold partial curves only)" if pruned else "")
                              + "; finish the study (hlnas search --resume) or pass --missing infeasible")
        devices = {str(t.user_attrs.get("device", "")).split(":")[0] for t in study.get_trials(deepcopy=False, states=(complete,))}
        metric = next((o.metric for o in space.objectives if o.metric in RECALL_OBJECTIVES), "recall")
        return cls(study.study_name, space, {k: v for k, v in rows.items() if k in wanted}, missing=missing,
                   source=f"study '{study.study_name}'", unit="CPU worker-s" if devices == {"cpu"} else "GPU-s",
                   metric=metric)

    def final(self, scale: str = "front") -> TabularBenchmark:
        """The full-fidelity table (final recall, KV bytes): hypervolumes are scaled by its front (``scale="front"``,
        the ideal and nadir points: one good hybrid does not hold most of the volume) or the whole table."""
        top = self.space.score.mqar.steps
        rows = [{"layout": lay, "recall": self.value(r, top), "kv_cache_bytes": r["kv_cache_bytes"]}
                for lay, r in self.rows.items()]
        return TabularBenchmark.from_rows(rows, space=self.space, name=self.name, missing=self.missing).with_scale(scale)

    def describe(self) -> str:
        top = self.space.score.mqar.steps
        stopped = sum(r.get("steps_run", top) < top for r in self.rows.values())
        recall_s = sum(r.get("steps_run", top) * r["s_per_step"] for r in self.rows.values())
        lm_s = sum(r.get("lm_s", 0.0) for r in self.rows.values())
        return (f"{self.source or self.name}: {len(self.rows)} candidates with curves, recall budget {top} steps "
                f"({stopped} stopped at their target before it); whole trials {recall_s + lm_s:,.0f} {self.unit} "
                f"(recall {recall_s:,.0f}, LM {lm_s:,.0f})")


class SimulatedExecutor:
    """Trials answered from the curves, finishing on a simulated clock over ``workers`` asynchronous workers."""

    def __init__(self, bench: CurveBenchmark, workers: int) -> None:
        self.bench, self.capacity = bench, workers
        self.clock = 0.0
        self._heap: list = []  # (finish time, seq, result)
        self._seq = 0
        self._trained: dict[str, int] = {}  # layout -> recall steps trained so far (paused runs continue)
        self.busy_s = 0.0

    def submit(self, spec: TrialSpec) -> None:
        if len(self._heap) >= self.capacity:
            raise ConfigError("no idle simulated worker; wait() first")
        row, top = self.bench.rows.get(spec.layout), self.bench.space.score.mqar.steps
        if row is None:  # missing="infeasible": a candidate the stored study could not train
            heapq.heappush(self._heap, (self.clock, self._seq, TrialResult(
                spec.number, "infeasible", {"status": "infeasible", "error_kind": "no_row",
                                            "error": f"no stored curve of {spec.layout}"}, "no_row", "no stored curve")))
            self._seq += 1
            return
        steps = spec.rung_steps or top
        before = self._trained.get(spec.layout, 0) if spec.state_dir is not None else 0
        run = row.get("steps_run", top)  # a run stopped at its target trains no further, whatever the rung asks
        cost = max(0, min(steps, run) - min(before, run)) * row["s_per_step"] + (row.get("lm_s", 0.0) if spec.rung_steps is None else 0.0)
        self._trained[spec.layout] = steps
        recall = self.bench.value(row, steps)
        m = {"recall": recall, "kv_cache_bytes": row["kv_cache_bytes"], "status": "ok",
             "mqar_val_baseline": 0.0, "mqar_lr": 0.0,
             "mqar": {"runs": [{"lr": 0.0, "curve": [c for c in row["curve"] if c[0] <= steps]}]}}
        if spec.rung_steps is not None:
            m["rung_steps"] = spec.rung_steps
        self.busy_s += cost
        heapq.heappush(self._heap, (self.clock + cost, self._seq, TrialResult(spec.number, "ok", m, wall_s=cost)))
        self._seq += 1

    def wait(self, timeout: float | None = None) -> list[TrialResult]:
        if not self._heap:
            return []
        t, _, result = heapq.heappop(self._heap)
        self.clock = t
        return [result]

    def in_flight(self) -> int:
        return len(self._heap)

    def shutdown(self) -> None:
        pass


@dataclass(frozen=True)
class MFRun:
    method: str
    seed: int
    points: tuple[tuple[float, float], ...]  # (GPU-seconds held, hypervolume fraction) after each COMPLETE trial
    gpu_s: float  # GPU-seconds held at the end
    complete: int
    stopped: int


def run_multi_fidelity(bench: CurveBenchmark, sampler: str = "nsga2", *, rungs: Mapping | None = None, seed: int = 0,
                       workers: int = 4, n_trials: int | None = None, label: str | None = None,
                       scale: str = "front") -> MFRun:
    """One search over ``bench`` (``rungs``: ``{"min_steps", "eta"}`` turns the rung scheduler on) until ``n_trials``
    layouts are decided (default: all)."""
    import warnings

    from hlnas.search.samplers import make_sampler

    space = bench.space.with_overrides(rungs=dict(rungs) if rungs else None)
    table = bench.final(scale)
    n = n_trials or table.n_candidates
    ex = SimulatedExecutor(bench, workers)
    points: list[tuple[float, float]] = []
    done: list[str] = []
    counts = {"stopped": 0}

    def record(kind: str, data: dict) -> None:
        if kind == "finished" and data["status"] == "ok":
            done.append(data["layout"])
            points.append((ex.clock * workers, table.hypervolume(done) / table.max_hypervolume))
        elif kind == "stopped":
            counts["stopped"] += 1

    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study = optuna.create_study(directions=["maximize", "minimize"], sampler=make_sampler(sampler, seed, 2))
        study.set_user_attr("hlnas_objectives", [{"name": "recall", "metric": "recall", "direction": "maximize"},
                                                 {"name": "kv_cache", "metric": "kv_cache_bytes", "direction": "minimize"}])
        search_loop(study, space, ex, LoopSettings(n_trials=n, seed=seed, objectives=("recall", "kv_cache_bytes"),
                                                   on_event=record, unique=table.n_candidates,
                                                   rung_root="/nonexistent-simulated"))
    optuna.logging.set_verbosity(level)
    return MFRun(label or sampler, seed, tuple(points), ex.clock * workers, len(done), counts["stopped"])


def _measure(metric: str) -> str:
    return ("recall_auc (the study's recall objective: the graded measure, over a rung's steps below the top)"
            if metric == "recall_auc" else "recall")


def hv_at(run: MFRun, gpu_s: float) -> float:
    """The run's hypervolume once ``gpu_s`` GPU-seconds were held (0 before its first complete trial)."""
    v = 0.0
    for t, h in run.points:
        if t <= gpu_s + 1e-9:
            v = h
    return v


def svg_plot(curves: Mapping[str, tuple[Sequence[float], Sequence[float], Sequence[float]]], *, title: str,
             xlabel: str, ylabel: str, width: int = 720, height: int = 420) -> str:
    """A self-contained SVG of mean curves with +-std bands: ``curves[label] = (xs, means, stds)``."""
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"]
    x_max = max(max(xs) for xs, _, _ in curves.values()) or 1.0
    L, R, T, B = 60, 170, 30, 45
    pw, ph = width - L - R, height - T - B

    def px(x: float) -> float:
        return L + pw * x / x_max

    def py(y: float) -> float:
        return T + ph * (1 - max(0.0, min(1.05, y)) / 1.05)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{L}" y="18" font-size="14">{title}</text>',
           f'<line x1="{L}" y1="{T + ph}" x2="{L + pw}" y2="{T + ph}" stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{T + ph}" stroke="black"/>',
           f'<text x="{L + pw / 2}" y="{height - 8}" text-anchor="middle">{xlabel}</text>',
           f'<text x="14" y="{T + ph / 2}" transform="rotate(-90 14 {T + ph / 2})" text-anchor="middle">{ylabel}</text>']
    for i in range(6):
        y = i * 0.2
        out.append(f'<text x="{L - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:.1f}</text>')
        out.append(f'<line x1="{L}" y1="{py(y):.1f}" x2="{L + pw}" y2="{py(y):.1f}" stroke="#eee"/>')
    step = 10 ** math.floor(math.log10(x_max)) if x_max > 0 else 1
    k = 0.0
    while k <= x_max:
        out.append(f'<text x="{px(k):.1f}" y="{T + ph + 16}" text-anchor="middle">{k:g}</text>')
        k += step if x_max / step <= 10 else 2 * step
    for j, (label, (xs, ms, ss)) in enumerate(curves.items()):
        c = colors[j % len(colors)]
        upper = " ".join(f"{px(x):.1f},{py(m + s):.1f}" for x, m, s in zip(xs, ms, ss))
        lower = " ".join(f"{px(x):.1f},{py(m - s):.1f}" for x, m, s in reversed(list(zip(xs, ms, ss))))
        out.append(f'<polygon points="{upper} {lower}" fill="{c}" fill-opacity="0.15" stroke="none"/>')
        line = " ".join(f"{px(x):.1f},{py(m):.1f}" for x, m in zip(xs, ms))
        out.append(f'<polyline points="{line}" fill="none" stroke="{c}" stroke-width="2"/>')
        out.append(f'<line x1="{L + pw + 10}" y1="{T + 10 + 18 * j}" x2="{L + pw + 30}" y2="{T + 10 + 18 * j}" stroke="{c}" stroke-width="2"/>')
        out.append(f'<text x="{L + pw + 35}" y="{T + 14 + 18 * j}">{label}</text>')
    out.append("</svg>")
    return "\n".join(out)


# -- comparing methods over seeds -------------------------------------------------------------------------------


def default_rungs(space: SearchSpace, eta: int = 3) -> dict:
    """The space's ``rungs`` section, else three rungs: ``min_steps`` the smallest check at or above
    ``score.mqar.steps / eta**2``."""
    if space.rungs is not None:
        return space.rungs.to_dict()
    m = space.score.mqar
    every = m.eval_every
    min_steps = max(every, math.ceil(m.steps / eta**2 / every) * every)
    if min_steps >= m.steps:
        raise ConfigError(f"score.mqar.steps={m.steps} leaves no rung below it at eval_every={every}; pass --min-steps")
    return {"min_steps": min_steps, "eta": eta}


@dataclass(frozen=True)
class MFComparison:
    """Runs of several methods (label -> (sampler, rungs or None)) over seeds on one curve benchmark.
    ``reference``: the method whose mean final hypervolume sets the 95% mark and whose GPU-seconds the ratios use."""

    bench: CurveBenchmark
    methods: Mapping[str, tuple[str, Mapping | None]]
    runs: Mapping[str, tuple[MFRun, ...]]
    workers: int
    scale: str
    reference: str
    fraction: float = 0.95
    seeds: tuple[int, ...] = field(default=())

    def grid(self, n: int = 200) -> list[float]:
        x_max = max(r.gpu_s for rs in self.runs.values() for r in rs)
        return [x_max * i / n for i in range(n + 1)]

    def curves(self, n: int = 200) -> dict[str, tuple[list[float], list[float], list[float]]]:
        """label -> (GPU-seconds, mean hypervolume, std over seeds) on a common grid."""
        xs, out = self.grid(n), {}
        for label, rs in self.runs.items():
            cols = [[hv_at(r, x) for r in rs] for x in xs]
            out[label] = (xs, [statistics.fmean(c) for c in cols], [statistics.pstdev(c) for c in cols])
        return out

    def summary(self) -> list[dict]:
        """Per method: final hypervolume and GPU-seconds to finish (mean, std), GPU-seconds to reach ``fraction`` of
        the reference's mean final hypervolume (mean, std over the runs that did, how many did), that over the
        reference's own time to it and over the reference's total, and trials complete / stopped."""
        ref = self.runs[self.reference]
        mark = self.fraction * statistics.fmean(r.points[-1][1] if r.points else 0.0 for r in ref)
        ref_total = statistics.fmean(r.gpu_s for r in ref)

        def reach(r: MFRun) -> float | None:
            return next((t for t, h in r.points if h >= mark - 1e-12), None)

        ref_reach = [t for t in map(reach, ref) if t is not None]
        ref_t = statistics.fmean(ref_reach) if ref_reach else math.nan
        rows = []
        for label, rs in self.runs.items():
            final = [r.points[-1][1] if r.points else 0.0 for r in rs]
            got = [t for t in map(reach, rs) if t is not None]
            t = statistics.fmean(got) if got else math.nan
            rows.append({"method": label, "hv_final": statistics.fmean(final), "hv_final_std": statistics.pstdev(final),
                         "gpu_s": statistics.fmean(r.gpu_s for r in rs), "gpu_s_std": statistics.pstdev(r.gpu_s for r in rs),
                         "gpu_s_to_mark": t, "gpu_s_to_mark_std": statistics.pstdev(got) if got else math.nan,
                         "reached": len(got), "runs": len(rs), "vs_reference_time": t / ref_t if ref_t else math.nan,
                         "vs_reference_total": t / ref_total if ref_total else math.nan,
                         "complete": statistics.fmean(r.complete for r in rs), "stopped": statistics.fmean(r.stopped for r in rs)})
        return rows


def compare_mf(bench: CurveBenchmark, methods: Mapping[str, tuple[str, Mapping | None]], seeds: int = 20, *,
               workers: int = 4, n_trials: int | None = None, scale: str = "front", reference: str | None = None,
               on_run: Callable[[MFRun], None] | None = None) -> MFComparison:
    """Every method over seeds ``0..seeds-1``; ``reference`` defaults to the first full-fidelity method."""
    if not methods:
        raise ConfigError("compare_mf needs at least one method")
    if reference is None:
        reference = next((m for m, (_, r) in methods.items() if not r), next(iter(methods)))
    if reference not in methods:
        raise ConfigError(f"reference '{reference}' is not one of the methods.{did_you_mean(reference, list(methods))}")
    runs = {}
    for label, (sampler, rungs) in methods.items():
        out = []
        for seed in range(seeds):
            out.append(run_multi_fidelity(bench, sampler, rungs=rungs, seed=seed, workers=workers, n_trials=n_trials,
                                          label=label, scale=scale))
            if on_run is not None:
                on_run(out[-1])
        runs[label] = tuple(out)
    return MFComparison(bench, dict(methods), runs, workers, scale, reference, seeds=tuple(range(seeds)))


def _f(v: float, spec: str = ",.0f") -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def write_mf_outputs(result: MFComparison, out: str, *, command: str = "", notes: Sequence[str] = ()) -> list[str]:
    """``OUT.md`` (the table), ``OUT.csv`` (mean and std curves) and ``OUT.svg`` (the figure); ``out`` is a path
    without its extension. Returns the paths written."""
    unit = result.bench.unit
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    curves = result.curves()
    # each file whole or not at all (a full disk: one DiskFull line naming it)
    write_atomic(out + ".csv", "method,gpu_s,hv_mean,hv_std\n" + "".join(
        f"{label},{x:.1f},{m:.4f},{s:.4f}\n" for label, (xs, ms, ss) in curves.items() for x, m, s in zip(xs, ms, ss)))
    n = len(result.seeds)
    write_atomic(out + ".svg", svg_plot(
        curves, title=f"{result.bench.name}: hypervolume vs simulated {unit} ({n} seeds, {result.workers} workers)",
        xlabel=f"{unit} held (simulated)", ylabel="hypervolume (fraction of table)"))
    pct = f"{result.fraction:.0%}"
    lines = [f"| {r['method']} | {r['hv_final']:.3f} ± {r['hv_final_std']:.3f} | {_f(r['gpu_s'])} ± {_f(r['gpu_s_std'])} | "
             f"{_f(r['gpu_s_to_mark'])} ± {_f(r['gpu_s_to_mark_std'])} ({r['reached']}/{r['runs']}) | "
             f"{_f(r['vs_reference_time'], '.2f')} | {_f(r['vs_reference_total'], '.2f')} | {r['complete']:.1f} / {r['stopped']:.1f} |"
             for r in result.summary()]
    rungs = sorted({f"min_steps {r['min_steps']}, eta {r['eta']}" for _, r in result.methods.values() if r})
    md = [f"# Multi-fidelity tabular benchmark: {result.bench.name}", "",
          *( [f"Written by `{command}`.", ""] if command else []),
          f"{result.bench.describe()}.", "",
          f"{len(result.bench.rows)} candidates with curves; {result.workers} asynchronous simulated workers; rungs at "
          f"{'; '.join(rungs) or 'none'}; hypervolume of {_measure(result.bench.metric)} vs KV-cache bytes of the COMPLETE trials (stopped ones add "
          f"none), scaled by the {'table' if result.scale == 'table' else 'front'}, as a fraction of the whole table's. "
          f"Mean ± std over {n} seeds.", "",
          f"| method | final HV | {unit} to finish | {unit} to {pct} of {result.reference}'s final HV (runs reaching it) | "
          f"that / {result.reference}'s time to it | that / {result.reference}'s {unit} to finish | complete / stopped |",
          "|---|---|---|---|---|---|---|", *lines, "", *notes, *([""] if notes else []),
          f"![]({os.path.basename(out)}.svg)", ""]
    write_atomic(out + ".md", "\n".join(md))
    return [out + ".md", out + ".csv", out + ".svg"]
