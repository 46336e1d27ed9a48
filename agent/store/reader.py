"""The history, read-only: what the offline reports read, without ever writing the agent's database.

The reports (``sixdim report``, ``sixdim report regressions`` and ``sixdim report html``) read a
history another process may be writing.  Here, and only here besides :mod:`sixdim.store.history`, is
the SQL on it: a read-only connection (``mode=ro``), and the runs in chunks of :data:`CHUNK` rows, each
its own short read (keyset paging by id), or the last runs of every series (:func:`recent_per_series`,
by id, a batch a read), each row a typed one (:class:`sixdim.store.rows.RunRow`, :class:`sixdim.store.rows.FigureRow`)
whose fields name its columns, so a report never holds a lock for long and never reads ``details``.  The
``conditions`` each run ran under are read afterwards, by id, only for the runs a report diagnoses
(:func:`conditions`): never a column of the whole scan.
"""

from __future__ import annotations

import json
import re
import sqlite3
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Generic, TypeVar

from sixdim.core.catalog import RUN_STATUSES
from sixdim.core.results import INTERRUPTED, SERIES_FIELDS, SHAPE_SET, Interruption
from sixdim.store.errors import HistoryError
from sixdim.store.rows import FigureRow, RunRow, conditions_by_id

CHUNK = 20_000
"""Rows per read: each read is its own short transaction."""
BUSY_TIMEOUT_SECONDS = 5.0
"""How long a read waits for a lock (in WAL mode only a checkpoint or recovery takes one)."""

SERIES_COLUMNS: tuple[str, ...] = SERIES_FIELDS
"""The columns of the series key (:class:`sixdim.core.results.SeriesKey`), in its order."""
DERIVED_COLUMNS: dict[str, str] = {
    "shape_set": f"iif(json_valid(params), coalesce(json_extract(params, '$.{SHAPE_SET}'), ''), '')"}
"""Values a report reads out of a run's JSON columns by SQLite, as if they were columns: the shape set of
its run (sixdim.core.results.SHAPE_SET; '' for runs of older sixdims), without parsing ``params``."""
RUN_COLUMNS = frozenset({*SERIES_FIELDS, "id", "suite", "model_name", "status", "started_at", "ended_at",
                         "figures", "environment", *DERIVED_COLUMNS})
"""The columns a report may read (never ``details``, the one large column)."""
FIGURE_COLUMNS = ("unread_figures", "figure_values")
"""The last two fields of a row read with ``figure_values`` (:attr:`RunsQuery.figure_values`): not columns of the
table, but what SQLite reads out of ``figures``."""

Row = TypeVar("Row", RunRow, FigureRow)
"""A typed row a report reads: its fields, after ``id``, name the columns selected, in their order."""


def _columns_of(row: type[RunRow] | type[FigureRow], figure_values: bool) -> tuple[str, ...]:
    """The table's columns a row type reads (its fields after ``id``, without :data:`FIGURE_COLUMNS`), or a
    ValueError where a field names no column a report may read, or where the row's figure fields and the
    query's ``figure_values`` disagree."""
    names = row._fields
    figure_fields = names[-len(FIGURE_COLUMNS):] == FIGURE_COLUMNS
    if names[0] != "id":
        raise ValueError(f"{row.__name__}: a row starts with its id")
    if figure_fields != figure_values:
        raise ValueError(f"{row.__name__}: its last fields must be {', '.join(FIGURE_COLUMNS)} exactly where the "
                         "query reads figure values")
    columns = names[1:len(names) - len(FIGURE_COLUMNS)] if figure_fields else names[1:]
    unknown = sorted(set(columns) - RUN_COLUMNS)
    if unknown:
        raise ValueError(f"not a column a report reads: {', '.join(unknown)}")
    return columns


def _column_sql(name: str) -> str:
    return DERIVED_COLUMNS.get(name, name)


