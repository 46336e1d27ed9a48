"""The rank statistics of ``sixdim fleet``: exact where they say so, the same p-values as scipy's tests, the
order statistics found by counting equal to listing every difference, and intervals that cover the truth
as often as their confidence says."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import mannwhitneyu, wilcoxon

from sixdim.fleet import stats


@pytest.mark.parametrize(("n1", "n2"), [(3, 3), (4, 7), (9, 12), (30, 40), (60, 80), (300, 250)])
def test_two_sample_p_values_are_scipys(n1, n2):
    rng = np.random.default_rng(n1 * 1000 + n2)
    old, new = rng.normal(0, 1, n1), rng.normal(0.3, 1, n2)
    shift = stats.two_sample_shift(old, new, 0.2)
    method = "exact" if n1 * n2 <= stats.EXACT_PAIRS else "asymptotic"
    expected = mannwhitneyu(new, old, alternative="two-sided", method=method).pvalue
    assert shift is not None
    assert shift.p_value == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("n", [5, 8, 20, 59, 61, 200])
def test_paired_p_values_are_scipys(n):
    rng = np.random.default_rng(n)
    changes = rng.normal(0.2, 1, n)
    shift = stats.paired_shift(changes, 0.2)
    method = "exact" if n <= stats.EXACT_SIGNED else "approx"
    expected = wilcoxon(changes, method=method, correction=(method == "approx")).pvalue
    assert shift is not None
    assert shift.p_value == pytest.approx(expected, rel=1e-6)


def test_estimates_and_bounds_are_the_listed_order_statistics():
    """Counting (no list of differences) finds the same values as sorting every difference."""
    rng = np.random.default_rng(7)
    old, new = rng.normal(0, 1, 13), rng.normal(1, 2, 17)
    differences = np.sort(np.subtract.outer(new, old).ravel())
    k = stats.mann_whitney_critical(13, 17, 0.05)
    shift = stats.two_sample_shift(old, new, 0.05)
    assert shift.estimate == pytest.approx(np.median(differences), abs=1e-9)
    assert shift.low == pytest.approx(differences[k - 1], abs=1e-9)
    assert shift.high == pytest.approx(differences[len(differences) - k], abs=1e-9)

    changes = rng.normal(0.5, 1, 21)
    walsh = np.sort([(changes[i] + changes[j]) / 2 for i in range(21) for j in range(i, 21)])
    k = stats.signed_rank_critical(21, 0.05)
    paired = stats.paired_shift(changes, 0.05)
    assert paired.estimate == pytest.approx(np.median(walsh), abs=1e-9)
    assert paired.low == pytest.approx(walsh[k - 1], abs=1e-9)
    assert paired.high == pytest.approx(walsh[len(walsh) - k], abs=1e-9)


def test_exact_critical_values_are_the_tables():
    """Published two-sided 5% critical values: Mann-Whitney U for n1 = n2 = 8 is 13 (so k = 14), signed rank
    for n = 10 is 8 (k = 9); at the switch-over the normal approximation is at most 2 ranks of 2,500 on the safe
    side of exact (a slightly wider interval)."""
    assert stats.mann_whitney_critical(8, 8, 0.05) == 14
    assert stats.signed_rank_critical(10, 0.05) == 9
    exact = stats._lower_critical(stats._mann_whitney_counts(50, 50), 0.01)
    approx = stats._normal_critical(50 * 50 / 2, math.sqrt(50 * 50 * 101 / 12), 0.01)
    assert 0 <= exact - approx <= 2


def test_too_small_sides_have_no_interval():
    assert stats.two_sample_shift([1.0, 2.0], [3.0, 4.0], 0.05) is None  # 2 / C(4, 2) = 0.33 > 0.05
    assert not stats.can_judge_two(3, 3, 0.05) and stats.can_judge_two(4, 4, 0.05)
    assert not stats.can_judge_paired(5, 0.05) and stats.can_judge_paired(6, 0.05)
    assert stats.paired_shift([0.1, 0.2, 0.3], 0.05) is None


@pytest.mark.parametrize("paired", [False, True])
def test_intervals_cover_the_truth_as_often_as_they_say(paired):
    """Heavy-tailed noise (Student t with 3 degrees of freedom), a true shift of 0.2: a 90% interval holds it
    in 90% of 1,500 draws (within 2.5 points)."""
    rng = np.random.default_rng(11 + paired)
    covered = 0
    for _ in range(1500):
        if paired:
            shift = stats.paired_shift(rng.standard_t(3, 12) + 0.2, 0.1)
        else:
            shift = stats.two_sample_shift(rng.standard_t(3, 8), rng.standard_t(3, 10) + 0.2, 0.1)
        covered += shift.low <= 0.2 <= shift.high
    assert covered / 1500 == pytest.approx(0.9, abs=0.025)


def test_a_shift_is_a_ratio_on_the_log_scale():
    old = np.log([100.0, 101.0, 99.0, 100.5, 99.5, 100.2])
    new = old + math.log(0.97)
    shift = stats.two_sample_shift(old, new, 0.1)
    assert shift.ratio == pytest.approx(0.97, rel=1e-9)
    assert shift.ratio_low <= 0.97 <= shift.ratio_high


def test_four_thousand_hosts_a_side_are_judged_without_listing_16_million_differences():
    rng = np.random.default_rng(3)
    shift = stats.two_sample_shift(rng.normal(0, 0.01, 4000), rng.normal(-0.03, 0.01, 4000), 1e-4)
    assert shift.ratio == pytest.approx(math.exp(-0.03), abs=0.002)
    assert shift.ratio_high < 1
