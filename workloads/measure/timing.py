"""Timing kernels the way the best tools do (triton's do_bench, torch.utils.benchmark).

- Warm-up first, so clocks, caches, allocator and autotuners are settled before anything
  is timed: in timed blocks of calls until two consecutive blocks agree (at least 3 calls,
  at most ``warmup_seconds``; :func:`warm_up`).
- Each round repeats the kernel enough times to last ``min_round_seconds``: sized from the
  settled warm-up's rate, or else calibrated by growing a block until it does, like
  blocked_autorange, so timer overhead is negligible against the work.
- On CUDA the round is timed on the device, with CUDA events, in one **cache regime**,
  stated in the result:
  * ``cold``: the L2 cache is flushed before every call (a 256 MB buffer zeroed, as
    do_bench does) and each call has its own event pair, so a kernel whose data would
    fit in L2 is timed as it runs inside a real model (chosen automatically when the
    working set is under twice the L2 size);
  * ``warm``: calls back to back, no flush.
  A warm kernel shorter than :data:`GRAPH_BELOW_SECONDS`, one whose host dispatch is not far
  shorter than its device time (:func:`host_bound`: a sparse GEMM, a convolution's backward), or
  one that asks for it (``graph=True``: a whole RNN recurrence of small kernels), is captured in
  a CUDA graph and replayed, so CPU launch overhead does not pollute its time.  Every event-timed
  span starts behind a short spin on the stream (:func:`_spin`), so its start event is taken on a
  busy stream and the host's launch is not counted.
- On the CPU, ``time.perf_counter`` around the block (caches are not flushed: ``warm``).
- The rounds are kept (the distribution); the speed figure is their DeepSpark mean.
- Power has its own phase (:func:`power_phase`): seconds of back-to-back calls after the
  timed rounds, with the energy counter read at its start and end.
- Memory is the workload's own: torch's allocator peak from the end of warm-up (what stays
  allocated since the case began is its floor), less what the timing harness itself holds (the
  flush buffer), noted when the measurement ends.

Imports torch: only the worker process uses this module.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from sixdim.core.results import POWER_REFUSED
from sixdim.workloads.context import RunContext
from sixdim.workloads.measure import energy

L2_FLUSH_BYTES = 256 * 1024 * 1024
GRAPH_BELOW_SECONDS = 50e-6
HOST_BOUND_SHARE = 0.5
"""A warm kernel whose host dispatch takes at least this share of its device time is captured in a graph:
a Python loop of it keeps the device waiting on the host (at 1.0) or runs its queue dry at any hiccup."""
PROBE_CALLS = 20
"""Calls over which host dispatch and device time are compared (few: the launch queue never fills)."""
SPIN_CYCLES = 100_000
"""GPU clock cycles of the spin queued before a start event (50-100 µs at 1-2 GHz): longer than the host
takes to record the event and launch what follows (10-20 µs), so the start event is taken on a busy stream."""
FLUSHED_CALLS_PER_ROUND = 50
"""Cold (L2-flushed) calls timed per round: each costs a 256 MB flush, so a round stays short."""
GRAPH_CALLS = 1000
"""Calls captured in one CUDA graph; a round replays it as often as its calibrated calls need."""
POWER_READING_SECONDS = 0.05
"""The power phase reads the energy counter after each block of calls lasting about this long."""
ALIGN_READING_SECONDS = 0.005
"""While it waits for the counter to change (at the phase's two ends), it reads after blocks this short:
an update is seen at most this late, so each end is placed on an update within this much."""
ALIGN_READ_MARGIN = 1.5
"""The alignment blocks last at least this many times the slowest energy read measured in the phase: while
the host reads, the block queued before it keeps the GPU busy (an H200's NVML read costs 5.8-6.8 ms, longer
than the 5 ms blocks, so calls of 0.1-5 ms idled at the phase's end)."""
READ_PROBES = 2
"""Energy reads timed before the phase, to size its first alignment blocks."""
ALIGN_LIMIT_SECONDS = 1.0
"""A counter that has not changed after this long at an end is read as it is (a continuous counter
such as RAPL changes at once; NVML's total energy about every 100 ms)."""
MIN_COUNTER_UPDATES = 5
"""A phase spanning fewer counter updates than this has too coarse an energy figure: no power."""
MIN_POWER_SECONDS = 1.0
"""Below this, a power figure would be interpolated from the counter's update steps: not reported."""
POWER_GRAPH_BELOW_SECONDS = 100e-6
"""A kernel shorter than this runs its power phase from a CUDA graph of many calls: called one by one
from Python, the GPU would idle between launches and the phase would measure the launch loop."""
POWER_GRAPH_UNIT_SECONDS = 0.01
"""The power phase's graph holds about this much work (at most :data:`GRAPH_CALLS` calls)."""
MIN_BUSY_SHARE = 0.9
"""A power phase whose GPU was busy (NVML's utilization: a kernel running) for less of its time than
this reports no power: the figure would be the idle gaps' as much as the kernel's."""

MIN_WARMUP_CALLS = 3
"""A warm-up makes at least this many calls, settled or not."""
WARMUP_BLOCK_SECONDS = 0.02
"""Warm-up blocks this long (at least) are compared with each other: long enough that timer and
launch jitter are a small part of them."""
WARMUP_AGREEMENT = 0.03
"""Two consecutive warm-up blocks whose seconds per call differ by no more than this share have settled."""
CALIBRATION_MARGIN = 1.1
"""A round is sized to last this much more than ``min_round_seconds`` by the rate measured."""

_flush_buffer: torch.Tensor | None = None
_capture_streams: dict[int, Any] = {}
"""One side stream per device for every graph capture of the worker: each new stream would get its own
cuBLAS workspace (32 MiB on an H100) that empty_cache does not free, counted as the next case's memory."""


@dataclass
class Timing:
    round_seconds: list[float]
    calls_per_round: int
    method: str
    regime: str = "warm"
    """``cold`` (L2 flushed before each call) or ``warm``."""
    call: Callable[[], object] | None = field(default=None, repr=False)
    """What the rounds ran per unit (a graph replay, or the kernel), and how many kernel calls one unit is."""
    calls_per_unit: int = 1

    @property
    def seconds_per_call(self) -> float:
        return sorted(self.round_seconds)[len(self.round_seconds) // 2]


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
    """Warm up (:func:`warm_up`), then how many calls make a round last ``min_round_seconds``."""
    return _calibrated(fn, device, warmup_seconds, min_round_seconds)[0]


def warm_up(fn: Callable[[], object], device: torch.device, warmup_seconds: float) -> tuple[float, bool]:
    """Call ``fn`` in timed blocks until its rate has settled; returns (seconds per call of the last
    block, whether it settled).

    Settled means two consecutive blocks of at least :func:`_warmup_block_seconds` each agree within
    :data:`WARMUP_AGREEMENT` per call: whatever a warm-up waits for (clocks ramping up, caches and the
    allocator filling, an autotuner's first calls) shows as a drift between blocks, and once two
    blocks agree there is nothing left to wait for.  A fixed warm-up spent the whole budget even on a
    kernel that was steady after a few calls (0.5 s of each case on a GPU by default).  Bounds: at
    least :data:`MIN_WARMUP_CALLS` calls (the first calls pay one-off costs whatever they measure),
    at most about ``warmup_seconds`` (a kernel that never settles is warmed as long as before; with
    no budget, the warm-up is those few calls and is not called settled).  The blocks grow from one
    call towards the block length, at most tenfold at a time and never past what the budget has left
    at the rate measured, so a slow first call does not make a long block and the budget is overrun
    by about one call, as a fixed warm-up overran it.  On a shared 2-vCPU host consecutive blocks
    seldom agreed within 3% and the warm-up mostly ran to its budget (docs/BENCHMARKS.md, "The cost
    of watching"); the rule is for devices whose rate is steady once warm."""
    target = _warmup_block_seconds(warmup_seconds)
    start = time.perf_counter()
    calls, block, previous = 0, 1, None
    while True:
        elapsed = _timed_block(fn, device, block)
        calls += block
        per_call = elapsed / block
        full = target > 0 and elapsed >= target  # no budget (warmup_seconds = 0): nothing settles
        settled = (full and previous is not None
                   and abs(per_call - previous) <= WARMUP_AGREEMENT * previous)
        if calls >= MIN_WARMUP_CALLS and (settled or time.perf_counter() - start >= warmup_seconds):
            return per_call, settled
        previous = per_call if full else None
        wanted = math.ceil(target / per_call) if per_call > 0 else block * 10
        left = warmup_seconds - (time.perf_counter() - start)  # a block never runs far past the budget
        fits = math.ceil(left / per_call) if per_call > 0 and left > 0 else 1
        block = max(1, min(block * 10, wanted, fits))


def _warmup_block_seconds(warmup_seconds: float) -> float:
    """The length of the blocks whose agreement ends a warm-up: :data:`WARMUP_BLOCK_SECONDS`, or a
    quarter of a shorter warm-up budget (so two of them and the ramp still fit in it)."""
    return min(WARMUP_BLOCK_SECONDS, warmup_seconds / 4)


def _calibrated(fn: Callable[[], object], device: torch.device, warmup_seconds: float,
                min_round_seconds: float) -> tuple[int, float]:
    """(calls per round, seconds per call): warm up, then size the round.

    After a settled warm-up the round is sized from its rate, with 10% to spare: the two agreeing
    blocks already measured that rate twice, and timing a further block of the target length (or
    two, as before) would only say it again.  After one that did not settle (its budget ran out
    first), the block grows from that estimate until it really lasts the target, as
    ``torch.utils.benchmark``'s blocked_autorange does, and is confirmed by a second timing: one
    stall (a page fault, a noisy neighbour) must not end calibration with a block far shorter than
    the target.
    """
    per_call, settled = warm_up(fn, device, warmup_seconds)
    if min_round_seconds <= 0:
        return 1, per_call
    if settled and per_call > 0:
        return max(1, math.ceil(CALIBRATION_MARGIN * min_round_seconds / per_call)), per_call
    block = max(1, math.ceil(CALIBRATION_MARGIN * min_round_seconds / per_call)) if per_call > 0 else 1
    while True:
        elapsed = _timed_block(fn, device, block)
        if elapsed >= min_round_seconds:
            confirmed = _timed_block(fn, device, block)
            if confirmed >= 0.9 * min_round_seconds:
                return block, confirmed / block
            elapsed = confirmed
        growth = min_round_seconds / elapsed * CALIBRATION_MARGIN if elapsed > 0 else 10.0
        block = max(block + 1, min(block * 10, math.ceil(block * growth)))


def l2_cache_bytes(device: torch.device) -> int:
    if device.type != "cuda":
        return 0
    return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0))


def cache_regime(device: torch.device, working_set_bytes: int, asked: str | None = None) -> str:
    """``cold`` where the kernel's data would stay in L2 between calls (and so must be flushed
    to be timed as in a real model), else ``warm``; the CPU is always ``warm``."""
    if device.type != "cuda":
        return "warm"
    if asked is not None:
        return asked
    l2 = l2_cache_bytes(device)
    return "cold" if working_set_bytes and l2 and working_set_bytes < 2 * l2 else "warm"


def _flush(device: torch.device) -> None:
    global _flush_buffer
    if _flush_buffer is None:
        _flush_buffer = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device=device)
    _flush_buffer.zero_()


