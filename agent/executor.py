"""Runs one workload on one device from start to finish, and records it.

The steps: the idle guard (GPU), the worker child process with telemetry sampled
around it, a window summary per case, the environment, then the history and the
board.  Every case ends in exactly one recorded :class:`RunRecord`, whatever failed.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from agent import __version__
from agent.board import Board
from agent.devices import Device
from agent.guard import busy_reason
from agent.history import History
from agent.peaks import peak_ratio
from agent.results import RunRecord
from agent.runner import CaseResult, WorkerOutcome, run_worker
from agent.telemetry import Sampler, TelemetrySample, probe_for, summarize_window
from collectors.host import RaplReader
from collectors.nvml import NvmlCollector
from workloads.spec import Case, WorkloadSpec

log = logging.getLogger(__name__)

TELEMETRY_FIGURES = ("power_watts", "energy_joules", "memory_bytes", "peak_memory_bytes", "sm_clock_hertz",
                     "throttled")
"""Window figures that are exported; the rest of the window summary stays in the details."""


@dataclass
class GuardSettings:
    enabled: bool = True
    max_utilization: float = 0.05


class Executor:
    def __init__(self, *, hostname: str, history: History, board: Board, nvml: NvmlCollector,
                 rapl: RaplReader | None, sample_hz: float = 10.0, guard: GuardSettings | None = None):
        self.hostname = hostname
        self.history = history
        self.board = board
        self.nvml = nvml
        self.rapl = rapl
        self.sample_hz = sample_hz
        self.guard = guard or GuardSettings()
        self.stop = threading.Event()

    def execute(self, spec: WorkloadSpec, overrides: dict[str, Any], device: Device, *, suite: str = "",
                timeout: float = 600.0, use_guard: bool = True,
                on_progress: Callable[[str], None] | None = None) -> list[RunRecord]:
        """Run every case of ``spec`` on ``device`` now; the records are in history and on the board.

        ``timeout`` is per case.  Cases the worker reported keep their own status; the first
        case without a result takes the reason the worker ended (crash, timeout, shutdown);
        the cases after it are recorded as skipped.
        """
        if spec.scope == "host" and device.type == "cuda" and device.index != min(g.index for g in self.nvml.gpus):
            return []  # a host-wide workload runs once, from the first GPU's job
        cases = spec.cases(overrides, "cuda" if device.type == "cuda" else "cpu")
        started_at = time.time()
        outcome, samples = self._run(spec, cases, device, timeout, use_guard, on_progress)
        ended_at = time.time()
        environment = self._environment(device, outcome)
        records = []
        first_missing = True
        for index, case in enumerate(cases):
            result = outcome.cases.get(index)
            if result is None:
                if first_missing:
                    result = CaseResult(outcome.status, outcome.reason,
                                        details={"output_tail": outcome.output_tail} if outcome.output_tail else {})
                    first_missing = False
                else:
                    result = CaseResult("skipped", f"not run: an earlier case ended the worker ({outcome.status})")
            records.append(self._record(spec, case, device, suite, result, samples, environment,
                                        started_at, ended_at))
        for record in records:
            self.history.add(record)
        self.board.catch_up(self.history)
        counts: dict[str, int] = {}
        for record in records:
            counts[record.status] = counts.get(record.status, 0) + 1
        level = logging.INFO if set(counts) <= {"ok", "unsupported"} else logging.WARNING
        summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        first_problem = next((r for r in records if r.status not in ("ok", "unsupported")), None)
        log.log(level, "%s on %s: %s%s", spec.name, device.name, summary,
                f" (first problem: {first_problem.shape} {first_problem.precision} {first_problem.status}: "
                f"{first_problem.reason})" if first_problem else "")
        return records

    def _record(self, spec: WorkloadSpec, case: Case, device: Device, suite: str, result: CaseResult,
                samples: list[TelemetrySample], environment: dict[str, Any], started_at: float,
                ended_at: float) -> RunRecord:
        telemetry: dict[str, Any] = {}
        if result.window is not None:
            try:
                telemetry = summarize_window(samples, *result.window)
            except ValueError as exc:
                telemetry = {"error": str(exc)}
        figures = dict(result.figures)
        # Device memory bandwidth is the peak of a device-to-device copy only, not of PCIe transfers.
        kind = None if spec.peak_kind == "bandwidth" and case.kernel_pass != "d2d" else spec.peak_kind
        ratio = peak_ratio(device.model_name, kind, case.precision, figures) if device.type == "cuda" else None
        if ratio is not None and result.status == "ok":
            figures["peak_ratio"] = ratio
        for name in TELEMETRY_FIGURES:
            if name in telemetry:
                figures[name] = telemetry[name]
        return RunRecord(
            suite=suite, workload=spec.name, precision=case.precision, params=case.params, shape=case.shape,
            mode=case.mode, kernel_pass=case.kernel_pass, hostname=self.hostname, device_type=device.type,
            device=device.name, gpu="" if device.index is None else str(device.index), uuid=device.uuid,
            model_name=device.model_name, pci_bus_id=device.pci_bus_id, status=result.status,
            reason=result.reason, started_at=started_at, ended_at=ended_at, figures=figures,
            environment=environment, details={**result.details, "telemetry": telemetry})

    def _run(self, spec: WorkloadSpec, cases: list[Case], device: Device, timeout: float, use_guard: bool,
             on_progress: Callable[[str], None] | None) -> tuple[WorkerOutcome, list[TelemetrySample]]:
        if self.stop.is_set():
            return WorkerOutcome(status="skipped", reason="interrupted: the agent is shutting down"), []
        if device.type == "cuda" and use_guard and self.guard.enabled:
            reason = busy_reason(self.nvml, device.index, self.guard.max_utilization)
            if reason is not None:
                return WorkerOutcome(status="skipped", reason=reason), []
        probe, attach = probe_for(device.type, self.nvml, device.index, self.rapl)
        sampler = Sampler(probe, self.sample_hz).start()
        try:
            env = {} if spec.scope == "host" else device.worker_environment()  # host-wide: every GPU visible
            outcome = run_worker(spec.entry, [case.params for case in cases], device.worker_device, timeout,
                                 env=env, on_start=attach, on_progress=on_progress,
                                 stop=self.stop, uses_torch=spec.uses_torch)
        finally:
            samples = sampler.stop()
        return outcome, samples

    def _environment(self, device: Device, outcome: WorkerOutcome) -> dict[str, Any]:
        """The worker's view (torch, CUDA runtime, cuDNN, NCCL, Python) plus the driver's and ours."""
        environment = dict(outcome.environment)
        environment.update(sixdim=__version__, device_model=device.model_name)
        if device.type == "cuda":
            environment.update(driver=self.nvml.driver_version, cuda_driver=self.nvml.cuda_driver_version,
                               vbios=self.nvml.gpu(device.index).vbios_version)
        return environment
