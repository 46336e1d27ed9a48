"""The idle guard: never benchmark a GPU that someone else is using.

Operators run production jobs on these GPUs.  The guard asks NVML for the processes on a GPU and
for its utilization, and any sign of someone else's work skips the run with the reason recorded.
It must not mistake sixdim's own work for someone else's, and must not let a job that starts in
the middle of a suite share the GPU with it for long.  So it answers three questions:

**Before a worker starts** (:meth:`Guard.before_run`), on every GPU the worker will use:

1. Any process other than sixdim's own is on the GPU: busy, naming the PIDs.  sixdim's own are
   the daemon (``os.getpid()``) and, for :data:`SETTLE_SECONDS` after one of its workers on this
   GPU ended, that worker's processes: NVML may list a process for a moment while the driver
   tears its context down.  In that window a listed PID with no live process behind it (a child
   of our worker that the guard never saw, already gone) is given until the window closes to
   leave the list; a live process that is not ours is busy at once.
2. The process list cannot be read: busy ("cannot list processes on GPU N: ..."), never idle.  An
   unknown list is not an empty one.
3. Utilization above the threshold: busy, with one exception, the **settle rule**.  NVML's
   utilization is the share of its last sample period (1/6 s to 1 s, by GPU) in which a kernel
   ran, so right after sixdim's own worker ends, or is killed at a timeout while its kernels
   drain, the GPU reads busy from sixdim's own load.  Within :data:`SETTLE_SECONDS` of the end of
   sixdim's own worker on that GPU, the guard therefore polls (every :data:`SETTLE_POLL_SECONDS`)
   until utilization falls to the threshold, and calls the GPU busy only if it is still above when
   that window closes (or a foreign process appears meanwhile).  Utilization is kept as a check of
   its own, rather than trusting the process list alone after our own load, because a process in
   another container (another PID namespace, a VM) may not be listed at all.

**While a worker runs** (:class:`RunWatch`, called by the runner each time a case finishes, before that case
is recorded, every couple of seconds during a long case, and once more when the worker exits): the process
list only, because utilization is then our own worker's. Our own processes are the daemon, the worker, its
descendants and anything in its process group (the worker leads its own group), so the worker's CUDA context,
its all-reduce ranks and a user command it started are not "other processes". A listed PID with no live
process behind it is taken for one of ours being torn down until it has been listed for
:data:`SETTLE_SECONDS`. A foreign process makes the runner stop the worker: the running case and the rest are
recorded as ``skipped`` with the PIDs, and so are the cases that ended since the last check that found the GPU
clear (when in them the process started cannot be told).

PIDs are compared in the daemon's PID namespace; a listed PID that does not exist there (another
container's) is foreign, which errs towards leaving the GPU alone.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

import psutil

from sixdim.collectors.nvml import NvmlCollector

SETTLE_SECONDS = 5.0
"""After sixdim's own worker on a GPU ends, how long its load may still show in NVML's utilization
(a sample period of up to 1 s, plus a killed worker's kernels draining and its context torn down)."""

SETTLE_POLL_SECONDS = 0.25
"""How often utilization is read again while it settles."""


def is_own_process(pid: int, pids: Collection[int] = (), trees: Collection[int] = ()) -> bool:
    """Whether ``pid`` is one of ``pids``, or belongs to the process tree of one of ``trees``:
    that process itself, a descendant, or a member of the process group it leads."""
    if pid in pids or pid in trees:
        return True
    if not trees:
        return False
    try:
        if os.getpgid(pid) in trees:  # a worker leads its own group (start_new_session)
            return True
    except OSError:  # gone, or not in our PID namespace
        pass
    try:
        return any(parent.pid in trees for parent in psutil.Process(pid).parents())
    except psutil.Error:
        return False


def _shown(pids: list[int]) -> str:
    return ", ".join(str(p) for p in pids[:5]) + (" ..." if len(pids) > 5 else "")


def _exists(pid: int) -> bool:
    """Whether a live (not zombie) process has this PID in our namespace."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def list_processes(nvml: NvmlCollector, gpu_index: int, during_run: bool = False) -> tuple[list[int], str | None]:
    """The PIDs NVML lists on the GPU, or a busy reason if it cannot list them (fail closed)."""
    try:
        return nvml.process_ids(gpu_index), None
    except Exception as exc:  # NVMLError above all; anything else is no better a reason to run
        then = "run stopped as if the GPU were busy" if during_run else "treated as busy"
        return [], f"cannot list processes on GPU {gpu_index}: {exc}; {then}"


PID_NAMESPACE_HINT = ("; pid {pids} exists nowhere in this PID namespace: if sixdim runs in a container, give it "
                      "the host's (docker run --pid=host, Kubernetes hostPID: true), because NVML lists host PIDs "
                      "and sixdim cannot tell its own worker from another container's process otherwise")
"""Added to a during-the-run busy reason whose PIDs do not exist here: the sign of an agent in a container
of its own, whose own worker NVML lists under a host PID (before a run such a PID is more likely another
container's process, and the reason stays plain)."""


def _process_reason(gpu_index: int, foreign: list[int], during_run: bool = False) -> str:
    reason = f"busy: {len(foreign)} other process(es) on GPU {gpu_index} (pid {_shown(foreign)})"
    if during_run:
        reason += " appeared during the run; run stopped"
    invisible = [pid for pid in foreign if not _exists(pid)] if during_run else []
    return reason + (PID_NAMESPACE_HINT.format(pids=_shown(invisible)) if invisible else "")


def _utilization_reason(gpu_index: int, utilization: float, max_utilization: float) -> str:
    return (f"busy: GPU {gpu_index} utilization {utilization:.0%} is above the guard's "
            f"{max_utilization:.0%}")


@dataclass(frozen=True)
class _OwnLoad:
    ended: float  # time.monotonic() when the worker had ended
    pids: frozenset[int]


class Guard:
    """The guard of one agent: it remembers when its own workers ended on each GPU (thread-safe,
    shared by the scheduler's jobs).  See the module docstring for the rules."""

    def __init__(self, nvml: NvmlCollector, *, settle_seconds: float = SETTLE_SECONDS,
                 poll_seconds: float = SETTLE_POLL_SECONDS, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self._nvml = nvml
        self.settle_seconds = settle_seconds
        self._poll = poll_seconds
        self.clock = clock
        self._sleep = sleep
        self._recent: dict[int, _OwnLoad] = {}
        self._lock = threading.Lock()

    def own_load_ended(self, gpu_indices: Collection[int], pids: Collection[int]) -> None:
        """A worker of ours that used these GPUs (with these processes) has just ended."""
        load = _OwnLoad(self.clock(), frozenset(pids))
        with self._lock:
            for index in gpu_indices:
                self._recent[index] = load

    def before_run(self, gpu_indices: Collection[int], max_utilization: float) -> str | None:
        """Why a worker must not start on these GPUs, or None; may wait up to the settle window."""
        for index in gpu_indices:
            reason = self._idle_before(index, max_utilization)
            if reason is not None:
                return reason
        return None

    def _idle_before(self, index: int, max_utilization: float) -> str | None:
        with self._lock:
            recent = self._recent.get(index)
        settling = recent is not None and self.clock() < recent.ended + self.settle_seconds
        own = {os.getpid()} | (set(recent.pids) if settling and recent is not None else set())
        deadline = recent.ended + self.settle_seconds if settling and recent is not None else self.clock()
        while True:
            now = self.clock()
            final = now >= deadline
            pids, reason = list_processes(self._nvml, index)
            if reason is not None:
                return reason
            foreign = [pid for pid in pids if pid not in own]
            if foreign and (final or any(_exists(pid) for pid in foreign)):
                return _process_reason(index, foreign)
            if not foreign:
                utilization = self._nvml.sample(index).utilization_ratio
                if utilization is None or utilization <= max_utilization:
                    return None
                if final:
                    reason = _utilization_reason(index, utilization, max_utilization)
                    if settling:
                        reason += f", still {self.settle_seconds:g} s after sixdim's own run on it ended"
                    return reason
            self._sleep(min(self._poll, deadline - now))

    def watch(self, gpu_indices: Collection[int]) -> RunWatch:
        """A watch over one worker's run on these GPUs (see :class:`RunWatch`)."""
        return RunWatch(self, self._nvml, list(gpu_indices))


class RunWatch:
    """The guard while one worker runs: :meth:`check` is the runner's ``between_cases`` hook."""

    def __init__(self, guard: Guard, nvml: NvmlCollector, gpu_indices: list[int]):
        self._guard = guard
        self._nvml = nvml
        self._indices = gpu_indices
        self._worker: int | None = None
        self._seen_own: set[int] = set()
        self._gone_since: dict[int, float] = {}

    def attach(self, worker_pid: int) -> None:
        """The worker has started with this PID."""
        self._worker = worker_pid
        self._seen_own.add(worker_pid)

    def _is_own(self, pid: int) -> bool:
        trees = () if self._worker is None else (self._worker,)
        return is_own_process(pid, pids=(os.getpid(),), trees=trees)

    def check(self) -> str | None:
        """Why the worker must stop now (someone else's process is on one of its GPUs), or None.

        By the process list only: the utilization is our own worker's.  A listed PID with no live
        process behind it (a child of our worker that ended before any check saw it, its context
        not yet torn down) is foreign only once it has stayed listed for :data:`SETTLE_SECONDS`."""
        now = self._guard.clock()
        for index in self._indices:
            pids, reason = list_processes(self._nvml, index, during_run=True)
            if reason is not None:
                return reason
            foreign = []
            for pid in pids:
                if pid in self._seen_own or self._is_own(pid):
                    self._seen_own.add(pid)
                elif _exists(pid) or now - self._gone_since.setdefault(pid, now) >= self._guard.settle_seconds:
                    foreign.append(pid)
            if foreign:
                return _process_reason(index, foreign, during_run=True)
        return None

    def ended(self) -> None:
        """The worker has ended: start the settle window for its GPUs."""
        if self._worker is not None:
            self._guard.own_load_ended(self._indices, self._seen_own)
