"""``sixdim serve`` with few file descriptors (issue 44, item 4): a real daemon started under a hard
RLIMIT_NOFILE of 64, flooded by 200 dripping connections from one address, must keep answering /healthz
from another address and keep recording its scheduled runs (no EMFILE), because the HTTP server caps the
connections it holds from the limit it finds at start and keeps the rest in reserve
(agent/http/server.py, agent/daemon/serve.py)."""

from __future__ import annotations

import http.client
import os
import re
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sixdim.http import server
from sixdim.store.history import History
from tests.conftest import free_port
from tests.daemon import write_config
from tests.test_http_resilience import HEADER_DRIP, SlowClients

HARD = 64
"""The hard limit the daemon runs under: it cannot raise its soft limit past this."""
SOFT = 48
"""The soft limit it is started with: below the hard one, so raising it shows."""
FLOOD = 200
PROBE_TIMEOUT = 5.0
"""Generous: the server's own work is milliseconds; before the cap, a probe timed out at 10 s."""

PRINT_SOFT_LIMIT = "import resource; print('rate %d' % resource.getrlimit(resource.RLIMIT_NOFILE)[0])"
"""The command the schedule runs: its "throughput" is the soft open-file limit it was given."""

SUITE = f"""
[[suites]]
name = "tick"
interval_seconds = 1
devices = ["cpu"]
timeout_seconds = 30
workloads = [{{name = "command", params = {{argv = ["{sys.executable}", "-c", "{PRINT_SOFT_LIMIT}"], label = "tick", \
throughput_regex = "rate ([0-9.]+)", formats = []}}}}]
"""


@dataclass
class LimitedDaemon:
    process: subprocess.Popen
    port: int
    log: Path
    history: Path

    def healthz(self, timeout: float = PROBE_TIMEOUT) -> tuple[int, float]:
        """(status, seconds) of a /healthz from 127.0.0.1; raises OSError when it fails."""
        started = time.monotonic()
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout,
                                                source_address=("127.0.0.1", 0))
        try:
            connection.request("GET", "/healthz")
            response = connection.getresponse()
            response.read()
            return response.status, time.monotonic() - started
        finally:
            connection.close()


def _limit() -> None:  # in the child, before exec: what `ulimit -Sn 48 -Hn 64` does
    resource.setrlimit(resource.RLIMIT_NOFILE, (SOFT, HARD))


@pytest.fixture(scope="module")
def daemon(tmp_path_factory) -> Iterator[LimitedDaemon]:
    tmp = tmp_path_factory.mktemp("fd")
    history = tmp / "history.db"
    config = write_config(tmp / "tick.toml", history, SUITE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIXDIM_")}
    env.update(SIXDIM_STATE_DIR=str(tmp / "state"), SIXDIM_LOG_LEVEL="info", TMPDIR=str(tmp))
    port, log = free_port(), tmp / "serve.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "sixdim", "serve", "--config", str(config), "--listen",
                                    f"127.0.0.1:{port}"], env=env, stdout=out, stderr=subprocess.STDOUT,
                                   preexec_fn=_limit)
    running = LimitedDaemon(process, port, log, history)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, f"the daemon exited with {process.returncode}: {log.read_text()}"
            try:
                if running.healthz(1.0)[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"the daemon did not answer: {log.read_text()}"
            time.sleep(0.1)
        yield running
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_serve_raises_its_soft_limit_to_the_hard_one_and_logs_its_connection_cap(daemon):
    limits = Path(f"/proc/{daemon.process.pid}/limits").read_text()
    [line] = [line for line in limits.splitlines() if line.startswith("Max open files")]
    assert line.split()[3:5] == [str(HARD), str(HARD)], line
    text = daemon.log.read_text()
    assert re.search(rf"open files: soft limit raised from {SOFT} to {HARD}", text), text
    cap = re.search(r"at most (\d+) client connections", text)
    assert cap, text
    assert 1 <= int(cap.group(1)) < HARD


def test_what_a_run_starts_gets_the_soft_limit_the_daemon_started_with(daemon):
    """The daemon raised its own soft limit for its connections; the programs its cases run get the host's
    (a program using select() breaks above 1,024 descriptors, which is why systemd's soft limit is 1,024)."""
    deadline = time.monotonic() + 20
    while not (runs := [run for run in History(daemon.history) if run.status == "ok"]):
        assert time.monotonic() < deadline, daemon.log.read_text()
        time.sleep(0.2)
    assert {run.figures["samples_per_second"] for run in runs} == {float(SOFT)}


@pytest.mark.slow
def test_a_dripping_flood_leaves_healthz_and_scheduled_runs_their_descriptors(daemon):
    """Issue 44: under `ulimit -n 64`, 200 dripping connections made /healthz time out at 10 s and scheduled
    runs fail with EMFILE.  Here 200 connections from 127.0.0.2 drip a header line a second (reconnecting
    when closed) for 5 s: every /healthz from 127.0.0.1 answers 200 within the (generous) timeout, and
    every run started meanwhile is recorded as successful."""
    flood_started = time.time()
    with SlowClients(daemon.port, [HEADER_DRIP] * FLOOD, sources=["127.0.0.2"], up_fraction=0.0) as attack:
        probes: list[str | float] = []
        end = time.monotonic() + 5.0
        while time.monotonic() < end:
            try:
                status, seconds = daemon.healthz()
                probes.append(seconds if status == 200 else f"status {status}")
            except (OSError, http.client.HTTPException) as exc:
                probes.append(f"{type(exc).__name__} {exc}")
            time.sleep(0.25)
    flood_ended = time.time()
    failed = [p for p in probes if isinstance(p, str)]
    assert not failed, f"{len(failed)} of {len(probes)} /healthz failed: {failed[:5]}"
    assert attack.opened >= FLOOD, "the flood never opened its connections"
    time.sleep(1.5)  # a run started in the flood's last second is recorded
    during = [run for run in History(daemon.history) if flood_started <= run.started_at <= flood_ended]
    assert len(during) >= 2, f"only {len(during)} run(s) started during the flood"
    bad = [(run.status, run.reason) for run in during if run.status != "ok"]
    assert not bad, bad
    assert "Too many open files" not in daemon.log.read_text()


def test_the_cap_keeps_the_reserve_and_the_defaults_where_the_limit_allows():
    """The connections held never reach into the reserve (unless the limit cannot give even the minimum),
    and a generous limit keeps the defaults."""
    roomy = server.connection_cap(1 << 20, 30, server.reserve_for(8))
    assert (roomy.waiting, roomy.arriving, roomy.pool) == (server.WAITING, server.WAITING,
                                                           server.WORKERS + server.QUEUED)
    for limit in (64, 100, 256, 1024, 1500):
        cap = server.connection_cap(limit, 12, server.reserve_for(1))
        assert cap.total <= limit - 12 - server.reserve_for(1), (limit, cap)
        assert min(cap.waiting, cap.arriving, cap.pool) >= 1 and not cap.short
    tight = server.connection_cap(40, 12, server.reserve_for(1))
    assert tight.short and tight.total == server.MIN_CONNECTIONS
