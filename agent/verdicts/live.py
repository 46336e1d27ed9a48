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

**Incidents** (:class:`Incident`, :meth:`Verdicts.incidents`): a series out of ok, from the first run of the
change until every watched figure is back, with the likely cause found at any run while it lasted kept until
it ends (docs/CAUSES.md); what ``sixdim_regression_cause`` and the alerts show while a series is out of ok.
They are a function of the runs fed alone, so a report can replay them over the history.

Only the standard library and agent/verdicts/detector.py: the daemon stays light.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from sixdim.core.conditions import SETTING_KEYS, VERSION_KEYS
from sixdim.core.results import SERIES_FIELDS, RunRecord, lean, shared
from sixdim.verdicts import detector as regression
from sixdim.verdicts.causes import NONE, Finding, diagnose, pack, unpack
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
    conditions_before: list[int] = field(default_factory=list)
    conditions_after: list[int] = field(default_factory=list)
    """The runs either side whose conditions the diagnosis of a regression at the change compares (their
    :class:`SeriesWatch` run numbers)."""
    times_before: dict[str, list[float]] = field(default_factory=dict)
    times_after: dict[str, list[float]] = field(default_factory=dict)
    """The start times of the runs in ``before`` and ``after``."""
    trends: dict[str, float | None] = field(default_factory=dict)
    """The drift each figure's tracker had named when the change came (relative change per second), or
    None: the version verdict compares the runs after the change against it, so a drift is not blamed on
    the change."""


CAUSE_RUNS = 20
"""Runs each side of a change whose conditions the diagnosis compares."""


ConditionsReader = Callable[[list[int]], dict[int, dict[str, Any]]]
"""Recorded conditions by history row id (:meth:`sixdim.store.history.History.conditions_of`)."""

@runtime_checkable
class RunSource(Protocol):
    """What :meth:`Verdicts.restore` reads runs from when they come with their conditions: the last runs of every
    series, oldest first (the daemon's ``History``; the rows ``sixdim report`` read, ``report.latest._Runs``)."""

    def recent_per_series(self, runs: int, upto_id: int | None = None) -> Iterable[RunRecord]: ...


@runtime_checkable
class ConditionsSource(RunSource, Protocol):
    """A :class:`RunSource` that also gives the runs without their conditions and the conditions back by row id
    (the daemon's ``History``): the verdicts then keep no conditions in memory."""

    def recent_for_verdicts(self, runs: int, upto_id: int | None = None) -> Iterator[tuple[RunRecord, bool]]: ...

    def conditions_of(self, ids: Iterable[int]) -> dict[int, dict[str, Any]]: ...


_UNSAVED = itertools.count(-1, -1)
"""Numbers for runs that have no history row id (not written yet, or no history to read them back from)."""


def _packed(conditions: dict[str, Any]) -> bytes:
    """Conditions kept in memory, in single precision (ample for the diagnosis, which compares them with
    thresholds of a few percent; a text's index and every setting are exact)."""
    return array("f", pack(conditions)).tobytes()


def _opened(packed: bytes) -> dict[str, Any]:
    return unpack(memoryview(packed).cast("f"))  # type: ignore[arg-type]


OUT_OF_OK = (regression.REGRESSION, regression.SUSPICIOUS)
"""The states that open an incident (an incorrect result is a regression)."""

CLOSED_KEPT = 4
"""Closed incidents kept per series, the newest: what a report lists as recently closed (a few hundred
bytes each; most series never have one)."""


