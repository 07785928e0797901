"""The Ray Tune adapter (hlnas.tune): a 3-trial tune.Tuner on CPU with ASHA on the corrected recall, its trials in an
optuna study hlnas reads."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")


def test_a_tuner_with_asha_runs_hlnas_trials_into_an_hlnas_study(tmp_path):
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    from hlnas.space import load_space
    from hlnas.study import load_hlnas_study, study_summary
    from hlnas.tune import optuna_search, trainable, tune_config

    space = load_space("tiny").with_sets(["train.tokens=1024", "train.val_batches=1", "score.mqar.steps=30",
                                          "score.mqar.eval_every=10", "score.mqar.test=32", "score.mqar.val=32",
                                          "score.mqar.target=null"])
    storage = f"sqlite:///{tmp_path}/tune.db"
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)  # our own, not a running one
    try:
        tuner = tune.Tuner(
            trainable,
            param_space=tune_config(space),
            tune_config=tune.TuneConfig(search_alg=optuna_search(space, storage=storage, study_name="tuned"),
                                        scheduler=ASHAScheduler(metric="recall", mode="max", max_t=4, grace_period=1,
                                                                reduction_factor=2),
                                        num_samples=3),
            run_config=tune.RunConfig(storage_path=str(tmp_path / "ray"), verbose=0),
        )
        results = tuner.fit()
    finally:
        ray.shutdown()
    assert len(results) == 3 and not results.errors
    for r in results:
        h = r.metrics_dataframe
        assert list(h["steps"])[: min(len(h), 2)] == [10, 20][: min(len(h), 2)]  # a report per check
        assert h["recall"].notna().all() and "kv_cache_bytes" in h
    assert any(r.metrics.get("complete") == 1 and "val_loss" in r.metrics for r in results)
    study = load_hlnas_study(storage, "tuned")
    assert sum(study_summary(study)["trials"].values()) >= 3
