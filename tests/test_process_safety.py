"""Process safety, faults injected into real processes: no process of a run outlives its timeout, its
agent's stop or its agent's death (a ``setsid`` grandchild and a re-parented orphan included); the
next start records what a killed agent was running; one agent per host and history; a device held
by the daemon makes ``sixdim run`` wait or refuse; SIGHUP reloads without a restart.

Every "nothing is left" is checked in /proc (a zombie, dead but not yet reaped, counts as gone)."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import bcrypt
import pytest

from sixdim.run import proctree
from sixdim.run.devices import DeviceLocks, cpu_device
from sixdim.run.instance import DeviceFileLocks, InstanceError
from sixdim.run.runner import run_worker
from sixdim.store.history import History
from tests.conftest import free_port
from tests.daemon import FAST_GEMM_SUITE, Daemon, write_config
from tests.fault_workloads import ESCAPE_SCRIPT, run_pids

GONE_WITHIN_SECONDS = 5.0


def _wait_for_file(path: Path, timeout: float = 60.0, daemon: Daemon | None = None) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text()
        if daemon is not None and daemon.process.poll() is not None:
            raise AssertionError(f"daemon exited: {daemon.log_path.read_text()}")
        time.sleep(0.05)
    raise AssertionError(f"{path} not written within {timeout} s" +
                         (f": {daemon.log_path.read_text()}" if daemon else ""))


def _escaping_suite(script: Path, pid_file: Path, *, run_at_start: bool = True) -> str:
    """A suite running :data:`ESCAPE_SCRIPT` as a user's command: it ignores SIGTERM, starts a child
    in a new session and an orphan, and hangs."""
    return f"""
[[suites]]
name = "escape"
interval_seconds = 3600
run_at_start = {str(run_at_start).lower()}
devices = ["cpu"]
timeout_seconds = 600
workloads = [{{name = "command", params = {{argv = ["{sys.executable}", "{script}", "{pid_file}"], label = "escape"}}}}]
"""


def _escape_files(tmp_path: Path) -> tuple[Path, Path]:
    script = tmp_path / "escape.py"
    script.write_text(ESCAPE_SCRIPT)
    return script, tmp_path / "pids"


def _escaping_daemon(tmp_path: Path, cli_env: dict) -> tuple[Path, Path, Path, Daemon]:
    """A daemon started on :func:`_escaping_suite`: (script, pid file, history, daemon)."""
    script, pid_file = _escape_files(tmp_path)
    history = tmp_path / "history.db"
    config = write_config(tmp_path / "escape.toml", history, _escaping_suite(script, pid_file))
    return script, pid_file, history, Daemon(config, free_port(), cli_env, tmp_path / "serve.log")


def _command_pids(pid_file: Path, daemon: Daemon | None = None) -> list[int]:
    """The escaping command's PIDs: itself, its detached (setsid) child and the orphan."""
    _wait_for_file(Path(str(pid_file) + ".orphan"), daemon=daemon)
    return [int(word) for word in _wait_for_file(pid_file, daemon=daemon).split()] + [
        int(Path(str(pid_file) + ".orphan").read_text())]


def _worker_record(state: Path) -> dict:
    [record] = list((state / "workers").glob("*/record.json"))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        data = json.loads(record.read_text())
        if data["worker_pid"]:
            return data
        time.sleep(0.05)
    raise AssertionError("the worker record never got the worker's PID")


def _alive(pids: list[int]) -> list[int]:
    return [pid for pid in pids if proctree.alive(pid)]


# ----------------------------------------------------------------------------- the runner alone

@pytest.mark.slow
def test_a_timeout_stops_a_sigterm_ignoring_worker_its_setsid_child_and_an_orphan(tmp_path):
    pid_file = tmp_path / "pids"
    # The timeout leaves a busy machine time to start the worker, the script and its forks, and to
    # write every PID file before the stop.
    outcome = run_worker("tests.fault_workloads:escapes", [{"pid_file": str(pid_file)}], "cpu", 8.0, uses_torch=False)
    assert outcome.status == "timeout"
    pids = run_pids(str(pid_file))
    assert len(set(pids)) == 4  # the worker, the command, its setsid child, the orphan
    assert _alive(pids) == []


