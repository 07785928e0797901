"""Ray Tune adapter: run an hlnas space under ``tune.Tuner`` with Tune's own schedulers.

* :func:`trainable` is a Tune function trainable: it trains one candidate of the space with the recall model paused at
  every check (:func:`hlnas.recall.proxy.paused_at`, the rung scheduler's mechanism) and reports the same
  intermediate results as ``hlnas_checks`` (``recall``, ``recall_auc``, ``val_acc``, ``loss`` and the cost metrics)
  after each, so Tune's schedulers (ASHA on ``recall``) can stop it; the last report, after the LM half, holds every
  objective of the space.
* :func:`optuna_search` converts a space into an ``OptunaSearch`` over its categorical dimensions, with ``storage=``
  and ``study_name=`` so the trials land in the study ``hlnas status`` and the dashboard read. Its searcher stores
  what the trainable reported as the trial's user attrs (the checks as ``hlnas_checks``, as hlnas's loop does, but
  with the trainable's ``recall``: the test-set score at that check) and
  records a trial Tune stopped early (a scheduler such as ASHA, or a stopper: no error, no final report) as PRUNED
  with ``status: stopped`` and its partial results, as the rung scheduler records its stopped trials, never FAIL
  (Ray's OptunaSearch tells the ``None`` of the unmeasured LM objectives, which optuna fails) nor COMPLETE (a space
  whose objectives are all measured at a check would have its partial values told as final); an infeasible layout
  is FAIL with ``status: infeasible``, a trainable that raised FAIL with ``status: failed`` (Ray's would tell it the
  values it has and, failing, leave it RUNNING).

What stays with hlnas's loop (:func:`hlnas.search.loop.search_loop`), not duplicated here: the dedupe of equal layouts
(Tune may train a layout twice), the calibration (run ``hlnas calibrate`` first), the constraints (an infeasible
layout reports ``infeasible: 1`` and trains nothing, but Tune's searcher does not learn it as a constraint), re-queues
after a crash, and the multi-objective rung promotion (ASHA ranks one metric).
"""

from __future__ import annotations

import os
import tempfile

from hlnas.errors import ConfigError
from hlnas.space import SearchSpace, space_from_dict
from hlnas.overrides import is_number

__all__ = ["trainable", "optuna_search", "tune_config"]


def tune_config(space: SearchSpace) -> dict:
    """The trainable's fixed config: the space as stored (plain JSON)."""
    return {"hlnas_space": space.to_dict()}


def optuna_search(space: SearchSpace, *, storage=None, study_name: str | None = None, seed: int = 0):
    """An ``OptunaSearch`` over ``space``'s dimensions, optimizing its objectives (metric names as the study's), with
    the space's sampler; ``storage`` (an optuna storage or URL) and ``study_name`` make it an hlnas-readable study."""
    import optuna

    from hlnas.search.samplers import make_sampler

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
    search = _searcher_class()(space=dims, metric=metric, mode=mode, storage=storage, study_name=study_name, seed=None,
                               sampler=make_sampler(space.sampler if space.sampler != "grid" else "random", seed, len(metric)))
    return search


#: the checks' keys the trainable reports (hlnas.search.rungs.checks), gathered per trial into user attr hlnas_checks
_CHECK_KEYS = ("val_acc", "recall", "recall_auc", "loss")


def _searcher_class():
    """``OptunaSearch`` recording Tune's early stops as PRUNED (defined when called: ray is optional)."""
    import math

    import optuna
    from ray.tune.result import AUTO_RESULT_KEYS
    from ray.tune.search.optuna import OptunaSearch

    class HlnasOptunaSearch(OptunaSearch):
        def on_trial_result(self, trial_id: str, result: dict) -> None:
            if trial_id not in self._completed_trials:
                self._note(trial_id, result)
            super().on_trial_result(trial_id, result)

        def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
            if trial_id in self._completed_trials or trial_id not in self._ot_trials:
                return super().on_trial_complete(trial_id, result, error)
            trial = self._ot_trials[trial_id]
            self._note(trial_id, result or {})  # Tune passes the result it stops a trial at here only
            for k, v in (result or {}).items():  # what the trainable reported, not Tune's bookkeeping
                if k not in AUTO_RESULT_KEYS and k not in ("done", "trial_id", "experiment_tag", "complete", "infeasible"):
                    trial.set_user_attr(k, v)
            trial.set_user_attr("hlnas_checks", self._checks(trial_id))
            metrics = self.metric if isinstance(self.metric, list) else [self.metric]
            values = [(result or {}).get(m) for m in metrics]
            fail, pruned = optuna.trial.TrialState.FAIL, optuna.trial.TrialState.PRUNED
            if error:  # the trainable raised (Ray's own would tell the values it has, leaving it RUNNING)
                status, state, values = "failed", fail, None
            elif not result:  # removed before it reported (e.g. the experiment ended while it waited)
                status, state, values = "stopped", pruned, None
            elif result.get("infeasible"):
                status, state, values = "infeasible", fail, None
            elif result.get("complete") != 1:  # stopped by Tune before its last report: partial results, no values
                status, state, values = "stopped", pruned, None
                trial.set_user_attr("stopped_at_steps", result.get("steps"))
            elif all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
                status, state = "ok", optuna.trial.TrialState.COMPLETE
            else:
                status, state, values = "failed", fail, None
                trial.set_user_attr("error", f"objective metrics missing or not finite: {metrics}")
            trial.set_user_attr("status", status)
            self._ot_study.tell(trial, values, state=state)
            self._completed_trials.add(trial_id)

        def _checks(self, trial_id: str) -> list:
            if not hasattr(self, "_hlnas_checks"):
                self._hlnas_checks = {}
            return self._hlnas_checks.setdefault(trial_id, [])

        def _note(self, trial_id: str, result: dict) -> None:
            """A report of one check (not the final nor an infeasible one): appended once to the trial's checks."""
            got = self._checks(trial_id)
            if "steps" in result and not result.get("complete") and not result.get("infeasible") \
                    and (not got or got[-1]["step"] != result["steps"]):
                got.append({"step": result["steps"], **{k: result.get(k) for k in _CHECK_KEYS}})

    return HlnasOptunaSearch


def trainable(config: dict) -> None:
    """Tune function trainable: ``config`` holds the space's dimensions and ``hlnas_space`` (:func:`tune_config`)."""
    import dataclasses

    from ray import tune

    from hlnas.search.records import constraint_values, trial_spec
    from hlnas.search.rungs import checks
    from hlnas.model.cost import layout_metrics
    from hlnas.search.trial import run_trial

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
    return {k: v for k, v in metrics.items() if is_number(v)}
