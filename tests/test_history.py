"""The SQLite history, for real: WAL, persistence, latest results and counts per series."""

import sqlite3

from sixdim.http.board import Board
from sixdim.store.history import History
from tests.helpers import make_record


def test_history_is_wal_and_survives_reopening(tmp_path):
    path = tmp_path / "deep" / "dir" / "history.db"
    history = History(path)
    record = make_record(seconds=0.5)
    history.add(record)
    history.close()
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    [stored] = list(History(path))
    assert stored.figures == {"seconds": 0.5, "flops": 2048.0}
    assert stored.environment["driver"] == "550.54.15"
    assert stored.id == record.id


def test_latest_ok_per_series_ignores_failures_and_keeps_series_apart(tmp_path):
    history = History(tmp_path / "h.db")
    history.add(make_record(seconds=1.0, ended_at=1))
    history.add(make_record(seconds=2.0, ended_at=2))
    history.add(make_record("failed", ended_at=3))
    history.add(make_record(seconds=3.0, ended_at=4, uuid="GPU-b", gpu="1"))
    history.add(make_record(seconds=4.0, ended_at=5, shape="m=16,n=16,k=16"))
    latest = {(r.uuid, r.shape): r.figures["seconds"] for r in history.latest_ok()}
    assert latest == {("GPU-a", "m=8,n=8,k=8"): 2.0, ("GPU-b", "m=8,n=8,k=8"): 3.0, ("GPU-a", "m=16,n=16,k=16"): 4.0}


def test_a_driver_upgrade_replaces_the_series_version_labels(tmp_path):
    history = History(tmp_path / "h.db")
    history.add(make_record(seconds=1.0, driver="535.104"))
    history.add(make_record(seconds=1.1, driver="550.54"))
    [latest] = history.latest_ok()
    assert latest.result_labels()["driver_version"] == "550.54"


def test_status_counts_and_board_reload(tmp_path):
    history = History(tmp_path / "h.db")
    for status in ("ok", "ok", "failed", "timeout", "skipped", "skipped", "skipped"):
        history.add(make_record(status))
    board = Board.from_history(history)
    assert sorted((r.status, n) for r, n in board.counts()) == [("failed", 1), ("ok", 2), ("skipped", 3),
                                                                ("timeout", 1)]
    board.add(make_record("failed"))
    assert dict((r.status, n) for r, n in board.counts())["failed"] == 2
    assert len(board.latest()) == 1


def test_board_catches_up_with_rows_written_elsewhere_once_each(tmp_path):
    path = tmp_path / "h.db"
    mine = History(path)
    mine.add(make_record(seconds=1.0))
    board = Board.from_history(mine)
    other = History(path)  # another process, e.g. `sixdim run`, writing the same file
    other.add(make_record(seconds=2.0))
    other.add(make_record("failed"))
    assert board.catch_up(mine) == 2
    assert board.catch_up(mine) == 0  # nothing counted twice
    assert [r.figures["seconds"] for r in board.latest()] == [2.0]
    assert sorted((r.status, n) for r, n in board.counts()) == [("failed", 1), ("ok", 2)]
