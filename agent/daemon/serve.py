"""``sixdim serve``: the long-running daemon.

Stays light by design: no torch, no CUDA context.  It schedules suites, runs a suite's
workloads in worker child processes (one shared by the cases of consecutive workloads, a
fresh one after a crash), and serves /metrics and /healthz.

One per host and history: it holds the state directory's and the history's locks for its life
(:class:`sixdim.run.instance.AgentLock`), and before anything runs it stops and records what a dead
predecessor's workers left (:meth:`sixdim.run.executor.Executor.recover_left_behind`).

Signals: SIGTERM or SIGINT stops every worker (and whatever they started) and exits within
seconds.  SIGHUP reloads the configuration file and the web configuration file (:func:`reload`):
a good one replaces the schedule, the guard, the telemetry rate, the per-shape export and TLS/auth;
a bad one is logged and the running configuration stays; ``sixdim_config_reload_success`` and
``sixdim_config_last_reload_timestamp_seconds`` say which, as Prometheus's own metrics do.  What
cannot change without a restart (the listen address, the history, the state directory, the
hostname, label names, regression settings) is logged and kept.  An address it cannot listen on is a configuration
error (exit code 2) that names the address and where it was set; so is a web configuration file
(``--web.config.file``: TLS, basic auth, headers; see :mod:`sixdim.http.webconfig`) that cannot be read,
is not valid, or names a certificate or key that does not load.  It is loaded before anything else
starts, so a bad one costs no history check and no worker.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import resource
import select
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, ProcessCollector

from sixdim.collectors.nvml import NvmlCollector
from sixdim.config import Config, ConfigError
from sixdim.daemon import app
from sixdim.http import webconfig
from sixdim.http.exporter import ReloadStatus, SixdimCollector
from sixdim.http.exposition import Exposition
from sixdim.http.server import HttpServer, make_app, reserve_for
from sixdim.run import devices
from sixdim.run.changes import ChangeWatch
from sixdim.run.devices import DeviceError
from sixdim.run.executor import GuardSettings
from sixdim.run.instance import AgentLock
from sixdim.run.protocol import OPEN_FILES_VARIABLE
from sixdim.run.scheduler import SuiteScheduler
from sixdim.store.history import History

log = logging.getLogger("sixdim")


def serve(config: Config, reload_config: Callable[[], Config] | None = None) -> int:
    """Run the daemon until SIGTERM or SIGINT.  ``reload_config`` loads the configuration again, as
    it was first loaded (same file, variables and flags), for SIGHUP; None: SIGHUP only logs."""
    raise_open_files_limit()
    web = load_web_config(config)
    # the lock first: a second agent is refused in one line, before NVML is even asked
    lock = AgentLock(config.state_dir, config.history, listen=config.listen).acquire()
    try:
        nvml = NvmlCollector(config.hostname)
        plan = _plan(config, nvml)  # a device this host lacks is refused before the history is made
        return _serve(config, web, reload_config, nvml, plan)
    finally:
        lock.release()


def _plan(config: Config, nvml) -> list:
    return [(suite, devices.resolve(suite.devices, nvml, where=f"{config.source}: suites[{i}].devices"))
            for i, suite in enumerate(config.suites)]


@dataclass
class _Running:
    """What a reload may replace, and what reports on it."""

    config: Config
    scheduler: SuiteScheduler
    server: HttpServer
    results: SixdimCollector
    parts: app.Components
    reloads: ReloadStatus
    exposition: Exposition
    watch: ChangeWatch


def _serve(config: Config, web: webconfig.WebConfig | None, reload_config: Callable[[], Config] | None,
           nvml: NvmlCollector, plan: list) -> int:
    # the board and the verdicts are restored from the history in the background: /metrics answers at
    # once (sixdim_history_restored 0 meanwhile) and /healthz as soon as the scheduler runs
    parts = app.build(config, verdicts=True, nvml=nvml, restore_in_background=True)
    recovered = parts.executor.recover_left_behind()  # before anything runs on the devices

    reloads = ReloadStatus()
    # rendered again only when the board changes, line by line into its gzip form (agent/http/exposition.py)
    results_collector = SixdimCollector(parts.board, [], config.hostname, config.dcgm_label_names, part="results",
                                        shape_suites=shape_suites(config))
    scheduler = SuiteScheduler(parts.executor, plan, source=config.source)
    if parts.board.verdicts is not None:  # a suspicious series of a confirming suite is run again soon
        parts.board.verdicts.on_judged = scheduler.judged
    watch = ChangeWatch(parts.history, nvml, plan, scheduler.run_now)  # the on_change suites
    live = CollectorRegistry()  # telemetry and health, rendered on a timer
    ProcessCollector(registry=live)  # process_resident_memory_bytes etc.: watch the agent itself
    live.register(SixdimCollector(parts.board, [parts.nvml, parts.host], config.hostname, config.dcgm_label_names,
                                  history=parts.history, part="live", reloads=reloads,
                                  progress=parts.executor.progress, cannot_run=scheduler.health.problem))
    exposition = Exposition(parts.board, results_collector, live, parts.history).start()
    parts.executor.progress.on_change = exposition.live_changed  # a suite's progress within a second
    scheduler.health.on_change = exposition.live_changed  # sixdim_agent_can_run within a second

    def healthy() -> tuple[bool, str]:
        """200 ``ok`` while the scheduler runs and its suites can run; 503 with the reason otherwise."""
        if not scheduler.running:
            return False, "scheduler is not running"
        problem = scheduler.health.problem()
        return (True, "ok") if problem is None else (False, f"cannot run suites: {problem}")

    def alive() -> tuple[bool, str]:
        """200 ``ok`` while the scheduler runs: what a restart could fix (Kubernetes' liveness probe)."""
        return (True, "ok") if scheduler.running else (False, "scheduler is not running")

    host, port = config.listen_address
    try:
        server = HttpServer(host, port, make_app(exposition, healthy, alive), web=web,
                            open_files_limit=resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                            reserve=reserve_for(planned_devices(plan)))
    except OSError as exc:
        exposition.stop()
        parts.history.close()
        raise listen_error(config, exc) from None
    stop = threading.Event()
    pruner = threading.Thread(target=_prune_daily, args=(parts.history, config, stop), daemon=True, name="prune")

    received: list[int] = []

    def on_signal(number: int, _frame: object) -> None:
        received.append(number)  # no lock here (logging and Event.set take them): the main loop acts

    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, on_signal)
    scheduler.start()
    watch.start()
    parts.board.start_restore()  # once it listens: the restore's JSON decoding would slow the start-up
    pruner.start()
    log.info("sixdim serving on %s://%s:%d/metrics (PID %d, config: %s, history: %s, state: %s, results restoring "
             "in the background, integrity check %.2f s%s)", server.scheme, host, server.port, os.getpid(),
             config.source, config.history, config.state_dir, parts.history.check_seconds,
             f", {len(recovered)} case(s) of a dead predecessor's run recorded now" if recovered else "")
    _log_cap(server)
    _log_web(web)
    running = _Running(config, scheduler, server, results_collector, parts, reloads, exposition, watch)
    with _SignalWakeup() as wakeup:
        while True:
            # those that came before the wakeup pipe was in place first; a burst of SIGHUPs is one
            # reload, and a stop signal among them wins (no reload on the way out)
            while received:
                batch = []
                while received:  # pop by pop: a signal landing meanwhile is kept, never cleared away
                    batch.append(received.pop(0))
                stops = [number for number in batch if number != signal.SIGHUP]
                if stops:
                    log.info("received %s, shutting down", signal.Signals(stops[0]).name)
                    stop.set()
                else:
                    reload(running, reload_config)
            if stop.is_set():
                break
            wakeup.wait()  # asleep until a signal arrives: no polling while the agent is idle
    watch.stop()
    scheduler.shutdown()
    server.shutdown()
    exposition.stop()
    pruner.join(timeout=10.0)
    log_waiting(parts)
    parts.history.close()
    log.info("stopped")
    return 0


