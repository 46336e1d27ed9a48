"""Devices a workload can run on, found without torch (NVML for GPUs)."""

from __future__ import annotations

from dataclasses import dataclass

from agent import catalog
from collectors.host import cpu_model_name
from collectors.nvml import NvmlCollector


class DeviceError(ValueError):
    """A device was asked for that this host does not have."""


@dataclass(frozen=True)
class Device:
    type: str  # "cpu" or "cuda"
    index: int | None = None
    uuid: str = ""
    model_name: str = ""
    pci_bus_id: str = ""

    @property
    def name(self) -> str:
        return "cpu" if self.type == "cpu" else f"cuda:{self.index}"

    def labels(self, hostname: str) -> dict[str, str]:
        """The device labels of the catalog (dcgm-exporter's names; empty GPU fields on a CPU)."""
        return {catalog.HOSTNAME: hostname, catalog.GPU: "" if self.index is None else str(self.index),
                catalog.UUID: self.uuid, catalog.MODEL_NAME: self.model_name,
                catalog.PCI_BUS_ID: self.pci_bus_id, catalog.DEVICE_TYPE: self.type}

    def worker_environment(self) -> dict[str, str]:
        """Pin the worker to this GPU by UUID (immune to index reordering); hide GPUs from CPU runs."""
        return {"CUDA_VISIBLE_DEVICES": self.uuid if self.type == "cuda" else ""}

    @property
    def worker_device(self) -> str:
        """The torch device inside the worker, which sees only its one GPU."""
        return "cuda:0" if self.type == "cuda" else "cpu"


def cpu_device() -> Device:
    return Device("cpu", model_name=cpu_model_name())


def resolve(selectors: tuple[str, ...] | list[str], nvml: NvmlCollector) -> list[Device]:
    """Devices for 'auto' (every GPU, or the CPU where NVML sees none), 'cpu' and 'cuda:N'."""
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


def _gpu(nvml: NvmlCollector, index: int) -> Device:
    try:
        gpu = nvml.gpu(index)
    except LookupError as exc:
        raise DeviceError(str(exc)) from None
    return Device("cuda", gpu.index, gpu.uuid, gpu.name, gpu.pci_bus_id)
