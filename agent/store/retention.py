"""Retention: what thinning the history keeps of the runs it removes (:meth:`sixdim.store.history.History.prune`).

Each pruned series keeps one row per day and software environment with the median of every figure of its
``ok`` runs (table ``daily``, kept forever), and its run counts move to ``pruned_counts``, so the exported
run counters never go down; a count whose every run was pruned is labelled from what was kept
(:func:`pruned_record`)."""

from __future__ import annotations

import json
import sqlite3
import statistics
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from sixdim.core.results import RunRecord, counts_as_run
from sixdim.store.schema import SERIES, SERIES_COLUMNS

PRUNE_BATCH = 5_000
"""Rows read per step while thinning, so a prune of a large history holds little memory."""


@dataclass(frozen=True)
class PruneResult:
    runs_removed: int
    daily_rows: int
    seconds: float


def thin(db: sqlite3.Connection, rows: list[sqlite3.Row]) -> int:
    """Fold ``rows`` into ``daily`` (medians, merged with a day already there) and ``pruned_counts``."""
    counts: dict[tuple[str, ...], list[Any]] = {}
    days: dict[tuple[str, ...], list[dict[str, float]]] = {}
    for row in rows:  # oldest first: the last one seen labels the count
        if row["status"] != "ok" and not counts_as_run(row["status"], row["reason"]):
            continue  # an interrupted skip was never counted: pruning it changes no count
        series = tuple(row[c] for c in SERIES_COLUMNS)
        key = (*series, row["status"])
        previous = counts.get(key)
        counts[key] = [(previous[0] if previous else 0) + 1, row["model_name"], row["pci_bus_id"],
                       row["suite"], row["ended_at"]]
        if row["status"] != "ok":
            continue
        environment = json.loads(row["environment"])
        day = datetime.fromtimestamp(row["ended_at"], timezone.utc).strftime("%Y-%m-%d")
        key = (*series, day, str(environment.get("driver", "")), str(environment.get("cuda_runtime", "")),
               str(environment.get("torch", "")))
        days.setdefault(key, []).append(json.loads(row["figures"]))
    db.executemany(
        f"INSERT INTO pruned_counts ({SERIES}, status, runs, model_name, pci_bus_id, suite, last_ended_at) "
        f"VALUES ({','.join('?' * 10)}, ?, ?, ?, ?, ?) "
        f"ON CONFLICT ({SERIES}, status) DO UPDATE SET runs = runs + excluded.runs, "
        f"model_name = excluded.model_name, pci_bus_id = excluded.pci_bus_id, suite = excluded.suite, "
        f"last_ended_at = excluded.last_ended_at",
        [(*key, *value) for key, value in counts.items()])
    where = " AND ".join(f"{c} = ?" for c in (*SERIES_COLUMNS, "day", "driver", "cuda", "torch"))
    for key, figures in days.items():
        earlier = db.execute(f"SELECT runs, figures FROM daily WHERE {where}", key).fetchone()
        runs = len(figures)
        if earlier is not None:  # a day split across batches: weight the earlier median by its runs
            figures = [json.loads(earlier["figures"])] * earlier["runs"] + figures
            runs += earlier["runs"]
        db.execute(
            f"INSERT OR REPLACE INTO daily ({SERIES}, day, driver, cuda, torch, runs, figures) "
            f"VALUES ({','.join('?' * 13)}, ?, ?)", (*key, runs, json.dumps(medians(figures), sort_keys=True)))
    return len(days)


def pruned_record(row: sqlite3.Row) -> RunRecord:
    """A stand-in for the runs of a count whose every run was pruned: labels only, no figures."""
    return RunRecord(suite=row["suite"], workload=row["workload"], precision=row["precision"], params={},
                     shape=row["shape"], mode=row["mode"], kernel_pass=row["kernel_pass"], hostname=row["hostname"],
                     device_type=row["device_type"], device="", gpu=row["gpu"], uuid=row["uuid"],
                     model_name=row["model_name"], pci_bus_id=row["pci_bus_id"], status=row["status"],
                     reason="pruned from the history", started_at=row["last_ended_at"],
                     ended_at=row["last_ended_at"])


def medians(figures: list[dict[str, float]]) -> dict[str, float]:
    names = sorted({name for f in figures for name in f})
    return {name: statistics.median([f[name] for f in figures if isinstance(f.get(name), (int, float))])
            for name in names if any(isinstance(f.get(name), (int, float)) for f in figures)}
