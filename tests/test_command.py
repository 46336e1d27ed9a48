"""Command workloads with real child scripts and real-format logs (read through ``cat``): AI-Rank, MLPerf
training and inference, free text by regex; final quality values with their direction; runs that are
not ok (unfinished, aborted, invalid, unreadable); failing and hanging commands."""

import math
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sixdim.collectors.nvml import NvmlCollector
from sixdim.http.board import Board
from sixdim.run.devices import cpu_device
from sixdim.run.executor import Executor
from sixdim.store.history import History
from sixdim.workloads import registry
from sixdim.workloads.spec import ParamError

LOGS = Path(__file__).parent / "fixtures" / "logs"


def script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def run_command(tmp_path, timeout=60.0, board=None, **params):
    executor = Executor(hostname="h", history=History(tmp_path / "h.db"), nvml=NvmlCollector("h"), rapl=None,
                        on_recorded=board.catch_up if board else None)
    [record] = executor.execute(registry.get("command"), params, cpu_device(), timeout=timeout)
    return record


def cat(name, **params):
    """The command workload reading a fixture log through ``cat``: the real path, no mock."""
    return {"argv": ["cat", str(LOGS / name)], "label": name.split(".")[0], **params}


def quality(record):
    """The run's quality figures as {(metric, direction): final value}."""
    return {tuple(key.split(":")[1:]): value for key, value in record.figures.items() if key.startswith("quality:")}


AI_RANK_SCRIPT = """
    import time
    print("- AI-Rank-log 1558631910.424 test_begin", flush=True)
    for epoch, acc in enumerate([0.16, 0.32, 0.47, 0.64, 0.76, 0.80, 0.85], start=1):
        print(f"AI-Rank-log {1558631910.424 + epoch} eval_accuracy:{acc}, total_epoch_cnt:{epoch}, ips:{1000 + 10 * epoch}images/sec", flush=True)
        time.sleep(0.05)
    print("AI-Rank-log 1558631918.454 target_quality_time:8.03sec")
    print("AI-Rank-log 1558631922.454 test_finish")
    print("AI-Rank-log 1558631922.455 total_use_time:12.03sec")
    print("AI-Rank-log 1558631922.456 avg_ips:1190images/sec")
"""  # noqa: E501 - the child script's lines are kept as they are


def test_ai_rank_log(tmp_path):
    record = run_command(tmp_path, argv=[sys.executable, script(tmp_path, "ai_rank.py", AI_RANK_SCRIPT)],
                         label="toy-airank")
    assert record.status == "ok", record.reason
    ips = [1000 + 10 * e for e in range(1, 8)]
    expected_speed = (sum(ips) - min(ips) - max(ips)) / (len(ips) - 2)  # DeepSpark rule, 7 reports
    assert record.figures["samples_per_second"] == pytest.approx(expected_speed)
    assert record.figures["accuracy"] == 0.85
    assert record.figures["time_to_train_seconds"] == pytest.approx(8.03)
    assert record.figures["seconds"] == pytest.approx(12.03)
    assert (record.workload, record.shape, record.kernel_pass) == ("command", "toy-airank", "command")
    assert "torch" not in record.environment  # a command runs in any framework: no torch loaded beside it
    assert record.figures["memory_bytes"] > 0  # sampled while the command ran


MLPERF_SCRIPT = """
    import json
    def log(key, value=None, time_ms=0, **metadata):
        print(":::MLLOG " + json.dumps({"namespace": "", "time_ms": time_ms, "event_type": "POINT_IN_TIME",
                                        "key": key, "value": value, "metadata": metadata}), flush=True)
    log("run_start", time_ms=1000)
    for epoch in range(6):
        log("throughput", 500.0 + epoch, time_ms=1000 + 100 * epoch, epoch_num=epoch)
        log("eval_accuracy", 0.70 + 0.01 * epoch, time_ms=1050 + 100 * epoch, epoch_num=epoch)
    log("run_stop", time_ms=4500, status="success")
"""


def test_mlperf_log(tmp_path):
    record = run_command(tmp_path, argv=[sys.executable, script(tmp_path, "mlperf.py", MLPERF_SCRIPT)])
    assert record.status == "ok", record.reason
    assert record.figures["time_to_train_seconds"] == pytest.approx(3.5)  # run_stop - run_start
    assert record.figures["accuracy"] == pytest.approx(0.75)
    assert record.figures["samples_per_second"] == pytest.approx((501 + 502 + 503 + 504) / 4)
    # the default label: the program's name and a digest of the command
    assert record.shape.startswith(os.path.basename(sys.executable) + "@")


