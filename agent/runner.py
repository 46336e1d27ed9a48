"""Runs one workload in a child process, with a timeout, and classifies how it ended.

The child is a fresh interpreter (``python -m agent.worker``) in its own session
and process group, so that a timeout or shutdown can stop it and anything it
started with one ``killpg``.  Whatever happens there (an exception, a signal, a
hang, the OOM killer), the daemon gets a :class:`WorkerOutcome` and keeps serving.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from agent.worker import PROGRESS_PREFIX

TERMINATE_GRACE_SECONDS = 3.0
"""After SIGTERM, how long the worker group has before SIGKILL."""

STDERR_TAIL_LINES = 20


@dataclass
class WorkerOutcome:
    """How a worker ended, and what it reported if it reported anything."""

    status: str  # ok, failed, timeout, skipped
    reason: str = ""
    figures: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    window: tuple[float, float] | None = None
    environment: dict[str, Any] = field(default_factory=dict)
    returncode: int | None = None
    output_tail: list[str] = field(default_factory=list)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class _OutputReader(threading.Thread):
    """Reads the worker's merged stdout/stderr: relays progress, keeps the tail for failure reasons."""

    def __init__(self, stream: Any, on_progress: Callable[[str], None] | None):
        super().__init__(daemon=True, name="worker-output")
        self._stream = stream
        self._on_progress = on_progress
        self.tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)

    def run(self) -> None:
        for raw in self._stream:
            line = raw.decode(errors="replace").rstrip("\n")
            if line.startswith(PROGRESS_PREFIX):
                if self._on_progress is not None:
                    self._on_progress(line[len(PROGRESS_PREFIX):])
            else:
                self.tail.append(line)


def run_worker(entry: str, params: dict[str, Any], device: str, timeout: float, *,
               env: dict[str, str] | None = None,
               on_start: Callable[[int], None] | None = None,
               on_progress: Callable[[str], None] | None = None,
               stop: threading.Event | None = None) -> WorkerOutcome:
    """Run ``entry`` (``module:function``) with ``params`` on ``device`` in a child process.

    ``env`` is added to the child's environment (CUDA_VISIBLE_DEVICES, for one).
    ``on_start`` gets the child's PID (for telemetry).  Setting ``stop`` ends the
    child early; the outcome is then ``skipped`` with reason "interrupted".
    """
    with tempfile.TemporaryDirectory(prefix="sixdim-run-") as workdir:
        request_path = os.path.join(workdir, "request.json")
        result_path = os.path.join(workdir, "result.json")
        with open(request_path, "w") as handle:
            json.dump({"entry": entry, "params": params, "device": device}, handle)
        child_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        process = subprocess.Popen(
            [sys.executable, "-m", "agent.worker", request_path, result_path],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env=child_env, start_new_session=True)
        reader = _OutputReader(process.stdout, on_progress)
        reader.start()
        if on_start is not None:
            on_start(process.pid)
        ended_by = _wait(process, timeout, stop)
        _kill_group(process.pid, signal.SIGKILL)  # anything the worker left behind
        reader.join(timeout=2.0)
        tail = list(reader.tail)
        outcome = _classify(process.returncode, ended_by, timeout, result_path, tail)
        outcome.output_tail = tail
        return outcome


def _wait(process: subprocess.Popen, timeout: float, stop: threading.Event | None) -> str:
    """Wait for the child; returns 'exit', 'timeout' or 'stop', having stopped it if needed."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            process.wait(timeout=0.1)
            return "exit"
        except subprocess.TimeoutExpired:
            pass
        reason = "timeout" if time.monotonic() >= deadline else "stop" if stop is not None and stop.is_set() else None
        if reason is None:
            continue
        _kill_group(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=TERMINATE_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            _kill_group(process.pid, signal.SIGKILL)
            process.wait()
        return reason


def _classify(returncode: int, ended_by: str, timeout: float, result_path: str, tail: list[str]) -> WorkerOutcome:
    if ended_by == "timeout":
        return WorkerOutcome("timeout", f"did not finish within its timeout of {timeout:g} s; stopped",
                             returncode=returncode)
    if ended_by == "stop":
        return WorkerOutcome("skipped", "interrupted: the agent is shutting down", returncode=returncode)
    result = _read_result(result_path)
    if result is not None:
        window = result.get("window") or [None, None]
        return WorkerOutcome(
            status=result["status"], reason=result.get("reason", ""),
            figures=result.get("figures", {}), details=result.get("details", {}),
            window=(window[0], window[1]) if None not in window else None,
            environment=result.get("environment", {}), returncode=returncode)
    last = next((line for line in reversed(tail) if line.strip()), "")
    if returncode < 0:
        name = _signal_name(-returncode)
        hint = " (the kernel's OOM killer sends SIGKILL: check dmesg)" if returncode == -signal.SIGKILL else ""
        reason = f"worker killed by {name}{hint}"
    elif returncode != 0:
        reason = f"worker exited with code {returncode}"
    else:
        reason = "worker exited without writing a result"
    if last:
        reason += f"; last output: {last[-300:]}"
    return WorkerOutcome("failed", reason, returncode=returncode)


def _read_result(path: str) -> dict[str, Any] | None:
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None
