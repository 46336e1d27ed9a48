"""The configuration's schema: every scalar option (its TOML key, flag, environment variable, checker
and default), the suite and workload tables' types, the :class:`Config` that :func:`sixdim.config.loader.load`
builds, and :class:`ConfigError`, which every part of the configuration raises.

Any error raises :class:`ConfigError`, whose message names where the bad value
came from (file, environment variable or flag), the key, what was expected and
what was found.  ``sixdim`` turns it into exit code 2.
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sixdim.core.catalog import WATCHED
from sixdim.workloads import registry
from sixdim.workloads.spec import brief

DEFAULT_PORT = 9480
"""Default listen port.  dcgm-exporter uses 9400; sixdim sits next to it at 9480."""

EMBEDDED_SOURCE = "<embedded default>"
"""The source name of the configuration built into sixdim (``agent/default.toml``)."""

DEFAULT_SOURCE = "the built-in default"
"""Where an option that no file, variable or flag set gets its value."""

MAX_SECONDS = 365 * 86400
"""The longest interval, timeout or misfire grace a suite may have (365 days): longer ones are
typos, and far beyond it the scheduler's date arithmetic overflows."""

DEFAULT_TIMEOUT_SECONDS = 600.0
"""A case's timeout where neither ``--timeout`` nor the suite's ``timeout_seconds`` sets one; on the CPU
it is the floor of a timeout that grows with the host's load (:func:`sixdim.config.suites.case_timeout`)."""

MIN_SECONDS = 1
"""The shortest interval, timeout or misfire grace (1 s): APScheduler takes the misfire grace in
whole seconds (0.5 would become 0, which it refuses when the daemon starts) and turns a shorter
interval into 1 s silently."""


class ConfigError(Exception):
    """Bad configuration: the message says where, which key, what was expected."""

    def __init__(self, source: str, key: str, expected: str, got: Any = None, *, detail: str = ""):
        self.source, self.key, self.expected, self.got = source, key, expected, got
        message = f"{source}: {key}: expected {expected}"
        if got is not None:
            message += f", got {brief(got)}"  # cut: one line, whatever the value
        if detail:
            message += f" ({detail})"
        super().__init__(message)


# --------------------------------------------------------------------------- values

def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPv6]:PORT`` or ``:PORT`` (all interfaces) to (host, port)."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError("HOST:PORT")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise ValueError("a port from 1 to 65535")
    host = host.strip("[]") or "0.0.0.0"
    return host, port


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in {"1", "true", "yes", "on"}:
        return True
    if isinstance(value, str) and value.strip().lower() in {"0", "false", "no", "off"}:
        return False
    raise ValueError("true or false")


def default_history_path(env: Mapping[str, str]) -> Path:
    """/var/lib/sixdim for root (a system service), the XDG data folder for a user."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return Path("/var/lib/sixdim/history.db")
    data_home = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "sixdim" / "history.db"


def default_state_dir(env: Mapping[str, str]) -> Path:
    """Where the agent keeps its lock files and the records of its running workers: beside the
    history for root (/var/lib/sixdim), the XDG state folder for a user.  It outlives the process
    (a SIGKILLed agent's successor finds the workers it left there) and is created mode 0700."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return Path("/var/lib/sixdim")
    state_home = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state_home) / "sixdim"


def default_hostname(env: Mapping[str, str]) -> str:
    """Kubernetes sets NODE_NAME through the downward API (as for dcgm-exporter); else the host name."""
    return env.get("NODE_NAME") or socket.gethostname()


SERIES_BUDGET = 20_000
"""The Prometheus series one host's configuration may export by default (``agent.series_budget``): a fleet of
1,000 hosts then holds at most 20 million series, what one large Prometheus or one Mimir/Thanos tenant keeps
(the arithmetic: docs/ARCHITECTURE.md, "What a host exports").  The embedded default exports about 16,000 on
an 8-GPU H100 host (sixdim.daemon.series counts them; ``sixdim serve --check-config`` enforces the budget)."""

# --------------------------------------------------------------------------- schema

