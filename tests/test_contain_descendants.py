"""Every descendant of a run is stopped, whatever it does to its session, environment or signal handlers
(issue 30, item 9): ``sh -c "trap '' TERM; env -i setsid sleep 1002 & sleep 1000"`` as a command workload
leaves a ``sleep 1002`` that ignores SIGTERM, is in a session of its own, carries no
``SIXDIM_WORKER_TAG`` and, once its shell is killed, is re-parented out of the worker's tree.  After a
timeout, and after a stop of a real ``sixdim serve`` running it, no ``sleep 1002`` may be left (found by
scanning /proc for its command line).  Where this host lets root make a cgroup v2, the run's cgroup is
removed too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sixdim.run import proctree
from tests.conftest import free_port
from tests.daemon import Daemon, write_config


def _suite(seconds: int, timeout: float) -> str:
    script = f"trap '' TERM; env -i setsid sleep {seconds} & sleep 1000"
    return f"""
[[suites]]
name = "escape"
interval_seconds = 3600
devices = ["cpu"]
timeout_seconds = {timeout}
workloads = [{{name = "command", params = {{argv = ["{script}"], shell = true, label = "escape"}}}}]
"""


def _sleeping(seconds: int) -> list[int]:
    """The live processes whose command line is ``sleep SECONDS``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
        except OSError:
            continue
        if argv[:2] == [b"sleep", str(seconds).encode()] and proctree.alive(int(name)):
            found.append(int(name))
    return found


def _wait(what: str, check, timeout: float, log: Path | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what} within {timeout} s" + (f": {log.read_text()[-3000:]}" if log else ""))


def _run_cgroups(agent: int) -> list[str]:
    """The cgroups left of the runs of the sixdim process ``agent`` (a run's tag begins with its agent's PID)."""
    base = proctree.cgroup_base()
    if base is None:
        return []
    return sorted(name for name in os.listdir(base) if name.startswith(f"{proctree.CGROUP_PREFIX}{agent}-"))


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.mark.slow  # a real daemon whose worker's escaped child must be found and ended: about 5 s
def test_a_timeout_leaves_no_setsid_child_that_cleared_its_environment(tmp_path, cli_env):
    seconds = 1002
    assert _sleeping(seconds) == [], "a sleep 1002 from elsewhere would make this test meaningless"
    config = write_config(tmp_path / "escape.toml", tmp_path / "history.db", _suite(seconds, 2))
    try:
        run = subprocess.Popen([sys.executable, "-m", "sixdim", "run", "--config", str(config), "--suite", "escape"],
                               env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        output, _ = run.communicate(timeout=60)
        assert "timeout" in output, output
        assert proctree.wait_gone(_sleeping(seconds), 1.0) == [], "the setsid, env -i child outlived the timeout"
        assert _sleeping(1000) == []
        assert _run_cgroups(run.pid) == []  # the run's cgroup, where it had one, is gone with it
    finally:
        _kill(_sleeping(seconds))


@pytest.mark.slow  # a real daemon whose worker's escaped child must be found and ended: about 5 s
def test_a_stop_of_the_daemon_leaves_no_setsid_child_that_cleared_its_environment(tmp_path, cli_env):
    seconds = 1003  # not the other test's: each looks for its own
    assert _sleeping(seconds) == []
    config = write_config(tmp_path / "escape.toml", tmp_path / "history.db", _suite(seconds, 600))
    daemon = Daemon(config, free_port(), cli_env, tmp_path / "serve.log")
    try:
        daemon.wait_ready()
        [pid] = _wait("the sleep started", lambda: _sleeping(seconds), 20, daemon.log_path)
        daemon.process.send_signal(signal.SIGTERM)
        assert daemon.stop(timeout=15) == 0
        assert proctree.wait_gone([pid], 1.0) == [], "the setsid, env -i child outlived its agent's stop"
        assert _sleeping(seconds) == []
        assert _run_cgroups(daemon.process.pid) == []
    finally:
        daemon.stop()
        _kill(_sleeping(seconds))


def test_the_run_cgroup_holds_what_is_started_after_it_was_found(tmp_path):
    """Where the host allows cgroups: a process moved into its run's cgroup takes what it starts later with it,
    so a stop kills a child that neither descent, tag nor memory could find."""
    tag = "test-" + os.urandom(4).hex()
    if not proctree.contain(tag, []):
        pytest.skip(f"no cgroup v2 this process may make here: {proctree.cgroups_unusable}")
    marker = tmp_path / "late"
    # the parent waits until it is in the cgroup, then starts a detached, untagged child and exits at once
    script = (f"while [ ! -e {tmp_path}/go ]; do sleep 0.05; done; "
              f"env -i setsid sleep 1004 & echo $! > {marker}; exit 0")
    parent = subprocess.Popen(["sh", "-c", script])
    try:
        assert proctree.contain(tag, [proctree.read_stat(parent.pid)])
        (tmp_path / "go").write_text("")
        parent.wait(timeout=10)
        _wait("the late child", lambda: marker.exists() and marker.read_text().strip(), 10)
        late = int(marker.read_text())
        assert proctree.alive(late) and late in proctree.cgroup_pids(tag)
        proctree.stop_run(None, tag)
        assert proctree.wait_gone([late], 2.0) == []
        assert not os.path.exists(proctree.cgroup_folder(tag))
    finally:
        _kill(_sleeping(1004))
        proctree.remove_cgroup(tag)


def _children(pid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(name))
    return found


def test_a_stopped_worker_dies_with_its_killed_agent(tmp_path, cli_env):
    """Issue 44, item 7: a worker stopped with SIGSTOP cannot run the thread that watches its agent, so after a
    SIGKILL of the agent the worker, its ``sh`` and its ``sleep`` stayed until the next sixdim started.  The
    worker asks for SIGCONT at its parent's death: it wakes, sees its agent gone and stops what is below it."""
    seconds = 1004
    assert _sleeping(seconds) == []
    config = write_config(tmp_path / "stopped.toml", tmp_path / "history.db", f"""
[[suites]]
name = "stopped"
interval_seconds = 3600
devices = ["cpu"]
timeout_seconds = 600
workloads = [{{name = "command", params = {{argv = ["sleep {seconds}; true"], shell = true, label = "stopped"}}}}]
""")
    run = subprocess.Popen([sys.executable, "-m", "sixdim", "run", "--config", str(config), "--suite", "stopped"],
                           env=cli_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker, below = 0, []
    try:
        [sleeper] = _wait("the sleep started", lambda: _sleeping(seconds), 30)
        [worker] = _children(run.pid)
        below = [sleeper] + [pid for pid in _children(worker)]
        os.kill(worker, signal.SIGSTOP)
        _wait("the worker stopped", lambda: open(f"/proc/{worker}/stat").read().rsplit(")", 1)[1].split()[0] == "T",
              5)
        run.kill()
        run.wait(10)
        left = proctree.wait_gone([worker, *below], 5.0)
        assert left == [], f"left after the agent's SIGKILL: {left} (worker {worker}, below it {below})"
    finally:
        run.kill()
        _kill([pid for pid in (worker, *below) if pid])
        _kill(_sleeping(seconds))
