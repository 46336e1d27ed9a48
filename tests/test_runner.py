"""The worker boundary, with real child processes: nothing a workload does can take the daemon down."""

import os
import signal
import threading
import time

import psutil
import pytest

from sixdim.run.runner import TERMINATE_GRACE_SECONDS, run_worker
from sixdim.workloads.logs.lines import bounded_lines


@pytest.mark.slow
def test_successful_worker_returns_figures_window_and_environment():
    progress = []
    outcome = run_worker("tests.fault_workloads:succeeds", [{"seconds": 0.2}], "cpu", 60, on_progress=progress.append)
    assert outcome.status == "ok", outcome.reason
    [case] = outcome.cases.values()
    assert case.status == "ok" and case.figures == {"seconds": 0.25, "flops": 4.0e9}
    start, end = case.window
    assert 0.19 < end - start < 2.0
    assert outcome.environment["torch"]  # the worker reports the torch it ran with
    assert progress == ["working"]


@pytest.mark.slow
def test_worker_that_raises_is_a_failure_with_the_exception():
    outcome = run_worker("tests.fault_workloads:raises", [{}], "cpu", 60)
    assert outcome.cases[0].status == "failed"
    assert outcome.cases[0].reason.startswith("RuntimeError: CUDA out of memory")
    assert outcome.returncode == 0  # the worker itself carried on


@pytest.mark.slow
def test_worker_that_crashes_is_a_failure_naming_the_signal():
    outcome = run_worker("tests.fault_workloads:crashes", [{}], "cpu", 60)
    assert outcome.status == "failed"
    assert outcome.returncode == -signal.SIGSEGV
    assert "SIGSEGV" in outcome.reason
    assert "about to crash" in outcome.reason  # the last output line explains what happened


@pytest.mark.slow
def test_worker_that_exits_without_result_is_a_failure_with_its_code():
    outcome = run_worker("tests.fault_workloads:exits", [{}], "cpu", 60)
    assert outcome.status == "failed"
    assert "code 3" in outcome.reason and "giving up" in outcome.reason


@pytest.mark.slow
def test_hanging_worker_is_stopped_at_timeout_with_its_whole_process_group(tmp_path):
    pid_file = tmp_path / "pids"
    started = time.monotonic()
    # No torch: the case (and its PID file) must start well within the timeout on a busy machine.
    outcome = run_worker("tests.fault_workloads:hangs", [{"pid_file": str(pid_file)}], "cpu", timeout=5.0,
                         uses_torch=False)
    elapsed = time.monotonic() - started
    assert outcome.status == "timeout"
    assert "5 s" in outcome.reason
    # It ignores SIGTERM, so SIGKILL follows the grace period (the slack is for a loaded machine).
    assert 5.0 <= elapsed < 5.0 + TERMINATE_GRACE_SECONDS + 10.0
    worker_pid, grandchild_pid = map(int, pid_file.read_text().split())
    for pid in (worker_pid, grandchild_pid):
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


@pytest.mark.slow
def test_stop_event_interrupts_a_running_worker(tmp_path):
    stop = threading.Event()
    threading.Timer(1.5, stop.set).start()
    started = time.monotonic()
    outcome = run_worker("tests.fault_workloads:hangs", [{"pid_file": str(tmp_path / "p")}], "cpu", 120, stop=stop)
    assert outcome.status == "skipped" and "shutting down" in outcome.reason
    assert time.monotonic() - started < 1.5 + TERMINATE_GRACE_SECONDS + 3.0


@pytest.mark.slow
def test_worker_runs_in_its_own_process_group():
    groups = []
    run_worker("tests.fault_workloads:succeeds", [{"seconds": 0.5}], "cpu", 60,
               on_start=lambda pid: groups.append(os.getpgid(pid)))
    assert groups and groups[0] != os.getpgrp()


@pytest.mark.slow
def test_cases_run_in_one_worker_and_a_crash_keeps_the_finished_ones():
    outcome = run_worker("tests.fault_workloads:by_kind",
                         [{"kind": "ok"}, {"kind": "unsupported"}, {"kind": "raise"}, {"kind": "ok"},
                          {"kind": "crash"}, {"kind": "ok"}], "cpu", 60)
    assert [outcome.cases[i].status for i in sorted(outcome.cases)] == ["ok", "unsupported", "failed", "ok"]
    assert outcome.cases[1].reason == "no fp8 on this device (simulated)"
    assert outcome.status == "failed" and "SIGSEGV" in outcome.reason  # case 5 crashed; 6 never ran
    assert len({outcome.cases[i].window for i in (0, 3)}) == 2  # each case has its own window


@pytest.mark.slow
def test_timeout_is_per_case():
    # each case finishes well within 5 s (3 s to spare for the worker's start on a busy machine), the
    # three together take longer: none may time out
    started = time.monotonic()
    outcome = run_worker("tests.fault_workloads:succeeds", [{"seconds": 2.0}] * 3, "cpu", timeout=5.0,
                         uses_torch=False)  # no torch import in the first case's time
    assert time.monotonic() - started > 6.0
    assert outcome.status == "ok" and [c.status for c in outcome.cases.values()] == ["ok"] * 3


def test_gpu_uuids_reach_the_workers_request():
    outcome = run_worker("tests.guard_workloads:step", [{}], "cpu", 60, uses_torch=False,
                         gpu_uuids=["GPU-aaaa", "GPU-bbbb"])
    assert outcome.cases[0].details["gpu_uuids"] == ["GPU-aaaa", "GPU-bbbb"]
    outcome = run_worker("tests.guard_workloads:step", [{}], "cpu", 60, uses_torch=False)
    assert outcome.cases[0].details["gpu_uuids"] is None  # not given: left out of the request


