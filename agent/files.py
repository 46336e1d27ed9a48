"""Writing a generated file whole or not at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomically(path: str | Path, text: str, *, make_folder: bool = True) -> None:
    """Write ``text`` to a temporary file beside ``path`` and rename it over ``path``, so a reader
    (Prometheus reloading rules, Grafana's file provider, a browser) never sees half a file.
    ``make_folder`` creates missing parent folders; without it a missing folder is an ``OSError``.
    The file gets mode 0644 and ``\\n`` line ends whatever the umask and the platform."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if make_folder:
        folder.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
