"""The run history: an embedded SQLite database in WAL mode.

Every run is kept, whatever its outcome.  The exporter reloads the latest good
result of each series and the run counts from here at start, so a restart never
blanks the dashboards.  WAL lets ``sixdim run`` record while ``sixdim serve``
reads the same file.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any, Iterator

from agent.results import RunRecord

SCHEMA_VERSION = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    suite TEXT NOT NULL,
    workload TEXT NOT NULL,
    precision TEXT NOT NULL,
    params TEXT NOT NULL,
    shape TEXT NOT NULL,
    mode TEXT NOT NULL DEFAULT '',
    kernel_pass TEXT NOT NULL DEFAULT 'forward',
    hostname TEXT NOT NULL,
    device_type TEXT NOT NULL,
    device TEXT NOT NULL,
    gpu TEXT NOT NULL,
    uuid TEXT NOT NULL,
    model_name TEXT NOT NULL,
    pci_bus_id TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT NOT NULL,
    started_at REAL NOT NULL,
    ended_at REAL NOT NULL,
    figures TEXT NOT NULL,
    details TEXT NOT NULL,
    environment TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_series_v2 ON runs (hostname, device_type, gpu, uuid, workload, precision,
                                                      shape, mode, kernel_pass, status);
"""

_MIGRATIONS = {
    # version 1 -> 2: the "params" label became "shape"; "mode" and "pass" labels were added.
    1: """
ALTER TABLE runs RENAME COLUMN params_label TO shape;
ALTER TABLE runs ADD COLUMN mode TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN kernel_pass TEXT NOT NULL DEFAULT 'forward';
DROP INDEX IF EXISTS runs_by_series;
""",
}

_JSON_COLUMNS = ("params", "figures", "details", "environment")
_SERIES = "hostname, device_type, gpu, uuid, workload, precision, shape, mode, kernel_pass"


class HistoryError(RuntimeError):
    """The history database cannot be opened or written."""


class History:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30.0)
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise HistoryError(f"{self.path}: written by a newer sixdim (schema {version} > {SCHEMA_VERSION})")
            for old in range(version, SCHEMA_VERSION) if version > 0 else ():  # 0: a new, empty file
                if old in _MIGRATIONS:
                    self._db.executescript(_MIGRATIONS[old])
            self._db.executescript(_SCHEMA)
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            self._db.commit()
        except (OSError, sqlite3.Error) as exc:
            raise HistoryError(f"cannot open history database {self.path}: {exc}") from None
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def add(self, record: RunRecord) -> int:
        """Insert a run; returns its id (also set on the record)."""
        row = record.to_dict()
        row.pop("id")
        for column in _JSON_COLUMNS:
            row[column] = json.dumps(row[column], sort_keys=True)
        columns = ", ".join(row)
        marks = ", ".join(f":{c}" for c in row)
        with self._lock:
            cursor = self._db.execute(f"INSERT INTO runs ({columns}) VALUES ({marks})", row)
            self._db.commit()
        record.id = cursor.lastrowid
        return record.id

    def _records(self, sql: str, args: tuple[Any, ...] = ()) -> list[RunRecord]:
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        return [_to_record(row) for row in rows]

    def latest_ok(self) -> list[RunRecord]:
        """The newest successful run of each series."""
        return self._records(
            f"SELECT * FROM runs WHERE id IN (SELECT MAX(id) FROM runs WHERE status = 'ok' GROUP BY {_SERIES})"
            " ORDER BY id")

    def status_counts(self) -> list[tuple[RunRecord, int]]:
        """Per series and status, the number of runs, with the newest run as the label source."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT MAX(id) AS newest, COUNT(*) AS n FROM runs GROUP BY {_SERIES}, status").fetchall()
        newest = {row["newest"]: row["n"] for row in rows}
        if not newest:
            return []
        marks = ",".join("?" * len(newest))
        records = self._records(f"SELECT * FROM runs WHERE id IN ({marks}) ORDER BY id", tuple(newest))
        return [(record, newest[record.id]) for record in records]

    def last_id(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COALESCE(MAX(id), 0) FROM runs").fetchone()[0]

    def after(self, last_id: int) -> list[RunRecord]:
        """Runs recorded after the one with ``last_id``, oldest first."""
        return self._records("SELECT * FROM runs WHERE id > ? ORDER BY id", (last_id,))

    def recent(self, limit: int = 50, workload: str | None = None) -> list[RunRecord]:
        where, args = ("WHERE workload = ?", (workload,)) if workload else ("", ())
        return self._records(f"SELECT * FROM runs {where} ORDER BY id DESC LIMIT ?", args + (limit,))

    def __iter__(self) -> Iterator[RunRecord]:
        return iter(self._records("SELECT * FROM runs ORDER BY id"))


def _to_record(row: sqlite3.Row) -> RunRecord:
    data = dict(row)
    for column in _JSON_COLUMNS:
        data[column] = json.loads(data[column])
    return RunRecord(**data)
