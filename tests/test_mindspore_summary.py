"""Issue 49: MindSpore's summary files (``events.out.events.summary.*_MS``), read without MindSpore and without
the tensorboard package.  The fixtures were written by MindSpore 2.10.0 itself
(tests/fixtures/logs/mindspore_summary/README.md, tests/bench/mindspore_summary_fixtures.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from sixdim.collectors.nvml import NvmlCollector
from sixdim.run.devices import cpu_device
from sixdim.run.executor import Executor
from sixdim.store.history import History
from sixdim.workloads import registry
from sixdim.workloads.context import RunContext
from sixdim.workloads.logs import command, log_files
from sixdim.workloads.logs.mindspore_summary import SummaryError, crc32c, masked_crc, read_summary
from sixdim.workloads.logs.model import COMMAND_FILE_FORMATS
from sixdim.workloads.logs.training_log import TrainingLog

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures" / "logs" / "mindspore_summary"
RECORD = FIXTURES / "record"
COLLECTOR = FIXTURES / "collector"
RECORD_FILE = RECORD / "events.out.events.summary.1795942417.0.vm_MS"
COLLECTOR_FILE = COLLECTOR / "events.out.events.summary.1795942418.0.vm_MS"
HIGHER, LOWER = "higher_is_better", "lower_is_better"
FIRST_WALL = 1795942417.664083
"""The record fixture's earliest event (a scalar event: the version event is written after it)."""
ACCURACY_07_WALL = 1795942418.3286154
"""When eval/accuracy reached 0.7 (step 8) in the record fixture."""


def run_command(tmp_path, **params):
    executor = Executor(hostname="h", history=History(tmp_path / "h.db"), nvml=NvmlCollector("h"), rapl=None)
    [record] = executor.execute(registry.get("command"), params, cpu_device(), timeout=120.0)
    return record


def quality(record) -> dict[tuple[str, ...], float]:
    return {tuple(key.split(":")[1:]): value for key, value in record.figures.items() if key.startswith("quality:")}


def copy(tmp_path: Path, source: Path, data: bytes | None = None) -> Path:
    """A copy of a fixture in its own folder, with other bytes where given."""
    folder = tmp_path / "summary"
    folder.mkdir(exist_ok=True)
    target = folder / source.name
    if data is None:
        shutil.copyfile(source, target)
    else:
        target.write_bytes(data)
    return target


