"""The one result schema: every run, whatever its workload or outcome, is a RunRecord."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, NamedTuple

from sixdim.core import catalog

INTERRUPTED = "interrupted"
"""The start of the reason a shutdown, or the death of its agent, gives a suite run it stopped before every
case had run (agent/run/runner.py, agent/run/orphans.py).  Such a run is recorded once, as an
:class:`Interruption`, never as a record per case left; rows of older versions (``skipped`` with this reason)
are folded into one when the history is opened, and neither counted as runs or skips nor given series."""

SHAPE_SET = "shape_set"
"""The key of a case's (and so a run's) ``params`` that names its shape set: the shapes its run measured
of the same precision, mode and pass (sixdim.workloads.spec.shape_set_id).  A suite's summary is a
geometric mean over one shape set, never over the last results of shapes a changed configuration dropped."""


POWER_REFUSED = "power_refused"
"""The key of a case's details, True where its power phase ran and withheld its figure (the GPU busy for too
little of it, too few counter updates, the counter lost or its busy share unknown; workloads/measure/timing.py): the
daemon's own window telemetry, a stepped counter read unaligned, must not stand in for a figure the method
refused (agent/run/executor.py)."""

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


@dataclass(frozen=True)
class DeviceIdentity:
    """Which device a run (:class:`RunRecord`) or an interrupted suite run (:class:`Interruption`) was on: the
    one definition of the device fields both records carry, under these names and in this order (the
    history's ``runs`` and ``interruptions`` tables have them as columns, :mod:`sixdim.store.schema`), and of
    the labels they are exported under (:func:`device_labels`).  The records keep the fields flat, as their
    own (a dataclass cannot take another's fields in the middle of its own), so that every reader of
    ``record.hostname``, every constructor call and every row of the history stays as it is;
    tests/test_device_identity.py checks that both declare exactly these, in this order and of these types."""

    hostname: str
    device_type: str
    """The kind of device: ``cuda``, ``cpu``..."""
    device: str
    """The device's name as the worker was given it (``cuda:0``)."""
    gpu: str
    """The GPU's index, or empty (a CPU)."""
    uuid: str
    model_name: str
    pci_bus_id: str


DEVICE_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(DeviceIdentity))
"""The device fields of a run and of an interruption, which are also columns of both history tables, in order."""


def device_labels(on: DeviceIdentity | RunRecord | Interruption) -> dict[str, str]:
    """The labels of the device a record was on (hostname, GPU index, UUID, model, PCI bus id, device type, in the
    order the exposition writes them); the one mapping of the device fields to labels."""
    return {catalog.HOSTNAME: on.hostname, catalog.GPU: on.gpu, catalog.UUID: on.uuid,
            catalog.MODEL_NAME: on.model_name, catalog.PCI_BUS_ID: on.pci_bus_id, catalog.DEVICE_TYPE: on.device_type}


def is_interruption(status: str, reason: str) -> bool:
    """Whether a status and reason say the run was interrupted (a shutdown, the agent's death), not skipped."""
    return status == "skipped" and reason.startswith(INTERRUPTED)


def counts_as_run(status: str, reason: str) -> bool:
    """Whether a run is counted in ``sixdim_workload_runs_total``: all but interrupted ones (a record an
    older sixdim made per interrupted case, read back from its spool)."""
    return not is_interruption(status, reason)


def status_counts_text(counts: Mapping[str, int], cases_left: int = 0) -> str:
    """Case counts as sixdim tells them to a person, failures apart from the cases that did not run:
    ``40 cases: 30 ok; failures: 2 failed, 1 timeout; not run: 6 unsupported, 1 skipped`` and, where an
    interruption stopped the run, ``; interrupted: 12 cases not run``.  ``unsupported`` and ``skipped``
    are never failures (catalog.FAILURE_STATUSES, catalog.NOT_RUN_STATUSES)."""
    parts = [f"{counts.get('ok', 0)} ok"]
    for title, statuses in (("failures", catalog.FAILURE_STATUSES), ("not run", catalog.NOT_RUN_STATUSES)):
        found = [f"{counts[s]} {s}" for s in statuses if counts.get(s)]
        if found:
            parts.append(f"{title}: {', '.join(found)}")
    if cases_left:
        parts.append(f"interrupted: {plural(cases_left, 'case')} not run")
    return f"{plural(sum(counts.values()), 'case')}: " + "; ".join(parts)


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


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
        return {**device_labels(self), catalog.WORKLOAD: self.workload, catalog.PRECISION: self.precision,
                catalog.SHAPE: self.shape, catalog.MODE: self.mode, catalog.PASS: self.kernel_pass}

    def result_labels(self) -> dict[str, str]:
        return {**self.workload_labels(),
                **{label: str(self.environment.get(key, "")) for label, key in catalog.VERSION_KEYS.items()}}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Interruption:
    r"""A suite run that an interruption stopped before every case had run, recorded once: a shutdown
    (SIGTERM or SIGINT to the daemon, Ctrl-C of ``sixdim run``) or the death of the agent (recorded by
    the next sixdim that starts, from the run's worker record).  The cases that finished are
    :class:`RunRecord`\ s as usual; those left (the one in flight among them) have no record of their
    own: ``cases_left`` counts them."""

    suite: str
    hostname: str
    device_type: str
    device: str
    gpu: str
    uuid: str
    model_name: str
    pci_bus_id: str
    reason: str
    """Why: it starts with :data:`INTERRUPTED`."""
    started_at: float
    """When the suite run started (Unix time)."""
    ended_at: float
    """When the interruption stopped it."""
    cases_done: int
    """Cases of the run that had ended (recorded as runs)."""
    cases_left: int
    """Cases of the run that had not ended: not run, or stopped while they ran."""
    running: str = ""
    """The case the interruption stopped while it ran (workload, precision and shape), or empty."""
    workloads: list[str] = field(default_factory=list)
    """The workloads with cases left, in the suite's order."""
    id: int | None = None
    uid: str = ""
    """A unique name, as a run's: a retried write lands once."""

    def device_labels(self) -> dict[str, str]:
        return device_labels(self)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --- lean copies: what the daemon keeps of a run in memory ----------------------------------------

_LABEL_FIELDS = ("suite", "workload", "precision", "shape", "mode", "kernel_pass", "hostname", "device_type",
                 "device", "gpu", "uuid", "model_name", "pci_bus_id", "status", "reason")
_SHARED: dict[tuple[tuple[str, Any], ...], dict[str, Any]] = {}
"""Equal ``environment`` and ``params`` dicts of lean records, shared (bounded: :data:`_SHARED_MAX`)."""
_SHARED_MAX = 100_000


def shared(values: dict[str, Any]) -> dict[str, Any]:
    """One dict for all equal ones (never to be changed): many series of a host carry the same versions,
    environment and params."""
    try:
        key = tuple(sorted(values.items()))
        hash(key)
    except TypeError:  # a list or dict among the values: kept as it is
        return values
    found = _SHARED.get(key)
    if found is None:
        if len(_SHARED) >= _SHARED_MAX:
            _SHARED.clear()
        found = _SHARED[key] = values
    return found


def lean(record: RunRecord, figures: bool = True) -> RunRecord:
    """The part of a record the daemon keeps (the board's latest results, the verdicts' label source): no
    ``details`` or ``conditions`` (the round times, the worker's output and the run's conditions stay in the
    history), label texts interned, equal ``environment`` and ``params`` dicts shared between records;
    ``figures`` False: none (a record that only labels a run count or a verdict)."""
    kept = object.__new__(RunRecord)  # a copy without __init__'s checks: it is a valid record's
    fields = kept.__dict__
    fields.update(record.__dict__)
    for name in _LABEL_FIELDS:
        if isinstance(value := fields[name], str):
            fields[name] = sys.intern(value)
    # the figure names interned: each record's JSON decoding made its own copies (about 1 KB a record)
    fields.update(details={}, conditions={}, environment=shared(record.environment), params=shared(record.params),
                  figures={sys.intern(name): value for name, value in record.figures.items()} if figures else {})
    return kept
