"""sixdim.core.memory: the free pages a restore leaves behind go back to the system (glibc)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

CHILD = """
import sys
from sixdim.core.memory import give_back_free_memory

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

blocks = [bytearray(100_000) for _ in range(2_000)]   # 200 MB on the C heap (below the mmap threshold)
for block in blocks:
    block[::4096] = b"x" * len(block[::4096])           # touched: resident
kept = blocks[-1]                                      # the heap's top stays in use: free() cannot shrink it
del blocks
before = rss()
trimmed = give_back_free_memory()
print(trimmed, before, rss())
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                    reason="malloc_trim is glibc's: elsewhere give_back_free_memory does nothing")
def test_free_pages_inside_the_heap_go_back_to_the_system():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True).stdout.split()
    trimmed, before, after = out[0] == "True", int(out[1]), int(out[2])
    assert trimmed
    assert before - after > 150e6, (before, after)  # the 200 MB freed, less what glibc keeps at hand
