"""The configuration and web configuration files a planted name cannot turn against the agent: a FIFO
or a device at their path is refused at once, naming the file and what it is (a plain ``open`` of a
FIFO waits for a writer, in the daemon's signal-handling thread), and a configuration far larger than
any real one is refused with one line before it is validated (10^6 workloads took minutes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sixdim import config as config_module
from sixdim.config.loader import MAX_CONFIG_BYTES
from sixdim.config.suites import MAX_WORKLOAD_ENTRIES
from tests.conftest import free_port
from tests.daemon import FAST_GEMM_SUITE, Daemon, write_config
from tests.helpers import call_sixdim

QUICK = 20.0
"""Seconds a refusal may take in a child before the test calls it a hang (it takes well under one; a
child that waits on a FIFO waits for ever, so any bound tells the two apart)."""


def fifo(path: Path) -> Path:
    os.mkfifo(path, 0o600)  # private: the permission check cannot be what refuses it
    return path


def check_config_child(*args: str, env: dict) -> subprocess.CompletedProcess:
    """``sixdim serve --check-config ARGS`` in a child, so that a hang is a timeout, not a stuck test."""
    try:
        return subprocess.run([sys.executable, "-m", "sixdim", "serve", "--check-config", *args], env=env,
                              capture_output=True, text=True, timeout=QUICK)
    except subprocess.TimeoutExpired:
        pytest.fail(f"sixdim serve --check-config {' '.join(args)} still running after {QUICK:g} s")


def test_check_config_refuses_a_fifo_as_the_configuration_at_once(tmp_path, cli_env):
    path = fifo(tmp_path / "sixdim.toml")
    done = check_config_child("--config", str(path), env=cli_env)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert f"{path}: (file): expected a regular TOML file" in line and "it is a FIFO" in line, line


def test_check_config_refuses_a_fifo_as_the_web_configuration_at_once(tmp_path, cli_env):
    path = fifo(tmp_path / "web.yml")
    done = check_config_child("--web.config.file", str(path), env=cli_env)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "agent.web_config_file: expected a regular web configuration file" in line, line
    assert str(path) in line and "it is a FIFO" in line, line


def test_a_link_to_a_device_is_refused_without_reading_it(tmp_path, cli_env):
    """``/dev/zero`` behind a link: refused for what it is, not read up to the size limit first."""
    config, web = tmp_path / "sixdim.toml", tmp_path / "web.yml"
    config.symlink_to("/dev/zero")
    web.symlink_to("/dev/zero")
    done = call_sixdim("serve", "--check-config", "--config", str(config), env=cli_env)
    assert done.returncode == 2 and "it is a character device" in done.stderr, done.stderr
    done = call_sixdim("serve", "--check-config", "--web.config.file", str(web), env=cli_env)
    assert done.returncode == 2 and "it is a character device" in done.stderr, done.stderr


def test_a_file_beyond_the_size_limit_is_refused_in_one_line_naming_it(tmp_path, cli_env):
    path = tmp_path / "sixdim.toml"
    path.write_text("# padding\n" * (MAX_CONFIG_BYTES // 10 + 1))  # comments only: valid TOML, harmless
    assert path.stat().st_size > MAX_CONFIG_BYTES
    done = call_sixdim("serve", "--check-config", "--config", str(path), env=cli_env)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert f"{path}: (file): expected a TOML file of at most 1 MiB" in line, line


def suites_with(entries: int, *, suites: int = 1, last: str = "gemm") -> str:
    """``suites`` suites of ``entries // suites`` workloads each, the very last one ``last``."""
    names = ['"gemm"'] * entries
    names[-1] = f'"{last}"'
    per_suite = entries // suites
    return "".join(f'[[suites]]\nname = "s{i}"\ninterval_seconds = 60\ndevices = ["cpu"]\n'
                   f'workloads = [{", ".join(names[i * per_suite:(i + 1) * per_suite])}]\n' for i in range(suites))


@pytest.mark.parametrize("suites", [1, MAX_WORKLOAD_ENTRIES + 1])
def test_more_workload_entries_than_the_limit_are_refused_before_they_are_checked(tmp_path, cli_env, suites):
    """One suite of 1,001 workloads, or 1,001 suites of one: refused in one line that names the file
    and the limit, before any entry is validated (the unknown workload at the end is not reached)."""
    path = tmp_path / "sixdim.toml"
    path.write_text(suites_with(MAX_WORKLOAD_ENTRIES + 1, suites=suites, last="no-such-workload"))
    done = call_sixdim("serve", "--check-config", "--config", str(path), env=cli_env)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    expected = f"{path}: suites: expected at most {MAX_WORKLOAD_ENTRIES:,} workload entries in all suites"
    assert expected in line and f"it has {MAX_WORKLOAD_ENTRIES + 1:,}" in line, line


def test_a_configuration_at_the_limit_loads(tmp_path, cli_env):
    path = tmp_path / "sixdim.toml"
    path.write_text(suites_with(MAX_WORKLOAD_ENTRIES, suites=10))
    loaded = config_module.load(str(path), env=cli_env)
    assert len(loaded.suites) == 10 and sum(len(s.workloads) for s in loaded.suites) == MAX_WORKLOAD_ENTRIES


@pytest.mark.slow
def test_sighup_onto_a_fifo_keeps_the_running_configuration_and_sigterm_still_stops(tmp_path, cli_env):
    """The configuration, then the web configuration it names, replaced by FIFOs and reloaded: each
    reload is refused (logged, naming the FIFO), the agent keeps serving, and SIGTERM stops it."""
    config = write_config(tmp_path / "sixdim.toml", tmp_path / "history.db", FAST_GEMM_SUITE.replace(
        "interval_seconds = 2", "interval_seconds = 3600\nrun_at_start = false"))
    good = config.read_text()
    daemon = Daemon(config, free_port(), {**cli_env, "SIXDIM_LOG_LEVEL": "info"}, tmp_path / "serve.log")

    def reload_fails(count: int) -> str:
        daemon.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + QUICK
        while daemon.log_path.read_text().count("configuration reload failed") < count:
            assert time.monotonic() < deadline, f"no refusal logged: {daemon.log_path.read_text()}"
            time.sleep(0.1)
        return daemon.log_path.read_text()

    try:
        daemon.wait_ready()
        config.unlink()
        fifo(config)
        log = reload_fails(1)
        assert f"{config}: (file): expected a regular TOML file" in log and "it is a FIFO" in log, log
        assert daemon.get("/healthz")[0] == 200

        web = fifo(tmp_path / "web.yml")
        config.unlink()
        config.write_text(good.replace("[agent]\n", f'[agent]\nweb_config_file = "{web}"\n'))
        log = reload_fails(2)
        assert f"agent.web_config_file: expected a regular web configuration file, got '{web}'" in log, log
        assert daemon.get("/healthz")[0] == 200
        deadline = time.monotonic() + QUICK  # the reload's outcome shows at the next refresh, about a second
        while daemon.samples("sixdim_config_reload_success")[0].value != 0.0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert daemon.samples("sixdim_config_reload_success")[0].value == 0.0
        assert daemon.get("/metrics")[0] == 200  # the running (plain) web configuration stays
        daemon.process.send_signal(signal.SIGTERM)
        assert daemon.process.wait(timeout=QUICK) == 0
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()
        daemon.stop()
