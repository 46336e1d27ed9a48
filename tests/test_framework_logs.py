"""The frameworks people use, read by the command workload: TensorBoard event files (PyTorch's
SummaryWriter, Lightning, TF2's tensor scalars in Keras's folder layout), the Hugging Face Trainer
(its printed dicts and trainer_state.json), Lightning's metrics.csv and MindSpore's monitor lines.

Each file is made by the real library where it installs here, in a tiny CPU run inside the test
(skipped, with the reason, where the library is absent); MindSpore, which does not install here, is
represented by excerpts of its projects' published output (tests/fixtures/logs/frameworks/README.md
names each source).  Every value is checked against what the file holds.  The configuration
example of each framework section of docs/TRAINING_LOGS.md is loaded with the real loader.
"""

import csv
import json
import re
import statistics
import sys
import textwrap
from pathlib import Path
from unittest import mock

import pytest

from sixdim.collectors.nvml import NvmlCollector
from sixdim.config import load
from sixdim.run.devices import cpu_device
from sixdim.run.executor import Executor
from sixdim.store.history import History
from sixdim.workloads import registry
from sixdim.workloads.context import RunContext, Unsupported
from sixdim.workloads.logs import command, log_files
from sixdim.workloads.logs.framework_lines import LINE_FORMATS, parse_hf_trainer, parse_mindspore, step_seconds
from sixdim.workloads.logs.model import MAX_READING
from sixdim.workloads.logs.parsers import FORMATS, parse_lines
from sixdim.workloads.measure.stats import deepspark_mean
from sixdim.workloads.spec import ParamError

ROOT = Path(__file__).resolve().parent.parent
LOGS = Path(__file__).parent / "fixtures" / "logs"
FRAMEWORKS = LOGS / "frameworks"
HIGHER, LOWER = "higher_is_better", "lower_is_better"


def run_command(tmp_path, timeout=180.0, **params):
    executor = Executor(hostname="h", history=History(tmp_path / "h.db"), nvml=NvmlCollector("h"), rapl=None)
    [record] = executor.execute(registry.get("command"), params, cpu_device(), timeout=timeout)
    return record


def quality(record):
    """The run's quality figures as {(metric, direction): final value}."""
    return {tuple(key.split(":")[1:]): value for key, value in record.figures.items() if key.startswith("quality:")}


def script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def needs(module, why):
    return pytest.importorskip(module, reason=f"{module} is not installed: {why}")


def float32(value):
    """A float32 as sixdim reads it back from an event file: the shortest decimal of that float32."""
    import numpy as np

    return float(str(np.float32(value)))


# ============================================================================ TensorBoard

@pytest.mark.slow
def test_summarywriter_event_files_replayed_with_their_own_clock(tmp_path):
    """PyTorch's SummaryWriter; no command: the files alone, timed by their own wall times."""
    needs("tensorboard", "TensorBoard event files are read with it (the tensorboard extra)")
    from torch.utils.tensorboard import SummaryWriter

    accuracies, losses, rates = [0.55, 0.65, 0.72, 0.81], [0.9, 0.7, 0.61, 0.52], [100, 210, 220, 230, 240, 250]
    with mock.patch("time.time", return_value=1000.0):  # the file's first event: the writer's creation
        writer = SummaryWriter(str(tmp_path / "runs" / "exp1"))
    for step, (acc, loss) in enumerate(zip(accuracies, losses)):
        writer.add_scalar("val/acc", acc, step, walltime=1010.0 + 10 * step)
        writer.add_scalar("val/loss", loss, step, walltime=1010.0 + 10 * step)
        writer.add_scalar("train/loss", loss + 0.1, step, walltime=1005.0 + 10 * step)  # not an evaluation
    for step, rate in enumerate(rates):
        writer.add_scalar("train/samples_per_second", rate, step, walltime=1002.0 + 10 * step)
    writer.close()

    record = run_command(tmp_path, log_files=[str(tmp_path / "runs")], target_accuracy=0.7)
    assert record.status == "ok", record.reason
    # float32 in the file, read back as the decimal written: 0.81, not 0.8100000023841858
    assert quality(record) == {("val/acc", HIGHER): 0.81, ("val/loss", LOWER): 0.52}
    assert record.figures["accuracy"] == 0.81
    assert record.details["quality"][0]["values"] == accuracies
    assert record.figures["samples_per_second"] == 225.0  # DeepSpark: 210..240 without 100 and 250
    assert record.figures["time_to_train_seconds"] == 30.0  # 0.72 at 1030, the file opened at 1000
    assert record.figures["seconds"] == 52.0  # the last scalar (1052) after the first event
    # no command: the label is the log's name, and the target its time to train is to
    assert record.shape == "runs,target_accuracy=0.7"
    [report] = record.details["log_files"]
    assert report["format"] == "tensorboard" and report["read"]["quality"] == {"val/acc": 4, "val/loss": 4}

    named = run_command(tmp_path, log_files=[str(tmp_path / "runs")], quality_tags=["train/loss"],
                        throughput_tag="nothing_like_this")
    assert quality(named) == {("train/loss", LOWER): float32(0.52 + 0.1)}
    assert "samples_per_second" not in named.figures
    assert "throughput_tag 'nothing_like_this' not found" in named.details["log_files"][0]["note"]


