"""Measure the daemon's footprint: CPU and resident memory while idle, or while a suite runs.

Usage:

    python -m tests.bench.measure_daemon [--seconds 60]                        # idle between runs (CPU GEMM)
    python -m tests.bench.measure_daemon --during quick [--device cuda:0] [--fast] [--out DIR]

Idle mode starts ``sixdim serve`` with a schedule that runs GEMM once at start, waits for that run
to finish, then measures over the given time while Prometheus-style scrapes hit /metrics every 15 s
(as a default scrape interval would).

``--during SUITE`` starts ``sixdim serve`` with the built-in SUITE (quick, training, ...) scheduled
once at start on ``--device`` (default: auto), and samples the daemon process alone (not its
workers) every ``--sample-seconds`` until every case of the suite is in the history: resident
memory and CPU (% of one core per interval, and in total).  /metrics is scraped every 15 s.  On a
GPU host it also polls ``nvidia-smi --query-compute-apps=pid,used_memory`` every second and checks
that the daemon's own PID never holds a CUDA context (only its workers may), and that
``libcuda`` and torch are never mapped into the daemon.  ``--fast`` runs the suite's workloads with
shortened timing (no power phase).  The guard stays on, as in production; cases it skipped are
counted.  ``--out DIR`` writes every sample as JSON.  Prints the figures docs/BENCHMARKS.md records.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from tests.conftest import free_port
from tests.daemon import Daemon, write_config

SUITE = """
[[suites]]
name = "once"
interval_seconds = 86400
export = "shapes"
devices = ["cpu"]
workloads = [{name = "gemm", params = {m = 256, n = 256, k = 256}}]
"""

FAST = {"min_round_seconds": 0.05, "warmup_seconds": 0.1, "power_seconds": 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="idle mode: how long to measure")
    parser.add_argument("--during", metavar="SUITE", help="measure while this built-in suite runs (quick, ...)")
    parser.add_argument("--device", default="auto", help="--during: auto, cpu or cuda:N (default auto)")
    parser.add_argument("--fast", action="store_true", help="--during: shortened timing, no power phase")
    parser.add_argument("--sample-seconds", type=float, default=0.5, help="--during: sampling period")
    parser.add_argument("--timeout", type=float, default=540.0,
                        help="--during: stop waiting for the suite after this long (default 540 s)")
    parser.add_argument("--history-runs", type=int, default=0,
                        help="idle mode: start from a history of this many synthetic runs (500 series), to see "
                             "how the history's size changes the footprint")
    parser.add_argument("--out", metavar="DIR", help="also write the figures and samples as JSON under DIR")
    args = parser.parse_args()
    result = measure_during(args) if args.during else measure_idle(args)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        name = f"measure_daemon_{'during_' + args.during if args.during else 'idle'}.json"
        (Path(args.out) / name).write_text(json.dumps(result, indent=2, default=str))
        print(f"written: {Path(args.out) / name}")


def _env(folder: str) -> dict[str, str]:
    """No SIXDIM_* setting of the caller's, and the agent's state (locks, worker records) in the
    measurement's own folder: as root the default is /var/lib/sixdim, a real agent's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIXDIM_")}
    env["SIXDIM_STATE_DIR"] = str(Path(folder) / "state")
    return env


def _host_line() -> str:
    return f"host: {platform.node()} {platform.machine()} {psutil.cpu_count()} CPUs, Python {platform.python_version()}"


