"""A suite while it runs, and when something stops it (issue 29, "the daemon at work").

- Progress: each workload is logged as it starts and as it ends, with its case counts, at most one line
  every few seconds (a workload that ends with failures at once, as a warning); ``/metrics`` shows whether
  each suite runs, its cases done (by status) and in all, and the workload running.
- Durability: each case is in the history when it ends, not when its worker does, so a daemon
  SIGKILLed mid-suite loses no case that finished; the next start records the interruption, once.
- Interruptions: a stopped suite run is one record, never a ``skipped`` row per case left; ``unsupported``
  and ``skipped`` are counted apart from the failures (``failed``, ``incorrect``, ``timeout``) in the
  report's header, the command line's summary and its exit code.
"""

from __future__ import annotations

import logging
import re
import sqlite3
import time
from datetime import datetime
from pathlib import Path

import psutil
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sixdim.cli import main
from sixdim.core.results import Interruption, status_counts_text
from sixdim.http.board import Board
from sixdim.http.exporter import SixdimCollector
from sixdim.run.devices import Device
from sixdim.run.executor import Executor
from sixdim.run.progress import SuiteProgress, SuiteRun
from sixdim.run.runner import STOPPING_REASON
from sixdim.store.history import History
from tests.conftest import free_port
from tests.daemon import Daemon, crash, write_config
from tests.helpers import make_record

CPU = Device("cpu", model_name="Test CPU")


def _interruption(suite: str = "quick", left: int = 34, done: int = 6) -> Interruption:
    return Interruption(suite=suite, hostname="node1", device_type="cuda", device="cuda:0", gpu="0", uuid="GPU-a",
                        model_name="NVIDIA H100 80GB HBM3", pci_bus_id="00000000:17:00.0", reason=STOPPING_REASON,
                        started_at=1000.0, ended_at=1100.0, cases_done=done, cases_left=left,
                        running="conv fp16 n=8", workloads=["conv", "rnn"])


def _samples(text: str, name: str) -> list:
    return [s for family in text_string_to_metric_families(text) for s in family.samples if s.name == name]


def _progress_lines(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "sixdim.run.progress"]


# ---------------------------------------------------------------------------- 1. progress: the log

def test_each_workload_is_logged_as_it_starts_and_ends_at_most_one_line_every_few_seconds(caplog):
    caplog.set_level(logging.INFO, logger="sixdim.run.progress")
    run = SuiteRun("quick", CPU, "h", ["gemm", "gemm", "conv", "rnn", "launch_latency"], log_every=0.6)
    run.case_started(0)
    run.case_ended(0, "ok")
    run.case_started(1)
    run.case_ended(1, "unsupported")
    run.case_started(2)
    assert _progress_lines(caplog) == []  # all within the first 0.6 s: one line, later
    state = run.state()
    assert (state.running, state.cases, state.done, state.workload) == (True, 5, {"ok": 1, "unsupported": 1}, "conv")
    time.sleep(1.0)  # nothing more happens: the timer says what waited
    [first] = _progress_lines(caplog)
    assert first.levelno == logging.INFO
    assert first.getMessage().startswith("suite quick on cpu: 2 of 5 cases done after ")
    assert first.getMessage().endswith(": gemm ended (2 cases: 1 ok; not run: 1 unsupported) | conv started (1 case)")
    assert "gemm started" not in first.getMessage()  # its end says it all

    run.case_ended(2, "timeout")  # a failure is said at once, as a warning
    warned = _progress_lines(caplog)[-1]
    assert warned.levelno == logging.WARNING and len(_progress_lines(caplog)) == 2
    assert warned.getMessage().endswith(": conv ended (1 case: 0 ok; failures: 1 timeout)")

    run.case_started(3)
    run.case_ended(3, "ok")
    run.case_started(4)
    assert len(_progress_lines(caplog)) == 2  # sooner than 0.6 s after the warning: waits
    run.case_ended(4, "skipped")
    run.finish()  # what waited is said at the end
    last = _progress_lines(caplog)[-1]
    assert last.getMessage().startswith("suite quick on cpu: 5 of 5 cases done after ")
    assert last.getMessage().endswith(": rnn ended (1 case: 1 ok) | launch_latency ended (1 case: 0 ok; not run: "
                                      "1 skipped)")
    assert len(_progress_lines(caplog)) == 3
    state = run.state()
    assert (state.running, state.workload) == (False, "")
    assert state.done == {"ok": 2, "unsupported": 1, "timeout": 1, "skipped": 1}