FREE_TEXT_SCRIPT = """
    import time
    for step in range(5):
        print(f"step {step}: loss={1.0 / (step + 1):.3f} speed {200 + step} img/s", flush=True)
        time.sleep(0.1)
        print(f"validation top1 = {0.5 + 0.1 * step:.2f}", flush=True)
"""


def test_free_text_with_regexes_and_a_target(tmp_path):
    record = run_command(tmp_path, argv=[sys.executable, script(tmp_path, "free.py", FREE_TEXT_SCRIPT)],
                         formats=[], throughput_regex=r"speed (\d+) img/s", accuracy_regex=r"top1 = ([\d.]+)",
                         target_accuracy=0.7)
    assert record.status == "ok", record.reason
    assert record.figures["samples_per_second"] == pytest.approx(202.0)  # DeepSpark rule over 200..204
    assert record.figures["accuracy"] == pytest.approx(0.9)
    # 0.7 is printed after the third step (3 sleeps of 0.1 s): time to train is measured by sixdim
    assert 0.25 < record.figures["time_to_train_seconds"] < record.details["wall_seconds"]


def test_shell_command_and_environment(tmp_path):
    record = run_command(tmp_path, argv=["echo \"speed $RATE img/s\"; echo \"speed $RATE img/s\""], shell=True,
                         env=["RATE=321"], throughput_regex=r"speed (\d+)", formats=[])
    assert record.figures["samples_per_second"] == 321.0


def test_failing_command_is_a_failure_with_its_output(tmp_path):
    failing = script(tmp_path, "fail.py",
                     "import sys\nprint('CUDA error: device-side assert triggered')\nsys.exit(7)\n")
    record = run_command(tmp_path, argv=[sys.executable, failing])
    assert record.status == "failed"
    assert "exited with code 7" in record.reason and "device-side assert" in record.reason


@pytest.mark.slow
def test_hanging_command_times_out_and_is_stopped(tmp_path):
    pid_file = tmp_path / "pid"
    hanging = script(tmp_path, "hang.py", f"""
        import os, time
        open({str(pid_file)!r}, "w").write(str(os.getpid()))
        print("training...", flush=True)
        time.sleep(600)
    """)
    started = time.monotonic()
    # the timeout leaves a busy machine time to start the worker and the command (its PID file)
    record = run_command(tmp_path, timeout=8.0, argv=[sys.executable, hanging])
    assert record.status == "timeout"
    assert time.monotonic() - started < 8.0 + 3.0 + 10.0
    import psutil

    pid = int(pid_file.read_text())
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_mlperf_aborted_run_is_a_failure(tmp_path):
    aborted = MLPERF_SCRIPT.replace('status="success"', 'status="aborted"')
    record = run_command(tmp_path, argv=[sys.executable, script(tmp_path, "aborted.py", aborted)])
    assert record.status == "failed" and "aborted" in record.reason


@pytest.mark.parametrize("params, fragment", [
    ({}, "'argv' is required"),
    ({"argv": ["a", "b"], "shell": True}, "one string"),
    ({"argv": ["x"], "throughput_regex": "("}, "not a valid regular expression"),
    ({"argv": ["x"], "env": ["NOEQUALS"]}, "KEY=VALUE"),
])
def test_bad_command_parameters(params, fragment):
    with pytest.raises(ParamError, match=fragment):
        registry.get("command").cases(params, "cpu")


LOWER, HIGHER = "lower_is_better", "higher_is_better"


