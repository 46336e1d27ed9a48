"""Confirmation runs (issue 41): a suspicious series of a confirming suite gets that one case run again
within the bound, the run counts in the verdict like any, and the hourly budget holds.  The end-to-end
test runs the real scheduler, executor, worker, history, board and live verdicts."""

from __future__ import annotations

import dataclasses
import time
import uuid

import pytest

from sixdim.collectors.nvml import NvmlCollector
from sixdim.config import Suite, WorkloadEntry
from sixdim.http.board import Board
from sixdim.run.confirm import CONFIRM_DELAY_SECONDS, HOUR, ConfirmationBudget, wants_confirmation
from sixdim.run.devices import resolve
from sixdim.run.executor import Executor, GuardSettings
from sixdim.run.scheduler import SuiteScheduler
from sixdim.store.history import History
from sixdim.verdicts.detector import SeriesTracker
from sixdim.verdicts.live import Verdicts
from sixdim.workloads import registry
from tests.fakenvml import FakeGpu, FakeNvml
from tests.guard_workloads import spec


def test_one_confirmation_pending_per_series_and_at_most_the_hours_budget():
    budget = ConfirmationBudget(per_hour=2, delay=120.0)
    assert budget.ask("a", now=0.0) == 120.0
    assert budget.ask("a", now=10.0) is None  # already pending for that series
    assert budget.ask("b", now=20.0) == 140.0
    budget.done("a")
    assert budget.ask("a", now=30.0) is None  # two granted within the hour: the budget is spent
    assert budget.ask("c", now=HOUR - 100.0) is None  # both grants (planned at 120 and 140 s) within its hour
    assert budget.ask("c", now=HOUR + 1.0) == HOUR + 121.0  # an hour after the first: room for one again
    assert ConfirmationBudget(per_hour=0).ask("a", now=0.0) is None
    assert budget.ask("b", now=HOUR + 2.0) is None  # still pending: "b" was never done


def test_a_suspicious_series_or_one_slow_run_asks_for_one_unless_it_regressed():
    assert wants_confirmation({"seconds": "suspicious", "flops": "ok"})
    assert wants_confirmation({"seconds": "ok"}, slow=True)  # the first slow run of a step
    assert not wants_confirmation({"seconds": "suspicious", "flops": "regression"}, slow=True)  # confirmed already
    assert not wants_confirmation({"seconds": "ok"}) and not wants_confirmation({})


def test_a_slow_run_is_one_worse_than_the_baseline_by_the_minimum_effect_while_ok():
    tracker = SeriesTracker("seconds")  # larger is worse; minimum effect 1.8%
    for i in range(40):
        tracker.update(1.0 + 0.002 * (i % 3 - 1))
    assert tracker.last.state == "ok" and tracker.last.baseline == 1.0
    assert tracker.slow_run(1.019) and not tracker.slow_run(1.017) and not tracker.slow_run(0.9)
    assert not tracker.slow_run(None) and not tracker.slow_run(float("nan"))
    faster = SeriesTracker("flops")  # smaller is worse
    for _ in range(40):
        faster.update(100.0)
    assert faster.slow_run(98.0) and not faster.slow_run(102.0)
    assert not SeriesTracker("seconds").slow_run(5.0)  # no baseline yet
    assert CONFIRM_DELAY_SECONDS <= 300  # "within a few minutes"


