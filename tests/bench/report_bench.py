#!/usr/bin/env python3
"""How long ``sixdim report regressions`` takes over a large history, what it finds there, and what
its detector finds on every noise model of tests/bench/noise_models.py.

Usage (from the repository root; 2.5 minutes on the 2-core development machine, one worker):

    python -m tests.bench.report_bench [--series 50] [--runs-per-series 2000] [--seed 1] [--keep DIR [--reuse]]
        [--repeat 5] [--no-history] [--false-series 1000] [--sim-series 500] [--model NAME ...] [--out FILE]

The issue 42 figures (the speed at 100,000 runs, the peak memory at 300,000), with the histories kept
and reused between runs (writing them takes 20 s and 80 s):

    python -m tests.bench.report_bench --keep /tmp/rb100k [--reuse] --sim-series 0
    python -m tests.bench.report_bench --keep /tmp/rb300k [--reuse] --runs-per-series 6000 --sim-series 0 --repeat 3

It writes a history of ``--series`` x ``--runs-per-series`` synthetic runs (default 100,000) in a
temporary folder, in the history's own row format, with a fixed seed:

- two hosts of 8 GPUs; 40 GEMM-like kernel series (GPU x precision x shape: time, FLOP/s, power,
  energy, FLOP/J, memory, fraction of peak and unwatched extras) and 10 model-like series
  (samples/s, time, latency p50/p99, power, samples/J, memory), one run every 15 minutes each;
- noise: time by the ``spiky`` model of noise_models (1% Gaussian, 3% of runs 10-40% slow); power
  1% Gaussian; memory constant;
- 2% of runs ``failed`` or ``skipped`` (not analysed, as in a real history);
- injected shifts: a driver upgrade 550.54 -> 560.28 on host ``node-a`` at 60% of the history,
  which slows its bf16 kernel series by 7% (the other series of node-a change driver with no
  effect); and four steps at no version change: +5% time on two series, -4% time (an
  improvement) on one, +3% on one;
- every run's conditions (``RunRecord.conditions``: the 37 a GPU run records, about 1.1 kB of
  JSON, a little noise on the clocks, temperature and host load), and the settings among them in
  its environment, as the executor writes them (``setting_versions``).  Two of the steps have a
  recorded cause, from the step's run on, on every series of their GPU: the first +5% a power
  limit lowered 700 -> 600 W (the GPU at its power cap 80% of the span), the second +5% thermal
  slowdown (60% of the span, the GPU at 86 degrees C); the +3% step has none.

Then it times ``python -m sixdim report regressions --json`` end to end as a subprocess (interpreter
start, read, analysis, JSON out) ``--repeat`` times, with the load average before each (the
figure is the median: the machine is shared), and the read and the analysis alone in this
process, and counts the change points found against the injected ones: a shift counts as found
when the ``seconds`` figure of its series has a change point within 2 runs of it; any other
change point of any figure is unexpected.  Each found shift's top cause (``causes`` of the JSON) is
compared with the injected one: ``version`` for the driver upgrade, ``power_limit``, ``thermal``,
``none`` for the +3% step, no cause for the improvement (not diagnosed).

Last (unless ``--sim-series 0``), the detector alone (:func:`sixdim.verdicts.changepoints.find_changes`)
on every noise model (``--model`` to choose), each case from its own fixed seeds:

- ``false``: ``--false-series`` no-change series of 2,000 runs: change points and drifts, with
  the 95% upper bound of change points per series;
- ``step_5%``, ``step_3%``: a step at a random run from 100 to 399, 40 runs after it: found (a
  point within 10 runs), placed at its run +-1, other points;
- ``short_tail_5%``: a 5% step at run 200 with 6-10 runs after it: listed, and every point of
  those listed at its run +-1;
- ``upgrade_after_spikes``: an upgrade at run 200 of 300 that costs 5%, runs 198 and 199 25%
  slow: the shift put down to the upgrade (a known point at 200);
- ``harmless_upgrade``: an upgrade at run 200 of 400 that does nothing: listed at it;
- ``drift_harmless_upgrade``: the same with a drift of +0.05% a run all along: put down to the
  upgrade, any change point at all, listed as a drift;
- ``step_on_drift_5%``: a 5% step at run 200 of 400 on that drift, no upgrade: found, placed +-1.

``--sim-series`` series per case and model (default 500).  It prints the table of
docs/REGRESSIONS.md ("Looking back", "Measured behaviour").
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import sqlite3
import statistics
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
from sixdim.store.history import History  # noqa: E402
from sixdim.store.rows import row_of as _row  # noqa: E402
from tests.bench import noise_models as nm  # noqa: E402

INTERVAL = 900.0
"""Seconds between two runs of one series."""
OLD, NEW = "550.54", "560.28"
HISTORY_NOISE = "spiky"
"""The time figure's noise in the fleet history (tests/bench/noise_models.py): 1% Gaussian, 3% of runs 10-40% slow."""


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
    cause: str = "none"
    """The top cause ``report regressions`` should name ("" for an improvement: none is named)."""
    conditions: tuple[tuple[str, float], ...] = ()
    """The conditions of the series' GPU from the shift's run on."""


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
    shifts = [Shift(i, upgrade, 1 / 0.93, "driver 550.54 -> 560.28, bf16 kernels 7% slower", "version")
              for i, s in enumerate(specs) if s.host == "node-a" and s.workload == "gemm" and s.precision == "bf16"]
    others = [i for i, s in enumerate(specs) if s.host == "node-b"]
    power = (("power_limit_watts", 600.0), ("sw_power_cap_ratio", 0.8), ("sm_clock_hertz", 1.755e9))
    heat = (("hw_thermal_slowdown_ratio", 0.6), ("temperature_celsius", 86.0), ("sm_clock_hertz", 1.8e9))
    for n, where, factor, why, cause, conditions in (
            (0, 0.25, 1.05, "+5% time, power limit 700 -> 600 W", "power_limit", power),
            (3, 0.8, 1.05, "+5% time, thermal slowdown", "thermal", heat),
            (5, 0.4, 0.96, "-4% time (improvement)", "", ()), (7, 0.5, 1.03, "+3% time", "none", ())):
        if n < len(others):  # a small history has fewer series to shift
            shifts.append(Shift(others[n], int(runs * where), factor, why, cause, conditions))
    return upgrade, shifts


