"""Training-log parsers on real formats: each fixture is a small excerpt in the shape of a published
log (MLPerf Training v0.5 to v4.0, MLPerf Inference, AI-Rank, HuggingFace Trainer, torchvision),
and each check is on the exact figure: the final value, its direction, its name."""

import json
from pathlib import Path

import pytest

from sixdim.workloads.logs.airank import parse_ai_rank
from sixdim.workloads.logs.mlperf import parse_mlperf
from sixdim.workloads.logs.model import HIGHER_IS_BETTER, LOWER_IS_BETTER, MLPERF_BENCHMARKS, Metric
from sixdim.workloads.logs.parsers import make_parsers, parse_lines, read_line
from sixdim.workloads.logs.training_log import TrainingLog
from sixdim.workloads.logs.user_regex import RegexParser

LOGS = Path(__file__).parent / "fixtures" / "logs"


def parse(name, *, formats=("ai_rank", "mlperf"), throughput_regex="", accuracy_regex="", metric=None):
    log = TrainingLog(user_metric=metric or Metric("accuracy"))
    return parse_lines((LOGS / name).read_text().splitlines(), make_parsers(formats, throughput_regex, accuracy_regex),
                       log)


def by_name(log):
    return {q.metric.name: q for q in log.qualities()}


def test_llama2_lora_eval_loss_is_lower_is_better_and_final():
    log = parse("mlperf_v4_llama2_70b_lora.txt")
    [loss] = log.qualities()
    assert (loss.metric.name, loss.metric.direction, loss.metric.unit) == ("eval_loss", LOWER_IS_BETTER, "score")
    assert loss.values == [0.9412, 0.9351, 0.9298, 0.9264, 0.9241]
    assert loss.final == 0.9241 and loss.best == 0.9241  # the maximum (0.9412) is the worst evaluation
    assert log.status == "success" and log.time_to_train == pytest.approx(1170.0)
    assert log.throughputs == [1.9512, 1.9574, 1.9603, 1.9551, 1.9533]


def test_rnnt_word_error_rate_is_a_lower_is_better_ratio():
    [wer] = parse("mlperf_v3_rnnt.txt").qualities()
    assert (wer.metric.name, wer.metric.direction, wer.metric.unit) == ("WER", LOWER_IS_BETTER, "ratio")
    assert wer.final == 0.0575 and wer.best == 0.0575 and max(wer.values) == 0.2541


def test_stable_diffusion_keeps_fid_and_clip_apart():
    log = parse("mlperf_v4_stable_diffusion.txt")
    metrics = by_name(log)
    assert list(metrics) == ["FID", "CLIP"]
    assert metrics["FID"].values == [108.21, 92.43, 85.67] and metrics["FID"].metric.direction == LOWER_IS_BETTER
    assert metrics["CLIP"].values == [0.1472, 0.1631, 0.1702] and metrics["CLIP"].metric.direction == HIGHER_IS_BETTER
    # offline evaluations carry later timestamps than run_stop, which is logged last: the order of lines counts
    assert log.after_stop == 0
    assert log.time_to_train == pytest.approx(21.6)


def test_mask_rcnn_dict_values_are_two_named_metrics():
    metrics = by_name(parse("mlperf_v3_maskrcnn.txt"))
    assert {name: (q.final, q.metric.direction, q.metric.unit) for name, q in metrics.items()} == {
        "BBOX": (0.3781, HIGHER_IS_BETTER, "ratio"), "SEGM": (0.3412, HIGHER_IS_BETTER, "ratio")}
    assert len(metrics["BBOX"].values) == 4


def test_resnet_throughput_logged_twice_counts_once_and_late_evaluation_is_ignored():
    log = parse("mlperf_v4_resnet.txt")
    assert log.throughputs == [30112.4, 36160.6, 36185.1, 36081.0, 36175.5, 36263.6]  # 12 records, 6 readings
    [top1] = log.qualities()
    assert (top1.metric.name, top1.final, top1.values) == ("top1_accuracy", 0.7602, [0.6908, 0.7288, 0.7602])
    assert log.after_stop == 1  # the 0.7655 logged after run_stop is not the run's result


def test_same_throughput_without_a_step_or_time_is_not_a_duplicate():
    log = parse_lines(["speed 200 img/s", "speed 200 img/s"], [RegexParser(r"speed (\d+)")])
    assert log.throughputs == [200.0, 200.0]


def test_run_without_run_stop_and_aborted_run():
    cut = parse("mlperf_no_run_stop.txt")
    assert cut.started and not cut.stopped and cut.time_to_train is None
    aborted = parse("mlperf_aborted.txt")
    assert aborted.stopped and aborted.status == "aborted" and aborted.time_to_train is None
    assert aborted.total_time == pytest.approx(180.0)


