"""Trusting the history's files: each its owner's alone, and never written through a link.

The history holds every result with its host's details, so its files (the database, its -wal and -shm
files, the spool and the ledger) are made 0600 (:func:`create_private`), found with group or other bits
they lose them (:func:`tighten`), and a symbolic link where one of them should be is refused
(:func:`refuse_links`).  What the store logs passes through :func:`one_line`, as it includes text it does
not choose (a path, SQLite's message)."""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path

from sixdim.store.errors import HistoryError

log = logging.getLogger("sixdim")

FILE_MODE = 0o600
"""The history's files: its owner's alone."""
FOLDER_MODE = 0o700
"""A folder the agent creates for the history."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")


def one_line(value: object) -> str:
    """``value`` as text fit for one log line: a newline, a carriage return or any other control
    character escaped as a Python literal writes it (``\\n``, ``\\x1b``).  What the history logs
    includes text it does not choose (a path, SQLite's message, which ``quick_check`` writes on several
    lines, an exception, a result's shape): as it is, that could split a record in two, or forge one."""
    return _CONTROL.sub(lambda match: repr(match[0])[1:-1], str(value))


def refuse_links(paths: Iterable[Path]) -> None:
    """A :class:`HistoryError` where one of ``paths`` (the database, its -wal or -shm file, the spool, the
    ledger) is a symbolic link: neither sixdim nor SQLite makes one, and one planted in a folder others can write would
    make this process (root, for a daemon) write, or change the mode of, the file it points at.
    A link to the history's folder, or above it, is fine: only the files themselves are looked at."""
    for path in paths:
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
                    "points at is left alone", one_line(path))
        return
    mode = stat.S_IMODE(seen.st_mode)
    if not stat.S_ISREG(seen.st_mode) or not mode & 0o077 or seen.st_uid != os.geteuid():
        return
    private = mode & ~0o077
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        log.warning("history: %s is mode %04o (its group or others may read it) and cannot be made %04o: %s",
                    one_line(path), mode, private, one_line(exc.strerror or exc))
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
                    one_line(path), mode, private, one_line(exc.strerror or exc))
        return
    finally:
        os.close(fd)
    log.warning("history: %s was mode %04o (its group or others could read it); made it %04o", one_line(path), mode,
                private)