@pytest.mark.slow
def test_the_sigterm_grace_is_the_whole_runs_not_only_the_workers(tmp_path):
    """The worker dies at once on SIGTERM; its child still gets its grace to finish cleanly."""
    marker = tmp_path / "checkpoint"
    outcome = run_worker("tests.fault_workloads:graceful_child", [{"marker": str(marker)}], "cpu", 6.0,
                         uses_torch=False)  # time for the child to install its handler on a busy machine
    assert outcome.status == "timeout"
    assert marker.read_text() == "checkpoint written"


def test_a_killed_caller_takes_its_worker_and_everything_below_it_along(tmp_path, cli_env):
    """The agent's part is played by a plain Python process running run_worker, SIGKILLed (with
    cli_env's TMPDIR: its sixdim-run-* folder, which a killed caller cannot remove, stays under tmp_path)."""
    pid_file = tmp_path / "pids"
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from sixdim.run.runner import run_worker; "
            f"run_worker('tests.fault_workloads:escapes', [{{'pid_file': {str(pid_file)!r}}}], 'cpu', 600.0, "
            "uses_torch=False)")
    caller = subprocess.Popen([sys.executable, "-c", code, str(Path(__file__).parent.parent)], env=cli_env)
    try:
        _wait_for_file(Path(str(pid_file) + ".worker"))
        pids = run_pids(str(pid_file))
        assert _alive(pids) == pids  # all of them, before the caller dies
    finally:
        caller.kill()
        caller.wait()
    assert proctree.wait_gone(pids, GONE_WITHIN_SECONDS) == []


# ----------------------------------------------------------------------------- the daemon

@pytest.fixture
def state(tmp_path, cli_env) -> Path:
    return Path(cli_env["SIXDIM_STATE_DIR"])


@pytest.mark.slow
def test_sigkill_of_the_daemon_mid_run_leaves_no_process_and_the_next_start_records_the_case(tmp_path, cli_env, state):
    script, pid_file, history, daemon = _escaping_daemon(tmp_path, cli_env)
    try:
        daemon.wait_ready()
        pids = _command_pids(pid_file, daemon)
        record = _worker_record(state)
        pids.append(record["worker_pid"])
        assert len(_alive(pids)) == 4
        assert record["agent_pid"] == daemon.process.pid and record["cases"][0]["workload"] == "command"
    finally:
        daemon.process.kill()  # SIGKILL: no handler, no clean-up of its own
        daemon.process.wait()
    assert proctree.wait_gone(pids, GONE_WITHIN_SECONDS) == [], "a process of the run outlived its agent"
    killed_pid = daemon.process.pid

    quiet = write_config(tmp_path / "quiet.toml", history, _escaping_suite(script, pid_file, run_at_start=False))
    daemon = Daemon(quiet, free_port(), cli_env, tmp_path / "serve2.log")
    try:
        daemon.wait_ready()
        assert list(History(history)) == []  # the case it stopped is not a run
        [interruption] = History(history).interruptions_after(0)  # the suite run's one record
        assert (interruption.suite, interruption.cases_done, interruption.cases_left) == ("escape", 0, 1)
        assert interruption.running.startswith("command ") and interruption.running.endswith(" escape")
        assert interruption.workloads == ["command"]
        assert interruption.reason.startswith(f"interrupted: the sixdim process that ran this suite (PID {killed_pid})")
        assert list((state / "workers").iterdir()) == []
        # an interruption is not a run: no runs_total for it, one interruption of the suite
        assert not [s for s in daemon.samples("sixdim_workload_runs_total") if s.labels["workload"] == "command"]
        [counted] = daemon.samples("sixdim_suite_interruptions_total")
        assert (counted.labels["suite"], counted.value) == ("escape", 1.0)
        assert "died during command on cpu" in daemon.log_path.read_text()
        assert daemon.stop() == 0
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()


