"""Issue 44, item 11: ``serve --check-config`` said "configuration OK" for a history folder the daemon's user
cannot write and a state folder it cannot make, where ``serve`` with the same flags exits 2.  Run as an
unprivileged user (root writes anywhere: the test takes nobody's effective ids for the check), on real
folders."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

from sixdim.config import ConfigError, load
from sixdim.daemon.check import check_writable

NOBODY = 65534


@contextmanager
def as_nobody():
    """This process's effective user and group nobody's for a while (the daemon's user in the test): os.access
    with effective ids, and the folder checks, then judge for that user."""
    os.setegid(NOBODY)
    os.seteuid(NOBODY)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


@pytest.fixture
def home():
    if os.geteuid() != 0:
        pytest.skip("needs root to judge the folders as another user")
    folder = Path(tempfile.mkdtemp(dir="/tmp", prefix="sixdim-check-"))
    os.chown(folder, NOBODY, NOBODY)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def check_as_nobody(folder: Path, history: Path, state: Path) -> str | None:
    """The check's refusal (None: none) for a configuration naming these folders, judged as nobody."""
    config = folder / "sixdim.toml"
    config.write_text(f'[agent]\nhistory = "{history}"\nstate_dir = "{state}"\n')
    os.chown(config, NOBODY, NOBODY)
    os.chmod(config, 0o600)
    with as_nobody():
        loaded = load(str(config), env={})
        try:
            check_writable(loaded)
        except ConfigError as exc:
            return str(exc)
    return None


def owned_folder(path: Path, mode: int) -> Path:
    path.mkdir()
    os.chown(path, NOBODY, NOBODY)
    os.chmod(path, mode)
    return path


def test_a_history_folder_it_cannot_write_is_refused(home):
    history = owned_folder(home / "history", 0o500) / "history.db"
    state = owned_folder(home / "state", 0o700)
    refused = check_as_nobody(home, history, state)
    assert refused and "agent.history" in refused and f"cannot write in {history.parent}" in refused


def test_a_state_folder_it_cannot_make_is_refused(home):
    history = owned_folder(home / "history", 0o700) / "history.db"
    state = owned_folder(home / "locked", 0o500) / "state"
    refused = check_as_nobody(home, history, state)
    assert refused and "agent.state_dir" in refused and f"to make {state}" in refused


def test_folders_it_can_write_pass(home):
    history = owned_folder(home / "history", 0o700) / "history.db"
    assert check_as_nobody(home, history, home / "state") is None
