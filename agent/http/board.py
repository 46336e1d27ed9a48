"""What the exporter shows: the latest good result of each series, and run counts.

Kept in memory for cheap scrapes and fed from the history only: loaded at start (so a restart
serves the last results again before any new run), then caught up with the rows written
since.  Rows written by another process, such as a ``sixdim run`` or a node-linearity run on
this host, therefore appear without a restart.  SQLite hands out row ids in commit order, so
"rows after the last id seen" misses none.

Interrupted suite runs (one record each, in the history's own table) are counted per device and
suite the same way: loaded at start, caught up, shown while they wait to be written.

What the suites cost each device is counted from the runs added since the board was made (as the
skips and mean case durations are, not loaded from the history: counters since the agent started,
which Prometheus' ``rate()`` carries over a restart): each counted run adds its case span
(``details.case_wall``) to its suite's device seconds, and the device energy over that span
(``details.case_energy_joules``) where it was read (:meth:`Board.suite_costs`).

The daemon loads it **in the background** (:meth:`Board.from_history` with ``background=True``): the board
is empty until the history's latest results, run counts and interruptions are read, then they appear all
at once (never a partial count), and the catch-up by row id starts from the last row that load covered,
so no run is added twice; meanwhile catching up does nothing.  :meth:`Board.restored` says whether the
board and the regression verdicts cover the history yet (``sixdim_history_restored``).

A record the board keeps is a lean copy (:func:`lean`): no ``details`` or ``conditions`` (the exporter
reads neither), label texts interned and equal ``environment`` and ``params`` dicts shared, so 5,000
series cost a few megabytes, not one full record each.

Results the history could not write yet (a locked or full database: see
:mod:`sixdim.store.history`) are shown from its queue at once, and recognised by their ``uid`` when
they are finally written, so each run is counted once.  A catch-up that cannot read the
database (another process holds it locked) leaves the board as it was and tries again next time.

:attr:`Board.version` changes whenever what the board shows changes, so the exporter can render
the exposition once per change rather than once per scrape.
"""

from __future__ import annotations

import logging
import threading
import time

from sixdim.core import catalog
from sixdim.core.memory import give_back_free_memory
from sixdim.core.results import Interruption, RunRecord, counts_as_run, lean
from sixdim.store.errors import StoreError
from sixdim.store.history import History
from sixdim.verdicts.live import Verdicts

log = logging.getLogger("sixdim")


def skip_class(reason: str) -> str:
    """The bounded class of a skip reason (catalog.SKIP_REASONS), from the guard's and the
    executor's wording (agent/run/guard.py, agent/run/devices.py)."""
    if reason.startswith("busy:"):
        return "busy_utilization" if "utilization" in reason else "busy_process"
    if reason.startswith("cannot list processes"):
        return "process_list_unavailable"
    if "MIG mode" in reason:
        return "mig"
    return "other"


def case_span_seconds(record: RunRecord) -> float | None:
    """A case's device time: the span the worker reported for it (``details.case_wall``: set-up, warm-up,
    timed rounds, power phase, check; not the worker's start-up), or None where the record has none."""
    wall = record.details.get("case_wall")
    if isinstance(wall, list) and len(wall) == 2 and all(
            isinstance(t, (int, float)) and not isinstance(t, bool) for t in wall):
        return max(0.0, float(wall[1]) - float(wall[0]))
    return None


def case_seconds(record: RunRecord) -> float:
    """How long the case itself ran: the span the worker reported for it (:func:`case_span_seconds`),
    not the record's started_at/ended_at (started_at is its worker's, shared by every case the
    worker ran).  A record without one (made before per-case spans were kept) falls back to those."""
    span = case_span_seconds(record)
    return span if span is not None else max(0.0, record.ended_at - record.started_at)


def case_energy_joules(record: RunRecord) -> float | None:
    """The device energy over the case's span (``details.case_energy_joules``, sixdim.run.executor), or None
    where it could not be read (``case_energy_note`` says why): never 0 for a missing reading."""
    joules = record.details.get("case_energy_joules")
    if isinstance(joules, (int, float)) and not isinstance(joules, bool) and joules >= 0:
        return float(joules)
    return None


