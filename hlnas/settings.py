"""A study's settings inside a search space: its objectives, constraints and calibration, validated.

The space (``hlnas.space``) is the set of layouts and the scale they train at; these are what the study does
with them. Metrics, their directions and what they need come from :mod:`hlnas.metrics`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import hlnas.metrics as metric_table
from hlnas.errors import ConfigError, HlnasError, did_you_mean
from hlnas.overrides import is_number

__all__ = ["SAMPLERS", "Objective", "DEFAULT_OBJECTIVES", "OBJECTIVE_DIRECTIONS", "DIRECTIONS", "CONSTRAINTS", "RECALL_SOURCES",
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
        """The space's :class:`hlnas.calibrate.CalibrationConfig` (absent: the defaults)."""
        from hlnas.calibrate import CalibrationConfig

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