@pytest.mark.slow
def test_the_next_start_stops_what_a_killed_worker_left_running(tmp_path, cli_env, state):
    """The worker cannot clean up (killed with its agent, as the OOM killer or a node's shutdown may do; a
    worker only stopped wakes at its agent's death and cleans up itself, see test_contain_descendants): the
    next start finds the run by its record and tag and kills all of it before anything runs."""
    script, pid_file, history, daemon = _escaping_daemon(tmp_path, cli_env)
    try:
        daemon.wait_ready()
        pids = _command_pids(pid_file, daemon)
        worker = _worker_record(state)["worker_pid"]
        os.kill(worker, signal.SIGKILL)
    finally:
        daemon.process.kill()
        daemon.process.wait()
    time.sleep(1.0)
    assert len(_alive(pids)) == 3, "the killed worker should not have been able to stop its children"
    quiet = write_config(tmp_path / "quiet.toml", history, _escaping_suite(script, pid_file, run_at_start=False))
    daemon = Daemon(quiet, free_port(), cli_env, tmp_path / "serve2.log")
    try:
        daemon.wait_ready()
        assert _alive(pids + [worker]) == []
        assert list(History(history)) == []
        [interruption] = History(history).interruptions_after(0)
        assert interruption.cases_left == 1 and interruption.reason.startswith("interrupted: the sixdim process")
        assert "stopped 3 process(es) of its run" in daemon.log_path.read_text()  # the worker was dead already
    finally:
        daemon.stop()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.slow
def test_a_stop_signal_ends_the_daemon_and_every_process_of_its_run_within_10_seconds(tmp_path, cli_env, state, sig):
    script, pid_file, history, daemon = _escaping_daemon(tmp_path, cli_env)
    daemon.wait_ready()
    pids = _command_pids(pid_file, daemon) + [_worker_record(state)["worker_pid"]]
    started = time.monotonic()
    daemon.process.send_signal(sig)
    assert daemon.stop(timeout=10) == 0
    assert time.monotonic() - started < 10
    assert _alive(pids) == []
    assert list(History(history)) == []  # the case a shutdown stopped is not a run, nor a skip
    [interruption] = History(history).interruptions_after(0)
    assert interruption.cases_left == 1 and interruption.reason.startswith("interrupted: sixdim is shutting down")
    assert list((state / "workers").iterdir()) == []


