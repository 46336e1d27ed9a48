"""Turns a kernel's timing and correctness check into its result: one place for every kernel.

Imports torch (through the timing module): the worker process only.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from workloads.context import RunContext, WorkloadOutput
from workloads.correctness import Check
from workloads.stats import deepspark_mean, summarize
from workloads.timing import Timing, latency_percentiles


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): a value that was actually observed."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def kernel_output(timing: Timing, verdict: Check, *, flop_count: int | None = None,
                  figures: dict[str, float] | None = None, details: dict[str, Any] | None = None,
                  latencies: list[float] | None = None) -> WorkloadOutput:
    """Seconds (DeepSpark rule), FLOP/s, spread, error; ``incorrect`` if the check failed."""
    seconds = deepspark_mean(timing.round_seconds)
    distribution = summarize(timing.round_seconds)
    result = {"seconds": seconds, "seconds_iqr_ratio": distribution["iqr_ratio"], **verdict.figures()}
    if flop_count is not None:
        result["flops"] = flop_count / seconds
    result.update(figures or {})
    kept = {"round_seconds": timing.round_seconds, "calls_per_round": timing.calls_per_round,
            "timing_method": timing.method, "distribution": distribution, "tolerance": verdict.tolerance,
            **({"flop_count": flop_count} if flop_count is not None else {}), **(details or {})}
    if latencies:
        result["latency_p50_seconds"] = percentile(latencies, 50)
        result["latency_p99_seconds"] = percentile(latencies, 99)
        kept["latency_samples"] = len(latencies)
    if not verdict.correct:
        return WorkloadOutput(result, kept, status="incorrect", reason=verdict.reason())
    return WorkloadOutput(result, kept)


def measure_latencies(kernel: Callable[[], object], device: torch.device, params: dict[str, Any]) -> list[float] | None:
    """Per-call latencies for the inference percentiles, when the case asks for them."""
    samples = params.get("latency_samples", 0)
    if not samples:
        return None
    return latency_percentiles(kernel, device, RunContext(device=str(device)), samples=samples, warmup_seconds=0.0)
