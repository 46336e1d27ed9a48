"""Accepted results survive a damaged write-ahead log, and a dead agent's leftovers go once the history has
them (issue 44, items 6 and 11).

Item 6: results committed to a history in WAL mode live only in its ``-wal`` file until a checkpoint copies
them into the database file.  Bytes overwritten in that file after a SIGKILL made SQLite drop every frame
(their checksums fail), ``quick_check`` passed, and the results were gone without a word.  The history now
checkpoints after each write and keeps a ledger of the results written since the last complete checkpoint
beside the database; a history opened on a file that lacks some of them restores them and says so.

Item 11: after a ``kill -9`` mid-suite, the successor found the worker record, saw its cases already in
the history (recorded as they ended), did not write them again, and then took them for results the
history could not take: it kept the folder and warned "could not be written" at every later start.

Everything is real: SQLite files, a second connection holding a read snapshot (which stops a checkpoint
as the daemon's reads do while ``sixdim run`` writes), the state folder's worker records.  The "SIGKILL"
is a copy of the files while the writer still has them open: what a killed process leaves on disk.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from sixdim.store.errors import HistoryError
from sixdim.store.history import History
from tests.helpers import make_record

WAL_HEADER = 32
"""The bytes of a WAL file's header; its frames follow."""


def _killed_copy(path: Path, into: Path) -> Path:
    """The history's files as a process SIGKILLed now leaves them: the database, its -wal and whatever else
    sits beside it, copied while the writer still has them open (no close, so no last checkpoint)."""
    into.mkdir()
    for source in path.parent.iterdir():
        if source.name.startswith(path.name) and not source.name.endswith("-shm"):
            shutil.copy2(source, into / source.name)
    return into / path.name


def _damage_wal(path: Path) -> None:
    """Random bytes over everything after the WAL's header (as the issue's test did)."""
    wal = Path(f"{path}-wal")
    size = wal.stat().st_size
    assert size > WAL_HEADER, "the test needs frames in the WAL to damage"
    with open(wal, "r+b") as handle:
        handle.seek(WAL_HEADER)
        handle.write(os.urandom(size - WAL_HEADER))


def _uids(path: Path) -> set[str]:
    db = sqlite3.connect(path)
    try:
        return {row[0] for row in db.execute("SELECT uid FROM runs")}
    finally:
        db.close()


def test_results_written_before_a_kill_survive_a_damaged_wal(tmp_path):
    path = tmp_path / "live" / "h.db"
    history = History(path)
    records = [make_record(ended_at=2000.0 + i) for i in range(3)]
    for record in records:
        assert history.add(record) is not None  # accepted and written
    copy = _killed_copy(path, tmp_path / "after-kill")
    _damage_wal(copy)

    reopened = History(copy)
    assert {r.uid for r in reopened} == {r.uid for r in records}
    history.close()


def test_results_a_reader_kept_from_the_checkpoint_are_restored_with_a_warning(tmp_path, caplog):
    path = tmp_path / "live" / "h.db"
    History(path).close()  # the schema, checkpointed: the reader below sees an empty table
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    assert reader.execute("SELECT COUNT(*) FROM runs").fetchone() == (0,)  # a snapshot older than the writes
    history = History(path)
    records = [make_record(ended_at=2000.0 + i) for i in range(3)]
    for record in records:
        assert history.add(record) is not None
    copy = _killed_copy(path, tmp_path / "after-kill")
    _damage_wal(copy)
    assert _uids(copy) == set()  # the database file alone lacks them: only the WAL had them

    with caplog.at_level(logging.WARNING, logger="sixdim"):
        reopened = History(copy)
    assert {r.uid for r in reopened} == {r.uid for r in records}
    warned = [m for m in caplog.messages if "missing" in m]
    assert len(warned) == 1 and "3 accepted result(s)" in warned[0] and str(copy) in warned[0]
    reopened.close()
    assert _uids(copy) == {r.uid for r in records}  # written for good: checkpointed at close
    assert not Path(f"{copy}.accepted").exists()  # the close checkpointed: the ledger goes

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="sixdim"):
        History(copy).close()  # nothing missing any more: nothing said
    assert not [m for m in caplog.messages if "missing" in m]
    reader.execute("ROLLBACK")
    reader.close()
    history.close()


def test_an_intact_history_with_a_ledger_restores_nothing_and_says_nothing(tmp_path, caplog):
    path = tmp_path / "live" / "h.db"
    History(path).close()
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM runs").fetchone()
    history = History(path)
    records = [make_record(ended_at=2000.0 + i) for i in range(2)]
    for record in records:
        history.add(record)
    copy = _killed_copy(path, tmp_path / "after-kill")  # a kill, the WAL intact
    assert Path(f"{copy}.accepted").exists()
    with caplog.at_level(logging.WARNING, logger="sixdim"):
        reopened = History(copy)
    assert sorted(r.uid for r in reopened) == sorted(r.uid for r in records)  # each once
    assert not [m for m in caplog.messages if "missing" in m]
    reopened.close()
    reader.execute("ROLLBACK")
    reader.close()
    history.close()


def _executor(history: History, state: Path):
    from sixdim.collectors.nvml import NvmlCollector
    from sixdim.run.executor import Executor

    return Executor(hostname="h", history=history, nvml=NvmlCollector("h"), rapl=None, state_dir=str(state))


