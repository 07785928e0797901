"""A study's settings inside a search space: its objectives, constraints and calibration, validated.

The space (``hlnas.space``) is the set of layouts and the scale they train at; these are what the study does
with them. Metrics, their directions and what they need come from :mod:`hlnas.metrics`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import hlnas.metrics as metric_table
from hlnas.errors import ConfigError, HlnasError, did_you_mean
from hlnas.model.layout import parse_ratio
from hlnas.overrides import is_int, is_number

__all__ = ["CalibrationConfig", "RungConfig", "rung_config", "SAMPLERS", "Objective", "DEFAULT_OBJECTIVES", "OBJECTIVE_DIRECTIONS", "DIRECTIONS", "CONSTRAINTS", "RECALL_SOURCES",
           "RAW_RECALL_METRICS", "SpaceError", "Checker", "SettingsChecker"]


#: the samplers a study may name (``sampler:``); :mod:`hlnas.search.samplers` builds each and checks it has them all
SAMPLERS = ("nsga2", "tpe", "gp", "random", "grid")


class SpaceError(HlnasError, ValueError):
    """A search-space file or dict is invalid (the message names the file, key, value and what is allowed)."""


# the metric table lives in hlnas.metrics; these views are what the validator reads
OBJECTIVE_DIRECTIONS = {n: metric_table.get(n).direction for n in (*metric_table.objective_metrics(), *metric_table.raw_recall_metrics())}
DIRECTIONS = ("maximize", "minimize")
CONSTRAINTS = {"max_params": "params", "max_kv_bytes": "kv_cache_bytes", "max_state_bytes": "state_bytes"}
RECALL_SOURCES = metric_table.RECALL_SOURCES
#: raw recall metrics: a study may not optimise them (a score below its baseline would rank as recall)
RAW_RECALL_METRICS = metric_table.raw_recall_metrics()
_NEEDS = {name: metric_table.get(name).needs for name in OBJECTIVE_DIRECTIONS if metric_table.get(name).needs}


@dataclass(frozen=True, kw_only=True, slots=True)
class Objective:
    """One thing the study optimises: ``metric`` read from a trial's results, in ``direction``."""

    name: str
    metric: str  # a key of OBJECTIVE_DIRECTIONS
    direction: str  # maximize | minimize

    def to_dict(self) -> dict:
        return {"name": self.name, "metric": self.metric, "direction": self.direction}


DEFAULT_OBJECTIVES = (Objective(name="recall", metric="recall", direction="maximize"),
                      Objective(name="kv_cache", metric="kv_cache_bytes", direction="minimize"))


class Checker:
    """Checks one raw mapping; every failure names ``where`` (the file), the key and the value."""

    def __init__(self, where: str):
        self.where = where

    def fail(self, msg: str):
        raise SpaceError(f"{self.where}: {msg}")

    def bad(self, key: str, value, allowed: str, choices=()):
        hint = did_you_mean(value, choices) if isinstance(value, str) else ""
        self.fail(f"{key}={value!r} is not allowed; allowed: {allowed}" + (f".{hint}" if hint else ""))

    def choice(self, key: str, value, allowed, note: str = ""):
        if not isinstance(value, str) or value not in allowed:
            self.bad(key, value, ", ".join(allowed) + note, allowed)
        return value

    def keys(self, prefix: str, raw, allowed) -> None:
        if not isinstance(raw, dict):
            self.fail(f"{prefix.rstrip('.') or 'the space'} must be a mapping, got {type(raw).__name__} {raw!r}")
        for k in raw:
            if k not in allowed:
                self.fail(f"unknown key '{prefix}{k}'.{did_you_mean(str(k), allowed)} "
                          f"Allowed{' in ' + prefix.rstrip('.') if prefix else ''}: {', '.join(allowed)}")

    def items(self, key: str, value) -> list:
        if not isinstance(value, (list, tuple)):
            self.fail(f"{key}={value!r} must be a list, e.g. {key}: [a, b]")
        return list(value)

    def unique(self, key: str, values: list, attr: str = "") -> tuple:
        for i, x in enumerate(values):
            first = values.index(x)
            if first < i:
                self.fail(f"{key}[{i}]{attr}={x!r} repeats {key}[{first}]{attr}")
        return tuple(values)


