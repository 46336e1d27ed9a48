"""NVML collector and idle guard against a faithful fake of pynvml (no GPU here)."""

import pynvml
import pytest

from sixdim.collectors.nvml import NvmlCollector
from sixdim.core import catalog
from sixdim.http.board import Board
from sixdim.run.devices import resolve
from sixdim.run.executor import Executor, GuardSettings
from sixdim.run.guard import Guard
from sixdim.store.history import History
from sixdim.workloads import registry
from tests.fakenvml import FakeGpu, FakeNvml


def values(samples, metric, **labels):
    return [s.value for s in samples if s.metric is metric and all(s.labels.get(k) == v for k, v in labels.items())]


def test_readings_are_converted_to_base_units():
    nvml = NvmlCollector("node1", module=FakeNvml([FakeGpu(power_mw=312_500, energy_mj=5_000_000, sm_mhz=1755,
                                                            utilization_gpu=42, memory_used=2 * 1024**3)]))
    reading = nvml.sample(0)
    assert reading.power_watts == 312.5
    assert reading.energy_joules == 5000.0
    assert reading.sm_clock_hertz == 1.755e9
    assert reading.utilization_ratio == 0.42
    assert reading.memory_used_bytes == 2 * 1024**3


def test_every_live_gpu_gauge_carries_its_own_reading_in_base_units():
    """Distinct readings per field, so a swapped pair (used for total, SM for memory clock) or a
    missed conversion (MHz, percent, mW, mJ, millidegrees) shows."""
    gpu = FakeGpu(power_mw=312_500, energy_mj=5_000_000, memory_used=3 * 1024**3, memory_total=80 * 1024**3,
                  utilization_gpu=42, sm_mhz=1755, mem_mhz=2619, temperature=61)
    nvml = NvmlCollector("node1", module=FakeNvml([gpu]))
    reading = nvml.sample(0)
    assert (reading.memory_total_bytes, reading.memory_clock_hertz) == (80 * 1024**3, 2.619e9)
    samples = nvml.collect()
    expected = {catalog.GPU_POWER: 312.5, catalog.GPU_ENERGY: 5000.0, catalog.GPU_MEMORY_USED: 3 * 1024**3,
                catalog.GPU_MEMORY_TOTAL: 80 * 1024**3, catalog.GPU_UTILIZATION: 0.42,
                catalog.GPU_SM_CLOCK: 1.755e9, catalog.GPU_MEMORY_CLOCK: 2.619e9, catalog.GPU_TEMPERATURE: 61.0}
    for metric, value in expected.items():
        assert values(samples, metric, gpu="0") == [pytest.approx(value)], metric.name


def test_identity_versions_and_exported_samples():
    fake = FakeNvml([FakeGpu(), FakeGpu(uuid="GPU-second", bus_id="00000000:2A:00.0")], driver="550.54.15",
                    cuda=12040)
    nvml = NvmlCollector("node1", module=fake)
    assert [g.uuid for g in nvml.gpus] == ["GPU-8b2c4a1e-0000-1111-2222-333344445555", "GPU-second"]
    assert nvml.driver_version == "550.54.15" and nvml.cuda_driver_version == "12.4"
    samples = nvml.collect()
    info = [s for s in samples if s.metric is catalog.GPU_INFO]
    assert len(info) == 2
    assert info[1].labels[catalog.PCI_BUS_ID] == "00000000:2A:00.0"
    assert info[0].labels["cuda_driver_version"] == "12.4"
    assert values(samples, catalog.GPU_POWER, gpu="1") == [70.0]
    assert values(samples, catalog.GPU_THROTTLE, gpu="0", reason="gpu_idle") == [1.0]
    assert values(samples, catalog.GPU_THROTTLE, gpu="0", reason="sw_power_cap") == [0.0]


def test_unsupported_fields_are_absent_not_zero():
    gpu = FakeGpu(unsupported={"nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetPowerUsage"})
    nvml = NvmlCollector("node1", module=FakeNvml([gpu]))
    reading = nvml.sample(0)
    assert reading.energy_joules is None and reading.power_watts is None
    samples = nvml.collect()
    assert values(samples, catalog.GPU_POWER) == [] and values(samples, catalog.GPU_ENERGY) == []
    assert values(samples, catalog.GPU_TEMPERATURE) == [35.0]


def test_missing_driver_makes_collector_unavailable_not_a_crash(caplog, monkeypatch):
    from sixdim.collectors.base import LogOnce

    monkeypatch.setattr(LogOnce, "_seen", set())  # as in a fresh process
    nvml = NvmlCollector("node1", module=FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    NvmlCollector("node1", module=FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))  # a second one
    availability = nvml.availability()
    assert not availability.available
    assert "NVML Shared Library Not Found" in availability.reason
    assert nvml.collect() == []
    assert sum("NVML unavailable" in r.message for r in caplog.records) == 1  # once per process
    # 'auto' falls back to the CPU; an explicit GPU is a clear error
    assert [d.type for d in resolve(["auto"], nvml)] == ["cpu"]
    with pytest.raises(ValueError, match="cuda:0.*NVML Shared Library Not Found"):
        resolve(["cuda:0"], nvml)


