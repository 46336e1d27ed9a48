"""``sixdim serve --check-config``: load the configuration as the daemon would, start nothing.

An operator who edits ``/etc/sixdim/sixdim.toml`` wants to know before ``systemctl reload`` whether
the running agent will take it: a SIGHUP with a bad file is only logged (the running configuration
stays).  This loads what ``serve`` loads, in the same order and with the same checks (the file with
its permissions, the ``SIXDIM_*`` variables and the flags; the web configuration file with its
certificates, keys and client CA; every suite's devices through NVML), and goes one step further
than start-up can afford to: it expands every workload's cases for the device types each suite will
really run on (the loader expands them for the CPU), and counts the Prometheus series they export on this
host against the series budget (``agent.series_budget``; :mod:`sixdim.daemon.series`).  Nothing is started
or taken: no lock,
no history written (it is read read-only, if there is one), no port, no worker, no CUDA context, so it is safe
beside a running daemon.  The
systemd unit runs it before each reload, so ``systemctl reload sixdim`` fails with the error.

It also says what watching costs (:mod:`sixdim.daemon.cost`): for each suite, its runs an hour and the device
time of one run on each of its devices, from the history's recorded case times where it has some (read
read-only, as the reports read it: a missing history is simply no recorded times) and otherwise from the
estimate per case; then the schedule's share of each device's hour.  On a host without a GPU it adds the
same schedule's estimate on an H100-class GPU, said to be one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path

from sixdim.collectors.host import RaplReader
from sixdim.collectors.nvml import NvmlCollector
from sixdim.config import Config, ConfigError, Suite
from sixdim.config.schema import DEFAULT_SOURCE
from sixdim.config.suites import case_timeout
from sixdim.daemon import cost
from sixdim.daemon.series import SeriesCount, count_series
from sixdim.daemon.serve import load_web_config, open_files_limits, planned_devices
from sixdim.http.server import connection_cap, open_files, reserve_for
from sixdim.run import devices
from sixdim.run.scheduler import suite_trigger
from sixdim.store import reader
from sixdim.store.errors import HistoryError
from sixdim.workloads import registry
from sixdim.workloads.spec import ParamError


def check(config: Config, nvml: NvmlCollector | None = None) -> list[str]:
    """What ``serve`` would run with ``config``, one line per fact; raises :class:`ConfigError`
    (or :class:`sixdim.run.devices.DeviceError`) naming what it would refuse.  ``nvml``: the host's GPUs
    (made here when None)."""
    web = load_web_config(config)
    check_writable(config)
    nvml = nvml or NvmlCollector(config.hostname)
    host, port = config.listen_address
    lines = [f"configuration: {config.source}",
             f"listen:        {host or '0.0.0.0'}:{port}, {_web_summary(web)}",
             f"history:       {config.history}",
             f"state:         {config.state_dir}",
             f"hostname:      {config.hostname}",
             ""]  # the connection cap, once the devices are known
    now = datetime.now(timezone.utc)
    where: list[list[devices.Device]] = []
    for index, suite in enumerate(config.suites):
        found = devices.resolve(suite.devices, nvml, where=f"{config.source}: suites[{index}].devices")
        where.append(found)
        counts = {device.name: _count_cases(config, index, device.type) for device in found}
        lines.append(f"suite {suite.name}: {_when(suite, now)}; {_plural(len(suite.workloads), 'workload')}, "
                     f"{_where(counts)}; {_timeouts(suite, found)}; export {suite.export}")
    reserve = reserve_for(planned_devices([(suite, found) for suite, found in zip(config.suites, where)]))
    lines[5] = (f"connections:   {connection_cap(open_files_limits()[1], open_files(), reserve).describe()} "
                "(estimated here; serve logs its own)")
    rapl = RaplReader()
    gpus = devices.host_gpus(nvml)
    series = count_series(config.suites, where, gpus, rapl_domains=len(rapl.read()) if rapl.available else 0)
    check_budget(config, series)
    costs = cost_lines(config, where, first_gpu=min((gpu.index or 0 for gpu in gpus), default=0),
                       cpu_power=rapl.available, now=now)
    return lines[:6] + series.lines(config.series_budget) + lines[6:] + costs  # the count, each suite, the cost


def cost_lines(config: Config, where: list[list[devices.Device]], *, first_gpu: int = 0, cpu_power: bool = False,
               now: datetime | None = None) -> list[str]:
    """What the schedule costs: a line per suite (runs an hour, device time a run, confirmation runs' bound,
    runs on a change), on a host without a GPU a line with the schedule's estimate on an H100-class GPU,
    and last the schedule's share of each device's hour.  ``where``: each suite's devices; ``first_gpu``:
    the GPU a host-wide workload runs from; ``cpu_power``: the CPU has an energy counter (so power phases run).

    The share counts the scheduled runs only.  A confirmation run is not scheduled: it follows a suspicious
    series, at most ``confirm_per_hour`` an hour, so its bound (that many runs of the suite's most expensive
    case, alone) is shown beside the share, not in it; runs on a change (``on_change``) are rarer still and
    named, not counted."""
    now = now or datetime.now(timezone.utc)
    recorded, note = _recorded_times(config, where)
    hour: dict[str, float] = {}
    bound: dict[str, float] = {}
    lines: list[str] = []
    for index, (suite, found) in enumerate(zip(config.suites, where)):
        rate = cost.runs_per_hour(suite, now)
        runs: dict[str, cost.RunCost] = {}
        worst: dict[str, float] = {}
        for device in found:
            model = cost.model_for(device.type)
            power = device.type == "cuda" or cpu_power
            planned = cost.planned_cases(suite, device.type, first_gpu=device.index in (None, first_gpu))
            runs[device.name] = cost.run_cost(planned, model, power_counter=power,
                                              recorded=recorded.get((index, device.name)))
            worst[device.name] = cost.confirmation_seconds(runs[device.name], planned, model, power_counter=power)
            hour[device.name] = hour.get(device.name, 0.0) + rate * runs[device.name].seconds
            bound[device.name] = bound.get(device.name, 0.0) + suite.confirm_per_hour * worst[device.name]
        lines.append(_suite_cost_line(suite, rate, runs, worst, note))
    if not any(device.type == "cuda" for found in where for device in found):
        lines += _gpu_estimate(config, now)
    if hour:
        gpu = any(device.type == "cuda" for found in where for device in found)
        lines.append(f"schedule: about {_span_of(hour.values(), _seconds)} of each device's hour "
                     f"({_span_of(hour.values(), _share)})" + _bound_note(hour, bound)
                     + (f"; {_worker_start()}" if gpu else ""))
    return lines


def _recorded_times(config: Config, where: list[list[devices.Device]]
                    ) -> tuple[dict[tuple[int, str], dict[cost.CaseKey, list[float]]], str]:
    """Each (suite, device)'s cases' recent device times from the history, read-only, and a note when the
    history could not be read (a missing file is no note: nothing has run yet)."""
    times: dict[tuple[int, str], dict[cost.CaseKey, list[float]]] = {}
    try:
        with reader.reading(config.history) as db:
            for index, (suite, found) in enumerate(zip(config.suites, where)):
                for device in found:
                    keys = [cost.case_key(spec, case) for spec, case in cost.planned_cases(suite, device.type)]
                    key = (config.hostname, device.type, "" if device.index is None else str(device.index),
                           device.uuid)
                    times[(index, device.name)] = reader.case_times(db, suite.name, key, keys, cost.RECORDED_RUNS)
    except HistoryError as exc:
        return {}, "" if "no such file" in str(exc) else f"; the history was not read ({exc})"
    return times, ""


def _suite_cost_line(suite: Suite, rate: float, runs: dict[str, cost.RunCost], worst: dict[str, float],
                     note: str) -> str:
    """One suite's cost line: device time a run on its devices (and where it comes from), runs an hour, the
    confirmation runs' bound and the runs on a change."""
    names = ", ".join(runs)
    cases = sum(len(run.cases) for run in runs.values())
    recorded = sum(run.recorded for run in runs.values())
    unknown = sum(run.unknown for run in runs.values())
    if recorded == cases:
        source = f"recorded: the median of each case's last {cost.RECORDED_RUNS} runs"
    elif recorded:
        source = f"recorded for {recorded} of {cases} cases, estimated per case for the rest"
    else:
        source = "estimated per case: no recorded runs"
    if unknown:
        source += f"; {_plural(unknown, 'case')} with neither, not counted"
    each = "each of " if len(runs) > 1 else ""
    seconds = [run.seconds for run in runs.values()]
    line = (f"suite {suite.name} costs about {_span_of(seconds, _seconds)} of device time a run on {each}{names} "
            f"({source}{note}); {_rate(rate)}: {_span_of([rate * s for s in seconds], _seconds)} an hour")
    if suite.confirm_per_hour:
        line += (f"; confirmation runs: at most {suite.confirm_per_hour} an hour x "
                 f"{_span_of(worst.values(), _seconds)} (its most expensive case alone) = "
                 f"{_span_of([suite.confirm_per_hour * w for w in worst.values()], _seconds)} an hour, "
                 f"not in the share")
    if suite.on_change:
        line += "; also at once after a version or setting change, not in the share"
    return line


