"""Suite runs as they go: the log lines and the ``/metrics`` gauges of a suite while it runs.

A suite on a busy host runs for minutes; the daemon says what it is doing meanwhile.  The executor
tells a :class:`SuiteRun` each case's start and end (each case is in the history as it ends); the
run logs each workload as it starts and as it ends, with its case counts (failures apart from the
cases that did not run), at most one line every :data:`LOG_EVERY_SECONDS` (lines that come sooner
wait and are joined into the next one, a timer flushing them; a workload that ends with failures is
logged at once, as a warning), and a line for a workload still running after
:data:`HEARTBEAT_SECONDS` without one.  :class:`SuiteProgress` holds every suite's current (or last)
run on each device for the exporter: ``sixdim_suite_running``, ``sixdim_suite_cases``,
``sixdim_suite_cases_done`` by status and ``sixdim_suite_current_workload``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from sixdim.core import catalog
from sixdim.core.results import Interruption, plural, status_counts_text
from sixdim.run.devices import Device

log = logging.getLogger(__name__)

LOG_EVERY_SECONDS = 5.0
"""At most one progress line per suite run this often (a workload ending with failures is logged at once)."""
HEARTBEAT_SECONDS = 60.0
"""A workload still running this long after the last line gets a line of its own (cases done of its cases)."""


def device_labels(hostname: str, device: Device) -> dict[str, str]:
    """A device's labels as a run record of it carries them (catalog.DEVICE_LABELS)."""
    return {catalog.HOSTNAME: hostname, catalog.GPU: "" if device.index is None else str(device.index),
            catalog.UUID: device.uuid, catalog.MODEL_NAME: device.model_name, catalog.PCI_BUS_ID: device.pci_bus_id,
            catalog.DEVICE_TYPE: device.type}


@dataclass(frozen=True)
class SuiteState:
    """One suite's current (or last) run on one device, as the exporter shows it."""

    suite: str
    labels: dict[str, str]
    """The device's labels (catalog.DEVICE_LABELS)."""
    running: bool = False
    cases: int = 0
    done: dict[str, int] = field(default_factory=dict)
    """Cases ended, by status."""
    workload: str = ""
    """The workload whose case runs now ("" while none does)."""


