"""The command line as a user meets it: list, version, progress on a terminal."""

import json
import os
import pty
import subprocess
import sys

from agent import __version__


def run(*args, env):
    return subprocess.run([sys.executable, "-m", "agent", *args], capture_output=True, text=True, env=env, timeout=60)


def test_version(cli_env):
    assert run("--version", env=cli_env).stdout.strip() == f"sixdim {__version__}"


def test_list_shows_workloads_parameters_and_defaults(cli_env):
    text = run("list", env=cli_env).stdout
    assert text.startswith("gemm: ")
    row = next(line.split() for line in text.splitlines() if line.split()[:1] == ["precisions"])
    assert row[1].split(",") == ["fp32", "tf32", "fp16", "bf16", "int8", "fp8"]
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
    # DeepBench's 160 training GEMMs in the floating-point precisions, plus the NT form that int8 and
    # fp8 run (their one layout) where DeepBench's op is another
    assert sum("int8, fp8 only" not in line for line in listed) == 160
    assert "m=5124,n=9124,k=2560,op=TN [training] (fp32, tf32, fp16, bf16 only)" in listed
    assert "m=5124,n=9124,k=2560,op=NT [training] (int8, fp8 only)" in listed
    assert "cell=gru,hidden=2816,batch=32,steps=750 [training]" in text


def test_no_command_prints_help_and_exits_2(cli_env):
    result = run(env=cli_env)
    assert result.returncode == 2 and "serve" in result.stdout and "run" in result.stdout


def test_run_shows_progress_on_a_terminal(cli_env):
    leader, follower = pty.openpty()
    result = subprocess.run(
        [sys.executable, "-m", "agent", "run", "-w", "gemm", "-d", "cpu", "-p", "m=64", "-p", "n=64", "-p", "k=64",
         "-p", "precisions=fp32", "-p", "min_round_seconds=0.01", "-p", "warmup_seconds=0.01"],
        stdout=subprocess.PIPE, stderr=follower, env=cli_env, timeout=120)
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
