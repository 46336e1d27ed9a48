"""Host-wide workloads (all-reduce, card linearity) use every GPU of the host: every GPU's lock,
guard and telemetry, and a worker that sees every GPU in NVML's order.  Real workers; the fake
NVML has two GPUs."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from sixdim.collectors.nvml import NvmlCollector
from sixdim.config import Suite, WorkloadEntry
from sixdim.run.devices import DeviceLocks, cpu_device, resolve
from sixdim.run.executor import Executor, GuardSettings
from sixdim.run.hostprobe import MultiGpuProbe
from sixdim.run.scheduler import SuiteScheduler
from sixdim.store.history import History
from sixdim.workloads import registry
from tests.fakenvml import FakeGpu, FakeNvml
from tests.guard_workloads import spec

GIB = 1024**3


def two_gpus(**second) -> FakeNvml:
    return FakeNvml([FakeGpu(uuid="GPU-aaaa", bus_id="00000000:17:00.0", memory_used=3 * GIB),
                     FakeGpu(uuid="GPU-bbbb", bus_id="00000000:2A:00.0", memory_used=5 * GIB, **second)])


def make_executor(tmp_path: Path, fake: FakeNvml, guard: bool = True) -> Executor:
    return Executor(hostname="node1", history=History(tmp_path / "h.db"), nvml=NvmlCollector("node1", module=fake),
                    rapl=None, guard=GuardSettings(enabled=guard, max_utilization=0.05))


def wait_for(path: Path, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.slow
def test_a_host_wide_run_waits_for_every_gpus_lock_and_holds_them_all(tmp_path, monkeypatch, caplog):
    """Suite A runs on GPU 1; a host-wide suite on GPU 0 must wait for it; then suite C on GPU 1 must
    wait for the host-wide run.  The order is read from the workers' own clocks."""
    executor = make_executor(tmp_path, two_gpus())
    gpu0, gpu1 = resolve(["cuda:0", "cuda:1"], executor.nvml)
    started_a, started_host = tmp_path / "a.started", tmp_path / "host.started"
    specs = {"a": spec("a", [{"seconds": 4.0, "marker": str(started_a)}]),  # time for the host thread to queue
             "host": spec("host", [{"seconds": 1.5, "marker": str(started_host)}], scope="host"),
             "c": spec("c", [{"seconds": 0.1}])}
    monkeypatch.setattr(registry, "get", specs.__getitem__)
    suites = {name: Suite(name=name, workloads=(WorkloadEntry(name),), interval_seconds=3600) for name in specs}
    scheduler = SuiteScheduler(executor, [(suites["a"], [gpu1]), (suites["host"], [gpu0]), (suites["c"], [gpu1])])
    caplog.set_level("INFO", logger="sixdim.run.executor")

    a = threading.Thread(target=scheduler.run_suite, args=(suites["a"], gpu1))
    a.start()
    wait_for(started_a)  # suite A's worker is running on GPU 1
    host = threading.Thread(target=scheduler.run_suite, args=(suites["host"], gpu0))
    host.start()
    wait_for(started_host)  # only once A has let GPU 1 go
    c = threading.Thread(target=scheduler.run_suite, args=(suites["c"], gpu1))
    c.start()
    for thread in (a, host, c):
        thread.join(timeout=60)
    records = {r.workload: r for r in History(tmp_path / "h.db")}
    assert {name: r.status for name, r in records.items()} == {"a": "ok", "host": "ok", "c": "ok"}
    assert records["host"].figures["begin_unix"] >= records["a"].figures["end_unix"]
    assert records["c"].figures["begin_unix"] >= records["host"].figures["end_unix"]
    assert "host on cuda:0 waits for cuda:1: another suite of this agent is running on it" in caplog.text


def test_device_locks_are_taken_in_index_order_whatever_the_order_asked():
    nvml = NvmlCollector("node1", module=two_gpus())
    gpu0, gpu1 = resolve(["cuda:0", "cuda:1"], nvml)
    locks = DeviceLocks()
    order: list[str] = []
    waits = {"cuda:0": threading.Event(), "cuda:1": threading.Event()}
    gpu1_taken, release_gpu1 = threading.Event(), threading.Event()

    def on_wait(device, who: str) -> None:
        assert who == "another suite of this agent"
        order.append(device.name)
        waits[device.name].set()

    def host_wide() -> None:
        with locks.hold([gpu1, gpu0], on_wait=on_wait) as held:
            assert held
            order.append("held")

    def suite_on_gpu1() -> None:
        with locks.hold([gpu1]) as held:
            assert held
            gpu1_taken.set()
            release_gpu1.wait(timeout=10)

    host = threading.Thread(target=host_wide)
    other = threading.Thread(target=suite_on_gpu1)
    with locks.lock(gpu0):  # another suite is on GPU 0: the host-wide run waits there first
        host.start()
        assert waits["cuda:0"].wait(timeout=5)
        other.start()  # GPU 1 is free meanwhile: the waiting run holds nothing above GPU 0
        assert gpu1_taken.wait(timeout=5)
    assert waits["cuda:1"].wait(timeout=5)  # GPU 0 is now the host-wide run's; GPU 1 is not yet
    assert order == ["cuda:0", "cuda:1"]
    release_gpu1.set()
    for thread in (host, other):
        thread.join(timeout=5)
    assert order == ["cuda:0", "cuda:1", "held"]