def test_between_cases_stops_the_worker_and_skips_the_running_case_and_the_rest():
    calls = []

    def busy_after_first_case() -> str | None:
        calls.append(time.monotonic())
        return "busy: 1 other process(es) on GPU 0 (pid 4242)"

    # a long interval: only a finished case triggers the check
    outcome = run_worker("tests.guard_workloads:step", [{"seconds": 0.1}, {"seconds": 30}, {"seconds": 0.1}], "cpu",
                         60, uses_torch=False, between_cases=busy_after_first_case, between_cases_interval=600)
    # the before-run check found the GPU clear; this one, at case 1's end, cannot tell when in case 1 the
    # other process started: case 1 is not recorded either
    [(status, reason)] = [(outcome.cases[i].status, outcome.cases[i].reason) for i in sorted(outcome.cases)]
    assert status == "skipped" and reason.startswith("busy: 1 other process(es) on GPU 0 (pid 4242)")
    assert (outcome.status, outcome.reason) == ("skipped", "busy: 1 other process(es) on GPU 0 (pid 4242)")
    assert len(calls) == 1


def test_a_case_whose_end_finds_the_gpu_busy_is_not_recorded_even_the_last():
    """Issue 45, item 4: the guard was asked after a case had been handed on, and never after the worker's last
    case, so a job that started on the GPU in a case's last seconds left its work in that case's figures.  A case
    is handed on only once a check after it found the GPU ours alone; a busy answer then, the worker's last case
    included, makes every case since the last clear check ``skipped`` with the guard's reason."""
    answers = iter([None, "busy: 1 other process(es) on GPU 0 (pid 4242) appeared during the run; run stopped"])
    handed: list[int] = []
    outcome = run_worker("tests.guard_workloads:step", [{"seconds": 0.05}, {"seconds": 0.6}], "cpu", 60,
                         uses_torch=False, between_cases=lambda: next(answers, None), between_cases_interval=600,
                         on_case=lambda index, result, environment: handed.append(index))
    statuses = [(outcome.cases[i].status, outcome.cases[i].reason) for i in sorted(outcome.cases)]
    assert statuses[0] == ("ok", "")
    assert statuses[1][0] == "skipped" and "pid 4242" in statuses[1][1] and "as this case ended" in statuses[1][1]
    assert outcome.cases[1].figures == {} and outcome.cases[1].wall is not None  # its span, not its figures
    assert handed == [0]  # the busy case never reached the history as it ended


@pytest.mark.slow
def test_between_cases_is_also_asked_during_a_long_case():
    answers = iter([None, None, "busy: someone else's job"])
    started = time.monotonic()
    outcome = run_worker("tests.guard_workloads:step", [{"seconds": 60}], "cpu", 120, uses_torch=False,
                         between_cases=lambda: next(answers), between_cases_interval=0.5)
    assert not outcome.cases and (outcome.status, outcome.reason) == ("skipped", "busy: someone else's job")
    assert time.monotonic() - started < 10  # three checks 0.5 s apart, then SIGTERM: not the case's 60 s


def test_a_between_cases_check_that_raises_stops_the_worker():
    def broken() -> str | None:
        raise OSError("NVML went away")

    outcome = run_worker("tests.guard_workloads:step", [{"seconds": 0.1}, {"seconds": 30}], "cpu", 60,
                         uses_torch=False, between_cases=broken, between_cases_interval=600)
    assert outcome.status == "skipped"
    assert outcome.reason == "the between-cases check failed: OSError: NVML went away"


def test_output_lines_are_cut_and_split_at_carriage_returns():
    chunks = [b"a" * 10_000, b"b" * 10_000 + b"\rprogress 10%\rprogress 20%", b"\nlast"]
    lines = list(bounded_lines(chunks, limit=100))
    assert lines[0] == "a" * 100 + " [... 19900 more bytes cut]"
    assert lines[1:] == ["progress 10%", "progress 20%", "last"]


def test_a_huge_line_and_a_progress_bar_neither_grow_the_daemon_nor_fake_a_timeout():
    before = psutil.Process().memory_info().rss
    outcome = run_worker("tests.fault_workloads:floods", [{"mib": 200}, {"mib": 0}], "cpu", timeout=60,
                         uses_torch=False)
    grown = psutil.Process().memory_info().rss - before
    assert [outcome.cases[i].status for i in (0, 1)] == ["ok", "ok"]  # each case-done marker was seen
    assert outcome.status == "ok"
    assert grown < 64 * 2**20, f"the reader kept {grown / 2**20:.0f} MiB of a 200 MiB line"


def test_a_failure_reason_never_quotes_an_earlier_cases_output():
    outcome = run_worker("tests.fault_workloads:says", [{"word": "secret-of-case-one"}, {"word": "mine", "exit": 1}],
                         "cpu", 60, uses_torch=False)
    assert outcome.cases[0].status == "ok" and 1 not in outcome.cases
    assert outcome.status == "failed"
    assert "mine" in outcome.reason
    assert "secret-of-case-one" not in outcome.reason + "".join(outcome.output_tail)


@pytest.mark.slow
def test_an_unterminated_progress_bar_does_not_hide_the_case_done_marker():
    """Three 3 s cases under a 6 s per-case timeout: only the markers restart the clock (3 s to spare
    for the worker's start and its fsyncs on a busy machine)."""
    outcome = run_worker("tests.fault_workloads:floods", [{"mib": 0, "sleep": 3.0}] * 3, "cpu", timeout=6.0,
                         uses_torch=False)
    assert outcome.status == "ok", outcome.reason
    assert sorted(outcome.cases) == [0, 1, 2]
