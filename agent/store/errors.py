"""The store's own errors, so that no layer above it catches (or imports) ``sqlite3``.

:class:`HistoryError`: the history cannot be opened at all (the CLI says why, exit code 2).
:class:`StoreError`: a read or a write of an open history failed now (locked by another process, a full
or read-only disk, a file not opened yet): the caller tries again later, as it did when SQLite's own
error reached it.  :func:`error_reason` labels either for the history's error counter."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager


class HistoryError(RuntimeError):
    """The history database cannot be opened at all."""


class StoreError(RuntimeError):
    """The history is open but cannot be read or written now (the ``sqlite3.Error`` it wraps says why)."""


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


@contextmanager
def as_store_error() -> Iterator[None]:
    """Within it, SQLite's own error (``sqlite3.Error``) becomes a :class:`StoreError` with the same message."""
    try:
        yield
    except sqlite3.Error as exc:
        raise StoreError(str(exc)) from exc