def test_where_the_scheduler_says_the_end_the_last_progress_goes_on_its_line(caplog):
    caplog.set_level(logging.INFO, logger="sixdim.run.progress")
    run = SuiteRun("quick", CPU, "h", ["gemm", "conv"], end_said_by_caller=True)
    for k, status in enumerate(("ok", "unsupported")):
        run.case_started(k)
        run.case_ended(k, status)
    run.finish()
    assert _progress_lines(caplog) == []  # one line at the end, the scheduler's, not two
    assert run.unsaid == "gemm ended (1 case: 1 ok) | conv ended (1 case: 0 ok; not run: 1 unsupported)"


def test_a_long_workload_gets_a_line_while_it_runs():
    clock = [0.0]
    run = SuiteRun("nightly", CPU, "h", ["gemm"] * 100, clock=lambda: clock[0], log_every=5.0, heartbeat=60.0)
    with_lines = []
    run._flush_due = lambda: None  # no timer thread: this test drives the clock
    handler = logging.Handler()
    handler.emit = lambda record: with_lines.append(record.getMessage())
    logger = logging.getLogger("sixdim.run.progress")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        run.case_started(0)
        for k in range(40):
            clock[0] += 2.0
            run.case_ended(k, "ok")
            run.case_started(k + 1)
    finally:
        logger.removeHandler(handler)
        run.finish()
    heartbeats = [line for line in with_lines if "gemm running" in line]
    assert heartbeats == ["suite nightly on cpu: 30 of 100 cases done after 60 s: gemm started (100 cases) | "
                          "gemm running (30 of 100 cases done)"]


def test_case_counts_keep_failures_apart_from_the_cases_that_did_not_run():
    assert status_counts_text({"ok": 30, "failed": 2, "timeout": 1, "incorrect": 1, "unsupported": 6,
                               "skipped": 1}) == ("41 cases: 30 ok; failures: 2 failed, 1 incorrect, 1 timeout; "
                                                  "not run: 6 unsupported, 1 skipped")
    assert status_counts_text({"ok": 2, "unsupported": 1}, cases_left=34) == (
        "3 cases: 2 ok; not run: 1 unsupported; interrupted: 34 cases not run")


# ---------------------------------------------------------------------------- 1 and 3 on /metrics

def test_metrics_show_each_scheduled_suite_its_cases_its_workload_and_its_interruptions(tmp_path):
    history = History(tmp_path / "h.db")
    history.add_interruption(_interruption())
    history.add_interruption(_interruption(left=2))
    history.add_interruption(_interruption(suite="nightly"))
    board = Board.from_history(history)
    gpu = Device("cuda", 0, "GPU-a", "NVIDIA H100 80GB HBM3", "00000000:17:00.0")
    progress = SuiteProgress("node1")
    progress.plan([("quick", gpu), ("nightly", gpu)])
    run = progress.begin("quick", gpu, ["gemm", "gemm", "conv"])
    run.case_started(0)
    run.case_ended(0, "ok")
    run.case_started(1)
    run.case_ended(1, "unsupported")
    run.case_started(2)
    registry = CollectorRegistry()
    registry.register(SixdimCollector(board, [], "node1", progress=progress))
    text = generate_latest(registry).decode()

    running = {s.labels["suite"]: s.value for s in _samples(text, "sixdim_suite_running")}
    assert running == {"quick": 1.0, "nightly": 0.0}  # a suite that has not run yet is there too, at 0
    assert {s.labels["suite"]: s.value for s in _samples(text, "sixdim_suite_cases")} == {"quick": 3.0, "nightly": 0.0}
    done = {s.labels["status"]: s.value for s in _samples(text, "sixdim_suite_cases_done")
            if s.labels["suite"] == "quick"}
    assert done == {"ok": 1.0, "unsupported": 1.0, "failed": 0.0, "timeout": 0.0, "skipped": 0.0, "incorrect": 0.0}
    [workload] = _samples(text, "sixdim_suite_current_workload")
    assert (workload.labels["suite"], workload.labels["workload"], workload.value) == ("quick", "conv", 1.0)
    assert workload.labels["UUID"] == "GPU-a" and workload.labels["hostname"] == "node1"
    interruptions = {s.labels["suite"]: s.value for s in _samples(text, "sixdim_suite_interruptions_total")}
    assert interruptions == {"quick": 2.0, "nightly": 1.0}  # one per interrupted run, whatever the cases left

    run.case_ended(2, "failed")
    run.finish()
    text = generate_latest(registry).decode()
    assert {s.labels["suite"]: s.value for s in _samples(text, "sixdim_suite_running")}["quick"] == 0.0
    assert _samples(text, "sixdim_suite_current_workload") == []  # none runs
    assert sum(s.value for s in _samples(text, "sixdim_suite_cases_done") if s.labels["suite"] == "quick") == 3.0


