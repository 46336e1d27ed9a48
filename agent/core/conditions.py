"""The conditions recorded with every run, and the causes a regression is put down to.

One definition of each, used by the collectors that read them (``collectors/nvml.py``,
``collectors/host.py``), the executor that records them (``RunRecord.conditions``), the diagnosis
(``agent/verdicts/causes.py``), the exporter (``sixdim_regression_cause``), the report and the docs.

A run's ``conditions`` is a flat dict of these names to numbers (or, for the few marked ``text``,
strings), in base units, plus ``"unavailable"``: condition name -> why it could not be read (the GPU
does not support the query, no permission, not a Linux host, no cgroup limit).  A condition that was
not read is absent, never 0.  Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

UNAVAILABLE = "unavailable"
"""The key of a run's conditions that maps each condition that could not be read to the reason; the key
``gpu`` stands for every GPU condition of a run on the CPU ("the run is on the CPU")."""


@dataclass(frozen=True)
class Condition:
    name: str
    unit: str
    """Base unit: ``watts``, ``hertz``, ``celsius``, ``ratio`` (0-1), ``count``, ``flag`` (0/1), ``code``
    (an enumeration's value), ``cpus``, ``text``."""
    scope: str
    """``gpu`` (NVML), ``host`` (the kernel and psutil)."""
    span: str
    """``snapshot``: read once, as the case's worker starts; ``window``: summarised over the case's
    timed span from the telemetry samples; ``power``: the same over the case's power phase (the span its
    ``power_watts`` and work per joule come from), where it has one."""
    setting: bool = False
    """Changes performance by design (an operator set it): a change starts a new segment of every
    series of the device, like a version change, and is named like one."""
    help: str = ""


CONDITIONS: tuple[Condition, ...] = (
    # --- GPU settings (snapshot) ---
    Condition("power_limit_watts", "watts", "gpu", "snapshot", setting=True,
              help="The enforced power limit (nvmlDeviceGetEnforcedPowerLimit)."),
    Condition("power_limit_default_watts", "watts", "gpu", "snapshot",
              help="The default power limit (nvmlDeviceGetPowerManagementDefaultLimit)."),
    Condition("applications_sm_clock_hertz", "hertz", "gpu", "snapshot", setting=True,
              help="The applications SM clock (nvmlDeviceGetApplicationsClock): set with nvidia-smi -ac."),
    Condition("applications_memory_clock_hertz", "hertz", "gpu", "snapshot", setting=True,
              help="The applications memory clock (nvmlDeviceGetApplicationsClock)."),
    Condition("max_sm_clock_hertz", "hertz", "gpu", "snapshot",
              help="The GPU's maximum SM clock (nvmlDeviceGetMaxClockInfo)."),
    Condition("max_memory_clock_hertz", "hertz", "gpu", "snapshot",
              help="The GPU's maximum memory clock (nvmlDeviceGetMaxClockInfo)."),
    Condition("ecc_enabled", "flag", "gpu", "snapshot", setting=True,
              help="ECC mode, current (nvmlDeviceGetEccMode)."),
    Condition("mig_enabled", "flag", "gpu", "snapshot", setting=True,
              help="MIG mode, current (nvmlDeviceGetMigMode)."),
    Condition("persistence_mode", "flag", "gpu", "snapshot", help="Persistence mode (nvmlDeviceGetPersistenceMode)."),
    Condition("compute_mode", "code", "gpu", "snapshot",
              help="Compute mode (nvmlDeviceGetComputeMode): 0 default, 2 prohibited, 3 exclusive process."),
    # --- GPU health (snapshot) ---
    Condition("pcie_generation", "count", "gpu", "snapshot",
              help="PCIe link generation now (nvmlDeviceGetCurrPcieLinkGeneration); idle links may train down."),
    Condition("pcie_width", "count", "gpu", "snapshot", help="PCIe link width now (nvmlDeviceGetCurrPcieLinkWidth)."),
    Condition("pcie_max_generation", "count", "gpu", "snapshot",
              help="The link's maximum generation (nvmlDeviceGetMaxPcieLinkGeneration)."),
    Condition("pcie_max_width", "count", "gpu", "snapshot",
              help="The link's maximum width (nvmlDeviceGetMaxPcieLinkWidth)."),
    Condition("ecc_corrected_volatile", "count", "gpu", "snapshot",
              help="Corrected ECC errors since the driver loaded (nvmlDeviceGetTotalEccErrors, volatile)."),
    Condition("ecc_uncorrected_volatile", "count", "gpu", "snapshot",
              help="Uncorrected ECC errors since the driver loaded (nvmlDeviceGetTotalEccErrors, volatile)."),
    Condition("retired_pages_pending", "flag", "gpu", "snapshot",
              help="Pages waiting to be retired at the next reset (nvmlDeviceGetRetiredPagesPendingStatus; "
                   "before Ampere)."),
    Condition("remapped_rows_pending", "flag", "gpu", "snapshot",
              help="Row remapping waiting for a reset (nvmlDeviceGetRemappedRows; Ampere and later)."),
    Condition("remapped_rows_failed", "flag", "gpu", "snapshot",
              help="A row remapping failed (nvmlDeviceGetRemappedRows): the GPU needs service."),
    Condition("remapped_rows", "count", "gpu", "snapshot",
              help="Rows remapped, corrected and uncorrected errors together (nvmlDeviceGetRemappedRows)."),
    Condition("nvlink_active_links", "count", "gpu", "snapshot",
              help="NVLink links up (nvmlDeviceGetNvLinkState over the GPU's links)."),
    Condition("memory_temperature_celsius", "celsius", "gpu", "snapshot",
              help="The memory (HBM) temperature as the worker starts (NVML field NVML_FI_DEV_MEMORY_TEMP, "
                   "where the GPU reports it)."),
    Condition("gpu_other_processes", "count", "gpu", "snapshot",
              help="Processes on the GPU other than this run's as its worker started (the idle guard "
                   "skips a busy GPU; with the guard off, they are recorded here)."),
    # --- GPU over the timed span (window) ---
    Condition("sm_clock_hertz", "hertz", "gpu", "window", help="The time-weighted mean SM clock."),
    Condition("temperature_celsius", "celsius", "gpu", "window", help="The time-weighted mean GPU temperature."),
    Condition("sw_power_cap_ratio", "ratio", "gpu", "window",
              help="Share of the span's samples with the software power cap clock event."),
    Condition("hw_slowdown_ratio", "ratio", "gpu", "window",
              help="Share of the span's samples with the hardware slowdown clock event."),
    Condition("hw_thermal_slowdown_ratio", "ratio", "gpu", "window",
              help="Share of the span's samples with the hardware thermal slowdown clock event."),
    Condition("sw_thermal_slowdown_ratio", "ratio", "gpu", "window",
              help="Share of the span's samples with the software thermal slowdown clock event."),
    Condition("hw_power_brake_slowdown_ratio", "ratio", "gpu", "window",
              help="Share of the span's samples with the power brake clock event."),
    Condition("sync_boost_ratio", "ratio", "gpu", "window",
              help="Share of the span's samples with the sync boost clock event."),
    Condition("applications_clocks_setting_ratio", "ratio", "gpu", "window",
              help="Share of the span's samples held by an applications-clocks or locked-clocks setting "
                   "(NVML has no query for locked clocks; this clock event is how they show)."),
    # --- GPU over the power phase (power) ---
    *(Condition(f"power_phase_{name}", unit, "gpu", "power",
                help=f"{what}, over the power phase (the back-to-back calls whose energy gives power_watts and "
                     f"the work per joule), where the power cap really engages.")
      for name, unit, what in (
          ("sm_clock_hertz", "hertz", "The time-weighted mean SM clock"),
          ("temperature_celsius", "celsius", "The time-weighted mean GPU temperature"),
          ("sw_power_cap_ratio", "ratio", "Share of samples with the software power cap clock event"),
          ("hw_slowdown_ratio", "ratio", "Share of samples with the hardware slowdown clock event"),
          ("hw_thermal_slowdown_ratio", "ratio", "Share of samples with the hardware thermal slowdown clock event"),
          ("sw_thermal_slowdown_ratio", "ratio", "Share of samples with the software thermal slowdown clock event"),
          ("hw_power_brake_slowdown_ratio", "ratio", "Share of samples with the power brake clock event"),
          ("sync_boost_ratio", "ratio", "Share of samples with the sync boost clock event"),
          ("applications_clocks_setting_ratio", "ratio", "Share of samples held by a clock setting"),
      )),
    # --- host ---
    Condition("cpu_governor", "text", "host", "snapshot",
              help="The CPU frequency governor (/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor)."),
    Condition("cpu_frequency_hertz", "hertz", "host", "snapshot", help="The mean current CPU frequency (psutil)."),
    Condition("load_per_cpu", "ratio", "host", "snapshot",
              help="The 1-minute load average over the CPUs this process may use."),
    Condition("cpu_quota_cpus", "cpus", "host", "snapshot",
              help="The cgroup's CPU quota in CPUs (cpu.max quota / period); absent where there is no limit."),
    Condition("usable_cpus", "cpus", "host", "snapshot", help="CPUs this process may run on (its affinity)."),
    Condition("other_cpu_ratio", "ratio", "host", "window",
              help="Share of the host's CPU time over the span taken by processes other than the run's."),
    # --- the kernel's pressure stall information over the span (window) ---
    *(Condition(f"{resource}_pressure_ratio", "ratio", "host", "window",
                help=f"Share of the span during which some task on the host stalled waiting for {what} "
                     f"(/proc/pressure/{resource}, the 'some' line's total= microseconds read at the span's start "
                     f"and end); unavailable where the kernel has no PSI (before 4.20, or booted with psi=0).")
      for resource, what in (("cpu", "a CPU"), ("memory", "memory"), ("io", "IO"))),
    *(Condition(f"cgroup_{resource}_pressure_ratio", "ratio", "host", "window",
                help=f"Share of the span during which some task of the worker's own cgroup v2 (the run's "
                     f"sixdim-run-* cgroup, or the agent's) stalled waiting for {what} (its {resource}.pressure, "
                     f"'some' total=); unavailable where the worker runs in no cgroup v2 or in its root (then "
                     f"the host's figure is its own).")
      for resource, what in (("cpu", "a CPU"), ("memory", "memory"), ("io", "IO"))),
)

BY_NAME: dict[str, Condition] = {c.name: c for c in CONDITIONS}
SETTINGS: tuple[str, ...] = tuple(c.name for c in CONDITIONS if c.setting)
"""Conditions whose change starts a new segment, like a version change."""

SETTING_KEYS: tuple[str, ...] = ("power_limit", "clocks", "ecc", "mig")
"""The ``RunRecord.environment`` entries the settings are written under (:func:`setting_versions`), so a
change of one starts a new segment and is judged and named like a version change:
"power_limit 700 W → 500 W"."""


VERSION_KEYS: tuple[str, ...] = ("driver", "cuda_runtime", "cudnn", "nccl", "torch", "vbios", "onnxruntime",
                                  *SETTING_KEYS)
"""RunRecord.environment entries whose change is a known break point (a new segment): the software versions,
and the GPU settings that change performance by design (power limit, applications clocks, ECC and MIG
mode: :data:`SETTING_KEYS`), judged and named like a version change (sixdim.verdicts.detector), and
whose change starts the ``on_change`` suites (sixdim.run.changes)."""

WORKLOAD_VERSION_KEYS: dict[str, frozenset[str]] = {"onnxruntime": frozenset({"onnx"})}
"""Version keys that are a break point only for some workloads' series.  Every torch worker records
ONNX Runtime's version (one worker serves a whole suite), but only the ``onnx`` workload runs on it:
an ONNX Runtime upgrade must not start a new segment, and reset the baseline, of every GEMM."""


def setting_versions(conditions: dict[str, object]) -> dict[str, str]:
    """The settings among a run's conditions as version-like texts (the ones read only)."""
    out: dict[str, str] = {}
    limit = conditions.get("power_limit_watts")
    if isinstance(limit, (int, float)):
        out["power_limit"] = f"{limit:g} W"
    sm, memory = conditions.get("applications_sm_clock_hertz"), conditions.get("applications_memory_clock_hertz")
    if isinstance(sm, (int, float)) and isinstance(memory, (int, float)):
        out["clocks"] = f"{sm / 1e6:g}/{memory / 1e6:g} MHz"
    for key, name in (("ecc", "ecc_enabled"), ("mig", "mig_enabled")):
        flag = conditions.get(name)
        if isinstance(flag, (int, float)):
            out[key] = "on" if flag else "off"
    return out


@dataclass(frozen=True)
class Cause:
    name: str
    """The ``cause`` label value of ``sixdim_regression_cause``: a small fixed set."""
    title: str
    tier: int
    """Ranking among causes that are all named: settings an operator changed (1) explain a change
    before faults (2), throttling (3), contention (4) and software versions (5)."""
    action: str
    """What the operator should do (docs/CAUSES.md; the alert's description)."""


CAUSES: tuple[Cause, ...] = (
    Cause("power_limit", "power limit lowered", 1,
          "Someone or something (a power-capping service, nvidia-smi -pl) lowered the power limit: restore it or "
          "accept the new level."),
    Cause("clock_setting", "clocks locked or applications clocks set", 1,
          "Applications or locked clocks hold the GPU below its boost clock: nvidia-smi -rac / -rgc resets them."),
    Cause("ecc_mode", "ECC mode changed", 1, "ECC was turned on or off (takes effect at reset): expected, or revert."),
    Cause("mig_mode", "MIG mode changed", 1, "The GPU was partitioned or unpartitioned."),
    Cause("memory_errors", "memory errors: rows remapped, pages retired or uncorrected ECC errors", 2,
          "Drain the GPU and reset it so pending remaps take effect; a failed remap or repeated uncorrected errors "
          "mean the GPU needs service (RMA)."),
    Cause("pcie_link", "PCIe link trained down", 2,
          "The link runs below its generation or width: reseat the card or riser, check the slot, or the "
          "platform's ASPM settings; host-device copies slow first."),
    Cause("hw_slowdown", "hardware slowdown", 2,
          "The GPU asserted HW slowdown or power brake: a PSU or power-delivery event, or an external signal; check "
          "the node's power and the BMC log."),
    Cause("thermal", "thermal slowdown", 3,
          "The GPU throttles for heat: check the fans, airflow, inlet temperature and neighbouring heat sources."),
    Cause("power_cap", "power capped", 3,
          "The GPU spends more of the run at its power limit than it did: a hotter GPU draws more power for the "
          "same work, or the work changed."),
    Cause("sm_clock", "SM clock lower", 3,
          "The SM clock fell with no clock event to explain it: check the clocks with nvidia-smi -q -d CLOCK."),
    Cause("gpu_processes", "another process on the GPU", 4,
          "Another process shared the GPU: find it with nvidia-smi; keep the idle guard on."),
    Cause("host_load", "host busy", 4,
          "Other processes took the host's CPUs during the runs: a CPU-bound input pipeline or launch loop slows "
          "with them."),
    Cause("cpu_quota", "CPU quota lowered", 4, "The container's CPU limit fell: raise the pod's or unit's CPU limit."),
    Cause("cpu_frequency", "CPU frequency lower", 4,
          "The CPU governor changed or the cores run slower: set the performance governor or check the BIOS power "
          "profile."),
    Cause("memory_pressure", "host memory pressure", 4,
          "Tasks waited for memory: the host is short of memory or swapping."),
    Cause("version", "software version changed", 5,
          "A driver, CUDA, cuDNN, NCCL, torch or VBIOS version changed: compare with the version verdict and roll "
          "back if it is the cause."),
    Cause("none", "no recorded condition changed", 9,
          "None of the recorded conditions differs: look at the workload itself, or at conditions sixdim does not "
          "record."),
)

CAUSE_NAMES: tuple[str, ...] = tuple(c.name for c in CAUSES)
CAUSE_BY_NAME: dict[str, Cause] = {c.name: c for c in CAUSES}