GPU_CONDITIONS: dict[str, Any] = {
    "power_limit_watts": 700.0, "power_limit_default_watts": 700.0, "applications_sm_clock_hertz": 1.98e9,
    "applications_memory_clock_hertz": 2.619e9, "max_sm_clock_hertz": 1.98e9, "max_memory_clock_hertz": 2.619e9,
    "ecc_enabled": 1, "mig_enabled": 0, "persistence_mode": 1, "compute_mode": 0, "pcie_generation": 5,
    "pcie_width": 16, "pcie_max_generation": 5, "pcie_max_width": 16, "ecc_corrected_volatile": 0,
    "ecc_uncorrected_volatile": 0, "remapped_rows_pending": 0, "remapped_rows_failed": 0, "remapped_rows": 0,
    "nvlink_active_links": 18, "gpu_other_processes": 0, "sm_clock_hertz": 1.98e9, "temperature_celsius": 62.0,
    "sw_power_cap_ratio": 0.05, "hw_slowdown_ratio": 0.0, "hw_thermal_slowdown_ratio": 0.0,
    "sw_thermal_slowdown_ratio": 0.0, "hw_power_brake_slowdown_ratio": 0.0, "sync_boost_ratio": 0.0,
    "applications_clocks_setting_ratio": 0.0, "cpu_governor": "performance", "cpu_frequency_hertz": 3.1e9,
    "load_per_cpu": 0.15, "memory_pressure_ratio": 0.0, "usable_cpus": 112, "other_cpu_ratio": 0.03,
    "unavailable": {"cpu_quota_cpus": "no cgroup limit", "retired_pages_pending": "not supported by this GPU"}}
