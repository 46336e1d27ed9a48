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
no history, no port, no worker, no CUDA context, so it is safe beside a running daemon.  The
systemd unit runs it before each reload, so ``systemctl reload sixdim`` fails with the error.
"""

from __future__ import annotations

from datetime import datetime, timezone

from sixdim.collectors.host import RaplReader
from sixdim.collectors.nvml import NvmlCollector
from sixdim.config import DEFAULT_SOURCE, Config, ConfigError
from sixdim.daemon.series import SeriesCount, count_series
from sixdim.daemon.serve import load_web_config
from sixdim.run import devices
from sixdim.run.scheduler import suite_trigger
from sixdim.workloads import registry
from sixdim.workloads.spec import ParamError


def check(config: Config, nvml: NvmlCollector | None = None) -> list[str]:
    """What ``serve`` would run with ``config``, one line per fact; raises :class:`ConfigError`
    (or :class:`sixdim.run.devices.DeviceError`) naming what it would refuse.  ``nvml``: the host's GPUs
    (made here when None)."""
    web = load_web_config(config)
    nvml = nvml or NvmlCollector(config.hostname)
    host, port = config.listen_address
    lines = [f"configuration: {config.source}",
             f"listen:        {host or '0.0.0.0'}:{port}, {_web_summary(web)}",
             f"history:       {config.history}",
             f"state:         {config.state_dir}",
             f"hostname:      {config.hostname}"]
    now = datetime.now(timezone.utc)
    where: list[list[devices.Device]] = []
    for index, suite in enumerate(config.suites):
        found = devices.resolve(suite.devices, nvml, where=f"{config.source}: suites[{index}].devices")
        where.append(found)
        counts = {device.name: _count_cases(config, index, device.type) for device in found}
        lines.append(f"suite {suite.name}: {_when(suite, now)}; {_plural(len(suite.workloads), 'workload')}, "
                     f"{_where(counts)}; timeout {suite.timeout_seconds:g} s per case; export {suite.export}")
    rapl = RaplReader()
    series = count_series(config.suites, where, devices.host_gpus(nvml),
                          rapl_domains=len(rapl.read()) if rapl.available else 0)
    check_budget(config, series)
    return lines[:5] + series.lines(config.series_budget) + lines[5:]  # the count, then each suite


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
