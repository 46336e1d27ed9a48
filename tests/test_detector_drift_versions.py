"""A drift is never blamed on a version change (issue 42, item 5).

On series drifting 0.05% a run with a driver change that did nothing, the second look at the change
(40 runs a side) compared runs 40 runs apart on average: 2% of drift, over the minimum effect, and
166 of 300 such changes were called regressions, 163 of them exactly 40 runs after the change.  The
version verdict now compares the runs either side against the drift the tracker had named before the
change, so only what the change itself did counts.
"""

from __future__ import annotations

import random

import pytest

from sixdim.verdicts import detector as rg
from sixdim.verdicts.detector import SeriesTracker, Settings
from sixdim.verdicts.live import Verdicts
from tests import verdict_reference as ref
from tests.helpers import make_record

DRIFT = 0.0005
"""0.05% slower a run."""
START, CHANGE, END = 150, 300, 340
"""The drift starts at run 150; the driver changes at run 300 (150 runs into the drift); the second look
comes 40 runs after it."""


def drifting_seconds(seed: int, step: float = 0.0, sd: float = 0.01) -> list[float]:
    rnd = random.Random(seed)
    return [(1 + DRIFT) ** max(0, i - START + 1) * (1 + step if i >= CHANGE else 1.0) * (1 + rnd.gauss(0, sd))
            for i in range(END)]


def looks(values: list[float]) -> tuple[bool, bool]:
    """(first look called it a regression at any of its judgements, second look did), as the agent judges:
    the tracker's last runs before the change with their times, and the drift it named."""
    s = Settings()
    tracker = SeriesTracker("seconds", s)
    for i, v in enumerate(values[:CHANGE]):
        tracker.update(v, at=900.0 * i)
    assert tracker.trend() is not None  # the drift is known before the change
    times, before = tracker.recent(s.version_settle_runs)
    after_times = [900.0 * i for i in range(CHANGE, END)]
    after = values[CHANGE:END]

    def judge(k: int, runs: int) -> str:
        return rg.version_verdict(list(before), after[:k], "seconds", {"driver": ("a", "b")}, s, runs=runs,
                                  times=(list(times), after_times[:k]), trend=tracker.trend()).state

    first = any(judge(k, s.version_runs) == rg.REGRESSION for k in range(s.version_min_runs, s.version_runs + 1))
    return first, judge(s.version_settle_runs, s.version_settle_runs) == rg.REGRESSION


def test_a_drift_across_a_version_change_that_did_nothing_is_not_a_regression_of_it():
    """40 drifting series at 1% noise: no regression verdict for the change, at either look (before: the
    second look called most of them a regression)."""
    blamed = [looks(drifting_seconds(seed)) for seed in range(40)]
    assert sum(first for first, _ in blamed) == 0
    assert sum(second for _, second in blamed) == 0


def test_a_step_at_a_version_change_on_top_of_a_drift_is_still_a_regression():
    """What the change did, beyond the drift, still counts: a 5% step at the change is a regression."""
    caught = [looks(drifting_seconds(seed, step=0.05)) for seed in range(20)]
    assert all(first or second for first, second in caught)


def test_version_verdict_without_a_trend_compares_the_plain_values():
    """No drift named (trend None): the sides are compared as they are, times or not."""
    rnd = random.Random(2)
    before = [1 + rnd.gauss(0, 0.002) for _ in range(10)]
    after = [1.03 * (1 + rnd.gauss(0, 0.002)) for _ in range(10)]
    plain = rg.version_verdict(before, after, "seconds", {"driver": ("a", "b")})
    timed = rg.version_verdict(before, after, "seconds", {"driver": ("a", "b")},
                               times=([float(i) for i in range(10)], [float(i) for i in range(10, 20)]), trend=None)
    assert plain == timed and plain.state == rg.REGRESSION


def test_the_agent_does_not_blame_a_drift_on_a_driver_change():
    """End to end through the live verdicts: GEMM runs every 15 minutes, FLOP/s falling 0.05% a run, a
    driver change at run 300 that did nothing; 40 runs later the change is not a regression, and the
    offline reference judges it the same way."""
    for seed in range(6):
        seconds = drifting_seconds(seed)
        records = [make_record(seconds=0.01 * v, ended_at=1e6 + 900.0 * i,
                               driver="550.54.15" if i < CHANGE else "560.28.03") for i, v in enumerate(seconds)]
        verdicts = ref.feed(Verdicts(), records)
        [snap] = verdicts.snapshot()
        change = snap.changes["flops"]
        assert change.before >= 35 and change.after >= 35  # the second look's verdict (40 a side)
        assert change.state != rg.REGRESSION, (seed, change)
        [offline] = ref.version_verdicts(records, "flops")
        assert offline.state != rg.REGRESSION, (seed, offline)


@pytest.mark.slow  # 40 noisy series through the live detector and the reference: about 2 s
def test_on_noisy_series_a_drift_that_comes_and_goes_is_still_taken_out():
    """At 2% noise the named drift comes and goes with its test against a single step (18 of these 40
    series had none at the change): the trend the tracker had named stays known while the line through
    the recent runs still slopes the same way, and the change is not blamed for it."""
    unnamed = 0
    blamed = 0
    for seed in range(40):
        values = drifting_seconds(seed, sd=0.02)
        tracker = SeriesTracker("seconds")
        for i, v in enumerate(values[:CHANGE]):
            tracker.update(v, at=900.0 * i)
        unnamed += tracker.last.drift == 0
        first, second = looks(values)
        blamed += first or second
    assert unnamed >= 10
    assert blamed <= 2