def test_an_interruption_is_one_record_and_a_history_of_older_versions_is_folded(tmp_path):
    """One Ctrl-C of an older sixdim added a skipped row per case left (34 of them); this version's history
    holds one interruption instead, and a history of an older version is folded into one when it is
    opened, its finished cases kept; an interruption waiting for a locked database is spooled like a run."""
    path = tmp_path / "h.db"
    history = History(path)
    for i in range(3):  # an older version's records of one worker share its start
        done = make_record(shape=f"m={i}", ended_at=1000.0 + i)
        done.started_at = 995.0
        history.add(done)
    for i in range(34):
        left = make_record("skipped", shape=f"left={i}", ended_at=1010.0)
        left.started_at, left.reason = 995.0, STOPPING_REASON
        history.add(left)
    busy = make_record("skipped", shape="busy", ended_at=1020.0)
    busy.reason = "busy: 1 other process(es) on GPU 0 (pid 7)"
    history.add(busy)
    history.close()
    db = sqlite3.connect(path)  # as an older version left it
    db.execute("DROP TABLE interruptions")
    db.execute("PRAGMA user_version = 4")
    db.commit()
    db.close()

    from sixdim.store import reader
    with reader.reading(str(path)) as ro:  # the report reads the older file as it is
        assert reader.interrupted(ro) == reader.Interrupted(runs=1, cases_left=34, legacy_rows=34)

    history = History(path)
    assert [(r.shape, r.status) for r in history] == [("m=0", "ok"), ("m=1", "ok"), ("m=2", "ok"), ("busy", "skipped")]
    [folded] = history.interruptions_after(0)
    assert (folded.suite, folded.cases_done, folded.cases_left, folded.workloads) == ("quick", 3, 34, ["gemm"])
    assert folded.reason == STOPPING_REASON and folded.uuid == "GPU-a"
    with reader.reading(str(path)) as ro:
        assert reader.interrupted(ro) == reader.Interrupted(runs=1, cases_left=34)
    assert {s.value for s in _samples(generate_latest(_registry(Board.from_history(history))).decode(),
                                      "sixdim_suite_interruptions_total")} == {1.0}
    history.close()

    # spooled while the database cannot be written, written once by the next History
    from tests.helpers import Locker
    locker = Locker(path)
    try:
        history = History(path)
        assert history.add_interruption(_interruption(suite="spooled")) is None
        assert [i.suite for i in history.pending_interruptions()] == ["spooled"]
        assert "interruption" in history.spool_path.read_text()
    finally:
        locker.release()
    history.close()
    again = History(path)
    assert [i.suite for i in again.interruptions_after(0)] == ["quick", "spooled"]
    again.add_interruption(again.interruptions_after(0)[1])  # a retried write lands once (its uid)
    assert len(again.interruptions_after(0)) == 2


def _registry(board: Board) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(SixdimCollector(board, [], "node1"))
    return registry


# ---------------------------------------------------------------------------- 3. the report's header and the CLI

def test_the_report_header_counts_failures_apart_from_cases_not_run_and_interruptions(tmp_path):
    pytest.importorskip("plotly")
    history = History(tmp_path / "h.db")
    for i, status in enumerate(["ok"] * 5 + ["failed", "incorrect", "timeout"] + ["unsupported"] * 3 + ["skipped"]):
        history.add(make_record(status, shape=f"m={i}", ended_at=time.time() - 100 + i))
    for _ in range(3):
        history.add_interruption(_interruption())
    history.close()
    out = tmp_path / "report.html"
    assert main(["report", "html", str(out), "--history", str(tmp_path / "h.db")]) == 0
    page = out.read_text()
    header = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page[:page.index('<section id="dimensions">')]))
    assert "Runs 12 " in header
    assert "Failures 3 " in header and "Not run 4 " in header and "Interrupted 3 " in header
    assert "Not ok" not in header  # unsupported is never a failure, an interruption no run
    assert "Failures: failed 1, incorrect 1, timeout 1" in header
    assert "Not run, never failures: skipped 1, unsupported 3" in header
    assert "Interrupted suite runs: 3, leaving 102 case(s) unrun" in header