def _connect(path: str) -> sqlite3.Connection:
    """A read-only connection (``mode=ro``), or :class:`HistoryError` naming the file.

    A WAL database needs its ``-shm`` companion, which SQLite creates beside it if it is not there
    (the agent's own are there while it runs).  In a folder this user cannot write, with no
    ``-wal`` file (so nothing uncommitted: every run is in the main file), that fails; the file is
    then read as it is (``immutable=1``), as nothing can be writing it."""
    file = Path(path)
    if not file.exists():
        raise HistoryError(f"history database {path}: no such file")
    if not file.is_file():
        raise HistoryError(f"history database {path}: not a file")
    uri = "file:" + urllib.parse.quote(str(file.resolve())) + "?mode=ro"
    for immutable in (False, True):
        try:
            db = sqlite3.connect(uri + ("&immutable=1" if immutable else ""), uri=True, timeout=BUSY_TIMEOUT_SECONDS)
            db.execute("PRAGMA query_only = 1")
            db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # opens the file and its WAL
            return db
        except sqlite3.OperationalError as exc:
            if immutable or Path(f"{file}-wal").exists():
                raise HistoryError(f"cannot open history database {path}: {exc}") from None
        except sqlite3.Error as exc:
            raise HistoryError(f"cannot read history database {path}: {exc}") from None
    raise AssertionError("unreachable")


@contextmanager
def reading(path: str) -> Iterator[sqlite3.Connection]:
    """A read-only connection to the history, closed afterwards, with every failure while reading
    it (in this block, the caller's parsing of the rows included) turned into a
    :class:`HistoryError` naming the file."""
    db = _connect(path)
    try:
        yield db
    except sqlite3.Error as exc:
        text = str(exc)
        if "no such table" in text:
            raise HistoryError(f"{path} is not a sixdim history database (it has no table 'runs')") from None
        raise HistoryError(f"cannot read history database {path}: {text}") from None
    except (ValueError, AttributeError) as exc:  # a JSON column that is not a JSON object
        raise HistoryError(f"cannot read history database {path}: a row's JSON is broken ({exc})") from None
    finally:
        db.close()


@dataclass(frozen=True)
class RunsQuery(Generic[Row]):
    """Which runs to read, and as which typed row: its fields name the columns read (``id`` first), in order."""

    row: type[Row]
    ok_only: bool = False
    workloads: tuple[str, ...] = ()
    figure_values: tuple[str, ...] = ()
    """Figures to read out of the ``figures`` JSON by SQLite, as the row's last two fields (:data:`FIGURE_COLUMNS`): the
    ``figures`` text where SQLite cannot read it (a NaN or an infinity, which Python writes and SQLite
    refuses: parse that row in Python), else None; then the figures' values as one JSON array in this
    order (a single figure twice: SQLite makes an array of two paths or more), each as the JSON holds
    it, ``1e999`` (+inf) where the figure is absent or null (``sixdim.report.regressions.figure_table``
    makes an array of a chunk's).  One JSON parse per row: SQLite 3.40 (Debian 12's) parses the JSON
    again for every path asked, and a column per figure cost two parses each (its type, then its
    value), 33 a row, 0.8 s of the 1.2 s that reading 100,000 runs took, against 0.2 s for one list
    of paths."""
    chunk: int = CHUNK
    """Rows per read."""

    def __post_init__(self) -> None:
        _columns_of(self.row, bool(self.figure_values))
        odd = [name for name in self.figure_values if not _FIGURE_NAME.fullmatch(name)]
        if odd:
            raise ValueError(f"not a figure name: {', '.join(odd)}")

    def sql(self) -> str:
        where = ["id > ?"]
        if self.ok_only:
            where.append("status = 'ok'")
        if self.workloads:
            where.append(f"workload IN ({', '.join('?' * len(self.workloads))})")
        columns = [_column_sql(name) for name in _columns_of(self.row, bool(self.figure_values))]
        if self.figure_values:
            names = self.figure_values * 2 if len(self.figure_values) == 1 else self.figure_values
            paths = ", ".join(f"'$.{name}'" for name in names)
            values = f"json_extract(figures, {paths})"
            columns.append("iif(json_valid(figures), NULL, figures)")
            columns.append(f"iif(json_valid(figures), replace({values}, 'null', '1e999'), NULL)")
        return (f"SELECT id, {', '.join(columns)} FROM runs WHERE {' AND '.join(where)} "
                f"ORDER BY id LIMIT {int(self.chunk)}")