def frame(data: bytes) -> bytes:
    """One record as MindSpore's event writer frames it (event_writer.cc's WriteRecord)."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc(length)) + data + struct.pack("<I", masked_crc(data))


def version_event(version: str, wall: float = 1.0) -> bytes:
    """An Event (summary.proto: wall_time = 1, double; version = 3, string) encoded field by field."""
    text = version.encode()
    return b"\x09" + struct.pack("<d", wall) + b"\x1a" + bytes([len(text)]) + text


# ---------------------------------------------------------------------------- the decoder

def test_crc32c_and_its_mask_are_castagnolis_and_mindsporas():
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value (RFC 3720)
    # the first record of a real file: its length's masked CRC as MindSpore wrote it
    data = RECORD_FILE.read_bytes()
    assert masked_crc(data[:8]) == struct.unpack_from("<I", data, 8)[0]


def test_the_record_fixture_decoded_by_hand():
    summary = read_summary(RECORD_FILE.read_bytes())
    assert summary.version == "MindSpore.Event:1" and summary.events == 13
    assert list(summary.scalars) == ["loss", "learning_rate", "eval/accuracy", "eval/loss"]
    assert [(s.step, s.value) for s in summary.scalars["eval/accuracy"]] == [(4, 0.6), (8, 0.7), (12, 0.8)]
    assert [s.step for s in summary.scalars["loss"]] == list(range(1, 13))
    assert summary.scalars["loss"][-1].value == 0.16666667  # the float32 2/12, as its shortest decimal
    assert summary.skipped == {"images": 1, "histograms": 1, "tensors": 1}
    assert summary.first_wall == FIRST_WALL


def test_the_collector_fixture_a_step_written_twice_counts_once():
    summary = read_summary(COLLECTOR_FILE.read_bytes())
    assert [(s.step, s.value) for s in summary.scalars["loss/auto"]] == [
        (1, 0.9492972), (4, 0.84550273), (8, 0.7205403), (12, 0.6266392)]
    assert summary.rewritten == 3
    assert summary.skipped == {"graphs": 1, "histograms": 14}


# ---------------------------------------------------------------------------- the command workload

def test_a_folder_of_summaries_gives_final_loss_and_accuracy_with_their_directions(tmp_path):
    """On the code before: 'reading TensorBoard event files needs the tensorboard package', or nothing read."""
    record = run_command(tmp_path, log_files=[str(RECORD)])
    assert record.status == "ok", record.reason
    assert quality(record) == {("eval/accuracy", HIGHER): 0.8, ("eval/loss", LOWER): 0.125,
                               ("loss", LOWER): 0.16666667}
    [report] = record.details["log_files"]
    assert report["format"] == "mindspore_summary"
    read = report["read"]
    assert read["skipped"] == {"images": 1, "histograms": 1, "tensors": 1}
    assert read["quality"] == {"eval/accuracy": 3, "eval/loss": 3, "loss": 12}
    # a tag that says neither direction is a detail: its final value, its steps
    learning_rate = read["other_tags"]["learning_rate"]
    assert list(read["other_tags"]) == ["learning_rate"]
    assert {k: learning_rate[k] for k in ("readings", "steps", "final")} == {"readings": 12, "steps": [1, 12],
                                                                              "final": 0.1}
    accuracy = read["tags"]["eval/accuracy"]
    assert accuracy["steps"] == [4, 12] and accuracy["final"] == 0.8 and accuracy["readings"] == 3
    assert accuracy["wall"] == [1795942417.9062653, 1795942418.7461185]
    assert record.figures["seconds"] == pytest.approx(1795942418.7461185 - FIRST_WALL, rel=1e-9)


def test_summary_collector_files_give_the_training_loss_and_skip_the_lineage_file(tmp_path):
    record = run_command(tmp_path, log_files=[str(COLLECTOR)])
    assert record.status == "ok", record.reason
    assert quality(record) == {("loss/auto", LOWER): 0.6266392}
    [report] = record.details["log_files"]  # the _lineage file beside it is not a summary: not listed
    assert report["path"].endswith("_MS")
    assert report["read"]["skipped"] == {"graphs": 1, "histograms": 14}
    assert report["read"]["rewritten"] == 3


def test_time_to_train_comes_from_the_files_own_wall_times(tmp_path):
    record = run_command(tmp_path, log_files=[str(RECORD)], quality_tags=["eval/accuracy"], target_accuracy=0.7)
    assert record.status == "ok", record.reason
    assert record.figures["time_to_train_seconds"] == pytest.approx(ACCURACY_07_WALL - FIRST_WALL, rel=1e-9)


def test_formats_default_includes_it_and_leaving_it_out_skips_the_files(tmp_path):
    assert "mindspore_summary" in COMMAND_FILE_FORMATS and "mindspore_summary" in log_files.FILE_FORMATS
    reports = log_files.read([str(RECORD)], log_files.Options(formats=["tensorboard"]), TrainingLog())
    assert [r.note for r in reports] == ["format 'mindspore_summary' is not in formats"]
    renamed = copy(tmp_path, RECORD_FILE).rename(tmp_path / "summary" / "run.bin")  # named explicitly: by content
    log = TrainingLog()
    [report] = log_files.read([str(renamed)], log_files.Options(formats=COMMAND_FILE_FORMATS), log)
    assert report.format == "mindspore_summary" and log.series["eval/accuracy"][1][-1].value == 0.8


def test_a_command_writing_summaries_is_read_after_it_without_tensorboard(tmp_path, monkeypatch):
    """The documented suite: formats naming MindSpore's, log_files relative to cwd, a folder written by the run."""
    monkeypatch.setattr(log_files, "tensorboard_available", lambda: False)
    params = registry.get("command").resolve(
        {"argv": ["cp", "-r", str(RECORD), "summary_dir"], "cwd": str(tmp_path), "log_files": ["summary_dir"],
         "formats": ["mindspore", "mindspore_summary"], "quality_tags": ["eval/accuracy"]}, "cpu")
    output = command.run(params, RunContext("cpu"))
    assert output.status == "ok", output.reason
    assert output.figures["quality:eval/accuracy:higher_is_better"] == 0.8 and output.figures["accuracy"] == 0.8


