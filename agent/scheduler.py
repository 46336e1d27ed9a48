"""The schedule: APScheduler 3 runs each suite on each of its devices.

One job per (suite, device), with ``max_instances=1`` and ``coalesce`` so runs
never pile up, and a misfire grace so a run late by a little still happens.
A lock per device keeps suites that share a GPU from running on it together.  The locks are
the executor's (:class:`agent.devices.DeviceLocks`), one object per device shared by every job:
a job holds its device's lock for the whole suite, and a host-wide workload inside it also takes
every other GPU's, in index order, so it waits for any suite running on another GPU and none can
start there meanwhile.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from agent.config import Suite
from agent.devices import Device
from agent.executor import Executor
from workloads import registry

log = logging.getLogger(__name__)


class SuiteScheduler:
    def __init__(self, executor: Executor, plan: list[tuple[Suite, list[Device]]]):
        self._executor = executor
        self._plan = plan
        jobs = sum(len(devices) for _, devices in plan)
        self._scheduler = BackgroundScheduler(
            executors={"default": ThreadPoolExecutor(max_workers=max(1, jobs))}, timezone=timezone.utc)
        for suite, devices in plan:
            for device in devices:
                trigger = (IntervalTrigger(seconds=suite.interval_seconds) if suite.interval_seconds
                           else CronTrigger.from_crontab(suite.cron))
                extra = {"next_run_time": datetime.now(timezone.utc)} if suite.run_at_start else {}
                self._scheduler.add_job(
                    self.run_suite, trigger, args=(suite, device), id=f"{suite.name}@{device.name}",
                    name=f"suite {suite.name} on {device.name}", max_instances=1, coalesce=True,
                    misfire_grace_time=int(suite.misfire_grace_seconds), **extra)

    def start(self) -> None:
        self._scheduler.start()
        for job in self._scheduler.get_jobs():
            log.info("scheduled %s, next run %s", job.name, job.next_run_time)

    @property
    def running(self) -> bool:
        return self._scheduler.running

    def shutdown(self) -> None:
        """Stop scheduling, stop the running worker (via the executor's stop event), wait for jobs."""
        self._executor.stop.set()
        if self._scheduler.running:
            self._scheduler.shutdown(wait=True)

    def run_suite(self, suite: Suite, device: Device) -> None:
        """One scheduled run: wait for the device (another suite may have it), unless stopping."""
        stop = self._executor.stop
        with self._executor.locks.hold([device], stop) as held:
            if not held or stop.is_set():
                return
            try:
                items = [(registry.get(entry.name), entry.params) for entry in suite.workloads]
                self._executor.execute_many(items, device, suite=suite.name, timeout=suite.timeout_seconds)
            except Exception:  # a bug in one run must not end the schedule
                log.exception("suite %s on %s failed unexpectedly", suite.name, device.name)
