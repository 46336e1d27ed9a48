#!/usr/bin/env python3
"""Time to detect on the default schedule: the real verdicts, the real confirmation policy, fixed seed.

Usage (from the repository root):

    python -m tests.bench.detect_sim [--quick] [--trials 1000] [--gpu-days 3000] [--workers 2]
        [--models gauss_0.5,gauss_1,t3,spiky] [--fa-models gauss_0.5,gauss_1]
        [--schedule NAME:interval=900,per_hour=6,delay=60,eager=1,retry=1] [--out FILE]

One device's frequent tier is simulated in wall-clock time: its scheduled runs every
``interval_seconds`` of the embedded default configuration's ``frequent`` suite (``sixdim.config.load(None)``),
each feeding every series' tracker (:class:`sixdim.verdicts.detector.SeriesTracker`, fed one run at a
time with the run's time, as :mod:`sixdim.verdicts.live` feeds it), and after every run the confirmation
policy of :mod:`sixdim.run.confirm` (:func:`wants_confirmation`, :class:`ConfirmationBudget`, shared by
the suite's series on the device): a series that is ``suspicious`` after a run asks for a confirmation,
which runs that series alone ``CONFIRM_DELAY_SECONDS`` later if the hour's budget allows.  The idle
guard is a busy share: each scheduled run and each confirmation is skipped with that probability,
and a skipped run gives no value (and no verdict, so nothing asks again until the next run that
ran).  A run is taken as instantaneous at its start; the few seconds a case lasts, the scrape and the
alert rule's ``for: 5m`` come on top of every delay here.

Beside it, **today's schedule before issue 41**: the quick suite on every device every
:data:`TODAY_INTERVAL` seconds and no confirmation runs.  It measures, per noise model of
tests/bench/noise_models.py (one definition of each):

- time to detect: after :data:`WARM_RUNS` steady runs and an hour of the schedule, the figure of one
  series gets :data:`STEPS` worse at a time drawn uniformly within a schedule interval; the wall-clock
  time from the step to its first ``regression`` verdict (median, 95th percentile, the share within
  an hour with its Wilson interval), at a busy share of 0% and 30%;
- false regressions per GPU-day: no-change series, five per device (the frequent tier's figures that
  vary run to run), regression *onsets* counted after a warm-up, per GPU-day with a one-sided 95%
  Poisson upper bound, and the runs a day including confirmations.  Today's schedule judges many more
  figures per run (the quick suite's); its rate per GPU-day is the rate per series-figure-day times
  that count (:func:`watched_counts` says how each count is made).
"""

from __future__ import annotations

import argparse
import copy
import heapq
import json
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from multiprocessing import Pool
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sixdim import config as sixdim_config  # noqa: E402
from sixdim.run.confirm import CONFIRM_DELAY_SECONDS, ConfirmationBudget, wants_confirmation  # noqa: E402
from sixdim.verdicts.detector import REGRESSION, SeriesTracker, Settings, Verdict, watched_figures  # noqa: E402
from sixdim.workloads import registry  # noqa: E402
from tests.bench import noise_models  # noqa: E402
from tests.bench.regression_sim import poisson_upper, wilson  # noqa: E402

SEED = 20261128
HOUR = 3600.0
DAY = 86400.0
FIGURE = "seconds"
"""The simulated figure (larger is worse), as in tests/bench/regression_sim.py."""
TODAY_INTERVAL = 900.0
"""The schedule before issue 41 (commit 4f40dbd): the quick suite on every device every 15 minutes."""
WARM_RUNS = 120
"""Steady runs before anything is counted: the noise window and the baseline full (about 30 hours)."""
PRE_RUNS = 5
"""Scheduled runs of a detection trial before the interval the step falls in (an hour and more of the
schedule, so the confirmation budget is in the state the hour before the step left it)."""
HORIZON = 12 * HOUR
"""A step not found this long after it counts as not found (its delay is beyond every percentile)."""
STEPS = (0.05, 0.03)
BUSY = (0.0, 0.3)
SERIES = 5
"""Series of the frequent tier on one device whose figure varies run to run (see :func:`watched_counts`)."""
DETECT_MODELS = ("gauss_0.5", "gauss_1", "t3", "spiky")
FA_MODELS = ("gauss_0.5", "gauss_1")
PER_RUN_MODELS = ("gauss_0.25", "gauss_0.5", "gauss_1", "gauss_2", "gauss_5", "t3", "spiky")
"""Models whose runs are independent of each other; ``bursts`` are runs in a row, which in wall-clock
time with confirmations 2 minutes apart would need a model of their duration: not simulated here."""
QUICK_RECORDS = REPO / "docs" / "gpu-runs" / "2026-11-25-h100" / "quick.json"
GOAL_WITHIN = HOUR
GOAL_SHARE = 0.95
GOAL_FA_PER_1000_DAYS = 1.0


