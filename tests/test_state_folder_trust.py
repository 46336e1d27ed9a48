"""A state folder or worker record another user can write is not trusted (issue 30, item 4).

A root daemon kills what its predecessor's worker records name and records their results.  With a
state folder others could write, any local user could forge a record naming any PID (and its start
time, which /proc shows to all) and have the daemon SIGKILL it at its next start, and put a forged
result in the history.  Now: a state or history folder its group or others can write (or, above it,
a folder others can write that has no sticky bit), or that a user other than root and this one owns,
is refused when the configuration is loaded, with one line and exit code 2; a record folder or file
that is not this user's, or that others could have written, is left alone with a warning; and a PID
is signalled only when its process is the worker the record describes: the same start time, this
user's, and carrying the run's tag.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from sixdim.cli import main
from sixdim.config import ConfigError, load
from sixdim.config.trust import folder_problem
from sixdim.run import orphans, proctree
from sixdim.run.instance import InstanceError
from sixdim.store.history import History

NOBODY = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another user needs root")


def folder(path: Path, mode: int = 0o700, owner: int | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, mode)
    if owner is not None:
        os.chown(path, owner, -1)
    return path


# --------------------------------------------------------------------------- the folders

@pytest.mark.parametrize("which", ["SIXDIM_STATE_DIR", "SIXDIM_HISTORY"])
@pytest.mark.parametrize("mode, owner, said", [
    (0o777, None, "0777"), (0o1777, None, "1777"), (0o770, None, "0770"), (0o700, NOBODY, "uid 65534"),
], ids=["world-writable", "sticky", "group-writable", "another user's"])
def test_load_refuses_a_folder_others_can_change(tmp_path, which, mode, owner, said):
    shared = folder(tmp_path / "shared", mode, owner)
    env = {"SIXDIM_STATE_DIR": str(folder(tmp_path / "state")), "SIXDIM_HISTORY": str(tmp_path / "h" / "history.db")}
    env[which] = str(shared / "history.db") if which == "SIXDIM_HISTORY" else str(shared)
    with pytest.raises(ConfigError) as error:
        load(None, env=env)
    message = str(error.value)
    assert str(shared) in message and said in message and "\n" not in message, message
    assert ("agent.history" if which == "SIXDIM_HISTORY" else "agent.state_dir") in message


def test_a_missing_folder_is_judged_by_where_it_would_be_made(tmp_path):
    shared = folder(tmp_path / "shared", 0o777)  # anyone could make "state" there first
    with pytest.raises(ConfigError, match="shared"):
        load(None, env={"SIXDIM_STATE_DIR": str(shared / "state" / "deeper"),
                        "SIXDIM_HISTORY": str(tmp_path / "h" / "history.db")})
    sticky = folder(tmp_path / "tmp", 0o1777)  # like /tmp: others cannot take a folder of ours away...
    config = load(None, env={"SIXDIM_STATE_DIR": str(folder(sticky / "state")),
                             "SIXDIM_HISTORY": str(folder(sticky / "mine") / "history.db")})
    assert config.state_dir == str(sticky / "state")
    with pytest.raises(ConfigError, match="1777"):  # ...but could make one we have not made yet
        load(None, env={"SIXDIM_STATE_DIR": str(sticky / "state"), "SIXDIM_HISTORY": str(sticky / "new" / "h.db")})


def test_private_folders_are_fine(tmp_path):
    assert folder_problem(folder(tmp_path / "a"), 0) is None
    assert folder_problem(folder(tmp_path / "b", 0o755), 0) is None
    assert folder_problem(tmp_path / "missing" / "x", 0) is None
    assert folder_problem(tmp_path / "a", 1000) is None  # root's folder, for another user: root is trusted
    assert folder_problem(folder(tmp_path / "c", 0o700, NOBODY), NOBODY) is None  # that user's own


def test_serve_and_run_refuse_a_world_writable_state_folder_with_one_line(tmp_path, cli_env, capsys, monkeypatch):
    for key, value in cli_env.items():
        monkeypatch.setenv(key, value)
    shared = folder(tmp_path / "shared", 0o777)
    assert main(["serve", "--check-config", "--state-dir", str(shared)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sixdim: error: ") and str(shared) in lines[0], lines
    assert "chmod go-w" in lines[0]
    assert main(["run", "-w", "launch_latency", "-d", "cpu", "--state-dir", str(shared)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and str(shared) in lines[0], lines
    assert os.listdir(shared) == []  # nothing was made in it
    assert not Path(cli_env["SIXDIM_HISTORY"]).exists()


def test_worker_records_refuse_a_folder_others_can_write(tmp_path):
    with pytest.raises(InstanceError, match="0777"):
        orphans.WorkerRecords(folder(tmp_path / "state", 0o777), "sixdim serve")


# --------------------------------------------------------------------------- the records

@pytest.fixture
def victim():
    """A process that is not sixdim's: a forged record names it.  It must survive."""
    process = subprocess.Popen(["sleep", "60"], start_new_session=True)
    deadline = time.monotonic() + 5
    while proctree.start_time(process.pid) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    yield process
    if process.poll() is None:
        process.kill()
    process.wait()


