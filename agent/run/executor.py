"""Runs one workload on one device from start to finish, and records it.

The steps: the device locks, the idle guard (GPU), the worker child process with
telemetry sampled around it, a window summary per case, the environment, then the
history and the board.  Every case that ends is exactly one recorded :class:`RunRecord`,
whatever failed, in the history as soon as the worker reports it (while the worker goes on
with the next case), so an agent killed mid-suite loses no case that ended.  A shutdown ends
the suite run with one :class:`sixdim.core.results.Interruption`: the case it stopped and those
after it have no record of their own.  The suite's :class:`sixdim.run.progress.SuiteRun` hears of
each case's start and end (the log lines and the suite gauges).

No accepted result is lost: a worker's record (its folder in the state folder) is removed only once the
history has the run's results, written or in its spool.  Where a full disk refuses the history both, the
results it holds in memory only are kept in the worker record (:meth:`sixdim.run.orphans.RunJournal.keep`),
its lock held, until the history has them (:meth:`Executor.release_saved`, after each new record and at
the stop, where :meth:`Executor.kept` says what still waits); should the agent end first, the next start
writes them (:meth:`Executor.recover_left_behind`).

A host-wide workload (``scope == "host"``: all-reduce, card linearity) runs from the first
GPU's job but uses every GPU of the host, so it is treated as running on all of them: it holds
every GPU's lock, passes every GPU's guard (before it starts and between its cases), samples
every GPU's telemetry (:class:`sixdim.run.hostprobe.MultiGpuProbe`), and its worker sees every GPU,
ordered as NVML orders them (``CUDA_DEVICE_ORDER=PCI_BUS_ID``, so that rank i is NVML's GPU i).
A GPU in MIG mode is not benchmarked: its runs are ``skipped`` with
:attr:`sixdim.run.devices.Device.mig_reason`.

A missing reading is never 0: a figure the telemetry has no reading for (no sample in or around
the window, a device without the reading, a worker that had ended) is absent, with the reason
in ``details["telemetry"]``; a run that is not ``ok`` or ``incorrect`` has no figures at all
(what its workload reported is kept in ``details["unreported_figures"]``).

Each record's details also say what the case cost the device: its span (``case_wall``, from set-up to check,
the worker's start-up not included) and the device's energy over that span (``case_energy_joules``, from the
energy counter the sampler read; where it cannot be had, ``case_energy_note`` says why), which
``sixdim_suite_device_seconds_total`` and ``sixdim_suite_energy_joules_total`` add up per suite.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sixdim import __version__
from sixdim.collectors.host import RaplReader, cpu_features, host_conditions
from sixdim.collectors.nvml import NvmlCollector
from sixdim.core.conditions import CONDITIONS, UNAVAILABLE, setting_versions
from sixdim.core.peaks import peak_ratio
from sixdim.core.redact import redact_params, scrub, secret_values
from sixdim.core.results import POWER_REFUSED, Interruption, RunRecord, is_interruption
from sixdim.run import orphans
from sixdim.run.devices import Device, DeviceLocks, host_gpus
from sixdim.run.guard import Guard, RunWatch
from sixdim.run.hostprobe import MultiGpuProbe
from sixdim.run.instance import DeviceFileLocks
from sixdim.run.progress import SuiteProgress, SuiteRun
from sixdim.run.runner import (
    RESULTS_FILE,
    STOPPING_REASON,
    CaseResult,
    WorkerOutcome,
    new_tag,
    read_results,
    run_worker,
)
from sixdim.run.telemetry import (
    CpuMeter,
    Probe,
    Sampler,
    TelemetrySample,
    counter_energy,
    probe_for,
    summarize_window,
    window_conditions,
)
from sixdim.store.history import History
from sixdim.workloads import registry
from sixdim.workloads.spec import Case, DeviceType, WorkloadSpec

log = logging.getLogger(__name__)

CLOCK_FIGURES = ("sm_clock_hertz", "power_capped", "thermal_slowdown", "hardware_slowdown")
"""Clock figures exported as they are, from the span the summary's ``clock_span`` names (the timed
window, or the power phase where the window holds too few samples); the rest of the window
summary stays in the details."""

REPORTED_WAIT_SECONDS = 2.1
"""The longest a case reported while its worker runs waits for a telemetry sample after its window (two periods
at the slowest rate ``agent.sample_hz`` allows, 1 Hz); past it, the case is recorded when its worker ends, after
the sampler's last sample (a test's slower sampler)."""

CASE_END_WAIT_SECONDS = 0.5
"""The longest a reported case waits for a telemetry sample after its end (a sampler slower than 4 Hz): past
it, the case's energy is closed with a reading taken when it is recorded."""

MIN_TELEMETRY_POWER_SECONDS = 1.0
"""The shortest measured window whose energy-counter difference is reported as the run's power."""


REPORTED_STATUSES = ("ok", "incorrect")
"""Statuses whose figures are reported (a fast wrong answer is worth seeing); the others have none."""


@dataclass(frozen=True)
class Sampled:
    """The telemetry read while one worker ran, and how many reads failed (each a missing sample)."""

    samples: list[TelemetrySample]
    failed_reads: int = 0
    last_error: str = ""
    conditions: dict[str, Any] = field(default_factory=dict)
    """The ``snapshot`` conditions (sixdim.core.conditions), read as the worker started."""


NOT_SAMPLED = Sampled([])