class SettingsChecker(Checker):
    """The checks of a space's study settings (objectives, constraints, calibration)."""

    def objectives(self, value, scored: tuple[str, ...]) -> tuple[Objective, ...]:
        """The study's objectives; ``scored``: the objectives the scale scores (``ScoreConfig.objectives``)."""
        objs = list(DEFAULT_OBJECTIVES) if value is None else []
        for i, o in enumerate(self.items("objectives", value) if value is not None else []):
            key = f"objectives[{i}]"
            o = {"metric": o} if isinstance(o, str) else o  # "- val_loss" is {metric: val_loss}
            self.keys(key + ".", o, ("name", "metric", "direction"))
            metric = o.get("metric", o.get("name") if str(o.get("name")) in OBJECTIVE_DIRECTIONS else None)
            if metric in RAW_RECALL_METRICS:
                self.fail(f"{key}.metric={metric!r} is a raw recall score, which a model with no key-to-value association "
                          "can reach (copying any in-context value scores 1/K); use metric: recall, the same score "
                          "corrected for its strongest no-recall baseline")
            metric = self.choice(f"{key}.metric", metric, tuple(m for m in OBJECTIVE_DIRECTIONS if m not in RAW_RECALL_METRICS))
            direction = self.choice(f"{key}.direction", o.get("direction", OBJECTIVE_DIRECTIONS[metric]), DIRECTIONS)
            if metric in metric_table.RECALL_OBJECTIVES and direction != "maximize":  # the search would seek layouts that cannot recall
                self.fail(f"{key}: metric {metric!r} with direction {direction!r}: recall is maximized (1 is perfect, 0 "
                          "no better than its no-recall baseline); drop the direction or write maximize")
            name = o.get("name", metric)
            if not isinstance(name, str) or not name:
                self.bad(f"{key}.name", name, "a non-empty string")
            objs.append(Objective(name=name, metric=metric, direction=direction))
        if not objs:
            self.fail(f"objectives is empty; give at least one of: {', '.join(OBJECTIVE_DIRECTIONS)}")
        self.unique("objectives", [o.name for o in objs], ".name")
        self.unique("objectives", [o.metric for o in objs], ".metric")
        scored = list(scored)
        for i, o in enumerate(objs):
            needs = _NEEDS.get(o.metric, ())
            if needs and not set(needs) & set(scored):
                self.fail(f"objectives[{i}] (metric '{o.metric}') needs {' or '.join(map(repr, needs))} in "
                          f"scale.score.objectives; got {scored}")
        return tuple(objs)

    def calibration(self, value):
        """The space's :class:`hlnas.calibration.protocol.CalibrationConfig` (absent: the defaults)."""
        if value is not None and not isinstance(value, dict):
            self.fail(f"calibration must be a mapping of calibration settings, got {value!r}")
        try:
            return CalibrationConfig.from_dict(value or {})
        except (ConfigError, TypeError) as e:
            self.fail(f"calibration: {e}")

    def constraints(self, value) -> dict[str, float]:
        self.keys("constraints.", value, tuple(CONSTRAINTS))
        for k, x in value.items():
            if not is_number(x) or not 0 < x < math.inf:
                self.bad(f"constraints.{k}", x, f"a positive number (upper bound on {CONSTRAINTS[k]})")
        return {k: float(x) for k, x in value.items()}


