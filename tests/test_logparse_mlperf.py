"""MLPerf Training logs as MLCommons published them: excerpts of real result files (the lines that
matter, unchanged; tests/fixtures/logs/mlperf_real/README.md names each source) for every way the
parser once read them wrong: the benchmark named after its evaluations, v0.6's value forms, several
runs or run_stop lines in one output, the quality target, a replayed log's own clock, and the smaller
ones (an RNN-T WER above 1, lines printed twice, ``success: false``, a log cut before its results)."""

import json
from pathlib import Path

import pytest

from sixdim.collectors.nvml import NvmlCollector
from sixdim.run.devices import cpu_device
from sixdim.run.executor import Executor
from sixdim.store.history import History
from sixdim.workloads import registry
from sixdim.workloads.logs import mlperf_targets
from sixdim.workloads.logs.model import HIGHER_IS_BETTER, LOG_CLOCK, LOWER_IS_BETTER, Metric
from sixdim.workloads.logs.parsers import FORMATS, describe_formats, make_parsers, parse_lines, read_line
from sixdim.workloads.logs.training_log import TrainingLog
from tests.bench.training_logs_survey import survey

REAL = Path(__file__).parent / "fixtures" / "logs" / "mlperf_real"


def parse(name, log=None):
    return parse_lines((REAL / name).read_text().splitlines(), make_parsers(("mlperf",)), log or TrainingLog())


def by_name(log):
    return {q.metric.name: q for q in log.qualities()}


# --- 1. The benchmark is decided from the whole log ----------------------------------------------

@pytest.mark.parametrize("name, metric, final", [
    ("v1.0_google_bert_benchmark_last.txt", "mlm_accuracy", 0.7203918695449829),  # Google's v1.0 logs
    ("v1.0_nvidia_dlrm_benchmark_last.txt", "AUC", 0.802689),                       # NVIDIA's HugeCTR, v1.0
])
def test_evaluations_before_a_late_submission_benchmark_get_its_metric(name, metric, final):
    log = parse(name)
    [quality] = log.qualities()
    assert (quality.metric.name, quality.metric.direction, quality.metric.unit) == (metric, HIGHER_IS_BETTER, "ratio")
    assert quality.final == final and log.details["target_reached"] is True


def test_a_lower_is_better_benchmark_named_last_is_not_read_as_a_percent():
    """GPT-3's log perplexity (2.74 falling to 2.689): read before the benchmark was known, it was an
    "accuracy" in percent, 0.0269, higher-is-better."""
    log = parse("v3.0_habana_gpt3_benchmark_moved_last.txt")
    [loss] = log.qualities()
    assert (loss.metric.name, loss.metric.direction, loss.metric.unit) == ("log_perplexity", LOWER_IS_BETTER, "score")
    assert loss.values[0] == 2.745764970779419 and loss.final == 2.6892430782318115 and loss.best == loss.final
    assert log.details["mlperf_target"] == "log_perplexity <= 2.69 (MLPerf v3.0–v4.1)"
    assert log.time_to_train == pytest.approx(26554.681)


# --- 2. v0.6's value forms -----------------------------------------------------------------------

def test_v06_values_written_as_strings_are_read():
    log = parse("v0.6_nvidia_transformer_string_values.txt")
    [bleu] = log.qualities()
    assert bleu.metric.name == "BLEU" and bleu.metric.unit == "score"
    assert bleu.values == [1.9488001242280006, 17.901240289211273, 22.681906819343567, 24.981589615345,
                           26.125600934028625]
    assert not log.warnings and log.details["target_reached"] is True  # 26.13 >= 25.0 BLEU


def test_v06_nested_dict_values_are_read():
    log = parse("v0.6_nvidia_maskrcnn_nested_values.txt")
    metrics = by_name(log)
    assert {n: q.final for n, q in metrics.items()} == {"BBOX": 0.3783183609834513, "SEGM": 0.34322868041279486}
    assert len(metrics["BBOX"].values) == 4 and not log.warnings
    assert log.details["mlperf_target"] == "BBOX >= 0.377 and SEGM >= 0.339 (MLPerf v0.6)"


