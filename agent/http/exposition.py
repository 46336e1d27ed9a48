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
  exposition), and the gzip form when it asks for it (Prometheus always does).

**Only the gzip form is kept.**  A host's 5,000 result series are about 120,000 samples, 46 MB of text
but under a megabyte of gzip, so the results part is compressed as it is rendered, line by line, one
deflate stream per metric family (the exporter's :meth:`~sixdim.http.exporter.SixdimCollector.render_lines`
hands out lines, not metric objects): the text never exists whole, nor do 120,000 samples as objects.
Each stream ends on a full flush, so streams compressed apart join into one valid deflate stream (as
pigz joins its blocks), and the gzip body is a fixed header, the live part's stream, the results'
streams, an empty last block and the CRC-32 (combined from the parts' own, :func:`crc32_combine`) and
length: a new live part costs compressing a few kilobytes, not the results again.  The plain text is
made from the gzip form only when a scrape asks for it, and kept until the exposition changes.

A results render of that size takes about a second of CPU, so while runs are being recorded it is done
again at most every :data:`RESULTS_GAP_FACTOR` times its last duration (at most a few seconds' delay,
and the daemon never spends more than a fifth of a core on it).

The exposition is at most ``live_seconds`` old for telemetry and a second (a few under a full suite's
stream of results) old for results.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from typing import Protocol

from prometheus_client import CollectorRegistry, generate_latest

from sixdim.core.catalog import MetricDef
from sixdim.core.memory import give_back_free_memory
from sixdim.http.board import Board
from sixdim.http.exporter import family_header
from sixdim.store.history import History

log = logging.getLogger("sixdim")

CATCH_UP_SECONDS = 1.0
"""How often the board is caught up with the history (rows of other processes, queued results)."""
LIVE_SECONDS = 5.0
"""How often the live telemetry part is rendered again."""
RESULTS_GAP_FACTOR = 4.0
"""The results part is rendered again at most every this many times its last render took..."""
RESULTS_GAP_MIN = 0.05
"""... where that took this long or more (a small host's is rendered again at once)."""
LEVEL = 6
"""zlib's compression level (gzip's default)."""
LINES_PER_WRITE = 256
"""Lines of one family joined before they are handed to its compressor."""

_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # deflate, no name, no time, unknown OS
_LAST_BLOCK = zlib.compressobj(LEVEL, zlib.DEFLATED, -15).flush()  # an empty final block


class Lines(Protocol):
    """What renders the results part line by line (:class:`sixdim.http.exporter.SixdimCollector`)."""

    def render_lines(self) -> Iterable[tuple[MetricDef, str]]: ...


def _multmodp(a: int, b: int) -> int:
    """a × b modulo the CRC-32 polynomial (zlib's crc32.c, reflected)."""
    m, p = 1 << 31, 0
    while True:
        if a & m:
            p ^= b
            if a & (m - 1) == 0:
                return p
        m >>= 1
        b = (b >> 1) ^ 0xEDB88320 if b & 1 else b >> 1


_X2N = [1 << 30]
for _ in range(31):
    _X2N.append(_multmodp(_X2N[-1], _X2N[-1]))


def crc32_combine(crc1: int, crc2: int, length2: int) -> int:
    """The CRC-32 of A + B from A's, B's and B's length (zlib's ``crc32_combine``, which Python's zlib
    lacks)."""
    p, k = 1 << 31, 3
    while length2:
        if length2 & 1:
            p = _multmodp(_X2N[k & 31], p)
        length2 >>= 1
        k += 1
    return _multmodp(p, crc1) ^ crc2


class Deflated:
    """Text compressed as one raw deflate stream that ends on a full flush (so it can be followed by
    another), with its CRC-32 and length."""

    __slots__ = ("data", "crc", "size")

    def __init__(self, data: bytes, crc: int, size: int) -> None:
        self.data, self.crc, self.size = data, crc, size

    @classmethod
    def of(cls, text: bytes) -> Deflated:
        compressor = zlib.compressobj(LEVEL, zlib.DEFLATED, -15)
        return cls(compressor.compress(text) + compressor.flush(zlib.Z_FULL_FLUSH), zlib.crc32(text), len(text))

    @classmethod
    def join(cls, parts: Iterable[Deflated]) -> Deflated:
        data, crc, size = [], 0, 0
        for part in parts:
            data.append(part.data)
            crc, size = crc32_combine(crc, part.crc, part.size), size + part.size
        return cls(b"".join(data), crc, size)


class _Family:
    """One metric family's lines, compressed as they come."""

    __slots__ = ("compressor", "pending", "chunks", "crc", "size")

    def __init__(self, header: str) -> None:
        self.compressor = zlib.compressobj(LEVEL, zlib.DEFLATED, -15)
        self.pending = [header]
        self.chunks: list[bytes] = []
        self.crc = self.size = 0

    def write(self) -> None:
        data = "".join(self.pending).encode()
        self.pending.clear()
        self.crc, self.size = zlib.crc32(data, self.crc), self.size + len(data)
        chunk = self.compressor.compress(data)
        if chunk:
            self.chunks.append(chunk)

    def finish(self) -> Deflated:
        self.write()
        self.chunks.append(self.compressor.flush(zlib.Z_FULL_FLUSH))
        return Deflated(b"".join(self.chunks), self.crc, self.size)


def deflate_lines(lines: Iterable[tuple[MetricDef, str]]) -> Deflated:
    """Sample lines in any order as one deflate stream of their families, each family's lines together
    in the order they came, the families in the order each first came (``generate_latest``'s text)."""
    families: dict[str, _Family] = {}
    for metric, line in lines:
        family = families.get(metric.name)
        if family is None:
            family = families[metric.name] = _Family(family_header(metric))
        family.pending.append(line)
        if len(family.pending) >= LINES_PER_WRITE:
            family.write()
    return Deflated.join([family.finish() for family in families.values()])


def gzip_member(parts: Iterable[Deflated]) -> bytes:
    """One gzip member of these deflate streams, in order."""
    whole = Deflated.join(parts)
    return b"".join((_GZIP_HEADER, whole.data, _LAST_BLOCK, struct.pack("<II", whole.crc, whole.size & 0xFFFFFFFF)))


class Exposition:
    """Renders ``results`` (on board changes) and ``live`` (on a timer) on its own thread.

    ``results`` is a registry (rendered with ``generate_latest``) or, for a large one, a collector that
    renders its lines itself (:class:`Lines`: the daemon's results part)."""

    def __init__(self, board: Board, results: CollectorRegistry | Lines, live: CollectorRegistry,
                 history: History | None = None, *, live_seconds: float = LIVE_SECONDS,
                 catch_up_seconds: float = CATCH_UP_SECONDS, clock: Callable[[], float] = time.monotonic):
        self._board = board
        self._history = history
        self._results_source = results
        self._live_registry = live
        self._live_seconds = live_seconds
        self._catch_up_seconds = catch_up_seconds
        self._clock = clock
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._plain_lock = threading.Lock()
        self._results = Deflated.of(b"")
        self._results_version = -1
        self._results_restored: bool | None = None
        self._results_at = float("-inf")
        self._results_took = 0.0
        self._live = Deflated.of(b"")
        self._live_at = float("-inf")
        self._live_forced = self._results_forced = False
        self._gzipped = gzip_member([self._live, self._results])
        self._plain: tuple[bytes, bytes] | None = None  # (the gzip body it was made from, its text)
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

    def _render_results(self) -> Deflated:
        source = self._results_source
        if isinstance(source, CollectorRegistry):
            return Deflated.of(generate_latest(source))
        return deflate_lines(source.render_lines())

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
        version, restored = self._board.version, self._board.restored()
        took = self._results_took
        due = took < RESULTS_GAP_MIN or time.monotonic() - self._results_at >= RESULTS_GAP_FACTOR * took
        if self._results_forced or restored != self._results_restored or (
                version != self._results_version and due):
            self._results_forced = False
            self._results_version, self._results_restored = version, restored
            began = time.monotonic()
            self._results = self._render_results()
            give_back_free_memory()  # what the render's short-lived lines freed (glibc; 0.03-0.06 ms measured)
            self._results_at = time.monotonic()
            self._results_took = self._results_at - began
            changed = True
        now = self._clock()
        forced_live, self._live_forced = self._live_forced, False
        if forced_live or now - self._live_at >= self._live_seconds:
            self._live = Deflated.of(generate_latest(self._live_registry))
            self._live_at = now
            changed = True
        if changed:
            gzipped = gzip_member([self._live, self._results])
            with self._lock:
                self._gzipped = gzipped

    def live_changed(self) -> None:
        """Something the live part shows changed now (a configuration reload's outcome): render it at
        the next refresh, within a second, not at the end of its timer."""
        self._live_forced = True

    def results_changed(self) -> None:
        """What the results part shows changed with no new run (a reload's per-shape export): render
        it at the next refresh."""
        self._results_forced = True

    def gzipped(self) -> bytes:
        """The current body, gzip-compressed (made as it was rendered: a scrape only copies it)."""
        with self._lock:
            return self._gzipped

    def body(self) -> bytes:
        """The current body as text: decompressed when a scrape first asks for it, kept until it changes."""
        gzipped = self.gzipped()
        with self._plain_lock:
            if self._plain is None or self._plain[0] is not gzipped:
                self._plain = None  # the old text goes before the new one is made
                self._plain = (gzipped, zlib.decompress(gzipped, 31))
            return self._plain[1]