@dataclass(frozen=True, kw_only=True)
class CalibrationConfig:
    enabled: bool = True
    seeds: int = 2  # seeds 0..seeds-1 of every control
    control_min: float = 0.9  # raw recall the all-attention control must reach at the training length
    hybrid_ratio: str = "3:1"  # the hybrid trained beside each pure model
    spread_floor: float = 0.01  # the smallest seed spread assumed (two equal seeds are not "separated" by 0)
    graded_ratios: tuple[str, ...] = ()  # further ratios per mixer (paper placement) on the graded ladder
    # further ratios per mixer (paper placement) trained with the calibration and reported, never judged: a grid whose
    # every layout the calibration trains, so the study takes their seed-0 runs as trials (and a study borrowing the
    # calibration their other seeds' recall)
    extra_ratios: tuple[str, ...] = ()
    graded_min_mixers: int = 0  # mixers whose graded measure must rise with the attention share (0: report only)
    pure_below_min_mixers: int = 0  # mixers whose pure model must sit below its hybrid beyond the spread (0: report)
    # the order runs start in within a role (controls, pure, the rest): "longest" (expected longest first, so the
    # workers finish together: a calibration done in one go) or "listed" (the space's mixer order: one spread over
    # several calls lists first the mixers that decide soonest whether it can pass) or "pairs" (mixer by mixer, its pure
    # model and hybrid seed by seed, then its ladder: each mixer's "pure below" and graded checks are decided before
    # the next mixer starts, so a calibration that cannot pass stops before the pure models that never learn have
    # spent their budgets).
    # mixer_order: the mixers "listed" and "pairs" take first (the others after, in the space's order). Results are
    # the same whatever the order: neither is part of the space's fingerprint, so a study resumes under another
    order: str = "longest"
    mixer_order: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("graded_ratios", "extra_ratios", "mixer_order"):
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        for name in ("graded_min_mixers", "pure_below_min_mixers"):
            v = getattr(self, name)
            if not is_int(v) or v < 0:
                raise ConfigError(f"calibration.{name}={v!r} is not allowed; allowed: an integer >= 0 (0: reported only)")
        if not isinstance(self.enabled, bool):
            raise ConfigError(f"calibration.enabled must be true or false, got {self.enabled!r}")
        if self.order not in ("longest", "listed", "pairs"):
            raise ConfigError(f"calibration.order={self.order!r} is not allowed; allowed: longest (expected longest "
                              "first within a role), listed (the space's mixer order), pairs (mixer by mixer, pure and "
                              "hybrid seed by seed)")
        if len(set(self.mixer_order)) != len(self.mixer_order):
            raise ConfigError(f"calibration.mixer_order={list(self.mixer_order)} names a mixer twice")
        if not is_int(self.seeds) or not 2 <= self.seeds <= 10:
            raise ConfigError(f"calibration.seeds={self.seeds!r} is not allowed; allowed: an integer from 2 to 10 "
                              "(a seed spread needs two seeds)")
        for name in ("control_min", "spread_floor"):
            v = getattr(self, name)
            if not is_number(v) or not 0 <= v <= 1:
                raise ConfigError(f"calibration.{name}={v!r} is not allowed; allowed: a fraction in [0, 1]")
        try:
            r = parse_ratio(self.hybrid_ratio) if isinstance(self.hybrid_ratio, str) else None
        except HlnasError:
            r = None
        if r is None:
            raise ConfigError(f"calibration.hybrid_ratio={self.hybrid_ratio!r} is not allowed; allowed: a ratio r:1 "
                              "such as '3:1' (one attention layer every r-th layer)")
        for name in ("graded_ratios", "extra_ratios"):
            for ratio in getattr(self, name):
                try:
                    ok = isinstance(ratio, str) and parse_ratio(ratio) is not None
                except HlnasError:
                    ok = False
                if not ok:
                    raise ConfigError(f"calibration.{name}: {ratio!r} is not allowed; allowed: ratios r:1 such as "
                                      "'6:1' (the ladder's pure model and hybrid are always trained)")

    @classmethod
    def from_dict(cls, data: dict) -> "CalibrationConfig":
        from hlnas.overrides import config_from_dict

        return config_from_dict(cls, data, "calibration")

    def to_dict(self) -> dict:
        from hlnas.overrides import config_to_dict

        return config_to_dict(self)


@dataclass(frozen=True, kw_only=True)
class RungConfig:
    """A space's ``rungs:`` section."""

    min_steps: int
    eta: int = 3

    def __post_init__(self) -> None:
        for name, low in (("min_steps", 1), ("eta", 2)):
            v = getattr(self, name)
            if not is_int(v) or v < low:
                raise ConfigError(f"rungs.{name}={v!r} is not allowed; allowed: an integer >= {low}")

    def to_dict(self) -> dict:
        return {"min_steps": self.min_steps, "eta": self.eta}


def rung_config(raw, score) -> RungConfig | None:
    """Validate a space's ``rungs`` section against its score section (``None``: off)."""
    if raw is None or raw is False:
        return None
    if not isinstance(raw, dict):
        raise ConfigError(f"rungs must be a mapping such as {{min_steps: 100, eta: 3}}, got {raw!r}")
    unknown = [k for k in raw if k not in ("min_steps", "eta")]
    if unknown:
        raise ConfigError(f"rungs.{unknown[0]} is not allowed; allowed: min_steps, eta")
    if "min_steps" not in raw:
        raise ConfigError("rungs.min_steps is required (the first rung's recall-model training steps)")
    cfg = RungConfig(**raw)
    if "mqar" not in score.objectives:
        raise ConfigError("rungs are over the fresh recall model's training steps, but score.objectives has no 'mqar'; "
                          "add it or remove the rungs section")
    m = score.mqar
    if cfg.min_steps >= m.steps:
        raise ConfigError(f"rungs.min_steps={cfg.min_steps} must be below score.mqar.steps={m.steps} (the top rung)")
    if cfg.min_steps % m.eval_every:
        raise ConfigError(f"rungs.min_steps={cfg.min_steps} must be a multiple of score.mqar.eval_every={m.eval_every} "
                          "(a rung is measured at a check)")
    return cfg
