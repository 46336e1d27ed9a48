#!/usr/bin/env python3
"""Simulation benchmark of the live regression detector (agent/verdicts/detector.py), fixed seed.

Usage (from the repository root):

    python -m tests.bench.regression_sim [--runs 1000000] [--trials 2000] [--workers 2]
        [--models gauss_1,spiky] [--runs-for t3=3000000] [--set noise_window=100] [--out FILE]
    python -m tests.bench.regression_sim --bound     # the t-test bound for early steps (t_test_bound)

``SIXDIM_SIM_DETECTOR=/path/to/detector.py`` runs the same harness on another copy of the detector
module (a previous release's, copied out of git), for the before/after tables of docs/REGRESSIONS.md.

Synthetic run histories of one ``seconds`` figure (larger is worse) at level 1.0, for every noise
model of tests/bench/noise_models.py (Gaussian at CV 0.25-5%, Student t3, spiky, bursts), fed run
by run to the real tracker (tests.verdict_reference.Detector, the daemon's own code).  It measures:

- false alarms: regression *onsets* (a series entering ``regression``) per 100,000 evaluated
  no-change series-runs (goal <= 1), with a one-sided 95% upper bound;
- detection: the share of trials reporting ``regression`` within 3 runs of a 5% step (goal >= 95%
  at CV <= 1%, t3 and spiky) and within 6 runs of a 3% step (goal >= 90%), with the delays, for a
  step after 120 steady runs, and for a step placed uniformly at runs 20-200 (a new host's or a new
  segment's short history), reported per band of where the step came (20-59, 60-99, 100-200);
- drift: series that get 0.05% slower each run from run 150 on: regression onsets during the
  drift, how soon the drift verdict names it, and whether a version change that did nothing, in
  the middle of the drift, is called a regression, at its first look or its second, judged as the
  agent judges it (sixdim.verdicts.live: the runs either side with their times, and the drift the
  tracker had named before the change);
- beside it, a **reference detector** that knows the true level and standard deviation: the mean
  of the last k runs (k = 3 for the 5% target, 6 for the 3% one) against a threshold set so that it
  too raises 1 false onset per 100,000 runs on Gaussian noise of that standard deviation, and again
  at the false-alarm rate the real detector measured (its 95% upper bound where it raised none).
  No detector that must estimate the level and the noise from the series can do better on
  Gaussian noise; at high noise the goal is to stay within 10 points of it at the same rate.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import math
import os
import sys
import time
from dataclasses import asdict
from multiprocessing import Pool
from pathlib import Path

import numpy as np
from scipy import optimize, stats

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _load_detector(path: str) -> None:
    """Put another copy of the detector module in place of sixdim.verdicts.detector (before anything
    imports it): the previous release's, for the before/after tables."""
    spec = importlib.util.spec_from_file_location("sixdim.verdicts.detector", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["sixdim.verdicts.detector"] = module
    spec.loader.exec_module(module)


if os.environ.get("SIXDIM_SIM_DETECTOR"):
    _load_detector(os.environ["SIXDIM_SIM_DETECTOR"])

from sixdim.verdicts.detector import (  # noqa: E402
    INSUFFICIENT_DATA,
    REGRESSION,
    SeriesTracker,
    Settings,
    version_verdict,
)
from tests.bench import noise_models  # noqa: E402
from tests.verdict_reference import Detector  # noqa: E402

SEED = 20261125
PRE = 120
"""Runs before a step: a series that has run for a day or so (noise window and baseline full)."""
POST = 15
SERIES_LEN = 600
"""No-change series length; runs still ``insufficient_data`` are not counted."""
TARGETS = ((0.05, 3), (0.03, 6))
"""(step, within runs): the detection goals."""
FALSE_ALARM_RATE = 1e-5
EARLY_FROM, EARLY_TO = 20, 200
"""Steps placed uniformly at these runs (the run index of the first slow run)."""
BANDS = ((20, 59), (60, 99), (100, 200))
"""Where the early steps came, as reported."""


# --- the real detector ----------------------------------------------------------------------

def _false_alarm_chunk(job: tuple[int, str, int, dict]) -> tuple[int, int, int]:
    """(regression onsets, evaluated runs, runs with a drift verdict) over one chunk of no-change series."""
    seed, model, n, settings = job
    detector = Detector(Settings(**settings))
    onsets = evaluated = drifts = 0
    for row in noise_models.series(seed, model, n, SERIES_LEN):
        previous = None
        for verdict in detector.trace(row.tolist(), "seconds"):
            if verdict.state != INSUFFICIENT_DATA:
                evaluated += 1
            if verdict.state == REGRESSION and previous != REGRESSION:
                onsets += 1
            drifts += verdict.drift != 0
            previous = verdict.state
    return onsets, evaluated, drifts


def _delay_chunk(job: tuple[int, str, int, float, dict]) -> list[int]:
    """Delay (runs after the step, 1 = the first slow run) to the first regression; 0 = none in
    POST runs; -1 = a regression before the step."""
    seed, model, n, step, settings = job
    detector = Detector(Settings(**settings))
    out = []
    for row in noise_models.series(seed, model, n, PRE + POST, step, PRE):
        states = [v.state for v in detector.trace(row.tolist(), "seconds")]
        post = states[PRE:]
        out.append(-1 if REGRESSION in states[:PRE] else (post.index(REGRESSION) + 1 if REGRESSION in post else 0))
    return out


def _early_chunk(job: tuple[int, str, int, float, dict]) -> list[tuple[int, int]]:
    """(step position, delay as :func:`_delay_chunk` counts it) for steps placed uniformly at runs
    EARLY_FROM..EARLY_TO."""
    seed, model, n, step, settings = job
    detector = Detector(Settings(**settings))
    positions = np.random.default_rng(seed).integers(EARLY_FROM, EARLY_TO + 1, n)
    x = noise_models.series(seed + 1, model, n, EARLY_TO + POST)
    out = []
    for row, at in zip(x, positions, strict=True):
        values = row[:at + POST].copy()
        values[at:] *= 1.0 + step
        states = [v.state for v in detector.trace(values.tolist(), "seconds")]
        post = states[at:]
        out.append((int(at), -1 if REGRESSION in states[:at]
                    else (post.index(REGRESSION) + 1 if REGRESSION in post else 0)))
    return out


def _early_summary(rows: list[tuple[int, int]], within: int) -> dict:
    at = np.array([r[0] for r in rows])
    delays = np.array([r[1] for r in rows])
    out = {"all": _delay_summary(delays, within)}
    for lo, hi in BANDS:
        band = (at >= lo) & (at <= hi)
        if band.any():
            out[f"{lo}-{hi}"] = _delay_summary(delays[band], within)
    return out


def _chunks(total: int, size: int) -> list[int]:
    return [min(size, total - i) for i in range(0, total, size)]


def poisson_upper(k: int) -> float:
    """One-sided 95% upper bound of a Poisson mean given k events (exact, chi-square)."""
    return float(stats.chi2.ppf(0.95, 2 * (k + 1)) / 2)


def wilson(p: float, n: int) -> tuple[float, float]:
    """95% Wilson interval of a share p of n trials."""
    z = 1.959964
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


DRIFT_PER_RUN = 0.0005
DRIFT_START = 150
DRIFT_LEN = 300
DRIFT_MODELS = ("gauss_1", "gauss_2", "t3", "spiky", "bursts")
CHANGE_AT = DRIFT_START + 150
"""A version change that did nothing, in the middle of the drift."""


_TIMED = "times" in inspect.signature(version_verdict).parameters
"""Whether this detector's version verdict takes the runs' times and the drift (the previous release's
did not: it was given the values only)."""


def version_looks(values: list[float], at: int, settings: Settings) -> tuple[bool, bool]:
    """Whether a version change before run ``at`` of ``values`` (a ``seconds`` series) was called a
    regression at its first look (any judgement on version_min_runs .. version_runs runs after it) and
    at its second (version_settle_runs a side), judged as sixdim.verdicts.live judges it: the runs
    before are the tracker's last ones, with their times (here, their indices) and the drift it named."""
    s = settings
    tracker = SeriesTracker("seconds", s)
    for i, value in enumerate(values[:at]):
        tracker.update(value, at=float(i))
    times, before = tracker.recent(max(s.version_runs, s.version_settle_runs))
    extra: dict = {}
    if _TIMED:
        extra = {"times": (list(times), [float(i) for i in range(at, len(values))]), "trend": tracker.trend()}
    after = values[at:at + s.version_settle_runs]
    change = {"driver": ("a", "b")}

    def judge(k: int, runs: int) -> bool:
        timed = dict(extra)
        if _TIMED:
            timed["times"] = (extra["times"][0], extra["times"][1][:k])
        return version_verdict(list(before), after[:k], "seconds", change, s, runs=runs, **timed).state == REGRESSION

    first = any(judge(k, s.version_runs) for k in range(s.version_min_runs, s.version_runs + 1))
    second = len(before) >= s.version_settle_runs and judge(s.version_settle_runs, s.version_settle_runs)
    return first, second


def _drift_chunk(job: tuple[int, str, int, dict]) -> list[tuple[int, int, bool, bool, bool]]:
    """Per series drifting by DRIFT_PER_RUN from run DRIFT_START: (regression onsets during the drift,
    runs from its start to the first drift verdict or -1, whether a no-effect version change in the
    middle of it got a regression version verdict at its first look, and at its second, and whether the
    same change on the same series without the drift did at either: the control)."""
    seed, model, n, settings = job
    s = Settings(**settings)
    detector = Detector(s)
    out = []
    flat = noise_models.series(seed, model, n, DRIFT_START + DRIFT_LEN)
    for row, control in zip(noise_models.drift(flat, DRIFT_PER_RUN, DRIFT_START), flat, strict=True):
        trace = detector.trace(row.tolist(), "seconds")
        states = [v.state for v in trace]
        onsets = sum(1 for i in range(DRIFT_START, len(states))
                     if states[i] == REGRESSION and states[i - 1] != REGRESSION)
        first = next((i - DRIFT_START for i, v in enumerate(trace) if v.drift == 1 and i >= DRIFT_START), -1)
        out.append((onsets, first, *version_looks(row.tolist(), CHANGE_AT, s),
                    any(version_looks(control.tolist(), CHANGE_AT, s))))
    return out


def _drift_summary(rows: list[tuple[int, int, bool]]) -> dict:
    firsts = np.array([r[1] for r in rows])
    found = firsts[firsts >= 0]
    return {"series": len(rows), "onsets": int(sum(r[0] for r in rows)),
            "series_with_onsets": int(sum(r[0] > 0 for r in rows)),
            "found": float(np.mean(firsts >= 0)),
            "runs_to_find_p50_p90": [float(np.percentile(found, q)) if found.size else None for q in (50, 90)],
            "version_blamed_first_look": int(sum(r[2] for r in rows)),
            "version_blamed_second_look": int(sum(r[3] for r in rows)),
            "version_blamed": int(sum(r[2] or r[3] for r in rows)),
            "version_called_without_drift": int(sum(r[4] for r in rows))}


def real_figures(models: tuple[str, ...], runs: int, trials: int, settings: Settings, workers: int,
                 drift_series: int = 500, runs_for: dict[str, int] | None = None) -> dict:
    cfg = asdict(settings)
    cfg["effects"] = dict(cfg["effects"])
    out: dict = {}
    with Pool(workers) as pool:
        for k, model in enumerate(models):
            t0 = time.time()
            n_series = math.ceil((runs_for or {}).get(model, runs)
                                 / (SERIES_LEN - settings.min_baseline - settings.slow_runs))
            jobs = [(SEED + 1000 * k + i, model, n, cfg) for i, n in enumerate(_chunks(n_series, 50))]
            fa = pool.map(_false_alarm_chunk, jobs)
            onsets, evaluated, drifts = (sum(x[i] for x in fa) for i in range(3))
            res: dict = {"false_alarm": {"onsets": onsets, "evaluated_runs": evaluated, "drift_runs": drifts,
                                         "per_100k": onsets / evaluated * 1e5,
                                         "per_100k_upper95": poisson_upper(onsets) / evaluated * 1e5}}
            for step, within in TARGETS:
                jobs = [(SEED + 7 + 1000 * k + int(step * 1000) * 100 + i, model, n, step, cfg)
                        for i, n in enumerate(_chunks(trials, 100))]
                delays = np.array([d for chunk in pool.map(_delay_chunk, jobs) for d in chunk])
                res[f"step_{round(step * 100)}pct"] = _delay_summary(delays, within)
                jobs = [(SEED + 11 + 1000 * k + int(step * 1000) * 100 + i, model, n, step, cfg)
                        for i, n in enumerate(_chunks(trials, 100))]
                rows = [d for chunk in pool.map(_early_chunk, jobs) for d in chunk]
                res[f"early_{round(step * 100)}pct"] = _early_summary(rows, within)
            res["reference"] = reference_figures(model)
            # the reference at the rate this detector measured (its 95% upper bound where it raised none)
            rate = (onsets if onsets else poisson_upper(0)) / evaluated
            res["reference_same_rate"] = {"rate_per_100k": rate * 1e5, **reference_figures(model, rate)}
            res["version"] = version_figures(model, settings)
            if model in DRIFT_MODELS:
                jobs = [(SEED + 5 + 1000 * k + i, model, n, cfg) for i, n in enumerate(_chunks(drift_series, 25))]
                res["drift"] = _drift_summary([d for chunk in pool.map(_drift_chunk, jobs) for d in chunk])
            res["seconds"] = round(time.time() - t0, 1)
            out[model] = res
            print(f"  {model}: {_line(model, res)}  ({res['seconds']} s)", flush=True)
    return out


def _delay_summary(delays: np.ndarray, within: int) -> dict:
    found = delays[delays > 0]
    caught = float(np.mean((delays > 0) & (delays <= within)))
    return {"trials": int(delays.size), "within": within, "detected_within": caught,
            "interval95": wilson(caught, int(delays.size)),
            "alarm_before_step": int(np.sum(delays < 0)), "missed_in_window": float(np.mean(delays == 0)),
            "delay_p50_p90": [float(np.percentile(found, q, method="inverted_cdf")) if found.size else None
                              for q in (50, 90)]}


# --- version verdicts ------------------------------------------------------------------------

def version_figures(model: str, settings: Settings, trials: int = 2000) -> dict:
    """Share of version changes called a regression by :func:`version_verdict`: the first look (its
    ``version_runs`` runs each side) and the second (``version_settle_runs`` each side, once the new
    segment has them; it adds regressions, never takes one back), with a 5% and a 3% step at the
    change, and with none (false).  The first look counts as called if any of its judgements (from
    version_min_runs to version_runs runs after) said regression, as the live agent exports each of them."""
    out = {}
    first, settle = settings.version_runs, settings.version_settle_runs
    for step in (0.05, 0.03, 0.0):
        x = noise_models.series(SEED + 77 + int(step * 1000), model, trials, 2 * settle, step, settle)
        early = both = 0
        for row in x:
            before, after = row[:settle].tolist(), row[settle:].tolist()
            seen = any(version_verdict(before, after[:k], "seconds", {"driver": ("a", "b")}, settings).state
                       == REGRESSION for k in range(settings.version_min_runs, first + 1))
            late = version_verdict(before, after, "seconds", {"driver": ("a", "b")}, settings,
                                   runs=settle).state == REGRESSION
            early += seen
            both += seen or late
        out[f"step_{round(step * 100)}pct"] = {"first_look": early / trials, "with_second_look": both / trials}
    return out


# --- the reference detector (known level and sigma) -------------------------------------------

def reference_threshold(k: int, rate: float = FALSE_ALARM_RATE) -> float:
    """h (in sigmas of one run) such that the mean of the last k runs of Gaussian noise first
    exceeds h at ``rate`` onsets per run: P(S_t > h) - P(S_t > h, S_t-1 > h) = rate, the means of
    consecutive windows having correlation (k - 1) / k."""
    rho = (k - 1) / k
    sd = 1 / math.sqrt(k)
    both = stats.multivariate_normal(mean=[0, 0], cov=[[sd * sd, rho * sd * sd], [rho * sd * sd, sd * sd]])

    def onsets(h: float) -> float:
        tail = stats.norm.sf(h / sd)
        joint = 1 - 2 * stats.norm.cdf(h / sd) + both.cdf([h, h])
        return tail - joint - rate

    return float(optimize.brentq(onsets, 0.5 * sd, 10 * sd, xtol=1e-6))


def reference_figures(model: str, rate: float = FALSE_ALARM_RATE, trials: int = 200_000) -> dict:
    """The reference detector on this model's series (level 1 and the model's Gaussian sigma known),
    its threshold set for ``rate`` false onsets per run."""
    sigma = noise_models.cv_of(model)
    out = {}
    for step, within in TARGETS:
        h = reference_threshold(within, rate) * sigma
        x = noise_models.series(SEED + 99, model, trials, within + within - 1, step, within - 1) - 1.0
        windows = np.lib.stride_tricks.sliding_window_view(x, within, axis=1)  # checks 1 .. within after
        caught = (windows.mean(-1) > h).any(-1)
        out[f"step_{round(step * 100)}pct"] = float(np.mean(caught))
    return out


def t_test_bound(step: float = 0.03, cv: float = 0.01, within: int = 6, alpha: float = FALSE_ALARM_RATE,
                 trials: int = 2000, seed: int = SEED) -> dict:
    """The best a detector that must learn level and noise from the series can do on Gaussian noise it is
    told is Gaussian: after each run, a t-test of the last ``within`` runs' mean against the mean of every
    run before them (noise from those runs), at Student's one-sided ``alpha`` quantile; the share of steps
    caught within ``within`` runs, per band of where the step came (uniform over each band's runs)."""
    rng = np.random.default_rng(seed)
    shift = math.log1p(step)

    def caught(at: int) -> float:
        x = rng.standard_normal((trials, at + within)) * cv
        x[:, at:] += shift
        hit = np.zeros(trials, bool)
        for k in range(1, within + 1):
            end = at + k
            window, base = x[:, end - within:end], x[:, :end - within]
            n = base.shape[1]
            t = (window.mean(1) - base.mean(1)) / (base.std(axis=1, ddof=1) * math.sqrt(1 / within + 1 / n))
            hit |= t > stats.t.isf(alpha, n - 1)
        return float(hit.mean())

    shares = {at: caught(at) for at in range(EARLY_FROM, EARLY_TO + 1)}
    out = {f"{lo}-{hi}": float(np.mean([shares[a] for a in range(lo, hi + 1)])) for lo, hi in BANDS}
    out[f"{EARLY_FROM}-{EARLY_TO}"] = float(np.mean(list(shares.values())))
    out[f"at {EARLY_FROM}"] = shares[EARLY_FROM]
    return out


# --- report --------------------------------------------------------------------------------

def _line(model: str, r: dict) -> str:
    fa, s5, s3, ref = r["false_alarm"], r["step_5pct"], r["step_3pct"], r["reference"]
    return (f"{model:>10} | FA {fa['onsets']:>3} / {fa['evaluated_runs']:>9,} = {fa['per_100k']:5.2f} "
            f"(up {fa['per_100k_upper95']:4.2f}) /1e5 | 5%in3 {s5['detected_within']:.3f} (ref "
            f"{ref['step_5pct']:.3f}) | 3%in6 {s3['detected_within']:.3f} (ref {ref['step_3pct']:.3f})")


def markdown(real: dict) -> str:
    rows = ["| noise | false regressions / no-change runs | per 10⁵ (95% upper) | 5% step within 3 runs "
            "(95% CI) | reference at 1 per 10⁵; at this rate | 3% step within 6 runs (95% CI) "
            "| reference at 1 per 10⁵; at this rate | delay p50/p90 5%, 3% |",
            "|---|---|---|---|---|---|---|---|"]
    for model, r in real.items():
        fa, s5, s3, ref = r["false_alarm"], r["step_5pct"], r["step_3pct"], r["reference"]
        same = r.get("reference_same_rate", ref)
        rows.append(
            f"| {model} | {fa['onsets']} / {fa['evaluated_runs']:,} | **{fa['per_100k']:.2f}** "
            f"({fa['per_100k_upper95']:.2f}) | **{100 * s5['detected_within']:.1f}%** "
            f"({100 * s5['interval95'][0]:.1f}–{100 * s5['interval95'][1]:.1f}) | {100 * ref['step_5pct']:.1f}%; "
            f"{100 * same['step_5pct']:.1f}% | "
            f"**{100 * s3['detected_within']:.1f}%** ({100 * s3['interval95'][0]:.1f}–"
            f"{100 * s3['interval95'][1]:.1f}) | {100 * ref['step_3pct']:.1f}%; {100 * same['step_3pct']:.1f}% | "
            f"{_pair(s5['delay_p50_p90'])}, {_pair(s3['delay_p50_p90'])} |")
    return "\n".join(rows)


def early_markdown(real: dict) -> str:
    """Steps placed uniformly at runs 20-200: detection per band of where they came."""
    bands = [f"{lo}-{hi}" for lo, hi in BANDS]
    rows = ["| noise | step | within | " + " | ".join(f"step at runs {b}: caught (n, 95% CI)" for b in bands)
            + " | all (20-200) | never within 15 runs |", "|---|---|---|" + "---|" * (len(bands) + 2)]
    for model, r in real.items():
        for step, within in TARGETS:
            e = r.get(f"early_{round(step * 100)}pct")
            if e is None:
                continue
            cells = [_share(e[b]) if b in e else "-" for b in [*bands, "all"]]
            missed = round(e["all"]["missed_in_window"] * e["all"]["trials"])
            rows.append(f"| {model} | {round(step * 100)}% | {within} | " + " | ".join(cells)
                        + f" | {missed} of {e['all']['trials']} |")
    return "\n".join(rows)


def _share(d: dict) -> str:
    lo, hi = d["interval95"]
    return (f"**{100 * d['detected_within']:.1f}%** ({round(d['detected_within'] * d['trials'])} of {d['trials']}, "
            f"{100 * lo:.1f}–{100 * hi:.1f})")


def drift_markdown(real: dict) -> str:
    rows = [f"| noise | series | regression onsets during the drift (series with any) | drift verdict found | runs to "
            f"find it p50/p90 | no-effect version change at run {CHANGE_AT - DRIFT_START} of the drift called a "
            "regression: first look, second look, either | the same change without the drift |",
            "|---|---|---|---|---|---|---|"]
    for model, r in real.items():
        if "drift" not in r:
            continue
        d = r["drift"]
        rows.append(f"| {model} | {d['series']} | {d['onsets']} ({d['series_with_onsets']}) | "
                    f"{100 * d['found']:.1f}% | {_pair(d['runs_to_find_p50_p90'])} | "
                    f"{d['version_blamed_first_look']}, {d['version_blamed_second_look']}, {d['version_blamed']} | "
                    f"{d.get('version_called_without_drift', '-')} |")
    return "\n".join(rows)


def version_markdown(real: dict) -> str:
    rows = ["| noise | 5% step at the change: first look (10 runs a side) | with the second look (40) | 3% step: first "
            "| with second | no change, called a regression: first | with second |", "|---|---|---|---|---|---|---|"]
    for model, r in real.items():
        v = r["version"]
        cells = [f"{100 * v[f'step_{k}pct'][look]:.1f}%" for k in (5, 3, 0) for look in ("first_look",
                                                                                           "with_second_look")]
        rows.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _pair(values: list) -> str:
    return "/".join("-" if v is None else f"{v:g}" for v in values)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1_000_000, help="no-change series-runs per noise model")
    ap.add_argument("--trials", type=int, default=2000, help="step trials per noise model and step size")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--drift-series", type=int, default=500, help="drifting series per drift model")
    ap.add_argument("--runs-for", action="append", default=[], metavar="MODEL=RUNS",
                    help="no-change runs for one model instead of --runs (e.g. t3=3000000: its rate is near the goal)")
    ap.add_argument("--models", default=",".join(noise_models.MODELS),
                    help=f"noise models (default: all of {', '.join(noise_models.MODELS)})")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="override one Settings default (e.g. noise_window=100)")
    ap.add_argument("--out", type=Path, help="write every figure as JSON")
    ap.add_argument("--version-only", action="store_true", help="only the version-verdict figures (seconds)")
    ap.add_argument("--drift-only", action="store_true", help="only the drift figures (drift models among --models)")
    ap.add_argument("--bound", action="store_true", help="only the t-test bound for 3%% steps at 1%% noise, per band")
    args = ap.parse_args(argv)
    models = tuple(args.models.split(","))
    settings = Settings(**{k: type(getattr(Settings(), k))(v) for k, v in (o.split("=", 1) for o in args.set)})
    if args.bound:
        print(json.dumps(t_test_bound(trials=args.trials), indent=1))
        return 0
    if args.version_only:
        print(version_markdown({m: {"version": version_figures(m, settings, args.trials)} for m in models}))
        return 0
    if args.drift_only:
        cfg = {**asdict(settings), "effects": dict(settings.effects)}
        started = time.time()
        with Pool(args.workers) as pool:
            real = {m: {"drift": _drift_summary([d for chunk in pool.map(_drift_chunk, [
                (SEED + 5 + 1000 * k + i, m, n, cfg) for i, n in enumerate(_chunks(args.drift_series, 25))])
                for d in chunk])} for k, m in enumerate(models) if m in DRIFT_MODELS}
        print(drift_markdown(real))
        print(f"\nTotal {round(time.time() - started, 1)} s")
        if args.out:
            args.out.write_text(json.dumps({"seed": SEED, "drift_series": args.drift_series, "real": real}, indent=1))
        return 0
    started = time.time()
    report: dict = {"seed": SEED, "settings": {**asdict(settings), "effects": dict(settings.effects)},
                    "models": models, "runs": args.runs, "trials": args.trials}
    print(f"Real detector, {args.runs:,} no-change runs and {args.trials} trials per step per model, "
          f"{args.workers} workers", flush=True)
    runs_for = {m: int(n) for m, n in (o.split("=", 1) for o in args.runs_for)}
    report["runs_for"] = runs_for
    report["detector"] = os.environ.get("SIXDIM_SIM_DETECTOR", "sixdim.verdicts.detector")
    report["real"] = real_figures(models, args.runs, args.trials, settings, args.workers, args.drift_series,
                                  runs_for)
    print()
    print(markdown(report["real"]))
    print()
    print(early_markdown(report["real"]))
    print()
    print(drift_markdown(report["real"]))
    print()
    print(version_markdown(report["real"]))
    report["seconds"] = round(time.time() - started, 1)
    print(f"\nTotal {report['seconds']} s")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