def test_mlperf_v06_mll_lines_with_list_values():
    log = parse("mlperf_v06_mask.txt")
    assert log.benchmark == "mask" and log.status == "success"
    assert {n: q.final for n, q in by_name(log).items()} == {"BBOX": 0.3783, "SEGM": 0.3422}
    assert log.time_to_train == pytest.approx(1558512670.065 - 1558511260.864)


def test_mlperf_v05_lines():
    log = parse("mlperf_v05_resnet.txt")
    assert log.benchmark == "resnet" and log.status == "success"
    [top1] = log.qualities()
    assert top1.final == 0.7495 and top1.values[0] == 0.3817
    assert log.time_to_train == pytest.approx(3513.5)
    assert not log.warnings  # hyperparameters in free text are not figures and cost no warning


def test_mlperf_inference_server_detail_log():
    log = parse("mlperf_inference_server_valid.txt")
    info = log.inference
    assert info["validity"] == "VALID" and info["scenario"] == "Server" and info["test_mode"] == "PerformanceOnly"
    assert info["rates"] == {"result_scheduled_samples_per_sec": 72976.9, "result_completed_samples_per_sec": 72975.9}
    assert log.latencies == pytest.approx({"mean": 0.007873709, "p50": 0.007877682, "p90": 0.009287551,
                                           "p99": 0.010033457, "p99.9": 0.010828357})
    assert not log.started and not log.qualities()


def test_mlperf_inference_invalid_offline_log():
    info = parse("mlperf_inference_offline_invalid.txt").inference
    assert info["validity"] == "INVALID" and info["rates"] == {"result_samples_per_second": 88123.4}
    assert info["checks"]["result_min_duration_met"] is False


def test_mlperf_inference_what_ran_wins_over_what_was_asked_whatever_the_order():
    """loadgen logs requested_* first, effective_* after: a run asked for one mode but run in
    another (a submission config overriding the command line) is what it ran."""
    line = ':::MLLOG {{"key": "{key}", "value": "{value}", "time_ms": 0.03, "metadata": {{}}}}'
    for order in ((("requested_test_mode", "PerformanceOnly"), ("effective_test_mode", "AccuracyOnly")),
                  (("effective_test_mode", "AccuracyOnly"), ("requested_test_mode", "PerformanceOnly"))):
        log = parse_lines([line.format(key=k, value=v) for k, v in order], make_parsers(("mlperf",), "", ""))
        assert log.inference["test_mode"] == "AccuracyOnly"
    log = parse_lines([line.format(key="requested_scenario", value="Server")], make_parsers(("mlperf",), "", ""))
    assert log.inference["scenario"] == "Server"  # with nothing effective logged, the request stands


def test_an_mllog_line_cut_short_is_a_warning_and_an_ignored_line():
    whole = ':::MLLOG {"key": "eval_accuracy", "value": 0.75, "time_ms": 1000, "metadata": {"epoch_num": 1}}'
    log = parse_lines([whole, whole[:40]], make_parsers(("mlperf",), "", ""))
    assert log.ignored_lines == 1
    assert log.warnings == ["MLPerf line: its JSON is cut short (no closing brace): ignored"]
    assert log.qualities()[0].values == [0.75]


def test_ai_rank_final_accuracy_times_and_rates():
    log = parse("ai_rank.txt")
    [accuracy] = log.qualities()
    assert (accuracy.metric.name, accuracy.final, accuracy.metric.unit) == ("accuracy", 0.7651200294494629, "ratio")
    assert log.time_to_train == 208.03 and log.total_time == 312.03 and log.average_throughput == 7542.9
    assert log.throughputs == [7021.4, 7633.9, 7652.2, 7648.0, 7660.5, 7641.1]
    assert log.events == ["load_data", "test_begin", "test_finish"]


def test_ai_rank_units_and_bullets():
    log = TrainingLog()
    assert parse_ai_rank("- AI-Rank-log 1558631918.455 avg_ips:1190images/sec", log)
    assert log.average_throughput == 1190.0
    assert parse_ai_rank("AI-Rank-log 1558631918.455 target_quality_time:1500ms", log)
    assert log.time_to_train == 1.5
    assert parse_ai_rank("AI-Rank-log 1558631918.455 total_use_time:2.5min", log)
    assert log.total_time == 150.0
    assert not parse_ai_rank("an ordinary line", log)


