"""Regression verdicts per series: robust baseline, rank test, minimum effect, persistence.

Pure Python (no numpy, no torch): the daemon evaluates one series after each of its runs and
must stay light, so this module imports only the standard library.  See docs/REGRESSIONS.md
for the method and tests/bench/regression_sim.py for the simulation that chose the defaults.

Who uses what: the daemon's live verdicts (:mod:`sixdim.verdicts.live`) keep one
:class:`SeriesTracker` per series and watched figure, fed one run at a time, and call
:func:`version_verdict` at each version change (:func:`versions` says which versions a run was
measured under); the exporter turns a :class:`Verdict` into the ``sixdim_regression_state`` gauge
through :data:`STATE_CODES`.  The reports use :func:`versions` and :func:`series_label`.  The
tracker works on plain values, so it is unit-testable without records; tests/verdict_reference.py
drives it over whole series for the tests and the simulation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from sixdim.core.catalog import DOWN as DOWN  # re-exported: the detector's figures, as the catalog defines them
from sixdim.core.catalog import FIGURES_BY_KEY, SPEED_FIGURES
from sixdim.core.catalog import RATES as RATES
from sixdim.core.catalog import STATE_CODES as STATE_CODES
from sixdim.core.catalog import UP as UP
from sixdim.core.catalog import WATCHED as WATCHED

if TYPE_CHECKING:
    from sixdim.config import Config

# --- States --------------------------------------------------------------------------------

OK = "ok"
INSUFFICIENT_DATA = "insufficient_data"
SUSPICIOUS = "suspicious"
REGRESSION = "regression"
IMPROVEMENT = "improvement"

# --- What is watched, and which way is worse: the catalog's FIGURES (sixdim.core.catalog) --------

def watched_figures(figures: Mapping[str, Any]) -> list[str]:
    """The figures of one run that get a verdict of their own: the watched ones it reports, less
    those that only restate another (see :data:`RATES`), so that a series exports one verdict per
    distinct question: speed, power, efficiency, memory, accuracy, stability."""
    present = [f for f in WATCHED if isinstance(figures.get(f), (int, float)) and not isinstance(figures.get(f), bool)]
    if any(f in present for f in RATES):
        present = [f for f in present if not FIGURES_BY_KEY[f].restates_rate]
    return present


def primary_figure(figures: Mapping[str, Any]) -> str:
    """The figure that carries a series' speed: the verdict an ``incorrect`` run turns to regression
    when the series has no verdict yet."""
    return next((figure for figure in SPEED_FIGURES if figure in figures), "seconds")


VERSION_KEYS: tuple[str, ...] = ("driver", "cuda_runtime", "cudnn", "nccl", "torch", "vbios", "onnxruntime")
"""RunRecord.environment entries whose change is a known break point (a new segment)."""

WORKLOAD_VERSION_KEYS: dict[str, frozenset[str]] = {"onnxruntime": frozenset({"onnx"})}
"""Version keys that are a break point only for some workloads' series.  Every torch worker records
ONNX Runtime's version (one worker serves a whole suite), but only the ``onnx`` workload runs on it:
an ONNX Runtime upgrade must not start a new segment, and reset the baseline, of every GEMM."""

INCORRECT = "incorrect"


# --- Settings -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Settings:
    """Detector parameters; the defaults are the point tests/bench/regression_sim.py chose (see
    docs/REGRESSIONS.md for the trade-off curve behind each)."""

    window: int = 40
    """W: accepted runs of the current segment forming the baseline (median, scaled MAD).  40,
    not 20: a 20-run median wanders (sd 0.28 sigma) enough that every fast-rule threshold either
    misses the 1-in-100,000 false-alarm target on spiky noise or the 5%-in-3-runs target; the
    simulation (docs/REGRESSIONS.md) measured 30 just missing the spiky targets and 40 meeting all."""
    min_baseline: int = 10
    """Fewer baseline runs than this: ``insufficient_data``."""
    fast_runs: int = 3
    """The fast rule: the last ``fast_runs`` runs all worse by ``fast_effect`` (catches a 5% step
    within 3 runs; three in a row because two 20% spikes in a row happen 1 in 10^4 runs)."""
    fast_effect: float = 0.025
    fast_alpha: float = 0.01
    slow_runs: int = 6
    """The slow rule: the mean of the ``slow_kept`` least-worse of the last ``slow_runs`` runs worse
    by ``min_effect`` (catches a 3% step within 6 runs; dropping the 2 worst makes it immune to two
    spikes in the window)."""
    slow_kept: int = 4
    min_effect: float = 0.018
    slow_alpha: float = 0.002
    fast_noise: float = 2.0
    """Noise guard: a run is a violation only beyond ``fast_noise`` scaled MADs as well, so a series
    much noisier than 1% does not alarm on a 2.5% wobble.  Binds only above ~1.25% noise."""
    slow_noise: float = 1.2
    suspicious_runs: int = 2
    """Violations (by ``min_effect``) among the last ``slow_runs`` that make a series ``suspicious``."""
    reform_after: int = 20
    """Runs after a regression's (or improvement's) onset after which the new level is the new
    normal: the segment restarts at the onset and the baseline re-forms there."""
    version_runs: int = 10
    """Runs each side of a version change compared by :func:`version_verdict`."""
    version_min_runs: int = 3
    version_alpha: float = 0.01
    effects: Mapping[str, float] = field(default_factory=dict)
    """Per-figure and per-workload ``min_effect`` overrides, keyed ``"workload/figure"``,
    ``"workload"`` or ``"figure"`` (most specific wins).  ``fast_effect`` scales with it."""

    def effects_for(self, figure: str, workload: str = "") -> tuple[float, float]:
        """(fast, slow) minimum relative effects for one figure of one workload."""
        for key in (f"{workload}/{figure}", workload, figure):
            if key and key in self.effects:
                slow = float(self.effects[key])
                return slow * self.fast_effect / self.min_effect, slow
        return self.fast_effect, self.min_effect


# --- Small robust statistics ----------------------------------------------------------------

MAD_SCALE = 1.4826
"""Scaled MAD estimates a Gaussian sigma."""


def median(values: Sequence[float]) -> float:
    """The median; values need not be sorted."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("median of no values")
    mid = n // 2
    return ordered[mid] if n % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


