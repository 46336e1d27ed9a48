"""The /metrics body, rendered in the background and served from memory.

A fleet's Prometheus servers scrape every agent every 15 s, sometimes several of them, and a
history of thousands of runs makes an exposition of a megabyte or more.  Rendering it at each
scrape cost ~125 ms of CPU per scrape, and reading new rows from SQLite inside the scrape made
every scrape wait whenever another process held the database.  So nothing a scrape does touches
the database, a collector or the renderer:

- a background thread (:class:`Exposition`) catches the board up with the history (runs recorded
  by other processes, results waiting to be written) about once a second, never in a scrape;
- the **results** part (``sixdim_workload_*``: large, changes only when a run is recorded) is
  rendered again only when :attr:`sixdim.http.board.Board.version` changes;
- the **live** part (GPU and host telemetry, collector and history health, build info, the
  process's own metrics: small, always changing) is rendered every ``live_seconds``;
- a scrape gets the two joined (they hold disjoint metric families, so the text is one valid
  exposition), and the gzip form when it asks for it, compressed once per body and then shared.

The exposition is at most ``live_seconds`` old for telemetry and about a second old for results.
"""

from __future__ import annotations

import gzip
import logging
import threading
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, generate_latest

from sixdim.http.board import Board
from sixdim.store.history import History

log = logging.getLogger("sixdim")

CATCH_UP_SECONDS = 1.0
"""How often the board is caught up with the history (rows of other processes, queued results)."""
LIVE_SECONDS = 5.0
"""How often the live telemetry part is rendered again."""


class Exposition:
    """Renders ``results`` (on board changes) and ``live`` (on a timer) on its own thread."""

    def __init__(self, board: Board, results: CollectorRegistry, live: CollectorRegistry,
                 history: History | None = None, *, live_seconds: float = LIVE_SECONDS,
                 catch_up_seconds: float = CATCH_UP_SECONDS, clock: Callable[[], float] = time.monotonic):
        self._board = board
        self._history = history
        self._results_registry = results
        self._live_registry = live
        self._live_seconds = live_seconds
        self._catch_up_seconds = catch_up_seconds
        self._clock = clock
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._gzip_lock = threading.Lock()
        self._results = b""
        self._results_version = -1
        self._live = b""
        self._live_at = float("-inf")
        self._live_forced = self._results_forced = False
        self._body = b""
        self._gzipped: tuple[bytes, bytes] | None = None  # (the body it was made from, its gzip form)
        self.refresh()  # the first scrape already has everything
        self._thread = threading.Thread(target=self._loop, daemon=True, name="exposition")

    def start(self) -> Exposition:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10.0)

    def _loop(self) -> None:
        while not self._stop.wait(self._catch_up_seconds):
            try:
                self.refresh()
            except Exception:  # a bug here must not end the exporter: the last body is still served
                log.exception("rendering /metrics failed; serving the previous exposition")

    def refresh(self) -> None:
        """Catch up with the history, then render whatever part is out of date."""
        if self._history is not None:
            try:
                self._board.catch_up(self._history)
            except Exception as exc:  # a locked or broken history: the board stays as it was
                log.warning("could not read new runs from the history: %s", exc)
        changed = False
        # each flag is taken before its part is rendered: a change noted while it renders is
        # rendered again at the next refresh, not lost
        forced_results, self._results_forced = self._results_forced, False
        version = self._board.version
        if forced_results or version != self._results_version:
            self._results = generate_latest(self._results_registry)
            self._results_version = version
            changed = True
        now = self._clock()
        forced_live, self._live_forced = self._live_forced, False
        if forced_live or now - self._live_at >= self._live_seconds:
            self._live = generate_latest(self._live_registry)
            self._live_at = now
            changed = True
        if changed:
            with self._lock:
                self._body = self._live + self._results

    def live_changed(self) -> None:
        """Something the live part shows changed now (a configuration reload's outcome): render it at
        the next refresh, within a second, not at the end of its timer."""
        self._live_forced = True

    def results_changed(self) -> None:
        """What the results part shows changed with no new run (a reload's per-shape export): render
        it at the next refresh."""
        self._results_forced = True

    def body(self) -> bytes:
        with self._lock:
            return self._body

    def gzipped(self) -> bytes:
        """The current body, gzip-compressed: compressed once per body, whoever asks first."""
        body = self.body()
        with self._gzip_lock:
            if self._gzipped is None or self._gzipped[0] is not body:
                self._gzipped = (body, gzip.compress(body, compresslevel=6))
            return self._gzipped[1]
