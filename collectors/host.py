"""Host telemetry: CPU, memory and load from psutil; CPU package energy from RAPL.

RAPL (``/sys/class/powercap/intel-rapl:N/energy_uj``, also used by AMD CPUs on
recent kernels) gives a CPU-only host a real power reading.  Its counter wraps
at ``max_energy_range_uj`` and is root-only on most kernels since 2020; where it
is absent or unreadable the host reports no energy rather than zero.

:func:`host_conditions` reads the host's snapshot conditions (``agent/core/conditions.py``, scope
``host``): the CPU governor and frequency, load per usable CPU, the cgroup's CPU quota and the CPUs
this process may use.  Each one it cannot read is left out, with the reason.

:class:`StallMeter` reads the kernel's pressure stall information (PSI): the cumulative microseconds
some task waited for CPU, memory or IO, host-wide (``/proc/pressure/*``) and in the cgroup v2 a
process runs in (its ``cpu.pressure``, ``memory.pressure``, ``io.pressure``).  Read at the start and
end of a case's span they give the share of the span that was stalled (the ``*_pressure_ratio``
window conditions, sixdim.run.telemetry).
"""

from __future__ import annotations

import errno
import logging
import math
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from sixdim.collectors.base import Availability, LogOnce, Sample
from sixdim.core import catalog
from sixdim.core.conditions import UNAVAILABLE

log = logging.getLogger(__name__)

POWERCAP_ROOT = Path("/sys/class/powercap")
_TOP_ZONE = re.compile(r"^intel-rapl:\d+$")  # top-level zones; subzones (core, uncore, dram) are intel-rapl:N:M
_PACKAGE_NAME = re.compile(r"^package-\d+(-die-\d+)?$")
"""A top-level zone is a CPU package (``package-N``, or ``package-N-die-M`` on a CPU of several dies
per package), or ``psys``, the whole platform on client machines, which already includes the
packages: summed with them it would count them twice."""


class RaplReader:
    """Wrap-corrected cumulative energy of each CPU package, joules since this reader started."""

    def __init__(self, root: Path = POWERCAP_ROOT):
        self._lock = threading.Lock()
        self._zones: dict[str, tuple[Path, int]] = {}
        self._last: dict[str, int] = {}
        self._total_uj: dict[str, int] = {}
        self._unreadable: list[str] = []
        """Package zones found but not readable at start: their energy is in no total."""
        self.reason = ""
        if not root.is_dir():
            self.reason = f"{root} does not exist (no RAPL powercap driver)"
            return
        for zone in sorted(root.iterdir()):
            if not _TOP_ZONE.match(zone.name):
                continue
            try:
                name = (zone / "name").read_text().strip()
                if not _PACKAGE_NAME.match(name):
                    log.debug("RAPL: %s is %r, not a CPU package: left out", zone, name)
                    continue
                max_range = int((zone / "max_energy_range_uj").read_text())
                first = int((zone / "energy_uj").read_text())
            except (OSError, ValueError) as exc:
                self.reason = f"{zone / 'energy_uj'} is not readable: {exc}"
                self._unreadable.append(zone.name)
                continue
            domain = name if name not in self._zones else f"{name}@{zone.name}"
            self._zones[domain] = (zone / "energy_uj", max_range)
            self._last[domain] = first
            self._total_uj[domain] = 0
        if not self._zones and not self.reason:
            self.reason = f"no RAPL package zone under {root}"

    @property
    def available(self) -> bool:
        return bool(self._zones)

    def read(self) -> dict[str, float]:
        """Joules per package domain since start; a counter wrap adds the zone's range.

        A zone that cannot be read now is left out of the answer rather than given its last
        total again: a stale total would read as "no energy spent since", a zero that was never
        measured.  Its next good read still adds everything since its last good one."""
        with self._lock:
            readings: dict[str, float] = {}
            for domain, (path, max_range) in self._zones.items():
                try:
                    raw = int(path.read_text())
                except (OSError, ValueError):
                    continue
                delta = raw - self._last[domain]
                if delta < 0:
                    delta += max_range
                self._total_uj[domain] += delta
                self._last[domain] = raw
                readings[domain] = self._total_uj[domain] / 1e6
            return readings

    def total_joules(self) -> float | None:
        """All packages together, or None where RAPL is unavailable or a package could not be read
        now: a sum over some packages would pass for the whole CPU's energy."""
        if not self.available or self._unreadable:
            return None
        readings = self.read()
        return sum(readings.values()) if len(readings) == len(self._zones) else None