class SuiteRun:
    """One run of a suite on one device: its plan (the workload of each case, in order), the cases
    ended so far by status, the case running, and the log lines about them (see the module)."""

    def __init__(self, suite: str, device: Device, hostname: str, workloads: list[str], *,
                 on_change: Callable[[], None] | None = None, clock: Callable[[], float] = time.monotonic,
                 log_every: float = LOG_EVERY_SECONDS, heartbeat: float = HEARTBEAT_SECONDS,
                 end_said_by_caller: bool = False):
        self.suite = suite
        self.device = device
        self.hostname = hostname
        self.workloads = list(workloads)
        self.started_at = time.time()
        self.done: Counter[str] = Counter()
        self.interruption: Interruption | None = None
        """Set when an interruption stopped the run (its one record in the history)."""
        self.running = True
        self.unsaid = ""
        """What was still waiting to be said when the run finished, where the caller says the run's end
        (the scheduler's end line carries it, so the end is one line, not two)."""
        self._end_said_by_caller = end_said_by_caller
        self._on_change = on_change
        self._clock = clock
        self._log_every = log_every
        self._heartbeat = heartbeat
        self._began = clock()
        self._lock = threading.Lock()
        self._current = -1  # the case running, an index into workloads
        self._segment_counts: Counter[str] = Counter()
        self._pending: list[str] = []
        self._pending_level = logging.INFO
        self._last_line = clock()  # the scheduler has just said the suite started
        self._timer: threading.Timer | None = None
        # consecutive cases of one workload are one segment: it starts with its first case, ends with its last
        self._segment_end: list[int] = [0] * len(self.workloads)
        end = len(self.workloads) - 1
        for k in range(len(self.workloads) - 1, -1, -1):
            if k < len(self.workloads) - 1 and self.workloads[k] != self.workloads[k + 1]:
                end = k
            self._segment_end[k] = end

    @property
    def what(self) -> str:
        return (f"suite {self.suite}" if self.suite else "run") + f" on {self.device.name}"

    def _segment_start(self, k: int) -> int:
        while k > 0 and self.workloads[k - 1] == self.workloads[k]:
            k -= 1
        return k

    def state(self) -> SuiteState:
        with self._lock:
            workload = self.workloads[self._current] if self.running and 0 <= self._current < len(self.workloads) \
                else ""
            return SuiteState(self.suite, device_labels(self.hostname, self.device), self.running,
                              len(self.workloads), dict(self.done), workload)

    # ------------------------------------------------------------------ what the executor tells it
    def case_started(self, k: int) -> None:
        """Case ``k`` of the plan started (its worker started, or the case before it in the same worker ended)."""
        if not 0 <= k < len(self.workloads):
            return
        with self._lock:
            previous = self._current
            self._current = k
            first = self._segment_start(k)
            if previous < first:  # the first case of its workload to start
                cases = self._segment_end[k] - first + 1
                self._note(f"{self.workloads[k]} started ({plural(cases, 'case')})")
        self._changed()

    def case_ended(self, k: int, status: str) -> None:
        """Case ``k`` of the plan ended with ``status`` (and is in the history)."""
        if not 0 <= k < len(self.workloads):
            return
        with self._lock:
            self.done[status] += 1
            self._segment_counts[status] += 1
            self._current = max(self._current, k)
            workload = self.workloads[k]
            if k == self._segment_end[k]:
                counts, self._segment_counts = self._segment_counts, Counter()
                failures = any(counts.get(s) for s in catalog.FAILURE_STATUSES)
                self._pending = [p for p in self._pending if not p.startswith(f"{workload} started")]
                self._note(f"{workload} ended ({status_counts_text(counts)})",
                           logging.WARNING if failures else logging.INFO, force=failures)
            elif self._clock() - self._last_line >= self._heartbeat:
                first = self._segment_start(k)
                self._note(f"{workload} running ({k - first + 1} of {self._segment_end[k] - first + 1} cases done)",
                           force=True)
        self._changed()

    def interrupted(self, interruption: Interruption) -> None:
        with self._lock:
            self.interruption = interruption
        self._changed()

    def finish(self) -> None:
        """The run is over: say what is still waiting to be said, and stop showing a case running."""
        with self._lock:
            self.running = False
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._end_said_by_caller:
                self.unsaid, self._pending = " | ".join(self._pending), []
            else:
                self._flush()
        self._changed()

    # ------------------------------------------------------------------ the log
    def _note(self, fragment: str, level: int = logging.INFO, force: bool = False) -> None:
        """Say ``fragment`` now, or with the next line once :attr:`_log_every` has passed (the lock is held)."""
        self._pending.append(fragment)
        self._pending_level = max(self._pending_level, level)
        wait = self._log_every - (self._clock() - self._last_line)
        if force or wait <= 0:
            self._flush()
        elif self._timer is None and self.running:
            self._timer = threading.Timer(wait, self._flush_due)
            self._timer.daemon = True
            self._timer.start()

    def _flush_due(self) -> None:
        with self._lock:
            self._timer = None
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        ended = sum(self.done.values())
        log.log(self._pending_level, "%s: %d of %s done after %.0f s: %s", self.what, ended,
                plural(len(self.workloads), "case"), self._clock() - self._began, " | ".join(self._pending))
        self._pending, self._pending_level = [], logging.INFO
        self._last_line = self._clock()

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change()


class SuiteProgress:
    """Every suite's current (or last) run on each device of this agent, for the exporter.

    The scheduler names its jobs (:meth:`plan`), so a suite that has not run yet is shown as not
    running; without a plan (``sixdim run``) the runs made here are shown."""

    def __init__(self, hostname: str):
        self.hostname = hostname
        self.on_change: Callable[[], None] | None = None
        """Called when what it shows changes (the daemon renders the live part of /metrics at its next refresh)."""
        self.end_said_by_caller = False
        """True where the caller logs each run's end (the scheduler): a run leaves its last words in
        :attr:`SuiteRun.unsaid` for that line instead of logging a line of its own just before it."""
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, str], SuiteRun] = {}
        self._plan: dict[tuple[str, str], Device] | None = None

    def plan(self, jobs: list[tuple[str, Device]]) -> None:
        """The (suite, device) jobs the scheduler has now (at start, and after each reload)."""
        with self._lock:
            self._plan = {(suite, device.name): device for suite, device in jobs}
        self._changed()

    def begin(self, suite: str, device: Device, workloads: list[str]) -> SuiteRun:
        """A new run of ``suite`` on ``device``, whose cases are of ``workloads`` (one entry per case)."""
        run = SuiteRun(suite, device, self.hostname, workloads, on_change=self._changed,
                       end_said_by_caller=self.end_said_by_caller)
        with self._lock:
            self._runs[(suite, device.name)] = run
        self._changed()
        return run

    def last(self, suite: str, device: Device) -> SuiteRun | None:
        """The current or last run of ``suite`` on ``device``."""
        with self._lock:
            return self._runs.get((suite, device.name))

    def snapshot(self) -> list[SuiteState]:
        with self._lock:
            runs = dict(self._runs)
            plan = None if self._plan is None else dict(self._plan)
        states: list[SuiteState] = []
        keys = list(runs) if plan is None else list(plan) + [k for k, r in runs.items() if k not in plan and r.running]
        for key in keys:
            run = runs.get(key)
            if run is not None:
                states.append(run.state())
            elif plan is not None:
                states.append(SuiteState(key[0], device_labels(self.hostname, plan[key])))
        return states

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()
