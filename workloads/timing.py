"""Timing kernels the way the best tools do (triton's do_bench, torch.utils.benchmark).

- Warm-up first, for at least ``warmup_seconds`` and 3 calls, so clocks, caches,
  allocator and autotuners are settled before anything is timed.
- Each round repeats the kernel enough times to last ``min_round_seconds`` (calibrated by
  growing a block until it does, like blocked_autorange), so
  launch and timer overhead are negligible against the work.
- On CUDA the round is timed on the device, with a pair of CUDA events around the
  repetitions; on CPU with ``time.perf_counter``.
- The rounds are kept (the distribution); the speed figure is their DeepSpark mean.

Imports torch: only the worker process uses this module.
"""

from __future__ import annotations

import math
import time
from typing import Callable

import torch

from workloads.context import RunContext


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed_block(fn: Callable[[], object], device: torch.device, calls: int) -> float:
    _synchronize(device)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    _synchronize(device)
    return time.perf_counter() - start


def calibrate(fn: Callable[[], object], device: torch.device, warmup_seconds: float,
              min_round_seconds: float) -> int:
    """Warm up, then find how many calls make a round last ``min_round_seconds``.

    As ``torch.utils.benchmark``'s blocked_autorange does, the block grows until it
    really lasts the target, rather than trusting an estimate from a few cold calls.
    """
    start = time.perf_counter()
    calls = 0
    while calls < 3 or time.perf_counter() - start < warmup_seconds:
        fn()
        _synchronize(device)
        calls += 1
    block = 1
    while True:
        elapsed = _timed_block(fn, device, block)
        if elapsed >= min_round_seconds or min_round_seconds <= 0:
            return block
        growth = min_round_seconds / elapsed * 1.1 if elapsed > 0 else 10.0
        block = max(block + 1, min(block * 10, math.ceil(block * growth)))


def time_rounds(fn: Callable[[], object], device: torch.device, ctx: RunContext, *, rounds: int,
                min_round_seconds: float, warmup_seconds: float) -> tuple[list[float], int]:
    """Seconds per call for each round, and the calls per round.

    The measured window (``ctx`` marks) covers the timed rounds only, not warm-up.
    """
    ctx.progress("warming up")
    iterations = calibrate(fn, device, warmup_seconds, min_round_seconds)
    results: list[float] = []
    ctx.mark_window_start()
    for r in range(rounds):
        if device.type == "cuda":
            begin = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            begin.record()
            for _ in range(iterations):
                fn()
            end.record()
            end.synchronize()
            elapsed = begin.elapsed_time(end) / 1e3  # milliseconds to seconds
        else:
            begin_s = time.perf_counter()
            for _ in range(iterations):
                fn()
            elapsed = time.perf_counter() - begin_s
        results.append(elapsed / iterations)
        ctx.progress(f"round {r + 1}/{rounds}: {elapsed / iterations * 1e3:.3f} ms per call")
    ctx.mark_window_end()
    return results, iterations
