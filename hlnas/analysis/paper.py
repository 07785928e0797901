"""The published numbers of the paper hlnas reproduces, for overlays on a paper-grid study's figures.

Source: "A Systematic Analysis of Hybrid Linear Attention", arXiv 2507.06457 (v2; v1 reports the same
numbers with its tables numbered differently). ``resources/paper_grid.csv`` holds only numbers printed in
the paper, one row per (scale, mixer, ratio), with a ``source`` column naming the table (v2 numbering)
and a ``note`` column. Tables used here:

* Table 7: RULER (recall) average by ratio for DeltaNet, GatedDeltaNet, GLA, HGRN2 (scale not stated;
  presumably 1.3B). Comparable in kind with a study's ``recall`` (the same weighted 13-task average).
* Table 5: RULER groups for the best ratio of each of those mixers and the Transformer (0.423, the
  paper's dashed Transformer line).
* Table 6: zero-shot LM accuracy by ratio "averaged across 1.3B and 340M". It cannot be reproduced from
  Tables 2/3 (it runs about 0.017 lower), so treat it as a relative ranking only, never as a scale.

The paper trains at 340M/1.3B parameters on 20B/100B tokens; hlnas studies train small proxies, so
overlays compare shapes (which ratio and mixer wins), not absolute values. Overlays look a cell up by
(mixer, ratio) alone, so they are drawn only for a study whose every candidate is such a cell
(:attr:`hlnas.space.SearchSpace.is_paper_grid`, read as ``hlnas.analysis.pareto.StudyData.paper_grid``).
"""

from __future__ import annotations

import csv
import functools
import math
import re
from importlib import resources

from hlnas.analysis.rankstats import pearson, ranks
from hlnas.model.catalog import mixer_entry
from hlnas.model.layout import Layout
from hlnas.errors import LayoutError, UnknownMixerError

__all__ = [
    "PAPER",
    "PAPER_TITLE",
    "RULER_GROUP_ORDER",
    "paper_label",
    "paper_rows",
    "recall_by_ratio",
    "lm_by_ratio",
    "ruler_groups",
    "transformer_recall",
    "mixer_and_ratio",
    "attention_share",
    "spearman",
]

PAPER = "arXiv 2507.06457"
PAPER_TITLE = "A Systematic Analysis of Hybrid Linear Attention"

#: Table 5's columns, which are hlnas.score.ruler's group names.
RULER_GROUP_ORDER = ("Multikey", "Multiquery", "Multivalue", "Singlevalue", "CWE+FWE", "QA", "VT")
_GROUP_COLUMNS = dict(zip(RULER_GROUP_ORDER, ("ruler_multikey", "ruler_multiquery", "ruler_multivalue",
                                              "ruler_singlevalue", "ruler_cwe_fwe", "ruler_qa", "ruler_vt")))  # fmt: skip

# The paper's model names -> hlnas catalog names; the two averaging columns become "average".
_MIXERS = {
    "DeltaNet": "deltanet", "GatedDeltaNet": "gated_deltanet", "GLA": "gla", "HGRN": "hgrn", "HGRN2": "hgrn2",
    "RetNet": "retnet", "Transformer": "transformer", "AVG4_MIXERS": "average", "ALL6_MIXERS": "average",
}  # fmt: skip
_NUMERIC = ("lm_avg", "ruler_avg", "arc_c", "arc_e", "hellaswag", "lambada", "obqa", "piqa", *_GROUP_COLUMNS.values())


def paper_label(table: int) -> str:
    """How every overlay is marked, e.g. ``paper (arXiv 2507.06457, Table 7)``."""
    return f"paper ({PAPER}, Table {table})"


@functools.cache
def paper_rows() -> tuple[dict, ...]:
    """Every CSV row: numbers as floats (None when blank), plus ``table`` (v2 number) and hlnas ``mixer``."""
    text = resources.files("hlnas").joinpath("resources/paper_grid.csv").read_text(encoding="utf-8")
    out = []
    for row in csv.DictReader(text.splitlines()):
        row = dict(row)
        for key in _NUMERIC:
            row[key] = float(row[key]) if row.get(key) else None
        m = re.search(r"Table (\d+)", row["source"])
        row["table"] = int(m.group(1)) if m else None
        row["paper_mixer"] = row["mixer"]
        row["mixer"] = _MIXERS.get(row["mixer"], row["mixer"])
        out.append(row)
    return tuple(out)


def _by_ratio(table: int, column: str) -> dict[str, dict[str, float]]:
    grid: dict[str, dict[str, float]] = {}
    for row in paper_rows():
        if row["table"] == table and row[column] is not None:
            grid.setdefault(row["mixer"], {})[row["ratio"]] = row[column]
    return grid


