"""The two files beside the database that keep results safe: the spool and the ledger (JSON lines, one result each).

**The spool** (``history.db.spool``, :class:`Spool`): a result the database refused (locked, a full or read-only
disk) is appended and fsynced, so that a process killed before it could write it loses nothing: the next
``History`` on the file reads the spool back.  **The ledger** (``history.db.accepted``, :class:`Ledger`): the results
written since the database's last complete checkpoint, which a damaged ``-wal`` file would lose silently; held
(``flock``) from a write to its checkpoint, so another process's checkpoint cannot remove it between the two, and
removed by a checkpoint that copies every frame.  Both are made 0600 and never opened through a link."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import sqlite3
import stat
import time
from pathlib import Path
from typing import Any

from sixdim.core.results import Interruption, RunRecord
from sixdim.store.files import FILE_MODE, one_line, tighten
from sixdim.store.schema import Recorded

log = logging.getLogger("sixdim")

SPOOL_SUFFIX = ".spool"
"""The spool beside the database (``history.db.spool``): results waiting to be written."""
LEDGER_SUFFIX = ".accepted"
"""The ledger beside the database (``history.db.accepted``): the results written since its last complete
checkpoint (:meth:`Ledger.settle`)."""
CHECKPOINT_SECONDS = 1.0
"""The least time between two checkpoints a process's writes ask for (each costs the database file an
fsync or two); results written meanwhile wait in the ledger, fsynced."""
LEDGER_LOCK_SECONDS = 1.0
"""How long a write waits for another sixdim's hold on the ledger (a write and its checkpoint) before
writing without it."""
INTERRUPTION_KIND = "interruption"
"""A spool line's ``kind`` for an interruption (a run's line has none: the spool of older versions)."""


class Spool:
    """The results waiting to be written, in a file that outlives the process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.uids: set[str] = set()
        """The uids of the results in the spool file now (a full disk refuses some)."""
        self.warned = False

    def write(self, record: Recorded) -> None:
        """Append ``record`` (fsynced); on a disk that refuses it too, warned about once, it stays in memory only."""
        data = spooled(record)
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW,
                         FILE_MODE)  # never through a link planted as the spool
            with open(fd, "a", encoding="utf-8") as spool:
                status = os.fstat(fd)
                if not status.st_size and stat.S_IMODE(status.st_mode) != FILE_MODE and status.st_uid == os.geteuid():
                    os.fchmod(fd, FILE_MODE)  # just made: open's mode less the umask; exactly it instead
                spool.write(json.dumps(data, sort_keys=True) + "\n")
                spool.flush()
                os.fsync(spool.fileno())
            self.uids.add(record.uid)
        except OSError as exc:  # a full or read-only disk: memory only
            if not self.warned:
                log.warning("history: cannot write the spool %s either (%s); waiting results are in memory only",
                            one_line(self.path), one_line(exc))
                self.warned = True

    def clear(self) -> None:
        """Every result in the spool is written: remove it."""
        self.uids.clear()  # every result in it is written
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            pass

    def read(self) -> list[Recorded]:
        """The results an earlier process spooled and never wrote (a locked or full database), now known as spooled."""
        records = read_results(self.path, "spool")
        self.uids.update(record.uid for record in records)
        return records


