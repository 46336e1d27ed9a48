#!/usr/bin/env python3
"""Simulation benchmark of the regression detector (agent/verdicts/detector.py), fixed seed.

Usage (from the repository root):

    python -m tests.bench.regression_sim [--runs 1000000] [--trials 4000] [--workers 2]
        [--set window=40] [--no-sweep] [--out FILE]

Synthetic run histories of one ``seconds`` figure (larger is worse) at level 1.0 with 1% noise of
three kinds:

- ``gauss``: Gaussian, sd 1%;
- ``t3``: Student t with 3 degrees of freedom scaled to sd 1% (scale 1%/sqrt(3));
- ``spiky``: Gaussian sd 1% plus rare spikes: 1% of runs 20% slow.

It measures, with the real :class:`tests.verdict_reference.Detector` (the daemon's own tracker, run by run):

- detection of a 5% step: share of trials reporting ``regression`` within 3 runs after the step
  (goal >= 95%), and of a 3% step within 6 runs (goal >= 90%), with the delay distribution;
- false alarms: regression onsets (a series entering ``regression``) per 100,000 evaluated
  no-change series-runs (goal <= 1), over ``--runs`` runs per noise kind.

Then (unless ``--no-sweep``) a vectorised numpy model of the same two rules, without the episode
bookkeeping (which only matters after a first alarm; the model's first alarms are checked to
match the Detector's on a sample), sweeps each parameter around the defaults and prints the
trade-off curve that chose them.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, replace
from multiprocessing import Pool
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sixdim.verdicts.detector import REGRESSION, Settings, _u_tail  # noqa: E402
from tests.verdict_reference import Detector  # noqa: E402

SEED = 20261122
KINDS = ("gauss", "t3", "spiky")
PRE = 60
"""Runs before a step: the baseline is full (W + slow window) well before it."""
POST = 15
SERIES_LEN = 536
"""No-change series length; the first runs are insufficient_data and are not counted."""


# --- synthetic histories -------------------------------------------------------------------

def noise(rng: np.random.Generator, kind: str, shape: tuple[int, ...]) -> np.ndarray:
    """Relative noise of one kind (multiplies a level of 1.0)."""
    if kind == "gauss":
        return 1.0 + 0.01 * rng.standard_normal(shape)
    if kind == "t3":
        return 1.0 + 0.01 / math.sqrt(3.0) * rng.standard_t(3, shape)
    if kind == "t3_scale1":
        return 1.0 + 0.01 * rng.standard_t(3, shape)
    if kind == "spiky":
        return (1.0 + 0.01 * rng.standard_normal(shape)) * np.where(rng.random(shape) < 0.01, 1.2, 1.0)
    raise ValueError(kind)


def histories(seed: int, kind: str, n: int, length: int, step: float = 0.0, at: int = PRE) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = noise(rng, kind, (n, length))
    if step:
        x[:, at:] *= 1.0 + step
    return x


# --- the real detector ----------------------------------------------------------------------

def _false_alarm_chunk(job: tuple[int, str, int, dict]) -> tuple[int, int, int]:
    """(onsets, evaluated runs, runs in regression) over one chunk of no-change series."""
    seed, kind, n, settings = job
    detector = Detector(Settings(**settings))
    onsets = evaluated = in_regression = 0
    for row in histories(seed, kind, n, SERIES_LEN):
        previous = None
        for verdict in detector.trace(row.tolist(), "seconds"):
            if verdict.state != "insufficient_data":
                evaluated += 1
            if verdict.state == REGRESSION:
                in_regression += 1
                if previous != REGRESSION:
                    onsets += 1
            previous = verdict.state
    return onsets, evaluated, in_regression


def _delay_chunk(job: tuple[int, str, int, float, dict]) -> list[int]:
    """Delay (runs after the step, 1 = the first slow run) to the first regression; 0 = none."""
    seed, kind, n, step, settings = job
    detector = Detector(Settings(**settings))
    out = []
    for row in histories(seed, kind, n, PRE + POST, step):
        states = [v.state for v in detector.trace(row.tolist(), "seconds")]
        early = REGRESSION in states[:PRE]
        post = states[PRE:]
        out.append(-1 if early else (post.index(REGRESSION) + 1 if REGRESSION in post else 0))
    return out


def _chunks(total: int, size: int) -> list[int]:
    return [min(size, total - i) for i in range(0, total, size)]


def real_figures(kinds: tuple[str, ...], runs: int, trials: int, settings: Settings, workers: int) -> dict:
    """Detection and false-alarm figures of the real Detector."""
    cfg = asdict(settings)
    cfg["effects"] = dict(cfg["effects"])
    evaluated_per_series = SERIES_LEN - (settings.min_baseline + settings.slow_runs - 1)
    n_series = math.ceil(runs / evaluated_per_series)
    out: dict = {}
    with Pool(workers) as pool:
        for k, kind in enumerate(kinds):
            t0 = time.time()
            jobs = [(SEED + 1000 * k + i, kind, n, cfg) for i, n in enumerate(_chunks(n_series, 100))]
            fa = pool.map(_false_alarm_chunk, jobs)
            onsets, evaluated, in_reg = (sum(x[i] for x in fa) for i in range(3))
            res = {"false_alarm": {"onsets": onsets, "evaluated_runs": evaluated, "runs_in_regression": in_reg,
                                   "per_100k": onsets / evaluated * 1e5,
                                   "per_100k_upper95": _poisson_upper(onsets) / evaluated * 1e5}}
            for step, within in ((0.05, 3), (0.03, 6)):
                jobs = [(SEED + 7 + 1000 * k + int(step * 1000) * 100 + i, kind, n, step, cfg)
                        for i, n in enumerate(_chunks(trials, 250))]
                delays = np.array([d for chunk in pool.map(_delay_chunk, jobs) for d in chunk])
                res[f"step_{int(round(step * 100))}pct"] = _delay_summary(delays, within)
            res["seconds"] = round(time.time() - t0, 1)
            out[kind] = res
            print(f"  {kind}: done in {res['seconds']} s", flush=True)
    return out


def _poisson_upper(k: int) -> float:
    """One-sided 95% upper bound of a Poisson mean given k events (chi-square via Wilson-Hilferty)."""
    dof = 2 * (k + 1)
    z = 1.6448536
    return 0.5 * dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3


def _delay_summary(delays: np.ndarray, within: int) -> dict:
    found = delays[delays > 0]
    pct = {f"p{q}": (float(np.percentile(found, q, method="inverted_cdf")) if found.size else None)
           for q in (50, 90, 95, 99)}
    caught = delays > 0
    return {"trials": int(delays.size), "within": within,
            "detected_within": float(np.mean(caught & (delays <= within))),
            "detected_by_run": {str(r): float(np.mean(caught & (delays <= r))) for r in range(1, POST + 1)},
            "missed_in_window": float(np.mean(delays == 0)), "alarm_before_step": int(np.sum(delays < 0)),
            "delay_of_detected": pct}


# --- the vectorised model (for the sweep) ---------------------------------------------------

def model_alarms(x: np.ndarray, s: Settings) -> np.ndarray:
    """Whether either rule fires at each run, against the unfrozen baseline (no episodes).
    Column j is run j + W + slow_runs - 1 of the series."""
    w, m, k = s.window, s.slow_runs, s.fast_runs
    view = sliding_window_view(x, w + m, axis=1)
    base, win = view[..., :w], view[..., w:]
    center = np.median(base, axis=-1)
    noise_ = 1.4826 * np.median(np.abs(base - center[..., None]), axis=-1) / np.abs(center)
    dev = win / center[..., None] - 1.0
    fast_tau = np.maximum(s.fast_effect, s.fast_noise * noise_)
    slow_tau = np.maximum(s.min_effect, s.slow_noise * noise_)
    above = (win[..., :, None] > base[..., None, :]).sum(-1)
    fast_p = np.asarray(_u_tail(k, w))[above[..., -k:].sum(-1)]
    slow_p = np.asarray(_u_tail(m, w))[above.sum(-1)]
    fast = (dev[..., -k:].min(-1) >= fast_tau) & (fast_p <= s.fast_alpha)
    kept = np.sort(dev, axis=-1)[..., :s.slow_kept].mean(-1)
    slow = (kept >= slow_tau) & (dev[..., -1] >= slow_tau) & (slow_p <= s.slow_alpha)
    return fast | slow


def model_figures(kind: str, s: Settings, runs: int, trials: int, seed: int) -> dict:
    lead = s.window + s.slow_runs - 1
    onsets = evaluated = 0
    n_series = math.ceil(runs / (SERIES_LEN - lead))
    for i, n in enumerate(_chunks(n_series, 500)):
        alarms = model_alarms(histories(seed + i, kind, n, SERIES_LEN), s)
        onsets += int(alarms[:, 0].sum() + (alarms[:, 1:] & ~alarms[:, :-1]).sum())
        evaluated += alarms.size
    out = {"fa_per_100k": onsets / evaluated * 1e5, "fa_onsets": onsets, "fa_runs": evaluated}
    for step, within in ((0.05, 3), (0.03, 6)):
        alarms = model_alarms(histories(seed + 99, kind, trials, PRE + POST, step), s)[:, PRE - lead:]
        first = np.where(alarms.any(1), alarms.argmax(1) + 1, 0)
        out[f"step_{int(round(step * 100))}pct"] = float(np.mean((first > 0) & (first <= within)))
    return out


def cross_check(kind: str, s: Settings, n: int = 200) -> int:
    """Series where the model's first alarm differs from the Detector's first regression."""
    x = histories(SEED + 555, kind, n, PRE + POST, 0.03)
    lead = s.window + s.slow_runs - 1
    alarms = model_alarms(x, s)
    detector = Detector(s)
    mismatches = 0
    for row, a in zip(x, alarms):
        states = [v.state for v in detector.trace(row.tolist(), "seconds")]
        real = states.index(REGRESSION) if REGRESSION in states else -1
        model = int(a.argmax()) + lead if a.any() else -1
        mismatches += real != model
    return mismatches


SWEEP: dict[str, tuple] = {
    "window": (20, 25, 30, 40),
    "fast_runs": (2, 3, 4),
    "fast_effect": (0.02, 0.0225, 0.025, 0.0275, 0.03),
    "min_effect": (0.015, 0.016, 0.017, 0.018, 0.02, 0.022),
    "slow_kept": (3, 4, 5, 6),
    "slow_alpha": (0.0005, 0.002, 0.01, 0.05),
    "fast_alpha": (0.002, 0.01, 0.05),
}
"""Each parameter varied alone around the defaults."""


def sweep(kinds: tuple[str, ...], runs: int, trials: int, base: Settings) -> list[dict]:
    rows = []
    for name, values in SWEEP.items():
        for value in values:
            s = replace(base, **{name: value})
            row = {"param": name, "value": value, "default": getattr(base, name) == value}
            for k, kind in enumerate(kinds):
                row[kind] = model_figures(kind, s, runs, trials, SEED + 31 * k)
            rows.append(row)
            print(_sweep_line(row, kinds), flush=True)
    return rows


def _sweep_line(row: dict, kinds: tuple[str, ...]) -> str:
    cells = " | ".join(f"{row[k]['step_5pct']:.3f} {row[k]['step_3pct']:.3f} {row[k]['fa_per_100k']:5.2f}"
                       for k in kinds)
    mark = "*" if row["default"] else " "
    return f"{mark}{row['param']:>12} {row['value']!s:>7} | {cells}"


# --- report --------------------------------------------------------------------------------

def print_table(real: dict) -> None:
    print("\nReal Detector (defaults):")
    print(f"{'noise':>8} | {'5% in 3':>8} | {'3% in 6':>8} | {'delay 5% p50/p90/p99':>20} | "
          f"{'delay 3% p50/p90/p99':>20} | {'FA onsets / runs':>20} | {'FA /100k (95% up)':>18}")
    for kind, r in real.items():
        d5, d3, fa = r["step_5pct"], r["step_3pct"], r["false_alarm"]
        q5, q3 = d5["delay_of_detected"], d3["delay_of_detected"]
        print(f"{kind:>8} | {d5['detected_within']:8.3f} | {d3['detected_within']:8.3f} | "
              f"{q5['p50']:>6} {q5['p90']:>6} {q5['p99']:>6} | {q3['p50']:>6} {q3['p90']:>6} {q3['p99']:>6} | "
              f"{fa['onsets']:>7} / {fa['evaluated_runs']:<10} | {fa['per_100k']:6.2f} ({fa['per_100k_upper95']:.2f})")
    print("\nFleet: at ~50 series per GPU and 96 runs a day (4,800 series-runs per GPU-day), false regression "
          "onsets per 1,000 GPU-days (before grouping; grouping merges only coincident ones):")
    for kind, r in real.items():
        print(f"  {kind}: {r['false_alarm']['per_100k'] * 4800 * 1000 / 1e5:.1f} "
              f"(95% upper {r['false_alarm']['per_100k_upper95'] * 4800 * 1000 / 1e5:.1f})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1_000_000, help="no-change series-runs per noise kind (real Detector)")
    ap.add_argument("--trials", type=int, default=4000, help="step trials per noise kind and step size")
    ap.add_argument("--sweep-runs", type=int, default=500_000, help="no-change runs per kind and sweep point")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--kinds", default=",".join(KINDS), help="noise kinds (gauss, t3, spiky, t3_scale1)")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="override one Settings default (e.g. window=40); the sweep still varies around it")
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--out", type=Path, help="write every figure as JSON")
    args = ap.parse_args(argv)
    kinds = tuple(args.kinds.split(","))
    settings = Settings(**{k: type(getattr(Settings(), k))(v) for k, v in (o.split("=", 1) for o in args.set)})
    started = time.time()
    report: dict = {"seed": SEED, "settings": {**asdict(settings), "effects": dict(settings.effects)}, "kinds": kinds}
    print(f"Settings: {report['settings']}")
    print("Cross-check, model first alarm vs Detector first regression (200 series each, 3% step): "
          + ", ".join(f"{k} {cross_check(k, settings)} mismatches" for k in kinds), flush=True)
    print(f"Real Detector: {args.runs} no-change runs and {args.trials} trials per step per kind, "
          f"{args.workers} workers", flush=True)
    report["real"] = real_figures(kinds, args.runs, args.trials, settings, args.workers)
    print_table(report["real"])
    if not args.no_sweep:
        print(f"\nSweep (vectorised model; each cell: 5% within 3, 3% within 6, false onsets per 100k; "
              f"{args.sweep_runs} runs, {args.trials} trials; * = default):")
        print(f"{'':>22} | " + " | ".join(f"{k:^19}" for k in kinds))
        report["sweep"] = sweep(kinds, args.sweep_runs, args.trials, settings)
    report["seconds"] = round(time.time() - started, 1)
    print(f"\nTotal {report['seconds']} s")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
