"""End to end, one notification per incident: the generated rules in Debian's Prometheus, the example
Alertmanager configuration in Debian's Alertmanager, a simulated fleet of 40 hosts x 8 GPUs.

No fleet of 320 GPUs exists here, so each host's agent is simulated, as closely as this machine allows:
its ``/metrics`` is what the agent's own exporter (:class:`sixdim.http.exporter.SixdimCollector`, the
default configuration's summary-only export) renders over a board fed with runs, with the agent's real
live regression verdicts and a real (empty, healthy) history; only the NVML telemetry of real GPUs is
missing.  One small HTTP server serves the 42 agents; Prometheus scrapes each as its own target, with a
``cluster`` target label (two clusters of 20 GPU hosts that reuse the same host names, and a CPU-only
host in each).

The rules are the generator's (:func:`sixdim.monitoring.rules.render`, the defaults) with their ``for``
and ``keep_firing_for`` shortened 60-fold (tests/helpers.py ``shortened_rules``: Prometheus here
evaluates every second); promtool tests the real durations (deploy/prometheus/tests/sixdim-rules-test.yml).
Alertmanager runs deploy/alertmanager/alertmanager.yml with its receivers pointed at a local webhook
and its group_wait, group_interval and repeat_interval divided by :data:`ALERTMANAGER_SPEEDUP`
(:func:`alertmanager_test_config`); its routes, grouping and inhibitions are the example's.

The incident: a driver rollout slows every one of the 320 GPUs by 10%.  The agents judge each change a
regression (``sixdim_version_change_ratio{verdict="regression"}``); their live state after a version
change is ``insufficient_data`` (a new segment), which the summary-only export does not show, so
SixdimRegression stays silent for the GPUs.  Meanwhile, on the CPU host of one cluster, a regression
verdict flips between regression and ok at every scrape, and the agent of the other cluster's CPU host,
whose benchmarks stopped two hours ago, goes down.  The webhook must receive one notification per group,
and only these groups: the rollout once per cluster (all 160 GPUs of the cluster in it), the CPU host's
regression once (never resolved while it flips), the agent down once, and its stale benchmark not at all
(inhibited by the agent down, on the same cluster and host name).  Every alert carries ``cluster`` and
``hostname``; the texts read right on CPU hosts and with the agent down.

Debian's Alertmanager reads its notification templates from a folder compiled into it
(tests/alertmanager_tool.py): where README.md's recipe for the tools has not put them there, the test skips,
naming the missing file and the recipe's line, and fails where SIXDIM_REQUIRE_TOOLS=1; an Alertmanager or
Prometheus that exits at its start fails the test at once, with its log.
"""

from __future__ import annotations

import json
import random
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from sixdim.core import catalog
from sixdim.core.durations import whole_seconds
from sixdim.core.results import RunRecord
from sixdim.http.board import Board
from sixdim.http.exporter import ReloadStatus, SixdimCollector
from sixdim.monitoring import rules
from sixdim.monitoring.options import Options
from sixdim.store.history import History
from sixdim.verdicts.live import Verdicts
from tests.alertmanager_tool import alertmanager_binary
from tests.conftest import free_port, required_tool
from tests.helpers import shortened_rules

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
ALERTMANAGER_EXAMPLE = ROOT / "deploy" / "alertmanager" / "alertmanager.yml"