# ---------------------------------------------------------------------------- damaged files

@pytest.mark.parametrize(("damage", "reason"), [
    (lambda data: data[:-3], "cut at byte 1156: the record at byte"),
    (lambda data: data[:20] + bytes([data[20] ^ 1]) + data[21:], "damaged at byte 0: the CRC of the record's"),
    (lambda data: b"epoch: 1 step: 1, loss is 0.5\n" * 4, "not a MindSpore summary file: its first 12 bytes"),
    (lambda data: frame(version_event("brain.Event:2")) + data, "its version is 'brain.Event:2'"),
    (lambda data: b"", "empty: no record written yet"),
])
def test_a_damaged_file_fails_with_the_reason(tmp_path, damage, reason):
    path = copy(tmp_path, RECORD_FILE, damage(RECORD_FILE.read_bytes()))
    with pytest.raises(SummaryError, match=re.escape(reason)):
        read_summary(path.read_bytes())
    record = run_command(tmp_path, log_files=[str(path.parent)])
    assert record.status == "failed" and not quality(record)
    [report] = record.details["log_files"]
    assert report["note"].startswith("could not be read (SummaryError: ") and reason[:20] in report["note"]


def test_the_size_limit_of_the_other_readers_applies(tmp_path, monkeypatch):
    monkeypatch.setattr(log_files, "MAX_BYTES", 1024)  # the fixture is 1,159 bytes
    reports = log_files.read([str(RECORD)], log_files.Options(formats=COMMAND_FILE_FORMATS), TrainingLog())
    assert [r.note for r in reports] == ["could not be read (ValueError: larger than 1024 bytes)"]


# ---------------------------------------------------------------------------- the CLI, without tensorboard

HIDE_TENSORBOARD = "import sys; sys.modules['tensorboard'] = None  # as if not installed\n"


def test_the_cli_reads_a_summary_folder_without_the_tensorboard_package(tmp_path):
    """On the code before: unsupported, 'reading TensorBoard event files needs the tensorboard package'."""
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(HIDE_TENSORBOARD)  # every process of the run: the worker too
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hide), os.environ.get("PYTHONPATH", "")]),
           "SIXDIM_HISTORY": str(tmp_path / "history.db"), "SIXDIM_STATE_DIR": str(tmp_path / "state")}
    result = subprocess.run([sys.executable, "-m", "sixdim", "run", "-w", "command", "-d", "cpu", "--json",
                             "-p", f"log_files={RECORD}", "-p", "target_accuracy=0.7",
                             "-p", "quality_tags=eval/accuracy"],
                            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    [record] = json.loads(result.stdout)
    assert record["status"] == "ok"
    assert record["figures"]["quality:eval/accuracy:higher_is_better"] == 0.8
    assert record["figures"]["time_to_train_seconds"] == pytest.approx(ACCURACY_07_WALL - FIRST_WALL, rel=1e-9)


# ---------------------------------------------------------------------------- MindSpore itself, where installed

@pytest.mark.slow
def test_files_mindspore_writes_now_are_read_as_the_fixtures_are(tmp_path):
    pytest.importorskip("mindspore", reason="MindSpore is not installed (pip install mindspore 'numpy<2'): the "
                                            "committed fixtures, written by MindSpore 2.10.0, stand in for it")
    from tests.bench.mindspore_summary_fixtures import write_record

    write_record(tmp_path / "record")
    [path] = (tmp_path / "record").glob("*_MS")
    summary = read_summary(path.read_bytes())
    assert [(s.step, s.value) for s in summary.scalars["eval/accuracy"]] == [(4, 0.6), (8, 0.7), (12, 0.8)]