# --- the schedule -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Schedule:
    """A suite's timing on one device: its interval and its confirmation policy (0 per hour: none)."""

    name: str
    interval: float
    per_hour: int
    delay: float = CONFIRM_DELAY_SECONDS
    eager: bool = False
    """Also ask for a confirmation when the run just judged is worse than the baseline by the minimum effect
    (one slow run: ``SeriesTracker.slow_run``), not only when the series is suspicious (two of the last
    six), as the daemon does (``SuiteScheduler.judged``)."""
    retry: bool = False
    """A confirmation the idle guard skipped is asked for again at once (a new grant of the budget, run one
    delay later), rather than dropped until the next run, as the daemon does (``SuiteScheduler._confirm``)."""


def default_schedules() -> list[Schedule]:
    """The embedded default configuration's frequent tier, and today's schedule before it."""
    frequent = next(s for s in sixdim_config.load(None).suites if s.name == "frequent")
    if frequent.interval_seconds is None:
        raise SystemExit("the default frequent suite has no interval_seconds: nothing to simulate")
    return [Schedule("tiered", float(frequent.interval_seconds), frequent.confirm_per_hour, eager=True, retry=True),
            Schedule("today", TODAY_INTERVAL, 0)]


def parse_schedule(text: str, base: Schedule) -> Schedule:
    """``NAME:interval=600,per_hour=6,delay=60``: a variant of ``base`` to measure beside it."""
    name, _, rest = text.partition(":")
    values = {k: float(v) for k, v in (item.split("=", 1) for item in rest.split(",") if item)}
    unknown = set(values) - {"interval", "per_hour", "delay", "eager", "retry"}
    if unknown:
        raise SystemExit(f"--schedule: unknown keys {sorted(unknown)} (interval, per_hour, delay, eager, retry)")
    return Schedule(name, values.get("interval", base.interval), int(values.get("per_hour", base.per_hour)),
                    values.get("delay", base.delay), bool(values.get("eager", base.eager)),
                    bool(values.get("retry", base.retry)))


# --- what one device watches ------------------------------------------------------------------

POWER_FIGURES = frozenset({"power_watts", "energy_joules", "flop_per_joule", "samples_per_joule"})
LATENCY_FIGURES = frozenset({"latency_p50_seconds", "latency_p99_seconds"})
STEADY_FIGURES = frozenset({"memory_bytes"})
"""The allocator's peak for one shape: the same every run, so noise cannot make it regress."""
MIN_POWER_SECONDS = 1.0
"""A case reports power from its power phase (``power_seconds``; under 1 s none) and otherwise from
its telemetry window when that lasts 1 s (sixdim.run.executor); the frequent tier's timed rounds
(5 x 0.05 s) are shorter, so its cases report none."""


def case_figures(suite: str) -> list[tuple[str, list[str]]]:
    """(case, watched figures) of every case a built-in suite runs on a GPU, from the workloads' own
    ``figures``, the allocator peak ``memory_bytes`` a torch workload in one process adds, less the
    latency percentiles where ``latency_samples`` is 0 and the power figures where there is no power
    phase of a second or more; the watched ones as the live verdicts choose them."""
    out = []
    for name, params in registry.SUITES[suite]:
        spec = registry.get(name)
        for case in spec.cases(params, "cuda"):
            figures = set(spec.figures)
            if spec.uses_torch and not spec.runs_in_ranks:
                figures.add("memory_bytes")
            if not case.params.get("latency_samples"):
                figures -= LATENCY_FIGURES
            if (case.params.get("power_seconds") or 0.0) < MIN_POWER_SECONDS:
                figures -= POWER_FIGURES
            label = " ".join(p for p in (name, case.precision, case.shape, case.kernel_pass) if p)
            out.append((label, watched_figures({f: 1.0 for f in figures})))
    return out