ALERTMANAGER_SPEEDUP = 5
"""The example's Alertmanager timings divided by this: group_wait 30s -> 6s (the rollout's alerts must
arrive within it, on a shared 2-core machine too: they go pending within about 3 s of each other, one
scrape and one evaluation after the rollout reached their host), group_interval 5m -> 60s (longer than
the test after the first notifications: any second notification of a group would be a late member, a
resolution or a re-fire, all of which fail it)."""
CLUSTER = Options().cluster_label
CLUSTERS = ("eu-1", "us-1")
GPU_HOSTS = 20
"""GPU hosts per cluster, named gpu-00 ... gpu-19 in each cluster."""
GPUS = 8
SHAPES = ("m=4096,n=4096,k=4096,op=NN", "m=8192,n=8192,k=8192,op=NN")
MODEL, CPU_MODEL = "NVIDIA H100 80GB HBM3", "AMD EPYC 9654 96-Core Processor"
OLD_DRIVER, NEW_DRIVER = "550.54.15", "560.35.03"
TORCH = "2.4.0"
RUN_INTERVAL = 900
"""Seconds between the simulated runs (the quick suite's 15 minutes)."""
BEFORE_RUNS, AFTER_RUNS = 12, 6
"""Runs of each series before the rollout (past min_baseline) and after it (enough for a version verdict)."""
ROLLOUT_SLOWDOWN = 0.9
FLAPPING_HOST, DOWN_HOST = ("eu-1", "cpu-a"), ("us-1", "cpu-b")
STALE_MARGIN = 14
"""At the incident, the down host's newest ok run ended 2h minus this many seconds before: its stale alert
fires this long after the incident, after its agent-down alert (5 s after its last scrape, shortened: about
8 s after the incident), so Alertmanager has the inhibiting alert by then (it must by the stale alert's
group_wait later, 20 s after the incident), and that group_wait has passed about when the flapping host has
flapped for 15 s (21 s after the incident), so the test waits little for a notification that must not come."""
STALE_BEFORE = 600
"""Before the incident, the down host's newest ok run ended 2h minus this many seconds before the test
started: not stale for longer than Prometheus and Alertmanager may take to start on a busy machine."""
NOTIFICATION_TIMEOUT = 45


# ----------------------------------------------------------------------------- the simulated agents

def run(cluster: str, host: str, gpu: int | None, shape: str, flops: float, ended: float, driver: str) -> RunRecord:
    """One ok gemm run as the agent records it: on GPU ``gpu``, or on the host's CPU (``gpu`` None: no GPU
    index, UUID, bus id, driver or CUDA runtime, as the executor records a CPU run)."""
    on_gpu = gpu is not None
    return RunRecord(
        suite="quick", workload="gemm", precision="bf16" if on_gpu else "fp32", params={}, shape=shape,
        mode="training", kernel_pass="forward", hostname=host, device_type="cuda" if on_gpu else "cpu",
        device=f"cuda:{gpu}" if on_gpu else "cpu", gpu=str(gpu) if on_gpu else "",
        uuid=f"GPU-{cluster}-{host}-{gpu}" if on_gpu else "", model_name=MODEL if on_gpu else CPU_MODEL,
        pci_bus_id=f"00000000:{0x18 + (gpu or 0):02X}:00.0" if on_gpu else "", status="ok", reason="",
        started_at=ended - 5, ended_at=ended, figures={"flops": flops, "seconds": 2 * 4096 ** 3 / flops},
        environment={"driver": driver if on_gpu else "", "cuda_runtime": "12.4" if on_gpu else "",
                     "torch": TORCH if on_gpu else TORCH + "+cpu"})


@dataclass
class Agent:
    """One simulated agent: a board with the agent's live verdicts, and the agent's exporter over it."""

    cluster: str
    host: str
    history: History
    board: Board = field(default_factory=lambda: Board(Verdicts()))

    def exposition(self) -> bytes:
        """What the agent serves on /metrics now: its exporter's text, the default configuration's
        summary-only export (no suite exported per shape) with its configuration-reload status."""
        registry = CollectorRegistry()
        registry.register(SixdimCollector(self.board, [], self.host, history=self.history, shape_suites=[],
                                          reloads=ReloadStatus()))
        return generate_latest(registry)

    def state(self, figure: str = "flops") -> set[str]:
        """The live verdict states of the figure over the agent's series."""
        return {s.verdicts[figure].state for s in self.board.verdicts.snapshot() if figure in s.verdicts}


