"""A real Prometheus server scrapes a real agent and can query its GEMM series."""

import time

import pytest

from tests.conftest import free_port
from tests.daemon import FAST_GEMM_SUITE, Daemon, write_config
from tests.helpers import prometheus_query as query
from tests.helpers import start_prometheus

pytestmark = pytest.mark.slow


def test_prometheus_scrapes_the_agent(tmp_path, cli_env):
    agent_port = free_port()
    daemon = Daemon(write_config(tmp_path / "a.toml", tmp_path / "h.db", FAST_GEMM_SUITE),
                    agent_port, cli_env, tmp_path / "serve.log")
    server, prom_port = start_prometheus(tmp_path, agent_port)
    try:
        daemon.wait_ready()
        deadline, result = time.monotonic() + 90, []
        while time.monotonic() < deadline and not result:
            time.sleep(1)
            try:
                result = query(prom_port, 'sixdim_workload_flops{workload="gemm",device_type="cpu"}')
            except OSError:
                continue
        assert result, (tmp_path / "prometheus.log").read_text()[-2000:]
        labels = result[0]["metric"]
        assert labels["job"] == "sixdim" and labels["hostname"] == "testhost"
        assert labels["shape"] == "m=128,n=128,k=128,op=NN" and labels["precision"] == "fp32"
        assert float(result[0]["value"][1]) > 1e6
        # up is 1 (polled: one scrape that a busy machine made outlast its 1 s timeout reads 0)
        deadline, up = time.monotonic() + 30, []
        while time.monotonic() < deadline and [u["value"][1] for u in up] != ["1"]:
            up = query(prom_port, 'up{job="sixdim"}')
            time.sleep(0.5)
        assert [u["value"][1] for u in up] == ["1"], up
        # the counter is queryable as a counter
        assert query(prom_port, 'sixdim_workload_runs_total{status="ok"}')
    finally:
        server.terminate()
        server.wait(timeout=20)
        daemon.stop()