def watched_counts() -> dict:
    """Watched series-figures per device: the frequent and power tiers counted from their presets
    (:func:`case_figures`), the quick suite from the H100's records of a quick-suite run
    (docs/gpu-runs/2026-11-25-h100/quick.json: what its cases reported), each split into those that
    vary run to run and the steady ``memory_bytes``."""
    out: dict = {}
    for suite in ("frequent", "power"):
        cases = case_figures(suite)
        watched = sum(len(f) for _, f in cases)
        steady = sum(1 for _, fs in cases for f in fs if f in STEADY_FIGURES)
        out[suite] = {"cases": len(cases), "watched": watched, "varying": watched - steady,
                      "figures": {label: figures for label, figures in cases}}
    records = json.loads(QUICK_RECORDS.read_text())
    watched_lists = [watched_figures(r.get("figures") or {}) for r in records]
    watched = sum(len(w) for w in watched_lists)
    steady = sum(1 for w in watched_lists for f in w if f in STEADY_FIGURES)
    out["quick"] = {"cases": len(records), "cases_with_figures": sum(1 for w in watched_lists if w),
                    "watched": watched, "varying": watched - steady, "source": str(QUICK_RECORDS.relative_to(REPO))}
    return out


# --- one device in wall-clock time --------------------------------------------------------------

class Noise:
    """Each series' factors of one noise model, drawn in blocks (one draw a run is slow)."""

    BLOCK = 512

    def __init__(self, rng: np.random.Generator, model: str, series: int) -> None:
        self.rng, self.model = rng, model
        self.blocks: list[Iterator[float]] = [iter(()) for _ in range(series)]

    def __call__(self, series: int) -> float:
        for value in self.blocks[series]:
            return value
        self.blocks[series] = iter(noise_models.noise(self.rng, self.model, (1, self.BLOCK))[0].tolist())
        return next(self.blocks[series])


@dataclass
class Counts:
    """What a device's schedule did."""

    scheduled: int = 0
    skipped: int = 0
    confirmations_granted: int = 0
    confirmations_run: int = 0
    confirmations_skipped: int = 0
    refused: int = 0
    """Asks the budget turned down (the hour's confirmations spent, or one already pending)."""


Observer = Callable[[int, float, Verdict], bool]
"""Called after each verdict with (series, time, verdict); True stops the device's clock there."""


