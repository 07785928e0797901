"""Rank statistics for the small tables a validation compares (a few dozen cells), in plain Python.

scipy is not a dependency of hlnas, and these are a few lines each: Spearman's rho (Pearson's correlation of
tie-averaged ranks), Kendall's tau-b, the partial Spearman correlation (ranks first, then the partial correlation
with the control held fixed) and a seeded percentile bootstrap. Undefined values (a constant column) are ``nan``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

__all__ = ["ranks", "pearson", "spearman_rho", "kendall_tau", "partial_spearman", "quantile", "bootstrap_interval"]

NAN = float("nan")
# a residual this small against the column's own spread is rounding: the column is a linear function of the control
_RESIDUAL_EPS = 1e-12


def ranks(xs: Sequence[float]) -> list[float]:
    """1-based ranks; tied values share the mean of the ranks they span ([5, 1, 5] -> [2.5, 1, 2.5])."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    out = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def _centred(xs: Sequence[float]) -> list[float]:
    m = sum(xs) / len(xs)
    return [x - m for x in xs]


def pearson(a: Sequence[float], b: Sequence[float]) -> float:
    """Pearson's correlation; ``nan`` when either column is constant (or shorter than 2)."""
    if len(a) != len(b):
        raise ValueError(f"pearson needs two equally long columns, got {len(a)} and {len(b)}")
    if len(a) < 2:
        return NAN
    ca, cb = _centred(a), _centred(b)
    va, vb = sum(x * x for x in ca), sum(y * y for y in cb)
    if va <= 0 or vb <= 0:
        return NAN
    return max(-1.0, min(1.0, sum(x * y for x, y in zip(ca, cb)) / math.sqrt(va * vb)))


def spearman_rho(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rho: Pearson's correlation of the tie-averaged ranks."""
    return pearson(ranks(a), ranks(b))


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float:
    """Kendall's tau-b, (concordant - discordant) / sqrt((pairs - ties in a) (pairs - ties in b)); ``nan`` when
    either column is all tied (it has no order to agree with)."""
    if len(a) != len(b):
        raise ValueError(f"kendall_tau needs two equally long columns, got {len(a)} and {len(b)}")
    score, untied_a, untied_b = 0, 0, 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            da, db = (a[i] > a[j]) - (a[i] < a[j]), (b[i] > b[j]) - (b[i] < b[j])
            score += da * db
            untied_a += da != 0
            untied_b += db != 0
    if not untied_a or not untied_b:
        return NAN
    return score / math.sqrt(untied_a * untied_b)


def _residuals(y: list[float], z: list[float]) -> list[float]:
    """y minus its least-squares line on z (both centred)."""
    cy, cz = _centred(y), _centred(z)
    vz = sum(v * v for v in cz)
    slope = sum(u * v for u, v in zip(cy, cz)) / vz
    return [u - slope * v for u, v in zip(cy, cz)]


def partial_spearman(x: Sequence[float], y: Sequence[float], z: Sequence[float]) -> float:
    """The partial Spearman correlation of x and y with z held fixed: the three columns are ranked, each of x's and
    y's ranks is regressed on z's, and the residuals are correlated (the same as (r_xy - r_xz r_yz) /
    sqrt((1 - r_xz^2)(1 - r_yz^2)) on the ranks).

    When x's ranks (or y's) are a linear function of z's, nothing of it is left beyond z: the partial correlation is
    0 by convention (a proxy that is the attention share carries no information beyond it). A constant z controls
    nothing, and the result is plain Spearman; a constant x or y gives ``nan``."""
    if not len(x) == len(y) == len(z):
        raise ValueError(f"partial_spearman needs three equally long columns, got {len(x)}, {len(y)} and {len(z)}")
    rx, ry, rz = ranks(x), ranks(y), ranks(z)
    if len(x) < 3 or len(set(rx)) < 2 or len(set(ry)) < 2:
        return NAN
    if len(set(rz)) < 2:
        return pearson(rx, ry)
    ex, ey = _residuals(rx, rz), _residuals(ry, rz)
    for e, r in ((ex, rx), (ey, ry)):
        if sum(v * v for v in e) <= _RESIDUAL_EPS * sum(v * v for v in _centred(r)):
            return 0.0
    return pearson(ex, ey)


def quantile(xs: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) of ``xs``, linear between order statistics."""
    s = sorted(xs)
    if not s:
        raise ValueError("quantile of no values")
    pos = q * (len(s) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def bootstrap_interval(stat: Callable[[list[int]], float], n: int, *, resamples: int = 2000, seed: int = 0,
                       level: float = 0.95) -> tuple[float | None, float | None, int]:
    """A percentile bootstrap interval of ``stat`` over ``n`` paired items: ``stat`` gets the indices of one resample
    (drawn with replacement, ``random.Random(seed)``: the same call gives the same interval). Returns ``(lo, hi,
    dropped)``, ``dropped`` counting resamples where ``stat`` was undefined (``nan``: e.g. every drawn value tied);
    ``(None, None, dropped)`` when none was defined."""
    rng, got, dropped = random.Random(seed), [], 0
    for _ in range(resamples):
        v = stat([rng.randrange(n) for _ in range(n)])
        if math.isnan(v):
            dropped += 1
        else:
            got.append(v)
    if not got:
        return None, None, dropped
    tail = (1 - level) / 2
    return quantile(got, tail), quantile(got, 1 - tail), dropped
