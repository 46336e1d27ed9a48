"""Turns a kernel's measurement and correctness check into its result: one place for every kernel.

A kernel's measurement (:func:`measure_kernel`) is: the timed rounds in one cache regime,
latency samples in the same regime when the case asks for them, then the power phase.

Imports torch (through the timing module): the worker process only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from sixdim.workloads.context import RunContext, WorkloadOutput
from sixdim.workloads.measure.correctness import Check
from sixdim.workloads.measure.stats import deepspark_mean, summarize
from sixdim.workloads.measure.timing import Timing, latency_percentiles, power_phase, time_rounds


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): a value that was actually observed."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Measurement:
    timing: Timing
    latencies: list[float] | None = None
    power_figures: dict[str, float] = field(default_factory=dict)
    power_details: dict[str, Any] = field(default_factory=dict)


def measure_kernel(kernel: Callable[[], object], device: torch.device, ctx: RunContext, params: dict[str, Any], *,
                   working_set_bytes: int = 0, regime: str | None = None, graph: bool = False,
                   flop_count: int | None = None) -> Measurement:
    """Timed rounds, latencies (same regime) and the power phase of one kernel case."""
    timing = time_rounds(kernel, device, ctx, rounds=params["rounds"], min_round_seconds=params["min_round_seconds"],
                         warmup_seconds=params["warmup_seconds"], working_set_bytes=working_set_bytes,
                         regime=regime, graph=graph)
    latencies = None
    if params.get("latency_samples"):
        latencies = latency_percentiles(kernel, device, ctx, samples=params["latency_samples"], warmup_seconds=0.0,
                                        regime=timing.regime)
    power, details = power_phase(timing.call or kernel, device, ctx, seconds=params.get("power_seconds", 0.0),
                                 calls_per_unit=timing.calls_per_unit,
                                 seconds_per_unit=timing.seconds_per_call * timing.calls_per_unit,
                                 work_per_call=flop_count, work_unit="flop", timed_regime=timing.regime)
    return Measurement(timing, latencies, power, details)


def kernel_output(measured: Measurement | Timing, verdict: Check, *, flop_count: int | None = None,
                  figures: dict[str, float] | None = None, details: dict[str, Any] | None = None,
                  latencies: list[float] | None = None) -> WorkloadOutput:
    """Seconds (DeepSpark rule), FLOP/s, spread, power, error; ``incorrect`` if the check failed."""
    if isinstance(measured, Timing):
        measured = Measurement(measured, latencies)
    timing = measured.timing
    seconds = deepspark_mean(timing.round_seconds)
    distribution = summarize(timing.round_seconds)
    result = {"seconds": seconds, "seconds_iqr_ratio": distribution["iqr_ratio"], **verdict.figures()}
    if flop_count is not None:
        result["flops"] = flop_count / seconds
    result.update(measured.power_figures)
    result.update(figures or {})
    kept = {"round_seconds": timing.round_seconds, "calls_per_round": timing.calls_per_round,
            "timing_method": timing.method, "cache_regime": timing.regime, "distribution": distribution,
            "tolerance": verdict.tolerance, **({"flop_count": flop_count} if flop_count is not None else {}),
            **measured.power_details, **(details or {})}
    if measured.latencies:
        result["latency_p50_seconds"] = percentile(measured.latencies, 50)
        result["latency_p99_seconds"] = percentile(measured.latencies, 99)
        kept["latency_samples"] = len(measured.latencies)
    if not verdict.correct:
        return WorkloadOutput(result, kept, status="incorrect", reason=verdict.reason())
    return WorkloadOutput(result, kept)


