"""The run history: an embedded SQLite database in WAL mode, written so that no result is lost.

Every run is kept, whatever its outcome, and every interrupted suite run as one row of its own
(table ``interruptions``: a shutdown or the agent's death, with the cases done and left; a history
of an older version, which wrote a ``skipped`` row per case left, is folded into it when opened), and
every incident of the daemon's live verdicts (table ``incidents``, :meth:`History.save_incidents`: a series out
of ok, what the reports list of what the agent said, when it said it).
The exporter reloads the latest good result of each series and the run counts from here at start,
so a restart never blanks the dashboards.  WAL lets
``sixdim run`` record while ``sixdim serve`` reads the same file.

**Durable writes.**  A finished result must survive a database that is locked by another process,
on a full disk, read-only or broken.  So :meth:`History.add` never raises: a write waits at most
:data:`BUSY_TIMEOUT_SECONDS` for a lock, and a result that cannot be written goes to a bounded
in-memory queue (:data:`MAX_PENDING`), and to a spool file beside the database (JSON lines) when
that can be written, so that even a daemon that is then killed loses nothing: the next ``History``
on the same file reads the spool back.  Queued results are retried, oldest first, at every
:meth:`History.add` and :meth:`History.retry_pending` (the board calls it in the background), and
are shown by the board meanwhile.  Each run has a ``uid``, unique in the table, so a result written
twice (a spool read back after its rows were committed) is stored once.  A disk that refuses the
database refuses the spool beside it too: :meth:`History.unsaved` tells the writer which of its
results the history holds in memory only, so that it keeps them elsewhere until the history has them
(the executor keeps them in the run's worker record, in the state folder: agent/run/orphans.py), and
:meth:`History.waiting` what waits, and why, when the agent stops.  What happened is counted
(:meth:`History.health`): write errors by reason, results pending, whether the last write worked.

**A damaged write-ahead log.**  A commit lives only in the database's ``-wal`` file until a checkpoint
copies it into the database file; a -wal file damaged after a crash (bytes overwritten, a torn write)
makes SQLite drop its frames from the first bad checksum on, and ``quick_check`` still passes.  So the
results written since the last complete checkpoint (every frame copied) are kept in a ledger beside the
database (``history.db.accepted``, JSON lines as the spool, appended and fsynced right after the commit),
and a write asks for a ``PASSIVE`` checkpoint (it never waits) at most every :data:`CHECKPOINT_SECONDS`,
the close too; one that copies every frame removes the ledger (a reader's older snapshot, the daemon
reading while ``sixdim run`` writes, can hold a checkpoint back: the ledger waits for a later one).
A ``History`` opened on the file writes the ledger's results again, each once by its ``uid``: those the
database lacks are restored, with a warning that says how many and from where.  Writers of the same file
in several processes hold the ledger (``flock``) from their commit to their checkpoint, so one's
checkpoint cannot remove another's results from it.

**A broken file at start** (not a database, or failing ``PRAGMA quick_check``) is renamed aside
with a timestamp and a new history started, so the agent keeps serving and benchmarking.  A file
that is there and readable in a folder that cannot be written (a read-only mount) does not stop the
agent either: results queue as for a locked file, and the database is opened at the first write
that works.  Any other file that cannot be opened (permissions, a missing mount) is a
:class:`HistoryError`, which the CLI turns into a clear message and exit code 2.

**Retention** (:meth:`History.prune`): raw runs older than a configurable age, or beyond a maximum
count, are thinned.  Before they are deleted, each series keeps one row per day and software
environment with the median of every figure (table ``daily``, kept forever, so long-term trends and
version comparisons survive), and their run counts move to ``pruned_counts``, so the exported run
counters never go down.

**Private files.**  The history holds every result with its host's details (driver, devices, the
commands of ``command`` workloads and their output), so it is its owner's alone: the database is
created mode 0600 (created empty before SQLite opens it, as SQLite would make it 0644 under the
usual umask; SQLite then gives its -wal and -shm files the database's mode), the spool file and the
ledger too, and a folder the agent creates for it 0700.  A database, -wal, -shm, spool or ledger file
found with group or other permission bits loses them (0644 becomes 0600) when the agent's user owns it,
with a warning, through a descriptor opened without following a link: a symbolic link where one of
these files should be (which neither sixdim nor SQLite makes) is refused with a :class:`HistoryError`.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import sqlite3
import stat
import statistics
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sixdim.core.files import make_folders
from sixdim.core.results import INTERRUPTED, SERIES_FIELDS, Interruption, RunRecord, counts_as_run, lean

log = logging.getLogger("sixdim")

_CONTROL = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")


def _one_line(value: object) -> str:
    """``value`` as text fit for one log line: a newline, a carriage return or any other control
    character escaped as a Python literal writes it (``\\n``, ``\\x1b``).  What the history logs
    includes text it does not choose (a path, SQLite's message, which ``quick_check`` writes on several
    lines, an exception, a result's shape): as it is, that could split a record in two, or forge one."""
    return _CONTROL.sub(lambda match: repr(match[0])[1:-1], str(value))


SCHEMA_VERSION = 6

BUSY_TIMEOUT_SECONDS = 0.25
"""How long one write or read waits for another process's lock before giving up (and queueing)."""
OPEN_TIMEOUT_SECONDS = 30.0
"""How long opening the file at start waits for a lock: once, before the agent serves anything."""
MAX_PENDING = 10_000
"""Results kept in memory while the database cannot be written; beyond it the oldest are dropped
(and counted): about 30 MB at the size of a kernel result."""
FETCH_ROWS = 500
"""Rows read at a time where each becomes a record."""
PRUNE_BATCH = 5_000
"""Rows read per step while thinning, so a prune of a large history holds little memory."""
FILE_MODE = 0o600
"""The history's files: its owner's alone."""
FOLDER_MODE = 0o700
"""A folder the agent creates for the history."""
LEDGER_SUFFIX = ".accepted"
"""The ledger beside the database (``history.db.accepted``): the results written since its last complete
checkpoint (:meth:`History._settle_locked`)."""
CHECKPOINT_SECONDS = 1.0
"""The least time between two checkpoints a process's writes ask for (each costs the database file an
fsync or two); results written meanwhile wait in the ledger, fsynced."""
LEDGER_LOCK_SECONDS = 1.0
"""How long a write waits for another sixdim's hold on the ledger (a write and its checkpoint) before
writing without it."""

_SERIES_COLUMNS = SERIES_FIELDS
_SERIES = ", ".join(_SERIES_COLUMNS)
_SERIES_DEFS = ",\n    ".join(f"{c} TEXT NOT NULL" for c in _SERIES_COLUMNS)

_INTERRUPTIONS_TABLE = """
CREATE TABLE IF NOT EXISTS interruptions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    uid TEXT NOT NULL UNIQUE,
    suite TEXT NOT NULL,
    hostname TEXT NOT NULL,
    device_type TEXT NOT NULL,
    device TEXT NOT NULL,
    gpu TEXT NOT NULL,
    uuid TEXT NOT NULL,
    model_name TEXT NOT NULL,
    pci_bus_id TEXT NOT NULL,
    reason TEXT NOT NULL,
    started_at REAL NOT NULL,
    ended_at REAL NOT NULL,
    cases_done INTEGER NOT NULL,
    cases_left INTEGER NOT NULL,
    running TEXT NOT NULL DEFAULT '',
    workloads TEXT NOT NULL DEFAULT '[]'
);"""
"""One row per interrupted suite run (:class:`sixdim.core.results.Interruption`), kept forever (a few bytes each)."""

INCIDENT_COLUMNS: tuple[str, ...] = (*SERIES_FIELDS, "model_name", "series", "figure", "state", "now", "opened_at",
                                     "started_at", "regressed_at", "ended_at", "last_at", "baseline", "ratio",
                                     "latest_ratio", "reason", "causes")
"""What the history keeps of an incident of the live verdicts (``sixdim.verdicts.live.Incident.row``): a series out
of ok, from its first run of the change until it is back, with its size and its likely causes (``causes``: JSON).
An incident is one row, found again by its series and ``opened_at`` (the run at which the verdicts saw it), so
saving it again as it goes on, or after a restart replays it, updates that row."""
_INCIDENTS_TABLE = f"""
CREATE TABLE IF NOT EXISTS incidents (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    {_SERIES_DEFS},
    model_name TEXT NOT NULL,
    series TEXT NOT NULL,
    figure TEXT NOT NULL,
    state TEXT NOT NULL,
    now TEXT NOT NULL,
    opened_at REAL NOT NULL,
    started_at REAL NOT NULL,
    regressed_at REAL,
    ended_at REAL,
    last_at REAL NOT NULL,
    baseline REAL,
    ratio REAL,
    latest_ratio REAL,
    reason TEXT NOT NULL,
    causes TEXT NOT NULL,
    UNIQUE ({_SERIES}, opened_at)
);
CREATE INDEX IF NOT EXISTS incidents_by_end ON incidents (ended_at);"""


def _legacy_interrupted(table: str = "") -> str:
    """The rows older versions wrote, one per case an interruption left (``skipped``, reason ``interrupted: ...``)."""
    at = f"{table}." if table else ""
    return f"{at}status = 'skipped' AND {at}reason LIKE '{INTERRUPTED}%'"


_SCHEMA = f"""
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
    environment TEXT NOT NULL,
    uid TEXT NOT NULL DEFAULT '',
    conditions TEXT NOT NULL DEFAULT '{{}}'
);
CREATE INDEX IF NOT EXISTS runs_by_series_v2 ON runs ({_SERIES}, status);
CREATE UNIQUE INDEX IF NOT EXISTS runs_by_uid ON runs (uid) WHERE uid != '';
CREATE INDEX IF NOT EXISTS runs_by_end ON runs (ended_at);
CREATE TABLE IF NOT EXISTS daily (
    {_SERIES_DEFS},
    day TEXT NOT NULL,
    driver TEXT NOT NULL,
    cuda TEXT NOT NULL,
    torch TEXT NOT NULL,
    runs INTEGER NOT NULL,
    figures TEXT NOT NULL,
    PRIMARY KEY ({_SERIES}, day, driver, cuda, torch)
);
{_INTERRUPTIONS_TABLE}
{_INCIDENTS_TABLE}
CREATE TABLE IF NOT EXISTS pruned_counts (
    {_SERIES_DEFS},
    status TEXT NOT NULL,
    runs INTEGER NOT NULL,
    model_name TEXT NOT NULL,
    pci_bus_id TEXT NOT NULL,
    suite TEXT NOT NULL,
    last_ended_at REAL NOT NULL,
    PRIMARY KEY ({_SERIES}, status)
);
"""

_MIGRATIONS = {
    # version 1 -> 2: the "params" label became "shape"; "mode" and "pass" labels were added.
    1: """
ALTER TABLE runs RENAME COLUMN params_label TO shape;
ALTER TABLE runs ADD COLUMN mode TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN kernel_pass TEXT NOT NULL DEFAULT 'forward';
DROP INDEX IF EXISTS runs_by_series;
""",
    # version 2 -> 3: runs get a unique uid (durable writes); daily medians and pruned counts (retention).
    2: """
ALTER TABLE runs ADD COLUMN uid TEXT NOT NULL DEFAULT '';
""",
    # version 3 -> 4: the conditions each run ran under (sixdim.core.conditions).
    3: """
ALTER TABLE runs ADD COLUMN conditions TEXT NOT NULL DEFAULT '{}';
""",
    # version 4 -> 5: an interrupted suite run is one row of `interruptions`; the rows older versions wrote per
    # case it left (skipped, "interrupted: ...") are folded into one per worker run they came from (its start
    # time), with the cases that worker had finished as cases_done.
    4: _INTERRUPTIONS_TABLE + f"""
INSERT OR IGNORE INTO interruptions (uid, suite, hostname, device_type, device, gpu, uuid, model_name, pci_bus_id,
                                     reason, started_at, ended_at, cases_done, cases_left, running, workloads)
SELECT 'folded-' || MIN(r.id), r.suite, r.hostname, r.device_type, r.device, r.gpu, r.uuid, MAX(r.model_name),
       MAX(r.pci_bus_id), r.reason, r.started_at, MAX(r.ended_at),
       (SELECT COUNT(*) FROM runs d WHERE d.started_at = r.started_at AND d.suite = r.suite
               AND d.hostname = r.hostname AND d.device = r.device AND d.uuid = r.uuid
               AND NOT ({_legacy_interrupted("d")})),
       COUNT(*), '', json_group_array(DISTINCT r.workload)
FROM runs r WHERE {_legacy_interrupted("r")}
GROUP BY r.suite, r.hostname, r.device_type, r.device, r.gpu, r.uuid, r.started_at, r.reason;
DELETE FROM runs WHERE {_legacy_interrupted()};
""",
    # version 5 -> 6: the live verdicts' incidents (the table is made by the schema script that follows).
    5: "",
}

_JSON_COLUMNS = ("params", "figures", "details", "environment", "conditions")
_INTERRUPTION_JSON = ("workloads",)
INTERRUPTION_KIND = "interruption"
"""A spool line's ``kind`` for an interruption (a run's line has none: the spool of older versions)."""

Recorded = RunRecord | Interruption
"""What the history writes: a run, or a suite run's interruption."""
_COLUMNS = ("id", "suite", "workload", "precision", "params", "shape", "mode", "kernel_pass", "hostname",
            "device_type", "device", "gpu", "uuid", "model_name", "pci_bus_id", "status", "reason", "started_at",
            "ended_at", "figures", "details", "environment", "uid", "conditions")


class HistoryError(RuntimeError):
    """The history database cannot be opened at all."""


class _Broken(Exception):
    """The file is not a usable SQLite database (what :meth:`History._open` moves aside)."""


def error_reason(exc: BaseException) -> str:
    """A short, stable label for why a write failed (the ``reason`` label of the error counter)."""
    text = str(exc).lower()
    if "locked" in text or "busy" in text:
        return "locked"
    if "full" in text:
        return "disk_full"
    if "readonly" in text or "read-only" in text:
        return "read_only"
    if "malformed" in text or "not a database" in text or "corrupt" in text:
        return "corrupt"
    if isinstance(exc, (OSError, sqlite3.OperationalError)) and ("i/o" in text or "disk" in text):
        return "io"
    return "other"


@dataclass(frozen=True)
class HistoryHealth:
    """What the exporter shows of the history (``sixdim_history_*``)."""

    up: bool
    pending: int
    errors: dict[str, int]


@dataclass(frozen=True)
class Waiting:
    """What the history has not written yet (:meth:`History.waiting`)."""

    results: int
    """Results (runs and interruptions) waiting to be written."""
    spooled: int
    """Of those, the ones in the spool file (read back by the next ``History`` on this file)."""
    reason: str
    """Why the last write failed (:func:`error_reason`), or empty."""


@dataclass(frozen=True)
class PruneResult:
    runs_removed: int
    daily_rows: int
    seconds: float


class History:
    def __init__(self, path: str | Path, *, busy_timeout: float = BUSY_TIMEOUT_SECONDS,
                 max_pending: int = MAX_PENDING):
        self.path = Path(path)
        self.spool_path = self.path.with_name(self.path.name + ".spool")
        self.ledger_path = self.path.with_name(self.path.name + LEDGER_SUFFIX)
        """Results written to the database since its last complete checkpoint (:meth:`_settle_locked`)."""
        self.busy_timeout = busy_timeout
        self.moved_aside: Path | None = None
        """Where a broken database found at start was moved, if one was."""
        self.check_seconds = 0.0
        """How long the start-up ``quick_check`` took."""
        self._lock = threading.Lock()
        self._pending: deque[Recorded] = deque()
        self._max_pending = max_pending
        self._errors: dict[str, int] = {}
        self._up = True
        self._spool_warned = False
        self._spooled: set[str] = set()
        """The uids of the results in the spool file now (a full disk refuses some)."""
        self._ledgered: set[str] = set()
        """The uids this process put in the ledger since it was last emptied (each goes in once)."""
        self._restoring: set[str] = set()
        """The uids of the queued results read back from the ledger: already written once, perhaps lost since."""
        self._ledger_warned = False
        self._ledger_named: tuple[int, int] | None = None
        """The device and inode of the ledger whose name this process fsynced into its folder."""
        self._next_checkpoint = 0.0
        """When (``time.monotonic``) a write may ask for a checkpoint again (:data:`CHECKPOINT_SECONDS`)."""
        self._last_error = ""
        self._conn: sqlite3.Connection | None = None
        self._identity: tuple[int, int] | None = None
        """The device and inode of the file ``_conn`` has open, to notice it deleted or replaced."""
        try:
            self._conn = self._open()
        except HistoryError as exc:
            if not self._present_but_unwritable():
                raise
            self._up = False
            self._count("read_only")
            log.error("history: %s; the file is there but cannot be written (a read-only file system?): results "
                      "are kept in memory and written once it can be", _one_line(exc))
        self._load_spool()
        self._load_ledger()
        self.retry_pending()

    # ------------------------------------------------------------------ opening
    def _connect(self) -> sqlite3.Connection:
        self._refuse_links()
        for suffix in ("", "-wal", "-shm"):  # files an earlier sixdim (or SQLite's 0644) left readable
            tighten(Path(str(self.path) + suffix))
        create_private(self.path)
        db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=OPEN_TIMEOUT_SECONDS)
        db.row_factory = sqlite3.Row
        return db

    def _refuse_links(self) -> None:
        """A :class:`HistoryError` where the database, its -wal or -shm file or the spool is a symbolic
        link: neither sixdim nor SQLite makes one, and one planted in a folder others can write would
        make this process (root, for a daemon) write, or change the mode of, the file it points at.
        A link to the history's folder, or above it, is fine: only the files themselves are looked at."""
        for path in (self.path, Path(str(self.path) + "-wal"), Path(str(self.path) + "-shm"), self.spool_path,
                     self.ledger_path):
            if not path.is_symlink():
                continue
            try:
                target = f" (to {os.readlink(path)})"
            except OSError:
                target = ""
            raise HistoryError(f"{path} is a symbolic link{target}, which neither sixdim nor SQLite makes: refusing "
                               f"to write through it (a link planted beside the history would make sixdim change the "
                               f"file it points at); remove it if you did not make it, and give the real file with "
                               f"--history, SIXDIM_HISTORY or agent.history")

    def _open(self) -> sqlite3.Connection:
        try:
            make_folders(self.path.parent, FOLDER_MODE)  # the mode: each folder it makes, whatever the umask
        except OSError as exc:
            raise HistoryError(f"cannot create the history's folder {self.path.parent}: {exc.strerror or exc}; "
                               f"choose another place with --history, SIXDIM_HISTORY or agent.history") from None
        try:
            try:
                db = self._connect()
                self._check(db)
                self._prepare(db)
            except _Broken as broken:
                db.close()
                self._move_aside(str(broken))
                db = self._connect()
                self._prepare(db)
            for suffix in ("-wal", "-shm"):  # made by SQLite: checked, not trusted to follow the database's mode
                tighten(Path(str(self.path) + suffix))
            self._identity = self._file_identity()
            return db
        except HistoryError:
            raise
        except (OSError, sqlite3.Error) as exc:
            raise HistoryError(f"cannot open history database {self.path}: {exc}") from None

    def _check(self, db: sqlite3.Connection) -> None:
        """Raise :class:`_Broken` if the file is not a healthy SQLite database."""
        started = time.perf_counter()
        try:
            result = db.execute("PRAGMA quick_check(1)").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError) and "not a database" not in str(exc).lower():
                raise  # locked, unreadable: not broken, and not ours to move
            raise _Broken(str(exc)) from None
        finally:
            self.check_seconds = time.perf_counter() - started
        if result != "ok":
            raise _Broken(f"quick_check: {result}")

    def _prepare(self, db: sqlite3.Connection) -> None:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise HistoryError(f"{self.path}: written by a newer sixdim (schema {version} > {SCHEMA_VERSION})")
        if version != SCHEMA_VERSION:  # a current file needs no write to open: another process may hold the lock
            for old in range(version, SCHEMA_VERSION) if version > 0 else ():  # 0: a new, empty file
                if old in _MIGRATIONS:
                    db.executescript(_MIGRATIONS[old])
            db.executescript(_SCHEMA)
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            db.commit()
        db.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")

    def _move_aside(self, why: str) -> None:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        for suffix in ("", "-wal", "-shm"):
            source = Path(str(self.path) + suffix)
            if source.exists():
                os.replace(source, Path(str(target) + suffix))
        self.moved_aside = target
        self._count("corrupt")
        log.error("history database %s is unusable (%s); moved it to %s and started a new one",
                  _one_line(self.path), _one_line(why), _one_line(target))

    def _file_identity(self) -> tuple[int, int] | None:
        """The device and inode of the file at the history's path now; None where there is none."""
        try:
            status = os.stat(self.path)
        except FileNotFoundError:
            return None
        return status.st_dev, status.st_ino

    def _follow_path_locked(self) -> None:
        """Before a write: when the file at the history's path is no longer the one open (``rm
        history.db``, or another file renamed over it), SQLite would go on writing to the old one, and
        a deleted one's results would be lost when the process ends.  Log one warning and open the path
        again (a new database where the file is gone), the ids going on after the old file's, so a reader
        asking for the rows after the last id it saw (the board) finds the new ones.  A ``stat`` per write:
        cheap.  A path that cannot be looked at (a folder that lost its permissions) is left to the write."""
        if self._conn is None or self._identity is None:
            return
        try:
            now = self._file_identity()
        except OSError:
            return
        if now == self._identity:
            return
        sequences: list[tuple[str, int]] = []
        try:
            sequences = [(str(name), int(seq)) for name, seq in
                         self._conn.execute("SELECT name, seq FROM sqlite_sequence").fetchall()]
        except sqlite3.Error:
            pass
        log.warning("history: %s was %s while this sixdim had it open; results from now on go to %s",
                    _one_line(self.path), "deleted" if now is None else "replaced by another file",
                    "a new database there" if now is None else "that file")
        try:
            self._conn.close()  # the last connection's close checkpoints into the old file and removes its -wal
        except sqlite3.Error:
            pass
        self._conn, self._identity = None, None
        if now is None:  # a -wal or -shm still there is the deleted database's: a new one must not replay it
            for suffix in ("-wal", "-shm"):
                try:
                    Path(str(self.path) + suffix).unlink(missing_ok=True)
                except OSError:
                    pass
        try:
            self._conn = self._open()
        except HistoryError as exc:
            raise sqlite3.OperationalError(f"cannot open the history again ({exc})") from None
        with self._conn:  # the ids go on where the old file's ended
            for name, seq in sequences:
                self._conn.execute("INSERT INTO sqlite_sequence (name, seq) SELECT ?, 0 WHERE NOT EXISTS "
                                   "(SELECT 1 FROM sqlite_sequence WHERE name = ?)", (name, name))
                self._conn.execute("UPDATE sqlite_sequence SET seq = MAX(seq, ?) WHERE name = ?", (seq, name))

    def _present_but_unwritable(self) -> bool:
        """A history that exists and can be read, in a folder that cannot be written (a read-only
        mount): the agent runs on and queues results; anything else that cannot be opened is an error."""
        return (not self.path.is_symlink() and self.path.is_file() and os.access(self.path, os.R_OK)
                and not os.access(self.path.parent, os.W_OK))

    @property
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise sqlite3.OperationalError(f"attempt to write a readonly database: {self.path} is not open yet")
        return self._conn

    def close(self) -> None:
        """Close the database; its last connection's close checkpoints it, so the ledger goes too."""
        with self._lock:
            if self._conn is not None:
                if not self._pending and self.ledger_path.exists():
                    ledger = self._hold_ledger(create=False)
                    try:
                        self._settle_locked(ledger)
                    finally:
                        if ledger is not None:
                            os.close(ledger)
                self._conn.close()

    # ------------------------------------------------------------------ writing
    def add(self, record: RunRecord) -> int | None:
        """Record a run; returns its row id, or None while it waits in the queue (never raises).

        The record gets a ``uid`` if it has none, and its ``id`` once written."""
        return self._add(record)

    def add_interruption(self, interruption: Interruption) -> int | None:
        """Record an interrupted suite run, as durably as a run (:meth:`add`): its row id, or None while it waits."""
        return self._add(interruption)

    def _add(self, record: Recorded) -> int | None:
        if not record.uid:
            record.uid = uuid.uuid4().hex
        with self._lock:
            if len(self._pending) >= self._max_pending:
                dropped = self._pending.popleft()
                self._count("dropped")
                log.error("history: %d results waiting; dropped the oldest (%s)", self._max_pending,
                          _one_line(f"{dropped.workload} {dropped.shape}" if isinstance(dropped, RunRecord)
                                   else f"the interruption of suite {dropped.suite!r} on {dropped.device}"))
            self._pending.append(record)
            if not self._flush_locked():
                self._spool(record)
        return record.id

    def retry_pending(self) -> int:
        """Try again to write the queued results; returns how many are still waiting."""
        with self._lock:
            if self._pending:
                self._flush_locked()
            return len(self._pending)

    def pending(self) -> list[RunRecord]:
        """The results recorded but not yet written (the board shows them meanwhile)."""
        with self._lock:
            return [record for record in self._pending
                    if isinstance(record, RunRecord) and record.uid not in self._restoring]

    def pending_interruptions(self) -> list[Interruption]:
        """The interruptions recorded but not yet written."""
        with self._lock:
            return [record for record in self._pending
                    if isinstance(record, Interruption) and record.uid not in self._restoring]

    def health(self) -> HistoryHealth:
        with self._lock:
            return HistoryHealth(self._up, len(self._pending), dict(self._errors))

    def unsaved(self, records: Iterable[Recorded]) -> list[Recorded]:
        """Of these results (given to :meth:`add` or :meth:`add_interruption`), those the history holds in
        memory only: not written to the database, nor in the spool file (a full disk refuses both), nor
        anywhere at all any more (dropped from a full queue).  Whoever has them elsewhere keeps them there
        until this is empty: a process that ends loses its memory.  A result with no row id whose ``uid``
        the database holds is not among them: another ``History`` wrote it (a case the agent recorded as
        it ended, which a successor recovering the dead agent's worker record finds there and does not
        write again), and a leftover kept for it would be kept, and warned about, at every start."""
        with self._lock:
            maybe = [record for record in records if record.id is None and record.uid not in self._spooled]
            if not maybe:
                return []
            try:  # written by another History, or by an earlier one (a case recorded before its agent died)
                written = self._written_locked([record.uid for record in maybe])
            except sqlite3.Error:
                written = set()
            return [record for record in maybe if record.uid not in written]

    def waiting(self) -> Waiting:
        """What waits to be written: how many results, how many of them in the spool file, and why."""
        with self._lock:
            waiting = [r for r in self._pending if r.uid not in self._restoring]
            return Waiting(len(waiting), sum(1 for r in waiting if r.uid in self._spooled),
                           self._last_error if waiting else "")

    def _count(self, reason: str) -> None:
        self._errors[reason] = self._errors.get(reason, 0) + 1

    def _flush_locked(self) -> bool:
        """Write every queued result in one transaction; True if the queue is now empty."""
        batch = list(self._pending)
        ledger = self._hold_ledger()
        try:
            restored = self._write_locked(batch)
            due = time.monotonic() >= self._next_checkpoint
            self._note_in_ledger(ledger, batch, sync=due)
            if due:
                self._settle_locked(ledger)
                self._next_checkpoint = time.monotonic() + CHECKPOINT_SECONDS
        except (sqlite3.Error, OSError) as exc:
            reason = error_reason(exc)
            self._count(reason)
            self._last_error = reason
            if self._up:
                log.warning("history: cannot write to %s (%s: %s); %d result(s) kept in memory%s and retried",
                            _one_line(self.path), reason, _one_line(exc), len(batch),
                            f" and in {_one_line(self.spool_path)}" if not self._spool_warned else "")
            self._up = False
            return False
        finally:
            if ledger is not None:
                os.close(ledger)  # drops the hold
        if restored:
            log.warning("history: %d accepted result(s) were missing from %s although they had been written to it "
                        "(its write-ahead log lost or damaged before a checkpoint: a crash, a damaged -wal file); "
                        "restored them from %s", restored, _one_line(self.path), _one_line(self.ledger_path))
        self._restoring.clear()
        self._pending.clear()
        if not self._up:
            log.info("history: writable again; %d waiting result(s) written", len(batch))
        self._up = True
        self._clear_spool()
        return True

    def _write_locked(self, batch: list[Recorded]) -> int:
        """Write ``batch`` in one transaction, giving each its row id; returns how many of those read back
        from the ledger were not in the database (restored now)."""
        restored = 0
        self._follow_path_locked()
        if self._conn is None:  # not opened at start (read-only): try again now
            try:
                self._conn = self._open()
            except HistoryError as exc:
                raise sqlite3.OperationalError(f"attempt to write a readonly database ({exc})") from None
        ids: dict[str, int] = {}
        with self._db:  # one transaction: all or nothing
            for table, records in (("runs", [r for r in batch if isinstance(r, RunRecord)]),
                                   ("interruptions", [r for r in batch if isinstance(r, Interruption)])):
                # the ledger's first (older, and counted apart: a row it adds was missing), then the new ones
                for group in ([r for r in records if r.uid in self._restoring],
                              [r for r in records if r.uid not in self._restoring]):
                    if not group:
                        continue
                    rows = [_row(record) for record in group]
                    columns = list(rows[0])
                    cursor = self._db.executemany(f"INSERT OR IGNORE INTO {table} ({', '.join(columns)}) "
                                                  f"VALUES ({', '.join(':' + c for c in columns)})", rows)
                    if group[0].uid in self._restoring:
                        restored += max(cursor.rowcount, 0)
                for start in range(0, len(records), 900):  # SQLite's bound-parameter limit
                    chunk = [r.uid for r in records[start:start + 900]]
                    ids.update(self._db.execute(
                        f"SELECT uid, id FROM {table} WHERE uid IN ({','.join('?' * len(chunk))})",
                        chunk).fetchall())
        for record in batch:
            record.id = ids.get(record.uid)
        return restored

    # ------------------------------------------------------------------ the spool file
    def _spool(self, record: Recorded) -> None:
        data = _spooled(record)
        try:
            fd = os.open(self.spool_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW,
                         FILE_MODE)  # never through a link planted as the spool
            with open(fd, "a", encoding="utf-8") as spool:
                status = os.fstat(fd)
                if not status.st_size and stat.S_IMODE(status.st_mode) != FILE_MODE and status.st_uid == os.geteuid():
                    os.fchmod(fd, FILE_MODE)  # just made: open's mode less the umask; exactly it instead
                spool.write(json.dumps(data, sort_keys=True) + "\n")
                spool.flush()
                os.fsync(spool.fileno())
            self._spooled.add(record.uid)
        except OSError as exc:  # a full or read-only disk: memory only
            if not self._spool_warned:
                log.warning("history: cannot write the spool %s either (%s); waiting results are in memory only",
                            _one_line(self.spool_path), _one_line(exc))
                self._spool_warned = True

    def _clear_spool(self) -> None:
        self._spooled.clear()  # every result in it is written
        try:
            self.spool_path.unlink(missing_ok=True)
        except OSError:
            pass

    def _load_spool(self) -> None:
        """Queue the results an earlier process spooled and never wrote (a locked or full database)."""
        for record in _read_results(self.spool_path, "spool"):
            self._pending.append(record)
            self._spooled.add(record.uid)
        if self._pending:
            log.info("history: %d result(s) from %s to write", len(self._pending), _one_line(self.spool_path))

    # ------------------------------------------------------------------ the ledger
    def _hold_ledger(self, create: bool = True) -> int | None:
        """The ledger, opened (made 0600 where missing, never through a link) and held (``flock``) for one
        write, its note in the ledger and its checkpoint, so that another sixdim's checkpoint cannot remove
        the ledger between this process's commit and its note; None (warned about once) where it cannot be:
        the write goes on without it.
        Waits at most :data:`LEDGER_LOCK_SECONDS` for another process's hold.  ``create`` False: None where
        there is no ledger."""
        deadline = time.monotonic() + LEDGER_LOCK_SECONDS
        try:
            while True:
                try:
                    fd = os.open(self.ledger_path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW
                                 | os.O_NONBLOCK | (os.O_CREAT if create else 0), FILE_MODE)
                except FileNotFoundError:
                    if create:
                        raise
                    return None
                try:
                    status = os.fstat(fd)
                    if not stat.S_ISREG(status.st_mode):
                        raise OSError(f"{self.ledger_path} is not a regular file")
                    if not status.st_size and stat.S_IMODE(status.st_mode) != FILE_MODE \
                            and status.st_uid == os.geteuid():
                        os.fchmod(fd, FILE_MODE)  # just made: open's mode less the umask; exactly it instead
                    while True:
                        try:
                            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                            break
                        except BlockingIOError:
                            if time.monotonic() >= deadline:
                                raise OSError(f"{self.ledger_path} is held by another process") from None
                            time.sleep(0.005)
                    try:  # emptied and removed by another process's checkpoint meanwhile: the file there now
                        now = os.stat(self.ledger_path, follow_symlinks=False)
                    except FileNotFoundError:
                        now = None
                    if now is not None and (now.st_dev, now.st_ino) == (status.st_dev, status.st_ino):
                        return fd
                except BaseException:
                    os.close(fd)
                    raise
                os.close(fd)
        except OSError as exc:
            if not self._ledger_warned:
                log.warning("history: cannot keep the ledger %s (%s); results written are recoverable only from "
                            "the database's write-ahead log until it is checkpointed", _one_line(self.ledger_path),
                            _one_line(exc))
                self._ledger_warned = True
            return None

    def _note_in_ledger(self, ledger: int | None, batch: list[Recorded], sync: bool) -> None:
        """Just written (the hold on the ledger taken before the write): the results of ``batch`` not in the
        ledger yet, appended, and with ``sync`` (a checkpoint is due) fsynced with whatever went before.
        So the ledger is as durable as the commit itself (``synchronous=NORMAL``): the writes of a burst
        wait at most :data:`CHECKPOINT_SECONDS` for an fsync, which costs more than the write (several
        milliseconds on a busy disk), and a SIGKILL loses none of them (they are in the kernel).  After the
        write, not before, so that the ledger holds only results the database had and never stands in a
        write's way: on a disk with room for the write but not for both, what this appended is cut off again
        and the write stands, the ledger without them (warned about once)."""
        if ledger is None:
            return
        size = -1
        new: list[Recorded] = []
        try:
            status = os.fstat(ledger)
            size = status.st_size
            if not size:  # a new ledger: what this process noted was in one a checkpoint removed
                self._ledgered.clear()
            new = [record for record in batch if record.uid not in self._ledgered]
            if not new:
                return
            data = "".join(json.dumps(_spooled(record), sort_keys=True) + "\n" for record in new).encode()
            written = 0
            while written < len(data):  # a nearly full disk takes part of it, then refuses the rest
                written += os.write(ledger, data[written:])
            if sync:
                os.fsync(ledger)
            if sync and self._ledger_named != (status.st_dev, status.st_ino):  # its name too, for a power cut
                folder = os.open(self.ledger_path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    os.fsync(folder)
                finally:
                    os.close(folder)
                self._ledger_named = (status.st_dev, status.st_ino)
        except OSError as exc:  # a full disk: the results are in the database all the same
            if size >= 0:
                try:
                    os.ftruncate(ledger, size)  # no half line, and the space back
                except OSError:
                    pass
            if not self._ledger_warned:
                log.warning("history: cannot write the ledger %s (%s); results written are recoverable only from "
                            "the database's write-ahead log until it is checkpointed", _one_line(self.ledger_path),
                            _one_line(exc))
                self._ledger_warned = True
            return
        self._ledgered.update(record.uid for record in new)

    def _settle_locked(self, ledger: int | None) -> None:
        """Checkpoint the database (``PASSIVE``: it never waits, nor holds anyone up) and, where that copied
        every frame of the write-ahead log into the database file, remove the ledger: its results are now
        where a lost or damaged -wal file cannot take them.  A checkpoint a reader's older snapshot holds
        back (the daemon reading while ``sixdim run`` writes) leaves the ledger for a later one."""
        if ledger is None or self._conn is None:
            return
        try:
            busy, frames, copied = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as exc:
            log.debug("history: checkpoint of %s not done now: %s", _one_line(self.path), _one_line(exc))
            return
        if busy or frames != copied:
            return
        try:  # held: no other sixdim is between its commit and its note (and one waiting opens it again)
            os.unlink(self.ledger_path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.debug("history: cannot remove %s: %s", _one_line(self.ledger_path), _one_line(exc))
            return
        self._ledgered.clear()

    def _load_ledger(self) -> None:
        """Queue the ledger's results that are not queued yet (the spool's are), to be written again: those
        the database has are ignored by their uid, and those it lacks (its write-ahead log lost or damaged
        before a checkpoint) are restored, with a warning (:meth:`_flush_locked`)."""
        known = {record.uid for record in self._pending}
        for record in _read_results(self.ledger_path, "ledger"):
            self._ledgered.add(record.uid)
            if record.uid not in known:
                known.add(record.uid)
                self._pending.append(record)
                self._restoring.add(record.uid)

    def _written_locked(self, uids: list[str]) -> set[str]:
        """Which of these uids the database holds, runs or interruptions (``sqlite3.Error`` where it cannot
        be read)."""
        found: set[str] = set()
        for start in range(0, len(uids), 900):  # SQLite's bound-parameter limit
            chunk = uids[start:start + 900]
            for table in ("runs", "interruptions"):  # an interruption's uid is as unique as a run's
                found.update(row[0] for row in self._db.execute(
                    f"SELECT uid FROM {table} WHERE uid IN ({','.join('?' * len(chunk))})", chunk))
        return found

    # ------------------------------------------------------------------ reading
    def _records(self, sql: str, args: Iterable[Any] = (),
                 keep: Callable[[RunRecord], RunRecord] | None = None) -> list[RunRecord]:
        """The runs a query selects; ``keep``: what of each is kept (:func:`sixdim.core.results.lean`), made
        as the rows are read, a few hundred at a time, so the full records never exist all at once."""
        out: list[RunRecord] = []
        with self._lock:
            cursor = self._db.execute(sql, tuple(args))
            while rows := cursor.fetchmany(FETCH_ROWS):
                out += [keep(_to_record(row)) for row in rows] if keep is not None else map(_to_record, rows)
        return out

    def latest_ok(self) -> list[RunRecord]:
        """The newest successful run of each series in each suite, oldest first (so the last one of
        a series is its newest of all suites), as the board keeps it (:func:`sixdim.core.results.lean`: no
        ``details`` or ``conditions``, which are not even read).  Reading 5,000 full records at once cost the
        daemon 50 MB of short-lived objects at start, whose freed memory it then kept."""
        return self._records(
            f"SELECT {_without('details', 'conditions')} FROM runs WHERE id IN "
            f"(SELECT MAX(id) FROM runs WHERE status = 'ok' GROUP BY {_SERIES}, suite) ORDER BY id", keep=lean)

    def status_counts(self) -> list[tuple[RunRecord, int]]:
        """Per series and status, the number of runs (pruned ones included), with the newest run as
        the label source (lean, without figures: :func:`sixdim.core.results.lean`)."""
        with self._lock:
            rows = self._db.execute(  # interrupted skips are not runs (sixdim.core.results.counts_as_run)
                f"SELECT MAX(id) AS newest, COUNT(*) AS n, {_SERIES}, status FROM runs "
                f"WHERE NOT ({_legacy_interrupted()}) "
                f"GROUP BY {_SERIES}, status").fetchall()
            pruned = {tuple(row[c] for c in (*_SERIES_COLUMNS, "status")): row
                      for row in self._db.execute("SELECT * FROM pruned_counts")}
        newest: dict[int, int] = {}
        for row in rows:
            earlier = pruned.pop(tuple(row[c] for c in (*_SERIES_COLUMNS, "status")), None)
            newest[row["newest"]] = row["n"] + (earlier["runs"] if earlier is not None else 0)
        records: list[RunRecord] = []
        ids = list(newest)
        for start in range(0, len(ids), 900):  # SQLite's bound-parameter limit
            chunk = ids[start:start + 900]
            records += self._records(f"SELECT {_without('details', 'conditions', 'figures')} FROM runs "
                                     f"WHERE id IN ({','.join('?' * len(chunk))})", chunk, keep=_label_source)
        records.sort(key=lambda r: r.id or 0)
        counted = [(record, newest[record.id]) for record in records if record.id is not None]
        # series whose every run of that status was pruned: their count stays, labelled from what was kept
        return [(_label_source(_pruned_record(row)), row["runs"]) for row in pruned.values()] + counted

    def latest_environment(self, device: str, uuid: str, suite: str | None = None,
                           after_id: int = 0) -> tuple[int, dict[str, Any]] | None:
        """The row id and environment (versions and settings) of the newest run on a device (by its name and
        UUID) that ran its case (``ok`` or ``incorrect``: a worker reported it), of one suite or of any, among
        the runs after ``after_id``; None where there is none.  Read backwards by row id down to ``after_id``,
        so a caller that remembers what it found reads only the runs recorded since."""
        where, args = "id > ? AND device = ? AND uuid = ? AND status IN ('ok', 'incorrect')", [after_id, device, uuid]
        if suite is not None:
            where, args = where + " AND suite = ?", [*args, suite]
        with self._lock:
            row = self._db.execute(f"SELECT id, environment FROM runs WHERE {where} ORDER BY id DESC LIMIT 1",
                                   args).fetchone()
        return None if row is None else (int(row["id"]), json.loads(row["environment"]))

    def last_id(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COALESCE(MAX(id), 0) FROM runs").fetchone()[0])

    def after(self, last_id: int, limit: int | None = None) -> list[RunRecord]:
        """Runs recorded after the one with ``last_id``, oldest first (at most ``limit``)."""
        bound = f" LIMIT {int(limit)}" if limit else ""
        return self._records(f"SELECT * FROM runs WHERE id > ? ORDER BY id{bound}", (last_id,))

    def known(self, uids: Iterable[str]) -> set[str]:
        """Which of these run (or interruption) uids the history holds, written or waiting to be (a case
        recorded as it ended, which a successor recovering its worker's record must not count again).  Where
        the database cannot be read, those waiting only: a write of the others lands once all the same (their
        uid)."""
        wanted = [uid for uid in uids if uid]
        with self._lock:
            found = {record.uid for record in self._pending if record.uid in wanted}
            try:
                found |= self._written_locked(wanted)
            except sqlite3.Error as exc:
                log.debug("history: cannot read which runs are there now: %s", _one_line(exc))
        return found

    def interruptions_after(self, last_id: int) -> list[Interruption]:
        """The interrupted suite runs recorded after the one with ``last_id``, oldest first."""
        with self._lock:
            rows = self._db.execute("SELECT * FROM interruptions WHERE id > ? ORDER BY id", (last_id,)).fetchall()
        return [_to_interruption(row) for row in rows]

    def save_incidents(self, incidents: Iterable[Mapping[str, Any]]) -> int:
        """Insert or update incidents of the live verdicts (rows of :data:`INCIDENT_COLUMNS`; ``causes`` a list),
        each found by its series and ``opened_at``; returns how many.  One short transaction.  Raises
        ``sqlite3.Error`` where the database cannot be written now: the caller keeps them and tries again (an
        incident is also replayed from the runs at the next restart, so none is lost for good)."""
        rows = [tuple(json.dumps(row[c]) if c == "causes" else row[c] for c in INCIDENT_COLUMNS) for row in incidents]
        if not rows:
            return 0
        updates = ", ".join(f"{c} = excluded.{c}" for c in INCIDENT_COLUMNS if c not in (*SERIES_FIELDS, "opened_at"))
        marks = ", ".join("?" * len(INCIDENT_COLUMNS))
        with self._lock, self._db:
            self._db.executemany(f"INSERT INTO incidents ({', '.join(INCIDENT_COLUMNS)}) VALUES ({marks}) "
                                 f"ON CONFLICT ({_SERIES}, opened_at) DO UPDATE SET {updates}", rows)
        return len(rows)

    def incidents(self) -> list[dict[str, Any]]:
        """Every incident kept, the earliest start first (``causes`` decoded)."""
        with self._lock:
            rows = self._db.execute("SELECT * FROM incidents ORDER BY started_at, id").fetchall()
        return [{**dict(row), "causes": json.loads(row["causes"])} for row in rows]

    def daily(self) -> list[dict[str, Any]]:
        """The kept daily medians of pruned runs, oldest first."""
        with self._lock:
            rows = self._db.execute("SELECT * FROM daily ORDER BY day").fetchall()
        return [{**dict(row), "figures": json.loads(row["figures"])} for row in rows]

    def _recent_ids(self, runs: int, upto_id: int | None) -> list[int]:
        """The row ids of the last ``runs`` runs of every series (up to ``upto_id``), oldest first: one
        window-function query."""
        bound, args = ("WHERE id <= ?", (upto_id,)) if upto_id is not None else ("", ())
        with self._lock:
            return [row[0] for row in self._db.execute(
                f"SELECT id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY {_SERIES} ORDER BY id DESC) AS n "
                f"FROM runs {bound}) WHERE n <= ? ORDER BY id", (*args, runs))]

    def recent_for_verdicts(self, runs: int, upto_id: int | None = None,
                            batch: int = FETCH_ROWS) -> Iterator[tuple[RunRecord, bool]]:
        """The last ``runs`` runs of every series (row id up to ``upto_id``), oldest first, for the daemon's
        regression verdicts, which read a run's conditions back by id only when a diagnosis needs them
        (:meth:`conditions_of`): each run without its ``details``, ``params`` and ``conditions``, and
        whether it recorded conditions.  Reading and decoding fewer columns is most of what a restore of
        100,000 runs costs besides judging them.  One window-function query picks the ids, then rows are
        read in batches, so a restore holds neither every row nor the database for long."""
        ids = self._recent_ids(runs, upto_id)
        columns = [c for c in _COLUMNS if c not in ("details", "params", "conditions")]
        decoded = [i for i, c in enumerate(columns) if c in _JSON_COLUMNS]
        for start in range(0, len(ids), batch):
            with self._lock:
                rows = self._db.execute(
                    f"SELECT {', '.join(columns)}, conditions NOT IN ('{{}}', '') FROM runs "
                    "WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id", (json.dumps(ids[start:start + batch]),)
                ).fetchall()
            for row in rows:
                values = list(row)
                for i in decoded:
                    values[i] = json.loads(values[i])
                record = RunRecord(**dict(zip(columns, values[:-1], strict=True)), details={}, params={},
                                   conditions={})
                yield record, bool(values[-1])

    def conditions_of(self, ids: Iterable[int]) -> dict[int, dict[str, Any]]:
        """The recorded conditions of the runs with these row ids (:func:`conditions_by_id`): what the
        daemon's regression verdicts read back for a diagnosis, rather than keep every run's in memory."""
        with self._lock:
            return conditions_by_id(self._db, ids)

    def __iter__(self) -> Iterator[RunRecord]:
        return iter(self._records("SELECT * FROM runs ORDER BY id"))

    # ------------------------------------------------------------------ retention
    def prune(self, *, keep_seconds: float, max_runs: int | None = None, now: float | None = None) -> PruneResult:
        """Thin runs that ended more than ``keep_seconds`` ago, and the oldest beyond ``max_runs``.

        Each pruned (series, day, driver/CUDA/torch) keeps the median of every figure of its ``ok``
        runs in ``daily``; every pruned run is added to ``pruned_counts``.  Runs in batches of
        :data:`PRUNE_BATCH` rows, each batch its own short transaction, so scrapes and writers are
        held up only briefly.  Raises ``sqlite3.Error`` if the database cannot be written."""
        started = time.perf_counter()
        cutoff = (time.time() if now is None else now) - keep_seconds
        with self._lock:
            if not self._pending and self.ledger_path.exists():  # a pruned run must not come back from it
                ledger = self._hold_ledger(create=False)
                try:
                    self._settle_locked(ledger)
                finally:
                    if ledger is not None:
                        os.close(ledger)
            if max_runs is not None:
                total = self._db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
                if total > max_runs:
                    row = self._db.execute("SELECT ended_at FROM runs ORDER BY ended_at LIMIT 1 OFFSET ?",
                                           (total - max_runs,)).fetchone()
                    cutoff = max(cutoff, row[0]) if row else cutoff
        removed = daily_rows = 0
        while True:
            with self._lock:
                rows = self._db.execute("SELECT * FROM runs WHERE ended_at < ? ORDER BY id LIMIT ?",
                                        (cutoff, PRUNE_BATCH)).fetchall()
                if not rows:
                    break
                with self._db:
                    daily_rows += self._thin(rows)
                    self._db.executemany("DELETE FROM runs WHERE id = ?", [(row["id"],) for row in rows])
            removed += len(rows)
        with self._lock, self._db:  # an incident over before the runs kept began: its runs are gone, it goes too
            self._db.execute("DELETE FROM incidents WHERE ended_at IS NOT NULL AND ended_at < ?", (cutoff,))
        seconds = time.perf_counter() - started
        if removed:
            log.info("history: pruned %d run(s) that ended before %s into %d daily row(s) in %.2f s", removed,
                     datetime.fromtimestamp(cutoff, timezone.utc).isoformat(timespec="seconds"), daily_rows, seconds)
        return PruneResult(removed, daily_rows, seconds)

    def _thin(self, rows: list[sqlite3.Row]) -> int:
        """Fold ``rows`` into ``daily`` (medians, merged with a day already there) and ``pruned_counts``."""
        counts: dict[tuple[str, ...], list[Any]] = {}
        days: dict[tuple[str, ...], list[dict[str, float]]] = {}
        for row in rows:  # oldest first: the last one seen labels the count
            if row["status"] != "ok" and not counts_as_run(row["status"], row["reason"]):
                continue  # an interrupted skip was never counted: pruning it changes no count
            series = tuple(row[c] for c in _SERIES_COLUMNS)
            key = (*series, row["status"])
            previous = counts.get(key)
            counts[key] = [(previous[0] if previous else 0) + 1, row["model_name"], row["pci_bus_id"],
                           row["suite"], row["ended_at"]]
            if row["status"] != "ok":
                continue
            environment = json.loads(row["environment"])
            day = datetime.fromtimestamp(row["ended_at"], timezone.utc).strftime("%Y-%m-%d")
            key = (*series, day, str(environment.get("driver", "")), str(environment.get("cuda_runtime", "")),
                   str(environment.get("torch", "")))
            days.setdefault(key, []).append(json.loads(row["figures"]))
        self._db.executemany(
            f"INSERT INTO pruned_counts ({_SERIES}, status, runs, model_name, pci_bus_id, suite, last_ended_at) "
            f"VALUES ({','.join('?' * 10)}, ?, ?, ?, ?, ?) "
            f"ON CONFLICT ({_SERIES}, status) DO UPDATE SET runs = runs + excluded.runs, "
            f"model_name = excluded.model_name, pci_bus_id = excluded.pci_bus_id, suite = excluded.suite, "
            f"last_ended_at = excluded.last_ended_at",
            [(*key, *value) for key, value in counts.items()])
        where = " AND ".join(f"{c} = ?" for c in (*_SERIES_COLUMNS, "day", "driver", "cuda", "torch"))
        for key, figures in days.items():
            earlier = self._db.execute(f"SELECT runs, figures FROM daily WHERE {where}", key).fetchone()
            runs = len(figures)
            if earlier is not None:  # a day split across batches: weight the earlier median by its runs
                figures = [json.loads(earlier["figures"])] * earlier["runs"] + figures
                runs += earlier["runs"]
            self._db.execute(
                f"INSERT OR REPLACE INTO daily ({_SERIES}, day, driver, cuda, torch, runs, figures) "
                f"VALUES ({','.join('?' * 13)}, ?, ?)", (*key, runs, json.dumps(_medians(figures), sort_keys=True)))
        return len(days)


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


def create_private(path: Path) -> None:
    """Create ``path`` empty with mode 0600 unless it exists (SQLite takes an empty file for a new
    database).  Not a process-wide umask, which would race with the other threads' files: ``os.open``
    with the mode, then ``fchmod``, as the umask may take bits from the owner too."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)


def tighten(path: Path) -> None:
    """Take the group's and others' permission bits off a history file (0644 becomes 0600; a 0444 file
    becomes 0400, not writable), with a warning, when this process's user owns it; leave alone a file
    that is missing, not ours (another user's history is theirs to fix), not a regular file, or on a
    read-only mount (warned about).

    Never through a symbolic link (logged and left alone: a link planted in a shared folder would make
    a root daemon chmod any file): the mode is changed with ``fchmod`` on a descriptor opened with
    ``O_NOFOLLOW`` (Linux has no ``lchmod``), after checking that what was opened is the regular file
    ``lstat`` saw, of this user.  ``O_NONBLOCK``: a FIFO put there does not block the open."""
    try:
        seen = os.lstat(path)
    except OSError:
        return  # missing, or unreadable: opening it says why
    if stat.S_ISLNK(seen.st_mode):
        log.warning("history: %s is a symbolic link, which neither sixdim nor SQLite makes; the mode of what it "
                    "points at is left alone", _one_line(path))
        return
    mode = stat.S_IMODE(seen.st_mode)
    if not stat.S_ISREG(seen.st_mode) or not mode & 0o077 or seen.st_uid != os.geteuid():
        return
    private = mode & ~0o077
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        log.warning("history: %s is mode %04o (its group or others may read it) and cannot be made %04o: %s",
                    _one_line(path), mode, private, _one_line(exc.strerror or exc))
        return
    try:
        status = os.fstat(fd)
        if (status.st_dev, status.st_ino) != (seen.st_dev, seen.st_ino) or not stat.S_ISREG(status.st_mode) \
                or status.st_uid != os.geteuid():
            return  # replaced between the look and the open: not what was checked
        mode = stat.S_IMODE(status.st_mode)
        if not mode & 0o077:
            return
        private = mode & ~0o077
        os.fchmod(fd, private)
    except OSError as exc:
        log.warning("history: %s is mode %04o (its group or others may read it) and cannot be made %04o: %s",
                    _one_line(path), mode, private, _one_line(exc.strerror or exc))
        return
    finally:
        os.close(fd)
    log.warning("history: %s was mode %04o (its group or others could read it); made it %04o", _one_line(path), mode,
                private)


def _pruned_record(row: sqlite3.Row) -> RunRecord:
    """A stand-in for the runs of a count whose every run was pruned: labels only, no figures."""
    return RunRecord(suite=row["suite"], workload=row["workload"], precision=row["precision"], params={},
                     shape=row["shape"], mode=row["mode"], kernel_pass=row["kernel_pass"], hostname=row["hostname"],
                     device_type=row["device_type"], device="", gpu=row["gpu"], uuid=row["uuid"],
                     model_name=row["model_name"], pci_bus_id=row["pci_bus_id"], status=row["status"],
                     reason="pruned from the history", started_at=row["last_ended_at"],
                     ended_at=row["last_ended_at"])


def _medians(figures: list[dict[str, float]]) -> dict[str, float]:
    names = sorted({name for f in figures for name in f})
    return {name: statistics.median([f[name] for f in figures if isinstance(f.get(name), (int, float))])
            for name in names if any(isinstance(f.get(name), (int, float)) for f in figures)}


def _spooled(record: Recorded) -> dict[str, Any]:
    """A result as a line of the spool or the ledger has it (an interruption says so)."""
    data = record.to_dict()
    if isinstance(record, Interruption):
        data["kind"] = INTERRUPTION_KIND
    return data


def _read_results(path: Path, what: str) -> list[Recorded]:
    """The results in a spool or ledger file (JSON lines, :func:`_spooled`), each without its row id; none
    where there is no file.  Never through a link, nor from anything but a regular file; a line that cannot
    be read (cut by a crash) is skipped with a warning, the rest still count."""
    tighten(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        with open(fd, encoding="utf-8") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise OSError(f"{path} is not a regular file")
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        log.warning("history: cannot read the %s %s: %s", what, _one_line(path), _one_line(exc))
        return []
    records: list[Recorded] = []
    for number, line in enumerate(lines, 1):
        try:
            data = json.loads(line)
            data["id"] = None
            kind = data.pop("kind", "run")
            records.append(Interruption(**data) if kind == INTERRUPTION_KIND else RunRecord(**data))
        except (ValueError, TypeError, AttributeError) as exc:
            log.warning("history: %s line %d is unreadable (%s); skipped", _one_line(path), number, _one_line(exc))
    return records


def _row(record: Recorded) -> dict[str, Any]:
    row = record.to_dict()
    row.pop("id")
    for column in _JSON_COLUMNS if isinstance(record, RunRecord) else _INTERRUPTION_JSON:
        row[column] = json.dumps(row[column], sort_keys=True)
    return row


def _label_source(record: RunRecord) -> RunRecord:
    return lean(record, figures=False)


def _without(*columns: str) -> str:
    """A select list of every run column, those named read as an empty JSON object instead."""
    return ", ".join(f"'{{}}' AS {c}" if c in columns else c for c in _COLUMNS)


def _to_interruption(row: sqlite3.Row) -> Interruption:
    data = dict(row)
    for column in _INTERRUPTION_JSON:
        data[column] = json.loads(data[column])
    return Interruption(**data)


def _to_record(row: sqlite3.Row) -> RunRecord:
    data = dict(row)
    for column in _JSON_COLUMNS:
        data[column] = json.loads(data[column])
    return RunRecord(**data)
