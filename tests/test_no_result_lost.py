"""No accepted result is lost when the history's disk is full at shutdown (issue 30, item 7).

A result the history cannot write (a full disk) waits in memory and in the spool beside the database,
which a full disk refuses too.  So the run's worker record in the state folder (another disk here, as
in the fault that found it) keeps what the history does not yet have, until it has it: a SIGTERM says
how many results wait and where, a SIGKILL loses nothing either, and the next start, with space back,
writes every one of them exactly once.

Everything is real: ``sixdim serve`` in a child, SQLite on a small tmpfs filled up (mounting needs root;
where it is refused the tests skip and say so, as tests/test_history_durability.py does), the state
folder on the test's own disk."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from sixdim.run.runner import STOPPING_REASON
from sixdim.store.history import History
from tests.conftest import free_port, small_tmpfs
from tests.daemon import Daemon, crash, write_config

QUICK = 5
"""The cases that end while the disk is full: each an accepted result."""


@pytest.fixture
def small_disk(tmp_path):
    with small_tmpfs(tmp_path / "disk") as mount:
        yield mount


def _fill(folder: Path) -> Path:
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:  # ENOSPC: full
        pass
    finally:
        os.close(fd)
    return filler


def _suite(name: str, marker: Path | None, run_at_start: bool) -> str:
    """``QUICK`` commands that end at once (one worker runs them all), then, with a ``marker``, one that
    runs until it is stopped (it creates ``marker`` first)."""
    def command(label: str, code: str) -> str:
        argv = json.dumps([sys.executable, "-c", code])
        return (f'{{name = "command", params = {{argv = {argv}, label = "{label}", '
                f'throughput_regex = "speed (\\\\d+)", formats = []}}}}')

    entries = [command(f"c{i}", "print('speed 100')") for i in range(QUICK)]
    if marker is not None:
        entries.append(command("hang", f"import time; open({str(marker)!r}, 'w').close(); time.sleep(600)"))
    return f"""
