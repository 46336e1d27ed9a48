"""Summary series: geometric means over a suite's shapes, grouped so that nothing is mixed."""

import math

import pytest

from sixdim.verdicts.summary import geometric_mean, summarize
from tests.helpers import make_record


def shape(m: int) -> str:
    return f"m={m},n={m},k={m}"


def test_the_geometric_mean_moves_by_a_uniform_slowdown_whatever_the_sizes():
    fast = [make_record(seconds=s, shape=shape(i)) for i, s in enumerate([1e-5, 1e-3, 1e-1], 1)]
    slow = [make_record(seconds=s * 1.05, shape=shape(i)) for i, s in enumerate([1e-5, 1e-3, 1e-1], 1)]
    [before], [after] = summarize(fast), summarize(slow)
    assert before.shapes == 3
    assert before.figures["flops"] == pytest.approx(1024 / (1e-5 * 1e-3 * 1e-1) ** (1 / 3))
    assert after.figures["flops"] / before.figures["flops"] == pytest.approx(1 / 1.05)
    assert after.figures["seconds"] / before.figures["seconds"] == pytest.approx(1.05)


def test_groups_keep_gpus_precisions_and_versions_apart_and_skip_failures():
    records = [make_record(seconds=1.0, shape=shape(1)), make_record(seconds=4.0, shape=shape(2)),
               make_record(seconds=2.0, shape=shape(1), uuid="GPU-b", gpu="1"),
               make_record(seconds=8.0, shape=shape(3), driver="999.1", uuid="GPU-c", gpu="2"),
               make_record("failed", shape=shape(4))]
    by = {(s.record.uuid, s.record.environment["driver"]): s for s in summarize(records)}
    assert set(by) == {("GPU-a", "550.54.15"), ("GPU-b", "550.54.15"), ("GPU-c", "999.1")}
    assert by[("GPU-a", "550.54.15")].shapes == 2
    assert by[("GPU-a", "550.54.15")].shape_names == {shape(1), shape(2)}
    assert by[("GPU-a", "550.54.15")].figures["seconds"] == pytest.approx(2.0)  # sqrt(1 * 4)
    assert by[("GPU-c", "999.1")].figures["seconds"] == pytest.approx(8.0)


def test_an_upgrade_replaces_the_summary_even_where_a_shape_fails_since():
    """Three shapes under driver 550; after the upgrade to 560, two pass again and the third fails
    each time. The newest ok result of the third is still 550's, and a summary of 550 over it alone
    would stay exported beside 560's for ever: only the newest versions' summary is made."""
    before = [make_record(seconds=s, shape=shape(i), ended_at=1000.0 + i) for i, s in enumerate([1.0, 2.0, 4.0])]
    after = [make_record(seconds=s * 1.1, shape=shape(i), ended_at=2000.0 + i, driver="560.28")
             for i, s in enumerate([1.0, 2.0])]
    failing = make_record("failed", shape=shape(2), ended_at=2002.0, driver="560.28")
    [summary] = summarize([before[2], *after, failing])  # the newest ok result of each shape, and the failure
    assert summary.record.environment["driver"] == "560.28" and summary.shape_names == {shape(0), shape(1)}
    assert summary.figures["seconds"] == pytest.approx(1.1 * 2 ** 0.5)
    # half-way through re-running: the new versions' shapes only, not a mean mixing both drivers
    [partial] = summarize([after[0], before[1], before[2]])
    assert partial.record.environment["driver"] == "560.28" and partial.shapes == 1


def test_a_figure_only_some_shapes_have_is_not_summarised():
    records = [make_record(seconds=1.0, shape=shape(1), peak_ratio=0.5), make_record(seconds=2.0, shape=shape(2))]
    [summary] = summarize(records)
    assert "peak_ratio" not in summary.figures and "seconds" in summary.figures


def test_geometric_mean_refuses_what_it_cannot_mean():
    assert geometric_mean([]) is None
    assert geometric_mean([1.0, 0.0]) is None
    assert geometric_mean([1.0, math.inf]) is None
    assert geometric_mean([2.0, 8.0]) == pytest.approx(4.0)


def test_slowdown_flags_are_summarised_as_their_maximum_not_a_mean():
    quiet = make_record(shape="a", thermal_slowdown=0.0, hardware_slowdown=0.0)
    throttled = make_record(shape="b", thermal_slowdown=1.0, hardware_slowdown=0.0)
    [summary] = summarize([quiet, throttled])
    assert summary.figures["thermal_slowdown"] == 1.0 and summary.figures["hardware_slowdown"] == 0.0
    [alone] = summarize([quiet])
    assert alone.figures["thermal_slowdown"] == 0.0
