"""One agent per host, one run per device: lock files in the state directory.

``sixdim serve`` holds two exclusive locks for its whole life: ``agent.lock`` in the state
directory (the host's devices: one daemon benchmarking them) and ``HISTORY.lock`` beside its
history (one daemon writing and exporting it).  A second daemon is refused with the first one's
PID, start time and address, read from the lock file.  Every run, the daemon's and
``sixdim run``'s, also holds its devices' locks (``devices/<device>.lock``) while its worker runs,
so an ad-hoc run and a scheduled suite never share a GPU: ``sixdim run`` waits for the daemon's
suite and says so, or with ``--no-wait`` refuses.

The locks are ``flock(2)`` locks: the kernel drops them when the process dies, however it dies, so
a stale lock file never blocks a successor; what is written in it is only for the message.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sixdim.core.files import make_folders

STATE_DIR_MODE = 0o700
LOCK_FILE_MODE = 0o600
DEVICE_LOCKS = "devices"


class InstanceError(RuntimeError):
    """Another agent or run holds what this one needs; the message names it."""


def ensure_state_dir(path: str | Path) -> Path:
    """The state directory (or a folder in it), created mode 0700 (with its parents, whatever the umask) if
    missing, and writable: anything else is an :class:`InstanceError` naming it and the ways to choose another."""
    folder = Path(path)
    try:
        make_folders(folder, STATE_DIR_MODE)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PermissionError(13, "not writable by this user")
    except OSError as exc:
        raise InstanceError(f"cannot use the state directory {folder}: {exc.strerror or exc}; choose a folder this "
                            f"user can write with --state-dir, SIXDIM_STATE_DIR or agent.state_dir") from None
    return folder


def _describe(holder: dict[str, Any]) -> str:
    """``PID 1234 (sixdim serve, since 2026-11-23 16:00:01 UTC, listening on 0.0.0.0:9480)``."""
    if not holder.get("pid"):
        return "another process"
    parts = [str(holder.get("command") or "sixdim")]
    if holder.get("since"):
        parts.append("since " + time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(holder["since"])))
    for key, label in (("listen", "listening on"), ("suite", "suite"), ("what", "running")):
        if holder.get(key):
            parts.append(f"{label} {holder[key]}")
    return f"PID {holder['pid']} ({', '.join(parts)})"


_HELD: set[str] = set()
"""The lock files some :class:`FileLock` of this process holds now (for telling a leaked descriptor from a holder)."""
_HELD_LOCK = threading.Lock()


class FileLock:
    """An exclusive ``flock`` on a file, with who holds it written inside."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._fd: int | None = None

    def try_acquire(self, holder: dict[str, Any]) -> bool:
        """Take the lock if it is free (True) and write ``holder`` into the file; False if taken."""
        # never through a link, never blocking on a FIFO: a planted lock file must not make root truncate another
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK,
                     LOCK_FILE_MODE)
        try:
            status = os.fstat(fd)
            if not stat.S_ISREG(status.st_mode) or status.st_uid != os.geteuid():
                raise OSError(f"{self.path}: not a regular file of this user: sixdim does not take it as its lock")
            if stat.S_IMODE(status.st_mode) != LOCK_FILE_MODE:  # open's mode less the umask (all of it, under 000)
                os.fchmod(fd, LOCK_FILE_MODE)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        try:  # a full disk (ENOSPC) must not leave the flock held by a descriptor no one closes
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(holder) + "\n").encode(), 0)
        except OSError as exc:
            os.close(fd)  # drops the flock: the next try starts afresh (and works once there is space)
            raise OSError(exc.errno, exc.strerror or str(exc), str(self.path)) from None  # named: which file
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        with _HELD_LOCK:
            _HELD.add(str(self.path))
        return True

    def holder(self) -> dict[str, Any]:
        """Who holds the lock, as its holder wrote it ({} if unreadable)."""
        try:
            return json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return {}

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with _HELD_LOCK:
                _HELD.discard(str(self.path))
            try:
                os.ftruncate(fd, 0)
            finally:
                os.close(fd)  # closing drops the flock


def _me(command: str, **extra: Any) -> dict[str, Any]:
    return {"pid": os.getpid(), "command": command, "since": time.time(), **extra}


