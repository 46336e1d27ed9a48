"""A version or setting change seen by the daemon starts the ``on_change`` suites on the devices it
concerns, within minutes (issue 41): NVML's view (a fake NVML whose driver version and power limit
change) and the history's (a worker that reported a new torch), once per change; a device where the
suite never ran gets it at once.  The end-to-end test runs the real scheduler, executor and workers."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from sixdim.collectors.nvml import NvmlCollector
from sixdim.config import Suite, WorkloadEntry, load
from sixdim.core.conditions import setting_versions
from sixdim.run.changes import NEVER_RAN, ChangeWatch, changes
from sixdim.run.devices import resolve
from sixdim.run.executor import Executor, GuardSettings
from sixdim.run.scheduler import SuiteScheduler
from sixdim.store.history import History
from sixdim.workloads import registry
from tests.fakenvml import FakeGpu, FakeNvml
from tests.guard_workloads import spec
from tests.helpers import make_record

QUICK = Suite(name="quick", workloads=(WorkloadEntry("gemm"),), cron="17 3 * * *", on_change=True)
FREQUENT = Suite(name="frequent", workloads=(WorkloadEntry("gemm"),), interval_seconds=900)


def two_gpus() -> FakeNvml:
    return FakeNvml([FakeGpu(uuid="GPU-aaaa", bus_id="00000000:17:00.0"),
                     FakeGpu(uuid="GPU-bbbb", bus_id="00000000:2A:00.0")])


def ran_under(history: History, nvml: NvmlCollector, suite: str, gpu: int, **versions: str) -> None:
    """A record of ``suite`` on GPU ``gpu`` that ran under the GPU's settings now and ``versions``."""
    record = make_record("ok", uuid=nvml.gpu(gpu).uuid, gpu=str(gpu), ended_at=time.time())
    environment = {**record.environment, **setting_versions(nvml.conditions(gpu)), **versions}
    history.add(dataclasses.replace(record, suite=suite, environment=environment))


class Started:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    def __call__(self, suite: Suite, device, why: str) -> bool:
        self.calls.append((suite.name, device.name, why))
        return True


def watch_of(tmp_path: Path, fake: FakeNvml, suites: tuple[Suite, ...] = (QUICK, FREQUENT)):
    nvml = NvmlCollector("node1", module=fake)
    gpus = resolve(["cuda:0", "cuda:1"], nvml)
    history = History(tmp_path / "h.db")
    started = Started()
    return ChangeWatch(history, nvml, [(suite, gpus) for suite in suites], started), history, nvml, started


def test_a_driver_change_starts_the_on_change_suite_on_every_gpu_once(tmp_path):
    fake = two_gpus()
    watch, history, nvml, started = watch_of(tmp_path, fake)
    for gpu in (0, 1):
        ran_under(history, nvml, "quick", gpu)
    assert watch.check() == [] and started.calls == []  # nothing changed since quick last ran

    fake.driver = "560.35.03"
    assert watch.check() == [("quick", f"cuda:{i}", "changed since its last run here: driver 550.54.15 → 560.35.03")
                             for i in (0, 1)]
    assert watch.check() == []  # once per change, however often it looks (the guard may skip the run)
    assert [name for name, _, _ in started.calls] == ["quick", "quick"]  # never the frequent suite: not on_change


def test_a_setting_change_starts_the_suite_only_on_the_gpu_it_concerns(tmp_path):
    fake = two_gpus()
    watch, history, nvml, started = watch_of(tmp_path, fake)
    for gpu in (0, 1):
        ran_under(history, nvml, "quick", gpu)
    fake.gpus[1].power_limit_mw = 500_000
    assert watch.check() == [("quick", "cuda:1", "changed since its last run here: power_limit 700 W → 500 W")]


