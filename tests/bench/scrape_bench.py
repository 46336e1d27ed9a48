#!/usr/bin/env python3
"""Scrapes at fleet scale: a real ``sixdim serve`` over a large history, hit by many scrapers.

Usage (from the repository root):

    python -m tests.bench.scrape_bench [--runs 10000] [--series 500] [--scrapers 50] [--seconds 60]
                                 [--lock-seconds 20] [--gzip] [--out FILE]

It writes a history of ``--runs`` synthetic runs spread over ``--series`` series (kernel-like
records: every figure a GEMM result has, a few failed and skipped runs among them, in the
history's own row format), starts ``sixdim serve`` on it with a schedule that never fires during
the measurement, waits until it answers, and then runs ``--scrapers`` threads that each scrape
``/metrics`` back to back for ``--seconds``.  It reports start-up time, scrape latency
percentiles, errors, the exposition's size, and the daemon's resident memory and CPU over the
run.  With ``--lock-seconds N``, another process holds an exclusive write lock on the database
for N seconds in the middle of the run, and the latencies during the lock are reported apart.

The load generator shares the machine with the daemon (on the 2-core development machine the
scrapers take one core), so latencies here are an upper bound of what a remote Prometheus sees.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sixdim.core.results import RunRecord  # noqa: E402
from sixdim.store.history import History  # noqa: E402
from sixdim.store.rows import row_of as _row  # noqa: E402
from tests.conftest import free_port  # noqa: E402
from tests.daemon import Daemon, write_config  # noqa: E402
from tests.helpers import Locker  # noqa: E402

NEVER = """
[[suites]]
name = "quick"
interval_seconds = 86400
run_at_start = false
export = "shapes"
devices = ["cpu"]
workloads = [{name = "gemm", params = {m = 64, n = 64, k = 64}}]
"""

def synthetic_history(path: Path, runs: int, series: int) -> None:
    """``runs`` kernel-like results over ``series`` series (GPU 0..7 × shapes × precisions)."""
    History(path).close()  # the schema, as the agent creates it
    precisions = ["fp32", "tf32", "fp16", "bf16", "int8"]
    rows = []
    start = time.time() - runs * 60.0
    for i in range(runs):
        s = i % series
        gpu, shape_index, precision = s % 8, s // 8 // len(precisions), precisions[s // 8 % len(precisions)]
        m = 256 + 64 * shape_index
        status = "failed" if i % 97 == 0 else "skipped" if i % 89 == 0 else "ok"
        seconds = 1e-4 * (1 + (i % 7) / 100)
        figures = {} if status != "ok" else {
            "seconds": seconds, "flops": 2 * m ** 3 / seconds, "power_watts": 650.0, "energy_joules": 1950.0,
            "flop_per_joule": 1e12, "memory_bytes": 3 * m * m * 2, "memory_reserved_bytes": 4 * m * m * 2,
            "device_memory_bytes": 2e9, "sm_clock_hertz": 1.98e9, "power_capped": 1.0, "thermal_slowdown": 0.0,
            "hardware_slowdown": 0.0, "seconds_iqr_ratio": 0.004, "max_relative_error": 1e-3, "peak_ratio": 0.7}
        record = RunRecord(
            suite="quick", workload="gemm", precision=precision, params={"m": m, "n": m, "k": m},
            shape=f"m={m},n={m},k={m},op=NN", mode="training", kernel_pass="forward", hostname="benchhost",
            device_type="cuda", device=f"cuda:{gpu}", gpu=str(gpu), uuid=f"GPU-{gpu:08d}-bench",
            model_name="NVIDIA H100 80GB HBM3", pci_bus_id=f"00000000:{gpu + 0x17:02X}:00.0", status=status,
            reason="" if status == "ok" else "synthetic", started_at=start + i * 60.0 - 5, ended_at=start + i * 60.0,
            figures=figures, details={"round_seconds": [seconds] * 5},
            environment={"driver": "580.159.04", "cuda_runtime": "13.0", "torch": "2.13.0"}, uid=uuid.uuid4().hex)
        rows.append(_row(record))
    columns = list(rows[0])
    with sqlite3.connect(path) as db:
        db.executemany(f"INSERT INTO runs ({', '.join(columns)}) VALUES ({', '.join(':' + c for c in columns)})", rows)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def scrape(port: int, use_gzip: bool) -> tuple[float, int]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
                                     headers={"Accept-Encoding": "gzip"} if use_gzip else {})
    with urllib.request.urlopen(request, timeout=60) as response:
        body = response.read()
        if response.headers.get("Content-Encoding") == "gzip":
            gzip.decompress(body)
        return time.monotonic(), len(body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--series", type=int, default=500)
    parser.add_argument("--scrapers", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--lock-seconds", type=float, default=0.0)
    parser.add_argument("--gzip", action="store_true", help="ask for gzip, as Prometheus does")
    parser.add_argument("--wrk", action="store_true",
                        help="generate the load with wrk (C, one process, 2 threads, --scrapers connections) "
                             "instead of Python threads, so the load generator does not compete for the CPU as much")
    parser.add_argument("--out", help="also write the figures as JSON here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        db = folder / "h.db"
        began = time.perf_counter()
        synthetic_history(db, args.runs, args.series)
        print(f"history: {args.runs} runs over {args.series} series, {db.stat().st_size / 2**20:.1f} MiB, "
              f"written in {time.perf_counter() - began:.1f} s")
        port = free_port()
        config = write_config(folder / "c.toml", db, NEVER)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SIXDIM_")}
        started = time.monotonic()
        daemon = Daemon(config, port, env, folder / "serve.log")
        try:
            daemon.wait_ready(timeout=300)
            startup = time.monotonic() - started
            _, size = scrape(port, False)
            _, gz_size = scrape(port, True)
            process = psutil.Process(daemon.process.pid)
            result = measure_wrk(args, port, process) if args.wrk else measure(args, port, process, db)
        finally:
            daemon.stop()
    result.update(startup_seconds=startup, exposition_bytes=size, exposition_gzip_bytes=gz_size, runs=args.runs,
                  series=args.series, host=f"{platform.node()} {psutil.cpu_count()} CPUs")
    report(result)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))


def measure(args: argparse.Namespace, port: int, process: psutil.Process, db: Path) -> dict[str, Any]:
    latencies: list[tuple[float, float]] = []  # (end time, seconds)
    errors: list[str] = []
    stop = threading.Event()
    lock = threading.Lock()

    def scraper() -> None:
        while not stop.is_set():
            begun = time.monotonic()
            try:
                ended, _ = scrape(port, args.gzip)
                with lock:
                    latencies.append((ended, ended - begun))
            except Exception as exc:  # counted, and the scraper goes on
                with lock:
                    errors.append(f"{type(exc).__name__}: {exc}")

    rss: list[int] = []
    cpu_before = process.cpu_times()
    threads = [threading.Thread(target=scraper, daemon=True) for _ in range(args.scrapers)]
    begun = time.monotonic()
    for thread in threads:
        thread.start()
    lock_window: tuple[float, float] | None = None
    locker = None
    while time.monotonic() - begun < args.seconds:
        rss.append(process.memory_info().rss)
        if args.lock_seconds and locker is None and time.monotonic() - begun > (args.seconds - args.lock_seconds) / 2:
            locker = Locker(db, args.lock_seconds)
            lock_window = (time.monotonic(), time.monotonic() + args.lock_seconds)
        time.sleep(1.0)
    stop.set()
    for thread in threads:
        thread.join(timeout=120)
    elapsed = time.monotonic() - begun
    cpu_after = process.cpu_times()
    if locker is not None:
        locker.release()
    seconds = [s for _, s in latencies]
    out: dict[str, Any] = {
        "scrapers": args.scrapers, "seconds": elapsed, "gzip": args.gzip, "scrapes": len(seconds),
        "errors": len(errors), "error_examples": sorted(set(errors))[:5],
        "p50": percentile(seconds, 0.5), "p90": percentile(seconds, 0.9), "p99": percentile(seconds, 0.99),
        "max": max(seconds, default=float("nan")),
        "rss_first_mib": rss[0] / 2**20 if rss else None, "rss_max_mib": max(rss) / 2**20 if rss else None,
        "rss_last_mib": rss[-1] / 2**20 if rss else None,
        "daemon_cpu_seconds": (cpu_after.user + cpu_after.system) - (cpu_before.user + cpu_before.system)}
    if lock_window:
        during = [s for end, s in latencies if lock_window[0] <= end <= lock_window[1] + 1.0]
        out.update(lock_seconds=args.lock_seconds, scrapes_during_lock=len(during),
                   max_during_lock=max(during, default=float("nan")), p99_during_lock=percentile(during, 0.99))
    return out


def _wrk_seconds(text: str) -> float:
    units = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}
    for unit in ("us", "ms", "s", "m"):
        if text.endswith(unit) and text[:-len(unit)].replace(".", "", 1).isdigit():
            return float(text[:-len(unit)]) * units[unit]
    raise ValueError(f"not a wrk duration: {text!r}")


def measure_wrk(args: argparse.Namespace, port: int, process: psutil.Process) -> dict[str, Any]:
    """The same measurement with wrk as the load generator (its --latency percentiles)."""
    command = ["wrk", "-t2", f"-c{args.scrapers}", f"-d{int(args.seconds)}s", "--latency", "--timeout", "30s"]
    if args.gzip:
        command += ["-H", "Accept-Encoding: gzip"]
    cpu_before = process.cpu_times()
    rss: list[int] = []
    load = subprocess.Popen(command + [f"http://127.0.0.1:{port}/metrics"], stdout=subprocess.PIPE, text=True)
    begun = time.monotonic()
    while load.poll() is None:
        rss.append(process.memory_info().rss)
        time.sleep(1.0)
    output = load.stdout.read()
    elapsed = time.monotonic() - begun
    cpu_after = process.cpu_times()
    percentiles = {}
    requests, errors = 0, 0
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].endswith("%"):
            percentiles[parts[0]] = _wrk_seconds(parts[1])
        elif "requests in" in line:
            requests = int(parts[0])
        elif line.strip().startswith("Socket errors") or line.strip().startswith("Non-2xx"):
            errors += sum(int(x.rstrip(",")) for x in parts if x.rstrip(",").isdigit())
    return {"scrapers": args.scrapers, "seconds": elapsed, "gzip": args.gzip, "scrapes": requests, "errors": errors,
            "error_examples": [], "load_generator": "wrk", "p50": percentiles.get("50%", float("nan")),
            "p90": percentiles.get("90%", float("nan")), "p99": percentiles.get("99%", float("nan")),
            "max": float("nan"), "rss_first_mib": rss[0] / 2**20 if rss else None,
            "rss_max_mib": max(rss) / 2**20 if rss else None, "rss_last_mib": rss[-1] / 2**20 if rss else None,
            "daemon_cpu_seconds": (cpu_after.user + cpu_after.system) - (cpu_before.user + cpu_before.system),
            "rss_mib": [round(v / 2**20, 1) for v in rss], "wrk_output": output}


def report(r: dict[str, Any]) -> None:
    print(f"host: {r['host']}")
    print(f"start-up to /healthz: {r['startup_seconds']:.2f} s; exposition {r['exposition_bytes'] / 1024:.0f} KiB "
          f"({r['exposition_gzip_bytes'] / 1024:.0f} KiB gzip)")
    print(f"{r['scrapers']} scrapers for {r['seconds']:.0f} s{' (gzip)' if r['gzip'] else ''}: {r['scrapes']} scrapes, "
          f"{r['errors']} errors; latency p50 {r['p50'] * 1e3:.1f} ms, p90 {r['p90'] * 1e3:.1f} ms, "
          f"p99 {r['p99'] * 1e3:.1f} ms, max {r['max'] * 1e3:.1f} ms")
    if r.get("lock_seconds"):
        print(f"during a {r['lock_seconds']:.0f} s exclusive lock: {r['scrapes_during_lock']} scrapes, "
              f"p99 {r['p99_during_lock'] * 1e3:.1f} ms, max {r['max_during_lock'] * 1e3:.1f} ms")
    print(f"daemon: rss {r['rss_first_mib']:.1f} → max {r['rss_max_mib']:.1f} → {r['rss_last_mib']:.1f} MiB, "
          f"cpu {r['daemon_cpu_seconds']:.1f} s")
    for example in r["error_examples"]:
        print(f"  error: {example}")


if __name__ == "__main__":
    main()
