"""The interface every collector follows.

A collector reads one source of telemetry (NVML, the host) and turns it into
samples of metrics from the catalog.  A collector that cannot work on this
machine says so through :meth:`Collector.availability` and returns no samples:
never a crash, never a zero that looks like a reading.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from sixdim.core.catalog import MetricDef


@dataclass(frozen=True)
class Sample:
    """One value of one catalog metric, with its labels (names as in the catalog)."""

    metric: MetricDef
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Availability:
    available: bool
    reason: str = ""


class Collector(Protocol):
    name: str

    def availability(self) -> Availability:
        """Whether this collector works here, and if not, why."""

    def collect(self) -> list[Sample]:
        """Current readings; empty when unavailable."""


class LogOnce:
    """Logs a message the first time in this process only, so an unavailable source does not flood
    the journal (however many collectors are made)."""

    _seen: set[tuple[str, str]] = set()

    def __init__(self, logger: logging.Logger):
        self._logger = logger

    def warning(self, message: str) -> None:
        key = (self._logger.name, message)
        if key not in LogOnce._seen:
            LogOnce._seen.add(key)
            self._logger.warning(message)
