"""Issue 48 items 4-6 on published logs: a replayed log's own timestamps give its time to train; a
trainer_state.json's best model is the run's final quality; a target among several accuracy-like
metrics names them and the option that picks one."""

from pathlib import Path

import pytest

from sixdim.workloads.logs.parsers import parse_lines
from sixdim.workloads.logs.user_regex import RegexParser, line_time
from tests.test_command import run_command

LOGS = Path(__file__).parent / "fixtures" / "logs"
UIE = LOGS / "paddlenlp" / "uie_finetune.txt"
STATE = LOGS / "hf_files" / "financial_news_trainer_state.json"
HIGHER = "higher_is_better"


def test_a_replayed_paddlenlp_log_takes_its_time_to_train_from_its_own_timestamps(tmp_path):
    """PaddleNLP's UIE README: the glog line at 20:51:47.950181, F1 1.0 at 20:52:38,764: 50.81 s of the
    log's clock, not the fraction of a second ``cat`` took."""
    record = run_command(tmp_path, argv=["cat", str(UIE)], label="uie", formats=[],
                         accuracy_regex=r"F1: ([\d.]+)", quality_metric="f1", target_accuracy=0.9)
    assert record.status == "ok", record.reason
    assert record.figures["time_to_train_seconds"] == pytest.approx(50.813819, abs=1e-6)
    assert "log's own clock" in record.details["time_to_train_rule"]
    assert record.details["log_clock"]["span_seconds"] == pytest.approx(50.813819, abs=1e-6)


@pytest.mark.parametrize("line, seconds", [
    ("[2023-05-12 10:11:12,345] [    INFO] - loss: 1", 1683886272.345),
    ("2023-05-12 10:11:12 [INFO] epoch 1", 1683886272.0),
    ("2023-05-12T10:11:12.5+02:00 step 3", 1683879072.5),
    ("2023-05-12T10:11:12Z step 3", 1683886272.0),
    ("[2020/11/16 11:11:18] root INFO: epoch: [0/100]", 1605525078.0),
    ("LAUNCH INFO 2022-08-15 07:37:38,947 servers:", 1660549058.947),
])
def test_the_common_timestamp_formats(line, seconds):
    stamp = line_time(line)
    assert stamp is not None and stamp[0] == pytest.approx(seconds)


def test_glog_stamps_take_the_year_of_the_log_and_a_time_regex_replaces_the_formats():
    assert line_time("I0512 10:11:12.345678 1 main.cc:1] x", year=2023)[0] == pytest.approx(1683886272.345678)
    assert line_time("step 3 loss 0.2") is None
    assert line_time("I0512 10:11:12.345678 1 main.cc:1] x", pattern=r"at (\d+\.\d+)") is None
    assert line_time("eval at 1558631910.5 acc 0.7", pattern=r"at (\d+\.\d+)")[0] == 1558631910.5
    log = parse_lines(["t=2023-05-12 10:00:00 start", "t=2023-05-12 10:00:30 acc 0.5",
                       "t=2023-05-12 10:01:00 acc 0.8"],
                      [RegexParser(accuracy=r"acc ([\d.]+)", time=r"t=(\S+ \S+)")])
    [quality] = log.qualities()
    assert quality.at == [30.0, 60.0] and quality.clock == "log"


def test_the_best_model_loaded_at_the_end_is_the_final_quality(tmp_path):
    """best_metric 0.24608 at checkpoint-8280, the last evaluation 0.23466: the run ended with the best."""
    record = run_command(tmp_path, log_files=[str(STATE)], label="fin", quality_metric="eval_macro_f1")
    assert record.status == "ok", record.reason
    figures = {tuple(k.split(":")[1:]): v for k, v in record.figures.items() if k.startswith("quality:")}
    assert figures[("eval_macro_f1", HIGHER)] == 0.2460840305718579
    assert figures[("eval_accuracy", HIGHER)] == 0.7808591625883632  # the same best checkpoint's evaluation
    described = {q["metric"]: q for q in record.details["quality"]}
    assert described["eval_macro_f1"]["last_evaluation"] == 0.23465918315899845
    assert "best_model_checkpoint" in described["eval_macro_f1"]["final_rule"]
    assert "checkpoint-8280" in described["eval_macro_f1"]["final_rule"]


def test_a_target_among_several_accuracy_like_metrics_names_them_and_quality_metric(tmp_path):
    record = run_command(tmp_path, log_files=[str(STATE)], label="fin", target_accuracy=0.2)
    note = record.details["target_note"]
    assert "eval_accuracy" in note and "eval_macro_f1" in note and "quality_metric" in note
    assert "no quality metric to check it against" not in note
    chosen = run_command(tmp_path, log_files=[str(STATE)], label="fin", target_accuracy=0.2,
                         quality_metric="eval_macro_f1")
    assert "met by 'eval_macro_f1' at its evaluation 4 of 10" in chosen.details["target_note"]
