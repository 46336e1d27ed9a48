"""Change points of one sequence (agent/verdicts/changepoints.py): steps found where they are, noise,
spikes, bursts and constants giving none, known breaks reported only when something shifted there,
drifts named as drifts; and on every noise model of tests/bench/noise_models.py, the figures of
issue 25 that held on none of them before (each test says what it was)."""

import time

import numpy as np
import pytest

from sixdim.verdicts.changepoints import ChangePoint, find_changes, find_changes_many
from tests.bench import noise_models as nm


def find_change_points(values, **options) -> list[ChangePoint]:
    """The change points alone (the drifts left out) of :func:`find_changes`."""
    return find_changes(values, **options).points


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


def test_an_excursion_of_a_few_runs_is_a_burst_and_a_longer_one_two_points():
    """Ten runs 7% off that come back are a burst (a neighbour's job for a while), not two shifts;
    thirty are two shifts."""
    values = noisy(400, seed=4)
    values[200:210] *= 0.93
    assert find_change_points(values) == []
    values = noisy(400, seed=4)
    values[200:230] *= 0.93
    assert [p.index for p in find_change_points(values)] == [200, 230]


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
    assert cp.index == 100 and cp.p_value < 1e-30 and cp.ratio == pytest.approx(0.9)


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
    values = noisy(200, seed=8)
    values[195:] *= 0.9
    [cp] = find_change_points(values, breaks=[195])              # 5 runs after: at the break
    assert (cp.index, cp.known, cp.runs_after) == (195, True, 5)


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


# --- issue 25: the noise models of tests/bench/noise_models.py ------------------------------------
# Each test below failed before the decisions became rank-based; its docstring gives the old figure.


def test_spikes_just_before_a_step_do_not_put_it_early():
    """Two spikes (+25%) in the two runs before a 5% step, 6-10 runs after it: the step is placed at
    its run +-1, or not listed yet.  Was: every one of the 90 listed 2 runs early (the spikes read as
    the new level by the means and the energy statistic)."""
    listed = 0
    for seed in range(30):
        for tail in (6, 8, 10):
            values = nm.series(seed, "gauss_1", 1, 200 + tail, 0.05, 200)[0]
            values[198:200] *= 1.25
            points = find_change_points(values)
            listed += bool(points)
            assert all(abs(p.index - 200) <= 1 for p in points), (seed, tail, [p.index for p in points])
    assert listed >= 45  # most are listed already (60 of 90 on the development machine)


@pytest.mark.parametrize("model", ["gauss_1", "t3", "spiky", "bursts"])
def test_a_step_with_a_short_tail_is_placed_right_or_not_listed_yet(model):
    for seed in range(60):
        tail = 6 + seed % 5
        values = nm.series(seed, model, 1, 200 + tail, 0.05, 200)[0]
        points = find_change_points(values)
        assert all(abs(p.index - 200) <= 1 for p in points), (seed, tail, [p.index for p in points])


@pytest.mark.parametrize("step, share", [(0.05, 0.95), (0.03, 0.90)])
@pytest.mark.parametrize("model", ["gauss_1", "t3", "spiky"])
def test_steps_are_found_through_spikes_and_heavy_tails(model, step, share):
    """5% and 3% steps with 40 runs after them: at least 95% and 90% found at their run +-1.  Was,
    on spiky noise (3% of runs 10-40% slow): 49 and 12 of these 60 (the t-test's variance took the
    spikes in)."""
    found = 0
    for seed in range(60):
        at = 100 + 3 * seed
        values = nm.series(seed, model, 1, at + 40, step, at)[0]
        found += any(abs(p.index - at) <= 1 for p in find_change_points(values))
    assert found >= share * 60, found


@pytest.mark.parametrize("model", nm.MODELS)
def test_no_change_gives_no_change_point_on_any_noise_model(model):
    """Was: 56 change points in these 10 series of bursts (2-5 slow runs in a row made segments)."""
    values = nm.series(7, model, 10, 2000)
    assert [len(find_change_points(v)) for v in values] == [0] * 10


