"""Four small faults (issue 30, item 12), each through the real code path:

a. a secret inside a shell command line given after ``-c`` (``sh -c "HF_TOKEN=... python ..."``) stays
   neither in the stored record nor in ``sixdim run --json``, and is hunted in the command's output;
b. an MLPerf ``run_stop`` whose time is not a number is ignored with a warning, not taken as the
   run's end (which silently dropped every later evaluation);
c. a command killed by SIGKILL gets a reason naming the signal and the kernel's OOM killer;
d. a corrupt history database is logged on one line, whatever SQLite's text or the path holds.
"""

import json
import logging
import os
import shlex
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sixdim.collectors.nvml import NvmlCollector
from sixdim.core.redact import REDACTED, redact_argv, redact_params, redact_shell, scrub, secret_values
from sixdim.run import proctree
from sixdim.run.devices import cpu_device
from sixdim.run.executor import Executor
from sixdim.store.history import History
from sixdim.workloads import registry
from sixdim.workloads.logs.model import Metric
from sixdim.workloads.logs.parsers import make_parsers, parse_lines
from sixdim.workloads.logs.training_log import TrainingLog
from tests.helpers import run_sixdim

R = REDACTED
LOGS = Path(__file__).parent / "fixtures" / "logs"
TOKEN, API_KEY = "abc123456789", "xyz987654321"


def run_command(tmp_path, timeout=60.0, **params):
    """The command workload through the real worker and executor, recorded in a real history."""
    database = tmp_path / "h.db"
    executor = Executor(hostname="h", history=History(database), nvml=NvmlCollector("h"), rapl=None)
    [record] = executor.execute(registry.get("command"), params, cpu_device(), timeout=timeout)
    return record, database


def stored_text(database: Path) -> str:
    """Every row of every table of the SQLite file, as text, and the raw bytes of the file and its WAL."""
    rows = []
    with sqlite3.connect(database) as db:
        for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            rows += db.execute(f"SELECT * FROM {table}").fetchall()
    raw = b"".join(path.read_bytes() for path in database.parent.glob(database.name + "*"))
    return repr(rows) + raw.decode("latin-1")


# ============================================================================ a. secrets after -c

LEAKY = """
    import os, sys
    print("args", " ".join(sys.argv[1:]), flush=True)
    print("auth failed for token", os.environ.get("HF_TOKEN", "-"), "and key", sys.argv[-1].split("=")[-1], flush=True)
    sys.exit(3)
"""


@pytest.mark.parametrize("argv, expected", [
    (["sh", "-c", f"HF_TOKEN={TOKEN} python train.py --api-key={API_KEY}"],
     ["sh", "-c", f"HF_TOKEN={R} python train.py --api-key={R}"]),
    (["bash", "-lc", f"HF_TOKEN={TOKEN} python train.py --token {API_KEY} --epochs 3"],
     ["bash", "-lc", f"HF_TOKEN={R} python train.py --token {R} --epochs 3"]),
    (["/bin/dash", "-e", "-c", f"--api-key={API_KEY} x"], ["/bin/dash", "-e", "-c", f"--api-key={R} x"]),
    (["env", "RUN=1", "zsh", "-xc", f"HF_TOKEN={TOKEN} python t.py"], ["env", "RUN=1", "zsh", "-xc",
                                                                      f"HF_TOKEN={R} python t.py"]),
    (["env", f"DB_PASSWORD={TOKEN}", "sh", "-c", f"DB_TOKEN={API_KEY} run"],
     ["env", f"DB_PASSWORD={R}", "sh", "-c", f"DB_TOKEN={R} run"]),
    (["sudo", "-E", "bash", "-o", "pipefail", "--login", "-c", f"HF_TOKEN={TOKEN} t | tee --password {API_KEY}"],
     ["sudo", "-E", "bash", "-o", "pipefail", "--login", "-c", f"HF_TOKEN={R} t | tee --password {R}"]),
])
def test_a_secret_inside_a_shell_line_after_dash_c_is_redacted_and_hunted(argv, expected):
    params = {"argv": argv, "shell": False, "env": []}
    assert redact_argv(argv) == expected
    assert redact_params(params)["argv"] == expected
    given = {value for value in (TOKEN, API_KEY) if value in " ".join(argv)}
    assert secret_values(params) == given  # each value alone, so scrub finds it in the output
    for value in given:
        assert scrub(f"printed {value}.", secret_values(params)) == f"printed {R}."


