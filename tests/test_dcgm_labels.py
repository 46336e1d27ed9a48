"""``--dcgm-label-names``: sixdim's series join dcgm-exporter's as they are scraped, with no relabelling.

dcgm-exporter names a GPU's host ``Hostname`` and its model ``modelName`` (every release up to 4.5.3-4.8.2);
sixdim's defaults are ``hostname`` and ``model_name``, so ``on(Hostname, gpu)`` joined nothing.  With the
option the agent exports dcgm-exporter's exact names on every series, and a real Prometheus (promtool's
engine) joins the two exporters' series ``on(Hostname, gpu)`` and ``on(UUID)``; without it the names stay the
defaults.  The generated rules and dashboards follow the same option (tests/test_rules.py,
tests/test_dashboards.py: their dcgm variants are the defaults renamed).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sixdim.collectors.host import HostCollector
from sixdim.collectors.nvml import NvmlCollector
from sixdim.core import catalog
from sixdim.http.board import Board
from sixdim.http.exporter import SixdimCollector
from tests.dcgm_names import dcgm_labels
from tests.fakenvml import FakeGpu, FakeNvml
from tests.helpers import make_record

HOST = "node1"
GPU_A = FakeGpu(uuid="GPU-a", bus_id="00000000:17:00.0")
GPU_B = FakeGpu(uuid="GPU-b", bus_id="00000000:2A:00.0")
"""The two GPUs of the host, as NVML reports them; make_record's results ran on the first (GPU 0, GPU-a)."""
UTILIZATION = {"0": 64.0, "1": 32.0}
"""dcgm-exporter's DCGM_FI_DEV_GPU_UTIL of each GPU, in percent."""
SECONDS = 0.002
"""Each result's time: make_record's FLOP/s is 1024 over it, 512,000 (exact in binary, as the quotients below)."""


def exposition(dcgm: bool) -> str:
    """What the agent on ``HOST`` serves: a result of GPU 0 and GPU 1, NVML telemetry of both, the host's."""
    board = Board()
    board.add(make_record(seconds=SECONDS))
    board.add(make_record(seconds=SECONDS / 2, gpu="1", uuid="GPU-b"))
    nvml = NvmlCollector(HOST, module=FakeNvml([GPU_A, GPU_B]))
    registry = CollectorRegistry()
    registry.register(SixdimCollector(board, [nvml, HostCollector(HOST)], HOST, dcgm))
    return generate_latest(registry).decode()


