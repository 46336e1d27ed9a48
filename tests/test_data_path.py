"""The data path of a real daemon under faults: a database locked by another process while runs
finish, a corrupt database at start, a shutdown in the middle of a suite."""

import subprocess
import sys
import time
import urllib.request

import pytest

from sixdim.store.history import History
from tests.conftest import free_port
from tests.daemon import FAST_GEMM_SUITE, Daemon, write_config
from tests.helpers import Locker

pytestmark = pytest.mark.slow

LOCK_SECONDS = 12.0
"""Long enough for a few suite runs (every 2 s) to finish while it is held, and for a scrape that waited
on it to stand out from the 5 s a busy machine may take."""

def timed_scrape(port: int) -> tuple[float, str]:
    begun = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    return time.monotonic() - begun, text


def value(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    return None


def test_a_database_locked_by_another_process_loses_no_run_and_never_slows_a_scrape(tmp_path, cli_env):
    port, history = free_port(), tmp_path / "history.db"
    daemon = Daemon(write_config(tmp_path / "c.toml", history, FAST_GEMM_SUITE), port, cli_env, tmp_path / "log")
    try:
        daemon.wait_ready()
        daemon.wait_for("sixdim_workload_flops", timeout=60)
        locker = Locker(history, LOCK_SECONDS)
        locked_at, locked_unix = time.monotonic(), time.time()
        slowest, most_pending, locked_errors = 0.0, 0.0, 0.0
        while locker.process.poll() is None:
            seconds, text = timed_scrape(port)
            slowest = max(slowest, seconds)
            most_pending = max(most_pending, value(text, "sixdim_history_pending_results") or 0.0)
            locked_errors = value(text, "sixdim_history_write_errors_total", reason="locked") or 0.0
            time.sleep(0.25)
        assert time.monotonic() - locked_at >= LOCK_SECONDS - 1
        # A scrape that waited on the lock would take most of its 12 s; 5 s leaves room for a busy
        # machine's stalls (the figures for scrape latency are tests/bench/scrape_bench.py's).
        assert slowest < 5.0, f"a scrape took {slowest:.2f} s while the database was locked"
        assert most_pending >= 1, "runs finished during the lock should have waited in memory"
        assert locked_errors >= 1
        deadline = time.monotonic() + 20
        while True:  # released: the waiting runs are written at the next catch-up
            _, text = timed_scrape(port)
            if value(text, "sixdim_history_pending_results") == 0.0 and value(text, "sixdim_history_up") == 1.0:
                break
            assert time.monotonic() < deadline, "the waiting runs were not written after the lock was released"
            time.sleep(0.25)
    finally:
        assert daemon.stop() == 0
    records = list(History(history))
    assert len({r.uid for r in records}) == len(records)  # each run once
    # the suite kept finishing runs through the lock, and those reached the database once released
    during = [r for r in records if locked_unix < r.ended_at < locked_unix + LOCK_SECONDS - 1]
    assert len(during) >= 1, sorted(r.ended_at - locked_unix for r in records)


def test_a_corrupt_database_is_moved_aside_and_the_agent_serves(tmp_path, cli_env):
    port, history = free_port(), tmp_path / "history.db"
    history.write_bytes(b"\x00garbage where a database was\x00" * 1000)
    daemon = Daemon(write_config(tmp_path / "c.toml", history, FAST_GEMM_SUITE), port, cli_env, tmp_path / "log")
    try:
        daemon.wait_ready()
        daemon.wait_for("sixdim_workload_flops", timeout=60)
        _, text = timed_scrape(port)
        assert value(text, "sixdim_history_write_errors_total", reason="corrupt") == 1.0
    finally:
        assert daemon.stop() == 0
    moved = list(tmp_path.glob("history.db.corrupt-*"))
    assert moved and moved[0].read_bytes().startswith(b"\x00garbage")
    assert "moved it to" in (tmp_path / "log").read_text()
    assert len(list(History(history))) >= 1


def test_sixdim_run_with_the_database_locked_keeps_its_results_for_the_next_open(tmp_path, cli_env):
    history = tmp_path / "history.db"
    History(history).close()  # an existing history, as on any host that ran sixdim before
    locker = Locker(history)
    try:
        done = subprocess.run([sys.executable, "-m", "sixdim", "run", "-w", "gemm", "-d", "cpu", "-p", "m=32", "-p",
                               "n=32", "-p", "k=32", "-p", "precisions=fp32", "--history", str(history)],
                              capture_output=True, text=True, env=cli_env, timeout=120)
    finally:
        locker.release()
    assert done.returncode == 0, done.stderr
    assert "could not be written" in done.stderr and "history.db.spool" in done.stderr
    assert "Traceback" not in done.stderr
    [record] = list(History(history))  # the next open writes what the spool kept
    assert record.workload == "gemm" and record.status == "ok"
