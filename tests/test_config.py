"""One schema, one loader: precedence, defaults, and errors that say where and what."""

import argparse

import pytest

from sixdim.config import ConfigError, load
from sixdim.config.schema import DEFAULT_PORT
from tests.helpers import call_sixdim


def write(tmp_path, text, name="sixdim.toml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_embedded_default_is_three_tiers_the_frequent_one_every_15_minutes():
    config = load(None, env={})
    assert config.listen == f"0.0.0.0:{DEFAULT_PORT}"
    frequent, power, quick = config.suites
    assert (frequent.name, frequent.interval_seconds, frequent.devices) == ("frequent", 900.0, ("auto",))
    assert [w.name for w in frequent.workloads] == ["gemm", "conv", "rnn", "memory_bandwidth", "launch_latency"]
    assert all(w.params.get("power_seconds", 0) == 0 for w in frequent.workloads)  # no power phases
    assert (power.name, power.interval_seconds, power.run_at_start) == ("power", 21600.0, False)
    assert (quick.name, quick.cron, quick.on_change) == ("quick", "17 3 * * *", True)
    assert [w.name for w in quick.workloads] == ["gemm", "gemm", "conv", "rnn", "sparse_gemm", "memory_bandwidth",
                                                 "launch_latency", "allreduce"]


def test_suite_tier_keys_are_checked(tmp_path):
    base = '[[suites]]\nname = "a"\npreset = "frequent"\ninterval_seconds = 60\n'
    [suite] = load(write(tmp_path, base + "confirm_per_hour = 2\non_change = true\n"), env={}).suites
    assert (suite.confirm_per_hour, suite.on_change) == (2, True)
    for bad, expected in (("confirm_per_hour = -1", "a whole number from 0 to 60"),
                          ("confirm_per_hour = 2.5", "a whole number from 0 to 60"),
                          ("on_change = 1", "true or false")):
        with pytest.raises(ConfigError) as error:
            load(write(tmp_path, base + bad + "\n"), env={})
        assert "suites[0]" in str(error.value) and expected in str(error.value)


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


def test_defaults_read_the_environment_the_loader_was_given_not_the_process(monkeypatch):
    """The hostname, history and state folder defaults follow the env mapping passed to load(), as
    every option does, so a reload or a test sees one environment, not a mix with os.environ."""
    import os
    import socket

    monkeypatch.setenv("NODE_NAME", "from-the-process")
    monkeypatch.setenv("XDG_STATE_HOME", "/process/state")
    config = load(None, env={"NODE_NAME": "gpu-node-7", "XDG_STATE_HOME": "/given/state",
                             "XDG_DATA_HOME": "/given/data"})
    assert config.hostname == "gpu-node-7"
    assert load(None, env={}).hostname == socket.gethostname()
    # both users' defaults, whoever runs the tests (CI and the containers run as root)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    config = load(None, env={"XDG_STATE_HOME": "/given/state", "XDG_DATA_HOME": "/given/data"})
    assert config.state_dir == "/given/state/sixdim"
    assert config.history == "/given/data/sixdim/history.db"
    monkeypatch.setattr(os, "geteuid", lambda: 0)  # root: a system service's folder, whatever the environment
    config = load(None, env={"XDG_STATE_HOME": "/given/state", "XDG_DATA_HOME": "/given/data"})
    assert (config.state_dir, config.history) == ("/var/lib/sixdim", "/var/lib/sixdim/history.db")


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
     ["suites[0].preset", "quick, full, inference, training", "'nightly'"]),
    ('[[suites]]\nname = "s"\ninterval_seconds = 5\n', {}, ["suites[0]", "exactly one of preset"]),
    ('[[suites]]\nname = "s"\nworkloads = ["gemmm"]\ninterval_seconds = 5\n', {},
     ["suites[0].workloads[0].name", "unknown workload 'gemmm'"]),
    ('[[suites]]\nname = "s"\nworkloads = [{name = "gemm", params = {m = "big"}}]\ninterval_seconds = 5\n', {},
     ["suites[0].workloads[0].params", "parameter 'm'", "an integer"]),
    ('[[suites]]\nname = "s"\nworkloads = ["gemm"]\ncron = "every day"\n', {}, ["suites[0].cron", "crontab"]),
    ('[[suites]]\nname = "s"\nworkloads = ["gemm"]\ninterval_seconds = -1\n', {},
     ["suites[0].interval_seconds", "positive, finite"]),
    ('[[suites]]\nname = "s"\nworkloads = ["gemm"]\ninterval_seconds = 5\ndevices = ["gpu0"]\n', {},
     ["suites[0].devices", "cuda:N", "'gpu0'"]),
    ('[agent\n', {}, ["(syntax)", "valid TOML"]),
    ('[[suites]]\nname = "s"\nworkloads = ["gemm"]\ninterval_seconds = 5\nexport = "everything"\n', {},
     ["suites[0].export", "summary, shapes", "'everything'"]),
    ('[agent]\nhistory_keep_days = nan\n', {}, ["agent.history_keep_days", "from 1 to 36500"]),
    ('', {"SIXDIM_HISTORY_MAX_RUNS": "10"}, ["SIXDIM_HISTORY_MAX_RUNS", "agent.history_max_runs", "1000"]),
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