@dataclass(frozen=True)
class Incident:
    """One episode of a series out of ok (:meth:`Verdicts.incidents`): from the first run of the change until
    every watched figure of the series is back to ok (or improvement, or insufficient data after a version
    change); what a person paged needs: what, since when, how much, why, and whether it still goes on."""

    series: str
    """The series' label (``sixdim.verdicts.detector.series_label``)."""
    key: tuple[str, ...]
    """``RunRecord.key()`` of the series."""
    figure: str
    """The watched figure that reached the worst state (the first to reach it)."""
    state: str
    """The worst state reached: ``regression`` or ``suspicious``."""
    started_at: float
    """The first run of the change (Unix seconds): the episode's onset where the detector has one, else the first
    run worse than the baseline by the minimum effect, else (an incorrect result) the run that opened it."""
    ended_at: float | None
    """The run that brought every figure back (None while it goes on)."""
    baseline: float | None
    """The figure's baseline when its ratio was at its worst."""
    ratio: float | None
    """current / baseline of the figure at its worst (furthest the worse way)."""
    latest_ratio: float | None
    """current / baseline of the figure after the latest run of the incident."""
    now: str
    """The figure's state after the latest run (``ok``, ... once it ended)."""
    last_at: float
    """The latest run of the series fed while it was open."""
    causes: tuple[Finding, ...]
    """The likely causes, ranked: the last named diagnosis of the conditions since :attr:`started_at` against
    those before it, made at every run while it was open; ``(NONE,)`` where none ever named one; ``()`` where
    no run recorded conditions."""
    reason: str = ""
    """The detector's reason at the worst state ("incorrect result", ...)."""
    opened_at: float = 0.0
    """The run at which the live verdicts first saw it (the series left ok): when it was found, which is after
    :attr:`started_at` by the runs a rule needs."""
    regressed_at: float | None = None
    """The first run at which it was a regression (None where it stayed suspicious)."""
    model_name: str = ""

    @property
    def open(self) -> bool:
        return self.ended_at is None

    def row(self) -> dict[str, Any]:
        """The incident as the history keeps it (:data:`sixdim.store.schema.INCIDENT_COLUMNS`): what the
        reports list of the agent's live verdicts (docs/REPORT.md)."""
        return {**dict(zip(SERIES_FIELDS, self.key, strict=True)), "model_name": self.model_name,
                "series": self.series, "figure": self.figure, "state": self.state, "now": self.now,
                "opened_at": self.opened_at, "started_at": self.started_at, "regressed_at": self.regressed_at,
                "ended_at": self.ended_at, "last_at": self.last_at, "baseline": self.baseline, "ratio": self.ratio,
                "latest_ratio": self.latest_ratio, "reason": self.reason,
                "causes": [f.to_dict() for f in self.causes]}


