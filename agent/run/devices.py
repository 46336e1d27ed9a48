"""Devices a workload can run on, found without torch (NVML for GPUs), and the locks that keep
two runs off one device.

A GPU in MIG mode is still a :class:`Device` (so a suite configured for it records why it was
not benchmarked, rather than the device vanishing), but it carries its MIG state and
:attr:`Device.mig_reason` says why sixdim does not run on it: see that property.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

from sixdim.collectors.host import cpu_model_name
from sixdim.collectors.nvml import NvmlCollector
from sixdim.run.instance import DeviceFileLocks


class DeviceError(ValueError):
    """A device was asked for that this host does not have."""


@dataclass(frozen=True)
class Device:
    type: str  # "cpu" or "cuda"
    index: int | None = None
    uuid: str = ""
    model_name: str = ""
    pci_bus_id: str = ""
    mig_enabled: bool = False
    mig_uuids: tuple[str, ...] = ()
    mig_error: str = ""

    @property
    def name(self) -> str:
        return "cpu" if self.type == "cpu" else f"cuda:{self.index}"

    @property
    def mig_reason(self) -> str | None:
        """Why this GPU is not benchmarked because of MIG, or None when MIG is off.

        A MIG-enabled GPU is skipped, naming its instances, instead of run on them.  CUDA cannot
        use the whole GPU at all (pinned by its ``GPU-`` UUID the worker sees no device, which
        used to surface as an obscure ``failed``).  Running on each instance instead would need
        what this agent does not have: an instance shares the GPU's power, clocks and energy
        counter with the other instances (production may be on them), its share of the SMs makes
        the published-peak ratio wrong, and the catalog has no MIG labels (dcgm-exporter's
        ``GPU_I_ID``/``GPU_I_PROFILE``), so its results would be exported as the whole GPU's.
        """
        if not self.mig_enabled:
            return None
        how = f"nvidia-smi -i {self.index} -mig 0, then reset the GPU"
        if self.mig_uuids:
            listed = f"split into {len(self.mig_uuids)} MIG instance(s): {', '.join(self.mig_uuids)}"
        else:
            listed = "with no MIG instance created"
        if self.mig_error:
            listed += f" ({self.mig_error})"
        return (f"GPU {self.index} is in MIG mode, {listed}; sixdim benchmarks whole GPUs only "
                f"(an instance shares the GPU's power, clocks and energy counter with the others); "
                f"to benchmark it, disable MIG ({how})")

    def worker_environment(self) -> dict[str, str]:
        """Pin the worker to this GPU by UUID (immune to index reordering); hide GPUs from CPU runs."""
        return {"CUDA_VISIBLE_DEVICES": self.uuid if self.type == "cuda" else ""}

    @property
    def worker_device(self) -> str:
        """The torch device inside the worker, which sees only its one GPU."""
        return "cuda:0" if self.type == "cuda" else "cpu"


def cpu_device() -> Device:
    return Device("cpu", model_name=cpu_model_name())


def resolve(selectors: tuple[str, ...] | list[str], nvml: NvmlCollector, *, where: str = "") -> list[Device]:
    """Devices for 'auto' (every GPU, or the CPU where NVML sees none), 'cpu' and 'cuda:N'.

    ``where`` names what asked for them (a file and key, a flag), for the error's first words."""
    try:
        return _resolve(selectors, nvml)
    except DeviceError as exc:
        raise DeviceError(f"{where}: {exc}" if where else str(exc)) from None


def _resolve(selectors: tuple[str, ...] | list[str], nvml: NvmlCollector) -> list[Device]:
    devices: list[Device] = []
    for selector in selectors:
        if selector == "auto":
            found = [_gpu(nvml, g.index) for g in nvml.gpus] if nvml.availability().available else []
            devices.extend(found or [cpu_device()])
        elif selector == "cpu":
            devices.append(cpu_device())
        elif selector.startswith("cuda:") and selector[5:].isdigit():
            if not nvml.availability().available:
                raise DeviceError(f"device {selector!r} asked for, but {nvml.availability().reason}")
            devices.append(_gpu(nvml, int(selector[5:])))
        else:
            raise DeviceError(f"device {selector!r}: expected 'auto', 'cpu' or 'cuda:N'")
    unique: dict[str, Device] = {}
    for device in devices:
        unique.setdefault(device.name, device)
    return list(unique.values())


