"""One log line per kind of trouble now and then (issue 44, item 11: a full state folder under a 1 s schedule
logged 15 identical ERROR lines in 15 s)."""

from __future__ import annotations

import errno
import logging
import threading
import time

import pytest

from sixdim.config import Suite, WorkloadEntry
from sixdim.core.loglines import LogLimiter
from sixdim.run.devices import Device, DeviceLocks
from sixdim.run.progress import SuiteProgress
from sixdim.run.scheduler import SuiteScheduler


def test_a_repeated_line_is_held_back_and_counted(caplog):
    limiter = LogLimiter(logging.getLogger("test.loglines"), 0.3)
    caplog.set_level("INFO", logger="test.loglines")
    logged = [limiter.note("full", logging.ERROR, "disk full at %s", "/state") for _ in range(5)]
    assert logged == [True, False, False, False, False]
    assert limiter.note("other", logging.ERROR, "another kind") is True  # kinds apart
    time.sleep(0.35)
    assert limiter.note("full", logging.ERROR, "disk full at %s", "/state") is True
    lines = [r.getMessage() for r in caplog.records if r.name == "test.loglines"]
    assert lines == ["disk full at /state", "another kind", "disk full at /state (and 4 more such since the last "
                     "such line; at most one every 0.3 s)"]


class FullStateFolder:
    """An executor whose every suite run fails as a full state folder makes it fail."""

    def __init__(self) -> None:
        self.stop, self.locks, self.tries = threading.Event(), DeviceLocks(), 0
        self.progress = SuiteProgress("h")

    def execute_many(self, items, device, *, suite, timeout):
        self.tries += 1
        raise OSError(errno.ENOSPC, "No space left on device", "/state/devices/cpu.lock")


@pytest.mark.slow
def test_a_suite_that_cannot_run_every_second_logs_once(caplog):
    executor = FullStateFolder()
    suite = Suite(name="quick", workloads=(WorkloadEntry("gemm"),), interval_seconds=1, run_at_start=True,
                  timeout_given=True)
    caplog.set_level("INFO", logger="sixdim.run.scheduler")
    scheduler = SuiteScheduler(executor, [(suite, [Device("cpu")])])
    scheduler.start()
    try:
        deadline = time.monotonic() + 30
        while executor.tries < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        scheduler.shutdown()
    assert executor.tries >= 4
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "could not run" in errors[0] and "No space left on device" in errors[0]
    assert "could not run" in (scheduler.health.problem() or "")  # the health answer is not held back
