#!/usr/bin/env python3
"""Issue 31 at scale: 5,000 result series, 100,000 runs, 50 scrapers, against a prometheus_client reference.

Usage (from the repository root):

    python -m tests.bench.scale_bench [--runs 100000] [--series 5000] [--scrapers 50] [--seconds 30]
                                      [--python-load] [--no-reference] [--no-ceiling] [--out FILE]

One run:

1. writes a history of ``--runs`` realistic GEMM results over ``--series`` series (8 GPUs × 5 precisions ×
   shapes; every figure a GPU kernel result has, its conditions, versions and details, a few failed and
   skipped runs, about 1% noise) in the history's own row format;
2. starts ``sixdim serve`` on it (a suite exporting per shape, so every series is exported, that never
   runs during the measurement) and measures, from the process's start, the first answered ``/metrics``
   and the first *complete* one (every series' per-shape result there, the run counters adding up to every
   run, and, where the daemon says so, ``sixdim_history_restored 1``);
3. loads ``/metrics`` with ``--scrapers`` concurrent scrapers asking for gzip for ``--seconds`` (wrk if it
   is installed and ``--python-load`` is not given, else Python threads: the table says which), sampling the
   daemon's resident memory each second;
4. serves the same metric families, label sets and values from a plain prometheus_client registry (a custom
   collector that yields them from memory at every scrape, served by ``prometheus_client.start_http_server``
   in its own process): the reference, under the same load;
5. serves the same gzip bytes from the simplest server there is (a thread per connection that answers
   every request with them): the ceiling, what this machine and this load generator allow an exposition
   of this size whatever the server does, under the same load;
6. prints one table, with the machine's load average before and after.

The load generator shares the machine with the server under test, so latencies are an upper bound of
what a remote Prometheus sees; every server gets the same handicap.  With 50 connections each asking
again as soon as it has its answer, latency is queueing: about connections / requests per second.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import random
import re
import sqlite3
import subprocess
import sys
import tempfile
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
from tests.bench.scrape_bench import NEVER as SUITE  # noqa: E402  (one suite that never runs: the history is the load)
from tests.bench.scrape_bench import measure  # noqa: E402
from tests.conftest import free_port  # noqa: E402
from tests.daemon import Daemon, write_config  # noqa: E402
from tests.helpers import HEALTHY_CONDITIONS as CONDITIONS  # noqa: E402  (a healthy H100 host's)

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "int8")
GPUS = 8


ENVIRONMENT = {"driver": "580.159.04", "cuda_runtime": "13.0", "cudnn": "9.10.2", "nccl": "2.27.3",
               "torch": "2.13.0", "python": "3.12.11", "sixdim": "0.31.0", "device_model": "NVIDIA H100 80GB HBM3"}


def series_of(s: int) -> tuple[int, str, int]:
    """Series number -> (GPU, precision, m): GPUs vary fastest, then precisions, then shapes."""
    return s % GPUS, PRECISIONS[s // GPUS % len(PRECISIONS)], 256 + 64 * (s // GPUS // len(PRECISIONS))


def realistic_history(path: Path, runs: int, series: int, seed: int = 31) -> dict[str, int]:
    """``runs`` results over ``series`` series, round-robin, oldest first; returns the run count per status."""
    History(path).close()  # the schema, as the agent creates it
    rng = random.Random(seed)
    start = time.time() - runs * 2.0
    statuses: dict[str, int] = {}
    columns: list[str] = []
    rows: list[dict[str, Any]] = []

    def flush() -> None:
        with sqlite3.connect(path) as db:
            db.executemany(f"INSERT INTO runs ({', '.join(columns)}) VALUES ({', '.join(':' + c for c in columns)})",
                           rows)
        rows.clear()

    for i in range(runs):
        gpu, precision, m = series_of(i % series)
        status = "failed" if i % 97 == 0 else "skipped" if i % 89 == 0 else "ok"
        statuses[status] = statuses.get(status, 0) + 1
        seconds = 2 * m ** 3 / 4e14 * (1 + rng.gauss(0, 0.01))
        ended = start + i * 2.0
        figures = {} if status != "ok" else {
            "seconds": seconds, "flops": 2 * m ** 3 / seconds, "power_watts": 650.0 + rng.random() * 10,
            "energy_joules": 650.0 * seconds, "flop_per_joule": 2 * m ** 3 / (650.0 * seconds),
            "memory_bytes": 3 * m * m * 2, "memory_reserved_bytes": 4 * m * m * 2, "device_memory_bytes": 2e9,
            "sm_clock_hertz": 1.98e9, "power_capped": 0.0, "thermal_slowdown": 0.0, "hardware_slowdown": 0.0,
            "seconds_iqr_ratio": 0.004, "max_relative_error": 1e-3, "peak_ratio": 0.7}
        details = {"round_seconds": [seconds * (1 + rng.gauss(0, 0.01)) for _ in range(5)],
                   "case_wall": [ended - 1.5, ended], "warmup_rounds": 3, "rounds": 5,
                   "telemetry": {"power_watts_max": 690.0, "temperature_celsius_max": 64.0, "samples": 15},
                   "output": f"gemm: m={m} n={m} k={m} op=NN {precision}: {2 * m ** 3 / seconds / 1e12:.3f} TFLOP/s\n"
                   * 4}
        record = RunRecord(
            suite="quick", workload="gemm", precision=precision, params={"m": m, "n": m, "k": m, "op": "NN"},
            shape=f"m={m},n={m},k={m},op=NN", mode="inference", kernel_pass="forward", hostname="benchhost",
            device_type="cuda", device=f"cuda:{gpu}", gpu=str(gpu), uuid=f"GPU-{gpu:08d}-0000-4000-8000-bench{gpu}",
            model_name="NVIDIA H100 80GB HBM3", pci_bus_id=f"00000000:{gpu + 0x17:02X}:00.0", status=status,
            reason="" if status == "ok" else "synthetic failure" if status == "failed" else "busy: utilization 97%",
            started_at=ended - 2.0, ended_at=ended, figures=figures, details=details, environment=dict(ENVIRONMENT),
            conditions={**CONDITIONS, "temperature_celsius": 60.0 + rng.random() * 3}, uid=uuid.uuid4().hex)
        row = _row(record)
        columns = columns or list(row)
        rows.append(row)
        if len(rows) >= 20_000:
            flush()
    if rows:
        flush()
    return statuses


# ---------------------------------------------------------------------------------------------- scrapes

def alone(port: int, times: int = 3) -> float:
    """The fastest of ``times`` gzip scrapes with no other load: what one scrape costs."""
    best = float("inf")
    for _ in range(times):
        began = time.perf_counter()
        fetch(port, timeout=120)
        best = min(best, time.perf_counter() - began)
    return best


def fetch(port: int, timeout: float = 30.0) -> bytes:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body = response.read()
        return gzip.decompress(body) if response.headers.get("Content-Encoding") == "gzip" else body


SHAPE_LINE = re.compile(rb"^sixdim_workload_seconds\{", re.M)
RUNS_LINE = re.compile(rb"^sixdim_workload_runs_total\{[^}]*\} (\S+)$", re.M)
RESTORED_LINE = re.compile(rb"^sixdim_history_restored\{[^}]*\} (\S+)$", re.M)


def completeness(text: bytes) -> tuple[int, int, float | None]:
    """(per-shape series exported, runs counted, sixdim_history_restored or None where not exported)."""
    restored = RESTORED_LINE.search(text)
    return (len(SHAPE_LINE.findall(text)), int(sum(float(v) for v in RUNS_LINE.findall(text))),
            float(restored.group(1)) if restored else None)


def wait_startup(daemon: Daemon, started: float, series: int, runs: int, timeout: float = 600.0) -> dict[str, Any]:
    """Seconds from the process's start to its first answered /metrics and its first complete one."""
    first = None
    out: dict[str, Any] = {}
    deadline = started + timeout
    while time.monotonic() < deadline:
        if daemon.process.poll() is not None:
            raise AssertionError(f"daemon exited: {daemon.log_path.read_text()[-3000:]}")
        try:
            text = fetch(daemon.port, timeout=10)
        except OSError:
            time.sleep(0.02)
            continue
        now = time.monotonic() - started
        shapes, counted, restored = completeness(text)
        if first is None:
            first = now
            out.update(first_answer_seconds=now, first_answer_shapes=shapes, first_answer_runs=counted,
                       first_answer_restored=restored)
        if shapes >= series and counted >= runs and "results_complete_seconds" not in out:
            out["results_complete_seconds"] = now
        if shapes >= series and counted >= runs and restored in (None, 1.0):
            out.update(complete_seconds=now, complete_shapes=shapes, complete_runs=counted, restored=restored)
            return out
        time.sleep(0.1)
    raise AssertionError(f"not complete within {timeout} s: {out}")


