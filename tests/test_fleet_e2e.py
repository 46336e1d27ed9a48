"""``sixdim fleet`` against Debian's real Prometheus scraping a synthetic fleet in the middle of a rollout.

The fleet (tests/fleet_sim.py): 240 hosts x 8 GPUs, two GPU models, seven summary cases each; a random half of
each model's hosts moves from driver 550.54.15 to 560.35.03, which is 3% slower on the H100s' bf16 GEMM and the
same everywhere else; every GPU's value has 1% run noise, hosts spread by 0.5%, and one host in ten has a GPU 25%
slower on everything.  One HTTP server serves every host's ``/metrics``; Prometheus scrapes each host as its own
target every 2 seconds, first before the rollout (phase 0), then half done (phase 1), so the upgraded hosts' old
series end in Prometheus as they would in a real fleet, and the paired comparison finds them.

Prometheus loads the generated rules (their ``for`` shortened :data:`RULES_SPEEDUP`-fold, tests/helpers.py) and
sends its alerts to Alertmanager running deploy/alertmanager/alertmanager.yml (receivers pointed at a local
webhook, timings divided by :data:`ALERTMANAGER_SPEEDUP`): the rollout recording rules, the versions dashboard's
Rollout panels (their queries read from the committed JSON) and SixdimRolloutSlower must say what
``sixdim fleet`` says.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import bcrypt
import pytest
import yaml

from sixdim.cli import main
from sixdim.core import catalog
from sixdim.monitoring import recording, rules
from sixdim.monitoring.options import Options
from tests import certs
from tests.alertmanager_tool import alertmanager_binary
from tests.conftest import free_port, required_tool
from tests.dashboard_queries import all_queries, substitute
from tests.fleet_sim import A100, H100, NEW_DRIVER, OLD_DRIVER, SLOWED, Fleet
from tests.helpers import shortened_rules
from tests.test_alertmanager_e2e import ALERTMANAGER_EXAMPLE, Webhook, alertmanager_test_config

pytestmark = pytest.mark.slow

FLEET = Fleet()
RULES_SPEEDUP = 120
"""SixdimRolloutSlower's 30m ``for`` becomes 15 s: twice the time the recording rules' group takes to evaluate
over this fleet on a 2-vCPU machine (about 7 s, ``prometheus_rule_group_last_duration_seconds``), so the alert
still holds over more than one evaluation of the ratio it reads, and fires while the module's other tests run."""
ALERTMANAGER_SPEEDUP = 30
"""The example's group_wait 30s becomes 1 s: the one alert of its group needs no time for others to join."""


class FleetServer(ThreadingHTTPServer):
    """Every host's exposition at /metrics/<host>, of the phase the test has reached."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.phase = 0
        self.bodies: dict[tuple[str, int], bytes] = {}

    def load(self) -> None:
        """Every host's two expositions (about a second), built while Prometheus starts: it scrapes nothing
        before its discovery's first 5 s tick, and a scrape before :meth:`serve_forever` waits in the backlog."""
        self.bodies = {(host.name, phase): FLEET.exposition(host, phase).encode()
                       for host in FLEET.hosts for phase in (0, 1)}

    def handle_error(self, request, client_address) -> None:
        pass  # a scrape Prometheus gave up on (its 1 s timeout on a busy machine) is not the test's failure


class _Handler(BaseHTTPRequestHandler):
    server: FleetServer
    protocol_version = "HTTP/1.1"  # Prometheus keeps each target's connection: no thread per scrape

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = self.server.bodies[(self.path.rsplit("/", 1)[-1], self.server.phase)]
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def query(port: int, promql: str, at: float | None = None) -> list[dict]:
    params = {"query": promql, **({"time": f"{at:.3f}"} if at is not None else {})}
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.load(response)["data"]["result"]


def wait(predicate, timeout: float, what: str, log: Path):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except OSError:
            value = None
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout} s\n{log.read_text()[-2000:] if log.exists() else ''}")