def _dead_agents_record(state: Path, path: Path, cases: int) -> tuple[Path, list[str]]:
    """A worker record a ``kill -9`` left mid-suite: the worker streamed ``cases`` results, and the agent had
    recorded each in the history as it ended (uid: the worker's tag and the case's index)."""
    from sixdim.run.devices import Device
    from sixdim.run.runner import RESULTS_FILE
    from sixdim.workloads import registry

    cpu = Device("cpu", model_name="Test CPU")
    gemm = registry.get("gemm")
    items = [(gemm, case) for case in gemm.cases({}, "cpu")[:cases]]
    history = History(path)
    agent = _executor(history, state)
    tag = "4242-1-dead"
    journal = agent.records.begin(tag, cpu, "quick", items, suite_cases=cases)
    lines = []
    for index, (_, case) in enumerate(items):
        lines.append(json.dumps({"kind": "case", "index": index, "status": "ok", "figures": {"seconds": 0.1},
                                 "wall": [1000.0 + index, 1000.5 + index]}))
        record = make_record(ended_at=1000.5 + index, shape=case.shape)
        record.uid = f"{tag}:{index}"
        history.add(record)
    (journal.folder / RESULTS_FILE).write_text("\n".join(lines) + "\n")
    journal.release()  # the agent dies: the kernel drops its lock
    history.close()
    return journal.folder, [f"{tag}:{index}" for index in range(cases)]


def test_a_leftover_whose_results_are_all_in_the_history_goes_without_a_warning(tmp_path, caplog):
    state, path = tmp_path / "state", tmp_path / "h.db"
    folder, uids = _dead_agents_record(state, path, 3)

    successor = _executor(History(path), state)
    with caplog.at_level(logging.WARNING):
        successor.recover_left_behind()
        kept = successor.kept()
    assert kept == []  # what `run` and `serve` warn about at their stop ("could not be written ... kept in")
    assert not folder.exists()
    assert not [m for m in caplog.messages if "cannot take" in m]
    assert _uids(path) == set(uids)  # each once


def test_a_kept_leftover_whose_results_are_all_in_the_history_goes_at_the_next_start(tmp_path):
    """The folder an earlier version kept (its ``unsaved.jsonl``) after such a recovery, at every start."""
    from sixdim.run import orphans
    from sixdim.run.devices import Device

    state, path = tmp_path / "state", tmp_path / "h.db"
    history = History(path)
    records = [make_record(ended_at=2000.0 + i) for i in range(3)]
    for record in records:
        history.add(record)
    agent = _executor(history, state)
    journal = agent.records.begin("4242-2-dead", Device("cpu", model_name="Test CPU"), "quick", [])
    assert journal.keep(list(records))
    journal.release()
    history.close()
    assert (journal.folder / orphans.UNSAVED).exists()

    successor = _executor(History(path), state)
    successor.recover_left_behind()
    assert successor.kept() == []
    assert not journal.folder.exists()
    assert sorted(r.uid for r in History(path)) == sorted(r.uid for r in records)


def test_a_link_or_a_fifo_planted_as_the_ledger_is_neither_followed_nor_read(tmp_path, caplog):
    path = tmp_path / "h.db"
    target = tmp_path / "elsewhere"
    target.write_text("")
    Path(f"{path}.accepted").symlink_to(target)
    with pytest.raises(HistoryError, match="symbolic link"):
        History(path)
    Path(f"{path}.accepted").unlink()

    os.mkfifo(f"{path}.accepted")  # would block a plain open, and feed anything to a reader
    with caplog.at_level(logging.WARNING, logger="sixdim"):
        history = History(path)
        record = make_record()
        assert history.add(record) is not None  # the write goes on without a ledger
    assert any("not a regular file" in m for m in caplog.messages)
    assert target.read_text() == ""
    history.close()
    assert _uids(path) == {record.uid}


@pytest.mark.slow
def test_run_after_a_kill_mid_suite_says_nothing_of_results_it_has(cli_env):
    """The newcomer's case end to end: a later ``sixdim run`` on the dead agent's state folder and history."""
    import subprocess
    import sys

    state, path = Path(cli_env["SIXDIM_STATE_DIR"]), Path(cli_env["SIXDIM_HISTORY"])
    folder, uids = _dead_agents_record(state, path, 3)
    result = subprocess.run(
        [sys.executable, "-m", "sixdim", "run", "-w", "gemm", "-d", "cpu", "-p", "m=32", "-p", "n=32", "-p", "k=32",
         "-p", "precisions=fp32", "-p", "min_round_seconds=0.01", "-p", "warmup_seconds=0.01"],
        env=cli_env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "could not be written" not in result.stderr, result.stderr
    assert not folder.exists() and list((state / "workers").iterdir()) == []
    assert set(uids) <= _uids(path)


def test_pruning_waits_while_the_ledger_holds_results_the_database_file_lacks(tmp_path):
    """Review of issue 44's ledger: a prune that deleted runs still kept in the ledger (a reader held the
    checkpoint back) let the next start write them again, counted twice beside their pruned counts.  The
    prune waits for the checkpoint instead, and prunes once the ledger is gone."""
    path = tmp_path / "h.db"
    History(path).close()
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    assert reader.execute("SELECT COUNT(*) FROM runs").fetchone() == (0,)  # holds the checkpoint back
    history = History(path)
    for i in range(3):
        assert history.add(make_record(ended_at=1000.0 + i)) is not None
    assert Path(f"{path}.accepted").exists()
    waited = history.prune(keep_seconds=10, now=5000.0)
    assert waited.runs_removed == 0 and len(list(history)) == 3
    reader.execute("ROLLBACK")
    reader.close()
    pruned = history.prune(keep_seconds=10, now=5000.0)
    assert pruned.runs_removed == 3 and list(history) == []
    assert not Path(f"{path}.accepted").exists()
    history.close()
    assert list(History(path)) == []  # nothing comes back from a ledger
