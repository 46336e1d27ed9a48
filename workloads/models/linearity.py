"""Card and node linearity: the same training on 1 and on N devices (or nodes) with DDP.

DeepSpark's linearity: (throughput on N / N) / throughput on 1, with the per-device batch
fixed (each added card brings its own batch, as data-parallel training scales).  On GPUs
each rank is one local GPU over NCCL; on a CPU the ranks are N processes over gloo, so the
same code is exercised everywhere.  Each card count is a case, in ascending order: the
single-device throughput measured by the first case is kept in this worker and divides the
others.  A window's time is the slowest rank's, as SuperBench reduces step times.

Node linearity runs the same training across ``nnodes`` nodes through torchrun's machinery
(``torch.distributed.launcher.elastic_launch``, c10d rendezvous at ``rdzv_endpoint``): every
node runs ``sixdim run --workload linearity --nnodes N --rdzv-endpoint HOST:PORT`` (by hand,
from a Slurm step or from a Kubernetes Job).  Each node first measures itself alone (its
``nproc_per_node`` local ranks), then all nodes train together; the node that holds global
rank 0 records (N-node throughput / N) / its single-node throughput, and the others record a
skip that says so.

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

from sixdim.workloads.context import RunContext, Unsupported, WorkloadOutput
from sixdim.workloads.measure.stats import deepspark_mean

_single_device_throughput: dict[tuple, float] = {}
"""Throughput on one device, per configuration, from this worker's count=1 case."""


def linearity_ratio(throughput: float, count: int, single: float) -> float:
    return (throughput / count) / single


def _rank_main(rank: int, world: int, backend: str, rendezvous: str, params: dict[str, Any], out_path: str) -> None:
    """One local rank of a single-host run (rendezvous through a file)."""
    dist.init_process_group(backend, init_method=f"file://{rendezvous}", rank=rank, world_size=world)
    _train(rank, rank, world, world, backend, params, out_path)


def _elastic_rank(backend: str, params: dict[str, Any], out_path: str) -> None:
    """One rank of a multi-node run, started by torchrun's agent (RANK, LOCAL_RANK, ... in the environment)."""
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    world, local_world = int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_WORLD_SIZE"])
    dist.init_process_group(backend, init_method="env://")
    _train(rank, local_rank, world, local_world, backend, params, out_path)


def _train(rank: int, local_rank: int, world: int, local_world: int, backend: str, params: dict[str, Any],
           out_path: str) -> None:
    from sixdim.workloads.measure import flags
    from sixdim.workloads.models.model import training_step

    flags.apply("fp32", cudnn_benchmark=True)  # as the model workload: amp is autocast over IEEE fp32
    use_cuda = backend == "nccl"
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_world))  # local ranks share the cores
    try:
        def wrap(m: torch.nn.Module) -> torch.nn.Module:
            return DistributedDataParallel(m, device_ids=[local_rank] if use_cuda else None)

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
        if rank == 0:  # written whole or not at all: its presence means the measurement is complete
            with open(out_path + ".part", "w") as handle:
                json.dump({"windows": windows, "batch": batch, "window": [marks[0][0], marks[-1][1]]}, handle)
            os.replace(out_path + ".part", out_path)
        # every rank leaves together: a rank that tears its gloo pairs down while a peer's transport
        # thread still reads them can make that peer abort (SIGABRT, seen once on a loaded 2-core CI)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _local_run(count: int, backend: str, params: dict[str, Any], out_path: str, tmp: str) -> str:
    """Run the ranks; returns a note where a rank died leaving the process group after the result was
    complete.  gloo can abort a rank (SIGABRT) whose transport thread still reads a pair its peer has torn
    down, even after a barrier (seen on a loaded 2-core machine, 2026-11-26): the measurement it ends is
    already in the result file, written whole by rank 0 after every window's all-reduce."""
    try:
        mp.start_processes(_rank_main, args=(count, backend, os.path.join(tmp, "rendezvous"), params, out_path),
                           nprocs=count, join=True, start_method="spawn")
    except mp.ProcessExitedException as exc:
        if not os.path.exists(out_path):
            raise
        how = exc.signal_name or f"exit code {exc.exit_code}"
        return (f"rank {exc.error_index} ended with {how} while leaving the process group, after the measurement "
                f"was complete: the result is kept")
    return ""


def _multi_node_run(backend: str, params: dict[str, Any], out_path: str) -> None:
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(min_nodes=params["nnodes"], max_nodes=params["nnodes"],
                          nproc_per_node=params["nproc_per_node"], run_id=params["rdzv_id"], rdzv_backend="c10d",
                          rdzv_endpoint=params["rdzv_endpoint"], max_restarts=0, start_method="spawn",
                          rdzv_timeout=params["rdzv_timeout"])
    elastic_launch(config, _elastic_rank)(backend, params, out_path)


def run(params: dict[str, Any], ctx: RunContext) -> WorkloadOutput:
    device = torch.device(ctx.device)
    nodes = params.get("nodes", 1)
    count = params["count"]  # devices per node in a node run, devices in a card run
    if device.type == "cuda":
        available = torch.cuda.device_count()
        if count > available:
            raise Unsupported(f"not applicable: {count} GPUs asked for, this host has {available}")
        backend = "nccl"
    else:
        backend = "gloo"
    teardown = ""
    with tempfile.TemporaryDirectory(prefix="sixdim-linearity-") as tmp:
        out_path = os.path.join(tmp, "result.json")
        if nodes > 1:
            ctx.progress(f"{params['model']} on {nodes} nodes x {count} ranks, rendezvous at {params['rdzv_endpoint']}")
            _multi_node_run(backend, params, out_path)
            if not os.path.exists(out_path):
                return WorkloadOutput({}, {"nodes": nodes}, status="skipped",
                                      reason="this node did not hold global rank 0; that node records the result")
        else:
            ctx.progress(f"{params['model']} on {count} {'GPU' if backend == 'nccl' else 'process'}(es) over {backend}")
            teardown = _local_run(count, backend, params, out_path, tmp)
        with open(out_path) as handle:
            measured = json.load(handle)
    ctx.window_start, ctx.window_end = measured["window"]
    global_batch = measured["batch"] * count * nodes
    throughputs = [global_batch * params["steps_per_window"] / seconds for seconds in measured["windows"]]
    throughput = deepspark_mean(throughputs)
    key = (params["model"], params["size"], params["precision"], measured["batch"], device.type,
           count if params.get("nnodes", 1) > 1 else 1)
    units = nodes if params.get("nnodes", 1) > 1 else count  # node linearity divides by nodes, card by cards
    if units == 1:
        _single_device_throughput[key] = throughput
    single = _single_device_throughput.get(key)
    figures = {"samples_per_second": throughput}
    details = {"count": units, "nodes": nodes, "ranks_per_node": count, "backend": backend,
               "batch_per_device": measured["batch"], "window_seconds": measured["windows"],
               "window_samples_per_second": throughputs, "reference_samples_per_second": single}
    if single is not None:
        figures["linearity_ratio"] = linearity_ratio(throughput, units, single)
    if teardown:
        details["teardown_note"] = teardown
    return WorkloadOutput(figures, details)
