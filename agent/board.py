"""What the exporter shows: the latest good result of each series, and run counts.

Kept in memory for cheap scrapes and fed from the history only: loaded at start (so a restart
serves the last results again before any new run), then caught up with the rows written
since, after each run and at each scrape.  Rows written by another process, such as a
``sixdim run`` or a node-linearity run on this host, therefore appear without a restart.
SQLite hands out row ids in commit order, so "rows after the last id seen" misses none.
"""

from __future__ import annotations

import threading

from agent.history import History
from agent.results import RunRecord


class Board:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: dict[tuple[str, ...], RunRecord] = {}
        self._counts: dict[tuple[tuple[str, ...], str], tuple[RunRecord, int]] = {}
        self._last_id = 0

    @classmethod
    def from_history(cls, history: History) -> "Board":
        board = cls()
        for record in history.latest_ok():
            board._latest[record.key()] = record
        for record, count in history.status_counts():
            board._counts[(record.key(), record.status)] = (record, count)
        board._last_id = history.last_id()
        return board

    def catch_up(self, history: History) -> int:
        """Add the rows written since the last one seen; returns how many."""
        with self._lock:
            records = history.after(self._last_id)
            for record in records:
                self._add(record)
                self._last_id = max(self._last_id, record.id or 0)
            return len(records)

    def add(self, record: RunRecord) -> None:
        """Add a record that is not in a history (tests, previews)."""
        with self._lock:
            self._add(record)

    def _add(self, record: RunRecord) -> None:
        if record.status == "ok":
            self._latest[record.key()] = record
        key = (record.key(), record.status)
        previous = self._counts.get(key)
        self._counts[key] = (record, (previous[1] if previous else 0) + 1)

    def latest(self) -> list[RunRecord]:
        with self._lock:
            return list(self._latest.values())

    def counts(self) -> list[tuple[RunRecord, int]]:
        with self._lock:
            return list(self._counts.values())
