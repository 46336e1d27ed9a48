"""How the history's records map to its rows and back: a run or an interruption as the columns it is written
to, a row read back as a record (its JSON columns decoded), the typed rows the reports read (:class:`RunRow`,
:class:`FigureRow`), and the recorded conditions of chosen runs by id, the one query the daemon
(``History.conditions_of``) and the reports (:func:`sixdim.store.reader.conditions`) share."""

from __future__ import annotations

import json
import operator
import sqlite3
from collections.abc import Iterable
from typing import Any, NamedTuple

from sixdim.core.results import SERIES_FIELDS, Interruption, RunRecord, SeriesKey
from sixdim.store.schema import COLUMNS, INTERRUPTION_JSON, JSON_COLUMNS, Recorded

_series_of = operator.attrgetter(*SERIES_FIELDS)
"""A row's series key fields, by name, in the key's order (one C call: a report makes a key of every row)."""


class RunRow(NamedTuple):
    """A run as the reports read it (:func:`sixdim.store.reader.recent_per_series`, and
    :func:`sixdim.store.reader.chunks` of a :class:`sixdim.store.reader.RunsQuery` of these): the columns
    its fields name, selected in the fields' order, so a report reads each by its name and never by a
    position that a column added or moved would shift.  No ``details``, ``params`` or ``conditions``: the
    large columns stay in the file (the conditions are read by id, for the few runs a report explains)."""

    id: int
    hostname: str
    device_type: str
    gpu: str
    uuid: str
    workload: str
    precision: str
    shape: str
    mode: str
    kernel_pass: str
    model_name: str
    suite: str
    status: str
    started_at: float
    ended_at: float
    figures: str
    """The ``figures`` column: JSON text, parsed by the report that needs it (an ok run's)."""
    environment: str
    """The ``environment`` column: JSON text (many runs share one; a report parses each distinct one once)."""
    shape_set: str
    """The shape set of the run's case, read out of ``params`` by SQLite (``reader.DERIVED_COLUMNS``)."""

    @property
    def key(self) -> SeriesKey:
        """The run's series (:class:`sixdim.core.results.SeriesKey`)."""
        return SeriesKey._make(_series_of(self))

    @property
    def device(self) -> tuple[str, str, str, str]:
        """Host, device type, GPU index and UUID: which device (``SeriesKey.device``)."""
        return self.hostname, self.device_type, self.gpu, self.uuid


class FigureRow(NamedTuple):
    """An ok run as ``report regressions`` reads it (:func:`sixdim.store.reader.chunks` of a
    :class:`sixdim.store.reader.RunsQuery` with ``figure_values``): its series, times and versions, then its
    watched figures as SQLite read them out of the ``figures`` JSON (the query's two figure columns,
    :data:`sixdim.store.reader.FIGURE_COLUMNS`)."""

    id: int
    hostname: str
    device_type: str
    gpu: str
    uuid: str
    workload: str
    precision: str
    shape: str
    mode: str
    kernel_pass: str
    model_name: str
    started_at: float
    ended_at: float
    environment: str
    unread_figures: str | None
    """The ``figures`` text where SQLite could not read it (a NaN or an infinity, which Python writes and SQLite
    refuses: parsed in Python), else None."""
    figure_values: str | None
    """The query's figures' values as one JSON array, in its order (+inf, ``1e999``, where absent), else None."""

    @property
    def key(self) -> SeriesKey:
        """The run's series (:class:`sixdim.core.results.SeriesKey`)."""
        return SeriesKey._make(_series_of(self))


IDS_PER_READ = 5_000
"""Run ids per read of :func:`conditions_by_id`: each read is its own short transaction."""


def conditions_by_id(db: sqlite3.Connection, ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    """The recorded conditions (``RunRecord.conditions``) of the runs with these ids: run id ->
    conditions, for the runs that recorded any.  A run whose conditions are ``{}`` (or not a JSON
    object) is left out, and so is every run of a history written before conditions were recorded
    (schema 3 or older, opened read-only: it has no ``conditions`` column).  Read by primary key,
    :data:`IDS_PER_READ` ids a read."""
    wanted = sorted(set(ids))
    if not wanted or "conditions" not in {row[1] for row in db.execute("PRAGMA table_info(runs)")}:
        return {}
    out: dict[int, dict[str, Any]] = {}
    for start in range(0, len(wanted), IDS_PER_READ):
        chunk = json.dumps(wanted[start:start + IDS_PER_READ])
        for run, text in db.execute("SELECT id, conditions FROM runs WHERE id IN (SELECT value FROM json_each(?)) "
                                    "AND conditions != '{}'", (chunk,)):
            try:
                found = json.loads(text)
            except (TypeError, ValueError):
                continue  # unreadable: as a run that recorded none
            if isinstance(found, dict) and found:
                out[run] = found
    return out


def row_of(record: Recorded) -> dict[str, Any]:
    row = record.to_dict()
    row.pop("id")
    for column in JSON_COLUMNS if isinstance(record, RunRecord) else INTERRUPTION_JSON:
        row[column] = json.dumps(row[column], sort_keys=True)
    return row


def select_without(*columns: str) -> str:
    """A select list of every run column, those named read as an empty JSON object instead."""
    return ", ".join(f"'{{}}' AS {c}" if c in columns else c for c in COLUMNS)


def to_interruption(row: sqlite3.Row) -> Interruption:
    data = dict(row)
    for column in INTERRUPTION_JSON:
        data[column] = json.loads(data[column])
    return Interruption(**data)


def to_record(row: sqlite3.Row) -> RunRecord:
    data = dict(row)
    for column in JSON_COLUMNS:
        data[column] = json.loads(data[column])
    return RunRecord(**data)
