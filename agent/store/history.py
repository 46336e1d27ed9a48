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

import json
import logging
import os
import sqlite3
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
from sixdim.core.results import SERIES_FIELDS, Interruption, RunRecord, lean
from sixdim.store.errors import HistoryError, as_store_error, error_reason
from sixdim.store.files import FOLDER_MODE, create_private, one_line, refuse_links, tighten
from sixdim.store.retention import PRUNE_BATCH, PruneResult, pruned_record, thin
from sixdim.store.rows import conditions_by_id, row_of, select_without, to_interruption, to_record
from sixdim.store.schema import (
    COLUMNS,
    INCIDENT_COLUMNS,
    JSON_COLUMNS,
    SERIES,
    SERIES_COLUMNS,
    Recorded,
    legacy_interrupted,
    prepare,
)
from sixdim.store.spool import CHECKPOINT_SECONDS, LEDGER_SUFFIX, SPOOL_SUFFIX, Ledger, Spool

log = logging.getLogger("sixdim")

BUSY_TIMEOUT_SECONDS = 0.25
"""How long one write or read waits for another process's lock before giving up (and queueing)."""
OPEN_TIMEOUT_SECONDS = 30.0
"""How long opening the file at start waits for a lock: once, before the agent serves anything."""
MAX_PENDING = 10_000
"""Results kept in memory while the database cannot be written; beyond it the oldest are dropped
(and counted): about 30 MB at the size of a kernel result."""
FETCH_ROWS = 500
"""Rows read at a time where each becomes a record."""
class _Broken(Exception):
    """The file is not a usable SQLite database (what :meth:`History._open` moves aside)."""


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


