"""``sixdim report regressions``: every shift in the whole history, found by change-point analysis.

The online detector (:mod:`sixdim.verdicts.detector`) says whether a series is regressed *now*; this
report looks back: for every series (``RunRecord.key()``) and every watched figure of its ``ok``
runs, it runs E-Divisive means (:mod:`sixdim.verdicts.changepoints`, with version changes as known break
points) and lists each shift with its time, change, p-value and the software versions either
side.  See docs/REGRESSIONS.md, "Looking back".

It reads the history read-only (``mode=ro``), in chunks of :data:`sixdim.store.reader.CHUNK` rows, each its own short
read, so it never writes the agent's database and holds no lock for long; it reads only the
columns it needs (never ``details``).  This module is imported by :mod:`sixdim.report.command`
(and so by the command line) to register the command's arguments, so it imports nothing heavy at
import time: numpy, scipy and the analysis load inside the command.

Exit codes: 0 when the report was made, whether or not it found a shift (a report, not a check:
alert on ``sixdim_regression_state``); 2 for bad usage, bad configuration, or a history that is
missing or not a sixdim database (the message names the file).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

from sixdim.config import add_insecure_permissions_flag, add_option_flags, load
from sixdim.core import exits, text
from sixdim.core.catalog import WATCHED
from sixdim.core.durations import EXAMPLES, duration_argument
from sixdim.core.results import SeriesKey
from sixdim.store import reader
from sixdim.verdicts.detector import settings_from

OPTION_KEYS = ("agent.history", "regression.min_effect")
"""The configuration options ``sixdim report regressions`` takes as flags."""


def _figure(text: str) -> str:
    if text not in WATCHED:
        raise argparse.ArgumentTypeError(f"expected one of the watched figures ({', '.join(WATCHED)}), got {text!r}")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``sixdim report regressions`` (the parser is :mod:`sixdim.report.command`'s)."""
    parser.add_argument("--config", metavar="FILE",
                        help="TOML configuration file, for agent.history and the [regression] settings [SIXDIM_CONFIG]")
    parser.add_argument("--since", type=duration_argument, metavar="DURATION",
                        help=f"list only shifts at or after now - DURATION: {EXAMPLES} "
                             "(default: all; the analysis always uses the whole history)")
    parser.add_argument("--workload", "-w", action="append", metavar="NAME", help="only this workload (repeatable)")
    parser.add_argument("--figure", action="append", type=_figure, metavar="NAME",
                        help="only this watched figure, e.g. flops or seconds (repeatable)")
    parser.add_argument("--state", choices=("regression", "improvement"),
                        help="only regressions or only improvements (default: both)")
    parser.add_argument("--json", action="store_true", help="print a JSON list of shifts instead of a table")
    add_option_flags(parser, OPTION_KEYS)
    add_insecure_permissions_flag(parser)


# ---------------------------------------------------------------------------- reading

@dataclass
class Series:
    """The ok runs of one series, as read (not yet in time order)."""

    key: SeriesKey
    model_name: str = ""
    rows: list[tuple[float, ...]] = field(default_factory=list)
    """Per run: started_at, ended_at, version-set id, then each watched figure (NaN where absent),
    in the order of :attr:`OkRuns.figures`."""


@dataclass
class OkRuns:
    """What the report reads: the series, the distinct version sets, the run count."""

    series: dict[tuple[str, ...], Series]
    versions: list[dict[str, str]]
    """Each distinct set of break-point versions (``sixdim.verdicts.detector.versions``), by id."""
    figures: tuple[str, ...]
    """The watched figures, in the order of a row's columns after the first three."""
    runs: int
    unknown: frozenset[int] = frozenset()
    """Ids of the all-empty version set: runs that did not say their versions (no break there)."""


def read_history(path: str, workloads: Sequence[str] | None = None) -> OkRuns:
    """The ok runs of every series: ids in increasing order, :data:`sixdim.store.reader.CHUNK` rows per read.  Only
    the watched figures are kept, and each distinct environment is parsed once."""
    figures = tuple(WATCHED)
    column = {name: 3 + j for j, name in enumerate(figures)}
    width = 3 + len(figures)
    query = reader.RunsQuery((*reader.SERIES_COLUMNS, "model_name", "started_at", "ended_at", "figures",
                              "environment"), ok_only=True, workloads=tuple(workloads or ()))
    series: dict[tuple[str, ...], Series] = {}
    versions = VersionSets()
    runs = 0
    with reader.reading(path) as db:
        for rows in reader.chunks(db, query):
            runs += len(rows)
            for row in rows:
                key = SeriesKey(*row[1:10])
                s = series.get(key)
                if s is None:
                    s = series[key] = Series(key)
                s.model_name = row[10]
                vid = versions.id(row[14], row[5])
                s.rows.append(figure_row(row[11], row[12], vid, json.loads(row[13]), column, width))
    return OkRuns(series, versions.sets, figures, runs, frozenset(versions.unknown))


