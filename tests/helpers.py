"""Shared test helpers: run records, another process holding a database's lock, a Prometheus to query,
and the one way to run the command line (in a child, or in this process)."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import subprocess
import sys
import traceback
import urllib.parse
import urllib.request

from sixdim.core.results import RunRecord


def make_record(status: str = "ok", *, workload: str = "gemm", seconds: float = 0.01, ended_at: float = 2000.0,
                uuid: str = "GPU-a", gpu: str = "0", driver: str = "550.54.15", shape: str = "m=8,n=8,k=8",
                **figures: float) -> RunRecord:
    return RunRecord(
        suite="quick", workload=workload, precision="bf16", params={"m": 8}, shape=shape, mode="training",
        kernel_pass="forward",
        hostname="node1", device_type="cuda", device=f"cuda:{gpu}", gpu=gpu, uuid=uuid,
        model_name="NVIDIA H100 80GB HBM3", pci_bus_id="00000000:17:00.0", status=status,
        reason="" if status == "ok" else "something", started_at=ended_at - 5, ended_at=ended_at,
        figures={"seconds": seconds, "flops": 1024 / seconds, **figures} if status == "ok" else {},
        environment={"driver": driver, "cuda_runtime": "12.4", "torch": "2.13.0"})


LOCKER = """
import select, sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
select.select([sys.stdin], [], [], float(sys.argv[2]))  # until told to let go, or the time is up
db.execute("ROLLBACK")
"""


class Locker:
    """Another process holding an exclusive write lock on a history database (in WAL mode readers
    still read), for ``seconds`` or until :meth:`release`."""

    def __init__(self, path, seconds: float = 3600.0):
        self.process = subprocess.Popen([sys.executable, "-c", LOCKER, str(path), str(seconds)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout.readline().strip() == "locked"

    def release(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.write("\n")
            self.process.stdin.flush()
        assert self.process.wait(timeout=10) == 0


def start_prometheus(tmp_path, agent_port: int, rules=None) -> tuple[subprocess.Popen, int]:
    """Debian's Prometheus on loopback scraping the agent every second as job ``sixdim`` (rule
    files evaluated every second too), its TSDB and log under ``tmp_path``; returns the process
    and its port.  The caller terminates it."""
    from tests.conftest import free_port, required_tool

    prometheus = required_tool("prometheus")
    port = free_port()
    rule_files = f"rule_files:\n  - {rules}\n" if rules else ""
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n" + rule_files +
        f"scrape_configs:\n  - job_name: sixdim\n    static_configs:\n      - targets: ['127.0.0.1:{agent_port}']\n")
    server = subprocess.Popen(
        [prometheus, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "wb"))
    return server, port


TEST_SPEEDUP = 60
"""How much faster the end-to-end tests' Prometheus runs the alerts' clocks than the generated rules do."""


def shortened_rules(text: str, speedup: int = TEST_SPEEDUP) -> str:
    """The rules file ``text`` with every alert's ``for`` and ``keep_firing_for`` divided by ``speedup``
    (the default turns minutes into seconds: ``for: 5m`` becomes ``for: 5s``), for an end-to-end test whose
    Prometheus scrapes and evaluates every second.  Nothing else changes: the expressions (their windows
    included), labels and texts are the generator's; promtool tests the real durations
    (deploy/prometheus/tests/sixdim-rules-test*.yml)."""
    import yaml

    from sixdim.core.durations import whole_seconds

    document = yaml.safe_load(text)
    for group in document["groups"]:
        for rule in group["rules"]:
            for key in ("for", "keep_firing_for"):
                if key in rule:
                    rule[key] = f"{max(1, whole_seconds(rule[key]) // speedup)}s"
    return yaml.safe_dump(document, sort_keys=False, width=1_000_000)


def prometheus_query(port: int, promql: str) -> list:
    """An instant query through the HTTP API of the Prometheus :func:`start_prometheus` started: the
    result vector (a failed query fails the test)."""
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return body["data"]["result"]


# ---------------------------------------------------------------------------- the command line

def run_sixdim(*args: str, env: dict[str, str], stdin: str | None = None, timeout: float = 120,
               cwd: str | None = None) -> subprocess.CompletedProcess:
    """``sixdim ARGS`` in a child interpreter, as a user starts it, text in and out.  For what needs a
    process of its own: a daemon that starts, signals, a terminal, the interpreter's exit, what a
    process leaves behind.  Everything else calls :func:`call_sixdim` (no interpreter start-up)."""
    return subprocess.run([sys.executable, "-m", "sixdim", *args], input=stdin, capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=cwd)


def call_sixdim(*args: str, env: dict[str, str], stdin: str | None = None) -> subprocess.CompletedProcess:
    """``sixdim ARGS`` through :func:`sixdim.cli.main` in this process, with ``env`` as the whole
    environment and ``stdin`` as standard input: the same exit code, standard output and standard
    error a child gives (an exception escaping ``main`` is a traceback and exit 1, as there), for
    the commands that end without starting anything long-lived (errors, refusals, listings)."""
    from sixdim import cli

    out, err = io.StringIO(), io.StringIO()
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    saved_env = dict(os.environ)
    saved_stdin = sys.stdin
    root.handlers = []  # the command's own logging setup writes to the captured stderr, as in a child
    os.environ.clear()
    os.environ.update(env)
    sys.stdin = io.StringIO(stdin or "")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(list(args))
            except SystemExit as exc:  # argparse's usage errors and --help
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except Exception:  # what a child would print before dying
                traceback.print_exc()
                code = 1
    finally:
        sys.stdin = saved_stdin
        os.environ.clear()
        os.environ.update(saved_env)
        for handler in root.handlers:
            if handler not in saved_handlers:
                handler.close()
        root.handlers, root.level = saved_handlers, saved_level
    return subprocess.CompletedProcess(["sixdim", *args], code, out.getvalue(), err.getvalue())


HEALTHY_CONDITIONS = {
    "power_limit_watts": 700.0, "power_limit_default_watts": 700.0, "max_sm_clock_hertz": 1.98e9, "ecc_enabled": 1,
    "mig_enabled": 0, "persistence_mode": 1, "pcie_generation": 5, "pcie_width": 16, "pcie_max_generation": 5,
    "pcie_max_width": 16, "remapped_rows": 0, "gpu_other_processes": 0, "sm_clock_hertz": 1.98e9,
    "temperature_celsius": 61.0, "sw_power_cap_ratio": 0.02, "hw_slowdown_ratio": 0.0,
    "hw_thermal_slowdown_ratio": 0.0, "sw_thermal_slowdown_ratio": 0.0, "cpu_governor": "performance",
    "cpu_frequency_hertz": 3.1e9, "load_per_cpu": 0.1, "other_cpu_ratio": 0.02, "usable_cpus": 8}
"""A healthy H100 host's run conditions, the baseline the cause tests change one condition of."""
