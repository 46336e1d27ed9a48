"""``sixdim report regressions``: every shift in the whole history, found by change-point analysis.

The online detector (:mod:`agent.regression`) says whether a series is regressed *now*; this
report looks back: for every series (``RunRecord.key()``) and every watched figure of its ``ok``
runs, it runs E-Divisive means (:mod:`agent.changepoints`, with version changes as known break
points) and lists each shift with its time, change, p-value and the software versions either
side.  See docs/REGRESSIONS.md, "Looking back".

It reads the history read-only (``mode=ro``), in chunks of :data:`CHUNK` rows, each its own short
read, so it never writes the agent's database and holds no lock for long; it reads only the
columns it needs (never ``details``).  This module is imported by ``agent.cli`` to register the
command, so it imports nothing heavy at import time: numpy, scipy and the analysis load inside
the command.

Exit codes: 0 when the report was made, whether or not it found a shift (a report, not a check:
alert on ``sixdim_regression_state``); 2 for bad usage, bad configuration, or a history that is
missing or not a sixdim database (the message names the file).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sqlite3
import sys
import time
import urllib.parse
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterable, Iterator, Sequence

from agent.config import add_insecure_permissions_flag, add_option_flags, load, regression_settings
from agent.history import HistoryError

EXIT_OK, EXIT_USAGE = 0, 2

SERIES_COLUMNS = ("hostname", "device_type", "gpu", "uuid", "workload", "precision", "shape", "mode", "kernel_pass")
"""The series key, as ``RunRecord.key()`` and the history's index have it."""
CHUNK = 20_000
"""Rows per read: each read is its own short transaction."""
BUSY_TIMEOUT_SECONDS = 5.0
"""How long a read waits for a lock (in WAL mode only a checkpoint or recovery takes one)."""

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(text: str) -> float:
    """``--since``: ``30m``, ``12h``, ``7d``, ``2w``, ``90s`` or plain seconds; positive and finite."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([smhdw]?)\s*", text or "")
    value = float(match.group(1)) * _UNITS[match.group(2) or "s"] if match else math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(
            f"expected a positive duration such as 30m, 12h, 7d, 2w or a number of seconds, got {text!r}")
    return value


def _figure(text: str) -> str:
    from agent.regression import WATCHED

    if text not in WATCHED:
        raise argparse.ArgumentTypeError(f"expected one of the watched figures ({', '.join(WATCHED)}), got {text!r}")
    return text


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Register ``report`` (``report regressions``) on the CLI's subcommands."""
    report = commands.add_parser(
        "report", help="reports over the run history: 'report --html FILE' a page, 'report regressions' every shift",
        description="Reports over the run history. 'sixdim report --html FILE' writes one self-contained HTML page "
                    "(the six dimensions per device and workload, trend charts with version changes marked, the "
                    "version comparison and the regressions; needs the 'report' extra for plotly). 'sixdim report "
                    "regressions' runs a change-point analysis over every series of the history and lists each "
                    "shift with its time, change, p-value and the software versions either side.",
        epilog="Exit codes: 0 the report was made; 2 bad usage, configuration or history, or plotly missing for "
               "--html. See docs/REPORT.md and docs/REGRESSIONS.md.")
    from agent import html_report  # its arguments only: plotly and numpy load inside the command

    html_report.add_arguments(report)
    report.set_defaults(handler=lambda args: _report(report, args))
    kinds = report.add_subparsers(dest="report", metavar="REPORT")
    regressions = kinds.add_parser(
        "regressions", help="change points of every series over the whole history (E-Divisive means)",
        description="Change-point analysis over the whole history: for every series (host, GPU, workload, "
                    "precision, shape, mode, pass) and every watched figure of its ok runs, E-Divisive means "
                    "(as Apache Otava runs it: split windows, t-test, merge) with version changes as known break "
                    "points. A shift is listed when its p-value is at most 0.001 and the medians either side differ "
                    "by at least the figure's minimum effect (regression.min_effect, 1.8%, or [regression.effects] "
                    "as for the live verdicts); its state is 'regression' or 'improvement' by the figure's "
                    "direction. The history is read read-only.",
        epilog="Exit codes: 0 the report was made, whether or not it lists a shift; 2 bad usage, bad "
               "configuration, or a history that is missing or not a sixdim database. See docs/REGRESSIONS.md.")
    regressions.add_argument("--config", metavar="FILE",
                             help="TOML configuration file, for agent.history and the [regression] settings [SIXDIM_CONFIG]")
    regressions.add_argument("--since", type=parse_duration, metavar="DURATION",
                             help="list only shifts at or after now - DURATION: 30m, 12h, 7d, 2w or seconds "
                                  "(default: all; the analysis always uses the whole history)")
    regressions.add_argument("--workload", "-w", action="append", metavar="NAME",
                             help="only this workload (repeatable)")
    regressions.add_argument("--figure", action="append", type=_figure, metavar="NAME",
                             help="only this watched figure, e.g. flops or seconds (repeatable)")
    regressions.add_argument("--state", choices=("regression", "improvement"),
                             help="only regressions or only improvements (default: both)")
    regressions.add_argument("--json", action="store_true",
                             help="print a JSON list of shifts instead of a table")
    add_option_flags(regressions, ("agent.history", "regression.min_effect"))
    add_insecure_permissions_flag(regressions)
    regressions.set_defaults(handler=lambda args: _regressions(report, args))


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return EXIT_USAGE


