"""Runs one workload on one device from start to finish, and records it.

The steps: the idle guard (GPU), the worker child process with telemetry sampled
around it, the window summary, the environment, then the history and the board.
Every path ends in exactly one recorded :class:`RunRecord`, whatever failed.
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
from agent.results import RunRecord
from agent.runner import WorkerOutcome, run_worker
from agent.telemetry import Sampler, probe_for, summarize_window
from collectors.host import RaplReader
from collectors.nvml import NvmlCollector
from workloads.spec import WorkloadSpec

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
                on_progress: Callable[[str], None] | None = None) -> RunRecord:
        """Run ``spec`` on ``device`` now; the record is in history and on the board when this returns."""
        params = spec.resolve(overrides, "cuda" if device.type == "cuda" else "cpu")
        started_at = time.time()
        outcome, telemetry = self._run(spec, params, device, timeout, use_guard, on_progress)
        record = RunRecord(
            suite=suite, workload=spec.name, precision=spec.precision(params), params=params,
            params_label=spec.params_label(params), hostname=self.hostname, device_type=device.type,
            device=device.name, gpu="" if device.index is None else str(device.index), uuid=device.uuid,
            model_name=device.model_name, pci_bus_id=device.pci_bus_id, status=outcome.status,
            reason=outcome.reason, started_at=started_at, ended_at=time.time(),
            figures=dict(outcome.figures), environment=self._environment(device, outcome),
            details={**outcome.details, "telemetry": telemetry,
                     **({"output_tail": outcome.output_tail} if outcome.status != "ok" else {})},
        )
        for name in TELEMETRY_FIGURES:
            if name in telemetry:
                record.figures[name] = telemetry[name]
        self.history.add(record)
        self.board.add(record)
        level = logging.INFO if record.status == "ok" else logging.WARNING
        log.log(level, "%s on %s: %s%s", spec.name, device.name, record.status,
                f" ({record.reason})" if record.reason else "")
        return record

    def _run(self, spec: WorkloadSpec, params: dict[str, Any], device: Device, timeout: float, use_guard: bool,
             on_progress: Callable[[str], None] | None) -> tuple[WorkerOutcome, dict[str, Any]]:
        if self.stop.is_set():
            return WorkerOutcome("skipped", "interrupted: the agent is shutting down"), {}
        if device.type == "cuda" and use_guard and self.guard.enabled:
            reason = busy_reason(self.nvml, device.index, self.guard.max_utilization)
            if reason is not None:
                return WorkerOutcome("skipped", reason), {}
        probe, attach = probe_for(device.type, self.nvml, device.index, self.rapl)
        sampler = Sampler(probe, self.sample_hz).start()
        try:
            outcome = run_worker(spec.entry, params, device.worker_device, timeout,
                                 env=device.worker_environment(), on_start=attach, on_progress=on_progress,
                                 stop=self.stop)
        finally:
            samples = sampler.stop()
        telemetry: dict[str, Any] = {}
        if outcome.window is not None:
            try:
                telemetry = summarize_window(samples, *outcome.window)
            except ValueError as exc:
                telemetry = {"error": str(exc)}
        return outcome, telemetry

    def _environment(self, device: Device, outcome: WorkerOutcome) -> dict[str, Any]:
        """The worker's view (torch, CUDA runtime, cuDNN, NCCL, Python) plus the driver's and ours."""
        environment = dict(outcome.environment)
        environment.update(sixdim=__version__, device_model=device.model_name)
        if device.type == "cuda":
            environment.update(driver=self.nvml.driver_version, cuda_driver=self.nvml.cuda_driver_version,
                               vbios=self.nvml.gpu(device.index).vbios_version)
        return environment