@dataclass
class Device:
    """One device's suite: its series' trackers, levels, the confirmation budget and the idle guard.

    :meth:`advance` runs the schedule's events in time order: a scheduled run feeds every series, a
    confirmation only its own; after each run's verdicts, each suspicious series asks the budget."""

    schedule: Schedule
    busy: float
    rng: np.random.Generator
    noise: Callable[[int], float]
    trackers: list[SeriesTracker]
    next_run: float = 0.0
    levels: list[float] = field(default_factory=list)
    counts: Counts = field(default_factory=Counts)
    budget: ConfirmationBudget = field(init=False)
    pending: list[tuple[float, int]] = field(default_factory=list)
    granted: list[tuple[float, int]] = field(default_factory=list)
    """(planned start, series) of every confirmation the budget granted, in the order granted."""

    def __post_init__(self) -> None:
        self.budget = ConfirmationBudget(self.schedule.per_hour, self.schedule.delay)
        if not self.levels:
            self.levels = [1.0] * len(self.trackers)

    def restart(self, at: float) -> None:
        """A fresh schedule from ``at`` (its first run then): no pending confirmation, a new budget."""
        self.next_run, self.pending = at, []
        self.budget = ConfirmationBudget(self.schedule.per_hour, self.schedule.delay)

    def advance(self, until: float, observe: Observer | None = None) -> float | None:
        """Run every event before ``until``; the time ``observe`` stopped at, else None."""
        while True:
            confirm = self.pending[0][0] if self.pending else math.inf
            now = min(self.next_run, confirm)
            if now >= until:
                return None
            if confirm <= self.next_run:
                _, series = heapq.heappop(self.pending)
                self.budget.done(series)
                if self.rng.random() < self.busy:
                    self.counts.confirmations_skipped += 1
                    if self.schedule.retry:
                        self._ask(series, now)
                    continue
                self.counts.confirmations_run += 1
                chosen: Sequence[int] = (series,)
            else:
                self.next_run += self.schedule.interval
                self.counts.scheduled += 1
                if self.rng.random() < self.busy:
                    self.counts.skipped += 1
                    continue
                chosen = range(len(self.trackers))
            for series in chosen:
                value = self.levels[series] * self.noise(series)
                tracker = self.trackers[series]
                verdict = tracker.update(value, at=now)
                if observe is not None and observe(series, now, verdict):
                    return now
                if wants_confirmation({FIGURE: verdict.state}, slow=self.schedule.eager and tracker.slow_run(value)):
                    self._ask(series, now)

    def _ask(self, series: int, now: float) -> None:
        at = self.budget.ask(series, now)
        if at is None:
            self.counts.refused += 1
        else:
            self.counts.confirmations_granted += 1
            self.granted.append((at, series))
            heapq.heappush(self.pending, (at, series))


def new_device(schedule: Schedule, busy: float, model: str, seed: Sequence[int], series: int = SERIES,
               settings: Settings | None = None) -> Device:
    """A device with ``series`` fresh trackers; ``seed`` (a list of numbers: one stream per list) draws its
    noise and its skips."""
    rng = np.random.default_rng(list(seed))
    s = settings or Settings()
    return Device(schedule, busy, rng, Noise(rng, model, series), [SeriesTracker(FIGURE, s) for _ in range(series)])


# --- time to detect -----------------------------------------------------------------------------

def warm_tracker(model: str, rng: np.random.Generator, end: float, interval: float,
                 settings: Settings) -> SeriesTracker:
    """A series with :data:`WARM_RUNS` steady runs, the last one interval before ``end``."""
    tracker = SeriesTracker(FIGURE, settings)
    for k, factor in enumerate(noise_models.noise(rng, model, (1, WARM_RUNS))[0].tolist()):
        tracker.update(factor, at=end - (WARM_RUNS - k) * interval)
    return tracker


def detect_trial(device: Device, warm: SeriesTracker, start: float, step: float, phase: float) -> float:
    """Series 0 of ``device`` becomes a copy of ``warm``; the schedule restarts at ``start`` and the
    figure gets ``step`` worse ``phase`` (0-1) of an interval after its :data:`PRE_RUNS`-th run.  The
    delay (seconds) from the step to its first ``regression``; inf if none within :data:`HORIZON`;
    -1.0 if it was called a regression before the step."""
    interval = device.schedule.interval
    device.trackers[0] = copy.deepcopy(warm, {id(warm.settings): warm.settings})
    device.levels[0] = 1.0
    device.restart(start)
    at = start + (PRE_RUNS - 1 + phase) * interval

    def regressed(series: int, now: float, verdict: Verdict) -> bool:
        return series == 0 and verdict.state == REGRESSION

    if device.advance(at, regressed) is not None or device.trackers[0].last.state == REGRESSION:
        return -1.0
    device.levels[0] = 1.0 + step
    found = device.advance(at + HORIZON, regressed)
    device.levels[0] = 1.0
    return math.inf if found is None else found - at


