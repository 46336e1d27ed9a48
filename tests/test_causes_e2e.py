"""A real cause, end to end: another CPU-heavy process started during a series (issue 26).

The real executor runs a CPU workload in its real worker; between two batches of runs, real processes
that spin on every CPU start.  The conditions recorded with each run must show them (the share of the
host's CPU other processes took), and the live verdicts, fed the recorded runs, must name host load as
the cause of the series' slowdown, and export it.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from sixdim.collectors.nvml import NvmlCollector
from sixdim.core.conditions import CONDITIONS
from sixdim.http.board import Board
from sixdim.http.exporter import SixdimCollector
from sixdim.run.devices import cpu_device
from sixdim.run.executor import Executor
from sixdim.store.history import History
from sixdim.verdicts.detector import REGRESSION, SUSPICIOUS
from sixdim.verdicts.live import Verdicts
from sixdim.workloads.context import RunContext, WorkloadOutput
from sixdim.workloads.spec import Case, Param, WorkloadSpec


def spin(params: dict[str, Any], ctx: RunContext) -> WorkloadOutput:
    """A fixed amount of pure-Python work in the measured window: it slows when others take the CPUs."""
    ctx.mark_window_start()
    started = time.perf_counter()
    total = 0
    for i in range(params["iterations"]):
        total += i * i
    seconds = time.perf_counter() - started
    ctx.mark_window_end()
    return WorkloadOutput({"seconds": seconds}, {"total": total})


def _cases(spec: WorkloadSpec, params: dict, device_type: str) -> list[Case]:
    return [Case({"iterations": params["iterations"]}, precision="fp32", shape="spin") for _ in range(params["runs"])]


SPIN = WorkloadSpec(name="spin", description="test", entry="tests.test_causes_e2e:spin", uses_torch=False,
                    expander=_cases, params=(Param("runs", int, "cases", 1, 1),
                                             Param("iterations", int, "work", 2_000_000, 2_000_000)))
"""About 0.1 s a case on an idle core: a span of a sample period or so, as a short benchmark case is."""


def _hogs() -> list[subprocess.Popen]:
    """Two processes spinning for each CPU this test may use, each in a session of its own as another
    service's would be (Linux's autogroup shares the CPUs between sessions first, and the worker has a
    session of its own)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
            for _ in range(2 * len(os.sched_getaffinity(0)))]


@pytest.mark.slow
def test_another_cpu_heavy_process_is_named_as_the_cause(tmp_path):
    history = History(tmp_path / "h.db")
    board = Board()
    executor = Executor(hostname="h", history=history, on_recorded=board.catch_up, nvml=NvmlCollector("h"), rapl=None)
    quiet = executor.execute(SPIN, {"runs": 24}, cpu_device())
    hogs = _hogs()
    try:
        time.sleep(0.5)
        busy = executor.execute(SPIN, {"runs": 10}, cpu_device())
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    records = quiet + busy
    assert all(r.status == "ok" for r in records), [r.reason for r in records]

    # what was recorded: the others' share of the host's CPU, read from /proc/stat and the worker's own times
    other_quiet = statistics.median(r.conditions["other_cpu_ratio"] for r in quiet)
    other_busy = statistics.median(r.conditions["other_cpu_ratio"] for r in busy)
    assert other_busy - other_quiet >= 0.2, (other_quiet, other_busy)
    assert statistics.median(r.figures["seconds"] for r in busy) > 1.2 * statistics.median(
        r.figures["seconds"] for r in quiet)
    # every listed condition is recorded or says why not, on this CPU host
    unavailable = records[0].conditions.get("unavailable", {})
    assert unavailable["gpu"] == "the run is on the CPU" and "power_limit_watts" not in unavailable
    for condition in CONDITIONS:
        assert condition.name in records[0].conditions or unavailable.get(condition.name) \
            or (condition.scope == "gpu" and unavailable["gpu"]), condition.name
    assert "usable_cpus" in records[0].conditions

    verdicts = Verdicts()
    for record in history:
        verdicts.add(record)
    [series] = verdicts.snapshot()
    assert series.verdicts["seconds"].state in (REGRESSION, SUSPICIOUS), series.verdicts["seconds"]
    assert series.causes[0].cause == "host_load", series.causes
    assert "other processes' share of the host's CPU" in series.causes[0].evidence

    board.verdicts = verdicts
    registry = CollectorRegistry()
    registry.register(SixdimCollector(board, [], "h"))
    text = generate_latest(registry).decode()
    [line] = [x for x in text.splitlines() if x.startswith("sixdim_regression_cause{")]
    assert 'cause="host_load"' in line and 'rank="1"' in line and line.endswith(" 1.0")