_FIGURE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""A figure name that is a JSON path step as it is (no quoting, nothing SQL could read otherwise)."""


def chunks(db: sqlite3.Connection, query: RunsQuery[Row]) -> Iterator[list[Row]]:
    """The rows of ``query`` a chunk at a time, by id (keyset paging, so each read is short and
    indexed), each a ``query.row``."""
    sql = query.sql()
    args: tuple[str, ...] = tuple(query.workloads)
    last: int = 0
    while True:
        rows: list[Any] = db.execute(sql, (last, *args)).fetchall()
        if not rows:
            return
        last = rows[-1][0]
        yield [query.row._make(row) for row in rows]


def recent_per_series(db: sqlite3.Connection, runs: int, batch: int = 2_000) -> Iterator[list[RunRow]]:
    """The last ``runs`` runs of every series (:class:`sixdim.store.rows.RunRow`, oldest first), a batch at a
    time: as the daemon reads them to restore its verdicts (``History.recent_for_verdicts``), read-only and with
    only a report's columns.  One window-function query picks the ids, then the rows are read by id,
    ``batch`` a read, each its own short read.  Rows an older sixdim wrote per interrupted case are
    left out (no runs: the daemon folds them into one interruption when it opens the history)."""
    columns = _columns_of(RunRow, figure_values=False)
    series = ", ".join(SERIES_COLUMNS)
    ids = [row[0] for row in db.execute(
        f"SELECT id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY {series} ORDER BY id DESC) AS n FROM runs "
        f"WHERE NOT (status = 'skipped' AND reason LIKE '{INTERRUPTED}%')) WHERE n <= ? ORDER BY id", (runs,))]
    for start in range(0, len(ids), batch):
        rows = db.execute(f"SELECT id, {', '.join(map(_column_sql, columns))} FROM runs "
                          "WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id",
                          (json.dumps(ids[start:start + batch]),)).fetchall()
        if rows:
            yield [RunRow._make(row) for row in rows]


def case_times(db: sqlite3.Connection, suite: str, device: tuple[str, str, str, str],
               cases: Iterable[tuple[str, str, str, str, str]], runs: int = 5) -> dict[tuple[str, str, str, str, str],
                                                                                    list[float]]:
    """The device time of each case's last ``runs`` runs in ``suite`` on ``device`` (hostname, device type, GPU
    index, UUID), newest first, by case (workload, precision, shape, mode, pass: with ``device``, its series
    key); a case with none is left out.  ``serve --check-config`` reads it to say what a suite run costs.

    A run's device time is its ``details.case_wall`` span, the one :func:`sixdim.http.board.case_seconds`
    computes; a run without one (an older sixdim's) is left out rather than given its worker's span, and
    so is a ``skipped`` one (it never ran).  Each case is a few short indexed reads, one per status: the
    series index ends with the status, so within one status the rows come in id order and the newest
    are read first, without sorting the series' whole history (SQLite's plan: a search of the series
    index, no sort; a frequent-tier series, 4 runs an hour, gathers 35,000 runs a year); only those
    rows' ``details`` are read, by SQLite, for the span."""
    span = "json_extract(details, '$.case_wall[1]') - json_extract(details, '$.case_wall[0]')"
    sql = (f"SELECT id, {span} FROM runs WHERE {' AND '.join(f'{name} = ?' for name in SERIES_COLUMNS)} "
           f"AND status = ? AND suite = ? AND json_valid(details) "
           f"AND json_type(details, '$.case_wall[0]') IN ('integer', 'real') "
           f"AND json_type(details, '$.case_wall[1]') IN ('integer', 'real') ORDER BY id DESC LIMIT ?")
    times: dict[tuple[str, str, str, str, str], list[float]] = {}
    for case in cases:
        found: list[tuple[int, float]] = []
        for status in RUN_STATUSES:
            if status != "skipped":
                found += db.execute(sql, (*device, *case, status, suite, runs)).fetchall()
        if found:
            times[case] = [max(0.0, float(seconds)) for _, seconds in sorted(found, reverse=True)[:runs]]
    return times


