"""The onnx workload's power phase on a GPU provider (issue 45, item 2): given the worker's GPU, with the session
runs queued on a thread so the GPU is not left idle while the energy counter is read.

Here (no GPU) the queue is exercised with real threads, the device handed to the phase is seen by a spy on
``timing.power_phase`` (the real one needs CUDA events), and the refusal of a phase the GPU idled through by
the real phase on fake NVML (tests/test_power_timing.py's clock).  tests/test_gpu_onnx.py checks the CUDA
provider's phase on a real GPU."""

from __future__ import annotations

import contextlib
import threading

import pytest
import torch

from sixdim.workloads.context import RunContext
from sixdim.workloads.measure import timing
from sixdim.workloads.measure.correctness import Check
from sixdim.workloads.onnx import power as onnx_power
from sixdim.workloads.onnx import workload as onnx_workload
from tests.test_power_timing import FakeGpuClock


def test_queued_runs_return_to_the_caller_before_they_run_and_close_waits_for_them():
    gate, ran_on, done = threading.Event(), set(), []

    def run() -> None:  # a session run the test holds back until it lets the "GPU" go
        gate.wait(10)
        ran_on.add(threading.get_ident())
        done.append(1)

    queue = onnx_power.QueuedRuns(run, depth=4)
    queue.submit(4)  # the caller is free (to read a counter) while all four are still to run
    assert queue.completed == 0 and not done
    gate.set()
    queue.close()
    assert queue.completed == len(done) == 4
    assert ran_on and threading.get_ident() not in ran_on


def test_a_failing_run_fails_the_phase_with_its_own_error():
    def broken() -> None:
        raise RuntimeError("CUDA error: an illegal memory access")

    queue = onnx_power.QueuedRuns(broken, depth=2)
    with pytest.raises(RuntimeError, match="illegal memory access"):
        for _ in range(10):
            queue.submit()
    queue.close()


PARAMS = {"rounds": 3, "min_round_seconds": 0.002, "warmup_seconds": 0.0, "latency_samples": 0,
          "power_seconds": 2.0, "batch": 4}


@pytest.mark.parametrize("provider, device, expected", [
    ("CUDAExecutionProvider", "cuda:1", "cuda:1"),
    ("TensorrtExecutionProvider", "cuda:0", "cuda:0"),
    ("CPUExecutionProvider", "cpu", "cpu"),
])
def test_the_power_phase_gets_the_real_device_and_queued_runs(monkeypatch, provider, device, expected):
    """A GPU provider's phase used to run on ``cpu``: synchronous blocks, the GPU idle during each read, and its
    busy share never checked."""
    seen: dict = {}
    runs: list[int] = []

    def session_run() -> None:  # stands for session.run: returns when the device's work is done
        runs.append(threading.get_ident())

    def spy(call, device, ctx, **kwargs):  # the phase's loop, as far as it touches the unit
        seen.update(device=device, kwargs=kwargs)
        for _ in range(10):
            call()
        seen["queued"] = 10 * kwargs.get("calls_per_unit", 1)
        return {"power_watts": 500.0, "energy_joules": 1000.0}, {"power": {"calls": seen["queued"], "unit": "?"}}

    monkeypatch.setattr(timing, "power_phase", spy)
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())  # no CUDA here
    output = onnx_workload._measure(session_run, lambda: [], {**PARAMS, "providers": [provider]},
                                    RunContext(device=device), {}, lambda outputs: Check(0.0, 1e-3), None)
    assert str(seen["device"]) == expected
    assert len(runs) >= seen["queued"]  # every queued run ran before the case went on
    if expected.startswith("cuda"):
        assert seen["kwargs"]["seconds_per_unit"] >= timing.POWER_GRAPH_BELOW_SECONDS  # never graph-captured
        assert output.details["power"]["unit"] == onnx_power.UNIT_KIND
        assert output.details["power"]["queued_runs"] >= 2
        assert threading.get_ident() not in runs[-seen["queued"]:]  # the phase's runs were the thread's
    else:
        assert output.details["power"]["unit"] == "?"
    assert output.details["joules_per_request"] == pytest.approx(1000.0 / seen["queued"])


def test_power_the_gpu_was_not_busy_for_is_refused(monkeypatch):
    """The busy check reaches the onnx workload's figures: runs that left the GPU half idle give no power."""
    gpu = FakeGpuClock(monkeypatch, busy_percent=50)
    figures, details = onnx_power.power(gpu.kernel(1e-3), torch.device("cpu"), gpu.context(), seconds=1.0,
                                        seconds_per_call=1e-3, batch=4)
    assert figures == {}, figures
    assert "the GPU was busy for only 50%" in details["power_note"]
    assert details["power"]["gpu_busy_share"] == pytest.approx(0.5)