def telemetry_figures(figures: dict[str, float], telemetry: dict[str, Any], device_type: str,
                      power_refused: bool = False) -> dict[str, str]:
    """Add the daemon-side window figures to a worker's ``figures``; returns notes for the details.

    The worker's own figures win: its power phase (>= 1 s of back-to-back work read from the
    energy counter inside the worker) and its allocator memory.  The daemon's sampled window adds:

    - power and energy, only where the worker had none and did not refuse one (``power_refused``: its power
      phase ran and withheld the figure, whose reason stays the ``power_note``), the window lasted at least
      :data:`MIN_TELEMETRY_POWER_SECONDS` and an energy counter (not interpolated power
      samples) bracketed it; otherwise a ``power_note`` says why there is none;
    - memory: on a GPU NVML's device-wide peak as ``device_memory_bytes`` (it includes the CUDA
      context and other processes, so it is never the workload's ``memory_bytes``); on a CPU the
      worker's peak resident memory as ``memory_bytes`` where the worker gave none;
    - the average SM clock and the clock-event groups, from the span the summary's ``clock_span``
      names: the timed window where it holds enough samples, else the power phase (a
      ``clock_span_note`` says why, or that they are interpolated where neither does).

    A figure the window has no reading for is left out, never filled with 0; why it is missing
    stays in the window summary's own notes (``memory_note``, ``clock_event_note``, ...).
    """
    notes: dict[str, str] = {}
    if "power_watts" not in figures and not power_refused:
        note = _power_note(telemetry)
        if note is None:
            figures["power_watts"] = telemetry["power_watts"]
            figures["energy_joules"] = telemetry["energy_joules"]
        else:
            notes["power_note"] = note
    if "memory_peak_bytes" in telemetry:
        if device_type == "cuda":
            figures["device_memory_bytes"] = telemetry["memory_peak_bytes"]
        else:
            figures.setdefault("memory_bytes", telemetry["memory_peak_bytes"])
    for name in CLOCK_FIGURES:
        if name in telemetry:
            figures[name] = telemetry[name]
    return notes


def _power_note(telemetry: dict[str, Any]) -> str | None:
    """Why the window's power is not reported as the run's; None where it is."""
    if "window_seconds" not in telemetry:
        return telemetry.get("window_note") or telemetry.get("error") or "no measured window"
    seconds = telemetry["window_seconds"]
    if telemetry.get("power_source") == "energy_counter":
        if seconds < MIN_TELEMETRY_POWER_SECONDS:
            return (f"measured window of {seconds:.3g} s is shorter than {MIN_TELEMETRY_POWER_SECONDS:g} s: "
                    f"power not reported")
        return None
    counter = telemetry.get("energy_note", "no energy counter reading")
    if telemetry.get("power_source") == "power_samples":
        return f"{counter}: interpolated power samples are not reported"
    return f"{counter}; {telemetry.get('power_note', 'no power reading')}"


NO_WINDOW_NOTE = "the case marked no measured window, so no telemetry figure was taken from it"


NOT_A_GPU_RUN = "the run is on the CPU"


POWER_PHASE = "power_phase_"
"""The prefix of the power-phase conditions (sixdim.core.conditions, span ``power``)."""


def power_span(details: dict[str, Any]) -> tuple[float, float] | None:
    """The case's power phase on the monotonic clock the sampler shares, where it ran one."""
    power = details.get("power")
    if isinstance(power, dict):
        start, end = power.get("start_monotonic"), power.get("end_monotonic")
        if isinstance(start, (int, float)) and isinstance(end, (int, float)) and end > start:
            return float(start), float(end)
    return None


def run_conditions(sampled: Sampled, window: tuple[float, float] | None, device_type: str,
                   power: tuple[float, float] | None = None, power_note: str = "") -> dict[str, Any]:
    """A case's conditions: the worker's snapshot, its timed span's window conditions and its power
    phase's, with the reasons of those that could not be had under ``unavailable`` (every listed
    condition is one or the other; a CPU run's GPU conditions are unavailable as such)."""
    if not sampled.samples and not sampled.conditions:
        return {}  # no worker ran (skipped before it started): nothing was measured under any condition
    conditions = {k: v for k, v in sampled.conditions.items() if k != UNAVAILABLE}
    unavailable = dict(sampled.conditions.get(UNAVAILABLE, {}))
    if window is None or window[1] <= window[0]:
        spanned: dict[str, Any] = {}
        unavailable.update(dict.fromkeys((c.name for c in CONDITIONS if c.span == "window"), NO_WINDOW_NOTE))
    else:
        spanned = window_conditions(sampled.samples, *window)
    unavailable.update(spanned.pop(UNAVAILABLE, {}))
    conditions.update(spanned)
    phase_names = [c.name for c in CONDITIONS if c.span == "power"]
    if power is None:
        unavailable.update(dict.fromkeys(phase_names, power_note or "the case ran no power phase"))
    else:
        phase = window_conditions(sampled.samples, *power)
        unavailable.update({POWER_PHASE + k: v for k, v in phase.pop(UNAVAILABLE, {}).items()
                            if POWER_PHASE + k in phase_names})
        conditions.update({POWER_PHASE + k: v for k, v in phase.items() if POWER_PHASE + k in phase_names})
    if device_type != "cuda":  # one entry for all of them: a CPU host's history is not filled with 30 copies
        for condition in CONDITIONS:
            if condition.scope == "gpu":
                conditions.pop(condition.name, None)
                unavailable.pop(condition.name, None)
        unavailable["gpu"] = NOT_A_GPU_RUN
    for condition in CONDITIONS:  # never silently missing
        if condition.name not in conditions and condition.name not in unavailable \
                and condition.scope not in unavailable:
            unavailable[condition.name] = "not read"
    if unavailable:
        conditions[UNAVAILABLE] = {k: unavailable[k] for k in sorted(unavailable)}
    return conditions


def window_telemetry(sampled: Sampled, window: tuple[float, float] | None,
                     power: tuple[float, float] | None = None) -> dict[str, Any]:
    """The window summary kept in a record's details, with why it is empty where it is.

    Its clock and clock-event figures are the timed window's where it holds enough samples, else
    those of the case's ``power`` phase (monotonic start and end) where it does: ``clock_span``
    says which, and both spans' summaries are kept (sixdim.run.telemetry.summarize_window)."""
    if window is None:
        telemetry: dict[str, Any] = {"window_note": NO_WINDOW_NOTE}
    else:
        try:
            telemetry = summarize_window(sampled.samples, *window, power_phase=power)
        except ValueError as exc:
            telemetry = {"error": str(exc)}
    if sampled.failed_reads:
        telemetry.update(failed_reads=sampled.failed_reads, read_error=sampled.last_error)
    return telemetry


