#!/usr/bin/env python3
"""How long ``sixdim fleet`` takes over 1,000 hosts x 8 GPUs x 50 cases, against a real Prometheus.

Usage (from the repository root; Prometheus's tools on PATH, ``export PATH=/work/main/.tools/usr/bin:$PATH``):

    python -m tests.bench.fleet_bench [--hosts-per-model 500] [--cases 50] [--runs 5] [--keep DIR] [--out FILE]

Issue 43 asks for an answer over such a fleet in under 10 s with its queries batched.  No such fleet exists
here, so tests/fleet_sim.py makes one (two GPU models, a driver rollout half done, the new driver 3% slower on
the H100s' bf16 GEMM only, 1% run noise, one host in ten with a slow GPU), with 50 summary cases built from the
workload registry.  Its series are written as OpenMetrics at two times, a day before the moment judged (every
host on the old driver) and the moment itself (half upgraded), one sample per series each: the answer reads
one sample per series and time (an instant selector and one with ``offset``), so denser history would change
what Prometheus stores, not what the query reads.  The moment is two hours back, so that the backfilled blocks
are persisted blocks, as a fleet's history is, not the head.

The real ``promtool tsdb create-blocks-from openmetrics`` backfills it, the real ``prometheus`` serves it, and
``sixdim fleet --json`` runs as a child process (after one warm-up), each answer checked: the slowed group is
``slower`` by about 3% and every other group ``no change`` or ``too few``.  Then every query the command sends
is timed alone, in sequence, split into Prometheus's own evaluation (``stats=all``), the transfer, the JSON
parse and the rows, beside the judging, to say where the time goes.

Prints a markdown table (``--out FILE`` writes it too).  The generated file and TSDB are deleted at the end
unless ``--keep DIR`` names where to keep them.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

from sixdim.core import catalog
from sixdim.fleet import command, judge, queries
from sixdim.workloads import registry
from tests.conftest import free_port
from tests.fleet_sim import NEW_DRIVER, OLD_DRIVER, SLOWED, Fleet, openmetrics

SPEEDS = {"flops": catalog.SUMMARY_FLOPS, "samples_per_second": catalog.SUMMARY_SAMPLES,
          "bytes_per_second": catalog.SUMMARY_BANDWIDTH}
"""The summary metric of each speed figure a workload reports."""
BASE = {"flops": 1.0e14, "samples_per_second": 3.0e3, "bytes_per_second": 2.0e12}
MODES = ("training", "inference")
TRUE_RATIO = 1 - Fleet.slowdown
MOMENT_AGO = 7200
"""How far back the moment judged is: its block persisted, well within retention."""
BEFORE = 86400
"""When the fleet's first state is written, before the moment (``--before 1d``)."""


def speed_cases(count: int) -> tuple[tuple[str, str, str, str, float], ...]:
    """``count`` summary cases in tests/fleet_sim.py's form, from the workload registry: every workload that
    reports FLOP/s, samples/s or bytes/s, each of its precisions (the float ones where it names none), in
    training and inference, except GEMM (training only, so that the slowed GEMM bf16 is one case).  The three
    figures are taken in turn, the slowed case first, so that any count has each figure's metric."""
    by_figure: dict[str, list[tuple[str, str, str, str, float]]] = {figure: [] for figure in SPEEDS}
    for name, spec in registry.WORKLOADS.items():
        figure = next((f for f in spec.figures if f in SPEEDS), None)
        if figure is None:
            continue
        precisions = next((p.choices for p in spec.params if p.name == "precisions" and p.choices),
                          registry.FLOAT_PRECISIONS)
        modes = ("training",) if name == SLOWED[1] else MODES
        for mode in modes:
            for precision in precisions:
                scale = 1.05 ** len(by_figure[figure])
                by_figure[figure].append((SPEEDS[figure].name, name, precision, mode, BASE[figure] * scale))
    slowed = next(c for c in by_figure["flops"] if (c[1], c[2]) == SLOWED[1:])
    by_figure["flops"].remove(slowed)
    ordered = [slowed]
    for turn in range(max(len(cases) for cases in by_figure.values())):
        ordered += [cases[turn] for cases in by_figure.values() if turn < len(cases)]
    if count > len(ordered):
        raise SystemExit(f"--cases: the registry gives {len(ordered)} speed cases, not {count}")
    return tuple(ordered[:count])


