"""Numbers, tables and progress as sixdim shows them to a person: one of each.

The terminal commands (``sixdim run``'s table, ``report regressions``' table, the progress lines of
both) and the HTML report print numbers with the same SI formatter, lay tables out the same way and
show progress with the same in-place line.  Standard library only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import IO

PREFIXES: tuple[tuple[float, str], ...] = (
    (1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""),
    (1e-3, "m"), (1e-6, "\u00b5"), (1e-9, "n"))


def si(value: float, unit: str, digits: int = 4) -> str:
    """``digits`` significant digits with an SI prefix: ``612.3 TFLOP/s``, ``1.250 ms``, ``0 W``."""
    if value == 0:
        return f"0 {unit}".strip()
    magnitude = abs(value)
    scale, prefix = next(((s, p) for s, p in PREFIXES if magnitude >= s * (1 - 0.5 * 10 ** -digits)), PREFIXES[-1])
    text = f"{value / scale:.{digits}g}"
    if "e" in text:  # beyond the prefixes
        text = f"{value:.3g}"
        prefix = ""
    return f"{text} {prefix}{unit}".strip()


def table(rows: Sequence[Sequence[str]], indent: str = "") -> str:
    """Rows as aligned columns two spaces apart (the first row is the header), no trailing spaces."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(indent + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
                     for row in rows)


class Progress:
    """One status line on a terminal, rewritten in place; silent when the stream is not a terminal.

    A log line written to the same stream first clears the status line (a filter on the root
    logger's handlers of that stream), so a warning never lands at the end of a half-written
    progress line; the next update draws it again.  ``min_interval`` seconds between redraws keep a
    fast loop from spending its time on the terminal (the last update of a loop passes ``force``)."""

    def __init__(self, stream: IO[str], *, min_interval: float = 0.0) -> None:
        self._stream = stream
        self._tty = hasattr(stream, "isatty") and stream.isatty()
        self._shown = False
        self._drawn_at = -float("inf")
        self._min_interval = min_interval
        if self._tty:
            for handler in logging.getLogger().handlers:
                if getattr(handler, "stream", None) is stream:
                    handler.addFilter(self._before_log)

    def _before_log(self, record: logging.LogRecord) -> bool:
        self.clear()
        return True  # a filter that only clears: every record is still emitted

    def update(self, message: str, *, force: bool = False) -> None:
        if not self._tty:
            return
        now = time.monotonic()
        if force or now - self._drawn_at >= self._min_interval:
            self._drawn_at = now
            self._stream.write(f"\r\033[K{message}")
            self._stream.flush()
            self._shown = True

    def clear(self) -> None:
        if self._tty and self._shown:
            self._stream.write("\r\033[K")
            self._stream.flush()
            self._shown = False
