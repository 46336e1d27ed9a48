"""A fake of the ``pynvml`` module for hosts without an NVIDIA GPU.

Faithful to the real API where the agent touches it: the same function names and
arguments, return values built from pynvml's own ctypes structures (so units are
NVML's: milliwatts, millijoules, MHz, percent, bytes), and failures raised as
pynvml's own ``NVMLError`` subclasses with NVML's error codes.

MIG follows NVML's documented behaviour: ``nvmlDeviceGetMigMode`` answers
real.NVML_ERROR_NOT_SUPPORTED on a GPU without MIG and ``[current, pending]`` on one with it;
``nvmlDeviceGetMaxMigDeviceCount`` is 0 unless MIG is enabled (7 slots then, as on A100/H100);
an empty slot answers real.NVML_ERROR_NOT_FOUND.  A MIG device handle answers only
``nvmlDeviceGetUUID`` (``MIG-...``) and ``nvmlDeviceGetName`` here; any other query on it
answers real.NVML_ERROR_NOT_SUPPORTED (real NVML answers more, which the agent does not use).

The settings and health queries of the run conditions answer as pynvml's do: ``c_uint`` values in
milliwatts and MHz, ``[current, pending]`` lists for the ECC and MIG modes, a tuple of four for
``nvmlDeviceGetRemappedRows``.  A :class:`FakeGpu` is by default a healthy H100 SXM.  Where NVML's
behaviour is documented, so is the fake's: the ECC error counters answer NOT_SUPPORTED while ECC is
off; a link index past the GPU's NVLink links answers INVALID_ARGUMENT.  ``FakeNvml(missing=...)``
stands for an older nvidia-ml-py that lacks some functions (the attribute does not exist).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from ctypes import c_uint, c_ulonglong
from dataclasses import dataclass, field

import pynvml as real

NVMLError = real.NVMLError

CONSTANTS: tuple[str, ...] = (
    "NVML_CLOCK_SM",
    "NVML_CLOCK_MEM",
    "NVML_TEMPERATURE_GPU",
    "NVML_DEVICE_MIG_DISABLE",
    "NVML_DEVICE_MIG_ENABLE",
    "NVML_ERROR_NOT_FOUND",
    "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_NO_PERMISSION",
    "NVML_ERROR_INVALID_ARGUMENT",
    "NVML_FEATURE_DISABLED",
    "NVML_FEATURE_ENABLED",
    "NVML_MEMORY_ERROR_TYPE_CORRECTED",
    "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
    "NVML_VOLATILE_ECC",
    "NVML_AGGREGATE_ECC",
    "NVML_NVLINK_MAX_LINKS",
    "NVML_COMPUTEMODE_DEFAULT",
    "NVML_COMPUTEMODE_PROHIBITED",
    "NVML_COMPUTEMODE_EXCLUSIVE_PROCESS",
    "NVML_GPU_UTILIZATION_SAMPLES",
)
"""pynvml's constants the agent reads from the module it is given: the fake carries pynvml's own values."""

H100_NVLINK_LINKS = 18
"""NVLink links of an H100 SXM (NVLink 4)."""

MAX_MIG_DEVICES = 7
"""MIG device slots of a MIG-enabled A100 or H100 (seven 1g instances at most)."""


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-8b2c4a1e-0000-1111-2222-333344445555"
    bus_id: str = "00000000:17:00.0"
    vbios: str = "96.00.99.00.01"
    energy_mj: int = 1_000_000
    power_mw: int = 70_000
    memory_total: int = 80 * 1024**3
    memory_used: int = 500 * 1024**2
    utilization_gpu: int = 0
    utilization_samples: list[tuple[int, int]] = field(default_factory=list)
    """What nvmlDeviceGetSamples(NVML_GPU_UTILIZATION_SAMPLES) keeps: (timestamp in µs, percent), oldest first."""
    sm_mhz: int = 1980
    mem_mhz: int = 2619
    temperature: int = 35
    clock_event_mask: int = 0x1  # idle
    compute_pids: list[int] = field(default_factory=list)
    graphics_pids: list[int] = field(default_factory=list)
    unsupported: set[str] = field(default_factory=set)
    """Names of NVML functions that answer real.NVML_ERROR_NOT_SUPPORTED on this GPU."""
    errors: dict[str, int] = field(default_factory=dict)
    """NVML functions that fail on this GPU, with the NVML error code they answer (e.g. NVML_ERROR_UNKNOWN)."""
    mig_capable: bool = False
    """Whether the GPU supports MIG at all (A100, H100, ...); if not, nvmlDeviceGetMigMode is NOT_SUPPORTED."""
    mig_mode: int = real.NVML_DEVICE_MIG_DISABLE
    mig_pending: int | None = None
    """The pending MIG mode (applied at the next GPU reset); None means the same as ``mig_mode``."""
    mig_devices: list[str | None] = field(default_factory=list)
    """MIG device slots in index order: the instance's ``MIG-`` UUID, or None for an empty slot."""
    # --- settings and health (the run conditions), NVML's units
    memory_temperature: int | None = 45
    """HBM temperature, °C, as NVML's field NVML_FI_DEV_MEMORY_TEMP gives it; None: the field answers
    real.NVML_ERROR_NOT_SUPPORTED in its own ``nvmlReturn`` (the call itself succeeds, as NVML does)."""
    power_limit_mw: int = 700_000
    """The enforced power limit (nvmlDeviceGetEnforcedPowerLimit), milliwatts."""
    power_default_limit_mw: int = 700_000
    """nvmlDeviceGetPowerManagementDefaultLimit, milliwatts."""
    applications_sm_mhz: int = 1980
    applications_mem_mhz: int = 2619
    max_sm_mhz: int = 1980
    max_mem_mhz: int = 2619
    ecc_mode: int = real.NVML_FEATURE_ENABLED
    ecc_pending: int | None = None
    """The pending ECC mode (applied at the next reset); None means the same as ``ecc_mode``."""
    persistence_mode: int = real.NVML_FEATURE_ENABLED
    compute_mode: int = real.NVML_COMPUTEMODE_DEFAULT
    pcie_generation: int = 5
    pcie_width: int = 16
    pcie_max_generation: int = 5
    pcie_max_width: int = 16
    ecc_corrected_volatile: int = 0
    ecc_uncorrected_volatile: int = 0
    ecc_corrected_aggregate: int = 0
    """Over the GPU's life (infoROM): kept apart from the volatile counters so a test sees which is read."""
    ecc_uncorrected_aggregate: int = 0
    retired_pages_pending: int = real.NVML_FEATURE_DISABLED
    """nvmlDeviceGetRetiredPagesPendingStatus (a real A100/H100 may answer NOT_SUPPORTED: it remaps rows)."""
    remapped_corrected: int = 0
    remapped_uncorrected: int = 0
    remapped_pending: int = 0
    remapped_failed: int = 0
    nvlink_states: list[int] = field(default_factory=lambda: [real.NVML_FEATURE_ENABLED] * H100_NVLINK_LINKS)
    """Each NVLink link's state (nvmlDeviceGetNvLinkState); a link index past the list answers INVALID_ARGUMENT."""


