#!/usr/bin/env python3
"""How long ``sixdim report regressions`` takes over a large history, and what it finds there.

Usage (from the repository root):

    python -m tests.bench.report_bench [--series 50] [--runs-per-series 2000] [--seed 1] [--keep DIR] [--out FILE]

It writes a history of ``--series`` x ``--runs-per-series`` synthetic runs (default 100,000) in a
temporary folder, in the history's own row format, with a fixed seed:

- two hosts of 8 GPUs; 40 GEMM-like kernel series (GPU x precision x shape: time, FLOP/s, power,
  energy, FLOP/J, memory, fraction of peak and unwatched extras) and 10 model-like series
  (samples/s, time, latency p50/p99, power, samples/J, memory), one run every 15 minutes each;
- noise: time 1% Gaussian, plus 1% of runs 20% slow (spikes); power 1%; memory constant;
- 2% of runs ``failed`` or ``skipped`` (not analysed, as in a real history);
- injected shifts: a driver upgrade 550.54 -> 560.28 on host ``node-a`` at 60% of the history,
  which slows its bf16 kernel series by 7% (the other series of node-a change driver with no
  effect); and four steps at no version change: +5% time on two series, -4% time (an
  improvement) on one, +3% on one.

Then it times ``python -m sixdim report regressions --json`` end to end as a subprocess (interpreter
start, read, analysis, JSON out), and the read and the analysis alone in this process, and
counts the change points found against the injected ones: a shift counts as found when the
``seconds`` figure of its series has a change point within 2 runs of it; any other change point
of any figure is unexpected.

Last (unless ``--sim-series 0``), the detector alone (:func:`sixdim.verdicts.changepoints.find_change_points`)
on synthetic series with the noise kinds of tests/bench/regression_sim.py: change points in no-change
series of 2,000 runs, and steps of 5%, 3% and 2% found at the right run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from sixdim.core.results import RunRecord  # noqa: E402
from sixdim.store.history import History, _row  # noqa: E402

INTERVAL = 900.0
"""Seconds between two runs of one series."""
OLD, NEW = "550.54", "560.28"


@dataclass(frozen=True)
class SeriesSpec:
    host: str
    gpu: int
    workload: str
    precision: str
    shape: str
    base_seconds: float


@dataclass(frozen=True)
class Shift:
    series: int
    run: int
    factor: float
    """Multiplies the time (so FLOP/s and samples/s divide by it)."""
    why: str


def build_series(count: int) -> list[SeriesSpec]:
    out = []
    kernels = max(0, count - count // 5)
    precisions = ["bf16", "fp16", "fp32", "tf32", "int8"]
    for i in range(kernels):  # (host, GPU) from i % 16; precision, then shape, from i // 16
        host, gpu, combo = ("node-a", "node-b")[i % 2], (i // 2) % 8, i // 16
        m = 1024 * (1 + combo // len(precisions))
        out.append(SeriesSpec(host, gpu, "gemm", precisions[combo % len(precisions)], f"m={m},n={m},k={m},op=NN",
                              1e-4 * (1 + combo)))
    for j in range(count - kernels):
        host, gpu = ("node-a", "node-b")[j % 2], (j // 2) % 8
        out.append(SeriesSpec(host, gpu, "model", "bf16", f"resnet50,batch={64 * (1 + j % 3)}", 0.2 * (1 + j % 3)))
    return out


def injected(specs: list[SeriesSpec], runs: int) -> tuple[int, list[Shift]]:
    """The driver upgrade's run index, and every shift (the upgrade's effect included)."""
    upgrade = int(runs * 0.6)
    shifts = [Shift(i, upgrade, 1 / 0.93, "driver 550.54 -> 560.28, bf16 kernels 7% slower")
              for i, s in enumerate(specs) if s.host == "node-a" and s.workload == "gemm" and s.precision == "bf16"]
    others = [i for i, s in enumerate(specs) if s.host == "node-b"]
    for n, where, factor, why in ((0, 0.25, 1.05, "+5% time"), (3, 0.8, 1.05, "+5% time"),
                                  (5, 0.4, 0.96, "-4% time (improvement)"), (7, 0.5, 1.03, "+3% time")):
        if n < len(others):  # a small history has fewer series to shift
            shifts.append(Shift(others[n], int(runs * where), factor, why))
    return upgrade, shifts


def write_history(path: Path, specs: list[SeriesSpec], runs: int, seed: int) -> tuple[list[Shift], float]:
    """The history at ``path``; returns the shifts and the time of the first run."""
    History(path).close()  # the schema, as the agent creates it
    rnd = random.Random(seed)
    upgrade, shifts = injected(specs, runs)
    start = time.time() - runs * INTERVAL
    factor_at = {(sh.series, sh.run): sh.factor for sh in shifts}
    level = [1.0] * len(specs)
    columns: list[str] | None = None
    with sqlite3.connect(path) as db:
        for r in range(runs):
            rows = []
            for i, spec in enumerate(specs):
                level[i] *= factor_at.get((i, r), 1.0)
                driver = NEW if spec.host == "node-a" and r >= upgrade else OLD
                t0 = start + r * INTERVAL + i * (INTERVAL / len(specs))
                status = "ok"
                if rnd.random() < 0.02:
                    status = rnd.choice(["failed", "skipped"])
                noise = 1 + rnd.gauss(0, 0.01) + (0.2 if rnd.random() < 0.01 else 0.0)
                seconds = spec.base_seconds * level[i] * noise
                power = 650.0 * (1 + rnd.gauss(0, 0.01))
                if status != "ok":
                    figures: dict[str, float] = {}
                elif spec.workload == "gemm":
                    m = int(spec.shape.split(",")[0][2:])
                    flops = 2 * m ** 3 / seconds
                    figures = {"seconds": seconds, "flops": flops, "power_watts": power,
                               "energy_joules": power * seconds * 50, "flop_per_joule": flops / power,
                               "memory_bytes": 3 * m * m * 2, "peak_ratio": flops / 9.9e14,
                               "sm_clock_hertz": 1.98e9, "seconds_iqr_ratio": 0.004}
                else:
                    batch = int(spec.shape.split("=")[1])
                    figures = {"seconds": seconds, "samples_per_second": batch / seconds,
                               "latency_p50_seconds": seconds * 0.98, "latency_p99_seconds": seconds * 1.1,
                               "power_watts": power, "samples_per_joule": batch / seconds / power,
                               "memory_bytes": 4e9 + batch * 1e7}
                record = RunRecord(
                    suite="fleet", workload=spec.workload, precision=spec.precision, params={}, shape=spec.shape,
                    mode="training", kernel_pass="forward", hostname=spec.host, device_type="cuda",
                    device=f"cuda:{spec.gpu}", gpu=str(spec.gpu), uuid=f"GPU-{spec.host}-{spec.gpu}",
                    model_name="NVIDIA H100 80GB HBM3", pci_bus_id=f"00000000:{spec.gpu + 0x17:02X}:00.0",
                    status=status, reason="" if status == "ok" else "synthetic", started_at=t0, ended_at=t0 + 30,
                    figures=figures, details={"round_seconds": [seconds] * 5},
                    environment={"driver": driver, "cuda_runtime": "12.4", "cudnn": "9.1.0", "nccl": "2.21.5",
                                 "torch": "2.13.0", "python": "3.11.7"},
                    uid=uuid.uuid4().hex)
                rows.append(_row(record))
            if columns is None:
                columns = list(rows[0])
            db.executemany(f"INSERT INTO runs ({', '.join(columns)}) VALUES ({', '.join(':' + c for c in columns)})",
                           rows)
    return shifts, start


def score(shifts: list[Shift], specs: list[SeriesSpec], found: list[dict[str, Any]], start: float,
          specs_runs: int) -> dict[str, Any]:
    """Injected shifts found (seconds figure within 2 runs), and change points matching none."""
    def series_of(cp: dict[str, Any]) -> int:
        return next(i for i, s in enumerate(specs) if (s.host, str(s.gpu), s.workload, s.precision, s.shape)
                    == (cp["hostname"], cp["gpu"], cp["workload"], cp["precision"], cp["shape"]))

    def run_of(cp: dict[str, Any], series: int) -> float:
        return (cp["at"] - start - series * (INTERVAL / len(specs))) / INTERVAL

    matched = set()
    hits = []
    for _n, sh in enumerate(shifts):
        near = [k for k, cp in enumerate(found)
                if series_of(cp) == sh.series and abs(run_of(cp, sh.series) - sh.run) <= 2]
        matched.update(near)
        secs = [found[k] for k in near if found[k]["figure"] == "seconds"]
        hits.append({"series": sh.series, "run": sh.run, "why": sh.why, "found": bool(secs),
                     "change_ratio": secs[0]["change_ratio"] if secs else None,
                     "state": secs[0]["state"] if secs else None,
                     "version_changed": secs[0]["version_changed"] if secs else None,
                     "figures": sorted(found[k]["figure"] for k in near)})
    unexpected = [cp for k, cp in enumerate(found) if k not in matched]
    return {"injected": len(shifts), "found": sum(h["found"] for h in hits), "shifts": hits,
            "change_points": len(found), "unexpected": len(unexpected),
            "unexpected_list": [{k: cp[k] for k in ("hostname", "gpu", "workload", "precision", "shape", "figure",
                                                    "change_ratio", "p_value", "runs_before", "runs_after")}
                                for cp in unexpected]}


def noise(kind: str, rng: np.random.Generator, n: int) -> np.ndarray:
    """Relative noise of one series: ``gauss`` sd 1%; ``t3`` Student t (3 dof) scaled to sd 1%;
    ``spiky`` 1% Gaussian plus 1% of runs 20% slow; ``gauss5`` sd 5%."""
    if kind == "gauss":
        return rng.normal(0, 0.01, n)
    if kind == "t3":
        return rng.standard_t(3, n) * 0.01 / np.sqrt(3)
    if kind == "spiky":
        return rng.normal(0, 0.01, n) + np.where(rng.random(n) < 0.01, 0.2, 0.0)
    return rng.normal(0, 0.05, n)


def simulate(series: int, seed: int) -> dict[str, Any]:
    """The detector alone on synthetic series: change points per 2,000-run no-change series, and
    steps (at a random run of 600) found at the right run, within 1, with how many other points."""
    from sixdim.verdicts.changepoints import find_change_points

    out: dict[str, Any] = {"false": {}, "steps": {}}
    for kind in ("gauss", "t3", "spiky", "gauss5"):
        points = 0
        started = time.perf_counter()
        for k in range(series):
            points += len(find_change_points(1 + noise(kind, np.random.default_rng([seed, k]), 2000)))
        out["false"][kind] = {"series": series, "change_points": points,
                              "ms_per_series": round((time.perf_counter() - started) / series * 1e3, 2)}
    for kind in ("gauss", "t3", "spiky"):
        for step in (0.05, 0.03, 0.02):
            found = off = others = 0
            for k in range(series):
                rng = np.random.default_rng([seed, 1000 + k])
                at = int(rng.integers(100, 500))
                values = 1 + noise(kind, rng, 600)
                values[at:] *= 1 + step
                cps = find_change_points(values)
                near = [c for c in cps if abs(c.index - at) <= 1]
                found += bool(near)
                off += sum(1 < abs(c.index - at) <= 10 for c in cps)
                others += sum(abs(c.index - at) > 10 for c in cps)
            out["steps"][f"{kind} +{step:.0%}"] = {"series": series, "found_within_1": found,
                                                   "points_2_to_10_off": off, "points_further": others}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--series", type=int, default=50)
    ap.add_argument("--runs-per-series", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", metavar="DIR", help="write the history here and keep it (default: a temporary folder)")
    ap.add_argument("--sim-series", type=int, default=100,
                    help="series per case of the detector-alone simulation (0: skip it)")
    ap.add_argument("--out", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(args.keep or scratch)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "history.db"
        path.unlink(missing_ok=True)
        specs = build_series(args.series)
        t = time.perf_counter()
        shifts, start = write_history(path, specs, args.runs_per_series, args.seed)
        build_s = time.perf_counter() - t
        total = args.series * args.runs_per_series
        print(f"history: {total:,} runs over {args.series} series, {path.stat().st_size / 2**20:.1f} MiB, "
              f"written in {build_s:.1f} s")

        env = {k: v for k, v in os.environ.items() if not k.startswith("SIXDIM_")}
        cmd = [sys.executable, "-m", "sixdim", "report", "regressions", "--history", str(path), "--json"]
        walls = []
        for _ in range(3):
            t = time.perf_counter()
            result = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
            walls.append(time.perf_counter() - t)
            if result.returncode != 0:
                print(result.stderr, file=sys.stderr)
                return 1
        child_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        found = json.loads(result.stdout)

        from sixdim.report.regressions import analyse, read_history
        t = time.perf_counter()
        history = read_history(str(path))
        read_s = time.perf_counter() - t
        t = time.perf_counter()
        again = analyse(history)
        analyse_s = time.perf_counter() - t
        assert again == found, "the subprocess and the in-process analysis disagree"
        ok_runs = history.runs
        series_figures = sum(int((np.isfinite(np.array(s.rows, dtype=float)[:, 3:]).sum(axis=0) >= 2).sum())
                             for s in history.series.values())

        scored = score(shifts, specs, found, start, args.runs_per_series)
        wall = min(walls)
        figures = {
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
            "runs": total, "ok_runs": ok_runs, "series": len(history.series), "series_figures": series_figures,
            "subprocess_wall_seconds": [round(w, 3) for w in walls], "subprocess_best_seconds": round(wall, 3),
            "subprocess_max_rss_mib": round(child_rss, 1),
            "read_seconds": round(read_s, 3), "analysis_seconds": round(analyse_s, 3),
            "runs_per_second_end_to_end": round(total / wall), "runs_per_second_analysis": round(ok_runs / analyse_s),
            **scored,
        }
        print(f"machine: {figures['machine']}")
        print(f"end to end (python -m sixdim report regressions --json, 3 runs): "
              f"{', '.join(f'{w:.2f}' for w in walls)} s; best {wall:.2f} s = {total / wall:,.0f} runs/s; "
              f"child peak RSS {child_rss:.0f} MiB")
        print(f"in process: read {read_s:.2f} s ({ok_runs:,} ok runs, {len(history.series)} series), "
              f"analysis {analyse_s:.2f} s ({series_figures} series-figures, {ok_runs / analyse_s:,.0f} runs/s)")
        print(f"injected shifts found (seconds, within 2 runs): {scored['found']} of {scored['injected']}")
        for h in scored["shifts"]:
            ratio = f"{h['change_ratio']:.4f}" if h["change_ratio"] else "-"
            print(f"  series {h['series']:2d} run {h['run']:4d} {h['why']}: "
                  f"{'found' if h['found'] else 'MISSED'} ratio {ratio} {h['state'] or ''} "
                  f"versions {h['version_changed']} figures {', '.join(h['figures'])}")
        print(f"change points: {scored['change_points']} in all, {scored['unexpected']} matching no injected shift")
        for cp in scored["unexpected_list"]:
            print(f"  unexpected: {cp}")
        if args.sim_series:
            sim = figures["simulation"] = simulate(args.sim_series, args.seed)
            print("detector alone, change points in no-change series of 2,000 runs:")
            for kind, r in sim["false"].items():
                print(f"  {kind}: {r['change_points']} in {r['series']} series ({r['ms_per_series']} ms a series)")
            print("steps at a random run of 600: found within 1 run; change points 2-10 runs off; further off:")
            for case, r in sim["steps"].items():
                print(f"  {case}: {r['found_within_1']} of {r['series']}; {r['points_2_to_10_off']}; "
                      f"{r['points_further']}")
        if args.out:
            Path(args.out).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
