"""The live GPU health gauges (power limits, PCIe link, ECC, row remapping, page retirement, NVLink)
that NvmlCollector.collect() exports from conditions(), against the faithful pynvml fake."""

from __future__ import annotations

import pynvml
import pytest

from sixdim.collectors.nvml import HEALTH_GAUGES, SNAPSHOT_GPU_CONDITIONS, NvmlCollector
from sixdim.core import catalog
from sixdim.core.conditions import BY_NAME
from tests.fakenvml import H100_NVLINK_LINKS, FakeGpu, FakeNvml

HEALTH_NAMES = {m.name for m in catalog.GPU_HEALTH_METRICS}
REMAPPED = (catalog.GPU_REMAPPED_ROWS, catalog.GPU_REMAPPED_ROWS_PENDING, catalog.GPU_REMAPPED_ROWS_FAILED)


def collect(*gpus: FakeGpu, **fake) -> list:
    return NvmlCollector("node1", module=FakeNvml(list(gpus), **fake)).collect()


def values(samples, metric, **labels) -> list[float]:
    return [s.value for s in samples if s.metric is metric and all(s.labels.get(k) == v for k, v in labels.items())]


def health(samples, gpu: str = "0") -> dict[tuple[str, str], float]:
    """{(metric name, type label or ""): value} of one GPU's health series."""
    out = {}
    for s in samples:
        if s.metric.name in HEALTH_NAMES and s.labels[catalog.GPU] == gpu:
            key = (s.metric.name, s.labels.get(catalog.ECC_ERROR_TYPE, ""))
            assert key not in out, f"{key} exported twice"
            out[key] = s.value
    return out


def test_a_lowered_power_limit_exports_the_limit_and_the_default_in_watts():
    samples = collect(FakeGpu(power_limit_mw=500_000, power_default_limit_mw=700_000))
    assert values(samples, catalog.GPU_POWER_LIMIT, gpu="0") == [500.0]
    assert values(samples, catalog.GPU_POWER_LIMIT_DEFAULT, gpu="0") == [700.0]


def test_a_link_trained_down_exports_current_and_maximum_generation_and_width():
    samples = collect(FakeGpu(pcie_generation=4, pcie_width=8, pcie_max_generation=5, pcie_max_width=16))
    assert values(samples, catalog.GPU_PCIE_GENERATION) == [4.0]
    assert values(samples, catalog.GPU_PCIE_WIDTH) == [8.0]
    assert values(samples, catalog.GPU_PCIE_GENERATION_MAX) == [5.0]
    assert values(samples, catalog.GPU_PCIE_WIDTH_MAX) == [16.0]


def test_ecc_errors_are_the_volatile_counts_by_type():
    """The aggregate (lifetime) counters differ, so reading them instead would show."""
    gpu = FakeGpu(ecc_corrected_volatile=12, ecc_uncorrected_volatile=1, ecc_corrected_aggregate=900,
                  ecc_uncorrected_aggregate=40)
    samples = collect(gpu)
    assert values(samples, catalog.GPU_ECC_ERRORS, type="corrected") == [12.0]
    assert values(samples, catalog.GPU_ECC_ERRORS, type="uncorrected") == [1.0]
    assert {s.labels[catalog.ECC_ERROR_TYPE] for s in samples if s.metric is catalog.GPU_ECC_ERRORS} == set(
        catalog.ECC_ERROR_TYPES)
    assert values(samples, catalog.GPU_ECC_ENABLED) == [1.0]


def test_ecc_off_exports_the_mode_as_0_and_no_error_counts():
    """NVML answers NOT_SUPPORTED for the counters while ECC is off: unknown, not 0 errors."""
    samples = collect(FakeGpu(ecc_mode=pynvml.NVML_FEATURE_DISABLED))
    assert values(samples, catalog.GPU_ECC_ENABLED) == [0.0]
    assert values(samples, catalog.GPU_ECC_ERRORS) == []


