"""Pareto fronts and hypervolume of an hlnas study, computed from trial records (no plotting).

A study is opened with :func:`open_storage` / :func:`load_study` (errors that name the bad URL or
study and what is allowed) and read only through optuna's public API (:func:`study_data`); the rest works on
:class:`TrialRecord`, a plain view of one ``FrozenTrial`` and the user attrs the study loop writes
(``layout``, ``recall``, ``kv_cache_bytes``, ``val_loss``, ``status``, ...).

Each trial falls in one bucket:

* ``failed``: optuna state FAIL or ``status == "failed"`` (no usable metrics);
* ``infeasible``: ``status == "infeasible"`` or a constraint value > 0 (optuna's rule: <= 0 is feasible);
* ``unscored``: COMPLETE and feasible but a requested metric is missing or not finite;
* ``front`` / ``dominated``: the rest, split by Pareto dominance.

Trials still RUNNING/WAITING and PRUNED trials are left out, and so are reused copies (``reused_from``:
the study loop tells a re-proposed layout the result of the trial that trained it), which would only
repeat that trial's point. Ties: two trials with equal values do not dominate each other, so both stay
on the front (optuna's ``best_trials`` does the same).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import optuna

import hlnas.metrics as metric_table
from hlnas.search.storage import ALLOWED_SCHEMES, StorageError, UnknownStudyError, load_study, open_storage  # noqa: F401  (re-exported)
from hlnas.overrides import is_number


__all__ = [
    "StorageError", "UnknownStudyError", "ALLOWED_SCHEMES", "open_storage", "load_study", "TrialRecord", "StudyData",
    "ParetoInfo", "METRIC_DIRECTIONS", "records", "study_data", "pareto_info", "front", "dominates", "hypervolume",
    "hypervolume_history",
]  # fmt: skip

#: Direction of the trial metrics the study loop records, used when a caller names no direction (hlnas.metrics).
METRIC_DIRECTIONS = metric_table.directions()
DIRECTIONS = ("minimize", "maximize")

_STATES = {
    optuna.trial.TrialState.COMPLETE: "complete",
    optuna.trial.TrialState.FAIL: "fail",
    optuna.trial.TrialState.PRUNED: "pruned",
    optuna.trial.TrialState.RUNNING: "running",
    optuna.trial.TrialState.WAITING: "waiting",
}


@dataclass(frozen=True)
class TrialRecord:
    """One trial as the figures see it. ``values`` are the study's objective values (None unless COMPLETE)."""

    number: int
    state: str  # complete | fail | pruned | running | waiting
    values: tuple[float, ...] | None = None
    attrs: Mapping[str, Any] = field(default_factory=dict)
    constraints: tuple[float, ...] = ()
    objective_names: tuple[str, ...] = ()

    @property
    def layout(self) -> str:
        return str(self.attrs.get("layout") or "")

    @property
    def status(self) -> str:
        """ok | failed | infeasible | stopped | pending; the study loop's ``status`` attr wins over optuna's state
        (``stopped``: the rung scheduler stopped it early, its values partial)."""
        status = self.attrs.get("status")
        if status in ("failed", "infeasible"):
            return status
        if self.state == "pruned":
            return "stopped"
        if self.state == "fail":
            return "failed"
        if self.state != "complete":
            return "pending"
        if any(c > 0 for c in self.constraints):
            return "infeasible"
        return "ok"

    def metric(self, name: str) -> float | None:
        """An objective value by metric name, else a numeric user attr; None when absent or not a number."""
        if self.values is not None and name in self.objective_names:
            value = self.values[self.objective_names.index(name)]
        else:
            value = self.attrs.get(name)
        if not is_number(value):
            return None
        return float(value)


def _direction(d: Any) -> str:
    name = d.name.lower() if hasattr(d, "name") else str(d).lower()
    if name not in DIRECTIONS:
        raise ValueError(f"direction {d!r} is not allowed; allowed: {', '.join(DIRECTIONS)}")
    return name


def _record(trial: Any, objective_names: Sequence[str]) -> TrialRecord:
    if isinstance(trial, TrialRecord):
        return trial
    constraints = trial.constraints
    if isinstance(constraints, Mapping):
        constraints = list(constraints.values())
    values = tuple(float(v) for v in trial.values) if trial.values is not None else None
    return TrialRecord(
        number=trial.number,
        state=_STATES.get(trial.state, str(trial.state).lower()),
        values=values if trial.state == optuna.trial.TrialState.COMPLETE else None,
        attrs=dict(trial.user_attrs),
        constraints=tuple(float(c) for c in constraints or ()),
        objective_names=tuple(objective_names),
    )


def records(trials: Iterable[Any], objective_names: Sequence[str] = ()) -> tuple[TrialRecord, ...]:
    """``FrozenTrial`` s (or records) to records, sorted by trial number."""
    return tuple(sorted((_record(t, objective_names) for t in trials), key=lambda r: r.number))


# -- reading a study ---------------------------------------------------------------------





