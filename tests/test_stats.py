import math

import pytest

from sixdim.workloads.measure.stats import deepspark_mean, summarize


def test_deepspark_rule_drops_highest_and_lowest_of_five():
    # 5 rounds: drop 10 (lowest) and 100 (highest), mean of 20, 30, 40 = 30
    assert deepspark_mean([40, 10, 100, 20, 30]) == pytest.approx(30.0)


def test_deepspark_rule_is_robust_to_one_outlier_each_side():
    rounds = [1.00, 1.02, 0.98, 50.0, 0.001]
    assert deepspark_mean(rounds) == pytest.approx((1.00 + 1.02 + 0.98) / 3)


def test_deepspark_rule_drops_only_one_of_tied_extremes():
    assert deepspark_mean([5, 5, 5, 1, 1]) == pytest.approx((1 + 5 + 5) / 3)


def test_deepspark_rule_refuses_fewer_than_three_values():
    with pytest.raises(ValueError, match="at least 3"):
        deepspark_mean([1.0, 2.0])


def test_deepspark_rule_refuses_nan():
    with pytest.raises(ValueError, match="NaN"):
        deepspark_mean([1.0, math.nan, 2.0, 3.0, 4.0])


def test_summary_of_known_values():
    s = summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    assert s["median"] == 3.0
    assert (s["q1"], s["q3"]) == (2.0, 4.0)
    assert s["iqr"] == 2.0 and s["iqr_ratio"] == pytest.approx(2 / 3)
    assert s["mad"] == 1.0
    assert s["min"] == 1.0 and s["max"] == 5.0
    assert s["cv"] == pytest.approx(math.sqrt(2.5) / 3.0)