def test_the_real_pynvml_reports_unavailable_on_this_host():
    nvml = NvmlCollector("node1")
    if nvml.availability().available:
        pytest.skip("this host has an NVIDIA driver")
    assert "NVML" in nvml.availability().reason


def test_auto_resolves_to_every_gpu():
    nvml = NvmlCollector("node1", module=FakeNvml([FakeGpu(), FakeGpu(uuid="GPU-b")]))
    devices = resolve(["auto"], nvml)
    assert [d.name for d in devices] == ["cuda:0", "cuda:1"]
    assert devices[1].worker_environment() == {"CUDA_VISIBLE_DEVICES": "GPU-b"}
    assert devices[1].worker_device == "cuda:0"


@pytest.mark.parametrize("gpu, expected", [
    (FakeGpu(compute_pids=[4242]), "1 other process(es) on GPU 0 (pid 4242)"),
    (FakeGpu(graphics_pids=[7, 8]), "2 other process(es)"),
    (FakeGpu(utilization_gpu=87), "utilization 87% is above the guard's 5%"),
])
def test_guard_names_why_a_gpu_is_busy(gpu, expected):
    nvml = NvmlCollector("node1", module=FakeNvml([gpu]))
    assert expected in Guard(nvml).before_run([0], 0.05)


def test_guard_passes_an_idle_gpu():
    nvml = NvmlCollector("node1", module=FakeNvml([FakeGpu(utilization_gpu=3)]))
    assert Guard(nvml).before_run([0], 0.05) is None


def test_busy_gpu_run_is_skipped_and_recorded(tmp_path):
    fake = FakeNvml([FakeGpu(compute_pids=[31337])])
    nvml = NvmlCollector("node1", module=fake)
    history = History(tmp_path / "h.db")
    board = Board()
    executor = Executor(hostname="node1", history=history, on_recorded=board.catch_up, nvml=nvml, rapl=None,
                        guard=GuardSettings(enabled=True, max_utilization=0.05))
    device = resolve(["cuda:0"], nvml)[0]
    records = executor.execute(registry.get("gemm"), {"set": "square", "precisions": ["bf16", "fp8"]}, device,
                               suite="quick")
    assert [r.status for r in records] == ["skipped", "skipped"]
    assert "pid 31337" in records[0].reason and records[1].reason == records[0].reason
    stored = list(History(tmp_path / "h.db"))
    assert [(r.status, r.uuid, r.device, r.precision) for r in stored] == [
        ("skipped", fake.gpus[0].uuid, "cuda:0", "bf16"), ("skipped", fake.gpus[0].uuid, "cuda:0", "fp8")]
    assert sorted((r.precision, r.status, n) for r, n in board.counts()) == [("bf16", "skipped", 1),
                                                                             ("fp8", "skipped", 1)]
    assert board.latest() == []  # a skip never replaces a result


def test_older_drivers_fall_back_to_the_throttle_reasons_symbol():
    gpu = FakeGpu(clock_event_mask=0x40, unsupported={"nvmlDeviceGetCurrentClocksEventReasons"})
    fake = FakeNvml([gpu])
    fake.nvmlDeviceGetCurrentClocksThrottleReasons = lambda handle: 0x40  # the old symbol still answers
    nvml = NvmlCollector("node1", module=fake)
    assert nvml.sample(0).clock_event_mask == 0x40


def test_a_samples_time_is_taken_before_its_queries(monkeypatch):
    """NVML answers take time; the reading's time must be when its first query (the energy counter)
    was made, not after the last one, or every counter value would be placed late."""
    import types

    import sixdim.collectors.nvml
    now = [100.0]
    calls: list[tuple[str, float]] = []

    def on_call(function: str) -> None:
        calls.append((function, now[0]))
        now[0] += 0.010  # each NVML query takes 10 ms

    monkeypatch.setattr(sixdim.collectors.nvml, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    nvml = NvmlCollector("node1", module=FakeNvml([FakeGpu()], on_call=on_call))
    calls.clear()
    now[0] = 100.0
    reading = nvml.sample(0)
    assert calls[0] == ("nvmlDeviceGetTotalEnergyConsumption", reading.time)
    assert reading.time == 100.0 and now[0] == pytest.approx(100.0 + 0.010 * len(calls))
    assert len(calls) >= 7


def test_a_failed_process_list_raises_and_is_not_exported_as_zero():
    gpu = FakeGpu(errors={"nvmlDeviceGetGraphicsRunningProcesses": pynvml.NVML_ERROR_UNKNOWN})
    nvml = NvmlCollector("node1", module=FakeNvml([gpu, FakeGpu(uuid="GPU-b", compute_pids=[7])]))
    with pytest.raises(pynvml.NVMLError_Unknown):
        nvml.process_ids(0)
    assert nvml.process_ids(1) == [7]
    samples = nvml.collect()
    assert values(samples, catalog.GPU_PROCESSES, gpu="0") == []  # unknown: absent, never 0
    assert values(samples, catalog.GPU_PROCESSES, gpu="1") == [1.0]
    assert "cannot list processes on GPU 0: Unknown Error" in Guard(nvml).before_run([0], 0.05)
