"""``sixdim serve --check-config``: what the daemon would take, told before a reload, starting nothing."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from sixdim.collectors.nvml import NvmlCollector
from sixdim.config import load
from sixdim.daemon.check import check
from sixdim.run.devices import DeviceError
from sixdim.workloads import registry
from tests.conftest import free_port
from tests.daemon import FAST_GEMM_SUITE, Daemon, write_config
from tests.fakenvml import FakeGpu, FakeNvml
from tests.helpers import call_sixdim

GEMM = {"m": 128, "n": 128, "k": 128, "precisions": ["fp32", "bf16"]}
TWO_SUITES = """
[[suites]]
name = "fast"
interval_seconds = 60
devices = ["cpu"]
workloads = [{name = "gemm", params = {m = 128, n = 128, k = 128, precisions = ["fp32", "bf16"]}}]

[[suites]]
name = "nightly"
cron = "0 3 * * *"
devices = ["cpu"]
timeout_seconds = 1200
workloads = ["rnn", "conv"]
"""


def check_config(*args: str, env: dict) -> subprocess.CompletedProcess:
    return call_sixdim("serve", "--check-config", *args, env=env)  # starts nothing: no process of its own


def test_it_prints_what_serve_would_run_and_starts_nothing(tmp_path, cli_env):
    config = write_config(tmp_path / "sixdim.toml", tmp_path / "history.db", TWO_SUITES)
    done = check_config("--config", str(config), "--listen", "127.0.0.1:9999", env={**cli_env, "TZ": "Asia/Tokyo"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "sixdim: configuration OK (nothing was started):"
    assert f"  configuration: {config}" in lines
    assert "  listen:        127.0.0.1:9999, plain HTTP, no authentication (no web configuration file)" in lines
    assert f"  history:       {cli_env['SIXDIM_HISTORY']}" in lines  # the variable outranks the file
    gemm_cases = len(registry.get("gemm").cases(GEMM, "cpu"))
    assert gemm_cases == 2
    [fast] = [line for line in lines if line.startswith("  suite fast:")]
    timeout = re.fullmatch(r"  suite fast: every 60 s, first run at start; 1 workload, 2 cases on cpu; timeout "
                           r"([\d.]+) s per case(?: \(the default 600 s x [\d.]+ for the CPU's .+\))?; "
                           r"export summary", fast)
    assert timeout and 600 <= float(timeout.group(1)) <= 6000, fast  # the default, stretched by the load
    nightly_cases = len(registry.get("rnn").cases({}, "cpu")) + len(registry.get("conv").cases({}, "cpu"))
    [nightly] = [line for line in lines if line.startswith("  suite nightly:")]
    assert re.fullmatch(r"  suite nightly: cron '0 3 \* \* \*' \(UTC\), first run \d{4}-\d\d-\d\d 03:00:00 UTC; "
                        rf"2 workloads, {nightly_cases} cases on cpu; timeout 1200 s per case; export summary",
                        nightly), nightly
    # no lock, no state directory, no history: safe to run anywhere, any time
    assert not Path(cli_env["SIXDIM_STATE_DIR"]).exists()
    assert not Path(cli_env["SIXDIM_HISTORY"]).exists()
    assert not Path(cli_env["SIXDIM_HISTORY"] + ".lock").exists()


@pytest.mark.slow
def test_it_runs_beside_the_daemon_it_checks_for_and_leaves_it_alone(tmp_path, cli_env):
    config = write_config(tmp_path / "sixdim.toml", tmp_path / "history.db", FAST_GEMM_SUITE.replace(
        "interval_seconds = 2", "interval_seconds = 3600\nrun_at_start = false"))
    port = free_port()
    daemon = Daemon(config, port, cli_env, tmp_path / "serve.log")
    try:
        daemon.wait_ready()
        done = check_config("--config", str(config), "--listen", f"127.0.0.1:{port}", env=cli_env)
        assert done.returncode == 0, done.stderr  # neither the agent's locks nor its port stand in the way
        assert "suite fast: every 3600 s, first run " in done.stdout
        assert daemon.get("/healthz")[0] == 200
        assert "SIGHUP" not in daemon.log_path.read_text()
        assert daemon.stop() == 0
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()


def test_a_bad_file_is_exit_2_and_one_line_naming_the_file_and_key(tmp_path, cli_env):
    config = write_config(tmp_path / "sixdim.toml", tmp_path / "history.db", TWO_SUITES + "\n[bogus]\nx = 1\n")
    done = check_config("--config", str(config), env=cli_env)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"sixdim: error: {config}: bogus: ") and done.stderr.count("\n") == 1, done.stderr


def test_a_bad_web_configuration_is_exit_2_naming_its_key(tmp_path, cli_env):
    web = tmp_path / "web.yml"
    web.write_text("tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n")
    web.chmod(0o644)
    config = write_config(tmp_path / "sixdim.toml", tmp_path / "history.db", TWO_SUITES)
    done = check_config("--config", str(config), "--web.config.file", str(web), env=cli_env)
    assert done.returncode == 2
    assert done.stderr.startswith(f"sixdim: error: {web}: tls_server_config.cert_file: "), done.stderr


def test_a_world_writable_file_is_refused_as_serve_refuses_it(tmp_path, cli_env):
    config = write_config(tmp_path / "sixdim.toml", tmp_path / "history.db", TWO_SUITES)
    config.chmod(0o666)
    done = check_config("--config", str(config), env=cli_env)
    assert done.returncode == 2 and "(permissions)" in done.stderr, done.stderr


def _config(tmp_path: Path, devices: str) -> object:
    path = tmp_path / "gpu.toml"
    path.write_text(f'[[suites]]\nname = "kernels"\ninterval_seconds = 600\ndevices = {devices}\n'
                    f'workloads = ["rnn"]\n')
    path.chmod(0o644)
    return load(str(path), env={"SIXDIM_HISTORY": str(tmp_path / "h.db"), "SIXDIM_STATE_DIR": str(tmp_path / "s")})


def test_cases_are_counted_for_the_device_type_each_suite_really_runs_on(tmp_path):
    """The loader expands the cases for the CPU; a GPU suite's are its GPU shape sets."""
    nvml = NvmlCollector("h", module=FakeNvml([FakeGpu(uuid="GPU-aaaa"), FakeGpu(uuid="GPU-bbbb")]))
    cuda, cpu = len(registry.get("rnn").cases({}, "cuda")), len(registry.get("rnn").cases({}, "cpu"))
    assert cuda != cpu  # so the line below tells which expansion was counted
    lines = check(_config(tmp_path, '["auto"]'), nvml)
    [suite] = [line for line in lines if line.startswith("suite kernels: ")]
    assert suite.endswith(f"1 workload, {cuda} cases on each of cuda:0, cuda:1; timeout 600 s per case; "
                          f"export summary"), suite
    # and what they cost there: the H100 estimate on each GPU, no CPU line and no extra GPU line
    [costs] = [line for line in lines if line.startswith("suite kernels costs about ")]
    assert " of device time a run on each of cuda:0, cuda:1 (estimated per case: no recorded runs); " \
           "6 runs an hour: " in costs, costs
    assert lines[-1].startswith("schedule: about ") and not any(line.startswith("schedule on ") for line in lines)


