"""Energy counters read from inside the worker, for the power phase.

A kernel timed with an L2 flush before each call lasts a few tens of milliseconds in all:
far shorter than NVML's energy-counter update and sampling period, so power read by the
daemon around such a window is interpolated from outside it.  Power is therefore measured
in a separate **power phase** (seconds of back-to-back calls, see
:func:`sixdim.workloads.measure.timing.power_phase`), and the counter is read here, in the worker, at the
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


MIN_BUSY_SAMPLES = 3
"""Utilization samples a busy share needs (NVML's sample period is 1/6 s to 1 s by product, as its
documentation says: a 1 s phase has from 1 to 6)."""
_VALUE_FIELDS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
"""nvmlValueType_t to the field of c_nvmlValue_t that holds it."""


class NvmlEnergy:
    """Sum of NVML total-energy counters of the GPUs with the given UUIDs."""

    source = "nvml_total_energy"

    def __init__(self, uuids: list[str], module: Any = None):
        self.available, self.reason = False, ""
        try:
            if module is None:
                import pynvml
                module = pynvml
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

    # The GPU's utilization over a span, from the samples NVML keeps (nvmlDeviceGetSamples with
    # NVML_GPU_UTILIZATION_SAMPLES: the percent of each sample period, 1/6 s to 1 s by product, in which
    # a kernel ran; timestamps in microseconds).  It tells a phase that kept the GPU busy from one that
    # mostly waited on the host, which CUDA events around its calls cannot: the driver may hold a
    # starved stream's commands back until the next launch, so their timestamps include the host's time
    # (a loop busy 3% of the time measured 87% by events on an H200, 2026-11-26).

    def _utilization(self, handle: Any, after: int) -> list[tuple[int, float]]:
        """(timestamp µs, share 0..1) of each of the GPU's utilization samples newer than ``after``."""
        try:
            kind, samples = self._nv.nvmlDeviceGetSamples(handle, self._nv.NVML_GPU_UTILIZATION_SAMPLES, after)
        except self._nv.NVMLError as exc:
            if getattr(exc, "value", None) == self._nv.NVML_ERROR_NOT_FOUND:  # no sample newer than ``after``
                return []
            raise
        field = _VALUE_FIELDS.get(kind, "uiVal")
        return [(int(s.timeStamp), min(1.0, max(0.0, float(getattr(s.sampleValue, field)) / 100.0)))
                for s in samples if int(s.timeStamp) > after]

    def utilization_marker(self) -> list[int]:
        """The newest utilization sample's timestamp of each GPU (0 where there is none yet)."""
        return [max((t for t, _ in self._utilization(h, 0)), default=0) for h in self._handles]

    def busy(self, marker: list[int], seconds: float) -> tuple[float | None, int]:
        """Mean utilization of the samples taken since ``marker`` and within the last ``seconds`` (None where
        there are fewer than :data:`MIN_BUSY_SAMPLES`), and how many samples there were: the count goes into
        the record either way, so a share (or its absence) can be judged by what it stands on."""
        values: list[float] = []
        for handle, after in zip(self._handles, marker):
            samples = self._utilization(handle, after)
            newest = max((t for t, _ in samples), default=0)
            values += [v for t, v in samples if t >= newest - seconds * 1e6]
        if len(values) < MIN_BUSY_SAMPLES:
            return None, len(values)
        return sum(values) / len(values), len(values)

    def busy_share(self, marker: list[int], seconds: float) -> tuple[float, int] | str:
        """:meth:`busy`'s share and count; or why there is no share (fewer than :data:`MIN_BUSY_SAMPLES`)."""
        share, count = self.busy(marker, seconds)
        if share is None:
            return too_few_samples(count, seconds)
        return share, count


def too_few_samples(count: int, seconds: float) -> str:
    """Why a phase with only ``count`` utilization samples has no busy share."""
    return (f"NVML kept {count} utilization sample(s) over the {seconds:.2f} s phase (at least "
            f"{MIN_BUSY_SAMPLES} needed)")


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
