"""A synthetic GPU fleet in the middle of a driver rollout, as Prometheus would scrape it from sixdim agents.

No fleet of hundreds of GPU hosts exists here, so its agents' summary series are made from a model that
has what a real one has: several GPU models, a rollout half done (a random half of each model's hosts
upgraded), a new driver that is slower on one model's one case and the same everywhere else, run-to-run
noise on every GPU, host-to-host spread, and hosts with a bad GPU of their own (slower on every case).
Every metric and label name comes from the catalog, exactly as the agent's exporter names them.

Used by tests/test_fleet_e2e.py (a real Prometheus scraping the hosts) and tests/bench/fleet_bench.py (the
1,000-host timing, backfilled with ``promtool tsdb create-blocks-from openmetrics``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from sixdim.core import catalog

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"
OLD_DRIVER, NEW_DRIVER = "550.54.15", "560.35.03"
VERSIONS = {catalog.CUDA_VERSION: "12.4", catalog.CUDNN_VERSION: "90100", catalog.NCCL_VERSION: "2.21.5",
            catalog.TORCH_VERSION: "2.5.1"}
SUITE = "quick"

CASES: tuple[tuple[str, str, str, str, float], ...] = (
    # metric, workload, precision, mode, base value on an H100 (A100: 0.4 of it)
    (catalog.SUMMARY_FLOPS.name, "gemm", "fp32", "training", 5.0e13),
    (catalog.SUMMARY_FLOPS.name, "gemm", "fp16", "training", 6.0e14),
    (catalog.SUMMARY_FLOPS.name, "gemm", "bf16", "training", 6.2e14),
    (catalog.SUMMARY_FLOPS.name, "conv", "fp16", "training", 2.1e14),
    (catalog.SUMMARY_FLOPS.name, "rnn", "fp16", "inference", 9.0e13),
    (catalog.SUMMARY_SAMPLES.name, "resnet50", "fp16", "training", 3.0e3),
    (catalog.SUMMARY_BANDWIDTH.name, "copy", "fp32", "training", 2.8e12),
)
SLOWED = (H100, "gemm", "bf16")
"""The one group the new driver slows (the test's truth)."""


@dataclass
class Host:
    name: str
    model: str
    upgraded: bool
    factor: float
    """The host's own level (cooling, power delivery): the same on every case and version."""
    bad_gpu: int | None
    """A GPU of the host that is slow on everything (None: all good)."""


@dataclass
class Fleet:
    hosts_per_model: int = 120
    gpus: int = 8
    upgraded_share: float = 0.5
    slowdown: float = 0.03
    noise: float = 0.01
    """Run-to-run noise of one GPU's value (log sd)."""
    host_spread: float = 0.005
    bad_share: float = 0.1
    bad_factor: float = 0.75
    cluster: str = "eu-1"
    seed: int = 43
    cases: tuple[tuple[str, str, str, str, float], ...] = CASES
    hosts: list[Host] = field(default_factory=list)

    def __post_init__(self) -> None:
        rng = random.Random(self.seed)
        for model, prefix in ((H100, "h100"), (A100, "a100")):
            names = [f"{prefix}-{i:04d}" for i in range(self.hosts_per_model)]
            upgraded = set(rng.sample(names, round(self.upgraded_share * len(names))))
            for name in names:
                bad = rng.randrange(self.gpus) if rng.random() < self.bad_share else None
                self.hosts.append(Host(name, model, name in upgraded, math.exp(rng.gauss(0, self.host_spread)), bad))

    def effect(self, host: Host, workload: str, precision: str, new: bool) -> float:
        return 1 - self.slowdown if new and (host.model, workload, precision) == SLOWED else 1.0

    def values(self, host: Host, phase: int) -> Iterator[tuple[str, dict[str, str], float]]:
        """The host's summary series in phase 0 (before the rollout) or 1 (half done): metric name, labels,
        value; each GPU's run noise drawn afresh per phase, the same for the same seed."""
        new = phase == 1 and host.upgraded
        driver = NEW_DRIVER if new else OLD_DRIVER
        rng = random.Random(f"{self.seed}/{host.name}/{phase}")
        base = 1.0 if host.model == H100 else 0.4
        for gpu in range(self.gpus):
            device = {catalog.HOSTNAME: host.name, catalog.GPU: str(gpu), catalog.UUID: f"GPU-{host.name}-{gpu}",
                      catalog.MODEL_NAME: host.model, catalog.PCI_BUS_ID: f"00000000:{0x18 + gpu:02X}:00.0",
                      catalog.DEVICE_TYPE: "cuda"}
            for metric, workload, precision, mode, value in self.cases:
                labels = {**device, catalog.SUITE: SUITE, catalog.WORKLOAD: workload, catalog.PRECISION: precision,
                          catalog.MODE: mode, catalog.PASS: "forward", catalog.DRIVER_VERSION: driver, **VERSIONS}
                level = value * base * host.factor * self.effect(host, workload, precision, new)
                if gpu == host.bad_gpu:
                    level *= self.bad_factor
                yield metric, labels, level * math.exp(rng.gauss(0, self.noise))
                yield catalog.SUMMARY_SHAPES.name, labels, 4.0

    def exposition(self, host: Host, phase: int) -> str:
        """The host's ``/metrics`` text (the summary families, in the agent's label order)."""
        families: dict[str, list[str]] = {}
        for metric, labels, value in self.values(host, phase):
            families.setdefault(metric, []).append(f"{metric}{{{_labels(metric, labels)}}} {value!r}")
        out = []
        for metric, lines in families.items():
            out += [f"# HELP {metric} {_help(metric)}", f"# TYPE {metric} gauge", *dict.fromkeys(lines)]
        return "\n".join(out) + "\n"


def _definition(name: str) -> catalog.MetricDef:
    return next(m for m in catalog.SUMMARY_METRICS if m.name == name)


def _labels(metric: str, labels: dict[str, str]) -> str:
    return ",".join(f'{label}="{labels[label]}"' for label in _definition(metric).labels)


def _help(metric: str) -> str:
    return _definition(metric).help.replace("\\", "\\\\").replace("\n", "\\n")


def openmetrics(fleet: Fleet, phases: list[tuple[int, list[float]]]) -> Iterator[str]:
    """The fleet as OpenMetrics for ``promtool tsdb create-blocks-from openmetrics``: for each (phase, times),
    every host's series at each time.  A metric family's samples must be together, so it is written family by
    family; the ``cluster`` label is added as a scrape would."""
    names = list(dict.fromkeys([m for m, *_ in fleet.cases] + [catalog.SUMMARY_SHAPES.name]))
    for name in names:
        yield f"# HELP {name} {_help(name)}"
        yield f"# TYPE {name} gauge"
        for host in fleet.hosts:
            series: dict[str, list[tuple[float, float]]] = {}
            for phase, times in phases:
                for metric, labels, value in fleet.values(host, phase):
                    if metric != name:
                        continue
                    key = f'{name}{{cluster="{fleet.cluster}",{_labels(name, labels)}}}'
                    series.setdefault(key, []).extend((t, value) for t in times)
            for key, points in series.items():
                for t, value in points:
                    yield f"{key} {value!r} {t:.3f}"
    yield "# EOF"
