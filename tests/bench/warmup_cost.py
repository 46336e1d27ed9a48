"""What warm-up and calibration cost per case, before and after issue 41's stability rule, in one process.

    python tests/bench/warmup_cost.py --before 4f40dbd [--suite frequent] [--repeats 10]

A suite run's case spans mix many costs, and on a shared 2-vCPU machine their noise hides a change of
a tenth of a second; this times only ``calibrate`` (warm-up, then the calls a round needs), from the
checkout and from ``--before``'s ``workloads/measure/timing.py`` (read with ``git show``, loaded as a module of
its own: nothing in the checkout changes), on the real kernels of the suite's cases on the CPU (each
workload's own set-up, stopped where it would start timing).  The two alternate, ``--repeats`` times
per case, so a drift in the machine's load weighs on both.  It prints per case the median seconds of
each, their ratio, and the calls per round each chose (the rounds must keep their length: both about
``min_round_seconds``), with the load average.  ``--threads 1`` keeps torch's threads from waiting on
each other where other processes share the CPUs (a call's time then varies far less).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from sixdim.workloads import registry
from sixdim.workloads.kernels import bandwidth, conv, gemm, rnn, sparse_gemm
from sixdim.workloads.measure import timing

ROOT = Path(__file__).resolve().parents[2]
KERNEL_MODULES: dict[str, ModuleType] = {"gemm": gemm, "conv": conv, "rnn": rnn, "sparse_gemm": sparse_gemm,
                                         "memory_bandwidth": bandwidth}


class _Captured(Exception):
    """Stops a workload where it would start timing, with the kernel it would time."""

    def __init__(self, kernel: Callable[[], object]) -> None:
        super().__init__("captured")
        self.kernel = kernel


def _capture(*args: Any, **kwargs: Any) -> Any:
    raise _Captured(args[0])


def kernels(suite: str) -> list[tuple[str, dict[str, Any], Callable[[], object]]]:
    """(label, params, kernel) of each kernel case of ``suite`` on the CPU, set up by its workload."""
    found = []
    for name, overrides in registry.SUITES[suite]:
        module = KERNEL_MODULES.get(name)
        if module is None:
            continue
        for case in registry.get(name).cases(overrides, "cpu"):
            saved = {attr: getattr(module, attr) for attr in ("measure_kernel", "time_rounds") if hasattr(module, attr)}
            for attr in saved:
                setattr(module, attr, _capture)
            try:
                module.run(case.params, timing.RunContext(device="cpu"))
            except _Captured as captured:
                found.append((f"{name} {case.precision} {case.kernel_pass} {case.shape}", case.params, captured.kernel))
            finally:
                for attr, value in saved.items():
                    setattr(module, attr, value)
    return found


def load_before(revision: str) -> ModuleType:
    """``workloads/measure/timing.py`` as it was at ``revision``, as a module of its own."""
    source = subprocess.run(["git", "show", f"{revision}:workloads/measure/timing.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    spec = importlib.util.spec_from_loader("timing_before", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["timing_before"] = module  # its dataclasses look their module up
    exec(compile(source, f"{revision}:workloads/measure/timing.py", "exec"), module.__dict__)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True)
    parser.add_argument("--suite", default="frequent")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, help="torch's intra-op threads (default: torch's own)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    before = load_before(args.before)
    device = torch.device("cpu")
    print(f"load average {os.getloadavg()[0]:.2f}; torch threads {torch.get_num_threads()}")
    totals = {"before": 0.0, "after": 0.0}
    for label, params, kernel in kernels(args.suite):
        seconds: dict[str, list[float]] = {"before": [], "after": []}
        calls: dict[str, list[int]] = {"before": [], "after": []}
        for repeat in range(args.repeats):
            order = ("before", "after") if repeat % 2 == 0 else ("after", "before")
            for side in order:
                calibrate = (before if side == "before" else timing).calibrate
                started = time.perf_counter()
                calls[side].append(calibrate(kernel, device, params["warmup_seconds"], params["min_round_seconds"]))
                seconds[side].append(time.perf_counter() - started)
        b, a = statistics.median(seconds["before"]), statistics.median(seconds["after"])
        totals["before"] += b
        totals["after"] += a
        print(f"{label}: warm-up and calibration {b * 1e3:.0f} ms before, {a * 1e3:.0f} ms after ({a / b:.2f}); "
              f"calls per round {statistics.median(calls['before']):g} / {statistics.median(calls['after']):g} "
              f"(warmup {params['warmup_seconds']} s, rounds of {params['min_round_seconds']} s)")
    print(f"all: {totals['before'] * 1e3:.0f} ms before, {totals['after'] * 1e3:.0f} ms after "
          f"({totals['after'] / totals['before']:.2f}); load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
