"""The ``[[suites]]`` tables: each suite's workloads (a preset or a list, every entry's parameters checked
against its workload), schedule (an interval or a cron line), devices, timeouts and options, and the
per-case timeout a run then uses (:func:`case_timeout`)."""

from __future__ import annotations

import math
from typing import Any, overload

from sixdim.config.schema import (
    DEFAULT_TIMEOUT_SECONDS,
    EMBEDDED_SOURCE,
    MAX_SECONDS,
    MIN_SECONDS,
    ConfigError,
    Suite,
    WorkloadEntry,
)
from sixdim.workloads import registry
from sixdim.workloads.spec import ParamError

MAX_WORKLOAD_ENTRIES = 1000
"""The most workload entries a configuration's suites may hold in all (a preset counts as its
workloads, a suite as one at least): a real configuration has tens.  Checked on the parsed document
before any entry is validated, which costs about 0.15 ms each to load and 1 ms to ``serve --check-config``
(10^4 entries took 9.6 s there, 10^6 ran for minutes: docs/ARCHITECTURE.md, Configuration)."""


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


def parse_suites(raw: Any, source: str) -> tuple[Suite, ...]:
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



@overload
def _seconds(table: dict, key: str, source: str, where: str, default: float) -> float: ...
@overload
def _seconds(table: dict, key: str, source: str, where: str, default: None) -> float | None: ...
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