def harness_bytes() -> int:
    """Device memory the timing harness itself holds (not the workload's)."""
    return L2_FLUSH_BYTES if _flush_buffer is not None else 0


def release() -> None:
    """Free what the harness holds; the worker calls this after each case."""
    global _flush_buffer
    _flush_buffer = None


def _capture_stream() -> Any:
    """The worker's one side stream for graph captures on the current device (see ``_capture_streams``)."""
    index = torch.cuda.current_device()
    if index not in _capture_streams:
        _capture_streams[index] = torch.cuda.Stream()
    return _capture_streams[index]


def _graph_of(fn: Callable[[], object], calls: int) -> Callable[[], object] | None:
    """A CUDA graph replaying ``calls`` calls of fn, or None where capture is not possible.

    The graph is replayed once before it is returned: the first replay uploads the graph to the
    device, which would otherwise be inside the first timed round.  A failed capture can leave the
    thread's current stream set to the capture stream (torch.cuda.graph's exit raises before it
    restores it); the caller's stream is put back.
    """
    original = torch.cuda.current_stream()
    try:
        stream = _capture_stream()
        stream.wait_stream(original)
        with torch.cuda.stream(stream):
            fn()  # warm the side stream (cuBLAS handles, workspaces) before capture
        original.wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(calls):
                fn()
        graph.replay()  # the upload, outside any timing
        torch.cuda.synchronize()
        return graph.replay
    except Exception:
        torch.cuda.set_stream(original)
        try:
            torch.cuda.synchronize()
        except Exception:
            pass
        return None