run_cli = call_sixdim


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
    from sixdim.collectors.nvml import NvmlCollector

    if NvmlCollector("x").availability().available:
        pytest.skip("this host has an NVIDIA GPU")
    result = run_cli("run", "--device", "cuda:0", env=cli_env)
    assert result.returncode == 2 and "cuda:0" in result.stderr


def test_help_explains_every_option_and_its_variable(cli_env):
    result = run_cli("serve", "--help", env=cli_env)
    assert result.returncode == 0
    from sixdim.config.schema import OPTIONS

    for option in OPTIONS:
        assert option.flag in result.stdout and option.env in result.stdout


# ---------------------------------------------------------------------------- run_at_start

def test_a_cron_suite_waits_for_its_time_and_an_interval_suite_runs_at_start(tmp_path):
    path = write(tmp_path, '[[suites]]\nname = "nightly"\npreset = "full"\ncron = "0 3 * * *"\n\n'
                           '[[suites]]\nname = "hourly"\nworkloads = ["gemm"]\ninterval_seconds = 3600\n\n'
                           '[[suites]]\nname = "eager"\npreset = "quick"\ncron = "0 3 * * *"\nrun_at_start = true\n\n'
                           '[[suites]]\nname = "patient"\nworkloads = ["gemm"]\ninterval_seconds = 60\n'
                           'run_at_start = false\n')
    at_start = {s.name: s.run_at_start for s in load(path, env={}).suites}
    assert at_start == {"nightly": False, "hourly": True, "eager": True, "patient": False}


def test_the_embedded_default_says_which_tier_runs_at_start():
    """The frequent tier gives a first result at once; the daily suite runs at start only through its
    on_change (a device where it never ran), never because the daemon restarted."""
    from importlib import resources

    text = resources.files("sixdim").joinpath("default.toml").read_text()
    assert "run_at_start = true" in text and "run_at_start = false" in text
    assert [(s.name, s.run_at_start) for s in load(None, env={}).suites] == [
        ("frequent", True), ("power", False), ("quick", False)]


def test_the_readme_example_does_not_start_the_full_suite_at_once():
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    example = next(b for b in re.findall(r"```toml\n(.*?)```", readme, re.S) if "[[suites]]" in b)
    from sixdim.config.loader import tomllib
    from sixdim.config.suites import parse_suites

    suites = {s.name: s for s in parse_suites(tomllib.loads(example)["suites"], "README.md")}
    full = [s for s in suites.values() if s.workloads[0].params.get("set") == "full"]
    assert full and not any(s.run_at_start for s in full)


