"""The schedule: APScheduler 3 runs each suite on each of its devices.

One job per (suite, device), with ``max_instances=1`` and ``coalesce`` so runs
never pile up, and a misfire grace so a run late by a little still happens.
A lock per device keeps suites that share a GPU from running on it together.  The locks are
the executor's (:class:`sixdim.run.devices.DeviceLocks`), one object per device shared by every job:
a job holds its device's lock for the whole suite, and a host-wide workload inside it also takes
every other GPU's, in index order, so it waits for any suite running on another GPU and none can
start there meanwhile.

A suite runs at start only where its ``run_at_start`` says so (see :class:`sixdim.config.Suite`: by
default an interval suite does, a cron suite waits for its time); the log says which at start,
and logs a line when each suite run starts and ends, with its case counts (failures apart from the
cases that did not run, and the cases an interruption left) and duration; while it runs, the
executor's :class:`sixdim.run.progress.SuiteRun` logs each workload's start and end.  The jobs are
named to the executor's :class:`sixdim.run.progress.SuiteProgress`, so a suite that has not run yet
shows as not running on ``/metrics``.  Cron lines are read in UTC, the scheduler's time zone.

Two kinds of run come besides the schedule's, each an ordinary run of its suite, recorded and judged
like any: :meth:`SuiteScheduler.run_now` starts a suite on a device at once (the version watch,
:mod:`sixdim.run.changes`, for the ``on_change`` suites), and :meth:`SuiteScheduler.judged` hears each
measured run's verdict and, where a series of a suite with ``confirm_per_hour`` ran slow or turned
suspicious, runs that one case again a little later (:mod:`sixdim.run.confirm`; again if the idle guard
skipped it), within the suite's hourly budget on that device.  Both wait for the device like a scheduled
run, a reload leaves them in place, and neither is planned twice at once for one suite and device (or,
for a confirmation, one series).

A suite run that cannot start or fails unexpectedly (its device's lock file cannot be written: a full
or read-only state folder; a bug) is logged, and :class:`RunHealth` notes it until that job's next run
starts and ends without such a failure: ``/healthz`` answers 503 with the reason and
``sixdim_agent_can_run`` is 0 meanwhile.  Nothing of such a run stays held (every lock it took and
every descriptor it opened are given back on the way out), so the next scheduled run tries afresh and
works once the cause is gone, with no restart.

:meth:`SuiteScheduler.replace` puts a reloaded configuration's plan in place (SIGHUP).  A suite
running at that moment finishes as it was configured (the safe point: no case is cut short by a
reload); its next run is the new configuration's.  A job whose schedule did not change keeps its
next run time, so a reload never makes every suite run at once; a new suite with ``run_at_start``
runs now, as it would have at start.
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timezone

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from sixdim.config import Suite
from sixdim.config.schema import EMBEDDED_SOURCE
from sixdim.config.suites import case_timeout
from sixdim.core.loglines import LogLimiter
from sixdim.core.results import RunRecord, plural, status_counts_text
from sixdim.run.confirm import CONFIRM_DELAY_SECONDS, ConfirmationBudget, wants_confirmation
from sixdim.run.devices import Device
from sixdim.run.executor import Executor
from sixdim.workloads import registry
from sixdim.workloads.spec import Case, WorkloadSpec

log = logging.getLogger(__name__)
FAILURE_LOG_INTERVAL = 60.0
"""A suite job that cannot run says so at most once a minute (with a count of the runs held back): a full state
folder under a 1 s schedule logged an identical ERROR line every second."""
_failures = LogLimiter(log, FAILURE_LOG_INTERVAL)


class RunHealth:
    """Whether the agent can run its suites: the jobs whose last run could not start or failed
    unexpectedly, with why (thread-safe: the jobs run on the scheduler's pool)."""

    def __init__(self) -> None:
        self._problems: dict[str, str] = {}
        self._lock = threading.Lock()
        self.on_change: Callable[[], None] | None = None
        """Called when the answer changes (the daemon renders /metrics' live part again)."""

    def failed(self, job: str, reason: str) -> None:
        with self._lock:
            changed = self._problems.get(job) != reason
            self._problems[job] = reason
        if changed:
            self._changed()

    def ran(self, job: str) -> None:
        with self._lock:
            changed = self._problems.pop(job, None) is not None
        if changed:
            self._changed()

    def forget_except(self, jobs: set[str]) -> None:
        """A reload's plan: the jobs no longer scheduled cannot make the agent unhealthy."""
        with self._lock:
            gone = [job for job in self._problems if job not in jobs]
            for job in gone:
                del self._problems[job]
        if gone:
            self._changed()

    def problem(self) -> str | None:
        """Why the agent cannot run its suites now (the first failing job's reason, and how many more), or None."""
        with self._lock:
            problems = sorted(self._problems.items())
        if not problems:
            return None
        (job, reason), more = problems[0], len(problems) - 1
        return f"{job}: {reason}" + (f" (and {more} more suite job(s) failing)" if more else "")

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()


class SuiteScheduler:
    def __init__(self, executor: Executor, plan: list[tuple[Suite, list[Device]]], *, source: str = "",
                 confirm_delay: float = CONFIRM_DELAY_SECONDS):
        """``source`` is where the suites were configured (a file, or the embedded default), for the log;
        ``confirm_delay``: how long after a suspicious run its confirmation starts."""
        self._confirm_delay = confirm_delay
        self._executor = executor
        executor.progress.end_said_by_caller = True  # a suite run's last progress goes on its end line
        self._plan = plan
        self._source = source
        self._scheduler = BackgroundScheduler(timezone=timezone.utc)
        self._generation = 0
        self._pools: list[ThreadPoolExecutor] = []
        self.health = RunHealth()
        self._first_run: dict[str, str] = {}
        """Job id -> why its first (next) run is when it is: ``now``, ``kept`` or ``changed`` (by a
        reload), or ``schedule``: for the log line that says when each suite runs."""
        self._alias = ""
        self._extra_lock = threading.Lock()
        self._budgets: dict[tuple[str, str], ConfirmationBudget] = {}
        """(suite, device) -> its confirmation runs' budget."""
        self._one_offs: set[str] = set()
        """The ids of the runs started now and the confirmations (a reload leaves them in place)."""
        self._add_jobs(plan, {})

    def _add_jobs(self, plan: list[tuple[Suite, list[Device]]], kept: dict[str, tuple[str, datetime | None]]) -> None:
        """Schedule ``plan`` on a thread pool of its own, sized for its jobs (a reload may add some).
        ``kept``: job id -> (schedule, next run time) of the jobs scheduled before."""
        jobs = sum(len(devices) for _, devices in plan)
        self.health.forget_except({f"{suite.name}@{device.name}" for suite, devices in plan for device in devices})
        self._executor.progress.plan([(suite.name, device) for suite, devices in plan for device in devices])
        self._first_run = {}  # the jobs of this plan only
        self._generation += 1
        alias = f"plan{self._generation}"
        # a thread per scheduled job, as many again for the runs started now or to confirm (each waits for
        # its device like a scheduled run), and one spare
        pool = ThreadPoolExecutor(max_workers=2 * max(1, jobs) + 1)
        self._pools.append(pool)
        self._scheduler.add_executor(pool, alias)
        self._alias = alias
        budgets: dict[tuple[str, str], ConfirmationBudget] = {}
        with self._extra_lock:  # a reload keeps each budget's last hour, at the new rate
            for suite, devices in plan:
                for device in devices if suite.confirm_per_hour else ():
                    budget = (self._budgets.get((suite.name, device.name))
                              or ConfirmationBudget(suite.confirm_per_hour, self._confirm_delay))
                    budget.per_hour = suite.confirm_per_hour
                    budgets[(suite.name, device.name)] = budget
            self._budgets = budgets
        for suite, devices in plan:
            for device in devices:
                job_id = f"{suite.name}@{device.name}"
                extra: dict = {}
                if job_id in kept and kept[job_id][0] == _schedule(suite):
                    extra["next_run_time"] = kept[job_id][1]
                    self._first_run[job_id] = "kept"
                elif suite.run_at_start and job_id not in kept:
                    extra["next_run_time"] = datetime.now(timezone.utc)
                    self._first_run[job_id] = "now"
                else:
                    self._first_run[job_id] = "changed" if job_id in kept else "schedule"
                self._scheduler.add_job(
                    self.run_suite, suite_trigger(suite), args=(suite, device), id=job_id, executor=alias,
                    name=f"suite {suite.name} on {device.name}", max_instances=1, coalesce=True,
                    misfire_grace_time=int(suite.misfire_grace_seconds), **extra)

    def replace(self, plan: list[tuple[Suite, list[Device]]], *, source: str = "") -> None:
        """Schedule a reloaded configuration's ``plan`` instead of the current one (see the module).  A run
        started now or a confirmation that waits to start keeps its place (its suite as it was asked for)."""
        scheduled = [job for job in self._scheduler.get_jobs() if job.id not in self._one_offs]
        kept = {job.id: (_schedule(job.args[0]), job.next_run_time) for job in scheduled}
        for job in scheduled:
            self._scheduler.remove_job(job.id)
        self._plan, self._source = plan, source or self._source
        retired, retired_pool = self._alias, self._pools[-1]
        self._add_jobs(plan, kept)
        self._retire(retired, retired_pool)
        if self._scheduler.running:
            self._log_jobs()

    def _retire(self, alias: str, pool: ThreadPoolExecutor) -> None:
        """An earlier plan's pool after a reload: the runs started now or the confirmations still waiting on it
        move to the new plan's pool, and it takes no more work; its running suites finish as configured and
        its threads end with them, so a reload leaves no idle threads behind (each used to keep its pool's)."""
        with self._extra_lock:
            for job in self._scheduler.get_jobs():
                if job.executor == alias:
                    self._scheduler.modify_job(job.id, executor=self._alias)
            self._scheduler.remove_executor(alias, shutdown=False)
        pool.shutdown(wait=False)

    def start(self) -> None:
        self._scheduler.start()
        self._log_jobs()

    def _log_jobs(self) -> None:
        suites = {f"{suite.name}@{device.name}": suite for suite, devices in self._plan for device in devices}
        for job in self._scheduler.get_jobs():
            if job.id in self._one_offs:
                continue  # logged when it was asked for
            log.info("scheduled %s: %s", job.name,
                     self._describe(suites[job.id], job.next_run_time, self._first_run.get(job.id, "schedule")))

    def _describe(self, suite: Suite, next_run: datetime | None, why: str) -> str:
        """When a suite runs: its schedule, its first run, and why it does or does not run now."""
        schedule = (f"every {suite.interval_seconds:g} s" if suite.interval_seconds
                    else f"cron '{suite.cron}' (UTC)")
        when = next_run.strftime("%Y-%m-%d %H:%M:%S %Z") if next_run is not None else "never"
        if why == "now":
            where = " in the embedded default configuration" if self._source == EMBEDDED_SOURCE else ""
            return f"{schedule}; first run now (run_at_start = true{where})"
        if why == "kept":
            return f"{schedule}; next run {when} (unchanged by the reload: it keeps its time)"
        if why == "changed":
            return f"{schedule}; next run {when} (its schedule changed in the reload)"
        return f"{schedule}; first run {when} (run_at_start = false: waits for its time)"

    def run_now(self, suite: Suite, device: Device, why: str) -> bool:
        """Start ``suite`` on ``device`` now (it waits for the device like a scheduled run); False where such
        a run is already waiting or running."""
        job_id = f"{suite.name}@{device.name} now"
        with self._extra_lock:
            if self._scheduler.get_job(job_id) is not None:
                return False
            log.info("suite %s on %s: runs now: %s", suite.name, device.name, why)
            self._one_offs.add(job_id)
            self._scheduler.add_job(self.run_suite, "date", args=(suite, device), id=job_id, executor=self._alias,
                                    name=f"suite {suite.name} on {device.name} now", max_instances=1,
                                    misfire_grace_time=None, run_date=datetime.now(timezone.utc))
        return True

    def judged(self, record: RunRecord, states: dict[str, str], slow: bool = False) -> bool:
        """A run was recorded and judged (``states``: its series' watched figures -> verdict state; ``slow``:
        it was one slow run): where its suite confirms and the series needs it, run that case again after the
        budget's delay.  Returns whether a confirmation was planned.  Only a measured run (``ok`` or
        ``incorrect``) asks: a skipped one gives no value, so it changes nothing a confirmation could answer."""
        if record.status not in ("ok", "incorrect") or not wants_confirmation(states, slow):
            return False
        found = [(suite, device) for suite, devices in self._plan for device in devices
                 if suite.name == record.suite and device.name == record.device]
        if not found:
            return False
        suite, device = found[0]
        why = ", ".join(f"{figure} {state}" for figure, state in sorted(states.items()) if state != "ok") \
            or "one slow run"
        return self._plan_confirmation(suite, device, record, why)

    def _plan_confirmation(self, suite: Suite, device: Device, record: RunRecord, why: str) -> bool:
        with self._extra_lock:
            budget = self._budgets.get((suite.name, device.name))
            series = record.key()
            at = budget.ask(series, time.time()) if budget is not None else None
            if budget is None or at is None:
                return False
            job_id = f"{suite.name}@{device.name} confirm {abs(hash(series))}"
            log.info("suite %s on %s: %s %s (%s): confirming it alone in %.0f s", suite.name, device.name,
                     record.workload, record.shape, why, at - time.time())
            self._one_offs.add(job_id)
            self._scheduler.add_job(self._confirm, "date", args=(suite, device, record, budget), id=job_id,
                                    executor=self._alias, name=f"confirmation of {record.workload} {record.shape} "
                                    f"in suite {suite.name} on {device.name}", max_instances=1,
                                    misfire_grace_time=None, replace_existing=True,
                                    run_date=datetime.fromtimestamp(at, timezone.utc))
        return True

    def _confirm(self, suite: Suite, device: Device, record: RunRecord, budget: ConfirmationBudget) -> None:
        """Run the one case of ``suite`` that ``record`` is a run of, on ``device``; one the idle guard
        skipped (or that could not start) is asked for again, within the budget."""
        def same(spec: WorkloadSpec, case: Case) -> bool:
            return (spec.name, case.precision, case.shape, case.mode, case.kernel_pass) == (
                record.workload, record.precision, record.shape, record.mode, record.kernel_pass)

        with self._extra_lock:  # started: its own run may ask for the next one (the fast rule's third run)
            budget.done(record.key())
        records = self.run_suite(suite, device, only=same, what="confirmation")
        if not any(r.status in ("ok", "incorrect") for r in records) and not self._executor.stop.is_set():
            reason = records[0].reason if records else "it did not run"
            self._plan_confirmation(suite, device, record, f"its confirmation was not measured: {reason}")

    @property
    def running(self) -> bool:
        return self._scheduler.running

    def shutdown(self) -> None:
        """Stop scheduling, stop the running worker (via the executor's stop event), wait for jobs."""
        self._executor.stop.set()
        if self._scheduler.running:
            self._scheduler.shutdown(wait=True)  # waits for the current plan's pool
        for pool in self._pools:  # and for earlier plans' runs, which a reload let finish
            pool.shutdown(wait=True)

    def run_suite(self, suite: Suite, device: Device, *, only: Callable[[WorkloadSpec, Case], bool] | None = None,
                  what: str = "") -> list[RunRecord]:
        """One scheduled run: wait for the device (another suite may have it), unless stopping.  ``only``:
        run just the cases it accepts (a confirmation, named ``what`` in the log).

        Never raises, and never leaves anything held: a run that cannot start (its device's lock file cannot
        be written) or fails unexpectedly is logged and noted in :attr:`health` until the job runs again.
        Returns the records of the cases that ended (none where it could not run)."""
        job = f"{suite.name}@{device.name}"
        try:
            return self._run_suite(suite, device, job, only, what)
        except Exception as exc:  # a bug or a full state folder in one run must not end the schedule
            reason = _failure(exc)
            _failures.note(f"{job}: {reason}", logging.ERROR,
                           "suite %s on %s could not run: %s; the agent cannot run its suites until this is fixed "
                           "(it tries again at the next scheduled run)", suite.name, device.name, reason,
                           exc_info=not isinstance(exc, OSError))
            self.health.failed(job, f"suite {suite.name} on {device.name} could not run: {reason}")
            return []

    def _run_suite(self, suite: Suite, device: Device, job: str,
                   only: Callable[[WorkloadSpec, Case], bool] | None = None, what: str = "") -> list[RunRecord]:
        stop = self._executor.stop
        with self._executor.locks.hold([device], stop, what=f"suite {suite.name} on {device.name}") as held:
            if not held or stop.is_set():
                return []
            timeout, why = case_timeout(suite.timeout_seconds, device.type, suite.timeout_given)
            log.info("suite %s on %s: started (%s, timeout %g s per case%s)", suite.name, device.name,
                     what or plural(len(suite.workloads), "workload"), timeout,
                     "" if timeout == suite.timeout_seconds else f": {why}")
            started = time.monotonic()
            items = [(registry.get(entry.name), entry.params) for entry in suite.workloads]
            if only is None:  # (the tests' stand-in executors take no ``only``)
                records = self._executor.execute_many(items, device, suite=suite.name, timeout=timeout)
            else:
                records = self._executor.execute_many(items, device, suite=suite.name, timeout=timeout, only=only)
            run = self._executor.progress.last(suite.name, device)
            interruption = run.interruption if run is not None else None
            last = f" (last: {run.unsaid})" if run is not None and run.unsaid else ""
            counts = Counter(record.status for record in records)
            if interruption is not None:
                log.info("suite %s on %s: interrupted after %.1f s: %s (%s)%s", suite.name, device.name,
                         time.monotonic() - started, status_counts_text(counts, interruption.cases_left),
                         interruption.reason, last)
            else:
                log.info("suite %s on %s: ended in %.1f s: %s%s", suite.name, device.name,
                         time.monotonic() - started, status_counts_text(counts), last)
        self.health.ran(job)
        return records


def _failure(exc: BaseException) -> str:
    """An exception as one line: an OSError by its file and errno name (``No space left on device (ENOSPC)``)."""
    if isinstance(exc, OSError) and exc.errno is not None:
        name = errno.errorcode.get(exc.errno, str(exc.errno))
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror or exc} ({name})"
    return f"{type(exc).__name__}: {exc}"


def _schedule(suite: Suite) -> str:
    """A suite's schedule as text, to tell whether a reload changed it."""
    return f"every {suite.interval_seconds:g} s" if suite.interval_seconds else f"cron {suite.cron}"


def suite_trigger(suite: Suite) -> IntervalTrigger | CronTrigger:
    """A cron line is read in UTC, whatever the host's zone: the scheduler's own ``timezone`` applies
    only to triggers it builds from a name, and a ``CronTrigger`` built here would take the host's."""
    return (IntervalTrigger(seconds=suite.interval_seconds) if suite.interval_seconds
            else CronTrigger.from_crontab(suite.cron, timezone=timezone.utc))
