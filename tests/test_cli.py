"""The command line as a user meets it: list, version, progress on a terminal."""

import json
import os
import pty
import subprocess
import sys

import pytest

from sixdim import __version__
from tests.helpers import call_sixdim

run = call_sixdim  # listings and errors need no interpreter of their own


def test_version(cli_env):
    assert run("--version", env=cli_env).stdout.strip() == f"sixdim {__version__}"


def test_list_shows_workloads_parameters_and_defaults(cli_env):
    text = run("list", env=cli_env).stdout
    assert text.startswith("gemm: ")
    row = next(line.split() for line in text.splitlines() if line.split()[:1] == ["precisions"])
    assert row[1].split(",") == ["fp32", "tf32", "fp16", "bf16", "int8", "fp8", "fp8_fast"]
    for name in ("gemm", "conv", "rnn", "sparse_gemm", "memory_bandwidth", "launch_latency", "allreduce"):
        assert f"\n{name}: " in "\n" + text
    assert "training: DeepBench's 160 (NN, TN, NT)" in text
    assert "quick: gemm(set=quick" in text  # the built-in suites
    listed = {w["name"]: w for w in json.loads(run("list", "--json", env=cli_env).stdout)}
    assert {p["name"] for p in listed["gemm"]["params"]} >= {"set", "precisions", "m", "n", "k", "op", "rounds"}


def test_list_shapes_prints_every_deepbench_shape(cli_env):
    text = run("list", "--shapes", env=cli_env).stdout
    gemm_training = text.split("  training (", 1)[1].split("  inference (", 1)[0]
    listed = [line.strip() for line in gemm_training.splitlines()[1:] if line.strip()]
    # DeepBench's 160 training GEMMs in the floating-point precisions, plus the NT form that int8, fp8
    # and fp8_fast run (their one layout) where DeepBench's op is another
    assert sum("int8, fp8, fp8_fast only" not in line for line in listed) == 160
    assert "m=5124,n=9124,k=2560,op=TN [training] (fp32, tf32, fp16, bf16 only)" in listed
    assert "m=5124,n=9124,k=2560,op=NT [training] (int8, fp8, fp8_fast only)" in listed
    assert "cell=gru,hidden=2816,batch=32,steps=750 [training]" in text


def test_no_command_prints_help_and_exits_2(cli_env):
    result = run(env=cli_env)
    assert result.returncode == 2 and "serve" in result.stdout and "run" in result.stdout


@pytest.mark.slow
def test_run_shows_progress_on_a_terminal(cli_env):
    leader, follower = pty.openpty()
    result = subprocess.run(
        [sys.executable, "-m", "sixdim", "run", "-w", "gemm", "-d", "cpu", "-p", "m=64", "-p", "n=64", "-p", "k=64",
         "-p", "precisions=fp32", "-p", "min_round_seconds=0.01", "-p", "warmup_seconds=0.01"],
        stdout=subprocess.PIPE, stderr=follower, env={**cli_env, "SIXDIM_LOG_LEVEL": "info"}, timeout=120)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    terminal = b"".join(chunks).decode(errors="replace")
    assert result.returncode == 0
    assert "[gemm on cpu] warming up" in terminal
    assert "[gemm on cpu] round 5/5" in terminal
    assert "round" not in result.stdout.decode()  # progress never pollutes the results on stdout
    # What the terminal shows: each line is what follows its last "clear the line" (\r ESC[K).
    shown = [line.rsplit("\r\x1b[K", 1)[-1] for line in terminal.replace("\r\n", "\n").split("\n")]
    logged = [line for line in shown if "sixdim: info:" in line]
    assert any("run on cpu: 1 of 1 case done after " in line and "gemm ended (1 case: 1 ok)" in line
               for line in logged), shown  # the suite run's progress line as the workload ends
    assert all(line.startswith("sixdim: ") for line in logged), logged  # never after a progress line


def test_list_shapes_lists_every_workload_the_command_one_included(cli_env):
    from sixdim.workloads import registry

    result = run("list", "--shapes", env=cli_env)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    for name in registry.WORKLOADS:
        assert f"\n{name}: " in "\n" + result.stdout, name
    command = result.stdout.split("\ncommand: ", 1)[1].split("\n\n", 2)[1]
    assert command.startswith("  cases: made from the parameters you give it (") and "argv" in command