LIVE_WRITER = """
    import time
    from torch.utils.tensorboard import SummaryWriter
    writer = SummaryWriter("runs/live")
    for step, acc in enumerate([0.3, 0.5, 0.7, 0.9]):
        time.sleep(0.3)
        writer.add_scalar("eval/accuracy", acc, step)
        writer.add_scalar("train/train_samples_per_second", 1000.0 + step, step)
        writer.flush()
        print(f"step {step}", flush=True)
    writer.close()
"""


@pytest.mark.slow
def test_event_files_written_while_the_command_runs(tmp_path):
    """A command that writes TensorBoard files as it trains: read when it ends; an earlier run's file
    left in the same folder is skipped; the target's time is the scalar's wall time since the start."""
    needs("tensorboard", "TensorBoard event files are read with it (the tensorboard extra)")
    from torch.utils.tensorboard import SummaryWriter

    old = SummaryWriter(str(tmp_path / "runs" / "old"))
    old.add_scalar("eval/accuracy", 0.99, 0, walltime=1.0)
    old.close()
    stale = next((tmp_path / "runs" / "old").iterdir())
    import os

    os.utime(stale, (1.0, 1.0))  # last written long before the command starts
    record = run_command(tmp_path, argv=[sys.executable, script(tmp_path, "train.py", LIVE_WRITER)],
                         cwd=str(tmp_path), log_files=["runs"], target_accuracy=0.6)
    assert record.status == "ok", record.reason
    assert quality(record) == {("eval/accuracy", HIGHER): 0.9}  # not the stale 0.99, not float32 noise
    assert record.figures["samples_per_second"] == statistics.fmean([1000.0, 1001.0, 1002.0, 1003.0])
    # 0.7 is written after three sleeps of 0.3 s; the clock is the scalar's, from the command's start
    assert 0.85 < record.figures["time_to_train_seconds"] < record.details["wall_seconds"]
    notes = {Path(r["path"]).parent.name: r.get("note", "") for r in record.details["log_files"]}
    assert "an earlier run's" in notes["old"]