def test_the_same_inside_a_shell_line():
    line = f'sh -c "HF_TOKEN={TOKEN} python train.py --api-key={API_KEY}" && bash -lc "--token {TOKEN}"'
    shown = redact_shell(line)
    assert TOKEN not in shown and API_KEY not in shown
    assert shlex.split(shown) == ["sh", "-c", f"HF_TOKEN={R} python train.py --api-key={R}", "&&", "bash", "-lc",
                                  f"--token {R}"]
    assert secret_values({"argv": [line], "shell": True}) == {TOKEN, API_KEY}


def test_a_script_argument_that_is_not_after_dash_c_keeps_the_old_rule():
    """An argument with white space that is one ``NAME=VALUE`` still loses its whole value."""
    assert redact_argv(["t", "--password=a b c"]) == ["t", f"--password={R}"]
    assert redact_argv(["python", "-c", f"HF_TOKEN={TOKEN} print(1)"]) == ["python", "-c", f"HF_TOKEN={R}"]
    # a -c after the shell's first operand (its script) is the script's own: not the shell's command line
    assert redact_argv(["sh", "run.sh", "-c", "--password=a b"]) == ["sh", "run.sh", "-c", f"--password={R}"]


@pytest.mark.slow
def test_secrets_after_sh_c_reach_neither_the_history_nor_the_reason(tmp_path):
    leaky = tmp_path / "leaky.py"
    leaky.write_text(textwrap.dedent(LEAKY))
    script = f"HF_TOKEN={TOKEN} {shlex.quote(sys.executable)} {shlex.quote(str(leaky))} --api-key={API_KEY}"
    for params in ({"argv": ["sh", "-c", script], "shell": False},
                   {"argv": [f"sh -c {shlex.quote(script)}"], "shell": True},
                   {"argv": ["env", "RUN=1", "bash", "-lc", script], "shell": False}):
        folder = tmp_path / str(len(list(tmp_path.iterdir())))
        folder.mkdir()
        record, database = run_command(folder, formats=[], throughput_regex=r"speed (\d+)", **params)
        assert record.status == "failed" and "exited with code 3" in record.reason, record.reason
        assert record.reason.endswith(f"last output: auth failed for token {R} and key {R}"), record.reason
        text = stored_text(database) + json.dumps(record.to_dict(), default=str)
        assert TOKEN not in text and API_KEY not in text, params
        assert str(leaky) in json.dumps(record.params)  # the command itself is still readable


@pytest.mark.slow
def test_secrets_after_sh_c_are_not_in_run_json(tmp_path, cli_env):
    leaky = tmp_path / "leaky.py"
    leaky.write_text(textwrap.dedent(LEAKY))
    script = f"HF_TOKEN={TOKEN} {sys.executable} {leaky} --api-key={API_KEY}"
    assert "," not in script  # -p splits a list at commas
    result = run_sixdim("run", "-w", "command", "-d", "cpu", "--json", "-p", f"argv=sh,-c,{script}",
                        "-p", "formats=", "-p", "throughput_regex=speed (\\d+)", env=cli_env, timeout=120)
    assert result.returncode == 1, result.stderr  # the command failed
    [record] = json.loads(result.stdout)
    assert record["status"] == "failed" and record["reason"].endswith(f"auth failed for token {R} and key {R}")
    assert record["params"]["argv"] == ["sh", "-c", f"HF_TOKEN={R} {sys.executable} {leaky} --api-key={R}"]
    for text in (result.stdout, result.stderr, stored_text(Path(cli_env["SIXDIM_HISTORY"]))):
        assert TOKEN not in text and API_KEY not in text