def time_rounds(fn: Callable[[], object], device: torch.device, ctx: RunContext, *, rounds: int,
                min_round_seconds: float, warmup_seconds: float, working_set_bytes: int = 0,
                regime: str | None = None, graph: bool = False) -> Timing:
    """Seconds per call for each round.  The measured window (``ctx`` marks) covers the
    timed rounds only, not warm-up or calibration.

    ``regime`` forces ``cold`` or ``warm`` (two kernels compared with each other must share
    one); by default it follows the working set.  ``graph`` captures each call in a CUDA
    graph whatever its length (on CUDA, in the warm regime).
    """
    ctx.progress("warming up")
    calls, per_call = _calibrated(fn, device, warmup_seconds, min_round_seconds)
    settle_peak(device)
    chosen = cache_regime(device, working_set_bytes, regime)
    if device.type != "cuda":
        timing = _rounds(lambda: _host_timed(fn, calls), ctx, rounds, calls, "perf_counter")
        timing.call = fn
        return _noted(timing, ctx)
    if chosen == "cold":
        cold = max(1, min(calls, FLUSHED_CALLS_PER_ROUND))
        timing = _rounds(lambda: _flushed(fn, device, cold), ctx, rounds, cold, "cuda_events_per_call_l2_flushed")
        timing.regime, timing.call = "cold", fn
        return _noted(timing, ctx)
    if wants_graph(graph, per_call, lambda: launch_profile(fn, min(calls, PROBE_CALLS))):
        captured = max(1, min(calls, GRAPH_CALLS, math.ceil(0.01 / per_call) if graph else GRAPH_CALLS))
        replays = math.ceil(calls / captured)
        replay = _graph_of(fn, captured)
        if replay is not None:
            timing = _rounds(lambda: _events(replay, replays) / (replays * captured), ctx, rounds,
                             replays * captured, "cuda_graph_events")
            timing.call, timing.calls_per_unit = replay, captured
            return _noted(timing, ctx)
    timing = _rounds(lambda: _events(fn, calls) / calls, ctx, rounds, calls, "cuda_events")
    timing.call = fn
    return _noted(timing, ctx)