CASE_SPAN = "case span"
"""What the energy of a case's whole span is called in its notes (:func:`case_energy`)."""


def case_span(wall: tuple[float, float] | None, offset: float | None = None) -> tuple[float, float] | None:
    """A case's span (``details.case_wall``: Unix times, as its worker read them) on the monotonic clock the
    sampler's readings carry.  ``offset`` is Unix time less monotonic time (read now where not given): both
    clocks tick alike but for NTP's slewing, at most 0.05% of the time since the case began (30 ms for a case
    of a minute; far less where NTP keeps the clock close), the same at both ends of a short case.  A clock
    stepped during the case (set by hand) would move the span by the step."""
    if wall is None:
        return None
    if offset is None:
        offset = time.time() - time.monotonic()
    return wall[0] - offset, wall[1] - offset


def case_energy(sampled: Sampled, wall: tuple[float, float] | None, unavailable: str | None = None,
                offset: float | None = None) -> dict[str, Any]:
    """The device's energy over the case's whole span (``details.case_wall``: set-up, warm-up, timed rounds,
    power phase, check; not the worker's start-up), from the energy counter the sampler read while the
    worker ran (:func:`sixdim.run.telemetry.counter_energy`: interpolated at the span's ends, never
    extrapolated): ``{"case_energy_joules": J}``, or ``{"case_energy_note": why}`` where it cannot be had,
    never 0 J for a missing reading.  ``unavailable``: why this device's readings cannot give it whatever the
    samples hold (a CPU without readable RAPL, a host-wide run's sum over several GPUs).  This is what
    ``sixdim_suite_energy_joules_total`` adds up (:mod:`sixdim.http.board`)."""
    span = case_span(wall, offset)
    if span is None:
        return {"case_energy_note": "the worker reported no span for the case"}
    if span[1] <= span[0]:
        return {"case_energy_note": "the case's span is empty: it did not run on the device"}
    if unavailable is not None:
        return {"case_energy_note": unavailable}
    joules, note = counter_energy(sampled.samples, *span, span=CASE_SPAN)
    return {"case_energy_joules": joules} if joules is not None else {"case_energy_note": note}


def unreported_figures(status: str, figures: dict[str, float]) -> dict[str, Any]:
    """Details that keep a failed, timed-out or skipped run's figures out of its figures.

    Such a run measured nothing that stands for the workload (a crash mid-way, a run that did
    not reach its target, a non-finite result), so it has no figures: a reader, the table or
    a summary would otherwise take them for a result.  What the workload did report stays in
    the details for diagnosis; the record's reason says why the run is not ``ok``."""
    if status in REPORTED_STATUSES or not figures:
        return {}
    return {"unreported_figures": dict(figures),
            "figures_note": f"not reported: the run is {status!r} (see its reason)"}


@dataclass
class GuardSettings:
    enabled: bool = True
    max_utilization: float = 0.05


def worker_groups(planned: list[tuple[WorkloadSpec, Case]]) -> list[list[tuple[WorkloadSpec, Case]]]:
    """Consecutive cases whose workloads need the same kind of worker (GPU visibility, torch)."""
    def needs(spec: WorkloadSpec) -> tuple:
        return spec.scope, spec.uses_torch, spec.runs_in_ranks

    groups: list[list[tuple[WorkloadSpec, Case]]] = []
    for item in planned:
        if groups and needs(groups[-1][0][0]) == needs(item[0]):
            groups[-1].append(item)
        else:
            groups.append([item])
    return groups


Recorded = RunRecord | Interruption
"""What a run gives the history: its cases' records, and the suite run's interruption."""

Record = Callable[[int, tuple[WorkloadSpec, Case], CaseResult], RunRecord]
"""Makes (or finds, where it was recorded as it ended) the record of a worker's case ``index``."""


def _outcome_records(items: list[tuple[WorkloadSpec, Case]], outcome: WorkerOutcome, record: Record, ended_at: float
                     ) -> tuple[list[RunRecord], list[tuple[WorkloadSpec, Case]], bool]:
    """The records of one worker's cases, the cases left after them, and whether an interruption ended it.

    Cases the worker reported keep their own status; the case it ended inside takes the worker's
    status and reason.  After a ``skipped`` end (a busy GPU) the rest are skipped too; after a crash
    or a timeout they are left to run in a fresh worker.  An interruption (a shutdown, the agent's
    death) records nothing for the case it stopped nor for those after it: they are left, and the
    suite run's one interruption record counts them."""
    batch = [record(i, item, outcome.cases[i]) for i, item in enumerate(items) if i in outcome.cases]
    done = len(batch)
    if done >= len(items):
        return batch, [], False
    if is_interruption(outcome.status, outcome.reason):
        return batch, items[done:], True
    tail = {"output_tail": outcome.output_tail} if outcome.output_tail else {}
    # the case the worker ended in ran from the last result (or the worker's start: not from before the
    # device locks and the guard, which a host-wide run may wait minutes for); none ran where no
    # worker started, nor did the cases after it
    since = max((c.wall[1] for c in outcome.cases.values() if c.wall),
                default=outcome.started_at if outcome.started_at is not None else ended_at)
    batch.append(record(done, items[done], CaseResult(outcome.status, outcome.reason, details=tail,
                                                      wall=(since, ended_at))))
    if outcome.status == "skipped":
        batch += [record(i, item, CaseResult("skipped", outcome.reason, wall=(ended_at, ended_at)))
                  for i, item in enumerate(items) if i > done]
        return batch, [], False
    return batch, items[done + 1:], False


def describe_case(spec: WorkloadSpec, case: Case) -> str:
    """A case as the log and an interruption name it: ``gemm bf16 m=512,n=512,k=512,op=NN``."""
    return " ".join(part for part in (spec.name, case.precision, case.shape) if part)


