"""GPU paths: run only where an NVIDIA GPU and a CUDA build of torch exist; skipped with the reason elsewhere."""

import pytest

from agent.board import Board
from agent.devices import resolve
from agent.executor import Executor, GuardSettings
from agent.history import History
from collectors.nvml import NvmlCollector
from workloads import registry

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def nvml():
    collector = NvmlCollector("gpu-test")
    if not collector.availability().available:
        pytest.skip(f"no NVIDIA GPU here: {collector.availability().reason}")
    import torch

    if not torch.cuda.is_available():
        pytest.skip(f"torch {torch.__version__} has no CUDA support on this host")
    return collector


def test_gemm_on_gpu_measures_speed_power_and_memory(nvml, tmp_path):
    executor = Executor(hostname="gpu-test", history=History(tmp_path / "h.db"), board=Board(), nvml=nvml,
                        rapl=None, guard=GuardSettings(enabled=False))
    device = resolve(["cuda:0"], nvml)[0]
    params = {"m": 4096, "n": 4096, "k": 4096, "precisions": ["bf16"], "min_round_seconds": 0.5,
              "warmup_seconds": 1.0}
    [record] = executor.execute(registry.get("gemm"), params, device, timeout=300)
    assert record.status == "ok", record.reason
    assert record.figures["flops"] > 1e12  # any data-centre GPU does over a TFLOP/s of bf16 GEMM
    assert record.figures["flops"] == pytest.approx(2 * 4096**3 / record.figures["seconds"])
    assert record.figures["power_watts"] > 0 and record.figures["energy_joules"] > 0
    assert record.figures["peak_memory_bytes"] >= 3 * 4096 * 4096 * 2  # A, B and C in bf16 at least
    assert record.environment["driver"] and record.environment["cuda_runtime"]
    assert record.details["telemetry"]["telemetry_samples"] >= 10
    assert record.uuid == nvml.gpus[0].uuid
    assert record.figures["max_relative_error"] <= 2e-2  # checked against float64
    if record.model_name in ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H200", "NVIDIA A100-SXM4-80GB"):
        assert 0.1 < record.figures["peak_ratio"] < 1.0


def test_quick_suite_on_gpu_reports_every_kernel(nvml, tmp_path):
    from agent.config import preset_entries

    executor = Executor(hostname="gpu-test", history=History(tmp_path / "h.db"), board=Board(), nvml=nvml,
                        rapl=None, guard=GuardSettings(enabled=False))
    device = resolve(["cuda:0"], nvml)[0]
    records = []
    for entry in preset_entries("quick"):
        records += executor.execute(registry.get(entry.name), entry.params, device, timeout=300)
    statuses = {(r.workload, r.status) for r in records}
    assert not {s for _, s in statuses} - {"ok", "unsupported"}, [r.reason for r in records if r.status not in
                                                                 ("ok", "unsupported")]
    assert {w for w, s in statuses if s == "ok"} >= {"gemm", "conv", "rnn", "sparse_gemm", "memory_bandwidth",
                                                     "launch_latency"}
