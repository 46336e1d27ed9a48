"""What the exporter shows: the latest good result of each series, and run counts.

Kept in memory for cheap scrapes, loaded from the history at start (so a restart
serves the last results again before any new run) and updated on every run.
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

    @classmethod
    def from_history(cls, history: History) -> "Board":
        board = cls()
        for record in history.latest_ok():
            board._latest[record.key()] = record
        for record, count in history.status_counts():
            board._counts[(record.key(), record.status)] = (record, count)
        return board

    def add(self, record: RunRecord) -> None:
        with self._lock:
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
