"""What a workload receives from the worker and hands back, torch-free."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class RunContext:
    """The device to run on, a progress callback, and the measured-window marks.

    A workload calls :meth:`mark_window_start` just before its first timed
    repetition and :meth:`mark_window_end` after its last.  The daemon averages
    power, memory and clocks over exactly that window (CLOCK_MONOTONIC is shared
    by all processes of a host, so the marks line up with its samples).
    """

    device: str
    progress: Callable[[str], None] = lambda message: None
    window_start: float | None = None
    window_end: float | None = None

    def mark_window_start(self) -> None:
        self.window_start = time.monotonic()

    def mark_window_end(self) -> None:
        self.window_end = time.monotonic()


@dataclass
class WorkloadOutput:
    """What a workload measured: exported figures (base units) and details kept in history."""

    figures: dict[str, float]
    details: dict[str, Any] = field(default_factory=dict)