"""A GPU run's conditions as an H100 host records them (docs/CAUSES.md), before the noise."""


def run_conditions(rnd: random.Random, changed: dict[str, float]) -> dict[str, Any]:
    """One run's conditions: :data:`GPU_CONDITIONS` with a little noise, then ``changed``."""
    out = dict(GPU_CONDITIONS)
    out["sm_clock_hertz"] = round(1.98e9 * (1 - abs(rnd.gauss(0, 0.004))), -6)
    out["temperature_celsius"] = round(62.0 + rnd.gauss(0, 1.5), 1)
    out["load_per_cpu"] = round(0.15 + abs(rnd.gauss(0, 0.05)), 3)
    out["other_cpu_ratio"] = round(0.03 + abs(rnd.gauss(0, 0.01)), 4)
    out.update(changed)
    return out


def write_history(path: Path, specs: list[SeriesSpec], runs: int, seed: int) -> tuple[list[Shift], float]:
    """The history at ``path``; returns the shifts and the time of the first run."""
    from sixdim.core.conditions import setting_versions

    History(path).close()  # the schema, as the agent creates it
    rnd = random.Random(seed)
    conditions_rnd = random.Random(seed + 1)  # its own: the figures and statuses do not depend on it
    upgrade, shifts = injected(specs, runs)
    changes: dict[tuple[str, int], list[tuple[int, tuple[tuple[str, float], ...]]]] = {}
    for sh in shifts:
        if sh.conditions:  # the whole GPU's, from the shift's run on
            changes.setdefault((specs[sh.series].host, specs[sh.series].gpu), []).append((sh.run, sh.conditions))
    start = time.time() - runs * INTERVAL
    factor_at = {(sh.series, sh.run): sh.factor for sh in shifts}
    level = [1.0] * len(specs)
    noise = nm.noise(np.random.default_rng(seed), HISTORY_NOISE, (len(specs), runs))
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
                seconds = spec.base_seconds * level[i] * noise[i, r]
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
                changed = {k: v for run, items in changes.get((spec.host, spec.gpu), ()) if r >= run for k, v in items}
                conditions = run_conditions(conditions_rnd, changed)
                record = RunRecord(
                    suite="fleet", workload=spec.workload, precision=spec.precision, params={}, shape=spec.shape,
                    mode="training", kernel_pass="forward", hostname=spec.host, device_type="cuda",
                    device=f"cuda:{spec.gpu}", gpu=str(spec.gpu), uuid=f"GPU-{spec.host}-{spec.gpu}",
                    model_name="NVIDIA H100 80GB HBM3", pci_bus_id=f"00000000:{spec.gpu + 0x17:02X}:00.0",
                    status=status, reason="" if status == "ok" else "synthetic", started_at=t0, ended_at=t0 + 30,
                    figures=figures, details={"round_seconds": [seconds] * 5},
                    environment={"driver": driver, "cuda_runtime": "12.4", "cudnn": "9.1.0", "nccl": "2.21.5",
                                 "torch": "2.13.0", "python": "3.11.7", **setting_versions(conditions)},
                    conditions=conditions, uid=uuid.uuid4().hex)
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
        causes = secs[0].get("causes", []) if secs else []
        hits.append({"series": sh.series, "run": sh.run, "why": sh.why, "found": bool(secs),
                     "change_ratio": secs[0]["change_ratio"] if secs else None,
                     "state": secs[0]["state"] if secs else None,
                     "version_changed": secs[0]["version_changed"] if secs else None,
                     "figures": sorted(found[k]["figure"] for k in near),
                     "cause_expected": sh.cause, "cause": causes[0]["cause"] if causes else "",
                     "evidence": causes[0]["evidence"] if causes else ""})
    unexpected = [cp for k, cp in enumerate(found) if k not in matched]
    return {"injected": len(shifts), "found": sum(h["found"] for h in hits), "shifts": hits,
            "causes_right": sum(h["found"] and h["cause"] == h["cause_expected"] for h in hits),
            "change_points": len(found), "unexpected": len(unexpected),
            "unexpected_list": [{k: cp[k] for k in ("hostname", "gpu", "workload", "precision", "shape", "figure",
                                                    "change_ratio", "p_value", "runs_before", "runs_after")}
                                for cp in unexpected]}


