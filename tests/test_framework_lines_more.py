"""Keras fit(), the Hugging Face Trainer's metric tables, Megatron-LM and DeepSpeed progress lines.

Every log here is a published output, copied line for line into tests/fixtures/logs/framework_lines/
(its README names each source).  Each test reads it with the line formats the command workload offers
(``formats``) and checks the values, their direction and the speed: issue 48, item 3.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sixdim.workloads.logs.framework_lines import LINE_FORMATS, unread_notes
from sixdim.workloads.logs.lines import bounded_lines
from sixdim.workloads.logs.parsers import FORMATS, make_parsers, parse_lines
from sixdim.workloads.logs.training_log import TrainingLog

FIXTURES = Path(__file__).parent / "fixtures" / "logs" / "framework_lines"
ALL_LINE_FORMATS = ["ai_rank", "mlperf", *LINE_FORMATS]


def read(name: str, formats: list[str] | None = None) -> TrainingLog:
    text = (FIXTURES / name).read_text()
    return parse_lines(text.splitlines(), make_parsers(formats or ALL_LINE_FORMATS))


def quality(log: TrainingLog) -> dict[str, tuple[str, list[float]]]:
    return {q.metric.name: (q.metric.direction, q.values) for q in log.qualities()}


# --- Keras fit() ------------------------------------------------------------------------------

def test_keras2_epoch_lines_give_each_epochs_validation_metrics() -> None:
    """keras-io's MNIST convnet: 11 finished epochs and a 12th cut mid-bar (no val_ figures)."""
    log = read("keras2_mnist_convnet.txt")
    found = quality(log)
    assert set(found) == {"val_loss", "val_accuracy"}
    direction, values = found["val_accuracy"]
    assert direction == "higher_is_better"
    assert len(values) == 11 and values[0] == 0.9780 and values[-1] == 0.9920
    assert found["val_loss"][0] == "lower_is_better" and found["val_loss"][1][-1] == 0.0303
    assert log.recognised["keras"] == 12  # the progress lines ("Epoch 3/15" alone could be any script's)
    assert log.details["quality_steps"]["val_accuracy"] == list(range(1, 12))  # the epochs
    assert log.details["keras_seconds_per_step"][:2] == [0.029, 0.031]
    assert log.throughputs == []  # Keras prints time per step, not samples/s


def test_keras3_progress_bar_and_verbose2_forms() -> None:
    published = (FIXTURES / "keras3_bidirectional_lstm_imdb.txt").read_text().splitlines()
    redraw = "   1/782 ━━━━━━━━━━━━━━━━━━━━ 2:57 423ms/step - accuracy: 0.5000 - loss: 0.6931"  # its ETA, then its pace
    log = parse_lines([published[0], redraw, *published[1:]], make_parsers(ALL_LINE_FORMATS))
    keras3 = quality(log)
    assert keras3["val_accuracy"] == ("higher_is_better", [0.8269, 0.8428])
    assert keras3["val_loss"] == ("lower_is_better", [0.4202, 0.3650])
    assert log.details["keras_seconds_per_step"] == [0.075, 0.069]  # the epochs' ends only
    verbose2 = read("keras_verbose2_feature_space.txt")
    assert quality(verbose2)["val_accuracy"][1] == [0.6885, 0.7869, 0.8197, 0.8033, 0.8033, 0.8033]
    assert verbose2.details["quality_steps"]["val_loss"] == [1, 2, 3, 18, 19, 20]
    assert verbose2.details["keras_seconds_per_step"][0] == pytest.approx(0.638)


def test_keras_us_per_step_and_a_cut_epoch() -> None:
    """Keras 2.1's ``87us/step`` and ``acc``/``val_acc`` names (keras-team/keras PR 8169)."""
    log = read("keras21_pr8169_us_step.txt")
    assert quality(log)["val_acc"] == ("higher_is_better", [0.9771, 0.9837])
    assert log.details["keras_seconds_per_step"] == pytest.approx([87e-6, 77e-6])


def test_keras_redrawn_progress_bar_with_backspaces_and_carriage_returns() -> None:
    """Keras 2's dynamic progress bar: every redraw is preceded by backspaces and a carriage return;
    the stream is cut into lines as the command workload cuts it (:func:`bounded_lines`).  Built from
    the published epoch-end lines of keras-io's MNIST convnet."""
    published = (FIXTURES / "keras2_mnist_convnet.txt").read_text().splitlines()
    stream = b""
    for epoch_line, end_line in zip(published[0:4:2], published[1:4:2]):
        stream += epoch_line.encode() + b"\n"
        for step in (1, 211):
            stream += f"{step:3d}/422 [>.............................] - ETA: 2:57 - loss: 2.3026 - accuracy: " \
                      f"0.0938".encode() + b"\b" * 90 + b"\r"
        stream += end_line.encode() + b"\n"
    lines = list(bounded_lines([stream], 65536))
    log = parse_lines(lines, make_parsers(ALL_LINE_FORMATS))
    assert quality(log)["val_accuracy"][1] == [0.9780, 0.9843]