@dataclass
class _Left:
    """Where an interruption stopped a suite run: the first case of the plan without a record, why,
    and the case it stopped while it ran ("" where none was running); the stopped worker's record and
    its cases' records, settled with the interruption (:meth:`Executor._settle`)."""

    at: int
    reason: str
    running: str = ""
    journal: orphans.RunJournal | None = None
    batch: list[RunRecord] = field(default_factory=list)


class _Group:
    """One worker's share of a suite run: its cases (``items``, from case ``at`` of the plan on), how
    each is recorded as the worker reports it, and the suite run that hears of each case's start and end."""

    def __init__(self, executor: Executor, items: list[tuple[WorkloadSpec, Case]], at: int, device: Device,
                 suite: str, run: SuiteRun, started_at: float):
        self.executor = executor
        self.items = items
        self.at = at
        self.device = device
        self.suite = suite
        self.run = run
        self.started_at = started_at
        self.tag = ""
        self.recorded: dict[int, RunRecord] = {}
        """The cases recorded as the worker reported them, by their index in ``items``."""

    def uid(self, index: int) -> str:
        """A case's uid: its worker's tag and its index, so that a successor recovering the worker's record
        (agent/run/orphans.py) writes no case twice; a random one where no worker started."""
        return f"{self.tag}:{index}" if self.tag else ""

    def started(self) -> None:
        self.run.case_started(self.at)

    def reported(self, index: int, result: CaseResult, worker_environment: dict[str, Any], sampled: Sampled) -> None:
        """The worker reported case ``index``: record it now (history, board), while the worker goes on."""
        if index in self.recorded or not 0 <= index < len(self.items):
            return
        spec, case = self.items[index]
        environment = {**self.executor._environment(self.device, worker_environment),
                       **setting_versions(sampled.conditions)}
        ended_at = result.wall[1] if result.wall else time.time()
        record = self.executor._record(spec, case, self.device, self.suite, result, sampled, environment,
                                       self.started_at, ended_at, uid=self.uid(index))
        self.executor.history.add(record)
        self.executor._recorded()
        self.recorded[index] = record
        self.run.case_ended(self.at + index, record.status)
        if index + 1 < len(self.items):
            self.run.case_started(self.at + index + 1)