@dataclass
class Fleet:
    """Every agent's expositions, built before Prometheus starts, so the scenario switches in an instant."""

    before: dict[tuple[str, str], bytes] = field(default_factory=dict)
    after: dict[tuple[str, str], bytes] = field(default_factory=dict)
    """The GPU hosts after the driver rollout."""
    flapping: tuple[bytes, bytes] = (b"", b"")
    """The flapping CPU host: ok, and regressed."""
    stopped: Callable[[float], bytes] = lambda newest: b""
    """The exposition of the host whose agent goes down, its newest ok run ended at the time given."""
    agents: list[Agent] = field(default_factory=list)


def build_fleet(tmp_path: Path) -> Fleet:
    rng = random.Random(25)
    now = time.time()
    fleet = Fleet()

    def agent(cluster: str, host: str) -> Agent:
        made = Agent(cluster, host, History(tmp_path / "histories" / cluster / f"{host}.db"))
        fleet.agents.append(made)
        return made

    for cluster in CLUSTERS:
        for index in range(GPU_HOSTS):
            gpus = agent(cluster, f"gpu-{index:02d}")
            for i in range(BEFORE_RUNS):
                ended = now - (BEFORE_RUNS + AFTER_RUNS - i) * RUN_INTERVAL
                for gpu in range(GPUS):
                    for shape in SHAPES:
                        gpus.board.add(run(cluster, gpus.host, gpu, shape, 7e14 * rng.gauss(1, 0.003), ended,
                                           OLD_DRIVER))
            fleet.before[(cluster, gpus.host)] = gpus.exposition()
            for i in range(AFTER_RUNS):
                ended = now - (AFTER_RUNS - 1 - i) * RUN_INTERVAL - 60
                for gpu in range(GPUS):
                    for shape in SHAPES:
                        gpus.board.add(run(cluster, gpus.host, gpu, shape,
                                           7e14 * ROLLOUT_SLOWDOWN * rng.gauss(1, 0.003), ended, NEW_DRIVER))
            # what the agent says after a version change: insufficient_data, a regression of the change
            assert gpus.state() == {"insufficient_data"}, gpus.state()
            fleet.after[(cluster, gpus.host)] = gpus.exposition()
    # the flapping CPU host (a CPU suite every 5 minutes): a baseline, then runs 6% slower until the agent
    # calls a regression
    cpu = agent(*FLAPPING_HOST)
    for i in range(20):
        cpu.board.add(run(cpu.cluster, cpu.host, None, SHAPES[0], 2e12 * rng.gauss(1, 0.003),
                          now - (30 - i) * RUN_INTERVAL / 3, ""))
    assert cpu.state() == {"ok"}, cpu.state()
    ok = cpu.exposition()
    for i in range(10):
        cpu.board.add(run(cpu.cluster, cpu.host, None, SHAPES[0], 2e12 * 0.94 * rng.gauss(1, 0.003),
                          now - (10 - i) * RUN_INTERVAL / 3, ""))
        if cpu.state() == {"regression"}:
            break
    assert cpu.state() == {"regression"}, cpu.state()
    fleet.flapping = (ok, cpu.exposition())
    fleet.before[FLAPPING_HOST] = ok
    # the CPU host whose agent goes down: its benchmarks stopped almost two hours ago, its last four runs
    # RUN_INTERVAL apart
    down = agent(*DOWN_HOST)
    flops = [2e12 * rng.gauss(1, 0.003) for _ in range(4)]

    def stopped(newest: float) -> bytes:
        down.board = Board(Verdicts())
        for i, value in enumerate(flops):
            down.board.add(run(down.cluster, down.host, None, SHAPES[0], value, newest - (3 - i) * RUN_INTERVAL, ""))
        return down.exposition()

    fleet.stopped = stopped
    fleet.before[DOWN_HOST] = stopped(now - 7200 + STALE_BEFORE)
    return fleet


