"""How long ``sixdim`` takes to start: the best of N runs of each command, in a child process, with the
machine's load average (issue 31's goal: < 300 ms before a command's own work).

    python tests/bench/cli_start.py [--runs 10]

``--help`` is all start-up; ``report`` on a one-run history and ``list`` add little work of their own.
The best of N is the start-up cost with the least interference from other processes."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = (["--help"], ["run", "--help"], ["report", "--help"], ["rules", "--help"], ["list"], ["report"])


def best(argv: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "sixdim", *argv], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o700)
        history = str(Path(folder) / "h.db")
        subprocess.run([sys.executable, "-m", "sixdim", "run", "--device", "cpu", "-w", "launch_latency", "-p",
                        "rounds=3", "-p", "launches_per_round=10", "--history", history],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        best(["--version"], 1)  # warm the file cache
        interpreter = []
        for _ in range(args.runs):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            interpreter.append(time.perf_counter() - started)
        print(f"load average {os.getloadavg()[0]:.2f}; python -c pass: {min(interpreter) * 1000:.0f} ms")
        print(f"{'command':24} best of {args.runs}")
        for argv in COMMANDS:
            full = argv + (["--history", history] if argv == ["report"] else [])
            print(f"sixdim {' '.join(argv):17} {best(full, args.runs) * 1000:6.0f} ms")
        print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