def host_bound(host_per_call: float, device_per_call: float) -> bool:
    """Whether a Python loop of a kernel would keep its device waiting: its host dispatch takes at least
    :data:`HOST_BOUND_SHARE` of its device time.  (Events around a starved loop measure the host's pace, so
    a host-bound kernel reads as about 1.0 here, whatever its real GPU time.)"""
    return device_per_call <= 0 or host_per_call >= HOST_BOUND_SHARE * device_per_call


def wants_graph(asked: bool, per_call: float, profile: Callable[[], tuple[float, float]]) -> bool:
    """Whether a warm CUDA kernel is timed from a CUDA graph: asked for, shorter than
    :data:`GRAPH_BELOW_SECONDS` by calibration's ``per_call``, or :func:`host_bound` by ``profile()``'s
    (host, device) seconds per call.  Deciding on host time alone timed a kernel whose 60 µs dispatch
    exceeded its GPU time over a Python loop (sparse GEMM, convolution backward: issue 45, item 6)."""
    if asked or per_call < GRAPH_BELOW_SECONDS:
        return True
    return host_bound(*profile())


def launch_profile(fn: Callable[[], object], calls: int, *, event: Callable[[], Any] | None = None,
                   spin: Callable[[], None] | None = None) -> tuple[float, float]:
    """(host seconds per call to launch ``fn``, device seconds per call between events) over ``calls`` calls,
    the host's taken without waiting for the device.  ``event`` and ``spin`` stand in for CUDA's in tests."""
    event = event or (lambda: torch.cuda.Event(enable_timing=True))
    begin, end = event(), event()
    (spin or _spin)()
    begin.record()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    host = time.perf_counter() - start
    end.record()
    end.synchronize()
    return host / calls, begin.elapsed_time(end) / 1e3 / calls


def _spin() -> None:
    """Keep the current stream busy for :data:`SPIN_CYCLES` cycles, so the next event is recorded behind work."""
    torch.cuda._sleep(SPIN_CYCLES)


def _rounds(one_round: Callable[[], float], ctx: RunContext, rounds: int, calls: int, method: str) -> Timing:
    results: list[float] = []
    ctx.mark_window_start()
    for r in range(rounds):
        results.append(one_round())
        ctx.progress(f"round {r + 1}/{rounds}: {results[-1] * 1e3:.4g} ms per call")
    ctx.mark_window_end()
    return Timing(results, calls, method)


def _noted(timing: Timing, ctx: RunContext) -> Timing:
    note_memory(ctx)
    return timing