SIM_LENGTH = 2000
"""Runs of a no-change series in the simulation (as a busy series holds in a few weeks)."""
TAIL = 40
"""Runs after a step in the detection cases: the issue's "found with 40 runs after them"."""
SHORT_TAILS = (6, 7, 8, 9, 10)
DRIFT = 0.0005
"""The slow drift of the drift cases: +0.05% a run, compounded (noise_models.drift)."""


def _changes(values: np.ndarray, breaks: tuple[int, ...] = ()) -> tuple[list[Any], list[Any]]:
    """The change points and drifts of one series (the drifts only where the detector lists them)."""
    from sixdim.verdicts import changepoints as cpm

    find = getattr(cpm, "find_changes", None)
    if find is not None:
        found = find(values, breaks=breaks)
        return list(found.points), list(found.drifts)
    return cpm.find_change_points(values, breaks=breaks), []


def upper95(events: int, trials: int) -> float:
    """One-sided 95% upper bound of a Poisson rate per trial (exact: the chi-squared form)."""
    from scipy.stats import chi2

    return float(chi2.ppf(0.95, 2 * events + 2) / 2 / trials)


def share_bound(hits: int, trials: int) -> tuple[float, float]:
    """A share and its 95% Clopper-Pearson interval."""
    from scipy.stats import beta

    lo = float(beta.ppf(0.025, hits, trials - hits + 1)) if hits else 0.0
    hi = float(beta.ppf(0.975, hits + 1, trials - hits)) if hits < trials else 1.0
    return lo, hi


def _seed(seed: int, model: int, case: int, k: int) -> int:
    return ((seed * 16 + model) * 16 + case) * 1_000_003 + k