def _detect_chunk(job: tuple[list[int], str, int, list[dict], list[float], list[float], dict]) -> dict:
    """Delays of ``n`` trials of one model on every (schedule, busy share, step) arm.  Each trial's warm
    series and step phase are shared by the arms (common random numbers); each arm is one device whose
    other series run on from trial to trial, each trial a fresh schedule two days after the last."""
    seed, model, n, schedules, busies, steps, settings_dict = job
    settings = Settings(**settings_dict)
    arms = [(Schedule(**s), b, st) for s in schedules for b in busies for st in steps]
    devices = [new_device(sch, b, model, [*seed, 1 + i], settings=settings) for i, (sch, b, _) in enumerate(arms)]
    span = (WARM_RUNS + PRE_RUNS) * max(s.interval for s, _, _ in arms) + HORIZON + DAY
    for device in devices:  # the other series' own warm-up
        device.advance(WARM_RUNS * device.schedule.interval)
    rng = np.random.default_rng(seed)
    out: dict = {f"{s.name}|{b}|{st}": [] for s, b, st in arms}
    for trial in range(n):
        start = (trial + 1) * span
        warm = warm_tracker(model, rng, start, schedules[0]["interval"], settings)
        phase = float(rng.random())
        for (sch, b, st), device in zip(arms, devices, strict=True):
            out[f"{sch.name}|{b}|{st}"].append(detect_trial(device, warm, start, st, phase))
    return out


def delay_summary(delays: Sequence[float]) -> dict:
    """Median, 95th percentile and share within the goal's hour, over the trials without an alarm
    before their step (those missed within the horizon count as later than any percentile)."""
    kept = np.array([d for d in delays if d >= 0.0])
    n = int(kept.size)
    within = float(np.mean(kept <= GOAL_WITHIN)) if n else 0.0

    def pct(q: float) -> float | None:
        if not n:
            return None
        value = float(np.percentile(kept, q, method="inverted_cdf"))
        return None if math.isinf(value) else value

    return {"trials": n, "alarm_before_step": len(delays) - n, "missed_in_horizon": int(np.sum(np.isinf(kept))),
            "p50_s": pct(50), "p95_s": pct(95), "within_hour": within,
            "within_hour_ci": wilson(within, n) if n else None,
            "max_found_s": float(kept[np.isfinite(kept)].max()) if np.isfinite(kept).any() else None}


# --- false regressions --------------------------------------------------------------------------

def false_alarm_device(schedule: Schedule, busy: float, model: str, seed: Sequence[int], days: float,
                       settings: Settings, series: int = SERIES) -> dict:
    """One device with no change for :data:`WARM_RUNS` intervals and then ``days`` days: the regression
    onsets and the runs during the days (confirmations included)."""
    device = new_device(schedule, busy, model, seed, series, settings)
    device.advance(WARM_RUNS * schedule.interval)
    before = asdict(device.counts)
    states = [t.last.state for t in device.trackers]
    onsets = 0
    series_runs = 0

    def count(index: int, now: float, verdict: Verdict) -> bool:
        nonlocal onsets, series_runs
        series_runs += 1
        if verdict.state == REGRESSION and states[index] != REGRESSION:
            onsets += 1
        states[index] = verdict.state
        return False

    device.advance(WARM_RUNS * schedule.interval + days * DAY, count)
    counts = {k: v - before[k] for k, v in asdict(device.counts).items()}
    return {"onsets": onsets, "series_runs": series_runs, **counts}


def _false_alarm_chunk(job: tuple[list[int], str, dict, float, int, float, dict]) -> dict:
    seed, model, schedule, busy, devices, days, settings_dict = job
    settings = Settings(**settings_dict)
    total: dict = {}
    for i in range(devices):
        for k, v in false_alarm_device(Schedule(**schedule), busy, model, [*seed, i], days, settings).items():
            total[k] = total.get(k, 0) + v
    return total


def false_alarm_summary(total: dict, gpu_days: float, series: int, counts: dict) -> dict:
    """Per GPU-day on this schedule (``series`` varying figures a device), and per series-figure-day,
    which today's schedule multiplies by the quick suite's varying figures."""
    k = total["onsets"]
    per_series_day = k / (gpu_days * series)
    upper_series_day = poisson_upper(k) / (gpu_days * series)
    runs_a_day = (total["scheduled"] - total["skipped"] + total["confirmations_run"]) / gpu_days
    return {**total, "gpu_days": gpu_days, "per_1000_gpu_days": 1000 * k / gpu_days,
            "per_1000_gpu_days_upper95": 1000 * poisson_upper(k) / gpu_days,
            "per_series_run": k / total["series_runs"], "per_series_day": per_series_day,
            "per_series_day_upper95": upper_series_day,
            "suite_runs_a_day": (total["scheduled"] - total["skipped"]) / gpu_days,
            "confirmations_a_day": total["confirmations_run"] / gpu_days, "runs_a_day": runs_a_day,
            "quick_every_interval_per_1000_gpu_days": 1000 * per_series_day * counts["quick"]["varying"],
            "quick_every_interval_per_1000_gpu_days_upper95": 1000 * upper_series_day * counts["quick"]["varying"]}