def _wrk_seconds(text: str) -> float:
    units = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}
    for unit in ("us", "ms", "s", "m"):
        if text.endswith(unit) and text[:-len(unit)].replace(".", "", 1).isdigit():
            return float(text[:-len(unit)]) * units[unit]
    raise ValueError(f"not a wrk duration: {text!r}")


def load_wrk(port: int, scrapers: int, seconds: float, process: psutil.Process) -> dict[str, Any]:
    """wrk (2 threads, ``scrapers`` connections, gzip asked) for ``seconds``; the server's RSS each second."""
    command = ["wrk", "-t2", f"-c{scrapers}", f"-d{int(seconds)}s", "--latency", "--timeout", "30s",
               "-H", "Accept-Encoding: gzip", f"http://127.0.0.1:{port}/metrics"]
    cpu_before = process.cpu_times()
    rss: list[int] = []
    load = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    begun = time.monotonic()
    while load.poll() is None:
        rss.append(process.memory_info().rss)
        time.sleep(1.0)
    output = load.stdout.read() if load.stdout else ""
    elapsed = time.monotonic() - begun
    cpu_after = process.cpu_times()
    percentiles: dict[str, float] = {}
    requests, errors, latency_max = 0, 0, float("nan")
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].endswith("%"):
            percentiles[parts[0]] = _wrk_seconds(parts[1])
        elif parts and parts[0] == "Latency" and len(parts) >= 4:
            latency_max = _wrk_seconds(parts[3])
        elif "requests in" in line:
            requests = int(parts[0])
        elif line.strip().startswith("Socket errors") or line.strip().startswith("Non-2xx"):
            errors += sum(int(x.rstrip(",")) for x in parts if x.rstrip(",").isdigit())
    return {"load_generator": "wrk -t2", "seconds": elapsed, "scrapes": requests, "errors": errors,
            "p50": percentiles.get("50%", float("nan")), "p90": percentiles.get("90%", float("nan")),
            "p99": percentiles.get("99%", float("nan")), "max": latency_max,
            "rss_first_mib": rss[0] / 2**20 if rss else None, "rss_max_mib": max(rss) / 2**20 if rss else None,
            "rss_last_mib": rss[-1] / 2**20 if rss else None,
            "cpu_seconds": (cpu_after.user + cpu_after.system) - (cpu_before.user + cpu_before.system),
            "wrk_output": output}


