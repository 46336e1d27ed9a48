"""Workloads that misbehave on purpose, run by the real worker in real child processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from workloads.context import RunContext, Unsupported, WorkloadOutput


def raises(params: dict, ctx: RunContext) -> WorkloadOutput:
    raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB (simulated)")


def crashes(params: dict, ctx: RunContext) -> WorkloadOutput:
    print("about to crash", flush=True)
    os.kill(os.getpid(), signal.SIGSEGV)
    time.sleep(10)
    raise AssertionError("unreachable")


def exits(params: dict, ctx: RunContext) -> WorkloadOutput:
    print("giving up", file=sys.stderr, flush=True)
    os._exit(3)


def hangs(params: dict, ctx: RunContext) -> WorkloadOutput:
    """Ignores SIGTERM and leaves a grandchild behind, the worst case for a timeout."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(params["pid_file"], "w") as handle:
        handle.write(f"{os.getpid()} {child.pid}")
    while True:
        time.sleep(1)


def succeeds(params: dict, ctx: RunContext) -> WorkloadOutput:
    ctx.progress("working")
    ctx.mark_window_start()
    time.sleep(params.get("seconds", 0.3))
    ctx.mark_window_end()
    return WorkloadOutput(figures={"seconds": 0.25, "flops": 4.0e9}, details={"note": "fixed figures"})


def by_kind(params: dict, ctx: RunContext) -> WorkloadOutput:
    """One case per behaviour, to run several in one worker."""
    kind = params["kind"]
    if kind == "unsupported":
        raise Unsupported("no fp8 on this device (simulated)")
    if kind == "raise":
        raise ValueError("bad case")
    if kind == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    return succeeds({"seconds": 0.05}, ctx)


def floods(params: dict, ctx: RunContext) -> WorkloadOutput:
    """One huge line with no newline, then a carriage-return progress bar left unterminated."""
    block = "x" * (1 << 20)
    for _ in range(params.get("mib", 100)):
        sys.stdout.write(block)
    sys.stdout.flush()
    for percent in range(0, 101, 10):
        sys.stdout.write(f"\rtraining {percent}%")
        sys.stdout.flush()
    time.sleep(params.get("sleep", 0.0))
    return WorkloadOutput({"seconds": 1.0})


def says(params: dict, ctx: RunContext) -> WorkloadOutput:
    """Prints its word and then succeeds, or exits without a result."""
    print(params["word"], flush=True)
    if params.get("exit"):
        os._exit(3)
    return WorkloadOutput({"seconds": 1.0})
