"""``sixdim serve`` for real: a child daemon, scraped over HTTP, restarted, stopped."""

import re
import signal
import time
from pathlib import Path

import psutil
import pytest

from sixdim.store.history import History
from tests.conftest import free_port, promtool_check
from tests.daemon import FAST_GEMM_SUITE, Daemon, crash, write_config

pytestmark = pytest.mark.slow

EXPECTED_LABELS = {"hostname", "gpu", "UUID", "model_name", "pci_bus_id", "device_type", "workload", "precision",
                   "shape", "mode", "pass", "suite", "driver_version", "cuda_version", "cudnn_version", "nccl_version",
                   "torch_version"}


def test_serve_exports_gemm_stays_light_and_restores_from_history(tmp_path, cli_env, promtool):
    port, history = free_port(), tmp_path / "history.db"
    config = write_config(tmp_path / "fast.toml", history, FAST_GEMM_SUITE)
    daemon = Daemon(config, port, cli_env, tmp_path / "serve.log")
    try:
        daemon.wait_ready()
        started = time.monotonic()
        [flops] = daemon.wait_for("sixdim_workload_flops", timeout=60)
        assert time.monotonic() - started < 60
        assert set(flops.labels) == EXPECTED_LABELS
        assert flops.labels["workload"] == "gemm" and flops.labels["shape"] == "m=128,n=128,k=128,op=NN"
        assert flops.labels["hostname"] == "testhost" and flops.labels["device_type"] == "cpu"
        assert flops.value > 1e6
        for name in ("sixdim_workload_seconds", "sixdim_workload_memory_bytes",
                     "sixdim_workload_last_run_timestamp_seconds"):
            assert daemon.samples(name), name
        assert daemon.samples("sixdim_workload_runs_total")[0].labels["status"] == "ok"
        [nvml_up] = [s for s in daemon.samples("sixdim_collector_up") if s.labels["collector"] == "nvml"]
        if nvml_up.value == 0:
            assert nvml_up.labels["reason"].startswith("NVML unavailable")

        check = promtool_check(promtool, daemon.metrics())
        assert check.returncode == 0 and check.stdout + check.stderr == "", check.stdout + check.stderr

        # light: under 100 MB resident, and no torch library mapped, even after runs
        daemon.wait_for("sixdim_workload_runs_total")
        process = psutil.Process(daemon.process.pid)
        assert process.memory_info().rss < 100 * 2**20
        maps = Path(f"/proc/{daemon.process.pid}/maps").read_text()
        assert "torch" not in maps and "libcuda" not in maps
        assert daemon.get("/healthz") == (200, "ok\n")
    finally:
        crash(daemon.process)  # killed, not stopped: the restart must not rely on a clean exit

    runs_before = len(list(History(history)))
    # restart with a schedule that will not run soon: the series must come back from history alone
    quiet = FAST_GEMM_SUITE.replace("interval_seconds = 2", "interval_seconds = 3600\nrun_at_start = false")
    config = write_config(tmp_path / "quiet.toml", history, quiet)
    restarted_at = time.time()
    daemon = Daemon(config, port, cli_env, tmp_path / "serve2.log")
    try:
        daemon.wait_ready()
        # The latest ok run as the history holds it now: a case the crash cut short after its worker
        # had reported it is recorded by the restart (before it serves), and may be the newest.
        [latest] = History(history).latest_ok()
        # restored in the background (sixdim_history_restored): the results and counters appear together
        [flops] = daemon.wait_for("sixdim_workload_flops")
        assert (flops.labels["shape"], flops.value) == ("m=128,n=128,k=128,op=NN",
                                                        pytest.approx(latest.figures["flops"]))
        [ended] = daemon.samples("sixdim_workload_last_run_timestamp_seconds")
        assert ended.value == pytest.approx(latest.ended_at)
        ok_runs = [s for s in daemon.samples("sixdim_workload_runs_total") if s.labels["status"] == "ok"]
        assert ok_runs[0].value == sum(1 for r in History(history) if r.status == "ok")
        # no run started; a run the crash cut short is recorded from its worker record (agent/run/orphans.py):
        # a case it had finished (none: each is recorded as it ends), and the interruption, never as a run
        recovered = list(History(history))[runs_before:]
        assert all(r.started_at < restarted_at for r in recovered)
        assert all(r.status == "ok" for r in recovered)
        assert all(i.reason.startswith("interrupted: the sixdim process")
                   for i in History(history).interruptions_after(0))
        assert daemon.stop() == 0
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()


