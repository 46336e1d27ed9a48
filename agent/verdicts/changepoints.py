"""Change points in one sequence of floats: E-Divisive means, the way Apache Otava (formerly
datastax-labs/hunter) runs it, with rank-based decisions, written here on numpy.

Why a second detector.  :mod:`sixdim.verdicts.detector` judges a series *online*, one run after another,
with a frozen baseline and persistence rules; it answers "is this series regressed now?".  Looking
back over a whole history asks something else: *where* did each series shift, by how much, and
was a software version change the cause?  That is change-point analysis.  Otava's variant of
E-Divisive (Matteson and James, 2014; Fleming et al., "Hunter", ICPE 2023) is the reference the
project chose; ``signal-processing-algorithms``, which Otava started from, pins an old Python and
numpy < 2, so it is not a dependency and this is an implementation of our own.

Only the report commands (``sixdim report regressions`` and ``sixdim report --html``) import this
module: numpy loads here, never in the daemon.

The method (the passes are Otava's; the decisions are rank-based, for the spikes a GPU fleet sees):

1. **Split.**  The series is cut at the *known* break points (version changes, as in
   :func:`sixdim.report.regressions.version_breaks`), and each piece is covered by windows of ``window``
   points overlapping by half.  In each window, E-Divisive picks the split ``tau`` (with a right
   end ``kappa``) that maximises the energy statistic

       Q(tau, kappa) = n1*n2/(n1+n2) * (2/(n1*n2) sum|x_i - y_j| - mean pair distance within X
                                       - mean pair distance within Y),

   X = window[s:tau], Y = window[tau:kappa], on the window's *ranks*, for every (tau, kappa) at once
   from a 2-D prefix sum of the distance matrix.  The split is tested by a two-sided Mann-Whitney
   test between the two sides of its interval (Otava tests with Student's t; a spike 20% slow
   inflates a t-test's variance enough to hide a 5% step, and counts as one rank here).  If it
   passes a *relaxed* threshold (``first_pass_factor`` x ``max_pvalue``: Otava's "weak" change
   points), the window is split again, best candidate first, until one fails.  Every window is
   screened first by the Mann-Whitney scan over all its splits (a cumulative sum of ranks): one
   where no split passes has no weak point and is not split at all (most of them, and most of the
   time saved); where Q's split fails but another passes, the scan's best is the weak point.
2. **Merge.**  The weak points of every window and the known breaks are pooled, and each is
   tested again between its *adjacent* change points (the segments it separates), by Mann-Whitney;
   a found point's p is multiplied by the places it could have been put (Bonferroni).  The weakest
   point is removed and its two neighbours re-tested, until every point left has segments of at
   least ``min_segment`` runs each side, p <= ``max_pvalue`` and a change of the segments' medians of
   at least ``min_magnitude``.  Where the runs *within* the two segments trend (a drift: Spearman,
   pooled over both), the trend (a robust slope) is taken out of the :data:`DRIFT_WINDOW` runs
   each side nearest the point and the jump of their detrended medians is tested with the
   slope's error in its variance, so a drift is not a step
   at whatever point lies in it, a version change included, while a step on a drift still is one.
   A drift cut into a staircase of steps (each segment too short to show its trend) is tested
   the same way over the whole staircase (:meth:`_Series.staircase`).
3. **Place.**  Each found point is moved to the split between its neighbours that minimises the
   squared distance of the runs from their side's median, each capped at :data:`CAP` noise scales
   squared: a spike costs the same on either side, so it cannot pull the point (the mean-based and
   the energy splits put a step one run early for each spike just before it); where splits tie,
   the middle one.  A found point within :data:`NEAR_BREAK` runs of a version change that the data
   place there about as well (:data:`SNAP_TOLERANCE`) is the version change's.
4. **Excursions.**  Two opposite shifts less than :data:`EXCURSION` runs apart, around a level that
   comes back, are a burst (a neighbour's job for a while), not two shifts, unless both are
   version changes (an upgrade rolled back).
5. **Drifts.**  Each segment left between change points whose runs trend (Spearman,
   p <= ``max_pvalue``), and still trend within both parts when split at its likeliest step, by a
   fitted total of at least ``min_magnitude``, is a drift (:class:`Drift`).

Known breaks take part like any other candidate: one is reported only when the shift is
significant *at* it, then with the plain p (the data did not choose it).  A shift is a change of
the adjacent segments' **medians**, so a spike moves neither it nor the decision, and no segment is
shorter than ``min_segment`` runs.  The reference notes (anchors.md, "Regression detection")
measured Otava's p-value alone at 17-43% false change points per 300-point no-change series; the
Bonferroni correction and the minimum magnitude are what bound false alarms here.  The figures on
every noise model of tests/bench/noise_models.py are in docs/REGRESSIONS.md ("Looking back").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from statistics import NormalDist
from typing import Any

import numpy as np

from sixdim.verdicts.detector import Settings

DEFAULT_MAX_PVALUE = 0.001
"""Otava's default significance for a change point."""
DEFAULT_MIN_MAGNITUDE = Settings().min_effect
"""The online detector's minimum effect (1.8%): a shift smaller than that is not reported."""
DEFAULT_MIN_SEGMENT = 5
"""Runs each side of a change point, at least: one or two spikes never make a segment."""
DEFAULT_WINDOW = 50
"""Points per split window (Otava's default window); windows overlap by half."""
FIRST_PASS_FACTOR = 10.0
"""The split pass accepts weak points at 10 x max_pvalue; the merge pass applies max_pvalue."""
REACH = 200
"""How far (points either way) the placement may move a found change point."""
REFINE_ROUNDS = 3
"""Place-and-merge rounds at most (one nearly always settles it)."""
BATCH = 4096
"""Split windows screened at once (50 points each: a few MB)."""
LIVE_BATCH = 256
"""Windows of a batch that pass the screen split at once: each holds two (window + 1)^2 matrices, the
distances and their prefix sums (41 kB at 50 points), so a batch of them all held 170 MB at most, and a
tenth of them, as a 2%-noise history passes, 17 MB; 256 hold 10 MB whatever passes."""
CAP = 3.0
"""The placement's cost of a run is its squared distance from its side's median, in noise scales,
capped at CAP^2: a spike (10-40% at 1% noise) costs 9 on either side, a run at the other side of a
3% step about 9.  (4 or 5 placed 3% steps no better in spiky, t3 and Gaussian noise.)"""
NEAR_BREAK = 3
"""A found point this close to a version change moves to it when the data place it there as well."""
SNAP_TOLERANCE = 2.0
"""... that is, when the placement's cost at the version change exceeds its best by at most this
(squared noise scales: less than one run of a 2% step at 1% noise put on the wrong side)."""
EXCURSION = 15
"""Two opposite shifts closer than this, around a level that comes back, are a burst, not shifts:
the bursts of tests/bench/noise_models.py (2-5 slow runs, overlapping now and then) stay under it."""
DRIFT_GATE = 0.01
"""Spearman p under which the runs within two adjacent segments are taken to trend (their slope is
then removed before a shift between them is tested)."""
STAIRCASE_GATE = 0.05
"""The same for the segments of a staircase (:meth:`_Series.staircase`): its points were placed where
the jumps are largest, which flattens the runs between them, so the trend within is weaker than
the drift: at 5% noise, 0.01 left 3% of drifts cut into steps, one of them at a version change."""
DRIFT_WINDOW = 200
"""Runs each side of a point within which a shift on a drift is measured (:meth:`_Series.shift`)."""
MIN_TREND_RUNS = 10
"""A segment shorter than this says nothing about a trend."""