@dataclass(frozen=True)
class Rollout:
    port: int
    webhook: Webhook
    moment: float
    """A time when every host's last scrape had worked (``sixdim fleet --time``)."""
    switched: float
    """When the rollout reached the upgraded hosts (the end of phase 0)."""

    def before(self) -> str:
        """``--before``: whole seconds reaching back from the moment to a second before the rollout."""
        return f"{math.ceil(self.moment - self.switched) + 1}s"

    def args(self, port: int | None = None) -> list[str]:
        return ["--prometheus", f"http://127.0.0.1:{port or self.port}", "--time", f"{self.moment:.3f}",
                "--before", self.before()]


@pytest.fixture(scope="module")
def rollout(tmp_path_factory):
    """Prometheus (the generated rules loaded, their ``for`` shortened) scraping the fleet through phase 0 into
    phase 1; yields its port once every upgraded host's old series has ended and its new ones are in."""
    prometheus = required_tool("prometheus")
    alertmanager = alertmanager_binary()
    folder = tmp_path_factory.mktemp("fleet")
    server, webhook = FleetServer(), Webhook()
    threading.Thread(target=webhook.serve_forever, daemon=True).start()
    port, alertmanager_port = free_port(), free_port()
    (folder / "alertmanager.yml").write_text(alertmanager_test_config(ALERTMANAGER_EXAMPLE.read_text(),
                                                                      f"http://127.0.0.1:{webhook.server_port}",
                                                                      ALERTMANAGER_SPEEDUP))
    (folder / "rules.yml").write_text(shortened_rules(rules.render(Options()), RULES_SPEEDUP))
    (folder / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "2s", "scrape_timeout": "2s", "evaluation_interval": "1s"},
        "rule_files": [str(folder / "rules.yml")],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]}]},
        "scrape_configs": [{"job_name": "sixdim", "static_configs": [
            {"targets": [f"127.0.0.1:{server.server_port}"],
             "labels": {"cluster": FLEET.cluster, "instance": f"{h.name}:9480",
                        "__metrics_path__": f"/metrics/{h.name}"}}
            for h in FLEET.hosts]}]}))
    log = folder / "prometheus.log"
    processes = [
        subprocess.Popen([alertmanager, f"--config.file={folder / 'alertmanager.yml'}",
                          f"--storage.path={folder / 'am'}", f"--web.listen-address=127.0.0.1:{alertmanager_port}",
                          "--cluster.listen-address="], stdout=subprocess.DEVNULL,
                         stderr=open(folder / "alertmanager.log", "wb")),
        subprocess.Popen([prometheus, f"--config.file={folder / 'prometheus.yml'}",
                          f"--storage.tsdb.path={folder / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                         stdout=subprocess.DEVNULL, stderr=open(log, "wb"))]
    try:
        server.load()
        threading.Thread(target=server.serve_forever, daemon=True).start()
        everyone = len(FLEET.hosts)
        # The paired comparison reads the fleet before the rollout at most 2 s before it (``--before``): roll out
        # once every host's last scrape 2 s ago had worked, so that each host's old series are there to read.
        wait(lambda: (r := query(port, "count(up == 1)", time.time() - 2)) and int(float(r[0]["value"][1])) == everyone,
             90, "every host scraped 2 s ago", log)
        server.phase, switched = 1, time.time()
        # An agent whose scrape failed has no series until its next scrape (Prometheus marks them stale), as in a
        # real fleet; the tests judge the fleet at a moment when every host's last scrape had worked, after the
        # rollout: each upgraded host's series under the new driver only, every other host's under the old.
        speeds = '{__name__=~"sixdim_suite_(flops|samples_per_second|bytes_per_second)"}'
        per_host = FLEET.gpus * len(FLEET.cases)
        expected = {OLD_DRIVER: sum(not h.upgraded for h in FLEET.hosts) * per_host,
                    NEW_DRIVER: sum(h.upgraded for h in FLEET.hosts) * per_host}

        def complete() -> float | None:
            at = time.time() - 0.5
            counts = {r["metric"].get(catalog.DRIVER_VERSION): int(float(r["value"][1]))
                      for r in query(port, f"count by ({catalog.DRIVER_VERSION}) ({speeds})", at)}
            return at if counts == expected else None
        moment = wait(complete, 90, "a moment after the rollout with every host scraped", log)
        yield Rollout(port, webhook, moment, switched)
    finally:
        for process in processes:
            process.kill()  # the tests have read everything: no need for their orderly shutdown
            process.wait(timeout=30)
        server.shutdown()
        webhook.shutdown()


def fleet_json(capsys, rollout: Rollout, *args: str, port: int | None = None) -> dict:
    code = main(["fleet", *rollout.args(port), "--json", *args])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)


def group_key(entry: dict) -> tuple[str, str, str]:
    labels = entry["labels"]
    return labels[catalog.MODEL_NAME], labels[catalog.WORKLOAD], labels[catalog.PRECISION]


def test_the_one_slowed_group_is_slower_by_its_true_ratio_and_every_other_is_not(rollout, capsys):
    answer = fleet_json(capsys, rollout)
    groups = {group_key(e): e for e in answer["groups"]}
    assert len(groups) == answer["groups_compared"] == 2 * len(FLEET.cases)
    assert answer["requests"] <= 12 and answer["slower_beyond_threshold"] == 1
    slowed = groups.pop(SLOWED)
    assert slowed["verdict"] == "slower" and slowed["beyond_threshold"]
    assert set(slowed["old"]["versions"]) == set(catalog.VERSION_LABELS)  # split by all: every version label
    assert slowed["old"]["versions"][catalog.DRIVER_VERSION] == OLD_DRIVER
    assert slowed["new"]["versions"][catalog.DRIVER_VERSION] == NEW_DRIVER
    assert slowed["old"]["hosts"] == slowed["new"]["hosts"] == 60 and slowed["new"]["gpus"] == 480
    cross, paired = slowed["cross_section"], slowed["paired"]
    assert cross["verdict"] == paired["verdict"] == "slower"
    assert cross["ratio"] == pytest.approx(0.97, abs=0.01) and paired["ratio"] == pytest.approx(0.97, abs=0.01)
    assert cross["ratio_low"] <= 0.97 <= cross["ratio_high"] or abs(cross["ratio"] - 0.97) < 0.005
    assert 54 <= paired["hosts"] <= 60 and paired["gpus"] == 8 * paired["hosts"]  # a failed scrape loses a pair
    for key, entry in groups.items():
        assert entry["verdict"] in ("no change", "too few"), (key, entry)
        assert entry["cross_section"]["ratio"] == pytest.approx(1.0, abs=0.01), key
        assert entry["paired"]["verdict"] in ("no change", "too few"), key
        assert not entry["beyond_threshold"]


def test_the_exit_code_gates_an_upgrade_pipeline(rollout):
    base = [sys.executable, "-m", "sixdim", "fleet", *rollout.args()]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIXDIM_")}
    failing = subprocess.run([*base, "--exit-code"], capture_output=True, text=True, env=env, timeout=120)
    assert failing.returncode == 1, failing.stderr
    first = failing.stdout.splitlines()[2]  # the heading, the table's header, then the failing group first
    assert "H100" in first and "gemm bf16" in first and "slower -3." in first and "beyond threshold" in first
    assert "1 group(s) slower by at least 2.0%" in failing.stdout
    lenient = subprocess.run([*base, "--exit-code", "--threshold", "5%"], capture_output=True, text=True, env=env,
                             timeout=120)
    assert lenient.returncode == 0 and "no group slower by 5.0% or more" in lenient.stdout
    informed = subprocess.run(base, capture_output=True, text=True, env=env, timeout=120)
    assert informed.returncode == 0


def test_splits_selectors_and_named_sides(rollout, capsys):
    by_torch = fleet_json(capsys, rollout, "--split", "torch")
    assert by_torch["groups_compared"] == 0 and by_torch["groups_with_one_version"] == 2 * len(FLEET.cases)
    by_driver = fleet_json(capsys, rollout, "--split", "driver", "--selector", 'workload="gemm",precision="bf16"')
    assert [group_key(e) for e in by_driver["groups"]] == [SLOWED, ("NVIDIA A100-SXM4-80GB", "gemm", "bf16")]
    assert by_driver["groups"][0]["old"]["versions"] == {catalog.DRIVER_VERSION: OLD_DRIVER}
    reversed_sides = fleet_json(capsys, rollout, "--split", "driver", "--old", NEW_DRIVER, "--new", OLD_DRIVER,
                                "--selector", 'workload="gemm",precision="bf16"')
    h100 = reversed_sides["groups"][0]
    assert h100["verdict"] == "faster" and h100["cross_section"]["ratio"] == pytest.approx(1 / 0.97, abs=0.012)


# ----------------------------------------------------------------------------- the rules, the dashboard, the alert

ROLLOUT_PANELS = ("Rollout: each version against the fastest, now", "Rollout: hosts on each version",
                  "Rollout: each version's median, side by side")


def by_group_and_driver(answer: list[dict]) -> dict[tuple[str, str, str, str], float]:
    return {(r["metric"][catalog.MODEL_NAME], r["metric"][catalog.WORKLOAD], r["metric"][catalog.PRECISION],
             r["metric"][catalog.DRIVER_VERSION]): float(r["value"][1]) for r in answer}


def test_the_rollout_rules_and_the_dashboard_say_what_sixdim_fleet_says(rollout, capsys):
    """The recorded ratio of each version to the fastest is the fleet's ratio within a point for the slowed
    group, 1 for its old driver, and above the threshold everywhere else; 60 hosts on each side; the versions
    dashboard's Rollout panels (their queries as the committed JSON holds them, every variable at All) show
    those same series, read at a time when the rules' evaluation saw every host."""
    answer = fleet_json(capsys, rollout)
    fleet_ratio = {group_key(e): e["cross_section"]["ratio"] for e in answer["groups"]}

    def settled() -> float | None:
        """A time when the rules' last evaluation saw every host (they run on live data, each scrape's failure
        dropping its host for a moment, and lag behind on a busy machine)."""
        at = time.time() - 1
        hosts: dict = {}
        for metric in recording.ROLLOUT_METRICS:
            hosts |= by_group_and_driver(query(rollout.port, recording.rollout_hosts(metric).name, at))
        return at if len(hosts) == 2 * 2 * len(FLEET.cases) and set(hosts.values()) == {60.0} else None
    at = wait(settled, 90, "the rollout rules over every host", Path("/nonexistent"))
    ratios: dict = {}
    for metric in recording.ROLLOUT_METRICS:
        ratios |= by_group_and_driver(query(rollout.port, recording.rollout_ratio(metric).name, at))
    assert len(ratios) == 2 * 2 * len(FLEET.cases)  # every group, both drivers: each has 60 hosts
    slowed_new = ratios.pop((*SLOWED, NEW_DRIVER))
    assert slowed_new == pytest.approx(0.97, abs=0.01) and slowed_new == pytest.approx(fleet_ratio[SLOWED], abs=0.01)
    assert ratios.pop((*SLOWED, OLD_DRIVER)) == 1.0
    assert all(ratio > 0.98 for ratio in ratios.values()), ratios
    board = json.loads((Path(__file__).resolve().parent.parent / "dashboards" / "json"
                        / "sixdim-versions.json").read_text())
    panels = {q.panel_title: q for q in all_queries(board) if q.panel_title in ROLLOUT_PANELS}
    assert set(panels) == set(ROLLOUT_PANELS)
    table = [q for q in all_queries(board) if q.panel_title == ROLLOUT_PANELS[0]]
    shown = by_group_and_driver(query(rollout.port, substitute(table[0].expr), at))
    assert shown[(*SLOWED, NEW_DRIVER)] == slowed_new and min(shown.values()) == slowed_new
    assert set(by_group_and_driver(query(rollout.port, substitute(table[1].expr), at)).values()) == {60.0}
    medians = by_group_and_driver(query(rollout.port, substitute(panels[ROLLOUT_PANELS[2]].expr), at))
    assert medians[(*SLOWED, NEW_DRIVER)] / medians[(*SLOWED, OLD_DRIVER)] == pytest.approx(slowed_new, rel=1e-9)
    a100 = (A100, "gemm", "bf16")
    assert medians[(*a100, NEW_DRIVER)] / medians[(*a100, OLD_DRIVER)] == pytest.approx(1.0, abs=0.01)
    assert H100 in {key[0] for key in medians}


# ----------------------------------------------------------------------------- reaching a guarded Prometheus

class BearerGate(ThreadingHTTPServer):
    """What sits in front of many shared Prometheus-compatible APIs (Thanos, Mimir): a gateway that wants a
    bearer token and passes the request on to the real Prometheus."""

    daemon_threads = True

    def __init__(self, upstream: int, token: str) -> None:
        super().__init__(("127.0.0.1", 0), _GateHandler)
        self.upstream, self.token = upstream, token


class _GateHandler(BaseHTTPRequestHandler):
    server: BearerGate

    def do_POST(self) -> None:  # noqa: N802
        if self.headers.get("Authorization") != f"Bearer {self.server.token}":
            self.send_response(401)
            self.end_headers()
            return
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = urllib.request.Request(f"http://127.0.0.1:{self.server.upstream}{self.path}", data=body,
                                         headers={"Content-Type": self.headers["Content-Type"]})
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = response.read()
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


def test_basic_auth_tls_and_bearer_tokens_as_promtool_takes_them(rollout, tmp_path, capsys):
    """A second Prometheus with basic auth over TLS (its own web configuration), reading the first one's data
    through federation would be slow: it holds nothing, and the answer is "no group"; what is tested is the way
    in.  Then a bearer-token gateway in front of the first one, through an HTTP client configuration file."""
    prometheus = required_tool("prometheus")
    certs.make_ca(tmp_path)
    certs.issue(tmp_path, "server", "prometheus.test",
                "subjectAltName=DNS:prometheus.test\nextendedKeyUsage=serverAuth\n")
    password = "fleet-pass"
    (tmp_path / "web.yml").write_text(yaml.safe_dump({
        "tls_server_config": {"cert_file": str(tmp_path / "server.crt"), "key_file": str(tmp_path / "server.key")},
        "basic_auth_users": {"ops": bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()}}))
    (tmp_path / "prometheus.yml").write_text("global:\n  scrape_interval: 1h\n")
    (tmp_path / "password").write_text(password + "\n")
    (tmp_path / "wrong").write_text("nope\n")
    port = free_port()
    log = tmp_path / "prometheus.log"
    process = subprocess.Popen([prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
                                f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
                                f"--web.config.file={tmp_path / 'web.yml'}"],
                               stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    url = f"https://127.0.0.1:{port}"
    tls = ["--ca-file", str(tmp_path / "ca.crt"), "--server-name", "prometheus.test"]
    try:
        def ready() -> bool:
            code = main(["fleet", "--prometheus", url, *tls, "--username", "ops", "--password-file",
                         str(tmp_path / "password"), "--json"])
            capsys.readouterr()
            return code == 0
        wait(ready, 60, "Prometheus over TLS", log)
        assert main(["fleet", "--prometheus", url, *tls, "--username", "ops", "--password-file",
                     str(tmp_path / "wrong")]) == 2
        assert "HTTP 401" in capsys.readouterr().err
        assert main(["fleet", "--prometheus", url, "--username", "ops", "--password-file",
                     str(tmp_path / "password")]) == 2  # the server's CA not given: its certificate is refused
        err = capsys.readouterr().err
        assert "cannot reach" in err and "certificate" in err.lower()
        assert main(["fleet", "--prometheus", url, "--ca-file", str(tmp_path / "ca.crt"), "--username", "ops",
                     "--password-file", str(tmp_path / "password")]) == 2  # the name is prometheus.test, not 127.0.0.1
        err = capsys.readouterr().err
        assert "cannot reach" in err and "certificate" in err.lower()
        (tmp_path / "http.yml").write_text(yaml.safe_dump({
            "basic_auth": {"username": "ops", "password_file": "password"},
            "tls_config": {"ca_file": "ca.crt", "server_name": "prometheus.test"}}))
        assert main(["fleet", "--prometheus", url, "--http-config-file", str(tmp_path / "http.yml"), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["groups_compared"] == 0
    finally:
        process.terminate()
        process.wait(timeout=30)

    gate = BearerGate(rollout.port, "s3cret-token")
    threading.Thread(target=gate.serve_forever, daemon=True).start()
    try:
        (tmp_path / "token").write_text("s3cret-token\n")
        (tmp_path / "bearer.yml").write_text(yaml.safe_dump({"authorization": {"credentials_file": "token"}}))
        gated = f"http://127.0.0.1:{gate.server_port}"
        assert main(["fleet", "--prometheus", gated]) == 2
        assert "HTTP 401" in capsys.readouterr().err
        answer = fleet_json(capsys, rollout, "--http-config-file", str(tmp_path / "bearer.yml"), port=gate.server_port)
        assert answer["slower_beyond_threshold"] == 1
        same = fleet_json(capsys, rollout, "--bearer-token-file", str(tmp_path / "token"), port=gate.server_port)
        assert same["slower_beyond_threshold"] == 1
    finally:
        gate.shutdown()




def test_the_rollout_alert_fires_for_the_slowed_group_only_and_reaches_alertmanager(rollout):
    """SixdimRolloutSlower (its 30m ``for`` shortened to 15 s) fires for exactly the H100s' bf16 GEMM under the
    new driver, naming its 60 hosts and the old driver as the fastest, and Alertmanager, with the example's
    routes, delivers it once to the chat receiver."""
    def firing() -> list[dict]:
        with urllib.request.urlopen(f"http://127.0.0.1:{rollout.port}/api/v1/alerts", timeout=30) as response:
            alerts = json.load(response)["data"]["alerts"]
        return [a for a in alerts if a["labels"]["alertname"] == "SixdimRolloutSlower" and a["state"] == "firing"]
    log = Path("/nonexistent")
    [alert] = wait(firing, 120, "SixdimRolloutSlower firing", log)
    labels = alert["labels"]
    assert (labels[catalog.MODEL_NAME], labels[catalog.WORKLOAD], labels[catalog.PRECISION],
            labels[catalog.DRIVER_VERSION], labels["cluster"]) == (H100, "gemm", "bf16", NEW_DRIVER, FLEET.cluster)
    description = alert["annotations"]["description"]
    assert "(60 hosts)" in description and f"slower than under driver {OLD_DRIVER}" in description
    assert float(alert["value"]) == pytest.approx(0.97, abs=0.01)

    def delivered() -> list:
        return [(receiver, a) for receiver, body in rollout.webhook.received() for a in body["alerts"]
                if a["labels"]["alertname"] == "SixdimRolloutSlower"]
    [(receiver, sent)] = wait(delivered, 60, "the notification", log)
    assert receiver == "sixdim-chat" and sent["labels"] == {**labels} and sent["status"] == "firing"
