"""Robust statistics for timed rounds, torch-free so the daemon can use them too."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def deepspark_mean(values: Sequence[float]) -> float:
    """DeepSpark's speed figure: drop the single highest and lowest value, average the rest.

    DeepSpark defines it for 5 rounds (the mean of the middle 3).  With more rounds the
    same trimming applies; with fewer than 3 there is nothing left to trim, so it is refused.
    """
    if len(values) < 3:
        raise ValueError(f"the DeepSpark rule needs at least 3 values, got {len(values)}")
    if any(math.isnan(v) for v in values):
        raise ValueError("the DeepSpark rule got a NaN value")
    ordered = sorted(values)
    middle = ordered[1:-1]
    return sum(middle) / len(middle)


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    """First quartile, median and third quartile (inclusive method, defined for 1+ values)."""
    if not values:
        raise ValueError("quartiles of an empty sequence")
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def summarize(values: Sequence[float]) -> dict[str, float]:
    """The distribution kept beside the DeepSpark figure: min, max, median, IQR, MAD, CV."""
    q1, median, q3 = quartiles(values)
    mean = statistics.fmean(values)
    stdev = statistics.stdev(values) if len(values) > 1 else 0.0
    mad = statistics.median(abs(v - median) for v in values)
    return {
        "n": float(len(values)),
        "min": min(values),
        "max": max(values),
        "mean": mean,
        "median": median,
        "q1": q1,
        "q3": q3,
        "iqr": q3 - q1,
        "iqr_ratio": (q3 - q1) / median if median else 0.0,
        "mad": mad,
        "cv": stdev / mean if mean else 0.0,
    }