def test_scheduler_logs_why_a_suite_runs_or_waits_and_each_run_with_its_counts(caplog):
    import threading
    import time

    from sixdim.config import Suite, WorkloadEntry
    from sixdim.config.schema import EMBEDDED_SOURCE
    from sixdim.run.devices import Device, DeviceLocks
    from sixdim.run.progress import SuiteProgress
    from sixdim.run.scheduler import SuiteScheduler
    from tests.helpers import make_record

    class Executor:
        def __init__(self):
            self.stop, self.locks, self.ran = threading.Event(), DeviceLocks(), threading.Event()
            self.progress = SuiteProgress("h")

        def execute_many(self, items, device, *, suite, timeout):
            self.ran.set()
            return [make_record("ok"), make_record("ok"), make_record("unsupported")]

    cpu = Device("cpu")
    now = Suite(name="quick", workloads=(WorkloadEntry("gemm"),), interval_seconds=900, run_at_start=True,
                timeout_given=True)  # a given timeout: never stretched for the load
    later = Suite(name="nightly", workloads=(WorkloadEntry("gemm"),), cron="0 3 * * *")
    executor = Executor()
    scheduler = SuiteScheduler(executor, [(now, [cpu]), (later, [cpu])], source=EMBEDDED_SOURCE)
    caplog.set_level("INFO", logger="sixdim.run.scheduler")
    scheduler.start()
    try:
        assert executor.ran.wait(30)
        deadline = time.monotonic() + 30
        while "ended in" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        scheduler.shutdown()
    text = caplog.text
    assert ("scheduled suite quick on cpu: every 900 s; first run now "
            "(run_at_start = true in the embedded default configuration)") in text
    assert "scheduled suite nightly on cpu: cron '0 3 * * *' (UTC); first run " in text
    assert "(run_at_start = false: waits for its time)" in text
    assert "suite quick on cpu: started (1 workload, timeout 600 s per case)" in text
    assert "suite quick on cpu: ended in " in text and "s: 3 cases: 2 ok; not run: 1 unsupported" in text
    assert "suite nightly on cpu: started" not in text


# ---------------------------------------------------------------------------- numbers

@pytest.mark.parametrize("key", ["interval_seconds", "timeout_seconds", "misfire_grace_seconds"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "0", "1e12", "true", '"60"'])
def test_suite_seconds_must_be_positive_and_finite(tmp_path, key, value):
    schedule = "" if key == "interval_seconds" else "interval_seconds = 60\n"
    path = write(tmp_path, f'[[suites]]\nname = "s"\nworkloads = ["gemm"]\n{schedule}{key} = {value}\n')
    with pytest.raises(ConfigError) as caught:
        load(path, env={})
    assert str(caught.value).startswith(f"{path}: suites[0].{key}: expected a positive, finite number of seconds")


def test_a_nan_timeout_never_disables_the_timeout(tmp_path):
    path = write(tmp_path, '[[suites]]\nname = "s"\nworkloads = ["gemm"]\ninterval_seconds = 60\n'
                           'timeout_seconds = nan\n')
    with pytest.raises(ConfigError, match=r"suites\[0\]\.timeout_seconds.*got nan"):
        load(path, env={})


@pytest.mark.parametrize("variable, key, value", [
    ("SIXDIM_SAMPLE_HZ", "agent.sample_hz", "nan"),
    ("SIXDIM_SAMPLE_HZ", "agent.sample_hz", "inf"),
    ("SIXDIM_SAMPLE_HZ", "agent.sample_hz", "0"),
    ("SIXDIM_SAMPLE_HZ", "agent.sample_hz", "-5"),
    ("SIXDIM_GUARD_MAX_UTILIZATION", "guard.max_utilization", "nan"),
    ("SIXDIM_GUARD_MAX_UTILIZATION", "guard.max_utilization", "-inf"),
    ("SIXDIM_GUARD_MAX_UTILIZATION", "guard.max_utilization", "-0.1"),
    ("SIXDIM_LISTEN", "agent.listen", "127.0.0.1:0"),
    ("SIXDIM_LISTEN", "agent.listen", "127.0.0.1:-1"),
    ("SIXDIM_LISTEN", "agent.listen", "127.0.0.1:nan"),
])
def test_numeric_options_reject_nan_infinity_and_out_of_range(variable, key, value):
    with pytest.raises(ConfigError) as caught:
        load(None, env={variable: value})
    assert str(caught.value).startswith(f"environment variable {variable}: {key}: expected ")
    assert repr(value) in str(caught.value)


