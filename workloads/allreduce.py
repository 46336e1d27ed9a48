"""All-reduce over the host's ranks, with torch.distributed: NCCL on GPUs, gloo on CPU.

On a GPU host every local GPU is a rank; on a CPU host, ``ranks`` processes.  The
ranks are started by the worker (spawned, so they share its process group and a
timeout stops them too) and rendezvous through a file.  Each round times
``iterations`` in-place all-reduces of ``floats`` float32 values on every rank;
the round's time is the slowest rank's (as SuperBench reduces step times).

Bandwidths as nccl-tests defines them: algbw = bytes / time, and
busbw = algbw · 2(n−1)/n, the rate each link must sustain in a ring.  After
timing, a fresh all-reduce of known values (rank r holds r + 1) is checked
exactly against n(n+1)/2.

Imports torch: the worker process only.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from sixdim.workloads.context import RunContext, Unsupported, WorkloadOutput
from sixdim.workloads.stats import deepspark_mean, summarize


def bus_bandwidth(algbw: float, ranks: int) -> float:
    """nccl-tests' all-reduce bus bandwidth: algbw · 2(n−1)/n."""
    return algbw * 2 * (ranks - 1) / ranks


def _rank_main(rank: int, world: int, backend: str, rendezvous: str, params: dict[str, Any], out_path: str) -> None:
    use_cuda = backend == "nccl"
    device = torch.device("cuda", rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"file://{rendezvous}", rank=rank, world_size=world)
    try:
        sync = (lambda: torch.cuda.synchronize(device)) if use_cuda else (lambda: None)
        tensor = torch.ones(params["floats"], dtype=torch.float32, device=device)
        iterations = params["iterations"]
        for _ in range(max(3, iterations // 4)):
            dist.all_reduce(tensor)
        sync()
        rounds, windows = [], []
        for _ in range(params["rounds"]):
            dist.barrier()
            start_mono = time.monotonic()
            start = time.perf_counter()
            for _ in range(iterations):
                dist.all_reduce(tensor)
            sync()
            elapsed = torch.tensor([(time.perf_counter() - start) / iterations], dtype=torch.float64, device=device)
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace
            rounds.append(elapsed.item())
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
                           "error": error}, handle)
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
               "iterations_per_round": params["iterations"], "wrong_elements": measured["wrong"],
               "distribution": distribution}
    if measured["wrong"]:
        return WorkloadOutput(figures, details, status="incorrect",
                              reason=f"incorrect all-reduce: {measured['wrong']} elements differ from the exact sum")
    return WorkloadOutput(figures, details)
