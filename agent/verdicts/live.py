"""The agent's live regression verdicts: one tracker per series and watched figure, fed run by run.

The board (agent/http/board.py) hands every run it shows to :meth:`Verdicts.add`, in the order the
history recorded them, so a verdict is updated the moment its run is recorded, and the exporter
reads :meth:`Verdicts.snapshot` for ``sixdim_regression_state``, ``sixdim_regression_ratio``,
``sixdim_baseline_value`` and ``sixdim_version_change_ratio``.

**Restored at start** from the last :attr:`Verdicts.restore_runs` runs of each series (the most any
tracker keeps: see ``SeriesTracker._trim``), so a restart gives the same verdicts as the agent that
stopped, without reading a whole history.

**Version changes** start a new segment in every tracker of the series (a new driver's runs are
never judged against the old driver's baseline) and are judged on their own by
:func:`sixdim.verdicts.detector.version_verdict`: the last runs before against the first runs after.  The
latest change of a series is kept while it lies among the series' last ``restore_runs`` runs, the
same span a restart restores, so what is exported does not depend on when the agent last restarted.

Only the standard library and agent/verdicts/detector.py: the daemon stays light.
"""

from __future__ import annotations

import logging
import math
import struct
import threading
import time
from array import array
from collections import deque
from dataclasses import dataclass, field

from sixdim.core.conditions import SETTING_KEYS
from sixdim.core.results import RunRecord
from sixdim.store.history import History
from sixdim.verdicts import detector as regression
from sixdim.verdicts.causes import Finding, Packed, diagnose, pack, unpack
from sixdim.verdicts.detector import INCORRECT, SeriesTracker, Settings, Verdict, VersionVerdict

log = logging.getLogger("sixdim")


@dataclass
class _Change:
    """The latest version change of a series, and the runs either side of it."""

    changes: dict[str, tuple[str, str]]
    at: float
    before: dict[str, list[float]]
    after: dict[str, list[float]] = field(default_factory=dict)
    age: int = 0
    """Runs of the series since the change (the change is forgotten after ``restore_runs``)."""
    verdicts: dict[str, VersionVerdict] = field(default_factory=dict)
    conditions_before: list[bytes] = field(default_factory=list)
    conditions_after: list[bytes] = field(default_factory=list)
    """The conditions of the runs either side (for the diagnosis of a regression at the change)."""


CAUSE_RUNS = 20
"""Runs each side of a change whose conditions the diagnosis compares."""


def _labels_only(record: RunRecord) -> RunRecord:
    """The newest run of a series is kept for its labels only (they name its exported verdicts): not its
    figures, details or conditions (packed apart), which for 5,000 series are tens of megabytes."""
    if not (record.details or record.conditions or record.figures):
        return record
    kept = object.__new__(RunRecord)  # a copy without __init__'s checks: it is a valid record's
    kept.__dict__.update(record.__dict__)
    kept.details, kept.conditions, kept.figures = {}, {}, {}
    return kept


def _entry(at: float, packed: Packed) -> bytes:
    """A run's start time and its packed conditions as one bytes object, the conditions in single
    precision: each series keeps its last runs' (5,000 series: about 100,000 of them), and a tuple of a
    float and a double array cost twice as much.  Single precision is ample for the diagnosis (it
    compares conditions with thresholds of a few percent; a text's index and every setting are exact)."""
    return struct.pack("<d", at) + array("f", packed).tobytes()


def _at(entry: bytes) -> float:
    return struct.unpack_from("<d", entry)[0]


def _open(entry: bytes) -> dict:
    """The conditions of an :func:`_entry`."""
    return unpack(memoryview(entry)[8:].cast("f"))  # type: ignore[arg-type]


