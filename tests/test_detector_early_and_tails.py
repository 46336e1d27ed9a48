"""Steps early in a history, and heavy tails (issue 42, items 4 and 6).

Item 4: a new host or a new segment has a short history, and a threshold whose noise term was widened
by the squared t-quantile ratio kept a 3% step at 1% noise out of reach until about run 50.  The slow
rule now widens by the ratio to the power 1.5 (``SLOW_SAMPLE_POWER``); the fast rule, whose noise term
raised the false regressions of new noisy segments, keeps the square.  And the slow rule's last run need
only be worse by half its threshold (``Settings.slow_last``): the whole threshold missed a 3% step whose
last run fell under it, one in six at 1% noise, early or late in a history.  The issue's goal (90% within
6 runs for steps from run 20 on) is not reached at the same false-alarm rate: 89% over runs 20-200, 79%
at runs 20-59, where no detector can reach 90% by much (docs/REGRESSIONS.md).

Item 6: on Student-t3 noise every false regression came from the fast rule, two heavy-tailed runs and a
third just over its floor; the floor is 1.75% now.  The rate is measured by tests/bench/regression_sim.py.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from sixdim.verdicts import detector as rg
from sixdim.verdicts.detector import SeriesTracker, Settings
from tests.bench import noise_models


def early_steps_caught(trials: int = 300, seed: int = 42, step: float = 0.03) -> int:
    """Of ``trials`` series at Gaussian CV 1% with a step at a run drawn from 20-59 (fixed seed), how many
    are a regression within 6 runs of it."""
    at_runs = np.random.default_rng(seed).integers(20, 60, trials)
    rows = noise_models.series(seed + 1, "gauss_1", trials, 60 + 6)
    caught = 0
    for row, at in zip(rows, at_runs, strict=True):
        values = row[:at + 6].copy()
        values[at:] *= 1.0 + step
        tracker = SeriesTracker("seconds")
        states = [tracker.update(float(v)).state for v in values]
        assert rg.REGRESSION not in states[:at]
        caught += rg.REGRESSION in states[at:]
    return caught


def test_a_three_percent_step_early_in_a_history_is_caught_more_often():
    """300 fixed-seed series: 197 caught within 6 runs at the previous release (65.7%), 202 with the slow
    rule's power at 1.5 (67.3%; with the fast rule's higher floor of item 6, which alone would cost 7 of
    them), 218 with its last run worse by half its threshold (72.7%)."""
    assert early_steps_caught() >= 215


def test_the_slow_rules_last_run_need_be_worse_by_half_its_threshold():
    """Five runs 2.1% slow and a sixth 1.2% slow on a series of 0.5% noise (the slow rule's threshold is
    the 1.8% minimum effect): the mean of the five least-worse is over 1.8%, the last run over half of
    it.  A regression, where the last run had to be worse by the whole threshold, it stayed suspicious."""
    values = [1.005 if i % 2 else 0.995 for i in range(120)] + [1.021] * 5 + [1.012]
    tracker = SeriesTracker("seconds")
    states = [tracker.update(v).state for v in values]
    assert rg.REGRESSION not in states[:-1]
    assert states[-1] == rg.REGRESSION
    whole = SeriesTracker("seconds", Settings(slow_last=1.0))
    assert [whole.update(v).state for v in values][-1] == rg.SUSPICIOUS


@pytest.mark.xfail(strict=True, reason="the 90% goal for steps at runs 20-59 is not reached at the same "
                                       "false-alarm rate (docs/REGRESSIONS.md, 'Steps early in a history')")
def test_the_goal_for_early_steps():
    assert early_steps_caught() >= 270


def test_the_slow_rule_widens_less_than_the_fast_rule_on_a_short_history():
    """After 30 runs the slow rule's noise term is widened by the t-quantile ratio to the power 1.5, the
    fast rule's squared; both are 1 once the noise window is full."""
    full = Settings().noise_window
    plain = rg.small_sample_factor(30, full, 1.0)
    assert rg.small_sample_factor(30, full, rg.SLOW_SAMPLE_POWER) == pytest.approx(plain ** 1.5)
    assert rg.small_sample_factor(30, full) == pytest.approx(plain ** 2)
    assert rg.small_sample_factor(full, full, rg.SLOW_SAMPLE_POWER) == 1.0


def test_two_heavy_tailed_runs_and_a_third_just_over_the_old_floor_are_not_a_regression():
    """The t3 false regression: runs 4.5% and 3.5% out (t3 gives one such run in ~150 and ~90) around one
    1.6% out, over the old 1.25% floor; now the third must be 1.75% out.  Suspicious, not a regression."""
    rnd = random.Random(4)
    values = [1 + 0.01 / 3 ** 0.5 * rnd.gauss(0, 1.2) for _ in range(120)] + [1.045, 1.016, 1.035]
    tracker = SeriesTracker("seconds")
    states = [tracker.update(v).state for v in values]
    assert rg.REGRESSION not in states
    assert states[-1] == rg.SUSPICIOUS


def test_a_five_percent_step_is_still_caught_within_three_runs_on_heavy_tails():
    """The floor costs the 5% step little: on t3 noise, of 200 fixed-seed steps after 120 runs, at least
    97% are a regression within 3 runs (98.7% before the change, 97.8% after, on 600 series)."""
    rows = noise_models.series(17, "t3", 200, 123, 0.05, 120)
    caught = 0
    for row in rows:
        tracker = SeriesTracker("seconds")
        states = [tracker.update(float(v)).state for v in row]
        caught += rg.REGRESSION in states[120:]
    assert caught >= 194