def log_waiting(parts: app.Components) -> None:
    """At the stop, one line for the results the history has not written yet (a full disk): how many, why,
    and where they are kept for the next start (the worker records in the state folder, the spool), and
    how many are in memory only, lost with this process.  Nothing where the history has every result."""
    kept = parts.executor.kept()  # tries the history once more first
    waiting = parts.history.waiting()
    in_records = sum(count for _, count in kept)
    total = max(waiting.results, in_records + waiting.spooled)
    if not total:
        return
    places = [f"{folder} ({count})" for folder, count in kept]
    if waiting.spooled:
        places.append(f"{parts.history.spool_path} ({waiting.spooled})")
    lost = total - in_records - waiting.spooled
    log.warning("stopping with %d result(s) not yet written to %s (%s): kept in %s%s; the next sixdim started on "
                "this history writes them", total, parts.history.path, waiting.reason or "cannot be written",
                ", ".join(places) or "nothing but memory", f"; {lost} in memory only, lost" if lost > 0 else "")


class _SignalWakeup:
    """The main thread's sleep until a signal: Python writes each signal's number to a pipe
    (:func:`signal.set_wakeup_fd`) after the C-level handler runs, so ``wait`` returns once the
    Python handler has run, without waking on a timer."""

    def __enter__(self) -> _SignalWakeup:
        self._reader, self._writer = os.pipe()
        os.set_blocking(self._reader, False)
        os.set_blocking(self._writer, False)
        self._previous = signal.set_wakeup_fd(self._writer, warn_on_full_buffer=False)
        return self

    def wait(self) -> None:
        select.select([self._reader], [], [])
        try:
            while os.read(self._reader, 4096):
                pass
        except BlockingIOError:
            pass

    def __exit__(self, *_exc: object) -> None:
        signal.set_wakeup_fd(self._previous)
        os.close(self._reader)
        os.close(self._writer)