@pytest.mark.slow
def test_a_suspicious_series_is_confirmed_by_a_run_of_that_case_alone_and_it_counts(tmp_path, monkeypatch):
    """The first confirmation meets a busy GPU (the guard skips it) and is asked for again; the second runs
    the case alone, and its run confirms the step."""
    fake = FakeNvml([FakeGpu(uuid="GPU-aaaa")])
    nvml = NvmlCollector("node1", module=fake)
    history = History(tmp_path / "h.db")
    verdicts = Verdicts()
    board = Board(verdicts)
    executor = Executor(hostname="node1", history=history, nvml=nvml, rapl=None, on_recorded=board.catch_up,
                        guard=GuardSettings(enabled=True, max_utilization=0.05))
    [gpu] = resolve(["cuda:0"], nvml)
    steady = {"step": spec("step", [{"seconds": 0.05}, {"seconds": 0.02}])}
    monkeypatch.setattr(registry, "get", lambda name: steady[name])
    suite = Suite(name="frequent", workloads=(WorkloadEntry("step"),), interval_seconds=3600, run_at_start=False,
                  confirm_per_hour=4, timeout_seconds=60, timeout_given=True)
    scheduler = SuiteScheduler(executor, [(suite, [gpu])], confirm_delay=0.5)
    verdicts.on_judged = scheduler.judged
    scheduler.start()
    try:
        scheduler.run_suite(suite, gpu)  # one real run: its records name the series exactly as the worker does
        first, other = history.after(0)
        key = first.key()
        # a steady past of this series, then two runs 5% slower: suspicious, not yet a regression (a step past 8%
        # is outlier-scale: the large rule's 8 runs would confirm it, docs/REGRESSIONS.md)
        past = [0.05 * (1 + 0.004 * ((i * 7) % 5 - 2)) for i in range(30)] + [0.0525, 0.0525]
        for seconds in past:
            history.add(dataclasses.replace(first, uid=uuid.uuid4().hex, figures={**first.figures, "seconds": seconds}))
        slowed = history.last_id()
        steady["step"] = spec("step", [{"seconds": 0.0525}, {"seconds": 0.02}])  # the GPU is slower now
        fake.gpus[0].utilization_gpu = 90  # someone else's job: the guard skips the first confirmation
        asked = time.monotonic()
        board.catch_up(history)  # the verdicts see the past: the series turns suspicious
        assert verdicts.states(key)["seconds"] == "suspicious"
        deadline = asked + 60  # the delay (0.5 s here) twice, workers' starts, the case
        while not (skipped := history.after(slowed)):
            assert time.monotonic() < deadline, "no confirmation run"
            time.sleep(0.05)
        assert [(r.status, r.key()) for r in skipped] == [("skipped", key)] and "busy" in skipped[0].reason
        fake.gpus[0].utilization_gpu = 0
        while not (confirmations := [r for r in history.after(slowed) if r.status != "skipped"]):
            assert time.monotonic() < deadline, "the skipped confirmation was not asked for again"
            time.sleep(0.05)
        [confirmation] = confirmations  # that case alone, not the suite's other case
        assert (confirmation.suite, confirmation.key(), confirmation.figures["seconds"]) == ("frequent", key, 0.0525)
        while verdicts.states(key)["seconds"] == "suspicious":  # the board feeds it to the verdicts
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert verdicts.states(key)["seconds"] == "regression"  # the third slow run confirms the step
        assert other.key() != key and verdicts.states(other.key())["seconds"] == "insufficient_data"
    finally:
        scheduler.shutdown()
        history.close()


def test_a_reload_keeps_a_planned_confirmation_and_a_skipped_run_asks_for_none():
    """A confirmation waiting for its time survives a SIGHUP reload (the plan's scheduled jobs are
    replaced, the one-off jobs stay); a run that was not measured never asks for one."""
    import threading

    from sixdim.run.devices import Device, DeviceLocks
    from sixdim.run.progress import SuiteProgress
    from tests.helpers import make_record

    class Executor:  # the scheduler's view of it: nothing here runs a case
        def __init__(self):
            self.stop, self.locks, self.progress = threading.Event(), DeviceLocks(), SuiteProgress("node1")

    gpu = Device("cuda", 0, uuid="GPU-a")
    suite = Suite(name="quick", workloads=(WorkloadEntry("gemm"),), interval_seconds=900, run_at_start=False,
                  confirm_per_hour=4)
    scheduler = SuiteScheduler(Executor(), [(suite, [gpu])], confirm_delay=3600)
    scheduler.start()
    try:
        assert not scheduler.judged(make_record("skipped"), {"seconds": "suspicious"})
        record = make_record("ok")
        assert scheduler.judged(record, {"seconds": "suspicious"})
        assert not scheduler.judged(record, {"seconds": "suspicious"})  # one pending per series
        scheduler.replace([(suite, [gpu])])
        names = sorted(job.name for job in scheduler._scheduler.get_jobs())
        assert names == ["confirmation of gemm m=8,n=8,k=8 in suite quick on cuda:0", "suite quick on cuda:0"]
        assert not scheduler.judged(record, {"seconds": "suspicious"})  # still pending after the reload
    finally:
        scheduler.shutdown()
