"""The peak table: data with sources, in base units, dense figures, matched by NVML's device names."""

import pytest

from sixdim.core import peaks

NVML_NAMES = {  # as NVML reports them
    "Tesla V100-SXM2-32GB": "NVIDIA V100 SXM2",
    "Tesla V100-PCIE-16GB": "NVIDIA V100 PCIe",
    "NVIDIA A100-SXM4-40GB": "NVIDIA A100 40GB (SXM4 and PCIe)",
    "NVIDIA A100-SXM4-80GB": "NVIDIA A100 80GB SXM4",
    "NVIDIA A100 80GB PCIe": "NVIDIA A100 80GB PCIe",
    "NVIDIA H100 80GB HBM3": "NVIDIA H100 SXM",
    "NVIDIA H100 PCIe": "NVIDIA H100 PCIe",
    "NVIDIA H200": "NVIDIA H200 SXM",
    "NVIDIA L40S": "NVIDIA L40S",
    "NVIDIA B200": "NVIDIA B200 (HGX, per GPU)",
    "AMD Instinct MI300X": "AMD Instinct MI300X",
}


def test_every_required_gpu_is_in_the_table_with_a_source():
    for device_name, entry_name in NVML_NAMES.items():
        peak = peaks.find(device_name)
        assert peak is not None and peak.name == entry_name, device_name
        assert peak.source.split(", ")[-1].startswith("https://"), peak.name


def test_units_are_base_units_and_figures_are_dense():
    for peak in peaks.table():
        for precision, flops in peak.flops.items():
            assert 1e12 <= flops <= 5e15, (peak.name, precision, flops)  # TFLOP/s became FLOP/s
        assert 5e11 <= peak.memory_bytes_per_second <= 1e13  # GB/s became bytes/s
        assert peak.flops.get("bf16", 0) <= 2.5e15  # no datasheet "with sparsity" figure slipped in
        if "bf16" in peak.flops:
            assert peak.flops["bf16"] > peak.flops["fp32"]


def test_known_values():
    h100 = peaks.find("NVIDIA H100 80GB HBM3")
    assert h100.flops["bf16"] == pytest.approx(989.5e12)
    assert h100.memory_bytes_per_second == pytest.approx(3.35e12)
    assert peaks.find("NVIDIA A100-SXM4-80GB").flops["tf32"] == pytest.approx(156e12)


def test_unknown_gpu_or_precision_gets_no_ratio():
    assert peaks.find("NVIDIA GeForce RTX 4090") is None
    assert peaks.find("NVIDIA H200 NVL") is None  # a different product: never matched by a near name
    assert peaks.peak_ratio("NVIDIA GeForce RTX 4090", "flops", "bf16", {"flops": 1e14}) is None
    assert peaks.peak_ratio("Tesla V100-SXM2-32GB", "flops", "bf16", {"flops": 1e13}) is None


def test_ratio():
    assert peaks.peak_ratio("NVIDIA H100 80GB HBM3", "flops", "bf16", {"flops": 700e12}) == pytest.approx(700 / 989.5)
    assert peaks.peak_ratio("NVIDIA H100 80GB HBM3", "bandwidth", "", {"bytes_per_second": 3e12}) == pytest.approx(
        3 / 3.35)


def test_fp8_fast_is_judged_against_the_fp8_peak():
    """fp8 with fast accumulation has the same published peak as fp8 (the tensor cores' own rate),
    on every GPU that has an fp8 figure, and no peak where fp8 has none."""
    with_fp8 = [peak for peak in peaks.table() if "fp8" in peak.flops]
    assert {p.name for p in with_fp8} >= {"NVIDIA H100 SXM", "NVIDIA H200 SXM", "NVIDIA L40S"}
    for peak in peaks.table():
        assert peak.flops.get("fp8_fast") == peak.flops.get("fp8"), peak.name
    assert peaks.find("NVIDIA H100 80GB HBM3").flops["fp8_fast"] == pytest.approx(1979e12)
    assert peaks.peak_ratio("NVIDIA H100 80GB HBM3", "flops", "fp8_fast", {"flops": 1500e12}) == pytest.approx(
        1500 / 1979)
    assert peaks.peak_ratio("NVIDIA A100-SXM4-80GB", "flops", "fp8_fast", {"flops": 1e14}) is None  # no fp8 there


def test_ratio_uses_the_exported_flops_only():
    """A padded GEMM's details (its padded rate) never reach the ratio: only figures["flops"] does."""
    figures = {"flops": 100e12, "padded_flops": 800e12}
    assert peaks.peak_ratio("NVIDIA H100 80GB HBM3", "flops", "int8", figures) == pytest.approx(100 / 1979)