def _report(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``sixdim report`` with no kind: ``--html FILE`` writes the page; neither is a usage error."""
    from agent import html_report

    if getattr(args, "html", None):
        return html_report.command_html(html_report.html_flags(args))
    code = _help(parser)
    print("sixdim: error: report: give --html FILE or a report kind (regressions)", file=sys.stderr)
    return code


def _regressions(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``report regressions``; options given before ``regressions`` are ``--html``'s, so an error."""
    from agent import html_report

    if getattr(args, "html", None):
        print("sixdim: error: report: --html and 'regressions' are two reports: give one", file=sys.stderr)
        return EXIT_USAGE
    misplaced = html_report.given(args)
    if misplaced:
        print(f"sixdim: error: report: {', '.join(misplaced)} before 'regressions' belong to --html; give them after "
              "it: sixdim report regressions [options]", file=sys.stderr)
        return EXIT_USAGE
    return command_regressions(args)


# ---------------------------------------------------------------------------- reading

@dataclass
class Series:
    """The ok runs of one series, as read (not yet in time order)."""

    key: tuple[str, ...]
    model_name: str = ""
    rows: list[tuple[float, ...]] = field(default_factory=list)
    """Per run: started_at, ended_at, version-set id, then each watched figure (NaN where absent),
    in the order of :attr:`History.figures`."""


@dataclass
class History:
    """What the report reads: the series, the distinct version sets, the run count."""

    series: dict[tuple[str, ...], Series]
    versions: list[dict[str, str]]
    """Each distinct set of break-point versions (``agent.regression.versions``), by id."""
    figures: tuple[str, ...]
    """The watched figures, in the order of a row's columns after the first three."""
    runs: int
    unknown: frozenset[int] = frozenset()
    """Ids of the all-empty version set: runs that did not say their versions (no break there)."""


def _connect(path: str) -> sqlite3.Connection:
    """A read-only connection (``mode=ro``), or :class:`HistoryError` naming the file.

    A WAL database needs its ``-shm`` companion, which SQLite creates beside it if it is not there
    (the agent's own are there while it runs).  In a folder this user cannot write, with no
    ``-wal`` file (so nothing uncommitted: every run is in the main file), that fails; the file is
    then read as it is (``immutable=1``), as nothing can be writing it."""
    file = Path(path)
    if not file.exists():
        raise HistoryError(f"history database {path}: no such file")
    if not file.is_file():
        raise HistoryError(f"history database {path}: not a file")
    uri = "file:" + urllib.parse.quote(str(file.resolve())) + "?mode=ro"
    for immutable in (False, True):
        try:
            db = sqlite3.connect(uri + ("&immutable=1" if immutable else ""), uri=True, timeout=BUSY_TIMEOUT_SECONDS)
            db.execute("PRAGMA query_only = 1")
            db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # opens the file and its WAL
            return db
        except sqlite3.OperationalError as exc:
            if immutable or Path(f"{file}-wal").exists():
                raise HistoryError(f"cannot open history database {path}: {exc}") from None
        except sqlite3.Error as exc:
            raise HistoryError(f"cannot read history database {path}: {exc}") from None
    raise AssertionError("unreachable")


@contextmanager
def reading(path: str) -> Iterator[sqlite3.Connection]:
    """A read-only connection to the history (:func:`_connect`), closed afterwards, with every
    failure while reading it turned into a :class:`HistoryError` naming the file."""
    db = _connect(path)
    try:
        yield db
    except sqlite3.Error as exc:
        text = str(exc)
        if "no such table" in text:
            raise HistoryError(f"{path} is not a sixdim history database (it has no table 'runs')") from None
        raise HistoryError(f"cannot read history database {path}: {text}") from None
    except (ValueError, AttributeError) as exc:  # a JSON column that is not a JSON object
        raise HistoryError(f"cannot read history database {path}: a row's JSON is broken ({exc})") from None
    finally:
        db.close()


def read_history(path: str, workloads: Sequence[str] | None = None) -> History:
    """The ok runs of every series: ids in increasing order, :data:`CHUNK` rows per read.  Only
    the watched figures are kept, and each distinct environment is parsed once."""
    from agent.regression import WATCHED

    figures = tuple(WATCHED)
    column = {name: 3 + j for j, name in enumerate(figures)}
    width = 3 + len(figures)
    selected = ", ".join((*SERIES_COLUMNS, "model_name", "started_at", "ended_at", "figures", "environment"))
    where = "status = 'ok'"
    if workloads:
        where += f" AND workload IN ({', '.join('?' * len(workloads))})"
    sql = f"SELECT id, {selected} FROM runs WHERE id > ? AND {where} ORDER BY id LIMIT {CHUNK}"
    series: dict[tuple[str, ...], Series] = {}
    versions = VersionSets()
    runs = 0
    with reading(path) as db:
        for rows in chunks(db, sql, tuple(workloads or ())):
            runs += len(rows)
            for row in rows:
                key = row[1:10]
                s = series.get(key)
                if s is None:
                    s = series[key] = Series(key)
                s.model_name = row[10]
                vid = versions.id(row[14], row[5])
                s.rows.append(figure_row(row[11], row[12], vid, json.loads(row[13]), column, width))
    return History(series, versions.sets, figures, runs, frozenset(versions.unknown))


def chunks(db: sqlite3.Connection, sql: str, args: tuple = ()) -> Iterator[list[Any]]:
    """The rows of ``sql`` a chunk at a time, by id: its first parameter is the last id read, and it
    ends ``ORDER BY id LIMIT`` :data:`CHUNK` (keyset paging, so each read is short and indexed)."""
    last = 0
    while True:
        rows = db.execute(sql, (last, *args)).fetchall()
        if not rows:
            return
        last = rows[-1][0]
        yield rows


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
    """The fields :func:`agent.regression.versions` reads."""

    environment: dict[str, Any]
    workload: str = ""


class VersionSets:
    """The distinct version sets of a history's runs, numbered as first seen.  Environments repeat, so
    each distinct environment text is parsed once per workload (the versions depend on both: see
    :func:`agent.regression.versions`).  A run that did not say its versions gets the all-empty set,
    whose id is then in ``unknown``."""

    def __init__(self) -> None:
        self.sets: list[dict[str, str]] = []
        self.unknown: set[int] = set()
        self._ids: dict[tuple[str, ...], int] = {}
        self._seen: dict[tuple[str, str], int] = {}

    def id(self, environment: str, workload: str) -> int:
        vid = self._seen.get((environment, workload))
        if vid is None:
            from agent.regression import VERSION_KEYS, versions

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

def analyse(history: History, *, settings: Any = None, figures: Iterable[str] | None = None,
            progress: Any = None) -> list[dict[str, Any]]:
    """Every shift of every watched figure of every series, oldest first.  ``settings``
    (:class:`agent.regression.Settings`) give each figure's minimum effect, as for the online
    verdicts (``regression.min_effect`` and ``[regression.effects]``)."""
    import numpy as np

    from agent import regression as rg
    from agent.changepoints import find_change_points

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
            min_effect = settings.effects_for(figure, s.key[4])[1]
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
    online detector's :func:`agent.regression.version_breaks` finds them."""
    return [i for i in range(1, len(vids)) if vids[i] != vids[i - 1]]


def _shift(s: Series, figure: str, cp: Any, old: dict[str, str], new: dict[str, str], at: float) -> dict[str, Any]:
    from agent import regression as rg

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
    from agent.regression import series_label

    rows = [("when (UTC)", "state", "change", "p", "host", "gpu", "series", "mode/pass", "figure",
             "median before \u2192 after", "runs before | after", "version change")]
    for s in shifts:
        when = datetime.fromtimestamp(s["at"], timezone.utc).strftime("%Y-%m-%d %H:%M")
        label = series_label(SimpleNamespace(precision=s["precision"], workload=s["workload"], shape=s["shape"]))
        rows.append((when, s["state"], _percent(s["change_ratio"]), _p(s["p_value"]), s["hostname"], s["gpu"],
                     label, f"{s['mode'] or '-'}/{s['pass'] or '-'}", s["figure"],
                     f"{s['median_before']:.4g} \u2192 {s['median_after']:.4g}",
                     f"{s['runs_before']} | {s['runs_after']}", _versions(s)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


class _Progress:
    """'analysing series k/N' on stderr, rewritten in place, only on a terminal."""

    def __init__(self, stream: Any):
        self.stream = stream
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self.shown = 0.0

    def __call__(self, number: int, total: int) -> None:
        now = time.monotonic()
        if self.tty and (now - self.shown >= 0.2 or number == total):
            self.shown = now
            self.stream.write(f"\r\033[Ksixdim: analysing series {number}/{total}")
            self.stream.flush()

    def clear(self) -> None:
        if self.tty and self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()


def command_regressions(args: argparse.Namespace) -> int:
    config = load(args.config, flags=args)
    started = time.perf_counter()
    history = read_history(config.history, args.workload)
    progress = _Progress(sys.stderr)
    try:
        shifts = analyse(history, settings=regression_settings(config), figures=args.figure, progress=progress)
    finally:
        progress.clear()
    if args.since is not None:
        cutoff = time.time() - args.since
        shifts = [s for s in shifts if s["at"] >= cutoff]
    if args.state:
        shifts = [s for s in shifts if s["state"] == args.state]
    if args.json:
        print(json.dumps(shifts, indent=2))
        return EXIT_OK
    seconds = time.perf_counter() - started
    scope = f" since {_ago(args.since)}" if args.since is not None else ""
    examined = f"{history.runs} ok runs of {len(history.series)} series in {config.history} ({seconds:.1f} s)"
    if not shifts:
        print(f"no shifts found{scope}: {examined}")
        return EXIT_OK
    regressions = sum(s["state"] == "regression" for s in shifts)
    print(table(shifts))
    print(f"\n{len(shifts)} shift(s){scope}: {regressions} regression(s), {len(shifts) - regressions} improvement(s); "
          f"{examined}")
    return EXIT_OK


def _ago(seconds: float) -> str:
    """The --since cutoff as a UTC time."""
    return datetime.fromtimestamp(time.time() - seconds, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