@dataclass(frozen=True)
class Option:
    """One scalar option: its TOML key, flag, environment variable and checker."""

    key: str
    flag: str
    env: str
    help: str
    parse: Callable[[Any], Any]
    expected: str
    default: Callable[[Mapping[str, str]], Any]  # given load()'s environment, not os.environ

    @property
    def dest(self) -> str:
        """The argparse destination, e.g. ``guard_max_utilization``."""
        return self.key.replace(".", "_")

    @property
    def field(self) -> str:
        """The :class:`Config` attribute: ``agent.*`` keys drop their section (``listen``)."""
        section, name = self.key.split(".", 1)
        return name if section == "agent" else f"{section}_{name}"


def _str(value: Any) -> str:
    """A string that is valid Unicode: an environment variable with bytes that are not UTF-8 arrives
    with lone surrogates, which no label, file name or page could be written with."""
    if not isinstance(value, str):
        raise ValueError
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError from None
    return value


def _ratio(value: Any) -> float:
    number = _number(value)
    if not 0.0 <= number <= 1.0:
        raise ValueError
    return number


def _number(value: Any) -> float:
    """A finite number: NaN and infinity are never a usable setting (NaN compares false with every
    bound, so it would slip through any range check after this one)."""
    if isinstance(value, bool):
        raise ValueError
    try:
        number = float(value)
    except OverflowError:  # a whole number past a float's range (TOML integers have no limit)
        raise ValueError from None
    if not math.isfinite(number):
        raise ValueError
    return number


def _sample_hz(value: Any) -> float:
    number = _number(value)
    if not 1.0 <= number <= 100.0:
        raise ValueError
    return number


def _log_level(value: Any) -> str:
    level = _str(value).lower()
    if level not in {"debug", "info", "warning", "error"}:
        raise ValueError
    return level


def _listen(value: Any) -> str:
    parse_listen(_str(value))
    return value


def _keep_days(value: Any) -> float:
    number = _number(value)
    if not 1.0 <= number <= 36500.0:
        raise ValueError
    return number


def _max_runs(value: Any) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError
    number = int(value)
    if not 1000 <= number <= 100_000_000:
        raise ValueError
    return number


def _whole(low: int, high: int) -> Callable[[Any], int]:
    """A whole number from ``low`` to ``high`` (TOML integer, or its text in a variable or flag)."""
    def parse(value: Any) -> int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError
        number = int(value)
        if not low <= number <= high:
            raise ValueError
        return number
    return parse


def _effect(value: Any) -> float:
    """A relative effect: a ratio above 0 and below 1 (0.018 is 1.8%)."""
    number = _number(value)
    if not 0.0 < number < 1.0:
        raise ValueError
    return number


def _path(value: Any) -> str:
    text = _str(value)
    if not text or "\0" in text:  # no file name holds a NUL byte; open() raises ValueError on one
        raise ValueError
    return text