def test_a_version_only_a_worker_sees_comes_from_the_newest_run_of_any_suite(tmp_path):
    """torch is known to a worker only: the frequent suite's run under a new torch starts the quick suite."""
    watch, history, nvml, started = watch_of(tmp_path, two_gpus())
    for gpu in (0, 1):
        ran_under(history, nvml, "quick", gpu)
    ran_under(history, nvml, "frequent", 0, torch="2.14.1")
    assert watch.check() == [("quick", "cuda:0", "changed since its last run here: torch 2.13.0 → 2.14.1")]


def test_a_device_where_the_suite_never_ran_gets_it_at_once_and_an_unread_version_is_no_change(tmp_path):
    watch, history, nvml, started = watch_of(tmp_path, two_gpus())
    ran_under(history, nvml, "quick", 0, cudnn="")  # a version the run did not name: not a change
    ran_under(history, nvml, "frequent", 0, cudnn="9.1.0")
    assert watch.check() == [("quick", "cuda:1", NEVER_RAN)]
    assert changes({"driver": "550", "ecc": "on"}, {"driver": "550", "ecc": ""}) == []


def test_the_watch_survives_a_failing_look_and_stops(tmp_path):
    fake = two_gpus()
    watch, history, nvml, started = watch_of(tmp_path, fake)
    watch.poll_seconds = 0.05
    history.close()  # every look fails now: logged, tried again, never a dead thread
    watch.start()
    time.sleep(0.3)
    assert watch._thread is not None and watch._thread.is_alive()
    watch.stop()
    assert not watch._thread.is_alive()


@pytest.mark.slow
def test_a_driver_change_seen_by_the_daemon_runs_the_full_suite_on_the_gpus_within_minutes(tmp_path, monkeypatch):
    """The real scheduler, executor and workers on a fake NVML's two GPUs: the ``on_change`` suite (a
    stand-in workload) runs on both GPUs once the driver changes, and not before."""
    fake = two_gpus()
    nvml = NvmlCollector("node1", module=fake)
    history = History(tmp_path / "h.db")
    executor = Executor(hostname="node1", history=history, nvml=nvml, rapl=None,
                        guard=GuardSettings(enabled=False, max_utilization=0.05))
    gpus = resolve(["cuda:0", "cuda:1"], nvml)
    monkeypatch.setattr(registry, "get", {"step": spec("step", [{"seconds": 0.05}])}.__getitem__)
    quick = Suite(name="quick", workloads=(WorkloadEntry("step"),), cron="17 3 * * *", on_change=True,
                  timeout_seconds=60, timeout_given=True)
    for gpu in (0, 1):
        ran_under(history, nvml, "quick", gpu)
    before = history.last_id()
    scheduler = SuiteScheduler(executor, [(quick, gpus)])
    watch = ChangeWatch(history, nvml, [(quick, gpus)], scheduler.run_now, poll_seconds=0.2)
    scheduler.start()
    watch.start()
    try:
        time.sleep(1.0)
        assert history.after(before) == []  # no change yet: the daily suite waits for its time
        fake.driver = "560.35.03"
        changed = time.monotonic()
        deadline = changed + 300  # the acceptance's bound: within 5 minutes
        while {r.device for r in history.after(before) if r.suite == "quick"} != {"cuda:0", "cuda:1"}:
            assert time.monotonic() < deadline, "the on_change suite did not run on both GPUs within 5 minutes"
            time.sleep(0.2)
        assert all(r.status == "ok" for r in history.after(before))
    finally:
        watch.stop()
        scheduler.shutdown()
        history.close()


def test_the_embedded_default_runs_the_quick_suite_on_change_and_confirms_the_frequent_tier():
    suites = {suite.name: suite for suite in load(None).suites}
    assert suites["quick"].on_change and suites["quick"].cron and not suites["quick"].run_at_start
    assert suites["frequent"].confirm_per_hour > 0 and suites["frequent"].interval_seconds == 900
    assert not suites["power"].run_at_start and suites["power"].interval_seconds >= 3600