def _host_timed(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def _events(fn: Callable[[], object], calls: int, *, event: Callable[[], Any] | None = None,
            spin: Callable[[], None] | None = None) -> float:
    """Seconds for ``calls`` calls between two CUDA events.

    A spin is queued first: recorded on an idle stream, the start event would be stamped before the host
    had launched the first call, and the launch (a few µs) would count as the calls' time; behind the spin
    it is stamped when the stream reaches it, with the first call already queued.  ``event`` and ``spin``
    stand in for CUDA's in tests."""
    event = event or (lambda: torch.cuda.Event(enable_timing=True))
    begin, end = event(), event()
    (spin or _spin)()
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
                        warmup_seconds: float, regime: str = "warm") -> list[float]:
    """Seconds of each of ``samples`` single calls (for p50/p99 latency), each synchronized, in
    the same cache regime as the case's timed rounds.

    A warm call on CUDA is replayed from a graph of one call, behind a short spin (:func:`_events`):
    timed directly, its start event would be recorded on an idle stream before the launch, and the launch
    would be counted as the kernel's latency.  (A cold call follows its flush, which keeps the stream busy
    meanwhile.)"""
    calibrate(fn, device, warmup_seconds, 0.0)
    single = fn
    if device.type == "cuda" and regime != "cold":
        single = _graph_of(fn, 1) or fn
    times = []
    for _ in range(samples):
        if device.type == "cuda":
            if regime == "cold":
                times.append(_flushed(fn, device, 1))
            else:
                times.append(_events(single, 1))
        else:
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return times


# ---------------------------------------------------------------------------- memory

def begin_case_memory(ctx: RunContext, device: torch.device) -> None:
    """Forget what earlier cases left: free cached blocks, reset the peak, note the baseline.
    (Not called for a case whose work runs in rank processes of its own: the worker's
    ``worker_memory``, :attr:`sixdim.workloads.spec.WorkloadSpec.runs_in_ranks`.)"""
    if device.type != "cuda":
        return
    torch.cuda.synchronize(device)
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:  # every stream's workspace, the graph side streams' included: a case counts its own
        clear()
    _start_blas(device)
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    ctx.memory_baseline = torch.cuda.memory_allocated(device) - harness_bytes()


def settle_peak(device: torch.device) -> None:
    """Start the allocator's peak afresh after warm-up: the kernel's memory is what it holds while it runs.

    What stays allocated (operands, outputs, the workspace of the algorithm chosen) is the new peak's
    floor, so it is still counted; one-off warm-up transients are not: cuDNN's autotuner trying each
    algorithm with its own workspace made a convolution's peak depend on which ones it tried (sixdim
    against a hand measurement of the same case: 0.55-1.50 on an H100, 2026-11-25)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def _start_blas(device: torch.device) -> None:
    """Have cuBLAS allocate its workspaces now, outside any case: on this stream and on the graph
    capture stream.

    A workspace (32 MiB on an H100 with CUBLAS_WORKSPACE_CONFIG=:4096:8) comes from the caching
    allocator at the first GEMM on a stream and stays for the process: without this, the first GEMM
    case of a worker counted it and every later one did not (seen on an H100, 2026-11-25), so one
    case's memory_bytes depended on what ran before it; and a case captured in a CUDA graph counted
    its capture stream's.  A 1×1 product on each is enough.
    """
    with torch.cuda.device(device):
        one = torch.ones(1, 1, device=device)
        torch.mm(one, one)
        capture = _capture_stream()
        capture.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(capture):
            torch.mm(one, one)
        torch.cuda.current_stream().wait_stream(capture)


def note_memory(ctx: RunContext) -> None:
    """Record the case's allocator peaks so far (called at the end of its measurement, before the
    correctness check builds references that are not the workload's)."""
    device = torch.device(ctx.device)
    if device.type != "cuda":
        return
    baseline = ctx.memory_baseline or 0
    harness = harness_bytes()
    allocated = max(0, torch.cuda.max_memory_allocated(device) - harness - baseline)
    reserved = max(0, torch.cuda.max_memory_reserved(device) - harness - baseline)
    previous = ctx.memory or {}
    ctx.memory = {"memory_bytes": float(max(allocated, previous.get("memory_bytes", 0.0))),
                  "memory_reserved_bytes": float(max(reserved, previous.get("memory_reserved_bytes", 0.0)))}


# ---------------------------------------------------------------------------- power

class _CounterLost(Exception):
    """The energy counter failed to answer (not the workload: its own errors fail the case)."""


