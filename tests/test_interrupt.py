"""Stopping ``sixdim run`` (SIGTERM, or SIGINT as Ctrl-C sends it) in the middle of a suite.

A real ``sixdim run`` child runs two ``command`` cases in one worker: a quick one, then ``sleep 60``
(a grandchild of sixdim, in the worker's process group).  Once the sleep runs, the test signals
sixdim alone, as a terminal's Ctrl-C or a service manager would: the worker is in a session of its
own, so stopping it and the sleep is sixdim's job.  Then nothing may be left: no process, no
run folder (in the state directory, or ``sixdim-run-*`` under TMPDIR: see ``cli_env``), and no traceback; the
quick case is recorded and printed, the interrupted one is neither a run nor a skip (no row, no record of its
own) but counted once in the suite run's interruption record, which the summary under the table names, and the
exit code is the shell's 128 + signal.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from sixdim.store.history import History

SUITE = """
[[suites]]
name = "two"
interval_seconds = 3600
devices = ["cpu"]
timeout_seconds = 120
workloads = [
  {name = "command", params = {argv = ["true"], label = "quick"}},
  {name = "command", params = {argv = ["sleep", "60"], label = "long"}},
]
"""


def _descendants_once_sleeping(process: subprocess.Popen, timeout: float = 60.0) -> list[psutil.Process]:
    """The run's descendants (worker and sleep), once ``sleep 60`` is among them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        found = psutil.Process(process.pid).children(recursive=True)
        try:
            if any(p.cmdline() == ["sleep", "60"] for p in found):
                return found
        except psutil.NoSuchProcess:
            pass
        time.sleep(0.1)
    raise AssertionError("the worker never started sleep 60")


def _still_running(processes: list[psutil.Process], timeout: float = 15.0) -> list[psutil.Process]:
    """Those of ``processes`` still running after ``timeout`` (a zombie waiting for init to reap it
    has stopped: it holds no memory and runs nothing)."""
    deadline = time.monotonic() + timeout
    while True:
        running = []
        for p in processes:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    running.append(p)
            except psutil.NoSuchProcess:
                pass
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(0.1)


def _kill_all(process: subprocess.Popen, descendants: list[psutil.Process]) -> None:
    """Where the test failed: nothing it started may run on."""
    if process.poll() is None:
        process.kill()
        process.communicate()
    for p in descendants:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.slow
def test_a_signal_stops_the_worker_and_its_children_and_leaves_nothing_behind(tmp_path, cli_env, sig):
    config = tmp_path / "two.toml"
    config.write_text(SUITE)
    history = Path(cli_env["SIXDIM_HISTORY"])
    temporary = Path(cli_env["TMPDIR"])
    workers = Path(cli_env["SIXDIM_STATE_DIR"]) / "workers"
    process = subprocess.Popen([sys.executable, "-m", "sixdim", "run", "--config", str(config), "--suite", "two",
                                "--device", "cpu"], env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    descendants: list[psutil.Process] = []
    try:
        descendants = _descendants_once_sleeping(process)
        assert list(workers.iterdir()), "the run's folder (request, results, record) is in the state directory"
        process.send_signal(sig)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        _kill_all(process, descendants)  # a passing run has stopped them all already

    assert process.returncode == 128 + sig, stderr
    assert "Traceback" not in stderr, stderr
    assert f"{sig.name} received" in stderr

    left = _still_running(descendants)
    assert left == [], [(p.pid, p.cmdline()) for p in left]
    assert list(temporary.iterdir()) == [] and list(workers.iterdir()) == []

    header, *rows = stdout.split("\n\n")[0].splitlines()  # the partial table, before its notes
    assert header.startswith("workload  device")
    [quick] = [row.split() for row in rows if " quick " in row]
    assert "skipped" not in quick, stdout
    assert not [row for row in rows if " long " in row], stdout  # the case it stopped is no row
    assert "; interrupted: 1 case not run\n" in stdout, stdout
    assert "interrupted on cpu: 1 case of 2 not run (command); it stopped command" in stdout, stdout

    recorded = {r.shape: r for r in History(history)}
    assert set(recorded) == {"quick"}  # one Ctrl-C adds no row for the cases it left
    assert recorded["quick"].status != "skipped"
    [interruption] = History(history).interruptions_after(0)
    assert (interruption.suite, interruption.cases_done, interruption.cases_left) == ("two", 1, 1)
    assert interruption.running.endswith(" long") and interruption.reason.startswith("interrupted")
