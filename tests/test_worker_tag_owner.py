"""A worker tag is trusted only on a process of the agent's own user (issue 44, item 10).

The environment of a process is its owner's to write: anyone can start a process carrying
``SIXDIM_WORKER_TAG=<a run's tag>``, and a root agent can read every process's environment.  So a worker
record naming another user's process, refused as the worker ("not signalled"), still had that process killed
by the scan for the run's tag.  Now the tag scan, like the worker check, takes only this user's processes,
and logs each one it refuses.  Real processes: one started as ``nobody`` (setuid in the child) with the tag,
one of ours with the same tag, and a worker record as the orphan recovery reads it."""

from __future__ import annotations

import logging
import os
import subprocess
import time
from pathlib import Path

import pytest

from sixdim.run import proctree
from tests.test_state_folder_trust import NOBODY, alive, executor, folder, forge

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="starting another user's process needs root")

SLEEPER = ["sleep", "60"]  # any user can run it, wherever the tests are checked out


def start(tag: str, *, uid: int | None = None) -> subprocess.Popen:
    """A process carrying ``tag`` in its environment, run as ``uid`` (set in the child before its exec)."""
    process = subprocess.Popen(SLEEPER, start_new_session=True, env={**os.environ, proctree.TAG_VARIABLE: tag},
                               preexec_fn=None if uid is None else (lambda: (os.setgid(uid), os.setuid(uid))),
                               cwd="/")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # until it has exec'd, with its environment and owner
        try:
            if (os.stat(f"/proc/{process.pid}").st_uid == (os.geteuid() if uid is None else uid)
                    and f"{proctree.TAG_VARIABLE}={tag}".encode() in Path(f"/proc/{process.pid}/environ").read_bytes()):
                return process
        except OSError:
            pass
        time.sleep(0.01)
    process.kill()
    raise AssertionError(f"the tagged process {process.pid} did not start")


def end(*processes: subprocess.Popen) -> None:
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait()


def refusals(caplog: pytest.LogCaptureFixture, pid: int) -> list[str]:
    messages = [r.getMessage() for r in caplog.records]
    return [m for m in messages if f"PID {pid} " in m and f"uid {NOBODY}" in m and "not signalled" in m]


def test_a_record_naming_another_users_tagged_process_leaves_it_alive(tmp_path, caplog):
    """The attack of item 10: a trusted (root's own) record names a ``nobody`` process that carries the
    record's tag.  The recovery refuses it as the worker and, now, in the tag scan too."""
    state, history = folder(tmp_path / "state"), tmp_path / "history.db"
    other = start("run-44", uid=NOBODY)
    try:
        forge(state, other.pid, history, tag="run-44")
        runner = executor(state, history)
        with caplog.at_level(logging.INFO):
            runner.recover_left_behind()
        runner.history.close()
        assert alive(other), "another user's process was killed for carrying a run's tag"
        said = refusals(caplog, other.pid)
        assert said, [r.getMessage() for r in caplog.records]
        assert "run-44" in said[0] and str(os.geteuid()) in said[0], said
    finally:
        end(other)


def test_the_tag_scan_stops_our_tagged_process_and_spares_another_users(tmp_path, caplog):
    """Both carry the tag, neither is below a worker: the scan alone decides, by owner."""
    ours, theirs = start("run-45"), start("run-45", uid=NOBODY)
    try:
        with caplog.at_level(logging.INFO):
            killed = proctree.stop_run(None, "run-45")
        assert ours.pid in killed and theirs.pid not in killed, killed
        ours.wait(timeout=5)
        assert alive(theirs)
        assert len(refusals(caplog, theirs.pid)) == 1, [r.getMessage() for r in caplog.records]  # once, not per round
    finally:
        end(ours, theirs)
