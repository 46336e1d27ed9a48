"""A real ``sixdim serve`` on a large history answers at once and restores in the background (issue 31).

It answers /metrics before its results and verdicts are restored, says so (``sixdim_history_restored 0``),
keeps /healthz at 200 meanwhile, and once restored shows every series exactly once with its exact run counts:
the catch-up that starts after the restore adds none of the restored runs again.
"""

from __future__ import annotations

import re
import time
from collections import Counter

import pytest

from tests.bench.scale_bench import SUITE, realistic_history
from tests.conftest import free_port
from tests.daemon import Daemon, write_config

RUNS, SERIES = 20_000, 1_000

SHAPE = re.compile(r"^sixdim_workload_seconds(\{[^}]*\}) ", re.M)
RUNS_LINE = re.compile(r'^sixdim_workload_runs_total\{[^}]*status="(\w+)"[^}]*\} (\S+)$', re.M)
RESTORED = re.compile(r"^sixdim_history_restored\{[^}]*\} (\S+)$", re.M)


def restored(text: str) -> float | None:
    found = RESTORED.search(text)
    return float(found.group(1)) if found else None


@pytest.mark.slow  # a real daemon restoring 20,000 runs (the size is the point: it outlasts the first scrape): 12 s
def test_serve_answers_before_the_restore_and_counts_every_run_once(tmp_path, cli_env):
    db = tmp_path / "history.db"
    statuses = realistic_history(db, RUNS, SERIES)
    cli_env["SIXDIM_HISTORY"] = str(db)
    config = write_config(tmp_path / "c.toml", db, SUITE)
    port = free_port()
    started = time.monotonic()
    daemon = Daemon(config, port, cli_env, tmp_path / "serve.log")
    try:
        first = None
        while first is None and time.monotonic() - started < 60:
            try:
                status, text = daemon.get("/metrics")
            except OSError:
                time.sleep(0.02)
                continue
            assert status == 200
            first = text
        assert first is not None, daemon.log_path.read_text()
        # answered before the restore was done, and said so: the verdicts of 20,000 runs take seconds
        assert restored(first) == 0.0, first[:2000]
        assert "sixdim_build_info" in first  # the live part is there at once
        assert daemon.get("/healthz")[0] == 200  # the scheduler runs meanwhile

        deadline = time.monotonic() + 240
        while True:
            text = daemon.metrics()
            if restored(text) == 1.0:
                break
            assert time.monotonic() < deadline, daemon.log_path.read_text()
            # never a partial count: the results and counters appear all at once or not at all
            counted = sum(float(v) for _, v in RUNS_LINE.findall(text))
            assert counted in (0, RUNS), counted
            time.sleep(0.5)
        time.sleep(2.5)  # a few catch-ups after the restore: none may add a restored run again
        text = daemon.metrics()
        assert restored(text) == 1.0
        shapes = Counter(SHAPE.findall(text))
        assert len(shapes) == SERIES and set(shapes.values()) == {1}  # every series, each once
        counts: Counter[str] = Counter()
        for status, value in RUNS_LINE.findall(text):
            counts[status] += int(float(value))
        assert dict(counts) == statuses
        assert "sixdim_regression_state{" in text  # the verdicts are exported once restored
    finally:
        daemon.stop()