def scaled_mad(values: Sequence[float], center: float | None = None) -> float:
    """1.4826 x median absolute deviation: a sigma that one spike cannot inflate."""
    c = median(values) if center is None else center
    return MAD_SCALE * median([abs(v - c) for v in values])


@lru_cache(maxsize=256)
def _u_counts(n1: int, n2: int) -> tuple[int, ...]:
    """Number of orderings giving each U (pairs with sample 1 above sample 2), no ties."""
    if n1 == 0 or n2 == 0:
        return (1,)
    # the largest value is from sample 1 (it beats all n2) or from sample 2 (beats nothing)
    a = _u_counts(n1 - 1, n2)
    b = _u_counts(n1, n2 - 1)
    out = [0] * (n1 * n2 + 1)
    for u, c in enumerate(b):
        out[u] += c
    for u, c in enumerate(a):
        out[u + n2] += c
    return tuple(out)


@lru_cache(maxsize=256)
def _u_tail(n1: int, n2: int) -> tuple[float, ...]:
    """P(U >= u) under the null, for u = 0 .. n1*n2."""
    counts = _u_counts(n1, n2)
    total = float(sum(counts))
    tail, acc = [0.0] * len(counts), 0
    for u in range(len(counts) - 1, -1, -1):
        acc += counts[u]
        tail[u] = acc / total
    return tuple(tail)


EXACT_LIMIT = 400
"""n1*n2 up to which the exact null distribution is used (it is cached per size)."""


def mann_whitney_greater(sample: Sequence[float], reference: Sequence[float]) -> float:
    """One-sided Mann-Whitney p-value that ``sample`` is stochastically larger than ``reference``.

    Exact (cached null distribution) without ties for small samples; otherwise the normal
    approximation with tie correction and continuity correction.  Distribution-free: its
    false-positive rate is at most the p-value whatever the noise, if runs are exchangeable."""
    n1, n2 = len(sample), len(reference)
    if n1 == 0 or n2 == 0:
        return 1.0
    u, ties = 0.0, False
    for x in sample:
        for y in reference:
            if x > y:
                u += 1.0
            elif x == y:
                u += 0.5
                ties = True
    if not ties and n1 * n2 <= EXACT_LIMIT:
        return _u_tail(n1, n2)[int(u)]
    return _normal_tail(u, n1, n2, [*sample, *reference])


