"""Processes of a run, found through Linux's /proc, and stopped whole.

A worker runs in its own process group, but a group is not enough: a child that calls
``setsid`` leaves it, and a process whose parent died is re-parented away from the worker.  So a
run's processes are found every way there is, and stopped with all of them:

- **by descent**: the worker is a *child subreaper* (``PR_SET_CHILD_SUBREAPER``, set by the worker
  itself), so while it lives every process it started, however detached, stays below it in the
  parent links of /proc; and below every process found any other way (a ``setsid`` child that
  cleared its environment, ``env -i``, is still its parent's child);
- **by tag**: every worker is started with :data:`TAG_VARIABLE` in its environment, which its
  children inherit, so a process that outlived the worker (or the whole agent) is still found by
  reading ``/proc/PID/environ``.  An environment is whatever its process's owner wrote, so the tag
  is believed only on a process of this agent's own user (real and effective user ID, read from
  ``/proc/PID/status`` through the same open ``/proc/PID`` as the environment): a root agent reads
  every user's environment, and another user's process that copies a run's tag is logged once and
  left alone (unless it is found another way: below the worker, say, after a workload changed user);
- **by memory**: each process found is remembered for its run (PID and start time), so one whose
  parent dies later (re-parented to init, out of every tree and, with ``env -i``, untagged) is
  still the run's when it is stopped;
- **by cgroup**, where the host lets this process make one (cgroup v2, found in
  ``/proc/self/mountinfo``: ``/sys/fs/cgroup``, or ``/sys/fs/cgroup/unified`` on a hybrid host):
  each process found is moved into the run's own cgroup (:func:`contain`, a child of the agent's,
  ``sixdim-run-<tag>``), and whatever it starts from then on is born there, whatever it does to its
  session, environment or signal handlers.  Stopping a run kills its cgroup (``cgroup.kill``, or
  every PID in ``cgroup.procs`` on kernels before 5.14) and removes it.  A worker that joins its run's
  cgroup as it starts (:func:`join`) is contained from its first process on.  Where no cgroup can be
  made (a read-only ``/sys/fs/cgroup`` in a container, no cgroup v2, not root), the other ways stand
  alone; on a systemd host the service's cgroup (``KillMode=control-group``) covers what they miss.

:func:`stop_run` freezes what it finds (``SIGSTOP``: a frozen process cannot fork a new one), looks
again until nothing new appears, then sends ``SIGKILL``.  A process is identified by its PID *and*
its start time (:func:`start_time`), so a PID reused by an unrelated process is never signalled.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import signal
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

PROC = "/proc"
TAG_VARIABLE = "SIXDIM_WORKER_TAG"
"""The environment variable that marks a run's processes (its value names the run)."""

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36

CGROUP_PREFIX = "sixdim-run-"
"""A run's cgroup is ``<the agent's cgroup>/sixdim-run-<tag>``."""
CGROUP_EMPTY_SECONDS = 2.0
"""How long a killed run's cgroup is given to empty before it is removed (it is left for the next stop otherwise)."""

log = logging.getLogger(__name__)

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


def not_ours(pid: int, proc_fd: int | None = None) -> str:
    """Why process ``pid`` is not this process's user's (empty when it is): its real or effective user
    ID is another (a set-user-ID program started by another user has one of each), or its status cannot
    be read.  ``proc_fd``: an open ``/proc/PID`` to read it through (so that the answer is about the very
    process whose other files are read through it, even if the PID is reused meanwhile)."""
    try:
        if proc_fd is None:
            with open(f"{PROC}/{pid}/status", "rb") as handle:
                status = handle.read()
        else:
            status = _read_in(proc_fd, "status")
        line = next(line for line in status.splitlines() if line.startswith(b"Uid:"))
        real, effective = (int(field) for field in line.split()[1:3])
    except (OSError, StopIteration, ValueError) as exc:
        return f"its owner cannot be read ({getattr(exc, 'strerror', None) or exc})"
    mine = os.geteuid()
    for uid in (real, effective):
        if uid != mine:
            return f"owned by uid {uid}, not {mine}"
    return ""


def _read_in(proc_fd: int, name: str) -> bytes:
    """A file of the process whose ``/proc/PID`` is open as ``proc_fd`` (ESRCH once that process is gone)."""
    with open(os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc_fd), "rb") as handle:
        return handle.read()


