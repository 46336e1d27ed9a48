"""Issue 44, item 11: each SIGHUP used to leave the earlier plan's thread pool, and its idle threads, in the
scheduler until shutdown.  The real APScheduler scheduler, reloaded again and again while its suites run."""

from __future__ import annotations

import threading
import time

from sixdim.config import Suite, WorkloadEntry
from sixdim.run.devices import Device, DeviceLocks
from sixdim.run.progress import SuiteProgress
from sixdim.run.scheduler import SuiteScheduler
from tests.helpers import make_record


class Executor:
    """Runs a suite in no time and counts it; the scheduler's part is what is tested."""

    def __init__(self) -> None:
        self.stop, self.locks, self.runs = threading.Event(), DeviceLocks(), 0
        self.progress = SuiteProgress("h")
        self.lock = threading.Lock()

    def execute_many(self, items, device, *, suite, timeout):
        with self.lock:
            self.runs += 1
        return [make_record("ok")]


def pool_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("ThreadPoolExecutor"))


def test_reloads_leave_no_idle_threads_and_a_waiting_run_moves_to_the_new_plan():
    cpu = Device("cpu")
    suite = Suite(name="quick", workloads=(WorkloadEntry("gemm"),), interval_seconds=3600, run_at_start=True,
                  timeout_given=True)
    executor = Executor()
    before = pool_threads()
    scheduler = SuiteScheduler(executor, [(suite, [cpu])])
    scheduler.start()
    try:
        for reload in range(12):
            ran = executor.runs
            assert scheduler.run_now(suite, cpu, "test")  # a run on this plan's pool: it keeps a thread after
            deadline = time.monotonic() + 20
            while executor.runs == ran and time.monotonic() < deadline:
                time.sleep(0.01)
            assert executor.runs > ran, f"reload {reload}: the run did not happen"
            scheduler.replace([(suite, [cpu])])
        deadline = time.monotonic() + 10
        while pool_threads() - before > 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pool_threads() - before <= 3  # the current plan's, not one per reload (12 before the fix)
        # a run asked for just before a reload still runs, on the new plan's pool
        with executor.lock:
            ran = executor.runs
        scheduler.run_now(suite, cpu, "test")
        scheduler.replace([(suite, [cpu])])
        deadline = time.monotonic() + 20
        while executor.runs == ran and time.monotonic() < deadline:
            time.sleep(0.01)
        assert executor.runs > ran
    finally:
        scheduler.shutdown()
