"""Ray Tune adapter (issue 23, point 4): run an hlnas space under ``tune.Tuner`` with Tune's own schedulers.

* :func:`trainable` is a Tune function trainable: it trains one candidate of the space with the recall model paused at
  every check (:func:`hlnas.score.recall_proxy.paused_at`, the rung scheduler's mechanism) and reports the same
  intermediate results as ``hlnas_checks`` (``recall``, ``recall_auc``, ``val_acc``, ``loss`` and the cost metrics)
  after each, so Tune's schedulers (ASHA on ``recall``) can stop it; the last report, after the LM half, holds every
  objective of the space.
  A trial ASHA stops ends with ``None`` for the LM's objectives: OptunaSearch stores it as FAIL, never COMPLETE.
* :func:`optuna_search` converts a space into an ``OptunaSearch`` over its categorical dimensions, with ``storage=``
  and ``study_name=`` so the trials land in the study ``hlnas status`` and the dashboard read.

What stays with hlnas's loop (:func:`hlnas.proposals.search_loop`), not duplicated here: the dedupe of equal layouts
(Tune may train a layout twice), the calibration (run ``hlnas calibrate`` first), the constraints (an infeasible
layout reports ``infeasible: 1`` and trains nothing, but Tune's searcher does not learn it as a constraint), re-queues
after a crash, and the multi-objective rung promotion (ASHA ranks one metric).
"""

from __future__ import annotations

import os
import tempfile

from hlnas.errors import ConfigError
from hlnas.space import SearchSpace, space_from_dict

__all__ = ["trainable", "optuna_search", "tune_config"]


def tune_config(space: SearchSpace) -> dict:
    """The trainable's fixed config: the space as stored (plain JSON)."""
    return {"hlnas_space": space.to_dict()}


def optuna_search(space: SearchSpace, *, storage=None, study_name: str | None = None, seed: int = 0):
    """An ``OptunaSearch`` over ``space``'s dimensions, optimizing its objectives (metric names as the study's), with
    the space's sampler; ``storage`` (an optuna storage or URL) and ``study_name`` make it an hlnas-readable study."""
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    from hlnas.samplers import make_sampler

    if isinstance(storage, str):
        storage = optuna.storages.get_storage(storage)
    if storage is not None and study_name:  # created here with hlnas's attrs, so hlnas status and the dashboard read it
        study = optuna.create_study(study_name=study_name, storage=storage, load_if_exists=True,
                                    directions=[o.direction for o in space.objectives])
        study.set_user_attr("hlnas_space", space.to_dict())
        study.set_user_attr("hlnas_objectives", [{"name": o.name, "metric": o.metric, "direction": o.direction}
                                                 for o in space.objectives])
        study.set_user_attr("hlnas_kv_context", space.kv_context)
    dims = {k: optuna.distributions.CategoricalDistribution(v) for k, v in space.params().items()}
    metric = [o.metric for o in space.objectives]
    mode = ["max" if o.direction == "maximize" else "min" for o in space.objectives]
    search = OptunaSearch(space=dims, metric=metric, mode=mode, sampler=make_sampler(space.sampler if space.sampler != "grid" else "random", seed, len(metric)),
                          storage=storage, study_name=study_name, seed=None)
    return search


def trainable(config: dict) -> None:
    """Tune function trainable: ``config`` holds the space's dimensions and ``hlnas_space`` (:func:`tune_config`)."""
    import dataclasses

    from ray import tune

    from hlnas.proposals import constraint_values, trial_spec
    from hlnas.rungs import checks
    from hlnas.trial import layout_metrics, run_trial

    space = space_from_dict(config["hlnas_space"], where="tune config")
    params = {k: config[k] for k in space.params() if k in config}
    spec = trial_spec(space, 0, params)
    cost = layout_metrics(spec.layout, spec.recipe.model, spec.kv_context, spec.placement)
    if any(v > 0 for v in constraint_values(space, cost).values()):
        tune.report({**_numbers(cost), "infeasible": 1, "layout": spec.layout})
        return
    if "mqar" not in space.score.objectives:
        raise ConfigError("the hlnas Tune trainable reports recall checks: the space's score.objectives needs 'mqar'")
    m = space.score.mqar
    state = tempfile.mkdtemp(prefix="hlnas-tune-", dir=os.environ.get("TUNE_TRIAL_DIR"))
    for steps in range(m.eval_every, m.steps, m.eval_every):  # each check a pause: report it
        r = run_trial(dataclasses.replace(spec, rung_steps=steps, state_dir=state))
        if not r.ok:
            raise RuntimeError(f"trial of {spec.layout} failed at {steps} steps: {r.error_kind}: {r.error}")
        last = (checks(r.metrics) or [{}])[-1]
        # every objective is in every report (Tune's searcher requires it): those of the trained LM are None
        # until the last report (the LM half has no intermediate checkpoints here)
        unmeasured = {o.metric: None for o in space.objectives if o.metric not in r.metrics}
        tune.report({**unmeasured, **_numbers(r.metrics), **{k: v for k, v in last.items() if k != "step"}, "recall": r.metrics.get("recall"),
                     "steps": steps, "layout": spec.layout})
        if r.metrics.get("mqar_finished"):
            break
    r = run_trial(dataclasses.replace(spec, rung_steps=None, state_dir=state))
    if not r.ok:
        raise RuntimeError(f"trial of {spec.layout} failed: {r.error_kind}: {r.error}")
    tune.report({**_numbers(r.metrics), "steps": m.steps, "layout": spec.layout, "complete": 1})


def _numbers(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
