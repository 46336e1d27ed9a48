"""Change points of one sequence (agent/verdicts/changepoints.py): steps found where they are, noise,
spikes and constants giving none, known breaks reported only when something shifted there."""

import time

import numpy as np
import pytest

from sixdim.verdicts.changepoints import find_change_points


def noisy(n, level=1.0, sd=0.01, seed=0):
    return level * (1 + np.random.default_rng(seed).normal(0, sd, n))


def spiky(n, seed):
    """1% Gaussian noise, and 1% of runs 20% slow."""
    rng = np.random.default_rng(seed)
    return 1 + rng.normal(0, 0.01, n) + np.where(rng.random(n) < 0.01, 0.2, 0.0)


@pytest.mark.parametrize("seed", range(8))
def test_a_five_percent_step_in_one_percent_noise_is_found_where_it_is(seed):
    at = 120 + 17 * seed
    values = np.concatenate([noisy(at, seed=seed), noisy(400 - at, level=1.05, seed=100 + seed)])
    points = find_change_points(values)
    assert len(points) == 1, [(p.index, p.p_value) for p in points]
    cp = points[0]
    assert abs(cp.index - at) <= 1
    assert cp.p_value < 1e-10
    assert cp.ratio == pytest.approx(1.05, abs=0.005)
    assert cp.runs_before + cp.runs_after == 400 and cp.runs_before == cp.index
    assert cp.median_after > cp.median_before and not cp.known


@pytest.mark.parametrize("seed", range(6))
def test_no_change_gives_no_change_point(seed):
    assert find_change_points(noisy(1000, seed=seed)) == []
    assert find_change_points(noisy(1000, sd=0.05, seed=50 + seed)) == []  # noisier: the p-value's multiplicity


@pytest.mark.parametrize("seed", range(6))
def test_spikes_do_not_create_change_points(seed):
    values = spiky(1000, seed)
    values[500] += 0.3   # and a pair of adjacent spikes
    values[501] += 0.3
    assert find_change_points(values) == []


def test_two_steps_give_two_points_with_their_own_ratios():
    values = noisy(500, seed=3)
    values[200:] *= 0.95
    values[350:] *= 1.08
    points = find_change_points(values)
    assert [p.index for p in points] == [200, 350]
    assert points[0].ratio == pytest.approx(0.95, abs=0.005)
    assert points[1].ratio == pytest.approx(1.08, abs=0.005)
    # each is tested against its adjacent segments only
    assert (points[0].runs_before, points[0].runs_after) == (200, 150)
    assert (points[1].runs_before, points[1].runs_after) == (150, 150)


def test_a_short_excursion_is_two_points():
    values = noisy(400, seed=4)
    values[200:210] *= 0.93
    assert [p.index for p in find_change_points(values)] == [200, 210]


def test_a_step_below_the_minimum_magnitude_is_not_reported():
    values = noisy(600, sd=0.002, seed=5)
    values[300:] *= 1.01  # clear (p tiny) but 1% < the 1.8% minimum
    assert find_change_points(values) == []
    [cp] = find_change_points(values, min_magnitude=0.005)
    assert cp.index == 300 and cp.ratio == pytest.approx(1.01, abs=0.001)


def test_constant_series_do_not_crash():
    assert find_change_points([3.0] * 200) == []
    assert find_change_points([0.0] * 200) == []
    assert find_change_points([3.0] * 200, breaks=[100]) == []
    [cp] = find_change_points([1.0] * 100 + [0.9] * 100)
    assert cp.index == 100 and cp.p_value == 0.0 and cp.ratio == pytest.approx(0.9)


def test_short_and_empty_series_have_no_change_point():
    assert find_change_points([]) == []
    assert find_change_points([1.0, 2.0, 3.0]) == []
    assert find_change_points([1.0] * 5 + [2.0] * 4) == []  # 10 points needed at least (5 each side)


def test_non_finite_values_are_refused():
    with pytest.raises(ValueError):
        find_change_points([1.0, float("nan")] * 20)


def test_a_known_break_is_reported_only_when_the_shift_is_at_it():
    values = noisy(300, seed=6)
    values[150:] *= 0.93
    [cp] = find_change_points(values, breaks=[150])
    assert (cp.index, cp.known) == (150, True) and cp.ratio == pytest.approx(0.93, abs=0.005)
    # a break with no shift is not reported, and a shift elsewhere is found as usual
    [cp] = find_change_points(values, breaks=[100])
    assert (cp.index, cp.known) == (150, False)
    assert find_change_points(noisy(300, seed=7), breaks=[100, 200]) == []


def test_a_shift_right_after_a_break_needs_min_segment_runs_each_side():
    values = noisy(200, seed=8)
    values[197:] *= 0.9
    assert find_change_points(values, breaks=[197]) == []        # 3 runs after: not yet
    assert [p.index for p in find_change_points(values, breaks=[197], min_segment=3)] == [197]


def test_a_few_thousand_points_take_well_under_a_second():
    values = spiky(3000, seed=9)
    values[1000:] *= 1.05
    values[2000:] *= 0.97
    find_change_points(values)  # warm the grids
    started = time.perf_counter()
    points = find_change_points(values)
    elapsed = time.perf_counter() - started
    assert [p.index for p in points] == [1000, 2000]
    assert elapsed < 1.0, elapsed  # about 10 ms on the 2-core development machine; the slack is for load
