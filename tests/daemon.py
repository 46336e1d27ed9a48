"""Start and stop a real ``sixdim serve`` in a child process for tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
from prometheus_client.parser import text_string_to_metric_families


class Daemon:
    def __init__(self, config_path: Path, port: int, env: dict[str, str], log_path: Path):
        self.port = port
        self._log = open(log_path, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sixdim", "serve", "--config", str(config_path), "--listen", f"127.0.0.1:{port}"],
            env=env, stdout=self._log, stderr=subprocess.STDOUT)
        self.log_path = log_path

    def get(self, path: str) -> tuple[int, str]:
        try:
            # generous: a scrape is cached bytes, but a loaded CI machine can stall any process for seconds
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=30) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def wait_ready(self, timeout: float = 30.0, *, restored: bool = True) -> None:
        """Until /healthz answers 200 and, with ``restored``, the history is restored (the daemon answers
        before its background restore ends: ``sixdim_history_restored`` 1 says the results, run counters
        and interruptions of earlier runs are on /metrics)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"daemon exited with {self.process.returncode}: {self.log_path.read_text()}")
            try:
                if self.get("/healthz")[0] == 200 and (
                        not restored or any(s.value == 1 for s in self.samples("sixdim_history_restored"))):
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"daemon not ready{' and restored' if restored else ''} within {timeout} s: "
                             f"{self.log_path.read_text()}")

    def metrics(self) -> str:
        return self.get("/metrics")[1]

    def samples(self, name: str) -> list:
        return [s for family in text_string_to_metric_families(self.metrics()) for s in family.samples
                if s.name == name]

    def wait_for(self, name: str, timeout: float = 60.0, count: int = 1) -> list:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                found = self.samples(name)
            except OSError:  # not answering yet, or a stalled read: try again until the deadline
                found = []
            if len(found) >= count:
                return found
            time.sleep(0.5)
        raise AssertionError(f"{name} not exported within {timeout} s: {self.log_path.read_text()}")

    def stop(self, timeout: float = 15.0) -> int:
        if self.process.poll() is None:
            self.process.terminate()
        code = self.process.wait(timeout=timeout)
        self._log.close()
        return code


def write_config(path: Path, history: Path, suite: str) -> Path:
    """A config file; the listen address comes from the --listen flag, as an operator would give it."""
    path.write_text(f'[agent]\nhistory = "{history}"\nhostname = "testhost"\n\n{suite}')
    return path


FAST_GEMM_SUITE = """
[[suites]]
name = "fast"
interval_seconds = 2
export = "shapes"
devices = ["cpu"]
timeout_seconds = 60
workloads = [{name = "gemm", params = {m = 128, n = 128, k = 128, precisions = ["fp32"], min_round_seconds = 0.02, warmup_seconds = 0.05}}]
"""  # noqa: E501 - a TOML inline table cannot span lines


def crash(process) -> None:
    """SIGKILL the daemon as a crash would, then the workers it had running: they are in sessions of
    their own, which the daemon's death does not reach, and must not run on after the test.  (The
    folder of a killed run stays behind in the state directory, where the next start recovers it.)"""
    workers = psutil.Process(process.pid).children(recursive=True)
    process.kill()
    process.wait()
    for worker in workers:
        try:
            os.killpg(worker.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    psutil.wait_procs(workers, timeout=10)
