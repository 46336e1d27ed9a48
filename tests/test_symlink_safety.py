"""The history's permission fixes and files never follow a symbolic link (issue 30, item 6).

sixdim takes the group's and others' bits off a history, -wal, -shm or spool file it owns.  Done
with ``os.stat`` and ``os.chmod``, that followed a link: a ``history.db-wal`` symlink planted in a
shared folder made a root daemon chmod (and SQLite then write) any file of the system.  Now the
mode is changed through a descriptor opened with ``O_NOFOLLOW`` (a regular file of this user only),
and a link where a history file should be, which neither sixdim nor SQLite makes, is refused with
one line naming it.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from sixdim.store.errors import HistoryError
from sixdim.store.files import tighten
from sixdim.store.history import History
from tests.helpers import Locker, make_record

NOBODY = 65534


def mode(path: Path | str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def victim(tmp_path) -> Path:
    """A file of "the system" (root's, 0644) that a planted link points at."""
    folder = tmp_path / "system"
    folder.mkdir()
    path = folder / "passwd"
    path.write_text("root:x:0:0::/root:/bin/sh\n")
    os.chmod(path, 0o644)
    return path


def test_tighten_does_not_follow_a_link(tmp_path, victim, caplog):
    link = tmp_path / "history.db-wal"
    link.symlink_to(victim)
    with caplog.at_level(logging.WARNING, logger="sixdim"):
        tighten(link)
    assert mode(victim) == 0o644  # the link's target is not the history's to change
    assert os.path.islink(link)
    assert any(str(link) in r.getMessage() and "symbolic link" in r.getMessage() for r in caplog.records), \
        [r.getMessage() for r in caplog.records]


def test_tighten_leaves_a_fifo_and_another_users_file_alone_without_blocking(tmp_path):
    pipe = tmp_path / "history.db-shm"
    os.mkfifo(pipe, 0o666)
    os.chmod(pipe, 0o666)
    tighten(pipe)  # opened non-blocking: no writer needed, and not a regular file: untouched
    assert mode(pipe) == 0o666
    theirs = tmp_path / "theirs.db"
    theirs.write_text("")
    os.chmod(theirs, 0o644)
    os.chown(theirs, NOBODY, -1)
    tighten(theirs)
    assert mode(theirs) == 0o644
    mine = tmp_path / "mine.db"
    mine.write_text("")
    os.chmod(mine, 0o644)
    tighten(mine)  # what it is for still works
    assert mode(mine) == 0o600


@pytest.mark.parametrize("suffix", ["-wal", "-shm", ".spool", ""])
def test_a_planted_link_beside_the_history_is_refused(tmp_path, victim, suffix):
    path = tmp_path / "history.db"
    History(path).close()  # a history that was fine
    for extra in ("-wal", "-shm", ".spool"):
        Path(str(path) + extra).unlink(missing_ok=True)
    link = Path(str(path) + suffix)
    link.unlink(missing_ok=True)
    link.symlink_to(victim)
    before = victim.read_bytes()
    with pytest.raises(HistoryError) as error:
        History(path)
    message = str(error.value)
    assert str(link) in message and "symbolic link" in message and str(victim) in message, message
    assert "\n" not in message
    assert mode(victim) == 0o644 and victim.read_bytes() == before
    assert os.path.islink(link)


def test_a_link_planted_as_the_spool_while_running_is_not_written_through(tmp_path, victim):
    path = tmp_path / "history.db"
    history = History(path)
    locker = Locker(path)  # the database is locked: the result goes to the spool
    try:
        history.spool_path.symlink_to(victim)
        before = victim.read_bytes()
        assert history.add(make_record()) is None
        assert victim.read_bytes() == before  # not appended to through the link
        assert len(history.pending()) == 1  # still waiting, in memory
    finally:
        locker.release()
        history.close()


def test_a_linked_folder_is_fine(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "alias").symlink_to(real)
    history = History(tmp_path / "alias" / "history.db")  # only the files themselves must not be links
    try:
        assert history.add(make_record()) is not None
    finally:
        history.close()
    assert (real / "history.db").is_file()