def series(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Every sample: its name, its labels as Prometheus stores them (an empty value is no label), its value."""
    return [(s.name, {k: v for k, v in s.labels.items() if v}, s.value)
            for family in text_string_to_metric_families(text) for s in family.samples]


def selector(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items())) + "}"


def dcgm_exporter_series() -> list[dict[str, str]]:
    """dcgm-exporter's GPU utilization of the same two GPUs, with its own labels."""
    return [{"series": selector("DCGM_FI_DEV_GPU_UTIL", dcgm_labels(HOST, index, gpu.uuid, gpu.name, gpu.bus_id)),
             "values": f"{UTILIZATION[index]:g}x10"} for index, gpu in (("0", GPU_A), ("1", GPU_B))]


def promtool_test(promtool: str, tmp_path: Path, input_series: list[dict[str, str]],
                  tests: list[dict[str, Any]]) -> subprocess.CompletedProcess:
    spec = {"rule_files": [], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": input_series, "promql_expr_test": tests}]}
    path = tmp_path / "join-test.yml"
    path.write_text(json.dumps(spec, indent=1))  # JSON is YAML
    return subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, cwd=tmp_path)


def test_with_the_option_every_series_carries_dcgm_exporters_label_names():
    found = series(exposition(dcgm=True))
    assert found
    for name, labels, _ in found:
        assert catalog.HOSTNAME not in labels and catalog.MODEL_NAME not in labels, (name, labels)
    hosts = {name for name, labels, _ in found if labels.get(catalog.HOSTNAME_DCGM) == HOST}
    assert {catalog.BUILD_INFO.name, catalog.COLLECTOR_UP.name, catalog.GPU_INFO.name, catalog.HOST_CPU.name,
            catalog.WORKLOAD_FLOPS.name, catalog.SUMMARY_FLOPS.name} <= hosts
    gpu_info = [labels for name, labels, _ in found if name == catalog.GPU_INFO.name]
    identity = {"gpu", "UUID", "modelName", "pci_bus_id", "Hostname"}
    assert [{k: v for k, v in labels.items() if k in identity} for labels in gpu_info] == [
        {k: v for k, v in dcgm_labels(HOST, index, gpu.uuid, gpu.name, gpu.bus_id).items() if k in identity}
        for index, gpu in (("0", GPU_A), ("1", GPU_B))]


def test_without_it_the_names_stay_the_defaults():
    found = series(exposition(dcgm=False))
    for name, labels, _ in found:
        assert catalog.HOSTNAME_DCGM not in labels and catalog.MODEL_NAME_DCGM not in labels, (name, labels)
    flops = [labels for name, labels, _ in found if name == catalog.WORKLOAD_FLOPS.name]
    assert {(labels[catalog.HOSTNAME], labels[catalog.MODEL_NAME]) for labels in flops} == {(HOST, GPU_A.name)}


def join(on: str) -> str:
    """Each GPU's FLOP/s over its utilization as dcgm-exporter reports it: the two exporters' series joined
    ``on (...)``."""
    return f"max by ({on}) ({catalog.WORKLOAD_FLOPS.name}) / on ({on}) DCGM_FI_DEV_GPU_UTIL"


def joins(dcgm: bool, on: str) -> list[dict[str, Any]]:
    """:func:`join`, one result per GPU, labelled ``on``'s labels."""
    host = catalog.exported_label(catalog.HOSTNAME, dcgm)
    return [{"expr": join(on), "eval_time": "5m",
             "exp_samples": [{"labels": selector("", {name: labels[name] for name in on.split(", ")}),
                              "value": 1024 / (SECONDS if index == "0" else SECONDS / 2) / UTILIZATION[index]}
                             for index, labels in (("0", {host: HOST, "gpu": "0", "UUID": "GPU-a"}),
                                                   ("1", {host: HOST, "gpu": "1", "UUID": "GPU-b"}))]}]


def test_sixdims_series_join_dcgm_exporters_on_hostname_and_gpu_and_on_uuid(tmp_path, promtool):
    sixdim = [{"series": selector(name, labels), "values": f"{value!r}x10"}
              for name, labels, value in series(exposition(dcgm=True))]
    expected = [*joins(True, f"{catalog.HOSTNAME_DCGM}, {catalog.GPU}"), *joins(True, catalog.UUID)]
    assert [s["value"] for t in expected for s in t["exp_samples"]] == [8000, 32000, 8000, 32000]
    result = promtool_test(promtool, tmp_path, sixdim + dcgm_exporter_series(), expected)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_default_names_join_dcgm_exporter_on_uuid_only(tmp_path, promtool):
    """What the option is for: with the defaults, on(UUID) joins, and no host-and-GPU join does, whichever
    spelling the query uses."""
    sixdim = [{"series": selector(name, labels), "values": f"{value!r}x10"}
              for name, labels, value in series(exposition(dcgm=False))]
    nothing = [{"expr": join(f"{host}, {catalog.GPU}"), "eval_time": "5m", "exp_samples": []}
               for host in (catalog.HOSTNAME, catalog.HOSTNAME_DCGM)]
    result = promtool_test(promtool, tmp_path, sixdim + dcgm_exporter_series(), [*joins(False, catalog.UUID), *nothing])
    assert result.returncode == 0, result.stdout + result.stderr