class FleetServer(ThreadingHTTPServer):
    """Serves each agent's exposition at /metrics/<cluster>/<host>: 503 for an agent that is down, and
    the flapping host's two expositions in turn, one per scrape."""

    daemon_threads = True

    def __init__(self, fleet: Fleet) -> None:
        super().__init__(("127.0.0.1", 0), _FleetHandler)
        self.lock = threading.Lock()
        self.texts = dict(fleet.before)
        self.down: set[tuple[str, str]] = set()
        self.flapping: tuple[bytes, bytes] | None = None
        self.flaps = 0

    def text(self, key: tuple[str, str]) -> bytes | None:
        with self.lock:
            if key in self.down or key not in self.texts:
                return None
            if key == FLAPPING_HOST and self.flapping is not None:
                self.flaps += 1
                return self.flapping[self.flaps % 2]
            return self.texts[key]


class _FleetHandler(BaseHTTPRequestHandler):
    server: FleetServer

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        parts = self.path.strip("/").split("/")
        text = self.server.text((parts[1], parts[2])) if len(parts) == 3 and parts[0] == "metrics" else None
        if text is None:
            self.send_error(503, "agent down")
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class Webhook(ThreadingHTTPServer):
    """Alertmanager's receivers: each notification, by the receiver's path."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _WebhookHandler)
        self.lock = threading.Lock()
        self.notifications: list[tuple[str, dict[str, Any]]] = []

    def received(self) -> list[tuple[str, dict[str, Any]]]:
        with self.lock:
            return list(self.notifications)


class _WebhookHandler(BaseHTTPRequestHandler):
    server: Webhook

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.notifications.append((self.path.strip("/"), body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve(server: ThreadingHTTPServer) -> None:
    threading.Thread(target=server.serve_forever, daemon=True).start()


# ----------------------------------------------------------------------------- Prometheus and Alertmanager

def alertmanager_test_config(text: str, webhook: str, speedup: int = ALERTMANAGER_SPEEDUP) -> str:
    """The example configuration as the test runs it, changed in two ways only: each receiver's webhooks
    post to ``webhook``/<receiver name>, and every route's group_wait, group_interval and repeat_interval
    is divided by ``speedup``.  Routes, matchers, grouping, inhibitions and send_resolved stay the example's."""
    config = yaml.safe_load(text)
    for receiver in config["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = f"{webhook}/{receiver['name']}"
    routes = [config["route"]]
    while routes:
        route = routes.pop()
        for key in ("group_wait", "group_interval", "repeat_interval"):
            if key in route:
                route[key] = f"{max(1, whole_seconds(route[key]) * 1000 // speedup)}ms"
        routes.extend(route.get("routes", []))
    return yaml.safe_dump(config, sort_keys=False)


def prometheus_config(fleet_port: int, alertmanager_port: int, rules_file: Path,
                      agents: list[tuple[str, str]]) -> str:
    """Every simulated agent as its own target of job sixdim, with its cluster as a target label (so that
    ``up`` carries it too, as docs/ALERTS.md asks) and an instance named after its host, as a real fleet's.
    With no agents: Prometheus starting while the fleet is built, scraping nothing yet."""
    return yaml.safe_dump({
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules_file)],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]}]},
        "scrape_configs": [{"job_name": "sixdim", "static_configs": [
            {"targets": [f"127.0.0.1:{fleet_port}"],
             "labels": {CLUSTER: cluster, "instance": f"{host}:9480", "__metrics_path__": f"/metrics/{cluster}/{host}"}}
            for cluster, host in agents]}] if agents else [],
    }, sort_keys=False)


