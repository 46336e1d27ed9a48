"""What each figure a run reports means for a verdict: which way is worse, and which restate another.

A run's ``figures`` (``RunRecord.figures``) are named here once; the detector, the configuration's
``[regression.effects]`` keys and the reports take these tables from this module.  Standard library
only: every layer may read it.
"""

from __future__ import annotations

UP = 1
"""A larger value is worse (time, power, memory)."""
DOWN = -1
"""A smaller value is worse (rates, efficiency, accuracy)."""

WATCHED: dict[str, int] = {
    "seconds": UP,
    "latency_p50_seconds": UP,
    "latency_p99_seconds": UP,
    "time_to_train_seconds": UP,
    "flops": DOWN,
    "samples_per_second": DOWN,
    "bytes_per_second": DOWN,
    "bus_bytes_per_second": DOWN,
    "power_watts": UP,
    "flop_per_joule": DOWN,
    "samples_per_joule": DOWN,
    "memory_bytes": UP,
    "accuracy": DOWN,
    "stability_ratio": DOWN,
    "peak_ratio": DOWN,
}
"""RunRecord.figures keys that get a verdict, with the direction that is a regression.  Power is
watched "for the same work": a series key fixes workload, shape and precision, so it is."""

RATES: tuple[str, ...] = ("flops", "samples_per_second", "bytes_per_second")
"""Figures that are a rate of the same work as ``seconds``: where a run has one, ``seconds`` (its
reciprocal) and ``peak_ratio`` (a constant times it) would give the same verdict again."""


