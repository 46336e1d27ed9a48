"""Writing a generated file whole or not at all, reading a file only when it is a regular one, and making
the folders files go in."""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

STANDARD_OUTPUT = "-"
"""The file name that means standard output, for the commands that write one file."""

_KINDS = {stat.S_IFLNK: "a symbolic link", stat.S_IFDIR: "a folder", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket"}


class NotARegularFile(OSError):
    """The target of :func:`write_atomically` exists and is not a regular file (a device node, a FIFO,
    a socket, a folder or a symbolic link), which a rename would replace: the text names the path and
    what it is.  An ``OSError``, so every caller's ``except OSError`` says it as a refusal."""

    def __init__(self, path: str | Path, kind: str, why: str = "sixdim replaces only regular files"):
        super().__init__(errno.EEXIST, f"{path} is {kind}, not a regular file: {why}")
        self.kind = kind

    def __str__(self) -> str:
        return str(self.strerror)


def special_kind(path: str | Path) -> str | None:
    """What ``path`` is when it exists and is not a regular file (``a FIFO``, ``a character device``,
    ``a symbolic link (to /proc/self/fd/1)``, ...), the link itself not followed; None when it is a
    regular file or missing (or cannot be looked at: writing it says why)."""
    try:
        status = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISREG(status.st_mode):
        return None
    kind = _KINDS.get(stat.S_IFMT(status.st_mode), "a special file")
    if stat.S_ISLNK(status.st_mode):
        try:
            kind += f" (to {os.readlink(path)})"
        except OSError:
            pass
    return kind


def kind_of(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words (``a FIFO``, ``a character device``, ...)."""
    return "a regular file" if stat.S_ISREG(mode) else _KINDS.get(stat.S_IFMT(mode), "a special file")


READ_ONLY_REGULAR = "sixdim reads only regular files, as a FIFO would make it wait and a device read without end"


def open_regular(path: str | Path) -> BinaryIO:
    """``path`` opened for reading in binary, or :class:`NotARegularFile` when it (what its links lead
    to) is not a regular file.  A plain ``open`` of a FIFO waits for a writer, in the daemon's main
    thread that handles signals (a SIGHUP onto a planted FIFO, then SIGTERM ignored), and a device
    reads without end: the name is looked at first (a device node is not even opened), then opened
    with ``O_NONBLOCK`` (a FIFO's open returns at once) and checked again on the open file
    (``fstat``), so the file checked is the file read, whatever replaces the name meanwhile."""
    status = os.stat(path)  # FileNotFoundError and the like: the caller says it as it does
    if not stat.S_ISREG(status.st_mode):
        raise NotARegularFile(path, kind_of(status.st_mode), READ_ONLY_REGULAR)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise NotARegularFile(path, kind_of(status.st_mode), READ_ONLY_REGULAR)
        os.set_blocking(fd, True)  # no effect on a regular file's reads; plain again for the reader
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def refuse_special(path: str | Path) -> None:
    """Raise :class:`NotARegularFile` when ``path`` exists and is not a regular file."""
    kind = special_kind(path)
    if kind is not None:
        raise NotARegularFile(path, kind)


def make_folders(folder: str | Path, mode: int | None = None) -> None:
    """``mkdir -p``; where a part of the path is a file, an ``OSError`` whose text names that part (mkdir's
    own says only "File exists" or "Not a directory").  With ``mode``, every folder it makes (the parents
    too) gets exactly that mode whatever the umask (mkdir's mode is masked by it, and ``parents=True``
    makes the parents 0777 less the umask: 0777 under ``umask 000``); folders already there are left
    as they are.  Without, the umask decides, as for ``mkdir -p``."""
    folder = Path(folder)
    try:
        if mode is None:
            folder.mkdir(parents=True, exist_ok=True)
            return
        missing = [part for part in reversed((folder, *folder.parents)) if not os.path.exists(part)]
        for part in missing:
            try:
                os.mkdir(part, mode)
            except FileExistsError:  # made meanwhile by another process: its maker chose its mode
                if not part.is_dir():
                    raise
                continue
            os.chmod(part, mode)  # just made, in a folder others cannot write (config.trust.folder_problem)
        if not missing and not folder.is_dir():
            raise FileExistsError(errno.EEXIST, "File exists", str(folder))
    except (FileExistsError, NotADirectoryError):
        for part in reversed((folder, *folder.parents)):
            if part.exists() and not part.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, f"{part} is a file, not a folder") from None
        raise


def write_atomically(path: str | Path, text: str, *, make_folder: bool = True, mode: int = 0o644) -> None:
    """Write ``text`` to a temporary file beside ``path`` and rename it over ``path``, so a reader
    (Prometheus reloading rules, Grafana's file provider, a browser) never sees half a file.
    ``make_folder`` creates missing parent folders; without it a missing folder is an ``OSError``.
    The file gets ``mode`` (0644 by default: rules and dashboards are meant to be read; a report of a
    private history is given its history's) and ``\\n`` line ends whatever the umask and the platform.

    A target that exists and is not a regular file is refused (:class:`NotARegularFile`), as the rename
    would replace it with one: a device node (a root ``--out /dev/null`` would have replaced
    ``/dev/null``), a FIFO, a socket, a folder, or a symbolic link (to ``/proc/self/fd/1``, or one
    another user planted to a file of theirs or of the system).  Checked before writing and again
    just before the rename; what appears between that check and the rename is not (no rename can
    make it atomic)."""
    target = Path(path)
    refuse_special(target)
    folder = target.parent if str(target.parent) else Path(".")
    if make_folder:
        make_folders(folder)
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        os.chmod(temporary, mode)
        refuse_special(target)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_outputs(targets: Sequence[tuple[str, str | Path, str]]) -> str | None:
    """Write each ``(flag, path, text)`` of a command's outputs: standard output for ``-``, else the file
    replaced whole (:func:`write_atomically`).  Every file is checked before any is written, so a device
    node, FIFO or link among them is refused and nothing replaced.  Returns the error to say (the flag and
    the path, then why), or None; a closed standard output (``BrokenPipeError``) is raised, as for any print.
    The one writer of ``sixdim rules`` and ``sixdim dashboards``."""
    for flag, path, _ in targets:
        kind = special_kind(path) if str(path) != STANDARD_OUTPUT else None
        if kind is not None:
            return f"cannot write {flag} {path}: {NotARegularFile(path, kind)}"
    for flag, path, text in targets:
        if str(path) == STANDARD_OUTPUT:
            sys.stdout.write(text)
            continue
        try:
            write_atomically(path, text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            return f"cannot write {flag} {path}: {exc.strerror or exc}"
    return None
