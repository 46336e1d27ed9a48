"""Reading a child's output line by line with bounded memory, whatever the child prints.

Torch-free: used by the daemon (the worker's output, agent/run/runner.py) and by the command workload
(the user's training output).  A process may print one line of hundreds of megabytes with no
newline, or redraw a progress bar with carriage returns forever; neither may grow the reader.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import IO


def bounded_lines(chunks: Iterable[bytes], limit: int) -> Iterator[str]:
    """Lines of a byte stream, split at ``\\n`` and ``\\r`` (a progress bar's redraws are lines too),
    each cut to ``limit`` bytes with a note of how much was dropped; memory stays bounded by
    ``limit`` whatever the stream holds between two line ends."""
    kept = bytearray()
    dropped = 0
    for chunk in chunks:
        start = 0
        while start < len(chunk):
            ends = [i for i in (chunk.find(b"\n", start), chunk.find(b"\r", start)) if i >= 0]
            end = min(ends) if ends else len(chunk)
            piece = chunk[start:end]
            room = limit - len(kept)
            kept += piece[:max(0, room)]
            dropped += max(0, len(piece) - max(0, room))
            if not ends:
                break
            yield _line(kept, dropped)
            kept, dropped = bytearray(), 0
            start = end + 1
    if kept or dropped:
        yield _line(kept, dropped)


def _line(kept: bytearray, dropped: int) -> str:
    text = kept.decode(errors="replace")
    return text + f" [... {dropped} more bytes cut]" if dropped else text


def stream_chunks(stream: IO[bytes], size: int = 65536) -> Iterator[bytes]:
    """The bytes of a binary stream as they arrive (``read1``: no waiting for a full buffer)."""
    while True:
        chunk = stream.read1(size)  # type: ignore[attr-defined]
        if not chunk:
            return
        yield chunk
