"""Every dashboard query, run against a real Prometheus that scrapes a real agent.

No Grafana server can run here, so the dashboards are proven the other way round: the agent runs
a small suite of every kernel kind plus convergence and card linearity on the CPU, Debian's
Prometheus scrapes it every second with the generated alert rules loaded, and then every panel
query, every template-variable query and every annotation query of the committed JSON
(dashboards/json/, what ships) goes through Prometheus's HTTP API, with the variables at "All"
and Grafana's macros replaced, as Grafana would send it.  Each must parse and execute; each must
return data unless the dashboard marks it GPU-only (this host has no GPU) or says why it may be
empty on a steady host (no regression open, no inference suite, ...).
"""

from __future__ import annotations

import collections
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.daemon import Daemon, write_config
from tests.dashboard_queries import ANNOTATION, PANEL, VARIABLE, all_queries, substitute
from tests.helpers import start_prometheus

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
DASHBOARDS = sorted((ROOT / "dashboards" / "json").glob("*.json"))
RULES = ROOT / "deploy" / "prometheus" / "sixdim-rules.yml"

FAST = "rounds = 3, min_round_seconds = 0.01, warmup_seconds = 0.02, power_seconds = 0.0"
SUITE = f"""
[[suites]]
name = "dash"
interval_seconds = 3600
export = "shapes"
devices = ["cpu"]
timeout_seconds = 180
workloads = [
  {{name = "gemm", params = {{m = 128, n = 128, k = 128, precisions = ["fp32", "bf16"], {FAST}}}}},
  {{name = "conv", params = {{scale = 64, precisions = ["fp32"], layouts = ["nchw"], {FAST}}}}},
  {{name = "rnn", params = {{scale = 64, precisions = ["fp32"], {FAST}}}}},
  {{name = "sparse_gemm", params = {{scale = 64, {FAST}}}}},
  {{name = "memory_bandwidth", params = {{}}}},
  {{name = "launch_latency", params = {{}}}},
  {{name = "allreduce", params = {{scale = 64, iterations = 2, rounds = 3}}}},
  {{name = "convergence", params = {{epochs = 5, target_accuracy = 0.8}}}},
  {{name = "linearity", params = {{steps_per_window = 2, warmup_steps = 1}}}},
]
"""
WORKLOADS = {"gemm", "conv", "rnn", "sparse_gemm", "memory_bandwidth", "launch_latency", "allreduce", "convergence",
             "linearity"}


def api(port: int, path: str, **params: str) -> dict:
    url = f"http://127.0.0.1:{port}/api/v1/{path}?" + urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:  # a query Prometheus refuses: 400 with its reason
        return json.load(error)


def ok_workloads(daemon: Daemon) -> set[str]:
    try:
        return {s.labels["workload"] for s in daemon.samples("sixdim_workload_runs_total")
                if s.labels["status"] == "ok" and s.value > 0}
    except OSError:
        return set()


def test_every_dashboard_query_runs_and_returns_data_against_a_real_prometheus(tmp_path, cli_env, capsys):
    assert len(DASHBOARDS) == 6, DASHBOARDS
    agent_port = free_port()
    server, prom_port = start_prometheus(tmp_path, agent_port, RULES)
    cli_env["OMP_NUM_THREADS"] = "1"
    log = tmp_path / "serve.log"
    daemon = Daemon(write_config(tmp_path / "dash.toml", tmp_path / "h.db", SUITE), agent_port, cli_env, log)
    try:
        daemon.wait_ready()
        started = time.time()
        deadline = time.monotonic() + 600
        while ok_workloads(daemon) != WORKLOADS and time.monotonic() < deadline:
            time.sleep(2)
        assert ok_workloads(daemon) == WORKLOADS, log.read_text()[-3000:]
        time.sleep(5)  # a few more scrapes and rule evaluations after the suite's last result
        now = time.time()

        failures, counts = [], {"panels": set(), "queries": 0, "with data": 0, "gpu-only": 0, "may be empty": 0}
        empty_reasons: collections.Counter[str] = collections.Counter()
        for path in DASHBOARDS:
            dashboard = json.loads(path.read_text())
            for query in all_queries(dashboard):
                expr = substitute(query.expr, rate_interval="30s", interval="2s", range_="5m")
                if query.kind == PANEL:
                    counts["panels"].add((query.dashboard, query.panel_id))
                if query.kind == PANEL and not query.instant or query.kind == ANNOTATION:
                    body = api(prom_port, "query_range", query=expr, start=str(started), end=str(now), step="2")
                else:  # a variable's selector, a table's or bar gauge's instant query
                    body = api(prom_port, "query", query=expr, time=str(now))
                where = f"{query.dashboard} / {query.kind} {query.panel_title!r} {query.ref_id or ''}: {expr}"
                if body.get("status") != "success":
                    failures.append(f"{where}: {body.get('error')}")
                    continue
                counts["queries"] += 1
                result = body["data"]["result"]
                if query.kind == VARIABLE:  # Grafana lists the label's non-empty values
                    result = [r for r in result if r["metric"].get(query.label, "") != ""]
                if result:
                    counts["with data"] += 1
                elif query.gpu_only:
                    counts["gpu-only"] += 1
                elif query.may_be_empty:
                    counts["may be empty"] += 1
                    empty_reasons[query.may_be_empty] += 1
                else:
                    failures.append(f"{where}: no data")
        with capsys.disabled():  # in CI's output too, not only with -s
            print(f"\ndashboards: {len(DASHBOARDS)}, panels with queries: {len(counts['panels'])}, queries run: "
                  f"{counts['queries']}, with data: {counts['with data']}, "
                  f"empty and marked GPU-only: {counts['gpu-only']}, empty and marked may-be-empty: "
                  f"{counts['may be empty']}")
            for reason, n in sorted(empty_reasons.items()):
                print(f"  may be empty, and was: {n} x {reason}")
        assert not failures, "\n".join(failures)
    finally:
        server.terminate()
        server.wait(timeout=20)
        daemon.stop()
