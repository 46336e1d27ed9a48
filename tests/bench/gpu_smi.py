"""nvidia-smi helpers for the GPU scripts (tests/bench/gpu_bench.py, tests/bench/measure_daemon.py).

Torch-free and read-only: these only query the GPU (``--query-gpu``, ``--query-compute-apps``);
nothing here changes a GPU setting.  Where ``nvidia-smi`` is missing every helper says so
(``None`` or an empty result with a reason) instead of raising.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import threading
import time
from datetime import datetime
from typing import Any

POWER_FIELDS = ("power.draw", "power.draw.instant", "power.draw.average")
TIMESTAMP_FORMAT = "%Y/%m/%d %H:%M:%S.%f"


def smi() -> str | None:
    return shutil.which("nvidia-smi")


def number(text: str) -> float | None:
    """A numeric nvidia-smi cell, or None for '[N/A]', '[Not Supported]', empty or garbage."""
    try:
        return float(text.strip())
    except (ValueError, AttributeError):
        return None


def parse_timestamp(text: str) -> float | None:
    """nvidia-smi's ``timestamp`` ("YYYY/MM/DD HH:MM:SS.mmm", local time) as Unix seconds."""
    try:
        return datetime.strptime(text.strip(), TIMESTAMP_FORMAT).timestamp()
    except ValueError:
        return None


def query(fields: list[str] | tuple[str, ...], index: int | str = 0,
          timeout: float = 15.0) -> tuple[list[str] | None, str]:
    """One ``--query-gpu`` line split into cells, or (None, why)."""
    path = smi()
    if path is None:
        return None, "nvidia-smi not found on PATH"
    try:
        done = subprocess.run([path, "-i", str(index), f"--query-gpu={','.join(fields)}",
                               "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"nvidia-smi failed: {exc}"
    if done.returncode != 0:
        return None, (done.stdout + done.stderr).strip()[-300:] or f"exit code {done.returncode}"
    line = done.stdout.strip().splitlines()[0] if done.stdout.strip() else ""
    return [cell.strip() for cell in line.split(",")], ""


def supported_power_fields(index: int | str = 0) -> tuple[list[str], dict[str, str]]:
    """Which of power.draw, power.draw.instant and power.draw.average this driver answers with a number."""
    supported, why = [], {}
    for field in POWER_FIELDS:
        cells, reason = query([field], index)
        if cells is not None and number(cells[0]) is not None:
            supported.append(field)
        else:
            why[field] = reason or (cells[0] if cells else "no value")
    return supported, why


class PowerSampler:
    """``nvidia-smi --query-gpu=timestamp,<fields> -lms PERIOD`` in the background.

    Each sample keeps nvidia-smi's own timestamp (parsed as local time) and the time this
    process read the line (``received``), so a clock or time-zone mismatch can be seen."""

    def __init__(self, index: int | str = 0, fields: list[str] | None = None, period_ms: int = 100):
        self.index, self.period_ms = index, period_ms
        self.fields = list(fields or ["power.draw"])
        self.samples: list[dict[str, Any]] = []
        self.unparsed: list[str] = []
        self._process: subprocess.Popen | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> PowerSampler:
        path = smi()
        if path is None:
            raise RuntimeError("nvidia-smi not found on PATH")
        self._process = subprocess.Popen(
            [path, "-i", str(self.index), f"--query-gpu=timestamp,{','.join(self.fields)}",
             "--format=csv,noheader,nounits", "-lms", str(self.period_ms)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        self._thread = threading.Thread(target=self._read, daemon=True, name="nvidia-smi-power")
        self._thread.start()
        return self

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            received = time.time()
            cells = [cell.strip() for cell in line.strip().split(",")]
            stamp = parse_timestamp(cells[0]) if cells else None
            if stamp is None or len(cells) != len(self.fields) + 1:
                if len(self.unparsed) < 20:
                    self.unparsed.append(line.strip())
                continue
            sample: dict[str, Any] = {"t": stamp, "received": received}
            for field, cell in zip(self.fields, cells[1:]):
                sample[field] = number(cell)
            self.samples.append(sample)

    def stop(self) -> list[dict[str, Any]]:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=5)
        if self._thread is not None:
            self._thread.join(timeout=5)
        return self.samples

    def clock_offset(self) -> float | None:
        """Median (received - nvidia-smi timestamp): near 0 (≤ a period) when the parse is right."""
        offsets = [s["received"] - s["t"] for s in self.samples]
        return statistics.median(offsets) if offsets else None


def window_mean(samples: list[dict[str, Any]], field: str, start: float, end: float,
                time_key: str = "t") -> tuple[float | None, int]:
    """Mean of ``field`` over samples whose time lies in [start, end], and how many there were."""
    values = [s[field] for s in samples if start <= s[time_key] <= end and s.get(field) is not None]
    return (statistics.fmean(values) if values else None), len(values)


def compute_apps() -> tuple[list[tuple[int, float | None]] | None, str]:
    """(pid, used MiB) of every process with a CUDA context on any GPU, or (None, why)."""
    path = smi()
    if path is None:
        return None, "nvidia-smi not found on PATH"
    try:
        done = subprocess.run([path, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"nvidia-smi failed: {exc}"
    if done.returncode != 0:
        return None, (done.stdout + done.stderr).strip()[-300:]
    apps = []
    for line in done.stdout.splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if cells and cells[0].isdigit():
            apps.append((int(cells[0]), number(cells[1]) if len(cells) > 1 else None))
    return apps, ""
