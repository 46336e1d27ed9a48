"""Workloads that misbehave on purpose, run by the real worker in real child processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from sixdim.workloads.context import RunContext, Unsupported, WorkloadOutput


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


GRACEFUL_CHILD_SCRIPT = (
    "import signal, sys, time\n"
    "def finish(*_):\n"
    "    time.sleep(0.5)\n"
    "    open(sys.argv[1], 'w').write('checkpoint written')\n"
    "    sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, finish)\n"
    "open(sys.argv[1] + '.ready', 'w').close()\n"
    "while True: time.sleep(1)\n"
)
"""A child that, on SIGTERM, takes half a second to write its "checkpoint" to argv[1], then exits."""


def graceful_child(params: dict, ctx: RunContext) -> WorkloadOutput:
    """The worker keeps Python's default SIGTERM (it dies at once); its child needs its grace."""
    subprocess.Popen([sys.executable, "-c", GRACEFUL_CHILD_SCRIPT, params["marker"]])
    while not os.path.exists(params["marker"] + ".ready"):
        time.sleep(0.02)
    ctx.progress("child ready")
    while True:
        time.sleep(1)


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


ESCAPE_SCRIPT = (
    "import os, signal, subprocess, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "detached = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
    "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)'], start_new_session=True)\n"
    "middle = os.fork()\n"
    "if middle == 0:\n"
    "    orphan = os.fork()\n"
    "    if orphan == 0:\n"
    "        os.setsid(); time.sleep(600); os._exit(0)\n"
    "    with open(sys.argv[1] + '.orphan', 'w') as f: f.write(str(orphan))\n"
    "    os._exit(0)\n"
    "os.waitpid(middle, 0)\n"
    "with open(sys.argv[1], 'w') as f: f.write(f'{os.getpid()} {detached.pid}')\n"
    "print('escaping', flush=True)\n"
    "while True: time.sleep(1)\n"
)
"""A process that ignores SIGTERM, starts a child in a new session (``setsid``) and an orphan (its
parent exits at once, so it is re-parented), then writes ``PID DETACHED`` to argv[1] and the orphan's
PID to argv[1].orphan, and hangs: every way out of a process group at once."""


def escapes(params: dict, ctx: RunContext) -> WorkloadOutput:
    """The worker itself ignores SIGTERM and runs :data:`ESCAPE_SCRIPT` as its child, then hangs."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c", ESCAPE_SCRIPT, params["pid_file"]])
    while not os.path.exists(params["pid_file"] + ".orphan") or not os.path.exists(params["pid_file"]):
        time.sleep(0.02)
    with open(params["pid_file"] + ".worker", "w") as handle:
        handle.write(f"{os.getpid()} {child.pid}")
    ctx.progress("escaped")
    while True:
        time.sleep(1)


def run_pids(pid_file: str) -> list[int]:
    """Every PID :func:`escapes` wrote: the worker, its child, the detached one and the orphan."""
    pids: list[int] = []
    for suffix in ("", ".orphan", ".worker"):
        with open(pid_file + suffix) as handle:
            pids += [int(word) for word in handle.read().split()]
    return pids


def builds(params: dict, ctx: RunContext) -> WorkloadOutput:
    """A one-off build of ``build_seconds`` (allowed ``allowance`` seconds), then ``after`` seconds of the
    case's own work: how a TensorRT engine build longer than a case's timeout looks to the runner."""
    with ctx.one_off_build(params["allowance"], "a test engine"):
        time.sleep(params["build_seconds"])
    time.sleep(params.get("after", 0.0))
    return WorkloadOutput({"seconds": 1.0})


def phased(params: dict, ctx: RunContext) -> WorkloadOutput:
    """A timed window of ``window`` seconds, then a power phase of ``phase`` seconds (its span in
    details["power"] as workloads/measure/timing.py's power_phase records it), ``settle`` seconds after the
    progress line that lets a test cap the (fake) GPU for the phase only."""
    ctx.mark_window_start()
    time.sleep(params["window"])
    ctx.mark_window_end()
    ctx.progress(f"power phase: {params['phase']:g} s")
    time.sleep(params["settle"])
    start = time.monotonic()
    time.sleep(params["phase"])
    end = time.monotonic()
    return WorkloadOutput({"seconds": params["window"]}, {"power": {"start_monotonic": start, "end_monotonic": end}})