class _Incident:
    """An incident being followed: what :class:`Incident` shows, and what its diagnosis compares."""

    __slots__ = ("series", "key", "figure", "direction", "state", "started_at", "ended_at", "baseline", "ratio",
                 "latest_ratio", "now", "last_at", "reason", "onset", "before", "seen", "points", "kept",
                 "diagnosed", "unsaved", "placed", "opened_at", "regressed_at", "model_name", "version", "saved")

    def __init__(self, series: str, key: tuple[str, ...], tracker: SeriesTracker, started_at: float,
                 opened_at: float | None = None, model_name: str = "") -> None:
        self.series, self.key = series, key
        self.figure, self.direction = tracker.figure, tracker.direction
        self.state, self.now, self.reason = tracker.last.state, tracker.last.state, tracker.last.reason
        self.started_at = started_at
        self.ended_at: float | None = None
        self.baseline, self.ratio = tracker.last.baseline, tracker.last.ratio
        self.latest_ratio = tracker.last.ratio
        self.last_at = started_at
        self.opened_at = started_at if opened_at is None else opened_at
        self.regressed_at = self.opened_at if tracker.last.state == regression.REGRESSION else None
        self.model_name = model_name
        self.version, self.saved = 1, 0
        """Counts its changes, and the count the history last saved (:meth:`Verdicts.unsaved_incidents`)."""
        self.onset = tracker.onset is not None
        """Whether :attr:`started_at` is the tracker's episode onset (else the first violating run)."""
        self.before: list[int] = []
        """The runs (numbers, as :attr:`SeriesWatch.condition_runs`) before the start whose conditions are the
        baseline's: the last ``CAUSE_RUNS``."""
        self.seen = array("q")
        """The runs since the start that recorded conditions, in order."""
        self.points: list[int] = []
        """Diagnoses to make, oldest first: each one compares the last ``CAUSE_RUNS`` of ``seen[:point]``
        with :attr:`before`.  Made lazily (:func:`_settle`), newest first: the newest that names a cause is the
        one kept, so older ones need not be made."""
        self.kept: tuple[Finding, ...] | None = None
        """The causes of the last diagnosis that named one."""
        self.diagnosed = False
        self.unsaved: dict[int, bytes] = {}
        """Once closed: the packed conditions its pending diagnoses need that only memory held."""
        self.placed = 0
        """Counts the times its start was placed (a diagnosis made meanwhile is of the runs before it)."""

    def follow(self, tracker: SeriesTracker, at: float) -> None:
        """Take the state of its figure after a run at ``at``; a worse state makes ``tracker`` its figure."""
        last = tracker.last
        if tracker.figure != self.figure:
            if last.code <= regression.STATE_CODES[self.state]:
                return
            self.figure, self.direction, self.baseline, self.ratio = tracker.figure, tracker.direction, None, None
        if last.code > regression.STATE_CODES[self.state]:
            self.state, self.reason = last.state, last.reason
        if last.state == regression.REGRESSION and self.regressed_at is None:
            self.regressed_at = at
        self.version += 1
        self.now, self.last_at, self.latest_ratio = last.state, at, last.ratio
        if last.ratio is not None and (self.ratio is None or (last.ratio - self.ratio) * self.direction > 0):
            self.ratio, self.baseline = last.ratio, last.baseline

    def causes(self) -> tuple[Finding, ...]:
        if self.kept is not None:
            return self.kept
        return (NONE,) if self.diagnosed else ()

    def shown(self) -> Incident:
        return Incident(self.series, self.key, self.figure, self.state, self.started_at, self.ended_at,
                        self.baseline, self.ratio, self.latest_ratio, self.now, self.last_at, self.causes(),
                        self.reason, self.opened_at, self.regressed_at, self.model_name)

    def wanted(self) -> tuple[list[int], list[list[int]]]:
        """What :func:`_settle` compares: the runs before, and each pending diagnosis' runs since, oldest first."""
        return list(self.before), [list(self.seen[max(0, p - CAUSE_RUNS):p]) for p in self.points]

    def settled(self, made: int, found: tuple[Finding, ...] | None) -> None:
        """The first ``made`` pending diagnoses were made; ``found`` the newest of them that named a cause."""
        del self.points[:made]
        self.diagnosed = True
        if found is not None:
            if found != self.kept:
                self.version += 1
            self.kept = found
        if not self.points and len(self.seen) > CAUSE_RUNS:
            self.seen = self.seen[-CAUSE_RUNS:]
        if not self.points:
            self.unsaved.clear()