def forge(state: Path, pid: int, history: Path, *, tag: str = "forged", start_time: int | None = None) -> Path:
    """A worker record naming ``pid`` with its true start time, a dead agent's as far as it says."""
    record = orphans.WorkerRecord(
        tag=tag, agent_pid=999999, command="sixdim serve", suite="quick",
        device={"type": "cpu", "index": None, "uuid": "", "model_name": "cpu", "pci_bus_id": ""},
        cases=[{"workload": "gemm", "params": {}, "precision": "fp32", "shape": "m=8", "mode": "", "kernel_pass": ""}],
        started_at=time.time(), worker_pid=pid,
        worker_start_time=proctree.start_time(pid) if start_time is None else start_time,
        history=str(history), suite_cases=1)
    where = folder(state / orphans.WORKERS / tag)
    path = where / orphans.RECORD
    path.write_text(json.dumps(asdict(record)) + "\n")
    os.chmod(path, 0o600)
    return where


def executor(state: Path, history: Path):
    from sixdim.collectors.nvml import NvmlCollector
    from sixdim.run.executor import Executor

    return Executor(hostname="h", history=History(history), nvml=NvmlCollector("h"), rapl=None,
                    state_dir=str(state), command="sixdim serve")


def alive(process: subprocess.Popen) -> bool:
    time.sleep(0.05)
    return process.poll() is None and proctree.alive(process.pid)


@pytest.mark.parametrize("tamper", [
    lambda f: os.chown(f, NOBODY, -1),
    lambda f: os.chown(f / orphans.RECORD, NOBODY, -1),
    lambda f: os.chmod(f / orphans.RECORD, 0o666),
    lambda f: os.chmod(f, 0o777),
], ids=["folder of another user", "record of another user", "record others can write", "folder others can write"])
def test_a_record_another_user_could_have_written_is_not_trusted(tmp_path, victim, tamper, caplog):
    state, history = folder(tmp_path / "state"), tmp_path / "history.db"
    forged = forge(state, victim.pid, history)
    tamper(forged)
    runner = executor(state, history)
    with caplog.at_level(logging.WARNING):
        assert runner.recover_left_behind() == []
    assert alive(victim), "a forged record's PID was killed"
    assert runner.history.interruptions_after(0) == []  # and nothing of it was recorded
    runner.history.close()
    assert any(str(forged) in r.getMessage() and "not trusted" in r.getMessage() for r in caplog.records), \
        [r.getMessage() for r in caplog.records]
    assert forged.is_dir()  # another user's files are left where they are


def test_a_record_that_is_a_link_is_not_followed(tmp_path, victim):
    state, history = folder(tmp_path / "state"), tmp_path / "history.db"
    forged = forge(state, victim.pid, history)
    elsewhere = tmp_path / "elsewhere.json"
    os.rename(forged / orphans.RECORD, elsewhere)
    (forged / orphans.RECORD).symlink_to(elsewhere)
    runner = executor(state, history)
    assert runner.recover_left_behind() == []
    assert alive(victim)
    runner.history.close()


@pytest.mark.parametrize("how", ["untagged", "start time off by one", "another user's"])
def test_a_trusted_record_kills_only_a_process_proven_to_be_its_worker(tmp_path, how):
    state, history = folder(tmp_path / "state"), tmp_path / "history.db"
    env = dict(os.environ)
    if how != "untagged":
        env[proctree.TAG_VARIABLE] = "other-run"  # a sixdim-looking process, of another run
    process = subprocess.Popen(["sleep", "60"], start_new_session=True, env=env,
                               user=NOBODY if how == "another user's" else None)
    try:
        deadline = time.monotonic() + 5
        while proctree.start_time(process.pid) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        start = proctree.start_time(process.pid)
        assert start is not None
        forged = forge(state, process.pid, history, tag="run-1",
                       start_time=start + 1 if how == "start time off by one" else start)
        record = orphans.read_record(forged)
        assert record is not None  # the record itself is sixdim's own
        assert orphans.stop_left_behind(record) == []
        assert alive(process)
    finally:
        process.kill()
        process.wait()


def test_the_worker_a_record_names_is_still_stopped(tmp_path):
    """What the records are for: a dead agent's worker (this user's, its start time, its tag) goes."""
    state, history = folder(tmp_path / "state"), tmp_path / "history.db"
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True,
                              env={**os.environ, proctree.TAG_VARIABLE: "run-2"})
    try:
        deadline = time.monotonic() + 5
        while proctree.start_time(worker.pid) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        forged = forge(state, worker.pid, history, tag="run-2")
        record = orphans.read_record(forged)
        assert record is not None
        assert worker.pid in orphans.stop_left_behind(record)
        worker.wait(timeout=5)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
