"""The time-to-detect simulation's core (tests/bench/detect_sim.py) on small cases whose outcome is known.

The simulation's figures in docs/REGRESSIONS.md are only as good as its device: that the schedule, the
confirmation policy (sixdim.run.confirm) and the real tracker meet the way the daemon's do.  These cases
have an answer one can work out by hand: a clear step on a quiet series is confirmed by the fast rule at
its third run, which confirmations bring 120 s after the second, itself a confirmation 120 s after the
first slow run, instead of two whole intervals later;
a step large enough to be outlier-scale waits for the large rule's eight runs, which the hour's four
confirmations shorten; the budget never grants a fifth confirmation within an hour.
"""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from sixdim.run.confirm import CONFIRM_DELAY_SECONDS
from sixdim.verdicts.detector import OK, SUSPICIOUS, Settings
from tests.bench import detect_sim
from tests.bench.detect_sim import DAY, WARM_RUNS, Schedule, default_schedules, detect_trial, new_device, warm_tracker


def _delays(schedule: Schedule, step: float, trials: int, model: str = "gauss_0.5", busy: float = 0.0) -> list[float]:
    """Delays of ``trials`` steps, in intervals counted from the first run after the step."""
    settings = Settings()
    device = new_device(schedule, busy, model, [7, int(step * 1000)], settings=settings)
    device.advance(WARM_RUNS * schedule.interval)
    rng = np.random.default_rng([8, int(step * 1000)])
    out = []
    for trial in range(trials):
        start = (trial + 1) * 4 * DAY
        warm = warm_tracker(model, rng, start, schedule.interval, settings)
        phase = float(rng.random())
        delay = detect_trial(device, warm, start, step, phase)
        out.append(delay / schedule.interval - (1.0 - phase))
    return out


def test_default_schedules_come_from_the_embedded_configuration() -> None:
    tiered, today = default_schedules()
    assert (tiered.interval, tiered.per_hour, tiered.delay) == (900.0, 4, CONFIRM_DELAY_SECONDS)
    assert tiered.eager and tiered.retry  # the daemon's policy: asked on one slow run, and again after a skip
    assert (today.interval, today.per_hour) == (900.0, 0)


def test_a_clear_step_is_confirmed_two_delays_after_its_first_slow_run() -> None:
    """6% on a 0.5%-noise series: one slow run asks for a confirmation, which makes the series suspicious
    and asks for another, whose run is the third slow one: regression.  Without confirmations the third is
    the scheduled run two intervals after the first."""
    tiered, today = default_schedules()
    with_confirmations = _delays(tiered, 0.06, 12)
    without = _delays(today, 0.06, 12)
    assert with_confirmations == pytest.approx([2 * CONFIRM_DELAY_SECONDS / tiered.interval] * 12, abs=1e-6)
    assert without == pytest.approx([2.0] * 12, abs=1e-6)


def test_an_outlier_scale_step_waits_for_the_large_rule_which_confirmations_shorten() -> None:
    """20% is beyond the outlier scale (8%): the fast and slow rules leave such runs out, and the large
    rule wants eight runs.  Without confirmations that is seven intervals after the first; with four an
    hour, about three."""
    tiered, today = default_schedules()
    with_confirmations = _delays(tiered, 0.20, 15)
    without = _delays(today, 0.20, 15)
    assert min(without) >= 7.0 - 1e-6
    assert statistics.median(with_confirmations) <= 3.0 + 1e-6
    assert all(w < t for w, t in zip(with_confirmations, without, strict=True))


def test_no_confirmation_beyond_the_hourly_budget() -> None:
    """Spiky noise keeps series suspicious often: the budget binds (some hour has its four), and no hour
    (any 3,600 s, as the budget counts planned starts) has a fifth; one pending confirmation per series."""
    tiered, _ = default_schedules()
    device = new_device(tiered, 0.0, "spiky", [9], settings=Settings())
    asked: list[tuple[float, int, str]] = []

    def watch(series: int, now: float, verdict) -> bool:  # noqa: ANN001 - the Observer signature
        asked.append((now, series, verdict.state))
        return False

    device.advance(6 * DAY, watch)
    starts = sorted(at for at, _ in device.granted)
    assert device.counts.confirmations_granted == len(starts) > 20
    in_hour = [sum(1 for t in starts if s <= t < s + 3600.0) for s in starts]
    assert max(in_hour) == tiered.per_hour
    assert device.counts.refused > 0
    # every confirmation was asked for by a run of its series one delay before it starts, which left it
    # suspicious or was one slow run of a series still ok; the suspicious ones asked for most
    asking = {(round(now, 6), series): state for now, series, state in asked}
    states = [asking.get((round(at - tiered.delay, 6), series)) for at, series in device.granted]
    assert set(states) <= {SUSPICIOUS, OK} and states.count(SUSPICIOUS) > 0
    # one pending at a time: a series' next grant comes after its previous confirmation ran
    by_series: dict[int, list[float]] = {}
    for at, series in device.granted:
        by_series.setdefault(series, []).append(at)
    for times in by_series.values():
        assert all(b - a >= tiered.delay for a, b in zip(times, times[1:], strict=False))


def test_busy_share_skips_runs_and_confirmations() -> None:
    """At 30% busy about 30% of scheduled runs give no value, and a 5% step is found later on average
    than on an idle device, by the same schedule and the same trials."""
    tiered, _ = default_schedules()
    device = new_device(tiered, 0.3, "spiky", [10], settings=Settings())
    device.advance(4 * DAY)
    share = device.counts.skipped / device.counts.scheduled
    assert 0.23 < share < 0.37  # 384 scheduled runs: about 3 standard deviations either side
    assert device.counts.confirmations_skipped > 0
    idle, busy = _delays(tiered, 0.05, 30, "gauss_1"), _delays(tiered, 0.05, 30, "gauss_1", busy=0.3)
    assert statistics.mean(busy) > statistics.mean(idle) + 0.3


def test_false_alarm_counting_on_a_quiet_device() -> None:
    """A day of 0.25%-noise series: 96 runs of each of five series a day, no regression onset."""
    tiered, _ = default_schedules()
    result = detect_sim.false_alarm_device(tiered, 0.0, "gauss_0.25", [11], 1.0, Settings())
    assert result["onsets"] == 0
    assert result["scheduled"] == 96
    assert result["series_runs"] == 96 * detect_sim.SERIES + result["confirmations_run"]


def test_watched_counts() -> None:
    """The frequent tier on a GPU: five cases, each a speed figure that varies and the steady
    allocator peak; no power figures (no power phase)."""
    counts = detect_sim.watched_counts()
    assert (counts["frequent"]["cases"], counts["frequent"]["watched"], counts["frequent"]["varying"]) == (5, 10, 5)
    assert not any(f in detect_sim.POWER_FIGURES for fs in counts["frequent"]["figures"].values() for f in fs)
    assert counts["quick"]["varying"] > 20 * counts["frequent"]["varying"]


@pytest.mark.slow
def test_quick_run_prints_both_tables(capsys: pytest.CaptureFixture[str]) -> None:
    assert detect_sim.main(["--quick", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "| gauss_1 | 5% | tiered | 0% |" in out and "| gauss_1 | today | 0% |" in out