def _counter(meter: Any) -> energy.Reading:
    try:
        return energy.read(meter)
    except Exception as exc:  # NVMLError, RuntimeError from an unavailable RAPL total, OSError
        raise _CounterLost(f"{type(exc).__name__}: {exc}") from None


def power_unit(call: Callable[[], object], device: torch.device, calls_per_unit: int,
               seconds_per_unit: float) -> tuple[Callable[[], object], int, float, str]:
    """What the power phase repeats: ``(unit, kernel calls per unit, seconds per unit, kind)``.

    A single CUDA kernel call shorter than :data:`POWER_GRAPH_BELOW_SECONDS` is captured in a graph of
    many calls (kind ``cuda_graph``), as the timed rounds do for short warm kernels: called one by one
    from Python, such a kernel leaves the GPU idle between launches (cold cases are timed one flushed
    call at a time, so their ``timing.call`` is the bare kernel).  Anything else is repeated as it is
    (``graph_replay`` where it is already a graph, ``call`` otherwise).  The phase runs back to back
    without flushes, so the power is the kernel's with its data in cache."""
    if calls_per_unit > 1:
        return call, calls_per_unit, seconds_per_unit, "graph_replay"
    if device.type == "cuda" and 0 < seconds_per_unit < POWER_GRAPH_BELOW_SECONDS:
        calls = max(2, min(GRAPH_CALLS, math.ceil(POWER_GRAPH_UNIT_SECONDS / seconds_per_unit)))
        replay = _graph_of(call, calls)
        if replay is not None:
            return replay, calls, seconds_per_unit * calls, "cuda_graph"
    return call, calls_per_unit, seconds_per_unit, "call"


def busy_note(share: float) -> str | None:
    """Why a power phase whose GPU was busy ``share`` of its time reports no power (None: it does)."""
    if share >= MIN_BUSY_SHARE:
        return None
    return (f"the GPU was busy for only {share:.0%} of the power phase (NVML's utilization; at least "
            f"{MIN_BUSY_SHARE:.0%} needed): the power would be the idle gaps' as much as the kernel's")


class _Blocks:
    """Launches the power phase's blocks of units and reads the energy counter between them.

    On CUDA one block stays queued while the host reads: :meth:`read_after` launches the next block,
    waits for the one before it (its end event) and reads the counter, so the GPU never idles for the
    read.  (Waiting for the whole device before each read left it idle 5.8-6.8 ms per 50 ms block on an
    H200, 2026-11-26: NVML's energy read is that slow there, and the phase ran 80-90% busy.)  Each
    reading comes with the units completed when it was taken; the GPU runs on meanwhile, shifting both
    ends of a window alike.  On a CPU the calls are synchronous: a reading follows its block."""

    def __init__(self, call: Callable[[], object], device: torch.device, meter: Any,
                 event: Callable[[], Any] | None = None):
        self.call, self.device, self.meter = call, device, meter
        self.event = event or (torch.cuda.Event if device.type == "cuda" else None)
        """What marks a block's end on the device's queue (None: calls are synchronous)."""
        self.cuda = self.event is not None
        self.units = 0
        self.pending: list[tuple[Any, int]] = []
        self.read_seconds = 0.0
        """The slowest energy read so far (the alignment blocks are sized to outlast it)."""

    def read(self) -> energy.Reading:
        """Read the counter, timing the read."""
        start = time.perf_counter()
        reading = _counter(self.meter)
        self.read_seconds = max(self.read_seconds, time.perf_counter() - start)
        return reading

    def _launch(self, calls: int) -> None:
        for _ in range(calls):
            self.call()
        self.units += calls
        if self.event is not None:
            event = self.event()
            event.record()
            self.pending.append((event, self.units))

    def read_after(self, calls: int) -> tuple[energy.Reading, int]:
        self._launch(calls)
        if not self.cuda:
            return self.read(), self.units
        if len(self.pending) < 2:  # the first block: queue a second before waiting for it
            self._launch(calls)
        event, done = self.pending.pop(0)
        event.synchronize()
        return self.read(), done

    def drain(self) -> None:
        _synchronize(self.device)
        self.pending.clear()


def _busy_marker(meter: Any) -> Any:
    """Where the meter's utilization samples stand now (None: it keeps none)."""
    marker = getattr(meter, "utilization_marker", None)
    try:
        return marker() if marker is not None else None
    except Exception:  # a GPU without utilization samples: the share is then unknown, not zero
        return None


