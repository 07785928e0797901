"""hlnas.analysis.rankstats against values worked out by hand."""

from __future__ import annotations

import math

import pytest

from hlnas.analysis.rankstats import (bootstrap_interval, kendall_tau, partial_spearman, pearson, quantile, ranks,
                                      spearman_rho)


def test_ranks_share_the_mean_rank_of_a_tie():
    assert ranks([5, 1, 5, 3]) == [3.5, 1.0, 3.5, 2.0]
    assert ranks([2, 2, 2]) == [2.0, 2.0, 2.0]


def test_spearman_by_hand():
    # d = (-1, 1, -1, 1, 0), sum d^2 = 4: rho = 1 - 6 * 4 / (5 * 24) = 0.8
    assert spearman_rho([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)
    # any monotone map keeps the ranks
    assert spearman_rho([1, 2, 3, 4, 5], [1, 8, 27, 64, 125]) == pytest.approx(1.0)
    assert spearman_rho([1, 2, 3, 4, 5], [5, 4, 3, 2, 1]) == pytest.approx(-1.0)
    # with ties: ranks (1.5, 1.5, 3, 4) against (1, 2, 3, 4): Pearson = 4.5 / sqrt(4.5 * 5)
    assert spearman_rho([1, 1, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(4.5 * 5))
    assert math.isnan(spearman_rho([1, 1, 1], [1, 2, 3]))


def test_pearson_by_hand_and_constant_columns():
    assert pearson([1, 2, 3], [2, 4, 7]) == pytest.approx(5 / math.sqrt(2 * 38 / 3))  # cov 5, sums of squares 2 and 38/3
    assert math.isnan(pearson([1, 1], [1, 2]))
    with pytest.raises(ValueError, match="equally long"):
        pearson([1, 2], [1])


def test_kendall_tau_b_by_hand():
    # 10 pairs, 2 discordant ((1,2) and (3,4)): (8 - 2) / 10
    assert kendall_tau([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.6)
    # one tie in each column: 4 concordant, 0 discordant, 5 untied pairs each: 4 / sqrt(5 * 5)
    assert kendall_tau([1, 1, 2, 3], [1, 2, 2, 3]) == pytest.approx(0.8)
    assert kendall_tau([3, 2, 1], [1, 2, 3]) == pytest.approx(-1.0)
    assert math.isnan(kendall_tau([1, 1, 1], [1, 2, 3]))


def test_partial_spearman_by_hand():
    # ranks: r_xz = 1 - 6*2/60 = 0.8, r_yz = 0.8, r_xy = 1 - 6*4/60 = 0.6: (0.6 - 0.64) / (1 - 0.64) = -1/9
    z, x, y = [1, 2, 3, 4], [1, 2, 4, 3], [2, 1, 3, 4]
    assert partial_spearman(x, y, z) == pytest.approx(-1 / 9)
    # the same on values with those ranks
    assert partial_spearman([0.1, 0.2, 0.9, 0.5], [7, 3, 8, 9], [10, 20, 30, 40]) == pytest.approx(-1 / 9)


def test_partial_spearman_of_a_column_that_is_the_control_is_zero_and_of_the_target_itself_one():
    share = [0, 0, 0, 1 / 24, 1 / 24, 1 / 12, 1 / 6, 1 / 6, 1 / 3, 1 / 3]
    target = [0.30, 0.10, 0.20, 0.35, 0.25, 0.40, 0.33, 0.45, 0.41, 0.44]
    assert partial_spearman(share, target, share) == 0.0
    assert partial_spearman([s * s for s in share], target, share) == 0.0  # a monotone map of the share: the same ranks
    assert partial_spearman(target, target, share) == pytest.approx(1.0)
    assert partial_spearman(target, target, [1] * 10) == pytest.approx(1.0)  # a constant control holds nothing fixed
    assert math.isnan(partial_spearman([1] * 10, target, share))


def test_quantile_interpolates():
    assert quantile([3, 1, 2, 4], 0.5) == pytest.approx(2.5)
    assert (quantile([1, 2], 0.0), quantile([1, 2], 1.0)) == (1, 2)


def test_bootstrap_is_seeded_and_counts_undefined_resamples():
    a = [1, 2, 3, 4, 5, 6, 7, 8]
    b = [2, 1, 4, 3, 6, 5, 8, 7]

    def stat(idx):
        return spearman_rho([a[i] for i in idx], [b[i] for i in idx])

    lo, hi, dropped = bootstrap_interval(stat, len(a), resamples=300, seed=3)
    assert (lo, hi, dropped) == bootstrap_interval(stat, len(a), resamples=300, seed=3)
    assert -1 <= lo < spearman_rho(a, b) < hi <= 1
    assert bootstrap_interval(lambda idx: float("nan"), 4, resamples=10) == (None, None, 10)