@pytest.mark.slow
def test_help_names_what_serve_runs_and_every_built_in_suite(cli_env):
    from sixdim.workloads import registry

    serve = " ".join(run("serve", "--help", env=cli_env).stdout.split())
    assert "GEMM suite" not in serve
    assert "the built-in frequent suite (gemm, conv, rnn, memory_bandwidth, launch_latency) every 15 minutes, " \
           "starting at once, a slow or suspicious case run again alone (at most 4 an hour); the built-in power " \
           "suite (gemm, conv, rnn, sparse_gemm) every 360 minutes; the built-in quick suite (gemm, conv, rnn, " \
           "sparse_gemm, memory_bandwidth, launch_latency, allreduce) at cron '17 3 * * *' (UTC), and at once " \
           "after a version or setting change (or where it never ran)" in serve
    assert "a cron suite waits for its time unless run_at_start = true" in serve
    run_help = " ".join(run("run", "--help", env=cli_env).stdout.split())
    assert f"a built-in one: {', '.join(registry.SUITES)} " in run_help and "training" in registry.SUITES
    assert "130 stopped by SIGINT (Ctrl-C), 143 by SIGTERM" in run_help
    for command in ("serve", "run", "list", "dimensions"):
        text = run(command, "--help", env=cli_env)
        assert text.returncode == 0 and "usage: sixdim " + command in text.stdout
        options = [line for line in text.stdout.splitlines() if line.startswith("  -")]
        assert options, command
        for line in options:  # every option explains itself, on its line or the next
            following = text.stdout.split(line, 1)[1].splitlines()[1:2]
            assert len(line.split("  ")) > 2 or (following and following[0].startswith(" " * 10)), line


@pytest.mark.slow
def test_run_warns_once_and_briefly_and_leaves_no_temporary_folder(cli_env):
    result = run("run", "-w", "gemm", "-d", "cpu", "-p", "m=32", "-p", "n=32", "-p", "k=32", "-p", "precisions=fp32",
                 "-p", "min_round_seconds=0.01", "-p", "warmup_seconds=0.01", env=cli_env)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    for source in ("NVML unavailable", "RAPL energy unavailable"):
        lines = [line for line in result.stderr.splitlines() if source in line]
        assert len(lines) <= 1, lines
        assert all(line.startswith("sixdim: warning: ") for line in lines), lines
    from pathlib import Path

    assert list(Path(cli_env["TMPDIR"]).glob("sixdim-run-*")) == []
    assert list((Path(cli_env["SIXDIM_STATE_DIR"]) / "workers").iterdir()) == []  # the worker records too


def test_results_table_shows_training_figures_and_int8_in_op_per_second():
    from sixdim.cli import _results_table
    from tests.helpers import make_record

    gemm = make_record(seconds=0.001)
    kernel_only = _results_table([gemm])
    assert "accuracy" not in kernel_only and "linearity" not in kernel_only and "FLOP/s" in kernel_only

    int8 = make_record(seconds=0.001)
    int8.precision = "int8"
    int8.figures["flops"] = 3.2e14
    trained = make_record(workload="convergence", accuracy=0.9612, time_to_train_seconds=754.0,
                          samples_per_second=812.0)
    scaled = make_record(workload="linearity", linearity_ratio=0.93, samples_per_second=4000.0)
    table = _results_table([gemm, int8, trained, scaled])
    header, *rows = table.splitlines()
    assert header.split("  ")[:1] == ["workload"]
    for title in ("accuracy", "time to train", "linearity"):
        assert title in header
    by_workload = {row.split()[0] + row.split()[2]: row for row in rows}
    assert "320 TOP/s" in by_workload["gemmint8"] and "FLOP/s" not in by_workload["gemmint8"]
    assert "1.02 MFLOP/s" in by_workload["gemmbf16"]
    assert "0.9612" in by_workload["convergencebf16"] and "12 min 34 s" in by_workload["convergencebf16"]
    assert "0.93" in by_workload["linearitybf16"]


@pytest.mark.slow
def test_a_path_through_a_file_is_named_as_such_by_every_command(tmp_path, cli_env):
    """A file where a folder should be (a typo, a stale mount point): one line naming that part of
    the path, exit 2, never "[Errno 20]" or "File exists" with no hint."""
    from sixdim.store.history import History
    from tests.conftest import free_port
    from tests.helpers import make_record

    blocker = tmp_path / "afile"
    blocker.write_text("not a folder\n")
    history = tmp_path / "history.db"
    History(history).add(make_record())
    said = f"{blocker} is a file, not a folder"
    listen = f"127.0.0.1:{free_port()}"
    for args in (["serve", "--listen", listen, "--history", str(blocker / "h.db")],
                 ["serve", "--listen", listen, "--state-dir", str(blocker / "state")],
                 ["run", "-w", "launch_latency", "-d", "cpu", "--history", str(blocker / "h.db")],
                 ["rules", "--out", str(blocker / "rules.yml")],
                 ["dashboards", "--out", str(blocker / "json")],
                 ["report", "--html", str(blocker / "page.html"), "--history", str(history)]):
        done = run(*args, env=cli_env)
        errors = [line for line in done.stderr.splitlines() if line.startswith("sixdim: error:")]
        assert done.returncode == 2 and len(errors) == 1 and said in errors[0], (args, done.stderr)
        assert "Errno" not in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