class SeriesWatch:
    """One series: its trackers (one per watched figure), recent values and its latest version change."""

    def __init__(self, settings: Settings, keep: int) -> None:
        self.settings = settings
        self.keep = keep
        self.record: RunRecord | None = None
        """The newest run, without its details and conditions (its labels name the series' exported verdicts)."""
        self.trackers: dict[str, SeriesTracker] = {}
        self.versions: dict[str, str] | None = None
        self.recent: dict[str, list[float]] = {}
        """Each figure's values of the current segment's last ``version_settle_runs`` accepted runs:
        the "before" side of the next version change (lists: a deque's first block alone is 600 bytes,
        and there is one per figure of every series)."""
        self.change: _Change | None = None
        self.conditions: deque[bytes] = deque(
            maxlen=CAUSE_RUNS + settings.slow_runs + settings.reform_after)
        """(start time, conditions) of the last runs with conditions (:func:`_entry`): the runs before an
        episode's onset and those since, while it lasts until its baseline re-forms."""

    def add(self, record: RunRecord) -> None:
        self.record = _labels_only(record)
        if record.conditions and record.status in ("ok", INCORRECT):
            entry = _entry(record.started_at, pack(record.conditions))
            self.conditions.append(entry)
            if self.change is not None and len(self.change.conditions_after) < CAUSE_RUNS:
                self.change.conditions_after.append(entry)
        versions = regression.versions(record)
        if versions is not None:  # a run that did not say is no version change
            if self.versions is not None:
                for key in SETTING_KEYS:  # a setting not read (a run recovered after a crash) did not change
                    versions[key] = versions[key] or self.versions[key]
            if self.versions is not None and versions != self.versions:
                self._version_change(self.versions, versions, record.started_at)
            self.versions = versions
        if self.change is not None:
            self.change.age += 1
            if self.change.age > self.keep - self.settings.version_settle_runs:
                # forgotten while a restart still reads the runs of both its looks back: the exported
                # change never depends on when the agent last restarted
                self.change = None
        if record.status == INCORRECT:
            if not self.trackers:
                figure = regression.primary_figure(record.figures)
                self.trackers[figure] = SeriesTracker(figure, self.settings, record.workload)
            for tracker in self.trackers.values():
                tracker.update(None, INCORRECT)
            return
        if record.status != "ok":
            return  # a failed or skipped run has no figures to judge; its verdicts stand
        for figure in regression.watched_figures(record.figures):
            value = float(record.figures[figure])
            if not math.isfinite(value):
                continue
            tracker = self.trackers.get(figure)
            if tracker is None:
                tracker = self.trackers[figure] = SeriesTracker(figure, self.settings, record.workload)
            tracker.update(value, at=record.started_at)
            recent = self.recent.setdefault(figure, [])
            recent.append(value)
            if len(recent) > max(self.settings.version_runs, self.settings.version_settle_runs):
                del recent[0]
            self._after(figure, value, record)

    def _version_change(self, old: dict[str, str], new: dict[str, str], at: float) -> None:
        changes = {k: (old[k], new[k]) for k in regression.VERSION_KEYS if old[k] != new[k]}
        self.change = _Change(changes, at, {figure: list(values) for figure, values in self.recent.items()},
                              conditions_before=[c for c in self.conditions if _at(c) < at][-CAUSE_RUNS:],
                              conditions_after=[c for c in self.conditions if _at(c) >= at][:CAUSE_RUNS])
        self.recent = {}
        for tracker in self.trackers.values():
            tracker.break_segment()

    def _after(self, figure: str, value: float, record: RunRecord) -> None:
        change = self.change
        if change is None or figure not in change.before:
            return
        s = self.settings
        after = change.after.setdefault(figure, [])
        if len(after) >= max(s.version_runs, s.version_settle_runs):
            return  # settled
        after.append(value)
        if len(after) <= s.version_runs:  # judged as each of the first runs arrives
            runs = s.version_runs
        elif len(after) == s.version_settle_runs and len(change.before[figure]) >= s.version_settle_runs:
            runs = s.version_settle_runs  # the second look, on more runs each side
        else:
            return
        settled = change.verdicts.get(figure)
        verdict = regression.version_verdict(
            change.before[figure], after, figure, change.changes, s, record.workload,
            regression.series_label(record), change.at, runs=runs)
        if runs == s.version_settle_runs and settled is not None and settled.state == regression.REGRESSION \
                and verdict.state != regression.REGRESSION:
            return  # the second look adds a regression the first runs could not see; it does not take one back
        change.verdicts[figure] = verdict


    def causes(self) -> list[Finding]:
        """The likely causes while a figure of the series is suspicious or regressed (the runs since the
        episode's onset, or the last ``slow_runs``, against the runs before), else while its latest
        version change regressed (the runs either side of it); [] otherwise."""
        noteworthy = (regression.REGRESSION, regression.SUSPICIOUS)
        unhealthy = [t for t in self.trackers.values() if t.last.state in noteworthy]
        entries = list(self.conditions)
        if unhealthy and entries:
            tracker = max(unhealthy, key=lambda t: t.last.code)  # a regression before a suspicious
            if tracker.onset is not None and tracker.onset < len(tracker.times):
                since = tracker.times[tracker.onset]
            elif tracker.times:
                since = tracker.times[-min(self.settings.slow_runs, len(tracker.times))]
            else:  # judged on incorrect results only: the last runs against those before
                since = _at(entries[-min(self.settings.slow_runs, len(entries))])
            before = [_open(c) for c in entries if _at(c) < since][-CAUSE_RUNS:]
            after = [_open(c) for c in entries if _at(c) >= since][-CAUSE_RUNS:]
            return diagnose(before, after)
        change = self.change
        if change is not None and any(v.state == regression.REGRESSION for v in change.verdicts.values()):
            return diagnose([_open(c) for c in change.conditions_before], [_open(c) for c in change.conditions_after],
                            change.changes)
        return []