def test_row_remapping_pending_and_failed():
    samples = collect(FakeGpu(remapped_corrected=2, remapped_uncorrected=1, remapped_pending=1, remapped_failed=0),
                      FakeGpu(uuid="GPU-b", remapped_failed=1))
    assert values(samples, catalog.GPU_REMAPPED_ROWS, gpu="0") == [3.0]
    assert values(samples, catalog.GPU_REMAPPED_ROWS_PENDING, gpu="0") == [1.0]
    assert values(samples, catalog.GPU_REMAPPED_ROWS_FAILED, gpu="0") == [0.0]
    assert values(samples, catalog.GPU_REMAPPED_ROWS_FAILED, gpu="1") == [1.0]
    assert values(samples, catalog.GPU_REMAPPED_ROWS, gpu="1") == [0.0]  # known to be none: 0


def test_a_gpu_without_row_remapping_exports_no_remapped_rows_series():
    """A V100 answers NOT_SUPPORTED for nvmlDeviceGetRemappedRows and retires pages instead."""
    volta = FakeGpu(name="Tesla V100-SXM2-32GB", unsupported={"nvmlDeviceGetRemappedRows"},
                    retired_pages_pending=pynvml.NVML_FEATURE_ENABLED)
    samples = collect(volta)
    for metric in REMAPPED:
        assert values(samples, metric) == [], metric.name
    assert values(samples, catalog.GPU_RETIRED_PAGES_PENDING) == [1.0]
    assert values(samples, catalog.GPU_POWER_LIMIT) == [700.0]  # the rest is still there


def test_an_ampere_or_later_gpu_without_page_retirement_exports_no_retired_pages_series():
    samples = collect(FakeGpu(unsupported={"nvmlDeviceGetRetiredPagesPendingStatus"}))
    assert values(samples, catalog.GPU_RETIRED_PAGES_PENDING) == []
    assert values(samples, catalog.GPU_REMAPPED_ROWS_PENDING) == [0.0]


def test_nvlink_links_up_and_a_gpu_without_nvlink():
    states = [pynvml.NVML_FEATURE_ENABLED] * H100_NVLINK_LINKS
    states[3] = states[7] = pynvml.NVML_FEATURE_DISABLED
    samples = collect(FakeGpu(nvlink_states=states), FakeGpu(uuid="GPU-pcie", nvlink_states=[]))
    assert values(samples, catalog.GPU_NVLINK_LINKS_ACTIVE, gpu="0") == [16.0]
    assert values(samples, catalog.GPU_NVLINK_LINKS_ACTIVE, gpu="1") == []  # no NVLink: absent, not 0 links up


def test_a_healthy_h100_exports_every_health_gauge_with_the_gpu_identity_labels():
    samples = collect(FakeGpu())
    assert health(samples) == {
        (catalog.GPU_POWER_LIMIT.name, ""): 700.0, (catalog.GPU_POWER_LIMIT_DEFAULT.name, ""): 700.0,
        (catalog.GPU_PCIE_GENERATION.name, ""): 5.0, (catalog.GPU_PCIE_WIDTH.name, ""): 16.0,
        (catalog.GPU_PCIE_GENERATION_MAX.name, ""): 5.0, (catalog.GPU_PCIE_WIDTH_MAX.name, ""): 16.0,
        (catalog.GPU_ECC_ENABLED.name, ""): 1.0,
        (catalog.GPU_ECC_ERRORS.name, "corrected"): 0.0, (catalog.GPU_ECC_ERRORS.name, "uncorrected"): 0.0,
        (catalog.GPU_REMAPPED_ROWS.name, ""): 0.0, (catalog.GPU_REMAPPED_ROWS_PENDING.name, ""): 0.0,
        (catalog.GPU_REMAPPED_ROWS_FAILED.name, ""): 0.0, (catalog.GPU_RETIRED_PAGES_PENDING.name, ""): 0.0,
        (catalog.GPU_NVLINK_LINKS_ACTIVE.name, ""): float(H100_NVLINK_LINKS),
    }
    power = next(s for s in samples if s.metric is catalog.GPU_POWER)
    for s in samples:
        if s.metric.name in HEALTH_NAMES:
            extra = {catalog.ECC_ERROR_TYPE} if s.metric is catalog.GPU_ECC_ERRORS else set()
            assert set(s.labels) == set(power.labels) | extra == set(s.metric.labels), s.metric.name
            assert {k: v for k, v in s.labels.items() if k not in extra} == power.labels


