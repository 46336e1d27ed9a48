"""Durations as people write them on sixdim's command lines: one grammar for every flag.

``90`` (seconds), ``90s``, ``30m``, ``12h``, ``7d``, ``2w``, compounds largest unit first
(``1d12h``, ``1h30m``), and decimals (``1.5d``).  ``sixdim report --since``, ``report html
--since`` and ``sixdim rules`` (``--stale-after``, ``--failure-window``, ...) all read them here, so
what one accepts the others do too.  Alert rules need whole seconds (a Prometheus duration):
:func:`whole_seconds` says so when a value is not.
"""

from __future__ import annotations

import argparse
import math
import re

UNITS: tuple[tuple[str, int], ...] = (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
"""Each unit and its seconds, largest first (the order a compound is written in)."""
_SECONDS = dict(UNITS)
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_TERM = re.compile(rf"({_NUMBER})([wdhms])")
EXAMPLES = "90s, 30m, 12h, 1d12h, 2w or a number of seconds"


def parse_duration(text: str) -> float:
    """Seconds of a duration (above zero, finite), or :class:`ValueError` saying what was expected."""
    s = (text or "").strip()
    value = math.nan
    if re.fullmatch(_NUMBER, s):
        value = float(s)
    else:
        terms = _TERM.findall(s)
        units = [unit for _, unit in terms]
        order = [u for u, _ in UNITS]
        if terms and "".join(n + u for n, u in terms) == s and units == sorted(set(units), key=order.index):
            value = sum(float(number) * _SECONDS[unit] for number, unit in terms)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"expected a duration above zero such as {EXAMPLES}, got {text!r}")
    return value


def whole_seconds(text: str) -> int:
    """A duration of whole seconds (what a Prometheus rule can say), or :class:`ValueError`."""
    seconds = parse_duration(text)
    if seconds != int(seconds):
        raise ValueError(f"expected a whole number of seconds, got {text!r} ({seconds:g} s)")
    return int(seconds)


def format_duration(seconds: int) -> str:
    """Whole seconds as a Prometheus duration, largest units first: 93600 -> ``1d2h``."""
    if seconds <= 0:
        raise ValueError(f"a duration must be above zero, got {seconds}")
    parts = []
    for unit, size in UNITS:
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def duration_argument(text: str) -> float:
    """:func:`parse_duration` for argparse (``type=duration_argument``): a usage error, exit 2."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
