"""A GPU in MIG mode is found through NVML and its runs are skipped with a reason naming its MIG
instances, never ``failed`` with CUDA's "no device" from inside the worker."""

from __future__ import annotations

import pynvml
import pytest

from sixdim.collectors.nvml import NvmlCollector
from sixdim.run.devices import resolve
from sixdim.run.executor import Executor, GuardSettings
from sixdim.store.history import History
from tests.fakenvml import MAX_MIG_DEVICES, FakeGpu, FakeNvml
from tests.guard_workloads import spec

MIG_A = "MIG-1f4c1a6e-7d3b-5e2a-9c1d-0a1b2c3d4e5f"
MIG_B = "MIG-9e8d7c6b-5a4f-5e3d-8c2b-1a0f9e8d7c6b"


def mig_gpu(instances: list[str | None], **kwargs) -> FakeGpu:
    return FakeGpu(name="NVIDIA A100-SXM4-40GB", uuid="GPU-0000a100-0000-0000-0000-000000000000", mig_capable=True,
                   mig_mode=pynvml.NVML_DEVICE_MIG_ENABLE, mig_devices=instances, **kwargs)


def test_the_fake_answers_mig_queries_as_nvml_does():
    fake = FakeNvml([FakeGpu(), mig_gpu([MIG_A, None, MIG_B])])
    fake.nvmlInit()
    plain, mig = fake.nvmlDeviceGetHandleByIndex(0), fake.nvmlDeviceGetHandleByIndex(1)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetMigMode(plain)
    assert fake.nvmlDeviceGetMaxMigDeviceCount(plain) == 0  # "zero if MIG is not supported or enabled"
    assert fake.nvmlDeviceGetMigMode(mig) == [pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE]
    assert fake.nvmlDeviceGetMaxMigDeviceCount(mig) == MAX_MIG_DEVICES
    assert fake.nvmlDeviceGetUUID(fake.nvmlDeviceGetMigDeviceHandleByIndex(mig, 2)) == MIG_B
    with pytest.raises(pynvml.NVMLError_NotFound):
        fake.nvmlDeviceGetMigDeviceHandleByIndex(mig, 1)  # an empty slot
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetMigDeviceHandleByIndex(mig, MAX_MIG_DEVICES)
    instance = fake.nvmlDeviceGetMigDeviceHandleByIndex(mig, 0)
    assert fake.nvmlDeviceIsMigDeviceHandle(instance) == 1 and fake.nvmlDeviceIsMigDeviceHandle(mig) == 0


@pytest.mark.parametrize("gpu, enabled, uuids", [
    (FakeGpu(), False, ()),  # no MIG at all: nvmlDeviceGetMigMode answers NOT_SUPPORTED
    (FakeGpu(mig_capable=True), False, ()),  # MIG-capable, MIG off
    (FakeGpu(mig_capable=True, mig_pending=pynvml.NVML_DEVICE_MIG_ENABLE), False, ()),  # on after a reset only
    (mig_gpu([MIG_A, None, None, MIG_B]), True, (MIG_A, MIG_B)),
    (mig_gpu([]), True, ()),  # MIG on, no instance created
])
def test_mig_mode_and_instances_are_read_from_nvml(gpu, enabled, uuids):
    nvml = NvmlCollector("node1", module=FakeNvml([gpu]))
    assert nvml.availability().available
    identity = nvml.gpu(0)
    assert (identity.mig_enabled, identity.mig_uuids, identity.mig_error) == (enabled, uuids, "")


def test_a_failure_listing_mig_instances_keeps_nvml_available_and_the_gpu_marked():
    gpu = mig_gpu([MIG_A], errors={"nvmlDeviceGetMigDeviceHandleByIndex": pynvml.NVML_ERROR_NO_PERMISSION})
    nvml = NvmlCollector("node1", module=FakeNvml([FakeGpu(uuid="GPU-other"), gpu]))
    assert nvml.availability().available and len(nvml.gpus) == 2
    assert (nvml.gpu(1).mig_enabled
            and nvml.gpu(1).mig_error == "cannot list its MIG instances: Insufficient Permissions")
    [device] = resolve(["cuda:1"], nvml)
    assert "GPU 1 is in MIG mode, with no MIG instance created (cannot list its MIG instances: " \
           "Insufficient Permissions)" in device.mig_reason


def test_runs_on_a_mig_gpu_are_skipped_naming_its_instances(tmp_path):
    fake = FakeNvml([mig_gpu([MIG_A, None, MIG_B]), FakeGpu(uuid="GPU-whole", bus_id="00000000:2A:00.0")])
    nvml = NvmlCollector("node1", module=fake)
    executor = Executor(hostname="node1", history=History(tmp_path / "h.db"), nvml=nvml, rapl=None,
                        guard=GuardSettings(enabled=True))
    mig, whole = resolve(["auto"], nvml)
    assert (mig.name, mig.mig_uuids, whole.mig_reason) == ("cuda:0", (MIG_A, MIG_B), None)
    expected = (f"GPU 0 is in MIG mode, split into 2 MIG instance(s): {MIG_A}, {MIG_B}; sixdim benchmarks whole "
                f"GPUs only (an instance shares the GPU's power, clocks and energy counter with the others); to "
                f"benchmark it, disable MIG (nvidia-smi -i 0 -mig 0, then reset the GPU)")
    records = executor.execute(spec("pergpu", [{}, {}]), {}, mig)
    assert [(r.status, r.reason) for r in records] == [("skipped", expected)] * 2
    assert [r.status for r in executor.execute(spec("pergpu", [{}]), {}, whole)] == ["ok"]
    # a host-wide run needs every GPU, so the MIG GPU stops it too, from the first GPU's job
    [host] = executor.execute(spec("hostwide", [{}], scope="host"), {}, mig)
    assert (host.status, host.reason) == ("skipped", expected)
    assert [r.status for r in History(tmp_path / "h.db")] == ["skipped", "skipped", "ok", "skipped"]
