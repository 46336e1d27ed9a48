"""What ``sixdim report regressions`` holds per run it reads (issue 42, item 8: 353 MiB at 300,000 runs).

Was: every ok run kept as a tuple of 19 Python floats (about 700 bytes a run, 64 MiB for 100,000 runs),
and every series' working arrays of the analysis held at once.  Now a series keeps its runs as float
arrays of the figures it has (about 100 bytes a run), and the analysis works a bounded pass at a time.
Bytes counted by tracemalloc (numpy reports its arrays to it), not timed: the figure does not depend
on the machine's load."""

from __future__ import annotations

import math
import random
import sqlite3
import time
import tracemalloc

import numpy as np
import pytest

from sixdim.core.catalog import WATCHED
from sixdim.report import regressions
from sixdim.store.history import History
from sixdim.store.rows import row_of as _row
from tests.helpers import make_record

SERIES = 10
RUNS = 1000


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """10 GEMM series of 1,000 runs, 1% noise, a 5% step halfway in one of them, written as the agent's rows."""
    path = tmp_path_factory.mktemp("memory") / "history.db"
    History(path).close()
    rnd = random.Random(3)
    t0 = time.time() - RUNS * 900
    rows = []
    for i in range(RUNS):
        for s in range(SERIES):
            slow = 1.05 if s == 0 and i >= RUNS // 2 else 1.0
            record = make_record(seconds=0.01 * slow * (1 + rnd.gauss(0, 0.01)), ended_at=t0 + i * 900 + s,
                                 shape=f"m={8 * (s + 1)},n=8,k=8", power_watts=650.0 + rnd.gauss(0, 5))
            record.uid = f"{i}-{s}"
            rows.append(_row(record))
    with sqlite3.connect(path) as db:
        db.executemany(f"INSERT INTO runs ({', '.join(rows[0])}) VALUES ({', '.join(':' + c for c in rows[0])})", rows)
    return str(path)


def test_the_runs_read_are_held_as_compact_arrays(history):
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        found = regressions.read_history(history)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert found.runs == SERIES * RUNS
    per_run = held / found.runs
    assert per_run < 250, f"{per_run:.0f} bytes held per run read"  # was about 700


def test_the_arrays_read_are_the_runs_as_written(history):
    """The compact arrays give back every run: its times, its figures (absent ones not finite), its id."""
    found = regressions.read_history(history)
    width = 3 + len(found.figures)
    with sqlite3.connect(history) as db:
        seconds = dict(db.execute("SELECT id, json_extract(figures, '$.seconds') FROM runs"))
    for s in found.series.values():
        table, ids = s.table(width), s.run_ids()
        assert table.shape == (RUNS, width) and len(ids) == RUNS and list(ids) == sorted(ids)
        j = 3 + found.figures.index("seconds")
        assert table[:, j].tolist() == [seconds[i] for i in ids.tolist()]
        assert np.isfinite(table[:, 3 + found.figures.index("flops")]).all()
        assert not np.isfinite(table[:, 3 + found.figures.index("samples_per_second")]).any()
        assert (np.diff(table[:, 0]) > 0).all() and s.times().tolist() == table[:, :2].tolist()
    shifts = regressions.analyse(found)
    assert {(s["shape"], s["figure"], s["state"]) for s in shifts} == {
        ("m=8,n=8,k=8", "seconds", "regression"), ("m=8,n=8,k=8", "flops", "regression")}


def test_a_value_that_is_no_number_is_not_a_figure():
    """The fast path reads a chunk of numbers at once; a bool, a text, an object or an array in a
    run's list sends that chunk a run at a time, and such a value is no figure."""
    figures = ("seconds", "flops", "power_watts")
    values = ["[0.5,1e999,2]", "[true,\"x\",3]", "[[1,2],{\"a\":1},4]", None]
    raw = [None, None, None, '{"seconds": NaN, "flops": 7, "power_watts": Infinity}']
    table = regressions.figure_table(values, raw, figures)
    assert table[0].tolist() == [0.5, math.inf, 2.0]
    assert table[1].tolist() == [math.inf, math.inf, 3.0]
    assert table[2].tolist() == [math.inf, math.inf, 4.0]
    assert math.isnan(table[3][0]) and table[3][1] == 7.0 and table[3][2] == math.inf
    assert regressions.figure_table(["[1,2]", "[3,4]"], [None, None], ("seconds", "flops")).tolist() == \
        [[1.0, 2.0], [3.0, 4.0]]
    assert len(WATCHED) > 2  # the report asks for every watched figure, so a list is never a single value


def test_small_chunks_joined_as_they_come_give_the_same_runs(history, monkeypatch):
    """A long history's series gather a part per chunk; past ``MAX_PARTS`` they are joined into one as
    the reading goes (here every few chunks): the runs, their order and their ids are the same."""
    whole = regressions.read_history(history)
    monkeypatch.setattr(regressions, "READ_CHUNK", 50)  # 200 chunks: 5 runs of a series each
    parts = regressions.read_history(history)
    width = 3 + len(whole.figures)
    assert parts.runs == whole.runs and parts.series.keys() == whole.series.keys()
    for key, s in parts.series.items():
        assert len(s.parts) < regressions.MAX_PARTS
        assert np.array_equal(s.table(width), whole.series[key].table(width), equal_nan=True)
        assert np.array_equal(s.run_ids(), whole.series[key].run_ids())