def _scan_tag(tag: str, table: Iterable[Process] | None) -> tuple[list[Process], list[tuple[Process, str]]]:
    """The processes carrying ``SIXDIM_WORKER_TAG=tag``: this user's, and the others' with why not ours."""
    needle = f"{TAG_VARIABLE}={tag}".encode()
    ours: list[Process] = []
    others: list[tuple[Process, str]] = []
    for process in processes() if table is None else table:
        if process.pid == os.getpid():
            continue
        try:
            proc_fd = os.open(f"{PROC}/{process.pid}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            continue  # gone
        try:
            if needle not in _read_in(proc_fd, "environ").split(b"\0"):
                continue
            why = not_ours(process.pid, proc_fd)
        except OSError:
            continue  # gone, or an environment this user cannot read: not ours either way
        finally:
            os.close(proc_fd)
        if why:
            others.append((process, why))
        else:
            ours.append(process)
    return ours, others


def tagged(tag: str, table: Iterable[Process] | None = None) -> list[Process]:
    """This user's processes whose environment has ``SIXDIM_WORKER_TAG=tag``.  Another user's process
    carrying the tag is not the run's: anyone can put any tag in their own environment (see the module)."""
    return _scan_tag(tag, table)[0]


_refused: dict[str, set[tuple[int, int]]] = {}
"""Per tag, the other users' processes already logged as carrying it (PID and start time): one line each."""


def _log_refused(tag: str, others: list[tuple[Process, str]], found: dict[int, Process]) -> None:
    """One line for each other user's process carrying ``tag`` that is not the run's any other way."""
    for process, why in others:
        if process.pid in found:
            continue
        with _remembered_lock:
            seen = _refused.setdefault(tag, set())
            if (process.pid, process.start_time) in seen:
                continue
            seen.add((process.pid, process.start_time))
        log.warning("PID %d carries run %s's tag (%s=%s) but is %s: not the run's, not signalled", process.pid,
                    tag, TAG_VARIABLE, tag, why)


def send(process: Process, sig: int) -> bool:
    """Signal a process only if it is still the one that was found (same start time)."""
    if start_time(process.pid) != process.start_time:
        return False
    try:
        os.kill(process.pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


_remembered: dict[str, dict[int, Process]] = {}
"""Each run's processes seen so far (by tag): found again while alive with the same start time."""
_remembered_lock = threading.Lock()


def run_processes(root: int | None, tag: str | None) -> list[Process]:
    """A run's live processes: ``root`` (the worker) and below it, any carrying ``tag``, any seen before
    for ``tag``, any in its cgroup, and everything below each of those.  Each is remembered for ``tag``
    and, where cgroups can be used, moved into the run's cgroup (see the module)."""
    table = processes()
    by_pid = {process.pid: process for process in table}
    found: dict[int, Process] = {}
    if root is not None and root in by_pid:
        found[root] = by_pid[root]
    others: list[tuple[Process, str]] = []
    if tag:
        ours, others = _scan_tag(tag, table)
        for process in ours:
            found[process.pid] = process
        with _remembered_lock:
            earlier = list(_remembered.get(tag, {}).values())
        for process in earlier:
            now = by_pid.get(process.pid)
            if now is not None and now.start_time == process.start_time:
                found[now.pid] = now
        for pid in cgroup_pids(tag):
            if pid in by_pid:
                found[pid] = by_pid[pid]
    children: dict[int, list[Process]] = {}
    for process in table:
        children.setdefault(process.ppid, []).append(process)
    queue = list(found) + ([root] if root is not None and root not in found else [])
    while queue:  # everything below what was found, however it got there
        for child in children.get(queue.pop(), []):
            if child.pid not in found:
                found[child.pid] = child
                queue.append(child.pid)
    found.pop(os.getpid(), None)
    if others:
        _log_refused(tag or "", others, found)
    live = [p for p in found.values() if p.state not in ("Z", "X")]
    if tag:
        with _remembered_lock:
            _remembered.setdefault(tag, {}).update((p.pid, p) for p in live)
        contain(tag, live)
    return live


def stop_run(root: int | None, tag: str | None, *, keep_root: bool = False) -> list[int]:
    """Freeze then kill every live process of a run; returns their PIDs.  The run's cgroup, where it
    has one, is killed whole and removed (not with ``keep_root``: the worker itself may be in it).

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
    if tag and not keep_root:
        kill_cgroup(tag)  # what was born in it meanwhile, whatever it is
    for process in frozen.values():
        send(process, signal.SIGKILL)
    if tag and not keep_root:
        remove_cgroup(tag)
        with _remembered_lock:
            _remembered.pop(tag, None)  # every process of the run is killed: nothing left to remember
            _refused.pop(tag, None)
    return sorted(frozen)


# ----------------------------------------------------------------------------- a cgroup per run

_cgroups: str | None = None
"""The folder this process makes runs' cgroups in ("" once found unusable, with :data:`cgroups_unusable`)."""
cgroups_unusable = ""
"""Why runs get no cgroup of their own here ("" while they do, or before the first try)."""
_cgroups_lock = threading.Lock()


def _cgroup2_mount() -> str | None:
    """Where cgroup v2 is mounted (``/sys/fs/cgroup``, or ``.../unified`` on a hybrid host), or None."""
    try:
        with open("/proc/self/mountinfo") as handle:
            for line in handle:
                left, _, right = line.partition(" - ")
                if right.split()[:1] == ["cgroup2"]:
                    return left.split()[4]
    except (OSError, IndexError):
        pass
    return None


def _own_cgroup() -> str | None:
    """This process's cgroup v2 path (``0::/...`` in ``/proc/self/cgroup``), or None."""
    try:
        with open("/proc/self/cgroup") as handle:
            for line in handle:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        pass
    return None


def cgroup_base() -> str | None:
    """The folder runs' cgroups are made in (this process's own cgroup v2), or None where there is none,
    or where this process is itself in a run's cgroup (a worker: the agent makes and removes them)."""
    global _cgroups, cgroups_unusable
    with _cgroups_lock:
        if _cgroups is None:
            mount, own = _cgroup2_mount(), _own_cgroup()
            if mount is None or own is None or own.endswith(" (deleted)"):
                _cgroups, cgroups_unusable = "", "no cgroup v2 mounted here" if mount is None else "no cgroup v2 path"
            elif os.path.basename(own).startswith(CGROUP_PREFIX):
                _cgroups, cgroups_unusable = "", "this process is in a run's cgroup"
            else:
                _cgroups = os.path.join(mount, own.lstrip("/"))
        return _cgroups or None


def cgroup_folder(tag: str) -> str | None:
    """The run's cgroup folder (whether it exists or not), or None where runs get none."""
    base = cgroup_base()
    if base is None or not tag:
        return None
    return os.path.join(base, CGROUP_PREFIX + "".join(c if c.isalnum() or c in "-_." else "_" for c in tag))


def _unusable(why: str) -> None:
    global _cgroups, cgroups_unusable
    with _cgroups_lock:
        if _cgroups:
            log.info("runs get no cgroup of their own (%s): their processes are found and stopped by process group, "
                     "descent, tag and memory", why)
        _cgroups, cgroups_unusable = "", why


def contain(tag: str, processes_: Iterable[Process]) -> bool:
    """Move ``processes_`` into the run's cgroup, made if missing; False where there is none to move into."""
    folder = cgroup_folder(tag)
    if folder is None:
        return False
    if TAG_VARIABLE in os.environ:  # a run's own process (a worker) uses the cgroup its agent made, never makes one
        if not os.path.isdir(folder):
            return False
    elif not prepare(tag):
        return False
    moved = True
    for process in processes_:
        if start_time(process.pid) != process.start_time:
            continue
        try:
            with open(os.path.join(folder, "cgroup.procs"), "w") as handle:
                handle.write(str(process.pid))
        except OSError as exc:
            if exc.errno != errno.ESRCH:  # gone meanwhile is fine; anything else: this one stays where it is
                moved = False
    return moved


def prepare(tag: str) -> bool:
    """Make the run's cgroup (the agent's side: before its worker starts, or at the first look at the run);
    False where runs get none here."""
    folder = cgroup_folder(tag)
    if folder is None:
        return False
    try:
        os.mkdir(folder, 0o755)
    except FileExistsError:
        pass
    except OSError as exc:  # read-only (a container), not permitted, no such folder: use the other ways
        _unusable(f"cannot make a cgroup in {os.path.dirname(folder)}: {exc.strerror or exc}")
        return False
    return True


def join(tag: str) -> bool:
    """Move this process (a worker, as it starts, before it starts anything) into its run's cgroup, which its
    agent made (:func:`prepare`, ``<the agent's cgroup>/sixdim-run-<tag>``); False where there is none."""
    me = read_stat(os.getpid())
    return me is not None and contain(tag, [me])


def cgroup_pids(tag: str) -> list[int]:
    """The PIDs in the run's cgroup (none where it has none)."""
    folder = cgroup_folder(tag)
    if folder is None:
        return []
    try:
        with open(os.path.join(folder, "cgroup.procs")) as handle:
            return [int(word) for word in handle.read().split()]
    except (OSError, ValueError):
        return []


def kill_cgroup(tag: str) -> bool:
    """Kill every process in the run's cgroup (``cgroup.kill``; before Linux 5.14, each PID it lists until
    none is left); False where the run has no cgroup."""
    folder = cgroup_folder(tag)
    if folder is None or not os.path.isdir(folder):
        return False
    try:
        with open(os.path.join(folder, "cgroup.kill"), "w") as handle:
            handle.write("1")
        return True
    except OSError:
        pass
    for _ in range(FREEZE_ROUNDS):
        pids = [pid for pid in cgroup_pids(tag) if pid != os.getpid()]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)  # in the run's cgroup: the run's, whatever its PID's history
            except OSError:
                pass
        time.sleep(0.01)
    return True


def remove_cgroup(tag: str) -> None:
    """Remove the run's cgroup once it is empty (within :data:`CGROUP_EMPTY_SECONDS`; else the next stop does)."""
    folder = cgroup_folder(tag)
    if folder is None:
        return
    deadline = time.monotonic() + CGROUP_EMPTY_SECONDS
    while True:
        try:
            os.rmdir(folder)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() >= deadline:
                log.warning("could not remove the run's cgroup %s: %s", folder, exc.strerror or exc)
                return
        time.sleep(0.02)


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
