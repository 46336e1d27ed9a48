"""Giving freed memory back to the system after a burst of allocations.

A restore reads 100,000 runs into short-lived objects while it builds the long-lived verdicts, and a
results render makes and drops a line for each of 165,000 series; the C allocator keeps much of what
the short-lived objects freed, so the daemon's resident memory stays at its high-water mark.  glibc's
``malloc_trim`` returns the free pages it holds: the daemon calls it after the restore and after each
results render (a few hundredths of a millisecond; about 10 MB after a 5,000-series restore and 8 MB
after its render, measured with tests/bench/scale_bench.py).  Elsewhere (musl, macOS) it is a no-op.
"""

from __future__ import annotations

import ctypes


def give_back_free_memory() -> bool:
    """Return the C allocator's free pages to the system where it can (glibc); whether it did."""
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the process's own symbols: libc's, where it is glibc
    except (OSError, AttributeError):
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return bool(trim(0))
