"""Builders for run records used across tests."""

from __future__ import annotations

from agent.results import RunRecord


def make_record(status: str = "ok", *, workload: str = "gemm", seconds: float = 0.01, ended_at: float = 2000.0,
                uuid: str = "GPU-a", gpu: str = "0", driver: str = "550.54.15", shape: str = "m=8,n=8,k=8",
                **figures: float) -> RunRecord:
    return RunRecord(
        suite="quick", workload=workload, precision="bf16", params={"m": 8}, shape=shape, mode="training", kernel_pass="forward",
        hostname="node1", device_type="cuda", device=f"cuda:{gpu}", gpu=gpu, uuid=uuid,
        model_name="NVIDIA H100 80GB HBM3", pci_bus_id="00000000:17:00.0", status=status,
        reason="" if status == "ok" else "something", started_at=ended_at - 5, ended_at=ended_at,
        figures={"seconds": seconds, "flops": 1024 / seconds, **figures} if status == "ok" else {},
        environment={"driver": driver, "cuda_runtime": "12.4", "torch": "2.13.0"})
