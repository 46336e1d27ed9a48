"""Rank statistics for comparing two sides of a fleet, with hosts as the unit.

Benchmark results are not normal: a host with a bad GPU, a throttled rack or a noisy neighbour makes
heavy tails, and a fleet has as few as three hosts on a side early in a rollout.  So both comparisons
are distribution-free, on the logarithm of each host's typical value (so that a shift is a ratio):

* two independent sides (hosts on the old version against hosts on the new one): the Hodges-Lehmann
  shift (the median of every new-minus-old difference) and its Moses confidence interval, which is the
  Mann-Whitney test inverted: the interval excludes 0 exactly when the test rejects "no shift";
* one side measured twice (the same hosts before and after they upgraded): the median of the Walsh
  averages of the per-host changes and its interval from the Wilcoxon signed-rank test.

Critical values are exact (integer counts of the rank statistics' distributions) for small sides and from
the normal approximation beyond, where it is accurate to a fraction of a rank.  The order statistics of
the pairwise differences and Walsh averages are found by bisection on counts, never by listing the
n1 x n2 differences, so 4,000 hosts a side cost milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.stats import norm

EXACT_PAIRS = 2500
"""Sides whose product of sizes (two samples) is at most this have exact Mann-Whitney critical values."""
EXACT_SIGNED = 60
"""Paired samples of at most this many hosts have exact signed-rank critical values."""


@dataclass(frozen=True)
class Shift:
    """A location shift on the log scale with its confidence interval, and how strong the evidence is."""

    estimate: float
    low: float
    high: float
    p_value: float
    """Two-sided p-value of "no shift" (Mann-Whitney, or Wilcoxon signed-rank for paired samples)."""

    @property
    def ratio(self) -> float:
        return math.exp(self.estimate)

    @property
    def ratio_low(self) -> float:
        return math.exp(self.low)

    @property
    def ratio_high(self) -> float:
        return math.exp(self.high)


# ----------------------------------------------------------------------------- exact distributions

@lru_cache(maxsize=256)
def _mann_whitney_counts(n1: int, n2: int) -> tuple[int, ...]:
    """How many of the C(n1+n2, n1) orderings give each value of U (0 .. n1*n2): the coefficients of the
    Gaussian binomial [n1+n2 choose n1]_q, built with exact integers."""
    poly = [1]
    for i in range(1, n1 + 1):
        shift = n2 + i
        grown = poly + [0] * shift
        for k in range(len(poly)):  # times (1 - q^(n2+i))
            grown[k + shift] -= poly[k]
        for k in range(i, len(grown)):  # divided by (1 - q^i): exact, the quotient is a polynomial
            grown[k] += grown[k - i]
        poly = grown[:len(grown) - i]
    return tuple(poly)


@lru_cache(maxsize=256)
def _signed_rank_counts(n: int) -> tuple[int, ...]:
    """How many of the 2^n sign patterns give each value of W+ (0 .. n(n+1)/2): coefficients of the
    product of (1 + q^i) for i = 1..n."""
    poly = [1]
    for i in range(1, n + 1):
        grown = poly + [0] * i
        for k in range(len(poly)):
            grown[k + i] += poly[k]
        poly = grown
    return tuple(poly)


def _lower_critical(counts: tuple[int, ...], alpha: float) -> int:
    """The largest k with P(statistic <= k - 1) <= alpha / 2 (so k >= 1 means some interval exists), from
    exact counts."""
    total = sum(counts)
    cumulative, k = 0, 0
    for value, count in enumerate(counts):
        cumulative += count
        if cumulative / total > alpha / 2:
            return value
        k = value + 1
    return k


def _normal_critical(mean: float, sd: float, alpha: float) -> int:
    return max(0, math.floor(mean - norm.ppf(1 - alpha / 2) * sd + 0.5))


def mann_whitney_critical(n1: int, n2: int, alpha: float) -> int:
    """k for the Moses interval at confidence 1 - alpha: the k-th smallest and the k-th largest of the
    n1*n2 differences bound it; 0 when no interval at this confidence exists (too few hosts)."""
    if n1 * n2 <= EXACT_PAIRS:
        return _lower_critical(_mann_whitney_counts(min(n1, n2), max(n1, n2)), alpha)
    return _normal_critical(n1 * n2 / 2, math.sqrt(n1 * n2 * (n1 + n2 + 1) / 12), alpha)


def signed_rank_critical(n: int, alpha: float) -> int:
    """k for the signed-rank interval at confidence 1 - alpha over the n(n+1)/2 Walsh averages; 0 when none."""
    if n <= EXACT_SIGNED:
        return _lower_critical(_signed_rank_counts(n), alpha)
    pairs = n * (n + 1) / 2
    return _normal_critical(pairs / 2, math.sqrt(n * (n + 1) * (2 * n + 1) / 24), alpha)


def can_judge_two(n1: int, n2: int, alpha: float) -> bool:
    """Whether two sides of these sizes can ever reject "no shift" at ``alpha``: the most extreme
    ordering has probability 2 / C(n1+n2, n1)."""
    return n1 >= 1 and n2 >= 1 and 2 / math.comb(n1 + n2, n1) <= alpha


def can_judge_paired(n: int, alpha: float) -> bool:
    """Whether n paired hosts can ever reject "no change" at ``alpha`` (the most extreme: 2 / 2^n)."""
    return n >= 1 and 2 / 2 ** n <= alpha


# ----------------------------------------------------------------------------- order statistics by counting

def _kth(count_at_most, k: int, low: float, high: float) -> float:
    """The k-th smallest (1-based) of a multiset given only ``count_at_most(d)``, the number of its
    members <= d, by bisection between ``low`` and ``high`` (its minimum and maximum)."""
    for _ in range(200):
        if high - low <= 1e-12 * max(1.0, abs(low), abs(high)):
            break
        mid = (low + high) / 2
        if count_at_most(mid) >= k:
            high = mid
        else:
            low = mid
    return high


def _pairwise_kth(xs: np.ndarray, ys: np.ndarray, k: int) -> float:
    """The k-th smallest of y - x over every pair (xs sorted)."""
    n1 = len(xs)

    def at_most(d: float) -> int:  # y - x <= d  <=>  x >= y - d
        return int(n1 * len(ys) - np.searchsorted(xs, ys - d, side="left").sum())
    return _kth(at_most, k, float(ys.min() - xs[-1]), float(ys.max() - xs[0]))


def _walsh_kth(a: np.ndarray, k: int) -> float:
    """The k-th smallest of (a_i + a_j) / 2 over i <= j (a sorted)."""
    index = np.arange(len(a))

    def at_most(d: float) -> int:  # pairs i <= j with a_j <= 2d - a_i
        upto = np.searchsorted(a, 2 * d - a, side="right")
        return int(np.maximum(upto - index, 0).sum())
    return _kth(at_most, k, float(a[0]), float(a[-1]))


def _median_of(kth, total: int) -> float:
    if total % 2:
        return kth((total + 1) // 2)
    return (kth(total // 2) + kth(total // 2 + 1)) / 2


# ----------------------------------------------------------------------------- the two comparisons

def two_sample_shift(old: np.ndarray, new: np.ndarray, alpha: float) -> Shift | None:
    """How far ``new`` lies from ``old`` (both log values, one per host): the Hodges-Lehmann estimate, the
    Moses interval at confidence 1 - alpha and the Mann-Whitney p-value; None when the sides are too small
    for any interval at this confidence."""
    xs, ys = np.sort(np.asarray(old, dtype=float)), np.sort(np.asarray(new, dtype=float))
    n1, n2 = len(xs), len(ys)
    k = mann_whitney_critical(n1, n2, alpha) if n1 and n2 else 0
    if k < 1:
        return None
    total = n1 * n2
    estimate = _median_of(lambda i: _pairwise_kth(xs, ys, i), total)
    low, high = _pairwise_kth(xs, ys, k), _pairwise_kth(xs, ys, total - k + 1)
    less = int(np.searchsorted(xs, ys, side="left").sum())  # U: pairs with old < new, ties counted half
    equal = int(np.searchsorted(xs, ys, side="right").sum()) - less
    u = less + equal / 2
    return Shift(estimate, low, high, _mann_whitney_p(u, n1, n2))


def paired_shift(changes: np.ndarray, alpha: float) -> Shift | None:
    """How far the per-host changes (log new minus log old, one per host) lie from 0: the median of the
    Walsh averages, its signed-rank interval at confidence 1 - alpha and the signed-rank p-value; None when
    too few hosts for any interval."""
    a = np.sort(np.asarray(changes, dtype=float))
    n = len(a)
    k = signed_rank_critical(n, alpha) if n else 0
    if k < 1:
        return None
    total = n * (n + 1) // 2
    estimate = _median_of(lambda i: _walsh_kth(a, i), total)
    low, high = _walsh_kth(a, k), _walsh_kth(a, total - k + 1)
    return Shift(estimate, low, high, _signed_rank_p(a))


def _mann_whitney_p(u: float, n1: int, n2: int) -> float:
    """Two-sided p-value of U (exact counts for small sides, else normal with continuity correction)."""
    mean = n1 * n2 / 2
    if n1 * n2 <= EXACT_PAIRS:
        counts = _mann_whitney_counts(min(n1, n2), max(n1, n2))
        extreme = min(u, n1 * n2 - u)
        tail = sum(counts[: math.floor(extreme) + 1]) / sum(counts)
        return min(1.0, 2 * tail)
    sd = math.sqrt(n1 * n2 * (n1 + n2 + 1) / 12)
    z = (abs(u - mean) - 0.5) / sd
    return float(min(1.0, 2 * norm.sf(max(z, 0.0))))


def _signed_rank_p(a: np.ndarray) -> float:
    """Two-sided signed-rank p-value of "no change" (zeros dropped, ties given mean ranks)."""
    nonzero = a[a != 0]
    n = len(nonzero)
    if n == 0:
        return 1.0
    order = np.argsort(np.abs(nonzero), kind="stable")
    ranks = np.empty(n)
    magnitudes = np.abs(nonzero)[order]
    i = 0
    while i < n:  # mean ranks for ties
        j = i
        while j + 1 < n and magnitudes[j + 1] == magnitudes[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    w_plus = float(ranks[nonzero > 0].sum())
    total = n * (n + 1) / 2
    if n <= EXACT_SIGNED:
        counts = _signed_rank_counts(n)
        extreme = min(w_plus, total - w_plus)
        tail = sum(counts[: math.floor(extreme) + 1]) / 2 ** n
        return min(1.0, 2 * tail)
    sd = math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
    z = (abs(w_plus - total / 2) - 0.5) / sd
    return float(min(1.0, 2 * norm.sf(max(z, 0.0))))
