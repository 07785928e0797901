"""Every sampler drives a multi-objective study with constraints through the real search loop.

The trial itself is replaced by a fast deterministic function of the layout, so this suite checks
the sampler plumbing (directions, constraints, dedupe, stopping), not training."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from hlnas.search.executors import InlineExecutor
from hlnas.space import SAMPLERS
from hlnas.search.study import run_search
from hlnas.search.options import SearchOptions
from hlnas.model.cost import layout_metrics
from hlnas.search.trial import TrialResult
from tests.searches import sampler_space


def fake_trial(spec):
    m = layout_metrics(spec.layout, spec.recipe.model, spec.kv_context, spec.placement)
    n_attn = len(m["attention_layers"])
    m.update(recall=0.1 + 0.1 * n_attn + 0.01 * len(set(m["linear_mixers"])), val_loss=3.0 - 0.01 * n_attn, status="ok")
    return TrialResult(spec.number, "ok", m)


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_sampler_runs_multi_objective_with_constraints(sampler, tmp_path):
    sp = sampler_space(sampler)
    url = f"sqlite:///{tmp_path}/s.db"
    n = 8
    study = run_search(sp, SearchOptions(
        storage=url, study_name="s", n_trials=n, sampler=sampler, seed=1, executor=InlineExecutor(run=fake_trial)))
    expected = {"nsga2": optuna.samplers.NSGAIISampler, "tpe": optuna.samplers.TPESampler, "gp": optuna.samplers.GPSampler,
                "random": optuna.samplers.RandomSampler, "grid": optuna.samplers.RandomSampler}[sampler]
    assert isinstance(study.sampler, expected)
    trials = study.get_trials(deepcopy=False)
    trained = {t.user_attrs["layout"] for t in trials if t.state == TrialState.COMPLETE and "reused_from" not in t.user_attrs}
    assert len(trained) == n  # n distinct layouts trained, none twice
    for t in trials:
        if t.user_attrs.get("error_kind") == "constraint":
            assert t.state == TrialState.FAIL and t.user_attrs["kv_cache_bytes"] > 5 * 2**20
        elif t.state == TrialState.COMPLETE:
            values = list(t.constraints.values()) if isinstance(t.constraints, dict) else list(t.constraints)
            assert values and all(c <= 0 for c in values)
    assert study.directions == [optuna.study.StudyDirection.MAXIMIZE, optuna.study.StudyDirection.MINIMIZE]
    assert all(b.user_attrs["kv_cache_bytes"] <= 5 * 2**20 for b in study.best_trials)