def _maps(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return ""


def _wait_for_log(path: Path, text: str, timeout: float) -> str:
    """The first log line containing ``text`` (waiting up to ``timeout`` s for it), else "". The
    verdicts are restored in the background after start: idle is measured once that is done."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            lines = []
        found = next((line for line in lines if text in line), None)
        if found is not None:
            return found.split("sixdim: ", 1)[-1]
        time.sleep(0.5)
    return ""


def measure_idle(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        if args.history_runs:
            from tests.bench.scrape_bench import synthetic_history

            synthetic_history(Path(tmp) / "h.db", args.history_runs, 500)
        config = write_config(Path(tmp) / "c.toml", Path(tmp) / "h.db", SUITE)
        daemon = Daemon(config, port, _env(tmp), Path(tmp) / "serve.log")
        try:
            daemon.wait_ready()
            daemon.wait_for("sixdim_workload_flops", timeout=120)
            restore = _wait_for_log(Path(tmp) / "serve.log", "regression verdicts restored", timeout=300) \
                if args.history_runs else "none (a new history)"
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
            torch_mapped = "torch" in _maps(process.pid)
        finally:
            daemon.stop()
    print(_host_line())
    print(f"history: {args.history_runs} synthetic runs before start" if args.history_runs else "history: new")
    print(f"verdicts: {restore or 'no restore line logged'} (before the window)")
    print(f"window: {elapsed:.1f} s idle between runs, {scrapes} scrapes of /metrics")
    print(f"cpu: {cpu_seconds:.3f} s used = {100 * cpu_seconds / elapsed:.3f}% of one core")
    print(f"rss: mean {sum(rss_samples) / len(rss_samples) / 2**20:.1f} MiB, max {max(rss_samples) / 2**20:.1f} MiB")
    print(f"torch mapped into the daemon: {torch_mapped}")
    return {"mode": "idle", "window_seconds": elapsed, "scrapes": scrapes, "cpu_seconds": cpu_seconds,
            "cpu_percent_of_one_core": 100 * cpu_seconds / elapsed, "rss_bytes": rss_samples,
            "torch_mapped": torch_mapped}


# ---------------------------------------------------------------------------- during a suite

def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"


def suite_config(suite: str, device: str, fast: bool) -> str:
    """A [[suites]] table running ``suite`` once at start; with ``fast``, its workloads with short timing."""
    from sixdim.workloads import registry

    head = (f'[[suites]]\nname = "measured"\ninterval_seconds = 86400\nexport = "shapes"\ndevices = ["{device}"]\n'
            f"timeout_seconds = 600\nrun_at_start = true\n")
    if not fast:
        return head + f'preset = "{suite}"\n'
    entries = []
    for name, params in registry.SUITES[suite]:
        names = {p.name for p in registry.get(name).params}
        entries.append({"name": name, "params": {**{k: v for k, v in FAST.items() if k in names}, **params}})
    return head + f"workloads = {_toml(entries)}\n"


def expected_cases(suite: str, device: str, fast: bool) -> int:
    """How many records the run will write: the executor's own expansion, per resolved device."""
    from sixdim.collectors.nvml import NvmlCollector
    from sixdim.run.devices import resolve
    from sixdim.workloads import registry

    nvml = NvmlCollector("measure")
    devices = resolve([device], nvml)
    first_gpu = min((g.index for g in nvml.gpus), default=None) if nvml.availability().available else None
    total = 0
    for dev in devices:
        for name, params in registry.SUITES[suite]:
            spec = registry.get(name)
            if spec.scope == "host" and dev.type == "cuda" and dev.index != first_gpu:
                continue
            total += len(spec.cases(dict(params), "cuda" if dev.type == "cuda" else "cpu"))
    return total


def _history_count(path: Path) -> int:
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1.0) as db:
            return int(db.execute("SELECT COUNT(*) FROM runs").fetchone()[0])
    except sqlite3.Error:
        return 0


