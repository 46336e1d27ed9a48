"""The exporter renders the catalog: names, labels, units, and promtool's lint."""

import random

import pynvml
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sixdim.collectors.host import HostCollector, RaplReader
from sixdim.collectors.nvml import NvmlCollector
from sixdim.core import catalog
from sixdim.core.results import Interruption
from sixdim.http.board import Board
from sixdim.http.exporter import ReloadStatus, SixdimCollector
from sixdim.run.devices import Device
from sixdim.run.progress import SuiteProgress
from sixdim.run.runner import STOPPING_REASON
from sixdim.store.history import History
from sixdim.verdicts.live import Verdicts
from tests.conftest import promtool_check
from tests.fakenvml import FakeGpu, FakeNvml
from tests.helpers import make_record

GPU_A = Device("cuda", 0, "GPU-a", "NVIDIA H100 80GB HBM3", "00000000:17:00.0")
"""The GPU of make_record's records."""


def interruption(suite: str = "quick", cases_left: int = 34) -> Interruption:
    return Interruption(suite=suite, hostname="node1", device_type="cuda", device="cuda:0", gpu="0", uuid="GPU-a",
                        model_name="NVIDIA H100 80GB HBM3", pci_bus_id="00000000:17:00.0", reason=STOPPING_REASON,
                        started_at=1000.0, ended_at=1100.0, cases_done=6, cases_left=cases_left,
                        running="gemm bf16 m=8,n=8,k=8", workloads=["gemm", "conv"])


def scrape(board, collectors=(), dcgm=False, **options) -> str:
    registry = CollectorRegistry()
    registry.register(SixdimCollector(board, list(collectors), "node1", dcgm, **options))
    return generate_latest(registry).decode()


def samples(text):
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def find(text, name, **labels):
    return [v for (n, ls), v in samples(text).items()
            if n == name and all(dict(ls).get(k) == x for k, x in labels.items())]


def test_result_series_carry_dcgm_join_labels_and_versions():
    board = Board()
    board.add(make_record(seconds=0.002, power_watts=350.0, energy_joules=700.0, memory_bytes=1e9,
                          device_memory_bytes=2e9, flop_per_joule=1e11, hardware_slowdown=0.0))
    text = scrape(board)
    [(name, labels)] = [k for k in samples(text) if k[0] == "sixdim_workload_seconds"]
    assert dict(labels) == {
        "hostname": "node1", "gpu": "0", "UUID": "GPU-a", "model_name": "NVIDIA H100 80GB HBM3",
        "pci_bus_id": "00000000:17:00.0", "device_type": "cuda", "workload": "gemm", "precision": "bf16",
        "shape": "m=8,n=8,k=8", "mode": "training", "pass": "forward", "suite": "quick",
        "driver_version": "550.54.15", "cuda_version": "12.4", "cudnn_version": "", "nccl_version": "",
            "torch_version": "2.13.0"}
    assert find(text, "sixdim_workload_seconds") == [0.002]
    assert find(text, "sixdim_workload_flops") == [1024 / 0.002]
    assert find(text, "sixdim_workload_power_watts") == [350.0]
    assert find(text, "sixdim_workload_energy_joules") == [700.0]
    assert find(text, "sixdim_workload_memory_bytes") == [1e9]
    assert find(text, "sixdim_workload_device_memory_bytes") == [2e9]
    assert find(text, "sixdim_workload_flop_per_joule") == [1e11]
    assert find(text, "sixdim_workload_hardware_slowdown") == [0.0]
    assert find(text, "sixdim_workload_last_run_timestamp_seconds") == [2000.0]
    assert find(text, "sixdim_build_info", version="0.1.0") == [1.0]


def test_run_counts_by_status():
    board = Board()
    for status in ("ok", "failed", "timeout", "skipped", "skipped"):
        board.add(make_record(status))
    text = scrape(board)
    for status, count in (("ok", 1), ("failed", 1), ("timeout", 1), ("skipped", 2)):
        assert find(text, "sixdim_workload_runs_total", status=status) == [count]


def test_dcgm_label_names_option_exports_modelName():
    board = Board()
    board.add(make_record())
    text = scrape(board, dcgm=True)
    [(_, labels)] = [k for k in samples(text) if k[0] == "sixdim_workload_flops"]
    assert dict(labels)["modelName"] == "NVIDIA H100 80GB HBM3" and "model_name" not in dict(labels)


