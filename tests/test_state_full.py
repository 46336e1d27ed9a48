"""A full state folder (issue 30, item 8): the device's lock file cannot be written (ENOSPC).

The daemon must say so (``/healthz`` 503 with the reason, ``sixdim_agent_can_run 0``), hold nothing
it opened on the way (no descriptor, no ``flock``: the next run is not "held by another process" and
never piles up behind APScheduler's ``max_instances``), and run the next scheduled suite once space
returns, with no restart.

The full disk is real: the state folder is a 1 MiB tmpfs, filled with a file (mounting needs root;
where it is refused that test skips and says so).  The lock's own error paths are also checked in this
process with the write failing by injection, which needs no root.
"""

from __future__ import annotations

import errno
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from sixdim.run import instance
from sixdim.run.devices import DeviceLocks, cpu_device
from sixdim.run.instance import DeviceFileLocks
from tests.conftest import free_port, small_tmpfs
from tests.daemon import Daemon, write_config

SUITE = f"""
[[suites]]
name = "tick"
interval_seconds = 1
devices = ["cpu"]
timeout_seconds = 30
workloads = [{{name = "command", params = {{argv = ["{sys.executable}", "-c", "print('tick')"], label = "tick"}}}}]
"""


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_lock_write_that_fails_closes_its_descriptor_and_the_next_try_takes_the_lock(tmp_path, monkeypatch):
    files = DeviceFileLocks(tmp_path, "test")
    locks = DeviceLocks(files)
    device = cpu_device()
    real = os.pwrite

    def full(fd: int, data: bytes, offset: int) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    before = _open_fds()
    monkeypatch.setattr(instance.os, "pwrite", full)
    with pytest.raises(OSError) as raised:
        with locks.hold([device], None):
            pass
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(tmp_path / "devices" / "cpu.lock")
    assert _open_fds() == before  # the descriptor holding the flock is closed
    monkeypatch.setattr(instance.os, "pwrite", real)
    with locks.hold([device], None) as held:  # not "held by another process": by no one
        assert held


def test_a_lock_held_by_a_leaked_descriptor_of_this_process_is_an_error_not_a_wait_for_ever(tmp_path):
    files = DeviceFileLocks(tmp_path, "test")
    files.POLL_SECONDS = 0.01
    leaked = instance.FileLock(files.folder / "cpu.lock")
    assert leaked.try_acquire({"pid": os.getpid(), "command": "test"})
    instance._HELD.discard(str(leaked.path))  # as a descriptor no lock object owns (closed by no one)
    stop = threading.Event()
    raised: list[BaseException] = []

    def acquire() -> None:
        try:
            files.acquire(cpu_device(), stop, None)
        except BaseException as exc:
            raised.append(exc)

    waiter = threading.Thread(target=acquire)
    try:
        waiter.start()
        waiter.join(timeout=5)
        assert not waiter.is_alive(), "still waiting for a lock its own process holds"
    finally:
        stop.set()
        waiter.join()
        leaked.release()
    assert len(raised) == 1 and isinstance(raised[0], instance.InstanceError), raised
    assert "held by this process" in str(raised[0])


@pytest.fixture
def small_state(tmp_path):
    with small_tmpfs(tmp_path / "state") as mount:
        yield mount


def _top_up(filler: Path) -> None:
    """Take every free byte of the file system (again: a lock file truncated on release frees its page)."""
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (65536, 4096, 512, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)


def _runs(daemon: Daemon) -> float:
    return sum(s.value for s in daemon.samples("sixdim_workload_runs_total"))


def _can_run(daemon: Daemon) -> float | None:
    found = daemon.samples("sixdim_agent_can_run")
    return found[0].value if found else None


def _until(what: str, check, daemon: Daemon, timeout: float = 10.0, during=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if during is not None:
            during()
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what} within {timeout} s: {daemon.log_path.read_text()[-3000:]}")


@pytest.mark.slow  # a real daemon on a state folder that fills and frees: about 6 s
def test_a_full_state_folder_fails_healthz_and_the_gauge_and_the_next_run_works_once_space_returns(
        tmp_path, cli_env, small_state):
    env = {**cli_env, "SIXDIM_STATE_DIR": str(small_state), "SIXDIM_LOG_LEVEL": "info"}
    config = write_config(tmp_path / "tick.toml", tmp_path / "history.db", SUITE)
    daemon = Daemon(config, free_port(), env, tmp_path / "serve.log")
    filler = small_state / "filler"
    try:
        daemon.wait_ready()
        _until("a first run", lambda: _runs(daemon) >= 1, daemon, timeout=20)
        assert _can_run(daemon) == 1.0

        _top_up(filler)
        status, body = _until("/healthz failing", lambda: (lambda r: r if r[0] == 503 else None)(
            daemon.get("/healthz")), daemon, during=lambda: _top_up(filler))
        assert "cannot run suites" in body and "No space left on device" in body and "cpu.lock" in body, body
        assert daemon.get("/livez") == (200, "ok\n")  # alive: a restart would not free the disk
        assert _until("sixdim_agent_can_run 0", lambda: _can_run(daemon) == 0.0, daemon, timeout=5)
        full_runs = _runs(daemon)

        filler.unlink()  # space returns: the next scheduled run works, no restart
        _until("a run after space returned", lambda: _runs(daemon) > full_runs + 1, daemon)
        assert daemon.get("/healthz") == (200, "ok\n")
        assert _until("sixdim_agent_can_run 1", lambda: _can_run(daemon) == 1.0, daemon, timeout=5)
        assert daemon.process.poll() is None
    finally:
        daemon.stop()
    log = daemon.log_path.read_text()
    assert "maximum number of running instances" not in log
    assert "No space left on device (ENOSPC)" in log