_TINY = 1e-12
"""On the normalised scale (values divided by the series' median), a spread or difference below
this is zero: a constant segment has no noise, and two equal constants no difference."""
_NORMAL = NormalDist()


@dataclass(frozen=True)
class ChangePoint:
    """One shift: ``index`` is the first point after it; the statistics compare the segments
    ``values[prev:index]`` and ``values[index:next]`` between the neighbouring change points."""

    index: int
    p_value: float
    """Two-sided Mann-Whitney test between the adjacent segments (found points: Bonferroni-corrected)."""
    median_before: float
    median_after: float
    runs_before: int
    runs_after: int
    known: bool = False
    """The index is one of the given break points (a version change)."""
    drift_per_run: float = 0.0
    """The trend taken out before the test (relative to the median before, per run); the medians are
    then the levels just before and just after the point.  0.0: the segments did not trend."""

    @property
    def ratio(self) -> float | None:
        """median after / median before (None when the median before is 0)."""
        return self.median_after / self.median_before if self.median_before else None

    @property
    def magnitude(self) -> float:
        """|median after - median before| / |median before|."""
        return _magnitude(self.median_before, self.median_after)


@dataclass(frozen=True)
class Drift:
    """A segment between change points (or the series' ends) whose runs trend: ``start`` is its
    first point, ``end`` one past its last; the levels are the fitted trend's at either end."""

    start: int
    end: int
    p_value: float
    """Two-sided Spearman test of the runs' ranks against their order."""
    level_start: float
    level_end: float

    @property
    def runs(self) -> int:
        return self.end - self.start

    @property
    def ratio(self) -> float | None:
        """level at the end / level at the start (None when the level at the start is 0)."""
        return self.level_end / self.level_start if self.level_start else None

    @property
    def magnitude(self) -> float:
        return _magnitude(self.level_start, self.level_end)


@dataclass(frozen=True)
class Changes:
    """What :func:`find_changes` found in one sequence, oldest first."""

    points: list[ChangePoint] = field(default_factory=list)
    drifts: list[Drift] = field(default_factory=list)


def _magnitude(before: float, after: float) -> float:
    if before:
        return abs(after - before) / abs(before)
    return 0.0 if after == before else math.inf


# --- ranks and the Mann-Whitney test ------------------------------------------------------------