def test_tf2_tensor_scalars_in_keras_train_and_validation_runs(tmp_path):
    """TF2's summaries (tf.summary.scalar, Keras's TensorBoard callback) store scalars as tensors, not
    simple values: these are written with tensorboard's own scalar_pb and event file writer, the same
    protobufs, in Keras's layout (logs/train, logs/validation).  TensorFlow itself does not install here."""
    needs("tensorboard", "TensorBoard event files are read with it (the tensorboard extra)")
    from tensorboard.compat.proto import event_pb2
    from tensorboard.plugins.scalar import summary_v2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    runs = {"train": ([0.61, 0.74, 0.83], [1.1, 0.8, 0.6]), "validation": ([0.6, 0.7, 0.77], [1.2, 0.9, 0.75])}
    for run, (accuracies, losses) in runs.items():
        writer = EventFileWriter(str(tmp_path / "logs" / run))
        for epoch, (acc, loss) in enumerate(zip(accuracies, losses)):
            for tag, value in (("epoch_accuracy", acc), ("epoch_loss", loss)):
                writer.add_event(event_pb2.Event(step=epoch, wall_time=2000.0 + epoch,
                                                 summary=summary_v2.scalar_pb(tag, value)))
        writer.close()
    record = run_command(tmp_path, log_files=[str(tmp_path / "logs")])
    assert record.status == "ok", record.reason
    # by default the evaluations only: the validation run's metrics, named with their run
    assert quality(record) == {("validation/epoch_accuracy", HIGHER): 0.77, ("validation/epoch_loss", LOWER): 0.75}
    both = run_command(tmp_path, log_files=[str(tmp_path / "logs")], quality_tags=["epoch_accuracy"])
    assert quality(both) == {("train/epoch_accuracy", HIGHER): 0.83, ("validation/epoch_accuracy", HIGHER): 0.77}
    assert "accuracy" not in both.figures and "several accuracy ratios" in both.details["accuracy_note"]


def test_a_missing_tensorboard_package_is_unsupported_with_the_pip_command(tmp_path, monkeypatch):
    monkeypatch.setattr(log_files, "tensorboard_available", lambda: False)
    params = registry.get("command").resolve({"log_files": ["runs"]}, "cpu")
    with pytest.raises(Unsupported, match=r"pip install tensorboard .*sixdim\[tensorboard\]"):
        command.run(params, RunContext("cpu"))
    # a trainer_state.json named as such needs no tensorboard
    state = tmp_path / "trainer_state.json"
    state.write_text(json.dumps({"log_history": [{"eval_accuracy": 0.5, "epoch": 1.0, "step": 2}]}))
    params = registry.get("command").resolve({"log_files": [str(state)]}, "cpu")
    output = command.run(params, RunContext("cpu"))
    assert output.status == "ok" and output.figures["accuracy"] == 0.5


# ============================================================================ PyTorch Lightning

LIGHTNING = """
    import torch
    import lightning as L
    from lightning.pytorch.callbacks import ThroughputMonitor
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    class Model(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)
        def training_step(self, batch, index):
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.layer(x), y)
            self.log("train_loss", loss)
            return loss
        def validation_step(self, batch, index):
            x, y = batch
            out = self.layer(x)
            self.log("val_loss", torch.nn.functional.cross_entropy(out, y))
            self.log("val_acc", (out.argmax(-1) == y).float().mean())
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    x = torch.randn(64, 4)
    y = (x[:, 0] > 0).long()
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)
    trainer = L.Trainer(max_epochs=3, accelerator="cpu", log_every_n_steps=2, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        logger=[CSVLogger("logs", name="csv"), TensorBoardLogger("logs", name="tb")],
                        callbacks=[ThroughputMonitor(batch_size_fn=lambda batch: batch[0].shape[0], window_size=2)])
    trainer.fit(Model(), data, data)
"""


def column(path, name):
    with open(path, newline="") as handle:
        return [float(row[name]) for row in csv.DictReader(handle) if row[name]]


@pytest.mark.slow
def test_lightning_csvlogger_and_tensorboardlogger(tmp_path):
    """A real Lightning run (CPU, a linear model, ThroughputMonitor): its metrics.csv read after the
    command, then its TensorBoardLogger files replayed."""
    needs("lightning", "the test makes its files with a real Lightning run")
    needs("tensorboard", "the run writes TensorBoardLogger files too, and they are read with it (the tensorboard "
                         "extra)")
    record = run_command(tmp_path, argv=[sys.executable, script(tmp_path, "fit.py", LIGHTNING)], cwd=str(tmp_path),
                         log_files=["logs/csv"], target_accuracy=0.8)
    assert record.status == "ok", record.reason
    metrics = tmp_path / "logs" / "csv" / "version_0" / "metrics.csv"
    accuracies, losses = column(metrics, "val_acc"), column(metrics, "val_loss")
    assert quality(record) == {("val_acc", HIGHER): accuracies[-1], ("val_loss", LOWER): losses[-1]}
    assert record.details["quality"][0]["values"] == accuracies and len(accuracies) == 3
    rates = column(metrics, "train/device/samples_per_sec")  # ThroughputMonitor's, one device
    assert record.details["throughputs"] == rates
    assert record.figures["samples_per_second"] == deepspark_mean(rates)
    # metrics.csv has no clock: the target is met, but no time to train is made up
    assert "time_to_train_seconds" not in record.figures and "no time for it" in record.details["target_note"]

    replay = run_command(tmp_path, log_files=[str(tmp_path / "logs" / "tb")], target_accuracy=0.8)
    assert replay.status == "ok", replay.reason
    assert quality(replay) == {("val_acc", HIGHER): float32(accuracies[-1]), ("val_loss", LOWER): float32(losses[-1])}
    assert replay.figures["samples_per_second"] == deepspark_mean([float32(r) for r in rates])
    assert 0 < replay.figures["time_to_train_seconds"] <= replay.figures["seconds"]