class Executor:
    def __init__(self, *, hostname: str, history: History, nvml: NvmlCollector,
                 rapl: RaplReader | None, sample_hz: float = 10.0, guard: GuardSettings | None = None,
                 state_dir: str | None = None, command: str = "sixdim", wait_for_devices: bool = True,
                 on_recorded: Callable[[History], object] | None = None):
        """``on_recorded(history)`` is called after each batch of records is in the history (or queued
        for it): the daemon's board catches up there, so a result is on ``/metrics`` at the next
        refresh.  It is a callback, not the board itself, because running sits below exposing.
        ``state_dir``: where the device lock files (shared with every sixdim process of the host)
        and the running workers' records go (:mod:`sixdim.run.instance`, :mod:`sixdim.run.orphans`); without
        one, devices are locked within this process only and no record is kept (tests).
        ``command`` names this process in them; ``wait_for_devices`` False refuses a device another
        process holds instead of waiting for it."""
        self.hostname = hostname
        self.history = history
        self.on_recorded = on_recorded
        self.nvml = nvml
        self.rapl = rapl
        self.sample_hz = sample_hz
        self.guard = guard or GuardSettings()
        self.idle_guard = Guard(nvml)
        """Remembers when our own workers ended on each GPU (the settle rule); shared by all jobs."""
        self.locks = DeviceLocks(DeviceFileLocks(state_dir, command) if state_dir else None, wait=wait_for_devices)
        """The device locks, shared with the scheduler: a suite holds its device's, a host-wide run
        every GPU's."""
        self.stop = threading.Event()
        self.records = orphans.WorkerRecords(state_dir, command, str(history.path)) if state_dir else None
        self.progress = SuiteProgress(hostname)
        """Every suite's current (or last) run on each device: the log lines and the suite gauges."""
        self._kept: list[tuple[orphans.RunJournal, list[Recorded]]] = []
        """Worker records kept, locked, for results the history holds in memory only, with the run's results."""
        self._kept_lock = threading.Lock()

    def _recorded(self) -> None:
        if self.on_recorded is not None:
            self.on_recorded(self.history)
        self.release_saved()

    def _settle(self, journal: orphans.RunJournal | None, recorded: list[Recorded], device: Device,
                suite: str) -> None:
        """A run's results are with the history: remove its worker record once the history has them all
        (written, or in its spool).  Those it holds in memory only (a full disk refuses the spool too) are
        kept in the worker record (in a folder of their own where no worker ran), which stays locked
        until the history has them (:meth:`release_saved`), or for the next start should this process end."""
        unsaved = self.history.unsaved(recorded)
        if not unsaved:
            if journal is not None:
                journal.close()
            return
        with self._kept_lock:  # one record keeps them all: a disk full for days holds one folder, not one a run
            if self._kept:
                into, held = self._kept[-1]
                merged = held + recorded
                if into.keep(self.history.unsaved(merged)):
                    self._kept[-1] = (into, merged)
                    if journal is not None:
                        journal.close()
                    log.warning("the history cannot take %d result(s) of %s on %s yet: kept in %s until it can (or "
                                "for the next start)", len(unsaved), f"suite {suite}" if suite else "the run",
                                device.name, into.folder)
                    return
        if journal is None:
            if self.records is None:
                return  # no state folder: in memory only (the stop says so)
            journal = self.records.keep(new_tag(), device, suite, unsaved)
            if journal is None:
                return
        else:
            journal.keep(unsaved)  # where even that fails, the folder stays: the worker's results are in it
        with self._kept_lock:
            self._kept.append((journal, list(recorded)))
        log.warning("the history cannot take %d result(s) of %s on %s yet: kept in %s until it can (or for the "
                    "next start)", len(unsaved), f"suite {suite}" if suite else "the run", device.name, journal.folder)

    def release_saved(self) -> None:
        """Try the history's waiting results again, and remove the worker records kept for results it now has."""
        with self._kept_lock:
            kept, self._kept = self._kept, []
        if not kept:
            return
        self.history.retry_pending()
        still = []
        for journal, recorded in kept:
            if self.history.unsaved(recorded):
                still.append((journal, recorded))
            else:
                journal.close()
        with self._kept_lock:
            self._kept[:0] = still

    def kept(self) -> list[tuple[Path, int]]:
        """The worker records that still keep results the history does not have (after one more try), each
        with how many: what the next start writes should this process end now."""
        self.release_saved()
        with self._kept_lock:
            kept = list(self._kept)
        return [(journal.folder, len(self.history.unsaved(recorded))) for journal, recorded in kept]

    def execute(self, spec: WorkloadSpec, overrides: dict[str, Any], device: Device, *, suite: str = "",
                timeout: float = 600.0, use_guard: bool = True,
                on_progress: Callable[[str], None] | None = None) -> list[RunRecord]:
        """Run every case of ``spec`` on ``device`` now; see :meth:`execute_many`."""
        return self.execute_many([(spec, overrides)], device, suite=suite, timeout=timeout, use_guard=use_guard,
                                 on_progress=on_progress)

    def execute_many(self, items: list[tuple[WorkloadSpec, dict[str, Any]]], device: Device, *, suite: str = "",
                     timeout: float = 600.0, use_guard: bool = True,
                     on_progress: Callable[[str], None] | None = None,
                     only: Callable[[WorkloadSpec, Case], bool] | None = None) -> list[RunRecord]:
        """Run the cases of several workloads (a suite) on ``device``, in as few workers as possible.

        Consecutive workloads with the same needs share one worker, so torch is imported and
        CUDA initialised once.  ``timeout`` is per case.  Cases the worker reported keep their own
        status; the case a worker died or hung in takes that reason, and the cases after it run in
        a fresh worker, so one crash costs one case.  A busy GPU skips the rest of its worker's cases.
        Each case is in the history (and on the board) as soon as the worker has reported it, while
        the worker goes on.  A shutdown (the stop event) ends the suite run: the cases that ended are
        recorded, the rest have no record of their own, and the run gets one
        :class:`sixdim.core.results.Interruption` (in the history, and on the run in :attr:`progress`).
        Returns the records of the cases that ended, in order.  ``only``: run just the cases it accepts
        (a confirmation run: one case of a suite, :mod:`sixdim.run.confirm`).
        """
        device_type: DeviceType = "cuda" if device.type == "cuda" else "cpu"
        planned: list[tuple[WorkloadSpec, Case]] = []
        for spec, overrides in items:
            if spec.scope == "host" and device.type == "cuda" and device.index != min(g.index for g in self.nvml.gpus):
                continue  # a host-wide workload runs once, from the first GPU's job
            planned += [(spec, case) for case in spec.cases(overrides, device_type) if only is None or only(spec, case)]
        run = self.progress.begin(suite, device, [spec.name for spec, _ in planned])
        records: list[RunRecord] = []
        at = 0
        try:
            for group in worker_groups(planned):
                done, left = self._run_group(group, at, planned, device, suite, timeout, use_guard, on_progress, run)
                records += done
                if left is not None:
                    self._interrupted(run, planned, left, device)
                    break
                at += len(group)
        finally:
            run.finish()
        return records

    def _interrupted(self, run: SuiteRun, planned: list[tuple[WorkloadSpec, Case]], left: _Left,
                     device: Device) -> None:
        """Record the one interruption of a suite run stopped at case ``left.at`` of its plan."""
        interruption = Interruption(
            suite=run.suite, hostname=self.hostname, device_type=device.type, device=device.name,
            gpu="" if device.index is None else str(device.index), uuid=device.uuid, model_name=device.model_name,
            pci_bus_id=device.pci_bus_id, reason=left.reason, started_at=run.started_at, ended_at=time.time(),
            cases_done=left.at, cases_left=len(planned) - left.at, running=left.running,
            workloads=list(dict.fromkeys(spec.name for spec, _ in planned[left.at:])))
        try:
            self.history.add_interruption(interruption)
        finally:
            self._settle(left.journal, [*left.batch, interruption], device, run.suite)
        self._recorded()
        run.interrupted(interruption)

    def _run_group(self, group: list[tuple[WorkloadSpec, Case]], at: int, planned: list[tuple[WorkloadSpec, Case]],
                   device: Device, suite: str, timeout: float, use_guard: bool,
                   on_progress: Callable[[str], None] | None, run: SuiteRun) -> tuple[list[RunRecord], _Left | None]:
        """Run one group's cases (case ``at`` of ``planned`` on) in as many workers as crashes and timeouts
        take; returns their records, and where an interruption stopped the suite run (None: it did not)."""
        records: list[RunRecord] = []
        remaining = group
        while remaining:
            started_at = time.time()
            share = _Group(self, remaining, at, device, suite, run, started_at)
            later = list(dict.fromkeys(spec.name for spec, _ in planned[at + len(remaining):]))
            outcome, sampled, journal = self._run(remaining, device, suite, timeout, use_guard, on_progress, share,
                                                  (len(planned), later))
            ended_at = time.time()
            environment = {**self._environment(device, outcome.environment), **setting_versions(sampled.conditions)}

            def record(index: int, item: tuple[WorkloadSpec, Case], result: CaseResult) -> RunRecord:
                # called only within this iteration (by _outcome_records below), so the loop's values hold
                # a case's record ends with the case (the worker's span for it), its started_at is its worker's
                return share.recorded.get(index) or self._record(  # noqa: B023
                    item[0], item[1], device, suite, result, sampled, environment, started_at,  # noqa: B023
                    result.wall[1] if result.wall else ended_at, uid=share.uid(index))  # noqa: B023

            batch, left, interrupted = _outcome_records(remaining, outcome, record, ended_at)
            try:
                for index, r in enumerate(batch):
                    if index not in share.recorded:
                        self.history.add(r)
            except BaseException:
                self._settle(journal, list(batch), device, suite)
                raise
            if not interrupted:  # an interrupted run's record waits for its interruption (_interrupted)
                self._settle(journal, list(batch), device, suite)
            new = [(index, r) for index, r in enumerate(batch) if index not in share.recorded]
            if new:
                self._recorded()
            for index, r in new:
                run.case_ended(at + index, r.status)
            records += batch
            if interrupted:
                running = describe_case(*left[0]) if outcome.started_at is not None else ""
                return records, _Left(at + len(batch), outcome.reason, running, journal, batch)
            at += len(batch)
            remaining = left
        return records, None

    def recover_left_behind(self) -> list[RunRecord]:
        """Stop and record the runs a dead sixdim left in the state directory (:mod:`sixdim.run.orphans`):
        the cases its worker finished with their results (those it had not recorded yet: returned), and
        its suite run's interruption.  Call it at start, before anything runs.  A record folder goes once
        the history has every result of its run, whoever wrote it (matched by ``uid``,
        :meth:`sixdim.store.history.History.unsaved`): after a ``kill -9`` mid-suite the cases the dead
        agent recorded as they ended are there, and the folder goes without a warning."""
        if self.records is None:
            return []
        recovered: list[RunRecord] = []
        for folder, fd in self.records.left_behind():
            done, held = True, False
            try:
                record = orphans.read_record(folder)
                if record is not None and record.history not in ("", self.records.history):
                    killed = orphans.stop_left_behind(record)  # its processes go now; its results wait
                    log.warning("a previous sixdim (PID %d) on another history (%s) died during a run: stopped %d "
                                "process(es); an agent on that history will record it", record.agent_pid,
                                record.history, len(killed))
                    done = False
                elif record is not None:
                    kept = orphans.read_unsaved(folder)
                    if kept is not None:  # an ended run, its results kept while the history could not take them
                        new, recorded = self._restore(folder, record, kept), list(kept)
                    else:
                        new, recorded = self._recover(folder, record)
                    recovered += new
                    unsaved = self.history.unsaved(recorded)
                    if unsaved:  # still not: kept, and held, until the history has them
                        journal = orphans.RunJournal(folder, record, fd)
                        if kept is None:
                            journal.keep(unsaved)
                        with self._kept_lock:
                            self._kept.append((journal, recorded))
                        done, held = False, True
            except Exception:  # one unreadable record must not keep the agent from starting
                log.exception("could not recover the run recorded in %s; removing it", folder)
            finally:
                if done:
                    shutil.rmtree(folder, ignore_errors=True)
                if not held:
                    os.close(fd)
        return recovered

    def _restore(self, folder: Path, record: orphans.WorkerRecord, kept: list[Recorded]) -> list[RunRecord]:
        """Add the results a previous sixdim kept in a worker record for want of a history that could take
        them (each lands once: its uid); returns the runs among them that were not there yet."""
        known = self.history.known(r.uid for r in kept)
        new = [r for r in kept if r.uid not in known]
        for result in new:
            if isinstance(result, Interruption):
                self.history.add_interruption(result)
            else:
                self.history.add(result)
        self._recorded()
        log.warning("a previous sixdim (PID %d, %s) stopped before the history had %d result(s) of its runs; kept in "
                    "%s, %d written now (the others were there already)", record.agent_pid, record.command, len(kept),
                    folder, len(new))
        return [r for r in new if isinstance(r, RunRecord)]

    def _recover(self, folder: Path, record: orphans.WorkerRecord) -> tuple[list[RunRecord], list[Recorded]]:
        """Stop and record a dead agent's run: the runs new to the history, and all it recorded."""
        killed = orphans.stop_left_behind(record)
        device = Device(**record.device)
        items = [(registry.get(case["workload"]), Case(case["params"], case["precision"], case["shape"], case["mode"],
                                                       case["kernel_pass"])) for case in record.cases]
        results = folder / RESULTS_FILE
        outcome = read_results(str(results))
        outcome.status, outcome.reason = "skipped", orphans.DIED_REASON.format(pid=record.agent_pid)
        outcome.started_at = record.started_at
        ended_at = results.stat().st_mtime if results.exists() else record.started_at
        environment = dict(outcome.environment, sixdim=__version__, device_model=device.model_name)
        batch, left, _ = _outcome_records(items, outcome, lambda index, item, result: self._record(
            item[0], item[1], device, record.suite, result, NOT_SAMPLED, environment, record.started_at,
            result.wall[1] if result.wall else ended_at, uid=f"{record.tag}:{index}"), ended_at)
        known = self.history.known(run.uid for run in batch)  # recorded by the dead agent as they ended
        new = [run for run in batch if run.uid not in known]
        for run in new:
            self.history.add(run)
        done = record.suite_done + len(batch)
        recorded: list[Recorded] = list(batch)
        if left:
            interruption = Interruption(
                suite=record.suite, hostname=self.hostname, device_type=device.type, device=device.name,
                gpu="" if device.index is None else str(device.index), uuid=device.uuid,
                model_name=device.model_name, pci_bus_id=device.pci_bus_id, reason=outcome.reason,
                started_at=record.suite_started_at or record.started_at, ended_at=ended_at, cases_done=done,
                cases_left=max(record.suite_cases - done, len(left)), running=describe_case(*left[0]),
                workloads=list(dict.fromkeys([spec.name for spec, _ in left] + record.later_workloads)),
                uid=f"{record.tag}:interrupted")
            self.history.add_interruption(interruption)
            recorded.append(interruption)
        self._recorded()
        log.warning("a previous sixdim (PID %d, %s) died during %s on %s: stopped %d process(es) of its run; its "
                    "worker had finished %d case(s) (%d recorded as they ended, %d now); %d case(s) left: recorded "
                    "as one interruption of suite %r", record.agent_pid, record.command,
                    ", ".join(dict.fromkeys(spec.name for spec, _ in items)), device.name, len(killed),
                    len(batch), len(batch) - len(new), len(new), max(record.suite_cases - done, len(left)),
                    record.suite)
        return new, recorded

    def _record(self, spec: WorkloadSpec, case: Case, device: Device, suite: str, result: CaseResult,
                sampled: Sampled, environment: dict[str, Any], started_at: float, ended_at: float,
                uid: str = "") -> RunRecord:
        phase = power_span(result.details)
        telemetry = window_telemetry(sampled, result.window, phase)
        notes: dict[str, Any] = unreported_figures(result.status, result.figures)
        figures = dict(result.figures) if result.status in REPORTED_STATUSES else {}
        # Device memory bandwidth is the peak of a device-to-device copy only, not of PCIe transfers.
        kind = None if spec.peak_kind == "bandwidth" and case.kernel_pass != "d2d" else spec.peak_kind
        ratio = peak_ratio(device.model_name, kind, case.precision, figures) if device.type == "cuda" else None
        if ratio is not None and result.status == "ok":
            figures["peak_ratio"] = ratio
        if result.status in REPORTED_STATUSES:
            notes.update(telemetry_figures(figures, telemetry, device.type,
                                           power_refused=bool(result.details.get(POWER_REFUSED))))
        # The one place every record is made: the history, the board, /metrics and the log lines
        # see the parameters redacted, and no secret value of them in any other text (agent/core/redact.py).
        secrets = secret_values(case.params)
        conditions = run_conditions(sampled, result.window, device.type, phase,
                                    str(result.details.get("power_note", "")))
        return RunRecord(
            suite=suite, workload=spec.name, precision=case.precision, params=redact_params(case.params),
            shape=scrub(case.shape, secrets), mode=case.mode, kernel_pass=case.kernel_pass, hostname=self.hostname,
            device_type=device.type, device=device.name, gpu="" if device.index is None else str(device.index),
            uuid=device.uuid, model_name=device.model_name, pci_bus_id=device.pci_bus_id, status=result.status,
            reason=scrub(result.reason, secrets), started_at=started_at, ended_at=ended_at, figures=figures,
            environment=scrub(environment, secrets), conditions=conditions,
            details=scrub({**notes, **result.details, "telemetry": telemetry,
                           **({"case_wall": list(result.wall)} if result.wall else {}),
                           **self._case_energy(spec, device, sampled, result.wall)}, secrets), uid=uid)

    def _case_energy(self, spec: WorkloadSpec, device: Device, sampled: Sampled,
                     wall: tuple[float, float] | None) -> dict[str, Any]:
        """The device energy over a case's span, or why there is none (:func:`case_energy`).  A span that ends
        after the sampler's last reading (a case its worker did not report, a crash or a timeout: its end is
        when the executor saw the worker gone, after the sampler stopped) is closed by one more reading of
        the same counter, taken now."""
        unavailable = self._no_case_energy(spec, device)
        offset = time.time() - time.monotonic()
        span = case_span(wall, offset)
        samples = sampled.samples
        if unavailable is None and span is not None and samples and samples[-1].time < span[1] <= time.monotonic():
            closing = self._energy_reading(device)
            if closing is not None:
                samples = [*samples, closing]
        return case_energy(Sampled(samples), wall, unavailable, offset)

    def _energy_reading(self, device: Device) -> TelemetrySample | None:
        """The device's energy counter now, as the sampler reads it (NVML's on a GPU, the RAPL reader's total on
        a CPU: the same reader, so the same origin); None where it gives none."""
        try:
            if device.type == "cuda" and device.index is not None:
                reading = self.nvml.sample(device.index)
                return TelemetrySample(reading.time, energy_joules=reading.energy_joules)
            if self.rapl is not None and self.rapl.available:
                now = time.monotonic()
                return TelemetrySample(now, energy_joules=self.rapl.total_joules())
        except Exception as exc:  # a failed read is a missing reading, never a failed record
            log.debug("could not read the energy counter of %s: %s", device.name, exc)
        return None

    def _no_case_energy(self, spec: WorkloadSpec, device: Device) -> str | None:
        """Why no telemetry of this device gives the energy of one of its cases, whatever was sampled; None
        where the samples may (:func:`case_energy`)."""
        if device.type == "cuda":
            gpus = len(self._gpus(spec, device))
            if gpus > 1:  # sixdim.run.hostprobe: one reading, summed over the GPUs
                return (f"the case ran on the host's {gpus} GPUs, whose telemetry is read as their sum: no energy "
                        f"of this GPU alone")
            return None
        if self.rapl is None or not self.rapl.available:
            why = self.rapl.reason if self.rapl is not None else "no RAPL reader"
            return f"the CPU has no energy counter the agent can read (RAPL: {why})"
        return None

    def _gpus(self, spec: WorkloadSpec, device: Device) -> list[Device]:
        """The GPUs a worker for ``spec`` on ``device`` uses: every GPU of the host (NVML order)
        for a host-wide workload on a GPU, the device itself for a per-device one, none on a CPU."""
        if device.type != "cuda":
            return []
        return host_gpus(self.nvml) if spec.scope == "host" else [device]

    def _run(self, items: list[tuple[WorkloadSpec, Case]], device: Device, suite: str, timeout: float,
             use_guard: bool, on_progress: Callable[[str], None] | None, share: _Group,
             plan: tuple[int, list[str]] = (0, [])) -> tuple[WorkerOutcome, Sampled, orphans.RunJournal | None]:
        """One worker over ``items``: its outcome (``skipped`` without a worker where it must not
        start), the telemetry sampled while it ran, and its record (to close once recorded).  ``share``
        records each case as the worker reports it; ``plan``: the suite run's case count and the
        workloads after these cases (for the worker's record)."""
        if self.stop.is_set():
            return WorkerOutcome(status="skipped", reason=STOPPING_REASON), NOT_SAMPLED, None
        spec = items[0][0]  # a group's workloads share scope and torch use
        gpus = self._gpus(spec, device)
        for gpu in gpus:
            if gpu.mig_reason is not None:
                return WorkerOutcome(status="skipped", reason=gpu.mig_reason), NOT_SAMPLED, None

        def waiting(busy: Device, who: str) -> None:
            log.info("%s on %s waits for %s: %s is running on it", spec.name, device.name, busy.name, who)

        what = f"{spec.name} on {device.name}" + (f" (suite {suite})" if suite else "")
        with self.locks.hold(gpus or [device], self.stop, on_wait=waiting, what=what) as held:
            if not held:
                return WorkerOutcome(status="skipped", reason=STOPPING_REASON), NOT_SAMPLED, None
            watch: RunWatch | None = None
            if gpus and use_guard and self.guard.enabled:
                indices = [g.index for g in gpus if g.index is not None]
                reason = self.idle_guard.before_run(indices, self.guard.max_utilization)
                if reason is not None:
                    return WorkerOutcome(status="skipped", reason=reason), NOT_SAMPLED, None
                watch = self.idle_guard.watch(indices)
            tag = share.tag = new_tag()
            journal = self.records.begin(tag, device, suite, items, suite_cases=plan[0], suite_done=share.at,
                                         suite_started_at=share.run.started_at, later_workloads=plan[1]
                                         ) if self.records is not None else None
            try:
                outcome, sampled = self._start(items, device, gpus, timeout, watch, on_progress, tag, journal, share)
            except BaseException:
                self._settle(journal, list(share.recorded.values()), device, suite)
                raise
            return outcome, sampled, journal

    def _start(self, items: list[tuple[WorkloadSpec, Case]], device: Device, gpus: list[Device], timeout: float,
               watch: RunWatch | None, on_progress: Callable[[str], None] | None, tag: str,
               journal: orphans.RunJournal | None, share: _Group) -> tuple[WorkerOutcome, Sampled]:
        spec = items[0][0]
        probe: Probe
        attach: Callable[[int], None] | None
        if len(gpus) > 1:
            probe, attach = MultiGpuProbe(self.nvml, [g.index for g in gpus if g.index is not None]), None
        else:
            probe, attach = probe_for(device.type, self.nvml, device.index, self.rapl)
        if spec.scope == "host" and gpus:  # every GPU, in NVML's order, and ranks in the same order
            env = {"CUDA_VISIBLE_DEVICES": ",".join(g.uuid for g in gpus), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        else:
            env = device.worker_environment()

        meter = CpuMeter()
        snapshot = self._snapshot(device)

        def started(pid: int) -> None:
            if journal is not None:
                journal.worker_started(pid)
            meter.attach(pid)
            if attach is not None:
                attach(pid)
            if watch is not None:
                watch.attach(pid)
            share.started()

        sampler = Sampler(probe, self.sample_hz, meter).start()

        def reported(index: int, result: CaseResult, worker_environment: dict[str, Any]) -> None:
            # the telemetry so far, once a sample brackets the case's window and power phase
            ends = [span[1] for span in (result.window, power_span(result.details)) if span is not None]
            moment = max(ends) if ends else float("-inf")
            samples = sampler.samples_after(moment, most=REPORTED_WAIT_SECONDS)
            if ends and not (samples and samples[-1].time > moment):
                return  # no sample after it yet (a sampler slower than the daemon's): recorded when its worker ends
            whole = case_span(result.wall)
            if whole is not None and (not samples or samples[-1].time <= whole[1]):
                # and the case's whole span (its energy, sixdim_suite_energy_joules_total) where a sample comes
                # soon; else its record closes the span with a reading of its own (_case_energy)
                samples = sampler.samples_after(whole[1], most=CASE_END_WAIT_SECONDS)
            try:
                share.reported(index, result, worker_environment,
                               Sampled(samples, sampler.failed_reads, sampler.last_error, snapshot))
            except Exception:  # it is recorded when its worker ends instead
                log.exception("could not record case %d of %s on %s as it ended", index, spec.name, device.name)

        try:
            outcome = run_worker([s.entry for s, _ in items], [case.params for _, case in items],
                                 device.worker_device, timeout, env=env, on_start=started, on_progress=on_progress,
                                 on_case=reported,
                                 stop=self.stop, uses_torch=spec.uses_torch, worker_memory=not spec.runs_in_ranks,
                                 gpu_uuids=[g.uuid for g in gpus],
                                 between_cases=watch.check if watch is not None else None,
                                 workdir=None if journal is None else str(journal.folder), tag=tag)
        finally:
            sampled = Sampled(sampler.stop(), sampler.failed_reads, sampler.last_error, snapshot)
            if watch is not None:
                watch.ended()
        return outcome, sampled

    def _snapshot(self, device: Device) -> dict[str, Any]:
        """The ``snapshot`` conditions as a worker starts: the host's, and the GPU's where it runs on one.
        Never raises: a condition that cannot be read is listed under ``unavailable``."""
        conditions = host_conditions()
        if device.type == "cuda" and device.index is not None:
            gpu = self.nvml.conditions(device.index)
            unavailable = {**conditions.pop(UNAVAILABLE, {}), **gpu.pop(UNAVAILABLE, {})}
            conditions.update(gpu)
            if unavailable:
                conditions[UNAVAILABLE] = unavailable
        return conditions

    def _environment(self, device: Device, worker: dict[str, Any]) -> dict[str, Any]:
        """The worker's view (torch, CUDA runtime, cuDNN, NCCL, Python) plus the driver's and ours."""
        environment = dict(worker)
        environment.update(sixdim=__version__, device_model=device.model_name)
        if device.type == "cuda":
            assert device.index is not None  # every CUDA device has its index
            environment.update(driver=self.nvml.driver_version, cuda_driver=self.nvml.cuda_driver_version,
                               vbios=self.nvml.gpu(device.index).vbios_version)
        else:  # what a CPU figure ran on: its model and instruction sets (bf16 is native only with some)
            environment.update(cpu_features().environment())
        return environment
