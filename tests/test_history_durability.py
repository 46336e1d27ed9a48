"""No result lost: the history under a lock held by another process, a full disk, a read-only
file system, a corrupt file, and a restart with results still spooled; and retention that keeps
trends and counts.

Everything is real: SQLite, a second process holding the lock, a small tmpfs for the full and the
read-only disk (mounting needs root; where it is refused those tests skip and say so).  The
read-only case starts the history on a mount already read-only: Linux refuses to remount a file
system read-only while a file on it is open for writing ("mount point is busy").
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from sixdim.http.board import Board
from sixdim.store.errors import HistoryError, error_reason
from sixdim.store.history import History
from tests.conftest import small_tmpfs
from tests.helpers import Locker, make_record


def rows(path: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT uid, status FROM runs ORDER BY id").fetchall()


def test_a_locked_database_queues_results_shows_them_and_writes_them_once_when_released(tmp_path):
    path = tmp_path / "h.db"
    history = History(path)
    history.add(make_record(seconds=1.0))
    board = Board.from_history(history)
    locker = Locker(path)
    try:
        started = time.monotonic()
        record = make_record(seconds=2.0)
        assert history.add(record) is None          # waited briefly, then queued: no exception
        assert time.monotonic() - started < 5.0       # the short busy timeout, not SQLite's default
        health = history.health()
        assert (health.up, health.pending) == (False, 1)
        assert health.errors.get("locked", 0) >= 1
        assert history.spool_path.exists()            # a killed daemon would not lose it either
        board.catch_up(history)                       # shows the queued result meanwhile
        assert [r.figures["seconds"] for r in board.latest()] == [2.0]
        assert dict((r.status, n) for r, n in board.counts()) == {"ok": 2}
    finally:
        locker.release()
    board.catch_up(history)                           # retries, then reads the row it wrote
    assert history.health().pending == 0 and history.health().up
    assert record.id is not None
    assert [uid for uid, _ in rows(path)].count(record.uid) == 1
    assert dict((r.status, n) for r, n in board.counts()) == {"ok": 2}  # counted once, not again
    assert not history.spool_path.exists()


@pytest.mark.slow
def test_beyond_its_bound_the_queue_drops_the_oldest_and_counts_them(tmp_path):
    """A database locked for long: at most max_pending results wait; the oldest go first, each
    counted as reason "dropped" (what SixdimHistoryDataLoss alerts on), the newest are written."""
    path = tmp_path / "h.db"
    history = History(path, max_pending=3)
    history.add(make_record(seconds=1.0))
    locker = Locker(path)
    try:
        for seconds in (2.0, 3.0, 4.0, 5.0, 6.0):
            assert history.add(make_record(seconds=seconds)) is None
        health = history.health()
        assert health.pending == 3 and health.errors.get("dropped", 0) == 2
        assert [r.figures["seconds"] for r in history.pending()] == [4.0, 5.0, 6.0]
    finally:
        locker.release()
    assert history.retry_pending() == 0
    assert sorted(r.figures["seconds"] for r in history) == [1.0, 4.0, 5.0, 6.0]
    assert history.health().errors.get("dropped", 0) == 2


@pytest.mark.slow
def test_a_restart_writes_what_the_spool_kept_and_never_twice(tmp_path):
    path = tmp_path / "h.db"
    history = History(path)
    locker = Locker(path)
    try:
        waiting = [make_record(seconds=float(i + 1)) for i in range(3)]
        for record in waiting:
            history.add(record)
        assert history.health().pending == 3
        spooled = history.spool_path.read_text()
    finally:
        locker.release()
    history.close()                                   # the daemon dies before it retries
    reopened = History(path)                          # the next start reads the spool and writes it
    assert reopened.health().pending == 0
    assert sorted(uid for uid, _ in rows(path)) == sorted(r.uid for r in waiting)
    history.spool_path.write_text(spooled)            # a spool left behind after its rows were written
    History(path)
    assert len(rows(path)) == 3                       # the uid is unique: stored once


def test_a_corrupt_database_is_moved_aside_and_a_new_one_started(tmp_path):
    path = tmp_path / "h.db"
    path.write_bytes(b"this is not an SQLite database, it is what a bad disk left" * 100)
    history = History(path)
    assert history.moved_aside is not None and history.moved_aside.exists()
    assert history.moved_aside.name.startswith("h.db.corrupt-")
    assert history.health().errors == {"corrupt": 1}
    history.add(make_record(seconds=1.0))
    assert len(rows(path)) == 1


def test_a_database_that_cannot_be_opened_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where a folder should be")
    with pytest.raises(HistoryError, match="history"):
        History(blocker / "h.db")


def test_error_reasons_are_short_and_stable():
    assert error_reason(sqlite3.OperationalError("database is locked")) == "locked"
    assert error_reason(sqlite3.OperationalError("database or disk is full")) == "disk_full"
    assert error_reason(sqlite3.OperationalError("attempt to write a readonly database")) == "read_only"
    assert error_reason(sqlite3.DatabaseError("database disk image is malformed")) == "corrupt"


@pytest.fixture
def small_disk(tmp_path):
    with small_tmpfs(tmp_path / "disk") as mount:
        yield mount


def _fill(folder: Path) -> Path:
    filler = folder / "filler"
    with open(filler, "wb") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError:
            pass
    return filler


def test_a_full_disk_keeps_results_in_memory_and_writes_them_when_space_returns(small_disk):
    history = History(small_disk / "h.db")
    history.add(make_record(seconds=1.0))
    filler = _fill(small_disk)
    big = make_record(seconds=2.0)
    big.details["rounds"] = list(range(100_000))      # a row that needs new pages
    history.add(big)
    health = history.health()
    assert health.pending == 1 and not health.up
    assert set(health.errors) & {"disk_full", "io"}, health.errors
    board = Board.from_history(history)
    assert {r.figures["seconds"] for r in board.latest()} == {2.0}
    filler.unlink()
    board.catch_up(history)
    assert history.health().pending == 0 and history.health().up
    assert len(rows(small_disk / "h.db")) == 2
    assert dict((r.status, n) for r, n in board.counts()) == {"ok": 2}


def test_pruning_keeps_daily_medians_and_the_run_counts(tmp_path):
    history = History(tmp_path / "h.db")
    day = 86400.0
    now = 1_000 * day
    for i, seconds in enumerate([1.0, 3.0, 2.0]):     # three runs on one old day: median 2.0
        history.add(make_record(seconds=seconds, ended_at=now - 100 * day + i))
    history.add(make_record("failed", ended_at=now - 100 * day + 5))
    history.add(make_record(seconds=9.0, ended_at=now - 100 * day, driver="999.1"))  # another driver: its own row
    history.add(make_record(seconds=5.0, ended_at=now - day))  # recent: kept raw
    before = dict((r.status, n) for r, n in Board.from_history(history).counts())
    result = history.prune(keep_seconds=90 * day, now=now)
    assert result.runs_removed == 5
    assert [r.figures["seconds"] for r in history] == [5.0]
    with sqlite3.connect(tmp_path / "h.db") as db:  # the table as the file keeps it
        daily = {driver: (runs, json.loads(figures))
                 for driver, runs, figures in db.execute("SELECT driver, runs, figures FROM daily")}
    assert daily["550.54.15"][0] == 3 and daily["550.54.15"][1]["seconds"] == 2.0
    assert daily["999.1"][1]["seconds"] == 9.0
    assert dict((r.status, n) for r, n in Board.from_history(history).counts()) == before  # counters never go down


def test_pruning_to_a_maximum_count_removes_the_oldest(tmp_path):
    history = History(tmp_path / "h.db")
    for i in range(10):
        history.add(make_record(seconds=float(i + 1), ended_at=1000.0 + i))
    history.prune(keep_seconds=1e12, max_runs=4, now=2000.0)
    assert [r.figures["seconds"] for r in history] == [7.0, 8.0, 9.0, 10.0]


def test_a_read_only_file_system_at_start_keeps_results_until_it_is_writable(small_disk):
    path = small_disk / "h.db"
    earlier = History(path)
    earlier.add(make_record(seconds=1.0))
    earlier.close()
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)  # nothing open: allowed
    try:
        history = History(path)  # the agent starts on a read-only mount: it runs on, it does not exit
        health = history.health()
        assert not health.up and health.errors.get("read_only", 0) >= 1
        board = Board.from_history(history)
        assert history.add(make_record(seconds=2.0)) is None
        board.catch_up(history)
        assert {r.figures["seconds"] for r in board.latest()} == {2.0}  # shown while it waits
        assert history.retry_pending() == 1
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)
    assert history.retry_pending() == 0 and history.health().up
    assert len(rows(path)) == 2
