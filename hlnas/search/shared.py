"""A failure every trial shares stops the search (used by :func:`hlnas.search.loop.search_loop`).

When the first trials of a search all fail the same way, the cause is not in the layouts: a setting no layout can
train with (``score.mqar.model: {n_heads: 7}`` at ``d_model`` 64), a full disk under ``--out``, out of memory at every
layout. Training the rest only repeats the failure and marks every layout failed, so :class:`SharedCause` watches
what the trials are told and, after :data:`SHARED_AFTER` such failures in a row, the loop starts no more trials,
waits for those in flight, and raises :class:`SharedFailure`: one line naming the cause and what to change.

The layouts that failed for that cause are not failures of their own: their trial numbers are stored in study attr
``hlnas_shared_failure`` (which :func:`hlnas.search.records.failed_by_layout` reads) and their parameters re-queued,
so a plain ``--resume`` after the fix trains them, and a new search of the same study name replaces a study that
holds nothing else (:func:`only_shared_failures`).

"The same way" is the same error kind and the same first line of the message once numbers and the layout are
masked (out of memory at different sizes is one cause); a full disk is one cause whatever file it was writing, and
counts at any point of the search (it fills up mid-way), the other kinds only before this run completed a trial
(a later streak is more likely layouts that fail for reasons of their own).
"""

from __future__ import annotations

import re

import optuna
from optuna.trial import TrialState

from hlnas.errors import HlnasError
from hlnas.search.records import SHARED_ATTR, requeue

__all__ = ["SharedFailure", "SharedCause", "SHARED_AFTER", "SHARED_KINDS", "only_shared_failures"]

#: failures in a row, of the same cause, after which the search stops starting trials
SHARED_AFTER = 3
#: the failure kinds (hlnas.search.trial.ERROR_KINDS) a cause outside the layouts can give every trial. A NaN is the
#: layout's own (a mixer that diverges at this learning rate); the sampler benchmark's kinds (no_row, ...) are rows
SHARED_KINDS = ("config", "disk", "oom", "kernel", "cuda_error", "other")
_REMEDY = {
    "config": "change that setting (the space file or --set) and run the search again: a study holding only these "
              "failures starts afresh",
    "disk": "free space on that disk, or give --out a folder on another disk",
    "oom": "lower the batch sizes (train.batch_size, score.mqar.batch) or give each trial more memory",
}


class SharedFailure(HlnasError):
    """The first trials all failed the same way; the search stopped. ``kind``, ``error`` (the first trial's message,
    first line), ``trials`` (their numbers, re-queued) and ``resume`` (the command that resumes, as the message shows
    it; the command line sets the whole one)."""

    def __init__(self, kind: str, error: str, trials: list[int]):
        self.kind, self.error, self.trials, self.resume = kind, error, list(trials), "--resume"
        super().__init__(kind, error, trials)

    def __str__(self) -> str:
        return (f"the first {len(self.trials)} trials all failed the same way, so no more were started ({self.kind}): "
                f"{self.error}; {_REMEDY.get(self.kind, 'fix what it names')}. Their layouts are re-queued, not failed: "
                f"{self.resume} trains them once the cause is fixed (--keep-going: train on past it)")


def _own_errors(cls=HlnasError) -> set[str]:
    return {cls.__name__}.union(*(_own_errors(c) for c in cls.__subclasses__()))


def _first_line(error: str | None) -> str:
    """The first line of a trial's error; without the class name when it is one of hlnas's errors (they say what went
    wrong in words), with it for others (``NotADirectoryError: ...``)."""
    lines = (error or "").strip().splitlines()
    if not lines:
        return "(no message)"
    name, sep, rest = lines[0].partition(": ")
    return rest if sep and name in _own_errors() else lines[0]


def signature(kind: str | None, error: str | None, layout: str) -> tuple | None:
    """What two failures share when their cause is the same; None for a kind that is the layout's own."""
    if kind not in SHARED_KINDS:
        return None
    if kind == "disk":  # the same disk whatever file, size or layout
        return (kind,)
    line = _first_line(error).replace(layout, "<layout>")
    return kind, re.sub(r"\d+(?:\.\d+)?", "#", line)


class SharedCause:
    """Watches the trials told in one run of the loop; :attr:`tripped` once :data:`SHARED_AFTER` failed in a row
    the same way (see the module docstring). Trials in flight then are added when they fail the same way."""

    def __init__(self, after: int = SHARED_AFTER):
        self.after = after
        self.streak: list[tuple[int, dict, str]] = []  # (number, params, first line of the error)
        self.sig: tuple | None = None
        self.completed = False  # a trial of this run completed: only a full disk counts from now on
        self.tripped = False

    def told(self, trial: optuna.trial.FrozenTrial, layout: str) -> None:
        """A trial was told (COMPLETE or FAIL) with its result's user attrs."""
        if trial.state == TrialState.COMPLETE:
            self.completed = True
            if not self.tripped:
                self.streak, self.sig = [], None
            return
        a = trial.user_attrs
        sig = signature(a.get("error_kind"), a.get("error"), layout)
        if sig is not None and self.completed and sig[0] != "disk":
            sig = None
        if self.tripped:  # in flight when the search stopped: theirs too when it is the same cause
            if sig == self.sig:
                self.streak.append((trial.number, trial.params, _first_line(a.get("error"))))
            return
        if sig is None:
            self.streak, self.sig = [], None
            return
        if sig != self.sig:
            self.streak, self.sig = [], sig
        self.streak.append((trial.number, trial.params, _first_line(a.get("error"))))
        self.tripped = len(self.streak) >= self.after

    def record(self, study: optuna.Study) -> SharedFailure:
        """Store the streak as a shared cause (not failures of the layouts) and re-queue its layouts; the error to
        raise."""
        stored = study.user_attrs.get(SHARED_ATTR) or {}
        numbers = [n for n, _, _ in self.streak]
        study.set_user_attr(SHARED_ATTR, {"kind": self.sig[0], "error": self.streak[0][2],
                                          "trials": sorted(set(stored.get("trials", [])) | set(numbers))})
        for number, params, _ in self.streak:
            requeue(study, params, number)
        return SharedFailure(self.sig[0], self.streak[0][2], numbers)


def only_shared_failures(study: optuna.Study) -> bool:
    """Whether ``study`` holds nothing worth keeping beside failures of a shared cause: no trial completed, stopped
    or running, no calibration run. A new search of its name may then replace it (the cause was in the space)."""
    if not (study.user_attrs.get(SHARED_ATTR) or {}).get("trials"):
        return False
    return all(t.state in (TrialState.FAIL, TrialState.WAITING) and "calibration" not in t.user_attrs
               for t in study.get_trials(deepcopy=False))
