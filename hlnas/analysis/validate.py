"""Does a proxy rank architectures as at-scale training does? ``hlnas validate``'s statistics.

A proxy (:class:`hlnas.analysis.validation_data.Proxy`: runs per candidate and seed) is compared with a reference table
of at-scale results over the cells both have. A cell is a (mixer, ratio), or a layout where the reference names
layouts; its proxy value is the mean over its seeds. :func:`validate` measures:

* **rank agreement**: Spearman's rho of proxy and reference, with a percentile bootstrap interval (cells resampled with
  replacement, seeded);
* **the attention-share predictor**: the same rho for a predictor that trains nothing, the layout's share of attention
  layers (pure 0, r:1 1/r, the Transformer 1), and the partial rho of the proxy with that share held fixed (ranks,
  then the partial correlation): what the proxy knows beyond "more attention recalls more";
* **the state bar** (with ``state_preset``): rho for a second predictor that trains nothing, the attention share with
  ties broken by the layout's recurrent-state bytes (hlnas's cost model at that preset's widths): more memory in the
  linear layers, more recall. A proxy below it learned no more than the cost model prints;
* **mixer order within a ratio**: Kendall's tau-b of proxy and reference over the mixers at each ratio, averaged over
  the ratios with two mixers or more (a ratio where either side ties every mixer has no order: tau 0 there);
* **saturation**: the proxy cells within ``tolerance`` of the best proxy cell (higher is better), flagged when they
  are more than ``max_saturated`` of the cells: a saturated proxy cannot order what it ties;
* **seeds**: rho between each pair of seeds over the cells both ran; the split cells, where a seed learned (its
  baseline-corrected ``recall`` >= ``learned``, or the scored value where the source has no ``recall``) and another did
  not; and rho with the reference when each cell keeps one of its seeds, drawn at random (min..max over ``draws``);
* **cost**: GPU-seconds per candidate run (mean, max) and the cards, where the source records them.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from hlnas.model.layout import Layout, placement_of
from hlnas.analysis.paper import attention_share
from hlnas.analysis.rankstats import bootstrap_interval, kendall_tau, partial_spearman, spearman_rho
from hlnas.analysis.validation_data import COST_COLUMNS, TRANSFORMER, Proxy, Reference, Run, ValidationError
from hlnas.model.catalog import linear_mixer_names

__all__ = ["Cell", "Correlation", "Validation", "validate", "proxy_cells", "match_cells", "seeds_split", "state_ranks",
           "TOLERANCE", "LEARNED",
           "MAX_SATURATED", "RESAMPLES", "DRAWS"]

TOLERANCE = 0.02  # a cell this close to the best is tied with it at the proxy's resolution
LEARNED = 0.5  # corrected recall at which a run has learned: half way from its no-recall baseline to 1
MAX_SATURATED = 0.2  # more than this share of the cells tied with the best: the proxy is saturated
RESAMPLES = 2000
DRAWS = 2000


def seeds_split(recalls: Sequence[float], learned: float = LEARNED) -> bool:
    """Some seeds learned (corrected recall >= ``learned``) and some did not: the seeds' mean stands for none of them."""
    got = sum(r >= learned for r in recalls)
    return 0 < got < len(recalls)


@dataclass(frozen=True)
class Cell:
    """The proxy's runs of one (mixer, ratio[, layout]), and the reference's value where it has one."""

    mixer: str
    ratio: str
    layout: str | None
    runs: tuple[Run, ...]
    reference: float | None = None

    @property
    def name(self) -> str:
        """``mixer ratio``, and the placement of its attention layers where it is not the paper's."""
        place = None
        if self.layout and self.ratio not in ("pure", "full"):
            place = placement_of(Layout.parse(self.layout))
        return f"{self.mixer} {self.ratio}" + (f" [{place}]" if place and place != "paper" else "")

    @property
    def value(self) -> float:
        return statistics.fmean(r.value for r in self.runs)

    @property
    def share(self) -> float:
        return attention_share(self.ratio)

    def _mean(self, attr: str) -> float | None:
        got = [getattr(r, attr) for r in self.runs if getattr(r, attr) is not None]
        return statistics.fmean(got) if got else None

    @property
    def raw(self) -> float | None:
        return self._mean("raw")

    @property
    def baseline(self) -> float | None:
        return self._mean("baseline")

    def split(self, threshold: float) -> bool:
        """A seed learned and another did not, judged on each run's corrected ``recall``, else its value."""
        return seeds_split([r.recall if r.recall is not None else r.value for r in self.runs], threshold)


