"""The snapshot readers of the run conditions: NVML against the fake, the host against this machine
and against a fake /sys and /proc tree."""

from __future__ import annotations

import os
from pathlib import Path

import pynvml
import pytest

from sixdim.collectors.host import host_conditions
from sixdim.collectors.nvml import SNAPSHOT_GPU_CONDITIONS, NvmlCollector
from sixdim.core.conditions import CONDITIONS, UNAVAILABLE
from tests.fakenvml import FakeGpu, FakeNvml

GPU_SNAPSHOT = {c.name for c in CONDITIONS if c.scope == "gpu" and c.span == "snapshot"}
HOST_SNAPSHOT = {c.name for c in CONDITIONS if c.scope == "host" and c.span == "snapshot"}

HEALTHY_H100 = {
    "power_limit_watts": 700.0, "power_limit_default_watts": 700.0,
    "applications_sm_clock_hertz": 1.98e9, "applications_memory_clock_hertz": 2.619e9,
    "max_sm_clock_hertz": 1.98e9, "max_memory_clock_hertz": 2.619e9,
    "ecc_enabled": 1, "mig_enabled": 0, "persistence_mode": 1, "compute_mode": 0,
    "pcie_generation": 5, "pcie_width": 16, "pcie_max_generation": 5, "pcie_max_width": 16,
    "ecc_corrected_volatile": 0, "ecc_uncorrected_volatile": 0, "retired_pages_pending": 0,
    "remapped_rows_pending": 0, "remapped_rows_failed": 0, "remapped_rows": 0,
    "nvlink_active_links": 18, "gpu_other_processes": 0, "memory_temperature_celsius": 45.0,
}
"""A healthy H100 SXM in base units (watts, hertz, °C)."""

QUERIES = {
    "nvmlDeviceGetEnforcedPowerLimit": {"power_limit_watts"},
    "nvmlDeviceGetPowerManagementDefaultLimit": {"power_limit_default_watts"},
    "nvmlDeviceGetApplicationsClock": {"applications_sm_clock_hertz", "applications_memory_clock_hertz"},
    "nvmlDeviceGetMaxClockInfo": {"max_sm_clock_hertz", "max_memory_clock_hertz"},
    "nvmlDeviceGetEccMode": {"ecc_enabled"},
    "nvmlDeviceGetMigMode": {"mig_enabled"},
    "nvmlDeviceGetPersistenceMode": {"persistence_mode"},
    "nvmlDeviceGetComputeMode": {"compute_mode"},
    "nvmlDeviceGetCurrPcieLinkGeneration": {"pcie_generation"},
    "nvmlDeviceGetCurrPcieLinkWidth": {"pcie_width"},
    "nvmlDeviceGetMaxPcieLinkGeneration": {"pcie_max_generation"},
    "nvmlDeviceGetMaxPcieLinkWidth": {"pcie_max_width"},
    "nvmlDeviceGetTotalEccErrors": {"ecc_corrected_volatile", "ecc_uncorrected_volatile"},
    "nvmlDeviceGetRetiredPagesPendingStatus": {"retired_pages_pending"},
    "nvmlDeviceGetRemappedRows": {"remapped_rows_pending", "remapped_rows_failed", "remapped_rows"},
    "nvmlDeviceGetNvLinkState": {"nvlink_active_links"},
    "nvmlDeviceGetFieldValues": {"memory_temperature_celsius"},
    "nvmlDeviceGetComputeRunningProcesses": {"gpu_other_processes"},
    "nvmlDeviceGetGraphicsRunningProcesses": {"gpu_other_processes"},
}
"""Each NVML query and the conditions it answers."""


def read(gpu: FakeGpu | None = None, own_pids=(), **fake) -> dict:
    gpu = gpu if gpu is not None else FakeGpu(mig_capable=True)
    return NvmlCollector("node1", module=FakeNvml([gpu], **fake)).conditions(0, own_pids=own_pids)


def values(conditions: dict) -> dict:
    return {k: v for k, v in conditions.items() if k != UNAVAILABLE}


# ---------------------------------------------------------------------------- NVML