def recall_by_ratio() -> dict[str, dict[str, float]]:
    """Table 7: ``{mixer: {ratio: RULER average}}`` (ratios pure, 24:1 ... 3:1; key ``average`` = its Average column)."""
    return _by_ratio(7, "ruler_avg")


def lm_by_ratio() -> dict[str, dict[str, float]]:
    """Table 6: ``{mixer: {ratio: LM accuracy}}``; a relative ranking only (see the module docstring)."""
    return _by_ratio(6, "lm_avg")


def transformer_recall() -> float:
    """Table 5's Transformer RULER average (0.423), the paper's dashed reference line."""
    return next(r["ruler_avg"] for r in paper_rows() if r["table"] == 5 and r["mixer"] == "transformer")


def ruler_groups() -> dict[tuple[str, str], dict[str, float]]:
    """Table 5: ``{(mixer, ratio): {group: score}}`` for the best ratio of each mixer and the Transformer."""
    out = {}
    for row in paper_rows():
        if row["table"] == 5:
            ratio = "transformer" if row["mixer"] == "transformer" else row["ratio"]
            out[(row["mixer"], ratio)] = {g: row[c] for g, c in _GROUP_COLUMNS.items()}
    return out


# -- a trial's place in the grid -----------------------------------------------------------


def _layout_mixers(rec) -> list[str]:
    if rec.attrs.get("mixers"):
        return list(rec.attrs["mixers"])
    try:
        return list(Layout.parse(rec.layout).mixers)
    except (LayoutError, UnknownMixerError):
        return []


def _is_attention(name: str) -> bool:
    try:
        return mixer_entry(name).is_attention
    except UnknownMixerError:  # a mixer newer than this catalog: count it as linear
        return False


def mixer_and_ratio(rec) -> tuple[str | None, str | None]:
    """A trial's cell of the paper's grid: (linear mixer or 'transformer', ratio); (None, ratio) when mixers are mixed.

    ``rec`` is a :class:`hlnas.analysis.pareto.TrialRecord` (its ``attrs`` and ``layout``); the attrs the study
    loop writes are used, else the layout string is decoded.
    """
    mixers = _layout_mixers(rec)
    n_attn = sum(map(_is_attention, mixers))  # full attention: an all-window model is pure, never the Transformer
    try:
        layout = Layout(tuple(mixers)) if mixers else None
    except (LayoutError, UnknownMixerError):  # a mixer newer than this catalog: count it as linear
        layout = None
    linear = (rec.attrs.get("linear_mixers") or (list(layout.linear_mixers) if layout else None)
              or list(dict.fromkeys(m for m in mixers if not _is_attention(m))))
    ratio = rec.attrs.get("ratio") or (layout.ratio if layout else None)
    if ratio is None and mixers:
        n = len(mixers)
        ratio = ("pure" if n_attn == 0 else "transformer" if n_attn == n
                 else f"{n // n_attn}:1" if n % n_attn == 0 else f"{n_attn}/{n}")  # fmt: skip
    if ratio == "transformer" or (mixers and n_attn == len(mixers)):
        return "transformer", "transformer"
    return (linear[0] if len(linear) == 1 else None), ratio


def attention_share(ratio: str) -> float:
    """Fraction of attention layers a ratio string means: pure 0, 'r:1' 1/r, 'a/n' a/n, the Transformer's (or 'full') 1;
    unknown strings sort last."""
    try:
        if ratio in ("pure", "transformer", "full"):
            return 0.0 if ratio == "pure" else 1.0
        if ":" in ratio:
            return 1.0 / float(ratio.split(":")[0])
        a, _, n = ratio.partition("/")
        return float(a) / float(n)
    except (ValueError, ZeroDivisionError):
        return math.inf


# -- comparing a study's grid with the paper ---------------------------------------------------


def spearman(a: list[float], b: list[float], permutations: int = 20000, seed: int = 0) -> tuple[float, float]:
    """Spearman's rank correlation of paired values -> (rho, two-sided permutation p-value).

    rho is Pearson's correlation of the tie-averaged ranks. The p-value is the share of ``permutations``
    random pairings (seeded: the same inputs give the same p) whose |rho| reaches the observed one; with a
    dozen cells a permutation test is exact enough and needs no distribution table.
    """
    import random

    if len(a) != len(b) or len(a) < 3:
        raise ValueError(f"spearman needs two equally long lists of at least 3 values, got {len(a)} and {len(b)}")
    ra, rb = ranks(a), ranks(b)
    rho = pearson(ra, rb)
    if math.isnan(rho):
        return rho, float("nan")
    rng, rb_perm, hits = random.Random(seed), list(rb), 0
    for _ in range(permutations):
        rng.shuffle(rb_perm)
        hits += abs(pearson(ra, rb_perm)) >= abs(rho) - 1e-12
    return rho, (hits + 1) / (permutations + 1)
