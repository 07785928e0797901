"""The Ray Tune adapter (hlnas.search.tune): a 3-trial tune.Tuner on CPU with ASHA on the corrected recall, its trials in an
optuna study hlnas reads; trials Tune stops early are stored PRUNED, never FAIL."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")
tune_stopper = pytest.importorskip("ray.tune.stopper")


class StopTheSecondTrial(tune_stopper.Stopper):
    """Stops the second trial to report at its first check (trials run one at a time here: deterministic). ASHA on
    the corrected recall rarely stops one in 30 steps (every tiny model is still at 0, a tie), so this makes the early
    stop the test needs; Tune handles a stopper's stop as a scheduler's (on_trial_complete with its last result)."""

    def __init__(self):
        self.seen: list[str] = []

    def __call__(self, trial_id: str, result: dict) -> bool:
        if trial_id not in self.seen:
            self.seen.append(trial_id)
        return len(self.seen) == 2 and trial_id == self.seen[1]

    def stop_all(self) -> bool:
        return False


def test_a_tuner_with_asha_runs_hlnas_trials_into_an_hlnas_study(tmp_path):
    import optuna
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    from hlnas.space import load_space
    from hlnas.search.study import load_hlnas_study, study_summary
    from hlnas.search.tune import optuna_search, trainable, tune_config

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
            run_config=tune.RunConfig(storage_path=str(tmp_path / "ray"), verbose=0, stop=StopTheSecondTrial()),
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
    # a trial Tune stopped early is PRUNED with status stopped and its checks, never FAIL; a whole one COMPLETE
    whole = sum(r.metrics.get("complete") == 1 for r in results)
    counts = study_summary(study)["trials"]
    assert 1 <= counts["stopped"] == 3 - whole and counts["complete"] == whole and counts["fail"] == 0
    pruned = [t for t in study.get_trials() if t.state == optuna.trial.TrialState.PRUNED]
    assert all(t.user_attrs["status"] == "stopped" and t.user_attrs["hlnas_checks"] for t in pruned)
    assert any(t.user_attrs["stopped_at_steps"] == 10 and len(t.user_attrs["hlnas_checks"]) == 1 for t in pruned)
    assert all(t.user_attrs["hlnas_checks"] and t.user_attrs["status"] in ("ok", "stopped") for t in study.get_trials())


def test_trials_tune_stops_early_are_pruned_with_their_partial_results(tmp_path):
    """The searcher's bookkeeping alone (no Ray cluster): Tune calls on_trial_result per report and
    on_trial_complete once; a trial stopped by its scheduler completes without error and without its last report."""
    import optuna

    from hlnas.space import load_space
    from hlnas.search.study import load_hlnas_study, study_summary
    from hlnas.search.tune import optuna_search

    space = load_space("tiny")
    storage = f"sqlite:///{tmp_path}/tune.db"
    search = optuna_search(space, storage=storage, study_name="tuned")
    check = {"val_acc": 0.5, "recall": 0.33, "recall_auc": 0.1, "loss": 1.5, "kv_cache_bytes": 0, "layout": "HHHHHH",
             "val_loss": None, "training_iteration": 1, "time_this_iter_s": 0.1}
    for tid in ("stopped", "whole", "broken", "infeasible"):
        assert search.suggest(tid)
    search.on_trial_result("stopped", {**check, "steps": 10})
    search.on_trial_complete("stopped", {**check, "steps": 20})  # ASHA stopped it at its second check (Tune passes
    # that result to on_trial_complete only)
    search.on_trial_result("whole", {**check, "steps": 10})
    search.on_trial_complete("whole", {**check, "recall": 0.9, "val_loss": 3.0, "steps": 30, "complete": 1})
    search.on_trial_complete("broken", {**check, "steps": 10}, error=True)
    search.on_trial_complete("infeasible", {"kv_cache_bytes": 0, "infeasible": 1, "layout": "AAAAAA"})
    trials = load_hlnas_study(storage, "tuned").get_trials()
    stopped, whole, broken, infeasible = trials
    assert stopped.state == optuna.trial.TrialState.PRUNED and stopped.values is None
    assert stopped.user_attrs["status"] == "stopped" and stopped.user_attrs["stopped_at_steps"] == 20
    assert stopped.user_attrs["recall"] == 0.33 and "time_this_iter_s" not in stopped.user_attrs
    assert [c["step"] for c in stopped.user_attrs["hlnas_checks"]] == [10, 20]
    assert whole.state == optuna.trial.TrialState.COMPLETE and whole.values[0] == 0.9
    assert [c["step"] for c in whole.user_attrs["hlnas_checks"]] == [10]
    assert broken.state == optuna.trial.TrialState.FAIL and broken.user_attrs["status"] == "failed"
    assert infeasible.state == optuna.trial.TrialState.FAIL and infeasible.user_attrs["status"] == "infeasible"
    assert study_summary(load_hlnas_study(storage, "tuned"))["trials"] == {"complete": 1, "fail": 2, "running": 0,
                                                                             "waiting": 0, "stopped": 1}
