"""The only place hlnas touches Optuna's private names (``Study._storage``, ``Trial._trial_id``,
``optuna._hypervolume``); ``tests/test_optuna_adapter.py`` pins each function to the installed Optuna's behaviour, so an
upgrade that changes them fails there, not silently in a search.

Written against Optuna 5.0.
"""

from __future__ import annotations

import optuna
from optuna.trial import FrozenTrial, TrialState

__all__ = ["storage_of", "study_id", "frozen_of", "trial_of", "claim_waiting", "fail_stored", "wfg_hypervolume"]


def storage_of(study: optuna.Study) -> optuna.storages.BaseStorage:
    """The storage object ``study`` reads and writes (what ``optuna.delete_study(storage=...)`` takes)."""
    return study._storage


def study_id(study: optuna.Study) -> int:
    """The study's id in its storage: unique there while the study exists, unlike a name that may be reused."""
    return study._study_id


def frozen_of(study: optuna.Study, trial: optuna.trial.Trial | FrozenTrial) -> FrozenTrial:
    """The trial as stored now (a fresh read, not the copy ``trial`` may hold)."""
    return study._storage.get_trial(trial._trial_id)


def trial_of(study: optuna.Study, frozen: FrozenTrial) -> optuna.trial.Trial:
    """A live :class:`optuna.trial.Trial` of a stored RUNNING trial, to suggest, set attributes on and ``tell``."""
    return optuna.trial.Trial(study, frozen._trial_id)


def claim_waiting(study: optuna.Study, frozen: FrozenTrial) -> optuna.trial.Trial | None:
    """Move one WAITING trial to RUNNING and return it live, or None when another process took it (or it is
    finished): what ``study.ask()`` does with the oldest WAITING trial, for a chosen one."""
    try:
        if not study._storage.set_trial_state_values(frozen._trial_id, state=TrialState.RUNNING):
            return None
    except optuna.exceptions.UpdateFinishedTrialError:
        return None
    return trial_of(study, frozen)


def fail_stored(study: optuna.Study, frozen: FrozenTrial, user_attrs: dict) -> None:
    """Record a trial some other process left RUNNING as FAIL, with ``user_attrs``: ``study.tell`` takes only the
    trials this process asked for."""
    storage = study._storage
    for key, value in user_attrs.items():
        storage.set_trial_user_attr(frozen._trial_id, key, value)
    storage.set_trial_state_values(frozen._trial_id, TrialState.FAIL)


def wfg_hypervolume(points, reference) -> float:
    """The exact hypervolume (Optuna's WFG) that ``points`` (minimized, each dominating ``reference``) enclose."""
    import numpy as np
    from optuna._hypervolume import compute_hypervolume

    return float(compute_hypervolume(np.asarray(points, dtype=float), np.asarray(reference, dtype=float)))