# ============================================================================ b. run_stop with an odd time

def _mllog(key, value=None, time_ms=0, **metadata):
    return ":::MLLOG " + json.dumps({"key": key, "value": value, "time_ms": time_ms, "metadata": metadata})


def _parse(lines):
    return parse_lines(lines, make_parsers(("mlperf",)), TrainingLog(user_metric=Metric("accuracy")))


def test_a_run_stop_whose_time_is_not_a_number_is_ignored_with_a_warning_and_parsing_goes_on():
    log = _parse((LOGS / "mlperf_run_stop_bad_time.txt").read_text().splitlines())
    [top1] = log.qualities()
    assert top1.values == [0.6908, 0.7288, 0.7602]  # the evaluations after the odd run_stop are read
    assert log.after_stop == 1  # only the 0.7655 after the real run_stop is not the run's
    assert log.status == "success" and log.time_to_train == pytest.approx(213.78)
    assert any("run_stop" in w and "'abc'" in w and "ignored" in w for w in log.warnings), log.warnings
    assert log.ignored_lines == 1 and log.details["mlperf_runs"] == 1


@pytest.mark.parametrize("stamp", ["abc", None, True, [1], "NaN"])
def test_any_time_that_is_not_a_number_is_the_same(stamp):
    lines = [_mllog("submission_benchmark", "resnet"), _mllog("run_start", time_ms=0),
             _mllog("eval_accuracy", 0.70, 20, epoch_num=1), _mllog("run_stop", time_ms=stamp, status="success"),
             _mllog("eval_accuracy", 0.76, 30, epoch_num=2), _mllog("run_stop", time_ms=40000, status="success")]
    log = _parse(lines)
    assert [q.values for q in log.qualities()] == [[0.70, 0.76]] and log.after_stop == 0
    assert log.time_to_train == pytest.approx(40.0) and log.warnings


def test_a_run_whose_only_run_stop_has_an_odd_time_says_so_in_its_failure():
    lines = [_mllog("run_start", time_ms=0), _mllog("eval_accuracy", 0.70, 20, epoch_num=1),
             _mllog("run_stop", time_ms="soon", status="success")]
    log = _parse(lines)
    assert log.run_failure() is not None and "run_stop" in log.run_failure()
    assert "time 'soon' is not a number" in log.run_failure(), log.run_failure()


def test_v06_and_v05_run_stop_with_an_odd_time_are_ignored_too():
    v06 = [':::MLL 100.0 run_start: {"value": null}', ':::MLL 110.0 eval_accuracy: {"value": 0.5, "metadata": '
           '{"epoch_num": 1}}', ':::MLL later run_stop: {"value": null, "metadata": {"status": "success"}}',
           ':::MLL 120.0 eval_accuracy: {"value": 0.6, "metadata": {"epoch_num": 2}}',
           ':::MLL 130.0 run_stop: {"value": null, "metadata": {"status": "success"}}']
    log = _parse(v06)
    assert [q.values for q in log.qualities()] == [[0.5, 0.6]] and log.time_to_train == pytest.approx(30.0)
    assert any("'later'" in w for w in log.warnings), log.warnings
    v05 = [":::MLPv0.5.0 resnet 100.0 (main.py:1) run_start",
           ':::MLPv0.5.0 resnet 110.0 (eval.py:2) eval_accuracy: {"epoch": 1, "value": 0.5}',
           ':::MLPv0.5.0 resnet n/a (main.py:3) run_stop: {"success": true}',
           ':::MLPv0.5.0 resnet 120.0 (eval.py:2) eval_accuracy: {"epoch": 2, "value": 0.6}',
           ':::MLPv0.5.0 resnet 140.0 (main.py:3) run_stop: {"success": true}']
    log = _parse(v05)
    assert [q.values for q in log.qualities()] == [[0.5, 0.6]] and log.total_time == pytest.approx(40.0)  # target unmet
    assert any("'n/a'" in w for w in log.warnings), log.warnings