class SeriesWatch:
    """One series: its trackers (one per watched figure), recent values and its latest version change."""

    def __init__(self, settings: Settings, keep: int, by_id: bool = False) -> None:
        self.settings = settings
        self.keep = keep
        self.by_id = by_id
        """Whether conditions are read back from the history by row id when a diagnosis needs them (the
        daemon); else a run's conditions are kept in memory, packed."""
        self.record: RunRecord | None = None
        """The newest run, without its details and conditions (its labels name the series' exported verdicts)."""
        self.trackers: dict[str, SeriesTracker] = {}
        self.versions: dict[str, str] | None = None
        self.change: _Change | None = None
        self.conditions_kept = CAUSE_RUNS + settings.slow_runs + settings.reform_after
        self.condition_times = array("d")
        self.condition_runs = array("q")
        """Start time and run number of the last ``conditions_kept`` runs that recorded conditions: the
        runs before an episode's onset and those since, while it lasts until its baseline re-forms.  A
        run number is the history's row id, or a negative number whose conditions :attr:`unsaved` holds.
        The conditions themselves stay in the history (about 200 bytes a run packed, 50 MB for 5,000
        series' last runs) and are read back only for a diagnosis, which only a series that regressed,
        looks suspicious or regressed at a version change needs."""
        self.unsaved: dict[int, bytes] = {}
        """Packed conditions of the runs above whose conditions cannot be read back by id."""
        self.changed = 0
        """Counts the runs added: what a cached diagnosis was made at."""
        self.diagnosed: tuple[int, list[Finding]] | None = None
        """(:attr:`changed`, findings) of the last diagnosis."""
        self.incident: _Incident | None = None
        """The series' open incident (some watched figure out of ok), and :attr:`closed` its last ones."""
        self.closed: deque[_Incident] = deque(maxlen=CLOSED_KEPT)

    def add(self, record: RunRecord, recorded: bool | None = None) -> None:
        """Feed one run.  ``recorded``: whether it recorded conditions, where ``record`` comes without them
        (the restore reads them back by id when needed, so it does not read them at all); else its own
        ``conditions`` say."""
        self.record = lean(record, figures=False)
        self.changed += 1
        run: int | None = None
        if (bool(record.conditions) if recorded is None else recorded) and record.status in ("ok", INCORRECT):
            if self.by_id and record.id is not None:
                run = record.id
            elif not record.conditions:
                self._judge(record)  # conditions said recorded but not given, and no id: none to keep
                return self._follow(record, None)
            else:
                run = next(_UNSAVED)
                self.unsaved[run] = _packed(record.conditions)
            self.condition_times.append(record.started_at)
            self.condition_runs.append(run)
            if len(self.condition_runs) > self.conditions_kept:
                del self.condition_times[0], self.condition_runs[0]
                self._forget_unsaved()
            if self.change is not None and len(self.change.conditions_after) < CAUSE_RUNS:
                self.change.conditions_after.append(run)
        self._judge(record)
        self._follow(record, run)

    def _judge(self, record: RunRecord) -> None:
        versions = regression.versions(record)
        if versions is not None:  # a run that did not say is no version change
            if self.versions is not None:
                for key in SETTING_KEYS:  # a setting not read (a run recovered after a crash) did not change
                    versions[key] = versions[key] or self.versions[key]
            if self.versions is not None and versions != self.versions:
                self._version_change(self.versions, versions, record.started_at)
            self.versions = shared(versions)  # every series of a host has the same: one dict for them all
        if self.change is not None:
            self.change.age += 1
            if self.change.age > self.keep - self.settings.version_settle_runs:
                # forgotten while a restart still reads the runs of both its looks back: the exported
                # change never depends on when the agent last restarted
                self.change = None
                self._forget_unsaved()
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
            if figure not in self.trackers:
                self.trackers[figure] = SeriesTracker(figure, self.settings, record.workload)
            tracker = self.trackers[figure]
            tracker.update(value, at=record.started_at)
            self._after(figure, value, record)

    def _version_change(self, old: dict[str, str], new: dict[str, str], at: float) -> None:
        changes = {k: (old[k], new[k]) for k in VERSION_KEYS if old[k] != new[k]}
        runs = list(zip(self.condition_times, self.condition_runs, strict=True))
        s = self.settings
        # the "before" side: each figure's last runs of the segment that ends here (the trackers keep them)
        recent = {figure: tracker.recent(max(s.version_runs, s.version_settle_runs))
                  for figure, tracker in self.trackers.items()}
        before = {figure: list(values) for figure, (_, values) in recent.items() if values}
        self.change = _Change(changes, at, before,
                              conditions_before=[run for t, run in runs if t < at][-CAUSE_RUNS:],
                              conditions_after=[run for t, run in runs if t >= at][:CAUSE_RUNS],
                              times_before={figure: list(recent[figure][0]) for figure in before},
                              trends={figure: self.trackers[figure].trend() for figure in before})
        self._forget_unsaved()
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
        change.times_after.setdefault(figure, []).append(record.started_at)
        if len(after) <= s.version_runs:  # judged as each of the first runs arrives
            runs = s.version_runs
        elif len(after) == s.version_settle_runs and len(change.before[figure]) >= s.version_settle_runs:
            runs = s.version_settle_runs  # the second look, on more runs each side
        else:
            return
        settled = change.verdicts.get(figure)
        verdict = regression.version_verdict(
            change.before[figure], after, figure, change.changes, s, record.workload,
            regression.series_label(record), change.at, runs=runs,
            times=(change.times_before[figure], change.times_after[figure]), trend=change.trends[figure])
        if runs == s.version_settle_runs and settled is not None and settled.state == regression.REGRESSION \
                and verdict.state != regression.REGRESSION:
            return  # the second look adds a regression the first runs could not see; it does not take one back
        change.verdicts[figure] = verdict


    def _follow(self, record: RunRecord, run: int | None) -> None:
        """Open, follow or close the series' incident after a run (``run``: its number, where it recorded
        conditions), and ask for a diagnosis of it at this run (:class:`_Incident`)."""
        out = [t for t in self.trackers.values() if t.last.state in OUT_OF_OK]
        incident = self.incident
        if not out:
            if incident is not None:
                own = self.trackers.get(incident.figure)
                if own is not None:
                    incident.follow(own, record.started_at)
                incident.ended_at = record.started_at
                incident.version += 1
                if incident.points:  # its last diagnoses are still to make: keep what only memory holds of them
                    incident.unsaved = {r: self.unsaved[r] for r in (*incident.before, *incident.seen)
                                        if r in self.unsaved}
                self.closed.append(incident)
                self.incident = None
                self._forget_unsaved()
            return
        worst = max(out, key=lambda t: t.last.code)  # a regression before a suspicious
        if incident is None:
            incident = self.incident = _Incident(regression.series_label(record), record.key(), worst,
                                                 self._start(worst, record), record.started_at, record.model_name)
            self._place(incident)
        else:
            figure = incident.figure
            for tracker in self.trackers.values():
                incident.follow(tracker, record.started_at)
            own = self.trackers[incident.figure]
            if incident.figure != figure:
                incident.onset = False
            if not incident.onset and own.onset is not None and own.onset < len(own.times):
                incident.onset = True  # the detector placed the episode's first run: the incident starts there
                if own.times[own.onset] != incident.started_at:
                    incident.started_at = own.times[own.onset]
                    self._place(incident)
                    run = None
            if run is not None:
                incident.seen.append(run)
                incident.points.append(len(incident.seen))
        for tracker in self.trackers.values():
            incident.follow(tracker, record.started_at)
        if not self.by_id and len(incident.points) > CAUSE_RUNS:
            self.settle(incident)  # every run's conditions in memory: no read, and the pending list stays short

    def _start(self, tracker: SeriesTracker, record: RunRecord) -> float:
        """When the change that put ``tracker`` out of ok began: its episode's onset, else the first of its last
        ``slow_runs`` runs worse than the baseline by the minimum effect, else (an incorrect result, or a
        state no single run explains) this run."""
        if record.status == INCORRECT or not tracker.times:
            return record.started_at
        if tracker.onset is not None and tracker.onset < len(tracker.times):
            return tracker.times[tracker.onset]
        baseline = tracker.last.baseline
        if baseline:
            for t, value in zip(*tracker.recent(self.settings.slow_runs), strict=True):  # in the figure's units
                if (value / baseline - 1.0) * tracker.direction >= tracker.min_effect:
                    return t
        return tracker.times[-1]

    def _place(self, incident: _Incident) -> None:
        """The runs before the incident's start (its baseline's conditions) and those since, from the kept runs;
        a diagnosis of the runs since is asked for."""
        start, runs = incident.started_at, list(zip(self.condition_times, self.condition_runs, strict=True))
        incident.before = [run for t, run in runs if t < start][-CAUSE_RUNS:]
        incident.seen = array("q", (run for t, run in runs if t >= start))
        incident.points = [len(incident.seen)] if incident.seen else []
        incident.placed += 1

    def settle(self, incident: _Incident, read: ConditionsReader | None = None) -> None:
        """Make an incident's pending diagnoses now (reading conditions back with ``read`` where they are
        not in memory)."""
        placed, (before, afters) = incident.placed, incident.wanted()
        made, found = _settle(before, afters, {**self.unsaved, **incident.unsaved}, read)
        if incident.placed == placed:
            incident.settled(made, found)

    def _forget_unsaved(self) -> None:
        """Drop the kept conditions no diagnosis can need any more."""
        if self.unsaved:
            wanted = {*self.condition_runs, *(self.change.conditions_before + self.change.conditions_after
                                              if self.change is not None else ()),
                      *((*self.incident.before, *self.incident.seen) if self.incident is not None else ())}
            for run in [run for run in self.unsaved if run not in wanted]:
                del self.unsaved[run]

    def cause_runs(self) -> tuple[list[int], list[int], dict[str, tuple[str, str]] | None] | None:
        """What the diagnosis of a version change compares, while the series has no open incident (whose
        own diagnosis gives the causes, :class:`_Incident`) and its latest version change regressed: the
        runs (numbers) either side of it and the versions changed; else None."""
        if self.incident is not None:
            return None
        change = self.change
        if change is not None and any(v.state == regression.REGRESSION for v in change.verdicts.values()):
            return list(change.conditions_before), list(change.conditions_after), change.changes
        return None