class Correlation(NamedTuple):
    """A rank correlation over ``n`` cells and its bootstrap interval (None where undefined); ``dropped``: resamples
    where it was undefined (every drawn value tied)."""

    n: int
    rho: float | None
    lo: float | None
    hi: float | None
    dropped: int = 0


@dataclass(frozen=True)
class Validation:
    """Everything :func:`validate` measured; ``settings`` holds the thresholds and seeds it used."""

    proxy: Proxy
    reference: Reference
    cells: tuple[Cell, ...]  # every proxy cell; those in common carry their reference value
    proxy_rho: Correlation
    share_rho: Correlation
    partial_rho: Correlation
    within_ratio: dict  # "per_ratio": {ratio: {"tau", "mixers", "tied"}}, "mean": over those ratios
    saturation: dict
    seeds: dict
    cost: dict
    unmatched_reference: tuple[str, ...] = ()
    settings: dict = field(default_factory=dict)
    state_rho: Correlation | None = None  # the state bar, where asked for (``state_preset``)

    @property
    def shared(self) -> tuple[Cell, ...]:
        return tuple(c for c in self.cells if c.reference is not None)


def _nan_none(v: float) -> float | None:
    return None if v is None or math.isnan(v) else v


def proxy_cells(runs: Sequence[Run]) -> list[Cell]:
    """The runs grouped by (mixer, ratio, layout), in the catalog's order of mixers, then by attention share; one run per
    seed in a cell (two would be counted twice as a pair of seeds)."""
    by: dict[tuple, list[Run]] = {}
    for r in runs:
        cell = by.setdefault((r.mixer, r.ratio, r.layout), [])
        if any(x.seed == r.seed for x in cell):
            raise ValidationError(f"cell {r.mixer} {r.ratio}{' ' + r.layout if r.layout else ''} has two runs at seed "
                                  f"{r.seed}; give each seed of a cell one run (a seed column tells seeds apart)")
        cell.append(r)
    cells = [Cell(m, q, lay, tuple(sorted(rs, key=lambda r: _seed_key(r.seed)))) for (m, q, lay), rs in by.items()]
    order = {name: i for i, name in enumerate([*linear_mixer_names(), TRANSFORMER])}  # the catalog's order
    return sorted(cells, key=lambda c: (order.get(c.mixer, len(order)), c.mixer, c.share, c.layout or ""))


def match_cells(cells: Sequence[Cell], reference: Reference) -> tuple[list[Cell], list[str]]:
    """``cells`` with the reference's value set where it has one, and the reference cells no proxy cell matches.

    A reference cell by layout matches the proxy cell of that layout; one by (mixer, ratio) matches the proxy cell of
    that mixer and ratio, and is an error where the proxy holds that ratio at several layouts (placements)."""
    values: dict[int, float] = {}
    unmatched = []
    for (m, q, lay), v in reference.values.items():
        hits = [i for i, c in enumerate(cells) if (c.layout == lay if lay else (c.mixer, c.ratio) == (m, q))]
        if len(hits) > 1:
            raise ValidationError(f"reference cell {m} {q} matches {len(hits)} proxy layouts "
                                  f"({', '.join(str(cells[i].layout) for i in hits)}); name layouts in the reference "
                                  "(column layout) to say which is which")
        if not hits:
            unmatched.append(f"{m} {q}" + (f" {lay}" if lay else ""))
        elif hits[0] in values:
            raise ValidationError(f"proxy cell {cells[hits[0]].name} matches two reference cells; give it one")
        else:
            values[hits[0]] = v
    out = [Cell(c.mixer, c.ratio, c.layout, c.runs, values.get(i)) for i, c in enumerate(cells)]
    return out, unmatched


