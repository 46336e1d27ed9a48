"""Energy counters read from inside the worker, for the power phase.

A kernel timed with an L2 flush before each call lasts a few tens of milliseconds in all:
far shorter than NVML's energy-counter update and sampling period, so power read by the
daemon around such a window is interpolated from outside it.  Power is therefore measured
in a separate **power phase** (seconds of back-to-back calls, see
:func:`sixdim.workloads.timing.power_phase`), and the counter is read here, in the worker, at the
phase's exact start and end, right after the device has been synchronized.

- GPU: NVML's total-energy counter (millijoules since driver load), summed over the GPUs
  the worker measures (the daemon passes their UUIDs in the request);
- CPU: RAPL package counters where they are readable.

A MIG instance has no energy counter of its own (the whole GPU's is shared with other
instances), so there the meter is unavailable and says so.  Torch-free.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol


class EnergyMeter(Protocol):
    available: bool
    reason: str
    source: str

    def joules(self) -> float:
        """The counter now, in joules (monotonic, arbitrary origin)."""
        ...


@dataclass
class Unavailable:
    reason: str
    available: bool = False
    source: str = ""

    def joules(self) -> float:
        raise RuntimeError(self.reason)


class NvmlEnergy:
    """Sum of NVML total-energy counters of the GPUs with the given UUIDs."""

    source = "nvml_total_energy"

    def __init__(self, uuids: list[str], module: Any = None):
        self.available, self.reason = False, ""
        try:
            if module is None:
                import pynvml as module
            self._nv = module
            self._nv.nvmlInit()
            mig = [u for u in uuids if u.startswith("MIG-")]
            if mig:
                self.reason = (f"{mig[0]} is a MIG instance: the GPU's energy counter is shared by all its "
                               f"instances, so no power is reported")
                return
            self._handles = [self._nv.nvmlDeviceGetHandleByUUID(u) for u in uuids]
            self.joules()  # fails here if the GPU has no counter (pre-Volta)
            self.available = True
        except Exception as exc:  # NVMLError, ImportError
            self.reason = f"NVML energy counter unavailable: {exc}"

    def joules(self) -> float:
        return sum(self._nv.nvmlDeviceGetTotalEnergyConsumption(h) for h in self._handles) / 1000.0


class RaplEnergy:
    source = "rapl"

    def __init__(self) -> None:
        from sixdim.collectors.host import RaplReader

        self._rapl = RaplReader()
        self.available = self._rapl.available
        self.reason = "" if self.available else f"no readable CPU energy counter: {self._rapl.reason}"

    def joules(self) -> float:
        value = self._rapl.total_joules()
        if value is None:
            raise RuntimeError(self.reason or "RAPL unavailable")
        return value


def meter_for(device: str, gpu_uuids: list[str] | None) -> EnergyMeter:
    """The meter for the worker's device: NVML for GPUs (by UUID), RAPL for the CPU."""
    if device.startswith("cuda"):
        if not gpu_uuids:
            gpu_uuids = _visible_gpu_uuid(device)
        if not gpu_uuids:
            return Unavailable("the GPU's UUID is unknown, so its energy counter cannot be read")
        return NvmlEnergy(gpu_uuids)
    return RaplEnergy()


def _visible_gpu_uuid(device: str) -> list[str]:
    """The UUID of the GPU torch sees as ``device`` (for a worker started without the daemon's list)."""
    try:
        import torch

        uuid = str(torch.cuda.get_device_properties(torch.device(device)).uuid)
    except Exception:
        return []
    return [uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"]


@dataclass
class Reading:
    monotonic: float
    unix: float
    joules: float


def read(meter: EnergyMeter) -> Reading:
    """One timestamped reading; the time is taken just before the counter is read."""
    mono, unix = time.monotonic(), time.time()
    return Reading(mono, unix, meter.joules())
