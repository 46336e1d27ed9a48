"""How long a run's processes outlive a SIGKILLed agent, and how long a stop takes (docs/BENCHMARKS.md).

The agent's part is played by a Python process calling :func:`sixdim.run.runner.run_worker` on
``tests.fault_workloads:escapes`` (a worker that ignores SIGTERM, with a ``setsid`` child and an
orphaned grandchild).  For each trial:

- **kill**: SIGKILL the caller once every PID is known, then time until none of the run's 4
  processes is alive (a zombie counts as gone), polling /proc every millisecond;
- **timeout**: the same run with a 1 s timeout, timed from the timeout's expiry to run_worker's
  return (SIGTERM to every process, 3 s grace since the worker ignores it, freeze and kill).

Run: ``python tests/bench/orphan_bench.py [--trials 10]``.  Prints the median and the worst of each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sixdim.run import proctree  # noqa: E402
from sixdim.run.runner import run_worker  # noqa: E402
from tests.fault_workloads import run_pids  # noqa: E402


def _wait_for(path: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(path)
        time.sleep(0.01)


def kill_trial(folder: str) -> float:
    pid_file = os.path.join(folder, "pids")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from sixdim.run.runner import run_worker; "
            f"run_worker('tests.fault_workloads:escapes', [{{'pid_file': {pid_file!r}}}], 'cpu', 600.0, "
            "uses_torch=False)")
    caller = subprocess.Popen([sys.executable, "-c", code, str(ROOT)])
    _wait_for(pid_file + ".worker")
    pids = run_pids(pid_file)
    caller.kill()
    caller.wait()
    started = time.monotonic()
    while any(proctree.alive(pid) for pid in pids):
        if time.monotonic() - started > 30:
            raise AssertionError(f"still alive after 30 s: {[p for p in pids if proctree.alive(p)]}")
        time.sleep(0.001)
    return time.monotonic() - started


def timeout_trial(folder: str, timeout: float = 1.0) -> float:
    pid_file = os.path.join(folder, "pids")
    started = time.monotonic()
    run_worker("tests.fault_workloads:escapes", [{"pid_file": pid_file}], "cpu", timeout, uses_torch=False)
    ended = time.monotonic()
    pids = run_pids(pid_file)
    assert not any(proctree.alive(pid) for pid in pids)
    # the timeout counts from the worker's start; the case reaches its hang within ~0.3 s of that
    return ended - started - timeout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=10)
    args = ap.parse_args()
    for name, trial in (("kill", kill_trial), ("timeout", timeout_trial)):
        times = []
        for _ in range(args.trials):
            with tempfile.TemporaryDirectory() as folder:
                times.append(trial(folder))
        print(f"{name}: median {statistics.median(times) * 1000:.0f} ms, worst {max(times) * 1000:.0f} ms "
              f"over {args.trials} trials")


if __name__ == "__main__":
    main()