@dataclass(frozen=True)
class StudyData:
    """What the figures and the report need from one study, read once through optuna's public API."""

    name: str
    directions: tuple[str, ...]
    objective_names: tuple[str, ...]
    records: tuple[TrialRecord, ...]
    user_attrs: Mapping[str, Any] = field(default_factory=dict)

    @functools.cached_property
    def stored_space(self):
        """The study's search space (``hlnas_space``) read as hlnas reads it everywhere, once per StudyData; None where
        the study holds none. A stored space that no longer parses raises what :func:`hlnas.space.space_from_dict`
        raises."""
        from hlnas.space import space_from_dict  # imports torch: only when a figure asks

        stored = self.user_attrs.get("hlnas_space")
        return None if stored is None else space_from_dict(stored, where=f"study '{self.name}'")

    @functools.cached_property
    def paper_grid(self) -> bool:
        """Whether the paper's numbers may be overlaid: the stored space's ``is_paper_grid``, judged again because
        studies created before that rule stored ``hlnas_paper_grid`` by the space's name; the stored attr only when
        the study holds no space or one that no longer parses."""
        from hlnas.errors import HlnasError

        if isinstance(self.user_attrs.get("hlnas_space"), Mapping):
            try:
                return self.stored_space.is_paper_grid
            except (HlnasError, TypeError, ValueError):
                pass
        return bool(self.user_attrs.get("hlnas_paper_grid", False))

    @property
    def kv_context(self) -> int | None:
        return self.user_attrs.get("hlnas_kv_context")

    @property
    def is_hlnas(self) -> bool:
        return "hlnas_version" in self.user_attrs

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.records)

    def objective_metric(self, name: str) -> str:
        """The metric behind the objective called ``name`` (``hlnas_objectives``: a space may measure its ``recall``
        objective by ``recall_auc``); ``name`` itself when the study does not say."""
        for o in self.user_attrs.get("hlnas_objectives") or []:
            if isinstance(o, dict) and o.get("name") == name and name in self.objective_names:
                return o.get("metric") or name
        return name


def study_data(study: optuna.Study) -> StudyData:
    directions = tuple(_direction(d) for d in study.directions)
    attrs = dict(study.user_attrs)
    names = list(study.metric_names or [])
    if not names or None in names:
        objectives = attrs.get("hlnas_objectives") or []
        names = [o.get("name") for o in objectives] if len(objectives) == len(directions) else []
    if len(names) != len(directions):
        names = [f"objective_{i}" for i in range(len(directions))]
    trials = study.get_trials(deepcopy=False)
    return StudyData(study.study_name, directions, tuple(names), records(trials, names), attrs)


def dominates(a: Sequence[float], b: Sequence[float], directions: Sequence[str]) -> bool:
    """True when ``a`` is at least as good as ``b`` everywhere and strictly better somewhere."""
    better = False
    for x, y, d in zip(a, b, directions):
        if d == "maximize":
            x, y = -x, -y
        if x > y:
            return False
        better = better or x < y
    return better


class ParetoInfo(NamedTuple):
    """Trials split for a front over ``metrics`` (one direction each); ``front`` is sorted by the first metric."""

    metrics: tuple[str, ...]
    directions: tuple[str, ...]
    front: tuple[TrialRecord, ...]
    dominated: tuple[TrialRecord, ...]
    infeasible: tuple[TrialRecord, ...]
    failed: tuple[TrialRecord, ...]
    unscored: tuple[TrialRecord, ...]

    def point(self, rec: TrialRecord) -> tuple[float | None, ...]:
        return tuple(rec.metric(m) for m in self.metrics)


def _split(recs: Sequence[TrialRecord], metrics: tuple[str, ...], dirs: tuple[str, ...], getter) -> ParetoInfo:
    failed, infeasible, unscored, scored = [], [], [], []
    for r in recs:
        if r.attrs.get("reused_from") is not None:
            continue
        status = r.status
        if status == "failed":
            failed.append(r)
        elif status == "infeasible":
            infeasible.append(r)
        elif status == "ok":
            p = getter(r)
            if any(v is None or not math.isfinite(v) for v in p):
                unscored.append(r)
            else:
                scored.append((r, p))
    on_front, dominated = [], []
    for r, p in scored:
        (dominated if any(dominates(q, p, dirs) for _, q in scored) else on_front).append((r, p))
    on_front.sort(key=lambda rp: (rp[1], rp[0].number))
    return ParetoInfo(metrics, dirs, tuple(r for r, _ in on_front), tuple(r for r, _ in dominated),
                      tuple(infeasible), tuple(failed), tuple(unscored))  # fmt: skip