@pytest.mark.slow
def test_the_command_workload_shows_the_warning_in_its_details(tmp_path):
    record, _ = run_command(tmp_path, argv=["cat", str(LOGS / "mlperf_run_stop_bad_time.txt")])
    assert record.status == "ok", record.reason
    assert record.figures["accuracy"] == 0.7602 and record.details["evaluations_after_run_stop"] == 1
    assert any("run_stop" in w and "ignored" in w for w in record.details["warnings"]), record.details
    assert record.details["ignored_lines"] == 1


# ============================================================================ c. killed by SIGKILL

SUICIDE = "import os; print('allocating', flush=True); os.kill(os.getpid(), 9)"


@pytest.mark.slow
def test_a_command_killed_by_sigkill_gets_the_oom_hint(tmp_path):
    record, _ = run_command(tmp_path, argv=[sys.executable, "-c", SUICIDE])
    assert record.status == "failed"
    assert "killed by SIGKILL" in record.reason and "OOM killer" in record.reason, record.reason
    assert "dmesg" in record.reason and "last output: allocating" in record.reason


@pytest.mark.slow
def test_a_shell_whose_command_was_killed_by_sigkill_says_so_too(tmp_path):
    """A shell reports its command's death by SIGKILL as code 137 (128 + 9)."""
    record, _ = run_command(tmp_path, argv=[f"{shlex.quote(sys.executable)} -c {shlex.quote(SUICIDE)}; exit $?"],
                            shell=True)
    assert record.status == "failed" and "exited with code 137" in record.reason, record.reason
    assert "SIGKILL" in record.reason and "OOM killer" in record.reason, record.reason


def test_other_signals_and_codes_are_named_without_an_oom_hint():
    from sixdim.workloads.logs.command import exit_reason

    assert exit_reason(-11, None) == "command killed by SIGSEGV"
    assert exit_reason(7, None) == "command exited with code 7"
    guess = "(the kernel's OOM killer, if memory ran out: check dmesg)"
    assert exit_reason(-9, None) == exit_reason(-9, (0, "in its cgroup")) == f"command killed by SIGKILL {guess}"
    said = exit_reason(-9, (2, "in its cgroup"))
    assert said.startswith("command killed by SIGKILL: the kernel's OOM killer killed 2 processes in its cgroup")
    assert exit_reason(1, (1, "in its cgroup")) == ("command exited with code 1; the kernel's OOM killer killed 1 "
                                                    "process in its cgroup while it ran (out of memory: check dmesg)")


def _memory_cgroup(tmp_path) -> Path:
    """A new cgroup v2 with ``memory.max`` below this process's, or a skip saying why there is none."""
    mount, own = proctree._cgroup2_mount(), proctree._own_cgroup()
    if mount is None or own is None:
        pytest.skip("no cgroup v2 here")
    parent = Path(mount) / own.lstrip("/")
    if "memory" not in (parent / "cgroup.subtree_control").read_text().split():  # not changed here: the host's
        pytest.skip(f"cgroup v2 at {parent} does not hand the memory controller down (cgroup.subtree_control); "
                    "this host's memory controller is elsewhere (cgroup v1?)")
    folder = parent / f"sixdim-test-oom-{os.getpid()}"
    try:
        folder.mkdir()
        (folder / "memory.max").write_text(str(64 * 2**20))
        if (folder / "memory.swap.max").exists():
            (folder / "memory.swap.max").write_text("0")
    except OSError as exc:
        if folder.exists():
            folder.rmdir()
        pytest.skip(f"cannot make a cgroup v2 with memory.max under {parent}: {exc.strerror or exc}")
    return folder


