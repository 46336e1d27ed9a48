"""Processes of a run, found through Linux's /proc, and stopped whole.

A worker runs in its own process group, but a group is not enough: a child that calls
``setsid`` leaves it, and a process whose parent died is re-parented away from the worker.  So a
run's processes are found two ways, and stopped with both:

- **by descent**: the worker is a *child subreaper* (``PR_SET_CHILD_SUBREAPER``, set by the worker
  itself), so while it lives every process it started, however detached, stays below it in the
  parent links of /proc;
- **by tag**: every worker is started with :data:`TAG_VARIABLE` in its environment, which its
  children inherit, so a process that outlived the worker (or the whole agent) is still found by
  reading ``/proc/PID/environ``.  A child that scrubs its environment *and* outlives its worker is
  the one case neither finds; on a systemd host the service's cgroup (``KillMode=control-group``)
  covers it.

:func:`stop_run` freezes what it finds (``SIGSTOP``: a frozen process cannot fork a new one), looks
again until nothing new appears, then sends ``SIGKILL``.  A process is identified by its PID *and*
its start time (:func:`start_time`), so a PID reused by an unrelated process is never signalled.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass

PROC = "/proc"
TAG_VARIABLE = "SIXDIM_WORKER_TAG"
"""The environment variable that marks a run's processes (its value names the run)."""

PR_SET_CHILD_SUBREAPER = 36

FREEZE_ROUNDS = 20
"""How many times :func:`stop_run` looks for new processes while freezing (each round freezes what
it found; a fork bomb cannot outrun a frozen parent)."""


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    state: str  # R, S, D, Z, T...
    start_time: int  # clock ticks after boot: with the PID, the process's identity


def read_stat(pid: int) -> Process | None:
    """A process's parent, state and start time from ``/proc/PID/stat``; None if it is gone.

    The command name is between parentheses and may itself hold spaces and parentheses, so the
    fields are read after the *last* closing parenthesis."""
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as handle:
            text = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    try:
        return Process(pid, int(fields[1]), fields[0], int(fields[19]))
    except (IndexError, ValueError):
        return None


def processes() -> list[Process]:
    """Every process this one can see."""
    found = []
    for name in os.listdir(PROC):
        if name.isdigit():
            process = read_stat(int(name))
            if process is not None:
                found.append(process)
    return found


def start_time(pid: int) -> int | None:
    process = read_stat(pid)
    return None if process is None else process.start_time


def alive(pid: int, started: int | None = None) -> bool:
    """Whether ``pid`` is a live process (not a zombie) and, given ``started``, the same one."""
    process = read_stat(pid)
    if process is None or process.state in ("Z", "X"):
        return False
    return started is None or process.start_time == started


def descendants(root: int, table: Iterable[Process] | None = None) -> list[Process]:
    """The processes below ``root`` in the parent links (not ``root`` itself)."""
    table = list(processes() if table is None else table)
    children: dict[int, list[Process]] = {}
    for process in table:
        children.setdefault(process.ppid, []).append(process)
    found, queue = [], [root]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child.pid)
    return found


def tagged(tag: str, table: Iterable[Process] | None = None) -> list[Process]:
    """The processes whose environment has ``SIXDIM_WORKER_TAG=tag`` (other users' processes,
    whose environment this one cannot read, are not ours anyway)."""
    needle = f"{TAG_VARIABLE}={tag}".encode()
    found = []
    for process in processes() if table is None else table:
        if process.pid == os.getpid():
            continue
        try:
            with open(f"{PROC}/{process.pid}/environ", "rb") as handle:
                environ = handle.read()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(process)
    return found


def send(process: Process, sig: int) -> bool:
    """Signal a process only if it is still the one that was found (same start time)."""
    if start_time(process.pid) != process.start_time:
        return False
    try:
        os.kill(process.pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def run_processes(root: int | None, tag: str | None) -> list[Process]:
    """A run's live processes: ``root`` (the worker) and below it, and any carrying ``tag``."""
    table = processes()
    found: dict[int, Process] = {}
    if root is not None:
        for process in table:
            if process.pid == root:
                found[root] = process
        for process in descendants(root, table):
            found[process.pid] = process
    if tag:
        for process in tagged(tag, table):
            found[process.pid] = process
    found.pop(os.getpid(), None)
    return [p for p in found.values() if p.state not in ("Z", "X")]


def stop_run(root: int | None, tag: str | None, *, keep_root: bool = False) -> list[int]:
    """Freeze then kill every live process of a run; returns their PIDs.

    ``keep_root``: leave ``root`` itself alone (a worker cleaning up below itself)."""
    frozen: dict[int, Process] = {}
    for _ in range(FREEZE_ROUNDS):
        new = [p for p in run_processes(root, tag) if p.pid not in frozen and not (keep_root and p.pid == root)]
        if not new:
            break
        for process in new:
            if send(process, signal.SIGSTOP):
                frozen[process.pid] = process
            else:
                frozen.setdefault(process.pid, process)  # gone already: remember, do not look again
    for process in frozen.values():
        send(process, signal.SIGKILL)
    return sorted(frozen)


def wait_gone(pids: Iterable[int], timeout: float) -> list[int]:
    """Wait until none of ``pids`` is alive (a killed process whose parent has not reaped it is a
    zombie: dead); returns those still alive at the timeout."""
    pids = list(pids)
    deadline = time.monotonic() + timeout
    while True:
        left = [pid for pid in pids if alive(pid)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.02)


def prctl(option: int, value: int) -> bool:
    """Linux ``prctl(2)``; False where it is not available (not Linux) or refused."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
