"""The one result schema: every run, whatever its workload or outcome, is a RunRecord."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from sixdim.core import catalog

INTERRUPTED = "interrupted"
"""The start of the reason of cases a shutdown, or the death of their agent, stopped before they ran
or finished (agent/run/runner.py, agent/run/orphans.py): kept in the history, but neither counted as runs
or skips nor given series of their own."""


class SeriesKey(NamedTuple):
    """What one series stands for: a device and one measurement on it.  Versions are labels, not part
    of the key, so a driver upgrade continues a series (with a break point) rather than starting one.
    The history's columns and index, the board, the verdicts and the reports all key by this."""

    hostname: str
    device_type: str
    gpu: str
    uuid: str
    workload: str
    precision: str
    shape: str
    mode: str
    kernel_pass: str

    @property
    def device(self) -> tuple[str, str, str, str]:
        """Host, device type, GPU index and UUID: which device."""
        return self.hostname, self.device_type, self.gpu, self.uuid


SERIES_FIELDS: tuple[str, ...] = SeriesKey._fields
"""The series key's fields, which are also the history's column names."""


def counts_as_run(status: str, reason: str) -> bool:
    """Whether a run is counted in ``sixdim_workload_runs_total``: all but the interrupted skips."""
    return not (status == "skipped" and reason.startswith(INTERRUPTED))


@dataclass
class RunRecord:
    suite: str
    workload: str
    precision: str
    params: dict[str, Any]
    shape: str
    mode: str
    kernel_pass: str
    hostname: str
    device_type: str
    device: str
    gpu: str
    uuid: str
    model_name: str
    pci_bus_id: str
    status: str  # one of catalog.RUN_STATUSES
    reason: str
    started_at: float  # Unix time
    ended_at: float
    figures: dict[str, float] = field(default_factory=dict)
    """Exported values in base units, keyed by the catalog's ``figure`` names."""
    details: dict[str, Any] = field(default_factory=dict)
    """Kept in history only: the round distribution, telemetry extras, the worker's last output."""
    environment: dict[str, Any] = field(default_factory=dict)
    """Driver, CUDA runtime, cuDNN, NCCL, torch, Python and sixdim versions, and the device model."""
    conditions: dict[str, Any] = field(default_factory=dict)
    """What the run ran under, beyond versions: the GPU's and host's settings, health and contention
    (``sixdim.core.conditions``), for the diagnosis of a regression's cause.  Unreadable ones are
    listed under ``"unavailable"`` with the reason."""
    id: int | None = None
    uid: str = ""
    """A unique name for the run, given when it is first recorded; it lets a result that waited in
    memory for the database (locked, full) be recognised when it is finally written, so it is
    counted once."""

    def __post_init__(self) -> None:
        if self.status not in catalog.RUN_STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {catalog.RUN_STATUSES}")

    def value(self, figure: str) -> float | None:
        """A figure for export: a measured one, or the run's end time."""
        if figure == "ended_at":
            return self.ended_at
        value = self.figures.get(figure)
        return None if value is None else float(value)

    def key(self) -> SeriesKey:
        """The series this run belongs to (see :class:`SeriesKey`)."""
        return SeriesKey(self.hostname, self.device_type, self.gpu, self.uuid, self.workload, self.precision,
                         self.shape, self.mode, self.kernel_pass)

    def workload_labels(self) -> dict[str, str]:
        return {catalog.HOSTNAME: self.hostname, catalog.GPU: self.gpu, catalog.UUID: self.uuid,
                catalog.MODEL_NAME: self.model_name, catalog.PCI_BUS_ID: self.pci_bus_id,
                catalog.DEVICE_TYPE: self.device_type, catalog.WORKLOAD: self.workload,
                catalog.PRECISION: self.precision, catalog.SHAPE: self.shape, catalog.MODE: self.mode,
                catalog.PASS: self.kernel_pass}

    def result_labels(self) -> dict[str, str]:
        return {**self.workload_labels(),
                catalog.DRIVER_VERSION: str(self.environment.get("driver", "")),
                catalog.CUDA_VERSION: str(self.environment.get("cuda_runtime", "")),
                catalog.TORCH_VERSION: str(self.environment.get("torch", ""))}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
