"""What the store promises the layers above it: the runs the live verdicts restore from, whatever holds them
(the daemon's ``History``, the report's rows), and its own error, so that nothing above it catches ``sqlite3``."""

import sqlite3

import pytest

from sixdim.store.errors import StoreError
from sixdim.store.history import History
from sixdim.verdicts import detector as regression
from sixdim.verdicts.live import ConditionsSource, RunSource, Verdicts
from tests.helpers import make_record


def _slowed_series(runs: int = 40, shape: str = "m=8,n=8,k=8"):
    """A steady series, then six runs 10 % slower: out of ok once restored."""
    records = []
    for i in range(runs + 6):
        seconds = 0.01 * (1.10 if i >= runs else 1.0 + 0.001 * (i % 5))
        record = make_record(seconds=seconds, ended_at=1000.0 + 60 * i, shape=shape)
        record.conditions = {"clock_sm_mhz": 1980.0}
        records.append(record)
    return records


def test_verdicts_holding_a_series_already_restore_the_rest_from_the_history(tmp_path):
    """A Verdicts that judged a run before its restore keeps conditions in memory, so it reads the history's runs
    with their conditions (``recent_per_series``): a History must give them, not fail (and be logged and
    skipped, leaving every restored series unjudged)."""
    history = History(tmp_path / "h.db")
    records = _slowed_series()
    for record in records:
        history.add(record)
    verdicts = Verdicts()
    verdicts.add(make_record(seconds=0.02, ended_at=500.0, shape="m=1,n=1,k=1"))  # another series, judged first
    assert verdicts.restore(history) == len(records)
    [slowed] = [s for s in verdicts.snapshot() if s.record.shape == "m=8,n=8,k=8"]
    fresh = Verdicts()  # the same runs restored by a Verdicts that held nothing (conditions read back by id)
    assert fresh.restore(history) == len(records)
    [expected] = fresh.snapshot()
    assert slowed.verdicts["flops"].state == expected.verdicts["flops"].state
    assert slowed.verdicts["flops"].state in (regression.REGRESSION, regression.SUSPICIOUS)
    restored = list(history.recent_per_series(verdicts.restore_runs))
    assert [r.uid for r in restored] == [r.uid for r in records]
    assert all(r.conditions == {"clock_sm_mhz": 1980.0} and r.details == {} and r.params == {} for r in restored)


def test_the_history_and_the_reports_rows_are_what_a_restore_reads():
    from sixdim.report.latest import _Runs

    assert isinstance(History.__new__(History), ConditionsSource)
    assert isinstance(_Runs([]), RunSource) and not isinstance(_Runs([]), ConditionsSource)


def test_a_read_of_a_closed_history_raises_the_stores_own_error(tmp_path):
    history = History(tmp_path / "h.db")
    history.add(make_record())
    history.close()
    with pytest.raises(StoreError, match="closed"):
        history.after(0)


def test_a_prune_of_a_locked_history_raises_the_stores_own_error(tmp_path):
    history = History(tmp_path / "h.db", busy_timeout=0.05)
    history.add(make_record(ended_at=1000.0))
    other = sqlite3.connect(tmp_path / "h.db", timeout=0.05)
    other.execute("BEGIN IMMEDIATE")  # another process writing
    try:
        with pytest.raises(StoreError, match="locked"):
            history.prune(keep_seconds=0.0, now=2000.0)
    finally:
        other.rollback()
        other.close()
    assert history.prune(keep_seconds=0.0, now=2000.0).runs_removed == 1


def test_the_readers_rows_hold_each_column_in_the_field_of_its_name(tmp_path):
    """The rows the reports read (sixdim.store.rows.RunRow, FigureRow) are selected by their fields' names: a
    run whose every column holds a value of its own comes back with each in its field, through each read."""
    import json

    from sixdim.core.results import SHAPE_SET, RunRecord
    from sixdim.store import reader
    from sixdim.store.rows import FigureRow, RunRow

    record = RunRecord(suite="nightly", workload="gemm", precision="bf16", params={SHAPE_SET: "set-7"},
                       shape="m=8", mode="training", kernel_pass="backward", hostname="node9", device_type="cuda",
                       device="cuda:3", gpu="3", uuid="GPU-u", model_name="H200", pci_bus_id="0:1b", status="ok",
                       reason="", started_at=100.0, ended_at=107.0, figures={"seconds": 0.5, "flops": 2e12},
                       environment={"driver": "550.1"})
    history = History(tmp_path / "h.db")
    history.add(record)
    history.close()
    with reader.reading(str(tmp_path / "h.db")) as db:
        [[recent]] = list(reader.recent_per_series(db, 5))
        [[chunked]] = list(reader.chunks(db, reader.RunsQuery(RunRow)))
        [[figured]] = list(reader.chunks(db, reader.RunsQuery(FigureRow, figure_values=("flops", "seconds"))))
    for row in (recent, chunked):
        assert type(row) is RunRow and row.id == 1
        for name in RunRow._fields[1:]:
            expected = {"figures": json.dumps(record.figures, sort_keys=True),
                        "environment": json.dumps(record.environment, sort_keys=True),
                        "shape_set": "set-7"}.get(name, getattr(record, name, None))
            assert getattr(row, name) == expected, name
        assert row.key == record.key() and row.device == record.key().device
    assert type(figured) is FigureRow and figured.key == record.key()
    assert (figured.id, figured.model_name, figured.started_at, figured.ended_at) == (1, "H200", 100.0, 107.0)
    assert (json.loads(figured.figure_values), figured.unread_figures) == ([2e12, 0.5], None)


def test_a_row_type_that_names_no_column_or_misplaces_the_figures_is_refused():
    from typing import NamedTuple

    from sixdim.store import reader
    from sixdim.store.rows import FigureRow, RunRow

    class WithDetails(NamedTuple):
        id: int
        details: str

    with pytest.raises(ValueError, match="details"):
        reader.RunsQuery(WithDetails)  # type: ignore[type-var]
    with pytest.raises(ValueError, match="figure_values"):
        reader.RunsQuery(RunRow, figure_values=("flops",))
    with pytest.raises(ValueError, match="figure_values"):
        reader.RunsQuery(FigureRow)