def pareto_info(
    trials: Iterable[Any],
    directions: Sequence[Any] | None = None,
    x_metric: str = "kv_cache_bytes",
    y_metric: str = "recall",
    *,
    objective_names: Sequence[str] = (),
) -> ParetoInfo:
    """The 2-D front of ``y_metric`` against ``x_metric`` (user attrs or objective names).

    ``directions`` are those of (x_metric, y_metric); None looks them up in :data:`METRIC_DIRECTIONS`.
    """
    metrics = (x_metric, y_metric)
    if directions is None:
        unknown = [m for m in metrics if m not in METRIC_DIRECTIONS]
        if unknown:
            raise ValueError(f"no default direction for metric {unknown[0]!r}; pass directions=(x_dir, y_dir)")
        directions = [METRIC_DIRECTIONS[m] for m in metrics]
    dirs = tuple(_direction(d) for d in directions)
    if len(dirs) != 2:
        raise ValueError(f"pareto_info needs 2 directions (for {x_metric}, {y_metric}), got {len(dirs)}")
    recs = records(trials, objective_names)
    return _split(recs, metrics, dirs, lambda r: tuple(r.metric(m) for m in metrics))


def front(trials: Iterable[Any], directions: Sequence[Any], objective_names: Sequence[str] = ()) -> ParetoInfo:
    """The front over the study's full objective set (each trial's ``values``)."""
    dirs = tuple(_direction(d) for d in directions)
    names = tuple(objective_names) or tuple(f"objective_{i}" for i in range(len(dirs)))
    if len(names) != len(dirs):
        raise ValueError(f"{len(names)} objective names for {len(dirs)} directions")
    recs = records(trials, names)

    def values(r: TrialRecord) -> tuple[float | None, ...]:
        if r.values is None or len(r.values) != len(dirs):
            return (None,) * len(dirs)
        return r.values

    return _split(recs, names, dirs, values)


# -- hypervolume ---------------------------------------------------------------------------


def hypervolume(points: Sequence[Sequence[float]], reference: Sequence[float]) -> float:
    """Hypervolume dominated by ``points`` (all objectives minimized) up to ``reference``.

    Points not strictly better than the reference in every objective add nothing.
    2-D is an exact sweep; more objectives use optuna's exact WFG algorithm.
    """
    ref = [float(v) for v in reference]
    pts = [tuple(map(float, p)) for p in points if all(v < r for v, r in zip(p, ref))]
    if not pts:
        return 0.0
    if len(ref) == 1:
        return ref[0] - min(p[0] for p in pts)
    if len(ref) == 2:
        hv, best_y = 0.0, ref[1]
        for x, y in sorted(pts):
            if y < best_y:
                hv += (ref[0] - x) * (best_y - y)
                best_y = y
        return hv
    from hlnas.search.optuna_adapter import wfg_hypervolume as wfg  # exact WFG

    return wfg(pts, ref)


def hypervolume_history(
    trials: Iterable[Any], directions: Sequence[Any], reference: Sequence[float] | None = None
) -> list[tuple[int, float]]:
    """Hypervolume of the feasible COMPLETE trials after each completed trial: ``[(n_complete, hv), ...]``.

    Reused copies (``reused_from``) are not counted: they trained nothing and add no point.

    With ``reference=None`` each objective is turned into a minimized one and scaled to [0, 1] by the
    best and worst values seen over the whole study (so the curve's scale does not shift as it grows),
    and the reference point is 1.1 in every objective: 10% beyond the worst value seen, so the extreme
    trials of the front still count. The maximum is then 1.1**d. An explicit ``reference`` is in the
    objectives' own units and directions (e.g. ``(0.0, 2e9)`` for maximized recall and minimized bytes)
    and no scaling is done. Infeasible trials count toward ``n_complete`` but add no volume.
    """
    dirs = tuple(_direction(d) for d in directions)
    recs = [r for r in records(trials) if r.state == "complete" and r.attrs.get("reused_from") is None]
    signs = [-1.0 if d == "maximize" else 1.0 for d in dirs]

    def usable(r: TrialRecord) -> bool:
        return (r.status == "ok" and r.values is not None and len(r.values) == len(dirs)
                and all(math.isfinite(v) for v in r.values))  # fmt: skip

    good = [tuple(s * v for s, v in zip(signs, r.values)) for r in recs if usable(r)]
    if reference is not None:
        if len(reference) != len(dirs):
            raise ValueError(f"reference has {len(reference)} values for {len(dirs)} objectives")
        ref = tuple(s * float(v) for s, v in zip(signs, reference))

        def scale(p):
            return p
    else:
        ref = (1.1,) * len(dirs)
        lo = [min(p[i] for p in good) for i in range(len(dirs))] if good else [0.0] * len(dirs)
        hi = [max(p[i] for p in good) for i in range(len(dirs))] if good else [1.0] * len(dirs)

        def scale(p):
            return tuple((v - a) / (b - a) if b > a else 0.0 for v, a, b in zip(p, lo, hi))

    history, pts = [], []
    for n, r in enumerate(recs, start=1):
        if usable(r):
            pts.append(scale(tuple(s * v for s, v in zip(signs, r.values))))
        history.append((n, hypervolume(pts, ref) if pts else 0.0))
    return history
