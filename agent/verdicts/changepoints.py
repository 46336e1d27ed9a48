"""Change points in one sequence of floats: E-Divisive means, the way Apache Otava (formerly
datastax-labs/hunter) runs it, written here on numpy and scipy.

Why a second detector.  :mod:`sixdim.verdicts.detector` judges a series *online*, one run after another,
with a frozen baseline and persistence rules; it answers "is this series regressed now?".  Looking
back over a whole history asks something else: *where* did each series shift, by how much, and
was a software version change the cause?  That is change-point analysis.  Otava's variant of
E-Divisive (Matteson and James, 2014; Fleming et al., "Hunter", ICPE 2023) is the reference the
project chose; ``signal-processing-algorithms``, which Otava started from, pins an old Python and
numpy < 2, so it is not a dependency and this is an implementation of our own.

Only the report commands (``sixdim report regressions`` and ``sixdim report --html``) import this
module: numpy and scipy load here, never in the daemon.

The method, in two passes (the facts are Otava's; the code is ours):

1. **Split.**  The series is cut at the *known* break points (version changes, as in
   :func:`sixdim.verdicts.detector.version_breaks`), and each piece is covered by windows of ``window``
   points overlapping by half.  In each window, E-Divisive picks the split ``tau`` (with a right
   end ``kappa``) that maximises the energy statistic

       Q(tau, kappa) = n1*n2/(n1+n2) * (2/(n1*n2) sum|x_i - y_j| - mean pair distance within X
                                       - mean pair distance within Y),

   X = window[s:tau], Y = window[tau:kappa], computed for every (tau, kappa) at once from a 2-D
   prefix sum of the window's distance matrix.  The split is tested by a two-sided Student's
   t-test between the two sides of its interval (Otava's replacement for the original permutation
   test: deterministic and fast).  If it passes a *relaxed* threshold (``first_pass_factor`` x
   ``max_pvalue``: Otava's "weak" change points), the window is split again, best candidate
   first, until one fails.  Windows, not the whole series, because a long series hides a short
   excursion from a split that must balance the whole of it (Hunter's reason for windows).
2. **Merge.**  The weak points of every window and the known breaks are pooled, and each is
   tested again between its *adjacent* change points (the segments it separates).  The weakest
   point is removed and its two neighbours re-tested, until every point left has segments of at
   least ``min_segment`` runs each side, p <= ``max_pvalue`` and a magnitude of at least
   ``min_magnitude``.  A known break takes part like any other candidate: it is reported only
   when the shift is significant *at* it.

Two choices differ from Otava, both for robustness to the spikes a GPU fleet sees (one run in a
hundred 20% slow): the magnitude is the ratio of the adjacent segments' **medians**, not their
means, so a spike moves neither it nor the reported change; and no segment may be shorter than
``min_segment`` runs, so a spike (or two) cannot become a segment of its own.  The reference notes
(anchors.md, "Regression detection") measured Otava's p-value alone at 17-43% false change points
per 300-point no-change series; the minimum magnitude is what bounds false alarms here, as it
does in the online detector.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import special

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
"""How far (points either way) the refinement may move a found change point."""
REFINE_ROUNDS = 3
"""Refine-and-merge rounds at most (one nearly always settles it)."""
BATCH = 512
"""Split windows computed at once: 512 windows of 50 points need about 21 MB (distances and sums)."""

_TINY = 1e-12
"""On the normalised scale (values divided by the series' median), a spread or difference below
this is zero: a constant segment has no noise, and two equal constants no difference."""


@dataclass(frozen=True)
class ChangePoint:
    """One shift: ``index`` is the first point after it; the statistics compare the segments
    ``values[prev:index]`` and ``values[index:next]`` between the neighbouring change points."""

    index: int
    p_value: float
    """Two-sided Student's t-test between the adjacent segments."""
    median_before: float
    median_after: float
    runs_before: int
    runs_after: int
    known: bool = False
    """The index is one of the given break points (a version change)."""

    @property
    def ratio(self) -> float | None:
        """median after / median before (None when the median before is 0)."""
        return self.median_after / self.median_before if self.median_before else None

    @property
    def magnitude(self) -> float:
        """|median after - median before| / |median before|."""
        return _magnitude(self.median_before, self.median_after)


def _magnitude(before: float, after: float) -> float:
    if before:
        return abs(after - before) / abs(before)
    return 0.0 if after == before else math.inf


# --- the t-test on prefix sums ------------------------------------------------------------------

def _t_pvalue(n1, s1, q1, n2, s2, q2):
    """Two-sided Student's t-test p-values from counts, sums and sums of squares (numpy arrays or
    scalars): pooled variance, as Otava's tester.  Zero spread both sides: p = 0 if the means
    differ, else 1 (scipy would give NaN)."""
    n1 = np.asarray(n1, dtype=float)
    n2 = np.asarray(n2, dtype=float)
    m1, m2 = s1 / n1, s2 / n2
    ss1 = np.maximum(q1 - s1 * m1, 0.0)  # sum of squared deviations
    ss2 = np.maximum(q2 - s2 * m2, 0.0)
    df = n1 + n2 - 2.0
    with np.errstate(divide="ignore", invalid="ignore"):
        pooled = (ss1 + ss2) / df
        se = np.sqrt(pooled * (1.0 / n1 + 1.0 / n2))
        diff = np.abs(m2 - m1)
        t = diff / se
        p = 2.0 * special.stdtr(df, -t)
    flat = se <= _TINY
    p = np.where(flat, np.where(diff <= _TINY, 1.0, 0.0), p)
    return np.where(df > 0, np.clip(p, 0.0, 1.0), 1.0)


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


def _grid(length: int, m: int) -> _Grid:
    """The grid of an interval; those of window size and below are cached (the split pass asks
    for the same few again and again), a refinement's longer ones are not (they are large)."""
    return _small_grid(length, m) if length <= SMALL_GRID else _make_grid(length, m)


SMALL_GRID = 128


@lru_cache(maxsize=512)
def _small_grid(length: int, m: int) -> _Grid:
    return _make_grid(length, m)


def _make_grid(length: int, m: int) -> _Grid:
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


def _split_pvalue(S1: np.ndarray, S2: np.ndarray, s, tau, e) -> np.ndarray:
    """t-test p of splitting [s, e) at tau, per window (prefix sums of values and squares)."""
    rows = np.arange(S1.shape[0])
    left1, left2 = S1[rows, tau] - S1[rows, s], S2[rows, tau] - S2[rows, s]
    right1, right2 = S1[rows, e] - S1[rows, tau], S2[rows, e] - S2[rows, tau]
    return _t_pvalue(np.asarray(tau) - s, left1, left2, np.asarray(e) - np.asarray(tau), right1, right2)


def _window_points(X: np.ndarray, m: int, alpha: float) -> list[list[int]]:
    """The weak change points of each window (rows of X): E-Divisive with the t-test, stopping at
    the first candidate that fails ``alpha``.  The first split of every window is computed in one
    batch; only windows where it passed are split further, one by one."""
    B, w = X.shape
    D = np.abs(X[:, :, None] - X[:, None, :])
    P = np.zeros((B, w + 1, w + 1))
    np.cumsum(D, axis=1, out=D)
    np.cumsum(D, axis=2, out=P[:, 1:, 1:])
    S1 = np.zeros((B, w + 1))
    S2 = np.zeros((B, w + 1))
    np.cumsum(X, axis=1, out=S1[:, 1:])
    np.cumsum(X * X, axis=1, out=S2[:, 1:])
    taus, _ = _best_splits(P, 0, w, m)
    pvals = _split_pvalue(S1, S2, 0, taus, w)
    out: list[list[int]] = [[] for _ in range(B)]
    for b in np.flatnonzero(pvals <= alpha):
        out[b] = _recurse(P[b:b + 1], S1[b:b + 1], S2[b:b + 1], int(taus[b]), w, m, alpha)
    return out


def _recurse(P: np.ndarray, S1: np.ndarray, S2: np.ndarray, first: int, w: int, m: int,
             alpha: float) -> list[int]:
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
                tau, q = _best_splits(P, s, e, m)
                cache[(s, e)] = (int(tau[0]), float(q[0]))
            tau, q = cache[(s, e)]
            if best is None or q > best[0]:
                best = (q, tau, s, e)
        if best is None:
            return points
        _, tau, s, e = best
        if _split_pvalue(S1, S2, s, np.array([tau]), e)[0] > alpha:
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


# --- the merge pass -----------------------------------------------------------------------------

class _Merger:
    """The pooled candidates of a series and their statistics against adjacent candidates."""

    def __init__(self, raw: np.ndarray, z: np.ndarray, m: int, known: set[int]):
        self.raw, self.m, self.n, self.known = raw, m, len(raw), known
        self.S1 = np.concatenate(([0.0], np.cumsum(z)))
        self.S2 = np.concatenate(([0.0], np.cumsum(z * z)))

    def stats(self, a: int, c: int, b: int) -> ChangePoint | None:
        """The change point at c between segments [a, c) and [c, b); None if a side is too short.

        A found point's p-value is multiplied by the number of places it could have been put
        between a and b (Bonferroni): its place was *chosen* as the best split, so the plain
        t-test p is too small: with it alone, series with 5% noise had 0.5 false change points per
        2,000 runs.  A known break was not chosen by the data: its p is the plain one."""
        n1, n2 = c - a, b - c
        if n1 < self.m or n2 < self.m:
            return None
        p = float(_t_pvalue(n1, self.S1[c] - self.S1[a], self.S2[c] - self.S2[a],
                            n2, self.S1[b] - self.S1[c], self.S2[b] - self.S2[c]))
        known = c in self.known
        if not known:
            p = min(1.0, p * (b - a - 2 * self.m + 1))
        before, after = self.raw[a:c], self.raw[c:b]
        return ChangePoint(c, p, float(np.median(before)), float(np.median(after)), n1, n2, known)

    def merge(self, points: list[int], max_pvalue: float, min_magnitude: float) -> list[ChangePoint]:
        """Drop the weakest point until all pass; a dropped point's neighbours are re-tested.
        Weakest: a side too short, else the largest p above ``max_pvalue``, else the smallest
        magnitude below ``min_magnitude``; on a tie a found point goes before a known break."""
        def at(k: int) -> ChangePoint | None:
            a = points[k - 1] if k > 0 else 0
            b = points[k + 1] if k + 1 < len(points) else self.n
            return self.stats(a, points[k], b)

        points, known = list(points), self.known
        stats = [at(k) for k in range(len(points))]
        while points:
            short = [k for k, st in enumerate(stats) if st is None]
            if short:
                drop = min(short, key=lambda k: (points[k] in known, k))
            else:
                drop = max(range(len(points)), key=lambda k: (stats[k].p_value, points[k] not in known))
                if stats[drop].p_value <= max_pvalue:
                    drop = min(range(len(points)), key=lambda k: (stats[k].magnitude, points[k] in known))
                    if stats[drop].magnitude >= min_magnitude:
                        break
            del points[drop], stats[drop]
            for k in (drop - 1, drop):
                if 0 <= k < len(points):
                    stats[k] = at(k)
        return [st for st in stats if st is not None]


# --- the whole -----------------------------------------------------------------------------------

def find_change_points(values: Sequence[float], *, breaks: Iterable[int] = (),
                       max_pvalue: float = DEFAULT_MAX_PVALUE, min_magnitude: float = DEFAULT_MIN_MAGNITUDE,
                       min_segment: int = DEFAULT_MIN_SEGMENT, window: int = DEFAULT_WINDOW,
                       first_pass_factor: float = FIRST_PASS_FACTOR) -> list[ChangePoint]:
    """The change points of ``values`` (time order, finite), oldest first.

    ``breaks``: indices of points that start a new segment for a known reason (a version change);
    no split window spans one, and each is reported only if the shift at it is significant (then
    with ``known=True``).  ``max_pvalue`` and ``min_magnitude`` (relative change of the medians)
    must both hold; ``min_segment`` runs each side at least; ``window`` points per split window.
    A few thousand points take a few milliseconds."""
    raw = np.asarray(values, dtype=float)
    if raw.ndim != 1:
        raise ValueError("values must be one sequence of numbers")
    if not np.all(np.isfinite(raw)):
        raise ValueError("values must be finite (drop missing runs before calling)")
    m = max(2, int(min_segment))
    n = raw.size
    if n < 2 * m:
        return []
    center = float(np.median(raw))
    scale = abs(center) or float(np.max(np.abs(raw - center))) or 1.0
    z = (raw - center) / scale  # the t-test is scale-free, Q's argmax too: unit scale keeps sums exact

    known = sorted({int(i) for i in breaks if 0 < int(i) < n})
    bounds = [0, *known, n]
    alpha = min(1.0, max_pvalue * first_pass_factor)
    found: set[int] = set()
    for w, starts in _windows(zip(bounds, bounds[1:]), max(2 * m, int(window)), m).items():
        for first in range(0, len(starts), BATCH):  # bounded memory: BATCH windows at a time
            chunk = starts[first:first + BATCH]
            index = np.asarray(chunk)[:, None] + np.arange(w)
            for start, points in zip(chunk, _window_points(z[index], m, alpha)):
                found.update(start + p for p in points)
    merger = _Merger(raw, z, m, set(known))
    kept = merger.merge(sorted(found | set(known)), max_pvalue, min_magnitude)
    for _ in range(REFINE_ROUNDS):
        moved = _refine([c.index for c in kept], z, m, set(known))
        if moved == [c.index for c in kept]:
            break
        kept = merger.merge(moved, max_pvalue, min_magnitude)
    return kept


def _refine(points: list[int], z: np.ndarray, m: int, known: set[int]) -> list[int]:
    """Move each found point to the best E-Divisive split between its neighbours (at most
    :data:`REACH` points either way).  The split pass may have only a point some way off a shift
    (no window saw the shift clearly: a spike beside it weakened the t-test), which the merge pass
    keeps because the shift lies between its neighbours; this puts it where the shift is.  Known
    breaks stay where they are."""
    out: list[int] = []
    for k, c in enumerate(points):
        if c in known:
            out.append(c)
            continue
        lo = max(out[-1] if out else 0, c - REACH)
        hi = min(points[k + 1] if k + 1 < len(points) else len(z), c + REACH)
        x = z[lo:hi]
        P = np.zeros((1, x.size + 1, x.size + 1))
        P[0, 1:, 1:] = np.abs(x[:, None] - x[None, :]).cumsum(axis=0).cumsum(axis=1)
        tau, _ = _best_splits(P, 0, x.size, m)
        out.append(lo + int(tau[0]))
    return sorted(set(out))
