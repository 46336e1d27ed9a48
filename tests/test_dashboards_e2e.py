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
NVLink), rendered by the agent's own exporter, plus a few per-result and per-suite throttle flags,
``sixdim_regression_cause`` and ``sixdim_peer_cause`` series.  Every query of the GPU health row, of
the likely-causes tables and of the panels that show an alert's GPU inputs must return data from it,
and what a GPU does not answer must be absent in Prometheus too.

Every target is scraped with a ``cluster`` target label, ``lab-a``, and the GPU host a second time as a host of
the same name in cluster ``lab-b``: with the cluster variable at ``lab-b`` every query runs, the GPU host's panels
fill, and no series of ``lab-a`` shows; the host variable lists only ``lab-b``'s host.

And a third: a second real agent, ``readme``, running the README's example configuration (its
``[[suites]]``, read from README.md): a suite of one's own that says nothing of ``export``, so Prometheus
sees only its summaries (the README's nightly full preset, here its workloads at small sizes and at once
rather than at 03:00), beside one with ``export = "shapes"`` (big-gemm, here at 128 cubed, with the
README's precisions).  With the variables at that host, every query must return data unless it is
GPU-only, may be empty, or is marked Per-shape, whose text must then say ``export = "shapes"``: a panel
is never empty for a user's own suite without saying what it needs.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import re
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pynvml
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from sixdim.collectors.base import Sample
from sixdim.collectors.nvml import NvmlCollector
from sixdim.config.loader import parse_toml
from sixdim.core import catalog
from sixdim.dashboards.build import CAUSES_TITLE, COST_ROW, EXPORT_SHAPES, HEALTH_ROW
from sixdim.http.board import Board
from sixdim.http.exporter import SixdimCollector, build_info_labels
from sixdim.monitoring.options import Options
from sixdim.store.reader import reading
from sixdim.workloads import registry
from tests.conftest import free_port, required_tool
from tests.daemon import Daemon, write_config
from tests.dashboard_queries import ANNOTATION, DEFAULT, PANEL, README, VARIABLE, all_queries, panels, substitute
from tests.fakenvml import FakeGpu, FakeNvml

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
DASHBOARDS = sorted((ROOT / "dashboards" / "json").glob("*.json"))
RULES = ROOT / "deploy" / "prometheus" / "sixdim-rules.yml"

FAST = "rounds = 3, min_round_seconds = 0.01, warmup_seconds = 0.02, power_seconds = 0.0"
SMALL = {
    "gemm": f'{{m = 128, n = 128, k = 128, precisions = ["fp32", "bf16"], {FAST}}}',
    "conv": f'{{scale = 64, max_batch = 1, precisions = ["fp32"], layouts = ["nchw"], {FAST}}}',
    "rnn": f'{{scale = 64, max_batch = 4, precisions = ["fp32"], {FAST}}}',
    "sparse_gemm": f"{{scale = 64, max_batch = 1, {FAST}}}",
    "memory_bandwidth": "{size_bytes = 4194304, rounds = 3, min_round_seconds = 0.01, warmup_seconds = 0.02}",
    "launch_latency": "{launches_per_round = 200, rounds = 3}",
    "allreduce": "{scale = 64, iterations = 2, rounds = 3}",
    "convergence": "{epochs = 5, target_accuracy = 0.8}",
    "linearity": "{steps_per_window = 2, warmup_steps = 1, windows = 3, counts = [1]}",
}
"""Each workload at a size a 2-core CPU runs in seconds, in one case where its set has several (the
shapes with the smallest batch: a panel reads every shape of a workload alike, as it reads every mode
and pass).  Card linearity at one card only, its reference case, which alone exports every linearity
series (its ratio is 1 by definition): the two-card case was a DDP run of two gloo ranks that the test never
waited for, still running beside the queries."""
WORKLOADS = set(SMALL)


def workloads(names: list[str]) -> str:
    return "workloads = [\n" + "".join(f'  {{name = "{name}", params = {SMALL[name]}}},\n' for name in names) + "]"


SUITE = f"""
[[suites]]
name = "dash"
interval_seconds = 3600
export = "shapes"
devices = ["cpu"]
timeout_seconds = 180
{workloads(list(SMALL))}
"""

TESTHOST, README_HOST = "testhost", "readme"
CLUSTER_LABEL = Options().cluster_label
LAB_A, LAB_B = "lab-a", "lab-b"
"""The clusters: every target in the first; the GPU host in the second too, under the same host name."""


def readme_suites() -> list[dict]:
    """The ``[[suites]]`` of the README's example configuration (its Configure section's TOML)."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"^## Configure$.*?^```toml$(.*?)^```$", text, re.S | re.M)
    assert block, "README.md: no TOML example under ## Configure"
    return parse_toml(block.group(1), "README.md")["suites"]


def readme_configuration(history: Path) -> tuple[str, set[str]]:
    """The README's example suites, runnable here in a minute: the same names and ``export`` settings, the
    preset's workloads at small sizes, every suite at start; and the workloads that must end ok."""
    own, per_shape = readme_suites()
    assert "export" not in own, "the README's first suite is one of the user's own: summaries only"
    assert per_shape.get("export") == "shapes"
    nightly = [name for name, _ in registry.SUITES[own["preset"]]]
    big = [entry["name"] for entry in per_shape["workloads"]]
    assert set(nightly) | set(big) <= set(SMALL) and big == ["gemm"], (nightly, big)
    precisions = per_shape["workloads"][0]["params"]["precisions"]
    text = (f'[agent]\nhistory = "{history}"\nhostname = "{README_HOST}"\n\n'
            f'[[suites]]\nname = "{own["name"]}"\ninterval_seconds = 3600\ndevices = ["cpu"]\ntimeout_seconds = 180\n'
            f"{workloads(list(dict.fromkeys(nightly)))}\n\n"
            f'[[suites]]\nname = "{per_shape["name"]}"\ninterval_seconds = 3600\nexport = "shapes"\n'
            f'devices = ["cpu"]\ntimeout_seconds = 180\nworkloads = [{{name = "gemm", params = {{m = 128, n = 128, '
            f"k = 128, precisions = {json.dumps(precisions)}, {FAST}}}}}]\n")
    return text, set(nightly) | set(big)


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
    """The exporter's rendering of the GPU host's series (no board, no history: only these), read afresh at
    each scrape."""

    def __init__(self, samples: Callable[[], list[Sample]]) -> None:
        super().__init__(Board(), [], GPU_HOST)
        self._read = samples

    def _samples(self) -> Iterator[Sample]:
        return iter(self._read())


SUITE_COSTS = {"frequent": (0.008, 0.012), "quick": (0.002, 0.008)}
"""The GPU host's suites on its H100: (device seconds per second, share of the GPU's energy) each, so that
benchmarks take 1% of its time and 2% of its energy."""


def gpu_host_samples(nvml: NvmlCollector, gpus: list[FakeGpu], elapsed: float) -> list[Sample]:
    """The agent's build info, live GPU series and health from the NVML collector over the fake, per-result
    throttle flags of the H100's results, and the likely causes of one of them; ``elapsed`` seconds after the
    host started, each GPU's energy counter advanced at its power, and the suites' cost counters at
    :data:`SUITE_COSTS`."""
    for gpu in gpus:  # NVML's counter, in millijoules: milliwatts times seconds
        gpu.energy_mj = FakeGpu.energy_mj + round(gpu.power_mw * elapsed)
    samples = nvml.collect() + [Sample(catalog.BUILD_INFO, build_info_labels(GPU_HOST), 1.0)]  # as every agent
    device = {**nvml.identity_labels(nvml.gpu(0)), catalog.DEVICE_TYPE: "cuda"}
    watts = gpus[0].power_mw / 1000
    for suite, (share, energy_share) in SUITE_COSTS.items():
        samples += [Sample(catalog.SUITE_DEVICE_SECONDS, {**device, catalog.SUITE: suite}, share * elapsed),
                    Sample(catalog.SUITE_ENERGY, {**device, catalog.SUITE: suite}, energy_share * watts * elapsed)]
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
            samples.append(Sample(catalog.PEER_CAUSE, {**result, catalog.CAUSE: "power_limit",
                                                       catalog.CAUSE_RANK: "1"}, 1.0))
    summary = {**device, **versions, catalog.SUITE: "quick", catalog.WORKLOAD: "gemm", catalog.PRECISION: "bf16",
               catalog.MODE: "inference", catalog.PASS: "forward"}
    samples += [Sample(catalog.SUMMARY_THERMAL_SLOWDOWN, summary, 1.0),
                Sample(catalog.SUMMARY_HARDWARE_SLOWDOWN, summary, 0.0)]
    return samples


def serve_gpu_host() -> tuple[ThreadingHTTPServer, int, list[float]]:
    """The GPU host's exposition on a loopback port, in a thread of this process; and the list that gets
    the time of its first scrape (Prometheus stamps that sample with about the same time)."""
    gpus = [dataclasses.replace(DEGRADED_H100), dataclasses.replace(VOLTA)]  # their counters advance
    nvml = NvmlCollector(GPU_HOST, module=FakeNvml(gpus))
    started = time.time()
    registry = CollectorRegistry()
    registry.register(_GpuHostExposition(lambda: gpu_host_samples(nvml, gpus, time.time() - started)))
    lock = threading.Lock()
    first_scrape: list[float] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            with lock:
                if not first_scrape:
                    first_scrape.append(time.time())
                body = generate_latest(registry)
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
    return server, port, first_scrape


def start_prometheus(tmp_path: Path, clusters: dict[str, list[int]], rules: Path) -> tuple[subprocess.Popen, int]:
    """Debian's Prometheus on loopback scraping the targets every second as one job, ``sixdim`` (as a
    fleet's agents are), each cluster's ports with the cluster as a target label, with the rules evaluated every
    second too (tests/helpers.py's, for several targets)."""
    prometheus = required_tool("prometheus")
    port = free_port()
    groups = "".join(f"      - targets: [{', '.join(repr(f'127.0.0.1:{p}') for p in ports)}]\n"
                     f"        labels: {{{CLUSTER_LABEL}: {cluster}}}\n" for cluster, ports in clusters.items())
    (tmp_path / "prometheus.yml").write_text(
        f"global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {rules}\n"
        f"scrape_configs:\n  - job_name: sixdim\n    static_configs:\n{groups}")
    server = subprocess.Popen(
        [prometheus, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "wb"))
    return server, port


ALERT_INPUTS_ON_A_GPU = {"Slowdowns the alerts see, per device", "Clock limits during the measurements",
                         "Likely causes of GPUs slower than their host peers", "Processes on the GPU", "Live GPU power"}
"""Panels that show what an alert or the runbook reads on a GPU (docs/ALERTS.md), new with issue 29."""
COSTS_ON_A_GPU = {"Benchmark share of device time", "Benchmark share of GPU energy",
                  "Benchmark device time per hour, by suite", "Benchmark cost in the time range, by suite"}
"""The agent health dashboard's panels of what the suites cost each device (issue 41)."""


def gpu_host_panels() -> set[tuple[str, str]]:
    """(dashboard uid, panel title) of the panels the GPU host must fill: the GPU detail's health row, the
    likely-causes tables, and the panels of the alerts' GPU inputs."""
    out = set()
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        row = None
        for panel in panels(board):
            if panel.get("type") == "row":
                row = panel["title"]
            elif ((board["uid"] == "sixdim-gpu" and row == HEALTH_ROW) or panel["title"] == CAUSES_TITLE
                  or panel["title"] in ALERT_INPUTS_ON_A_GPU or (board["uid"] == "sixdim-agent" and row == COST_ROW)):
                out.add((board["uid"], panel["title"]))
    return out


COST_RATE_SECONDS = 15
"""The rate window the cost panels' queries are checked with (Grafana's ``$__rate_interval`` stand-in: for a
data source that scrapes every second, as this Prometheus does, Grafana's own over a short range is 4 s).  Fifteen
scrapes: the 2% the values are checked to allows 0.3 s between when Prometheus stamped the window's first and
last samples and when the GPU host read their counters."""
SETTLE_SCRAPES = 3
"""Scrapes of every target after the suites' last results before the queries run, each followed by a rule
evaluation: a series that appeared with a last case has the two samples a rate needs, and the recording
rules read it."""


def check_costs(port: int, now: float, history: Path, failures: list[str]) -> None:
    """The cost panels' values: on the GPU host the shares and hours :data:`SUITE_COSTS` make; on the real
    agent (host ``testhost``, whose history is new) the device seconds Prometheus last read equal the sum of
    the case spans the history holds, per suite (what the counters count, since the agent started)."""
    board = json.loads((ROOT / "dashboards" / "json" / "sixdim-agent.json").read_text())
    found = {q.panel_title: q for q in all_queries(board) if q.kind == PANEL and q.panel_title in COSTS_ON_A_GPU}
    assert set(found) == COSTS_ON_A_GPU, found

    def values(title: str, host: str) -> dict[str, float]:
        expr = substitute(found[title].expr, {"hostname": host, "cluster": LAB_A},
                          rate_interval=f"{COST_RATE_SECONDS}s", range_="5m")
        result = api(port, "query", query=expr, time=str(now))["data"]["result"]
        return {r["metric"].get(catalog.SUITE, r["metric"].get(catalog.GPU, "")): float(r["value"][1])
                for r in result}

    expected = {"Benchmark share of device time": {"0": sum(s for s, _ in SUITE_COSTS.values())},
                "Benchmark share of GPU energy": {"0": sum(e for _, e in SUITE_COSTS.values())},
                "Benchmark device time per hour, by suite": {suite: s * 3600 for suite, (s, _) in SUITE_COSTS.items()}}
    for title, want in expected.items():
        got = values(title, GPU_HOST)
        if got.keys() != want.keys() or any(abs(got[k] - v) > 0.02 * v for k, v in want.items()):
            failures.append(f"GPU host: {title}: {got}, expected {want} within 2%")
    deadline = time.monotonic() + 60  # the suite's last cases, and the scrape after them
    while True:
        spans: collections.Counter[str] = collections.Counter()
        with reading(str(history)) as db:
            for suite, details in db.execute("SELECT suite, details FROM runs"):
                wall = json.loads(details).get("case_wall")
                if wall:
                    spans[suite] += wall[1] - wall[0]
        last = api(port, "query", query=f'{catalog.SUITE_DEVICE_SECONDS.name}{{{catalog.HOSTNAME}="{TESTHOST}"}}',
                   time=str(time.time()))["data"]["result"]
        scraped = {r["metric"][catalog.SUITE]: float(r["value"][1]) for r in last}
        if scraped.keys() == spans.keys() and all(abs(scraped[k] - v) <= 1e-9 * v for k, v in spans.items()):
            return
        if time.monotonic() > deadline:
            failures.append(f"testhost: {catalog.SUITE_DEVICE_SECONDS.name} {scraped}, the history's case spans "
                            f"{dict(spans)}")
            return
        time.sleep(0.2)


def api(port: int, path: str, **params: str) -> dict:
    url = f"http://127.0.0.1:{port}/api/v1/{path}?" + urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:  # a query Prometheus refuses: 400 with its reason
        return json.load(error)


def unix_time(stamp: str) -> float:
    """A time of Prometheus's API (RFC 3339, to the nanosecond) in Unix seconds, to the microsecond."""
    whole, _, rest = stamp.partition(".")
    fraction, zone = re.fullmatch(r"(\d*)(.*)", rest).groups() if rest else ("", whole[19:])
    zone = "+00:00" if zone in ("Z", "") else zone
    return datetime.fromisoformat(f"{whole[:19]}.{(fraction + '000000')[:6]}{zone}").timestamp()


def settle(port: int, since: float, scrapes: int, timeout: float = 60) -> None:
    """Until Prometheus has scraped every target ``scrapes`` times since ``since`` (each target's last scrape
    started ``scrapes - 1`` intervals after it, at the 1 s interval), then evaluated every rule group after the
    last of those scrapes; fails after ``timeout`` seconds saying what it is still waiting for."""
    deadline = time.monotonic() + timeout
    scraped = None
    while True:
        targets = api(port, "targets")["data"]["activeTargets"]
        last = {f"{t['scrapeUrl']} {t['labels']}": (t["health"], unix_time(t["lastScrape"])) for t in targets}
        if scraped is None and last and all(health == "up" and at > since + scrapes - 1
                                            for health, at in last.values()):
            scraped = max(at for _, at in last.values())
        evaluated = {g["name"]: unix_time(g["lastEvaluation"]) for g in api(port, "rules")["data"]["groups"]}
        if scraped is not None and evaluated and min(evaluated.values()) > scraped:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"since {since}: targets (health, last scrape) {last}, scraped {scraped}, rule "
                                 f"groups' last evaluations {evaluated}")
        time.sleep(0.2)