OOM_WORKER = """
import sys
from sixdim.workloads import registry
from sixdim.workloads.logs import command
from sixdim.workloads.context import RunContext
open(sys.argv[1] + "/cgroup.procs", "w").write("0")  # this process, and so the command, into the limited cgroup
[case] = registry.get("command").cases({"argv": [sys.executable, "-c", "x = b'x' * (1 << 30); print(len(x))"]},
                                       "cpu")
try:
    command.run(case.params, RunContext("cpu"))
except command.CommandFailed as exc:
    print(exc)
"""


@pytest.mark.slow
def test_a_real_oom_kill_in_a_memory_limited_cgroup_is_named(tmp_path):
    folder = _memory_cgroup(tmp_path)
    try:
        out = subprocess.run([sys.executable, "-c", OOM_WORKER, str(folder)], capture_output=True, text=True,
                             timeout=120)
        assert "killed by SIGKILL: the kernel's OOM killer killed 1 process in its cgroup" in out.stdout, out
    finally:
        for _ in range(50):
            try:
                folder.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def test_an_oom_kill_counted_in_the_cgroup_while_the_command_ran_is_said_for_sure(tmp_path, monkeypatch):
    """The counter the reason reads (cgroup v2's memory.events), rising while a real command runs and
    kills itself: a stand-in file where this host has no memory-controlled cgroup v2."""
    from sixdim.workloads.context import RunContext
    from sixdim.workloads.logs import command

    events = tmp_path / "memory.events"
    events.write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n")
    monkeypatch.setattr(command, "_cgroup_memory_events", lambda: str(events))
    code = (f"import os, pathlib; pathlib.Path({str(events)!r}).write_text('max 9\\noom 3\\noom_kill 3\\n'); "
            "os.kill(os.getpid(), 9)")
    [case] = registry.get("command").cases({"argv": [sys.executable, "-c", code]}, "cpu")
    with pytest.raises(command.CommandFailed) as failure:
        command.run(case.params, RunContext("cpu"))
    assert str(failure.value) == ("command killed by SIGKILL: the kernel's OOM killer killed 2 processes in its "
                                  "cgroup while it ran (out of memory: check dmesg)")


# ============================================================================ d. one log line per record

def _corrupt_pages(path: Path) -> None:
    """A real SQLite file with two of its b-tree pages overwritten: SQLite's quick_check says so on several lines."""
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (a INTEGER PRIMARY KEY, b TEXT)")
        db.execute("CREATE INDEX ib ON t (b)")
        db.executemany("INSERT INTO t (b) VALUES (?)", [("x" * 200,) for _ in range(500)])
    db.close()
    data = bytearray(path.read_bytes())
    for offset in (4096 * 3 + 8, 4096 * 5 + 100):
        data[offset:offset + 64] = b"\xff" * 64
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["garbage", "pages"])
def test_a_corrupt_database_is_logged_on_one_line(tmp_path, caplog, damage):
    folder = tmp_path / "new\nline"  # a path may hold a newline too
    folder.mkdir()
    path = folder / "history.db"
    if damage == "garbage":
        path.write_bytes(b"this is not a database\n" * 500)
    else:
        _corrupt_pages(path)
        with sqlite3.connect(path) as db:
            assert "\n" in db.execute("PRAGMA quick_check(1)").fetchone()[0]  # SQLite's own text has one
        db.close()
    with caplog.at_level(logging.DEBUG, logger="sixdim"):
        history = History(path)
        history.close()
    assert history.moved_aside is not None and history.moved_aside.exists()
    messages = [record.getMessage() for record in caplog.records]
    [moved] = [m for m in messages if "unusable" in m]
    assert all("\n" not in m and "\r" not in m for m in messages), messages
    assert "new\\nline" in moved
    if damage == "pages":
        assert "*** in database main ***\\nOn tree page" in moved, moved