class _Handle:
    """Stands for pynvml's c_nvmlDevice_t pointer: opaque to the caller."""

    def __init__(self, index: int):
        self.index = index


class _MigHandle(_Handle):
    """A MIG device handle (NVML gives it the same C type as a GPU's)."""

    def __init__(self, index: int, slot: int):
        super().__init__(index)
        self.slot = slot


class _Missing:
    """A function an older binding does not have: reading the attribute raises AttributeError."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, obj: object, owner: type | None = None) -> None:
        raise AttributeError(f"module 'pynvml' has no attribute {self.name!r}")


class FakeNvml:
    NVMLError = real.NVMLError

    def __init__(self, gpus: list[FakeGpu] | None = None, *, driver: str = "550.54.15", cuda: int = 12040,
                 init_error: int | None = None, on_call: Callable[[str], None] | None = None,
                 missing: Collection[str] = ()):
        """``on_call`` is told the name of every per-device query as it is made (to let a test's
        clock advance while NVML answers, as the real calls take time).  ``missing`` names functions
        this binding lacks, as an older nvidia-ml-py does (``hasattr`` is false for them)."""
        if missing:  # a subclass per instance, so other fakes keep every function
            self.__class__ = type("OlderFakeNvml", (type(self),), {name: _Missing(name) for name in missing})
        self.gpus = gpus if gpus is not None else [FakeGpu()]
        self.driver, self.cuda, self.init_error = driver, cuda, init_error
        self.on_call = on_call
        self.initialized = False

    # --- library
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise real.NVMLError(self.init_error)
        self.initialized = True

    def _check(self) -> None:
        if not self.initialized:
            raise real.NVMLError(real.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: _Handle, function: str, *, mig_ok: bool = False) -> FakeGpu:
        self._check()
        if self.on_call is not None:
            self.on_call(function)
        gpu = self.gpus[handle.index]
        if function in gpu.errors:
            raise real.NVMLError(gpu.errors[function])
        if function in gpu.unsupported or (isinstance(handle, _MigHandle) and not mig_ok):
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check()
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._check()
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._check()
        if not 0 <= index < len(self.gpus):
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> _Handle:
        """As NVML: the GPU with that UUID, else NVML_ERROR_NOT_FOUND (the worker's energy meter finds its
        GPUs by the UUIDs the daemon gives it)."""
        self._check()
        for index, gpu in enumerate(self.gpus):
            if gpu.uuid == uuid:
                return _Handle(index)
        raise real.NVMLError(real.NVML_ERROR_NOT_FOUND)

    # --- identity
    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        gpu = self._gpu(handle, "nvmlDeviceGetName", mig_ok=True)
        return f"{gpu.name} MIG 1g.10gb" if isinstance(handle, _MigHandle) else gpu.name

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        gpu = self._gpu(handle, "nvmlDeviceGetUUID", mig_ok=True)
        if isinstance(handle, _MigHandle):
            return gpu.mig_devices[handle.slot]  # type: ignore[return-value]  # a handle exists only for a filled slot
        return gpu.uuid

    # --- MIG
    def nvmlDeviceGetMigMode(self, device: _Handle) -> list[int]:
        gpu = self._gpu(device, "nvmlDeviceGetMigMode")
        if not gpu.mig_capable:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        return [gpu.mig_mode, gpu.mig_mode if gpu.mig_pending is None else gpu.mig_pending]

    def nvmlDeviceGetMaxMigDeviceCount(self, device: _Handle) -> int:
        gpu = self._gpu(device, "nvmlDeviceGetMaxMigDeviceCount")
        return MAX_MIG_DEVICES if gpu.mig_capable and gpu.mig_mode == real.NVML_DEVICE_MIG_ENABLE else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: _Handle, index: int) -> _MigHandle:
        gpu = self._gpu(device, "nvmlDeviceGetMigDeviceHandleByIndex")
        if not gpu.mig_capable:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= index < MAX_MIG_DEVICES:
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        if gpu.mig_mode != real.NVML_DEVICE_MIG_ENABLE or index >= len(gpu.mig_devices) \
                or gpu.mig_devices[index] is None:
            raise real.NVMLError(real.NVML_ERROR_NOT_FOUND)
        return _MigHandle(device.index, index)

    def nvmlDeviceIsMigDeviceHandle(self, device: _Handle) -> int:
        self._check()
        return int(isinstance(device, _MigHandle))

    def nvmlDeviceGetPciInfo(self, handle: _Handle):
        info = real.nvmlPciInfo_t()
        info.busId = self._gpu(handle, "nvmlDeviceGetPciInfo").bus_id.encode()
        return info

    def nvmlDeviceGetVbiosVersion(self, handle: _Handle) -> str:
        return self._gpu(handle, "nvmlDeviceGetVbiosVersion").vbios

    # --- readings (NVML units)
    def nvmlDeviceGetTotalEnergyConsumption(self, handle: _Handle) -> int:
        return self._gpu(handle, "nvmlDeviceGetTotalEnergyConsumption").energy_mj

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        return self._gpu(handle, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version=None):
        gpu = self._gpu(handle, "nvmlDeviceGetMemoryInfo")
        return real.c_nvmlMemory_t(total=gpu.memory_total, free=gpu.memory_total - gpu.memory_used,
                                   used=gpu.memory_used)

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle):
        gpu = self._gpu(handle, "nvmlDeviceGetUtilizationRates")
        return real.c_nvmlUtilization_t(gpu=gpu.utilization_gpu, memory=0)

    def nvmlDeviceGetSamples(self, handle: _Handle, sampling_type: int, last_seen: int):
        """As pynvml's: ``(value type, [c_nvmlSample_t])`` of the samples newer than ``last_seen``;
        NVML_ERROR_NOT_FOUND where there is none (NVML's documented answer)."""
        gpu = self._gpu(handle, "nvmlDeviceGetSamples")
        if sampling_type != real.NVML_GPU_UTILIZATION_SAMPLES:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        newer = [real.c_nvmlSample_t(timeStamp=t, sampleValue=real.c_nvmlValue_t(uiVal=v))
                 for t, v in gpu.utilization_samples if t > last_seen]
        if not newer:
            raise real.NVMLError(real.NVML_ERROR_NOT_FOUND)
        return real.NVML_VALUE_TYPE_UNSIGNED_INT, newer

    def nvmlDeviceGetClockInfo(self, handle: _Handle, clock_type: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetClockInfo")
        if clock_type == real.NVML_CLOCK_SM:
            return gpu.sm_mhz
        if clock_type == real.NVML_CLOCK_MEM:
            return gpu.mem_mhz
        raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        return self._gpu(handle, "nvmlDeviceGetTemperature").temperature

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: _Handle) -> int:
        return self._gpu(handle, "nvmlDeviceGetCurrentClocksEventReasons").clock_event_mask

    nvmlDeviceGetCurrentClocksThrottleReasons = nvmlDeviceGetCurrentClocksEventReasons

    def _processes(self, pids: list[int]) -> list:
        return [real.nvmlFriendlyObject({"pid": pid, "usedGpuMemory": 1024**3, "gpuInstanceId": 0xFFFFFFFF,
                                         "computeInstanceId": 0xFFFFFFFF}) for pid in pids]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list:
        return self._processes(self._gpu(handle, "nvmlDeviceGetComputeRunningProcesses").compute_pids)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: _Handle) -> list:
        return self._processes(self._gpu(handle, "nvmlDeviceGetGraphicsRunningProcesses").graphics_pids)

    def nvmlDeviceGetFieldValues(self, handle: _Handle, field_ids: list) -> object:
        """pynvml's array of c_nvmlFieldValue_t: each field has its own ``nvmlReturn``; only the memory
        temperature is known here, every other field answers real.NVML_ERROR_NOT_SUPPORTED."""
        gpu = self._gpu(handle, "nvmlDeviceGetFieldValues")
        values = (real.c_nvmlFieldValue_t * len(field_ids))()
        for i, field_id in enumerate(field_ids):
            values[i].fieldId = field_id
            if field_id == real.NVML_FI_DEV_MEMORY_TEMP and gpu.memory_temperature is not None:
                values[i].nvmlReturn = real.NVML_SUCCESS
                values[i].valueType = real.NVML_VALUE_TYPE_UNSIGNED_INT
                values[i].value.uiVal = gpu.memory_temperature
            else:
                values[i].nvmlReturn = real.NVML_ERROR_NOT_SUPPORTED
        return values

    # --- settings and health (the run conditions; NVML units, pynvml's return types)
    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Handle) -> int:
        return c_uint(self._gpu(handle, "nvmlDeviceGetEnforcedPowerLimit").power_limit_mw).value

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: _Handle) -> int:
        return c_uint(self._gpu(handle, "nvmlDeviceGetPowerManagementDefaultLimit").power_default_limit_mw).value

    def _clock(self, type: int, sm: int, mem: int) -> int:
        if type == real.NVML_CLOCK_SM:
            return c_uint(sm).value
        if type == real.NVML_CLOCK_MEM:
            return c_uint(mem).value
        raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetApplicationsClock(self, handle: _Handle, type: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetApplicationsClock")
        return self._clock(type, gpu.applications_sm_mhz, gpu.applications_mem_mhz)

    def nvmlDeviceGetMaxClockInfo(self, handle: _Handle, type: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetMaxClockInfo")
        return self._clock(type, gpu.max_sm_mhz, gpu.max_mem_mhz)

    def nvmlDeviceGetEccMode(self, handle: _Handle) -> list[int]:
        gpu = self._gpu(handle, "nvmlDeviceGetEccMode")
        return [gpu.ecc_mode, gpu.ecc_mode if gpu.ecc_pending is None else gpu.ecc_pending]

    def nvmlDeviceGetPersistenceMode(self, handle: _Handle) -> int:
        return self._gpu(handle, "nvmlDeviceGetPersistenceMode").persistence_mode

    def nvmlDeviceGetComputeMode(self, handle: _Handle) -> int:
        return self._gpu(handle, "nvmlDeviceGetComputeMode").compute_mode

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: _Handle) -> int:
        return c_uint(self._gpu(handle, "nvmlDeviceGetCurrPcieLinkGeneration").pcie_generation).value

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: _Handle) -> int:
        return c_uint(self._gpu(handle, "nvmlDeviceGetCurrPcieLinkWidth").pcie_width).value

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: _Handle) -> int:
        return c_uint(self._gpu(handle, "nvmlDeviceGetMaxPcieLinkGeneration").pcie_max_generation).value

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: _Handle) -> int:
        return c_uint(self._gpu(handle, "nvmlDeviceGetMaxPcieLinkWidth").pcie_max_width).value

    def nvmlDeviceGetTotalEccErrors(self, handle: _Handle, errorType: int, counterType: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetTotalEccErrors")
        if gpu.ecc_mode != real.NVML_FEATURE_ENABLED:  # nvml.h: "Requires ECC Mode to be enabled"
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        counts = {
            (real.NVML_MEMORY_ERROR_TYPE_CORRECTED, real.NVML_VOLATILE_ECC): gpu.ecc_corrected_volatile,
            (real.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, real.NVML_VOLATILE_ECC): gpu.ecc_uncorrected_volatile,
            (real.NVML_MEMORY_ERROR_TYPE_CORRECTED, real.NVML_AGGREGATE_ECC): gpu.ecc_corrected_aggregate,
            (real.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, real.NVML_AGGREGATE_ECC): gpu.ecc_uncorrected_aggregate,
        }
        if (errorType, counterType) not in counts:
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return c_ulonglong(counts[errorType, counterType]).value

    def nvmlDeviceGetRetiredPagesPendingStatus(self, device: _Handle) -> int:
        return int(self._gpu(device, "nvmlDeviceGetRetiredPagesPendingStatus").retired_pages_pending)

    def nvmlDeviceGetRemappedRows(self, device: _Handle) -> tuple[int, int, int, int]:
        gpu = self._gpu(device, "nvmlDeviceGetRemappedRows")
        return (c_uint(gpu.remapped_corrected).value, c_uint(gpu.remapped_uncorrected).value,
                c_uint(gpu.remapped_pending).value, c_uint(gpu.remapped_failed).value)

    def nvmlDeviceGetNvLinkState(self, device: _Handle, link: int) -> int:
        gpu = self._gpu(device, "nvmlDeviceGetNvLinkState")
        if not 0 <= link < len(gpu.nvlink_states):
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return c_uint(gpu.nvlink_states[link]).value


for _name in CONSTANTS:  # the fake module answers pynvml's constants with pynvml's values
    setattr(FakeNvml, _name, getattr(real, _name))