def test_metrics_csv_with_the_users_tags(tmp_path):
    """CSVLogger's layout (one column per logged name, empty where a row lacks it), as Lightning writes it."""
    folder = tmp_path / "lightning_logs" / "version_0"
    folder.mkdir(parents=True)
    (folder / "metrics.csv").write_text("epoch,step,train_loss,val_acc,val_loss,my_rate\n"
                                        "0,1,0.567,,,850.5\n0,3,,0.75,0.61,\n1,5,0.49,,,860.25\n1,7,,0.8125,0.54,\n")
    default = run_command(tmp_path, log_files=[str(tmp_path / "lightning_logs")])
    assert quality(default) == {("val_acc", HIGHER): 0.8125, ("val_loss", LOWER): 0.54}
    assert "samples_per_second" not in default.figures  # nothing is named like a rate in samples/s
    named = run_command(tmp_path, log_files=[str(folder / "metrics.csv")], quality_tags=["train_loss"],
                        throughput_tag="my_rate")
    assert quality(named) == {("train_loss", LOWER): 0.49}
    assert named.figures["samples_per_second"] == (850.5 + 860.25) / 2


# ============================================================================ Hugging Face Trainer

TRAINER = """
    import numpy as np
    import torch
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    class Data(torch.utils.data.Dataset):
        def __init__(self, n, seed):
            generator = torch.Generator().manual_seed(seed)
            self.x = torch.randint(0, 50, (n, 8), generator=generator)
            self.y = (self.x[:, 0] > 25).long()
        def __len__(self):
            return len(self.x)
        def __getitem__(self, i):
            return {"input_ids": self.x[i], "labels": self.y[i]}

    def accuracy(prediction):
        return {"accuracy": float((np.argmax(prediction.predictions, -1) == prediction.label_ids).mean())}

    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16, num_labels=2)
    arguments = TrainingArguments(output_dir="out", num_train_epochs=3, per_device_train_batch_size=8,
                                  per_device_eval_batch_size=8, eval_strategy="epoch", logging_steps=2,
                                  save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True, seed=0,
                                  learning_rate=1e-3)
    trainer = Trainer(model=BertForSequenceClassification(config), args=arguments, train_dataset=Data(64, 1),
                      eval_dataset=Data(32, 2), compute_metrics=accuracy)
    trainer.train()
    trainer.save_state()
"""