def load_python(port: int, scrapers: int, seconds: float, process: psutil.Process) -> dict[str, Any]:
    """The same load from Python threads (tests/bench/scrape_bench.py's scrapers)."""
    args = argparse.Namespace(scrapers=scrapers, seconds=seconds, gzip=True, lock_seconds=0.0)
    result = measure(args, port, process, Path("/nonexistent"))
    result["load_generator"] = f"{scrapers} Python threads"
    result["cpu_seconds"] = result.pop("daemon_cpu_seconds")
    return result


# ---------------------------------------------------------------------------------------------- reference

def reference_serve(source: Path, port: int) -> None:
    """The reference: ``source``'s families served from memory by a plain prometheus_client registry."""
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.metrics_core import Metric
    from prometheus_client.parser import text_string_to_metric_families

    families = [(f.name, f.documentation, f.type, [(s.name, dict(s.labels), s.value) for s in f.samples])
                for f in text_string_to_metric_families(source.read_text())]

    class FromMemory:
        """A custom collector, as an exporter of this size would write one: families made at each scrape."""

        def collect(self):  # type: ignore[no-untyped-def]
            for name, documentation, kind, samples in families:
                metric = Metric(name, documentation, kind)
                for sample_name, labels, value in samples:
                    metric.add_sample(sample_name, labels, value)
                yield metric

    registry = CollectorRegistry()
    registry.register(FromMemory())
    start_http_server(port, addr="127.0.0.1", registry=registry)
    print(f"reference: {sum(len(s) for *_, s in families)} samples in {len(families)} families on {port}", flush=True)
    while True:
        time.sleep(3600)


