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

import itertools
import logging
import math
import threading
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from sixdim.core.conditions import SETTING_KEYS
from sixdim.core.results import RunRecord, lean, shared
from sixdim.store.history import History
from sixdim.verdicts import detector as regression
from sixdim.verdicts.causes import Finding, diagnose, pack, unpack
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


CAUSE_RUNS = 20
"""Runs each side of a change whose conditions the diagnosis compares."""


ConditionsReader = Callable[[list[int]], dict[int, dict[str, Any]]]
"""Recorded conditions by history row id (:meth:`sixdim.store.history.History.conditions_of`)."""

_UNSAVED = itertools.count(-1, -1)
"""Numbers for runs that have no history row id (not written yet, or no history to read them back from)."""


def _packed(conditions: dict[str, Any]) -> bytes:
    """Conditions kept in memory, in single precision (ample for the diagnosis, which compares them with
    thresholds of a few percent; a text's index and every setting are exact)."""
    return array("f", pack(conditions)).tobytes()


def _opened(packed: bytes) -> dict[str, Any]:
    return unpack(memoryview(packed).cast("f"))  # type: ignore[arg-type]


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

    def add(self, record: RunRecord, recorded: bool | None = None) -> None:
        """Feed one run.  ``recorded``: whether it recorded conditions, where ``record`` comes without them
        (the restore reads them back by id when needed, so it does not read them at all); else its own
        ``conditions`` say."""
        self.record = lean(record, figures=False)
        self.changed += 1
        if (bool(record.conditions) if recorded is None else recorded) and record.status in ("ok", INCORRECT):
            if self.by_id and record.id is not None:
                run = record.id
            elif not record.conditions:
                return self._judge(record)  # conditions said recorded but not given, and no id: none to keep
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
            tracker = self.trackers.get(figure)
            if tracker is None:
                tracker = self.trackers[figure] = SeriesTracker(figure, self.settings, record.workload)
            tracker.update(value, at=record.started_at)
            self._after(figure, value, record)

    def _version_change(self, old: dict[str, str], new: dict[str, str], at: float) -> None:
        changes = {k: (old[k], new[k]) for k in regression.VERSION_KEYS if old[k] != new[k]}
        runs = list(zip(self.condition_times, self.condition_runs, strict=True))
        s = self.settings
        # the "before" side: each figure's last runs of the segment that ends here (the trackers keep them)
        before = {figure: list(values) for figure, tracker in self.trackers.items()
                  if (values := tracker.recent(max(s.version_runs, s.version_settle_runs))[1])}
        self.change = _Change(changes, at, before,
                              conditions_before=[run for t, run in runs if t < at][-CAUSE_RUNS:],
                              conditions_after=[run for t, run in runs if t >= at][:CAUSE_RUNS])
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


    def _forget_unsaved(self) -> None:
        """Drop the kept conditions no diagnosis can need any more."""
        if self.unsaved:
            wanted = {*self.condition_runs, *(self.change.conditions_before + self.change.conditions_after
                                              if self.change is not None else ())}
            for run in [run for run in self.unsaved if run not in wanted]:
                del self.unsaved[run]

    def cause_runs(self) -> tuple[list[int], list[int], dict[str, tuple[str, str]] | None] | None:
        """What :meth:`causes` compares: the runs (numbers) before and after, and the version changes
        when it is a change's diagnosis; None when nothing is to be diagnosed.  While a figure of the
        series is suspicious or regressed: the runs since the episode's onset, or the last ``slow_runs``,
        against the runs before; else while its latest version change regressed: the runs either side
        of it."""
        noteworthy = (regression.REGRESSION, regression.SUSPICIOUS)
        unhealthy = [t for t in self.trackers.values() if t.last.state in noteworthy]
        times, runs = self.condition_times, self.condition_runs
        if unhealthy and runs:
            tracker = max(unhealthy, key=lambda t: t.last.code)  # a regression before a suspicious
            if tracker.onset is not None and tracker.onset < len(tracker.times):
                since = tracker.times[tracker.onset]
            elif tracker.times:
                since = tracker.times[-min(self.settings.slow_runs, len(tracker.times))]
            else:  # judged on incorrect results only: the last runs against those before
                since = times[-min(self.settings.slow_runs, len(times))]
            before = [run for t, run in zip(times, runs, strict=True) if t < since][-CAUSE_RUNS:]
            after = [run for t, run in zip(times, runs, strict=True) if t >= since][-CAUSE_RUNS:]
            return before, after, None
        change = self.change
        if change is not None and any(v.state == regression.REGRESSION for v in change.verdicts.values()):
            return list(change.conditions_before), list(change.conditions_after), change.changes
        return None

    def causes(self, read: ConditionsReader | None = None) -> list[Finding]:
        """The likely causes (see :meth:`cause_runs`), ranked; [] when there is nothing to diagnose."""
        return _diagnosis(self.cause_runs(), dict(self.unsaved), read)


def _conditions(runs: list[int], unsaved: dict[int, bytes], read: ConditionsReader | None) -> list[dict[str, Any]]:
    """The conditions of these runs, in order: kept ones (``unsaved``) from memory, the others read by id
    (a run whose conditions are gone, pruned from the history, is left out)."""
    ids = [run for run in runs if run >= 0]
    found = read(ids) if read is not None and ids else {}
    return [found[run] if run >= 0 else _opened(unsaved[run]) for run in runs if run in found or run in unsaved]


def _diagnosis(wanted: tuple[list[int], list[int], dict[str, tuple[str, str]] | None] | None,
               unsaved: dict[int, bytes], read: ConditionsReader | None) -> list[Finding]:
    """:func:`sixdim.verdicts.causes.diagnose` over what :meth:`SeriesWatch.cause_runs` asked for."""
    if wanted is None:
        return []
    before, after, changes = wanted
    before_c, after_c = _conditions(before, unsaved, read), _conditions(after, unsaved, read)
    return diagnose(before_c, after_c) if changes is None else diagnose(before_c, after_c, changes)


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
        self.on_judged: Callable[[RunRecord, dict[str, str], bool], object] | None = None
        """Called with each run added live (not those restored), its series' watched figures' states after
        it, and whether it was a slow run (``SeriesTracker.slow_run`` of some figure): the daemon's
        confirmation runs (sixdim.run.scheduler.SuiteScheduler.judged)."""
        self._read: ConditionsReader | None = None
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

    def states(self, key: tuple[str, ...]) -> dict[str, str]:
        """The state of each watched figure of one series (``RunRecord.key()``) after its latest run;
        empty for a series not judged yet (what a confirmation run is asked on: :mod:`sixdim.run.confirm`)."""
        with self._lock:
            return _states(self._series.get(key))

    def peer_causes(self, key: tuple[str, ...], peers: list[tuple[str, ...]]) -> list[Finding]:
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

    def restore(self, history: History, upto_id: int | None = None) -> int:
        """Feed the last runs of every series from the history (row ids up to ``upto_id``: the
        board feeds the later ones); returns how many runs were read.  A history that cannot be
        read leaves the verdicts to form from new runs."""
        started = time.perf_counter()
        count = 0
        read = getattr(history, "conditions_of", None) if hasattr(history, "recent_for_verdicts") else None
        with self._lock:
            if read is not None and not self._series:  # (a watch made before keeps its conditions in memory)
                self._read = read
        try:
            if self._read is not None:  # conditions are read back by id when needed: not read here
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
        return [replace(verdicts, causes=fresh[id(watch)] if id(watch) in fresh else (watch.diagnosed or (0, []))[1])
                for watch, verdicts in shown]