RESTORE_TRIES = 5
"""Reads of the history's latest results and counts at start; a read during which rows were written
is read again, so the row id the catch-up starts from is the last row the counts include."""

CATCH_UP_BATCH = 10_000
"""Rows read per catch-up step, so a large backlog (another process's full suite) is read in pieces."""


class Board:
    def __init__(self, verdicts: Verdicts | None = None) -> None:
        self.verdicts = verdicts
        """Regression verdicts fed with every run the board adds (the daemon's; None for ``run``)."""
        self._lock = threading.Lock()
        self._latest: dict[tuple[str, ...], RunRecord] = {}
        self._latest_by_suite: dict[tuple[tuple[str, ...], str], RunRecord] = {}
        self._counts: dict[tuple[tuple[str, ...], str], tuple[RunRecord, int]] = {}
        self._since_start: dict[tuple, list] = {}
        """(metric, device labels, workload, status or skip class) -> [labels, value]: the skips and
        case durations of the runs added since the board was made (not those it was loaded with)."""
        self._suite_costs: dict[tuple[tuple[str, ...], str], list] = {}
        """(device labels, suite) -> [labels, device seconds, joules or None]: what the cases added since the
        board was made cost their device (:meth:`suite_costs`)."""
        self._last_id = 0
        self._shown_pending: set[str] = set()
        self._interruptions: dict[tuple[tuple[str, ...], str], list] = {}
        """(device labels, suite) -> [labels, count]: the interrupted suite runs the history holds."""
        self._last_interruption_id = 0
        self.version = 0
        """Incremented on every change of what the board shows."""
        self._restoring = False
        """True while :meth:`from_history` loads the board in the background."""
        self._restore_thread: threading.Thread | None = None
        self._incidents_failing = False
        """Whether the last write of the incidents failed (the next failure is logged at debug level only)."""

    @classmethod
    def from_history(cls, history: History, verdicts: Verdicts | None = None, *, background: bool = False,
                     start: bool = True) -> Board:
        """The board of what the history holds; ``verdicts`` are restored from it in the background
        (the runs up to the last one read here; the board feeds the later ones).  ``background``: return
        an empty board at once and load it on a thread of its own (the daemon: it answers /metrics
        meanwhile; ``start`` False: once :meth:`start_restore` is called); :meth:`restored` says when it and
        the verdicts are done."""
        board = cls(verdicts)
        if not background:
            board._load(history)
            return board
        board._restoring = True
        board._restore_thread = threading.Thread(target=board._restore, args=(history,), daemon=True,
                                                 name="board-restore")
        if start:
            board._restore_thread.start()
        return board

    def start_restore(self) -> None:
        """Start the background load :meth:`from_history` prepared with ``start=False`` (the daemon starts it
        once it listens: the load's JSON decoding would otherwise slow its start-up, GIL against GIL)."""
        thread = self._restore_thread
        if thread is not None and thread.ident is None:
            thread.start()

    def restored(self) -> bool:
        """Whether the board and the regression verdicts cover the history read at start."""
        return not self._restoring and (self.verdicts is None or self.verdicts.restored.is_set())

    def _restore(self, history: History) -> None:
        started = time.perf_counter()
        try:
            verdicts = self._load(history)
        except Exception:  # a bug must not leave the board restoring for ever: it counts from new runs on
            log.exception("board: restoring from the history failed")
            with self._lock:
                self._restoring = False
                self.version += 1
            return
        log.info("board: %d result series and %d runs restored from the history in %.2f s", len(self._latest),
                 sum(count for _, count in self._counts.values()), time.perf_counter() - started)
        if verdicts is not None:
            verdicts.join()
        give_back_free_memory()  # what the restore's short-lived objects freed

    def _load(self, history: History) -> threading.Thread | None:
        """Read the latest results, run counts and interruptions, put them in place at once, start the
        verdicts' restore; returns its thread."""
        latest: list[RunRecord] = []
        counts: list[tuple[RunRecord, int]] = []
        interruptions: list[Interruption] = []
        last_id = 0
        try:
            for attempt in range(1, RESTORE_TRIES + 1):
                first = history.last_id()
                latest = history.latest_ok()  # oldest first: a series' newest of all suites wins
                counts = history.status_counts()
                interruptions = history.interruptions_after(0)
                last_id = history.last_id()
                if last_id == first:
                    break
                log.info("board: %d run(s) written while the history was read (try %d of %d)%s", last_id - first,
                         attempt, RESTORE_TRIES, "; read again" if attempt < RESTORE_TRIES else "")
        except StoreError as exc:  # not readable now (not opened: read-only): new results still show
            log.warning("board: the history cannot be read (%s); starting from the results recorded from now on", exc)
            latest, counts, interruptions, last_id = [], [], [], 0
        verdicts = None
        with self._lock:
            by_id: dict[int | None, RunRecord] = {}
            for record in latest:  # lean already (History.latest_ok)
                by_id[record.id] = record
                self._latest[record.key()] = record
                self._latest_by_suite[(record.key(), record.suite)] = record
            for record, count in counts:  # an ok count's newest run is a latest result: one object for both
                kept = by_id.get(record.id) if record.id is not None else None
                self._counts[(record.key(), record.status)] = (kept or record, count)  # lean already
            self._last_id = last_id
            for interruption in interruptions:
                self._add_interruption(interruption)
            if self.verdicts is not None:  # before the catch-up can feed them: later runs wait their turn
                verdicts = self.verdicts.restore_in_background(history, last_id)
            self._restoring = False
            self.version += 1
        del latest, counts, by_id
        self._show_pending(history)
        return verdicts

    def catch_up(self, history: History) -> int:
        """Retry the history's queued writes, then add the rows written since the last one seen
        and the results still queued; returns how many runs were added.  While the board is being
        loaded (:meth:`from_history` in the background) it only retries the writes."""
        history.retry_pending()
        if self._restoring:
            return 0
        added = 0
        with self._lock:
            while True:
                try:
                    records = history.after(self._last_id, limit=CATCH_UP_BATCH)
                except StoreError as exc:  # locked by another process: try again next time
                    log.debug("board: cannot read the history now: %s", exc)
                    break
                for record in records:
                    self._last_id = max(self._last_id, record.id or 0)
                    if record.uid and record.uid in self._shown_pending:
                        self._shown_pending.discard(record.uid)  # shown while it waited: counted once
                        continue
                    self._add(record)
                    added += 1
                if len(records) < CATCH_UP_BATCH:
                    break
            try:
                for interruption in history.interruptions_after(self._last_interruption_id):
                    if interruption.uid in self._shown_pending:
                        self._last_interruption_id = max(self._last_interruption_id, interruption.id or 0)
                        self._shown_pending.discard(interruption.uid)
                        continue
                    self._add_interruption(interruption)
                    added += 1
            except StoreError as exc:
                log.debug("board: cannot read the history's interruptions now: %s", exc)
        added += self._show_pending(history)
        self.save_incidents(history)
        return added

    def save_incidents(self, history: History) -> int:
        """Write the incidents of the live verdicts that changed since they were last written (none until the
        verdicts cover the history); returns how many.  A history that cannot be written now keeps them for the
        next catch-up (the verdicts mark an incident saved only once it is)."""
        if self.verdicts is None or not self.verdicts.restored.is_set():
            return 0
        changed = self.verdicts.unsaved_incidents()
        if not changed:
            return 0
        try:
            history.save_incidents(incident.row() for incident, _ in changed)
        except StoreError as exc:  # said once a spell: the catch-up tries every few seconds
            (log.debug if self._incidents_failing else log.warning)(
                "board: %d incident(s) of the regression verdicts could not be written now (%s); tried again at "
                "each catch-up", len(changed), exc)
            self._incidents_failing = True
            return 0
        if self._incidents_failing:
            log.info("board: the regression verdicts' incidents are written again")
            self._incidents_failing = False
        for _, saved in changed:
            saved()
        return len(changed)

    def _show_pending(self, history: History) -> int:
        added = 0
        with self._lock:
            for record in history.pending():
                if record.uid not in self._shown_pending:
                    self._shown_pending.add(record.uid)
                    self._add(record)
                    added += 1
            for interruption in history.pending_interruptions():
                if interruption.uid not in self._shown_pending:
                    self._shown_pending.add(interruption.uid)
                    self._add_interruption(interruption)
                    added += 1
        return added

    def add_interruption(self, interruption: Interruption) -> None:
        """Count an interruption that is not in a history (a board built by hand, as :meth:`add`)."""
        with self._lock:
            self._add_interruption(interruption)

    def _add_interruption(self, interruption: Interruption) -> None:
        self._last_interruption_id = max(self._last_interruption_id, interruption.id or 0)
        labels = interruption.device_labels()
        key = (tuple(labels[label] for label in catalog.DEVICE_LABELS), interruption.suite)
        entry = self._interruptions.setdefault(key, [{**labels, catalog.SUITE: interruption.suite}, 0])
        entry[1] += 1
        self.version += 1

    def interruptions(self) -> list[tuple[dict[str, str], int]]:
        """Interrupted suite runs per device and suite: (the labels, suite among them; how many)."""
        with self._lock:
            return [(dict(labels), count) for labels, count in self._interruptions.values()]

    def add(self, record: RunRecord) -> None:
        """Add a record that is not in a history (the daemon's records come through :meth:`catch_up`;
        a board built by hand, as the tests build theirs, comes through here)."""
        with self._lock:
            self._add(record)

    def _add(self, record: RunRecord) -> None:
        if self.verdicts is not None:
            self.verdicts.add(record)
        counted = counts_as_run(record.status, record.reason)
        if counted:
            labels = record.workload_labels()
            device = tuple(labels[label] for label in catalog.DEVICE_LABELS)
            seconds = self._since_start.setdefault(("seconds", device, record.workload, record.status),
                                                   [labels, 0.0, 0])
            seconds[1] += case_seconds(record)
            seconds[2] += 1
            if record.status == "skipped":
                skips = self._since_start.setdefault(("skips", device, record.workload, skip_class(record.reason)),
                                                     [labels, 0])
                skips[1] += 1
            self._add_cost(record, labels, device)
        kept = lean(record)
        if record.status == "ok":
            self._latest[record.key()] = kept
            self._latest_by_suite[(record.key(), record.suite)] = kept
        if counted:  # an interrupted skip is kept in the history, never counted as a run
            key = (record.key(), record.status)
            previous = self._counts.get(key)
            self._counts[key] = (kept, (previous[1] if previous else 0) + 1)
        self.version += 1

    def _add_cost(self, record: RunRecord, labels: dict[str, str], device: tuple[str, ...]) -> None:
        """Add a counted run's device time and energy to its suite's: its case span (none where the record
        has no ``case_wall``) and the energy over it where that was read (never 0 for a missing reading)."""
        seconds = case_span_seconds(record)
        if seconds is None:
            return
        cost = self._suite_costs.get((device, record.suite))
        if cost is None:
            kept = {label: labels[label] for label in catalog.DEVICE_LABELS}
            cost = self._suite_costs[(device, record.suite)] = [{**kept, catalog.SUITE: record.suite}, 0.0, None]
        cost[1] += seconds
        joules = case_energy_joules(record)
        if joules is not None:
            cost[2] = (cost[2] or 0.0) + joules

    def suite_costs(self) -> list[tuple[dict[str, str], float, float | None]]:
        """What each suite's cases cost each device since the board was made (the runs added since, as
        :meth:`since_start`; every counted status, interrupted skips apart): (the device's labels and the
        suite, the sum of the cases' spans in seconds, the energy over those that had a reading in joules, or
        None where none had)."""
        with self._lock:
            return [(dict(labels), seconds, joules) for labels, seconds, joules in self._suite_costs.values()]

    def latest(self) -> list[RunRecord]:
        with self._lock:
            return list(self._latest.values())

    def latest_by_suite(self) -> list[RunRecord]:
        """The newest ok result of each series in each suite: what a suite's summary is made of, so
        that a shape another suite ran more recently still counts in this suite's summary."""
        with self._lock:
            return list(self._latest_by_suite.values())

    def since_start(self) -> list[tuple[str, dict[str, str], str, float]]:
        """(``seconds``: the mean case time, or ``skips``: a count; the labels of the device and
        workload; the status or skip class; the value), over the runs added since start."""
        with self._lock:
            return [(kind, entry[0], what, entry[1] / entry[2] if kind == "seconds" else float(entry[1]))
                    for (kind, _, _, what), entry in self._since_start.items()]

    def counts(self) -> list[tuple[RunRecord, int]]:
        with self._lock:
            return list(self._counts.values())