def test_the_reader_covers_every_gpu_snapshot_condition_and_the_queries_cover_them_all():
    assert set(SNAPSHOT_GPU_CONDITIONS) == GPU_SNAPSHOT
    assert set().union(*QUERIES.values()) == GPU_SNAPSHOT
    assert set(HEALTHY_H100) == GPU_SNAPSHOT


def test_a_healthy_h100_reads_every_snapshot_condition_in_base_units():
    conditions = read()
    assert conditions[UNAVAILABLE] == {}
    assert values(conditions) == HEALTHY_H100
    assert all(type(v) is float for k, v in conditions.items() if k.endswith(("_watts", "_hertz", "_celsius")))
    assert all(type(v) is int for k, v in conditions.items()
               if not k.endswith(("_watts", "_hertz", "_celsius", UNAVAILABLE)))


@pytest.mark.parametrize("change, expected", [
    ({"power_limit_mw": 500_000}, {"power_limit_watts": 500.0, "power_limit_default_watts": 700.0}),
    ({"power_default_limit_mw": 350_000, "power_limit_mw": 300_500},
     {"power_limit_watts": 300.5, "power_limit_default_watts": 350.0}),
    ({"applications_sm_mhz": 1410, "applications_mem_mhz": 1593},
     {"applications_sm_clock_hertz": 1.41e9, "applications_memory_clock_hertz": 1.593e9,
      "max_sm_clock_hertz": 1.98e9, "max_memory_clock_hertz": 2.619e9}),
    ({"max_sm_mhz": 1755, "max_mem_mhz": 1593}, {"max_sm_clock_hertz": 1.755e9, "max_memory_clock_hertz": 1.593e9}),
    ({"pcie_generation": 4, "pcie_width": 8},
     {"pcie_generation": 4, "pcie_width": 8, "pcie_max_generation": 5, "pcie_max_width": 16}),
    ({"pcie_max_generation": 4, "pcie_max_width": 8, "pcie_generation": 1, "pcie_width": 8},
     {"pcie_generation": 1, "pcie_width": 8, "pcie_max_generation": 4, "pcie_max_width": 8}),
    ({"remapped_pending": 1}, {"remapped_rows_pending": 1, "remapped_rows_failed": 0, "remapped_rows": 0}),
    ({"remapped_failed": 1}, {"remapped_rows_failed": 1, "remapped_rows_pending": 0}),
    ({"remapped_corrected": 3, "remapped_uncorrected": 2, "remapped_pending": 1},
     {"remapped_rows": 5, "remapped_rows_pending": 1}),
    ({"ecc_uncorrected_volatile": 2, "ecc_uncorrected_aggregate": 40},  # volatile, not over the GPU's life
     {"ecc_uncorrected_volatile": 2, "ecc_corrected_volatile": 0}),
    ({"ecc_corrected_volatile": 7, "ecc_corrected_aggregate": 1234},
     {"ecc_corrected_volatile": 7, "ecc_uncorrected_volatile": 0}),
    ({"ecc_pending": pynvml.NVML_FEATURE_DISABLED}, {"ecc_enabled": 1}),  # current, not pending
    ({"mig_mode": pynvml.NVML_DEVICE_MIG_ENABLE}, {"mig_enabled": 1}),
    ({"mig_pending": pynvml.NVML_DEVICE_MIG_ENABLE}, {"mig_enabled": 0}),  # on only after a reset
    ({"persistence_mode": pynvml.NVML_FEATURE_DISABLED}, {"persistence_mode": 0}),
    ({"compute_mode": pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS}, {"compute_mode": 3}),
    ({"compute_mode": pynvml.NVML_COMPUTEMODE_PROHIBITED}, {"compute_mode": 2}),
    ({"retired_pages_pending": pynvml.NVML_FEATURE_ENABLED}, {"retired_pages_pending": 1}),
    ({"nvlink_states": [1] * 16 + [0] * 2}, {"nvlink_active_links": 16}),
    ({"nvlink_states": [0] * 18}, {"nvlink_active_links": 0}),  # links there, all down: 0, not unavailable
    ({"nvlink_states": [1] * 12}, {"nvlink_active_links": 12}),  # an A100's 12 links
    ({"compute_pids": [4242]}, {"gpu_other_processes": 1}),
    ({"compute_pids": [4242, 77], "graphics_pids": [77, 9]}, {"gpu_other_processes": 3}),  # 77 is both kinds
])
def test_each_changed_condition_shows(change, expected):
    conditions = read(FakeGpu(mig_capable=True, **change))
    assert conditions[UNAVAILABLE] == {}
    assert {k: conditions[k] for k in expected} == expected
    unchanged = {k: v for k, v in HEALTHY_H100.items() if k not in expected}
    assert {k: conditions[k] for k in unchanged} == unchanged, "a change showed in another condition"