def measure_during(args: argparse.Namespace) -> dict[str, Any]:
    from tests.bench import gpu_smi

    expected = expected_cases(args.during, args.device, args.fast)
    smi = gpu_smi.smi() is not None
    result: dict[str, Any] = {"mode": f"during {args.during}", "device": args.device, "fast": args.fast,
                              "expected_cases": expected, "nvidia_smi": smi}
    samples: list[dict[str, Any]] = []
    apps_seen: dict[int, dict[str, Any]] = {}
    smi_errors: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        history = Path(tmp) / "h.db"
        config = write_config(Path(tmp) / "c.toml", history, suite_config(args.during, args.device, args.fast))
        started = time.monotonic()
        daemon = Daemon(config, port, _env(tmp), Path(tmp) / "serve.log")
        try:
            daemon.wait_ready()
            process = psutil.Process(daemon.process.pid)
            result["daemon_pid"] = process.pid
            print(f"daemon pid {process.pid}; waiting for {expected} cases of '{args.during}' on {args.device}"
                  f"{' (fast timing)' if args.fast else ''}", flush=True)
            descendants: set[int] = set()
            last_cpu = process.cpu_times()
            first_cpu = last_cpu
            last_t = time.monotonic()
            measure_start = last_t
            next_scrape, next_smi, next_report, scrapes = last_t, last_t, last_t + 15.0, 0
            done = 0
            libcuda_mapped = torch_mapped = False
            while True:
                now = time.monotonic()
                if now - started > args.timeout:
                    result["timed_out"] = True
                    break
                done = _history_count(history)
                if done >= expected:
                    break
                if now >= next_scrape:
                    daemon.metrics()
                    scrapes += 1
                    next_scrape += 15.0
                try:
                    children = process.children(recursive=True)
                except psutil.Error:
                    children = []
                descendants.update(c.pid for c in children)
                if smi and now >= next_smi:
                    next_smi = now + 1.0
                    apps, why = gpu_smi.compute_apps()
                    if apps is None:
                        if len(smi_errors) < 5:
                            smi_errors.append(why)
                    for pid, used in apps or []:
                        entry = apps_seen.setdefault(pid, {"first_seen": now - measure_start, "max_used_mib": used,
                                                           "daemon_descendant": pid in descendants})
                        entry["max_used_mib"] = max(entry["max_used_mib"] or 0, used or 0)
                        entry["daemon_descendant"] = entry["daemon_descendant"] or pid in descendants
                maps = _maps(process.pid)
                libcuda_mapped = libcuda_mapped or "libcuda.so" in maps
                torch_mapped = torch_mapped or "torch" in maps
                cpu = process.cpu_times()
                t = time.monotonic()
                used_cpu = (cpu.user + cpu.system) - (last_cpu.user + last_cpu.system)
                samples.append({"t": t - measure_start, "rss_bytes": process.memory_info().rss,
                                "cpu_percent": 100 * used_cpu / max(t - last_t, 1e-6), "cases_done": done,
                                "workers": len(children)})
                last_cpu, last_t = cpu, t
                if t >= next_report:
                    next_report += 15.0
                    print(f"  {t - measure_start:6.0f} s: {done}/{expected} cases, daemon rss "
                          f"{samples[-1]['rss_bytes'] / 2**20:.1f} MiB, cpu {samples[-1]['cpu_percent']:.2f}%",
                          flush=True)
                time.sleep(args.sample_seconds)
            end_cpu = process.cpu_times()
            elapsed = time.monotonic() - measure_start
            cpu_seconds = (end_cpu.user + end_cpu.system) - (first_cpu.user + first_cpu.system)
        finally:
            daemon.stop(timeout=30)
        from sixdim.store.history import History

        records = list(History(history))
    statuses: dict[str, int] = {}
    for r in records:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    guard_skips = [f"{r.workload} {r.shape}: {r.reason}" for r in records
                   if r.status == "skipped" and r.reason.startswith("busy")]
    rss = [s["rss_bytes"] for s in samples]
    cpu_percent = [s["cpu_percent"] for s in samples]
    daemon_pid = result.get("daemon_pid")
    wall = (max(r.ended_at for r in records) - min(r.started_at for r in records)) if records else None
    result.update(
        measured_seconds=elapsed, cases_done=len(records), statuses=statuses, suite_wall_seconds=wall,
        guard_skips=guard_skips, scrapes=scrapes, cpu_seconds=cpu_seconds,
        cpu_percent_of_one_core=100 * cpu_seconds / elapsed if elapsed else None,
        cpu_percent_max_interval=max(cpu_percent, default=None),
        cpu_percent_median_interval=statistics.median(cpu_percent) if cpu_percent else None,
        rss_mean_bytes=statistics.fmean(rss) if rss else None, rss_max_bytes=max(rss, default=None),
        rss_first_bytes=rss[0] if rss else None, libcuda_mapped=libcuda_mapped, torch_mapped=torch_mapped,
        compute_apps_seen={str(k): v for k, v in apps_seen.items()}, nvidia_smi_errors=smi_errors,
        samples=samples)
    if not smi:
        verdict = "not checked (no nvidia-smi here)"
    elif daemon_pid in apps_seen:
        verdict = f"FAIL: the daemon's pid {daemon_pid} held a CUDA context"
    elif apps_seen and not any(v["daemon_descendant"] for v in apps_seen.values()):
        verdict = ("inconclusive by pid: nvidia-smi's pids match none of the daemon's workers (another pid "
                   "namespace?); see libcuda_mapped")
    elif not apps_seen:
        verdict = "no process was seen with a CUDA context (suite too short to catch, or no GPU work)"
    else:
        verdict = "ok: only the daemon's workers held CUDA contexts"
    result["daemon_cuda_context"] = verdict
    result["foreign_compute_pids"] = [pid for pid, v in apps_seen.items() if not v["daemon_descendant"]]

    print(_host_line())
    print(f"suite '{args.during}' on {args.device}{' (fast)' if args.fast else ''}: {len(records)}/{expected} cases "
          f"{statuses}; suite wall time {wall:.1f} s" if wall is not None else
          f"suite '{args.during}': no records")
    if result.get("timed_out"):
        print(f"timed out after {args.timeout:.0f} s: the figures cover the part that ran")
    if guard_skips:
        print(f"guard skips ({len(guard_skips)}): {guard_skips[:3]}")
    print(f"window: {elapsed:.1f} s, {len(samples)} samples every {args.sample_seconds:g} s, {scrapes} scrapes")
    print(f"daemon cpu: {cpu_seconds:.2f} s used = {result['cpu_percent_of_one_core']:.2f}% of one core "
          f"(median interval {result['cpu_percent_median_interval']:.2f}%, "
          f"max {result['cpu_percent_max_interval']:.1f}%)"
          if samples else "daemon cpu: no samples")
    if rss:
        print(f"daemon rss: first {rss[0] / 2**20:.1f} MiB, mean {statistics.fmean(rss) / 2**20:.1f} MiB, "
              f"max {max(rss) / 2**20:.1f} MiB")
    print(f"torch mapped into the daemon: {torch_mapped}; libcuda mapped: {libcuda_mapped}")
    print(f"CUDA contexts (nvidia-smi --query-compute-apps): {verdict}; pids seen: "
          f"{sorted(apps_seen) or '-'}; foreign: {result['foreign_compute_pids'] or '-'}")
    return result


if __name__ == "__main__":
    main()