def test_a_gpu_the_host_does_not_have_is_refused(tmp_path):
    nvml = NvmlCollector("h", module=FakeNvml([FakeGpu(uuid="GPU-aaaa")]))
    config = _config(tmp_path, '["cuda:1"]')
    with pytest.raises(DeviceError, match=rf"^{re.escape(config.source)}: suites\[0\]\.devices: .*index 1"):
        check(config, nvml)


@pytest.mark.slow
def test_a_device_this_host_lacks_is_named_with_the_file_key_or_flag_that_asked(tmp_path, cli_env):
    """No NVML here: cuda:3 is refused, in one line naming where it was asked for."""
    config = write_config(tmp_path / "sixdim.toml", tmp_path / "history.db",
                          FAST_GEMM_SUITE.replace('devices = ["cpu"]', 'devices = ["cuda:3"]'))
    assert 'devices = ["cuda:3"]' in config.read_text()
    done = check_config("--config", str(config), env=cli_env)
    errors = [line for line in done.stderr.splitlines() if line.startswith("sixdim: error:")]
    assert done.returncode == 2 and len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    assert errors[0].startswith(f"sixdim: error: {config}: suites[0].devices: device 'cuda:3' asked for"), errors
    serve = subprocess.run([sys.executable, "-m", "sixdim", "serve", "--config", str(config),
                            "--listen", f"127.0.0.1:{free_port()}"], env=cli_env, capture_output=True, text=True,
                           timeout=60)
    assert serve.returncode == 2 and f"{config}: suites[0].devices: device 'cuda:3'" in serve.stderr, serve.stderr
    # refused before the history was made (the agent's lock files come first: one agent per host)
    assert not (tmp_path / "history.db").exists()
    run = subprocess.run([sys.executable, "-m", "sixdim", "run", "--config", str(config), "-w", "gemm", "-d", "cuda:3"],
                         env=cli_env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "sixdim: error: --device: device 'cuda:3' asked for" in run.stderr, run.stderr
    assert not (tmp_path / "history.db").exists()


def test_it_says_the_timeout_the_daemon_would_use_now(tmp_path, cli_env):
    """On a CPU without a given timeout the daemon stretches the default by the host's load (up to 10 times);
    the check said 600 s where the daemon, at the same load, used 6,000 s."""
    from sixdim.config.suites import case_timeout

    config = write_config(tmp_path / "sixdim.toml", tmp_path / "history.db", TWO_SUITES)
    done = check_config("--config", str(config), env=cli_env)
    [fast] = [line for line in done.stdout.splitlines() if line.startswith("  suite fast:")]
    said = float(re.search(r"timeout ([\d.]+) s per case", fast).group(1))
    expected, why = case_timeout(600, "cpu", False)
    assert said == pytest.approx(expected, rel=0.5)  # the load moves between the two readings
    assert ("(the default 600 s x" in fast) == (said != 600)
    [nightly] = [line for line in done.stdout.splitlines() if line.startswith("  suite nightly:")]
    assert "timeout 1200 s per case; export" in nightly  # a given timeout is used as it is
