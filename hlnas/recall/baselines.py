"""No-recall baselines: what a model that has learned no key-to-value association scores on the exact
test instances of a recall objective, and recall corrected for it.

A recall number means nothing without these beside it (an early proxy grid's best candidate scored 0.306 where
eliminating revealed values, with no association at all, scores 0.340). Every recall objective reports its
baselines; the study optimises :func:`corrected`, ``max(0, (acc - b) / (1 - b))`` with ``b`` the strongest
baseline.

MQAR strategies, each scored like Zoology's accuracy (per instance the mean over its queries, then the
mean over instances):

* ``uniform``: any value symbol, uniformly (``1 / (V - V//2)``);
* ``copy_any``: any value symbol seen earlier in the instance, uniformly (``1/K`` in Zoology's form);
* ``eliminate_revealed`` (document form only, where each query is followed by its answer): a value seen
  earlier that has not yet been revealed as an answer (mean over queries of ``1/(K - i)``, ``H_K / K``).
* ``latest_by_repeat`` (only where keys are assigned twice, MQAR's ``overwrite``): a value still current (no later
  assignment of its key), among those whose key was assigned as often as the query's (twice or once): ``1/R`` for an
  overwritten key, ``1/(K - R)`` for the others. It counts keys and reads which value follows which assignment, but
  never looks up the queried key's value.

RULER strategies (:func:`ruler_sample_baseline`): copy, uniformly and without looking at the query, as many
distinct context strings of the answers' shape (7-digit numbers, UUIDs, adjective-noun words, 5-letter
variable names, list words) as there are answers; RULER's ``string_match_all`` then finds each answer with
probability ``min(1, |answers| / |candidates|)``. QA gets 0: a guessed span has no comparable shape.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from hlnas.metrics import corrected  # defined without torch (hlnas.search.rungs.checks and the figures use it); re-exported

__all__ = ["mqar_baselines", "ruler_sample_baseline", "strongest", "corrected", "recall_metrics", "MQAR_STRATEGIES"]

MQAR_STRATEGIES = ("uniform", "copy_any", "eliminate_revealed", "latest_by_repeat")
IGNORE = -100


def strongest(baselines: Mapping[str, float]) -> tuple[str, float]:
    """``(name, score)`` of the highest baseline (the one a result must beat)."""
    if not baselines:
        return "none", 0.0
    name = max(baselines, key=lambda k: baselines[k])
    return name, float(baselines[name])


def recall_metrics(scores: dict, sources=None) -> dict:
    """The study's recall from a trial's scores: the first of ``sources`` (raw accuracy keys; default the
    preference order of :data:`hlnas.metrics.RECALL_SOURCES`) present, its
    strongest no-recall baseline, and ``recall``, that accuracy corrected for the baseline (what searches
    optimise: :func:`hlnas.recall.baselines.corrected`), and ``recall_auc`` and ``recall_beyond``, the fresh-model MQAR's graded
    measures, where they were scored (:func:`hlnas.recall.proxy.learning_auc`, :mod:`hlnas.recall.beyond`). Empty when no recall objective was scored."""
    if sources is None:
        from hlnas.metrics import RECALL_SOURCES

        sources = [key for _, key in RECALL_SOURCES]
    key = next((k for k in sources if k in scores and scores[k] is not None), None)
    if key is None:
        return {}
    prefix = key.removesuffix("_acc").removesuffix("_avg")
    raw, base = float(scores[key]), float(scores.get(f"{prefix}_baseline", 0.0))
    graded = {name: scores[key] for name, key in (("recall_auc", "mqar_auc"), ("recall_beyond", "mqar_beyond"))
              if scores.get(key) is not None}
    return {**graded, "recall_source": key, "recall_raw": raw, "recall_baseline": base,
            "recall_baseline_name": scores.get(f"{prefix}_baseline_name"),
            "recall_baselines": scores.get(f"{prefix}_baselines", {}), "recall": corrected(raw, base)}


def mqar_baselines(inputs: Tensor, labels: Tensor, vocab_size: int, token_map: Sequence[int] | None = None,
                   *, document_form: bool = False) -> dict[str, float]:
    """Exact scores of the no-association strategies on MQAR instances ``inputs``/``labels`` ``[n, L]``
    (model token ids, as scored; ``token_map`` the MqarTask's, None for identity; labels -100 except at
    queries). ``document_form``: each query is followed by its answer (``as_documents``); adds
    ``eliminate_revealed``. Instances without queries are left out, as in :func:`~hlnas.recall.mqar.mqar_accuracy`."""
    if inputs.shape != labels.shape or inputs.dim() != 2:
        raise ValueError(f"inputs and labels must both be [n, L], got {tuple(inputs.shape)} and {tuple(labels.shape)}")
    half = vocab_size // 2
    is_value = torch.zeros(int(max(inputs.max().item(), labels.max().item(), vocab_size)) + 1, dtype=torch.bool)
    ids = list(token_map) if token_map is not None else list(range(vocab_size))
    is_value[torch.tensor(ids[half:], dtype=torch.long)] = True
    is_key = torch.zeros_like(is_value)
    is_key[torch.tensor(ids[1:half], dtype=torch.long)] = True
    x, y = inputs.cpu(), labels.cpu()
    totals = {k: 0.0 for k in MQAR_STRATEGIES if (document_form or k != "eliminate_revealed") and k != "latest_by_repeat"}
    repeats = 0.0  # latest_by_repeat's total; reported only where some instance assigns a key twice
    any_repeat = False
    count = 0
    for row in range(x.shape[0]):
        queries = (y[row] != IGNORE).nonzero().flatten().tolist()
        if not queries:
            continue
        xs = x[row].tolist()
        current = _current_values(xs, queries[0], is_key, is_value)
        value_pos = is_value[x[row]].nonzero().flatten().tolist()
        per = {k: 0.0 for k in totals}
        revealed: set[int] = set()
        vi, seen = 0, set()
        for q in queries:  # ascending
            while vi < len(value_pos) and value_pos[vi] <= q:
                seen.add(xs[value_pos[vi]])
                vi += 1
            answer = int(y[row, q])
            per["uniform"] += 1.0 / (vocab_size - half)
            if answer in seen:
                per["copy_any"] += 1.0 / len(seen)
            if "eliminate_revealed" in per:
                left = seen - revealed
                if answer in left:
                    per["eliminate_revealed"] += 1.0 / len(left)
                revealed.add(answer)  # shown right after this query
        if current is None:
            repeats += per["copy_any"] / len(queries)  # no key assigned twice: the strategy is copy_any
        else:
            any_repeat = True
            repeats += sum(_by_repeat(current, xs[q], int(y[row, q])) for q in queries) / len(queries)
        for k in totals:
            totals[k] += per[k] / len(queries)
        count += 1
    if count == 0:
        raise ValueError("no labelled positions in labels; nothing to score")
    out = {k: v / count for k, v in totals.items()}
    return {**out, "latest_by_repeat": repeats / count} if any_repeat else out


def _current_values(xs: list[int], end: int, is_key: Tensor, is_value: Tensor) -> dict[int, tuple[int, bool]] | None:
    """Before position ``end``: each assigned key's current value and whether it was assigned more than once; None
    where no key was assigned twice."""
    current, twice = {}, set()
    for p in range(end - 1):
        if is_key[xs[p]] and is_value[xs[p + 1]]:
            if xs[p] in current:
                twice.add(xs[p])
            current[xs[p]] = xs[p + 1]
    return {k: (v, k in twice) for k, v in current.items()} if twice else None


def _by_repeat(current: dict[int, tuple[int, bool]], query_key: int, answer: int) -> float:
    """latest_by_repeat's chance on one query: uniform over the current values of keys assigned as often as it."""
    group = query_key in current and current[query_key][1]
    candidates = {v for v, twice in current.values() if twice == group}
    return 1.0 / len(candidates) if answer in candidates else 0.0


