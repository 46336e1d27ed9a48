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

Ranges (anything else is refused with :class:`DimensionsError`, naming the key): every number is a
finite JSON number (NaN, Infinity and ``1e400``, which reads as infinity, are refused); speeds are
above 0; ``linearity.single`` is above 0 and ``linearity.multi`` 0 or more; ``linearity.count`` is
a whole number from 1 to :data:`MAX_COUNT`; power and memory samples are 0 or more; accuracy and
converged values may be any finite number (a loss, a BLEU score).  A result that would overflow a
float (the mean of ``[1e308, 1e308]``) is refused as out of range: the output never holds a
non-finite number.
"""

from __future__ import annotations

import json
import math
import statistics
from typing import Any

from sixdim.workloads.measure.stats import deepspark_mean
from sixdim.workloads.spec import brief

KEYS = ("speed", "accuracy", "linearity", "power_watts", "memory_mib", "convergence")
OUTPUT_KEYS = ("speed", "accuracy", "linearity", "power_watts", "memory_mib", "stability")
STABILITY_BAND = 0.01
STABILITY_PENALTY = 0.2
MIN_SPEED_ROUNDS = 5
MIN_STABILITY_RUNS = 5
MAX_COUNT = 1_000_000
"""The most cards or nodes ``linearity.count`` may name."""


class DimensionsError(ValueError):
    """Bad input: the message names the key and what was expected."""

    def __init__(self, key: str, expected: str, got: Any = None):
        self.key = key
        message = f"key {key!r}: expected {expected}"
        if got is not None:
            message += f", got {brief(got)}"  # cut: one line, whatever the value
        super().__init__(message)


def _number(key: str, value: Any, expected: str, low: float = -math.inf, low_open: bool = False) -> float:
    """A finite number of at least ``low`` (above it when ``low_open``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DimensionsError(key, expected, value)
    try:
        number = float(value)
    except OverflowError:  # a whole number of 400 digits: past a float's range
        raise DimensionsError(key, expected + " (out of range)", value) from None
    if not math.isfinite(number):  # 1e400 reads as infinity
        raise DimensionsError(key, expected + " (out of range)", value)
    if number < low or (low_open and number == low):
        raise DimensionsError(key, expected, value)
    return number


def _numbers(key: str, value: Any, minimum: int, what: str, low: float = -math.inf,
             low_open: bool = False) -> list[float]:
    expected = f"a list of {minimum} or more {what}" if minimum > 1 else f"a non-empty list of {what}"
    if not isinstance(value, list) or len(value) < minimum:
        raise DimensionsError(key, expected, value)
    return [_number(key, item, expected, low, low_open) for item in value]


def _finite(key: str, value: float, what: str) -> float:
    """A computed figure, refused when the inputs were too large for a float to hold it."""
    if not math.isfinite(value):
        raise DimensionsError(key, f"values whose {what} a float can hold (out of range: it overflows)")
    return value


def _mean(key: str, values: list[float]) -> float:
    try:
        return _finite(key, statistics.fmean(values), "mean")
    except OverflowError:  # fsum's intermediate overflow
        raise DimensionsError(key, "values whose mean a float can hold (out of range: it overflows)") from None


MAX_INPUT_BYTES = 16 * 2**20
"""The largest input read (16 MiB): observations are a few numbers per key."""


class InputError(ValueError):
    """The input is not a JSON document this command reads: the message says why, in one line."""


def _reject_constant(name: str) -> Any:
    raise InputError(f"not valid JSON: {name} is not a JSON number (JSON has no NaN or Infinity)")


def read_json(data: bytes) -> Any:
    """Parse the input: strict UTF-8, strict JSON (no NaN or Infinity), nested less deeply than the
    parser recurses and no integer longer than Python reads (4,300 digits); InputError otherwise."""
    if len(data) > MAX_INPUT_BYTES:
        raise InputError(f"more than {MAX_INPUT_BYTES // 2**20} MiB of input: observations are a few numbers")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start}") from None
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise InputError("JSON nested too deeply to read (arrays or objects within each other)") from None
    except InputError:
        raise
    except ValueError:  # int("9" * 5000): past Python's integer digit limit
        raise InputError("a number has too many digits to read (out of range)") from None


def to_json(result: dict[str, float | None]) -> str:
    """The output: standard JSON, never ``NaN`` or ``Infinity`` (:func:`compute` keeps every figure finite)."""
    return json.dumps(result, indent=2, allow_nan=False)


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
        result["speed"] = _finite("speed", speed(_numbers(
            "speed", observations["speed"], MIN_SPEED_ROUNDS,
            "positive throughputs (DeepSpark drops the highest and lowest of 5 rounds)", 0.0, low_open=True)),
            "mean")
    if "accuracy" in observations:
        result["accuracy"] = _number("accuracy", observations["accuracy"], "a number")
    if "linearity" in observations:
        raw = observations["linearity"]
        if not isinstance(raw, dict) or set(raw) != {"single", "multi", "count"}:
            raise DimensionsError("linearity", 'an object {"single": x, "multi": y, "count": n}', raw)
        single = _number("linearity.single", raw["single"], "a positive number", 0.0, low_open=True)
        multi = _number("linearity.multi", raw["multi"], "a number >= 0", 0.0)
        count = raw["count"]
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
            raise DimensionsError("linearity.count",
                                  f"a whole number of cards or nodes, 1 or more and at most {MAX_COUNT}", count)
        result["linearity"] = _finite("linearity", linearity(single, multi, count), "ratio (multi / count) / single")
    for key in ("power_watts", "memory_mib"):
        if key in observations:
            result[key] = _mean(key, _numbers(key, observations[key], 1, "samples >= 0", 0.0))
    if "convergence" in observations:
        converged = _numbers("convergence", observations["convergence"], MIN_STABILITY_RUNS,
                             "finite converged values, one per complete run")
        if _finite("convergence", statistics.median(converged), "median") == 0:
            raise DimensionsError("convergence", "values whose median is not 0 (differences are relative to it)")
        result["stability"] = stability(converged)[0]
    for key, value in result.items():  # the rules above keep every figure finite; say so if one ever is not
        if value is not None:
            _finite(key, value, "result")
    return result