# --- the run ----------------------------------------------------------------------------------

def _chunks(total: int, size: int) -> list[int]:
    return [min(size, total - i) for i in range(0, total, size)]


def _settings_dict(settings: Settings) -> dict:
    out = asdict(settings)
    out["effects"] = dict(out["effects"])
    return out


def simulate(schedules: list[Schedule], detect_models: Sequence[str], fa_models: Sequence[str], trials: int,
             gpu_days: float, workers: int, settings: Settings | None = None, busies: Sequence[float] = BUSY,
             steps: Sequence[float] = STEPS, fa_busies: Sequence[float] = (0.0,)) -> dict:
    """Every figure of the report, as a dict (see :func:`markdown`)."""
    s = _settings_dict(settings or Settings())
    counts = watched_counts()
    sched = [asdict(x) for x in schedules]
    out: dict = {"seed": SEED, "schedules": sched, "counts": counts, "detect": {}, "false_alarms": {}}
    chunk = max(1, min(250, math.ceil(trials / max(1, workers))))
    with Pool(workers) as pool:
        for k, model in enumerate(detect_models):
            t0 = time.time()
            jobs = [([SEED, 1, k, i], model, n, sched, list(busies), list(steps), s)
                    for i, n in enumerate(_chunks(trials, chunk))]
            merged: dict = {}
            for part in pool.map(_detect_chunk, jobs):
                for key, values in part.items():
                    merged.setdefault(key, []).extend(values)
            out["detect"][model] = {key: delay_summary(values) for key, values in merged.items()}
            print(f"  time to detect, {model}: {trials} trials x {len(merged)} arms ({time.time() - t0:.0f} s)",
                  flush=True)
        days_each = min(30.0, max(1.0, gpu_days / 8))
        devices = max(1, math.ceil(gpu_days / days_each))
        for k, model in enumerate(fa_models):
            for j, schedule in enumerate(schedules):
                for b, busy in enumerate(fa_busies):
                    t0 = time.time()
                    fa_jobs = [([SEED, 2, k, j, b, i], model,
                             asdict(schedule), busy, n, days_each, s)
                            for i, n in enumerate(_chunks(devices, max(1, math.ceil(devices / (2 * workers)))))]
                    total: dict = {}
                    for part in pool.map(_false_alarm_chunk, fa_jobs):
                        for key, v in part.items():
                            total[key] = total.get(key, 0) + v
                    summary = false_alarm_summary(total, devices * days_each, SERIES, counts)
                    out["false_alarms"][f"{model}|{schedule.name}|{busy}"] = summary
                    print(f"  false regressions, {model}, {schedule.name}, busy {busy:.0%}: {summary['onsets']} in "
                          f"{devices * days_each:g} GPU-days ({time.time() - t0:.0f} s)", flush=True)
    return out


def _minutes(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.0f}"


def detect_markdown(report: dict) -> str:
    rows = ["| noise | step | schedule | busy | median (min) | 95th percentile (min) | found within 1 h (95% CI) "
            "| not found in 12 h |", "|---|---|---|---|---|---|---|---|"]
    for model, arms in report["detect"].items():
        for key, r in sorted(arms.items(), key=lambda kv: (-float(kv[0].split("|")[2]), kv[0].split("|")[0] != "tiered",
                                                           kv[0].split("|")[0], float(kv[0].split("|")[1]))):
            name, busy, step = key.split("|")
            lo, hi = r["within_hour_ci"] or (0.0, 0.0)
            p95 = _minutes(r["p95_s"]) if r["p95_s"] is not None else "> 720"
            rows.append(f"| {model} | {100 * float(step):g}% | {name} | {100 * float(busy):g}% "
                        f"| {_minutes(r['p50_s'])} | {p95} | **{100 * r['within_hour']:.1f}%** "
                        f"({100 * lo:.1f}–{100 * hi:.1f}) "
                        f"| {r['missed_in_horizon']} of {r['trials']} |")
    return "\n".join(rows)