@dataclass(frozen=True)
class SeriesVerdicts:
    """What the exporter shows of one series: its newest run (labels) and its verdicts."""

    record: RunRecord
    verdicts: dict[str, Verdict]
    changes: dict[str, VersionVerdict]
    """The latest version change's verdict per figure, while it is recent."""
    causes: list[Finding] = field(default_factory=list)
    """The likely causes, ranked, while the series is suspicious or regressed (:meth:`SeriesWatch.causes`)."""


class Verdicts:
    """Every series' watch, keyed by ``RunRecord.key()``; safe to use from several threads."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        s = self.settings
        self.restore_runs = 2 * s.kept_runs
        """Runs per series read back at start: the most a tracker keeps (it trims to half of it)."""
        self._lock = threading.Lock()
        self._series: dict[tuple[str, ...], SeriesWatch] = {}
        self._backlog: list[RunRecord] | None = None
        """Runs added while a restore is under way: fed after the restored ones, in order."""
        self.restored = threading.Event()
        """Set once the verdicts cover the history (at once when nothing is restored)."""
        self.restored.set()
        self.restore_seconds = 0.0

    def add(self, record: RunRecord) -> None:
        """Feed one run (in the order runs were recorded)."""
        with self._lock:
            if self._backlog is not None:
                self._backlog.append(record)
                return
            self._add_locked(record)

    def _add_locked(self, record: RunRecord) -> None:
        watch = self._series.get(record.key())
        if watch is None:
            watch = self._series[record.key()] = SeriesWatch(self.settings, self.restore_runs)
        watch.add(record)

    def peer_causes(self, key: tuple[str, ...], peers: list[tuple[str, ...]]) -> list[Finding]:
        """The likely causes of a series being slower than the same result on its peer GPUs: its last
        ``slow_runs`` runs' conditions against theirs (the evidence's "A → B" reads "its peers' A, its
        own B"); [] where it or they have no recorded conditions."""
        runs = self.settings.slow_runs
        with self._lock:
            own = self._series.get(key)
            if own is None or not own.conditions:
                return []
            after = [_open(c) for c in list(own.conditions)[-runs:]]
            before = [_open(c) for peer in peers if (w := self._series.get(peer)) is not None
                      for c in list(w.conditions)[-runs:]]
        return diagnose(before, after) if before else []

    def restore(self, history: History, upto_id: int | None = None) -> int:
        """Feed the last runs of every series from the history (row ids up to ``upto_id``: the
        board feeds the later ones); returns how many runs were read.  A history that cannot be
        read leaves the verdicts to form from new runs."""
        started = time.perf_counter()
        count = 0
        try:
            for record in history.recent_per_series(self.restore_runs, upto_id):
                with self._lock:
                    self._add_locked(record)
                count += 1
        except Exception as exc:  # locked, unreadable: verdicts form again from the runs to come
            log.warning("regression verdicts: the history could not be read (%s); they form from new runs", exc)
        with self._lock:
            for record in self._backlog or ():
                self._add_locked(record)
            self._backlog = None
        self.restore_seconds = time.perf_counter() - started
        self.restored.set()
        if count:
            log.info("regression verdicts restored from %d run(s) of %d series in %.2f s", count,
                     len(self._series), self.restore_seconds)
        return count

    def restore_in_background(self, history: History, upto_id: int | None = None) -> threading.Thread:
        """:meth:`restore` on its own thread, so the agent serves at once; runs recorded meanwhile
        wait and are fed after the restored ones.  Until it is done, a series shows no verdict."""
        with self._lock:
            self._backlog = []
        self.restored.clear()
        thread = threading.Thread(target=self.restore, args=(history, upto_id), daemon=True, name="verdicts")
        thread.start()
        return thread

    def snapshot(self) -> list[SeriesVerdicts]:
        with self._lock:
            return [SeriesVerdicts(w.record, {figure: t.last for figure, t in w.trackers.items()},
                                   dict(w.change.verdicts) if w.change is not None else {}, w.causes())
                    for w in self._series.values() if w.record is not None and (w.trackers or w.change)]