def test_spikes_just_before_an_upgrade_do_not_drop_the_version():
    """A 5% step at a version change, two spikes in the two runs before it: the shift is the version
    change's.  Was: 6 of these 30 listed 1 or 2 runs early with no version."""
    for seed in range(30):
        values = nm.series(seed, "gauss_1", 1, 300, 0.05, 200)[0]
        values[198:200] *= 1.25
        points = find_change_points(values, breaks=[200])
        assert [(p.index, p.known) for p in points] == [(200, True)], (seed, [(p.index, p.known) for p in points])


@pytest.mark.parametrize("model", nm.MODELS)
def test_a_version_change_that_did_nothing_is_not_a_shift(model):
    """Held before on Gaussian noise; on bursts, 2 of these 20 series listed one."""
    for seed in range(20):
        values = nm.series(100 + seed, model, 1, 400)[0]
        assert find_change_points(values, breaks=[200]) == [], seed


@pytest.mark.parametrize("model", ["gauss_1", "t3", "spiky", "bursts"])
def test_a_slow_drift_is_a_drift_not_a_version_change(model):
    """+0.05% a run over 400 runs, a version change in the middle that did nothing: no shift there
    (the runs within the segments trend, so the trend is taken out before the test), and the
    drift is listed as one drift over the whole series.  Was: 39 of 90 on gauss_1, t3 and spiky
    blamed on the version change."""
    for seed in range(20):
        values = nm.drift(nm.series(seed, model, 1, 400)[0], 0.0005)
        points = find_change_points(values, breaks=[200])
        assert points == [], (seed, [(p.index, p.known) for p in points])
        [drift] = find_changes(values, breaks=[200]).drifts
        assert (drift.start, drift.end) == (0, 400)
        assert drift.ratio == pytest.approx(1.0005 ** 399, abs=0.03)
        assert drift.level_end > drift.level_start


def test_a_long_compounded_drift_is_not_put_down_to_its_version_changes():
    """+0.02% a run, compounded, over 5,000 runs (x2.7), two version changes that did nothing: no
    shift, one drift.  Was: a step every 100-150 runs.  (A shift on a drift is measured on the 200
    runs each side nearest it: over 1,000, the drift's curve read as a line was a jump of a few
    percent at both version changes.)"""
    for seed in range(5):
        values = nm.drift(nm.series(seed, "gauss_1", 1, 5000)[0], 0.0002)
        found = find_changes(values, breaks=[1000, 2500])
        assert found.points == [], (seed, [(p.index, p.known) for p in found.points])
        assert [(d.start, d.end) for d in found.drifts] == [(0, 5000)]


def test_a_step_on_a_drift_is_still_a_step():
    for seed in range(20):
        values = nm.drift(nm.series(seed, "gauss_1", 1, 400, 0.05, 200)[0], 0.0005)
        found = find_changes(values)
        [cp] = found.points
        assert abs(cp.index - 200) <= 1 and cp.drift_per_run == pytest.approx(0.0005, abs=0.0002)
        assert cp.ratio == pytest.approx(1.05, abs=0.01)  # the levels either side of it, the drift taken out
        assert [(d.start, d.end) for d in found.drifts] == [(0, cp.index), (cp.index, 400)]


def test_a_step_too_small_to_list_is_not_a_drift():
    """A 7% step with a minimum of 8% is nothing: the runs trend as a whole, but not within either
    side of it (a slope measured across the step would read it as a 15% drift)."""
    values = noisy(200, seed=12)
    values[120:] *= 1.07
    found = find_changes(values, min_magnitude=0.08)
    assert found.points == [] and found.drifts == []


def test_many_series_at_once_are_fast():
    """50 series of 2,000 spiky runs (100,000 points, as report_bench's fleet history holds), each with
    two steps, in one call: about 0.2 s of CPU on the 2-core development machine (processor time, so
    that others' load counts less).  Was: no batch call, 1.4 s one by one, and 83 of the 100 steps."""
    rng = np.random.default_rng(3)
    values = nm.series(3, "spiky", 50, 2000)
    items = []
    for v in values:
        one, two = sorted(rng.choice(np.arange(100, 1900), 2, replace=False))
        v[one:] *= 1.05
        v[two:] *= 0.96
        items.append((v, [], 0.018))
    find_changes_many(items[:2])  # warm the caches
    started = time.process_time()
    found = find_changes_many(items)
    elapsed = time.process_time() - started
    assert sum(len(f.points) for f in found) >= 98
    assert elapsed < 1.0, elapsed
