"""RULER recall scores for hlnas candidates: RULER's metrics, the paper's averages, and greedy evaluation of a model.

Samples and training documents are :mod:`hlnas.recall.ruler`'s; task generation :mod:`hlnas.recall.ruler_tasks`'s.

Scale: every score here is a fraction in [0, 1] (the paper's tables), not RULER's 0-100.

Metrics (NVIDIA RULER ``eval/synthetic/constants.py``; reference/ruler-mqar.md section 1.1). The prediction
is stripped, each control character becomes ``\\n``, and it is stripped again; a reference counts as found
when ``ref.lower() in pred.lower()``.

- ``string_match_all`` (fraction of references found) for all 8 NIAH tasks, VT, CWE and FWE;
- ``string_match_part`` (1 if any reference is found) for QA only.

The issue text says "part for multi-value/query"; RULER's code and spec use ``all`` for every NIAH task
(multivalue and multiquery included), and hlnas follows RULER.

Averages: a group's score is the mean of its tasks; the RULER average weights each group by its count
of tasks (Multikey 3, Multiquery 1, Multivalue 1, Singlevalue 3, CWE+FWE 2, QA 2, VT 1), which reproduces
the paper's Avg column (paper_grid.md 1e) and equals the plain 13-task mean when every task ran.
When tasks are missing (QA without data files) the weights are renormalized over the groups that ran,
and the result names the missing tasks and groups.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from hlnas.errors import ConfigError
from hlnas.recall.ruler import (GROUP_WEIGHTS, PART_MATCH_TASKS, QA_TASKS, RULER_GROUPS, RULER_TASKS, RulerLengthError,
                                check_task, generate_samples)
from hlnas.recall.ruler_tasks import MAX_NEW_TOKENS

__all__ = ["score_sample", "aggregate", "evaluate_ruler"]

_CONTROL = re.compile(r"[\x00-\x1f]")


def score_sample(task: str, prediction: str, answers: Sequence[str]) -> float:
    """RULER's metric for one sample, in [0, 1]: ``string_match_part`` for QA, ``string_match_all`` otherwise."""
    check_task(task)
    if not answers:
        raise ConfigError(f"task '{task}': a sample needs at least one reference answer")
    pred = _CONTROL.sub("\n", prediction.strip()).strip().lower()
    found = [ref.lower() in pred for ref in answers]
    if task in PART_MATCH_TASKS:
        return float(any(found))
    return sum(found) / len(found)


def aggregate(scores: Mapping[str, float | None]) -> dict:
    """Per-task, per-group and weighted RULER averages from per-task scores in [0, 1] (None = skipped).

    Returns ``{"tasks", "groups", "average", "task_mean", "complete", "missing_tasks", "missing_groups"}``.
    ``average`` weights each group mean by :data:`GROUP_WEIGHTS`, renormalized over the groups present.
    """
    for t in scores:
        check_task(t)
    tasks = {t: float(scores[t]) for t in RULER_TASKS if scores.get(t) is not None}
    groups: dict[str, list[float]] = {}
    for t, s in tasks.items():
        if not math.isfinite(s):
            raise ConfigError(f"score of task '{t}' is {s}; scores must be finite fractions in [0, 1]")
        groups.setdefault(RULER_GROUPS[t], []).append(s)
    group_means = {g: sum(v) / len(v) for g, v in groups.items()}
    weight = sum(GROUP_WEIGHTS[g] for g in group_means)
    average = sum(GROUP_WEIGHTS[g] * m for g, m in group_means.items()) / weight if weight else None
    return {
        "tasks": tasks,
        "groups": {g: group_means[g] for g in GROUP_WEIGHTS if g in group_means},
        "average": average,
        "task_mean": sum(tasks.values()) / len(tasks) if tasks else None,
        "complete": len(tasks) == len(RULER_TASKS),
        "missing_tasks": [t for t in RULER_TASKS if t not in tasks],
        "missing_groups": [g for g in GROUP_WEIGHTS if g not in group_means],
    }