@pytest.mark.parametrize("fixture, params, expected", [
    ("mlperf_v4_llama2_70b_lora.txt", {}, {("eval_loss", LOWER): 0.9241}),
    ("mlperf_v3_rnnt.txt", {}, {("WER", LOWER): 0.0575}),
    ("mlperf_v4_stable_diffusion.txt", {}, {("FID", LOWER): 85.67, ("CLIP", HIGHER): 0.1702}),
    ("mlperf_v3_maskrcnn.txt", {}, {("BBOX", HIGHER): 0.3781, ("SEGM", HIGHER): 0.3412}),
    ("mlperf_v06_mask.txt", {}, {("BBOX", HIGHER): 0.3783, ("SEGM", HIGHER): 0.3422}),
    ("mlperf_v05_resnet.txt", {}, {("top1_accuracy", HIGHER): 0.7495}),
])
def test_mlperf_final_quality_named_with_its_direction(tmp_path, fixture, params, expected):
    record = run_command(tmp_path, **cat(fixture, **params))
    assert record.status == "ok", record.reason
    assert quality(record) == expected
    # a loss, WER, FID or CLIP score, or two mAPs, is not "the" accuracy ratio
    assert "accuracy" not in record.figures or expected == {("top1_accuracy", HIGHER): 0.7495}
    assert record.details["quality"][0]["final"] == next(iter(expected.values()))


def test_mlperf_lower_is_better_reports_the_final_value_not_the_maximum(tmp_path):
    record = run_command(tmp_path, **cat("mlperf_v4_llama2_70b_lora.txt"))
    [loss] = record.details["quality"]
    assert (loss["metric"], loss["direction"], loss["final"], max(loss["values"])) == (
        "eval_loss", LOWER, 0.9241, 0.9412)
    assert "accuracy" not in record.figures and "no higher-is-better ratio" in record.details["accuracy_note"]
    assert record.figures["time_to_train_seconds"] == pytest.approx(1170.0)
    assert record.figures["samples_per_second"] == pytest.approx((1.9574 + 1.9551 + 1.9533) / 3)  # DeepSpark


def test_resnet_duplicate_throughputs_warmup_and_late_evaluation(tmp_path):
    record = run_command(tmp_path, **cat("mlperf_v4_resnet.txt"))
    assert record.status == "ok", record.reason
    assert record.figures["accuracy"] == 0.7602  # not the 0.7655 logged after run_stop
    assert record.details["evaluations_after_run_stop"] == 1  # but the details say it was there
    assert quality(record) == {("top1_accuracy", HIGHER): 0.7602}
    assert len(record.details["throughputs"]) == 6  # throughput + tracked_stats at each epoch: counted once
    assert record.figures["samples_per_second"] == pytest.approx((36160.6 + 36185.1 + 36081.0 + 36175.5) / 4)
    warm = run_command(tmp_path, **cat("mlperf_v4_resnet.txt", warmup_throughputs=1))
    assert warm.details["warmup_skipped"] == 1
    assert warm.figures["samples_per_second"] == pytest.approx((36160.6 + 36185.1 + 36175.5) / 3)  # 5 steady ones


def test_stable_diffusion_metrics_are_exported_apart(tmp_path):
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from sixdim.http.exporter import SixdimCollector

    board = Board()
    record = run_command(tmp_path, board=board, **cat("mlperf_v4_stable_diffusion.txt"))
    assert record.status == "ok", record.reason
    registry_ = CollectorRegistry()
    registry_.register(SixdimCollector(board, [], "h"))
    families = text_string_to_metric_families(generate_latest(registry_).decode())
    exported = {(s.name, s.labels.get("metric"), s.labels.get("direction")): s.value
                for family in families for s in family.samples if s.labels.get("workload") == "command"}
    assert exported[("sixdim_workload_quality", "FID", LOWER)] == 85.67
    assert exported[("sixdim_workload_quality", "CLIP", HIGHER)] == 0.1702
    assert exported[("sixdim_workload_time_to_train_seconds", None, None)] == pytest.approx(21.6)
    assert not any(name == "sixdim_workload_accuracy" for name, _, _ in exported)


@pytest.mark.parametrize("fixture, fragment", [
    ("mlperf_no_run_stop.txt", "never reached run_stop"),
    ("mlperf_aborted.txt", "run_stop with status 'aborted'"),
    ("mlperf_inference_offline_invalid.txt", "INVALID: minimum duration not met"),
])
def test_unfinished_aborted_and_invalid_runs_are_not_ok(tmp_path, fixture, fragment):
    record = run_command(tmp_path, **cat(fixture))
    assert record.status == "failed" and fragment in record.reason, record.reason
    assert record.figures == {} and record.details["unreported_figures"]  # kept for diagnosis, not exported