def test_only_other_processes_count():
    own = [os.getpid(), 5001]
    gpu = FakeGpu(mig_capable=True, compute_pids=[os.getpid(), 4242], graphics_pids=[5001])
    assert read(gpu, own_pids=own)["gpu_other_processes"] == 1
    assert read(gpu)["gpu_other_processes"] == 3
    assert read(FakeGpu(compute_pids=[os.getpid()]), own_pids={os.getpid()})["gpu_other_processes"] == 0


def test_ecc_off_leaves_the_error_counts_unavailable_not_zero():
    conditions = read(FakeGpu(mig_capable=True, ecc_mode=pynvml.NVML_FEATURE_DISABLED,
                              ecc_pending=pynvml.NVML_FEATURE_ENABLED, ecc_uncorrected_volatile=5))
    assert conditions["ecc_enabled"] == 0
    assert "ecc_corrected_volatile" not in conditions and "ecc_uncorrected_volatile" not in conditions
    assert conditions[UNAVAILABLE] == {"ecc_corrected_volatile": "nvmlDeviceGetTotalEccErrors: Not Supported",
                                       "ecc_uncorrected_volatile": "nvmlDeviceGetTotalEccErrors: Not Supported"}


def test_a_gpu_without_mig_has_mig_enabled_unavailable():
    conditions = read(FakeGpu())  # mig_capable=False: nvmlDeviceGetMigMode answers NOT_SUPPORTED
    assert "mig_enabled" not in conditions
    assert conditions[UNAVAILABLE] == {"mig_enabled": "nvmlDeviceGetMigMode: Not Supported"}


@pytest.mark.parametrize("code, text", [(pynvml.NVML_ERROR_NOT_SUPPORTED, "Not Supported"),
                                        (pynvml.NVML_ERROR_NO_PERMISSION, "Insufficient Permissions"),
                                        (pynvml.NVML_ERROR_UNKNOWN, "Unknown Error"),
                                        (pynvml.NVML_ERROR_GPU_IS_LOST, "GPU is lost")])
@pytest.mark.parametrize("function", sorted(QUERIES))
def test_a_failing_query_loses_its_conditions_only_with_nvmls_reason(function, code, text):
    gpu = FakeGpu(mig_capable=True, errors={function: code})
    if code == pynvml.NVML_ERROR_NOT_SUPPORTED:  # the `unsupported` mechanism too
        gpu = FakeGpu(mig_capable=True, unsupported={function})
    conditions = read(gpu)
    lost = QUERIES[function]
    assert set(conditions[UNAVAILABLE]) == lost
    for name in lost:
        assert name not in conditions
        reason = conditions[UNAVAILABLE][name]
        assert function in reason and text in reason, reason
    assert values(conditions) == {k: v for k, v in HEALTHY_H100.items() if k not in lost}


def test_every_query_failing_never_raises_and_every_condition_says_why():
    gpu = FakeGpu(mig_capable=True, errors=dict.fromkeys(QUERIES, pynvml.NVML_ERROR_NO_PERMISSION))
    conditions = read(gpu)
    assert values(conditions) == {}
    assert set(conditions[UNAVAILABLE]) == GPU_SNAPSHOT
    assert all("Insufficient Permissions" in r for r in conditions[UNAVAILABLE].values())


