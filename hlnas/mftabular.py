"""A multi-fidelity tabular benchmark: replay stored recall curves through the search loop, with a simulated clock in
GPU-seconds and N asynchronous workers, to compare full-fidelity search against the rung scheduler (:mod:`hlnas.rungs`).

A :class:`CurveBenchmark` holds, per candidate layout of a space, its recall curve (``[[step, corrected recall],
...]`` at every check, up to the space's ``score.mqar.steps``), its KV-cache bytes, the GPU-seconds one recall
training step costs, and the fixed GPU-seconds of the rest of a whole trial (the LM half, paid at the top rung only).
:func:`run_multi_fidelity` runs :func:`hlnas.proposals.search_loop` (the search's own sampler settings, dedupe and
rung scheduler) on an in-memory study with a :class:`SimulatedExecutor`: ``submit`` schedules the trial on the
earliest free of N simulated workers for the steps it trains beyond its last pause, ``wait`` advances the clock to
the next finish. The hypervolume of the COMPLETE trials (recall vs KV bytes, scaled as in :mod:`hlnas.tabular`,
as a fraction of the whole table's) is recorded against GPU-seconds held (clock x workers). Stopped trials add no
volume: their values are partial.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import optuna

from hlnas.errors import ConfigError
from hlnas.proposals import search_loop
from hlnas.space import SearchSpace
from hlnas.tabular import TabularBenchmark
from hlnas.trial import TrialResult, TrialSpec

__all__ = ["CurveBenchmark", "SimulatedExecutor", "MFRun", "run_multi_fidelity", "curve_value", "hv_at", "svg_plot"]


def curve_value(curve: Sequence[Sequence[float]], steps: int) -> float:
    """The recall of the last check at or before ``steps`` (0 before the first check)."""
    v = 0.0
    for c in curve:
        if c[0] <= steps:
            v = float(c[1])
    return v


@dataclass(frozen=True, eq=False)
class CurveBenchmark:
    """``rows``: layout -> {"curve": [[step, recall], ...], "kv_cache_bytes": int, "s_per_step": float, "lm_s": float}."""

    name: str
    space: SearchSpace  # its score.mqar.steps is the top rung; its rungs section (if any) is replaced per run
    rows: Mapping[str, Mapping]

    def __post_init__(self) -> None:
        top = self.space.score.mqar.steps
        layouts = {str(self.space.layout(p)) for p in self.space.grid()}
        missing = sorted(layouts - set(self.rows))
        if missing:
            raise ConfigError(f"curve benchmark '{self.name}': {len(missing)} candidate(s) without a curve: {', '.join(missing[:5])}")
        for lay, row in self.rows.items():
            curve = row.get("curve") or []
            if not curve or curve[-1][0] < top:
                raise ConfigError(f"curve benchmark '{self.name}': the curve of {lay} ends before score.mqar.steps={top}")

    def final(self, scale: str = "front") -> TabularBenchmark:
        """The full-fidelity table (final recall, KV bytes): hypervolumes are scaled by its front (``scale="front"``,
        the ideal and nadir points: one good hybrid does not hold most of the volume) or the whole table."""
        top = self.space.score.mqar.steps
        rows = [{"layout": lay, "recall": curve_value(r["curve"], top), "kv_cache_bytes": r["kv_cache_bytes"]}
                for lay, r in self.rows.items()]
        return TabularBenchmark.from_rows(rows, space=self.space, name=self.name).with_scale(scale)


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
        row, top = self.bench.rows[spec.layout], self.bench.space.score.mqar.steps
        steps = spec.rung_steps or top
        before = self._trained.get(spec.layout, 0) if spec.state_dir is not None else 0
        cost = max(0, steps - before) * row["s_per_step"] + (row.get("lm_s", 0.0) if spec.rung_steps is None else 0.0)
        self._trained[spec.layout] = steps
        recall = curve_value(row["curve"], steps)
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
                       workers: int = 4, n_trials: int | None = None, label: str | None = None) -> MFRun:
    """One search over ``bench`` (``rungs``: ``{"min_steps", "eta"}`` turns the rung scheduler on) until ``n_trials``
    layouts are decided (default: all)."""
    import warnings

    from hlnas.samplers import make_sampler

    space = bench.space.with_overrides(rungs=dict(rungs) if rungs else None)
    table = bench.final()
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
        search_loop(study, space, ex, n_trials=n, seed=seed, objectives=("recall", "kv_cache_bytes"), on_event=record,
                    unique=table.n_candidates, rung_root="/nonexistent-simulated")
    optuna.logging.set_verbosity(level)
    return MFRun(label or sampler, seed, tuple(points), ex.clock * workers, len(done), counts["stopped"])


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
