"""All-reduce over the host's ranks, with torch.distributed: NCCL on GPUs, gloo on CPU.

On a GPU host every local GPU is a rank; on a CPU host, ``ranks`` processes.  The
ranks are started by the worker (spawned, so they share its process group and a
timeout stops them too) and rendezvous through a file.  A warm-up of growing blocks
sizes the rounds (:func:`calibrate`: each lasts about ``min_round_seconds``, with at
least ``iterations`` all-reduces); each round times that many in-place all-reduces of
``floats`` float32 values on every rank, with CUDA events on GPUs (behind one untimed
all-reduce, so no launch gap is timed) and the host clock with gloo
(:func:`timed_round`); the round's time is the slowest rank's (as SuperBench reduces
step times).

Bandwidths as nccl-tests defines them: algbw = bytes / time, and
busbw = algbw · 2(n−1)/n, the rate each link must sustain in a ring.  After
timing, a fresh all-reduce of known values (rank r holds r + 1) is checked
exactly against n(n+1)/2.

Imports torch: the worker process only.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from sixdim.workloads.context import RunContext, Unsupported, WorkloadOutput
from sixdim.workloads.measure.stats import deepspark_mean, summarize


def bus_bandwidth(algbw: float, ranks: int) -> float:
    """nccl-tests' all-reduce bus bandwidth: algbw · 2(n−1)/n."""
    return algbw * 2 * (ranks - 1) / ranks


WARMUP_BLOCK_SECONDS = 0.02
"""Warm-up blocks grow until one lasts this long; its rate sizes the rounds."""
MIN_WARMUP_ITERATIONS = 3
CALIBRATION_MARGIN = 1.1
"""A round is sized to last this much more than its target by the warm-up's rate (which includes a
synchronisation, so it reads a little slow)."""


def calibrate(reduce: Callable[[], None], sync: Callable[[], None], agree: Callable[[float], float],
              minimum: int, round_seconds: float) -> tuple[int, int]:
    """Warm up, then choose the all-reduces per round: ``(iterations per round, warm-up all-reduces)``.

    Blocks of all-reduces grow (at most fourfold, and never past what one more block of the target length
    needs at the rate measured) until two have lasted :data:`WARMUP_BLOCK_SECONDS` (the first of them still
    carries one-off costs: with gloo on a 2-vCPU host, sized from it, rounds lasted a tenth of their target);
    the last one's rate sizes the round to last ``round_seconds``, with at least ``minimum`` all-reduces.
    Every decision is taken on ``agree``'s value of a block's time (the slowest rank's): ranks that decided
    apart would call different numbers of collectives and wait on each other for ever."""
    block, warm, full = 1, 0, 0
    while True:
        sync()
        start = time.perf_counter()
        for _ in range(block):
            reduce()
        sync()
        elapsed = agree(time.perf_counter() - start)
        warm += block
        per_call = elapsed / block
        full += elapsed >= WARMUP_BLOCK_SECONDS
        if warm >= MIN_WARMUP_ITERATIONS and full >= 2:
            wanted = math.ceil(CALIBRATION_MARGIN * round_seconds / per_call) if per_call > 0 else minimum
            return max(minimum, wanted), warm
        wanted = math.ceil(WARMUP_BLOCK_SECONDS / per_call) if per_call > 0 else block * 4
        block = max(1, min(block * 4, wanted))


def timed_round(reduce: Callable[[], None], iterations: int, event: Callable[[], Any] | None) -> float:
    """Seconds per all-reduce over one round of ``iterations``.

    With ``event`` (CUDA's, on the stream the collectives are ordered with) the round is timed on the
    device: one untimed all-reduce is queued first, so the start event is recorded behind work already
    running (the launch of the first timed one is not in the round, and the ranks start together), and
    the end event is waited for.  Without (gloo on the CPU: its calls return when done) on the host clock
    around the calls."""
    if event is None:
        start = time.perf_counter()
        for _ in range(iterations):
            reduce()
        return (time.perf_counter() - start) / iterations
    reduce()  # the lead: the device is busy when the start event is recorded
    begin, end = event(), event()
    begin.record()
    for _ in range(iterations):
        reduce()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / 1e3 / iterations  # elapsed_time is in milliseconds