def _gpu_estimate(config: Config, now: datetime) -> list[str]:
    """The schedule's estimate on an H100-class GPU (its suites that would run on a GPU there), one line."""
    model = cost.H100_NOW
    total = worst = 0.0
    parts = []
    for suite in config.suites:
        if all(selector == "cpu" for selector in suite.devices):
            continue
        planned = cost.planned_cases(suite, "cuda")
        run = cost.run_cost(planned, model, power_counter=True)
        rate = cost.runs_per_hour(suite, now)
        total += rate * run.seconds
        worst += suite.confirm_per_hour * cost.confirmation_seconds(run, planned, model, power_counter=True)
        parts.append(f"{suite.name} {_seconds(run.seconds)} a run, {_seconds(rate * run.seconds)} an hour")
    if not parts:
        return []
    return [f"schedule on {model.label}: about {_seconds(total)} of each GPU's hour ({_share(total)})"
            + _bound_note({"gpu": total}, {"gpu": worst}) + f": {'; '.join(parts)} ({model.source}); "
            + _worker_start()]


def _worker_start() -> str:
    """The part of a GPU run outside the device-time share, said beside it."""
    return (f"and each run's worker start-up besides, about {_seconds(cost.H100_WORKER_START_SECONDS)} on the "
            "H100 (the CUDA context and the libraries, before its first case: no benchmark kernel runs)")