def check_clusters(port: int, now: float, must_fill: set[tuple[str, str]], failures: list[str]) -> None:
    """The cluster variable at ``lab-b``, where only the GPU host is (under the name it has in ``lab-a`` too):
    every query runs, the GPU host's panels fill, no series of ``lab-a`` shows, and the variables list
    ``lab-b``'s host and target only; at every cluster, the fleet counts the GPU host twice."""
    other, filled, queried = set(), set(), 0
    for path in DASHBOARDS:
        for query in all_queries(json.loads(path.read_text())):
            expr = substitute(query.expr, {"cluster": LAB_B}, rate_interval="30s", interval="2s", range_="5m")
            body = api(port, "query", query=expr, time=str(now))
            if body.get("status") != "success":
                failures.append(f"cluster {LAB_B}: {query.dashboard} / {query.panel_title!r}: {body.get('error')}")
                continue
            queried += 1
            result = body["data"]["result"]
            if query.kind == PANEL and result:
                filled.add((query.dashboard, query.panel_title))
            if query.kind == VARIABLE:
                values = {r["metric"].get(query.label, "") for r in result} - {""}
                expected = {CLUSTER_LABEL: {LAB_A, LAB_B}, catalog.HOSTNAME: {GPU_HOST}}.get(query.label)
                if expected is not None and values != expected:
                    failures.append(f"cluster {LAB_B}: variable {query.panel_title} lists {values}, not {expected}")
                continue
            clusters = {r["metric"].get(CLUSTER_LABEL) for r in result} - {None}
            if clusters - {LAB_B}:
                other.add(f"{query.dashboard} / {query.panel_title!r} {query.ref_id}: {clusters}")
    failures.extend(f"cluster {LAB_B}: a series of another cluster: {where}" for where in sorted(other))
    failures.extend(f"cluster {LAB_B}: {board} / {title!r}: no data from the GPU host"
                    for board, title in sorted(must_fill - filled))
    hosts = next(q for q in all_queries(json.loads((ROOT / "dashboards" / "json" / "sixdim-fleet.json").read_text()))
                 if q.panel_title == "Hosts reporting")
    for variables, count in (({}, 4), ({"cluster": LAB_B}, 1), ({"cluster": LAB_A}, 3)):
        got = api(port, "query", query=substitute(hosts.expr, variables), time=str(now))["data"]["result"]
        if [float(r["value"][1]) for r in got] != [count]:
            failures.append(f"Hosts reporting at {variables or 'every cluster'}: {got}, not {count}")
    assert queried > 200, queried  # every dashboard's queries, those that failed apart