def ceiling_serve(body: Path, port: int) -> None:
    """The ceiling: the simplest server there is, a thread per connection answering every request with the
    same gzip bytes, read once (no routing, no auth, no deadlines, no TLS): what this machine and this load
    generator allow an exposition of this size, whatever the server."""
    import socket
    import threading

    data = body.read_bytes()
    head = (b"HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
            b"Content-Encoding: gzip\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(data))

    def answer(connection: socket.socket) -> None:
        with connection:
            got = b""
            while b"\r\n\r\n" not in got:
                chunk = connection.recv(65536)
                if not chunk:
                    return
                got += chunk
            connection.sendall(head + data)

    listener = socket.create_server(("127.0.0.1", port), backlog=1024)
    print(f"ceiling: {len(data)} gzip bytes on {port}", flush=True)
    while True:
        connection, _ = listener.accept()
        threading.Thread(target=answer, args=(connection,), daemon=True).start()


def run_server(option: str, source: Path, folder: Path, args: argparse.Namespace, load) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Start this script with ``option`` (``--reference-serve`` or ``--ceiling-serve``) on ``source``, wait
    for its first answer, then measure it as the daemon was measured."""
    port = free_port()
    name = option.strip("-").split("-")[0]
    log = open(folder / f"{name}.log", "wb")
    began = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "tests.bench.scale_bench", option, str(source),
                                "--port", str(port)], cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        while True:
            if process.poll() is not None:
                raise AssertionError(f"{name} exited: {(folder / f'{name}.log').read_text()}")
            try:
                body = fetch(port, timeout=60)
                break
            except OSError:
                time.sleep(0.2)
        startup = time.monotonic() - began
        time.sleep(2.0)
        one = alone(port)
        idle = psutil.Process(process.pid).memory_info().rss / 2**20
        if body[:2] == b"\x1f\x8b":  # the ceiling sends gzip whatever is asked
            body = gzip.decompress(body)
        sizes = {"exposition_bytes": len(body), "exposition_gzip_bytes": len(gzip.compress(body, 6))}
        result = load(port, args.scrapers, args.seconds, psutil.Process(process.pid))
        result.update(sizes, rss_idle_mib=idle, alone_seconds=one, first_answer_seconds=startup,
                      complete_seconds=startup,
                      series=sum(1 for line in body.splitlines() if line and not line.startswith(b"#")))
        return result
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


# ---------------------------------------------------------------------------------------------- the run

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--series", type=int, default=5_000)
    parser.add_argument("--scrapers", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--python-load", action="store_true", help="Python threads as the load even if wrk is there")
    parser.add_argument("--no-reference", action="store_true", help="measure sixdim only")
    parser.add_argument("--keep", help="keep (or reuse) the history at this path")
    parser.add_argument("--out", help="also write the figures as JSON here")
    parser.add_argument("--no-ceiling", action="store_true", help="leave out the static-bytes ceiling")
    parser.add_argument("--reference-serve", help=argparse.SUPPRESS)
    parser.add_argument("--ceiling-serve", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reference_serve:
        reference_serve(Path(args.reference_serve), args.port)
        return
    if args.ceiling_serve:
        ceiling_serve(Path(args.ceiling_serve), args.port)
        return
    use_wrk = not args.python_load and subprocess.run(["which", "wrk"], capture_output=True).returncode == 0
    load = load_wrk if use_wrk else load_python
    result: dict[str, Any] = {"host": f"{platform.node()}, {psutil.cpu_count()} CPUs, {platform.processor() or ''}",
                              "load_before": os.getloadavg(), "runs": args.runs, "series": args.series,
                              "scrapers": args.scrapers}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        db = Path(args.keep) if args.keep else folder / "h.db"
        if not db.exists():
            began = time.perf_counter()
            result["statuses"] = realistic_history(db, args.runs, args.series)
            result["history_write_seconds"] = time.perf_counter() - began
        result["history_mib"] = db.stat().st_size / 2**20
        print(f"history: {args.runs} runs over {args.series} series, {result['history_mib']:.0f} MiB", flush=True)
        port = free_port()
        config = write_config(folder / "c.toml", db, SUITE)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SIXDIM_")}
        # the history's files are in the page cache, as they are for a restarted agent
        started = time.monotonic()
        daemon = Daemon(config, port, env, folder / "serve.log")
        try:
            sixdim = wait_startup(daemon, started, args.series, args.runs)
            print(f"sixdim: first /metrics {sixdim['first_answer_seconds']:.2f} s, complete "
                  f"{sixdim['complete_seconds']:.2f} s", flush=True)
            time.sleep(2.0)  # a refresh or two after the restore
            process = psutil.Process(daemon.process.pid)
            sixdim["rss_idle_mib"] = process.memory_info().rss / 2**20
            text = fetch(port)
            request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Accept-Encoding": "gzip"})
            with urllib.request.urlopen(request, timeout=30) as response:
                sixdim["exposition_gzip_bytes"] = len(response.read())
            sixdim["exposition_bytes"] = len(text)
            sixdim["alone_seconds"] = alone(port)
            sixdim["series"] = sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))
            sixdim.update(load(port, args.scrapers, args.seconds, process))
            sixdim["rss_after_mib"] = process.memory_info().rss / 2**20
        finally:
            daemon.stop()
        result["sixdim"] = sixdim
        if not args.no_ceiling:
            (folder / "body.gz").write_bytes(gzip.compress(text, 6))
            result["ceiling"] = run_server("--ceiling-serve", folder / "body.gz", folder, args, load)
        if not args.no_reference:
            (folder / "reference.prom").write_bytes(text)
            result["reference"] = run_server("--reference-serve", folder / "reference.prom", folder, args, load)
    result["load_after"] = os.getloadavg()
    report(result)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2, default=str))


def report(r: dict[str, Any]) -> None:
    s, ref = r["sixdim"], r.get("reference")
    print(f"\nhost: {r['host']}; load average before {'/'.join(f'{v:.2f}' for v in r['load_before'])}, after "
          f"{'/'.join(f'{v:.2f}' for v in r['load_after'])}")
    print(f"history: {r['runs']} runs, {r['series']} result series, {r['history_mib']:.0f} MiB; load: "
          f"{s['load_generator']}, {r['scrapers']} connections, gzip, {s['seconds']:.0f} s each\n")

    def ms(v: float) -> str:
        return "-" if v != v or v == 0 else f"{v * 1e3:.1f} ms"

    def mib(v: float | None) -> str:
        return "-" if v is None else f"{v:.0f} MiB"

    rows = [
        ("series exported", lambda x: f"{x['series']:,}"),
        ("exposition (gzip)",
         lambda x: f"{x['exposition_bytes'] / 1e6:.1f} MB ({x['exposition_gzip_bytes'] / 1e3:.0f} KB)"),
        ("start-up to the first answered /metrics", lambda x: f"{x['first_answer_seconds']:.2f} s"),
        ("start-up to every result and run count",
         lambda x: f"{x.get('results_complete_seconds', x['complete_seconds']):.2f} s"),
        ("start-up to the first complete /metrics (verdicts too)", lambda x: f"{x['complete_seconds']:.2f} s"),
        ("one scrape alone (gzip, incl. gunzip)", lambda x: ms(x["alone_seconds"])),
        ("scrapes, errors", lambda x: f"{x['scrapes']:,}, {x['errors']}"),
        ("requests/s", lambda x: f"{x['scrapes'] / x['seconds']:.0f}"),
        ("latency p50 / p90 / p99", lambda x: f"{ms(x['p50'])} / {ms(x['p90'])} / {ms(x['p99'])}"),
        ("latency max", lambda x: ms(x["max"])),
        ("resident memory: idle, max under load", lambda x: f"{mib(x.get('rss_idle_mib'))}, {mib(x['rss_max_mib'])}"),
        ("server CPU per scrape", lambda x: f"{x['cpu_seconds'] / x['scrapes'] * 1e3:.2f} ms" if x["scrapes"]
         else f"{x['cpu_seconds']:.1f} s, no scrape completed"),
    ]
    columns = [(s, "sixdim serve")] + [(r[key], title) for key, title in (
        ("reference", "prometheus_client reference"), ("ceiling", "static bytes (the ceiling)")) if key in r]
    print(f"| {r['series']:,} series, {r['runs']:,} runs, {r['scrapers']} scrapers |"
          + "".join(f" {title} |" for _, title in columns))
    print("|---|" + "---|" * len(columns))
    for title, cell in rows:
        print(f"| {title} |" + "".join(f" {cell(x)} |" for x, _ in columns))
    if ref:
        if ref["scrapes"] and ref["p99"] == ref["p99"] and ref["p99"] > 0:
            print(f"\nsixdim p99 / reference p99: {s['p99'] / ref['p99']:.3f}")
        else:
            print(f"\nthe reference completed no scrape within {ref['seconds']:.0f} s under this load "
                  f"(one scrape alone takes it {ref['alone_seconds']:.1f} s)")
    if "ceiling" in r:
        c = r["ceiling"]
        print(f"sixdim p99 / ceiling p99: {s['p99'] / c['p99']:.3f}; requests/s {s['scrapes'] / s['seconds']:.0f} "
              f"against {c['scrapes'] / c['seconds']:.0f}")
    print(f"first answer: {s.get('first_answer_shapes')} shapes, {s.get('first_answer_runs')} runs counted, "
          f"restored={s.get('first_answer_restored')}")


if __name__ == "__main__":
    main()