class Ledger:
    """The results written since the database's last complete checkpoint, kept until one copies them into it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.uids: set[str] = set()
        """The uids this process put in the ledger since it was last emptied (each goes in once)."""
        self.warned = False
        self.named: tuple[int, int] | None = None
        """The device and inode of the ledger whose name this process fsynced into its folder."""

    def hold(self, create: bool = True) -> int | None:
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
                    fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW
                                 | os.O_NONBLOCK | (os.O_CREAT if create else 0), FILE_MODE)
                except FileNotFoundError:
                    if create:
                        raise
                    return None
                try:
                    status = os.fstat(fd)
                    if not stat.S_ISREG(status.st_mode):
                        raise OSError(f"{self.path} is not a regular file")
                    if not status.st_size and stat.S_IMODE(status.st_mode) != FILE_MODE \
                            and status.st_uid == os.geteuid():
                        os.fchmod(fd, FILE_MODE)  # just made: open's mode less the umask; exactly it instead
                    while True:
                        try:
                            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                            break
                        except BlockingIOError:
                            if time.monotonic() >= deadline:
                                raise OSError(f"{self.path} is held by another process") from None
                            time.sleep(0.005)
                    try:  # emptied and removed by another process's checkpoint meanwhile: the file there now
                        now = os.stat(self.path, follow_symlinks=False)
                    except FileNotFoundError:
                        now = None
                    if now is not None and (now.st_dev, now.st_ino) == (status.st_dev, status.st_ino):
                        return fd
                except BaseException:
                    os.close(fd)
                    raise
                os.close(fd)
        except OSError as exc:
            if not self.warned:
                log.warning("history: cannot keep the ledger %s (%s); results written are recoverable only from "
                            "the database's write-ahead log until it is checkpointed", one_line(self.path),
                            one_line(exc))
                self.warned = True
            return None

    def note(self, ledger: int | None, batch: list[Recorded], sync: bool) -> None:
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
                self.uids.clear()
            new = [record for record in batch if record.uid not in self.uids]
            if not new:
                return
            data = "".join(json.dumps(spooled(record), sort_keys=True) + "\n" for record in new).encode()
            written = 0
            while written < len(data):  # a nearly full disk takes part of it, then refuses the rest
                written += os.write(ledger, data[written:])
            if sync:
                os.fsync(ledger)
            if sync and self.named != (status.st_dev, status.st_ino):  # its name too, for a power cut
                folder = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    os.fsync(folder)
                finally:
                    os.close(folder)
                self.named = (status.st_dev, status.st_ino)
        except OSError as exc:  # a full disk: the results are in the database all the same
            if size >= 0:
                try:
                    os.ftruncate(ledger, size)  # no half line, and the space back
                except OSError:
                    pass
            if not self.warned:
                log.warning("history: cannot write the ledger %s (%s); results written are recoverable only from "
                            "the database's write-ahead log until it is checkpointed", one_line(self.path),
                            one_line(exc))
                self.warned = True
            return
        self.uids.update(record.uid for record in new)

    def settle(self, ledger: int | None, db: sqlite3.Connection | None, db_path: Path) -> None:
        """Checkpoint the database (``PASSIVE``: it never waits, nor holds anyone up) and, where that copied
        every frame of the write-ahead log into the database file, remove the ledger: its results are now
        where a lost or damaged -wal file cannot take them.  A checkpoint a reader's older snapshot holds
        back (the daemon reading while ``sixdim run`` writes) leaves the ledger for a later one."""
        if ledger is None or db is None:
            return
        try:
            busy, frames, copied = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as exc:
            log.debug("history: checkpoint of %s not done now: %s", one_line(db_path), one_line(exc))
            return
        if busy or frames != copied:
            return
        try:  # held: no other sixdim is between its commit and its note (and one waiting opens it again)
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.debug("history: cannot remove %s: %s", one_line(self.path), one_line(exc))
            return
        self.uids.clear()

    def read(self) -> list[Recorded]:
        """The ledger's results (to be written again: those the database has are ignored by their uid, and those
        it lacks, its write-ahead log lost or damaged before a checkpoint, are restored)."""
        records = read_results(self.path, "ledger")
        self.uids.update(record.uid for record in records)
        return records


def spooled(record: Recorded) -> dict[str, Any]:
    """A result as a line of the spool or the ledger has it (an interruption says so)."""
    data = record.to_dict()
    if isinstance(record, Interruption):
        data["kind"] = INTERRUPTION_KIND
    return data


def read_results(path: Path, what: str) -> list[Recorded]:
    """The results in a spool or ledger file (JSON lines, :func:`spooled`), each without its row id; none
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
        log.warning("history: cannot read the %s %s: %s", what, one_line(path), one_line(exc))
        return []
    records: list[Recorded] = []
    for number, line in enumerate(lines, 1):
        try:
            data = json.loads(line)
            data["id"] = None
            kind = data.pop("kind", "run")
            records.append(Interruption(**data) if kind == INTERRUPTION_KIND else RunRecord(**data))
        except (ValueError, TypeError, AttributeError) as exc:
            log.warning("history: %s line %d is unreadable (%s); skipped", one_line(path), number, one_line(exc))
    return records
