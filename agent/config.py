"""Configuration: one schema, one loader.

Precedence, lowest first: built-in defaults, the TOML file (``--config`` or
``SIXDIM_CONFIG``; without one, the embedded ``default.toml``), ``SIXDIM_*``
environment variables, command-line flags.  Every scalar option exists in all
four places, as dcgm-exporter does; suites are tables and live in the file.

Any error raises :class:`ConfigError`, whose message names where the bad value
came from (file, environment variable or flag), the key, what was expected and
what was found.  ``sixdim`` turns it into exit code 2.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import shlex
import socket
import stat
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from sixdim.core.catalog import WATCHED
from sixdim.core.files import READ_ONLY_REGULAR, NotARegularFile, open_regular
from sixdim.workloads import registry
from sixdim.workloads.spec import ParamError, brief

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
it is the floor of a timeout that grows with the host's load (:func:`case_timeout`)."""

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

_SECTIONS = {"agent", "guard", "regression", "suites"}


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
    suite does not set it, a CPU run stretches it for the host's load: see :func:`case_timeout`."""
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
    others can change are loaded with a warning instead of refused (see :func:`check_permissions`);
    the web configuration file takes it from here."""
    source: str = EMBEDDED_SOURCE
    sources: dict[str, str] = field(default_factory=dict)
    """Where each option's value came from (key -> file, variable or flag), for errors found later,
    such as an address already in use."""

    @property
    def listen_address(self) -> tuple[str, int]:
        return parse_listen(self.listen)


# --------------------------------------------------------------------------- file permissions

log = logging.getLogger("sixdim")

INSECURE_PERMISSIONS_FLAG = "--insecure-config-permissions"
INSECURE_PERMISSIONS_ENV = "SIXDIM_INSECURE_CONFIG_PERMISSIONS"
"""The escape hatch of :func:`check_permissions`: a flag and a variable, and deliberately no key of the
TOML file, because a file cannot vouch for its own permissions."""

CONFIG_FILE_ROLE = "it defines the commands sixdim runs"
"""Why the ``--config`` file must be safe from other users (the ``command`` workload's argv is in it)."""


def permission_problem(mode: int, owner: int, euid: int) -> tuple[str, str] | None:
    """What makes a file of this ``st_mode`` and ``st_uid`` unsafe to configure a process whose
    effective user is ``euid``, and the command that fixes it (without the file name); None when
    nothing does.

    A file its group or others can write lets them change what sixdim does as whoever runs it: root,
    for a system daemon, which then runs the ``command`` workload's commands.  For a root process, a
    file another user owns is the same, as its owner can rewrite it, or make it writable, at will.
    A pure function of the three numbers, so the root-only rule is tested without being root."""
    writable = mode & 0o022
    if writable:
        who = {0o020: "its group", 0o002: "others", 0o022: "its group and others"}[writable]
        return f"mode {stat.S_IMODE(mode):04o}: {who} can write it", "chmod go-w"
    if euid == 0 and owner != 0:
        return f"owned by {_user_name(owner)}, not root, while sixdim runs as root: that user can rewrite it", \
            "chown root"
    return None


def _user_name(uid: int) -> str:
    """``name (uid N)``, or ``uid N`` for a number no account has."""
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def check_permissions(path: str, status: os.stat_result, role: str, *, insecure: bool = False,
                      euid: int | None = None) -> None:
    """Refuse (:class:`ConfigError`) a file other users can change, or with ``insecure`` (the escape
    hatch) log the same text as a warning and go on.  ``status`` is the ``fstat`` of the open file,
    so what is checked is what is read; ``role`` says why the file matters; ``euid`` defaults to
    the process's (a parameter so the root-only rule can be tested as any user)."""
    if euid is None:
        euid = os.geteuid() if hasattr(os, "geteuid") else -1
    found = permission_problem(status.st_mode, status.st_uid, euid)
    if found is None:
        return
    problem, fix = found
    error = ConfigError(path, "(permissions)", f"a file no other user can change, as {role}",
                        detail=f"{problem}; fix: {fix} {shlex.quote(path)}, or accept the risk with "
                        f"{INSECURE_PERMISSIONS_FLAG} or {INSECURE_PERMISSIONS_ENV}=true")
    if not insecure:
        raise error
    log.warning("%s; loaded anyway, as %s (or %s) says", error, INSECURE_PERMISSIONS_FLAG, INSECURE_PERMISSIONS_ENV)


FOLDER_ROLES = {
    "agent.state_dir": "it holds the worker records whose processes sixdim kills and whose results it records",
    "agent.history": "it holds the history sixdim writes and exports, and its lock",
}
"""Why the state folder and the history's folder must be safe from other users."""


def folder_problem(folder: str | Path, euid: int) -> tuple[Path, str, str] | None:
    """What makes ``folder`` unsafe to keep the state or the history of a process whose effective user is
    ``euid`` in: the folder found wanting, the problem and the command that fixes it; None when nothing does.

    The folder itself (or, where it does not exist yet, the folder it would be made in) must be one that
    neither its group nor others can write, even with a sticky bit (others could add a forged worker
    record, or a link where a lock or history file goes); each folder above it one that others cannot
    write unless it has the sticky bit (``/tmp``: there others cannot rename or remove what is not
    theirs); and every one of them owned by root or by ``euid`` (its owner can change it at will).  The
    rule for the folder itself is :func:`permission_problem`'s for the configuration file.  Symbolic
    links in the path are resolved, so the folders judged are those used.  A folder that cannot be
    looked at, or a part of the path that is a file, is not judged here: using it says why."""
    path = Path(os.path.realpath(folder))
    first = True
    missing = False
    for part in (path, *path.parents):
        try:
            status = os.stat(part)
        except FileNotFoundError:
            missing = True
            continue  # made later, 0700, in the first folder that exists: judged as the folder itself
        except OSError:
            return None
        if not stat.S_ISDIR(status.st_mode):
            return None
        if status.st_uid not in (0, euid):
            who = "root" if euid == 0 else f"root or {_user_name(euid)}"
            return part, f"owned by {_user_name(status.st_uid)}, not {who}: that user can change it", \
                f"chown {'root' if euid == 0 else euid}"
        writable = status.st_mode & (0o022 if first else 0o002)
        if writable and (first or not status.st_mode & stat.S_ISVTX):
            found = permission_problem(status.st_mode, status.st_uid, euid)
            if found is not None and first and missing:  # /tmp/new: another user could make it first
                return path, (f"it does not exist yet, and {part} ({found[0].split(':')[0]}) lets other users "
                              "make it before sixdim does"), "mkdir -m 0700 -p"
            if found is not None:
                return part, found[0].replace("write it", "write in it"), "chmod go-w" if first else "chmod o-w"
        first = False
    return None


def check_folders(values: dict[str, Any], sources: dict[str, str], euid: int | None = None) -> None:
    """Refuse (:class:`ConfigError`, one line) a state folder or history folder that another user can change
    (:func:`folder_problem`): there, a local user could forge a worker record and make a root daemon kill
    any process at its next start and record a forged result, or plant a link where a lock file goes.
    Checked at every load, before anything is made in them; no escape hatch: choose another folder."""
    if euid is None:
        euid = os.geteuid() if hasattr(os, "geteuid") else -1
    if euid < 0:
        return
    folders = (("agent.state_dir", Path(values["state_dir"])), ("agent.history", Path(values["history"]).parent))
    for key, folder in folders:
        found = folder_problem(folder, euid)
        if found is None:
            continue
        part, problem, fix = found
        named = "" if part == Path(os.path.realpath(folder)) else f" (in {part})"
        raise ConfigError(sources.get(key, DEFAULT_SOURCE), key,
                          f"a folder no other user can change, as {FOLDER_ROLES[key]}",
                          detail=f"{folder}{named}: {problem}; fix: {fix} {shlex.quote(str(part))}, or choose "
                                 f"another folder")


def insecure_permissions_allowed(env: dict[str, str], flags: argparse.Namespace | None = None) -> bool:
    """The escape hatch: ``--insecure-config-permissions`` (``--no-...`` to override a variable), else
    ``SIXDIM_INSECURE_CONFIG_PERMISSIONS`` (true or false, as every boolean variable); off by default."""
    flag = getattr(flags, "insecure_config_permissions", None) if flags is not None else None
    if flag is not None:
        return bool(flag)
    if INSECURE_PERMISSIONS_ENV not in env:
        return False
    try:
        return parse_bool(env[INSECURE_PERMISSIONS_ENV])
    except ValueError:
        raise ConfigError(f"environment variable {INSECURE_PERMISSIONS_ENV}", "insecure_config_permissions",
                          "true or false", env[INSECURE_PERMISSIONS_ENV]) from None


def add_insecure_permissions_flag(parser: argparse.ArgumentParser, dest: str = "insecure_config_permissions") -> None:
    """``--insecure-config-permissions`` (every command that reads a configuration file): not an
    :data:`OPTIONS` entry, as it has no key in the file."""
    parser.add_argument(INSECURE_PERMISSIONS_FLAG, dest=dest,
                        action=argparse.BooleanOptionalAction, default=None,
                        help="load a configuration file (--config; for serve also --web.config.file and its client "
                             "CA file) that "
                             "users other than its owner can change, or that a user other than root owns while "
                             "sixdim runs as root, with a warning instead of refusing it (default: refuse: such "
                             f"a user could make sixdim run their commands) [{INSECURE_PERMISSIONS_ENV}; "
                             "deliberately no key in the file, which cannot vouch for itself]")


# --------------------------------------------------------------------------- loader

def add_option_flags(parser: argparse.ArgumentParser, keys: tuple[str, ...] | None = None) -> None:
    """Add the schema's flags to a parser (all of them, or those whose keys are given)."""
    group = parser.add_argument_group("options (each also a SIXDIM_* variable and a key in the TOML file)")
    for opt in OPTIONS:
        if keys is not None and opt.key not in keys:
            continue
        if opt.parse is parse_bool:
            group.add_argument(opt.flag, dest=opt.dest, action=argparse.BooleanOptionalAction, default=None,
                               help=f"{opt.help} [{opt.env}; {opt.key}]")
        else:
            group.add_argument(opt.flag, dest=opt.dest, default=None, metavar=opt.dest.split("_", 1)[-1].upper(),
                               help=f"{opt.help} [{opt.env}; {opt.key}]")


def load(config_path: str | None = None, *, env: dict[str, str] | None = None,
         flags: argparse.Namespace | None = None) -> Config:
    """Build the configuration from defaults, file, environment and flags (in that order)."""
    env = dict(os.environ) if env is None else env
    insecure = insecure_permissions_allowed(env, flags)
    config_path = config_path or env.get("SIXDIM_CONFIG") or None
    if config_path:
        source = str(config_path)
        document = _read_toml_file(Path(config_path), insecure_permissions=insecure)
    else:
        source = EMBEDDED_SOURCE
        document = tomllib.loads(resources.files("sixdim").joinpath("default.toml").read_text())

    unknown = set(document) - _SECTIONS
    if unknown:
        raise ConfigError(source, sorted(unknown)[0], "one of the sections " + ", ".join(sorted(_SECTIONS)),
                          detail="unknown top-level key")
    for section in ("agent", "guard", "regression"):
        if section in document and not isinstance(document[section], dict):
            raise ConfigError(source, section, "a table", document[section])
        known = {o.key.split(".", 1)[1] for o in OPTIONS if o.key.startswith(section + ".")}
        known |= {"effects"} if section == "regression" else set()
        for key in document.get(section, {}):
            if key not in known:
                raise ConfigError(source, f"{section}.{key}", "one of " + ", ".join(sorted(known)),
                                  detail="unknown key")

    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for opt in OPTIONS:
        section, name = opt.key.split(".", 1)
        raw, where = None, None
        if name in document.get(section, {}):
            raw, where = document[section][name], source
        if opt.env in env:
            raw, where = env[opt.env], f"environment variable {opt.env}"
        flag_value = getattr(flags, opt.dest, None) if flags is not None else None
        if flag_value is not None:
            raw, where = flag_value, f"command-line flag {opt.flag}"
        if where is None:
            values[opt.field] = opt.default(env)
            sources[opt.key] = DEFAULT_SOURCE
            continue
        sources[opt.key] = where
        try:
            values[opt.field] = opt.parse(raw)
        except (ValueError, TypeError, OverflowError):
            raise ConfigError(where, opt.key, opt.expected, raw) from None

    if values["regression_min_baseline"] > values["regression_window"]:
        where = sources["regression.min_baseline"]
        expected = f"at most regression.window ({values['regression_window']})"
        raise ConfigError(where, "regression.min_baseline", expected, values["regression_min_baseline"])
    values["regression_effects"] = _effects(document.get("regression", {}).get("effects", {}), source)
    if "suites" in document:
        suites = _parse_suites(document["suites"], source)
    else:
        defaults = tomllib.loads(resources.files("sixdim").joinpath("default.toml").read_text())
        suites = _parse_suites(defaults["suites"], EMBEDDED_SOURCE)
    check_folders(values, sources)
    return Config(suites=suites, source=source, sources=sources, insecure_config_permissions=insecure,
                  **values)


def _effects(table: Any, source: str) -> dict[str, float]:
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


MAX_CONFIG_BYTES = 2**20
"""The largest configuration file read (1 MiB): a real one is a few kilobytes.  Checked on the bytes,
before the TOML is parsed."""
MAX_WORKLOAD_ENTRIES = 1000
"""The most workload entries a configuration's suites may hold in all (a preset counts as its
workloads, a suite as one at least): a real configuration has tens.  Checked on the parsed document
before any entry is validated, which costs about 0.15 ms each to load and 1 ms to ``serve --check-config``
(10^4 entries took 9.6 s there, 10^6 ran for minutes: docs/ARCHITECTURE.md, Configuration)."""
def _read_toml_file(path: Path, *, insecure_permissions: bool = False) -> dict[str, Any]:
    """The file's TOML document.  Only a regular file is read (:func:`open_regular`: a FIFO at the path
    would make the daemon wait for a writer, deaf to SIGTERM; a device would be read without end), and
    at most :data:`MAX_CONFIG_BYTES` of it.  Its permissions are checked on the open file (``fstat``),
    so the file checked is the file read, whatever replaces the name meanwhile."""
    try:
        with open_regular(path) as handle:
            check_permissions(str(path), os.fstat(handle.fileno()), CONFIG_FILE_ROLE,
                              insecure=insecure_permissions)
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(str(path), "(file)", "an existing TOML file", detail="no such file") from None
    except NotARegularFile as exc:
        raise ConfigError(str(path), "(file)", "a regular TOML file", detail=f"it is {exc.kind}; {READ_ONLY_REGULAR}") \
            from None
    except OSError as exc:
        raise ConfigError(str(path), "(file)", "a readable TOML file", detail=exc.strerror or str(exc)) from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(str(path), "(file)", f"a TOML file of at most {MAX_CONFIG_BYTES // 2**20} MiB",
                          detail="file too large")
    try:
        text = data.decode("utf-8")  # TOML is UTF-8, whatever the locale says
    except UnicodeDecodeError as exc:
        raise ConfigError(str(path), "(encoding)", "UTF-8 text (TOML files are UTF-8)",
                          detail=f"byte 0x{data[exc.start]:02x} at offset {exc.start} is not UTF-8") from None
    return parse_toml(text, str(path))


def parse_toml(text: str, source: str) -> dict[str, Any]:
    """A TOML document, or ConfigError: bad syntax, nesting too deep for the parser (tomllib recurses
    once per level: ``x = [[[[...]]]]`` 100,000 deep is a RecursionError), or an integer longer than
    Python reads (4,300 digits: a ValueError that is not a TOMLDecodeError)."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, "(syntax)", "valid TOML", detail=str(exc)) from None
    except RecursionError:
        raise ConfigError(source, "(syntax)", "valid TOML", detail="arrays or tables nested too deeply") from None
    except ValueError:  # int("9" * 5000): past Python's integer digit limit
        limit = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 4300
        raise ConfigError(source, "(syntax)", "valid TOML",
                          detail=f"a number of more than {limit} digits") from None


_SUITE_KEYS = {"name", "workloads", "preset", "interval_seconds", "cron", "devices", "timeout_seconds",
               "misfire_grace_seconds", "run_at_start", "export", "on_change", "confirm_per_hour"}
MAX_CONFIRM_PER_HOUR = 60
"""The most confirmation runs a suite may ask for per device and hour (one a minute)."""
EXPORTS = ("summary", "shapes")


def _workload_entries(raw: list) -> int:
    """The workload entries of ``[[suites]]`` as written, counted without validating any: a preset
    counts as its workloads, and every suite as one at least (a suite with none is an error later)."""
    count = 0
    for table in raw:
        if not isinstance(table, dict):
            count += 1
        elif isinstance(table.get("workloads"), list):
            count += max(1, len(table["workloads"]))
        else:
            preset = table.get("preset")
            count += len(registry.SUITES[preset]) if isinstance(preset, str) and preset in registry.SUITES else 1
    return count


def _parse_suites(raw: Any, source: str) -> tuple[Suite, ...]:
    if not isinstance(raw, list):
        raise ConfigError(source, "suites", "an array of tables ([[suites]])", raw)
    entries = _workload_entries(raw)
    if entries > MAX_WORKLOAD_ENTRIES:  # before any is validated: that is what costs (0.15 ms each)
        raise ConfigError(source, "suites", f"at most {MAX_WORKLOAD_ENTRIES:,} workload entries in all suites",
                          detail=f"it has {entries:,}; the limit is far above any real configuration")
    suites: list[Suite] = []
    names: set[str] = set()
    for i, table in enumerate(raw):
        where = f"suites[{i}]"
        if not isinstance(table, dict):
            raise ConfigError(source, where, "a table", table)
        for key in table:
            if key not in _SUITE_KEYS:
                raise ConfigError(source, f"{where}.{key}", "one of " + ", ".join(sorted(_SUITE_KEYS)),
                                  detail="unknown key")
        name = table.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(source, f"{where}.name", "a non-empty string", name)
        if name in names:  # a set: a list of names compared with each suite's was quadratic
            raise ConfigError(source, f"{where}.name", "a name no other suite has", name)
        names.add(name)
        if ("preset" in table) == ("workloads" in table):
            raise ConfigError(source, where, "exactly one of preset (" + ", ".join(registry.SUITES)
                              + ") or workloads")
        if "preset" in table:
            if table["preset"] not in registry.SUITES:
                raise ConfigError(source, f"{where}.preset", "one of " + ", ".join(registry.SUITES), table["preset"])
            workloads = preset_entries(table["preset"])
        else:
            workloads = _parse_workloads(table.get("workloads"), source, f"{where}.workloads")
        interval = _seconds(table, "interval_seconds", source, where, None)
        cron = _cron(table.get("cron"), source, f"{where}.cron")
        if (interval is None) == (cron is None):
            raise ConfigError(source, where, "exactly one of interval_seconds or cron")
        suites.append(Suite(
            name=name,
            workloads=workloads,
            interval_seconds=interval,
            cron=cron,
            devices=_devices(table.get("devices", ["auto"]), source, f"{where}.devices"),
            timeout_seconds=_seconds(table, "timeout_seconds", source, where, DEFAULT_TIMEOUT_SECONDS),
            timeout_given="timeout_seconds" in table,
            misfire_grace_seconds=_seconds(table, "misfire_grace_seconds", source, where, 300.0),
            run_at_start=_bool_key(table, "run_at_start", source, where, None),
            export=_export(table.get("export", "summary"), source, f"{where}.export"),
            on_change=bool(_bool_key(table, "on_change", source, where, False)),
            confirm_per_hour=_count_key(table, "confirm_per_hour", source, where, 0, MAX_CONFIRM_PER_HOUR),
        ))
    return tuple(suites)


def case_timeout(seconds: float, device_type: str, given: bool, root: str = "/") -> tuple[float, str]:
    """The per-case timeout a run uses, and how it was reached.

    A timeout that was given (``--timeout``, or the suite's ``timeout_seconds``) is used as it is, as is
    the default on a GPU.  The default on the CPU is ``seconds`` times the host's load factor,
    ``1 + load / threads`` (at most 10; :func:`sixdim.collectors.host.cpu_load_factor`), where ``threads``
    is what the worker gives torch (:func:`sixdim.collectors.host.cpu_threads`): as long as on an idle
    host, ten times as long at the most, so a CPU run on a busy host is not stopped for sharing it."""
    if given:
        return seconds, "given"
    if device_type != "cpu":
        return seconds, "the default"
    from sixdim.collectors.host import cpu_load_factor, cpu_threads

    threads, _ = cpu_threads(root)
    factor, why = cpu_load_factor(threads, root)
    return seconds * factor, f"the default {seconds:g} s x {factor:.2f} for the CPU's {why}"


def _export(value: Any, source: str, where: str) -> str:
    if value not in EXPORTS:
        raise ConfigError(source, where, "one of " + ", ".join(EXPORTS), value)
    return value


def preset_entries(preset: str) -> tuple[WorkloadEntry, ...]:
    """The workloads of a built-in suite (a name of :data:`sixdim.workloads.registry.SUITES`)."""
    return tuple(WorkloadEntry(name, dict(params)) for name, params in registry.SUITES[preset])


def default_run_at_start(cron: str | None) -> bool:
    """A suite with a cron schedule waits for its time; one with an interval runs at once."""
    return cron is None


def _seconds(table: dict, key: str, source: str, where: str, default: float | None) -> float | None:
    """A positive, finite number of seconds, :data:`MIN_SECONDS` to :data:`MAX_SECONDS`.  NaN is refused by name:
    it compares false with everything, so ``timeout_seconds = nan`` would silently mean no timeout.
    (The range is checked before ``isfinite``, which raises OverflowError on a 400-digit integer.)"""
    if key not in table:
        return default
    value = table[key]
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not MIN_SECONDS <= value <= MAX_SECONDS
            or not math.isfinite(value)):
        raise ConfigError(source, f"{where}.{key}", f"a positive, finite number of seconds, from {MIN_SECONDS} "
                          f"to {MAX_SECONDS} (365 days)", value)
    return float(value)


def _count_key(table: dict, key: str, source: str, where: str, default: int, most: int) -> int:
    """A whole number from 0 to ``most``."""
    if key not in table:
        return default
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
        raise ConfigError(source, f"{where}.{key}", f"a whole number from 0 to {most}", value)
    return value


def _bool_key(table: dict, key: str, source: str, where: str, default: bool | None) -> bool | None:
    if key not in table:
        return default
    value = table[key]
    if not isinstance(value, bool):
        raise ConfigError(source, f"{where}.{key}", "true or false", value)
    return value


def _cron(value: Any, source: str, key: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(source, key, "a crontab expression such as '0 3 * * *'", value)
    if source == EMBEDDED_SOURCE:
        # the embedded default's lines are checked by its tests (tests/test_config.py), not at every load:
        # the commands that only read the configuration (``sixdim report``) never import APScheduler
        return value
    from apscheduler.triggers.cron import CronTrigger  # deferred: only suites with cron need it

    try:
        CronTrigger.from_crontab(value)
    except ValueError as exc:
        raise ConfigError(source, key, "a crontab expression such as '0 3 * * *'", value, detail=str(exc)) from None
    return value


def _devices(value: Any, source: str, key: str) -> tuple[str, ...]:
    expected = "a list of 'auto', 'cpu' or 'cuda:N'"
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise ConfigError(source, key, expected, value)
    for item in value:
        if not isinstance(item, str) or not is_device_selector(item):
            raise ConfigError(source, key, expected, item)
    return tuple(value)


def is_device_selector(text: str) -> bool:
    """'auto', 'cpu' or 'cuda:N', N an index of at most 4 ASCII digits (``str.isdigit`` alone takes
    '²' and '٣', which ``int`` then refuses or reads as another number)."""
    if text in {"auto", "cpu"}:
        return True
    prefix, _, index = text.partition(":")
    return prefix == "cuda" and 1 <= len(index) <= 4 and index.isascii() and index.isdigit()


def _parse_workloads(value: Any, source: str, key: str) -> tuple[WorkloadEntry, ...]:
    expected = "a non-empty list of workload names or {name = ..., params = {...}} tables"
    if not isinstance(value, list) or not value:
        raise ConfigError(source, key, expected, value)
    entries = []
    for i, item in enumerate(value):
        item_key = f"{key}[{i}]"
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ConfigError(source, item_key, expected, item)
        extra = set(item) - {"name", "params"}
        if extra:
            raise ConfigError(source, f"{item_key}.{sorted(extra)[0]}", "only name and params", detail="unknown key")
        try:
            spec = registry.get(item["name"])
        except registry.UnknownWorkloadError as exc:
            raise ConfigError(source, f"{item_key}.name", "a workload listed by 'sixdim list'", item["name"],
                              detail=str(exc)) from None
        params = item.get("params", {})
        if not isinstance(params, dict):
            raise ConfigError(source, f"{item_key}.params", "a table of parameter values", params)
        try:
            spec.cases(params, "cpu")
        except ParamError as exc:
            raise ConfigError(source, f"{item_key}.params", "valid parameters", detail=str(exc)) from None
        entries.append(WorkloadEntry(item["name"], dict(params)))
    return tuple(entries)