def _bound_note(hour: dict[str, float], bound: dict[str, float]) -> str:
    if not any(bound.values()):
        return ""
    most = [hour[name] + bound.get(name, 0.0) for name in hour]
    return f"; at most {_span_of(most, _seconds)} ({_span_of(most, _share)}) with every confirmation run allowed"


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"


def _share(value: float) -> str:
    return f"{100 * value / cost.HOUR:.1f}%"


def _span_of(values: Iterable[float], show: Callable[[float], str]) -> str:
    """One figure where the devices agree (as shown), else the lowest and highest: ``31 s``, ``31 s-35 s``."""
    shown = list(dict.fromkeys(show(v) for v in sorted(values)))
    return shown[0] if len(shown) == 1 else f"{shown[0]}-{shown[-1]}"


def _rate(rate: float) -> str:
    """``4 runs an hour``, ``1 run an hour``, ``1/24 of a run an hour`` (a daily cron)."""
    if rate >= 1:
        return f"{rate:g} run{'' if rate == 1 else 's'} an hour" if rate == round(rate) else f"{rate:.2f} runs an hour"
    inverse = 1 / rate if rate else 0.0
    if rate and abs(inverse - round(inverse)) < 0.01:
        return f"1/{round(inverse)} of a run an hour"
    return f"{rate:.3g} runs an hour"


def check_budget(config: Config, series: SeriesCount) -> None:
    """Refuse a configuration that exports more series than ``agent.series_budget`` allows: one line
    naming the count, its per-shape share and the budget, and how to opt in."""
    if series.total <= config.series_budget:
        return
    where = config.sources.get("agent.series_budget", DEFAULT_SOURCE)
    source = config.source if where == DEFAULT_SOURCE else where
    set_by = "the default budget" if where == DEFAULT_SOURCE else "the budget set there"
    raise ConfigError(source, "agent.series_budget",
                      f"at least {series.total:,}, the Prometheus series this configuration exports on this host "
                      f"({series.per_shape:,} of them per shape: export = \"shapes\")", config.series_budget,
                      detail=f"{set_by}; export fewer suites per shape, or opt in by raising agent.series_budget, "
                             f"--series-budget or SIXDIM_SERIES_BUDGET")