@pytest.mark.slow
def test_run_counts_unsupported_apart_from_failures_in_its_summary_and_exit_code(cli_env):
    from tests.helpers import run_sixdim

    result = run_sixdim("run", "-w", "gemm", "-d", "cpu", "-p", "m=32", "-p", "n=32", "-p", "k=32",
                        "-p", "precisions=fp32,tf32", "-p", "min_round_seconds=0.01", "-p", "warmup_seconds=0.01",
                        "-p", "power_seconds=0", env=cli_env)
    assert result.returncode == 0, result.stderr  # an unsupported case is no failure
    assert "\n2 cases: 1 ok; not run: 1 unsupported\nrecorded in " in result.stdout, result.stdout


# ---------------------------------------------------------------------------- the daemon at work: 1, 2 and 3 for real

STEPS_SUITE = """
[[suites]]
name = "steps"
interval_seconds = 3600
run_at_start = {run_at_start}
devices = ["cpu"]
timeout_seconds = 600
workloads = [
  {{name = "memory_bandwidth", params = {{directions = ["d2d"], size_bytes = 1048576, min_round_seconds = 0.01, warmup_seconds = 0.01, power_seconds = 0}}}},
  {{name = "gemm", params = {{m = 64, n = 64, k = 64, precisions = ["fp32"], min_round_seconds = 0.01, warmup_seconds = 0.01, power_seconds = 0}}}},
  {{name = "gemm", params = {{m = 256, n = 256, k = 256, precisions = ["fp32"], min_round_seconds = 120, warmup_seconds = 0.01, power_seconds = 0}}}},
]
"""  # noqa: E501 - a TOML inline table cannot span lines
"""Three cases in one worker (every one a torch kernel): two quick ones, then one of ten minutes."""


def _value(daemon: Daemon, name: str, **labels: str) -> float | None:
    found = [s.value for s in daemon.samples(name) if all(s.labels.get(k) == v for k, v in labels.items())]
    return found[0] if found else None