def test_v06_python_dict_metadata_is_read_as_a_literal_never_evaluated():
    """Intel's v0.6 MiniGo writes ``{"value": null, "metadata": {'lineno': 615, ...}}``: not JSON, so
    every record was dropped, and the run, which says ``'status': 'success'``, had nothing to show."""
    log = parse("v0.6_intel_minigo_python_metadata.txt")
    [win] = log.qualities()
    assert (win.metric.name, win.final) == ("win_rate", 0.51)
    assert log.status == "success" and log.run_failure() is None and not log.warnings
    assert log.time_to_train == pytest.approx(1560875622.040346 - 1560873710.141025)
    # a literal, not code: a call in that place is not run, only refused
    unsafe = TrainingLog()
    read_line(":::MLL 1.0 run_stop: {\"value\": null, \"metadata\": {'status': __import__('os').getcwd()}}",
              make_parsers(("mlperf",)), unsafe)
    assert not unsafe.stopped and "not valid JSON" in unsafe.warnings[0]


# --- 3. Runs: one run_start ... run_stop ---------------------------------------------------------

def test_two_runs_in_one_output_report_the_last_finished_run_alone():
    """A retried job's output: Inspur's v1.0 BERT result_1 (aborted at 0.7193, below 0.720), then its
    result_2 (success).  The time and status were the second run's and the accuracy the first's."""
    log = parse("v1.0_inspur_bert_two_runs.txt")
    [mlm] = log.qualities()
    assert mlm.values == [0.37283968925476074, 0.39011290669441223, 0.7199364900588989, 0.7204408645629883]
    assert log.status == "success" and log.time_to_train == pytest.approx(1308.078)
    assert log.total_time == pytest.approx(1308.078)
    assert log.details["mlperf_runs"] == 2 and log.details["mlperf_reported_run"] == 2
    assert log.details["mlperf_runs_not_reported"] == [
        "run 1: run_stop status 'aborted', 1463.8 s, final mlm_accuracy 0.719311"]
    assert any("run 2, the last that finished, is reported" in w for w in log.warnings)


def test_a_log_printed_twice_is_one_run_with_each_reading_once():
    """NVIDIA's v0.5 MXNet ResNet prints every record twice (a bare line and a logger's), run_start and
    run_stop included: one run, one run_stop, four evaluations, not eight."""
    log = parse("v0.5_nvidia_resnet_lines_twice.txt")
    [top1] = log.qualities()
    assert top1.values == [0.2777, 0.35834, 0.64624, 0.7518]
    assert log.details["mlperf_runs"] == 1 and "mlperf_run_stop_lines" not in log.details and not log.warnings
    assert log.time_to_train == pytest.approx(1541674521.869611263 - 1541670088.967105627)


def test_a_repeat_of_an_earlier_evaluation_before_run_stop_is_the_final_one():
    """Google's v4.1 Stable Diffusion (TPU v5p-128) logs its checkpoints' FID and CLIP (step 2500, then
    3000), then, just before run_stop, the step-2500 readings again: the checkpoint that met the target
    and that the run ended with.  The FID repeat, equal to the digit, was dropped as a twin line, so the
    step-3000 FID (74.306) was reported; the CLIP repeat differs in its last digit and was kept."""
    log = parse("v4.1_google_stable_diffusion_repeat_before_run_stop.txt")
    fid, clip = by_name(log)["FID"], by_name(log)["CLIP"]
    assert fid.final == 79.13180061905945 and clip.final == 0.1864572456106543
    assert fid.values == [79.13180061905945, 74.30606783778421, 79.13180061905945]
    assert fid.steps == clip.steps == [2560000, 3072000, 2560000]  # samples_count
    assert log.details["target_reached"] is True and log.time_to_train == pytest.approx(511.219)


# --- 4. The quality target ----------------------------------------------------------------------

def test_a_run_that_missed_its_target_has_no_time_to_train():
    """Intel's v1.0 ResNet result_4 logs ``status: success`` at 0.75886 top-1, under the 0.759 target."""
    log = parse("v1.0_intel_resnet_below_target.txt")
    assert log.status == "success" and log.time_to_train is None
    assert log.details["target_reached"] is False
    assert log.details["target_note"] == (
        "target top1_accuracy >= 0.759 (MLPerf v0.7–v4.0) not reached: no evaluation met it (final top1_accuracy "
        "0.758861): no time to train")
    # the target as float32 writes it: v0.5 GNMT stops at 21.799999237 for 21.8 BLEU
    gnmt = parse("v0.5_nvidia_gnmt_float32_target.txt")
    assert gnmt.details["target_reached"] is True and gnmt.time_to_train == pytest.approx(441.623038)


