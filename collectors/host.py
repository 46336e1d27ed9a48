"""Host telemetry: CPU, memory and load from psutil; CPU package energy from RAPL.

RAPL (``/sys/class/powercap/intel-rapl:N/energy_uj``, also used by AMD CPUs on
recent kernels) gives a CPU-only host a real power reading.  Its counter wraps
at ``max_energy_range_uj`` and is root-only on most kernels since 2020; where it
is absent or unreadable the host reports no energy rather than zero.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from pathlib import Path

import psutil

from sixdim.collectors.base import Availability, LogOnce, Sample
from sixdim.core import catalog

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
