"""NVIDIA GPU telemetry through NVML (the ``pynvml`` module of nvidia-ml-py).

NVML never creates a CUDA context, so the daemon can read it while production
jobs run.  Fields a GPU does not support (NVML_ERROR_NOT_SUPPORTED) are None
and are not exported, rather than exported as zero.  The process list is the
exception: it feeds the idle guard, which must tell "no process" from "could not
ask", so :meth:`NvmlCollector.process_ids` raises instead of answering ``[]``.

:meth:`NvmlCollector.conditions` reads the GPU's settings and health once, as a case's worker
starts (``agent/core/conditions.py``, scope ``gpu``, span ``snapshot``): a query the GPU or the
binding cannot answer leaves its condition out, with the reason, rather than reading as zero.

A GPU in MIG mode is found at start (:attr:`GpuIdentity.mig_enabled`, with its
instances' ``MIG-`` UUIDs), so that the executor can say why it does not run on
it instead of letting CUDA fail inside the worker.

The ``module`` argument lets tests substitute a fake with the same functions,
return shapes and ``NVMLError`` exceptions as pynvml; production passes nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from sixdim.collectors.base import Availability, LogOnce, Sample
from sixdim.core import catalog
from sixdim.core.conditions import CONDITIONS, UNAVAILABLE

log = logging.getLogger(__name__)

# Clock event ("throttle") reason bits, as in nvml.h (nvmlClocksEventReason*).
CLOCK_EVENT_REASONS: dict[int, str] = {
    0x001: "gpu_idle",
    0x002: "applications_clocks_setting",
    0x004: "sw_power_cap",
    0x008: "hw_slowdown",
    0x010: "sync_boost",
    0x020: "sw_thermal_slowdown",
    0x040: "hw_thermal_slowdown",
    0x080: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
CLOCK_EVENT_GROUPS: dict[str, frozenset[str]] = {
    "power_capped": frozenset({"sw_power_cap"}),
    "thermal_slowdown": frozenset({"sw_thermal_slowdown", "hw_thermal_slowdown"}),
    "hardware_slowdown": frozenset({"hw_slowdown", "hw_power_brake_slowdown"}),
}
"""Clock events grouped by what they mean to an operator, one 0/1 figure each.

