"""One log line per kind of trouble now and then, with a count of those held back: a fault that repeats every
second (a hang-up flood, a full state folder under a 1 s schedule) says so once, not fifteen times."""

from __future__ import annotations

import logging
import threading
import time


class LogLimiter:
    """Logs at most one line per kind every ``interval`` seconds to ``logger``; the next line of a kind says how
    many were held back since the last one."""

    def __init__(self, logger: logging.Logger, interval: float) -> None:
        self.logger, self.interval = logger, interval
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def note(self, kind: str, level: int, message: str, *args: object, **kwargs: object) -> bool:
        """Log ``message`` unless a line of ``kind`` was logged within the interval; True when logged."""
        now = time.monotonic()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < self.interval:
                self._held[kind] = self._held.get(kind, 0) + 1
                return False
            self._last[kind] = now
            held = self._held.pop(kind, 0)
        if held:
            message += " (and %d more such since the last such line; at most one every %g s)"
            args = (*args, held, self.interval)
        self.logger.log(level, message, *args, **kwargs)  # type: ignore[arg-type]
        return True