[[suites]]
name = "{name}"
interval_seconds = 3600
run_at_start = {str(run_at_start).lower()}
devices = ["cpu"]
timeout_seconds = 600
workloads = [{", ".join(entries)}]
"""


def _value(daemon: Daemon, name: str, **labels: str) -> float | None:
    try:
        found = [s.value for s in daemon.samples(name) if all(s.labels.get(k) == v for k, v in labels.items())]
    except OSError:
        return None
    return found[0] if found else None


def _wait(condition, what: str, daemon: Daemon, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if daemon.process.poll() is not None:
            raise AssertionError(f"daemon exited: {daemon.log_path.read_text()}")
        time.sleep(0.1)
    raise AssertionError(f"{what} not within {timeout} s: {daemon.log_path.read_text()}")


def _rows(history: Path, sql: str) -> list[tuple]:
    db = sqlite3.connect(f"file:{history}?mode=ro", uri=True)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


@pytest.mark.slow  # a real daemon stopped on a full disk and started again: about 5 s each
@pytest.mark.parametrize(("sig", "mid_suite"), [(signal.SIGTERM, True), (signal.SIGKILL, False),
                                                (signal.SIGKILL, True)],
                         ids=["SIGTERM-mid-suite", "SIGKILL-after-the-suite", "SIGKILL-mid-suite"])
def test_results_accepted_on_a_full_disk_survive_a_stop_and_land_once(small_disk, tmp_path, cli_env, sig, mid_suite):
    history, state = small_disk / "history.db", Path(cli_env["SIXDIM_STATE_DIR"])
    marker = tmp_path / "hanging" if mid_suite else None
    env = {**cli_env, "SIXDIM_LOG_LEVEL": "info", "SIXDIM_HISTORY": str(history)}
    config = write_config(tmp_path / "sixdim.toml", history, _suite("idle", None, run_at_start=False))
    daemon = Daemon(config, free_port(), env, tmp_path / "serve.log")
    filler = None
    try:
        daemon.wait_ready()  # the history is open (its -wal and -shm in place): now the disk fills up
        filler = _fill(small_disk)
        config.write_text(config.read_text() + _suite("steps", marker, run_at_start=True))
        daemon.process.send_signal(signal.SIGHUP)  # the new suite runs at once
        _wait(lambda: _value(daemon, "sixdim_history_pending_results") == QUICK, f"{QUICK} results pending",
              daemon)
        if mid_suite:
            _wait(lambda: marker.exists(), "the last case running", daemon)
        else:
            _wait(lambda: _value(daemon, "sixdim_suite_running", suite="steps") == 0.0, "the suite ended", daemon)
        assert _value(daemon, "sixdim_history_up") == 0.0
        assert _rows(history, "SELECT COUNT(*) FROM runs") == [(0,)]  # none written: all accepted, all waiting
        if sig == signal.SIGTERM:
            daemon.process.send_signal(signal.SIGTERM)
            assert daemon.stop(timeout=20) == 0
        else:
            crash(daemon.process)
            daemon.stop()
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()
            daemon.process.wait()
    kept = list((state / "workers").iterdir())  # the worker record, kept until the history has its results

    assert filler is not None
    filler.unlink()  # space again: the next start writes them
    quiet = write_config(tmp_path / "quiet.toml", history, _suite("steps", marker, run_at_start=False))
    successor = Daemon(quiet, free_port(), env, tmp_path / "serve2.log")
    try:
        successor.wait_ready()
        runs = _rows(history, "SELECT shape, status, uid FROM runs ORDER BY id")
        assert sorted(shape for shape, _, _ in runs) == [f"c{i}" for i in range(QUICK)], runs  # each once
        assert len({uid for _, _, uid in runs}) == QUICK
        assert {status for _, status, _ in runs} == {"ok"}
        interruptions = History(history).interruptions_after(0)
        if mid_suite:
            [interruption] = interruptions
            assert (interruption.suite, interruption.cases_done, interruption.cases_left) == ("steps", QUICK, 1)
            reason = "sixdim is shutting down" if sig == signal.SIGTERM else "the sixdim process that ran this suite"
            assert interruption.reason.startswith(f"interrupted: {reason}"), interruption.reason
        else:
            assert interruptions == []
        assert _value(successor, "sixdim_history_pending_results") == 0.0
        assert list((state / "workers").iterdir()) == []
        assert successor.stop() == 0
    finally:
        if successor.process.poll() is None:
            successor.process.kill()
    assert kept, "the worker record was removed before the history had its results"
    if sig == signal.SIGTERM:  # said at the stop: how many, why, and where they are kept
        log = daemon.log_path.read_text()
        found = re.search(r"stopping with (\d+) result\(s\) not yet written to (\S+) \((.*)\): kept in (\S+) ", log)
        assert found, log
        waiting = QUICK + 1  # the runs, and the suite run's interruption
        assert (int(found.group(1)), found.group(2), found.group(3)) == (waiting, str(history), "disk_full"), log
        assert found.group(4) in {str(folder) for folder in kept}, log


# ---------------------------------------------------------------------------- the same, in one process, without root

class _FullDisk(History):
    """A history whose disk is full while ``full`` is set: its writes fail as SQLite's do on a full disk, and
    its spool (beside it, on the same disk) cannot be written either."""

    full = False

    def _follow_path_locked(self) -> None:
        if self.full:
            raise sqlite3.OperationalError("database or disk is full")
        super()._follow_path_locked()

    def _spool(self, record) -> None:
        if not self.full:
            return super()._spool(record)
        spool, self._spool_file.path = self._spool_file.path, self.path.parent / "full" / "spool"  # ENOENT
        try:
            super()._spool(record)
        finally:
            self._spool_file.path = spool


def _executor(history: History, state: Path):
    from sixdim.collectors.nvml import NvmlCollector
    from sixdim.run.executor import Executor

    return Executor(hostname="h", history=history, nvml=NvmlCollector("h"), rapl=None, state_dir=str(state))


def test_a_worker_record_keeps_what_the_history_cannot_take_until_it_can(tmp_path):
    from sixdim.run.devices import Device
    from tests.guard_workloads import spec

    cpu, state, path = Device("cpu", model_name="Test CPU"), tmp_path / "state", tmp_path / "h.db"
    naps = spec("naps", [{"seconds": 0.01}, {"seconds": 0.01}])
    history = _FullDisk(path)
    history.full = True
    executor = _executor(history, state)
    records = executor.execute(naps, {}, cpu, suite="s")
    assert [r.status for r in records] == ["ok", "ok"] and history.waiting().results == 2
    [(folder, count)] = executor.kept()
    assert count == 2 and (folder / "unsaved.jsonl").exists()

    history.full = False  # space again, while the agent runs: the next try writes them and lets the record go
    executor.release_saved()
    assert executor.kept() == [] and list((state / "workers").iterdir()) == []
    assert [r.uid for r in History(path)] == [r.uid for r in records]


def test_a_successor_writes_what_a_dead_agent_kept_once(tmp_path):
    from sixdim.run.devices import Device
    from tests.guard_workloads import spec

    cpu, state, path = Device("cpu", model_name="Test CPU"), tmp_path / "state", tmp_path / "h.db"
    history = _FullDisk(path)
    history.full = True
    executor = _executor(history, state)
    first = executor.execute(spec("naps", [{"seconds": 0.01}, {"seconds": 0.01}]), {}, cpu, suite="s")
    executor.stop.set()  # a stop before the next worker starts: the suite run's interruption, kept too
    executor.execute_many([(spec("more", [{"seconds": 0.01}]), {})], cpu, suite="t")
    assert history.waiting().results == 3
    [(folder, count)] = executor.kept()  # one folder keeps them all, however many runs wait
    assert count == 3 and len(list((state / "workers").iterdir())) == 1
    for journal, _ in executor._kept:  # the agent dies: its locks go, its memory with them
        journal.release()

    successor = _executor(History(path), state)
    recovered = successor.recover_left_behind()
    assert sorted(r.uid for r in recovered) == sorted(r.uid for r in first)
    assert list((state / "workers").iterdir()) == []
    again = _executor(History(path), state)  # nothing left to write twice
    assert again.recover_left_behind() == []
    assert sorted(r.uid for r in History(path)) == sorted(r.uid for r in first)
    [interruption] = History(path).interruptions_after(0)
    assert (interruption.suite, interruption.cases_left, interruption.reason) == ("t", 1, STOPPING_REASON)
