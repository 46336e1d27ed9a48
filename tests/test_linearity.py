"""Card linearity with DistributedDataParallel over gloo, 2 processes, through the real worker."""

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agent.board import Board
from agent.devices import cpu_device
from agent.executor import Executor
from agent.exporter import SixdimCollector
from agent.history import History
from collectors.nvml import NvmlCollector
from workloads import registry
from workloads.stats import deepspark_mean


def test_card_linearity_with_two_gloo_processes(tmp_path):
    board = Board()
    executor = Executor(hostname="h", history=History(tmp_path / "h.db"), board=board, nvml=NvmlCollector("h"),
                        rapl=None)
    one, two = executor.execute(registry.get("linearity"), {"counts": [2]}, cpu_device(), timeout=120)
    assert (one.status, two.status) == ("ok", "ok"), (one.reason, two.reason)
    assert (one.params["count"], two.params["count"]) == (1, 2)
    for record in (one, two):  # throughput follows from the slowest rank's windows by the DeepSpark rule
        d = record.details
        expected = deepspark_mean([d["batch_per_device"] * d["count"] * record.params["steps_per_window"] / w
                                   for w in d["window_seconds"]])
        assert record.figures["samples_per_second"] == pytest.approx(expected)
    assert one.figures["linearity_ratio"] == 1.0
    assert two.figures["linearity_ratio"] == pytest.approx(
        (two.figures["samples_per_second"] / 2) / one.figures["samples_per_second"])
    assert two.details["backend"] == "gloo"

    registry_ = CollectorRegistry()
    registry_.register(SixdimCollector(board, [], "h"))
    exported = [s for f in text_string_to_metric_families(generate_latest(registry_).decode()) for s in f.samples
                if s.name == "sixdim_workload_linearity_ratio"]
    assert {s.labels["count"]: s.value for s in exported} == {"1": 1.0, "2": pytest.approx(
        two.figures["linearity_ratio"])}
