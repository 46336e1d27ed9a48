"""Records of running workers, so that an agent that dies leaves nothing running and nothing lost.

Before each worker starts, the agent writes a record in ``STATE_DIR/workers/<tag>/`` (the run's
device, suite and cases) and holds an ``flock`` on it while the worker runs; the worker's request
and streamed results go to the same folder.  When the run ends the folder is removed.

An agent that is SIGKILLed (or crashes, or loses power) cannot remove it.  Its worker stops itself
(:func:`sixdim.run.worker.watch_parent`), but should anything of the run still be alive (a worker stuck
where its watch thread cannot run), the next sixdim to start, daemon or ``sixdim run``, finds the
record unlocked (the kernel dropped the dead agent's lock), stops every process of the run
(:func:`sixdim.run.proctree.stop_run`, by the worker's PID and start time and by the run's tag), and
records the run: the cases its worker finished with their results (the agent recorded each as it
ended, so only those it had no time for are added: a case's ``uid`` is its worker's tag and its
index, and a result already in the history is not written twice; the agent's telemetry of those is
lost), and the suite run's one :class:`sixdim.core.results.Interruption` with :data:`DIED_REASON`,
counting the case it was in and every case after it (the record holds the suite's case count and
how many had ended before this worker), none of which is recorded as a run.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sixdim.core.results import INTERRUPTED
from sixdim.run import proctree
from sixdim.run.devices import Device
from sixdim.run.instance import STATE_DIR_MODE, ensure_state_dir
from sixdim.workloads.spec import Case, WorkloadSpec

log = logging.getLogger(__name__)

WORKERS = "workers"
RECORD = "record.json"

DIED_REASON = (f"{INTERRUPTED}: the sixdim process that ran this suite (PID {{pid}}) ended while it ran "
               "(killed or crashed); the next sixdim found its worker record and stopped what was left")
"""The reason of the interruption of a dead agent's suite run; it starts like every interruption."""


@dataclass
class WorkerRecord:
    tag: str
    agent_pid: int
    command: str
    suite: str
    device: dict[str, Any]
    cases: list[dict[str, Any]]  # workload, params, precision, shape, mode, kernel_pass
    started_at: float
    worker_pid: int = 0
    worker_start_time: int = 0
    history: str = ""
    """The history the run's results belong to: a sixdim on another history stops the run's
    processes but leaves the recording to an agent of this one."""
    suite_cases: int = 0
    """The cases of the whole suite run this worker is part of (0: unknown, a record of an older version)."""
    suite_done: int = 0
    """The suite run's cases that had ended before this worker started."""
    suite_started_at: float = 0.0
    """When the suite run started (Unix time)."""
    later_workloads: list[str] = field(default_factory=list)
    """The workloads of the suite run's cases after this worker's."""


class RunJournal:
    """One run's record folder, locked while the run is alive."""

    def __init__(self, folder: Path, record: WorkerRecord, fd: int):
        self.folder = folder
        self.record = record
        self._fd = fd

    def worker_started(self, pid: int) -> None:
        """Note the worker's PID and start time (its identity, should it need stopping by a successor)."""
        self.record.worker_pid = pid
        self.record.worker_start_time = proctree.start_time(pid) or 0
        _write(self._fd, self.record)

    def close(self) -> None:
        """The run is over and recorded: remove its folder, then drop the lock."""
        shutil.rmtree(self.folder, ignore_errors=True)
        os.close(self._fd)


def _write(fd: int, record: WorkerRecord) -> None:
    data = (json.dumps(asdict(record)) + "\n").encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)
    os.fsync(fd)


def device_fields(device: Device) -> dict[str, Any]:
    return {"type": device.type, "index": device.index, "uuid": device.uuid, "model_name": device.model_name,
            "pci_bus_id": device.pci_bus_id}


class WorkerRecords:
    """The ``workers`` folder of a state directory."""

    def __init__(self, state_dir: str | Path, command: str, history: str = ""):
        self.folder = ensure_state_dir(Path(state_dir) / WORKERS)
        self.command = command
        self.history = history

    def begin(self, tag: str, device: Device, suite: str, items: list[tuple[WorkloadSpec, Case]], *,
              suite_cases: int = 0, suite_done: int = 0, suite_started_at: float = 0.0,
              later_workloads: list[str] | None = None) -> RunJournal:
        """Create and lock a run's record folder, before its worker starts.  ``suite_*``: the suite run
        the worker is part of (its cases, those ended before this worker, its start, the workloads after
        this worker's cases), for the interruption a successor records should the agent die."""
        folder = self.folder / tag
        folder.mkdir(mode=STATE_DIR_MODE)
        record = WorkerRecord(tag=tag, agent_pid=os.getpid(), command=self.command, suite=suite,
                              device=device_fields(device), started_at=time.time(), history=self.history,
                              cases=[{"workload": spec.name, "params": case.params, "precision": case.precision,
                                      "shape": case.shape, "mode": case.mode, "kernel_pass": case.kernel_pass}
                                     for spec, case in items],
                              suite_cases=suite_cases, suite_done=suite_done, suite_started_at=suite_started_at,
                              later_workloads=list(later_workloads or []))
        fd = os.open(folder / RECORD, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        _write(fd, record)
        return RunJournal(folder, record, fd)

    def left_behind(self) -> list[tuple[Path, int]]:
        """Record folders whose agent is gone (their lock is free), each locked now by this process
        (a second sixdim starting at the same time skips them)."""
        found = []
        for folder in sorted(self.folder.iterdir()) if self.folder.is_dir() else []:
            try:
                fd = os.open(folder / RECORD, os.O_RDWR | os.O_CLOEXEC)
            except OSError:  # no record: the agent died before writing it; nothing ran
                shutil.rmtree(folder, ignore_errors=True)
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # a live agent's run
                os.close(fd)
                continue
            found.append((folder, fd))
        return found


def read_record(folder: Path) -> WorkerRecord | None:
    """A record folder's record; None (with a warning) when it cannot be read: a record is
    written whole and fsynced before its worker starts, so an unreadable one ran nothing."""
    try:
        data = json.loads((folder / RECORD).read_text())
        return WorkerRecord(**data)
    except (OSError, ValueError, TypeError) as exc:
        log.warning("worker record %s cannot be read (%s); removing it", folder, exc)
        return None


def stop_left_behind(record: WorkerRecord) -> list[int]:
    """Kill every process of a dead agent's run: the worker's tree, if the worker is still the same
    process, and anything carrying the run's tag."""
    root = record.worker_pid if record.worker_pid and proctree.alive(record.worker_pid,
                                                                     record.worker_start_time) else None
    killed = proctree.stop_run(root, record.tag)
    proctree.wait_gone(killed, 5.0)
    return killed
