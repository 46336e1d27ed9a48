"""A case in flight when its agent is SIGKILLed is interrupted, not failed (issue 30, item 10).

The worker's output is a pipe to its agent: once the agent is dead, the next line the case prints
(its progress, a command's output) raises ``BrokenPipeError``.  That is the agent's death, not the
case's failure: the next start records the suite run's one interruption (counting the case in
flight), and no ``failed`` run for it, which would count as a failure and could page.

Real processes throughout: a ``sixdim serve`` running a command that prints all the time, SIGKILLed
(its worker left to notice on its own, as it would after an OOM kill), then a successor on the same
state folder and history."""

from __future__ import annotations

import sqlite3
import sys
import time
from pathlib import Path

import pytest

from sixdim.run import proctree
from sixdim.store.history import History
from tests.conftest import free_port
from tests.daemon import Daemon, write_config

CHATTY = (
    "import sys, time\n"
    "open(sys.argv[1], 'w').write('running')\n"
    "while True:\n"
    "    print('step', flush=True)\n"
    "    time.sleep(0.002)\n"
)
"""A command that prints a line every 2 ms, for as long as it is let: the worker relays each as progress."""


def _suite(script: Path, marker: Path, run_at_start: bool) -> str:
    return f"""
[[suites]]
name = "chatty"
interval_seconds = 3600
run_at_start = {str(run_at_start).lower()}
devices = ["cpu"]
timeout_seconds = 600
workloads = [{{name = "command", params = {{argv = ["{sys.executable}", "{script}", "{marker}"], label = "chatty"}}}}]
"""


def _runs(history: Path) -> list[tuple[str, str, str]]:
    if not history.exists():
        return []
    db = sqlite3.connect(f"file:{history}?mode=ro", uri=True)
    try:
        return db.execute("SELECT workload, status, reason FROM runs ORDER BY id").fetchall()
    finally:
        db.close()


def _worker_pid(state: Path, daemon: Daemon, timeout: float = 30.0) -> int:
    """The worker's PID, from the daemon's worker record, once it is written."""
    import json

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for record in (state / "workers").glob("*/record.json"):
            try:
                pid = json.loads(record.read_text()).get("worker_pid", 0)
            except ValueError:
                continue
            if pid:
                return int(pid)
        if daemon.process.poll() is not None:
            raise AssertionError(f"daemon exited: {daemon.log_path.read_text()}")
        time.sleep(0.05)
    raise AssertionError(f"no worker record within {timeout} s: {daemon.log_path.read_text()}")


@pytest.mark.slow  # a real daemon SIGKILLed mid-case and started again, three times: about 4 s each
@pytest.mark.parametrize("attempt", range(3))
def test_a_case_in_flight_when_the_daemon_is_sigkilled_is_interrupted_not_failed(tmp_path, cli_env, attempt):
    """Three times over, as the race (the worker's parent watch against its next write) is one of timing."""
    state, history = Path(cli_env["SIXDIM_STATE_DIR"]), tmp_path / "history.db"
    script, marker = tmp_path / "chatty.py", tmp_path / "running"
    script.write_text(CHATTY)
    config = write_config(tmp_path / "chatty.toml", history, _suite(script, marker, run_at_start=True))
    daemon = Daemon(config, free_port(), cli_env, tmp_path / "serve.log")
    try:
        daemon.wait_ready()
        worker = _worker_pid(state, daemon)
        deadline = time.monotonic() + 30
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert marker.exists(), daemon.log_path.read_text()
        time.sleep(0.2)  # the command prints away, its lines relayed through the worker
    finally:
        daemon.process.kill()  # SIGKILL only: the worker is left to notice its agent's death itself
        daemon.process.wait()
        daemon.stop()
    assert proctree.wait_gone([worker], 5.0) == [], "the worker outlived its agent"
    killed = daemon.process.pid

    quiet = write_config(tmp_path / "quiet.toml", history, _suite(script, marker, run_at_start=False))
    successor = Daemon(quiet, free_port(), cli_env, tmp_path / "serve2.log")
    try:
        successor.wait_ready()
        assert _runs(history) == [], "the case in flight is not a run, least of all a failed one"
        [interruption] = History(history).interruptions_after(0)
        assert (interruption.suite, interruption.cases_done, interruption.cases_left) == ("chatty", 0, 1)
        assert interruption.running.startswith("command ")
        assert interruption.reason.startswith(f"interrupted: the sixdim process that ran this suite (PID {killed})")
        assert not [s for s in successor.samples("sixdim_workload_runs_total") if s.labels["workload"] == "command"]
        assert successor.stop() == 0
    finally:
        if successor.process.poll() is None:
            successor.process.kill()