# -- RULER ------------------------------------------------------------------------------------------
_SHAPES = (  # answer shape -> pattern of candidates in the context
    (re.compile(r"^\d+$"), lambda a: rf"(?<!\d)\d{{{len(a)}}}(?!\d)"),
    (re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"),
     lambda a: r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"),
    (re.compile(r"^[a-z]+-[a-z]+$"), lambda a: r"(?<![a-z-])[a-z]+-[a-z]+(?![a-z-])"),
    (re.compile(r"^[A-Z]+$"), lambda a: rf"(?<![A-Z]){'[A-Z]' * len(a)}(?![A-Z])"),
)


def _list_words(prompt: str) -> set[str]:
    """Words of RULER's CWE list (``1. word 2. word ...``) in the last list of the prompt."""
    tail = prompt[prompt.rfind("Below is a numbered list") :] if "Below is a numbered list" in prompt else prompt
    return set(re.findall(r"\d+\. ([^\s\d][^\s]*)", tail))


def ruler_sample_baseline(task: str, prompt: str, answers: Sequence[str]) -> float:
    """Expected ``string_match_all`` of copying ``len(answers)`` distinct context strings of the answers'
    shape, chosen without reading the query (0 for QA, whose answers have no shape to copy)."""
    if not answers or task.startswith("qa"):
        return 0.0
    if task == "cwe":
        candidates = _list_words(prompt)
    elif task == "fwe":
        body = prompt.split("\n\n")[-2] if prompt.count("\n\n") >= 2 else prompt
        candidates = {w for w in re.findall(r"(?<![a-z])[a-z]{%d}(?![a-z])" % len(answers[0]), body)}
    else:
        candidates = set()
        for a in answers:
            for shape, pattern in _SHAPES:
                if shape.match(a):
                    candidates |= set(re.findall(pattern(a), prompt))
                    break
    hits = sum(a in candidates for a in answers) if candidates else 0
    if hits == 0:
        return 0.0
    # each answer present among the candidates is copied with probability len(answers) / |candidates|
    p = min(1.0, len(answers) / len(candidates))
    return hits * p / len(answers)