def test_the_users_target_and_direction_override_the_benchmarks():
    log = parse("v1.0_intel_resnet_below_target.txt", TrainingLog(target_accuracy=0.75))
    assert log.details["target_reached"] is True
    assert log.details["mlperf_target"] == "top1_accuracy >= 0.75 (target_accuracy)"
    assert log.time_to_train == pytest.approx((1621480917738 - 1621469138813) / 1000)  # the 0.7576 evaluation
    assert log.time_to_train_rule.startswith("MLPerf log clock: run_start until 'top1_accuracy' first met 0.75")
    missed = parse("v1.0_intel_resnet_below_target.txt", TrainingLog(target_accuracy=0.76))
    assert missed.details["target_reached"] is False and missed.time_to_train is None
    wer = parse("v1.0_nvidia_rnnt_wer_above_one.txt",
                TrainingLog(user_metric=Metric("WER", higher_is_better=False), target_accuracy=0.06))
    assert wer.time_to_train == pytest.approx((1621297195545 - 1621296931808) / 1000)  # 0.0584 <= 0.06


def test_targets_by_round_from_the_training_rules():
    def targets(benchmark, form=None, keys=(), gbs=None):
        rounds = mlperf_targets.candidate_rounds(benchmark, form, keys)
        return {" and ".join(t.describe() for t in group): mlperf_targets.describe_rounds(held)
                for group, held in mlperf_targets.targets_by_round(benchmark, rounds, gbs)}

    assert targets("resnet") == {"top1_accuracy >= 0.749": "v0.5", "top1_accuracy >= 0.759": "v0.6–v4.0"}
    assert targets("ssd", "mllog") == {"mAP >= 0.23": "v0.7–v1.1", "mAP >= 0.34": "v2.0–v4.1"}
    assert targets("ssd", "mllog", ["opt_name"]) == {"mAP >= 0.34": "v2.0–v4.1"}  # RetinaNet
    assert targets("ssd", "mllog", ["model_bn_span"]) == {"mAP >= 0.23": "v0.7–v1.1"}  # SSD-ResNet34
    assert targets("bert", "mllog", ["opt_gradient_accumulation_steps"], gbs=8192) == {
        "mlm_accuracy >= 0.706": "v0.7"}
    assert targets("gnmt", "v0.6") == {"BLEU >= 24": "v0.6"} and targets("gnmt", "mllog") == {"BLEU >= 0.24": "v0.7"}
    assert targets("rnnt") == {"WER <= 0.058": "v1.0–v3.1"}
    assert targets("stable_diffusion") == {"FID <= 90 and CLIP >= 0.15": "v3.1–v5.0"}
    assert targets("mask", "v0.6") == {"BBOX >= 0.377 and SEGM >= 0.339": "v0.6"}
    assert targets("llama31_8b") == {"log_perplexity <= 3.3": "v5.1–v6.0"}
    assert targets("flux1") == {"eval_loss <= 0.586": "v5.1–v6.0"}


# --- 5. A replayed log's own clock ---------------------------------------------------------------

def test_a_replayed_log_with_a_target_is_timed_by_its_own_clock():
    """Supermicro's v1.0 U-Net3D result_2 replayed (read in a fraction of a second): the target is met
    904.6 s after run_start by the log's clock, not at sixdim's 0.06 s."""
    log = TrainingLog(target_accuracy=0.89)
    for i, line in enumerate((REAL / "v1.0_supermicro_unet3d_cut.txt").read_text().splitlines()):
        log.elapsed = 0.01 * i
        read_line(line, make_parsers(("mlperf",)), log)
    [dice] = log.qualities()
    assert dice.clock == LOG_CLOCK and dice.first_reaching(0.89) == pytest.approx(904.62)
    assert log.time_to_train == pytest.approx(904.62)


def test_a_replayed_log_through_the_command_workload(tmp_path):
    """Intel's v1.0 ResNet result_4 (its own target missed) replayed with ``target_accuracy`` 0.75: met
    at the 0.7576 evaluation, 11,779 s after run_start by the log, read by sixdim within 0.1 s."""
    executor = Executor(hostname="h", history=History(tmp_path / "h.db"), nvml=NvmlCollector("h"), rapl=None)
    [record] = executor.execute(registry.get("command"), {
        "argv": ["cat", str(REAL / "v1.0_intel_resnet_below_target.txt")], "label": "resnet",
        "target_accuracy": 0.75}, cpu_device(), timeout=60.0)
    assert record.status == "ok", record.reason
    assert record.figures["time_to_train_seconds"] == pytest.approx((1621480917738 - 1621469138813) / 1000)


# --- 6. The smaller ones -------------------------------------------------------------------------

def test_an_rnnt_word_error_rate_above_one_is_a_value():
    log = parse("v1.0_nvidia_rnnt_wer_above_one.txt")
    [wer] = log.qualities()
    assert wer.values == [5.842965332156906, 1.0, 1.0, 0.9773905371126062, 0.058416969964339545,
                          0.05764493952428219]
    assert wer.metric.direction == LOWER_IS_BETTER and not log.warnings