@pytest.mark.slow
def test_sighup_reloads_the_schedule_and_web_config_and_a_bad_file_keeps_the_running_one(tmp_path, cli_env):
    history = tmp_path / "history.db"
    config = write_config(tmp_path / "sixdim.toml", history, FAST_GEMM_SUITE.replace(
        "interval_seconds = 2", "interval_seconds = 3600\nrun_at_start = false"))
    daemon = Daemon(config, free_port(), {**cli_env, "SIXDIM_LOG_LEVEL": "info"}, tmp_path / "serve.log")
    try:
        daemon.wait_ready()
        [loaded] = daemon.samples("sixdim_config_last_reload_timestamp_seconds")
        assert daemon.samples("sixdim_config_reload_success")[0].value == 1.0
        assert list(History(history)) == []

        # a good file: a new suite, which runs at once (run_at_start), and basic auth on /metrics; the
        # unchanged suite keeps its next run an hour away
        web = tmp_path / "web.yml"
        web.write_text("basic_auth_users:\n  prom: " + bcrypt.hashpw(b"secret", bcrypt.gensalt(4)).decode() + "\n")
        web.chmod(0o600)
        added = FAST_GEMM_SUITE.replace('name = "fast"', 'name = "added"').replace(
            "interval_seconds = 2", "interval_seconds = 3600")
        config.write_text(config.read_text().replace("[agent]\n", f'[agent]\nweb_config_file = "{web}"\n') + added)
        daemon.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 60
        while not list(History(history)) and time.monotonic() < deadline:
            time.sleep(0.2)
        [run] = list(History(history))
        assert (run.suite, run.status) == ("added", "ok") and daemon.process.poll() is None
        assert daemon.get("/metrics")[0] == 401  # the reloaded web config is in force
        assert daemon.get("/healthz")[0] == 200
        log = daemon.log_path.read_text()
        assert "SIGHUP: configuration reloaded" in log
        # the log says when each suite runs now: the kept one keeps its time, the new one runs at once
        assert re.search(r"scheduled suite fast on cpu: every 3600 s; next run \d{4}-\d\d-\d\d [\d:]+ UTC "
                         r"\(unchanged by the reload: it keeps its time\)", log), log
        assert "scheduled suite added on cpu: every 3600 s; first run now (run_at_start = true)" in log

        # a bad file: logged, the running configuration stays, the metric says so
        config.write_text(config.read_text().replace("interval_seconds = 3600", "interval_seconds = nan", 1))
        daemon.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while "configuration reload failed" not in daemon.log_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "configuration reload failed, the running configuration stays" in daemon.log_path.read_text()
        assert daemon.process.poll() is None
        # the running web configuration still wants the credentials; the reload's outcome is rendered at
        # the next refresh (about a second), not at the end of the live part's 5 s timer
        request = urllib.request.Request(
            f"http://127.0.0.1:{daemon.port}/metrics",
            headers={"Authorization": "Basic " + base64.b64encode(b"prom:secret").decode()})
        deadline = time.monotonic() + 15
        while True:
            with urllib.request.urlopen(request, timeout=5) as response:
                text = response.read().decode()
            if 'sixdim_config_reload_success{hostname="testhost"} 0.0' in text or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert 'sixdim_config_reload_success{hostname="testhost"} 0.0' in text
        reloaded = float(next(line.split()[-1] for line in text.splitlines()
                              if line.startswith("sixdim_config_last_reload_timestamp_seconds")))
        assert reloaded > loaded.value  # the good reload's time, not the bad one's
        assert daemon.stop() == 0
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()


@pytest.mark.slow
def test_a_second_daemon_is_refused_naming_the_first(tmp_path, cli_env):
    history = tmp_path / "history.db"
    config = write_config(tmp_path / "sixdim.toml", history, FAST_GEMM_SUITE.replace(
        "interval_seconds = 2", "interval_seconds = 3600\nrun_at_start = false"))
    first = Daemon(config, free_port(), cli_env, tmp_path / "serve.log")
    try:
        first.wait_ready()
        second = subprocess.run([sys.executable, "-m", "sixdim", "serve", "--config", str(config),
                                 "--listen", f"127.0.0.1:{free_port()}"], env=cli_env, capture_output=True, text=True,
                                timeout=60)
        assert second.returncode == 2
        assert f"PID {first.process.pid} (sixdim serve" in second.stderr
        assert "state directory" in second.stderr and second.stderr.count("\n") == 1
        # its own state directory, the same history: refused for the history
        other = dict(cli_env, SIXDIM_STATE_DIR=str(tmp_path / "other-state"))
        third = subprocess.run([sys.executable, "-m", "sixdim", "serve", "--config", str(config),
                                "--listen", f"127.0.0.1:{free_port()}"], env=other, capture_output=True, text=True,
                               timeout=60)
        assert third.returncode == 2 and f"the history {history}" in third.stderr
        assert f"PID {first.process.pid}" in third.stderr
        assert first.get("/healthz")[0] == 200  # the first one never noticed
        assert first.stop() == 0
    finally:
        if first.process.poll() is None:
            first.process.kill()