def write_openmetrics(fleet: Fleet, path: Path, moment: float) -> tuple[int, float]:
    """The fleet before (a day back) and during the rollout (at ``moment``) as one OpenMetrics file: its
    size in bytes and the seconds it took."""
    started = time.perf_counter()
    with open(path, "w", buffering=1 << 20) as out:
        for line in openmetrics(fleet, [(0, [moment - BEFORE]), (1, [moment])]):
            out.write(line)
            out.write("\n")
    return path.stat().st_size, time.perf_counter() - started


def backfill(promtool: str, source: Path, tsdb: Path) -> float:
    """``promtool tsdb create-blocks-from openmetrics``: the seconds it took."""
    started = time.perf_counter()
    done = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(tsdb)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"promtool failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return time.perf_counter() - started


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def memory_kib(pid: int) -> dict[str, int]:
    """The process's resident memory now (VmRSS) and at its peak (VmHWM), KiB, from /proc."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


@dataclass
class Server:
    url: str
    pid: int
    ready_seconds: float


@contextmanager
def prometheus_process(argv: list[str], log: Path, port: int) -> Iterator[subprocess.Popen]:
    """The real Prometheus started with ``argv`` (listening on loopback ``port``, its stderr in ``log``); yields
    once ``/-/ready`` answers 200 (raises if it exits or is not ready within 300 s), and stops it on exit."""
    with open(log, "wb") as err:
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 300
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"prometheus exited ({process.returncode}):\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=5) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"prometheus not ready in 300 s:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def running_prometheus(prometheus: str, tsdb: Path, work: Path, max_samples: int) -> Iterator[Server]:
    """The real Prometheus on the backfilled TSDB, loopback only, no scrapes; yields once it is ready."""
    port = free_port()
    config = work / "prometheus.yml"
    config.write_text("global: {}\n")
    argv = [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tsdb}",
            "--storage.tsdb.retention.time=30d", f"--web.listen-address=127.0.0.1:{port}",
            f"--query.max-samples={max_samples}"]
    started = time.perf_counter()
    with prometheus_process(argv, work / "prometheus.log", port) as process:
        yield Server(f"http://127.0.0.1:{port}", process.pid, time.perf_counter() - started)


@dataclass
class Run:
    wall: float
    answer: dict[str, Any]
    output_bytes: int


def run_fleet(url: str, moment: float) -> Run:
    """``sixdim fleet --json`` as an operator runs it: a child process, timed from start to exit."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIXDIM_")}
    argv = [sys.executable, "-m", "sixdim", "fleet", "--prometheus", url, "--time", f"{moment:.3f}",
            "--before", "1d", "--json"]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, env=env, timeout=600)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"sixdim fleet exited {done.returncode}:\n{done.stderr.decode()[-3000:]}")
    return Run(wall, json.loads(done.stdout), len(done.stdout))