def test_success_false_is_said_as_a_failure_not_an_abort():
    log = parse("v0.5_intel_ncf_success_false.txt")
    assert log.status == "failed (success: false)"
    assert log.run_failure() == "the run failed (success: false): its run_stop says so"
    assert log.details["target_reached"] is False  # 0.6171 HR@10, under 0.635


def test_a_log_cut_before_its_results_says_where_it_ends():
    log = parse("v1.0_supermicro_unet3d_cut.txt")
    assert log.started and not log.stopped and log.time_to_train is None
    assert log.run_failure() == (
        "the log ends before run_stop: its last MLPerf record is eval_start (epoch_num 2020) 2081.5 s after "
        "run_start; 6 evaluations of mean_dice (the last 0.892532); the run never reached run_stop")


def test_minigo_v06_without_run_stop_ends_at_its_eval_result():
    """NVIDIA's v0.6 MiniGo logs no run_stop: its ``eval_result`` timestamp is the run's time."""
    log = parse("v0.6_nvidia_minigo_eval_result.txt")
    assert log.stopped and log.run_failure() is None and log.time_to_train == pytest.approx(1725.869)
    assert log.details["mlperf_run_end"].startswith("eval_result timestamp")


# --- 7. A log that is MLPerf is read as MLPerf ----------------------------------------------------

DEFAULT_LINE_FORMATS = ("ai_rank", "mlperf", "hf_trainer", "mindspore")


def test_printed_dicts_in_an_mlperf_log_are_not_read_by_the_framework_readers():
    """Inspur's v1.0 BERT (NVIDIA's code) prints a dict after each evaluation ({'eval_loss': ...,
    'eval_mlm_accuracy': ...}) and NVIDIA's placeholder {'final_loss': 0.0}: with every line format on
    (the default), the Hugging Face and MindSpore readers added eval_loss, eval_mlm_accuracy and a
    final_loss of 0.0 beside MLPerf's mlm_accuracy."""
    lines = (REAL / "v1.0_inspur_bert_printed_dicts.txt").read_text().splitlines()
    log = parse_lines(lines, make_parsers(DEFAULT_LINE_FORMATS), TrainingLog())
    [mlm] = log.qualities()
    assert (mlm.metric.name, mlm.final) == ("mlm_accuracy", 0.7204408645629883) and len(mlm.values) == 4
    assert log.details["target_reached"] is True and log.time_to_train == pytest.approx(1308.078)
    assert log.throughputs == [] and log.after_stop == 0 and set(log.recognised) == {"mlperf"}


def test_a_framework_format_the_user_asks_for_is_read_beside_mlperf():
    lines = (REAL / "v1.0_inspur_bert_printed_dicts.txt").read_text().splitlines()
    log = parse_lines(lines, make_parsers(DEFAULT_LINE_FORMATS), TrainingLog(read_beside_mlperf=("hf_trainer",)))
    found = by_name(log)
    assert set(found) == {"mlm_accuracy", "eval_loss", "eval_mlm_accuracy"}
    assert found["eval_loss"].final == 1.3055344820022583 and found["eval_loss"].metric.direction == LOWER_IS_BETTER


def test_the_command_workload_reports_the_mlperf_accuracy_of_a_bert_log(tmp_path):
    """The same log through the command workload with its default formats: one accuracy, MLPerf's."""
    executor = Executor(hostname="h", history=History(tmp_path / "h.db"), nvml=NvmlCollector("h"), rapl=None)
    [record] = executor.execute(registry.get("command"), {
        "argv": ["cat", str(REAL / "v1.0_inspur_bert_printed_dicts.txt")], "label": "bert"}, cpu_device(),
        timeout=60.0)
    assert record.status == "ok", record.reason
    assert record.figures["accuracy"] == pytest.approx(0.7204408645629883)
    assert record.figures["time_to_train_seconds"] == pytest.approx(1308.078)


# --- The survey and the framework formats ---------------------------------------------------------

def test_the_survey_agrees_on_every_real_log():
    counts = survey(REAL, json.loads((REAL / "expectations.json").read_text()), out=open("/dev/null", "w"))
    assert counts["logs"] == counts["logs_agreeing"] == 16


def test_framework_line_formats_are_offered_with_logparses_own():
    from sixdim.workloads.logs.framework_lines import LINE_FORMATS

    assert set(LINE_FORMATS) <= set(FORMATS) and {"ai_rank", "mlperf"} <= set(FORMATS)
    for name, (described, parser) in LINE_FORMATS.items():
        assert parser in make_parsers([name]) and describe_formats([name]) == [described]