def _correlation(stat, n: int, resamples: int, seed: int) -> Correlation:
    lo, hi, dropped = bootstrap_interval(stat, n, resamples=resamples, seed=seed)
    return Correlation(n, _nan_none(stat(list(range(n)))), lo, hi, dropped)


def _within_ratio(shared: Sequence[Cell]) -> dict:
    by: dict[str, list[Cell]] = {}
    for c in shared:
        by.setdefault(c.ratio, []).append(c)
    per = {}
    for ratio, cs in sorted(by.items(), key=lambda kv: attention_share(kv[0])):
        if len(cs) < 2:
            continue
        tau = kendall_tau([c.value for c in cs], [c.reference for c in cs])
        per[ratio] = {"tau": 0.0 if math.isnan(tau) else tau, "mixers": len(cs), "tied": math.isnan(tau)}
    taus = [v["tau"] for v in per.values()]
    return {"per_ratio": per, "mean": statistics.fmean(taus) if taus else None}


def _saturation(cells: Sequence[Cell], tolerance: float, max_share: float) -> dict:
    best = max(cells, key=lambda c: c.value)
    near = [c for c in cells if c.value >= best.value - tolerance]
    shared = [c for c in cells if c.reference is not None]
    frac = len(near) / len(cells)
    return {"tolerance": tolerance, "best": best, "count": len(near), "of": len(cells), "fraction": frac,
            "cells": [c.name for c in near], "shared_count": sum(c.reference is not None for c in near),
            "shared_of": len(shared), "max_fraction": max_share, "saturated": frac > max_share}


def _seed_draws(shared: Sequence[Cell], draws: int, seed: int) -> dict | None:
    """rho with the reference when each cell keeps one of its runs, drawn at random; None when no cell has two."""
    if not any(len(c.runs) > 1 for c in shared) or draws < 1:
        return None
    rng, ref, got = random.Random(seed), [c.reference for c in shared], []
    for _ in range(draws):
        rho = spearman_rho([rng.choice(c.runs).value for c in shared], ref)
        if not math.isnan(rho):
            got.append(rho)
    if not got:
        return None
    return {"min": min(got), "max": max(got), "median": statistics.median(got), "draws": draws, "defined": len(got)}


def _seed_key(s: str) -> tuple:
    return (not s.isdigit(), int(s) if s.isdigit() else 0, s)


def _seeds(cells: Sequence[Cell], learned: float, draws: int, seed: int) -> dict:
    seeds = sorted({r.seed for c in cells for r in c.runs}, key=_seed_key)
    pairs = []
    for i, a in enumerate(seeds):
        for b in seeds[i + 1:]:
            both = [(ra.value, rb.value) for c in cells
                    for ra in c.runs if ra.seed == a for rb in c.runs if rb.seed == b]
            if len(both) >= 3:
                rho = _nan_none(spearman_rho([x for x, _ in both], [y for _, y in both]))
                pairs.append({"seeds": (a, b), "n": len(both), "rho": rho})
    defined = [p["rho"] for p in pairs if p["rho"] is not None]
    has_recall = all(r.recall is not None for c in cells for r in c.runs)
    return {"seeds": seeds, "pairs": pairs, "consistency": statistics.fmean(defined) if defined else None,
            "learned": learned, "judged_on": "recall" if has_recall else "value",
            "split": [c for c in cells if c.split(learned)],
            "draws": _seed_draws([c for c in cells if c.reference is not None], draws, seed)}


def _cost(proxy: Proxy) -> dict:
    got = [(r.gpu_s, r) for r in proxy.runs if r.gpu_s is not None]
    out = {"column": proxy.cost_column, "what": COST_COLUMNS.get(proxy.cost_column or ""), "n": len(got),
           "runs": len(proxy.runs), "mean": None, "max": None, "max_of": None, "total": None,
           "cards": dict(Counter(r.card or "unrecorded" for _, r in got).most_common())}
    if got:
        top = max(got, key=lambda t: t[0])[1]
        out.update(mean=statistics.fmean(g for g, _ in got), max=top.gpu_s, total=sum(g for g, _ in got),
                   max_of=f"{top.mixer} {top.ratio} seed {top.seed}")
    return out