OPTIONS: tuple[Option, ...] = (
    Option("agent.listen", "--listen", "SIXDIM_LISTEN",
           "address of /metrics and /healthz (default: 0.0.0.0:9480)",
           _listen, "HOST:PORT with a port from 1 to 65535", lambda env: f"0.0.0.0:{DEFAULT_PORT}"),
    Option("agent.history", "--history", "SIXDIM_HISTORY",
           "SQLite history database file (default: /var/lib/sixdim/history.db for root, else "
           "$XDG_DATA_HOME/sixdim/history.db, or ~/.local/share/sixdim/history.db)",
           _path, "a file path", lambda env: str(default_history_path(env))),
    Option("agent.state_dir", "--state-dir", "SIXDIM_STATE_DIR",
           "folder of the agent's lock files (one agent per host, one run per device) and of its running "
           "workers' records (default: /var/lib/sixdim for root, else $XDG_STATE_HOME/sixdim, or "
           "~/.local/state/sixdim)",
           _path, "a folder path", lambda env: str(default_state_dir(env))),
    Option("agent.history_keep_days", "--history-keep-days", "SIXDIM_HISTORY_KEEP_DAYS",
           "days raw runs are kept before they are thinned to daily medians per series (default: 90)",
           _keep_days, "a number of days from 1 to 36500", lambda env: 90.0),
    Option("agent.history_max_runs", "--history-max-runs", "SIXDIM_HISTORY_MAX_RUNS",
           "raw runs kept at most; the oldest beyond are thinned like old ones (default: 1000000)",
           _max_runs, "a whole number from 1000 to 100000000", lambda env: 1_000_000),
    Option("agent.hostname", "--hostname", "SIXDIM_HOSTNAME",
           "the host label's value (the label is hostname, or Hostname with --dcgm-label-names; default: "
           "$NODE_NAME or the host name)",
           _str, "a string", default_hostname),
    Option("agent.log_level", "--log-level", "SIXDIM_LOG_LEVEL", "debug, info, warning or error (default: info)",
           _log_level, "one of debug, info, warning, error", lambda env: "info"),
    Option("agent.sample_hz", "--sample-hz", "SIXDIM_SAMPLE_HZ",
           "telemetry samples per second during a run, 1 to 100 (default: 10)",
           _sample_hz, "a number from 1 to 100", lambda env: 10.0),
    Option("agent.dcgm_label_names", "--dcgm-label-names", "SIXDIM_DCGM_LABEL_NAMES",
           "export dcgm-exporter's label names, Hostname and modelName, for on(Hostname, gpu) joins with its "
           "series; generate the rules and dashboards with the same flag (promtool warns on camelCase modelName; "
           "default: off: hostname, model_name)",
           parse_bool, "true or false", lambda env: False),
    Option("agent.web_config_file", "--web.config.file", "SIXDIM_WEB_CONFIG_FILE",
           "web configuration file in the Prometheus exporter-toolkit format: TLS, client certificates, basic "
           "auth, response headers (default: none, plain HTTP; see docs/SECURITY.md)",
           lambda value: "" if value == "" else _path(value), "a file path, or empty for plain HTTP", lambda env: ""),
    Option("agent.series_budget", "--series-budget", "SIXDIM_SERIES_BUDGET",
           f"Prometheus series the configuration may export on this host; serve --check-config refuses one that "
           f"exports more: raise it to opt in to per-shape export of large suites (default: {SERIES_BUDGET})",
           _whole(1, 1_000_000_000), "a whole number from 1 to 1000000000", lambda env: SERIES_BUDGET),
    Option("regression.window", "--regression-window", "SIXDIM_REGRESSION_WINDOW",
           "runs of a series' stable segment that form its baseline, 10 to 1000 (default: 40)",
           _whole(10, 1000), "a whole number from 10 to 1000", lambda env: 40),
    Option("regression.min_baseline", "--regression-min-baseline", "SIXDIM_REGRESSION_MIN_BASELINE",
           "baseline runs a series needs before it gets a verdict, 5 to 1000 (default: 10)",
           _whole(5, 1000), "a whole number from 5 to 1000", lambda env: 10),
    Option("regression.min_effect", "--regression-min-effect", "SIXDIM_REGRESSION_MIN_EFFECT",
           "smallest relative change the 6-run rule reports, a ratio (default: 0.018, i.e. 1.8%%; the 3-run "
           "rule's 3%% scales with it); per workload or figure in the file's [regression.effects] table",
           _effect, "a ratio above 0 and below 1", lambda env: 0.018),
    Option("guard.enabled", "--guard", "SIXDIM_GUARD",
           "skip a GPU run while another process uses the GPU or it is busy (default: on)",
           parse_bool, "true or false", lambda env: True),
    Option("guard.max_utilization", "--guard-max-utilization", "SIXDIM_GUARD_MAX_UTILIZATION",
           "skip a GPU run when the GPU's utilization is above this ratio, 0 to 1 (default: 0.05)",
           _ratio, "a ratio from 0 to 1", lambda env: 0.05),
)




