"""The samplers a study can be driven by, by name: one table read by the space validator, the CLI, the search
(:mod:`hlnas.search.study`) and the sampler benchmark (:mod:`hlnas.analysis.tabular`), so they cannot disagree on a setting.

The names live in :mod:`hlnas.settings` (the space validates its ``sampler`` key against them, below the search);
this module builds each, and imports optuna only when a sampler is built (``hlnas --help`` stays fast).
"""

from __future__ import annotations

from collections.abc import Callable

from hlnas.errors import ConfigError, did_you_mean
from hlnas.settings import SAMPLERS

__all__ = ["SAMPLERS", "make_sampler"]


def _nsga2(seed: int, n_objectives: int):
    import optuna

    return optuna.samplers.NSGAIISampler(seed=seed, population_size=8)


def _tpe(seed: int, n_objectives: int):
    import optuna

    return optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=5)


def _gp(seed: int, n_objectives: int):
    import optuna

    return optuna.samplers.GPSampler(seed=seed, n_startup_trials=5)


def _random(seed: int, n_objectives: int):
    import optuna

    return optuna.samplers.RandomSampler(seed=seed)


#: name -> builder ``(seed, n_objectives) -> optuna sampler``. ``grid`` is random sampling over a study that
#: has every candidate enqueued first (the search loop enqueues them); random fills anything beyond.
_BUILDERS: dict[str, Callable] = {"nsga2": _nsga2, "tpe": _tpe, "gp": _gp, "random": _random, "grid": _random}

if tuple(_BUILDERS) != SAMPLERS:  # one table: a sampler named in settings is built here, and only those
    raise AssertionError(f"hlnas.settings.SAMPLERS {SAMPLERS} != the samplers built {tuple(_BUILDERS)}")


def make_sampler(name: str, seed: int, n_objectives: int):
    """The optuna sampler ``name`` (one of :data:`SAMPLERS`) seeded with ``seed``."""
    if name not in _BUILDERS:
        raise ConfigError(f"unknown sampler '{name}'.{did_you_mean(name, SAMPLERS)} Allowed: {', '.join(SAMPLERS)}")
    return _BUILDERS[name](seed, n_objectives)