def figure_row(started: float, ended: float, vid: int, figures: dict[str, Any], column: dict[str, int],
               width: int) -> tuple[float, ...]:
    """A run as the analysis keeps it: start, end, version-set id, then each watched figure in its
    ``column`` (NaN where absent, or not a number: a bool or a text is no figure)."""
    out = [math.nan] * width
    out[0], out[1], out[2] = started, ended, vid
    for name, value in figures.items():
        j = column.get(name)
        if j is not None and type(value) in (float, int):
            out[j] = value
    return tuple(out)


@dataclass
class _Run:
    """The fields :func:`sixdim.verdicts.detector.versions` reads."""

    environment: dict[str, Any]
    workload: str = ""


class VersionSets:
    """The distinct version sets of a history's runs, numbered as first seen.  Environments repeat, so
    each distinct environment text is parsed once per workload (the versions depend on both: see
    :func:`sixdim.verdicts.detector.versions`).  A run that did not say its versions gets the all-empty set,
    whose id is then in ``unknown``."""

    def __init__(self) -> None:
        self.sets: list[dict[str, str]] = []
        self.unknown: set[int] = set()
        self._ids: dict[tuple[str, ...], int] = {}
        self._seen: dict[tuple[str, str], int] = {}

    def id(self, environment: str, workload: str) -> int:
        vid = self._seen.get((environment, workload))
        if vid is None:
            from sixdim.verdicts.detector import VERSION_KEYS, versions

            held = versions(_Run(json.loads(environment), workload))
            values = held or dict.fromkeys(VERSION_KEYS, "")
            vid = self._ids.setdefault(tuple(values.values()), len(self.sets))
            if vid == len(self.sets):
                self.sets.append(values)
                if held is None:
                    self.unknown.add(vid)
            self._seen[(environment, workload)] = vid
        return vid


# ---------------------------------------------------------------------------- analysis

def analyse(history: OkRuns, *, settings: Any = None, figures: Iterable[str] | None = None,
            progress: Any = None) -> list[dict[str, Any]]:
    """Every shift of every watched figure of every series, oldest first.  ``settings``
    (:class:`sixdim.verdicts.detector.Settings`) give each figure's minimum effect, as for the online
    verdicts (``regression.min_effect`` and ``[regression.effects]``)."""
    import numpy as np

    from sixdim.verdicts import detector as rg
    from sixdim.verdicts.changepoints import find_change_points

    settings = settings or rg.Settings()
    wanted = set(history.figures if figures is None else figures)
    shifts: list[dict[str, Any]] = []
    total = len(history.series)
    for number, s in enumerate(history.series.values(), 1):
        if progress is not None:
            progress(number, total)
        runs = np.array(s.rows, dtype=float)
        runs = runs[np.lexsort((runs[:, 1], runs[:, 0]))]  # by start, then end, as group_series sorts
        started, vids = runs[:, 0], runs[:, 2].astype(int)
        for j, figure in enumerate(history.figures, 3):
            if figure not in wanted:
                continue
            keep = np.flatnonzero(np.isfinite(runs[:, j]))
            if keep.size < 2:
                continue
            said = _versions_said(vids[keep].tolist(), history.unknown)
            breaks = version_breaks(said)
            min_effect = settings.effects_for(figure, s.key.workload)[1]
            for cp in find_change_points(runs[keep, j], breaks=breaks, min_magnitude=min_effect):
                before, after = said[cp.index - 1], said[cp.index]
                shifts.append(_shift(s, figure, cp, history.versions[before], history.versions[after],
                                     float(started[keep[cp.index]])))
    shifts.sort(key=lambda d: (d["at"], d["hostname"], d["gpu"], d["workload"], d["precision"], d["shape"],
                               d["figure"]))
    return shifts


def _versions_said(vids: list[int], unknown: frozenset[int]) -> list[int]:
    """Each run's version set, a run that did not say its versions taking the last one said before
    it (the first ones, the first said after them; all unknown if none was said)."""
    said = [v for v in vids if v not in unknown]
    if not said:
        return vids
    known = said[0]
    out = []
    for v in vids:
        if v not in unknown:
            known = v
        out.append(known)
    return out


def version_breaks(vids: list[int]) -> list[int]:
    """Positions whose version set differs from the run before: the known break points, as the
    online detector's :func:`sixdim.verdicts.detector.version_breaks` finds them."""
    return [i for i in range(1, len(vids)) if vids[i] != vids[i - 1]]