@dataclass(frozen=True)
class WorkloadEntry:
    name: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Suite:
    """A set of workloads run together on a schedule, on each of its devices."""

    name: str
    workloads: tuple[WorkloadEntry, ...]
    interval_seconds: float | None = None
    cron: str | None = None
    devices: tuple[str, ...] = ("auto",)
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    """Per case: a case that runs longer is stopped (the clock restarts with each case).  Where the
    suite does not set it, a CPU run stretches it for the host's load: see :func:`sixdim.config.suites.case_timeout`."""
    timeout_given: bool = False
    """The suite set ``timeout_seconds`` itself: then it is used as it is, never scaled."""
    misfire_grace_seconds: float = 300.0
    """A run the daemon missed (it was down, or the device busy) still starts if this late at most."""
    export: str = "summary"
    """What Prometheus sees of the suite's results: ``summary`` (one series per workload, precision,
    mode and pass: geometric means over the shapes, see :mod:`sixdim.verdicts.summary`) or ``shapes`` (that,
    plus every metric per shape).  Everything is in the history and ``--json`` whichever it is."""
    run_at_start: bool | None = None
    """Also run once as soon as the daemon starts.  When not given (None): true for an
    ``interval_seconds`` suite (its first result comes at once, not one interval later), false for
    a ``cron`` suite, which waits for its time: a nightly full suite must not start whenever the
    daemon (re)starts.  See :func:`default_run_at_start`."""
    on_change: bool = False
    """Also run at once on a device whose driver, CUDA, cuDNN, NCCL or torch version or GPU setting (power
    limit, clocks, ECC, MIG) changed since this suite last ran there, or where it never ran: so a change
    is measured on every case within minutes of being seen (:mod:`sixdim.run.changes`)."""
    confirm_per_hour: int = 0
    """When one of this suite's series turns ``suspicious``, run that case alone again after
    :data:`CONFIRM_DELAY_SECONDS`, at most this many times an hour per device (0: never;
    :mod:`sixdim.run.confirm`).  The confirmation is an ordinary run of the suite: it counts in the verdict."""

    def __post_init__(self) -> None:
        if self.run_at_start is None:
            object.__setattr__(self, "run_at_start", default_run_at_start(self.cron))


@dataclass(frozen=True)
class Config:
    listen: str
    history: str
    history_keep_days: float
    history_max_runs: int
    hostname: str
    log_level: str
    sample_hz: float
    dcgm_label_names: bool
    guard_enabled: bool
    guard_max_utilization: float
    suites: tuple[Suite, ...]
    state_dir: str = ""
    """Lock files and worker records (:mod:`sixdim.run.instance`); see :func:`default_state_dir`."""
    series_budget: int = SERIES_BUDGET
    """``agent.series_budget``: the series ``serve --check-config`` lets the configuration export on the host."""
    web_config_file: str = ""
    """``--web.config.file``: TLS and basic auth of the endpoint (:mod:`sixdim.http.webconfig`); empty: plain HTTP."""
    regression_window: int = 40
    regression_min_baseline: int = 10
    regression_min_effect: float = 0.018
    regression_effects: dict[str, float] = field(default_factory=dict)
    """``[regression.effects]``: minimum effects per ``"workload/figure"``, ``"workload"`` or
    ``"figure"`` (see :meth:`sixdim.verdicts.detector.Settings.effects_for`)."""
    insecure_config_permissions: bool = False
    """``--insecure-config-permissions`` or ``SIXDIM_INSECURE_CONFIG_PERMISSIONS``: configuration files
    others can change are loaded with a warning instead of refused (see :func:`sixdim.config.trust.check_permissions`);
    the web configuration file takes it from here."""
    source: str = EMBEDDED_SOURCE
    sources: dict[str, str] = field(default_factory=dict)
    """Where each option's value came from (key -> file, variable or flag), for errors found later,
    such as an address already in use."""

    @property
    def listen_address(self) -> tuple[str, int]:
        return parse_listen(self.listen)



def default_run_at_start(cron: str | None) -> bool:
    """A suite with a cron schedule waits for its time; one with an interval runs at once."""
    return cron is None


def parse_effects(table: Any, source: str) -> dict[str, float]:
    """``[regression.effects]``: ``"workload/figure"``, ``"workload"`` or ``"figure"`` = a ratio."""
    if not isinstance(table, dict):
        raise ConfigError(source, "regression.effects", "a table of minimum effects", table)
    workloads, figures = sorted(registry.WORKLOADS), sorted(WATCHED)
    effects = {}
    for key, value in table.items():
        workload, slash, figure = key.partition("/")
        if (slash and (workload not in workloads or figure not in figures)) or (
                not slash and key not in workloads and key not in figures):
            raise ConfigError(source, f"regression.effects.{key}",
                              "a workload (" + ", ".join(workloads) + "), a watched figure ("
                              + ", ".join(figures) + "), or workload/figure", detail="unknown key")
        try:
            effects[key] = _effect(value)
        except (ValueError, TypeError):
            raise ConfigError(source, f"regression.effects.{key}", "a ratio above 0 and below 1", value) from None
    return effects