def api(port: int, path: str, **params: str) -> Any:
    url = f"http://127.0.0.1:{port}/{path}" + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def wait(predicate: Callable[[], Any], timeout: float, what: str, logs: list[Path],
         processes: Sequence[subprocess.Popen] = ()) -> Any:
    """The predicate's first true value within ``timeout`` seconds; an AssertionError with the logs' tails when
    there is none, or as soon as one of ``processes`` has exited (Prometheus or Alertmanager refusing its
    configuration exits at once: nothing to wait for)."""
    deadline = time.monotonic() + timeout
    exited: list[str] = []
    while time.monotonic() < deadline and not exited:
        try:
            value = predicate()
        except (OSError, urllib.error.URLError, json.JSONDecodeError):  # not up yet, or a slow answer
            value = None
        if value:
            return value
        exited = [f"{Path(str(p.args[0])).name} exited with status {p.returncode}" for p in processes
                  if p.poll() is not None]
        time.sleep(0.25)
    tails = "\n".join(f"--- {log.name}:\n{log.read_text()[-2000:]}" for log in logs if log.exists())
    raise AssertionError(f"{what}: {'; '.join(exited) or f'not within {timeout} s'}\n{tails}")


def prometheus_alerts(port: int) -> list[dict[str, Any]]:
    return api(port, "api/v1/alerts")["data"]["alerts"]


def query(port: int, promql: str) -> list[dict[str, Any]]:
    return api(port, "api/v1/query", query=promql)["data"]["result"]


def named(alerts: list[dict[str, Any]], alertname: str, key: tuple[str, str]) -> list[dict[str, Any]]:
    return [a for a in alerts if a["labels"]["alertname"] == alertname
            and (a["labels"].get(CLUSTER), a["labels"].get(catalog.HOSTNAME)) == key]


# ----------------------------------------------------------------------------- the tests

def test_the_test_copies_change_only_the_timings_and_the_receivers():
    """The two transforms the end-to-end test applies, and nothing else: the generated rules with shorter
    for and keep_firing_for; the example Alertmanager configuration with local receivers and shorter
    group timings."""
    generated = yaml.safe_load(rules.render(Options()))
    short = yaml.safe_load(shortened_rules(rules.render(Options())))
    timings = 0
    for group, short_group in zip(generated["groups"], short["groups"], strict=True):
        for rule, short_rule in zip(group["rules"], short_group["rules"], strict=True):
            for key in ("for", "keep_firing_for"):
                if key in rule:
                    assert whole_seconds(short_rule.pop(key)) * 60 == whole_seconds(rule.pop(key))
                    timings += 1
            assert short_rule == rule
    assert timings >= 8
    example = yaml.safe_load(ALERTMANAGER_EXAMPLE.read_text())
    copy = yaml.safe_load(alertmanager_test_config(ALERTMANAGER_EXAMPLE.read_text(), "http://127.0.0.1:1"))
    assert copy["route"]["group_wait"] == "6000ms" and copy["route"]["group_interval"] == "60000ms"
    for config in (example, copy):
        routes = [config["route"]]
        while routes:
            route = routes.pop()
            for key in ("group_wait", "group_interval", "repeat_interval"):
                route.pop(key, None)
            routes.extend(route.get("routes", []))
        for receiver in config["receivers"]:
            for hook in receiver["webhook_configs"]:
                hook.pop("url")
    assert copy == example