@pytest.mark.slow
def test_sixdim_run_refuses_or_waits_for_a_device_the_daemon_holds(tmp_path, cli_env, state):
    script, pid_file, history, daemon = _escaping_daemon(tmp_path, cli_env)
    try:
        daemon.wait_ready()
        _command_pids(pid_file, daemon)  # the daemon's suite is running on the CPU
        args = [sys.executable, "-m", "sixdim", "run", "--device", "cpu", "-w", "gemm", "-p", "m=64", "-p", "n=64",
                "-p", "k=64", "-p", "precisions=fp32"]
        refused = subprocess.run(args + ["--no-wait"], env=cli_env, capture_output=True, text=True, timeout=120)
        assert refused.returncode == 3, refused.stderr
        assert f"cpu is in use by PID {daemon.process.pid} (sixdim serve" in refused.stderr
        assert "running suite escape on cpu" in refused.stderr

        waiting = subprocess.Popen(args, env={**cli_env, "SIXDIM_LOG_LEVEL": "info"}, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        time.sleep(3.0)
        assert waiting.poll() is None  # it waits while the suite runs...
        daemon.stop()  # ...and runs once the daemon lets go of the CPU
        out, err = waiting.communicate(timeout=120)
        assert waiting.returncode == 0, err
        assert f"waits for cpu: PID {daemon.process.pid} (sixdim serve" in err
        assert "gemm" in out
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()


# ----------------------------------------------------------------------------- the locks in-process

def test_device_file_locks_are_exclusive_between_holders_and_name_the_holder(tmp_path):
    """Two lock sets on one state directory behave as two processes would (flock is per open file)."""
    device = cpu_device()
    daemon_locks = DeviceLocks(DeviceFileLocks(tmp_path, "sixdim serve"))
    run_locks = DeviceLocks(DeviceFileLocks(tmp_path, "sixdim run"), wait=False)
    waiting_locks = DeviceLocks(DeviceFileLocks(tmp_path, "sixdim run"))
    release, holding, told, got = threading.Event(), threading.Event(), [], threading.Event()

    def daemon() -> None:
        with daemon_locks.hold([device], what="gemm on cpu (suite quick)") as held:
            assert held
            with daemon_locks.hold([device]) as again:  # re-entrant within the process
                assert again
            holding.set()
            release.wait(30)

    holder = threading.Thread(target=daemon)
    holder.start()
    assert holding.wait(10)
    with pytest.raises(InstanceError, match=rf"cpu is in use by PID {os.getpid()} \(sixdim serve, since .*running "
                                            r"gemm on cpu \(suite quick\)\)"):
        with run_locks.hold([device]):
            pass

    def waiter() -> None:
        with waiting_locks.hold([device], on_wait=lambda d, who: told.append(who)) as held:
            got.set() if held else None

    second = threading.Thread(target=waiter)
    second.start()
    deadline = time.monotonic() + 10
    while not told and time.monotonic() < deadline:  # the waiter says whom it waits for
        time.sleep(0.05)
    assert not got.is_set() and told and told[0].startswith(f"PID {os.getpid()} (sixdim serve")
    release.set()
    holder.join(5)
    assert got.wait(5)
    second.join(5)


def test_a_stop_while_waiting_for_another_process_holds_nothing(tmp_path):
    device = cpu_device()
    first = DeviceFileLocks(tmp_path, "sixdim serve")
    assert first.acquire(device, None, None)
    stop = threading.Event()
    locks = DeviceLocks(DeviceFileLocks(tmp_path, "sixdim run"))
    threading.Timer(0.5, stop.set).start()
    with locks.hold([device], stop) as held:
        assert held is False
    assert locks.lock(device).acquire(blocking=False)  # the in-process lock was given back too
    locks.lock(device).release()
    first.release(device)
    with locks.hold([device]) as held:
        assert held


def test_a_dead_agents_record_is_stopped_by_anyone_but_recorded_only_in_its_own_history(tmp_path):
    """A record left by a dead `sixdim run` on history A: a sixdim on history B stops its processes
    and leaves it; the next sixdim on history A records it."""
    from sixdim.collectors.nvml import NvmlCollector
    from sixdim.run.executor import Executor
    from sixdim.workloads import registry

    def executor(history: Path) -> Executor:
        return Executor(hostname="h", history=History(history), nvml=NvmlCollector("h"), rapl=None,
                        state_dir=str(tmp_path / "state"), command="sixdim run")

    dead = executor(tmp_path / "a.db")
    spec = registry.get("gemm")
    cases = spec.cases({"m": 64, "n": 64, "k": 64, "precisions": ["fp32"]}, "cpu")
    journal = dead.records.begin("dead-run", cpu_device(), "", [(spec, case) for case in cases])
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True,
                               env={**os.environ, proctree.TAG_VARIABLE: "dead-run"})
    journal.worker_started(sleeper.pid)
    os.close(journal._fd)  # the agent dies: its lock goes, its folder stays
    try:
        other = executor(tmp_path / "b.db")
        assert other.recover_left_behind() == []
        sleeper.wait(timeout=GONE_WITHIN_SECONDS)  # its processes are stopped all the same
        assert (tmp_path / "state" / "workers" / "dead-run").is_dir()
        assert list(History(tmp_path / "b.db")) == []

        owner = executor(tmp_path / "a.db")
        assert owner.recover_left_behind() == []  # its one case never finished: no run
        assert list(History(tmp_path / "a.db")) == []
        [interruption] = History(tmp_path / "a.db").interruptions_after(0)
        assert interruption.running.startswith("gemm fp32") and interruption.reason.startswith("interrupted:")
        assert not (tmp_path / "state" / "workers" / "dead-run").exists()
    finally:
        if sleeper.poll() is None:
            sleeper.kill()


