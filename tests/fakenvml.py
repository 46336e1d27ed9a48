"""A fake of the ``pynvml`` module for hosts without an NVIDIA GPU.

Faithful to the real API where the agent touches it: the same function names and
arguments, return values built from pynvml's own ctypes structures (so units are
NVML's: milliwatts, millijoules, MHz, percent, bytes), and failures raised as
pynvml's own ``NVMLError`` subclasses with NVML's error codes.

MIG follows NVML's documented behaviour: ``nvmlDeviceGetMigMode`` answers
NVML_ERROR_NOT_SUPPORTED on a GPU without MIG and ``[current, pending]`` on one with it;
``nvmlDeviceGetMaxMigDeviceCount`` is 0 unless MIG is enabled (7 slots then, as on A100/H100);
an empty slot answers NVML_ERROR_NOT_FOUND.  A MIG device handle answers only
``nvmlDeviceGetUUID`` (``MIG-...``) and ``nvmlDeviceGetName`` here; any other query on it
answers NVML_ERROR_NOT_SUPPORTED (real NVML answers more, which the agent does not use).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pynvml as real

NVMLError = real.NVMLError
NVML_CLOCK_SM = real.NVML_CLOCK_SM
NVML_CLOCK_MEM = real.NVML_CLOCK_MEM
NVML_TEMPERATURE_GPU = real.NVML_TEMPERATURE_GPU
NVML_DEVICE_MIG_DISABLE = real.NVML_DEVICE_MIG_DISABLE
NVML_DEVICE_MIG_ENABLE = real.NVML_DEVICE_MIG_ENABLE
NVML_ERROR_NOT_FOUND = real.NVML_ERROR_NOT_FOUND

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
    sm_mhz: int = 1980
    mem_mhz: int = 2619
    temperature: int = 35
    clock_event_mask: int = 0x1  # idle
    compute_pids: list[int] = field(default_factory=list)
    graphics_pids: list[int] = field(default_factory=list)
    unsupported: set[str] = field(default_factory=set)
    """Names of NVML functions that answer NVML_ERROR_NOT_SUPPORTED on this GPU."""
    errors: dict[str, int] = field(default_factory=dict)
    """NVML functions that fail on this GPU, with the NVML error code they answer (e.g. NVML_ERROR_UNKNOWN)."""
    mig_capable: bool = False
    """Whether the GPU supports MIG at all (A100, H100, ...); if not, nvmlDeviceGetMigMode is NOT_SUPPORTED."""
    mig_mode: int = real.NVML_DEVICE_MIG_DISABLE
    mig_pending: int | None = None
    """The pending MIG mode (applied at the next GPU reset); None means the same as ``mig_mode``."""
    mig_devices: list[str | None] = field(default_factory=list)
    """MIG device slots in index order: the instance's ``MIG-`` UUID, or None for an empty slot."""


class _Handle:
    """Stands for pynvml's c_nvmlDevice_t pointer: opaque to the caller."""

    def __init__(self, index: int):
        self.index = index


class _MigHandle(_Handle):
    """A MIG device handle (NVML gives it the same C type as a GPU's)."""

    def __init__(self, index: int, slot: int):
        super().__init__(index)
        self.slot = slot


class FakeNvml:
    NVMLError = real.NVMLError
    NVML_CLOCK_SM = real.NVML_CLOCK_SM
    NVML_CLOCK_MEM = real.NVML_CLOCK_MEM
    NVML_TEMPERATURE_GPU = real.NVML_TEMPERATURE_GPU
    NVML_DEVICE_MIG_DISABLE = real.NVML_DEVICE_MIG_DISABLE
    NVML_DEVICE_MIG_ENABLE = real.NVML_DEVICE_MIG_ENABLE
    NVML_ERROR_NOT_FOUND = real.NVML_ERROR_NOT_FOUND

    def __init__(self, gpus: list[FakeGpu] | None = None, *, driver: str = "550.54.15", cuda: int = 12040,
                 init_error: int | None = None, on_call: Callable[[str], None] | None = None):
        """``on_call`` is told the name of every per-device query as it is made (to let a test's
        clock advance while NVML answers, as the real calls take time)."""
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
