"""DeepSpark's six dimensions, computed from raw observations (torch-free).

The rules, from the DeepSpark evaluation (shared/reference/deepspark-six-dimensions.md):

- **speed**: of 5 measured rounds (per-epoch throughputs), drop the highest and the lowest and
  average the middle 3.  Given more than 5, the same trimming applies to all of them.
- **accuracy**: the converged value, as measured.
- **linearity**: multi-card (or multi-node) speed divided by the card count, over single-card
  speed: (multi / count) / single.
- **power** and **memory**: the average of the samples taken during steady training.
- **stability**: of 5 complete runs that each reached the target, the median converged value is
  the reference; every run whose relative difference from it is not inside (-0.01, +0.01) costs
  20% of the score (so 1.0, 0.8, ... down to 0).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from workloads.stats import deepspark_mean

KEYS = ("speed", "accuracy", "linearity", "power_watts", "memory_mib", "convergence")
OUTPUT_KEYS = ("speed", "accuracy", "linearity", "power_watts", "memory_mib", "stability")
STABILITY_BAND = 0.01
STABILITY_PENALTY = 0.2
MIN_SPEED_ROUNDS = 5
MIN_STABILITY_RUNS = 5


class DimensionsError(ValueError):
    """Bad input: the message names the key and what was expected."""

    def __init__(self, key: str, expected: str, got: Any = None):
        self.key = key
        message = f"key {key!r}: expected {expected}"
        if got is not None:
            message += f", got {got!r}"
        super().__init__(message)


def _number(key: str, value: Any, expected: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise DimensionsError(key, expected, value)
    return float(value)


def _numbers(key: str, value: Any, minimum: int, what: str) -> list[float]:
    expected = f"a list of {minimum} or more {what}" if minimum > 1 else f"a non-empty list of {what}"
    if not isinstance(value, list) or len(value) < minimum:
        raise DimensionsError(key, expected, value)
    return [_number(key, item, expected) for item in value]


def speed(values: list[float]) -> float:
    return deepspark_mean(values)


def linearity(single: float, multi: float, count: int) -> float:
    return (multi / count) / single


def stability(converged: list[float]) -> tuple[float, list[float]]:
    """The stability score and each run's relative difference from the median."""
    reference = statistics.median(converged)
    differences = [(value - reference) / reference for value in converged]
    outside = sum(1 for d in differences if not -STABILITY_BAND < d < STABILITY_BAND)
    return max(0.0, 1.0 - STABILITY_PENALTY * outside), differences


def compute(observations: Any) -> dict[str, float | None]:
    """The six dimensions of a JSON object of observations; DimensionsError on bad input."""
    if not isinstance(observations, dict):
        raise DimensionsError("(top level)", "a JSON object with any of " + ", ".join(KEYS), observations)
    for key in observations:
        if key not in KEYS:
            raise DimensionsError(key, "one of " + ", ".join(KEYS) + " (unknown key)")
    result: dict[str, float | None] = dict.fromkeys(OUTPUT_KEYS)
    if "speed" in observations:
        result["speed"] = speed(_numbers("speed", observations["speed"], MIN_SPEED_ROUNDS,
                                         "throughputs (DeepSpark drops the highest and lowest of 5 rounds)"))
    if "accuracy" in observations:
        result["accuracy"] = _number("accuracy", observations["accuracy"], "a number")
    if "linearity" in observations:
        raw = observations["linearity"]
        if not isinstance(raw, dict) or set(raw) != {"single", "multi", "count"}:
            raise DimensionsError("linearity", 'an object {"single": x, "multi": y, "count": n}', raw)
        single = _number("linearity.single", raw["single"], "a positive number")
        multi = _number("linearity.multi", raw["multi"], "a number")
        count = raw["count"]
        if single <= 0:
            raise DimensionsError("linearity.single", "a positive number", raw["single"])
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise DimensionsError("linearity.count", "a whole number of cards or nodes, 1 or more", count)
        result["linearity"] = linearity(single, multi, count)
    for key in ("power_watts", "memory_mib"):
        if key in observations:
            result[key] = statistics.fmean(_numbers(key, observations[key], 1, "samples"))
    if "convergence" in observations:
        converged = _numbers("convergence", observations["convergence"], MIN_STABILITY_RUNS,
                             "converged values, one per complete run")
        if statistics.median(converged) == 0:
            raise DimensionsError("convergence", "values whose median is not 0 (differences are relative to it)")
        result["stability"] = stability(converged)[0]
    return result
