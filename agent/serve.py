"""``sixdim serve``: the long-running daemon.

Stays light by design: no torch, no CUDA context.  It schedules suites, runs each
workload in a child process, and serves /metrics and /healthz.  SIGTERM or
SIGINT stops the running worker and exits within seconds.
"""

from __future__ import annotations

import logging
import signal
import threading

from prometheus_client import CollectorRegistry
from prometheus_client import ProcessCollector

from agent import app, devices
from agent.config import Config
from agent.exporter import SixdimCollector
from agent.http import HttpServer, make_app
from agent.scheduler import SuiteScheduler

log = logging.getLogger("sixdim")


def serve(config: Config) -> int:
    parts = app.build(config)
    plan = [(suite, devices.resolve(suite.devices, parts.nvml)) for suite in config.suites]

    registry = CollectorRegistry()
    ProcessCollector(registry=registry)  # process_resident_memory_bytes etc.: watch the agent itself
    registry.register(SixdimCollector(parts.board, [parts.nvml, parts.host], config.hostname,
                                      config.dcgm_label_names, history=parts.history))
    scheduler = SuiteScheduler(parts.executor, plan)

    def healthy() -> tuple[bool, str]:
        return (True, "ok") if scheduler.running else (False, "scheduler is not running")

    host, port = config.listen_address
    server = HttpServer(host, port, make_app(registry, healthy))
    stop = threading.Event()

    def on_signal(number: int, _frame: object) -> None:
        log.info("received %s, shutting down", signal.Signals(number).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    scheduler.start()
    log.info("sixdim serving on http://%s:%d/metrics (config: %s, history: %s, %d result series restored)",
             host, server.port, config.source, config.history, len(parts.board.latest()))
    while not stop.wait(1.0):
        pass
    scheduler.shutdown()
    server.shutdown()
    parts.history.close()
    log.info("stopped")
    return 0