def _ranks(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Average ranks (1..n) along the rows of a 2-D array, and each row's tie term sum(t^3 - t)
    over its groups of equal values (the Mann-Whitney variance's correction)."""
    b, n = x.shape
    order = np.argsort(x, axis=1, kind="stable")
    xs = np.take_along_axis(x, order, axis=1)
    idx = np.broadcast_to(np.arange(n), (b, n))
    first = np.ones((b, n), dtype=bool)
    first[:, 1:] = xs[:, 1:] != xs[:, :-1]
    last = np.ones((b, n), dtype=bool)
    last[:, :-1] = first[:, 1:]
    start = np.maximum.accumulate(np.where(first, idx, 0), axis=1)
    end = n - 1 - np.maximum.accumulate(np.where(last[:, ::-1], idx, 0), axis=1)[:, ::-1]
    ranks = np.empty((b, n))
    np.put_along_axis(ranks, order, (start + end) / 2.0 + 1.0, axis=1)
    t = (end - start + 1).astype(float)
    return ranks, np.where(last, t * t * t - t, 0.0).sum(axis=1)


def _mw_z(rank_sum: Any, n1: Any, n: float, ties: Any) -> np.ndarray:
    """|z| of the Mann-Whitney U of a first part of ``n1`` values with rank sum ``rank_sum`` among
    ``n`` (normal approximation, tie and continuity corrections; numpy arrays or scalars).  No
    spread at all (every value equal): 0."""
    n1 = np.asarray(n1, dtype=float)
    n2 = n - n1
    u = rank_sum - n1 * (n1 + 1.0) / 2.0
    var = n1 * n2 / 12.0 * ((n + 1.0) - ties / (n * (n - 1.0)))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (np.abs(u - n1 * n2 / 2.0) - 0.5) / np.sqrt(var)
    return np.where(var > _TINY, np.maximum(z, 0.0), 0.0)


def _p_of_z(z: float) -> float:
    """Two-sided normal p-value of |z|."""
    return math.erfc(abs(float(z)) / math.sqrt(2.0))


def _z_of_p(p: float) -> float:
    """The |z| whose two-sided p-value is ``p``."""
    return _NORMAL.inv_cdf(1.0 - p / 2.0) if 0.0 < p < 1.0 else (0.0 if p >= 1.0 else math.inf)


def _ranks1(x: np.ndarray) -> tuple[np.ndarray, float]:
    """:func:`_ranks` of one sequence; without ties (measured floats nearly always) a permutation's
    inverse, several times faster than the general case (the merge pass ranks thousands of segments)."""
    n = x.size
    order = np.argsort(x)
    xs = x[order]
    if n < 2 or not np.any(xs[1:] == xs[:-1]):
        ranks = np.empty(n)
        ranks[order] = np.arange(1.0, n + 1.0)
        return ranks, 0.0
    ranks2, ties = _ranks(x[None, :])
    return ranks2[0], float(ties[0])


def _split_z(values: np.ndarray, at: int) -> float:
    """Mann-Whitney |z| between values[:at] and values[at:]."""
    ranks, ties = _ranks1(values)
    return float(_mw_z(float(ranks[:at].sum()), at, float(values.size), ties))


def _spearman_z(values: np.ndarray) -> float:
    """Spearman's rho of the values against their order, as a z (rho * sqrt(n - 1)); signed."""
    return _rank_trend_z(_ranks1(values)[0])


def _rank_trend_z(ranks: np.ndarray) -> float:
    """Spearman's z of ranks against their order (Pearson's correlation of the two, times sqrt(n - 1))."""
    n = ranks.size
    t = np.arange(n, dtype=float)
    r = ranks - ranks.mean()
    spread = math.sqrt(float(r @ r) * float(n * (n * n - 1.0) / 12.0))
    if spread <= _TINY:
        return 0.0
    return float(r @ (t - t.mean())) / spread * math.sqrt(n - 1.0)


def _slope(values: np.ndarray) -> tuple[np.ndarray, float]:
    """Slopes of disjoint pairs half a segment apart (x[i+h] - x[i]) / h, and their weight h^2 (a
    pair's slope has a variance of 2 sigma^2 / h^2): the robust slope is their weighted median."""
    n = values.size
    h = (n + 1) // 2
    return (values[h:] - values[:n - h]) / h, float(h * h)


def _weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    order = np.argsort(values)
    cum = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cum, cum[-1] / 2.0)])


# --- the split pass -----------------------------------------------------------------------------

@dataclass(frozen=True)
class _Grid:
    """Every (tau, kappa) of an interval of ``length`` points (offsets from its start s), with at
    least ``m`` points in X = [s, tau) and in Y = [tau, kappa), and the coefficients that make Q
    a weighted sum of six prefix-sum look-ups (see :func:`_best_splits`)."""

    tau: np.ndarray
    kappa: np.ndarray
    tk: np.ndarray
    tt: np.ndarray
    kk: np.ndarray
    st: np.ndarray
    sk: np.ndarray
    ss: np.ndarray


@lru_cache(maxsize=512)
def _grid(length: int, m: int) -> _Grid:
    """The grid of an interval (window size and below: the split pass asks for the same few again
    and again)."""
    tau, kappa = np.nonzero((np.arange(length + 1)[:, None] >= m)
                            & (np.arange(length + 1)[None, :] >= np.arange(length + 1)[:, None] + m))
    n1, n2 = tau.astype(float), (kappa - tau).astype(float)
    c = n1 * n2 / (n1 + n2)
    between, wx, wy = 2.0 / (n1 * n2), 1.0 / (n1 * (n1 - 1.0)), 1.0 / (n2 * (n2 - 1.0))
    # Q = c * (between * B(X, Y) - wx * W(X) - wy * W(Y)), with B and W (twice the pair sums
    # within) written as prefix-sum look-ups: B = P[t,k] - P[s,k] - P[t,t] + P[s,t],
    # W(X) = P[t,t] - 2 P[s,t] + P[s,s], W(Y) = P[k,k] - 2 P[t,k] + P[t,t]
    return _Grid(tau.astype(np.intp), kappa.astype(np.intp), c * (between + 2.0 * wy), -c * (between + wx + wy),
                 -c * wy, c * (between + 2.0 * wx), -c * between, -c * wx)