def false_alarm_markdown(report: dict) -> str:
    q = report["counts"]["quick"]["varying"]
    rows = [f"| noise | schedule | busy | GPU-days | suite runs a day | confirmations a day | regression onsets "
            f"| per 1,000 GPU-days (95% upper) | quick suite at this rate per series ({q} figures), per 1,000 GPU-days "
            "(95% upper) |", "|---|---|---|---|---|---|---|---|---|"]
    for key, r in report["false_alarms"].items():
        model, name, busy = key.split("|")
        rows.append(f"| {model} | {name} | {100 * float(busy):g}% | {r['gpu_days']:,.0f} | {r['suite_runs_a_day']:.1f} "
                    f"| {r['confirmations_a_day']:.2f} | {r['onsets']} | **{r['per_1000_gpu_days']:.2f}** "
                    f"({r['per_1000_gpu_days_upper95']:.2f}) | {r['quick_every_interval_per_1000_gpu_days']:.1f} "
                    f"({r['quick_every_interval_per_1000_gpu_days_upper95']:.1f}) |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1000, help="step trials per noise model (each on every arm)")
    ap.add_argument("--gpu-days", type=float, default=3000, help="no-change GPU-days per noise model and schedule")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--models", default=",".join(DETECT_MODELS), help="noise models of the time-to-detect table")
    ap.add_argument("--fa-models", default=",".join(FA_MODELS), help="noise models of the false-regression table")
    ap.add_argument("--schedule", action="append", default=[], metavar="NAME:KEY=VALUE,...",
                    help="also measure a variant of the tiered schedule (interval, per_hour, delay)")
    ap.add_argument("--only-variants", action="store_true", help="measure the --schedule variants alone")
    ap.add_argument("--quick", action="store_true", help="a smoke run of a few seconds (tiny samples)")
    ap.add_argument("--out", type=Path, help="write every figure as JSON")
    args = ap.parse_args(argv)
    for model in (*args.models.split(","), *args.fa_models.split(",")):
        if model and model not in PER_RUN_MODELS:
            raise SystemExit(f"noise model {model!r}: one of {', '.join(PER_RUN_MODELS)}")
    schedules = default_schedules()
    variants = [parse_schedule(text, schedules[0]) for text in args.schedule]
    schedules = variants if args.only_variants and variants else schedules + variants
    detect_models = [m for m in args.models.split(",") if m]
    fa_models = [m for m in args.fa_models.split(",") if m]
    trials, gpu_days = args.trials, args.gpu_days
    if args.quick:
        detect_models, fa_models, trials, gpu_days = ["gauss_1"], ["gauss_1"], 20, 16
    started = time.time()
    described = ", ".join(f"{s.name} (every {s.interval:g} s, " + (
        f"{s.per_hour} confirmations an hour, {s.delay:g} s after" + (", on one slow run" if s.eager else "")
        + (", asked again when skipped" if s.retry else "") + ")" if s.per_hour else "no confirmations)")
        for s in schedules)
    print(f"Schedules: {described}; {trials} trials, {gpu_days:g} GPU-days, {args.workers} workers", flush=True)
    report = simulate(schedules, detect_models, fa_models, trials, gpu_days, args.workers)
    counts = report["counts"]
    frequent = counts["frequent"]
    print(f"\nWatched series-figures per GPU: frequent {frequent['watched']} ({frequent['varying']} "
          f"vary run to run), power {counts['power']['watched']} ({counts['power']['varying']}), quick "
          f"{counts['quick']['watched']} ({counts['quick']['varying']})\n")
    print(detect_markdown(report))
    print()
    print(false_alarm_markdown(report))
    report["seconds"] = round(time.time() - started, 1)
    print(f"\nTotal {report['seconds']} s")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