class History:
    def __init__(self, path: str | Path, *, busy_timeout: float = BUSY_TIMEOUT_SECONDS,
                 max_pending: int = MAX_PENDING):
        self.path = Path(path)
        self._spool_file = Spool(self.path.with_name(self.path.name + SPOOL_SUFFIX))
        self._ledger = Ledger(self.path.with_name(self.path.name + LEDGER_SUFFIX))
        self.spool_path = self._spool_file.path
        self.ledger_path = self._ledger.path
        """Results written to the database since its last complete checkpoint (``Ledger.settle``)."""
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
        self._restoring: set[str] = set()
        """The uids of the queued results read back from the ledger: already written once, perhaps lost since."""
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
                      "are kept in memory and written once it can be", one_line(exc))
        self._load_spool()
        self._load_ledger()
        self.retry_pending()

    # ------------------------------------------------------------------ opening
    def _connect(self) -> sqlite3.Connection:
        refuse_links((self.path, Path(str(self.path) + "-wal"), Path(str(self.path) + "-shm"), self.spool_path,
                      self.ledger_path))
        for suffix in ("", "-wal", "-shm"):  # files an earlier sixdim (or SQLite's 0644) left readable
            tighten(Path(str(self.path) + suffix))
        create_private(self.path)
        db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=OPEN_TIMEOUT_SECONDS)
        db.row_factory = sqlite3.Row
        return db

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
                prepare(db, self.path, self.busy_timeout)
            except _Broken as broken:
                db.close()
                self._move_aside(str(broken))
                db = self._connect()
                prepare(db, self.path, self.busy_timeout)
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
                  one_line(self.path), one_line(why), one_line(target))

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
                    one_line(self.path), "deleted" if now is None else "replaced by another file",
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
        """Close the database, checkpointing it first; the ledger goes only where that checkpoint copied every frame
        (no result pending, no reader holding it back): otherwise the next open reconciles it."""
        with self._lock:
            if self._conn is not None:
                if not self._pending:
                    self._settle_ledger_locked()
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
                          one_line(f"{dropped.workload} {dropped.shape}" if isinstance(dropped, RunRecord)
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
            maybe = [record for record in records if record.id is None and record.uid not in self._spool_file.uids]
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
            return Waiting(len(waiting), sum(1 for r in waiting if r.uid in self._spool_file.uids),
                           self._last_error if waiting else "")

    def _count(self, reason: str) -> None:
        self._errors[reason] = self._errors.get(reason, 0) + 1

    def _flush_locked(self) -> bool:
        """Write every queued result in one transaction; True if the queue is now empty."""
        batch = list(self._pending)
        ledger = self._ledger.hold()
        try:
            restored = self._write_locked(batch)
            due = time.monotonic() >= self._next_checkpoint
            self._ledger.note(ledger, batch, sync=due)
            if due:
                self._ledger.settle(ledger, self._conn, self.path)
                self._next_checkpoint = time.monotonic() + CHECKPOINT_SECONDS
        except (sqlite3.Error, OSError) as exc:
            reason = error_reason(exc)
            self._count(reason)
            self._last_error = reason
            if self._up:
                log.warning("history: cannot write to %s (%s: %s); %d result(s) kept in memory%s and retried",
                            one_line(self.path), reason, one_line(exc), len(batch),
                            f" and in {one_line(self.spool_path)}" if not self._spool_file.warned else "")
            self._up = False
            return False
        finally:
            if ledger is not None:
                os.close(ledger)  # drops the hold
        if restored:
            log.warning("history: %d accepted result(s) were missing from %s although they had been written to it "
                        "(its write-ahead log lost or damaged before a checkpoint: a crash, a damaged -wal file); "
                        "restored them from %s", restored, one_line(self.path), one_line(self.ledger_path))
        self._restoring.clear()
        self._pending.clear()
        if not self._up:
            log.info("history: writable again; %d waiting result(s) written", len(batch))
        self._up = True
        self._spool_file.clear()
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
                    rows = [row_of(record) for record in group]
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

    # ------------------------------------------------------------------ the spool and the ledger (sixdim.store.spool)
    def _spool(self, record: Recorded) -> None:
        """Keep a result the database refused in the spool file (on a disk that refuses it too, in memory only)."""
        self._spool_file.write(record)

    def _load_spool(self) -> None:
        """Queue the results an earlier process spooled and never wrote (a locked or full database)."""
        self._pending.extend(self._spool_file.read())
        if self._pending:
            log.info("history: %d result(s) from %s to write", len(self._pending), one_line(self.spool_path))

    def _load_ledger(self) -> None:
        """Queue the ledger's results that are not queued yet (the spool's are), to be written again: those
        the database has are ignored by their uid, and those it lacks (its write-ahead log lost or damaged
        before a checkpoint) are restored, with a warning (:meth:`_flush_locked`)."""
        known = {record.uid for record in self._pending}
        for record in self._ledger.read():
            if record.uid not in known:
                known.add(record.uid)
                self._pending.append(record)
                self._restoring.add(record.uid)

    def _settle_ledger_locked(self) -> None:
        """Where there is a ledger, checkpoint now and remove it if every frame was copied (before a close, or a
        prune: a pruned run must not come back from it)."""
        if not self.ledger_path.exists():
            return
        ledger = self._ledger.hold(create=False)
        try:
            self._ledger.settle(ledger, self._conn, self.path)
        finally:
            if ledger is not None:
                os.close(ledger)

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
    # Every read (and the incidents' and the prune's writes) raises the store's own error
    # (sixdim.store.errors.StoreError), never sqlite3's: the layers above need not know the database.
    def _records(self, sql: str, args: Iterable[Any] = (),
                 keep: Callable[[RunRecord], RunRecord] | None = None) -> list[RunRecord]:
        """The runs a query selects; ``keep``: what of each is kept (:func:`sixdim.core.results.lean`), made
        as the rows are read, a few hundred at a time, so the full records never exist all at once."""
        out: list[RunRecord] = []
        with as_store_error(), self._lock:
            cursor = self._db.execute(sql, tuple(args))
            while rows := cursor.fetchmany(FETCH_ROWS):
                out += [keep(to_record(row)) for row in rows] if keep is not None else map(to_record, rows)
        return out

    def latest_ok(self) -> list[RunRecord]:
        """The newest successful run of each series in each suite, oldest first (so the last one of
        a series is its newest of all suites), as the board keeps it (:func:`sixdim.core.results.lean`: no
        ``details`` or ``conditions``, which are not even read).  Reading 5,000 full records at once cost the
        daemon 50 MB of short-lived objects at start, whose freed memory it then kept."""
        return self._records(
            f"SELECT {select_without('details', 'conditions')} FROM runs WHERE id IN "
            f"(SELECT MAX(id) FROM runs WHERE status = 'ok' GROUP BY {SERIES}, suite) ORDER BY id", keep=lean)

    def status_counts(self) -> list[tuple[RunRecord, int]]:
        """Per series and status, the number of runs (pruned ones included), with the newest run as
        the label source (lean, without figures: :func:`sixdim.core.results.lean`)."""
        with as_store_error(), self._lock:
            rows = self._db.execute(  # interrupted skips are not runs (sixdim.core.results.counts_as_run)
                f"SELECT MAX(id) AS newest, COUNT(*) AS n, {SERIES}, status FROM runs "
                f"WHERE NOT ({legacy_interrupted()}) "
                f"GROUP BY {SERIES}, status").fetchall()
            pruned = {tuple(row[c] for c in (*SERIES_COLUMNS, "status")): row
                      for row in self._db.execute("SELECT * FROM pruned_counts")}
        newest: dict[int, int] = {}
        for row in rows:
            earlier = pruned.pop(tuple(row[c] for c in (*SERIES_COLUMNS, "status")), None)
            newest[row["newest"]] = row["n"] + (earlier["runs"] if earlier is not None else 0)
        records: list[RunRecord] = []
        ids = list(newest)
        for start in range(0, len(ids), 900):  # SQLite's bound-parameter limit
            chunk = ids[start:start + 900]
            records += self._records(f"SELECT {select_without('details', 'conditions', 'figures')} FROM runs "
                                     f"WHERE id IN ({','.join('?' * len(chunk))})", chunk, keep=_label_source)
        records.sort(key=lambda r: r.id or 0)
        counted = [(record, newest[record.id]) for record in records if record.id is not None]
        # series whose every run of that status was pruned: their count stays, labelled from what was kept
        return [(_label_source(pruned_record(row)), row["runs"]) for row in pruned.values()] + counted

    def latest_environment(self, device: str, uuid: str, suite: str | None = None,
                           after_id: int = 0) -> tuple[int, dict[str, Any]] | None:
        """The row id and environment (versions and settings) of the newest run on a device (by its name and
        UUID) that ran its case (``ok`` or ``incorrect``: a worker reported it), of one suite or of any, among
        the runs after ``after_id``; None where there is none.  Read backwards by row id down to ``after_id``,
        so a caller that remembers what it found reads only the runs recorded since."""
        where, args = "id > ? AND device = ? AND uuid = ? AND status IN ('ok', 'incorrect')", [after_id, device, uuid]
        if suite is not None:
            where, args = where + " AND suite = ?", [*args, suite]
        with as_store_error(), self._lock:
            row = self._db.execute(f"SELECT id, environment FROM runs WHERE {where} ORDER BY id DESC LIMIT 1",
                                   args).fetchone()
        return None if row is None else (int(row["id"]), json.loads(row["environment"]))

    def last_id(self) -> int:
        with as_store_error(), self._lock:
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
                log.debug("history: cannot read which runs are there now: %s", one_line(exc))
        return found

    def interruptions_after(self, last_id: int) -> list[Interruption]:
        """The interrupted suite runs recorded after the one with ``last_id``, oldest first."""
        with as_store_error(), self._lock:
            rows = self._db.execute("SELECT * FROM interruptions WHERE id > ? ORDER BY id", (last_id,)).fetchall()
        return [to_interruption(row) for row in rows]

    def save_incidents(self, incidents: Iterable[Mapping[str, Any]]) -> int:
        """Insert or update incidents of the live verdicts (rows of :data:`INCIDENT_COLUMNS`; ``causes`` a list),
        each found by its series and ``opened_at``; returns how many.  One short transaction.  Raises
        a :class:`~sixdim.store.errors.StoreError` where the database cannot be written now: the caller keeps them
        and tries again (an incident is also replayed from the runs at the next restart, so none is lost for good)."""
        rows = [tuple(json.dumps(row[c]) if c == "causes" else row[c] for c in INCIDENT_COLUMNS) for row in incidents]
        if not rows:
            return 0
        updates = ", ".join(f"{c} = excluded.{c}" for c in INCIDENT_COLUMNS if c not in (*SERIES_FIELDS, "opened_at"))
        marks = ", ".join("?" * len(INCIDENT_COLUMNS))
        with as_store_error(), self._lock, self._db:
            self._db.executemany(f"INSERT INTO incidents ({', '.join(INCIDENT_COLUMNS)}) VALUES ({marks}) "
                                 f"ON CONFLICT ({SERIES}, opened_at) DO UPDATE SET {updates}", rows)
        return len(rows)

    def incidents(self) -> list[dict[str, Any]]:
        """Every incident kept, the earliest start first (``causes`` decoded)."""
        with as_store_error(), self._lock:
            rows = self._db.execute("SELECT * FROM incidents ORDER BY started_at, id").fetchall()
        return [{**dict(row), "causes": json.loads(row["causes"])} for row in rows]

    def _recent_ids(self, runs: int, upto_id: int | None) -> list[int]:
        """The row ids of the last ``runs`` runs of every series (up to ``upto_id``), oldest first: one
        window-function query."""
        bound, args = ("WHERE id <= ?", (upto_id,)) if upto_id is not None else ("", ())
        with as_store_error(), self._lock:
            return [row[0] for row in self._db.execute(
                f"SELECT id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY {SERIES} ORDER BY id DESC) AS n "
                f"FROM runs {bound}) WHERE n <= ? ORDER BY id", (*args, runs))]

    def recent_for_verdicts(self, runs: int, upto_id: int | None = None,
                            batch: int = FETCH_ROWS) -> Iterator[tuple[RunRecord, bool]]:
        """The last ``runs`` runs of every series (row id up to ``upto_id``), oldest first, for the daemon's
        regression verdicts, which read a run's conditions back by id only when a diagnosis needs them
        (:meth:`conditions_of`): each run without its ``details``, ``params`` and ``conditions``, and
        whether it recorded conditions.  Reading and decoding fewer columns is most of what a restore of
        100,000 runs costs besides judging them.  One window-function query picks the ids, then rows are
        read in batches, so a restore holds neither every row nor the database for long."""
        yield from self._recent(runs, upto_id, batch, with_conditions=False)

    def recent_per_series(self, runs: int, upto_id: int | None = None,
                          batch: int = FETCH_ROWS) -> Iterator[RunRecord]:
        """The same runs as :meth:`recent_for_verdicts`, each with its ``conditions``: for verdicts that keep
        the conditions in memory (:class:`sixdim.verdicts.live.Verdicts` holding series from before it read
        the history), as the reports' rows give them."""
        for record, _ in self._recent(runs, upto_id, batch, with_conditions=True):
            yield record

    def _recent(self, runs: int, upto_id: int | None, batch: int,
                with_conditions: bool) -> Iterator[tuple[RunRecord, bool]]:
        """The last ``runs`` runs of every series, without ``details`` and ``params`` (and ``conditions``
        unless asked for), each with whether it recorded conditions."""
        ids = self._recent_ids(runs, upto_id)
        left_out = ("details", "params") if with_conditions else ("details", "params", "conditions")
        columns = [c for c in COLUMNS if c not in left_out]
        decoded = [i for i, c in enumerate(columns) if c in JSON_COLUMNS]
        for start in range(0, len(ids), batch):
            with as_store_error(), self._lock:
                rows = self._db.execute(
                    f"SELECT {', '.join(columns)}, conditions NOT IN ('{{}}', '') FROM runs "
                    "WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id", (json.dumps(ids[start:start + batch]),)
                ).fetchall()
            for row in rows:
                values = list(row)
                for i in decoded:
                    values[i] = json.loads(values[i])
                fields = dict(zip(columns, values[:-1], strict=True))
                fields.setdefault("conditions", {})
                record = RunRecord(**fields, details={}, params={})
                yield record, bool(values[-1])

    def conditions_of(self, ids: Iterable[int]) -> dict[int, dict[str, Any]]:
        """The recorded conditions of the runs with these row ids (:func:`conditions_by_id`): what the
        daemon's regression verdicts read back for a diagnosis, rather than keep every run's in memory."""
        with as_store_error(), self._lock:
            return conditions_by_id(self._db, ids)

    def __iter__(self) -> Iterator[RunRecord]:
        return iter(self._records("SELECT * FROM runs ORDER BY id"))

    # ------------------------------------------------------------------ retention
    def prune(self, *, keep_seconds: float, max_runs: int | None = None, now: float | None = None) -> PruneResult:
        """Thin runs that ended more than ``keep_seconds`` ago, and the oldest beyond ``max_runs``.

        Each pruned (series, day, driver/CUDA/torch) keeps the median of every figure of its ``ok``
        runs in ``daily``; every pruned run is added to ``pruned_counts``.  Runs in batches of
        :data:`PRUNE_BATCH` rows, each batch its own short transaction, so scrapes and writers are
        held up only briefly.  Raises :class:`~sixdim.store.errors.StoreError` if the database cannot be written."""
        started = time.perf_counter()
        cutoff = (time.time() if now is None else now) - keep_seconds
        with as_store_error(), self._lock:
            if not self._pending:  # a pruned run must not come back from the ledger
                self._settle_ledger_locked()
            if self._pending or self.ledger_path.exists():
                # results not yet in the database file: pruning now could delete a run the next start writes
                # again from the ledger (counted twice); the next prune (a day later) tries again
                log.info("history: pruning waits: results written since the last complete checkpoint are still "
                         "kept in %s", self.ledger_path)
                return PruneResult(0, 0, time.perf_counter() - started)
            if max_runs is not None:
                total = self._db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
                if total > max_runs:
                    row = self._db.execute("SELECT ended_at FROM runs ORDER BY ended_at LIMIT 1 OFFSET ?",
                                           (total - max_runs,)).fetchone()
                    cutoff = max(cutoff, row[0]) if row else cutoff
        removed = daily_rows = 0
        while True:
            with as_store_error(), self._lock:
                rows = self._db.execute("SELECT * FROM runs WHERE ended_at < ? ORDER BY id LIMIT ?",
                                        (cutoff, PRUNE_BATCH)).fetchall()
                if not rows:
                    break
                with self._db:
                    daily_rows += thin(self._db, rows)
                    self._db.executemany("DELETE FROM runs WHERE id = ?", [(row["id"],) for row in rows])
            removed += len(rows)
        # an incident over before the runs kept began: its runs are gone, it goes too
        with as_store_error(), self._lock, self._db:
            self._db.execute("DELETE FROM incidents WHERE ended_at IS NOT NULL AND ended_at < ?", (cutoff,))
        seconds = time.perf_counter() - started
        if removed:
            log.info("history: pruned %d run(s) that ended before %s into %d daily row(s) in %.2f s", removed,
                     datetime.fromtimestamp(cutoff, timezone.utc).isoformat(timespec="seconds"), daily_rows, seconds)
        return PruneResult(removed, daily_rows, seconds)


def _label_source(record: RunRecord) -> RunRecord:
    return lean(record, figures=False)
