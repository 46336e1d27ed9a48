"""Summary series: a suite's result per workload, precision and pass, without a series per shape.

The full suite runs thousands of cases per device; exported per shape, an 8-GPU host would carry
hundreds of thousands of series, more than a Prometheus server should hold for one exporter.  A
dashboard at a glance needs one figure per (device, suite, workload, precision, mode, pass): the
**geometric mean over the suite's shapes** of each rate (FLOP/s, samples/s, bytes/s), of the
fraction of peak and of the time, with the number of shapes it covers.  A geometric mean is the
mean of ratios (MLPerf and SPEC use it for the same reason): a 5% slowdown of every shape moves
it by 5% whatever the shapes' sizes, and one shape cannot dominate it by being large.

Only ``ok`` results take part (a failed shape has no figure; its failure shows in the run
counters), and results are grouped by software versions too, so that a geometric mean never mixes
a driver's figures with its successor's while a suite is half-way through re-running them.  Of the
version groups of one (device, suite, workload, precision, mode, pass), only the one with the newest
result is summarised: the shapes whose newest ``ok`` result is under older versions (not re-run yet,
or failing since the upgrade) would otherwise keep a summary of the old versions alive beside the
new one, for ever in the failing case.

The same holds for the **shape set** (``params["shape_set"]``, sixdim.workloads.spec.shape_set_id): a suite
whose configuration changed (64 MiB copies became 4 MiB ones, a shape added) is summarised over the shapes
of its newest run only.  The old shapes' last results would otherwise stay in the mean for ever, a mix that
is no configuration's speed; the new set's summary grows as its first run goes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from sixdim.core.catalog import SUMMARY_FIGURES  # each where every result of the group that has it has it positive
from sixdim.core.results import SHAPE_SET, RunRecord

SUMMARY_FLAGS: tuple[str, ...] = ("thermal_slowdown", "hardware_slowdown")
"""0/1 flags summarised as their maximum: 1 if any shape's measured window had it (a geometric mean of
flags would be 0 as soon as one shape had none)."""


@dataclass(frozen=True)
class Summary:
    """One summary series: the labels of its group, and the geometric mean of each figure."""

    record: RunRecord
    """The newest result of the group: the source of its device, workload and version labels."""
    shapes: int
    figures: dict[str, float]
    shape_names: frozenset[str] = frozenset()
    """The shapes the means are over: two summaries compare only over the same shapes."""


def group_key(record: RunRecord) -> tuple[str, ...]:
    """What one summary series stands for: the series key without the shape, plus suite and versions,
    and the shape set its run measured (results of older sixdims, without one, are one set)."""
    labels = record.result_labels()
    return (record.hostname, record.device_type, record.gpu, record.uuid, record.workload, record.precision,
            record.mode, record.kernel_pass, record.suite, str(record.params.get(SHAPE_SET, "")),
            labels["driver_version"], labels["cuda_version"], labels["torch_version"])


def geometric_mean(values: list[float]) -> float | None:
    """The geometric mean of positive values; None if there are none or any is not positive."""
    if not values or any(not (v > 0) or math.isinf(v) for v in values):
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summarize(records: Iterable[RunRecord]) -> list[Summary]:
    """One :class:`Summary` per group of the ``ok`` results among ``records``."""
    groups: dict[tuple[str, ...], list[RunRecord]] = {}
    for record in records:
        if record.status == "ok":
            groups.setdefault(group_key(record), []).append(record)
    def when(record: RunRecord) -> tuple[float, int]:
        return record.ended_at, record.id or 0

    newest = {key: max(members, key=when) for key, members in groups.items()}
    newest_of_base: dict[tuple[str, ...], tuple[float, int]] = {}
    for key, record in newest.items():  # key[:9]: the group without its shape set and versions
        newest_of_base[key[:9]] = max(newest_of_base.get(key[:9], when(record)), when(record))
    summaries = []
    for key, members in groups.items():
        if when(newest[key]) < newest_of_base[key[:9]]:
            continue  # older versions or shape set than the group's newest result: see the module's docstring
        figures: dict[str, float] = {}
        for name in SUMMARY_FIGURES:
            values = [float(r.figures[name]) for r in members if isinstance(r.figures.get(name), (int, float))]
            if len(values) == len(members):  # a mean over some of the shapes would pass for all of them
                mean = geometric_mean(values)
                if mean is not None:
                    figures[name] = mean
        for name in SUMMARY_FLAGS:
            flags = [float(r.figures[name]) for r in members if isinstance(r.figures.get(name), (int, float))]
            if flags:
                figures[name] = max(flags)
        shapes = frozenset(r.shape for r in members)
        summaries.append(Summary(newest[key], len(shapes), figures, shapes))
    return summaries