def test_keras_progress_pasted_as_one_line_reads_its_last_bar_only() -> None:
    """A bar pasted without its carriage returns (tensorflow/tensorflow issue 36332): training
    figures only, no validation: recognised, nothing read, and the note says what to use."""
    log = read("keras_tf21_issue36332_pasted_bar.txt")
    assert log.recognised["keras"] >= 1
    assert log.qualities() == []
    notes = " ".join(unread_notes(log))
    assert "validation_data" in notes and "accuracy_regex" in notes and "' - accuracy: ([0-9.]+)'" in notes


def test_keras_format_is_offered_and_described_with_what_to_use() -> None:
    assert "keras" in FORMATS and "megatron" in FORMATS and "deepspeed" in FORMATS
    assert "validation_data" in FORMATS["keras"]


# --- The Hugging Face Trainer's metric tables -------------------------------------------------

def test_hf_trainer_tables_give_eval_metrics_speed_and_runtime() -> None:
    """``trainer.log_metrics``' tables (run_ner-style: train, best, eval, predict): the eval table's
    metrics in their directions, the train table's speed and runtime; the best and predict tables are
    not evaluations of the model the run ended with, and are not read."""
    log = read("hf_trainer_tables_conll.txt")
    found = quality(log)
    assert set(found) == {"eval_accuracy", "eval_f1", "eval_loss", "eval_precision", "eval_recall"}
    assert found["eval_accuracy"] == ("higher_is_better", [0.9918])
    assert found["eval_loss"] == ("lower_is_better", [0.0429])
    assert log.throughputs == [101.764]
    assert log.total_time == pytest.approx(1 * 3600 + 8 * 60 + 59.29)
    assert log.details["quality_steps"]["eval_accuracy"] == [30.0]


def test_hf_table_after_the_printed_summary_dict_counts_the_speed_once() -> None:
    """The Trainer prints its run summary as a dict, and the example scripts then print the same
    numbers as the train table: one throughput reading, not two."""
    lines = ["{'train_runtime': 4139.29, 'train_samples_per_second': 101.764, 'train_steps_per_second': 6.363, "
             "'train_loss': 0.1143, 'epoch': 30.0}",
             *(FIXTURES / "hf_trainer_tables_conll.txt").read_text().splitlines()]
    log = parse_lines(lines, make_parsers(ALL_LINE_FORMATS))
    assert log.throughputs == [101.764]


# --- Megatron-LM ------------------------------------------------------------------------------

def test_megatron_iterations_and_validation() -> None:
    """BigScience's 104B run on Megatron-DeepSpeed, Megatron-LM's own line format: samples/s is the
    global batch over the time per iteration; the validation loss and its perplexity are quality
    metrics, lower-is-better, at their iteration; the training loss is not an evaluation."""
    log = read("megatron_bigscience_tr8_104B.txt")
    assert log.throughputs == pytest.approx([96 / 18.7061, 96 / 19.9040, 96 / 18.3334])
    found = quality(log)
    assert found == {"val_lm_loss": ("lower_is_better", [7.1742]), "val_lm_loss_ppl": ("lower_is_better", [1305.315])}
    assert log.details["quality_steps"]["val_lm_loss"] == [7000]
    assert log.recognised["megatron"] == 4


def test_megatron_deepspeed_prints_its_own_samples_per_second() -> None:
    log = read("megatron_deepspeed_bigscience_tr11_176B.txt")
    assert log.throughputs == [18.451]  # as printed (2048 / 111.00 s would be 18.45)
    assert quality(log)["val_lm_loss"] == ("lower_is_better", [2.327091])


# --- DeepSpeed --------------------------------------------------------------------------------

def test_deepspeed_throughput_timer_old_and_new_forms() -> None:
    old = read("deepspeed_issue1825.txt")
    assert old.throughputs == pytest.approx([83.48609168106144, 83.73838805358588])
    assert old.details["deepspeed_last_step"] == 50 and old.details["deepspeed_skipped_steps"] == 2
    new = read("deepspeed_issue5779.txt")
    assert new.throughputs == pytest.approx([16.807402094161112])  # CurrSamplesPerSec, not the running mean
    assert new.qualities() == []


def test_new_formats_leave_mlperf_lines_alone() -> None:
    line = (':::MLLOG {"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME", "key": "eval_accuracy", '
            '"value": 0.5, "metadata": {"note": " iteration 1/ 2 | elapsed time per iteration (ms): 1.0 | '
            'global batch size: 8 | validation loss at iteration 1 | lm loss value: 1.0 |"}}')
    log = parse_lines([line], make_parsers(["keras", "megatron", "deepspeed"]))
    assert not log.has_figures() and not log.recognised