def run_queries(port: int, started: float, now: float, hosts: str, configuration: str, must_fill: set[tuple[str, str]],
                failures: list[str]) -> tuple[dict, collections.Counter[str]]:
    """Every query of every dashboard with the hostname variable at ``hosts``; a query must return data unless
    it need not on a host running ``configuration`` (tests/dashboard_queries.py: Query.required)."""
    counts = {"panels": set(), "queries": 0, "with data": 0, "gpu-only": 0, "may be empty": 0, "per-shape": 0,
              "summary-only": 0}
    reasons: collections.Counter[str] = collections.Counter()
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        for query in all_queries(dashboard):
            expr = substitute(query.expr, {"hostname": hosts}, rate_interval="30s", interval="2s", range_="5m")
            if query.kind == PANEL:
                counts["panels"].add((query.dashboard, query.panel_id))
            if query.kind == PANEL and not query.instant or query.kind == ANNOTATION:
                body = api(port, "query_range", query=expr, start=str(started), end=str(now), step="2")
            else:  # a variable's selector, a table's or bar gauge's instant query
                body = api(port, "query", query=expr, time=str(now))
            where = (f"{configuration} host {hosts}: {query.dashboard} / {query.kind} {query.panel_title!r} "
                     f"{query.ref_id or ''}: {expr}")
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
            elif query.required(configuration):
                failures.append(f"{where}: no data")
            elif query.gpu_only:
                counts["gpu-only"] += 1
            elif query.may_be_empty:
                counts["may be empty"] += 1
                reasons[query.may_be_empty] += 1
            elif query.per_shape:
                counts["per-shape"] += 1
                reasons[f"per-shape: {query.per_shape}"] += 1
                if EXPORT_SHAPES not in query.per_shape:  # says exactly what it needs
                    failures.append(f"{where}: empty, and its description does not say it needs {EXPORT_SHAPES}")
            else:
                counts["summary-only"] += 1
    return counts, reasons