def evaluate_ruler(
    model,
    tokenizer,
    tasks: Sequence[str] = RULER_TASKS,
    lengths: Sequence[int] = (4096,),
    n: int = 50,
    seed: int = 0,
    cache_dir: str | None = None,
    qa_files: Mapping[str, str] | None = None,
    *,
    batch_size: int = 8,
    device=None,
) -> dict:
    """Greedy RULER evaluation of ``model`` at each length (prompt ends with the answer prefix).

    ``qa_files`` maps ``qa_1``/``qa_2`` to local SQuAD/HotpotQA JSON files; a QA task without one is
    reported under ``skipped``, and so is a task whose shortest prompt does not fit a length (e.g. cwe
    at 1024 byte tokens) at that length: its score averages the lengths where it ran. Returns ``aggregate`` of the per-task scores averaged over lengths, plus
    ``per_length`` (``aggregate`` at each length), ``skipped``, ``lengths``, ``n``, ``seed`` and ``scale``.
    """
    from hlnas.score.generate import greedy_generate

    qa_files = dict(qa_files or {})
    for t in tasks:
        check_task(t)
    if not lengths or n < 1:
        raise ConfigError(f"evaluate_ruler needs at least one length and n >= 1, got lengths={list(lengths)}, n={n}")
    unknown = set(qa_files) - set(QA_TASKS)
    if unknown:
        raise ConfigError(f"qa_files keys must be among {', '.join(QA_TASKS)}, got {', '.join(sorted(unknown))}")
    skipped = {t: "no QA data file given (qa_files)" for t in tasks if t in QA_TASKS and t not in qa_files}
    from hlnas.recall.baselines import ruler_sample_baseline

    per_length, base_length = {}, {}
    too_long: dict[str, list[int]] = {}
    for length in lengths:
        scores: dict[str, float] = {}
        base: dict[str, float] = {}
        for task in tasks:
            if task in skipped:
                continue
            try:
                samples = generate_samples(task, tokenizer, length, n, seed, qa_files.get(task), cache_dir)
            except RulerLengthError:
                too_long.setdefault(task, []).append(int(length))
                continue
            preds = greedy_generate(model, tokenizer, [s.prompt for s in samples], MAX_NEW_TOKENS[task], device=device, batch_size=batch_size)
            scores[task] = sum(score_sample(task, p, s.answers) for p, s in zip(preds, samples)) / len(samples)
            base[task] = sum(ruler_sample_baseline(task, s.prompt, s.answers) for s in samples) / len(samples)
        per_length[int(length)] = aggregate(scores)
        base_length[int(length)] = base
    for task, ls in too_long.items():
        if len(ls) == len(lengths):
            skipped[task] = f"does not fit any evaluated length ({', '.join(map(str, ls))} tokens)"
        else:
            skipped[task] = f"does not fit length(s) {', '.join(map(str, ls))}; scored at the others"
    ran = [t for t in tasks if any(t in per_length[int(L)]["tasks"] for L in lengths)]
    mean_scores, mean_base = {}, {}
    for t in ran:
        got = [per_length[int(L)]["tasks"][t] for L in lengths if t in per_length[int(L)]["tasks"]]
        mean_scores[t] = sum(got) / len(got)
        got = [base_length[int(L)][t] for L in lengths if t in base_length[int(L)]]
        mean_base[t] = sum(got) / len(got)
    baseline = aggregate(mean_base)
    return {
        **aggregate(mean_scores),
        # the no-recall baseline (copy context strings of the answers' shape), weighted like the average
        "baseline": baseline["average"] if baseline["average"] is not None else 0.0,
        "baseline_tasks": baseline["tasks"],
        "per_length": per_length,
        "skipped": skipped,
        "lengths": [int(L) for L in lengths],
        "n": n,
        "seed": seed,
        "scale": "fraction in [0, 1]",
    }