def simulate_model(model: str, index: int, false_series: int, series: int, seed: int) -> dict[str, Any]:
    """Every case of one noise model (tests/bench/noise_models.py), each from its own fixed seeds."""
    from tests.bench import noise_models as nm

    out: dict[str, Any] = {"model": model}
    started = time.perf_counter()
    points = drifts = hit = 0
    for values in nm.series(_seed(seed, index, 0, 0), model, false_series, SIM_LENGTH):
        cps, dfs = _changes(values)
        points += len(cps)
        drifts += len(dfs)
        hit += bool(cps)
    out["false"] = {"series": false_series, "runs": SIM_LENGTH, "change_points": points, "drifts": drifts,
                    "series_with_one": hit, "per_series": points / false_series,
                    "per_series_upper95": upper95(points, false_series),
                    "ms_per_series": round((time.perf_counter() - started) / false_series * 1e3, 2)}

    rng = np.random.default_rng(_seed(seed, index, 1, 0))
    for case, step in ((2, 0.05), (3, 0.03)):
        found = placed = extra = 0
        for k in range(series):
            at = int(rng.integers(100, 400))
            values = nm.series(_seed(seed, index, case, k), model, 1, at + TAIL, step, at)[0]
            cps, _ = _changes(values)
            near = [c.index - at for c in cps if abs(c.index - at) <= 10]
            found += bool(near)
            placed += any(abs(d) <= 1 for d in near)
            extra += sum(abs(c.index - at) > 10 for c in cps)
        out[f"step_{step:.0%}"] = {"series": series, "found": found, "placed_within_1": placed,
                                   "other_points": extra}

    listed = placed = 0
    for k in range(series):
        tail = SHORT_TAILS[k % len(SHORT_TAILS)]
        values = nm.series(_seed(seed, index, 4, k), model, 1, 200 + tail, 0.05, 200)[0]
        cps, _ = _changes(values)
        listed += bool(cps)
        placed += bool(cps) and all(abs(c.index - 200) <= 1 for c in cps)
    out["short_tail_5%"] = {"series": series, "tails": list(SHORT_TAILS), "listed": listed,
                            "all_within_1": placed}

    attributed = unattributed = 0
    for k in range(series):  # an upgrade that costs 5%, two spikes (+25%) in the two runs before it
        values = nm.series(_seed(seed, index, 5, k), model, 1, 300, 0.05, 200)[0]
        values[198:200] *= 1.25
        cps, _ = _changes(values, (200,))
        attributed += any(c.known and c.index == 200 for c in cps)
        unattributed += any(not c.known and abs(c.index - 200) <= 5 for c in cps)
    out["upgrade_after_spikes"] = {"series": series, "attributed": attributed, "listed_without_version": unattributed}

    at_break = anywhere = 0
    for k in range(series):  # an upgrade that does nothing
        values = nm.series(_seed(seed, index, 6, k), model, 1, 400)[0]
        cps, _ = _changes(values, (200,))
        at_break += any(c.known for c in cps)
        anywhere += bool(cps)
    out["harmless_upgrade"] = {"series": series, "listed_at_upgrade": at_break, "any_point": anywhere}

    at_break = anywhere = as_drift = 0
    for k in range(series):  # a slow drift, and an upgrade in the middle that does nothing
        values = nm.drift(nm.series(_seed(seed, index, 7, k), model, 1, 400)[0], DRIFT)
        cps, dfs = _changes(values, (200,))
        at_break += any(c.known for c in cps)
        anywhere += bool(cps)
        as_drift += bool(dfs)
    out["drift_harmless_upgrade"] = {"series": series, "blamed_on_upgrade": at_break, "any_point": anywhere,
                                     "listed_as_drift": as_drift}

    found = placed = 0
    for k in range(series):  # a 5% step on top of the drift, no version change
        values = nm.drift(nm.series(_seed(seed, index, 8, k), model, 1, 400, 0.05, 200)[0], DRIFT)
        cps, _ = _changes(values)
        found += any(abs(c.index - 200) <= 10 for c in cps)
        placed += any(abs(c.index - 200) <= 1 for c in cps)
    out["step_on_drift_5%"] = {"series": series, "found": found, "placed_within_1": placed}
    out["seconds"] = round(time.perf_counter() - started, 1)
    return out


