"""A history deleted (or replaced) under a running agent (issue 30, item 11).

SQLite keeps writing to the file it opened: after ``rm history.db`` every later result went to the
unlinked file and was lost when the agent stopped, while ``sixdim_history_up`` stayed 1.  Before each
write the history now compares the file it has open with the one at its path (device and inode),
and when they differ logs one warning and opens the path again, creating a new database where the
file is gone; the new rows' ids continue after the ones the agent had seen, so a reader that asks
for the rows after the last id it read (the board's catch-up) still finds them.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

from sixdim.store.history import History
from tests.helpers import make_record


def stored(path: Path) -> list[tuple[int, str]]:
    """What a new reader finds in the file at ``path`` (ids and uids)."""
    with sqlite3.connect(path) as db:
        return db.execute("SELECT id, uid FROM runs ORDER BY id").fetchall()


def remove(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)


def test_results_after_rm_go_to_a_new_file(tmp_path, caplog):
    path = tmp_path / "history.db"
    history = History(path)
    try:
        first = make_record(ended_at=1000.0)
        assert history.add(first) == 1
        last_seen = history.last_id()
        os.unlink(path)  # `rm history.db`: SQLite's -wal and -shm stay, as they would
        with caplog.at_level(logging.WARNING, logger="sixdim"):
            later = [make_record(ended_at=2000.0 + i) for i in range(3)]
            for record in later:
                assert history.add(record) is not None
        assert path.is_file(), "no new history file"
        assert [uid for _, uid in stored(path)] == [r.uid for r in later]  # none lost
        assert all(i > last_seen for i, _ in stored(path))  # ids go on: a catch-up after last_seen finds them
        assert [r.uid for r in history.after(last_seen)] == [r.uid for r in later]
        assert history.health().up and history.health().pending == 0
        warnings = [r.getMessage() for r in caplog.records if "deleted" in r.getMessage()]
        assert len(warnings) == 1 and str(path) in warnings[0], [r.getMessage() for r in caplog.records]
    finally:
        history.close()
    reopened = History(path)  # what the next agent reads
    try:
        assert [r.uid for r in reopened] == [r.uid for r in later]
    finally:
        reopened.close()


def test_results_after_the_whole_folder_is_removed_are_kept(tmp_path):
    folder = tmp_path / "data"
    path = folder / "history.db"
    history = History(path)
    try:
        history.add(make_record())
        remove(path)
        folder.rmdir()
        record = make_record(ended_at=3000.0)
        assert history.add(record) is not None
        assert [uid for _, uid in stored(path)] == [record.uid]
        assert (folder.stat().st_mode & 0o777) == 0o700  # made again as sixdim makes it
    finally:
        history.close()


def test_a_file_renamed_over_the_history_is_the_one_written(tmp_path):
    path = tmp_path / "history.db"
    history = History(path)
    try:
        history.add(make_record())
        other = History(tmp_path / "restored.db")  # a backup put back with mv, say
        other.add(make_record(ended_at=500.0))
        other.close()
        remove(path)
        os.rename(tmp_path / "restored.db", path)
        record = make_record(ended_at=4000.0)
        history.add(record)
        assert record.uid in [uid for _, uid in stored(path)]
    finally:
        history.close()


def test_an_unchanged_file_is_not_reopened(tmp_path, caplog):
    path = tmp_path / "history.db"
    history = History(path)
    try:
        connection = history._conn
        with caplog.at_level(logging.WARNING, logger="sixdim"):
            for i in range(5):
                history.add(make_record(ended_at=1000.0 + i))
        assert history._conn is connection
        assert not caplog.records
        assert len(stored(path)) == 5
    finally:
        history.close()