def ok_workloads(daemon: Daemon) -> set[str]:
    try:
        return {s.labels["workload"] for s in daemon.samples("sixdim_workload_runs_total")
                if s.labels["status"] == "ok" and s.value > 0}
    except OSError:
        return set()


def test_every_dashboard_query_runs_and_returns_data_against_a_real_prometheus(tmp_path, cli_env, capsys):
    assert len(DASHBOARDS) == 6, DASHBOARDS
    agent_port, readme_port = free_port(), free_port()
    gpu_host, gpu_host_port, gpu_host_scraped = serve_gpu_host()
    server, prom_port = start_prometheus(tmp_path, {LAB_A: [agent_port, gpu_host_port, readme_port],
                                                    LAB_B: [gpu_host_port]}, RULES)
    must_fill = gpu_host_panels()
    # the health row's 8, a causes table on 2 dashboards, 5 of alert inputs, the 4 of what benchmarks cost
    assert len(must_fill) == 19, must_fill
    cli_env["OMP_NUM_THREADS"] = "1"
    readme_env = {**cli_env, "SIXDIM_HISTORY": str(tmp_path / "readme.db"),
                  "SIXDIM_STATE_DIR": str(tmp_path / "readme-state")}
    readme_text, readme_workloads = readme_configuration(tmp_path / "readme.db")
    (tmp_path / "readme.toml").write_text(readme_text)
    log, readme_log = tmp_path / "serve.log", tmp_path / "readme.log"
    daemon = Daemon(write_config(tmp_path / "dash.toml", tmp_path / "h.db", SUITE), agent_port, cli_env, log)
    readme = Daemon(tmp_path / "readme.toml", readme_port, readme_env, readme_log)
    try:
        daemon.wait_ready()
        readme.wait_ready()
        started = time.time()
        deadline = time.monotonic() + 600
        while ((ok_workloads(daemon) != WORKLOADS or ok_workloads(readme) != readme_workloads)
               and time.monotonic() < deadline):
            time.sleep(0.25)
        assert ok_workloads(daemon) == WORKLOADS, log.read_text()[-3000:]
        assert ok_workloads(readme) == readme_workloads, readme_log.read_text()[-3000:]
        done = time.time()
        # a few more scrapes and rule evaluations after the suites' last results (waited for, not slept: a busy
        # machine can delay them past any fixed time)
        settle(prom_port, done, SETTLE_SCRAPES)
        # and the GPU host scraped for longer than the cost panels' rate window (the suites can end sooner): a
        # rate over a series younger than its window is extrapolated only to its first sample
        assert gpu_host_scraped, "Prometheus never scraped the GPU host"
        time.sleep(max(0.0, gpu_host_scraped[0] + COST_RATE_SECONDS + 2 - time.time()))
        now = time.time()

        failures: list[str] = []
        counts, empty_reasons = run_queries(prom_port, started, now, f"{TESTHOST}|{GPU_HOST}", DEFAULT, must_fill,
                                            failures)
        readme_counts, readme_reasons = run_queries(prom_port, started, now, README_HOST, README, set(), failures)
        check_costs(prom_port, now, Path(cli_env["SIXDIM_HISTORY"]), failures)  # the environment names it
        check_clusters(prom_port, now, must_fill, failures)
        with capsys.disabled():  # in CI's output too, not only with -s
            for name, found, reasons in (("default configuration (testhost and the GPU host)", counts,
                                          empty_reasons),
                                         ("README's example (readme)", readme_counts, readme_reasons)):
                print(f"\n{name}: dashboards: {len(DASHBOARDS)}, panels with queries: {len(found['panels'])}, "
                      f"queries run: {found['queries']}, with data: {found['with data']}, empty and marked GPU-only: "
                      f"{found['gpu-only']}, may-be-empty: {found['may be empty']}, per-shape: {found['per-shape']}, "
                      f"summary-only: {found['summary-only']}")
                for reason, n in sorted(reasons.items()):
                    print(f"  empty, as marked: {n} x {reason}")
        assert not failures, "\n".join(failures)
        # what a GPU does not answer is absent in Prometheus too, never 0
        at = {"time": str(now)}
        volta = f'{{{CLUSTER_LABEL}="{LAB_A}", {catalog.HOSTNAME}="{GPU_HOST}", {catalog.UUID}="{VOLTA.uuid}"}}'
        for metric in (catalog.GPU_REMAPPED_ROWS, catalog.GPU_REMAPPED_ROWS_PENDING, catalog.GPU_REMAPPED_ROWS_FAILED,
                       catalog.GPU_NVLINK_LINKS_ACTIVE):
            assert api(prom_port, "query", query=metric.name + volta, **at)["data"]["result"] == [], metric.name
        found = api(prom_port, "query", query=catalog.GPU_RETIRED_PAGES_PENDING.name + volta, **at)["data"]["result"]
        assert [r["value"][1] for r in found] == ["1"]
        # every workload of the README's example is on the panels that used to leave its summary-only ones out
        for uid, title, refs in (("sixdim-agent", "Time since each workload last ran", "A"),
                                 ("sixdim-gpu", "Time per operation", "AB")):
            board = json.loads((ROOT / "dashboards" / "json" / f"{uid}.json").read_text())
            shown = set()
            for query in all_queries(board):
                if query.kind == PANEL and query.panel_title == title and query.ref_id in refs:
                    expr = substitute(query.expr, {"hostname": README_HOST}, rate_interval="30s", range_="5m")
                    shown |= {r["metric"].get(catalog.WORKLOAD) for r in api(prom_port, "query", query=expr,
                                                                             **at)["data"]["result"]}
            assert shown - {None} == readme_workloads, (title, shown)
        # the README's own suite is summaries only: no per-shape series of its workloads but big-gemm's
        shaped = api(prom_port, "query", query=f'count by ({catalog.WORKLOAD}) ({catalog.WORKLOAD_FLOPS.name}'
                     f'{{{catalog.HOSTNAME}="{README_HOST}"}})', **at)["data"]["result"]
        assert [r["metric"][catalog.WORKLOAD] for r in shaped] == ["gemm"], shaped
    finally:  # all at once: each takes a moment to end
        server.terminate()
        with ThreadPoolExecutor() as pool:
            ends = [pool.submit(daemon.stop), pool.submit(readme.stop), pool.submit(gpu_host.shutdown),
                    pool.submit(server.wait, timeout=20)]
        for end in ends:
            end.result()