conditions = conditions_by_id
"""The recorded conditions of the runs with these ids, by id: the daemon's own query
(:func:`sixdim.store.rows.conditions_by_id`), on the read-only connection."""


@dataclass(frozen=True)
class Interrupted:
    """The interrupted suite runs of a history: how many, and the cases they left unrun."""

    runs: int
    cases_left: int
    legacy_rows: int = 0
    """Rows an older sixdim wrote per interrupted case (``skipped``, reason ``interrupted: ...``), in a history
    no sixdim of this version has opened for writing yet (which folds them into ``interruptions``): they are
    among the ``skipped`` runs the report reads, and belong here instead."""


def interrupted(db: sqlite3.Connection) -> Interrupted:
    """The history's interruptions (table ``interruptions``, schema 5), and in an older history the rows it
    wrote per interrupted case instead, each counted as one run's case left."""
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    runs = cases_left = 0
    if "interruptions" in tables:
        runs, cases_left = db.execute("SELECT COUNT(*), COALESCE(SUM(cases_left), 0) FROM interruptions").fetchone()
    legacy = legacy_runs = 0
    if db.execute("PRAGMA user_version").fetchone()[0] < 5 and "runs" in tables:
        legacy_runs, legacy = db.execute(  # one interrupted run per worker run (its start) the rows came from
            f"SELECT COUNT(*), COALESCE(SUM(n), 0) FROM (SELECT COUNT(*) AS n FROM runs WHERE status = 'skipped' "
            f"AND reason LIKE '{INTERRUPTED}%' GROUP BY suite, hostname, device, uuid, started_at)").fetchone()
    return Interrupted(int(runs) + int(legacy_runs), int(cases_left) + int(legacy), int(legacy))


def interruptions(db: sqlite3.Connection) -> list[Interruption]:
    """Every interrupted suite run the history recorded (table ``interruptions``, schema 5), oldest first:
    ``sixdim report`` marks a workload whose latest run one of them stopped.  [] in an older history
    (its rows per interrupted case, :attr:`Interrupted.legacy_rows`, name no suite run's start)."""
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "interruptions" not in tables:
        return []
    names = [f.name for f in fields(Interruption)]
    found = []
    for row in db.execute(f"SELECT {', '.join(names)} FROM interruptions ORDER BY id"):
        data = dict(zip(names, row))
        data["workloads"] = json.loads(data["workloads"])
        found.append(Interruption(**data))
    return found


def incidents(db: sqlite3.Connection, since: float | None = None,
              workloads: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The incidents of the agent's live verdicts (table ``incidents``, schema 6; ``History.save_incidents``):
    those still open and those that ended at or after ``since`` (every one kept where None), the earliest
    start first, ``causes`` decoded; only these workloads' where given.  [] in an older history, or one no
    agent served (``sixdim run`` judges nothing)."""
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "incidents" not in tables:
        return []
    names = [row[1] for row in db.execute("PRAGMA table_info(incidents)") if row[1] != "id"]
    where: list[str] = []
    args: list[Any] = []
    if since is not None:
        where.append("(ended_at IS NULL OR ended_at >= ?)")
        args.append(since)
    if workloads:
        where.append(f"workload IN ({', '.join('?' * len(workloads))})")
        args += list(workloads)
    sql = (f"SELECT {', '.join(names)} FROM incidents" + (f" WHERE {' AND '.join(where)}" if where else "")
           + " ORDER BY started_at, id")
    found = []
    for row in db.execute(sql, args):
        data = dict(zip(names, row, strict=True))
        data["causes"] = json.loads(data["causes"]) if data.get("causes") else []
        found.append(data)
    return found