@pytest.mark.parametrize("missing, lost", [
    ({"nvmlDeviceGetRemappedRows"}, {"remapped_rows_pending", "remapped_rows_failed", "remapped_rows"}),
    ({"nvmlDeviceGetNvLinkState"}, {"nvlink_active_links"}),
    ({"nvmlDeviceGetMigMode", "nvmlDeviceGetEnforcedPowerLimit"}, {"mig_enabled", "power_limit_watts"}),
])
def test_an_older_binding_without_a_function(missing, lost):
    fake = FakeNvml([FakeGpu(mig_capable=True)], missing=missing)
    assert not any(hasattr(fake, name) for name in missing)
    assert hasattr(FakeNvml(), "nvmlDeviceGetRemappedRows")  # other fakes keep every function
    conditions = NvmlCollector("node1", module=fake).conditions(0)
    assert set(conditions[UNAVAILABLE]) == lost
    for name in lost:
        assert "not in this nvidia-ml-py binding" in conditions[UNAVAILABLE][name]
        assert any(function in conditions[UNAVAILABLE][name] for function in missing)
    assert values(conditions) == {k: v for k, v in HEALTHY_H100.items() if k not in lost}


def test_a_gpu_without_nvlink_has_the_link_count_unavailable():
    for gpu in (FakeGpu(nvlink_states=[]),  # an H100 PCIe: every link index answers INVALID_ARGUMENT
                FakeGpu(unsupported={"nvmlDeviceGetNvLinkState"})):  # or NOT_SUPPORTED
        conditions = read(gpu)
        assert "nvlink_active_links" not in conditions
        reason = conditions[UNAVAILABLE]["nvlink_active_links"]
        assert "nvmlDeviceGetNvLinkState" in reason and "no NVLink" in reason


def test_a_link_failing_otherwise_leaves_the_count_unknown_not_short():
    conditions = read(FakeGpu(errors={"nvmlDeviceGetNvLinkState": pynvml.NVML_ERROR_UNKNOWN}))
    assert "nvlink_active_links" not in conditions
    assert conditions[UNAVAILABLE]["nvlink_active_links"] == "nvmlDeviceGetNvLinkState(link 0): Unknown Error"


def test_an_answer_of_another_shape_loses_that_condition_only():
    class Odd(FakeNvml):
        def nvmlDeviceGetEccMode(self, handle):  # an int instead of [current, pending]
            return 1

    conditions = NvmlCollector("node1", module=Odd([FakeGpu(mig_capable=True)])).conditions(0)
    assert "ecc_enabled" not in conditions
    assert conditions[UNAVAILABLE]["ecc_enabled"].startswith("nvmlDeviceGetEccMode answered 1: TypeError")
    assert values(conditions) == {k: v for k, v in HEALTHY_H100.items() if k != "ecc_enabled"}