@pytest.mark.slow
def test_hf_trainer_printed_dicts_and_trainer_state(tmp_path):
    """A real Trainer run (a one-layer BERT on CPU): its printed dicts as it runs, its
    trainer_state.json after; the file's full-precision values with the printed ones' times."""
    needs("transformers", "the test makes its output with a real Trainer run")
    needs("accelerate", "the Trainer needs it")
    train = script(tmp_path, "train.py", TRAINER)
    record = run_command(tmp_path, argv=[f"{sys.executable} {train} | tee printed.txt"], shell=True,
                         cwd=str(tmp_path), log_files=["out"], target_accuracy=0.01)
    assert record.status == "ok", record.reason
    history = json.loads((tmp_path / "out" / "trainer_state.json").read_text())["log_history"]
    evaluations = [e for e in history if "eval_loss" in e]
    [summary] = [e for e in history if "train_runtime" in e]
    assert quality(record) == {("eval_loss", LOWER): evaluations[-1]["eval_loss"],
                               ("eval_accuracy", HIGHER): evaluations[-1]["eval_accuracy"]}
    assert record.details["quality"][0]["values"] == [e["eval_loss"] for e in evaluations]  # not printed twice
    assert record.figures["samples_per_second"] == summary["train_samples_per_second"]
    assert record.details["throughputs"] == [summary["train_samples_per_second"]]  # the printed one replaced
    assert record.figures["seconds"] == summary["train_runtime"]
    # the first evaluation meets 0.01; its time is when sixdim read the printed dict
    assert 0 < record.figures["time_to_train_seconds"] < record.details["wall_seconds"]

    # the printed dicts alone: transformers 5 prints each float with 4 significant digits (f"{v:.4g}", as
    # strings), transformers 4 the float itself
    text = (tmp_path / "printed.txt").read_text()
    shown = (lambda v: float(f"{v:.4g}")) if "'eval_loss': '" in text else (lambda v: v)
    printed = run_command(tmp_path, argv=["cat", str(tmp_path / "printed.txt")], label="printed")
    assert printed.status == "ok", printed.reason
    assert quality(printed) == {("eval_loss", LOWER): shown(evaluations[-1]["eval_loss"]),
                                ("eval_accuracy", HIGHER): shown(evaluations[-1]["eval_accuracy"])}
    assert printed.figures["samples_per_second"] == shown(summary["train_samples_per_second"])
    assert printed.figures["seconds"] == shown(summary["train_runtime"])

    # the file alone, replayed: no clock, so a target gives no time to train
    replay = run_command(tmp_path, log_files=[str(tmp_path / "out" / "trainer_state.json")], target_accuracy=0.01)
    assert quality(replay) == quality(record) and replay.figures["seconds"] == summary["train_runtime"]
    assert "time_to_train_seconds" not in replay.figures and "no time for it" in replay.details["target_note"]


def test_hf_trainer_printed_dicts_of_transformers_4(tmp_path):
    """The 4.x form (floats, not strings), from the shared fixture: read with the default formats."""
    record = run_command(tmp_path, argv=["cat", str(LOGS / "hf_trainer.txt")])
    assert record.status == "ok", record.reason
    assert quality(record) == {("eval_loss", LOWER): 0.4714, ("eval_accuracy", HIGHER): 0.8951}
    assert record.details["quality"][0]["best"] == 0.4553  # final, not best
    assert record.figures["accuracy"] == 0.8951
    assert record.figures["samples_per_second"] == 48.21 and record.figures["seconds"] == 2074.6
    assert record.details["recognised_lines"]["hf_trainer"] == 10  # 5 training steps, 4 evaluations, the summary


def test_trainer_output_folder_reads_its_latest_state(tmp_path):
    """A Trainer's output folder holds a trainer_state.json per checkpoint, each an earlier part of the
    same history: the folder gives the most recently written one."""
    import os

    def state(steps):
        return json.dumps({"global_step": steps, "log_history": [
            {"eval_accuracy": 0.5 + step / 100, "eval_loss": 1.0 - step / 100, "eval_runtime": 1.5, "step": step}
            for step in range(10, steps + 1, 10)] + [{"train_runtime": 30.5, "train_samples_per_second": 99.5}]})

    for number, steps in ((1, 20), (2, 40)):
        folder = tmp_path / "out" / f"checkpoint-{steps}"
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text(state(steps))
        os.utime(folder / "trainer_state.json", (1000.0 * number, 1000.0 * number))
    record = run_command(tmp_path, log_files=[str(tmp_path / "out")])
    assert quality(record) == {("eval_accuracy", HIGHER): 0.9, ("eval_loss", LOWER): 0.6}
    assert record.figures["samples_per_second"] == 99.5 and record.figures["seconds"] == 30.5
    notes = [r.get("note", "") for r in record.details["log_files"]]
    assert any("checkpoint-40" in n and "most recently written" in n for n in notes)


