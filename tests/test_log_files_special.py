"""Issue 44, item 5: a log folder whose files are links to /dev/zero, FIFOs or oversized files cannot make the
worker read without end or block.  Real links, a real FIFO, a real device, and the readers of
``workloads/logs/log_files.py`` as the command workload calls them."""

from __future__ import annotations

import json
import os
import resource
import threading
import time

import pytest

from sixdim.workloads.logs import log_files
from sixdim.workloads.logs.training_log import TrainingLog

FORMATS = ("hf_trainer", "lightning_csv")


def read(folder, *patterns: str) -> tuple[list[log_files.Report], float, int]:
    """The reports, the seconds taken and the growth of the process's peak resident memory (KiB)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    reports = log_files.read(list(patterns) or [str(folder)], log_files.Options(formats=FORMATS), TrainingLog())
    return reports, time.monotonic() - started, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak


def test_links_to_dev_zero_are_refused_not_read(tmp_path):
    """On the code before, each was read until the size limit or the worker's memory gave out (3.1 GB in the
    report): ``st_size`` of a device is 0, so the size check passed."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").symlink_to("/dev/zero")
    (run / "trainer_state.json").symlink_to("/dev/zero")
    reports, seconds, grown = read(run)
    notes = {os.path.basename(r.path): r.note for r in reports}
    assert notes == {"metrics.csv": "not a regular file (a character device): not read",
                     "trainer_state.json": "not a regular file (a character device): not read"}
    assert seconds < 5 and grown < 50 * 1024
    named, _, _ = read(run, str(run / "metrics.csv"))  # named explicitly, not found in a folder: the same
    assert [r.note for r in named] == ["not a regular file (a character device): not read"]


def test_a_fifo_does_not_block_the_reader(tmp_path):
    """A FIFO found in a log folder was opened and read, blocking the worker until its timeout."""
    fifo = tmp_path / "trainer_state.json"
    os.mkfifo(fifo)
    done: list = []
    thread = threading.Thread(target=lambda: done.append(read(tmp_path)), daemon=True)
    thread.start()
    thread.join(10)
    assert done, "reading a FIFO blocked"
    [report] = done[0][0]
    assert report.note == "not a regular file (a FIFO): not read"


def test_a_file_swapped_for_a_device_after_it_was_found_is_refused_as_opened(tmp_path):
    path = tmp_path / "metrics.csv"
    path.symlink_to("/dev/zero")
    with pytest.raises(ValueError, match="not a regular file"):
        log_files.read_limited(path)


def test_at_most_the_limit_is_read_from_a_regular_file(tmp_path):
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"log_history": [{"eval_accuracy": 0.5, "step": 1}]}))
    assert log_files.read_limited(path) == path.read_bytes()
    with pytest.raises(ValueError, match="larger than"):
        log_files.read_limited(path, limit=10)
    assert log_files.read_limited(path, limit=10, whole=False) == path.read_bytes()[:10]
    grown = tmp_path / "big" / "metrics.csv"
    grown.parent.mkdir()
    grown.write_text("step,loss\n" + "1,0.5\n" * 10)
    reports = log_files.read([str(grown.parent)], log_files.Options(formats=FORMATS), TrainingLog())
    assert [r.note for r in reports if "could not" in r.note] == []