def host_gpus(nvml: NvmlCollector) -> list[Device]:
    """Every GPU of the host, in NVML's index order (PCI bus order: what CUDA_DEVICE_ORDER=PCI_BUS_ID
    gives), for host-wide workloads; empty where NVML is unavailable."""
    if not nvml.availability().available:
        return []
    return [_gpu(nvml, g.index) for g in nvml.gpus]


def _gpu(nvml: NvmlCollector, index: int) -> Device:
    try:
        gpu = nvml.gpu(index)
    except LookupError as exc:
        raise DeviceError(str(exc)) from None
    return Device("cuda", gpu.index, gpu.uuid, gpu.name, gpu.pci_bus_id, mig_enabled=gpu.mig_enabled,
                  mig_uuids=gpu.mig_uuids, mig_error=gpu.mig_error)


LOCK_POLL_SECONDS = 0.5
"""How often a run waiting for a device lock checks whether the agent is stopping."""


def _lock_order(device: Device) -> tuple[int, int]:
    return (0, 0) if device.type == "cpu" else (1, device.index if device.index is not None else -1)


def _acquire_unless_stopped(lock: threading.RLock, stop: threading.Event | None) -> bool:
    while not lock.acquire(timeout=LOCK_POLL_SECONDS):
        if stop is not None and stop.is_set():
            return False
    return True


class DeviceLocks:
    """One lock per device, shared by every job of the agent that uses the device, and (with
    ``files``) the device's lock file, shared with every other sixdim process on the host.

    A per-device run holds its device's lock; a host-wide run holds every GPU's.  Locks are
    always taken in one fixed order (the CPU, then GPUs by NVML index), so two runs that each
    need several can never wait on each other in a cycle.  They are re-entrant: the scheduler
    holds a device's lock for a whole suite, and a host-wide group inside that suite asks for
    it again along with the others.  That stays in order because a host-wide workload runs from
    the host's first GPU, whose lock is the lowest.  The in-process lock is taken before the file
    lock, so only one thread of a process ever waits on a file lock, and re-entry is counted.

    ``wait`` False: a device whose lock file another process holds is not waited for:
    :class:`sixdim.run.instance.InstanceError` names that process (``sixdim run --no-wait``).
    """

    def __init__(self, files: DeviceFileLocks | None = None, *, wait: bool = True) -> None:
        self._locks: dict[str, threading.RLock] = {}
        self._guard = threading.Lock()
        self.files = files
        self.wait = wait

    def lock(self, device: Device) -> threading.RLock:
        with self._guard:
            return self._locks.setdefault(device.name, threading.RLock())

    @contextmanager
    def hold(self, devices: Iterable[Device], stop: threading.Event | None = None,
             on_wait: Callable[[Device, str], None] | None = None, what: str = "") -> Iterator[bool]:
        """Hold the locks of ``devices`` (in the fixed order) for the ``with`` block.

        Yields True once all are held, or False if ``stop`` was set while waiting (none are held
        then).  ``on_wait`` is told of each device whose lock was busy, and who holds it (another
        job of this agent, or another process), before it waits for it.  ``what`` goes into the
        lock file, for another process's message.
        """
        ordered = sorted({d.name: d for d in devices}.values(), key=_lock_order)
        held: list[tuple[threading.RLock, Device, bool]] = []
        try:
            for device in ordered:
                lock = self.lock(device)
                if not lock.acquire(blocking=False):
                    if on_wait is not None:
                        on_wait(device, "another suite of this agent")
                    if not _acquire_unless_stopped(lock, stop):
                        break
                try:
                    filed = self.files is not None and self.files.acquire(
                        device, stop, None if on_wait is None else partial(on_wait, device),
                        wait=self.wait, what=what)
                except BaseException:
                    lock.release()
                    raise
                if self.files is not None and not filed:  # stopped while waiting for another process
                    lock.release()
                    break
                held.append((lock, device, filed))
            all_held = len(held) == len(ordered)
            if not all_held:  # stopping: give back what was taken, hold nothing
                self._release(held)
                held = []
            yield all_held
        finally:
            self._release(held)

    def _release(self, held: list[tuple[threading.RLock, Device, bool]]) -> None:
        for lock, device, filed in reversed(held):
            if filed and self.files is not None:
                self.files.release(device)
            lock.release()