def simulate(false_series: int, series: int, seed: int, models: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """The detector alone (:func:`sixdim.verdicts.changepoints.find_change_points`) on every noise model."""
    from tests.bench import noise_models as nm

    chosen = models or nm.MODELS
    return [simulate_model(model, nm.MODELS.index(model), false_series, series, seed) for model in chosen]


def _pct(hits: int, n: int) -> str:
    """A share in percent with its 95% Clopper-Pearson interval: ``97.2 (95.4–98.5)``."""
    if not n:
        return "-"
    lo, hi = share_bound(hits, n)
    return f"{100 * hits / n:.1f} ({100 * lo:.1f}–{100 * hi:.1f})"


def markdown(sim: list[dict[str, Any]]) -> str:
    """The table of docs/REGRESSIONS.md ("Measured behaviour" of "Looking back")."""
    head = ("| noise | no change: points; drifts in series (points/series, 95% ≤) | 5% found; ±1 | 3% found; ±1 "
            "| short tail: listed; ±1 "
            "| upgrade after spikes: named | harmless upgrade listed | drift: blamed on upgrade; as steps; as drift "
            "| 5% step on drift: found; ±1 |")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in sim:
        f = r["false"]
        s5, s3, st = r["step_5%"], r["step_3%"], r["short_tail_5%"]
        up, hu = r["upgrade_after_spikes"], r["harmless_upgrade"]
        dr, sd = r["drift_harmless_upgrade"], r["step_on_drift_5%"]
        rows.append(
            f"| {r['model']} | {f['change_points']}; {f['drifts']} in {f['series']:,} "
            f"(≤ {f['per_series_upper95']:.4f}) "
            f"| {_pct(s5['found'], s5['series'])}; {_pct(s5['placed_within_1'], s5['series'])} "
            f"| {_pct(s3['found'], s3['series'])}; {_pct(s3['placed_within_1'], s3['series'])} "
            f"| {_pct(st['listed'], st['series'])}; {_pct(st['all_within_1'], st['listed'])} "
            f"| {_pct(up['attributed'], up['series'])} "
            f"| {_pct(hu['listed_at_upgrade'], hu['series'])} "
            f"| {_pct(dr['blamed_on_upgrade'], dr['series'])}; {_pct(dr['any_point'], dr['series'])}; "
            f"{_pct(dr['listed_as_drift'], dr['series'])} "
            f"| {_pct(sd['found'], sd['series'])}; {_pct(sd['placed_within_1'], sd['series'])} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--series", type=int, default=50)
    ap.add_argument("--runs-per-series", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", metavar="DIR", help="write the history here and keep it (default: a temporary folder)")
    ap.add_argument("--reuse", action="store_true",
                    help="with --keep: time the history already there (written by an earlier --keep run with the "
                         "same --series, --runs-per-series and --seed) instead of writing it again")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs of the command (the median is the figure)")
    ap.add_argument("--no-history", action="store_true", help="skip the history and its timing: the simulation only")
    ap.add_argument("--false-series", type=int, default=1000,
                    help="no-change series of 2,000 runs per noise model in the simulation")
    ap.add_argument("--sim-series", type=int, default=500,
                    help="series per case and noise model of the detector-alone simulation (0: skip it)")
    ap.add_argument("--model", action="append", help="only this noise model (repeatable; default: all)")
    ap.add_argument("--out", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args(argv)

    figures: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "load_before": os.getloadavg()}
    if not args.no_history:
        with tempfile.TemporaryDirectory() as scratch:
            figures.update(history_figures(Path(args.keep or scratch), args))
    if args.sim_series:
        started = time.perf_counter()
        sim = figures["simulation"] = simulate(args.false_series, args.sim_series, args.seed,
                                               tuple(args.model) if args.model else None)
        figures["simulation_seconds"] = round(time.perf_counter() - started, 1)
        print(f"detector alone: {args.false_series} no-change series of {SIM_LENGTH} runs and {args.sim_series} "
              f"series per case, per noise model ({figures['simulation_seconds']} s):")
        print(markdown(sim))
    figures["load_after"] = os.getloadavg()
    print(f"machine: {figures['machine']}; load average before {figures['load_before'][0]:.2f}, "
          f"after {figures['load_after'][0]:.2f}")
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=2))
    return 0