def _wait(condition, what: str, daemon: Daemon, timeout: float = 180.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = condition()
        except OSError:
            found = None
        if found:
            return found
        time.sleep(0.25)
    raise AssertionError(f"{what} not within {timeout} s: {daemon.log_path.read_text()}")


def _runs(history: Path) -> list[tuple[str, str, str]]:
    """The history's runs, read as they are on disk (no sixdim opening it, so nothing recovered)."""
    db = sqlite3.connect(f"file:{history}?mode=ro", uri=True)
    try:
        return db.execute("SELECT workload, shape, status FROM runs ORDER BY id").fetchall()
    finally:
        db.close()


@pytest.mark.slow
def test_serve_shows_a_suite_as_it_runs_and_a_sigkill_loses_no_finished_case(tmp_path, cli_env):
    history, state = tmp_path / "history.db", Path(cli_env["SIXDIM_STATE_DIR"])
    config = write_config(tmp_path / "steps.toml", history, STEPS_SUITE.format(run_at_start="true"))
    env = {**cli_env, "SIXDIM_LOG_LEVEL": "info"}
    daemon = Daemon(config, free_port(), env, tmp_path / "serve.log")
    try:
        daemon.wait_ready()
        # 1. /metrics: the suite runs, two of its three cases done, the second gemm running
        _wait(lambda: _value(daemon, "sixdim_suite_cases_done", suite="steps", status="ok") == 2.0,
              "two cases done", daemon)
        assert _value(daemon, "sixdim_suite_running", suite="steps") == 1.0
        assert _value(daemon, "sixdim_suite_cases", suite="steps") == 3.0
        assert _value(daemon, "sixdim_suite_current_workload", suite="steps", workload="gemm") == 1.0
        # 2. each finished case is on /metrics while its worker goes on with the next
        _wait(lambda: _value(daemon, "sixdim_workload_runs_total", workload="gemm", status="ok") == 1.0,
              "the first gemm's run counted", daemon, timeout=10)
        assert _value(daemon, "sixdim_workload_runs_total", workload="memory_bandwidth", status="ok") == 1.0
        worker = [p for p in psutil.Process(daemon.process.pid).children(recursive=True)
                  if "sixdim.run.worker" in " ".join(p.cmdline())]
        assert len(worker) == 1, "one worker runs all three cases"
        # 1. the log: each workload as it starts and as it ends, with its counts, before the suite ends
        _wait(lambda: "gemm started (2 cases)" in daemon.log_path.read_text(), "gemm's start logged", daemon,
              timeout=15)
        log = daemon.log_path.read_text()
        assert "memory_bandwidth ended (1 case: 1 ok)" in log, log
        assert "suite steps on cpu: ended" not in log
        lines = [line for line in log.splitlines() if "sixdim.run.progress: suite steps on cpu: " in line]
        assert lines and all(" of 3 cases done after " in line for line in lines), log
        times = [datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f") for line in lines]
        assert all((b - a).total_seconds() >= 4.9 for a, b in zip(times, times[1:])), lines  # one every 5 s at most
    finally:
        crash(daemon.process)  # mid-suite: the last gemm has minutes to go

    # 2. durable as each case ended: in the file before anything recovers the dead daemon's run
    assert _runs(history) == [("memory_bandwidth", "size=1048576", "ok"), ("gemm", "m=64,n=64,k=64,op=NN", "ok")]
    assert list((state / "workers").iterdir()), "the dead daemon's worker record is left for the next start"

    # 3. the next start records the interruption once, and no case twice
    quiet = write_config(tmp_path / "quiet.toml", history, STEPS_SUITE.format(run_at_start="false"))
    daemon = Daemon(quiet, free_port(), env, tmp_path / "serve2.log")
    try:
        daemon.wait_ready()
        assert _runs(history) == [("memory_bandwidth", "size=1048576", "ok"), ("gemm", "m=64,n=64,k=64,op=NN", "ok")]
        [interruption] = History(history).interruptions_after(0)
        assert (interruption.suite, interruption.cases_done, interruption.cases_left) == ("steps", 2, 1)
        assert interruption.running == "gemm fp32 m=256,n=256,k=256,op=NN" and interruption.workloads == ["gemm"]
        assert interruption.reason.startswith("interrupted: the sixdim process that ran this suite")
        assert _value(daemon, "sixdim_suite_interruptions_total", suite="steps") == 1.0
        running = _wait(lambda: [v for v in [_value(daemon, "sixdim_suite_running", suite="steps")] if v is not None],
                        "the suite's gauge", daemon, timeout=10)  # the live part follows the schedule within 1 s
        assert running == [0.0]  # scheduled, not running
        assert _value(daemon, "sixdim_workload_runs_total", workload="gemm", status="skipped") is None
        assert daemon.stop() == 0
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()


@pytest.mark.slow
def test_a_case_is_in_the_history_when_it_ends_not_when_its_worker_does(tmp_path):
    """The executor records a case as the worker reports it: a reader of the history sees the first case
    while the worker is still in the second (its figures and telemetry as complete as at the end)."""
    from sixdim.collectors.nvml import NvmlCollector
    from tests.guard_workloads import spec as sleeping_spec

    history = History(tmp_path / "h.db")
    seen: list[list[str]] = []
    executor = Executor(hostname="h", history=history, nvml=NvmlCollector("h"), rapl=None,
                        on_recorded=lambda h: seen.append([r.shape for r in h]))
    records = executor.execute(sleeping_spec("naps", [{"seconds": 0.2}, {"seconds": 2.0}]), {}, CPU)
    assert [r.status for r in records] == ["ok", "ok"]
    assert seen[0] == [records[0].shape], "the first case was recorded before the second ended"
    first = records[0]
    assert first.uid.endswith(":0") and first.details["telemetry"].get("window_seconds", 0) > 0.1
    assert first.ended_at == first.details["case_wall"][1] < records[1].ended_at
    assert [r.uid for r in history] == [r.uid for r in records]
    run = executor.progress.last("", CPU)
    assert run is not None and run.state().done == {"ok": 2} and not run.running