def test_unavailable_nvml_and_an_unknown_index_give_reasons_not_an_error():
    down = NvmlCollector("node1", module=FakeNvml(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    conditions = down.conditions(0)
    assert set(conditions) == {UNAVAILABLE} and set(conditions[UNAVAILABLE]) == GPU_SNAPSHOT
    assert all("Driver Not Loaded" in r for r in conditions[UNAVAILABLE].values())
    conditions = NvmlCollector("node1", module=FakeNvml([FakeGpu()])).conditions(3)
    assert set(conditions) == {UNAVAILABLE}
    assert conditions[UNAVAILABLE]["power_limit_watts"] == "no NVIDIA GPU with index 3 (NVML sees 1)"


def test_each_gpu_is_read_through_its_own_handle():
    fake = FakeNvml([FakeGpu(), FakeGpu(uuid="GPU-b", power_limit_mw=450_000, pcie_width=4)])
    nvml = NvmlCollector("node1", module=fake)
    assert (nvml.conditions(0)["power_limit_watts"], nvml.conditions(0)["pcie_width"]) == (700.0, 16)
    assert (nvml.conditions(1)["power_limit_watts"], nvml.conditions(1)["pcie_width"]) == (450.0, 4)


def test_queries_are_nvmls_reads_made_under_the_collectors_lock():
    calls: list[tuple[str, bool]] = []
    made: list[NvmlCollector] = []
    fake = FakeNvml([FakeGpu(mig_capable=True)],
                    on_call=lambda name: calls.append((name, bool(made) and made[0]._lock.locked())))
    made.append(NvmlCollector("node1", module=fake))
    calls.clear()  # the identity queries at start
    made[0].conditions(0)
    assert {name for name, _ in calls} == set(QUERIES)
    assert all(locked for _, locked in calls)
    assert not any("Set" in name for name, _ in calls)
    # 18 queries and the memory temperature's field, one per NVLink link index the binding knows (the
    # first time: the links found are remembered), two process lists
    assert len(calls) == 19 + pynvml.NVML_NVLINK_MAX_LINKS + 2


# ---------------------------------------------------------------------------- host


def test_host_conditions_on_this_machine_are_plausible():
    conditions = host_conditions()
    unavailable = conditions[UNAVAILABLE]
    assert set(values(conditions)) | set(unavailable) == HOST_SNAPSHOT
    assert not set(values(conditions)) & set(unavailable)
    assert all(isinstance(r, str) and r for r in unavailable.values())
    assert conditions["usable_cpus"] >= 1 and conditions["usable_cpus"] == len(os.sched_getaffinity(0))
    assert conditions["load_per_cpu"] >= 0
    if "cpu_governor" in conditions:
        assert isinstance(conditions["cpu_governor"], str) and conditions["cpu_governor"]
    if "cpu_frequency_hertz" in conditions:
        assert 1e8 <= conditions["cpu_frequency_hertz"] <= 1e10
    if "cpu_quota_cpus" in conditions:
        assert 0 < conditions["cpu_quota_cpus"] <= 4096
    else:
        assert unavailable["cpu_quota_cpus"]


def tree(tmp_path: Path, *, cgroup: str | None = "0::/", cpu_max: dict[str, str] | None = None,
         v2: bool = True, governor: str | None = "performance", freqs_khz: tuple[int, ...] | None = (2_000_000,),
         loadavg: str | None = "1.00 0.50 0.25 2/300 4242\n") -> str:
    """A fake root holding the files host_conditions reads; None leaves a file out."""
    def write(relative: str, text: str) -> None:
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    (tmp_path / "proc").mkdir(exist_ok=True)
    if governor is not None:
        write("sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", governor + "\n")
    for cpu, khz in enumerate(freqs_khz or ()):
        write(f"sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq", f"{khz}\n")
    if loadavg is not None:
        write("proc/loadavg", loadavg)
    if cgroup is not None:
        write("proc/self/cgroup", cgroup + "\n")
    if v2:
        write("sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n")
    for where, text in (cpu_max or {}).items():
        write(f"sys/fs/cgroup/{where}/cpu.max".replace("//", "/"), text + "\n")
    return str(tmp_path)


def test_host_conditions_from_a_fake_tree(tmp_path):
    root = tree(tmp_path, cgroup="0::/kubepods/pod1", cpu_max={"kubepods/pod1": "150000 100000"},
                freqs_khz=(2_000_000, 3_000_000), loadavg="6.00 1.00 0.50 3/400 99\n")
    conditions = host_conditions(root)
    cpus = len(os.sched_getaffinity(0))
    assert conditions == {"cpu_governor": "performance", "cpu_frequency_hertz": 2.5e9, "load_per_cpu": 6.0 / cpus,
                          "cpu_quota_cpus": 1.5, "usable_cpus": cpus,
                          UNAVAILABLE: {}}


def test_no_cpu_limit_is_absent_with_its_reason(tmp_path):
    conditions = host_conditions(tree(tmp_path, cgroup="0::/system.slice/sixdim.service",
                                      cpu_max={"system.slice": "max 100000",
                                               "system.slice/sixdim.service": "max 100000"}))
    assert "cpu_quota_cpus" not in conditions
    assert conditions[UNAVAILABLE]["cpu_quota_cpus"].startswith("no CPU limit")
    assert "system.slice/sixdim.service" in conditions[UNAVAILABLE]["cpu_quota_cpus"]


@pytest.mark.parametrize("limits, expected", [
    ({"a": "100000 100000", "a/b": "400000 100000"}, 1.0),  # the parent is tighter
    ({"a": "800000 100000", "a/b": "25000 100000"}, 0.25),  # the child is
    ({"": "200000 100000", "a": "max 100000", "a/b": "max 100000"}, 2.0),  # the container's own root
    ({"a": "50000 50000", "a/b": "max 100000"}, 1.0),  # another period
])
def test_the_tightest_limit_of_a_nested_cgroup_counts(tmp_path, limits, expected):
    conditions = host_conditions(tree(tmp_path, cgroup="0::/a/b", cpu_max=limits))
    assert conditions["cpu_quota_cpus"] == expected


def test_a_container_sees_its_own_cgroup_at_the_root(tmp_path):
    """Without a cgroup namespace, /proc/self/cgroup names the host's path, which is not under the
    container's /sys/fs/cgroup: the levels that are there still count."""
    conditions = host_conditions(tree(tmp_path, cgroup="0::/../../kubepods/pod9/abc", cpu_max={"": "300000 100000"}))
    assert conditions["cpu_quota_cpus"] == 3.0


def test_cgroup_v1_quota(tmp_path):
    root = tree(tmp_path, cgroup="4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/", v2=False)
    base = tmp_path / "sys/fs/cgroup/cpu,cpuacct"
    (base / "docker/abc").mkdir(parents=True)
    (base / "cpu.cfs_quota_us").write_text("-1\n")
    (base / "cpu.cfs_period_us").write_text("100000\n")
    (base / "docker/abc/cpu.cfs_quota_us").write_text("50000\n")
    (base / "docker/abc/cpu.cfs_period_us").write_text("100000\n")
    assert host_conditions(root)["cpu_quota_cpus"] == 0.5
    (base / "docker/abc/cpu.cfs_quota_us").write_text("-1\n")
    conditions = host_conditions(root)
    assert "cpu_quota_cpus" not in conditions
    assert conditions[UNAVAILABLE]["cpu_quota_cpus"].startswith("no CPU limit (cpu.cfs_quota_us")


def test_a_malformed_cpu_max_is_a_reason(tmp_path):
    conditions = host_conditions(tree(tmp_path, cgroup="0::/a", cpu_max={"a": "garbage"}))
    assert "cpu_quota_cpus" not in conditions
    assert "cpu.max" in conditions[UNAVAILABLE]["cpu_quota_cpus"]


def test_missing_files_are_reasons_naming_the_file(tmp_path):
    root = tree(tmp_path, cgroup=None, v2=False, governor=None, freqs_khz=None, loadavg=None)
    conditions = host_conditions(root)
    assert values(conditions) == {"usable_cpus": len(os.sched_getaffinity(0))}
    unavailable = conditions[UNAVAILABLE]
    assert set(unavailable) == HOST_SNAPSHOT - {"usable_cpus"}
    for name, file in (("cpu_governor", "cpu0/cpufreq/scaling_governor"), ("cpu_frequency_hertz", "scaling_cur_freq"),
                       ("load_per_cpu", "proc/loadavg"),
                       ("cpu_quota_cpus", "proc/self/cgroup")):
        assert file in unavailable[name], (name, unavailable[name])
        assert str(tmp_path) in unavailable[name]
    assert "No such file or directory" in unavailable["cpu_governor"]


def test_the_memory_temperature_comes_from_its_field_and_says_when_the_gpu_has_none():
    """NVML's field values answer per field: the call succeeds and a GPU without an HBM sensor answers
    NOT_SUPPORTED in the field itself, which must read as unavailable, never as 0 °C."""
    from sixdim.collectors.nvml import NvmlCollector
    from tests.fakenvml import FakeGpu, FakeNvml

    nvml = NvmlCollector("h", module=FakeNvml([FakeGpu(memory_temperature=52), FakeGpu(uuid="GPU-b",
                                                                                        memory_temperature=None)]))
    assert nvml.conditions(0)["memory_temperature_celsius"] == 52.0
    without = nvml.conditions(1)
    assert "memory_temperature_celsius" not in without
    assert without["unavailable"]["memory_temperature_celsius"] == (
        "nvmlDeviceGetFieldValues(NVML_FI_DEV_MEMORY_TEMP): Not Supported")