def state_ranks(cells: Sequence[tuple[str, str, str | None]], preset: str, layers: int = 24) -> list[int]:
    """Each ``(mixer, ratio, layout)`` cell's rank by its attention share, ties broken by its recurrent-state bytes at
    ``preset``'s widths (equal pairs tie): the layout itself where given, else ``mixer`` at ``ratio`` over ``layers``
    (the paper's placement; the Transformer all attention)."""
    from hlnas.model.config import PRESETS
    from hlnas.model.cost import layout_cost
    from hlnas.model.layout import build_layout

    if preset not in PRESETS:
        raise ValidationError(f"state preset {preset!r} is not a model preset; allowed: {', '.join(PRESETS)}")
    keys = []
    for mixer, ratio, layout in cells:  # the share as Cell.share reads it: the Transformer's ratio is "full"
        lay = Layout.parse(layout) if layout else build_layout(mixer, "pure" if mixer == TRANSFORMER else ratio, layers)
        keys.append((attention_share(ratio), layout_cost(lay, PRESETS[preset]).state_bytes))
    order = sorted(set(keys))
    return [order.index(k) for k in keys]


def validate(proxy: Proxy, reference: Reference, *, tolerance: float = TOLERANCE, learned: float = LEARNED,
             max_saturated: float = MAX_SATURATED, resamples: int = RESAMPLES, draws: int = DRAWS,
             seed: int = 0, state_preset: str | None = None) -> Validation:
    """Score ``proxy`` against ``reference`` (see the module docstring); ``seed`` seeds the bootstrap and the seed
    draws, so the same inputs print the same intervals. :class:`ValidationError` when they share fewer than 3 cells."""
    if not proxy.runs:
        raise ValidationError(f"proxy {proxy.name}: no run scored ok with a value of {proxy.measure!r}"
                              + (f" ({proxy.skipped} skipped)" if proxy.skipped else ""))
    cells, unmatched = match_cells(proxy_cells(proxy.runs), reference)
    shared = [c for c in cells if c.reference is not None]
    if len(shared) < 3:
        raise ValidationError(
            f"proxy {proxy.name} and reference {reference.name} share {len(shared)} cell(s); a rank correlation needs 3 "
            f"or more. Proxy cells: {', '.join(c.name for c in cells[:8])}{' ...' if len(cells) > 8 else ''}; reference "
            f"cells: {', '.join(' '.join(filter(None, k)) for k in list(reference.values)[:8])}")
    x, y, z = [c.value for c in shared], [c.reference for c in shared], [c.share for c in shared]

    def pick(col, idx):
        return [col[i] for i in idx]

    n = len(shared)
    state_rho = None
    if state_preset is not None:
        w = state_ranks([(c.mixer, c.ratio, c.layout) for c in shared], state_preset)
        state_rho = _correlation(lambda idx: spearman_rho(pick(w, idx), pick(y, idx)), n, resamples, seed)
    return Validation(
        proxy, reference, tuple(cells),
        proxy_rho=_correlation(lambda idx: spearman_rho(pick(x, idx), pick(y, idx)), n, resamples, seed),
        share_rho=_correlation(lambda idx: spearman_rho(pick(z, idx), pick(y, idx)), n, resamples, seed),
        partial_rho=_correlation(lambda idx: partial_spearman(pick(x, idx), pick(y, idx), pick(z, idx)), n, resamples,
                                 seed),
        within_ratio=_within_ratio(shared), saturation=_saturation(cells, tolerance, max_saturated),
        seeds=_seeds(cells, learned, draws, seed), cost=_cost(proxy), unmatched_reference=tuple(unmatched),
        settings={"tolerance": tolerance, "learned": learned, "max_saturated": max_saturated, "resamples": resamples,
                  "draws": draws, "seed": seed, "state_preset": state_preset}, state_rho=state_rho)
