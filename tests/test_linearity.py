"""Card linearity with DistributedDataParallel over gloo, 2 processes, through the real worker."""

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sixdim.collectors.nvml import NvmlCollector
from sixdim.http.board import Board
from sixdim.http.exporter import SixdimCollector
from sixdim.run.devices import cpu_device
from sixdim.run.executor import Executor
from sixdim.store.history import History
from sixdim.workloads import registry
from sixdim.workloads.measure.stats import deepspark_mean
from sixdim.workloads.models import linearity


@pytest.mark.slow
def test_card_linearity_with_two_gloo_processes(tmp_path):
    board = Board()
    executor = Executor(hostname="h", history=History(tmp_path / "h.db"), on_recorded=board.catch_up,
                        nvml=NvmlCollector("h"), rapl=None)
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


@pytest.mark.slow
def test_node_linearity_two_nodes_meet_through_the_c10d_rendezvous(tmp_path, cli_env):
    """Two `sixdim run --nnodes 2` processes on this host stand for two nodes: each with its own
    history and state directory, as on two hosts (sharing one, the second would wait for the first's
    device lock while the first waits for it at the rendezvous)."""
    import json
    import subprocess
    import sys

    from tests.conftest import free_port

    endpoint = f"127.0.0.1:{free_port()}"
    nodes = []
    for n in range(2):
        env = {**cli_env, "SIXDIM_HISTORY": str(tmp_path / f"node{n}.db"),
               "SIXDIM_STATE_DIR": str(tmp_path / f"state{n}")}
        nodes.append(subprocess.Popen(
            [sys.executable, "-m", "sixdim", "run", "--nnodes", "2", "--rdzv-endpoint", endpoint, "--json",
             "-p", "steps_per_window=2", "-p", "windows=3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env))
    outputs = [node.communicate(timeout=240) for node in nodes]
    records = [json.loads(out) for out, _ in outputs]
    assert [node.returncode for node in nodes] == [0, 0], [err[-2000:] for _, err in outputs]
    together = [rs[1] for rs in records]
    [holder] = [r for r in together if r["status"] == "ok"]
    [other] = [r for r in together if r["status"] == "skipped"]
    assert "did not hold global rank 0" in other["reason"]
    alone = next(rs[0] for rs in records if rs[1] is holder)
    assert alone["figures"]["linearity_ratio"] == 1.0 and alone["params"]["nodes"] == 1
    assert holder["details"]["nodes"] == 2 and holder["params"]["linearity_count"] == 2
    assert holder["figures"]["linearity_ratio"] == pytest.approx(
        (holder["figures"]["samples_per_second"] / 2) / alone["figures"]["samples_per_second"])


def _ranks_that(write: bool, signal: str | None):
    """Stands for torch.multiprocessing's start_processes: the ranks write the result (or not), then one
    of them dies the way gloo's teardown race kills it (a race no test can make happen on demand)."""
    def start_processes(fn, args, nprocs, join, start_method):
        out_path = args[-1]
        if write:
            with open(out_path, "w") as handle:
                handle.write("{}")
        raise linearity.mp.ProcessExitedException("process 1 terminated", error_index=1, error_pid=4242,
                                                   exit_code=-6, signal_name=signal)
    return start_processes


def test_a_rank_that_dies_leaving_the_group_after_the_result_costs_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(linearity.mp, "start_processes", _ranks_that(write=True, signal="SIGABRT"))
    note = linearity._local_run(2, "gloo", {}, str(tmp_path / "result.json"), str(tmp_path))
    assert "rank 1 ended with SIGABRT while leaving the process group" in note and "result is kept" in note


def test_a_rank_that_dies_before_the_result_fails_the_case(tmp_path, monkeypatch):
    monkeypatch.setattr(linearity.mp, "start_processes", _ranks_that(write=False, signal="SIGABRT"))
    with pytest.raises(linearity.mp.ProcessExitedException):
        linearity._local_run(2, "gloo", {}, str(tmp_path / "result.json"), str(tmp_path))