def test_sigterm_stops_a_running_worker_and_exits_within_seconds(tmp_path, cli_env):
    port, history = free_port(), tmp_path / "history.db"
    long_suite = FAST_GEMM_SUITE.replace("m = 128, n = 128, k = 128", "m = 512, n = 512, k = 512").replace(
        "min_round_seconds = 0.02", "min_round_seconds = 5.0")
    assert long_suite != FAST_GEMM_SUITE
    config = write_config(tmp_path / "long.toml", history, long_suite)
    daemon = Daemon(config, port, cli_env, tmp_path / "serve.log")
    try:
        daemon.wait_ready()
        deadline = time.monotonic() + 30
        workers = []
        while not workers and time.monotonic() < deadline:
            workers = [p for p in psutil.Process(daemon.process.pid).children(recursive=True)
                       if "sixdim.run.worker" in " ".join(p.cmdline())]
            time.sleep(0.2)
        assert workers, "no worker started"
        time.sleep(2.0)  # the worker is importing torch or timing by now
        started = time.monotonic()
        daemon.process.send_signal(signal.SIGTERM)
        assert daemon.process.wait(timeout=15) == 0
        assert time.monotonic() - started < 10.0  # the documented promise: within 10 s
        for worker in workers:
            assert not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE
        assert list(History(history)) == []  # the case it stopped is not a run, nor a skip
        [interruption] = History(history).interruptions_after(0)  # but the suite run's one interruption
        assert interruption.cases_left == 1 and "shutting down" in interruption.reason
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()


def test_runs_recorded_by_another_process_appear_without_a_restart(tmp_path, cli_env):
    import subprocess
    import sys

    port, history = free_port(), tmp_path / "history.db"
    quiet = FAST_GEMM_SUITE.replace("interval_seconds = 2", "interval_seconds = 3600\nrun_at_start = false")
    daemon = Daemon(write_config(tmp_path / "quiet.toml", history, quiet), port, cli_env, tmp_path / "serve.log")
    try:
        daemon.wait_ready()
        assert daemon.samples("sixdim_workload_flops") == []
        result = subprocess.run([sys.executable, "-m", "sixdim", "run", "-w", "gemm", "-d", "cpu", "-p", "m=32",
                                 "-p", "n=32", "-p", "k=32", "-p", "precisions=fp32", "--history", str(history)],
                                capture_output=True, text=True, env=cli_env, timeout=120)
        assert result.returncode == 0, result.stderr
        [flops] = daemon.wait_for("sixdim_workload_flops", timeout=15)  # read in the background, about 1 s
        assert flops.labels["shape"] == "m=32,n=32,k=32,op=NN"
    finally:
        daemon.stop()


@pytest.mark.parametrize("how", ["flag", "environment", "file"])
def test_an_address_in_use_is_named_with_its_option_and_exits_2(tmp_path, cli_env, how):
    import socket
    import subprocess
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        config = tmp_path / "sixdim.toml"
        config.write_text(f'[agent]\nlisten = "{address}"\n' if how == "file" else "")
        args = ["--listen", address] if how == "flag" else []
        env = {**cli_env, "SIXDIM_LISTEN": address} if how == "environment" else cli_env
        result = subprocess.run([sys.executable, "-m", "sixdim", "serve", "--config", str(config), *args],
                                capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    where = {"flag": "command-line flag --listen", "environment": "environment variable SIXDIM_LISTEN",
             "file": str(config)}[how]
    assert f"sixdim: error: {where}: agent.listen: expected an address this host can listen on, got '{address}'" \
        in result.stderr
    assert "Address already in use" in result.stderr
    assert "--listen, SIXDIM_LISTEN or agent.listen" in result.stderr


def test_the_log_says_when_each_suite_runs_and_each_run_with_its_counts(tmp_path, cli_env):
    port, history = free_port(), tmp_path / "history.db"
    nightly = '\n[[suites]]\nname = "nightly"\npreset = "full"\ncron = "0 3 * * *"\ndevices = ["cpu"]\n'
    config = write_config(tmp_path / "two.toml", history, FAST_GEMM_SUITE + nightly)
    # a host whose clock is not in UTC: cron lines are still read in UTC
    daemon = Daemon(config, port, {**cli_env, "SIXDIM_LOG_LEVEL": "info", "TZ": "Asia/Tokyo"}, tmp_path / "serve.log")
    try:
        daemon.wait_ready()
        daemon.wait_for("sixdim_workload_flops")
        deadline = time.monotonic() + 30
        while "suite fast on cpu: ended in" not in daemon.log_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        assert daemon.stop() == 0
    log = daemon.log_path.read_text()
    assert "scheduled suite fast on cpu: every 2 s; first run now (run_at_start = true)\n" in log
    assert "scheduled suite nightly on cpu: cron '0 3 * * *' (UTC); first run " in log
    assert re.search(r"nightly on cpu: cron '0 3 \* \* \*' \(UTC\); first run \d{4}-\d\d-\d\d 03:00:00 UTC ", log), log
    assert "(run_at_start = false: waits for its time)" in log
    assert "INFO sixdim.run.scheduler: suite fast on cpu: started (1 workload, timeout 60 s per case)" in log
    assert "suite fast on cpu: ended in " in log and " s: 1 case: 1 ok" in log
    assert "suite nightly on cpu: started" not in log
    assert {r.suite for r in History(history)} == {"fast"}