def check(answer: dict[str, Any], fleet: Fleet) -> dict[str, Any]:
    """The answer is right: the one slowed group ``slower`` near the true ratio, every other group ``no change``
    or ``too few``, every group of every model and case compared.  Returns the slowed group's entry."""
    expected = 2 * len(fleet.cases)
    assert answer["groups_compared"] == expected, (answer["groups_compared"], expected)
    slowed = [e for e in answer["groups"]
              if (e["labels"][catalog.MODEL_NAME], e["labels"][catalog.WORKLOAD], e["labels"][catalog.PRECISION])
              == SLOWED]
    assert len(slowed) == 1, slowed
    entry = slowed[0]
    assert entry["verdict"] == judge.SLOWER and entry["beyond_threshold"], entry
    assert entry["old"]["versions"][catalog.DRIVER_VERSION] == OLD_DRIVER, entry
    assert entry["new"]["versions"][catalog.DRIVER_VERSION] == NEW_DRIVER, entry
    for side in ("cross_section", "paired"):
        assert abs(entry[side]["ratio"] - TRUE_RATIO) <= 0.01, (side, entry[side])
    others = [e for e in answer["groups"] if e is not entry]
    wrong = [e for e in others if e["verdict"] not in (judge.NO_CHANGE, judge.TOO_FEW)]
    assert not wrong, wrong[:3]
    assert answer["slower_beyond_threshold"] == 1, answer["slower_beyond_threshold"]
    return entry


@dataclass
class Timed:
    """One query sent alone: Prometheus's evaluation, the whole request, the answer's sizes, the client's
    work on it."""

    kind: str
    metric: str
    eval_seconds: float
    request_seconds: float
    gzip_bytes: int
    json_bytes: int
    series: int
    samples: int
    peak_samples: int
    gunzip_seconds: float
    parse_seconds: float
    rows_seconds: float
    rows: list[queries.HostRow]