def test_hf_trainer_eval_loss_by_regex_is_final_not_best_nor_worst():
    log = parse("hf_trainer.txt", formats=(), throughput_regex=r"'train_samples_per_second': ([\d.]+)",
                accuracy_regex=r"'eval_loss': ([\d.]+)", metric=Metric("eval_loss", higher_is_better=False))
    [loss] = log.qualities()
    assert loss.values == [0.6121, 0.4882, 0.4553, 0.4714]
    assert (loss.final, loss.best, loss.metric.direction, loss.metric.unit) == (
        0.4714, 0.4553, LOWER_IS_BETTER, "score")
    assert log.throughputs == [48.21]


@pytest.mark.parametrize("lines, unit, higher, values, scale", [
    (["Acc@1 24.862", "Acc@1 41.554"], "auto", True, [0.24862, 0.41554], "percent (values up to 100, divided by 100)"),
    (["Acc@1 0.24", "Acc@1 0.41"], "auto", True, [0.24, 0.41], "ratio (all values within [0, 1])"),
    (["Acc@1 24.8%", "Acc@1 41.5 %"], "auto", True, [0.248, 0.415], "percent (divided by 100)"),
    (["Acc@1 0.5", "Acc@1 41.5%"], "auto", True, [0.5, 0.415], "ratio"),
    (["Acc@1 24.862", "Acc@1 41.554"], "percent", True, [0.24862, 0.41554], "percent (divided by 100)"),
    (["Acc@1 0.24", "Acc@1 0.41"], "percent", True, [0.0024, 0.0041], "percent (divided by 100)"),
    (["Acc@1 23.1", "Acc@1 25.6"], "score", True, [23.1, 25.6], "score (as logged)"),  # BLEU: not a percentage
    (["Acc@1 2.91", "Acc@1 2.68"], "auto", False, [2.91, 2.68], "score (as logged)"),  # perplexity
    (["Acc@1 140", "Acc@1 150"], "auto", True, [140.0, 150.0], "score (as logged)"),
])
def test_percent_rule(lines, unit, higher, values, scale):
    log = parse_lines(lines, [RegexParser(accuracy=r"Acc@1 ([\d.]+)")],
                      TrainingLog(user_metric=Metric("top1", higher, unit)))
    [top1] = log.qualities()
    assert top1.values == pytest.approx(values) and top1.scale == scale
    assert top1.metric.unit == ("score" if "score" in scale else "ratio")


def test_a_ratio_above_one_is_dropped_with_a_warning():
    log = parse_lines(["Acc@1 0.74", "Acc@1 76.1"], [RegexParser(accuracy=r"Acc@1 ([\d.]+)")],
                      TrainingLog(user_metric=Metric("top1", True, "ratio")))
    [top1] = log.qualities()
    assert top1.values == [0.74] and "above 1 for a ratio" in log.warnings[0]


def test_torchvision_percent_accuracy_and_rates():
    log = parse("torchvision_percent.txt", formats=(), throughput_regex=r"img/s: ([\d.]+)",
                accuracy_regex=r"Acc@1 ([\d.]+)")
    [top1] = log.qualities()
    assert top1.final == pytest.approx(0.41554) and top1.metric.unit == "ratio"
    assert log.throughputs == [412.35, 1187.21, 1190.54, 1191.02]


def test_nothing_parses_a_foreign_log():
    log = parse("unparseable.txt")
    assert not log.has_figures() and not log.recognised


def test_non_finite_boolean_and_negative_figures_are_ignored_with_warnings():
    log = parse("odd_values.txt")
    assert log.throughputs == [1250.0]  # NaN, Infinity, true, -1200 and "fast" ignored
    [top1] = log.qualities()
    assert top1.values == [0.7612]  # true and NaN ignored; a metadata that is not an object does not matter
    text = "\n".join(log.warnings)
    for fragment in ("nan is not finite", "inf is not finite", "True is a boolean", "-1200 is negative",
                     "'fast' is not a number", "metadata is not an object", "AI-Rank ips: nan is not finite",
                     "AI-Rank eval_accuracy: True is a boolean"):
        assert fragment in text, fragment
    assert log.status == "success"


def test_deeply_nested_json_does_not_crash():
    deep = "[" * 100_000 + "]" * 100_000
    log = TrainingLog()
    for line in (':::MLLOG {"key": "eval_accuracy", "value": ' + deep + ', "time_ms": 1}',
                 ":::MLL 1.0 eval_accuracy: " + deep, ":::MLPv0.5.0 resnet 1.0 (a.py:1) eval_accuracy: " + deep):
        read_line(line, [parse_mlperf], log)
    assert not log.series and any("nested too deeply" in w for w in log.warnings)


def test_regex_whose_group_did_not_take_part():
    log = parse_lines(["speed img/s", "speed 300 img/s"], [RegexParser(r"speed(?: (\d+))? img/s")])
    assert log.throughputs == [300.0]
    assert "first group matched nothing" in log.warnings[0]