def _rank_main(rank: int, world: int, backend: str, rendezvous: str, params: dict[str, Any], out_path: str) -> None:
    use_cuda = backend == "nccl"
    device = torch.device("cuda", rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"file://{rendezvous}", rank=rank, world_size=world)
    try:
        sync = (lambda: torch.cuda.synchronize(device)) if use_cuda else (lambda: None)
        # zeros: a sum that stays finite over thousands of in-place all-reduces (ones grew by the ranks'
        # number each time, to inf after 128 at two ranks); the check below uses values of its own
        tensor = torch.zeros(params["floats"], dtype=torch.float32, device=device)

        def reduce() -> None:
            dist.all_reduce(tensor)

        def slowest(value: float) -> float:
            agreed = torch.tensor([value], dtype=torch.float64, device=device)
            dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
            return float(agreed.item())

        round_seconds = params["min_round_seconds"]  # its default per device: workloads/registry.py
        iterations, warm = calibrate(reduce, sync, slowest, params["iterations"], round_seconds)
        event = (lambda: torch.cuda.Event(enable_timing=True)) if use_cuda else None
        rounds, windows = [], []
        for _ in range(params["rounds"]):
            dist.barrier()
            sync()
            start_mono = time.monotonic()
            rounds.append(slowest(timed_round(reduce, iterations, event)))  # the slowest rank sets the pace
            windows.append((start_mono, time.monotonic()))
        check = torch.full((params["floats"],), float(rank + 1), dtype=torch.float32, device=device)
        if params.get("corrupt") and rank == 0:
            check[0] += 1000.0
        dist.all_reduce(check)
        expected = world * (world + 1) / 2
        wrong = int((check != expected).sum().item())
        # max |sum - exact| / exact, as the kernels' max relative error (inf for a non-finite sum)
        error = (float((check.double() - expected).abs().max().item()) / expected
                 if bool(torch.isfinite(check).all()) else float("inf"))
        if rank == 0:
            with open(out_path, "w") as handle:
                json.dump({"rounds": rounds, "window": [windows[0][0], windows[-1][1]], "wrong": wrong,
                           "error": error, "iterations": iterations, "warmup_iterations": warm,
                           "timing_method": "cuda_events" if use_cuda else "perf_counter"}, handle)
    finally:
        dist.destroy_process_group()


def run(params: dict[str, Any], ctx: RunContext) -> WorkloadOutput:
    device = torch.device(ctx.device)
    if device.type == "cuda":
        world, backend = torch.cuda.device_count(), "nccl"
        if world < 2:
            raise Unsupported(f"not applicable: all-reduce needs 2 or more GPUs, this host has {world}")
    else:
        world, backend = params["ranks"], "gloo"
    with tempfile.TemporaryDirectory(prefix="sixdim-allreduce-") as tmp:
        out_path = os.path.join(tmp, "result.json")
        ctx.progress(f"{world} ranks over {backend}")
        mp.start_processes(_rank_main, args=(world, backend, os.path.join(tmp, "rendezvous"), params, out_path),
                           nprocs=world, join=True, start_method="spawn")
        with open(out_path) as handle:
            measured = json.load(handle)
    ctx.window_start, ctx.window_end = measured["window"]
    rounds = measured["rounds"]
    seconds = deepspark_mean(rounds)
    size = 4 * params["floats"]
    algbw = size / seconds
    distribution = summarize(rounds)
    figures = {"seconds": seconds, "bytes_per_second": algbw, "bus_bytes_per_second": bus_bandwidth(algbw, world),
               "seconds_iqr_ratio": distribution["iqr_ratio"], "max_relative_error": measured["error"]}
    details = {"round_seconds": rounds, "ranks": world, "backend": backend, "bytes": size,
               "iterations_per_round": measured["iterations"], "iterations_minimum": params["iterations"],
               "warmup_iterations": measured["warmup_iterations"], "timing_method": measured["timing_method"],
               "wrong_elements": measured["wrong"],
               "distribution": distribution}
    if measured["wrong"]:
        return WorkloadOutput(figures, details, status="incorrect",
                              reason=f"incorrect all-reduce: {measured['wrong']} elements differ from the exact sum")
    return WorkloadOutput(figures, details)
