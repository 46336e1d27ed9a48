"""``sixdim serve``: the long-running daemon.

Stays light by design: no torch, no CUDA context.  It schedules suites, runs a suite's
workloads in worker child processes (one shared by the cases of consecutive workloads, a
fresh one after a crash), and serves /metrics and /healthz.  SIGTERM or SIGINT stops the
running worker and exits within seconds.  An address it cannot listen on is a configuration
error (exit code 2) that names the address and where it was set; so is a web configuration file
(``--web.config.file``: TLS, basic auth, headers; see :mod:`agent.webconfig`) that cannot be read,
is not valid, or names a certificate or key that does not load.  It is loaded before anything else
starts, so a bad one costs no history check and no worker.
"""

from __future__ import annotations

import errno
import logging
import signal
import threading

from prometheus_client import CollectorRegistry
from prometheus_client import ProcessCollector

from agent import app, devices, webconfig
from agent.config import Config, ConfigError
from agent.exporter import SixdimCollector
from agent.exposition import Exposition
from agent.history import History
from agent.http import HttpServer, make_app
from agent.scheduler import SuiteScheduler

log = logging.getLogger("sixdim")


def serve(config: Config) -> int:
    web = load_web_config(config)
    parts = app.build(config, verdicts=True)
    plan = [(suite, devices.resolve(suite.devices, parts.nvml)) for suite in config.suites]

    results = CollectorRegistry()  # rendered again only when the board changes
    results.register(SixdimCollector(parts.board, [], config.hostname, config.dcgm_label_names, part="results",
                                     shape_suites=shape_suites(config)))
    live = CollectorRegistry()  # telemetry and health, rendered on a timer
    ProcessCollector(registry=live)  # process_resident_memory_bytes etc.: watch the agent itself
    live.register(SixdimCollector(parts.board, [parts.nvml, parts.host], config.hostname, config.dcgm_label_names,
                                  history=parts.history, part="live"))
    exposition = Exposition(parts.board, results, live, parts.history).start()
    scheduler = SuiteScheduler(parts.executor, plan, source=config.source)

    def healthy() -> tuple[bool, str]:
        return (True, "ok") if scheduler.running else (False, "scheduler is not running")

    host, port = config.listen_address
    try:
        server = HttpServer(host, port, make_app(exposition, healthy), web=web)
    except OSError as exc:
        exposition.stop()
        parts.history.close()
        raise listen_error(config, exc) from None
    stop = threading.Event()
    pruner = threading.Thread(target=_prune_daily, args=(parts.history, config, stop), daemon=True, name="prune")

    def on_signal(number: int, _frame: object) -> None:
        log.info("received %s, shutting down", signal.Signals(number).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    scheduler.start()
    pruner.start()
    log.info("sixdim serving on %s://%s:%d/metrics (config: %s, history: %s, %d result series restored, "
             "integrity check %.2f s)", server.scheme, host, server.port, config.source, config.history,
             len(parts.board.latest()), parts.history.check_seconds)
    if web is not None:
        log.info("web config %s: TLS %s, client certificates: %s, basic auth: %s (/healthz stays open)", web.source,
                 f"on (min {web.min_version})" if web.tls else "off", web.client_auth_type if web.tls else "-",
                 f"{len(web.auth.users)} user(s)" if web.auth else "off")
    while not stop.wait(1.0):
        pass
    scheduler.shutdown()
    server.shutdown()
    exposition.stop()
    pruner.join(timeout=10.0)
    parts.history.close()
    log.info("stopped")
    return 0


PRUNE_EVERY_SECONDS = 86400.0
PRUNE_FIRST_AFTER_SECONDS = 60.0
"""The first prune waits a minute, so start-up (and a first suite's results) come first."""


def shape_suites(config: Config) -> set[str]:
    """Suites whose results are exported per shape too; ``""`` is ad-hoc ``sixdim run --workload`` runs."""
    return {suite.name for suite in config.suites if suite.export == "shapes"} | {""}


def _prune_daily(history: History, config: Config, stop: threading.Event) -> None:
    """Thin the history once a day in the background (see :meth:`agent.history.History.prune`)."""
    wait = PRUNE_FIRST_AFTER_SECONDS
    while not stop.wait(wait):
        wait = PRUNE_EVERY_SECONDS
        try:
            history.prune(keep_seconds=config.history_keep_days * 86400.0, max_runs=config.history_max_runs)
        except Exception as exc:  # a locked or full database: try again tomorrow, results are not at risk
            log.warning("history: pruning failed (%s); it will be tried again in a day", exc)


def load_web_config(config: Config) -> "webconfig.WebConfig | None":
    """The web configuration file named by ``agent.web_config_file`` (None when unset: plain HTTP,
    no auth); a bad one raises :class:`ConfigError` (exit code 2)."""
    path = config.web_config_file
    if not path:
        return None
    return webconfig.load(path, where=config.sources.get("agent.web_config_file", config.source))


def listen_error(config: Config, exc: OSError) -> ConfigError:
    """The configuration error for an address the agent cannot listen on (in use, not this host's,
    a privileged port): it names the address, where it was set, and the three ways to change it."""
    reason = exc.strerror or str(exc)
    if exc.errno == errno.EADDRINUSE:
        reason += " (another process, perhaps another sixdim, listens there)"
    return ConfigError(config.sources.get("agent.listen", config.source), "agent.listen",
                       "an address this host can listen on", config.listen,
                       detail=f"{reason}; choose another with --listen, SIXDIM_LISTEN or agent.listen")