@pytest.mark.slow
def test_an_unusable_state_directory_or_history_folder_is_one_line_naming_it(tmp_path, cli_env):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for flags, named in ((["--state-dir", str(blocker / "state")], f"cannot use the state directory {blocker}/state"),
                         (["--history", str(blocker / "h.db")], f"cannot create the lock file {blocker}/h.db.lock")):
        done = subprocess.run([sys.executable, "-m", "sixdim", "serve", "--listen", f"127.0.0.1:{free_port()}", *flags],
                              env=cli_env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith(f"sixdim: error: {named}") and done.stderr.count("\n") == 1, done.stderr


@pytest.mark.slow
def test_a_history_in_a_folder_that_does_not_exist_yet_is_created_private_and_served(tmp_path, cli_env):
    """The history lock lives beside the history, so its folder must exist before History makes it."""
    history = tmp_path / "new" / "nested" / "history.db"
    config = write_config(tmp_path / "sixdim.toml", history, FAST_GEMM_SUITE.replace(
        "interval_seconds = 2", "interval_seconds = 3600\nrun_at_start = false"))
    env = dict(cli_env, SIXDIM_HISTORY=str(history))  # the environment outranks the file
    daemon = Daemon(config, free_port(), env, tmp_path / "serve.log")
    try:
        daemon.wait_ready()
        assert daemon.get("/healthz")[0] == 200
        assert Path(str(history) + ".lock").exists()
        assert history.parent.stat().st_mode & 0o777 == 0o700
        assert daemon.stop() == 0
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()


@pytest.mark.slow
def test_a_burst_of_sighups_is_a_few_reloads_and_a_stop_among_them_wins(tmp_path, cli_env):
    """50 SIGHUPs as fast as they can be sent: the agent keeps serving and reloads far fewer times
    (those that arrive while it reloads are one more reload); a SIGTERM after a burst stops it."""
    history = tmp_path / "history.db"
    config = write_config(tmp_path / "sixdim.toml", history, FAST_GEMM_SUITE.replace(
        "interval_seconds = 2", "interval_seconds = 3600\nrun_at_start = false"))
    daemon = Daemon(config, free_port(), {**cli_env, "SIXDIM_LOG_LEVEL": "info"}, tmp_path / "serve.log")
    try:
        daemon.wait_ready()
        for _ in range(50):
            os.kill(daemon.process.pid, signal.SIGHUP)
        deadline = time.monotonic() + 20
        while "SIGHUP: configuration reloaded" not in daemon.log_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # what the burst still owes
        reloads = daemon.log_path.read_text().count("SIGHUP: configuration reloaded")
        assert 1 <= reloads < 50, reloads
        assert daemon.get("/healthz")[0] == 200 and daemon.process.poll() is None
        for _ in range(20):
            os.kill(daemon.process.pid, signal.SIGHUP)
        os.kill(daemon.process.pid, signal.SIGTERM)
        assert daemon.process.wait(timeout=10) == 0
        assert "received SIGTERM, shutting down" in daemon.log_path.read_text()
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()
