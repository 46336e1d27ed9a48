"""What a workload receives from the worker and hands back, torch-free."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


class Unsupported(Exception):
    """This device or software cannot run the case (a precision it lacks, one GPU for an all-reduce).

    Reported as status ``unsupported`` with the message: never as a failure, never as a zero.
    """


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
    energy: Any = None
    """The device's energy meter (:mod:`sixdim.workloads.measure.energy`), read by the power phase; None: none."""
    memory: dict[str, float] | None = None
    """The case's own device-memory peaks (``memory_bytes``, ``memory_reserved_bytes``), noted by
    the timing harness at the end of the measurement."""
    memory_baseline: int = 0
    announce_build: Callable[[float | None, str], None] = lambda seconds, what: None
    """Tells the runner a one-off build starts (its allowance in seconds) or ended (None)."""

    @contextmanager
    def one_off_build(self, seconds: float, what: str) -> Iterator[None]:
        """Around work whose result is cached for later runs (a TensorRT engine): it gets ``seconds`` of
        its own instead of the case's timeout, which then starts afresh (sixdim.run.protocol.BUILD_PREFIX)."""
        self.progress(f"building {what} (allowed {seconds:g} s, outside the case's timeout)")
        self.announce_build(seconds, what)
        try:
            yield
        finally:
            self.announce_build(None, what)

    def mark_window_start(self) -> None:
        self.window_start = time.monotonic()

    def mark_window_end(self) -> None:
        self.window_end = time.monotonic()


@dataclass
class WorkloadOutput:
    """What a case measured: exported figures (base units) and details kept in history.

    ``status`` is ``ok``, or ``incorrect`` when the output failed its correctness check
    (the figures are still reported: a fast wrong answer is worth seeing).
    """

    figures: dict[str, float]
    details: dict[str, Any] = field(default_factory=dict)
    status: str = "ok"
    reason: str = ""
