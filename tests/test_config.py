"""One schema, one loader: precedence, defaults, and errors that say where and what."""

import argparse
import subprocess
import sys

import pytest

from agent.config import DEFAULT_PORT, ConfigError, load


def write(tmp_path, text, name="sixdim.toml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_embedded_default_runs_the_quick_suite_every_15_minutes():
    config = load(None, env={})
    assert config.listen == f"0.0.0.0:{DEFAULT_PORT}"
    [suite] = config.suites
    assert (suite.name, suite.interval_seconds, suite.devices) == ("quick", 900.0, ("auto",))
    assert [w.name for w in suite.workloads] == ["gemm", "gemm", "conv", "rnn", "sparse_gemm", "memory_bandwidth",
                                                 "launch_latency", "allreduce"]


def test_suite_preset(tmp_path):
    path = write(tmp_path, '[[suites]]\nname = "nightly"\npreset = "full"\ncron = "0 3 * * *"\n')
    [suite] = load(path, env={}).suites
    assert suite.workloads[0].params == {"set": "full"}


def test_file_then_environment_then_flags(tmp_path):
    path = write(tmp_path, '[agent]\nlisten = "127.0.0.1:1000"\nsample_hz = 20\n[guard]\nmax_utilization = 0.2\n')
    config = load(path, env={"SIXDIM_LISTEN": "127.0.0.1:2000", "SIXDIM_GUARD_MAX_UTILIZATION": "0.3"})
    assert config.listen == "127.0.0.1:2000"       # environment beats file
    assert config.guard_max_utilization == 0.3
    assert config.sample_hz == 20.0                 # file beats default
    flags = argparse.Namespace(agent_listen="127.0.0.1:3000", guard_enabled=False)
    config = load(path, env={"SIXDIM_LISTEN": "127.0.0.1:2000"}, flags=flags)
    assert config.listen == "127.0.0.1:3000"        # flag beats environment
    assert config.guard_enabled is False


def test_config_path_from_environment(tmp_path):
    path = write(tmp_path, '[[suites]]\nname = "n"\nworkloads = ["gemm"]\ncron = "0 3 * * *"\n')
    config = load(None, env={"SIXDIM_CONFIG": path})
    assert config.source == path and config.suites[0].cron == "0 3 * * *"


def test_workload_parameters_in_suites(tmp_path):
    path = write(tmp_path, '[[suites]]\nname = "s"\ninterval_seconds = 60\n'
                           'workloads = [{name = "gemm", params = {m = 64, n = 64, k = 64, precisions = ["bf16"]}}]\n')
    [entry] = load(path, env={}).suites[0].workloads
    assert entry.params == {"m": 64, "n": 64, "k": 64, "precisions": ["bf16"]}


@pytest.mark.parametrize("text, env, fragments", [
    ('[agent]\nlisten = "nowhere"\n', {}, ["agent.listen", "HOST:PORT", "'nowhere'"]),
    ('[agent]\nlisen = "x"\n', {}, ["agent.lisen", "unknown key"]),
    ('[guard]\nmax_utilization = 2\n', {}, ["guard.max_utilization", "ratio from 0 to 1", "2"]),
    ('', {"SIXDIM_SAMPLE_HZ": "fast"}, ["environment variable SIXDIM_SAMPLE_HZ", "agent.sample_hz", "'fast'"]),
    ('[[suites]]\nname = "s"\nworkloads = ["gemm"]\n', {}, ["suites[0]", "exactly one of interval_seconds or cron"]),
    ('[[suites]]\nname = "s"\npreset = "nightly"\ncron = "0 3 * * *"\n', {},
     ["suites[0].preset", "quick, full, inference", "'nightly'"]),
    ('[[suites]]\nname = "s"\ninterval_seconds = 5\n', {}, ["suites[0]", "exactly one of preset"]),
    ('[[suites]]\nname = "s"\nworkloads = ["gemmm"]\ninterval_seconds = 5\n', {},
     ["suites[0].workloads[0].name", "unknown workload 'gemmm'"]),
    ('[[suites]]\nname = "s"\nworkloads = [{name = "gemm", params = {m = "big"}}]\ninterval_seconds = 5\n', {},
     ["suites[0].workloads[0].params", "parameter 'm'", "an integer"]),
    ('[[suites]]\nname = "s"\nworkloads = ["gemm"]\ncron = "every day"\n', {}, ["suites[0].cron", "crontab"]),
    ('[[suites]]\nname = "s"\nworkloads = ["gemm"]\ninterval_seconds = -1\n', {},
     ["suites[0].interval_seconds", "positive"]),
    ('[[suites]]\nname = "s"\nworkloads = ["gemm"]\ninterval_seconds = 5\ndevices = ["gpu0"]\n', {},
     ["suites[0].devices", "cuda:N", "'gpu0'"]),
    ('[agent\n', {}, ["(syntax)", "valid TOML"]),
])
def test_bad_configuration_names_source_key_and_expectation(tmp_path, text, env, fragments):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load(path, env=env)
    message = str(caught.value)
    if not env:
        assert message.startswith(path)
    for fragment in fragments:
        assert fragment in message


def test_missing_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load(str(tmp_path / "absent.toml"), env={})


def run_cli(*args, env):
    return subprocess.run([sys.executable, "-m", "agent", *args], capture_output=True, text=True, env=env,
                          timeout=60)


def test_serve_with_bad_config_exits_2_with_message(tmp_path, cli_env):
    path = write(tmp_path, '[guard]\nmax_utilization = "high"\n')
    result = run_cli("serve", "--config", path, env=cli_env)
    assert result.returncode == 2
    assert f"sixdim: error: {path}: guard.max_utilization: expected a ratio from 0 to 1, got 'high'" in result.stderr


def test_bad_environment_variable_exits_2(cli_env):
    result = run_cli("serve", env={**cli_env, "SIXDIM_GUARD": "maybe"})
    assert result.returncode == 2
    assert "environment variable SIXDIM_GUARD: guard.enabled: expected true or false, got 'maybe'" in result.stderr


def test_bad_flag_exits_2(cli_env):
    result = run_cli("serve", "--listen", "127.0.0.1:99999", env=cli_env)
    assert result.returncode == 2
    assert "command-line flag --listen: agent.listen" in result.stderr


def test_run_with_unknown_parameter_exits_2_before_running(cli_env):
    result = run_cli("run", "--workload", "gemm", "--device", "cpu", "-p", "q=3", env=cli_env)
    assert result.returncode == 2
    assert "--param q: none of the workloads to run (gemm) has a parameter 'q'" in result.stderr


def test_run_on_a_gpu_this_host_lacks_exits_2(cli_env):
    from collectors.nvml import NvmlCollector

    if NvmlCollector("x").availability().available:
        pytest.skip("this host has an NVIDIA GPU")
    result = run_cli("run", "--device", "cuda:0", env=cli_env)
    assert result.returncode == 2 and "cuda:0" in result.stderr


def test_help_explains_every_option_and_its_variable(cli_env):
    result = run_cli("serve", "--help", env=cli_env)
    assert result.returncode == 0
    from agent.config import OPTIONS

    for option in OPTIONS:
        assert option.flag in result.stdout and option.env in result.stdout
