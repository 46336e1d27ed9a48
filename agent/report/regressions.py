"""``sixdim report regressions``: every shift in the whole history, found by change-point analysis.

The online detector (:mod:`sixdim.verdicts.detector`) says whether a series is regressed *now*; this
report looks back: for every series (``RunRecord.key()``) and every watched figure of its ``ok``
runs, it runs E-Divisive means with rank-based decisions (:mod:`sixdim.verdicts.changepoints`, with
version changes as known break points) and lists each shift with its time, change, p-value and
the software versions either side, and each slow drift with its span and total change (a drift
is never put down to a version change).  Each regression listed gets its likely causes
(:func:`add_causes`): the conditions recorded with the runs either side of it, compared by
:func:`sixdim.verdicts.causes.diagnose`.  See docs/REGRESSIONS.md, "Looking back".

It reads the history read-only (``mode=ro``), in chunks of :data:`READ_CHUNK` rows, each its own short
read, so it never writes the agent's database and holds no lock for long; it reads only the
columns it needs (never ``details``, nor ``conditions``), and SQLite reads the watched figures out of
the ``figures`` JSON.  A series' runs are held as float arrays of the figures it has, and the
analysis works a bounded pass at a time (:data:`ANALYSIS_POINTS`), so the memory grows by about
150 bytes a run.  The conditions are read afterwards, by id, only for the runs around the shifts
listed (at most :data:`CAUSE_RUNS` each side).  This module is imported by
:mod:`sixdim.report.command` (and so by the command line) to register the command's arguments, so it
imports nothing heavy at import time: numpy and the analysis load inside the command.

Exit codes: 0 when the report was made, whether or not it found a shift (a report, not a check:
alert on ``sixdim_regression_state``); 2 for bad usage, bad configuration, or a history that is
missing or not a sixdim database (the message names the file).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any, TypeGuard

from sixdim.config import add_insecure_permissions_flag, add_option_flags, load
from sixdim.core import exits, text
from sixdim.core.catalog import WATCHED
from sixdim.core.conditions import VERSION_KEYS
from sixdim.core.durations import EXAMPLES, duration_argument
from sixdim.core.results import SeriesKey
from sixdim.report import incidents
from sixdim.store import reader
from sixdim.store.rows import FigureRow
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
                        help=f"list only shifts at or after now - DURATION, and the incidents open or ended since: "
                             f"{EXAMPLES} (default: all; the analysis always uses the whole history)")
    parser.add_argument("--workload", "-w", action="append", metavar="NAME", help="only this workload (repeatable)")
    parser.add_argument("--figure", action="append", type=_figure, metavar="NAME",
                        help="only this watched figure, e.g. flops or seconds (repeatable)")
    parser.add_argument("--state", choices=("regression", "improvement", "drift", "suspicious"),
                        help="only the regressions (shifts and the agent's incidents), only the improvements, only "
                             "the drifts, or only the incidents that stayed suspicious (default: all)")
    parser.add_argument("--json", action="store_true",
                        help="print a JSON list of shifts, drifts and incidents instead of the tables")
    add_option_flags(parser, OPTION_KEYS)
    add_insecure_permissions_flag(parser)


# ---------------------------------------------------------------------------- reading

@dataclass
class Series:
    """The ok runs of one series, as read (not yet in time order): :attr:`rows` and :attr:`ids` where
    they were added one at a time (the HTML report's reading, :mod:`sixdim.report.data`), or
    :attr:`parts` where :func:`read_history` read them; :meth:`table` and :meth:`run_ids` give either."""

    key: SeriesKey
    model_name: str = ""
    rows: list[tuple[float, ...]] = field(default_factory=list)
    """Per run: started_at, ended_at, version-set id, then each watched figure (not finite where
    absent: NaN or +inf), in the order of :attr:`OkRuns.figures`."""
    ids: list[int] = field(default_factory=list)
    """Each run's row id, in the order of :attr:`rows` (to read the conditions of a few, by id)."""
    parts: list[tuple[Any, Any, Any]] = field(default_factory=list)
    """The runs as :func:`read_history` read them, a part per chunk: (the columns of :meth:`table` it
    holds, its float array of runs x those columns, its row ids).  Only the columns of the figures
    the series has are held (a GEMM reports 6 of the 16 watched figures): an array of every column
    for the whole history held twice the memory, and a tuple of floats per run ten times."""

    def add_part(self, columns: Any, table: Any, ids: Any) -> None:
        """Add the runs of a chunk; beyond :data:`MAX_PARTS` parts, they are joined into one (the
        small arrays of a long history's chunks would otherwise cost more than their values)."""
        self.parts.append((columns, table, ids))
        if len(self.parts) >= MAX_PARTS:
            import numpy as np

            columns = np.unique(np.concatenate([c for c, _, _ in self.parts]))
            self.parts = [(columns, self._joined(columns), np.concatenate([i for _, _, i in self.parts]))]

    def _joined(self, columns: Any) -> Any:
        """The parts' runs in one float array of these columns (increasing; NaN where a part has none)."""
        import numpy as np

        out = np.full((sum(len(t) for _, t, _ in self.parts), columns.size), math.nan)
        at = 0
        for cols, t, _ in self.parts:
            out[at:at + len(t), np.searchsorted(columns, cols)] = t
            at += len(t)
        return out

    def table(self, width: int) -> Any:
        """Every run (as :attr:`rows` describes them) as one float array of ``width`` columns."""
        import numpy as np

        if self.parts:
            return self._joined(np.arange(width))
        return np.asarray(self.rows, dtype=float).reshape(-1, width)

    def times(self) -> Any:
        """Each run's start and end (runs x 2), in the order of :meth:`table`."""
        import numpy as np

        if self.parts:  # every part holds the first three columns
            return np.concatenate([t[:, :2] for _, t, _ in self.parts])
        return np.array([row[:2] for row in self.rows], dtype=float).reshape(-1, 2)

    def run_ids(self) -> Any:
        """Each run's row id, in the order of :meth:`table`."""
        import numpy as np

        if self.parts:
            return np.concatenate([i for _, _, i in self.parts])
        return np.asarray(self.ids, dtype=np.int64)


MAX_PARTS = 32
"""Parts a series holds before they are joined (:meth:`Series.add_part`)."""


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


READ_CHUNK = 5_000
"""Rows per read of :func:`read_history`: each chunk is a list of tuples of Python objects (about
1.5 kB a row) until it is made arrays, so a smaller chunk holds less; the reads stay short either way."""


def read_history(path: str, workloads: Sequence[str] | None = None) -> OkRuns:
    """The ok runs of every series: ids in increasing order, :data:`READ_CHUNK` rows per read.  Only
    the watched figures are kept, read out of each row's JSON by SQLite as one list
    (:func:`figure_table`), and each distinct environment is parsed once.  Each chunk is made float
    arrays at once and split by series (:attr:`Series.parts`)."""
    import numpy as np

    figures = tuple(WATCHED)
    width = 3 + len(figures)
    query = reader.RunsQuery(FigureRow, ok_only=True, workloads=tuple(workloads or ()), figure_values=figures,
                             chunk=READ_CHUNK)
    found: list[Series] = []
    number: dict[SeriesKey, int] = {}
    versions = VersionSets()
    runs = 0
    with reader.reading(path) as db:
        for rows in reader.chunks(db, query):
            runs += len(rows)
            series_of: list[int] = []
            for row in rows:
                key = row.key
                k = number.get(key)
                if k is None:
                    k = number[key] = len(found)
                    found.append(Series(key))
                found[k].model_name = row.model_name
                series_of.append(k)
            which = np.array(series_of, dtype=np.intp)
            table = np.empty((len(rows), width))
            table[:, 0] = [row.started_at for row in rows]
            table[:, 1] = [row.ended_at for row in rows]
            table[:, 2] = [versions.id(row.environment, row.workload) for row in rows]
            table[:, 3:] = figure_table([row.figure_values for row in rows], [row.unread_figures for row in rows],
                                        figures)
            ids = np.array([row.id for row in rows], dtype=np.int64)
            del rows
            order = np.argsort(which, kind="stable")
            cuts = np.flatnonzero(np.diff(which[order])) + 1
            for part in np.split(order, cuts):
                mine = table[part]
                columns = np.flatnonzero(np.isfinite(mine).any(axis=0) | (np.arange(width) < 3))
                found[int(which[part[0]])].add_part(columns, mine[:, columns], ids[part])
    return OkRuns({s.key: s for s in found}, versions.sets, figures, runs, frozenset(versions.unknown))


_NOT_A_NUMBER = re.compile(r"[^-+.,0-9eE]")
"""Anything in a list of values but a number, a comma and +inf (``1e999``): a bool, a text, an object."""


def figure_table(values: Sequence[str | None], raw: Sequence[str | None], figures: Sequence[str]) -> Any:
    """The figures of a chunk of runs as one float array (runs x figures, +inf or NaN where absent or
    not a number), from what :class:`sixdim.store.reader.RunsQuery` reads with ``figure_values``: per
    run, the JSON array of its values (``values``), or its whole ``figures`` text where SQLite could
    not read it (``raw``: a NaN or an infinity).  A chunk of numbers only, the usual case, is parsed
    by numpy in one call; any other chunk a run at a time (a bool or a text is no figure)."""
    import numpy as np

    n, k = len(values), len(figures)
    listed = max(2, k)  # a single figure is asked for twice
    out = np.full((n, k), math.nan)
    read = [i for i, v in enumerate(values) if v is not None]
    if read:
        text = ",".join([values[i][1:-1] for i in read])  # type: ignore[index]
        if not _NOT_A_NUMBER.search(text):
            flat = np.fromstring(text, sep=",")
            if flat.size == len(read) * listed:
                out[read] = flat.reshape(len(read), listed)[:, :k]
                read = []
    for i in read:  # a chunk with something other than numbers in its lists: a run at a time
        out[i] = [float(v) if type(v) in (float, int) else math.inf for v in json.loads(values[i])[:k]]  # type: ignore[arg-type]
    for i, whole in enumerate(raw):
        if whole is not None:
            parsed = json.loads(whole)
            if isinstance(parsed, dict):
                out[i] = [float(v) if isinstance(v := parsed.get(name), (float, int)) and not isinstance(v, bool)
                          else math.nan for name in figures]
    return out


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
            from sixdim.verdicts.detector import versions

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

ANALYSIS_POINTS = 250_000
"""Figure values analysed in one pass of :func:`analyse` at most (each pass screens its series'
windows together): each value holds about 60 bytes of working arrays while its pass runs, so a pass
of all 300,000 runs of a history at once (two million values) held 130 MiB, and one of 250,000
values holds 15 MiB and screens over 10,000 windows in one go, as fast as all of them."""


def analyse(history: OkRuns, *, settings: Any = None, figures: Iterable[str] | None = None,
            progress: Any = None, drifts: bool = False) -> list[dict[str, Any]]:
    """Every shift of every watched figure of every series, oldest first.  ``settings``
    (:class:`sixdim.verdicts.detector.Settings`) give each figure's minimum effect, as for the online
    verdicts (``regression.min_effect`` and ``[regression.effects]``).  ``drifts``: list the slow
    drifts too (``"kind": "drift"``); a shift is ``"kind": "shift"``.

    The series and figures are prepared a pass at a time (:data:`ANALYSIS_POINTS` values a pass), and
    the change points of each pass's are found in one call
    (:func:`sixdim.verdicts.changepoints.find_changes_many`): its split windows are screened in numpy
    batches across series, which is most of the speed over a large history, and the memory stays
    that of one pass whatever the history's size."""
    import numpy as np

    from sixdim.verdicts import detector as rg

    settings = settings or rg.Settings()
    chosen = set(history.figures if figures is None else figures)
    wanted = [j for j, figure in enumerate(history.figures) if figure in chosen]
    width = 3 + len(history.figures)
    counts = {key: np.isfinite(s.table(width)[:, [3 + j for j in wanted]]).sum(axis=0)
              for key, s in history.series.items()}
    total = sum(int((c >= 2).sum()) for c in counts.values())
    shifts: list[dict[str, Any]] = []
    batch: list[Series] = []
    points = done = 0
    for key, s in history.series.items():
        batch.append(s)
        points += int(counts[key].sum())
        if points >= ANALYSIS_POINTS:
            done = _analyse_pass(history, batch, wanted, settings, drifts, progress, (done, total), shifts)
            batch, points = [], 0
    if batch:
        _analyse_pass(history, batch, wanted, settings, drifts, progress, (done, total), shifts)
    shifts.sort(key=lambda d: (d["at"], d["hostname"], d["gpu"], d["workload"], d["precision"], d["shape"],
                               d["figure"], d["kind"]))
    return shifts


def _analyse_pass(history: OkRuns, batch: list[Series], wanted: list[int], settings: Any, drifts: bool,
                  progress: Any, counted: tuple[int, int], shifts: list[dict[str, Any]]) -> int:
    """One pass of :func:`analyse`: the shifts and drifts of these series, added to ``shifts``.
    ``counted``: the series-figures done before this pass and in all, for ``progress(k, total)``;
    returns those done after it."""
    import numpy as np

    from sixdim.verdicts.changepoints import find_changes_many

    items: list[tuple[Any, list[int], float]] = []
    where: list[tuple[Series, str, Any, Any]] = []
    width = 3 + len(history.figures)
    for s in batch:
        runs = s.table(width)
        runs = runs[np.lexsort((runs[:, 1], runs[:, 0]))]  # by start, then end, as group_series sorts
        started, vids = runs[:, 0], runs[:, 2].astype(int)
        for j in wanted:
            keep = np.flatnonzero(np.isfinite(runs[:, j + 3]))
            if keep.size < 2:
                continue
            figure = history.figures[j]
            said = _settings_carried(_versions_said(vids[keep], history.unknown), history.versions)
            min_effect = settings.effects_for(figure, s.key.workload)[1]
            items.append((runs[keep, j + 3], version_breaks(said), min_effect))
            where.append((s, figure, said, started[keep]))
    done, total = counted

    def step(number: int, _: int) -> None:
        progress(done + number, total)

    found_all = find_changes_many(items, drifts=drifts, progress=step if progress is not None else None)
    for (s, figure, said, started), found in zip(where, found_all):
        for cp in found.points:
            before, after = int(said[cp.index - 1]), int(said[cp.index])
            shifts.append(_shift(s, figure, cp, history.versions[before], history.versions[after],
                                 float(started[cp.index])))
        for d in found.drifts:
            first, last = history.versions[int(said[d.start])], history.versions[int(said[d.end - 1])]
            shifts.append(_drift(s, figure, d, first, last, float(started[d.start]), float(started[d.end - 1])))
    return done + len(items)


def _settings_carried(vids: Any, sets: list[dict[str, str]]) -> Any:
    """A run that read no GPU setting (one recovered after its agent died says its versions but not
    its power limit) changed none: it takes the settings of the run before it, as the live verdicts
    do, so it is no break point.  New combinations are added to ``sets``."""
    import numpy as np

    from sixdim.core.conditions import SETTING_KEYS

    blank = [i for i, v in enumerate(sets) if not any(v.get(k) for k in SETTING_KEYS)]
    vids = np.asarray(vids, dtype=int)
    if not blank or vids.size < 2 or np.isin(vids, blank).all() or not np.isin(vids, blank).any():
        return vids
    out = vids.copy()
    index = {tuple(v.values()): i for i, v in enumerate(sets)}
    empty = set(blank)
    for i in range(1, out.size):
        if out[i] in empty and out[i - 1] not in empty:
            merged = {**sets[out[i]], **{k: sets[out[i - 1]][k] for k in SETTING_KEYS}}
            j = index.get(tuple(merged.values()))
            if j is None:
                j = index[tuple(merged.values())] = len(sets)
                sets.append(merged)
            out[i] = j
    return out


def _versions_said(vids: Any, unknown: frozenset[int]) -> Any:
    """Each run's version set (a numpy array of ids), a run that did not say its versions taking the
    last one said before it (the first ones, the first said after them; all unknown if none was said)."""
    import numpy as np

    vids = np.asarray(vids, dtype=int)
    if not unknown or vids.size == 0:
        return vids
    said = ~np.isin(vids, list(unknown))
    if not said.any():
        return vids
    last = np.maximum.accumulate(np.where(said, np.arange(vids.size), -1))
    last[last < 0] = np.flatnonzero(said)[0]
    return vids[last]


def version_breaks(vids: Sequence[int]) -> list[int]:
    """Positions whose version set differs from the run before: the known break points, as the
    online detector finds them (its own version breaks)."""
    import numpy as np

    ids = np.asarray(vids)
    return [int(i) for i in np.flatnonzero(ids[1:] != ids[:-1]) + 1]


SHIFT, DRIFT = "shift", "drift"
"""The kinds of what the report lists (``"kind"``); a drift's ``"state"`` is ``"drift"`` too."""
WORSE, BETTER = "worse", "better"
"""Which way a shift or a drift moved its figure (``"direction"``)."""
STATES = ("regression", "improvement", DRIFT)
"""The states of what the report lists: a shift is a regression or an improvement, by its figure's
direction; a drift is a drift, whichever way it goes (its ``"direction"`` says), so that a consumer
counting ``"state": "regression"`` counts steps only, never a drift."""


def _head(s: Series, figure: str, kind: str, before: float, after: float, ratio: float | None) -> dict[str, Any]:
    """The fields a shift and a drift share: the series, the figure, the kind, the state, the
    direction and the change."""
    from sixdim.verdicts import detector as rg

    change = (ratio - 1.0) if ratio is not None else math.copysign(math.inf, after - before)
    worse = rg.WATCHED[figure] * change > 0
    hostname, device_type, gpu, uuid, workload, precision, shape, mode, kernel_pass = s.key
    return {
        "hostname": hostname, "device_type": device_type, "gpu": gpu, "uuid": uuid, "model_name": s.model_name,
        "workload": workload, "precision": precision, "shape": shape, "mode": mode, "pass": kernel_pass,
        "figure": figure, "kind": kind,
        "state": DRIFT if kind == DRIFT else rg.REGRESSION if worse else rg.IMPROVEMENT,
        "direction": WORSE if worse else BETTER,
        "change_ratio": ratio,
    }


def _shift(s: Series, figure: str, cp: Any, old: dict[str, str], new: dict[str, str], at: float) -> dict[str, Any]:
    return {
        **_head(s, figure, SHIFT, cp.median_before, cp.median_after, cp.ratio),
        "p_value": cp.p_value,
        "at": at,
        "at_utc": incidents.utc(at),
        "median_before": cp.median_before, "median_after": cp.median_after,
        "runs_before": cp.runs_before, "runs_after": cp.runs_after,
        "versions_before": dict(old), "versions_after": dict(new),
        "version_changed": [k for k in VERSION_KEYS if old.get(k) != new.get(k)],
    }


def _drift(s: Series, figure: str, d: Any, first: dict[str, str], last: dict[str, str], at: float,
           until: float) -> dict[str, Any]:
    """A drift: the fitted level at its first and last run, over how many runs; never put down to
    a version change (``version_changed`` is empty even where the versions differ between its ends)."""
    return {
        **_head(s, figure, DRIFT, d.level_start, d.level_end, d.ratio),
        "p_value": d.p_value,
        "at": at, "at_utc": incidents.utc(at), "until": until, "until_utc": incidents.utc(until),
        "level_start": d.level_start, "level_end": d.level_end, "runs": d.runs,
        "versions_before": dict(first), "versions_after": dict(last), "version_changed": [],
    }


# ---------------------------------------------------------------------------- likely causes

CAUSE_RUNS = 20
"""Runs each side of a shift, or at each end of a drift, whose conditions are compared: as many as
the live verdicts compare (``sixdim.verdicts.live.CAUSE_RUNS``)."""
CAUSES_LISTED = 3
"""Causes listed per shift at most, most likely first."""


def _series_key(shift: Mapping[str, Any]) -> tuple[str, ...]:
    return (shift["hostname"], shift["device_type"], shift["gpu"], shift["uuid"], shift["workload"],
            shift["precision"], shift["shape"], shift["mode"], shift["pass"])


def recorded(conditions: dict[str, Any] | None) -> TypeGuard[dict[str, Any]]:
    """Whether a run recorded any condition (not only the reasons some could not be read)."""
    from sixdim.core.conditions import UNAVAILABLE

    return conditions is not None and any(name != UNAVAILABLE for name in conditions)


def add_causes(shifts: list[dict[str, Any]], series: Mapping[tuple[str, ...], Series], path: str,
               runs: int = CAUSE_RUNS) -> None:
    """Give each shift and drift its ``"causes"``: a list of ``{"cause", "evidence"}``, most likely
    first (at most :data:`CAUSES_LISTED`), from :func:`sixdim.verdicts.causes.diagnose` over the
    conditions of the series' ok runs either side of it.

    A shift compares the last ``runs`` ok runs before it with the first ``runs`` from it (fewer where
    the segment either side is shorter), and names its version change, if any, as the last resort; a
    drift compares its first ``runs`` runs with its last ``runs`` (at most half its runs each).  The
    list is ``[{"cause": "none", ...}]`` when no recorded condition changed enough, and empty for an
    improvement or a drift the better way (the diagnosis names causes of a slowdown) or where the runs
    of either side recorded no conditions (a history written before conditions were recorded).
    ``series``: the series the shifts were found in (:attr:`OkRuns.series`), whose
    :meth:`Series.run_ids` say which runs to read; the
    conditions of those runs only are read from the history at ``path``, by id."""
    from bisect import bisect_left, bisect_right

    import numpy as np

    from sixdim.verdicts.causes import diagnose

    ordered: dict[tuple[str, ...], tuple[list[float], list[int]]] = {}
    sides: list[tuple[tuple[int, ...], tuple[int, ...], tuple[tuple[str, tuple[str, str]], ...]] | None] = []
    for shift in shifts:
        key = _series_key(shift)
        s = series.get(key)
        if shift["direction"] != WORSE or s is None:
            sides.append(None)
            continue
        if key not in ordered:  # by start, then end, as analyse sorts
            times, run_ids = s.times(), s.run_ids()
            if len(run_ids) != len(times):
                sides.append(None)
                continue
            order = np.lexsort((times[:, 1], times[:, 0]))
            ordered[key] = (times[order, 0].tolist(), run_ids[order].tolist())
        starts, ids = ordered[key]
        changed: tuple[tuple[str, tuple[str, str]], ...]
        if shift["kind"] == "drift":
            inside = ids[bisect_left(starts, shift["at"]):bisect_right(starts, shift["until"])]
            n = min(runs, len(inside) // 2)
            before, after, changed = inside[:n], inside[len(inside) - n:], ()
        else:
            at = bisect_left(starts, shift["at"])
            before = ids[max(0, at - min(runs, shift["runs_before"])):at]
            after = ids[at:at + min(runs, shift["runs_after"])]
            old, new = shift["versions_before"], shift["versions_after"]
            changed = tuple((k, (old.get(k, ""), new.get(k, ""))) for k in shift["version_changed"])
        sides.append((tuple(before), tuple(after), changed))
    wanted = {run for side in sides if side is not None for run in (*side[0], *side[1])}
    conditions: dict[int, dict[str, Any]] = {}
    if wanted:
        with reader.reading(path) as db:
            conditions = reader.conditions(db, wanted)
    done: dict[Any, list[dict[str, str]]] = {}
    for shift, side in zip(shifts, sides):
        if side is None:
            shift["causes"] = []
            continue
        if side not in done:  # a shift shows in several figures: one diagnosis
            read_before = [c for run in side[0] if recorded(c := conditions.get(run))]
            read_after = [c for run in side[1] if recorded(c := conditions.get(run))]
            findings = diagnose(read_before, read_after, dict(side[2]) or None) if read_before and read_after else []
            done[side] = [f.to_dict() for f in findings[:CAUSES_LISTED]]
        shift["causes"] = [dict(c) for c in done[side]]


# ---------------------------------------------------------------------------- output

def _p(p: float) -> str:
    if p <= 0.0:
        return "<1e-300"
    return f"{p:.2g}" if p < 1e-4 else f"{p:.4f}".rstrip("0").rstrip(".")


def _versions(shift: dict[str, Any]) -> str:
    changed = shift["version_changed"]
    if not changed:
        return "-"
    old, new = shift["versions_before"], shift["versions_after"]
    return ", ".join(f"{k} {old.get(k) or '?'} \u2192 {new.get(k) or '?'}" for k in changed)


def _cause(shift: dict[str, Any]) -> str:
    """The most likely cause's evidence, or ``-`` where there is none (not diagnosed, or no conditions)."""
    causes = shift.get("causes")
    return causes[0]["evidence"] if causes else "-"


def table(shifts: list[dict[str, Any]]) -> str:
    """One line per shift or drift, oldest first, under a header.  A drift's line reads "worse drift"
    (or "better drift"), its levels at its first and last run, and its runs up to when it ends."""
    from sixdim.verdicts.detector import series_label

    rows = [("when (UTC)", "state", "change", "p", "host", "gpu", "series", "mode/pass", "figure",
             "median before \u2192 after", "runs before | after", "version change", "likely cause")]
    for s in shifts:
        label = series_label(SimpleNamespace(precision=s["precision"], workload=s["workload"], shape=s["shape"]))
        if s["kind"] == "drift":
            state, levels = f"{s['direction']} drift", f"{s['level_start']:.4g} \u2192 {s['level_end']:.4g}"
            runs = f"{s['runs']} runs to {incidents.minute(s['until'])}"
        else:
            state, levels = s["state"], f"{s['median_before']:.4g} \u2192 {s['median_after']:.4g}"
            runs = f"{s['runs_before']} | {s['runs_after']}"
        rows.append((incidents.minute(s["at"]), state, incidents.change(s["change_ratio"]), _p(s["p_value"]),
                     s["hostname"], s["gpu"], label, f"{s['mode'] or '-'}/{s['pass'] or '-'}", s["figure"], levels,
                     runs, _versions(s), _cause(s)))
    return text.table(rows)


def command(args: argparse.Namespace) -> int:
    """``sixdim report regressions``: 0 when the report was made, whether or not it lists a shift."""
    config = load(args.config, flags=args)
    started = time.perf_counter()
    history = read_history(config.history, args.workload)
    line = text.Progress(sys.stderr, min_interval=0.2)

    def progress(number: int, total: int) -> None:
        line.update(f"sixdim: analysing series-figure {number}/{total}", force=number == total)

    try:
        shifts = analyse(history, settings=settings_from(config), figures=args.figure, progress=progress, drifts=True)
    finally:
        line.clear()
    if args.since is not None:  # a drift still going on at the cutoff is listed
        cutoff = time.time() - args.since
        shifts = [s for s in shifts if s.get("until", s["at"]) >= cutoff]
    if args.state:
        shifts = [s for s in shifts if s["state"] == args.state]
    add_causes(shifts, history.series, config.history)  # the conditions of the listed shifts' runs only
    now = time.time()
    found = incidents.read(config.history, None if args.since is None else now - args.since, args.workload)
    if args.figure:
        found = [i for i in found if i["figure"] in args.figure]
    if args.state:
        found = [i for i in found if i["state"] == args.state]
    alone = incidents.match(shifts, found)  # a shift the agent's verdicts found carries its incident
    if args.json:
        print(json.dumps(sorted([*shifts, *alone], key=lambda s: s.get("at", s.get("started_at"))), indent=2))
        return exits.OK
    seconds = time.perf_counter() - started
    scope = f" since {_ago(args.since)}" if args.since is not None else ""
    examined = f"{history.runs} ok runs of {len(history.series)} series in {config.history} ({seconds:.1f} s)"
    if found:
        print(f"Incidents of the agent's live verdicts{scope}:")
        print(incidents.table(found, now))
        print(f"{incidents.summary(found)}\n")
    if not shifts:
        print(f"no shifts found{scope}: {examined}")
        return exits.OK
    steps = [s for s in shifts if s["kind"] == "shift"]
    regressions = sum(s["state"] == "regression" for s in steps)
    drifts = len(shifts) - len(steps)
    if found:
        print(f"Change points{scope}:")
    print(table(shifts))
    print(f"\n{len(steps)} shift(s){scope}: {regressions} regression(s), {len(steps) - regressions} improvement(s)"
          + (f"; {drifts} drift(s)" if drifts else "") + f"; {examined}")
    return exits.OK


def _ago(seconds: float) -> str:
    """The --since cutoff as a UTC time."""
    return datetime.fromtimestamp(time.time() - seconds, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