def test_mlperf_inference_valid_server_log(tmp_path):
    record = run_command(tmp_path, **cat("mlperf_inference_server_valid.txt"))
    assert record.status == "ok", record.reason
    assert record.figures["samples_per_second"] == 72975.9  # completed, not scheduled
    assert record.figures["latency_p50_seconds"] == pytest.approx(0.007877682)
    assert record.figures["latency_p99_seconds"] == pytest.approx(0.010033457)
    assert record.details["latencies_seconds"]["p99.9"] == pytest.approx(0.010828357)
    assert record.details["mlperf_inference"]["scenario"] == "Server"
    assert not quality(record) and "accuracy" not in record.figures


def test_ai_rank_fixture(tmp_path):
    record = run_command(tmp_path, **cat("ai_rank.txt"))
    assert record.status == "ok", record.reason
    assert record.figures["accuracy"] == 0.7651200294494629  # the last evaluation
    assert quality(record) == {("accuracy", HIGHER): 0.7651200294494629}
    assert record.figures["time_to_train_seconds"] == 208.03 and record.figures["seconds"] == 312.03
    assert record.figures["samples_per_second"] == pytest.approx((7633.9 + 7652.2 + 7648.0 + 7641.1) / 4)


def test_hf_trainer_eval_loss_by_regex(tmp_path):
    record = run_command(tmp_path, **cat("hf_trainer.txt", formats=[], accuracy_regex=r"'eval_loss': ([\d.]+)",
                                         throughput_regex=r"'train_samples_per_second': ([\d.]+)",
                                         quality_metric="eval_loss", higher_is_better=False))
    assert record.status == "ok", record.reason
    assert quality(record) == {("eval_loss", LOWER): 0.4714}  # final: not the best (0.4553), not the worst (0.6121)
    assert record.details["quality"][0]["best"] == 0.4553
    assert "accuracy" not in record.figures
    assert record.figures["samples_per_second"] == 48.21


def test_percent_accuracy_becomes_a_ratio_and_warmup_is_skipped(tmp_path):
    record = run_command(tmp_path, **cat("torchvision_percent.txt", formats=[], accuracy_regex=r"Acc@1 ([\d.]+)",
                                         throughput_regex=r"img/s: ([\d.]+)", quality_metric="top1",
                                         warmup_throughputs=1))
    assert record.status == "ok", record.reason
    assert record.figures["accuracy"] == pytest.approx(0.41554)
    assert quality(record) == {("top1", HIGHER): pytest.approx(0.41554)}
    assert record.details["quality"][0]["scale"] == "percent (values up to 100, divided by 100)"
    assert record.figures["samples_per_second"] == pytest.approx((1187.21 + 1190.54 + 1191.02) / 3)
    score = run_command(tmp_path, **cat("torchvision_percent.txt", formats=[], accuracy_regex=r"Acc@1 ([\d.]+)",
                                        quality_metric="top1", accuracy_unit="score"))
    assert quality(score) == {("top1", HIGHER): 41.554} and "accuracy" not in score.figures


def test_a_log_nothing_parses_is_a_failure_that_says_what_was_tried(tmp_path):
    record = run_command(tmp_path, **cat("unparseable.txt"))
    assert record.status == "failed"
    # a Keras run without validation: its lines are recognised, and the reason says how to read its quality
    assert "3 of 7 output lines were recognised (keras: 3)" in record.reason and "validation_data" in record.reason
    assert "AI-Rank" in record.reason and ":::MLLOG" in record.reason
    assert record.figures == {} and "unreported_figures" not in record.details  # no figure, not a 0
    assert record.details["output_lines"] == 7 and record.details["wall_seconds"] > 0
    regex = run_command(tmp_path, **cat("unparseable.txt", formats=[], throughput_regex=r"(\d+) img/s"))
    assert regex.status == "failed" and "throughput_regex '(\\\\d+) img/s'" in regex.reason


def test_a_command_that_prints_nothing_has_no_figures(tmp_path):
    record = run_command(tmp_path, argv=[sys.executable, "-c", "pass"])
    assert record.status == "failed" and "printed nothing" in record.reason
    assert record.figures == {}


def test_odd_values_are_ignored_with_warnings_never_exported(tmp_path):
    record = run_command(tmp_path, **cat("odd_values.txt"))
    assert record.status == "ok", record.reason
    assert record.figures["samples_per_second"] == 1250.0
    assert quality(record) == {("top1_accuracy", HIGHER): 0.7612}
    assert all(math.isfinite(v) and not isinstance(v, bool) for v in record.figures.values())
    warnings = "\n".join(record.details["warnings"])
    assert "nan is not finite" in warnings and "True is a boolean" in warnings and "-1200 is negative" in warnings