def _shift(s: Series, figure: str, cp: Any, old: dict[str, str], new: dict[str, str], at: float) -> dict[str, Any]:
    from sixdim.verdicts import detector as rg

    direction = rg.WATCHED[figure]
    ratio = cp.ratio
    change = (ratio - 1.0) if ratio is not None else math.copysign(math.inf, cp.median_after - cp.median_before)
    hostname, device_type, gpu, uuid, workload, precision, shape, mode, kernel_pass = s.key
    return {
        "hostname": hostname, "device_type": device_type, "gpu": gpu, "uuid": uuid, "model_name": s.model_name,
        "workload": workload, "precision": precision, "shape": shape, "mode": mode, "pass": kernel_pass,
        "figure": figure,
        "state": rg.REGRESSION if direction * change > 0 else rg.IMPROVEMENT,
        "change_ratio": ratio,
        "p_value": cp.p_value,
        "at": at,
        "at_utc": datetime.fromtimestamp(at, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "median_before": cp.median_before, "median_after": cp.median_after,
        "runs_before": cp.runs_before, "runs_after": cp.runs_after,
        "versions_before": dict(old), "versions_after": dict(new),
        "version_changed": [k for k in rg.VERSION_KEYS if old.get(k) != new.get(k)],
    }


# ---------------------------------------------------------------------------- output

def _p(p: float) -> str:
    if p <= 0.0:
        return "<1e-300"
    return f"{p:.2g}" if p < 1e-4 else f"{p:.4f}".rstrip("0").rstrip(".")


def _percent(ratio: float | None) -> str:
    if ratio is None:
        return "-"
    pct = (ratio - 1.0) * 100.0
    sign = "\u2212" if pct < 0 else "+"
    return f"{sign}{abs(pct):.1f}%"


def _versions(shift: dict[str, Any]) -> str:
    changed = shift["version_changed"]
    if not changed:
        return "-"
    old, new = shift["versions_before"], shift["versions_after"]
    return ", ".join(f"{k} {old.get(k) or '?'} \u2192 {new.get(k) or '?'}" for k in changed)


def table(shifts: list[dict[str, Any]]) -> str:
    """One line per shift, oldest first, under a header."""
    from sixdim.verdicts.detector import series_label

    rows = [("when (UTC)", "state", "change", "p", "host", "gpu", "series", "mode/pass", "figure",
             "median before \u2192 after", "runs before | after", "version change")]
    for s in shifts:
        when = datetime.fromtimestamp(s["at"], timezone.utc).strftime("%Y-%m-%d %H:%M")
        label = series_label(SimpleNamespace(precision=s["precision"], workload=s["workload"], shape=s["shape"]))
        rows.append((when, s["state"], _percent(s["change_ratio"]), _p(s["p_value"]), s["hostname"], s["gpu"],
                     label, f"{s['mode'] or '-'}/{s['pass'] or '-'}", s["figure"],
                     f"{s['median_before']:.4g} \u2192 {s['median_after']:.4g}",
                     f"{s['runs_before']} | {s['runs_after']}", _versions(s)))
    return text.table(rows)


def command(args: argparse.Namespace) -> int:
    """``sixdim report regressions``: 0 when the report was made, whether or not it lists a shift."""
    config = load(args.config, flags=args)
    started = time.perf_counter()
    history = read_history(config.history, args.workload)
    line = text.Progress(sys.stderr, min_interval=0.2)

    def progress(number: int, total: int) -> None:
        line.update(f"sixdim: analysing series {number}/{total}", force=number == total)

    try:
        shifts = analyse(history, settings=settings_from(config), figures=args.figure, progress=progress)
    finally:
        line.clear()
    if args.since is not None:
        cutoff = time.time() - args.since
        shifts = [s for s in shifts if s["at"] >= cutoff]
    if args.state:
        shifts = [s for s in shifts if s["state"] == args.state]
    if args.json:
        print(json.dumps(shifts, indent=2))
        return exits.OK
    seconds = time.perf_counter() - started
    scope = f" since {_ago(args.since)}" if args.since is not None else ""
    examined = f"{history.runs} ok runs of {len(history.series)} series in {config.history} ({seconds:.1f} s)"
    if not shifts:
        print(f"no shifts found{scope}: {examined}")
        return exits.OK
    regressions = sum(s["state"] == "regression" for s in shifts)
    print(table(shifts))
    print(f"\n{len(shifts)} shift(s){scope}: {regressions} regression(s), {len(shifts) - regressions} improvement(s); "
          f"{examined}")
    return exits.OK


def _ago(seconds: float) -> str:
    """The --since cutoff as a UTC time."""
    return datetime.fromtimestamp(time.time() - seconds, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