def _count_cases(config: Config, index: int, device_type: str) -> int:
    """Every workload's cases on this device type; a parameter valid on the CPU but not on a GPU
    (or the reverse) is a :class:`ConfigError` naming the suite and the workload."""
    total = 0
    for position, entry in enumerate(config.suites[index].workloads):
        spec = registry.get(entry.name)
        try:
            total += len(spec.cases(entry.params, device_type))  # type: ignore[arg-type]
        except (ParamError, ValueError) as exc:
            raise ConfigError(config.source, f"suites[{index}].workloads[{position}].params",
                              f"parameters valid on {device_type}", detail=str(exc)) from None
    return total


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _timeouts(suite: Suite, found: list[devices.Device]) -> str:
    """The per-case timeout the daemon would use now on each kind of device the suite runs on (the CPU's default
    stretched by the host's load, as the scheduler stretches it: ``sixdim.config.suites.case_timeout``)."""
    told = []
    for kind in dict.fromkeys(device.type for device in found):
        seconds, why = case_timeout(suite.timeout_seconds, kind, suite.timeout_given)
        told.append(f"timeout {seconds:g} s per case" + (f" ({why})" if seconds != suite.timeout_seconds else "")
                    + (f" on {kind}" if len({d.type for d in found}) > 1 else ""))
    return "; ".join(told) or f"timeout {suite.timeout_seconds:g} s per case"


def _cannot_write(path: Path) -> str | None:
    """Why the daemon's user could not write ``path`` (or make it, where it does not exist: in the nearest folder
    that does), or None."""
    for part in (path, *path.parents):
        if not os.path.lexists(part):
            continue
        if not os.path.isdir(part) and part != path:
            return f"{part} is not a folder"
        if os.access(part, os.W_OK | (os.X_OK if os.path.isdir(part) else 0), effective_ids=True):
            return None
        verb = "write in" if os.path.isdir(part) else "write"
        made = "" if part == path else f" to make {path}"
        return f"this user ({os.geteuid()}) cannot {verb} {part}{made} (its mode or a read-only file system)"
    return None


def check_writable(config: Config) -> None:
    """Refuse (:class:`ConfigError`) what ``serve`` would refuse at start: a state folder it cannot make or write
    in, a history folder or history file it cannot write."""
    for key, path in (("agent.state_dir", Path(config.state_dir)), ("agent.history", Path(config.history).parent),
                      ("agent.history", Path(config.history))):
        if key == "agent.history" and path == Path(config.history) and not path.exists():
            continue
        problem = _cannot_write(path)
        if problem is not None:
            raise ConfigError(config.sources.get(key, DEFAULT_SOURCE), key,
                              "a folder (and history file) sixdim can write", detail=problem)


def _where(counts: dict[str, int]) -> str:
    """``52 cases on cpu``, ``52 cases on each of cuda:0, cuda:1``, or each device's own count."""
    if len(set(counts.values())) == 1:
        count = next(iter(counts.values()))
        return f"{_plural(count, 'case')} on {'each of ' if len(counts) > 1 else ''}{', '.join(counts)}"
    return ", ".join(f"{_plural(count, 'case')} on {name}" for name, count in counts.items())


def _when(suite, now: datetime) -> str:
    if suite.interval_seconds:
        schedule = f"every {suite.interval_seconds:g} s"
    else:
        schedule = f"cron '{suite.cron}' (UTC)"
    if suite.run_at_start:
        return f"{schedule}, first run at start"
    following = suite_trigger(suite).get_next_fire_time(None, now)
    return f"{schedule}, first run {following:%Y-%m-%d %H:%M:%S %Z}" if following else f"{schedule}, never runs"


def _web_summary(web) -> str:
    if web is None:
        return "plain HTTP, no authentication (no web configuration file)"
    tls = (f"TLS (min {web.min_version}, client certificates: {web.client_auth_type})" if web.tls
           else "plain HTTP")
    auth = f"basic auth ({len(web.auth.users)} user{'s' if len(web.auth.users) != 1 else ''})" if web.auth \
        else "no authentication"
    return f"{tls}, {auth}, from {web.source}"
