"""Measure the daemon's footprint: CPU and resident memory while idle and while scraped.

Usage: python -m tests.measure_daemon [--seconds 60]

Starts ``sixdim serve`` with a schedule that runs GEMM once at start, waits for
that run to finish, then measures over the given time while Prometheus-style
scrapes hit /metrics every 15 s (as a default scrape interval would).  Prints
the figures docs/BENCHMARKS.md records.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

import psutil

from tests.conftest import free_port
from tests.daemon import Daemon, write_config

SUITE = """
[[suites]]
name = "once"
interval_seconds = 86400
devices = ["cpu"]
workloads = [{name = "gemm", params = {m = 256, n = 256, k = 256}}]
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SIXDIM_")}
        config = write_config(Path(tmp) / "c.toml", Path(tmp) / "h.db", SUITE)
        daemon = Daemon(config, port, env, Path(tmp) / "serve.log")
        try:
            daemon.wait_ready()
            daemon.wait_for("sixdim_workload_flops", timeout=120)
            process = psutil.Process(daemon.process.pid)
            time.sleep(2.0)
            cpu_before = process.cpu_times()
            start = time.monotonic()
            rss_samples, scrapes = [], 0
            next_scrape = start
            while time.monotonic() - start < args.seconds:
                if time.monotonic() >= next_scrape:
                    daemon.metrics()
                    scrapes += 1
                    next_scrape += 15.0
                rss_samples.append(process.memory_info().rss)
                time.sleep(1.0)
            elapsed = time.monotonic() - start
            cpu_after = process.cpu_times()
            cpu_seconds = (cpu_after.user + cpu_after.system) - (cpu_before.user + cpu_before.system)
            torch_mapped = "torch" in Path(f"/proc/{process.pid}/maps").read_text()
        finally:
            daemon.stop()
    print(f"host: {platform.node()} {platform.machine()} {psutil.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"window: {elapsed:.1f} s idle between runs, {scrapes} scrapes of /metrics")
    print(f"cpu: {cpu_seconds:.3f} s used = {100 * cpu_seconds / elapsed:.3f}% of one core")
    print(f"rss: mean {sum(rss_samples) / len(rss_samples) / 2**20:.1f} MiB, max {max(rss_samples) / 2**20:.1f} MiB")
    print(f"torch mapped into the daemon: {torch_mapped}")


if __name__ == "__main__":
    main()