class HostCollector:
    """CPU utilization, memory, load average and RAPL energy of this host."""

    name = "host"

    def __init__(self, hostname: str, rapl: RaplReader | None = None):
        self._hostname = hostname
        self.rapl = rapl if rapl is not None else RaplReader()
        psutil.cpu_percent(interval=None)  # prime: the next call reports utilization since now
        if self.rapl.total_joules() is None:  # absent, or some package unreadable: no total either way
            LogOnce(log).warning(f"RAPL energy unavailable: {self.rapl.reason}; CPU runs report no power")

    def availability(self) -> Availability:
        return Availability(True)

    def collect(self) -> list[Sample]:
        labels = {catalog.HOSTNAME: self._hostname}
        memory = psutil.virtual_memory()
        samples = [
            Sample(catalog.HOST_CPU, labels, psutil.cpu_percent(interval=None) / 100.0),
            Sample(catalog.HOST_MEMORY_USED, labels, float(memory.total - memory.available)),
            Sample(catalog.HOST_MEMORY_TOTAL, labels, float(memory.total)),
        ]
        for period, value in zip(("1m", "5m", "15m"), os.getloadavg()):
            samples.append(Sample(catalog.HOST_LOAD, {**labels, "period": period}, value))
        for domain, joules in (self.rapl.read() if self.rapl.available else {}).items():
            samples.append(Sample(catalog.HOST_RAPL_ENERGY, {**labels, "domain": domain}, joules))
        return samples


# ---------------------------------------------------------------------------- conditions

_CPU_DIR = "sys/devices/system/cpu"
_CGROUP_ROOT = "sys/fs/cgroup"
_CGROUP_V1_CPU = ("cpu,cpuacct", "cpu", "cpuacct,cpu")
"""Where cgroup v1 mounts the cpu controller under /sys/fs/cgroup (distributions differ)."""