def _busy_share(meter: Any, marker: Any, seconds: float) -> tuple[float | None, int | None, str | None]:
    """The GPU's mean utilization over the phase from the meter's samples and how many there were, or
    (None, count or None, why not)."""
    busy = getattr(meter, "busy", None)
    if busy is None or marker is None:
        return None, None, "the energy meter keeps no utilization samples (only NVML does)"
    try:
        share, count = busy(marker, seconds)
    except Exception as exc:
        return None, None, f"NVML's utilization samples could not be read: {type(exc).__name__}: {exc}"
    if share is None:
        return None, count, energy.too_few_samples(count, seconds)
    return share, count, None


def _alignment_calls(read_seconds: float, seconds_per_unit: float) -> int:
    """Units per alignment block: :data:`ALIGN_READING_SECONDS`, or :data:`ALIGN_READ_MARGIN` times the
    slowest read where that is longer (a block shorter than a read lets the GPU idle while the host reads)."""
    seconds = max(ALIGN_READING_SECONDS, ALIGN_READ_MARGIN * read_seconds)
    return max(1, math.ceil(seconds / max(seconds_per_unit, 1e-9) - 1e-9))


def power_phase(call: Callable[[], object], device: torch.device, ctx: RunContext, *, seconds: float,
                calls_per_unit: int = 1, seconds_per_unit: float | None = None,
                work_per_call: float | None = None, work_unit: str = "flop",
                timed_regime: str | None = None) -> tuple[dict[str, float], dict[str, Any]]:
    """Power and energy over ``seconds`` of back-to-back calls, from the energy counter.

    Runs after the timed rounds, so the clocks are warm.  What it repeats is chosen by
    :func:`power_unit` (a CUDA graph of many calls for a kernel under 100 µs).  Calls go in blocks of
    about :data:`POWER_READING_SECONDS`, and the counter is read between blocks (:class:`_Blocks`: on
    CUDA with the next block already queued, so the GPU never waits for a read), each reading with
    the units completed when it was taken.  Both ends are placed on a counter update (work goes on in
    blocks of :data:`ALIGN_READING_SECONDS`, or :data:`ALIGN_READ_MARGIN` times the slowest energy read
    timed in the phase where that is longer, until the counter changes): NVML's total energy moves about
    every 100 ms, and a phase cut between its steps would be up to a step off at each end (±20% of a
    1 s phase); aligned, each end is off by at most one short block.  ``details["power"]`` records how
    many updates the phase spanned (at least :data:`MIN_COUNTER_UPDATES`, or no power) and whether both
    ends found one.  On a GPU (and wherever the meter keeps utilization samples: NVML), the GPU's mean
    utilization over the phase is ``gpu_busy_share``, beside its sample count ``gpu_busy_samples``: below
    :data:`MIN_BUSY_SHARE`, or unknown (fewer than 3 samples, or none kept), no power (the phase would
    measure idle gaps, e.g. a launch-bound loop, and unchecked it could).  Figures: ``power_watts``,
    ``energy_joules`` and, with ``work_per_call``, work per joule (``flop_per_joule`` or
    ``samples_per_joule``).

    The phase runs back to back without flushing the L2 (``details["power"]["cache_regime"]`` is
    ``warm``), and its work per joule is its own rate (``details["power"]["flop_per_second"]``) over its
    own power, never the timed rounds' rate: for a case timed cold (``timed_regime``) that rate is the
    warm one (6.7 µs a call against 10.2 µs flushed for a small fp16 GEMM on an H200), which an
    ``efficiency_note`` says.  (Flushing between calls instead would add the 256 MB flush's energy to
    the kernel's.)  Returns
    ``({}, {"power_note": why})`` where there is no counter or the phase would be too short to mean
    anything; where the phase ran and its figure is withheld, the details also hold ``power_refused``
    (:data:`~sixdim.core.results.POWER_REFUSED`), so that the daemon does not fill one in from its window.
    """
    meter = ctx.energy
    if meter is None or not meter.available:
        return {}, {"power_note": getattr(meter, "reason", "") or "no energy counter for this device"}
    if seconds < MIN_POWER_SECONDS:
        return {}, {"power_note": f"power phase of {seconds:g} s is shorter than {MIN_POWER_SECONDS:g} s: "
                                  f"power not reported (set power_seconds >= {MIN_POWER_SECONDS:g})"}
    if seconds_per_unit is None:
        seconds_per_unit = _timed_block(call, device, 3) / 3
    call, calls_per_unit, seconds_per_unit, unit_kind = power_unit(call, device, calls_per_unit, seconds_per_unit)
    block = max(1, round(POWER_READING_SECONDS / max(seconds_per_unit, 1e-9)))
    ctx.progress(f"power phase: {seconds:g} s")
    _synchronize(device)
    blocks = _Blocks(call, device, meter)
    small = 1

    def next_update(after: energy.Reading) -> tuple[tuple[energy.Reading, int], bool]:
        """Work in short blocks until the counter changes: (the reading just after the update and the units
        done by then, whether one came within ALIGN_LIMIT_SECONDS)."""
        nonlocal small
        while True:
            small = _alignment_calls(blocks.read_seconds, seconds_per_unit)
            reading, done = blocks.read_after(small)
            if reading.joules != after.joules:
                return (reading, done), True
            if reading.monotonic - after.monotonic > ALIGN_LIMIT_SECONDS:
                return (reading, done), False

    try:  # a counter that stops answering mid-phase (an NVML error, a RAPL package gone) costs the
        # power figure, with the reason, never the case's result.  Both ends sit on a counter update:
        # the counter's steps (NVML's total energy moves about every 100 ms) then add no error
        for _ in range(READ_PROBES):  # what a read costs, before the first alignment block is sized
            before = blocks.read()
        (first, units_first), aligned_start = next_update(before)
        marker = _busy_marker(meter)
        readings = [first]
        while readings[-1].monotonic - first.monotonic < seconds:
            readings.append(blocks.read_after(block)[0])
        (last, units_last), aligned_end = next_update(readings[-1])
        readings.append(last)
    except _CounterLost as lost:
        blocks.drain()
        note_memory(ctx)
        return {}, {"power_note": f"the energy counter could not be read during the power phase: {lost}",
                    POWER_REFUSED: True}
    blocks.drain()
    note_memory(ctx)
    updates = len({r.joules for r in readings}) - 1
    elapsed = last.monotonic - first.monotonic
    joules = last.joules - first.joules
    calls = (units_last - units_first) * calls_per_unit
    details: dict[str, Any] = {"seconds": elapsed, "energy_joules": joules, "calls": calls,
                               "readings": len(readings), "counter_updates": updates,
                               "aligned": aligned_start and aligned_end,
                               "start_unix": first.unix, "end_unix": last.unix,
                               "start_monotonic": first.monotonic, "end_monotonic": last.monotonic,
                               "source": meter.source, "calls_per_reading": block * calls_per_unit,
                               "unit": unit_kind, "calls_per_unit": calls_per_unit,
                               "read_seconds": blocks.read_seconds,
                               "calls_per_alignment_read": small * calls_per_unit,
                               "align_block_seconds": small * seconds_per_unit,
                               "cache_regime": "warm"}
    if work_per_call and elapsed > 0:
        details[f"{work_unit}_per_second"] = work_per_call * calls / elapsed
        if timed_regime == "cold":
            details["efficiency_note"] = (
                f"{work_unit}_per_joule is the power phase's own rate over its power: its calls ran warm, back "
                f"to back with their data in cache, while the timed rounds (the case's speed) ran cold, L2 "
                f"flushed before each call")
    share, count, unknown = (_busy_share(meter, marker, elapsed) if device.type == "cuda" or hasattr(meter, "busy")
                             else (None, None, None))
    if count is not None:
        details["gpu_busy_samples"] = count
    if share is not None:
        details["gpu_busy_share"] = share
    if joules <= 0:
        return {}, {"power_note": f"the energy counter did not advance over {elapsed:.2f} s", "power": details,
                    POWER_REFUSED: True}
    if updates < MIN_COUNTER_UPDATES:
        return {}, {"power_note": f"the energy counter moved only {updates} time(s) over {elapsed:.2f} s (at least "
                                  f"{MIN_COUNTER_UPDATES} needed): its steps would dominate the figure",
                    "power": details, POWER_REFUSED: True}
    if unknown is not None:
        return {}, {"power_note": f"the GPU's busy share over the power phase is unknown: {unknown}; unchecked "
                                  f"for idle gaps, the power is not reported", "power": details, POWER_REFUSED: True}
    idle = busy_note(share) if share is not None else None
    if idle is not None:
        return {}, {"power_note": idle, "power": details, POWER_REFUSED: True}
    figures = {"power_watts": joules / elapsed, "energy_joules": joules}
    if work_per_call:
        figures[f"{work_unit}_per_joule"] = work_per_call * calls / joules
    return figures, {"power": details}
