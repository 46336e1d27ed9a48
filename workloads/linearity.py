"""Card linearity: the same training on 1 and on N devices with DistributedDataParallel.

DeepSpark's linearity: (throughput on N / N) / throughput on 1, with the per-device batch
fixed (each added card brings its own batch, as data-parallel training scales).  On GPUs
each rank is one local GPU over NCCL; on a CPU the ranks are N processes over gloo, so the
same code is exercised everywhere.  Each card count is a case, in ascending order: the
single-device throughput measured by the first case is kept in this worker and divides the
others.  A window's time is the slowest rank's, as SuperBench reduces step times.

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
from torch.nn.parallel import DistributedDataParallel

from workloads.context import RunContext, Unsupported, WorkloadOutput
from workloads.stats import deepspark_mean

_single_device_throughput: dict[tuple, float] = {}
"""Throughput on one device, per configuration, from this worker's count=1 case."""


def linearity_ratio(throughput: float, count: int, single: float) -> float:
    return (throughput / count) / single


def _rank_main(rank: int, world: int, backend: str, rendezvous: str, params: dict[str, Any], out_path: str) -> None:
    from workloads.models import training_step

    use_cuda = backend == "nccl"
    device = torch.device("cuda", rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))  # ranks share the host's cores
    dist.init_process_group(backend, init_method=f"file://{rendezvous}", rank=rank, world_size=world)
    try:
        wrap = (lambda m: DistributedDataParallel(m, device_ids=[rank] if use_cuda else None))
        step, batch, _ = training_step(params, device, training=True, wrap=wrap)
        sync = (lambda: torch.cuda.synchronize(device)) if use_cuda else (lambda: None)
        for _ in range(params["warmup_steps"]):
            step()
        sync()
        windows, marks = [], []
        for _ in range(params["windows"]):
            dist.barrier()
            start_mono, start = time.monotonic(), time.perf_counter()
            for _ in range(params["steps_per_window"]):
                step()
            sync()
            elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64,
                                   device=device if use_cuda else "cpu")
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
            windows.append(elapsed.item())
            marks.append((start_mono, time.monotonic()))
        if rank == 0:
            with open(out_path, "w") as handle:
                json.dump({"windows": windows, "batch": batch, "window": [marks[0][0], marks[-1][1]]}, handle)
    finally:
        dist.destroy_process_group()


def run(params: dict[str, Any], ctx: RunContext) -> WorkloadOutput:
    device = torch.device(ctx.device)
    count = params["count"]
    if device.type == "cuda":
        available = torch.cuda.device_count()
        if count > available:
            raise Unsupported(f"not applicable: {count} GPUs asked for, this host has {available}")
        backend = "nccl"
    else:
        backend = "gloo"
    with tempfile.TemporaryDirectory(prefix="sixdim-linearity-") as tmp:
        out_path = os.path.join(tmp, "result.json")
        ctx.progress(f"{params['model']} on {count} {'GPU' if backend == 'nccl' else 'process'}(es) over {backend}")
        mp.start_processes(_rank_main, args=(count, backend, os.path.join(tmp, "rendezvous"), params, out_path),
                           nprocs=count, join=True, start_method="spawn")
        with open(out_path) as handle:
            measured = json.load(handle)
    ctx.window_start, ctx.window_end = measured["window"]
    global_batch = measured["batch"] * count
    throughputs = [global_batch * params["steps_per_window"] / seconds for seconds in measured["windows"]]
    throughput = deepspark_mean(throughputs)
    key = (params["model"], params["size"], params["precision"], measured["batch"], device.type)
    if count == 1:
        _single_device_throughput[key] = throughput
    single = _single_device_throughput.get(key)
    figures = {"samples_per_second": throughput}
    details = {"count": count, "backend": backend, "batch_per_device": measured["batch"],
               "window_seconds": measured["windows"], "window_samples_per_second": throughputs,
               "single_device_samples_per_second": single}
    if single is not None:
        figures["linearity_ratio"] = linearity_ratio(throughput, count, single)
    return WorkloadOutput(figures, details)