def test_deep_json_and_an_empty_regex_group_do_not_crash_the_case(tmp_path):
    body = """
        print(':::MLLOG {"key": "eval_accuracy", "value": ' + '[' * 20000 + ']' * 20000 + ', "time_ms": 1}')
        print('speed img/s')
        print('speed 300 img/s')
    """
    record = run_command(tmp_path, argv=[sys.executable, script(tmp_path, "odd.py", body)],
                         throughput_regex=r"speed(?: (\d+))? img/s")
    assert record.status == "ok", record.reason
    assert record.figures["samples_per_second"] == 300.0
    warnings = "\n".join(record.details["warnings"])
    assert "nested too deeply" in warnings and "first group matched nothing" in warnings


LOSS_SCRIPT = """
    import time
    for epoch, loss in enumerate([0.91, 0.62, 0.48, 0.51, 0.44]):
        print(f"epoch {epoch} eval_loss={loss}", flush=True)
        time.sleep(0.15)
"""


@pytest.mark.slow
def test_target_honours_a_lower_is_better_metric(tmp_path):
    record = run_command(tmp_path, argv=[sys.executable, script(tmp_path, "loss.py", LOSS_SCRIPT)], formats=[],
                         accuracy_regex=r"eval_loss=([\d.]+)", quality_metric="eval_loss", higher_is_better=False,
                         target_accuracy=0.5)
    assert record.status == "ok", record.reason
    assert quality(record) == {("eval_loss", LOWER): 0.44}
    # 0.48 <= 0.5 is printed after two sleeps of 0.15 s; with the wrong direction 0.91 would meet it at once
    assert 0.25 < record.figures["time_to_train_seconds"] < record.details["wall_seconds"]
    assert "first met 0.5 (lower_is_better)" in record.details["time_to_train_rule"]


@pytest.mark.parametrize("params, fragment", [
    ({"argv": ["x"], "target_accuracy": "nan"}, "finite"),
    ({"argv": ["x"], "target_accuracy": 75.9, "accuracy_unit": "percent"}, "as a ratio"),
    ({"argv": ["x"], "accuracy_unit": "fraction"}, "'auto', 'ratio', 'percent', 'score'"),
    ({"argv": ["x"], "quality_metric": " "}, "expected a name"),
    ({"argv": ["x"], "warmup_throughputs": -1}, ">= 0"),
    ({"argv": ["x"], "formats": []}, "nothing to read"),
])
def test_bad_quality_parameters(params, fragment):
    with pytest.raises(ParamError, match=fragment):
        registry.get("command").cases(params, "cpu")


def test_invalid_inference_quotes_the_loadgen_error(tmp_path):
    body = """
        import json
        def log(key, value, error=False):
            print(":::MLLOG " + json.dumps({"key": key, "value": value, "time_ms": 1.0, "namespace": "mlperf::logging",
                  "event_type": "POINT_IN_TIME", "metadata": {"is_error": error, "is_warning": False}}))
        log("effective_scenario", "SingleStream")
        log("error_invalid_test_settings", "min_query_count must be > 0", error=True)
        log("result_validity", "INVALID")
        log("result_90.00_percentile_latency_ns", 1520000)
    """
    record = run_command(tmp_path, argv=[sys.executable, script(tmp_path, "loadgen.py", body)])
    assert record.status == "failed"
    assert record.reason == ("the MLPerf Inference result is INVALID; loadgen error: "
                             "error_invalid_test_settings: min_query_count must be > 0")
    assert record.details["unreported_figures"]["seconds"] > 0


@pytest.mark.slow
def test_a_command_printing_a_huge_line_without_newline_is_read_with_bounded_memory(tmp_path):
    body = """
        import sys
        sys.stdout.write("x" * (200 * 2**20))   # 200 MiB, no newline
        sys.stdout.flush()
        print()
        print("speed 300 img/s")
    """
    record = run_command(tmp_path, argv=[sys.executable, script(tmp_path, "flood.py", body)],
                         throughput_regex=r"speed (\d+) img/s")
    assert record.status == "ok", record.reason
    assert record.figures["samples_per_second"] == 300.0
    assert record.details["output_lines"] == 2  # the huge line, cut, and the speed line