def test_unavailable_nvml_is_a_metric_saying_so():
    nvml = NvmlCollector("node1", module=FakeNvml(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    text = scrape(Board(), [nvml])
    assert find(text, "sixdim_collector_up", collector="nvml") == [0.0]
    assert "Driver Not Loaded" in [dict(k[1]) for k in samples(text) if k[0] == "sixdim_collector_up"][0]["reason"]
    assert not any(name.startswith("sixdim_gpu_") for name, _ in samples(text))


def test_suite_peer_ratios_compare_gpus_over_the_same_shapes_only():
    """GPU 0 and GPU 2 ran both shapes, GPU 1's big shape timed out: GPU 1's mean covers the small
    shape only, so it has no peer (it would look 3 times slower for running the smaller shape alone)."""
    board = Board()
    for gpu, shapes in (("0", ("small", "big")), ("1", ("small",)), ("2", ("small", "big"))):
        for name in shapes:
            board.add(make_record(gpu=gpu, uuid=f"GPU-{gpu}", shape=name, seconds=1e-3 if name == "small" else 1e-1))
    text = scrape(board)
    ratios = {dict(ls)["gpu"]: v for (n, ls), v in samples(text).items() if n == "sixdim_suite_peer_ratio"}
    assert ratios == {"0": pytest.approx(1.0), "2": pytest.approx(1.0)}
    assert find(text, "sixdim_suite_shapes", gpu="1") == [1.0]  # still summarised, just not compared

    # the same shapes, newest last in another order on GPU 1 (its big shape's result is older): peers all
    board = Board()
    for gpu, order in (("0", ("small", "big")), ("1", ("big", "small")), ("2", ("small", "big"))):
        for at, name in enumerate(order):
            board.add(make_record(gpu=gpu, uuid=f"GPU-{gpu}", shape=name, ended_at=2000.0 + at,
                                  seconds=1e-3 if name == "small" else 1e-1))
    ratios = {dict(ls)["gpu"]: v for (n, ls), v in samples(scrape(board)).items() if n == "sixdim_suite_peer_ratio"}
    assert ratios == {"0": pytest.approx(1.0), "1": pytest.approx(1.0), "2": pytest.approx(1.0)}


def test_every_catalog_metric_is_exported_and_lint_clean(promtool, tmp_path):
    powercap = tmp_path / "powercap" / "intel-rapl:0"
    powercap.mkdir(parents=True)
    (powercap / "name").write_text("package-0\n")
    (powercap / "max_energy_range_uj").write_text("262143328850\n")
    (powercap / "energy_uj").write_text("1000000\n")
    host = HostCollector("node1", rapl=RaplReader(tmp_path / "powercap"))
    (powercap / "energy_uj").write_text("3500000\n")
    nvml = NvmlCollector("node1", module=FakeNvml([FakeGpu(), FakeGpu(uuid="GPU-b", compute_pids=[9])]))
    board = Board(Verdicts())
    board.add(make_record(gpu="1", uuid="GPU-b"))  # a peer of the same model: the peer ratios too
    for run in range(30):  # a series with a verdict and a version change: the verdict metrics too
        board.add(make_record(shape="m=16,n=16,k=16", seconds=0.01 if run < 12 else 0.02, ended_at=1000.0 + run,
                              driver="550.54.15" if run < 12 else "560.28.03"))
    for run in range(6):  # GPU 0 at half its peer's speed, at a lower power limit: the peer causes
        for gpu, uuid, seconds, watts in (("0", "GPU-a", 0.02, 500.0), ("1", "GPU-b", 0.01, 700.0)):
            record = make_record(workload="conv", gpu=gpu, uuid=uuid, seconds=seconds, ended_at=5000.0 + run)
            record.conditions = {"power_limit_watts": watts}
            board.add(record)
    wobble = random.Random(5)
    for run in range(120):  # a series that drifts 0.1% a run: the drift metrics
        board.add(make_record(workload="rnn", seconds=0.01 * 1.001 ** run * (1 + wobble.gauss(0, 0.005)),
                              ended_at=1000.0 + 900.0 * run))
    figures = {metric.figure: 1.0 for metric in catalog.RESULT_METRICS
               if metric.figure not in ("ended_at",) and not metric.figure_labels}
    figures["quality:top1_accuracy:higher_is_better"] = 0.76
    board.add(make_record(**figures))
    for status in ("failed", "timeout", "skipped"):
        board.add(make_record(status))
    spent = make_record("timeout")  # not ok: the ok record above carries every figure
    spent.details = {"case_wall": [1995.0, 2000.0], "case_energy_joules": 3500.0}  # the suite cost counters
    board.add(spent)
    board.add_interruption(interruption())
    progress = SuiteProgress("node1")  # a suite running: the suite progress metrics
    progress.begin("quick", GPU_A, ["gemm", "gemm", "conv"]).case_started(0)
    reloads = ReloadStatus()
    reloads.failed()  # a reload failed: 0, and the time of the last good load stays
    text = scrape(board, [nvml, host], history=History(tmp_path / "h.db"), reloads=reloads, progress=progress,
                  cannot_run=lambda: "quick@cuda:0: its device's lock file cannot be written")
    exported = {name for name, _ in samples(text)}
    assert find(text, "sixdim_agent_can_run") == [0.0]
    assert find(scrape(board, cannot_run=lambda: None), "sixdim_agent_can_run") == [1.0]
    assert find(text, "sixdim_config_reload_success") == [0.0]
    assert find(text, "sixdim_config_last_reload_timestamp_seconds") == [reloads.last_success]
    for metric in catalog.ALL_METRICS:
        assert metric.name in exported, metric.name
    assert find(text, "sixdim_host_rapl_energy_joules_total", domain="package-0") == [2.5]
    assert find(text, "sixdim_gpu_processes", gpu="1") == [1.0]
    result = promtool_check(promtool, text)
    assert result.returncode == 0 and result.stdout + result.stderr == "", result.stdout + result.stderr


def test_rapl_counter_wrap_is_corrected(tmp_path):
    zone = tmp_path / "intel-rapl:0"
    zone.mkdir()
    (zone / "name").write_text("package-0")
    (zone / "max_energy_range_uj").write_text("1000000")
    (zone / "energy_uj").write_text("900000")
    rapl = RaplReader(tmp_path)
    (zone / "energy_uj").write_text("100000")  # wrapped: 100000 more to the top, 100000 after
    assert rapl.read() == {"package-0": 0.2}


def test_suites_export_summaries_and_per_shape_series_only_where_asked():
    board = Board()
    for m, seconds in ((8, 1.0), (16, 4.0)):
        board.add(make_record(seconds=seconds, shape=f"m={m},n={m},k={m}"))  # suite "quick"
    nightly = make_record(seconds=9.0, shape="m=32,n=32,k=32")
    nightly.suite = "nightly"
    board.add(nightly)
    text = scrape(board, shape_suites={"quick"})
    assert sorted(dict(k[1])["shape"] for k in samples(text) if k[0] == "sixdim_workload_seconds") == [
        "m=16,n=16,k=16", "m=8,n=8,k=8"]                     # nightly has no per-shape series
    assert find(text, "sixdim_suite_seconds", suite="quick") == [pytest.approx(2.0)]  # geometric mean of 1 and 4
    assert find(text, "sixdim_suite_shapes", suite="quick") == [2.0]
    assert find(text, "sixdim_suite_seconds", suite="nightly") == [pytest.approx(9.0)]
    assert "shape" not in dict(next(k for k in samples(text) if k[0] == "sixdim_suite_seconds")[1])


def test_run_counters_are_per_workload_and_ignore_cases_a_shutdown_interrupted():
    board = Board()
    for m in (8, 16, 32):
        board.add(make_record(shape=f"m={m},n={m},k={m}"))
        board.add(make_record("failed", shape=f"m={m},n={m},k={m}"))
    interrupted = make_record("skipped", shape="m=64,n=64,k=64")
    interrupted.reason = STOPPING_REASON
    board.add(interrupted)
    runs = [(dict(k[1]), v) for k, v in samples(scrape(board)).items() if k[0] == "sixdim_workload_runs_total"]
    assert sorted((labels["status"], value) for labels, value in runs) == [("failed", 3.0), ("ok", 3.0)]
    assert all("shape" not in labels for labels, _ in runs)


def test_the_history_health_is_exported(tmp_path):
    history = History(tmp_path / "h.db")
    text = scrape(Board(), history=history, part="live")
    assert find(text, "sixdim_history_up") == [1.0]
    assert find(text, "sixdim_history_pending_results") == [0.0]
    assert find(text, "sixdim_history_write_errors_total", reason="locked") == [0.0]
    assert not any(name.startswith("sixdim_workload_") for name, _ in samples(text))  # the live part only


def test_a_shape_another_suite_ran_later_keeps_its_own_per_shape_series_and_is_in_both_summaries():
    board = Board()
    board.add(make_record(seconds=1.0))                  # suite "quick", exported per shape
    nightly = make_record(seconds=2.0, ended_at=3000.0)  # the same kernel, later, by a summary-only suite
    nightly.suite = "nightly"
    board.add(nightly)
    text = scrape(board, shape_suites={"quick"})
    assert find(text, "sixdim_workload_seconds", suite="quick") == [1.0]  # quick's own result, not nightly's
    assert find(text, "sixdim_workload_seconds", suite="nightly") == []   # nightly exports summaries only
    assert find(text, "sixdim_suite_shapes", suite="quick") == [1.0]
    assert find(text, "sixdim_suite_seconds", suite="quick") == [pytest.approx(1.0)]  # quick's own result
    assert find(text, "sixdim_suite_seconds", suite="nightly") == [pytest.approx(2.0)]


def test_interrupted_skips_are_never_counted_as_runs_live_from_the_history_or_after_pruning(tmp_path):
    """3 busy skips, a shutdown's interrupted one, one more busy skip: 4 skipped runs, whichever is
    newest, on the live board, on a board loaded from the history, and once all are pruned."""
    history = History(tmp_path / "h.db")
    live = Board()
    reasons = ["busy: 1 other process(es) on GPU 0 (pid 7)"] * 3 + [STOPPING_REASON]
    for i, reason in enumerate(reasons):
        record = make_record("skipped", ended_at=1000.0 + i)
        record.reason = reason
        history.add(record)
        live.add(record)
        if i == 3:  # the newest skip is the interrupted one: the count stays 3, still exported
            assert find(scrape(live), "sixdim_workload_runs_total", status="skipped") == [3.0]
    last = make_record("skipped", ended_at=1010.0)
    last.reason = reasons[0]
    history.add(last)
    live.add(last)
    assert find(scrape(live), "sixdim_workload_runs_total", status="skipped") == [4.0]
    assert find(scrape(Board.from_history(history)), "sixdim_workload_runs_total", status="skipped") == [4.0]
    history.prune(keep_seconds=0.0, now=5000.0)
    assert list(history) == []
    assert find(scrape(Board.from_history(history)), "sixdim_workload_runs_total", status="skipped") == [4.0]


def test_skips_are_counted_by_reason_class_and_case_time_by_status_since_start(tmp_path):
    from sixdim.core.results import INTERRUPTED
    from sixdim.http.board import skip_class

    assert STOPPING_REASON.startswith(INTERRUPTED)
    history = History(tmp_path / "h.db")
    history.add(make_record("skipped", ended_at=1000.0))  # before the agent started: not "since start"
    board = Board.from_history(history)
    reasons = ["busy: 1 other process(es) on GPU 0 (pid 4242)",
               "busy: GPU 0 utilization 37% is above the guard's 5% threshold",
               "busy: 2 other process(es) on GPU 0 (pid 7, 8) appeared during the run; run stopped",
               "cannot list processes on GPU 0: NVML error; counted as busy",
               "GPU 0 is in MIG mode, instances MIG-a; sixdim benchmarks whole GPUs only",
               STOPPING_REASON]
    for reason in reasons:
        record = make_record("skipped", ended_at=2000.0)
        record.reason = reason
        board.add(record)
    board.add(make_record(ended_at=2000.0))  # an ok case of 5 s (make_record starts 5 s before its end)
    text = scrape(board)
    skips = {dict(ls)["reason"]: v for (n, ls), v in samples(text).items() if n == "sixdim_workload_skips_total"}
    assert skips == {"busy_process": 2.0, "busy_utilization": 1.0, "process_list_unavailable": 1.0, "mig": 1.0}
    assert [skip_class(r) for r in reasons[:5]] == ["busy_process", "busy_utilization", "busy_process",
                                                    "process_list_unavailable", "mig"]
    seconds = {dict(ls)["status"]: v for (n, ls), v in samples(text).items()
               if n == "sixdim_workload_case_mean_seconds"}
    assert seconds == {"ok": 5.0, "skipped": 5.0}  # make_record's cases last 5 s; the interrupted one is not counted
    slow = make_record(ended_at=3000.0)
    slow.started_at = 2985.0
    board.add(slow)
    assert find(scrape(board), "sixdim_workload_case_mean_seconds", status="ok") == [10.0]  # (5 + 15) / 2