def _conditions(runs: list[int], unsaved: dict[int, bytes], read: ConditionsReader | None) -> list[dict[str, Any]]:
    """The conditions of these runs, in order: kept ones (``unsaved``) from memory, the others read by id
    (a run whose conditions are gone, pruned from the history, is left out)."""
    found = _conditions_by_run(runs, unsaved, read)
    return [found[run] for run in runs if run in found]


def _conditions_by_run(runs: list[int], unsaved: dict[int, bytes],
                       read: ConditionsReader | None) -> dict[int, dict[str, Any]]:
    ids = [run for run in runs if run >= 0]
    found = read(ids) if read is not None and ids else {}
    found.update({run: _opened(unsaved[run]) for run in runs if run < 0 and run in unsaved})
    return found


def _settle(before: list[int], afters: list[list[int]], unsaved: dict[int, bytes],
            read: ConditionsReader | None) -> tuple[int, tuple[Finding, ...] | None]:
    """An incident's pending diagnoses (each the runs since its start at one run, oldest first) against the
    runs ``before``, made newest first until one names a cause: (how many were pending, the causes it
    named, or None where none did).  The newest named diagnosis is the one kept, so the older ones are
    not made; each run's conditions are read once."""
    if not afters:
        return 0, None
    found = _conditions_by_run(sorted({*before, *(run for after in afters for run in after)}), unsaved, read)
    base = [found[run] for run in before if run in found]
    tried: list[int] | None = None
    for after in reversed(afters):
        if after == tried:
            continue
        tried = after
        findings = diagnose(base, [found[run] for run in after if run in found])
        if findings[0].cause != NONE.cause:
            return len(afters), tuple(findings)
    return len(afters), None


