"""hlnas.search.optuna_adapter against the installed Optuna: each private attribute it reads still means what the
search relies on (an Optuna upgrade that changes one fails here)."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from hlnas.search import optuna_adapter as oa

optuna.logging.set_verbosity(optuna.logging.WARNING)
DIST = {"x": optuna.distributions.CategoricalDistribution(["a", "b"])}


@pytest.fixture
def study(tmp_path):
    return optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db")


def test_storage_of_is_the_study_storage_delete_study_takes(study):
    store = oa.storage_of(study)
    assert isinstance(store, optuna.storages.BaseStorage)
    assert [s.study_name for s in optuna.get_all_study_summaries(store)] == ["s"]
    optuna.delete_study(study_name="s", storage=store)
    assert optuna.get_all_study_summaries(store) == []


def test_study_id_is_the_storage_id_of_the_study_and_differs_between_studies(study):
    store = oa.storage_of(study)
    other = optuna.create_study(study_name="t", storage=store)
    assert oa.study_id(study) == store.get_study_id_from_name("s") != oa.study_id(other)


def test_claim_waiting_runs_that_trial_and_a_second_claim_gets_none(study):
    study.enqueue_trial({"x": "b"}, user_attrs={"requeued_from": 7})
    study.enqueue_trial({"x": "a"})
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    trial = oa.claim_waiting(study, waiting[1])  # not the oldest: the one chosen
    assert isinstance(trial, optuna.trial.Trial) and trial.number == 1
    assert trial.suggest_categorical("x", DIST["x"].choices) == "a"
    assert oa.claim_waiting(study, waiting[1]) is None  # already RUNNING: taken
    study.tell(trial, 1.0)
    assert oa.frozen_of(study, trial).state == TrialState.COMPLETE
    assert oa.claim_waiting(study, waiting[1]) is None  # finished
    assert study.ask(DIST).number == 0  # the other WAITING one is still there


def test_trial_of_and_frozen_of_read_the_stored_trial(study):
    asked = study.ask(DIST)
    frozen = study.get_trials(deepcopy=False)[0]
    live = oa.trial_of(study, frozen)
    live.set_user_attr("k", 1)
    assert oa.frozen_of(study, asked).user_attrs == {"k": 1}
    assert oa.frozen_of(study, frozen).params == asked.params


def test_fail_stored_fails_a_running_trial_with_its_attributes(study):
    study.ask(DIST)
    frozen = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))[0]
    oa.fail_stored(study, frozen, {"error": "gone", "error_kind": "interrupted"})
    got = study.get_trials(deepcopy=False)[0]
    assert got.state == TrialState.FAIL and got.user_attrs == {"error": "gone", "error_kind": "interrupted"}


def test_wfg_hypervolume_is_the_exact_dominated_volume():
    assert oa.wfg_hypervolume([(0.0, 0.0, 0.0)], (1.0, 1.0, 1.0)) == pytest.approx(1.0)
    # two boxes of 0.5 x 1 x 1 and 1 x 0.5 x 1 overlap in 0.5 x 0.5 x 1
    assert oa.wfg_hypervolume([(0.5, 0.0, 0.0), (0.0, 0.5, 0.0)], (1.0, 1.0, 1.0)) == pytest.approx(0.75)