def raise_open_files_limit() -> int:
    """Raise the soft open-file limit to the hard one (as Prometheus and systemd services do): connections,
    runs and the history all take descriptors, and the hard limit is what the administrator granted.  Said
    once in the log; returns the soft limit now in force.  A hard limit of "unlimited" is taken as the
    kernel's ceiling (``fs.nr_open``), which is the most a process can have."""
    soft, target = open_files_limits()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    os.environ[OPEN_FILES_VARIABLE] = str(soft)  # the workers' own: this daemon's start, not an outer sixdim's
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError) as exc:
            log.warning("open files: soft limit %d could not be raised to %d: %s", soft, target, exc)
            return soft
        log.info("open files: soft limit raised from %d to %d (the hard limit)", soft, target)
        return target
    log.info("open files: limit %d (already the hard limit)", soft)
    return soft


def planned_devices(plan: list) -> int:
    """The devices the plan's suites run on: as many runs can be under way at once (each device's take turns).
    A reload that adds devices does not change the connection cap computed at start."""
    return len({device.name for _, found in plan for device in found})


def open_files_limits() -> tuple[int, int]:
    """(the soft open-file limit now, the one :func:`raise_open_files_limit` raises it to)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        try:
            with open("/proc/sys/fs/nr_open") as ceiling:
                hard = int(ceiling.read())
        except (OSError, ValueError):
            hard = soft
    return soft, max(soft, hard) if soft != resource.RLIM_INFINITY else soft


def _log_cap(server: HttpServer) -> None:
    """The connection cap, once: how many clients the endpoint holds before it closes newcomers."""
    cap = server.cap
    if cap is None:
        return
    if cap.short:
        log.warning("http: %s; the open-file limit is too low to keep that reserve: raise it (ulimit -n, "
                    "LimitNOFILE=) or runs may fail with 'Too many open files'", cap.describe())
    else:
        log.info("http: %s", cap.describe())


def _log_web(web: webconfig.WebConfig | None) -> None:
    if web is not None:
        log.info("web config %s: TLS %s, client certificates: %s, basic auth: %s (/healthz stays open)", web.source,
                 f"on (min {web.min_version})" if web.tls else "off", web.client_auth_type if web.tls else "-",
                 f"{len(web.auth.users)} user(s)" if web.auth else "off")


RESTART_ONLY = ("listen", "history", "state_dir", "hostname", "dcgm_label_names", "history_keep_days",
                "history_max_runs", "log_level", "regression_window", "regression_min_baseline",
                "regression_min_effect", "regression_effects")
"""Settings a reload cannot change in a running agent (a bound socket, an open database, held
locks, labels and verdict trackers already exported): a changed one is logged and kept."""


def reload(running: _Running, reload_config: Callable[[], Config] | None) -> bool:
    """SIGHUP: load the configuration and the web configuration again and put them in place, or keep
    the running ones if either is bad (logged, ``sixdim_config_reload_success 0``)."""
    if reload_config is None:
        log.warning("SIGHUP: this agent was started without a configuration to reload; nothing changed")
        return False
    try:
        new = reload_config()
        web = load_web_config(new)
        plan = _plan(new, running.parts.nvml)
    except (ConfigError, DeviceError, OSError, ValueError) as exc:
        running.reloads.failed()
        running.exposition.live_changed()
        log.error("SIGHUP: configuration reload failed, the running configuration stays: %s", exc)
        return False
    old = running.config
    kept = [key for key in RESTART_ONLY if getattr(new, key) != getattr(old, key)]
    running.scheduler.replace(plan, source=new.source)
    running.watch.replace(plan)
    running.parts.executor.guard = GuardSettings(new.guard_enabled, new.guard_max_utilization)
    running.parts.executor.sample_hz = new.sample_hz
    running.results.set_shape_suites(shape_suites(new))
    running.server.set_web(web)
    running.config = dataclasses.replace(new, **{key: getattr(old, key) for key in kept})
    running.reloads.succeeded()
    running.exposition.live_changed()
    running.exposition.results_changed()  # the per-shape export may have changed with no new run
    log.info("SIGHUP: configuration reloaded from %s: %d suite(s) on %d device job(s)%s", new.source,
             len(new.suites), sum(len(d) for _, d in plan),
             f"; needs a restart, so unchanged: {', '.join(kept)}" if kept else "")
    _log_web(web)
    return True


PRUNE_EVERY_SECONDS = 86400.0
PRUNE_FIRST_AFTER_SECONDS = 60.0
"""The first prune waits a minute, so start-up (and a first suite's results) come first."""


def shape_suites(config: Config) -> set[str]:
    """Suites whose results are exported per shape too; ``""`` is ad-hoc ``sixdim run --workload`` runs."""
    return {suite.name for suite in config.suites if suite.export == "shapes"} | {""}


def _prune_daily(history: History, config: Config, stop: threading.Event) -> None:
    """Thin the history once a day in the background (see :meth:`sixdim.store.history.History.prune`)."""
    wait = PRUNE_FIRST_AFTER_SECONDS
    while not stop.wait(wait):
        wait = PRUNE_EVERY_SECONDS
        try:
            history.prune(keep_seconds=config.history_keep_days * 86400.0, max_runs=config.history_max_runs)
        except Exception as exc:  # a locked or full database: try again tomorrow, results are not at risk
            log.warning("history: pruning failed (%s); it will be tried again in a day", exc)


def load_web_config(config: Config) -> webconfig.WebConfig | None:
    """The web configuration file named by ``agent.web_config_file`` (None when unset: plain HTTP,
    no auth); a bad one raises :class:`ConfigError` (exit code 2)."""
    path = config.web_config_file
    if not path:
        return None
    return webconfig.load(path, where=config.sources.get("agent.web_config_file", config.source),
                          insecure_permissions=config.insecure_config_permissions)


def listen_error(config: Config, exc: OSError) -> ConfigError:
    """The configuration error for an address the agent cannot listen on (in use, not this host's,
    a privileged port): it names the address, where it was set, and the three ways to change it."""
    reason = exc.strerror or str(exc)
    if exc.errno == errno.EADDRINUSE:
        reason += " (another process, perhaps another sixdim, listens there)"
    return ConfigError(config.sources.get("agent.listen", config.source), "agent.listen",
                       "an address this host can listen on", config.listen,
                       detail=f"{reason}; choose another with --listen, SIXDIM_LISTEN or agent.listen")