def test_a_failing_parser_costs_a_warning_not_the_run():
    def broken(line, log):
        raise KeyError("boom")

    log = parse_lines(["a line"], [broken, RegexParser(r"(\d+)")])
    assert "KeyError" in log.warnings[0]


def test_warnings_are_bounded():
    log = parse_lines([f"speed -{i} img/s" for i in range(1, 100)], [RegexParser(r"speed (-\d+)")])
    assert len(log.all_warnings()) == 21 and log.all_warnings()[-1] == "... and 79 more warnings"


def test_every_mlperf_benchmark_has_a_direction():
    lower = {name for name, metrics in MLPERF_BENCHMARKS.items() if all(not m.higher_is_better for m in metrics)}
    assert lower == {"rnnt", "gpt3", "llama2_70b_lora", "llama31_405b", "llama31_8b", "flux1", "gpt_oss_20b",
                     "deepseekv3_671b"}
    assert [(m.name, m.higher_is_better) for m in MLPERF_BENCHMARKS["stable_diffusion"]] == [
        ("FID", False), ("CLIP", True)]
    for name in ("resnet", "bert", "ssd", "retinanet", "maskrcnn", "unet3d", "dlrm", "dlrm_dcnv2", "gnn", "rgat",
                 "minigo", "transformer", "gnmt", "ncf"):
        assert all(m.higher_is_better for m in MLPERF_BENCHMARKS[name]), name


def test_unknown_benchmark_uses_the_users_metric():
    line = ':::MLLOG {"key": "eval_accuracy", "value": 2.31, "time_ms": 5, "metadata": {"epoch_num": 1}}'
    log = parse_lines([line], [parse_mlperf], TrainingLog(user_metric=Metric("perplexity", False)))
    [quality] = log.qualities()
    assert (quality.metric.name, quality.metric.direction, quality.final) == ("perplexity", LOWER_IS_BETTER, 2.31)


def _mllog(key, value=None, time_ms=0, **metadata):
    return ":::MLLOG " + json.dumps({"key": key, "value": value, "time_ms": time_ms, "metadata": metadata})


def test_each_run_reports_its_own_speed_and_a_later_unfinished_run_is_not_reported():
    lines = [_mllog("submission_benchmark", "resnet"), _mllog("run_start", time_ms=0),
             _mllog("throughput", 100.0, 10, epoch_num=1), _mllog("eval_accuracy", 0.70, 20, epoch_num=1),
             _mllog("run_stop", time_ms=30, status="aborted"),
             _mllog("run_start", time_ms=100), _mllog("throughput", 200.0, 110, epoch_num=1),
             _mllog("throughput", 210.0, 120, epoch_num=2), _mllog("eval_accuracy", 0.76, 130, epoch_num=2),
             _mllog("run_stop", time_ms=1100, status="success"),
             _mllog("init_start", time_ms=2000), _mllog("run_start", time_ms=2100),
             _mllog("throughput", 300.0, 2110, epoch_num=1), _mllog("eval_accuracy", 0.50, 2120, epoch_num=1)]
    log = parse_lines(lines, make_parsers(("mlperf",), "", ""))
    assert log.throughputs == [200.0, 210.0] and log.status == "success" and log.time_to_train == pytest.approx(1.0)
    assert [q.values for q in log.qualities()] == [[0.76]]
    assert log.details["mlperf_runs"] == 3 and log.details["mlperf_reported_run"] == 2
    assert log.details["mlperf_runs_not_reported"] == [
        "run 1: run_stop status 'aborted', 0.0 s, final top1_accuracy 0.7",
        "run 3: no run_stop (the last record: eval_accuracy (epoch_num 1) 0.0 s after run_start), "
        "final top1_accuracy 0.5"]
    assert log.run_failure() is None  # a run finished: the output is that run's


def test_a_second_different_run_stop_is_noted_and_the_first_stands():
    lines = [_mllog("submission_benchmark", "resnet"), _mllog("run_start", time_ms=0),
             _mllog("eval_accuracy", 0.76, 500, epoch_num=1), _mllog("run_stop", time_ms=1000, status="success"),
             _mllog("run_stop", time_ms=1000, status="success"), _mllog("run_stop", time_ms=9000, status="aborted")]
    log = parse_lines(lines, make_parsers(("mlperf",), "", ""))
    assert log.status == "success" and log.time_to_train == pytest.approx(1.0)
    assert log.details["mlperf_run_stop_lines"] == 2  # the same line again is no second line
    assert "its first ends it (status 'success'); the others are ignored (status 'aborted' at 9.0 s)" in \
        "\n".join(log.warnings)