@pytest.mark.parametrize("failure", ["unsupported", "no_permission", "missing"])
def test_a_gpu_that_answers_no_health_query_exports_none_of_them_and_its_live_readings(failure):
    functions = {"nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetPowerManagementDefaultLimit",
                 "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth",
                 "nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkWidth", "nvmlDeviceGetEccMode",
                 "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetRemappedRows",
                 "nvmlDeviceGetRetiredPagesPendingStatus", "nvmlDeviceGetNvLinkState"}
    if failure == "unsupported":
        samples = collect(FakeGpu(unsupported=functions))
    elif failure == "no_permission":
        samples = collect(FakeGpu(errors=dict.fromkeys(functions, pynvml.NVML_ERROR_NO_PERMISSION)))
    else:  # an older nvidia-ml-py that lacks the functions
        samples = collect(FakeGpu(), missing=functions)
    assert health(samples) == {}
    assert values(samples, catalog.GPU_POWER) == [70.0] and values(samples, catalog.GPU_TEMPERATURE) == [35.0]


def test_each_gpu_carries_its_own_health():
    samples = collect(FakeGpu(power_limit_mw=450_000, pcie_width=16),
                      FakeGpu(uuid="GPU-b", bus_id="00000000:2A:00.0", power_limit_mw=700_000, pcie_width=4))
    assert values(samples, catalog.GPU_POWER_LIMIT, gpu="0", UUID="GPU-8b2c4a1e-0000-1111-2222-333344445555") == [
        450.0]
    assert values(samples, catalog.GPU_POWER_LIMIT, gpu="1", UUID="GPU-b", pci_bus_id="00000000:2A:00.0") == [700.0]
    assert values(samples, catalog.GPU_PCIE_WIDTH, gpu="1") == [4.0]


def test_the_process_count_comes_from_the_same_reading():
    samples = collect(FakeGpu(compute_pids=[11, 12], graphics_pids=[12, 13]))
    assert values(samples, catalog.GPU_PROCESSES) == [3.0]  # distinct PIDs of both lists


def test_collect_asks_nvml_nothing_beyond_one_sample_and_one_conditions_per_gpu():
    """The cost of a collect: per GPU, the live reading's queries and the conditions' (NVLink asked link
    by link), nothing more; the process lists are not asked twice."""
    calls: list[str] = []
    fake = FakeNvml([FakeGpu(), FakeGpu(uuid="GPU-b")], on_call=calls.append)
    nvml = NvmlCollector("node1", module=fake)
    calls.clear()
    nvml.conditions(0)  # the first asks every NVLink index (36 in pynvml) to find the GPU's links
    assert calls.count("nvmlDeviceGetNvLinkState") == 36
    nvml.conditions(1)
    calls.clear()
    nvml.sample(0)
    nvml.conditions(0)
    per_gpu = sorted(calls)
    assert per_gpu.count("nvmlDeviceGetNvLinkState") == 18  # then only the links it has
    calls.clear()
    nvml.collect()
    assert sorted(calls) == sorted(per_gpu * 2)


def test_every_health_gauge_exports_a_gpu_snapshot_condition():
    assert {metric.name for metric, _, _ in HEALTH_GAUGES} == HEALTH_NAMES
    for metric, name, extra in HEALTH_GAUGES:
        assert name in SNAPSHOT_GPU_CONDITIONS and BY_NAME[name].scope == "gpu", name
        assert metric.kind == "gauge" and not metric.name.endswith("_total"), metric.name
        assert set(metric.labels) == set(catalog.GPU_POWER.labels) | {label for label, _ in extra}, metric.name
        assert metric in catalog.ALL_METRICS