def test_a_stop_while_waiting_for_a_lock_holds_nothing():
    nvml = NvmlCollector("node1", module=two_gpus())
    gpu0, gpu1 = resolve(["cuda:0", "cuda:1"], nvml)
    locks, stop = DeviceLocks(), threading.Event()
    result: list[bool] = []
    with locks.lock(gpu1):
        thread = threading.Thread(target=lambda: result.append(locks.hold([gpu0, gpu1], stop).__enter__()))
        thread.start()
        stop.set()
        thread.join(timeout=5)
    assert result == [False]
    assert locks.lock(gpu0).acquire(blocking=False)  # GPU 0, taken first, was given back


def test_a_busy_second_gpu_skips_a_host_wide_run_but_not_the_first_gpus_own(tmp_path):
    executor = make_executor(tmp_path, two_gpus(compute_pids=[4242]))
    gpu0 = resolve(["cuda:0"], executor.nvml)[0]
    items = [(spec("mine", [{}]), {}), (spec("allreduce_like", [{}, {}], scope="host"), {})]
    records = executor.execute_many(items, gpu0)
    assert [(r.workload, r.status) for r in records] == [("mine", "ok"), ("allreduce_like", "skipped"),
                                                         ("allreduce_like", "skipped")]
    assert records[1].reason == "busy: 1 other process(es) on GPU 1 (pid 4242)"


@dataclass
class CountingGpu(FakeGpu):
    """A GPU drawing ``watts`` constantly: its energy counter (mJ) grows with the monotonic clock."""

    watts: float = 0.0
    since: float = 0.0

    def __post_init__(self) -> None:
        self.since = time.monotonic()

    def __getattribute__(self, name: str):
        if name == "energy_mj":
            return int(object.__getattribute__(self, "watts") * (time.monotonic() - object.__getattribute__(
                self, "since")) * 1000) + 1_000_000
        return object.__getattribute__(self, name)


@pytest.mark.slow
def test_a_host_wide_worker_gets_every_gpu_in_nvml_order_and_summed_telemetry(tmp_path):
    fake = FakeNvml([CountingGpu(uuid="GPU-aaaa", memory_used=3 * GIB, power_mw=300_000, watts=300.0),
                     CountingGpu(uuid="GPU-bbbb", bus_id="00000000:2A:00.0", memory_used=5 * GIB, power_mw=200_000,
                                 watts=200.0)])
    executor = make_executor(tmp_path, fake)
    gpu0, gpu1 = resolve(["cuda:0", "cuda:1"], executor.nvml)
    [host] = executor.execute(spec("hostwide", [{"seconds": 1.5}], scope="host"), {}, gpu0)
    assert host.status == "ok", host.reason
    assert host.details["gpu_uuids"] == ["GPU-aaaa", "GPU-bbbb"]
    assert host.details["cuda_visible_devices"] == "GPU-aaaa,GPU-bbbb"
    assert host.details["cuda_device_order"] == "PCI_BUS_ID"
    assert host.figures["device_memory_bytes"] == 8 * GIB  # 3 + 5: both GPUs' memory
    assert host.figures["power_watts"] == pytest.approx(500.0, rel=0.02)  # 300 W + 200 W, from the counters
    assert host.details["telemetry"]["power_source"] == "energy_counter"

    [own] = executor.execute(spec("pergpu", [{}]), {}, gpu1)  # a per-GPU run: its one GPU
    assert own.details["gpu_uuids"] == ["GPU-bbbb"] and own.details["cuda_visible_devices"] == "GPU-bbbb"
    assert own.figures["device_memory_bytes"] == 5 * GIB
    [cpu] = executor.execute(spec("oncpu", [{}], scope="host"), {}, cpu_device())
    assert cpu.details["gpu_uuids"] == [] and cpu.details["cuda_visible_devices"] == ""


def test_multi_gpu_probe_sums_energy_power_and_memory():
    fake = two_gpus()
    fake.gpus[0].power_mw, fake.gpus[1].power_mw = 250_000, 125_500
    fake.gpus[0].energy_mj, fake.gpus[1].energy_mj = 7_000_000, 3_000_000
    fake.gpus[0].sm_mhz, fake.gpus[1].sm_mhz = 1980, 1500
    fake.gpus[0].clock_event_mask, fake.gpus[1].clock_event_mask = 0x4, 0x40
    nvml = NvmlCollector("node1", module=fake)
    sample = MultiGpuProbe(nvml, [0, 1]).read()
    assert sample.power_watts == 375.5
    assert sample.energy_joules == 10_000.0
    assert sample.memory_bytes == 8 * GIB
    assert sample.sm_clock_hertz == pytest.approx(1.74e9)  # the mean: clocks do not add up
    assert sample.clock_event_mask == 0x44  # a power cap on one, a hardware thermal slowdown on the other
    fake.gpus[1].unsupported.add("nvmlDeviceGetTotalEnergyConsumption")
    assert MultiGpuProbe(nvml, [0, 1]).read().energy_joules is None  # half a sum is not the host's energy
