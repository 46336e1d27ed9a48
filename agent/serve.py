"""``sixdim serve``: the long-running daemon.

Stays light by design: no torch, no CUDA context.  It schedules suites, runs a suite's
workloads in worker child processes (one shared by the cases of consecutive workloads, a
fresh one after a crash), and serves /metrics and /healthz.  SIGTERM or SIGINT stops the
running worker and exits within seconds.  An address it cannot listen on is a configuration
error (exit code 2) that names the address and where it was set.
"""

from __future__ import annotations

import errno
import logging
import signal
import threading

from prometheus_client import CollectorRegistry
from prometheus_client import ProcessCollector

from agent import app, devices
from agent.config import Config, ConfigError
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
    scheduler = SuiteScheduler(parts.executor, plan, source=config.source)

    def healthy() -> tuple[bool, str]:
        return (True, "ok") if scheduler.running else (False, "scheduler is not running")

    host, port = config.listen_address
    try:
        server = HttpServer(host, port, make_app(registry, healthy))
    except OSError as exc:
        parts.history.close()
        raise listen_error(config, exc) from None
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


def listen_error(config: Config, exc: OSError) -> ConfigError:
    """The configuration error for an address the agent cannot listen on (in use, not this host's,
    a privileged port): it names the address, where it was set, and the three ways to change it."""
    reason = exc.strerror or str(exc)
    if exc.errno == errno.EADDRINUSE:
        reason += " (another process, perhaps another sixdim, listens there)"
    return ConfigError(config.sources.get("agent.listen", config.source), "agent.listen",
                       "an address this host can listen on", config.listen,
                       detail=f"{reason}; choose another with --listen, SIXDIM_LISTEN or agent.listen")