# ============================================================================ MindSpore (published output)

def fixture(name, **params):
    return {"argv": ["cat", str(FRAMEWORKS / name)], "label": name.split(".")[0], **params}


def test_mindspore_loss_and_time_monitors_with_a_batch_size(tmp_path):
    """golden-stick's ResNet-18 (MindSpore 2.x: 'Train epoch time'), batch size 32."""
    record = run_command(tmp_path, **fixture("mindspore_slb_resnet18.txt", batch_size=32))
    assert record.status == "ok", record.reason
    steps_ms = [65.006, 60.332, 60.331, 60.233, 60.498, 60.248]
    rates = [32 / (ms / 1000.0) for ms in steps_ms]
    assert record.details["seconds_per_step"] == [ms / 1000.0 for ms in steps_ms]
    assert record.figures["samples_per_second"] == deepspark_mean(rates)
    assert quality(record) == {("train_loss", LOWER): 0.8985137, ("top_1_accuracy", HIGHER): 0.9466145833333334,
                               ("top_5_accuracy", HIGHER): 0.996405032051282}
    assert "accuracy" not in record.figures  # two accuracy ratios: none is "the" accuracy

    bare = run_command(tmp_path, **fixture("mindspore_slb_resnet18.txt"))
    assert bare.status == "ok" and "samples_per_second" not in bare.figures
    assert "set batch_size" in bare.details["seconds_per_step_note"]


def test_mindspore_modelzoo_logger_and_eval_result(tmp_path):
    """The ModelZoo's ResNet-18 on CIFAR-10: 8 devices of 32 samples a step; the first epoch compiles."""
    record = run_command(tmp_path, **fixture("mindspore_modelzoo_resnet18_cifar10.txt", batch_size=256,
                                             warmup_throughputs=1))
    assert record.status == "ok", record.reason
    steady = [256 / (ms / 1000.0) for ms in (12.377, 12.750, 12.529, 14.621)]
    assert record.figures["samples_per_second"] == statistics.fmean(steady)  # 4 readings: their mean
    assert quality(record) == {("train_loss", LOWER): 0.655058, ("acc", HIGHER): 0.9363061543521088}
    assert record.figures["accuracy"] == 0.9363061543521088


def test_mindspore_lenet_loss_every_step_keeps_the_epochs_last(tmp_path):
    record = run_command(tmp_path, **fixture("mindspore_lenet.txt"))
    assert record.status == "ok", record.reason
    assert quality(record) == {("train_loss", LOWER): 1.0221305, ("Accuracy", HIGHER): 0.9842}
    [loss, _] = record.details["quality"]
    assert loss["values"] == [1.0221305]  # one epoch, one value: the last of its steps
    assert "samples_per_second" not in record.figures


@pytest.mark.parametrize("line, expected", [
    ("epoch time: 1234.500 ms, per step time: 12.345 ms", [0.012345]),              # TimeMonitor, 1.x
    ("Train epoch time: 9143.231 ms, per step time: 4.876 ms (data time: 0.120 ms)", [0.004876]),
    ("Eval epoch time: 512.000 ms, per step time: 2.000 ms", []),                     # an evaluation's pace
    ("epoch: [3/90] loss: 0.729006, epoch time: 2.486 s, per step time: 12.750 ms", [0.01275]),
])
def test_mindspore_time_monitor_forms(line, expected):
    log = parse_lines([line], [parse_mindspore])
    assert step_seconds(log) == expected and log.recognised["mindspore"] == 1


@pytest.mark.parametrize("line, name, value", [
    ("epoch: 1 step: 1, loss is [2.3025851]", "train_loss", 2.3025851),
    ("epoch: 1 step: 10, loss is Tensor(shape=[], dtype=Float32, value= 2.30252)", "train_loss", 2.30252),
    ("epoch: [0/1] step: [20/5004], loss is 6.940182 Epoch time: 12416.098 ms, fps: 412 img/sec.", "train_loss",
     6.940182),
    ("============== {'Accuracy': np.float64(0.9663477564102564)} ==============", "Accuracy", 0.9663477564102564),
    ("result: {'top_5_accuracy': 0.9429417413572343, 'top_1_accuracy': 0.7853513124199744} ckpt=a.ckpt",
     "top_1_accuracy", 0.7853513124199744),
])
def test_mindspore_loss_and_result_forms(line, name, value):
    log = parse_lines([line], [parse_mindspore])
    assert [e.value for e in log.series[name][1]] == [value]


