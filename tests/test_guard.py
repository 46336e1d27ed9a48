"""The idle guard against sixdim's own work, against a job that starts mid-suite, and when NVML
cannot list processes.  Real worker processes; NVML is the faithful fake."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pynvml
import pytest

from sixdim.collectors.nvml import NvmlCollector
from sixdim.run.devices import resolve
from sixdim.run.executor import Executor, GuardSettings
from sixdim.run.guard import PID_NAMESPACE_HINT, SETTLE_POLL_SECONDS, SETTLE_SECONDS, Guard
from sixdim.store.history import History
from tests.fakenvml import FakeGpu, FakeNvml
from tests.guard_workloads import spec

GONE = 4_194_304 + 17
"""A PID no process can have (above Linux's largest pid_max): one that has already ended."""
GONE_TOO = GONE + 1


def make_executor(tmp_path, fake: FakeNvml, guard: bool = True) -> Executor:
    return Executor(hostname="node1", history=History(tmp_path / "h.db"), nvml=NvmlCollector("node1", module=fake),
                    rapl=None, guard=GuardSettings(enabled=guard, max_utilization=0.05))


@pytest.fixture
def foreign_process():
    """A real process that is not sixdim's: a production job's stand-in."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield process
    process.kill()
    process.wait()


class FakeClock:
    """time.monotonic and time.sleep for the guard: sleeping advances the clock, and ``on_sleep``
    lets the GPU's state change with time."""

    def __init__(self, on_sleep=lambda now: None):
        self.now = 1000.0
        self.slept = 0.0
        self._on_sleep = on_sleep

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds
        self._on_sleep(self.now)


# ---------------------------------------------------------------------------- the settle rule

def test_after_our_own_worker_the_guard_waits_for_its_load_to_drain():
    # our worker's tail: still busy, the worker and a child of it the guard never saw still listed
    gpu = FakeGpu(utilization_gpu=90, compute_pids=[GONE, GONE_TOO])
    nvml = NvmlCollector("node1", module=FakeNvml([gpu]))
    ended = 1000.0

    def drain(now: float) -> None:
        if now >= ended + 1.0:  # NVML's utilization period has passed, the context is gone
            gpu.utilization_gpu, gpu.compute_pids = 0, []

    clock = FakeClock(drain)
    guard = Guard(nvml, clock=clock, sleep=clock.sleep)
    guard.own_load_ended([0], {GONE})
    assert guard.before_run([0], 0.05) is None
    assert 1.0 <= clock.slept <= 1.0 + SETTLE_POLL_SECONDS


def test_the_settle_wait_is_bounded_and_then_names_the_utilization():
    nvml = NvmlCollector("node1", module=FakeNvml([FakeGpu(utilization_gpu=90)]))
    clock = FakeClock()
    guard = Guard(nvml, clock=clock, sleep=clock.sleep)
    guard.own_load_ended([0], {GONE})
    clock.now += 0.5  # the next worker asks half a second after ours ended
    reason = guard.before_run([0], 0.05)
    assert reason == (f"busy: GPU 0 utilization 90% is above the guard's 5%, still {SETTLE_SECONDS:g} s after "
                      f"sixdim's own run on it ended")
    assert clock.slept == pytest.approx(SETTLE_SECONDS - 0.5)


def test_without_our_own_recent_load_high_utilization_is_busy_at_once():
    nvml = NvmlCollector("node1", module=FakeNvml([FakeGpu(utilization_gpu=90)]))
    clock = FakeClock()
    guard = Guard(nvml, clock=clock, sleep=clock.sleep)
    guard.own_load_ended([1], {GONE})  # another GPU's load does not excuse this one
    assert guard.before_run([0], 0.05) == "busy: GPU 0 utilization 90% is above the guard's 5%"
    assert clock.slept == 0.0


def test_a_live_foreign_process_is_busy_at_once_even_while_our_load_settles(foreign_process):
    gpu = FakeGpu(utilization_gpu=90, compute_pids=[GONE, foreign_process.pid])
    nvml = NvmlCollector("node1", module=FakeNvml([gpu]))
    clock = FakeClock()
    guard = Guard(nvml, clock=clock, sleep=clock.sleep)
    guard.own_load_ended([0], {GONE})
    assert guard.before_run([0], 0.05) == f"busy: 1 other process(es) on GPU 0 (pid {foreign_process.pid})"
    assert clock.slept == 0.0


def test_a_listed_pid_that_never_leaves_the_list_is_busy_when_the_settle_window_closes():
    nvml = NvmlCollector("node1", module=FakeNvml([FakeGpu(compute_pids=[GONE_TOO])]))  # another container's?
    clock = FakeClock()
    guard = Guard(nvml, clock=clock, sleep=clock.sleep)
    guard.own_load_ended([0], {GONE})
    assert guard.before_run([0], 0.05) == f"busy: 1 other process(es) on GPU 0 (pid {GONE_TOO})"
    assert clock.slept == pytest.approx(SETTLE_SECONDS)


def test_our_ended_workers_pids_count_as_ours_only_while_settling():
    nvml = NvmlCollector("node1", module=FakeNvml([FakeGpu(compute_pids=[GONE])]))
    clock = FakeClock()
    guard = Guard(nvml, clock=clock, sleep=clock.sleep)
    guard.own_load_ended([0], {GONE})
    assert guard.before_run([0], 0.05) is None
    assert clock.slept == 0.0
    clock.now += SETTLE_SECONDS + 1.0  # a PID still listed long after our worker ended is not ours
    assert guard.before_run([0], 0.05) == f"busy: 1 other process(es) on GPU 0 (pid {GONE})"


def test_the_daemons_own_process_is_not_another_process():
    nvml = NvmlCollector("node1", module=FakeNvml([FakeGpu(compute_pids=[os.getpid()])]))
    assert Guard(nvml).before_run([0], 0.05) is None


# ---------------------------------------------------------------------------- fail closed

def test_a_process_list_nvml_cannot_give_is_busy_not_idle(tmp_path):
    gpu = FakeGpu(errors={"nvmlDeviceGetComputeRunningProcesses": pynvml.NVML_ERROR_UNKNOWN})
    fake = FakeNvml([gpu])
    nvml = NvmlCollector("node1", module=fake)
    with pytest.raises(pynvml.NVMLError_Unknown):
        nvml.process_ids(0)
    expected = "cannot list processes on GPU 0: Unknown Error; treated as busy"
    assert Guard(nvml).before_run([0], 0.05) == expected
    executor = make_executor(tmp_path, fake)
    records = executor.execute(spec("w", [{}, {}]), {}, resolve(["cuda:0"], executor.nvml)[0])
    assert [(r.status, r.reason) for r in records] == [("skipped", expected)] * 2


def test_a_process_list_that_fails_during_a_run_stops_it():
    gpu = FakeGpu()
    nvml = NvmlCollector("node1", module=FakeNvml([gpu]))
    watch = Guard(nvml).watch([0])
    watch.attach(GONE)
    assert watch.check() is None
    gpu.errors["nvmlDeviceGetGraphicsRunningProcesses"] = pynvml.NVML_ERROR_NO_PERMISSION
    assert watch.check() == ("cannot list processes on GPU 0: Insufficient Permissions; "
                             "run stopped as if the GPU were busy")


# ---------------------------------------------------------------------------- real workers

class LiveProcesses:
    """What NVML shows while real worker processes use the GPU: their PIDs while they live and for
    ``linger`` s after (the driver tearing the context down), and utilization that stays up for
    ``tail`` s after they end (NVML's utilization is an average over its last sample period)."""

    def __init__(self, linger: float = 0.3, tail: float = 1.0):
        self.pids: set[int] = set()
        self.linger, self.tail = linger, tail
        self.last_alive: dict[int, float] = {}
        self.listings_with_ours = 0
        self._lock = threading.Lock()

    def on_progress(self, message: str) -> None:
        words = message.split()
        if "pids" in words:
            with self._lock:
                self.pids.update(int(w) for w in words[words.index("pids") + 1:])

    def _alive(self, pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def _listed(self) -> list[int]:
        now = time.monotonic()
        with self._lock:
            for pid in self.pids:
                if self._alive(pid):
                    self.last_alive[pid] = now
            return sorted(p for p, seen in self.last_alive.items() if now - seen < self.linger)

    def __iter__(self):
        listed = self._listed()
        if listed:
            self.listings_with_ours += 1
        return iter(listed)

    def utilization(self, handle):
        now = time.monotonic()
        self._listed()
        busy = any(now - seen < self.tail for seen in self.last_alive.values())
        return pynvml.c_nvmlUtilization_t(gpu=95 if busy else 0, memory=0)


@pytest.mark.slow
def test_guard_never_skips_a_case_because_of_sixdims_own_workers(tmp_path):
    """Three workers back to back (device, host-wide, device), each with a child process on the GPU:
    while each runs its processes are listed and utilization is 95%, and both linger after it ends."""
    live = LiveProcesses()
    fake = FakeNvml([FakeGpu(compute_pids=live)])  # type: ignore[arg-type]  # iterated like NVML's list
    fake.nvmlDeviceGetUtilizationRates = live.utilization
    executor = make_executor(tmp_path, fake)
    device = resolve(["cuda:0"], executor.nvml)[0]
    child = {"spawn_child": True, "seconds": 0.3}
    items = [(spec("first", [child, child]), {}), (spec("hostwide", [child], scope="host"), {}),
             (spec("last", [child]), {})]
    records = executor.execute_many(items, device, on_progress=live.on_progress)
    assert [(r.workload, r.status, r.reason) for r in records] == [
        ("first", "ok", ""), ("first", "ok", ""), ("hostwide", "ok", ""), ("last", "ok", "")]
    assert len({r.started_at for r in records}) == 3  # three workers, each right after the last
    assert len(live.pids) == 7  # 3 workers and the 4 cases' children were listed
    assert live.listings_with_ours > 0  # the guard looked while our processes were listed


@pytest.mark.slow  # real workers stopped by the guard's check every 2 s: about 2.5 s
def test_a_job_starting_mid_suite_stops_the_run_within_seconds(tmp_path, foreign_process):
    fake = FakeNvml([FakeGpu()])
    executor = make_executor(tmp_path, fake)
    appeared: list[float] = []

    def appear() -> None:
        fake.gpus[0].compute_pids = [foreign_process.pid]
        appeared.append(time.time())

    def progress(message: str) -> None:
        # a production job starts during the second (long) case, not as the first ends: the check at the first's
        # end would have to withhold it (it cannot tell when in the first case the job started)
        if message == "case 2/4: started":
            threading.Timer(0.5, appear).start()

    cases = [{"seconds": 0.3}, {"seconds": 30.0}, {"seconds": 0.3}, {"seconds": 0.3}]
    records = executor.execute(spec("suite", cases), {}, resolve(["cuda:0"], executor.nvml)[0], on_progress=progress)
    reason = (f"busy: 1 other process(es) on GPU 0 (pid {foreign_process.pid}) appeared during the run; "
              f"run stopped")
    assert [(r.status, r.reason) for r in records] == [("ok", "")] + [("skipped", reason)] * 3
    assert records[1].ended_at - appeared[0] < 8.0  # a check every 2 s, then SIGTERM: not the case's 30 s
    stored = list(History(tmp_path / "h.db"))
    assert [r.status for r in stored] == ["ok", "skipped", "skipped", "skipped"]


@pytest.mark.slow  # real workers stopped by the guard's check between cases: about 2.5 s
def test_a_foreign_job_between_cases_skips_the_rest_and_the_next_worker(tmp_path, foreign_process):
    fake = FakeNvml([FakeGpu()])
    executor = make_executor(tmp_path, fake)

    def progress(message: str) -> None:
        if message == "case 2/2: started":  # half a second in: the check at case 1's end finds the GPU clear
            threading.Timer(0.5, lambda: setattr(fake.gpus[0], "compute_pids", [foreign_process.pid])).start()

    # Case 2 is long: the next periodic check (2 s) sees the job; case 2 is stopped.
    items = [(spec("one", [{"seconds": 0.3}, {"seconds": 30.0}]), {}),
             (spec("two", [{}], scope="host"), {})]  # a second worker: refused before it starts
    records = executor.execute_many(items, resolve(["cuda:0"], executor.nvml)[0], on_progress=progress)
    assert [r.status for r in records] == ["ok", "skipped", "skipped"]
    assert f"pid {foreign_process.pid}" in records[1].reason and "during the run" in records[1].reason
    assert records[2].reason == f"busy: 1 other process(es) on GPU 0 (pid {foreign_process.pid})"


def test_during_a_run_a_listed_pid_without_a_process_is_foreign_only_if_it_stays_listed():
    gpu = FakeGpu(compute_pids=[GONE_TOO])  # ended before a check saw it: ours, or another container's
    nvml = NvmlCollector("node1", module=FakeNvml([gpu]))
    clock = FakeClock()
    watch = Guard(nvml, clock=clock, sleep=clock.sleep).watch([0])
    watch.attach(GONE)
    assert watch.check() is None
    clock.now += SETTLE_SECONDS - 0.1
    assert watch.check() is None
    clock.now += 0.1
    assert watch.check() == (f"busy: 1 other process(es) on GPU 0 (pid {GONE_TOO}) appeared during the run; "
                             f"run stopped" + PID_NAMESPACE_HINT.format(pids=GONE_TOO))
    assert "--pid=host" in watch.check() and "hostPID: true" in watch.check()  # what an agent in a container sees


WORKER_WITH_A_CHILD = ("import subprocess, sys, time; "
                      "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
                      "print(child.pid, flush=True); time.sleep(120)")


def test_the_worker_and_its_descendants_are_ours_during_a_run(foreign_process):
    """pytest plays the daemon; a stand-in worker (own session, like the runner's) has a child."""
    worker = subprocess.Popen([sys.executable, "-c", WORKER_WITH_A_CHILD], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        child = int(worker.stdout.readline())
        gpu = FakeGpu(compute_pids=[os.getpid(), worker.pid, child, foreign_process.pid])
        nvml = NvmlCollector("node1", module=FakeNvml([gpu]))
        watch = Guard(nvml).watch([0])
        watch.attach(worker.pid)
        assert watch.check() == (f"busy: 1 other process(es) on GPU 0 (pid {foreign_process.pid}) appeared "
                                 f"during the run; run stopped")
        gpu.compute_pids = [os.getpid(), worker.pid, child]
        assert watch.check() is None
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