def history_figures(folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Write the fleet history, time the command over it ``args.repeat`` times, score what it found."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "history.db"
    specs = build_series(args.series)
    total = args.series * args.runs_per_series
    if args.reuse and path.exists():  # the same --series, --runs-per-series and --seed as when it was written
        with sqlite3.connect(path) as db:
            written, start = db.execute("SELECT COUNT(*), MIN(started_at) FROM runs").fetchone()
        if written != total:
            raise SystemExit(f"{path} holds {written:,} runs, not {total:,}: give the options it was written with")
        shifts = injected(specs, args.runs_per_series)[1]
        print(f"history: {total:,} runs over {args.series} series, {path.stat().st_size / 2**20:.1f} MiB, reused")
    else:
        path.unlink(missing_ok=True)
        t = time.perf_counter()
        shifts, start = write_history(path, specs, args.runs_per_series, args.seed)
        build_s = time.perf_counter() - t
        print(f"history: {total:,} runs over {args.series} series, {path.stat().st_size / 2**20:.1f} MiB, "
              f"written in {build_s:.1f} s")

    env = {k: v for k, v in os.environ.items() if not k.startswith("SIXDIM_")}
    cmd = [sys.executable, "-m", "sixdim", "report", "regressions", "--history", str(path), "--json"]
    walls, loads = [], []
    result = None
    for _ in range(max(1, args.repeat)):
        loads.append(os.getloadavg()[0])
        t = time.perf_counter()
        result = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
        walls.append(time.perf_counter() - t)
        if result.returncode != 0:
            print(result.stderr, file=sys.stderr)
            raise SystemExit(1)
    assert result is not None
    child_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    found = json.loads(result.stdout)

    from sixdim.report.regressions import add_causes, analyse, read_history
    t = time.perf_counter()
    history = read_history(str(path))
    read_s = time.perf_counter() - t
    t = time.perf_counter()
    again = analyse(history, drifts=True)
    analyse_s = time.perf_counter() - t
    t = time.perf_counter()
    add_causes(again, history.series, str(path))
    causes_s = time.perf_counter() - t
    assert again == found, "the subprocess and the in-process analysis disagree"
    ok_runs = history.runs
    width = 3 + len(history.figures)
    series_figures = sum(int((np.isfinite(s.table(width)[:, 3:]).sum(axis=0) >= 2).sum())
                         for s in history.series.values())

    scored = score(shifts, specs, found, start, args.runs_per_series)
    wall = statistics.median(walls)
    out = {
        "runs": total, "ok_runs": ok_runs, "series": len(history.series), "series_figures": series_figures,
        "subprocess_wall_seconds": [round(w, 3) for w in walls], "subprocess_median_seconds": round(wall, 3),
        "load_average_1min_at_each_run": [round(x, 2) for x in loads],
        "subprocess_max_rss_mib": round(child_rss, 1),
        "read_seconds": round(read_s, 3), "analysis_seconds": round(analyse_s, 3), "causes_seconds": round(causes_s, 3),
        "runs_per_second_end_to_end": round(total / wall), "runs_per_second_analysis": round(ok_runs / analyse_s),
        **scored,
    }
    print(f"end to end (python -m sixdim report regressions --json, {len(walls)} runs): "
          f"{', '.join(f'{w:.2f}' for w in walls)} s; median {wall:.2f} s = {total / wall:,.0f} runs/s; "
          f"load average {', '.join(f'{x:.2f}' for x in loads)}; child peak RSS {child_rss:.0f} MiB")
    print(f"in process: read {read_s:.2f} s ({ok_runs:,} ok runs, {len(history.series)} series), "
          f"analysis {analyse_s:.2f} s ({series_figures} series-figures, {ok_runs / analyse_s:,.0f} runs/s), "
          f"causes {causes_s:.3f} s ({len(found)} change points)")
    print(f"injected shifts found (seconds, within 2 runs): {scored['found']} of {scored['injected']}")
    for h in scored["shifts"]:
        ratio = f"{h['change_ratio']:.4f}" if h["change_ratio"] else "-"
        print(f"  series {h['series']:2d} run {h['run']:4d} {h['why']}: "
              f"{'found' if h['found'] else 'MISSED'} ratio {ratio} {h['state'] or ''} "
              f"versions {h['version_changed']} figures {', '.join(h['figures'])}; "
              f"cause {h['cause'] or '-'} (injected {h['cause_expected'] or '-'}){': ' if h['evidence'] else ''}"
              f"{h['evidence']}")
    print(f"top cause as injected: {scored['causes_right']} of {scored['found']} found shifts")
    print(f"change points: {scored['change_points']} in all, {scored['unexpected']} matching no injected shift")
    for cp in scored["unexpected_list"]:
        print(f"  unexpected: {cp}")
    return out


if __name__ == "__main__":
    sys.exit(main())