The software power cap is normal for a large kernel on an SXM GPU; thermal and hardware
slowdowns are not.  Kept apart so that an alert on a hardware slowdown does not fire on
every big GEMM."""


SNAPSHOT_GPU_CONDITIONS: tuple[str, ...] = tuple(
    c.name for c in CONDITIONS if c.scope == "gpu" and c.span == "snapshot")
"""The conditions :meth:`NvmlCollector.conditions` reads, in their catalogue order."""

HEALTH_GAUGES: tuple[tuple[catalog.MetricDef, str, tuple[tuple[str, str], ...]], ...] = (
    (catalog.GPU_POWER_LIMIT, "power_limit_watts", ()),
    (catalog.GPU_POWER_LIMIT_DEFAULT, "power_limit_default_watts", ()),
    (catalog.GPU_PCIE_GENERATION, "pcie_generation", ()),
    (catalog.GPU_PCIE_WIDTH, "pcie_width", ()),
    (catalog.GPU_PCIE_GENERATION_MAX, "pcie_max_generation", ()),
    (catalog.GPU_PCIE_WIDTH_MAX, "pcie_max_width", ()),
    (catalog.GPU_ECC_ENABLED, "ecc_enabled", ()),
    (catalog.GPU_ECC_ERRORS, "ecc_corrected_volatile", ((catalog.ECC_ERROR_TYPE, "corrected"),)),
    (catalog.GPU_ECC_ERRORS, "ecc_uncorrected_volatile", ((catalog.ECC_ERROR_TYPE, "uncorrected"),)),
    (catalog.GPU_REMAPPED_ROWS, "remapped_rows", ()),
    (catalog.GPU_REMAPPED_ROWS_PENDING, "remapped_rows_pending", ()),
    (catalog.GPU_REMAPPED_ROWS_FAILED, "remapped_rows_failed", ()),
    (catalog.GPU_RETIRED_PAGES_PENDING, "retired_pages_pending", ()),
    (catalog.GPU_NVLINK_LINKS_ACTIVE, "nvlink_active_links", ()),
)
"""The live health gauges: (metric, the snapshot condition it exports, extra labels).  Each is read from
:meth:`NvmlCollector.conditions` at every collect, in the condition's base unit; a condition the GPU could
not answer is left out of the answer, and so its series is absent, never 0."""

# nvml.h's values, for a binding (or a fake) that lacks the constant.
_NVML_DEFAULTS: dict[str, int] = {
    "NVML_CLOCK_SM": 1, "NVML_CLOCK_MEM": 2, "NVML_FEATURE_ENABLED": 1, "NVML_DEVICE_MIG_ENABLE": 1,
    "NVML_MEMORY_ERROR_TYPE_CORRECTED": 0, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED": 1, "NVML_VOLATILE_ECC": 0,
    "NVML_NVLINK_MAX_LINKS": 18, "NVML_ERROR_INVALID_ARGUMENT": 2, "NVML_ERROR_NOT_SUPPORTED": 3,
    "NVML_FI_DEV_MEMORY_TEMP": 82, "NVML_SUCCESS": 0,
}


def reason_names(mask: int) -> list[str]:
    """Names of the reason bits set in an NVML clock-event mask."""
    return [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]


@dataclass(frozen=True)
class GpuIdentity:
    index: int
    uuid: str
    name: str
    pci_bus_id: str
    vbios_version: str
    mig_enabled: bool = False
    """MIG mode is on now (NVML's *current* mode; a pending change counts only after the GPU reset)."""
    mig_uuids: tuple[str, ...] = ()
    """The ``MIG-...`` UUIDs of the GPU's MIG instances (devices), in NVML's index order."""
    mig_error: str = ""
    """Why the MIG instances could not all be listed, if they could not."""


@dataclass(frozen=True)
class GpuSample:
    """One reading of a GPU, all in base units; None where the GPU does not report it."""

    time: float  # time.monotonic()
    energy_joules: float | None
    power_watts: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    utilization_ratio: float | None
    sm_clock_hertz: float | None
    memory_clock_hertz: float | None
    temperature_celsius: float | None
    clock_event_mask: int | None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def cuda_version_text(version: int) -> str:
    """NVML's integer CUDA version (12040) as text ("12.4")."""
    return f"{version // 1000}.{(version % 1000) // 10}"


class NvmlCollector:
    """Per-GPU telemetry, identity and versions from NVML."""

    name = "nvml"

    def __init__(self, hostname: str, module: ModuleType | Any | None = None):
        self._hostname = hostname
        self._log = LogOnce(log)
        self._lock = threading.Lock()
        self._gpus: list[GpuIdentity] = []
        self._handles: list[Any] = []
        self._nvlinks: dict[int, tuple[int, ...]] = {}
        """Per GPU index, the NVLink link indices it has (found at the first :meth:`conditions`): the
        other indices up to NVML_NVLINK_MAX_LINKS (36) are not asked again at every collect."""
        self._driver_version = ""
        self._cuda_driver_version = ""
        self._nv: Any = None  # pynvml, or a test's fake of it
        try:
            if module is None:
                import pynvml
                module = pynvml
            self._nv = module
            self._nv.nvmlInit()
            self._driver_version = _text(self._nv.nvmlSystemGetDriverVersion())
            self._cuda_driver_version = cuda_version_text(self._nv.nvmlSystemGetCudaDriverVersion())
            for index in range(self._nv.nvmlDeviceGetCount()):
                handle = self._nv.nvmlDeviceGetHandleByIndex(index)
                self._handles.append(handle)
                mig_enabled, mig_uuids, mig_error = self._mig(handle)
                self._gpus.append(GpuIdentity(
                    index=index,
                    uuid=_text(self._nv.nvmlDeviceGetUUID(handle)),
                    name=_text(self._nv.nvmlDeviceGetName(handle)),
                    pci_bus_id=_text(self._nv.nvmlDeviceGetPciInfo(handle).busId),
                    vbios_version=self._optional(self._nv.nvmlDeviceGetVbiosVersion, handle, default=""),
                    mig_enabled=mig_enabled, mig_uuids=mig_uuids, mig_error=mig_error,
                ))
            self._availability = Availability(True)
        except Exception as exc:  # NVMLError, or ImportError where nvidia-ml-py is missing
            self._availability = Availability(False, f"NVML unavailable: {exc}")
            self._log.warning(f"{self._availability.reason}; GPU telemetry is off, workloads run on the CPU")

    # ------------------------------------------------------------------ identity
    def availability(self) -> Availability:
        return self._availability

    @property
    def gpus(self) -> list[GpuIdentity]:
        return list(self._gpus)

    @property
    def driver_version(self) -> str:
        return self._driver_version

    @property
    def cuda_driver_version(self) -> str:
        return self._cuda_driver_version

    def read_driver_version(self) -> str:
        """The driver's version read now, not the one cached at start: a driver replaced while the agent
        runs (its library reloaded, or a node upgraded under a running DaemonSet pod) is seen between
        runs, without a worker (:mod:`sixdim.run.changes`).  Empty where NVML cannot say."""
        if not self._availability.available:
            return ""
        try:
            with self._lock:
                return _text(self._nv.nvmlSystemGetDriverVersion())
        except Exception as exc:  # NVMLError: a driver being replaced
            self._log.warning(f"NVML: the driver version cannot be read now: {exc}")
            return ""

    def gpu(self, index: int) -> GpuIdentity:
        for gpu in self._gpus:
            if gpu.index == index:
                return gpu
        raise LookupError(f"no NVIDIA GPU with index {index} (NVML sees {len(self._gpus)})")

    def _mig(self, handle: Any) -> tuple[bool, tuple[str, ...], str]:
        """(MIG mode on now, the MIG instances' UUIDs, why they could not all be listed).

        ``nvmlDeviceGetMigMode`` answers NVML_ERROR_NOT_SUPPORTED on GPUs without MIG (anything
        before A100, and GeForce/most workstation cards), and older bindings lack the function:
        both mean "not in MIG mode".  Instance slots run from 0 to ``nvmlDeviceGetMaxMigDeviceCount``;
        an empty slot answers NVML_ERROR_NOT_FOUND.  Any other failure is kept as ``mig_error``
        rather than making the whole collector unavailable: the GPU is then still known to be in
        MIG mode, which is what decides that it is not benchmarked.
        """
        nv = self._nv
        get_mode = getattr(nv, "nvmlDeviceGetMigMode", None)
        if get_mode is None:
            return False, (), ""
        try:
            current, _pending = get_mode(handle)
        except nv.NVMLError:
            return False, (), ""
        if current != nv.NVML_DEVICE_MIG_ENABLE:
            return False, (), ""
        uuids: list[str] = []
        try:
            for slot in range(nv.nvmlDeviceGetMaxMigDeviceCount(handle)):
                try:
                    mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
                except nv.NVMLError as exc:
                    if getattr(exc, "value", None) == nv.NVML_ERROR_NOT_FOUND:
                        continue  # no instance in this slot
                    raise
                uuids.append(_text(nv.nvmlDeviceGetUUID(mig)))
        except nv.NVMLError as exc:
            return True, tuple(uuids), f"cannot list its MIG instances: {exc}"
        return True, tuple(uuids), ""

    # ------------------------------------------------------------------ readings
    def _optional(self, fn: Callable[..., Any], *args: Any, default: Any = None) -> Any:
        """Call an NVML function; a field this GPU lacks (or any NVML error) reads as ``default``."""
        try:
            value = fn(*args)
        except self._nv.NVMLError as exc:
            self._log.warning(f"NVML {getattr(fn, '__name__', fn)}: {exc}")
            return default
        return _text(value) if isinstance(value, bytes) else value

    def sample(self, index: int) -> GpuSample:
        """Read one GPU now.

        The sample's time is taken before its first query (the energy counter): the window
        maths interpolates the counter at the sample's time, and a time taken after all eight
        queries would put every reading late by however long NVML took to answer them.
        """
        nv, handle = self._nv, self._handles[index]
        with self._lock:  # after waiting for another reader, so that wait is not counted
            taken = time.monotonic()
            energy_mj = self._optional(nv.nvmlDeviceGetTotalEnergyConsumption, handle)
            power_mw = self._optional(nv.nvmlDeviceGetPowerUsage, handle)
            memory = self._optional(nv.nvmlDeviceGetMemoryInfo, handle)
            utilization = self._optional(nv.nvmlDeviceGetUtilizationRates, handle)
            sm_mhz = self._optional(nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_SM)
            mem_mhz = self._optional(nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_MEM)
            temperature = self._optional(nv.nvmlDeviceGetTemperature, handle, nv.NVML_TEMPERATURE_GPU)
            mask = None
            # The "event" name is newer (driver 535+); older drivers only have the "throttle" symbol.
            for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
                if mask is None and hasattr(nv, name):
                    mask = self._optional(getattr(nv, name), handle)
        return GpuSample(
            time=taken,
            energy_joules=energy_mj / 1000.0 if energy_mj is not None else None,
            power_watts=power_mw / 1000.0 if power_mw is not None else None,
            memory_used_bytes=memory.used if memory is not None else None,
            memory_total_bytes=memory.total if memory is not None else None,
            utilization_ratio=utilization.gpu / 100.0 if utilization is not None else None,
            sm_clock_hertz=sm_mhz * 1e6 if sm_mhz is not None else None,
            memory_clock_hertz=mem_mhz * 1e6 if mem_mhz is not None else None,
            temperature_celsius=float(temperature) if temperature is not None else None,
            clock_event_mask=int(mask) if mask is not None else None,
        )

    def process_ids(self, index: int) -> list[int]:
        """PIDs of compute and graphics processes on the GPU (as NVML sees them).

        Raises pynvml's ``NVMLError`` when either list cannot be read.  Unlike a reading, a
        failed listing is never turned into a default: ``[]`` would tell the idle guard that the
        GPU is free when nobody knows.
        """
        handle = self._handles[index]
        with self._lock:
            compute = self._nv.nvmlDeviceGetComputeRunningProcesses(handle)
            graphics = self._nv.nvmlDeviceGetGraphicsRunningProcesses(handle)
        return sorted({p.pid for p in list(compute) + list(graphics)})

    # ------------------------------------------------------------------ conditions
    def _const(self, name: str) -> int:
        return int(getattr(self._nv, name, _NVML_DEFAULTS[name]))

    def _query(self, function: str, *args: Any) -> tuple[Any, str]:
        """(NVML's answer, "") or (None, why not): the reason names the function and NVML's error text."""
        fn = getattr(self._nv, function, None)
        if fn is None:
            return None, f"{function}: not in this nvidia-ml-py binding"
        try:
            return fn(*args), ""
        except self._nv.NVMLError as exc:
            return None, f"{function}: {exc}"
        except Exception as exc:  # a binding whose arguments or ctypes differ: one condition lost, not the run
            return None, f"{function}: {type(exc).__name__}: {exc}"

    def conditions(self, index: int, own_pids: Collection[int] = ()) -> dict[str, Any]:
        """The GPU's snapshot conditions now, in base units, plus ``"unavailable"``: name -> reason.

        Every condition of scope ``gpu`` and span ``snapshot`` in ``agent/core/conditions.py`` is
        either in the answer or in its ``unavailable``, with the NVML function and NVML's error
        text ("Not Supported", "Insufficient Permissions") or "not in this nvidia-ml-py binding".
        A value that was not read is never 0.  ``gpu_other_processes`` counts the PIDs NVML lists
        (compute and graphics) that are not in ``own_pids``.  Never raises: a failing query loses
        its own conditions only.  About 40 NVML calls (the NVLink links are asked one by one).
        """
        result: dict[str, Any] = {}
        unavailable: dict[str, str] = {}
        if not self._availability.available or not 0 <= index < len(self._handles):
            reason = self._availability.reason if not self._availability.available \
                else f"no NVIDIA GPU with index {index} (NVML sees {len(self._handles)})"
            result[UNAVAILABLE] = dict.fromkeys(SNAPSHOT_GPU_CONDITIONS, reason)
            return result
        handle = self._handles[index]
        enabled = self._const("NVML_FEATURE_ENABLED")
        mig_enabled = self._const("NVML_DEVICE_MIG_ENABLE")
        sm, mem = self._const("NVML_CLOCK_SM"), self._const("NVML_CLOCK_MEM")
        volatile = self._const("NVML_VOLATILE_ECC")

        def mw(v: Any) -> float:
            return int(v) / 1000.0

        def mhz(v: Any) -> float:
            return int(v) * 1e6

        def flag(v: Any) -> int:
            return int(int(v) == enabled)

        def remapped(v: Any) -> dict[str, Any]:
            corrected, uncorrected, pending, failure = v
            return {"remapped_rows": int(corrected) + int(uncorrected),
                    "remapped_rows_pending": int(bool(pending)), "remapped_rows_failed": int(bool(failure))}

        # (conditions, NVML function, its arguments after the handle, NVML's answer -> {condition: value})
        queries: tuple[tuple[tuple[str, ...], str, tuple[Any, ...], Callable[[Any], dict[str, Any]]], ...] = (
            (("power_limit_watts",), "nvmlDeviceGetEnforcedPowerLimit", (),
             lambda v: {"power_limit_watts": mw(v)}),
            (("power_limit_default_watts",), "nvmlDeviceGetPowerManagementDefaultLimit", (),
             lambda v: {"power_limit_default_watts": mw(v)}),
            (("applications_sm_clock_hertz",), "nvmlDeviceGetApplicationsClock", (sm,),
             lambda v: {"applications_sm_clock_hertz": mhz(v)}),
            (("applications_memory_clock_hertz",), "nvmlDeviceGetApplicationsClock", (mem,),
             lambda v: {"applications_memory_clock_hertz": mhz(v)}),
            (("max_sm_clock_hertz",), "nvmlDeviceGetMaxClockInfo", (sm,), lambda v: {"max_sm_clock_hertz": mhz(v)}),
            (("max_memory_clock_hertz",), "nvmlDeviceGetMaxClockInfo", (mem,),
             lambda v: {"max_memory_clock_hertz": mhz(v)}),
            (("ecc_enabled",), "nvmlDeviceGetEccMode", (), lambda v: {"ecc_enabled": flag(v[0])}),  # [current, pending]
            (("mig_enabled",), "nvmlDeviceGetMigMode", (), lambda v: {"mig_enabled": int(int(v[0]) == mig_enabled)}),
            (("persistence_mode",), "nvmlDeviceGetPersistenceMode", (), lambda v: {"persistence_mode": flag(v)}),
            (("compute_mode",), "nvmlDeviceGetComputeMode", (), lambda v: {"compute_mode": int(v)}),
            (("pcie_generation",), "nvmlDeviceGetCurrPcieLinkGeneration", (), lambda v: {"pcie_generation": int(v)}),
            (("pcie_width",), "nvmlDeviceGetCurrPcieLinkWidth", (), lambda v: {"pcie_width": int(v)}),
            (("pcie_max_generation",), "nvmlDeviceGetMaxPcieLinkGeneration", (),
             lambda v: {"pcie_max_generation": int(v)}),
            (("pcie_max_width",), "nvmlDeviceGetMaxPcieLinkWidth", (), lambda v: {"pcie_max_width": int(v)}),
            (("ecc_corrected_volatile",), "nvmlDeviceGetTotalEccErrors",
             (self._const("NVML_MEMORY_ERROR_TYPE_CORRECTED"), volatile),
             lambda v: {"ecc_corrected_volatile": int(v)}),
            (("ecc_uncorrected_volatile",), "nvmlDeviceGetTotalEccErrors",
             (self._const("NVML_MEMORY_ERROR_TYPE_UNCORRECTED"), volatile),
             lambda v: {"ecc_uncorrected_volatile": int(v)}),
            (("retired_pages_pending",), "nvmlDeviceGetRetiredPagesPendingStatus", (),
             lambda v: {"retired_pages_pending": flag(v)}),
            (("remapped_rows_pending", "remapped_rows_failed", "remapped_rows"), "nvmlDeviceGetRemappedRows", (),
             remapped),
        )
        with self._lock:
            for names, function, args, convert in queries:
                answer, reason = self._query(function, handle, *args)
                if not reason:
                    try:
                        result.update(convert(answer))
                        continue
                    except Exception as exc:  # an answer of another shape than this code knows
                        reason = f"{function} answered {answer!r}: {type(exc).__name__}: {exc}"
                for name in names:
                    unavailable[name] = reason
            temperature, reason = self._memory_temperature(handle)
            if temperature is None:
                unavailable["memory_temperature_celsius"] = reason
            else:
                result["memory_temperature_celsius"] = temperature
            links, reason = self._nvlink_active_links(handle, index)
            if links is None:
                unavailable["nvlink_active_links"] = reason
            else:
                result["nvlink_active_links"] = links
            compute, reason = self._query("nvmlDeviceGetComputeRunningProcesses", handle)
            graphics, graphics_reason = self._query("nvmlDeviceGetGraphicsRunningProcesses", handle)
        reason = reason or graphics_reason
        if not reason:
            try:
                pids = {int(p.pid) for p in list(compute) + list(graphics)}
                result["gpu_other_processes"] = len(pids - {int(p) for p in own_pids})
            except Exception as exc:
                reason = f"process lists of another shape: {type(exc).__name__}: {exc}"
        if reason:
            unavailable["gpu_other_processes"] = reason
        result[UNAVAILABLE] = unavailable
        return result

    def _memory_temperature(self, handle: Any) -> tuple[float | None, str]:
        """(HBM temperature in °C, "") or (None, why not), from NVML's field values: the call succeeds and
        each field carries its own return code, so "not supported" is read from the field."""
        function = "nvmlDeviceGetFieldValues(NVML_FI_DEV_MEMORY_TEMP)"
        values, reason = self._query("nvmlDeviceGetFieldValues", handle, [self._const("NVML_FI_DEV_MEMORY_TEMP")])
        if reason:
            return None, reason
        try:
            value = values[0]
            code = int(value.nvmlReturn)
            if code != self._const("NVML_SUCCESS"):
                try:
                    text = str(self._nv.NVMLError(code))  # NVML's own text for the field's code
                except Exception:
                    text = f"NVML error {code}"
                return None, f"{function}: {text}"
            kind = int(value.valueType)
            number = {0: value.value.dVal, 1: value.value.uiVal, 2: value.value.ulVal, 3: value.value.ullVal,
                      4: value.value.sllVal, 5: value.value.siVal}.get(kind)
            if number is None:
                return None, f"{function}: value of type {kind}"
            return float(number), ""
        except Exception as exc:  # a binding whose structure differs: this condition lost, not the others
            return None, f"{function}: {type(exc).__name__}: {exc}"

    def _nvlink_active_links(self, handle: Any, index: int) -> tuple[int | None, str]:
        """(links up, "") or (None, why not).  A link index the GPU does not have answers
        NOT_SUPPORTED or INVALID_ARGUMENT and is no link; any other error leaves the count unknown
        (a count of the links that did answer would read as links down).  The links a GPU has are
        found once and remembered: later calls ask only those."""
        not_a_link = {self._const("NVML_ERROR_NOT_SUPPORTED"), self._const("NVML_ERROR_INVALID_ARGUMENT")}
        function = "nvmlDeviceGetNvLinkState"
        fn = getattr(self._nv, function, None)
        if fn is None:
            return None, f"{function}: not in this nvidia-ml-py binding"
        enabled = self._const("NVML_FEATURE_ENABLED")
        known = self._nvlinks.get(index)
        active, links, first_error = 0, [], ""
        for link in known if known is not None else range(self._const("NVML_NVLINK_MAX_LINKS")):
            try:
                state = fn(handle, link)
            except self._nv.NVMLError as exc:
                if known is None and getattr(exc, "value", None) in not_a_link:
                    first_error = first_error or str(exc)
                    continue
                return None, f"{function}(link {link}): {exc}"
            except Exception as exc:
                return None, f"{function}(link {link}): {type(exc).__name__}: {exc}"
            links.append(link)
            active += int(int(state) == enabled)
        if not links:
            return None, f"{function}: {first_error or 'no link'} on every link (no NVLink)"
        self._nvlinks[index] = tuple(links)
        return active, ""

    # ------------------------------------------------------------------ export
    def identity_labels(self, gpu: GpuIdentity) -> dict[str, str]:
        return {catalog.HOSTNAME: self._hostname, catalog.GPU: str(gpu.index), catalog.UUID: gpu.uuid,
                catalog.MODEL_NAME: gpu.name, catalog.PCI_BUS_ID: gpu.pci_bus_id}

    def collect(self) -> list[Sample]:
        """Identity, live readings and health of every GPU.  Per GPU: :meth:`sample` (8 NVML queries) and
        :meth:`conditions` (18, the NVLink links one by one and the two process lists), whose process lists
        also give ``sixdim_gpu_processes``: nothing is asked twice."""
        if not self._availability.available:
            return []
        samples: list[Sample] = []
        for gpu in self._gpus:
            labels = self.identity_labels(gpu)
            samples.append(Sample(catalog.GPU_INFO, {
                **labels, catalog.DRIVER_VERSION: self._driver_version,
                "cuda_driver_version": self._cuda_driver_version, "vbios_version": gpu.vbios_version}, 1.0))
            reading = self.sample(gpu.index)
            for metric, value in (
                (catalog.GPU_POWER, reading.power_watts),
                (catalog.GPU_ENERGY, reading.energy_joules),
                (catalog.GPU_MEMORY_USED, reading.memory_used_bytes),
                (catalog.GPU_MEMORY_TOTAL, reading.memory_total_bytes),
                (catalog.GPU_UTILIZATION, reading.utilization_ratio),
                (catalog.GPU_SM_CLOCK, reading.sm_clock_hertz),
                (catalog.GPU_MEMORY_CLOCK, reading.memory_clock_hertz),
                (catalog.GPU_TEMPERATURE, reading.temperature_celsius),
            ):
                if value is not None:
                    samples.append(Sample(metric, labels, float(value)))
            if reading.clock_event_mask is not None:
                for bit, reason in CLOCK_EVENT_REASONS.items():
                    samples.append(Sample(catalog.GPU_THROTTLE, {**labels, "reason": reason},
                                          1.0 if reading.clock_event_mask & bit else 0.0))
            samples.extend(self._health(gpu.index, labels))
        return samples

    def _health(self, index: int, labels: dict[str, str]) -> list[Sample]:
        """The health gauges (:data:`HEALTH_GAUGES`) and the process count, from one :meth:`conditions`.

        With no PIDs of its own, ``gpu_other_processes`` counts every PID NVML lists, compute and
        graphics, as :meth:`process_ids` does; where either list cannot be read it is absent, not 0:
        nobody knows how many there are."""
        conditions = self.conditions(index)
        unavailable: dict[str, str] = conditions.get(UNAVAILABLE, {})
        out = [Sample(metric, {**labels, **dict(extra)} if extra else labels, float(conditions[name]))
               for metric, name, extra in HEALTH_GAUGES if name in conditions]
        if "gpu_other_processes" in conditions:
            out.append(Sample(catalog.GPU_PROCESSES, labels, float(conditions["gpu_other_processes"])))
        else:
            self._log.warning(f"NVML process list of GPU {index}: {unavailable.get('gpu_other_processes', '?')}")
        return out
