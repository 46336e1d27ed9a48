"""What ``--out`` and the other output files do with a target that is not a regular file (issue 30, item 5).

The files sixdim generates (``rules --out``, ``--prometheus-rule``, ``dashboards --out`` and
``--configmap``, ``report html FILE``) are written to a temporary file and renamed over the target, so
a reader never sees half a file.  A rename replaces whatever the name points at: a device node, a
FIFO, a symbolic link (to ``/proc/self/fd/1``, or to another user's file) would silently become a
regular file (a root ``sixdim rules --out /dev/null`` would have replaced ``/dev/null``).  Such a
target is refused, with exit code 2 and one line naming it and what it is; ``-`` is standard output
where one file is written.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sixdim.cli import main
from sixdim.core.files import NotARegularFile, write_atomically
from sixdim.monitoring import rules
from sixdim.monitoring.options import Options
from sixdim.store.history import History
from tests.helpers import make_record


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def device(path: Path) -> Path:
    """A character device like /dev/null (major 1, minor 3), made in the test's folder: the real one is
    never put at risk, even by the code before the fix."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs CAP_MKNOD")
    return path


def link(path: Path, target: str) -> Path:
    os.symlink(target, path)
    return path


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("sixdim: error: "), err
    return lines[0]


@pytest.mark.parametrize("make, what", [
    (lambda p: fifo(p), "a FIFO"),
    (lambda p: device(p), "a character device"),
    (lambda p: link(p, "/proc/self/fd/1"), "a symbolic link"),
    (lambda p: link(p, str(p.parent / "elsewhere.yml")), "a symbolic link"),
    (lambda p: p.mkdir() or p, "a folder"),
], ids=["fifo", "device", "link to stdout", "link to a file", "folder"])
def test_write_atomically_refuses_what_is_not_a_regular_file(tmp_path, make, what):
    target = make(tmp_path / "out.yml")
    (tmp_path / "elsewhere.yml").write_text("theirs\n")
    before = os.lstat(target)
    with pytest.raises(NotARegularFile) as error:
        write_atomically(target, "new\n")
    assert isinstance(error.value, OSError)  # what every caller already catches
    assert str(target) in str(error.value) and what in str(error.value)
    after = os.lstat(target)
    assert (after.st_ino, stat.S_IFMT(after.st_mode)) == (before.st_ino, stat.S_IFMT(before.st_mode))
    assert (tmp_path / "elsewhere.yml").read_text() == "theirs\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []  # no temporary file left


def test_a_regular_file_is_still_replaced_whole(tmp_path):
    target = tmp_path / "out.yml"
    target.write_text("old\n")
    write_atomically(target, "new\n")
    assert target.read_text() == "new\n"
    write_atomically(tmp_path / "made" / "new.yml", "x\n")  # a missing file and folder: made
    assert (tmp_path / "made" / "new.yml").read_text() == "x\n"


@pytest.mark.parametrize("flag", ["--out", "--prometheus-rule"])
@pytest.mark.parametrize("make, what", [
    (lambda p: fifo(p), "a FIFO"),
    (lambda p: device(p), "a character device"),
    (lambda p: link(p, "/proc/self/fd/1"), "a symbolic link"),
], ids=["fifo", "device", "link to stdout"])
def test_rules_refuses_a_special_target_with_exit_2(tmp_path, capsys, flag, make, what):
    target = make(tmp_path / "rules.yml")
    kind = stat.S_IFMT(os.lstat(target).st_mode)
    assert main(["rules", flag, str(target)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert str(target) in line and what in line and flag in line, line
    assert stat.S_IFMT(os.lstat(target).st_mode) == kind  # still what it was


def test_rules_dash_is_standard_output(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where a file named "-" would go
    expected = rules.render(Options())
    assert main(["rules", "--out", "-"]) == 0
    assert capsys.readouterr().out == expected
    assert not Path("-").exists()
    assert main(["rules", "--prometheus-rule", "-"]) == 0
    assert capsys.readouterr().out == rules.prometheus_rule(Options())
    out = tmp_path / "rules.yml"  # one to a file, the other to standard output
    assert main(["rules", "--out", str(out), "--prometheus-rule", "-"]) == 0
    assert out.read_text() == expected and capsys.readouterr().out == rules.prometheus_rule(Options())
    assert main(["rules", "--out", "-", "--prometheus-rule", "-"]) == 2  # two files cannot share it
    assert "standard output" in one_error_line(capsys.readouterr().err)


def test_dashboards_refuse_a_special_file_in_the_folder_and_as_configmap(tmp_path, capsys):
    folder = tmp_path / "boards"
    folder.mkdir()
    board = fifo(folder / "sixdim-fleet.json")
    assert main(["dashboards", "--out", str(folder)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert str(board) in line and "a FIFO" in line, line
    assert stat.S_ISFIFO(os.lstat(board).st_mode)
    configmap = link(tmp_path / "configmap.yaml", "/proc/self/fd/1")
    assert main(["dashboards", "--configmap", str(configmap)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert str(configmap) in line and "a symbolic link" in line, line
    assert os.path.islink(configmap)


def test_dashboards_configmap_dash_is_standard_output(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where a file or folder named "-" would go
    assert main(["dashboards", "--configmap", "-"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# Grafana dashboards for sixdim") and "kind: ConfigMap" in out
    assert not Path("-").exists()
    assert main(["dashboards", "--out", "-"]) == 2  # a folder of files: standard output cannot take them
    assert "standard output" in one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize("legacy", [False, True], ids=["report html FILE", "report --html FILE"])
def test_report_html_refuses_a_special_target(tmp_path, capsys, legacy):
    pytest.importorskip("plotly")
    history = tmp_path / "history.db"
    with_history = History(history)
    with_history.add(make_record())
    with_history.close()
    page = fifo(tmp_path / "page.html")
    args = ["report", "--html", str(page)] if legacy else ["report", "html", str(page)]
    assert main([*args, "--history", str(history)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert str(page) in line and "a FIFO" in line, line
    assert stat.S_ISFIFO(os.lstat(page).st_mode)


def test_report_html_dash_is_standard_output_with_the_summary_on_stderr(tmp_path, capsys):
    pytest.importorskip("plotly")
    history = tmp_path / "history.db"
    with_history = History(history)
    with_history.add(make_record())
    with_history.close()
    assert main(["report", "html", "-", "--history", str(history)]) == 0
    out, err = capsys.readouterr()
    assert out.lstrip().lower().startswith("<!doctype html") and out.rstrip().endswith("</html>")
    assert "wrote the page to standard output" in err
    assert not (tmp_path / "-").exists()


def test_a_lock_file_planted_as_a_link_is_never_truncated(tmp_path):
    """A link in place of a lock file (agent.lock, history.db.lock, a device's lock) would have had root
    truncate its target; the lock is refused instead, and the target keeps its bytes."""
    from sixdim.run.instance import FileLock

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    planted = link(tmp_path / "agent.lock", str(victim))
    with pytest.raises(OSError):
        FileLock(planted).try_acquire({"pid": os.getpid()})
    assert victim.read_text() == "precious\n"
    with pytest.raises(OSError, match="not a regular file"):
        FileLock(fifo(tmp_path / "gpu0.lock")).try_acquire({"pid": os.getpid()})