@pytest.mark.parametrize("line", [
    "{'lr': 0.1, 'batch': 32}",                                              # no metric in it
    "{'loss': 0.6412, 'grad_norm': 4.113, 'learning_rate': 4.6e-05, 'epoch': 0.32}",  # the Trainer's step
    "{'acc': 'high'}",                                                       # not a number
    ':::MLLOG {"key": "eval_accuracy", "value": 0.75, "metadata": {"epoch_num": 1}}',
    "Epoch 1/3 - loss: 0.5211 - acc: 0.7402",
])
def test_lines_the_mindspore_reader_leaves_alone(line):
    log = parse_lines([line], [parse_mindspore])
    assert not log.series and not step_seconds(log) and not log.recognised


def test_hf_printed_dicts_behind_a_progress_bar_and_as_strings():
    lines = [" 50%|#####     | 4/8 [00:00<00:00, 12.5it/s]{'eval_loss': '0.6914', 'eval_accuracy': '0.6875', "
             "'eval_runtime': '0.0056', 'eval_samples_per_second': '2834', 'epoch': '1'}",
             "{'train_runtime': '0.1038', 'train_samples_per_second': '616.7', 'train_loss': '0.6925', 'epoch': '2'}",
             "{'acc': 0.93}"]  # MindSpore's, not the Trainer's
    log = parse_lines(lines, [parse_hf_trainer])
    assert {name: [e.value for e in s[1]] for name, s in log.series.items()} == {
        "eval_loss": [0.6914], "eval_accuracy": [0.6875]}
    assert log.throughputs == [616.7] and log.total_time == 0.1038 and log.recognised["hf_trainer"] == 2


def test_framework_readers_leave_mlperf_and_ai_rank_logs_alone():
    parsers = [parser for _, parser in LINE_FORMATS.values()]
    for name in ("mlperf_v4_resnet.txt", "ai_rank.txt", "mlperf_inference_server_valid.txt", "odd_values.txt"):
        log = parse_lines((LOGS / name).read_text().splitlines(), parsers)
        assert not log.series and not log.throughputs and not log.recognised, name


# ============================================================================ parameters

def test_formats_are_every_reader_and_the_file_parameters_are_checked():
    spec = registry.get("command")
    names = set(FORMATS) | set(LINE_FORMATS) | set(log_files.FILE_FORMATS)
    assert set(spec.param("formats").choices) == names == set(spec.param("formats").cpu_default)
    [case] = spec.cases({"log_files": ["out/runs/"]}, "cpu")  # no argv: a replay
    assert case.shape == "runs"
    for params, fragment in [
        ({}, "or, to read a finished run's files instead, log_files"),
        ({"argv": ["x"], "quality_tags": ["val_acc"]}, "log_files is empty"),
        ({"argv": ["x"], "throughput_tag": "rate"}, "log_files is empty"),
        ({"log_files": ["runs"], "formats": ["mlperf"]}, "none of the file formats"),
        ({"log_files": [" "]}, "an entry is empty"),
        ({"argv": ["x"], "batch_size": -1}, ">= 0"),
        ({"argv": ["x"], "formats": ["caffe"]}, "'tensorboard'"),
    ]:
        with pytest.raises(ParamError, match=re.escape(fragment)):
            spec.cases(params, "cpu")


def test_nothing_in_the_files_says_what_was_there(tmp_path):
    (tmp_path / "metrics.csv").write_text("epoch,step,train_loss\n0,1,0.5\n")
    record = run_command(tmp_path, log_files=[str(tmp_path / "metrics.csv"), str(tmp_path / "absent")])
    assert record.status == "failed"
    assert "names present: train_loss" in record.reason and "nothing matched" in record.reason


# ============================================================================ the documented examples