def _best_splits(P: np.ndarray, s: int, e: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """For each window (first axis of the prefix-sum matrices ``P``), the tau in [s, e) that
    maximises Q over (tau, kappa), and that Q.  ``P[b, i, j]`` is the sum of |x_a - x_c| over
    a < i, c < j, so every block sum of the distance matrix is four look-ups and Q over all
    (tau, kappa) is one weighted sum of gathered arrays."""
    g = _grid(e - s, m)
    size = P.shape[1]
    flat = P.reshape(P.shape[0], -1)
    tau, kappa = g.tau + s, g.kappa + s
    diag = np.take(flat, np.arange(size) * (size + 1), axis=1)           # P[i, i]
    q = np.take(flat, tau * size + kappa, axis=1) * g.tk
    q += np.take(diag, tau, axis=1) * g.tt
    q += np.take(diag, kappa, axis=1) * g.kk
    if s:  # row s of P is zero when s = 0
        row = flat[:, s * size:(s + 1) * size]                            # P[s, j]
        q += np.take(row, tau, axis=1) * g.st
        q += np.take(row, kappa, axis=1) * g.sk
        q += diag[:, s:s + 1] * g.ss
    best = np.argmax(q, axis=1)
    return tau[best], q[np.arange(P.shape[0]), best]


def _window_points(X: np.ndarray, m: int, z_weak: float) -> list[list[int]]:
    """The weak change points of each window (rows of X): E-Divisive on the window's ranks with the
    Mann-Whitney test, stopping at the first candidate that fails ``z_weak``.  Every window is
    screened first by the Mann-Whitney scan over all its splits (a cumulative sum of ranks): one
    where no split at all passes has no weak point, whichever split Q picks, and is not split; one
    where Q's split fails but another passes has the scan's best as its first weak point (at 5%
    noise Q's split on ranks missed one 1-sigma step in ten that the scan saw)."""
    B, w = X.shape
    ranks, ties = _ranks(X)
    taus = np.arange(m, w - m + 1)
    scan = _mw_z(np.cumsum(ranks, axis=1)[:, taus - 1], taus[None, :], float(w), ties[:, None])
    out: list[list[int]] = [[] for _ in range(B)]
    live = np.flatnonzero(scan.max(axis=1) >= z_weak)
    if live.size == 0:
        return out
    for first in range(0, live.size, LIVE_BATCH):
        some = live[first:first + LIVE_BATCH]
        R = ranks[some]
        D = np.abs(R[:, :, None] - R[:, None, :])
        P = np.zeros((some.size, w + 1, w + 1))
        np.cumsum(D, axis=1, out=D)
        np.cumsum(D, axis=2, out=P[:, 1:, 1:])
        del D
        firsts, _ = _best_splits(P, 0, w, m)
        for j, b in enumerate(some):
            tau = int(firsts[j])
            if scan[b, tau - m] < z_weak:  # Q's split fails where another passes: the scan's best is the candidate
                tau = int(taus[np.argmax(scan[b])])
            out[b] = _recurse(P[j:j + 1], X[b], tau, w, m, z_weak)
    return out


def _recurse(P: np.ndarray, x: np.ndarray, first: int, w: int, m: int, z_weak: float) -> list[int]:
    """Go on splitting one window after its first accepted point: the best candidate of all its
    intervals (largest Q) is tested next; the first that fails ends the window."""
    points = [first]
    cache: dict[tuple[int, int], tuple[int, float]] = {}
    while True:
        bounds = [0, *points, w]
        best: tuple[float, int, int, int] | None = None
        for s, e in zip(bounds, bounds[1:]):
            if e - s < 2 * m:
                continue
            if (s, e) not in cache:
                taus, qs = _best_splits(P, s, e, m)
                cache[(s, e)] = (int(taus[0]), float(qs[0]))
            tau, q = cache[(s, e)]
            if best is None or q > best[0]:
                best = (q, tau, s, e)
        if best is None:
            return points
        _, tau, s, e = best
        if _split_z(x[s:e], tau - s) < z_weak:
            return points
        points = sorted([*points, tau])


def _windows(segments: Iterable[tuple[int, int]], window: int, m: int) -> dict[int, list[int]]:
    """Window starts grouped by window length: ``window`` points stepping by half a window over
    each segment (the last one flush with the segment's end); a segment shorter than a window is
    one window; one too short to split has none."""
    step = max(1, window // 2)
    out: dict[int, list[int]] = {}
    for a, b in segments:
        length = b - a
        if length < 2 * m:
            continue
        w = min(window, length)
        starts = list(range(a, b - w + 1, step))
        if starts[-1] != b - w:
            starts.append(b - w)
        out.setdefault(w, []).extend(starts)
    return out


# --- merge, placement, excursions, drifts -------------------------------------------------------

class _Series:
    """One sequence under analysis: its values, normalised values, known breaks, and the statistics
    of candidate points against their adjacent candidates (cached: the merge asks again)."""

    def __init__(self, raw: np.ndarray, m: int, known: list[int], max_pvalue: float, min_magnitude: float):
        self.raw, self.m, self.n = raw, m, raw.size
        self.known, self.known_set = known, set(known)
        self.max_pvalue, self.min_magnitude = max_pvalue, min_magnitude
        self.center = float(np.median(raw))
        self.scale = abs(self.center) or float(np.max(np.abs(raw - self.center))) or 1.0
        self.z = (raw - self.center) / self.scale  # ranks are scale-free, Q's argmax too: unit scale keeps sums exact
        diffs = np.diff(self.z)
        mad = float(np.median(np.abs(diffs - np.median(diffs)))) if diffs.size else 0.0
        self.noise = max(1.4826 * mad / math.sqrt(2.0), _TINY)
        """A robust noise scale (from successive differences: steps and spikes hardly move it)."""
        self.order = np.argsort(self.z)
        """The runs by value: filtered to a segment, its ranks without a sort of its own."""
        self.tied = bool(np.any(np.diff(self.z[self.order]) == 0.0))
        self._stats: dict[tuple[int, int, int], ChangePoint | None] = {}
        self._slopes: dict[tuple[tuple[tuple[int, int], ...], float], tuple[float, float]] = {}
        self._trends: dict[tuple[int, int], tuple[float, np.ndarray, float]] = {}
        self._medians: dict[tuple[int, int], float] = {}
        self._sorted: dict[tuple[int, int], np.ndarray] = {}

    def sorted_in(self, lo: int, hi: int) -> np.ndarray:
        """The indices of the runs [lo, hi), by value: the series' order filtered, no sort (cached:
        the medians, the trend and the tests of a segment all start from it)."""
        key = (lo, hi)
        found = self._sorted.get(key)
        if found is None:
            order = self.order
            found = self._sorted[key] = order[(order >= lo) & (order < hi)]
        return found

    def split_z(self, a: int, c: int, d: int, b: int) -> float:
        """Mann-Whitney |z| between the runs [a, c) and [d, b) (:func:`_split_z`), from the series'
        order where it has no ties: U, the pairs of a run of [a, c) over one of [d, b), is where
        each of [a, c)'s values falls among [d, b)'s, both sorted (:meth:`sorted_in`, which the
        segments' medians read already), which saves a sort per test (the merge pass makes thousands)."""
        if self.tied:
            return _split_z(np.concatenate((self.z[a:c], self.z[d:b])), c - a)
        u = float(np.searchsorted(self.z[self.sorted_in(d, b)], self.z[self.sorted_in(a, c)]).sum())
        n1, n2 = float(c - a), float(b - d)
        return max(abs(u - n1 * n2 / 2.0) - 0.5, 0.0) / math.sqrt(n1 * n2 * (n1 + n2 + 1.0) / 12.0)

    def spearman_z(self, lo: int, hi: int) -> float:
        """:func:`_spearman_z` of the runs [lo, hi), from the series' order where it has no ties."""
        if self.tied:
            return _spearman_z(self.z[lo:hi])
        n = float(hi - lo)
        if n < 3:
            return 0.0
        # ranks a permutation of 1..n against times 1..n: rho = (12 sum(rank * time) - 3 n (n + 1)^2) / (n (n^2 - 1))
        times = self.sorted_in(lo, hi) - (lo - 1)  # the time (1..n) of the run of rank 1, 2, ..., n
        total = float(times @ np.arange(1.0, n + 1.0))
        return (12.0 * total - 3.0 * n * (n + 1.0) ** 2) / (n * (n * n - 1.0)) * math.sqrt(n - 1.0)

    def trend(self, lo: int, hi: int) -> tuple[float, np.ndarray, float]:
        """Of the runs [lo, hi): Spearman's z against their order, and the slopes of the pairs
        :func:`_slope` takes with their weight (cached: a segment is asked for again and again)."""
        key = (lo, hi)
        if key not in self._trends:
            seg = self.z[lo:hi]
            self._trends[key] = (self.spearman_z(lo, hi), *_slope(seg))
        return self._trends[key]

    def median(self, lo: int, hi: int) -> float:
        """The median of the values [lo, hi), from the series' order (cached)."""
        key = (lo, hi)
        if key not in self._medians:
            inside = self.sorted_in(lo, hi)
            k = inside.size
            self._medians[key] = float(self.raw[inside[(k - 1) // 2]] + self.raw[inside[k // 2]]) / 2.0
        return self._medians[key]

    def slope(self, *segments: tuple[int, int], gate: float = DRIFT_GATE) -> tuple[float, float]:
        """The trend within the runs of each segment [lo, hi) (normalised units per run, common to
        all) and its variance, or (0.0, 0.0) where they do not trend (a Spearman test of each
        segment, pooled, p > ``gate``).  Within each: a step between two segments does
        not bias it, and a drift through a version change that did nothing shows on both sides."""
        key = (segments, gate)
        if key in self._slopes:
            return self._slopes[key]
        zs: list[float] = []
        weights: list[float] = []
        slopes: list[np.ndarray] = []
        slope_weights: list[np.ndarray] = []
        for lo, hi in segments:
            if hi - lo < MIN_TREND_RUNS:
                continue
            z, d, weight = self.trend(lo, hi)
            zs.append(z)
            weights.append(math.sqrt(hi - lo))
            slopes.append(d)
            slope_weights.append(np.full(d.size, weight))
        out = (0.0, 0.0)
        if zs:
            pooled = sum(w * z for w, z in zip(weights, zs)) / math.sqrt(sum(w * w for w in weights))
            if _p_of_z(pooled) <= gate:
                pair_weights = np.concatenate(slope_weights)
                # each pair's slope has variance 2 noise^2 / h^2; their (weighted) median pi/2 times that of a mean
                variance = math.pi / 2.0 * 2.0 * self.noise ** 2 / float(pair_weights.sum())
                out = (_weighted_median(np.concatenate(slopes), pair_weights), variance)
        self._slopes[key] = out
        return out

    def shift(self, left: tuple[int, int], right: tuple[int, int],
              trend: tuple[float, float] | None = None) -> tuple[float, float, float, float]:
        """The runs [a, c) against [d, b): the two-sided p-value of a shift between them, the trend
        taken out first, and the medians either side (the levels at c where there is a trend).
        ``trend``: (slope, its variance) measured elsewhere; by default :meth:`slope` of the two.

        Mann-Whitney between the two; where they trend, a z of the jump in the detrended medians
        of the :data:`DRIFT_WINDOW` runs each side nearest the point instead, whose variance
        includes the slope's: a slope measured on the runs themselves moves their medians apart by
        its error times the distance between them (a Mann-Whitney test on the detrended runs,
        blind to that, made 2% of 5%-noise series a shift at a version change that did nothing).
        The nearest runs only, with their own slope, because no drift is a line for long: over
        1,000 runs each side, the curve of a compounded +0.02% a run, read as a line, was a jump
        of a few percent at every version change in it."""
        (a, c), (d, b) = left, right
        slope, variance = self.slope(left, right) if trend is None else trend
        if not slope:
            return _p_of_z(self.split_z(a, c, d, b)), 0.0, self.median(a, c), self.median(d, b)
        a, b = max(a, c - DRIFT_WINDOW), min(b, d + DRIFT_WINDOW)
        if trend is None:  # the slope of the runs the jump is measured on (a compounded drift curves)
            slope, variance = self.slope((a, c), (d, b), gate=1.0)
        before = self.z[a:c] - np.arange(a - c, 0, dtype=float) * slope
        after = self.z[d:b] - np.arange(d - c, b - c, dtype=float) * slope
        low, high = float(np.median(before)), float(np.median(after))
        lever = ((d + b) - (a + c)) / 2.0
        spread = math.pi / 2.0 * self.noise ** 2 * (1.0 / (c - a) + 1.0 / (b - d)) + variance * lever ** 2
        return (_p_of_z((high - low) / math.sqrt(spread)), slope, self.center + self.scale * low,
                self.center + self.scale * high)

    def passes(self, p: float, before: float, after: float) -> bool:
        return p <= self.max_pvalue and _magnitude(before, after) >= self.min_magnitude

    def stats(self, a: int, c: int, b: int) -> ChangePoint | None:
        """The change point at c between segments [a, c) and [c, b) (:meth:`shift`); None if a side
        is too short.

        A found point's p-value is multiplied by the number of places it could have been put
        between a and b (Bonferroni): its place was *chosen* as the best split, so the plain p is
        too small.  A known break was not chosen by the data: its p is the plain one."""
        key = (a, c, b)
        if key in self._stats:
            return self._stats[key]
        n1, n2 = c - a, b - c
        out = None
        if n1 >= self.m and n2 >= self.m:
            p, slope, before, after = self.shift((a, c), (c, b))
            known = c in self.known_set
            if not known:
                p = min(1.0, p * (b - a - 2 * self.m + 1))
            drift = slope * self.scale / before if slope and before else 0.0
            out = ChangePoint(c, p, before, after, n1, n2, known, drift)
        self._stats[key] = out
        return out

    def merge(self, points: list[int]) -> list[ChangePoint]:
        """Drop the weakest point until all pass; a dropped point's neighbours are re-tested.
        Weakest: a side too short, else the largest p above ``max_pvalue``, else the smallest
        magnitude below ``min_magnitude``; on a tie a found point goes before a known break."""
        def at(k: int) -> ChangePoint | None:
            a = points[k - 1] if k > 0 else 0
            b = points[k + 1] if k + 1 < len(points) else self.n
            return self.stats(a, points[k], b)

        points, known = sorted(set(points)), self.known_set
        stats = [at(k) for k in range(len(points))]
        while points:
            short = [k for k, st in enumerate(stats) if st is None]
            if short:
                drop = min(short, key=lambda k: (points[k] in known, k))
            else:
                checked = [st for st in stats if st is not None]
                drop = max(range(len(points)), key=lambda k: (checked[k].p_value, points[k] not in known))
                if checked[drop].p_value <= self.max_pvalue:
                    drop = min(range(len(points)), key=lambda k: (checked[k].magnitude, points[k] in known))
                    if checked[drop].magnitude >= self.min_magnitude:
                        break
            del points[drop], stats[drop]
            for k in (drop - 1, drop):
                if 0 <= k < len(points):
                    stats[k] = at(k)
        return [st for st in stats if st is not None]

    def place(self, kept: list[ChangePoint]) -> list[int]:
        """Each found point moved to its best split (:func:`_Series.best_split`); known breaks stay."""
        indices = [c.index for c in kept]
        out: list[int] = []
        for k, cp in enumerate(kept):
            if cp.known:
                out.append(cp.index)
                continue
            prev = out[-1] if out else 0
            nxt = indices[k + 1] if k + 1 < len(indices) else self.n
            out.append(self.best_split(prev, cp.index, nxt))
        return out

    def best_split(self, prev: int, c: int, nxt: int) -> int:
        """Where the shift at ``c`` between the points ``prev`` and ``nxt`` is: the split (at most
        :data:`REACH` runs from c) that minimises each run's squared distance from its side's median
        (the trend taken out, as :meth:`slope`), capped at :data:`CAP` noise scales squared.  Runs
        that fit neither side (spikes) cost the same wherever the split goes, so where several
        splits tie the middle one is taken.  Then a version change
        within :data:`NEAR_BREAK` runs that costs at most :data:`SNAP_TOLERANCE` more, and where the
        shift passes the tests too, takes it: the shift is put down to the version change."""
        m = self.m
        lo, hi = max(prev, c - REACH), min(nxt, c + REACH)
        if hi - lo < 2 * m or not lo < c < hi:  # no room (the merge drops a point with a side too short)
            return c
        slope, _ = self.slope((prev, c), (c, nxt))
        y = self.z[lo:hi]
        if slope:
            y = y - np.arange(lo - c, hi - c, dtype=float) * slope
        before, after = float(np.median(y[:c - lo])), float(np.median(y[c - lo:]))
        cost_before = np.minimum(((y - before) / self.noise) ** 2, CAP * CAP)
        cost_after = np.minimum(((y - after) / self.noise) ** 2, CAP * CAP)
        cost = np.concatenate(([0.0], np.cumsum(cost_before - cost_after)))  # + a constant: split at lo + j
        first, last = max(lo + m, prev + m), min(hi - m, nxt - m)
        if last < first:
            return c
        window = cost[first - lo:last - lo + 1]
        low = float(window.min())
        ties = np.flatnonzero(window <= low + 1e-9) + first
        near = int(ties[np.argmin(np.abs(ties - c))])
        block = [near]  # the run of tied splits around the one nearest c
        tied = set(ties.tolist())
        while block[0] - 1 in tied:
            block.insert(0, block[0] - 1)
        while block[-1] + 1 in tied:
            block.append(block[-1] + 1)
        best = (block[0] + block[-1]) // 2
        breaks = [k for k in self.known if abs(k - best) <= NEAR_BREAK and first <= k <= last
                  and cost[k - lo] - cost[best - lo] <= SNAP_TOLERANCE]
        for k in sorted(breaks, key=lambda k: (cost[k - lo], abs(k - best))):
            st = self.stats(prev, k, nxt)
            if st is not None and self.passes(st.p_value, st.median_before, st.median_after):
                return k
        return best

    def staircase(self, kept: list[ChangePoint]) -> int | None:
        """A point of a staircase that is a drift: consecutive points shifting the same way, with
        the runs within their segments trending (pooled over all of them), of which one does not
        pass once that common trend is taken out.  Each segment of a slow drift cut into steps is
        too short to show the trend on its own (at 5% noise, 100 runs of a +0.05%-a-run drift),
        so the test of each point between its two segments finds no trend and keeps it: the
        whole staircase does show it.  The index in ``kept`` of the weakest such point, else None."""
        k = 0
        while k < len(kept):
            up = kept[k].median_after > kept[k].median_before
            j = k
            while j + 1 < len(kept) and (kept[j + 1].median_after > kept[j + 1].median_before) == up:
                j += 1
            if j > k:
                bounds = [kept[k - 1].index if k > 0 else 0, *(c.index for c in kept[k:j + 1]),
                          kept[j + 1].index if j + 1 < len(kept) else self.n]
                trend = self.slope(*zip(bounds, bounds[1:]), gate=STAIRCASE_GATE)
                if trend[0]:
                    weakest: tuple[float, int] | None = None
                    for i in range(k, j + 1):
                        a, c, b = bounds[i - k], bounds[i - k + 1], bounds[i - k + 2]
                        p, _, before, after = self.shift((a, c), (c, b), trend)
                        if not kept[i].known:
                            p = min(1.0, p * (b - a - 2 * self.m + 1))
                        if not self.passes(p, before, after) and (weakest is None or p > weakest[0]):
                            weakest = (p, i)
                    if weakest is not None:
                        return weakest[1]
            k = j + 1
        return None

    def excursion(self, kept: list[ChangePoint]) -> tuple[int, int] | None:
        """Two points fewer than :data:`EXCURSION` runs apart, not both version changes, shifting
        opposite ways, with the segments outside them alike (no significant shift of at least the
        minimum between them, the trend taken out): the indices of the first such pair in
        ``kept``, else None.  One version change among them is no reason to keep a burst: a burst
        just before an upgrade that did nothing would otherwise be a shift at the upgrade."""
        for k in range(len(kept) - 1):
            one, two = kept[k], kept[k + 1]
            if (one.known and two.known) or two.index - one.index >= EXCURSION:
                continue
            if (one.median_after - one.median_before) * (two.median_after - two.median_before) >= 0:
                continue
            a = kept[k - 1].index if k > 0 else 0
            b = kept[k + 2].index if k + 2 < len(kept) else self.n
            p, _, before, after = self.shift((a, one.index), (two.index, b))
            if not self.passes(p, before, after):
                return k, k + 1
        return None

    def drifts(self, points: list[ChangePoint]) -> list[Drift]:
        """The segments between the points (and the series' ends) whose runs trend (Spearman,
        p <= max_pvalue), still trend within both parts when split at their likeliest step (so a
        step too small to list is not a drift), by a fitted total of at least the minimum magnitude.
        The slope is measured within the parts, as :meth:`slope` does: measured over a step, it
        would read the step as a drift twice its size."""
        bounds = [0, *(c.index for c in points), self.n]
        out = []
        for s, e in zip(bounds, bounds[1:]):
            if e - s < 2 * max(MIN_TREND_RUNS, 2 * self.m):
                continue
            seg = self.z[s:e]
            p = _p_of_z(self.spearman_z(s, e))
            if p > self.max_pvalue:
                continue
            c = s + _likeliest_step(seg, max(MIN_TREND_RUNS, 2 * self.m))
            slope, _ = self.slope((s, c), (c, e), gate=self.max_pvalue)
            if not slope:
                continue
            start = self.center + self.scale * float(np.median(seg - slope * np.arange(e - s)))
            end = start + self.scale * slope * (e - s - 1)
            if _magnitude(start, end) >= self.min_magnitude:
                out.append(Drift(s, e, p, start, end))
        return out


def _likeliest_step(values: np.ndarray, m: int) -> int:
    """The split of ``values`` (at least ``m`` each side) with the largest Mann-Whitney |z|."""
    ranks, ties = _ranks1(values)
    taus = np.arange(m, values.size - m + 1)
    scan = _mw_z(np.cumsum(ranks)[taus - 1], taus, float(values.size), ties)
    return int(taus[np.argmax(scan)])


# --- the whole -----------------------------------------------------------------------------------

def find_changes(values: Sequence[float], *, breaks: Iterable[int] = (),
                 max_pvalue: float = DEFAULT_MAX_PVALUE, min_magnitude: float = DEFAULT_MIN_MAGNITUDE,
                 min_segment: int = DEFAULT_MIN_SEGMENT, window: int = DEFAULT_WINDOW,
                 first_pass_factor: float = FIRST_PASS_FACTOR) -> Changes:
    """The change points and drifts of ``values`` (time order, finite), oldest first.

    ``breaks``: indices of points that start a new segment for a known reason (a version change);
    no split window spans one, and each is reported only if the shift at it is significant (then
    with ``known=True``).  ``max_pvalue`` and ``min_magnitude`` (relative change of the medians)
    must both hold; ``min_segment`` runs each side at least; ``window`` points per split window.
    A few thousand points take a few milliseconds."""
    return find_changes_many([(values, breaks, min_magnitude)], max_pvalue=max_pvalue, min_segment=min_segment,
                             window=window, first_pass_factor=first_pass_factor)[0]


def find_changes_many(items: Sequence[tuple[Sequence[float], Iterable[int], float]], *,
                      max_pvalue: float = DEFAULT_MAX_PVALUE, min_segment: int = DEFAULT_MIN_SEGMENT,
                      window: int = DEFAULT_WINDOW, first_pass_factor: float = FIRST_PASS_FACTOR,
                      drifts: bool = True, progress: Callable[[int, int], None] | None = None) -> list[Changes]:
    """:func:`find_changes` of many sequences, each ``(values, breaks, min_magnitude)``: the split
    windows of all of them are screened together (numpy batches), which is what makes a history
    of thousands of series fast; the rest is per sequence.  ``drifts=False`` skips the drifts;
    ``progress(k, total)`` is called as each sequence is done."""
    m = max(2, int(min_segment))
    z_weak = _z_of_p(min(1.0, max_pvalue * first_pass_factor))
    width = max(2 * m, int(window))
    series: list[_Series | None] = []
    windows: dict[int, list[tuple[int, int]]] = {}  # window length: (item, start)
    for number, (values, breaks, min_magnitude) in enumerate(items):
        raw = np.asarray(values, dtype=float)
        if raw.ndim != 1:
            raise ValueError("values must be one sequence of numbers")
        if not np.all(np.isfinite(raw)):
            raise ValueError("values must be finite (drop missing runs before calling)")
        if raw.size < 2 * m:
            series.append(None)
            continue
        n = raw.size
        known = sorted({int(i) for i in breaks if 0 < int(i) < n})
        s = _Series(raw, m, known, max_pvalue, min_magnitude)
        series.append(s)
        bounds = [0, *known, n]
        for w, starts in _windows(zip(bounds, bounds[1:]), width, m).items():
            windows.setdefault(w, []).extend((number, start) for start in starts)
    found: list[set[int]] = [set() for _ in items]
    for w, where in windows.items():
        for first in range(0, len(where), BATCH):  # bounded memory: BATCH windows at a time
            chunk = where[first:first + BATCH]
            X = np.empty((len(chunk), w))
            for row, (number, start) in enumerate(chunk):
                one = series[number]
                assert one is not None
                X[row] = one.z[start:start + w]
            for (number, start), weak in zip(chunk, _window_points(X, m, z_weak)):
                found[number].update(start + p for p in weak)
    out = []
    for number, (each, candidates) in enumerate(zip(series, found), 1):
        if progress is not None:
            progress(number, len(series))
        if each is None:
            out.append(Changes())
            continue
        kept = _analyse(each, candidates)
        out.append(Changes(kept, each.drifts(kept) if drifts else []))
        series[number - 1] = None  # its arrays and caches go now, not with the last sequence's
    return out


def _analyse(s: _Series, weak: set[int]) -> list[ChangePoint]:
    """Merge, place and merge again (at most :data:`REFINE_ROUNDS` times), then take out the steps
    of a drift and the excursions, one at a time, merging again after each."""
    if not weak and not s.known:
        return []
    kept = s.merge(sorted(weak | set(s.known)))
    while True:
        for _ in range(REFINE_ROUNDS):
            moved = s.place(kept)
            if moved == [c.index for c in kept]:
                break
            kept = s.merge(moved)
        step = s.staircase(kept)
        if step is not None:
            kept = s.merge([c.index for k, c in enumerate(kept) if k != step])
            continue
        pair = s.excursion(kept)
        if pair is None:
            return kept
        kept = s.merge([c.index for k, c in enumerate(kept) if k not in pair])
