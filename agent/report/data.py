"""The HTML report's reading of the history: every series' ok runs, figures and versions, read-only
and without ``details`` or ``conditions``, in chunks (as ``report regressions``).  The conditions of
the few runs whose regressions the page explains are read afterwards, by id (agent/report/model.py)."""

from __future__ import annotations

import json
import math
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sixdim.core.catalog import WATCHED
from sixdim.core.results import RunRecord, SeriesKey
from sixdim.report.format import EXTRA_FIGURES
from sixdim.store import reader
from sixdim.store.rows import RunRow

# ---------------------------------------------------------------------------- reading

class Latest(NamedTuple):
    """A series' newest ok run in one suite, as the six-dimension table summarises it."""

    ended_at: float
    versions: int
    """Its version-set id (an index of :attr:`Data.versions`)."""
    figures: dict[str, Any]


@dataclass
class SeriesData:
    """What the page needs of one series (``RunRecord.key()``)."""

    key: SeriesKey
    model_name: str = ""
    statuses: Counter = field(default_factory=Counter)
    latest: dict[str, Latest] = field(default_factory=dict)
    """Per suite: the newest ok run, where its shape set is the suite's newest for the series' group
    (:func:`_newest_shape_sets`)."""
    latest_set: dict[str, str] = field(default_factory=dict)
    """Per suite: the shape set of the run in :attr:`latest`."""
    version_runs: list[tuple[float, int]] = field(default_factory=list)
    """(started_at, version-set id) where the version set changed, in recording order."""
    recent: deque[RunRow] = field(default_factory=deque)
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
    series: dict[SeriesKey, SeriesData]
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


def read(path: str, keep_recent: int) -> Data:
    """Every run of the history, read-only, in chunks, without ``details``: figures of ok runs as
    compact rows, the newest ok run per series and suite, version changes, the last ``keep_recent``
    runs of each series."""
    from sixdim.report.regressions import Series, VersionSets, figure_row

    figures = (*WATCHED, *EXTRA_FIGURES)
    column = {name: 3 + j for j, name in enumerate(figures)}
    width = 3 + len(figures)
    query = reader.RunsQuery(RunRow)
    series: dict[SeriesKey, SeriesData] = {}
    versions = VersionSets()
    statuses: Counter = Counter()
    runs, first, last = 0, math.inf, -math.inf
    with reader.reading(path) as db:
        for rows in reader.chunks(db, query):
            runs += len(rows)
            for row in rows:
                key = row.key
                s = series.get(key)
                if s is None:
                    s = series[key] = SeriesData(key, recent=deque(maxlen=keep_recent))
                    s.cp = Series(key)
                s.model_name = row.model_name
                status, started = row.status, row.started_at
                s.statuses[status] += 1
                statuses[status] += 1
                s.recent.append(row)
                first, last = min(first, started), max(last, started)
                vid = versions.id(row.environment, row.workload)
                if vid not in versions.unknown and (not s.version_runs or s.version_runs[-1][1] != vid):
                    s.version_runs.append((started, vid))
                if status != "ok":
                    continue
                parsed = json.loads(row.figures)
                s.cp.rows.append(figure_row(started, row.ended_at, vid, parsed, column, width))
                s.cp.ids.append(row.id)
                s.cp.model_name = row.model_name
                newest = s.latest.get(row.suite)
                if newest is None or row.ended_at >= newest.ended_at:
                    s.latest[row.suite] = Latest(row.ended_at, vid, parsed)
                    s.latest_set[row.suite] = row.shape_set
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
        for suite, run in s.latest.items():
            at = (s.device, s.group, suite)
            if at not in newest or run.ended_at > newest[at][0]:
                newest[at] = (run.ended_at, s.latest_set[suite])
    for s in series:
        for suite in [suite for suite in s.latest if s.latest_set[suite] != newest[(s.device, s.group, suite)][1]]:
            del s.latest[suite], s.latest_set[suite]


def record_of(row: RunRow, conditions: dict[str, Any] | None = None) -> RunRecord:
    """A RunRecord of a row as :func:`read` keeps it (no params, device or details: the verdicts
    need none), with its ``conditions`` where they were read (:func:`sixdim.store.reader.conditions`)."""
    return RunRecord(suite=row.suite, workload=row.workload, precision=row.precision, params={}, shape=row.shape,
                     mode=row.mode, kernel_pass=row.kernel_pass, hostname=row.hostname, device_type=row.device_type,
                     device="", gpu=row.gpu, uuid=row.uuid, model_name=row.model_name, pci_bus_id="",
                     status=row.status, reason="", started_at=row.started_at, ended_at=row.ended_at,
                     figures=json.loads(row.figures), environment=json.loads(row.environment),
                     conditions=conditions or {}, id=row.id)