class AgentLock:
    """The daemon's two locks (the host's state directory and its history), held until released."""

    def __init__(self, state_dir: str | Path, history: str | Path, *, listen: str = ""):
        folder = ensure_state_dir(state_dir)
        self._locks = [(FileLock(folder / "agent.lock"), f"the state directory {folder}"),
                       (FileLock(str(history) + ".lock"), f"the history {history}")]
        self._holder = _me("sixdim serve", listen=listen, history=str(history))

    def acquire(self) -> AgentLock:
        """Take both locks, or raise :class:`InstanceError` naming the other instance (holding none)."""
        for lock, what in self._locks:
            try:
                # the history's folder may not exist yet (History creates it later, with this mode):
                # the lock beside it needs it first
                make_folders(lock.path.parent, STATE_DIR_MODE)
                taken = lock.try_acquire(self._holder)
            except OSError as exc:  # a read-only or missing folder: say which file, not an errno
                self.release()
                raise InstanceError(f"cannot create the lock file {lock.path} of {what}: {exc.strerror or exc}; "
                                    f"choose writable places with --state-dir/SIXDIM_STATE_DIR and "
                                    f"--history/SIXDIM_HISTORY") from None
            if not taken:
                other = lock.holder()
                self.release()
                raise InstanceError(
                    f"another sixdim holds {what} ({lock.path}): {_describe(other)}; one agent per host and "
                    f"history: stop that one first (systemctl stop sixdim, or kill {other.get('pid', 'it')}), or "
                    f"give this one its own --state-dir and --history")
        return self

    def release(self) -> None:
        for lock, _ in self._locks:
            lock.release()


def device_lock_name(device: Any) -> str:
    """A device's lock file name: by UUID for a GPU (its index can change), ``cpu`` for the CPU."""
    if getattr(device, "type", "cpu") == "cpu":
        return "cpu.lock"
    ident = getattr(device, "uuid", "") or f"cuda-{device.index}"
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in ident) + ".lock"


class DeviceFileLocks:
    """The devices' lock files in the state directory, shared with every other sixdim process.

    Held per device by count: the daemon's suite holds its device and a host-wide run inside it
    asks again, from the same thread (the in-process lock in :class:`sixdim.run.devices.DeviceLocks`
    comes first and makes that safe)."""

    POLL_SECONDS = 0.25

    def __init__(self, state_dir: str | Path, command: str):
        self.folder = ensure_state_dir(Path(state_dir) / DEVICE_LOCKS)
        self._command = command
        self._held: dict[str, tuple[FileLock, int]] = {}
        self._guard = threading.Lock()

    def acquire(self, device: Any, stop: threading.Event | None, on_wait: Callable[[str], None] | None,
                wait: bool = True, what: str = "") -> bool:
        """Hold ``device``'s file lock (True), waiting while another process holds it unless ``stop``
        is set (False) or ``wait`` is False (:class:`InstanceError` naming the holder)."""
        name = device_lock_name(device)
        with self._guard:
            if name in self._held:
                lock, count = self._held[name]
                self._held[name] = (lock, count + 1)
                return True
        lock = FileLock(self.folder / name)
        me = _me(self._command, device=getattr(device, "name", name), what=what)
        told = False
        mine = 0
        while not lock.try_acquire(me):
            holder = lock.holder()
            # Held by this very process, though by none of its lock objects: a descriptor of ours that was never
            # closed.  Waiting would wait forever (and every later run with it): say so instead.  Twice in a
            # row, so another process's lock taken just before it wrote its own name is not mistaken for it.
            with _HELD_LOCK:
                ours = str(lock.path) in _HELD
            mine = mine + 1 if holder.get("pid") == os.getpid() and not ours else 0
            if mine >= 2:
                raise InstanceError(f"{lock.path} is held by this process ({os.getpid()}) through a descriptor no "
                                    f"run owns; restart sixdim to free it")
            if not wait:
                raise InstanceError(f"{getattr(device, 'name', name)} is in use by {_describe(holder)}; "
                                    f"run again when it is done, or leave out --no-wait to wait for it")
            if not told and on_wait is not None:
                on_wait(_describe(holder))
                told = True
            if stop is not None and stop.wait(self.POLL_SECONDS):
                return False
            if stop is None:
                time.sleep(self.POLL_SECONDS)
        with self._guard:
            self._held[name] = (lock, 1)
        return True

    def release(self, device: Any) -> None:
        name = device_lock_name(device)
        with self._guard:
            lock, count = self._held[name]
            if count > 1:
                self._held[name] = (lock, count - 1)
                return
            del self._held[name]
        lock.release()