def timed_query(url: str, kind: str, metric: catalog.MetricDef, promql: str, moment: float,
                layout: queries.Layout, *, with_versions: bool, as_rows: bool = True) -> Timed:
    """A query POSTed as sixdim's client sends it (gzip asked), with ``stats=all`` for Prometheus's timings;
    ``as_rows`` False for an answer that is not in :func:`sixdim.fleet.queries.rows`' form."""
    form = urllib.parse.urlencode({"query": promql, "time": f"{moment:.3f}", "stats": "all"}).encode()
    request = urllib.request.Request(f"{url}/api/v1/query", data=form, method="POST",
                                     headers={"Accept-Encoding": "gzip",
                                              "Content-Type": "application/x-www-form-urlencoded"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as response:
        raw = response.read()
        zipped = response.headers.get("Content-Encoding") == "gzip"
    requested = time.perf_counter() - started
    started = time.perf_counter()
    body = gzip.decompress(raw) if zipped else raw
    gunzipped = time.perf_counter() - started
    started = time.perf_counter()
    answer = json.loads(body)
    parsed = time.perf_counter() - started
    if answer.get("status") != "success":
        raise SystemExit(f"{kind} {metric.name}: {answer.get('errorType')}: {answer.get('error')}")
    data = answer["data"]
    started = time.perf_counter()
    if not as_rows:
        rows: list[queries.HostRow] = []
    elif kind == "shapes":
        rows = queries.shape_rows(data["result"], layout)
    else:
        rows = queries.rows(data["result"], metric, layout, with_versions=with_versions)
    rowed = time.perf_counter() - started
    stats = data.get("stats") or {}
    samples = stats.get("samples") or {}
    return Timed(kind, metric.name, float((stats.get("timings") or {}).get("evalTotalTime", 0.0)), requested,
                 len(raw), len(body), len(data["result"]), int(samples.get("totalQueryableSamples", 0)),
                 int(samples.get("peakSamples", 0)), gunzipped, parsed, rowed, rows)


@dataclass
class Breakdown:
    queries: list[Timed]
    build_seconds: float
    judge_seconds: float
    groups: int
    verdicts: dict[str, int]


def breakdown(url: str, moment: float) -> Breakdown:
    """Every query of ``sixdim fleet``'s default answer sent alone, one after another, and the judging timed
    apart: the same steps as :func:`sixdim.fleet.command.compare`, in sequence, so each has its own time."""
    layout = queries.Layout(cluster="cluster", host=catalog.HOSTNAME, model=catalog.MODEL_NAME)
    split = judge.SPLITS["all"]
    timed: list[Timed] = []
    groups: list[judge.Group] = []
    build = 0.0
    shapes = timed_query(url, "shapes", catalog.SUMMARY_SHAPES, queries.shapes_query(layout, []), moment, layout,
                         with_versions=True)
    timed.append(shapes)
    for metric in queries.DEFAULT_METRICS:
        now = timed_query(url, "now", metric, queries.now_query(metric, layout, []), moment, layout,
                          with_versions=True)
        timed.append(now)
        started = time.perf_counter()
        rows = queries.covering(now.rows, shapes.rows)[0] if queries.is_summary(metric) else now.rows
        found, _single = judge.build_groups(metric, layout.group_labels(metric), rows, split, {}, {})
        build += time.perf_counter() - started
        groups.extend(found)
    asks: dict[tuple, list[int]] = {}
    for index, group in enumerate(groups):
        asks.setdefault((group.metric, tuple(group.old.versions.items()), tuple(group.new.versions.items())),
                        []).append(index)
    paired: dict[int, list[queries.HostRow]] = {}
    for (metric, old, new), indexes in asks.items():
        hosts = sorted({host for i in indexes for _, host in groups[i].new_hosts})
        promql = queries.paired_query(metric, layout, [], dict(old), dict(new), hosts, "1d")
        answer = timed_query(url, "paired", metric, promql, moment, layout, with_versions=False)
        timed.append(answer)
        by_group: dict[tuple, list[queries.HostRow]] = {}
        for row in answer.rows:
            by_group.setdefault(row.group, []).append(row)
        for i in indexes:
            new_hosts = groups[i].new_hosts
            paired[i] = [queries.HostRow(r.group, r.host, (), r.median, new_hosts[r.host])
                         for r in by_group.get(tuple(groups[i].labels.values()), []) if r.host in new_hosts]
    started = time.perf_counter()
    judge.judge(groups, paired, alpha=command.DEFAULT_ALPHA, threshold=command.DEFAULT_THRESHOLD,
                min_hosts=command.DEFAULT_MIN_HOSTS)
    judged = time.perf_counter() - started
    verdicts: dict[str, int] = {}
    for group in groups:
        verdicts[group.verdict] = verdicts.get(group.verdict, 0) + 1
    return Breakdown(timed, build, judged, len(groups), verdicts)


def mib(kib_or_bytes: float, unit: int = 1 << 20) -> str:
    return f"{kib_or_bytes / unit:,.0f} MiB"


def report(args: argparse.Namespace, fleet: Fleet, facts: dict[str, Any], runs: list[Run],
           parts: Breakdown) -> str:
    answer = runs[-1].answer
    seconds = [r.answer["seconds"] for r in runs]
    walls = [r.wall for r in runs]
    verdicts: dict[str, int] = {}
    for entry in answer["groups"]:
        verdicts[entry["verdict"]] = verdicts.get(entry["verdict"], 0) + 1
    slowed = facts["slowed"]
    hosts = len(fleet.hosts)
    lines = [
        f"# sixdim fleet over {hosts:,} hosts x {fleet.gpus} GPUs x {len(fleet.cases)} cases, a real Prometheus",
        "",
        f"`python -m tests.bench.fleet_bench --hosts-per-model {args.hosts_per_model} --cases {args.cases} "
        f"--runs {args.runs}`; commit {facts['commit']}; {facts['prometheus_version']}; load average "
        f"{facts['load_before']} before the runs, {facts['load_after']} after.",
        "",
        "| what | measured |",
        "|---|---|",
        f"| fleet | {hosts:,} hosts ({args.hosts_per_model} per GPU model), {hosts * fleet.gpus:,} GPUs, "
        f"{len(fleet.cases)} summary cases; {facts['series']:,} series, {facts['samples']:,} samples |",
        f"| OpenMetrics file | {facts['file_bytes'] / 1e6:,.0f} MB, written in {facts['write_seconds']:.0f} s |",
        f"| `promtool tsdb create-blocks-from openmetrics` | {facts['backfill_seconds']:.0f} s; TSDB "
        f"{facts['tsdb_bytes'] / 1e6:,.0f} MB |",
        f"| Prometheus start to ready | {facts['ready_seconds']:.1f} s |",
        f"| Prometheus resident memory | {mib(facts['rss_ready'], 1024)} ready, {mib(facts['rss_after'], 1024)} "
        f"after the runs, peak {mib(facts['hwm_after'], 1024)} |",
        f"| `sixdim fleet` seconds (its own `seconds`), {len(runs)} runs | "
        f"**{' / '.join(f'{s:.2f}' for s in seconds)}** (median {median(seconds):.2f}) |",
        f"| process wall time (start to exit, imports included) | {' / '.join(f'{w:.2f}' for w in walls)} "
        f"(median {median(walls):.2f}); warm-up run {facts['warmup_wall']:.2f} |",
        f"| requests | {answer['requests']} |",
        f"| groups compared | {answer['groups_compared']} ("
        + ", ".join(f"{n} {v}" for v, n in sorted(verdicts.items())) + ") |",
        f"| the slowed group (H100 gemm bf16) | {slowed['verdict']} {slowed['change_text']}: cross-section "
        f"{slowed['cross_section']['ratio']:.4f} [{slowed['cross_section']['ratio_low']:.4f}, "
        f"{slowed['cross_section']['ratio_high']:.4f}], paired {slowed['paired']['ratio']:.4f} "
        f"[{slowed['paired']['ratio_low']:.4f}, {slowed['paired']['ratio_high']:.4f}] "
        f"({slowed['paired']['hosts']} hosts); truth {TRUE_RATIO:.2f} |",
        f"| answer (`--json`) | {runs[-1].output_bytes / 1e3:,.0f} kB |",
        "",
        "Each query alone, in sequence (`stats=all`; eval is Prometheus's own evaluation time):",
        "",
        "| query | metric | eval s | request s | answer gzip / JSON | series | samples read (peak) "
        "| gunzip s | JSON parse s | rows s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for q in parts.queries:
        if q.kind not in ("shapes", "now", "paired"):
            continue
        lines.append(f"| {q.kind} | `{q.metric}` | {q.eval_seconds:.2f} | {q.request_seconds:.2f} | "
                     f"{q.gzip_bytes / 1e6:.1f} / {q.json_bytes / 1e6:.1f} MB | {q.series:,} | {q.samples:,} "
                     f"({q.peak_samples:,}) | {q.gunzip_seconds:.2f} | {q.parse_seconds:.2f} | "
                     f"{q.rows_seconds:.2f} |")
    sent = [q for q in parts.queries if q.kind in ("shapes", "now", "paired")]
    total_request = sum(q.request_seconds for q in sent)
    client = [sum(getattr(q, f"{step}_seconds") for q in sent) for step in ("gunzip", "parse", "rows")]
    total_client = sum(client)
    lines += [
        f"| all {len(sent)} | | {sum(q.eval_seconds for q in sent):.2f} | {total_request:.2f} "
        f"| {sum(q.gzip_bytes for q in sent) / 1e6:.1f} / {sum(q.json_bytes for q in sent) / 1e6:.1f}"
        f" MB | {sum(q.series for q in sent):,} | | " + " | ".join(f"{c:.2f}" for c in client) + " |",
        "",
        f"Judging: groups built in {parts.build_seconds:.2f} s, {parts.groups} groups judged in "
        f"{parts.judge_seconds:.2f} s (" + ", ".join(f"{n} {v}" for v, n in sorted(parts.verdicts.items()))
        + "). In sequence, the steps add up to "
        f"{total_request + total_client + parts.build_seconds + parts.judge_seconds:.2f} s; the command sends "
        f"{command.PARALLEL_REQUESTS} at a time.",
    ]
    return "\n".join(lines) + "\n"


def prometheus_version(prometheus: str) -> str:
    done = subprocess.run([prometheus, "--version"], capture_output=True, text=True)
    first = (done.stdout or done.stderr).splitlines()[0]
    return first.replace("prometheus, version", "Prometheus").split(" (")[0]


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2])
    return done.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts-per-model", type=int, default=500)
    parser.add_argument("--cases", type=int, default=50)
    parser.add_argument("--runs", type=int, default=5, help="timed runs after the warm-up")
    parser.add_argument("--max-samples", type=int, default=50_000_000,
                        help="Prometheus's --query.max-samples (its default: 50,000,000)")
    parser.add_argument("--keep", default="", metavar="DIR", help="keep the OpenMetrics file and TSDB here")
    parser.add_argument("--out", default="", metavar="FILE", help="also write the table here")
    args = parser.parse_args()
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if not prometheus or not promtool:
        raise SystemExit("prometheus and promtool must be on PATH (export PATH=/work/main/.tools/usr/bin:$PATH)")
    fleet = Fleet(hosts_per_model=args.hosts_per_model, cases=speed_cases(args.cases))
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="sixdim-fleet-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    moment = float(int(time.time() - MOMENT_AGO) // 60 * 60)
    facts: dict[str, Any] = {"commit": commit(), "prometheus_version": prometheus_version(prometheus)}
    try:
        source, tsdb = work / "fleet.om.txt", work / "tsdb"
        shutil.rmtree(tsdb, ignore_errors=True)
        print(f"writing {len(fleet.hosts)} hosts x {fleet.gpus} GPUs x {len(fleet.cases)} cases to {source}",
              file=sys.stderr)
        facts["file_bytes"], facts["write_seconds"] = write_openmetrics(fleet, source, moment)
        per_phase = len(fleet.hosts) * fleet.gpus * len(fleet.cases) * 2
        upgraded = sum(h.upgraded for h in fleet.hosts)
        facts["samples"] = 2 * per_phase
        facts["series"] = per_phase + upgraded * fleet.gpus * len(fleet.cases) * 2
        print(f"backfilling {facts['file_bytes'] / 1e6:.0f} MB with promtool", file=sys.stderr)
        facts["backfill_seconds"] = backfill(promtool, source, tsdb)
        facts["tsdb_bytes"] = folder_bytes(tsdb)
        if not args.keep:
            source.unlink()
        with running_prometheus(prometheus, tsdb, work, args.max_samples) as server:
            facts["ready_seconds"] = server.ready_seconds
            facts["rss_ready"] = memory_kib(server.pid)["VmRSS"]
            print(f"prometheus ready at {server.url} in {server.ready_seconds:.1f} s; warm-up", file=sys.stderr)
            warmup = run_fleet(server.url, moment)
            check(warmup.answer, fleet)
            facts["warmup_wall"] = warmup.wall
            facts["load_before"] = load_average()
            runs = []
            for i in range(args.runs):
                runs.append(run_fleet(server.url, moment))
                facts["slowed"] = check(runs[-1].answer, fleet)
                print(f"run {i + 1}: {runs[-1].answer['seconds']:.2f} s (wall {runs[-1].wall:.2f} s), "
                      f"{runs[-1].answer['requests']} requests", file=sys.stderr)
            facts["load_after"] = load_average()
            memory = memory_kib(server.pid)
            facts["rss_after"], facts["hwm_after"] = memory["VmRSS"], memory["VmHWM"]
            print("timing each query alone", file=sys.stderr)
            parts = breakdown(server.url, moment)
            memory = memory_kib(server.pid)
            facts["hwm_after"] = max(facts["hwm_after"], memory["VmHWM"])
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    text = report(args, fleet, facts, runs, parts)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