def test_a_driver_rollout_on_320_gpus_is_one_notification_per_group(tmp_path):
    prometheus = required_tool("prometheus")
    alertmanager = alertmanager_binary()
    webhook = Webhook()
    serve(webhook)
    alertmanager_port, prometheus_port = free_port(), free_port()
    am_config, prom_config, rules_file = (tmp_path / "alertmanager.yml", tmp_path / "prometheus.yml",
                                          tmp_path / "rules.yml")
    am_config.write_text(alertmanager_test_config(ALERTMANAGER_EXAMPLE.read_text(),
                                                  f"http://127.0.0.1:{webhook.server_port}"))
    rules_file.write_text(shortened_rules(rules.render(Options())))
    # Prometheus starts with no target, the fleet is built meanwhile, and the configuration with every agent
    # is loaded once the fleet serves (SIGHUP, after Prometheus is ready): Prometheus hands its first targets
    # to the scrapers only at its discovery's 5 s tick, so the build costs no time, and no agent is scraped
    # before it serves (an early failed scrape would leave an agent-down alert pending on the quiet fleet).
    prom_config.write_text(prometheus_config(0, alertmanager_port, rules_file, []))
    logs = [tmp_path / "alertmanager.log", tmp_path / "prometheus.log"]
    processes = [
        subprocess.Popen([alertmanager, f"--config.file={am_config}", f"--storage.path={tmp_path / 'am'}",
                          f"--web.listen-address=127.0.0.1:{alertmanager_port}", "--cluster.listen-address="],
                         stdout=subprocess.DEVNULL, stderr=open(logs[0], "wb")),
        subprocess.Popen([prometheus, f"--config.file={prom_config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                          f"--web.listen-address=127.0.0.1:{prometheus_port}"],
                         stdout=subprocess.DEVNULL, stderr=open(logs[1], "wb")),
    ]
    fleet_server: FleetServer | None = None
    fleet: Fleet | None = None
    try:
        fleet = build_fleet(tmp_path)
        fleet_server = FleetServer(fleet)
        serve(fleet_server)
        for ready_port, name in ((alertmanager_port, "Alertmanager"), (prometheus_port, "Prometheus")):
            wait(lambda port=ready_port: urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready",
                                                                 timeout=5).status == 200,
                 30, f"{name} ready", logs, processes)
        prom_config.write_text(prometheus_config(fleet_server.server_port, alertmanager_port, rules_file,
                                                 sorted(fleet.before)))
        processes[1].send_signal(signal.SIGHUP)
        # every agent scraped and the rules evaluated: each target's host name recorded, with its cluster
        recorded = wait(lambda: (r := query(prometheus_port, "sixdim_target:sixdim_build_info:hostname"))
                        and len(r) == len(fleet.before) and r, 60, "every target's host name recorded", logs,
                        processes)
        assert {(r["metric"][CLUSTER], r["metric"][catalog.HOSTNAME]) for r in recorded} == set(fleet.before)
        assert prometheus_alerts(prometheus_port) == [], "a quiet fleet raised alerts"

        # the incident: the flapping host regresses, the other CPU host's agent goes down, and the driver
        # rollout reaches every GPU host within a second.  The down host's exposition is built again first,
        # its newest ok run now STALE_MARGIN seconds short of the stale threshold, so that its stale alert
        # comes a fixed time after the incident, however long the start took; once Prometheus has
        # scraped that (within the rollout's second, or soon after), its agent goes down.
        newest = time.time() - 7200 + STALE_MARGIN
        stopped = fleet.stopped(newest)
        with fleet_server.lock:
            fleet_server.texts[FLAPPING_HOST] = fleet.flapping[1]
            fleet_server.texts[DOWN_HOST] = stopped
        for key, text in fleet.after.items():
            with fleet_server.lock:
                fleet_server.texts[key] = text
            time.sleep(1 / len(fleet.after))
        down_host = f'{CLUSTER}="{DOWN_HOST[0]}",{catalog.HOSTNAME}="{DOWN_HOST[1]}"'
        wait(lambda: [r for r in query(prometheus_port, f"{catalog.WORKLOAD_LAST_SUCCESS.name}{{{down_host}}}")
                      if abs(float(r["value"][1]) - newest) < 1], 20, "the down host's newest run in Prometheus", logs)
        with fleet_server.lock:
            fleet_server.down.add(DOWN_HOST)
        # once the regression fires, its verdict flips between regression and ok with every scrape
        wait(lambda: [a for a in named(prometheus_alerts(prometheus_port), "SixdimRegression", FLAPPING_HOST)
                      if a["state"] == "firing"], 30, "the CPU host's regression firing", logs)
        with fleet_server.lock:
            fleet_server.flapping = fleet.flapping
        flapping_since = time.monotonic()
        states: list[tuple[str, str]] = []
        seen_firing: dict[tuple, float] = {}
        """When each firing alert was first seen (Prometheus sends it to Alertmanager at that evaluation)."""

        def settled() -> bool:
            alerts = prometheus_alerts(prometheus_port)
            for a in alerts:
                if a["state"] == "firing":
                    seen_firing.setdefault(tuple(sorted(a["labels"].items())), time.monotonic())
            states.extend((a["state"], a["activeAt"]) for a in named(alerts, "SixdimRegression", FLAPPING_HOST))
            stale = named(alerts, "SixdimBenchmarkStale", DOWN_HOST)
            return (len(webhook.received()) >= 4 and bool(stale) and stale[0]["state"] == "firing"
                    and time.monotonic() - flapping_since > 15)

        wait(settled, STALE_MARGIN + NOTIFICATION_TIMEOUT, "four notifications, the stale alert, 15 s of flapping",
             logs)
        # a group's notification would come group_wait after its first alert: wait that long after the newest
        # alert (the stale one, held back) for any more
        time.sleep(max(0.0, max(seen_firing.values()) + 30 / ALERTMANAGER_SPEEDUP + 2 - time.monotonic()))
        alerts = prometheus_alerts(prometheus_port)
        notifications = webhook.received()
        flapped = query(prometheus_port, f'count_over_time(sixdim_regression_state{{{CLUSTER}="{FLAPPING_HOST[0]}",'
                                         f'hostname="{FLAPPING_HOST[1]}"}}[10s])')
        groups = api(alertmanager_port, "api/v2/alerts/groups")
    finally:
        for process in processes:
            process.kill()  # everything is read: no need for their orderly shutdown (a second or two)
        for process in processes:
            process.wait(timeout=20)
        if fleet_server is not None:
            fleet_server.shutdown()
        webhook.shutdown()
        for agent in fleet.agents if fleet is not None else []:
            agent.history.close()

    # --- Prometheus: the alerts of the incident, and nothing else
    gpus = len(CLUSTERS) * GPU_HOSTS * GPUS
    by_name: dict[str, int] = {}
    for alert in alerts:
        assert alert["state"] == "firing", alert
        by_name[alert["labels"]["alertname"]] = by_name.get(alert["labels"]["alertname"], 0) + 1
    assert by_name == {"SixdimVersionChangeRegression": gpus, "SixdimRegression": 1, "SixdimAgentDown": 1,
                       "SixdimBenchmarkStale": 1}, by_name
    # the flapping verdict: absent from about half the scrapes, its alert firing all along, never re-fired
    assert fleet_server.flaps >= 15 and flapped and 2 <= float(flapped[0]["value"][1]) <= 8, flapped
    assert len(states) >= 10 and {state for state, _ in states} == {"firing"}, states
    assert len({active for _, active in states}) == 1, states
    # the stale benchmark of the host whose agent is down: no "Now running" (there is nothing running)
    [stale] = named(alerts, "SixdimBenchmarkStale", DOWN_HOST)
    assert stale["annotations"]["description"].startswith(
        f"The newest ok run of gemm on the CPU ({CPU_MODEL}) of cpu-b (cluster us-1) ended 2h ")
    assert stale["annotations"]["description"].endswith("(threshold 2h): its results and verdicts are not current.")
    assert stale["annotations"]["summary"] == "No successful gemm run on cpu-b (cluster us-1)"

    # --- the webhook: one notification per group, four groups for 323 alerts
    assert len(notifications) == 4, [(path, n["groupLabels"], len(n["alerts"])) for path, n in notifications]
    assert len({n["groupKey"] for _, n in notifications}) == 4
    for path, notification in notifications:
        assert path == "sixdim-chat" and notification["status"] == "firing", notification["groupLabels"]
        for alert in notification["alerts"]:
            labels, annotations = alert["labels"], alert["annotations"]
            assert labels.get(CLUSTER) in CLUSTERS and labels.get(catalog.HOSTNAME), labels
            assert alert["status"] == "firing", labels
            for text in annotations.values():
                assert "GPU  " not in text and "GPU )" not in text and "driver ," not in text and "CUDA ," not in text
            if labels.get(catalog.DEVICE_TYPE) == "cpu" or labels["alertname"] == "SixdimAgentDown":
                assert "GPU" not in annotations["summary"] + annotations["description"], annotations
    rollout = [n for _, n in notifications if n["groupLabels"].get("alertname") == "SixdimVersionChangeRegression"]
    assert sorted(n["groupLabels"][CLUSTER] for n in rollout) == sorted(CLUSTERS)
    for notification in rollout:
        cluster = notification["groupLabels"][CLUSTER]
        assert notification["groupLabels"] == {CLUSTER: cluster, "alertname": "SixdimVersionChangeRegression",
                                               "component": "driver", "from": OLD_DRIVER, "to": NEW_DRIVER}
        # every GPU of the cluster in the one notification: none left for a later one
        assert len({a["labels"][catalog.UUID] for a in notification["alerts"]}) == GPU_HOSTS * GPUS
        for alert in notification["alerts"]:
            host = alert["labels"][catalog.HOSTNAME]
            assert alert["annotations"]["summary"] == (f"driver {OLD_DRIVER} to {NEW_DRIVER} made gemm worse on "
                                                       f"{host} (cluster {cluster})")
            worse = re.search(rf" of {host} \(cluster {cluster}\), gemm's flops is ([0-9.]+)% of its value before",
                              alert["annotations"]["description"])
            assert worse and 85 < float(worse.group(1)) < 95, alert["annotations"]["description"]
            assert "(median over the 2 result series the agent judged worse)" in alert["annotations"]["description"]
    [regression] = [n for _, n in notifications if n["groupLabels"].get(catalog.HOSTNAME) == FLAPPING_HOST[1]]
    assert regression["groupLabels"] == {CLUSTER: "eu-1", catalog.HOSTNAME: "cpu-a", catalog.WORKLOAD: "gemm"}
    [alert] = regression["alerts"]
    assert alert["annotations"]["summary"] == "gemm regressed on cpu-a (cluster eu-1)"
    assert alert["annotations"]["description"] == (
        f"gemm fp32 on the CPU ({CPU_MODEL}) of cpu-a (cluster eu-1) regressed on 1 shape(s), counting each mode and "
        f"pass (figures: flops), under torch {TORCH}+cpu. The agent calls a regression only after it persisted over "
        "several runs against the series' own baseline.")
    [down] = [n for _, n in notifications if n["groupLabels"].get(catalog.HOSTNAME) == DOWN_HOST[1]]
    assert down["groupLabels"] == {CLUSTER: "us-1", catalog.HOSTNAME: "cpu-b", catalog.WORKLOAD: ""} or \
        down["groupLabels"] == {CLUSTER: "us-1", catalog.HOSTNAME: "cpu-b"}, down["groupLabels"]
    [alert] = down["alerts"]
    assert alert["labels"]["alertname"] == "SixdimAgentDown"
    assert "(job sixdim, host cpu-b, cluster us-1)" in alert["annotations"]["description"]

    # --- Alertmanager: a handful of groups; the stale alert held back by the agent-down alert
    assert len(groups) <= 6, [g["labels"] for g in groups]
    [held] = [a for g in groups for a in g["alerts"] if a["labels"]["alertname"] == "SixdimBenchmarkStale"]
    assert held["status"]["state"] == "suppressed" and held["status"]["inhibitedBy"], held["status"]
