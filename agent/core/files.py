"""Writing a generated file whole or not at all, and making the folders files go in."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path


def make_folders(folder: str | Path, mode: int = 0o777) -> None:
    """``mkdir -p`` with ``mode`` for the folders it makes; where a part of the path is a file, an
    ``OSError`` whose text names that part (mkdir's own says only "File exists" or "Not a directory")."""
    folder = Path(folder)
    try:
        folder.mkdir(mode=mode, parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        for part in reversed((folder, *folder.parents)):
            if part.exists() and not part.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, f"{part} is a file, not a folder") from None
        raise


def write_atomically(path: str | Path, text: str, *, make_folder: bool = True) -> None:
    """Write ``text`` to a temporary file beside ``path`` and rename it over ``path``, so a reader
    (Prometheus reloading rules, Grafana's file provider, a browser) never sees half a file.
    ``make_folder`` creates missing parent folders; without it a missing folder is an ``OSError``.
    The file gets mode 0644 and ``\\n`` line ends whatever the umask and the platform."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if make_folder:
        make_folders(folder)
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