def _normal_tail(u: float, n1: int, n2: int, pooled: Sequence[float]) -> float:
    """P(U >= u) by the normal approximation with tie correction."""
    n = n1 + n2
    counts: dict[float, int] = {}
    for v in pooled:
        counts[v] = counts.get(v, 0) + 1
    tie_term = sum(t ** 3 - t for t in counts.values())
    var = n1 * n2 / 12.0 * ((n + 1) - tie_term / (n * (n - 1))) if n > 1 else 0.0
    if var <= 0:
        return 1.0
    z = (u - n1 * n2 / 2.0 - 0.5) / math.sqrt(var)
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def mann_whitney_two_sided(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value: twice the smaller one-sided one."""
    return min(1.0, 2.0 * min(mann_whitney_greater(a, b), mann_whitney_greater(b, a)))


# --- Verdicts -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Verdict:
    """The state of one figure of one series after its latest run."""

    state: str
    figure: str = ""
    direction: int = UP
    baseline: float | None = None
    """Median of the baseline runs (the ``sixdim_baseline_value``)."""
    current: float | None = None
    """Median of the last ``fast_runs`` runs: robust to one spike, quick to follow a step."""
    ratio: float | None = None
    """current / baseline (the ``sixdim_regression_ratio``)."""
    p_value: float | None = None
    violations: int = 0
    """Runs among the last ``slow_runs`` worse than the baseline by the minimum effect."""
    runs: int = 0
    """Accepted runs seen in the current segment."""
    segment_start: int = 0
    """Index (into the values given) of the run that began the current segment."""
    onset: int | None = None
    """Index of the first run of the active regression or improvement episode."""
    reason: str = ""

    @property
    def code(self) -> int:
        return STATE_CODES[self.state]


@dataclass
class _Check:
    fast: bool
    slow: bool
    fast_p: float
    slow_p: float
    fast_effect: float
    slow_effect: float
    violations: int
    first_violation: int | None
    """Position in the window where the change began: the start of the trailing streak of
    violations when the fast rule fired, else the earliest violating run."""

    @property
    def fires(self) -> bool:
        return self.fast or self.slow


class SeriesTracker:
    """Streams one figure of one series run by run; :meth:`update` returns the Verdict after it.

    Holds the current segment, the frozen baseline of an active episode, and the episode's
    direction and onset.  A later step rebuilds it from history at start, then feeds new runs."""

    def __init__(self, figure: str, settings: Settings | None = None, workload: str = "",
                 direction: int | None = None) -> None:
        self.figure = figure
        self.settings = settings or Settings()
        self.direction = WATCHED.get(figure, UP) if direction is None else direction
        self.fast_effect, self.min_effect = self.settings.effects_for(figure, workload)
        self.values: list[float] = []
        self.indices: list[int] = []
        self.seen = 0
        self.segment_start = 0
        self.frozen: list[float] | None = None
        self.episode: int = 0
        """+1 a regression episode is active, -1 an improvement one, 0 none."""
        self.onset: int | None = None
        """Position in ``values`` of the episode's first run."""
        self.last: Verdict = Verdict(INSUFFICIENT_DATA, figure, self.direction)

    # -- input --

    def break_segment(self) -> None:
        """A known break point (a version change): the next run starts a new segment."""
        self.values, self.indices, self.frozen, self.episode, self.onset = [], [], None, 0, None
        self.segment_start = self.seen

    def update(self, value: float | None, status: str = "ok") -> Verdict:
        """Feed one run (in time order); returns the verdict after it."""
        index = self.seen
        self.seen += 1
        if status == INCORRECT:
            self.last = replace(self.last, state=REGRESSION, reason="incorrect result", violations=0)
            return self.last
        if status != "ok" or value is None or not math.isfinite(value):
            return self.last  # not an accepted run: nothing to judge, the last verdict stands
        if not self.values:
            self.segment_start = index
        self.values.append(float(value))
        self.indices.append(index)
        self.last = self._judge()
        self._trim()
        return self.last

    # -- judging --

    def _baseline(self) -> list[float]:
        """The frozen baseline of an episode, else the W runs before the slow window."""
        if self.frozen is not None:
            return self.frozen
        end = len(self.values) - self.settings.slow_runs
        return self.values[max(0, end - self.settings.window):max(0, end)]

    def _judge(self) -> Verdict:
        s = self.settings
        base = self._baseline()
        if len(base) < s.min_baseline:
            return Verdict(INSUFFICIENT_DATA, self.figure, self.direction, runs=len(self.values),
                           segment_start=self.segment_start,
                           reason=f"{len(base)} baseline runs, {s.min_baseline} needed")
        center = median(base)
        spread = scaled_mad(base, center)
        window = self.values[-s.slow_runs:]
        worse = self._check(window, base, center, spread, self.direction)
        better = self._check(window, base, center, spread, -self.direction)
        state = self._state(worse, better, len(window))
        if self.episode and self._should_reform(state):
            return self._reform()
        return self._verdict(state, worse if state != IMPROVEMENT else better, center, spread)

    def _check(self, window: list[float], base: list[float], center: float, spread: float,
               sign: int) -> _Check:
        """Both rules in one direction (sign +1: larger is worse)."""
        s = self.settings
        scale = abs(center) if center else 1.0
        noise = spread / scale
        fast_tau = max(self.fast_effect, s.fast_noise * noise)
        slow_tau = max(self.min_effect, s.slow_noise * noise)
        dev = [sign * (v - center) / scale for v in window]
        oriented_base = [sign * v for v in base]
        fast_part = dev[-s.fast_runs:]
        fast_eff = min(fast_part)
        fast_p = mann_whitney_greater([sign * v for v in window[-s.fast_runs:]], oriented_base)
        fast = len(fast_part) == s.fast_runs and fast_eff >= fast_tau and fast_p <= s.fast_alpha
        kept = sorted(dev)[:s.slow_kept]
        slow_eff = sum(kept) / len(kept)
        slow_p = mann_whitney_greater([sign * v for v in window], oriented_base)
        slow = (len(dev) == s.slow_runs and slow_eff >= slow_tau and dev[-1] >= slow_tau
                and slow_p <= s.slow_alpha)
        flags = [d >= slow_tau for d in dev]
        first = flags.index(True) if True in flags else None
        if fast:  # a clear step: it began where the trailing streak of violations began
            first = len(flags) - s.fast_runs
            while first > 0 and flags[first - 1]:
                first -= 1
        return _Check(fast, slow, fast_p, slow_p, fast_eff, slow_eff, sum(flags), first)

    def _state(self, worse: _Check, better: _Check, n_window: int) -> str:
        """Rules, then the episode's hysteresis (half the window still violating keeps it on)."""
        s = self.settings
        if self.episode == 0:
            if worse.fires:
                self._start_episode(+1, worse, n_window)
                return REGRESSION
            if better.fires:
                self._start_episode(-1, better, n_window)
                return IMPROVEMENT
            return SUSPICIOUS if worse.violations >= s.suspicious_runs else OK
        active = worse if self.episode > 0 else better
        if active.violations == 0:  # reverted: the episode is over, the baseline unfreezes
            self.episode, self.frozen, self.onset = 0, None, None
            return SUSPICIOUS if worse.violations >= s.suspicious_runs else OK
        holding = active.fires or active.violations * 2 >= n_window
        if self.episode > 0:
            return REGRESSION if holding else SUSPICIOUS
        return IMPROVEMENT if holding else OK

    def _start_episode(self, sign: int, check: _Check, n_window: int) -> None:
        """Freeze the baseline before the change: the runs before the first violating one."""
        first = check.first_violation if check.first_violation is not None else n_window - 1
        self.onset = len(self.values) - n_window + first
        self.frozen = self.values[max(0, self.onset - self.settings.window):self.onset]
        self.episode = sign

    def _should_reform(self, state: str) -> bool:
        return (self.episode != 0 and self.onset is not None
                and len(self.values) - self.onset >= self.settings.reform_after)

    def _reform(self) -> Verdict:
        """The new level is the new normal: restart the segment at the episode's onset."""
        onset = self.onset or 0
        kind = "regression" if self.episode > 0 else "improvement"
        at = self.indices[onset]
        self.values, self.indices = self.values[onset:], self.indices[onset:]
        self.segment_start, self.frozen, self.episode, self.onset = at, None, 0, None
        verdict = self._judge()
        return replace(verdict, reason=f"baseline re-formed after a persistent {kind} from run {at}")

    def _verdict(self, state: str, check: _Check, center: float, spread: float) -> Verdict:
        s = self.settings
        current = median(self.values[-s.fast_runs:])
        fired_p = check.fast_p if check.fast else check.slow_p
        onset = self.indices[self.onset] if self.onset is not None else None
        return Verdict(state, self.figure, self.direction, center, current, current / center if center else None,
                       fired_p, check.violations, len(self.values), self.segment_start, onset)

    def _trim(self) -> None:
        """Keep what the rules, the freeze and the re-forming can still need."""
        s = self.settings
        keep = s.window + s.slow_runs + s.reform_after
        if self.episode == 0 and len(self.values) > 2 * keep:
            cut = len(self.values) - keep
            self.values, self.indices = self.values[cut:], self.indices[cut:]
        elif self.episode != 0 and self.onset is not None and self.onset > 2 * keep:
            cut = self.onset - s.window
            self.values, self.indices = self.values[cut:], self.indices[cut:]
            self.onset -= cut


# --- Version changes ------------------------------------------------------------------------

@dataclass(frozen=True)
class VersionVerdict:
    """What a version change did to one figure of one series."""

    figure: str
    changes: dict[str, tuple[str, str]]
    """Changed environment key -> (from, to)."""
    state: str
    ratio: float | None
    """median(after) / median(before)."""
    p_value: float | None
    before: int
    after: int
    at: float | None = None
    """Unix time of the first run after the change, where known."""
    label: str = ""


def version_verdict(before: Sequence[float], after: Sequence[float], figure: str,
                    changes: Mapping[str, tuple[str, str]], settings: Settings | None = None,
                    workload: str = "", label: str = "", at: float | None = None) -> VersionVerdict:
    """Compare the last runs before a version change with the first runs after it.

    ``regression`` or ``improvement`` needs a two-sided Mann-Whitney p <= version_alpha AND a
    change of at least the figure's minimum effect; fewer than version_min_runs either side is
    ``insufficient_data``."""
    s = settings or Settings()
    direction = WATCHED.get(figure, UP)
    b, a = list(before)[-s.version_runs:], list(after)[:s.version_runs]
    if len(b) < s.version_min_runs or len(a) < s.version_min_runs:
        return VersionVerdict(figure, dict(changes), INSUFFICIENT_DATA, None, None, len(b), len(a), at, label)
    mb, ma = median(b), median(a)
    ratio = ma / mb if mb else None
    p = mann_whitney_two_sided(a, b)
    state = OK
    if ratio is not None and p <= s.version_alpha:
        worse = direction * (ratio - 1.0)
        if abs(worse) >= s.effects_for(figure, workload)[1]:
            state = REGRESSION if worse > 0 else IMPROVEMENT
    return VersionVerdict(figure, dict(changes), state, ratio, p, len(b), len(a), at, label)


# --- RunRecords -----------------------------------------------------------------------------

def versions(record: Any) -> dict[str, str] | None:
    """The break-point versions a run was measured under; None when the run does not say (a run
    skipped, interrupted or failed before its worker reported its environment), which must not
    pass for a change of every version."""
    env = record.environment or {}
    if not any(env.get(k) for k in VERSION_KEYS):
        return None
    workload = getattr(record, "workload", "")
    return {k: str(env.get(k, "")) if k not in WORKLOAD_VERSION_KEYS or workload in WORKLOAD_VERSION_KEYS[k] else ""
            for k in VERSION_KEYS}


def series_label(record: Any) -> str:
    """How a verdict names its series: precision, workload and shape."""
    return " ".join(p for p in (record.precision, record.workload, record.shape) if p)


def settings_from(config: Config) -> Settings:
    """The detector's settings from the configuration (``[regression]``; the rest keep this
    module's defaults).  The fast rule's effect scales with the minimum effect."""
    return Settings(window=config.regression_window, min_baseline=config.regression_min_baseline,
                    min_effect=config.regression_min_effect,
                    fast_effect=Settings.fast_effect * config.regression_min_effect / Settings.min_effect,
                    effects=dict(config.regression_effects))
