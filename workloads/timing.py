"""Timing kernels the way the best tools do (triton's do_bench, torch.utils.benchmark).

- Warm-up first, for at least ``warmup_seconds`` and 3 calls, so clocks, caches,
  allocator and autotuners are settled before anything is timed.
- Each round repeats the kernel enough times to last ``min_round_seconds``
  (calibrated by growing a block until it does, like blocked_autorange), so
  timer overhead is negligible against the work.
- On CUDA the round is timed on the device, with CUDA events:
  * a kernel whose data fits in L2 gets the cache flushed before every call (a
    256 MB buffer zeroed, as do_bench does) and an event pair around each call,
    so it is timed cold, as it runs inside a real model;
  * a kernel shorter than :data:`GRAPH_BELOW_SECONDS` is captured in a CUDA graph
    and replayed, so CPU launch overhead does not pollute its time.
- On the CPU, ``time.perf_counter`` around the block (caches are not flushed).
- The rounds are kept (the distribution); the speed figure is their DeepSpark mean.

Imports torch: only the worker process uses this module.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import torch

from workloads.context import RunContext

L2_FLUSH_BYTES = 256 * 1024 * 1024
GRAPH_BELOW_SECONDS = 50e-6
FLUSHED_CALLS_PER_ROUND = 50
"""Cold (L2-flushed) calls timed per round: each costs a 256 MB flush, so a round stays short."""
GRAPH_CALLS = 1000
"""Calls captured in one CUDA graph; a round replays it as often as its calibrated calls need."""
_flush_buffer: torch.Tensor | None = None


@dataclass
class Timing:
    round_seconds: list[float]
    calls_per_round: int
    method: str


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
    really lasts the target (twice in a row), rather than trusting an estimate from a few
    cold calls.
    """
    start = time.perf_counter()
    calls = 0
    while calls < 3 or time.perf_counter() - start < warmup_seconds:
        fn()
        _synchronize(device)
        calls += 1
    if min_round_seconds <= 0:
        return 1
    block = 1
    while True:
        elapsed = _timed_block(fn, device, block)
        if elapsed >= min_round_seconds:
            # Confirm with a second timing: one stall (a page fault, a noisy neighbour) must not
            # end calibration with a block far shorter than the target.
            elapsed = _timed_block(fn, device, block)
            if elapsed >= 0.9 * min_round_seconds:
                return block
        growth = min_round_seconds / elapsed * 1.1 if elapsed > 0 else 10.0
        block = max(block + 1, min(block * 10, math.ceil(block * growth)))


def l2_cache_bytes(device: torch.device) -> int:
    if device.type != "cuda":
        return 0
    return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0))


def _flush(device: torch.device) -> None:
    global _flush_buffer
    if _flush_buffer is None:
        _flush_buffer = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device=device)
    _flush_buffer.zero_()


def _graph_of(fn: Callable[[], object], calls: int) -> Callable[[], object] | None:
    """A CUDA graph replaying ``calls`` calls of fn, or None where capture is not possible."""
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()  # warm the side stream (cuBLAS handles, workspaces) before capture
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
        return graph.replay
    except Exception:
        return None


def time_rounds(fn: Callable[[], object], device: torch.device, ctx: RunContext, *, rounds: int,
                min_round_seconds: float, warmup_seconds: float, working_set_bytes: int = 0) -> Timing:
    """Seconds per call for each round.  The measured window (``ctx`` marks) covers the
    timed rounds only, not warm-up or calibration."""
    ctx.progress("warming up")
    calls = calibrate(fn, device, warmup_seconds, min_round_seconds)
    if device.type != "cuda":
        return _rounds(lambda: _host_timed(fn, calls), ctx, rounds, calls, "perf_counter")
    l2 = l2_cache_bytes(device)
    if working_set_bytes and l2 and working_set_bytes < 2 * l2:
        cold = max(1, min(calls, FLUSHED_CALLS_PER_ROUND))
        return _rounds(lambda: _flushed(fn, device, cold), ctx, rounds, cold, "cuda_events_per_call_l2_flushed")
    per_call = _timed_block(fn, device, calls) / calls
    if per_call < GRAPH_BELOW_SECONDS:
        captured = min(calls, GRAPH_CALLS)
        replays = math.ceil(calls / captured)
        replay = _graph_of(fn, captured)
        if replay is not None:
            return _rounds(lambda: _events(replay, replays) / (replays * captured), ctx, rounds,
                           replays * captured, "cuda_graph_events")
    return _rounds(lambda: _events(fn, calls) / calls, ctx, rounds, calls, "cuda_events")


def _rounds(one_round: Callable[[], float], ctx: RunContext, rounds: int, calls: int, method: str) -> Timing:
    results: list[float] = []
    ctx.mark_window_start()
    for r in range(rounds):
        results.append(one_round())
        ctx.progress(f"round {r + 1}/{rounds}: {results[-1] * 1e3:.4g} ms per call")
    ctx.mark_window_end()
    return Timing(results, calls, method)


def _host_timed(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def _events(fn: Callable[[], object], calls: int) -> float:
    """Seconds for ``calls`` calls between two CUDA events."""
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / 1e3


def _flushed(fn: Callable[[], object], device: torch.device, calls: int) -> float:
    """Mean seconds per call, each call timed alone by its own events after an L2 flush."""
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
    for begin, end in pairs:
        _flush(device)
        begin.record()
        fn()
        end.record()
    torch.cuda.synchronize(device)
    return sum(b.elapsed_time(e) for b, e in pairs) / calls / 1e3


def latency_percentiles(fn: Callable[[], object], device: torch.device, ctx: RunContext, *, samples: int,
                        warmup_seconds: float) -> list[float]:
    """Seconds of each of ``samples`` single calls (for p50/p99 latency), each synchronized."""
    calibrate(fn, device, warmup_seconds, 0.0)
    times = []
    ctx.mark_window_start()
    for _ in range(samples):
        if device.type == "cuda":
            times.append(_events(fn, 1))
        else:
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    ctx.mark_window_end()
    return times
