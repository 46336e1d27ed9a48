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

**Results the history cannot take yet.**  A run's folder is removed only once the history has its
results, written or in its spool (:meth:`sixdim.store.history.History.unsaved`).  Where a full disk
refuses both, the agent writes the results the history holds in memory only, exactly as it recorded
them (runs and the suite run's interruption), to :data:`UNSAVED` in the folder (:meth:`RunJournal.keep`),
and holds the folder's lock until the history has them; a run that no worker ran (skipped, or
interrupted between workers) gets a folder of its own for them (:meth:`WorkerRecords.keep`).  A
successor finding such a folder adds those records as they are (each lands once: its ``uid``), and
derives nothing from the worker's results, which the agent had already recorded.

**Trust.**  A record is acted on only if no other user could have written it: the state folder and
the records' folder must be safe from other users (:func:`sixdim.config.trust.folder_problem`), and each
record folder and file this process's user's own, not a link, and not writable by group or others;
anything else is logged and left alone.  Even then the worker PID is signalled only when the
process is provably the worker (:func:`is_the_worker`: start time, owner and the run's tag), and the
scan for the run's tag takes only this user's processes (:func:`sixdim.run.proctree.tagged`): another
user's process that carries the tag (anyone can copy it into their own environment) is logged and left
alone.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import stat
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sixdim.config.trust import folder_problem
from sixdim.core.results import INTERRUPTED, Interruption, RunRecord
from sixdim.run import proctree
from sixdim.run.devices import Device
from sixdim.run.instance import STATE_DIR_MODE, InstanceError, ensure_state_dir
from sixdim.workloads.spec import Case, WorkloadSpec

log = logging.getLogger(__name__)

WORKERS = "workers"
FILE_MODE = 0o600
"""A record folder's files: the agent's user's alone (the folders are :data:`STATE_DIR_MODE`)."""
RECORD = "record.json"
UNSAVED = "unsaved.jsonl"
"""An ended run's results that the history held in memory only (a full disk): one JSON object a line,
written whole (a temporary file renamed into place), so that its presence says the run had ended."""

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

    def keep(self, records: list[RunRecord | Interruption]) -> bool:
        """The run has ended, and the history holds these of its results in memory only: write them to
        :data:`UNSAVED` (whole, or not at all), for a successor should this process end before the history
        has them.  False (logged) where it cannot be written."""
        lines = "".join(json.dumps({**record.to_dict(), "kind": "interruption" if isinstance(record, Interruption)
                                    else "run"}, sort_keys=True) + "\n" for record in records)
        temporary = self.folder / (UNSAVED + ".new")
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, FILE_MODE)
            try:
                os.fchmod(fd, FILE_MODE)  # whatever the umask
                os.write(fd, lines.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temporary, self.folder / UNSAVED)
            folder = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(folder)
            finally:
                os.close(folder)
        except OSError as exc:
            log.error("cannot keep %d result(s) the history could not take in %s either (%s): they are in memory "
                      "only", len(records), self.folder, exc.strerror or exc)
            return False
        return True

    def close(self) -> None:
        """The run is over and recorded: remove its folder, then drop the lock."""
        shutil.rmtree(self.folder, ignore_errors=True)
        os.close(self._fd)

    def release(self) -> None:
        """Drop the lock, leaving the folder for the next sixdim (a record of another history)."""
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
        # the configuration's check (sixdim.config.trust.check_folders), for callers without one: the state folder
        # itself, then the records' folder in it
        found = folder_problem(state_dir, os.geteuid()) or folder_problem(self.folder, os.geteuid())
        if found is not None:
            part, problem, fix = found
            raise InstanceError(f"cannot trust the worker records in {self.folder}: {part}: {problem} (another user "
                                f"could forge a record, and make sixdim kill a process of theirs choosing); fix: "
                                f"{fix} {part}, or choose another folder with --state-dir, SIXDIM_STATE_DIR or "
                                f"agent.state_dir")
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
        os.chmod(folder, STATE_DIR_MODE)  # mkdir's mode is masked by the umask: exactly it, whatever the umask
        record = WorkerRecord(tag=tag, agent_pid=os.getpid(), command=self.command, suite=suite,
                              device=device_fields(device), started_at=time.time(), history=self.history,
                              cases=[{"workload": spec.name, "params": case.params, "precision": case.precision,
                                      "shape": case.shape, "mode": case.mode, "kernel_pass": case.kernel_pass}
                                     for spec, case in items],
                              suite_cases=suite_cases, suite_done=suite_done, suite_started_at=suite_started_at,
                              later_workloads=list(later_workloads or []))
        fd = os.open(folder / RECORD, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, FILE_MODE)
        try:
            os.fchmod(fd, FILE_MODE)
            fcntl.flock(fd, fcntl.LOCK_EX)
            _write(fd, record)
        except BaseException:  # a full state folder (ENOSPC): no descriptor left holding a flock, no folder left
            os.close(fd)
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return RunJournal(folder, record, fd)

    def keep(self, tag: str, device: Device, suite: str, records: list[RunRecord | Interruption]) -> RunJournal | None:
        """A folder of its own, locked, for the results of a run that no worker ran (skipped, or interrupted
        before its worker started) which the history holds in memory only (:meth:`RunJournal.keep`); None
        (logged) where it cannot be made."""
        try:
            journal = self.begin(tag, device, suite, [])
        except OSError as exc:
            log.error("cannot keep %d result(s) the history could not take in %s either (%s): they are in memory "
                      "only", len(records), self.folder, exc.strerror or exc)
            return None
        if not journal.keep(records):
            journal.close()
            return None
        return journal

    def left_behind(self) -> list[tuple[Path, int]]:
        """Record folders whose agent is gone (their lock is free), each locked now by this process
        (a second sixdim starting at the same time skips them)."""
        found = []
        for folder in sorted(self.folder.iterdir()) if self.folder.is_dir() else []:
            why = _untrusted_folder(folder)
            if why:
                log.warning("worker record %s is not trusted (%s): not a record this sixdim's user wrote; left "
                            "alone, nothing it names is stopped or recorded", folder, why)
                continue
            try:
                fd = os.open(folder / RECORD, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
            except FileNotFoundError:  # no record: the agent died before writing it; nothing ran
                shutil.rmtree(folder, ignore_errors=True)
                continue
            except OSError as exc:  # a link (ELOOP), or unreadable
                log.warning("worker record %s is not trusted (%s %s): left alone, nothing it names is stopped or "
                            "recorded", folder, RECORD, "is a symbolic link" if os.path.islink(folder / RECORD)
                            else f"cannot be opened: {exc.strerror or exc}")
                continue
            why = _untrusted_file(os.fstat(fd))
            if why:
                os.close(fd)
                log.warning("worker record %s is not trusted (%s %s): not a record this sixdim's user wrote; left "
                            "alone, nothing it names is stopped or recorded", folder, RECORD, why)
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # a live agent's run
                os.close(fd)
                continue
            found.append((folder, fd))
        return found


def _untrusted_folder(folder: Path) -> str:
    """Why a record folder cannot be one this process's user made (empty when it can): a link, not a
    folder, another user's, or one its group or others can write (records are made 0700)."""
    try:
        status = os.lstat(folder)
    except OSError as exc:
        return f"cannot be looked at: {exc.strerror or exc}"
    if stat.S_ISLNK(status.st_mode):
        return "a symbolic link"
    if not stat.S_ISDIR(status.st_mode):
        return "not a folder"
    return _owner_and_mode(status)


def _untrusted_file(status: os.stat_result) -> str:
    """Why an opened record file cannot be one this process's user wrote (empty when it can)."""
    if not stat.S_ISREG(status.st_mode):
        return "is not a regular file"
    return _owner_and_mode(status)


def _owner_and_mode(status: os.stat_result) -> str:
    if status.st_uid != os.geteuid():
        return f"owned by uid {status.st_uid}, not {os.geteuid()}"
    if status.st_mode & 0o022:
        return f"mode {stat.S_IMODE(status.st_mode):04o}: its group or others can write it"
    return ""


def read_record(folder: Path) -> WorkerRecord | None:
    """A record folder's record; None (with a warning) when it cannot be read, or is not a file this
    process's user wrote (a link, another user's, one others can write): a record is written whole and
    fsynced before its worker starts, so an unreadable one ran nothing."""
    try:
        why = _untrusted_folder(folder)
        if why:
            raise ValueError(f"the folder is not trusted: {why}")
        fd = os.open(folder / RECORD, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        with open(fd, encoding="utf-8") as handle:
            why = _untrusted_file(os.fstat(handle.fileno()))
            if why:
                raise ValueError(f"{RECORD} is not trusted: {why}")
            data = json.loads(handle.read())
        return WorkerRecord(**data)
    except (OSError, ValueError, TypeError) as exc:
        log.warning("worker record %s cannot be read (%s); removing it", folder, exc)
        return None


def read_unsaved(folder: Path) -> list[RunRecord | Interruption] | None:
    """The results an ended run kept for the history (:data:`UNSAVED`), exactly as they were recorded; None
    where the folder has none (its run had not ended, or the history had them all).  The folder was found
    trusted (:func:`read_record`); the file must be this user's too.  A line that cannot be read is skipped,
    with a warning."""
    try:
        fd = os.open(folder / UNSAVED, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("worker record %s: %s cannot be opened (%s); its results are not restored", folder, UNSAVED,
                    exc.strerror or exc)
        return None
    with open(fd, encoding="utf-8") as handle:
        why = _untrusted_file(os.fstat(handle.fileno()))
        if why:
            log.warning("worker record %s: %s is not trusted (%s); its results are not restored", folder, UNSAVED,
                        why)
            return None
        lines = handle.read().splitlines()
    kept: list[RunRecord | Interruption] = []
    for number, line in enumerate(lines, 1):
        try:
            data = json.loads(line)
            data["id"] = None
            kind = data.pop("kind", "run")
            kept.append(Interruption(**data) if kind == "interruption" else RunRecord(**data))
        except (ValueError, TypeError, AttributeError) as exc:
            log.warning("worker record %s: %s line %d cannot be read (%s); skipped", folder, UNSAVED, number, exc)
    return kept


def is_the_worker(record: WorkerRecord) -> bool:
    """Whether the record's worker PID is, now, the process the record describes, so that signalling it
    can hit nothing else: alive, started at the recorded start time (``/proc/PID/stat``; a reused PID has
    another), owned by this process's user, real and effective user ID (as every worker this agent starts),
    and carrying the run's tag in its environment (:data:`sixdim.run.proctree.TAG_VARIABLE`, given to every
    worker at its start).  A record that gives no start time proves nothing."""
    pid, started = record.worker_pid, record.worker_start_time
    if not pid or pid <= 0 or not started or not record.tag or pid == os.getpid():
        return False
    process = proctree.read_stat(pid)
    if process is None or process.start_time != started or process.state in ("Z", "X"):
        return False
    if proctree.not_ours(pid):
        return False
    if f"{proctree.TAG_VARIABLE}={record.tag}".encode() not in _environment(pid).split(b"\0"):
        return False
    return proctree.start_time(pid) == started  # still the same process after the looks


def _environment(pid: int, wait: float = 0.5) -> bytes:
    """``/proc/PID/environ``; b"" when it cannot be read.  Read empty, it is read again for up to ``wait``
    seconds: a process in the middle of ``execve`` shows none for a moment (the kernel sets the new one up
    after the point where ``subprocess.Popen`` returns)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            with open(f"{proctree.PROC}/{pid}/environ", "rb") as handle:
                environ = handle.read()
        except OSError:
            return b""
        if environ or time.monotonic() >= deadline:
            return environ
        time.sleep(0.01)


def stop_left_behind(record: WorkerRecord) -> list[int]:
    """Kill every process of a dead agent's run: the worker's tree, if the worker is still the process
    the record describes (:func:`is_the_worker`), and this user's processes carrying the run's tag."""
    root = record.worker_pid if is_the_worker(record) else None
    if record.worker_pid and root is None:
        log.info("worker record %s: PID %d is not the worker it recorded (gone, or another process now); not "
                 "signalled", record.tag, record.worker_pid)
    killed = proctree.stop_run(root, record.tag)
    proctree.wait_gone(killed, 5.0)
    return killed
