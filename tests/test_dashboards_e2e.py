"""Every dashboard query, run against a real Prometheus that scrapes a real agent.

No Grafana server can run here, so the dashboards are proven the other way round: the agent runs
a small suite of every kernel kind plus convergence and card linearity on the CPU, Debian's
Prometheus scrapes it every second with the generated alert rules loaded, and then every panel
query, every template-variable query and every annotation query of the committed JSON
(dashboards/json/, what ships) goes through Prometheus's HTTP API, with the variables at "All"
and Grafana's macros replaced, as Grafana would send it.  Each must parse and execute; each must
return data unless the dashboard marks it GPU-only (this host has no GPU) or says why it may be
empty on a steady host (no regression open, no inference suite, ...).

The same Prometheus also scrapes a second target, a GPU host made of the faithful pynvml fake: the
agent's own NVML collector over two fake GPUs (a degraded H100 and a V100 without row remapping or
NVLink), rendered by the agent's own exporter, plus a few per-result throttle flags and
``sixdim_regression_cause`` series.  Every query of the GPU health row and of the likely-causes
tables must return data from it, and what a GPU does not answer must be absent in Prometheus too.
"""

from __future__ import annotations

import collections
import json
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pynvml
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from sixdim.collectors.base import Sample
from sixdim.collectors.nvml import NvmlCollector
from sixdim.core import catalog
from sixdim.dashboards.build import CAUSES_TITLE, HEALTH_ROW
from sixdim.http.board import Board
from sixdim.http.exporter import SixdimCollector
from tests.conftest import free_port, required_tool
from tests.daemon import Daemon, write_config
from tests.dashboard_queries import ANNOTATION, PANEL, VARIABLE, all_queries, panels, substitute
from tests.fakenvml import FakeGpu, FakeNvml

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


GPU_HOST = "gpuhost"
DEGRADED_H100 = FakeGpu(power_limit_mw=500_000, power_default_limit_mw=700_000, pcie_generation=4, pcie_width=8,
                        pcie_max_generation=5, pcie_max_width=16, ecc_corrected_volatile=3, remapped_corrected=2,
                        remapped_pending=1, utilization_gpu=97, clock_event_mask=0x4)
VOLTA = FakeGpu(name="Tesla V100-SXM2-32GB", uuid="GPU-volta", bus_id="00000000:2A:00.0", power_limit_mw=300_000,
                power_default_limit_mw=300_000, pcie_generation=3, pcie_max_generation=3,
                unsupported={"nvmlDeviceGetRemappedRows"}, nvlink_states=[],
                retired_pages_pending=pynvml.NVML_FEATURE_ENABLED)
"""The GPU host's two GPUs: an H100 at 500 W of 700 W on a Gen4 x8 link with a remap pending, and a V100
that retires pages instead of remapping rows, here on a board without NVLink."""


class _GpuHostExposition(SixdimCollector):
    """The exporter's rendering of the GPU host's series (no board, no history: only these)."""

    def __init__(self, samples: list[Sample]) -> None:
        super().__init__(Board(), [], GPU_HOST)
        self._fixed = samples

    def _samples(self) -> Iterator[Sample]:
        return iter(self._fixed)


def gpu_host_samples() -> list[Sample]:
    """Live GPU series and health from the NVML collector over the fake, per-result throttle flags of the
    H100's results, and the likely causes of one of them."""
    nvml = NvmlCollector(GPU_HOST, module=FakeNvml([DEGRADED_H100, VOLTA]))
    samples = nvml.collect()
    device = {**nvml.identity_labels(nvml.gpu(0)), catalog.DEVICE_TYPE: "cuda"}
    versions = {catalog.DRIVER_VERSION: "550.54.15", catalog.CUDA_VERSION: "12.4", catalog.TORCH_VERSION: "2.4.0"}
    for shape, capped in (("m=8192,n=8192,k=8192", 1.0), ("m=1024,n=1024,k=1024", 0.0)):
        result = {**device, **versions, catalog.WORKLOAD: "gemm", catalog.PRECISION: "bf16", catalog.SHAPE: shape,
                  catalog.MODE: "inference", catalog.PASS: "forward"}
        samples += [Sample(catalog.WORKLOAD_POWER_CAPPED, result, capped),
                    Sample(catalog.WORKLOAD_THERMAL_SLOWDOWN, result, 0.0),
                    Sample(catalog.WORKLOAD_HARDWARE_SLOWDOWN, result, 0.0)]
        if capped:
            samples += [Sample(catalog.REGRESSION_CAUSE, {**result, catalog.CAUSE: cause, catalog.CAUSE_RANK: rank},
                               1.0) for cause, rank in (("power_limit", "1"), ("pcie_link", "2"))]
    return samples


def serve_gpu_host() -> tuple[ThreadingHTTPServer, int]:
    """The GPU host's exposition on a loopback port, in a thread of this process."""
    registry = CollectorRegistry()
    registry.register(_GpuHostExposition(gpu_host_samples()))
    body = generate_latest(registry)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    port = free_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, port


def start_prometheus(tmp_path: Path, ports: list[int], rules: Path) -> tuple[subprocess.Popen, int]:
    """Debian's Prometheus on loopback scraping the targets every second as one job, ``sixdim`` (as a
    fleet's agents are), with the rules evaluated every second too (tests/helpers.py's, for several targets)."""
    prometheus = required_tool("prometheus")
    port = free_port()
    targets = ", ".join(f"'127.0.0.1:{p}'" for p in ports)
    (tmp_path / "prometheus.yml").write_text(
        f"global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {rules}\n"
        f"scrape_configs:\n  - job_name: sixdim\n    static_configs:\n      - targets: [{targets}]\n")
    server = subprocess.Popen(
        [prometheus, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "wb"))
    return server, port


def gpu_host_panels() -> set[tuple[str, str]]:
    """(dashboard uid, panel title) of the panels the GPU host must fill: the GPU detail's health row and
    the likely-causes tables."""
    out = set()
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        row = None
        for panel in panels(board):
            if panel.get("type") == "row":
                row = panel["title"]
            elif (board["uid"] == "sixdim-gpu" and row == HEALTH_ROW) or panel["title"] == CAUSES_TITLE:
                out.add((board["uid"], panel["title"]))
    return out


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
    gpu_host, gpu_host_port = serve_gpu_host()
    server, prom_port = start_prometheus(tmp_path, [agent_port, gpu_host_port], RULES)
    must_fill = gpu_host_panels()
    assert len(must_fill) == 10, must_fill  # the health row's 8 panels, a causes table on 2 dashboards
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
                if query.kind == PANEL and (query.dashboard, query.panel_title) in must_fill and not result:
                    failures.append(f"{where}: no data from the GPU host")
                    continue
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
        # what a GPU does not answer is absent in Prometheus too, never 0
        at = {"time": str(now)}
        volta = f'{{{catalog.HOSTNAME}="{GPU_HOST}", {catalog.UUID}="{VOLTA.uuid}"}}'
        for metric in (catalog.GPU_REMAPPED_ROWS, catalog.GPU_REMAPPED_ROWS_PENDING, catalog.GPU_REMAPPED_ROWS_FAILED,
                       catalog.GPU_NVLINK_LINKS_ACTIVE):
            assert api(prom_port, "query", query=metric.name + volta, **at)["data"]["result"] == [], metric.name
        found = api(prom_port, "query", query=catalog.GPU_RETIRED_PAGES_PENDING.name + volta, **at)["data"]["result"]
        assert [r["value"][1] for r in found] == ["1"]
    finally:
        server.terminate()
        server.wait(timeout=20)
        daemon.stop()
        gpu_host.shutdown()
