"""Results another study measured already (``hlnas search --results-from STUDY``).

An extension of a grid repeats some of the grid's candidates: a placement study's ``paper`` cells, a new sampler's
first proposals. Where the other study trained the same layout with every setting that shapes a result the same
(depth, model, training with its seed, data, scoring, the KV context: :func:`result_differences`), training it again
measures nothing new; the trial is told that result instead, with ``result_from: STUDY#N`` naming the trial it came
from. Unlike a reused copy inside one study (``reused_from``) it is this study's point of that layout: it counts
towards the target and appears on the front. The sources are stored with the study (``hlnas_results_from``), so a
resume adopts from them too.
"""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from hlnas.errors import HlnasError
from hlnas.search.records import objective_values, tell_result
from hlnas.search.trial import TrialResult
from hlnas.space import SearchSpace

__all__ = ["RESULTS_FROM_ATTR", "result_differences", "check_results_from", "store_results_from", "adoptable_results",
           "adopt", "result_origins"]

RESULTS_FROM_ATTR = "hlnas_results_from"
#: what two spaces may differ in and still measure a layout the same: the candidates, how they are searched, and
#: how the calibration judges them (a result does not depend on those)
_NOT_RESULT = ("name", "source", "mixers", "ratios", "placements", "attention_sets", "transformer", "hetero",
               "objectives", "constraints", "sampler", "rungs", "calibration")
#: attrs of the source trial that describe its place in its own study, not the measurement; its clock too, which
#: GPU-time attribution (the grid's collect script) would otherwise split between the run and its copy
_OWN_STUDY = ("requeued_from", "reused_from", "calibration", "result_from", "wall_s", "status", "started_at", "finished_at")


def result_differences(space: SearchSpace, other: SearchSpace) -> list[str]:
    """How ``other`` would measure a layout differently from ``space``, one ``key: a -> b`` line each ([] when it
    would not): every setting but the candidates, the search and the calibration; the training seed counts."""
    return space.diff(other, ignore=_NOT_RESULT)


def check_results_from(storage, space: SearchSpace, sources) -> list[str]:
    """The ``--results-from`` study names, each checked (in ``storage``, an Optuna storage object): an hlnas study
    whose space measures layouts as ``space`` does. Else a one-line :class:`~hlnas.errors.HlnasError` saying which
    and why."""
    from hlnas.search.storage import load_study
    from hlnas.space import space_from_dict

    names = list(dict.fromkeys(sources or ()))
    for name in names:
        if not isinstance(name, str) or not name:
            raise HlnasError(f"--results-from takes study names; got {name!r}")
        src = load_study(storage, name)  # UnknownStudyError lists the studies there
        if "hlnas_space" not in src.user_attrs:
            raise HlnasError(f"--results-from {name}: that study has no stored hlnas space, so nothing says how its "
                             "results were measured")
        diffs = result_differences(space, space_from_dict(src.user_attrs["hlnas_space"], where=f"study '{name}'"))
        if diffs:
            raise HlnasError(f"--results-from {name}: it measures layouts differently from this space, so its results "
                             f"are not this study's: {'; '.join(diffs[:3])}{' ...' if len(diffs) > 3 else ''}")
    return names


def store_results_from(study: optuna.Study, names: list[str]) -> list[str]:
    """Add ``names`` to the sources stored with ``study`` (a resume keeps the earlier ones); returns them all."""
    stored = list(study.user_attrs.get(RESULTS_FROM_ATTR) or [])
    merged = stored + [n for n in names if n not in stored and n != study.study_name]
    if merged != stored:
        study.set_user_attr(RESULTS_FROM_ATTR, merged)
    return merged


def adoptable_results(study: optuna.Study, metrics_names) -> dict[str, tuple[str, dict]]:
    """``{layout: ("STUDY#N", user attrs)}`` from the stored sources' trained COMPLETE trials (not their reused
    copies) that carry every metric this study's objectives read, finite; the first source listed wins."""
    from hlnas.search import optuna_adapter
    from hlnas.search.storage import load_study

    out: dict[str, tuple[str, dict]] = {}
    for name in study.user_attrs.get(RESULTS_FROM_ATTR) or ():
        src = load_study(optuna_adapter.storage_of(study), name)
        for t in src.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            a = t.user_attrs
            if "layout" not in a or "reused_from" in a:
                continue
            if objective_values(metrics_names, a) is not None:  # what adopt's tell will read from them
                out.setdefault(a["layout"], (f"{name}#{t.number}", dict(a)))
    return out


def adopt(study: optuna.Study, metrics_names, trial, where: str, attrs: dict, emit) -> None:
    """Tell ``trial`` the result measured in ``where`` (``STUDY#N``), as if it had trained it: its metrics stored,
    its objective values computed from them for this study's objectives, ``result_from`` naming the source."""
    metrics = {k: v for k, v in attrs.items() if k not in _OWN_STUDY}
    trial.set_user_attr("result_from", where)
    tell_result(study, metrics_names, trial, TrialResult(trial.number, "ok", {**metrics, "status": "ok"}, wall_s=0.0))
    emit("adopted", {"number": trial.number, "layout": attrs.get("layout"), "from": where})


def result_origins(trials) -> dict:
    """``{"trained": n, "adopted": m, "adopted_from": [STUDY, ...]}`` over the COMPLETE ``trials`` that count as the
    study's own (its reused copies left out): how many it trained and how many it adopted (``result_from``), from
    which studies (``hlnas status`` says it)."""
    own = [t.user_attrs for t in trials if t.state == TrialState.COMPLETE and "reused_from" not in t.user_attrs]
    sources = [a["result_from"].rpartition("#")[0] for a in own if "result_from" in a]
    return {"trained": len(own) - len(sources), "adopted": len(sources), "adopted_from": list(dict.fromkeys(sources))}