def _why(path: Path, exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{path}: {exc.strerror}"
    return f"{path}: {type(exc).__name__}: {exc}"


def _usable_cpus() -> tuple[int | None, str]:
    try:
        return len(os.sched_getaffinity(0)), ""
    except AttributeError:
        return None, "os.sched_getaffinity is not available on this platform"
    except OSError as exc:
        return None, f"os.sched_getaffinity(0): {exc}"


def _cpu_frequency_hertz(root: Path, real: bool) -> tuple[float | None, str]:
    """The mean current CPU frequency: psutil's on this machine, else (a test's tree) the mean of
    every ``cpuN/cpufreq/scaling_cur_freq`` (kHz) under ``root`` - the same sysfs files psutil reads."""
    if real:
        try:
            freq = psutil.cpu_freq()
        except Exception as exc:  # psutil raises NotImplementedError or OSError where it cannot tell
            return None, f"psutil.cpu_freq(): {type(exc).__name__}: {exc}"
        if freq is None or not freq.current:
            return None, "psutil.cpu_freq() gives no current frequency here (no cpufreq, no 'cpu MHz')"
        return float(freq.current) * 1e6, ""
    files = sorted((root / _CPU_DIR).glob("cpu[0-9]*/cpufreq/scaling_cur_freq"))
    if not files:
        return None, f"{root / _CPU_DIR}/cpuN/cpufreq/scaling_cur_freq: no such file"
    khz: list[int] = []
    for path in files:
        try:
            khz.append(int(path.read_text().strip()))
        except (OSError, ValueError) as exc:
            return None, _why(path, exc)
    mean = sum(khz) / len(khz) * 1e3
    return (mean, "") if mean > 0 else (None, f"{files[0]}: reads 0")


def _load_per_cpu(root: Path, real: bool, cpus: int | None) -> tuple[float | None, str]:
    if cpus is None:
        cpus = os.cpu_count()
    if not cpus:
        return None, "the number of usable CPUs is unknown"
    if real:
        try:
            return os.getloadavg()[0] / cpus, ""
        except (AttributeError, OSError) as exc:
            return None, f"os.getloadavg(): {type(exc).__name__}: {exc}"
    path = root / "proc/loadavg"
    try:
        return float(path.read_text().split()[0]) / cpus, ""
    except (OSError, ValueError, IndexError) as exc:
        return None, _why(path, exc)


def _cgroup_paths(root: Path) -> tuple[str | None, str | None, str]:
    """(cgroup v2 path, cgroup v1 cpu controller path, why neither) from ``proc/self/cgroup``."""
    path = root / "proc/self/cgroup"
    try:
        text = path.read_text()
    except OSError as exc:
        return None, None, _why(path, exc)
    v2 = v1 = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, where = parts
        if hierarchy == "0" and controllers == "":
            v2 = where
        elif "cpu" in controllers.split(","):
            v1 = where
    return v2, v1, "" if (v2 or v1) else f"{path}: no cgroup v2 line and no v1 cpu controller"


def _levels(base: Path, cgroup: str) -> list[Path]:
    """The cgroup's directory and every parent up to the hierarchy's root, innermost first; a level
    missing here (the path as the host names it, seen from inside a container) is left out."""
    parts = [p for p in cgroup.split("/") if p and p != ".."]
    levels = [base.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]
    return [level for level in levels if level.is_dir()]


def _cpu_quota_cpus(root: Path) -> tuple[float | None, str]:
    """The tightest CPU quota (quota / period, in CPUs) on the process's cgroup or any parent.

    cgroup v2: ``cpu.max`` is "QUOTA PERIOD" or "max PERIOD" (no limit at that level).  cgroup v1,
    used only where v2 is not mounted at /sys/fs/cgroup: ``cpu.cfs_quota_us`` (-1 for no limit) over
    ``cpu.cfs_period_us``."""
    v2, v1, why = _cgroup_paths(root)
    base = root / _CGROUP_ROOT
    limits: list[float] = []
    problems: list[str] = []
    if v2 is not None and (base / "cgroup.controllers").is_file():
        levels = _levels(base, v2)
        for level in levels:
            path = level / "cpu.max"
            if not path.exists():
                continue  # the root cgroup has none, nor a cgroup without the cpu controller
            try:
                quota, period = path.read_text().split()
                if quota != "max":
                    limits.append(int(quota) / int(period))
            except (OSError, ValueError) as exc:
                problems.append(_why(path, exc))
        where = f"cpu.max from {levels[0] if levels else base / v2.lstrip('/')} up"
    elif v1 is not None:
        mount = next((base / name for name in _CGROUP_V1_CPU if (base / name).is_dir()), None)
        if mount is None:
            return None, f"cgroup v1 cpu controller is not mounted under {base}"
        levels = _levels(mount, v1)
        for level in levels:
            quota_path, period_path = level / "cpu.cfs_quota_us", level / "cpu.cfs_period_us"
            if not quota_path.exists():
                continue
            try:
                quota_us = int(quota_path.read_text())
                if quota_us > 0:
                    limits.append(quota_us / int(period_path.read_text()))
            except (OSError, ValueError) as exc:
                problems.append(_why(quota_path, exc))
        where = f"cpu.cfs_quota_us from {levels[0] if levels else mount} up"
    else:
        return None, why or f"no cgroup v2 hierarchy at {base} and no cgroup v1 cpu controller"
    if limits:
        return min(limits), ""
    if problems:
        return None, "; ".join(problems)
    return None, f"no CPU limit ({where})"


PRESSURE_RESOURCES: tuple[str, ...] = ("cpu", "memory", "io")
"""The resources the kernel reports pressure stalls for (``/proc/pressure/<resource>``)."""

STALL_CONDITIONS: dict[str, tuple[str, str]] = {
    **{f"{resource}_pressure_ratio": ("host", resource) for resource in PRESSURE_RESOURCES},
    **{f"cgroup_{resource}_pressure_ratio": ("cgroup", resource) for resource in PRESSURE_RESOURCES},
}
"""The window conditions :class:`StallMeter` gives the counters of (sixdim.core.conditions): name -> (host
or the worker's cgroup, resource)."""

_NO_PSI = {
    errno.ENOENT: "the kernel has no pressure stall information (before Linux 4.20, or built without CONFIG_PSI)",
    errno.EOPNOTSUPP: "pressure stall information is turned off (the kernel was booted with psi=0)",
}


def stall_seconds(path: Path) -> tuple[float | None, str]:
    """The seconds some task stalled on the resource of a PSI file (``/proc/pressure/cpu``, a cgroup's
    ``cpu.pressure``), cumulative since boot (or since the cgroup was made): its ``some`` line's ``total=``,
    in microseconds.  (None, why) where it cannot be read."""
    try:
        text = path.read_text()
    except OSError as exc:
        note = _NO_PSI.get(exc.errno or 0)
        return None, _why(path, exc) + (f" ({note})" if note else "")
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "some":
            for item in fields[1:]:
                if item.startswith("total="):
                    try:
                        return int(item[len("total="):]) / 1e6, ""
                    except ValueError:
                        break
    return None, f"{path}: no 'some ... total=' in {text.strip()[:80]!r}"


def cgroup2_mount(root: Path) -> Path | None:
    """Where cgroup v2 is mounted under ``root`` (``/sys/fs/cgroup``, or ``/sys/fs/cgroup/unified`` on a hybrid
    host), from ``proc/self/mountinfo``; else ``sys/fs/cgroup`` where it holds a v2 hierarchy; else None."""
    try:
        for line in (root / "proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            if right.split()[:1] == ["cgroup2"]:
                return root / left.split()[4].lstrip("/")
    except (OSError, IndexError):
        pass
    base = root / _CGROUP_ROOT
    return base if (base / "cgroup.controllers").is_file() else None


class StallMeter:
    """The kernel's pressure stall counters, host-wide and of the cgroup v2 a worker runs in, read with every
    telemetry sample: two reads bracketing a case's span give the share of it that some task stalled on each
    resource (the ``*_pressure_ratio`` window conditions).

    A counter, not PSI's own ``avg10``/``avg60``: those are decaying averages over the last 10 or 60 s, which
    lag a hog that started a few seconds ago and remember one that stopped; the counters measure exactly the
    span.  The host's files are checked once (the kernel's PSI does not come and go); the worker's cgroup is
    looked up at each read, as the worker moves into its run's cgroup as it starts (sixdim.run.proctree).
    ``root`` lets a test point at a fake tree holding ``proc/`` and ``sys/``."""

    def __init__(self, root: str = "/") -> None:
        self._root = Path(root)
        self._host: dict[str, Path] = {}
        self._host_reasons: dict[str, str] = {}
        for name, (where, resource) in STALL_CONDITIONS.items():
            if where == "host":
                path = self._root / "proc/pressure" / resource
                value, why = stall_seconds(path)
                if value is None:
                    self._host_reasons[name] = why
                else:
                    self._host[name] = path
        self._mount = cgroup2_mount(self._root)
        self._pid: int | None = None
        self._reasons: dict[str, str] = {}

    def attach(self, pid: int) -> None:
        """The worker whose cgroup's pressure is read from now on."""
        self._pid = pid

    def _cgroup(self) -> tuple[Path | None, str, str]:
        """(the worker's cgroup folder, its path as named in /proc, why none)."""
        if self._pid is None:
            return None, "", "no worker process yet"
        if self._mount is None:
            return None, "", f"no cgroup v2 hierarchy mounted under {self._root}"
        path = self._root / f"proc/{self._pid}/cgroup"
        try:
            text = path.read_text()
        except OSError as exc:
            return None, "", _why(path, exc)
        where = next((line[3:].strip() for line in text.splitlines() if line.startswith("0::")), None)
        if where is None:
            return None, "", f"{path}: the worker is in no cgroup v2 (cgroup v1 only)"
        if where in ("/", "") or where.endswith(" (deleted)"):
            return None, where, (f"the worker runs in the cgroup v2 root ({path}: 0::{where}): its pressure is the "
                                 "host's")
        return self._mount / where.lstrip("/"), where, ""

    def read(self) -> tuple[dict[str, float], str | None, dict[str, str]]:
        """(stall seconds by condition name, the worker's cgroup they were read in or None, why each of the
        others is not given).  Never raises."""
        values: dict[str, float] = {}
        reasons = dict(self._host_reasons)
        for name, path in self._host.items():
            value, why = stall_seconds(path)
            if value is None:
                reasons[name] = why
            else:
                values[name] = value
        try:
            folder, where, why = self._cgroup()
        except Exception as exc:  # an odd tree: the cgroup's conditions lost, never the sample
            folder, where, why = None, "", f"cgroup: {type(exc).__name__}: {exc}"
        for name, (kind, resource) in STALL_CONDITIONS.items():
            if kind != "cgroup":
                continue
            if folder is None:
                reasons[name] = why
                continue
            value, why_not = stall_seconds(folder / f"{resource}.pressure")
            if value is None:
                reasons[name] = why_not
            else:
                values[name] = value
        if reasons != self._reasons:
            self._reasons = reasons  # one dict shared by the samples while nothing changes
        return values, where if folder is not None else None, self._reasons


MAX_LOAD_FACTOR = 10.0
"""The most a CPU run's default timeout is stretched for the host's load (see :func:`cpu_load_factor`)."""

LOAD_MARGIN = 3.0
"""How many times its fair share of the slowdown a loaded host is expected to cost a CPU run."""


def cpu_threads(root: str = "/") -> tuple[int, str]:
    """How many threads a CPU-bound worker should use, and why: the CPUs this process may run on
    (``os.sched_getaffinity``), bounded by its cgroup's CPU quota rounded up (``cpu.max`` "QUOTA
    PERIOD" -> ceil(QUOTA / PERIOD); cgroup v1's ``cpu.cfs_quota_us`` likewise), at least 1.  More
    threads than that only queue behind each other (and torch's spinning threads wait on the
    slowest), which is how a 20 s CPU run took more than 300 s on a busy host.  Never raises."""
    cpus, cpus_reason = _usable_cpus()
    if cpus is None:
        cpus = os.cpu_count() or 1
        reason = f"{cpus} CPU(s) (os.cpu_count(); {cpus_reason})"
    else:
        reason = f"affinity: {cpus} CPU(s)"
    try:
        quota, _ = _cpu_quota_cpus(Path(root))
    except Exception:  # an odd tree: the affinity stands
        quota = None
    if quota is not None:
        limit = max(1, math.ceil(quota - 1e-9))
        if limit < cpus:
            return limit, f"cgroup CPU quota: {quota:g} CPU(s) (affinity: {cpus})"
        reason += f"; cgroup CPU quota {quota:g} CPU(s) is no tighter"
    return max(1, cpus), reason


def cpu_load_factor(threads: int, root: str = "/") -> tuple[float, str]:
    """How much longer than on an idle host a CPU run of ``threads`` threads may take, and why:
    ``1 + LOAD_MARGIN * load / threads``, at most :data:`MAX_LOAD_FACTOR`, where ``load`` is the larger
    of the 1-minute load average and the tasks runnable right now (other than this one), both from
    ``proc/loadavg``.  A fair share would be ``1 + load / threads``; the margin is there because torch's
    threads wait for each other at every operation, so the slowest one sets the pace (measured: 1.6 to 2
    times the fair slowdown with 2 threads beside 2 to 6 busy loops on 2 CPUs).  1.0 where the load
    cannot be read.  Never raises."""
    path = Path(root) / "proc/loadavg"
    try:
        fields = path.read_text().split()
        average = float(fields[0])
        running = max(0, int(fields[3].split("/")[0]) - 1)
    except (OSError, ValueError, IndexError) as exc:
        return 1.0, f"load unknown ({_why(path, exc)})"
    load = max(average, float(running))
    factor = min(MAX_LOAD_FACTOR, 1.0 + LOAD_MARGIN * load / max(1, threads))
    return factor, f"load {load:g} (1-minute average {average:g}, {running} runnable now) on {threads} thread(s)"


def host_conditions(root: str = "/") -> dict[str, Any]:
    """The host's snapshot conditions now, in base units, plus ``"unavailable"``: name -> reason.

    ``root`` lets a test point at a fake tree holding ``sys/`` and ``proc/``.  On the real machine
    (``root="/"``) the CPU frequency is psutil's mean and the load is ``os.getloadavg()``; under any
    other root both come from the tree (the mean of ``cpuN/cpufreq/scaling_cur_freq``, the first
    field of ``proc/loadavg``).  ``usable_cpus`` is always this process's affinity.  ``cpu_quota_cpus``
    is absent where no cgroup sets a limit (the reason says so).  Never raises."""
    base = Path(root)
    real = base == Path("/")
    result: dict[str, Any] = {}
    unavailable: dict[str, str] = {}

    def put(name: str, value: Any, reason: str) -> None:
        if value is None:
            unavailable[name] = reason or "unknown"
        else:
            result[name] = value

    governor_path = base / _CPU_DIR / "cpu0/cpufreq/scaling_governor"
    try:
        governor = governor_path.read_text().strip()
        put("cpu_governor", governor or None, f"{governor_path}: empty")
    except OSError as exc:
        put("cpu_governor", None, _why(governor_path, exc) + " (no cpufreq driver)")
    put("cpu_frequency_hertz", *_cpu_frequency_hertz(base, real))
    cpus, cpus_reason = _usable_cpus()
    put("load_per_cpu", *_load_per_cpu(base, real, cpus))
    try:
        put("cpu_quota_cpus", *_cpu_quota_cpus(base))
    except Exception as exc:  # an odd tree: one condition lost, never the run
        put("cpu_quota_cpus", None, f"cgroup: {type(exc).__name__}: {exc}")
    put("usable_cpus", cpus, cpus_reason)
    result[UNAVAILABLE] = unavailable
    return result


def cpu_model_name() -> str:
    """The CPU's marketing name, from /proc/cpuinfo where there is one."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


CPU_FEATURES: tuple[str, ...] = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx512_fp16",
                                 "avx_vnni", "amx_tile", "amx_bf16", "amx_int8")
"""The x86 instruction-set flags (as /proc/cpuinfo names them) that decide which precisions a CPU runs
natively and how fast: a figure measured on a CPU records which of them it had."""
BF16_FEATURES = frozenset({"avx512_bf16", "amx_bf16"})
"""Native bf16 arithmetic: without one of these, oneDNN has no bf16 kernel for some operators (an LSTM
under bf16 autocast) and the rest convert to fp32 and back, slower than fp32 itself."""
ONEDNN_ISA_WITH_BF16 = frozenset({"AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX10_1_512", "AVX512_CORE_AMX",
                                  "AVX10_1_512_AMX", "AVX512_CORE_AMX_FP16", "AVX10_1_512_AMX_FP16", "ALL",
                                  "DEFAULT"})
"""Values of ``ONEDNN_MAX_CPU_ISA`` (oneDNN's cap on the instructions it uses) that still allow bf16."""


@dataclass(frozen=True)
class CpuFeatures:
    """What a CPU can run, as the kernel reports it (and as oneDNN is allowed to use it)."""

    model: str
    flags: tuple[str, ...]
    """The :data:`CPU_FEATURES` the CPU has, in that order."""
    onednn_limit: str = ""
    """``ONEDNN_MAX_CPU_ISA`` where set: oneDNN uses no instructions beyond it."""

    @property
    def bf16_native(self) -> bool:
        allowed = not self.onednn_limit or self.onednn_limit.upper() in ONEDNN_ISA_WITH_BF16
        return allowed and bool(BF16_FEATURES.intersection(self.flags))

    def why_no_bf16(self) -> str:
        """Why bf16 is not native here, in words ("" where it is)."""
        if self.bf16_native:
            return ""
        if BF16_FEATURES.intersection(self.flags):
            return f"oneDNN is limited to {self.onednn_limit} by ONEDNN_MAX_CPU_ISA, below AVX-512-BF16 and AMX"
        return "the CPU has neither AVX-512-BF16 nor AMX"

    def describe(self) -> str:
        """"AMD EPYC 7B13 (avx2, fma)", with the oneDNN cap where there is one."""
        text = f"{self.model} ({', '.join(self.flags) or 'none of ' + ', '.join(CPU_FEATURES[:3])})"
        return text + (f", oneDNN limited to {self.onednn_limit} by ONEDNN_MAX_CPU_ISA" if self.onednn_limit else "")

    def environment(self) -> dict[str, str]:
        """The entries a CPU run's environment records: the model and its features (and the oneDNN cap)."""
        out = {"cpu_model": self.model, "cpu_features": ",".join(self.flags)}
        if self.onednn_limit:
            out["onednn_max_cpu_isa"] = self.onednn_limit
        return out


def cpu_features(cpuinfo: str | None = None, environ: Mapping[str, str] | None = None) -> CpuFeatures:
    """The CPU's model and :data:`CPU_FEATURES` from ``/proc/cpuinfo`` (or the text given: tests fake it),
    and oneDNN's cap from ``ONEDNN_MAX_CPU_ISA``.  A host without /proc/cpuinfo reports no flags."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    model, flags = "", set[str]()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key == "flags" and not flags:
            flags = set(value.split())
    environ = os.environ if environ is None else environ
    return CpuFeatures(model or cpu_model_name(), tuple(f for f in CPU_FEATURES if f in flags),
                       environ.get("ONEDNN_MAX_CPU_ISA", "").strip())