def _diagnosis(wanted: tuple[list[int], list[int], dict[str, tuple[str, str]] | None] | None,
               unsaved: dict[int, bytes], read: ConditionsReader | None) -> list[Finding]:
    """:func:`sixdim.verdicts.causes.diagnose` over what :meth:`SeriesWatch.cause_runs` asked for."""
    if wanted is None:
        return []
    before, after, changes = wanted
    before_c, after_c = _conditions(before, unsaved, read), _conditions(after, unsaved, read)
    return diagnose(before_c, after_c) if changes is None else diagnose(before_c, after_c, changes)


def _saver(incident: _Incident, version: int) -> Callable[[], None]:
    """What marks ``incident`` saved as it was at ``version`` (a change since is saved next time)."""
    def saved() -> None:
        incident.saved = max(incident.saved, version)
    return saved


def _states(watch: SeriesWatch | None) -> dict[str, str]:
    return {} if watch is None else {figure: t.last.state for figure, t in watch.trackers.items()}


@dataclass(frozen=True)
class SeriesVerdicts:
    """What the exporter shows of one series: its newest run (labels) and its verdicts."""

    record: RunRecord
    verdicts: dict[str, Verdict]
    changes: dict[str, VersionVerdict]
    """The latest version change's verdict per figure, while it is recent."""
    causes: list[Finding] = field(default_factory=list)
    """The likely causes, ranked: its open incident's (kept from the first diagnosis that named one until every
    figure is back to ok), else those of a version change that regressed (:meth:`SeriesWatch.cause_runs`)."""


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
        self.on_judged: Callable[[RunRecord, dict[str, str], bool], object] | None = None
        """Called with each run added live (not those restored), its series' watched figures' states after
        it, and whether it was a slow run (``SeriesTracker.slow_run`` of some figure): the daemon's
        confirmation runs (sixdim.run.scheduler.SuiteScheduler.judged)."""
        self._read: ConditionsReader | None = None
        self._unsaved: set[SeriesWatch] = set()
        """The series whose incidents changed since the history last saved all of them (:meth:`unsaved_incidents`
        looks at these only, not at every series, at each of the board's catch-ups)."""
        """Reads conditions back from the history by row id, once :meth:`restore` was given a history that
        can (the daemon's); until then, and for a history that cannot, conditions are kept in memory."""

    def add(self, record: RunRecord) -> None:
        """Feed one run (in the order runs were recorded), then tell :attr:`on_judged` its series' states."""
        with self._lock:
            if self._backlog is not None:
                self._backlog.append(record)
                return
            self._add_locked(record)
            watch = self._series.get(record.key())
            states = _states(watch)
            slow = watch is not None and any(tracker.slow_run(record.figures.get(figure))
                                             for figure, tracker in watch.trackers.items())
        if self.on_judged is not None and states:
            try:
                self.on_judged(record, states, slow)
            except Exception:  # whoever listens must not lose the board a run
                log.exception("verdicts: the listener of %s %s failed", record.workload, record.shape)

    def _add_locked(self, record: RunRecord, recorded: bool | None = None) -> None:
        watch = self._series.get(record.key())
        if watch is None:
            watch = self._series[record.key()] = SeriesWatch(self.settings, self.restore_runs, self._read is not None)
        watch.add(record, recorded)
        if watch.incident is not None or watch.closed:
            self._unsaved.add(watch)

    def states(self, key: tuple[str, ...]) -> dict[str, str]:
        """The state of each watched figure of one series (``RunRecord.key()``) after its latest run;
        empty for a series not judged yet (what a confirmation run is asked on: :mod:`sixdim.run.confirm`)."""
        with self._lock:
            return _states(self._series.get(key))

    def peer_causes(self, key: tuple[str, ...], peers: Sequence[tuple[str, ...]]) -> list[Finding]:
        """The likely causes of a series being slower than the same result on its peer GPUs: its last
        ``slow_runs`` runs' conditions against theirs (the evidence's "A → B" reads "its peers' A, its
        own B"); [] where it or they have no recorded conditions."""
        runs = self.settings.slow_runs
        with self._lock:
            own = self._series.get(key)
            if own is None or not own.condition_runs:
                return []
            after_runs = (list(own.condition_runs)[-runs:], dict(own.unsaved))
            before_runs = [(list(w.condition_runs)[-runs:], dict(w.unsaved)) for peer in peers
                           if (w := self._series.get(peer)) is not None]
            read = self._read
        try:
            after = _conditions(*after_runs, read)
            before = [c for numbers, unsaved in before_runs for c in _conditions(numbers, unsaved, read)]
        except Exception as exc:  # the history unreadable now: no diagnosis this time
            log.warning("peer causes: the recorded conditions could not be read (%s)", exc)
            return []
        return diagnose(before, after) if before else []

    def restore(self, history: RunSource, upto_id: int | None = None) -> int:
        """Feed the last runs of every series from the history (row ids up to ``upto_id``: the
        board feeds the later ones); returns how many runs were read.  A history that cannot be
        read leaves the verdicts to form from new runs."""
        started = time.perf_counter()
        count = 0
        with self._lock:
            # (a watch made before keeps its conditions in memory)
            if isinstance(history, ConditionsSource) and not self._series:
                self._read = history.conditions_of
        try:
            if self._read is not None and isinstance(history, ConditionsSource):  # conditions read back by id
                for record, recorded in history.recent_for_verdicts(self.restore_runs, upto_id):
                    with self._lock:
                        self._add_locked(record, recorded)
                    count += 1
            else:
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

    def restore_in_background(self, history: RunSource, upto_id: int | None = None) -> threading.Thread:
        """:meth:`restore` on its own thread, so the agent serves at once; runs recorded meanwhile
        wait and are fed after the restored ones.  Until it is done, a series shows no verdict."""
        with self._lock:
            self._backlog = []
        self.restored.clear()
        thread = threading.Thread(target=self.restore, args=(history, upto_id), daemon=True, name="verdicts")
        thread.start()
        return thread

    def snapshot(self) -> list[SeriesVerdicts]:
        """Every judged series' verdicts and, where it needs one, its diagnosis.  A diagnosis reads its runs'
        conditions from the history, outside the lock (runs go on being added meanwhile), and is kept until
        the series' next run."""
        with self._lock:
            shown = [(w, SeriesVerdicts(w.record, {figure: t.last for figure, t in w.trackers.items()},
                                        dict(w.change.verdicts) if w.change is not None else {}))
                     for w in self._series.values() if w.record is not None and (w.trackers or w.change)]
            stale = [(w, w.changed, w.cause_runs()) for w, _ in shown
                     if w.diagnosed is None or w.diagnosed[0] != w.changed]
            unsaved = {w: dict(w.unsaved) for w, _, wanted in stale if wanted is not None and w.unsaved}
            read = self._read
        fresh: dict[int, list[Finding]] = {}
        for watch, changed, wanted in stale:
            try:
                fresh[id(watch)] = findings = _diagnosis(wanted, unsaved.get(watch, {}), read)
            except Exception as exc:  # the history unreadable now: the last diagnosis stands, tried again next time
                log.warning("regression causes: the recorded conditions could not be read (%s); tried again at "
                            "the next render", exc)
                continue
            with self._lock:
                if watch.changed == changed:
                    watch.diagnosed = (changed, findings)
        self._settle_incidents([(w, w.incident) for w, _ in shown if w.incident is not None])
        with self._lock:
            kept = {id(w): list(w.incident.causes()) for w, _ in shown if w.incident is not None}
        return [replace(verdicts, causes=kept[id(watch)] if id(watch) in kept else
                        fresh[id(watch)] if id(watch) in fresh else (watch.diagnosed or (0, []))[1])
                for watch, verdicts in shown]

    def incidents(self, since: float | None = None) -> list[Incident]:
        """Every series' open incident and those closed at or after ``since`` (Unix seconds; every one kept,
        :data:`CLOSED_KEPT` a series, where None), the earliest start first, their diagnoses made (reading
        conditions back outside the lock).  A pure function of the runs fed: the same runs give the same
        incidents, whenever they are asked for."""
        with self._lock:
            chosen = [(w, incident) for w in self._series.values() for incident in (*w.closed, w.incident)
                      if incident is not None and (incident.ended_at is None or since is None
                                                   or incident.ended_at >= since)]
        self._settle_incidents(chosen)
        with self._lock:
            shown = [incident.shown() for _, incident in chosen]
        return sorted(shown, key=lambda i: (i.started_at, i.series, i.figure))

    def unsaved_incidents(self) -> list[tuple[Incident, Callable[[], None]]]:
        """The incidents that changed since the history last saved them (opened, followed a run, closed or
        diagnosed; every one after a restore, which the history's upsert makes harmless), their diagnoses made,
        each with what to call once it is saved.  The daemon's board saves them (``History.save_incidents``),
        so the reports list what the agent's live verdicts said, when they said it (docs/REPORT.md)."""
        with self._lock:
            chosen = [(w, incident) for w in self._unsaved for incident in (*w.closed, w.incident)
                      if incident is not None and incident.version != incident.saved]
            self._unsaved = {w for w, _ in chosen}  # a series stays until every incident of it was saved
        self._settle_incidents(chosen)
        out: list[tuple[Incident, Callable[[], None]]] = []
        with self._lock:
            for _, incident in chosen:
                out.append((incident.shown(), _saver(incident, incident.version)))
        return out

    def _settle_incidents(self, incidents: list[tuple[SeriesWatch, _Incident]]) -> None:
        """Make the pending diagnoses of these incidents, reading their runs' conditions outside the lock; one
        that cannot be read now stays pending (its kept causes stand) and is tried again next time."""
        with self._lock:
            work = [(w, incident, incident.placed, *incident.wanted(), {**w.unsaved, **incident.unsaved})
                    for w, incident in incidents if incident.points]
            read = self._read
        for watch, incident, placed, before, afters, unsaved in work:
            try:
                made, found = _settle(before, afters, unsaved, read)
            except Exception as exc:  # the history unreadable now
                log.warning("incident causes: the recorded conditions could not be read (%s); tried again at the "
                            "next look", exc)
                continue
            with self._lock:
                if incident.placed == placed:
                    incident.settled(made, found)
                    if incident.version != incident.saved:
                        self._unsaved.add(watch)  # diagnosed at a scrape, after the history saved it: again
