"""The HTML report's reading of the history: every series' ok runs, figures and versions, read-only
and without ``details`` or ``conditions``, in chunks (as ``report regressions``).  The conditions of
the few runs whose regressions the page explains are read afterwards, by id (agent/report/model.py)."""

from __future__ import annotations

import json
import math
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sixdim.core.catalog import WATCHED
from sixdim.core.results import SeriesKey
from sixdim.report.format import EXTRA_FIGURES
from sixdim.store import reader

# ---------------------------------------------------------------------------- reading

@dataclass
class SeriesData:
    """What the page needs of one series (``RunRecord.key()``)."""

    key: SeriesKey
    model_name: str = ""
    statuses: Counter = field(default_factory=Counter)
    latest: dict[str, tuple[float, int, dict[str, Any]]] = field(default_factory=dict)
    """Per suite: the newest ok run's (ended_at, version-set id, figures), where its shape set is the
    suite's newest for the series' group (:func:`_newest_shape_sets`)."""
    latest_set: dict[str, str] = field(default_factory=dict)
    """Per suite: the shape set of the run in :attr:`latest`."""
    version_runs: list[tuple[float, int]] = field(default_factory=list)
    """(started_at, version-set id) where the version set changed, in recording order."""
    recent: deque = field(default_factory=deque)
    """The last runs as read (for the live verdicts)."""
    cp: Any = None
    """An :class:`sixdim.report.regressions.Series`: every ok run's time, versions and figures."""

    @property
    def device(self) -> tuple[str, str, str, str]:
        return self.key.device

    @property
    def group(self) -> tuple[str, str, str, str]:
        """Workload, precision, mode, pass: what one chart and one summary row stand for."""
        return self.key.workload, self.key.precision, self.key.mode, self.key.kernel_pass


@dataclass
class Data:
    path: str
    series: dict[tuple[str, ...], SeriesData]
    versions: list[dict[str, str]]
    unknown: set[int]
    """Version-set ids of runs that did not say their versions."""
    figures: tuple[str, ...]
    runs: int
    statuses: Counter
    first: float | None
    last: float | None
    interrupted: reader.Interrupted = reader.Interrupted(0, 0)
    """The interrupted suite runs (one record each, not runs), and the cases they left."""


_SELECT = (*reader.SERIES_COLUMNS, "model_name", "suite", "status", "started_at", "ended_at", "figures", "environment",
           "shape_set")


def read(path: str, keep_recent: int) -> Data:
    """Every run of the history, read-only, in chunks, without ``details``: figures of ok runs as
    compact rows, the newest ok run per series and suite, version changes, the last ``keep_recent``
    runs of each series."""
    from sixdim.report.regressions import Series, VersionSets, figure_row

    figures = (*WATCHED, *EXTRA_FIGURES)
    column = {name: 3 + j for j, name in enumerate(figures)}
    width = 3 + len(figures)
    query = reader.RunsQuery(_SELECT)
    series: dict[tuple[str, ...], SeriesData] = {}
    versions = VersionSets()
    statuses: Counter = Counter()
    runs, first, last = 0, math.inf, -math.inf
    with reader.reading(path) as db:
        for rows in reader.chunks(db, query):
            runs += len(rows)
            for row in rows:
                key = SeriesKey(*row[1:10])
                s = series.get(key)
                if s is None:
                    s = series[key] = SeriesData(key, recent=deque(maxlen=keep_recent))
                    s.cp = Series(key)
                s.model_name = row[10]
                status, started = row[12], row[13]
                s.statuses[status] += 1
                statuses[status] += 1
                s.recent.append(row)
                first, last = min(first, started), max(last, started)
                vid = versions.id(row[16], row[5])
                if vid not in versions.unknown and (not s.version_runs or s.version_runs[-1][1] != vid):
                    s.version_runs.append((started, vid))
                if status != "ok":
                    continue
                parsed = json.loads(row[15])
                s.cp.rows.append(figure_row(started, row[14], vid, parsed, column, width))
                s.cp.ids.append(row[0])
                s.cp.model_name = row[10]
                newest = s.latest.get(row[11])
                if newest is None or row[14] >= newest[0]:
                    s.latest[row[11]] = (row[14], vid, parsed)
                    s.latest_set[row[11]] = row[17]
        interrupted = reader.interrupted(db)
    _newest_shape_sets(series.values())
    return Data(path, series, versions.sets, versions.unknown, figures, runs, statuses,
                first if runs else None, last if runs else None, interrupted)


def _newest_shape_sets(series: Any) -> None:
    """Keep in each series' :attr:`SeriesData.latest` only the suites' newest shape sets: a suite whose
    shapes changed (64 MiB copies became 4 MiB ones) is summarised over its newest run's shapes, never
    over those and the dropped shapes' last results (as agent/verdicts/summary.py)."""
    newest: dict[tuple[Any, ...], tuple[float, str]] = {}
    for s in series:
        for suite, (ended, _, _) in s.latest.items():
            at = (s.device, s.group, suite)
            if at not in newest or ended > newest[at][0]:
                newest[at] = (ended, s.latest_set[suite])
    for s in series:
        for suite in [suite for suite in s.latest if s.latest_set[suite] != newest[(s.device, s.group, suite)][1]]:
            del s.latest[suite], s.latest_set[suite]


def record_of(row: Sequence[Any], conditions: dict[str, Any] | None = None) -> Any:
    """A RunRecord of a row as :func:`read` keeps it (no params, device or details: the verdicts
    need none), with its ``conditions`` where they were read (:func:`sixdim.store.reader.conditions`)."""
    from sixdim.core.results import RunRecord

    return RunRecord(suite=row[11], workload=row[5], precision=row[6], params={}, shape=row[7], mode=row[8],
                     kernel_pass=row[9], hostname=row[1], device_type=row[2], device="", gpu=row[3], uuid=row[4],
                     model_name=row[10], pci_bus_id="", status=row[12], reason="", started_at=row[13],
                     ended_at=row[14], figures=json.loads(row[15]), environment=json.loads(row[16]),
                     conditions=conditions or {}, id=row[0])