@pytest.mark.parametrize("text, key", [
    ("[agent]\nsample_hz = nan\n", "agent.sample_hz"),
    ("[agent]\nsample_hz = inf\n", "agent.sample_hz"),
    ("[guard]\nmax_utilization = nan\n", "guard.max_utilization"),
    ("[guard]\nmax_utilization = -0.5\n", "guard.max_utilization"),
])
def test_numeric_keys_in_the_file_reject_nan_and_infinity(tmp_path, text, key):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=rf"^{path}: {key}: expected "):
        load(path, env={})


@pytest.mark.parametrize("args, fragment", [
    (["--timeout", "nan"], "argument --timeout: expected a positive, finite number of seconds"),
    (["--timeout", "inf"], "argument --timeout: expected a positive, finite number of seconds"),
    (["--timeout", "-1"], "argument --timeout: expected a positive, finite number of seconds"),
    (["--timeout", "0"], "argument --timeout: expected a positive, finite number of seconds"),
    (["--nnodes", "0"], "argument --nnodes: expected a whole number of at least 1, got '0'"),
    (["--nnodes", "-2"], "argument --nnodes: expected a whole number of at least 1"),
    (["--nnodes", "2", "--nproc-per-node", "0"], "argument --nproc-per-node: expected a whole number of at least 1"),
    (["--nproc-per-node", "2"], "--nproc-per-node: only with --nnodes"),
    (["--nnodes", "2", "--rdzv-endpoint", "node1:0"], "argument --rdzv-endpoint: expected HOST:PORT with a port"),
    (["--nnodes", "2", "--rdzv-endpoint", ":29500"], "argument --rdzv-endpoint: expected HOST:PORT with a port"),
    (["--sample-hz", "nan"], "command-line flag --sample-hz: agent.sample_hz: expected a number from 1 to 100"),
    (["--guard-max-utilization", "inf"], "command-line flag --guard-max-utilization: guard.max_utilization"),
    (["-p", "min_round_seconds=nan"], "--param min_round_seconds=nan: expected a finite number, got 'nan'"),
    (["-p", "precisions=fp32", "-p", "warmup_seconds=-inf"], "expected a finite number, got '-inf'"),
])
@pytest.mark.slow
def test_run_rejects_bad_numbers_with_exit_2_and_no_traceback(cli_env, args, fragment):
    result = run_cli("run", "-w", "gemm", "-d", "cpu", *args, env=cli_env)
    assert result.returncode == 2, result.stderr
    assert fragment in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_rejects_a_nan_sample_rate_from_the_environment(cli_env):
    result = run_cli("serve", env={**cli_env, "SIXDIM_SAMPLE_HZ": "nan"})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "environment variable SIXDIM_SAMPLE_HZ: agent.sample_hz: expected a number from 1 to 100, got 'nan'" \
        in result.stderr


def test_user_suites_export_summaries_and_the_embedded_tiers_every_shape(tmp_path):
    assert [s.export for s in load(None, env={}).suites] == ["shapes", "shapes", "shapes"]
    path = write(tmp_path, '[agent]\nhistory_keep_days = 30\n\n[[suites]]\nname = "nightly"\npreset = "full"\n'
                           'cron = "0 3 * * *"\n\n[[suites]]\nname = "small"\nworkloads = ["gemm"]\n'
                           'interval_seconds = 60\nexport = "shapes"\n')
    config = load(path, env={"SIXDIM_HISTORY_MAX_RUNS": "5000"})
    assert [(s.name, s.export) for s in config.suites] == [("nightly", "summary"), ("small", "shapes")]
    assert (config.history_keep_days, config.history_max_runs) == (30.0, 5000)


def test_the_embedded_default_cron_lines_are_valid():
    """The loader does not check the embedded default's cron lines (so ``sixdim report`` never imports
    APScheduler): this test does, as the scheduler will read them."""
    from apscheduler.triggers.cron import CronTrigger

    crons = [suite.cron for suite in load(None, env={}).suites if suite.cron]
    assert crons
    for line in crons:
        CronTrigger.from_crontab(line)
