"""Torch-free workloads for the guard, host-wide and MIG tests, run by the real worker in real
child processes.  Each reports what the worker was given (the request's ``gpu_uuids``, the
GPU environment variables) and when it ran, in Unix time, so tests can check order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from sixdim.workloads.context import RunContext, WorkloadOutput
from sixdim.workloads.spec import Case, WorkloadSpec


def step(params: dict[str, Any], ctx: RunContext) -> WorkloadOutput:
    """Sleep ``seconds`` inside the measured window.

    ``spawn_child``: start a child process first and announce ``pids WORKER CHILD`` as progress
    (as a CUDA worker and its ranks appear in NVML's process list).  ``marker``: a file to create
    once the case has started."""
    child = None
    if params.get("spawn_child"):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        ctx.progress(f"pids {os.getpid()} {child.pid}")
    ctx.progress("started")
    begin = time.time()
    if params.get("marker"):
        with open(params["marker"], "w") as handle:
            handle.write(str(os.getpid()))
    ctx.mark_window_start()
    time.sleep(params.get("seconds", 0.05))
    ctx.mark_window_end()
    end = time.time()
    if child is not None:
        child.kill()
        child.wait()
    with open(sys.argv[1]) as handle:  # the worker's own request file: python -m sixdim.run.worker REQUEST RESULTS
        request = json.load(handle)
    return WorkloadOutput(
        figures={"seconds": params.get("seconds", 0.05), "begin_unix": begin, "end_unix": end},
        details={"gpu_uuids": request.get("gpu_uuids"),
                 "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                 "cuda_device_order": os.environ.get("CUDA_DEVICE_ORDER")})


def spec(name: str, cases: list[dict[str, Any]], scope: str = "device") -> WorkloadSpec:
    """A workload whose cases run :func:`step` with these parameters, one case each."""
    def expand(spec: WorkloadSpec, params: dict[str, Any], device_type: str) -> list[Case]:
        return [Case(dict(case), precision="fp32", shape=f"case={i}") for i, case in enumerate(cases)]

    return WorkloadSpec(name=name, description="test", entry="tests.guard_workloads:step", expander=expand,
                        uses_torch=False, scope=scope)
