"""What sixdim writes has the mode the docs give it, whatever the umask (issue 30, item 12).

- ``sixdim report html FILE`` is never more readable than the history it was made from: a report of a
  0600 history is 0600, of a 0644 history 0644 (:func:`sixdim.core.files.write_atomically`'s ``mode``;
  its default, 0644, stays for the rules and dashboards files, which are meant to be read).
- Under ``umask 000`` (a daemon started from a unit with ``UMask=0000``, or a shell that set it), every
  folder sixdim makes in its state folder and the history's folder is 0700, parents included, and
  every file 0600: the lock files, the worker record folders and their files (``record.json``,
  ``request.json``, ``results.jsonl``), the history, its ``-wal`` and ``-shm`` files.  Before the fix
  the folders ``mkdir -p`` made above the last one were 0777 (and ``sixdim run`` then refused its own
  state folder), and the worker's request and results files 0666.

Real processes: a ``sixdim run`` of a tiny workload and a ``sixdim serve`` whose suite runs a command
that sleeps, looked at while it sleeps, each started with ``umask 000``.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sixdim.core.files import make_folders, write_atomically
from sixdim.store.history import History
from tests.conftest import free_port
from tests.daemon import write_config
from tests.helpers import make_record

FOLDER, FILE = 0o700, 0o600


def mode(path: str | Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def modes(*roots: Path) -> dict[str, str]:
    """Every folder and file under ``roots`` (the roots' own modes left out: the test made them), with its
    mode in octal, links and other special files marked as such."""
    found = {}
    for root in roots:
        for folder, folders, files in os.walk(root):
            for name in folders + files:
                path = Path(folder) / name
                status = os.lstat(path)
                kind = "d" if stat.S_ISDIR(status.st_mode) else "f" if stat.S_ISREG(status.st_mode) else "?"
                found[str(path)] = f"{kind} {stat.S_IMODE(status.st_mode):04o}"
    return found


def wrong(found: dict[str, str]) -> dict[str, str]:
    return {path: what for path, what in found.items() if what not in (f"d {FOLDER:04o}", f"f {FILE:04o}")}


@pytest.fixture
def umask_000():
    previous = os.umask(0)
    yield
    os.umask(previous)


def zero_umask() -> None:
    os.umask(0)


def env_for(tmp_path: Path, history: Path, state: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIXDIM_")}
    env.update(SIXDIM_HISTORY=str(history), SIXDIM_STATE_DIR=str(state), SIXDIM_LOG_LEVEL="warning",
               TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return env


def places(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A private base folder (0700, made here), and in it a state folder and a history two and three folders
    down that sixdim makes itself."""
    base = tmp_path / "base"
    base.mkdir(mode=FOLDER)
    os.chmod(base, FOLDER)
    return base, base / "var" / "state", base / "lib" / "sixdim" / "history" / "history.db"


# --------------------------------------------------------------------------- write_atomically and the report

@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_write_atomically_gives_the_mode_asked_whatever_the_umask(tmp_path, umask):
    previous = os.umask(umask)
    try:
        write_atomically(tmp_path / "default.yml", "x\n")
        write_atomically(tmp_path / "private.html", "x\n", mode=0o600)
        write_atomically(tmp_path / "group.html", "x\n", mode=0o640)
    finally:
        os.umask(previous)
    assert mode(tmp_path / "default.yml") == 0o644  # rules and dashboards: meant to be read
    assert mode(tmp_path / "private.html") == 0o600
    assert mode(tmp_path / "group.html") == 0o640


@pytest.mark.parametrize("history_mode, report_mode", [(0o600, 0o600), (0o644, 0o644), (0o640, 0o640),
                                                       (0o604, 0o604), (0o400, 0o600), (0o666, 0o644)])
def test_the_html_report_is_never_more_readable_than_its_history(tmp_path, history_mode, report_mode):
    pytest.importorskip("plotly")
    from sixdim.cli import main

    history = tmp_path / "history.db"
    h = History(history)
    h.add(make_record())
    h.close()
    os.chmod(history, history_mode)
    out = tmp_path / "report.html"
    previous = os.umask(0)  # the umask does not decide either
    try:
        assert main(["report", "html", str(out), "--history", str(history)]) == 0
    finally:
        os.umask(previous)
    assert mode(out) == report_mode, f"history {history_mode:04o}: report {mode(out):04o}"
    assert mode(history) == history_mode  # the report reads the history, it does not change it


def test_a_report_replacing_an_older_readable_one_is_private_too(tmp_path):
    pytest.importorskip("plotly")
    from sixdim.cli import main

    history = tmp_path / "history.db"
    h = History(history)
    h.add(make_record())
    h.close()
    out = tmp_path / "report.html"
    out.write_text("an older report")
    os.chmod(out, 0o644)
    assert main(["report", "html", str(out), "--history", str(history)]) == 0
    assert mode(out) == 0o600


# --------------------------------------------------------------------------- folders and files, in process

@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_make_folders_gives_every_folder_it_makes_the_mode(tmp_path, umask):
    base = tmp_path / "base"
    base.mkdir()
    os.chmod(base, 0o755)
    previous = os.umask(umask)
    try:
        make_folders(base / "a" / "b" / "c", 0o700)
        make_folders(tmp_path / "plain" / "x")  # no mode: the umask decides, as mkdir -p
    finally:
        os.umask(previous)
    assert [mode(base / p) for p in ("a", "a/b", "a/b/c")] == [0o700] * 3
    assert mode(base) == 0o755  # not made here: left as it is
    assert mode(tmp_path / "plain" / "x") == 0o777 & ~umask


def test_a_history_made_under_umask_000_is_private_with_its_folders(tmp_path, umask_000):
    base, _, path = places(tmp_path)
    history = History(path)
    try:
        history.add(make_record())
    finally:
        history.close()
    found = modes(base)
    assert str(path) in found and not wrong(found), found


def test_wal_and_shm_files_sqlite_made_readable_are_made_private_after_opening(tmp_path, monkeypatch, caplog):
    """An SQLite that gives its -wal and -shm files the umask's mode instead of the database's (as a build
    with another default file mode may): they are looked at after the database is opened, and tightened."""
    path = tmp_path / "history.db"
    from sixdim.store import history as history_module

    prepare = history_module.prepare

    def readable_after(db, *args, **kwargs):
        prepare(db, *args, **kwargs)
        for suffix in ("-wal", "-shm"):
            if os.path.exists(str(path) + suffix):
                os.chmod(str(path) + suffix, 0o644)

    monkeypatch.setattr(history_module, "prepare", readable_after)
    history = History(path)
    try:
        history.add(make_record())
        assert {suffix: mode(str(path) + suffix) for suffix in ("", "-wal", "-shm")} == \
            {"": 0o600, "-wal": 0o600, "-shm": 0o600}
    finally:
        history.close()


def test_a_worker_record_under_umask_000_is_private(tmp_path, umask_000):
    from sixdim.run.devices import Device
    from sixdim.run.orphans import WorkerRecords
    from sixdim.run.runner import RESULTS_FILE, run_worker

    base, state, _ = places(tmp_path)
    records = WorkerRecords(state, "test")
    journal = records.begin("tag-1", Device(type="cpu"), "suite", [])
    try:
        assert journal.keep([make_record()])
        outcome = run_worker("tests.test_umask:_nothing", [{}], "cpu", 60, uses_torch=False,
                             workdir=str(journal.folder), tag="tag-1")
        assert outcome.returncode == 0, outcome.output_tail
        files = {p.name for p in journal.folder.iterdir()}
        assert {"record.json", "request.json", RESULTS_FILE, "unsaved.jsonl"} <= files, files
        found = modes(base)
        assert not wrong(found), found
    finally:
        journal.close()


def _nothing(params, context):  # a workload for the worker above: nothing to do
    return {}


# --------------------------------------------------------------------------- real processes under umask 000

@pytest.mark.slow  # a real sixdim run in a fresh interpreter and its worker: about 2 s
def test_sixdim_run_under_umask_000_makes_private_folders_and_files(tmp_path):
    base, state, history = places(tmp_path)
    env = env_for(tmp_path, history, state)
    result = subprocess.run([sys.executable, "-m", "sixdim", "run", "-w", "launch_latency", "-d", "cpu",
                             "-p", "rounds=3", "-p", "launches_per_round=10"], env=env, capture_output=True,
                            text=True, timeout=300, preexec_fn=zero_umask)
    assert result.returncode == 0, result.stdout + result.stderr
    found = modes(base)
    assert str(history) in found and str(state / "devices" / "cpu.lock") in found, found
    assert not wrong(found), found


SLEEPER = (
    "import sys, time\n"
    "open(sys.argv[1], 'w').write('running')\n"
    "time.sleep(2)\n"
)


@pytest.mark.slow  # a real sixdim serve running a case: about 3 s
def test_sixdim_serve_under_umask_000_makes_private_folders_and_files(tmp_path):
    base, state, history = places(tmp_path)
    env = env_for(tmp_path, history, state)
    script, marker = tmp_path / "sleeper.py", tmp_path / "running"
    script.write_text(SLEEPER)
    suite = f"""
[[suites]]
name = "sleepy"
interval_seconds = 3600
run_at_start = true
devices = ["cpu"]
timeout_seconds = 120
workloads = [{{name = "command", params = {{argv = ["{sys.executable}", "{script}", "{marker}"], label = "sleepy"}}}}]
"""
    config = write_config(tmp_path / "sixdim.toml", history, suite)
    log = open(tmp_path / "serve.log", "wb")
    daemon = subprocess.Popen([sys.executable, "-m", "sixdim", "serve", "--config", str(config), "--state-dir",
                               str(state), "--listen", f"127.0.0.1:{free_port()}"], env=env, stdout=log,
                              stderr=subprocess.STDOUT, preexec_fn=zero_umask)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline and daemon.poll() is None:
            time.sleep(0.05)
        assert marker.exists(), (tmp_path / "serve.log").read_text()
        time.sleep(0.3)  # the worker has its results file open, the command sleeps
        during = modes(base)
        record_files = {Path(p).name for p in during if "/workers/" in p}
        assert {"record.json", "request.json", "results.jsonl"} <= record_files, during
        assert not wrong(during), during
        deadline = time.monotonic() + 60  # the run ends: its record folder is removed
        while any((state / "workers").iterdir()) and time.monotonic() < deadline:
            time.sleep(0.1)
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=30) == 0, (tmp_path / "serve.log").read_text()
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        log.close()
    after = modes(base)
    assert str(history) in after and str(history) + ".lock" in after and str(state / "agent.lock") in after, after
    assert not wrong(after), after