def framework_examples():
    """Each framework section appended to docs/TRAINING_LOGS.md, with its one TOML example."""
    text = (ROOT / "docs" / "TRAINING_LOGS.md").read_text()
    part = text[text.index("\n## Framework logs"):]
    sections = re.split(r"\n### ", part)[1:]
    return {section.splitlines()[0]: re.findall(r"```toml\n(.*?)```", section, re.S) for section in sections}


def test_every_framework_format_has_a_section_with_one_example():
    examples = framework_examples()
    for name in ("tensorboard", "hf_trainer", "lightning_csv", "mindspore"):
        titled = [title for title in examples if f"`{name}`" in title]
        assert len(titled) == 1, (name, list(examples))
        assert len(examples[titled[0]]) == 1, titled[0]


@pytest.mark.parametrize("title, blocks", list(framework_examples().items()))
def test_each_framework_example_loads_with_the_real_loader(tmp_path, title, blocks):
    for block in blocks:
        path = tmp_path / "example.toml"
        path.write_text(block)
        path.chmod(0o644)
        config = load(str(path), env={"SIXDIM_HISTORY": str(tmp_path / "h.db"), "SIXDIM_STATE_DIR": str(tmp_path)})
        [suite] = config.suites
        [entry] = suite.workloads
        assert entry.name == "command"
        [case] = registry.get("command").cases(entry.params, "cuda")
        assert case.params["log_files"] or case.params["argv"]



# ============================================================================ robustness

def test_the_readers_import_no_framework_and_the_daemon_side_none_of_them():
    """tensorboard is imported only when an event file is read, in the worker; the registry (what the
    daemon loads) imports neither reader."""
    import subprocess

    code = ("import sys, sixdim.workloads.registry; assert 'sixdim.workloads.logs.log_files' not in sys.modules; "
            "import sixdim.workloads.logs.command; "
            "print(sorted(m for m in ('tensorboard', 'torch', 'lightning', 'transformers') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_line_readers_never_raise_and_read_only_finite_numbers():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    fragments = st.sampled_from([
        "epoch: ", "1", " step: ", "[3/90]", ", loss is ", "nan", "inf", "-2.5", "1e999", "Tensor(value= ", ")",
        "Train ", "Eval ", "epoch time: ", " ms", " s", ", per step time: ", "0", "{", "}", "'acc': ", "'eval_loss': ",
        "'0.5'", "np.float64(", "True", ", ", "'", ":::MLLOG ", "[" * 50, "{'a': {'b': 1}}", "\x00", "é"])
    lines = st.lists(st.one_of(st.text(max_size=60), st.lists(fragments, max_size=12).map("".join)), max_size=20)
    parsers = [parser for _, parser in LINE_FORMATS.values()]

    @settings(max_examples=300, deadline=None)
    @given(lines)
    def check(text_lines):
        log = parse_lines(text_lines, parsers)
        assert not [w for w in log.warnings if w.startswith("a parser failed")], log.warnings
        numbers = log.throughputs + step_seconds(log) + [e.value for _, s in log.series.values() for e in s]
        assert all(0 <= n <= MAX_READING for n in numbers), numbers

    check()


@pytest.mark.parametrize("line", [
    "epoch:" + " " * 65536, "epoch: 1" + "\t " * 32768 + "x", "epoch: [" + " " * 65536, "{" * 65536,
    "{" + "a" * 65536, "epoch time: " + "1" * 65536, "'a': " + "x" * 65536, "{'acc': " + "1," * 32768,
    "epoch: 1 step: 1, loss is " + "[" * 65536, "{" + "np.float64(" * 5000 + "}", "epoch: " * 9000,
    "Train" + " " * 65536 + "epoch time: 1 ms, per step time: 2 ms",
])
def test_a_64_kib_hostile_line_is_read_in_linear_time(line):
    """The command's lines are cut at 64 KiB; none of them may take the readers long (a pattern with two
    quantifiers over the same spaces would take minutes on this input)."""
    import time

    started = time.perf_counter()
    parse_lines([line], [parser for _, parser in LINE_FORMATS.values()])
    assert time.perf_counter() - started < 0.5
