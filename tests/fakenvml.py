"""A fake of the ``pynvml`` module for hosts without an NVIDIA GPU.

Faithful to the real API where the agent touches it: the same function names and
arguments, return values built from pynvml's own ctypes structures (so units are
NVML's: milliwatts, millijoules, MHz, percent, bytes), and failures raised as
pynvml's own ``NVMLError`` subclasses with NVML's error codes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pynvml as real

NVMLError = real.NVMLError
NVML_CLOCK_SM = real.NVML_CLOCK_SM
NVML_CLOCK_MEM = real.NVML_CLOCK_MEM
NVML_TEMPERATURE_GPU = real.NVML_TEMPERATURE_GPU


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


class _Handle:
    """Stands for pynvml's c_nvmlDevice_t pointer: opaque to the caller."""

    def __init__(self, index: int):
        self.index = index


class FakeNvml:
    NVMLError = real.NVMLError
    NVML_CLOCK_SM = real.NVML_CLOCK_SM
    NVML_CLOCK_MEM = real.NVML_CLOCK_MEM
    NVML_TEMPERATURE_GPU = real.NVML_TEMPERATURE_GPU

    def __init__(self, gpus: list[FakeGpu] | None = None, *, driver: str = "550.54.15", cuda: int = 12040,
                 init_error: int | None = None):
        self.gpus = gpus if gpus is not None else [FakeGpu()]
        self.driver, self.cuda, self.init_error = driver, cuda, init_error
        self.initialized = False

    # --- library
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise real.NVMLError(self.init_error)
        self.initialized = True

    def _check(self) -> None:
        if not self.initialized:
            raise real.NVMLError(real.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: _Handle, function: str) -> FakeGpu:
        self._check()
        gpu = self.gpus[handle.index]
        if function in gpu.unsupported:
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
        return self._gpu(handle, "nvmlDeviceGetName").name

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        return self._gpu(handle, "nvmlDeviceGetUUID").uuid

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
