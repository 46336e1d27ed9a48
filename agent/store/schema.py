"""The history's tables: their schema, the migrations from every older version, and the columns a run is read by.

:func:`prepare` brings a file of any older schema to :data:`SCHEMA_VERSION`: the migration of each version
it passes, then the schema script (``IF NOT EXISTS`` throughout, so it makes what a migration left out).
A file a newer sixdim wrote is refused (:class:`HistoryError`)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sixdim.core.results import DEVICE_FIELDS, INTERRUPTED, SERIES_FIELDS, Interruption, RunRecord
from sixdim.store.errors import HistoryError

SCHEMA_VERSION = 6

SERIES_COLUMNS = SERIES_FIELDS
SERIES = ", ".join(SERIES_COLUMNS)
SERIES_DEFS = ",\n    ".join(f"{c} TEXT NOT NULL" for c in SERIES_COLUMNS)
DEVICE_DEFS = ",\n    ".join(f"{c} TEXT NOT NULL" for c in DEVICE_FIELDS)
"""The device columns of both ``runs`` and ``interruptions``: :class:`sixdim.core.results.DeviceIdentity`'s fields."""

INTERRUPTIONS_TABLE = f"""
CREATE TABLE IF NOT EXISTS interruptions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    uid TEXT NOT NULL UNIQUE,
    suite TEXT NOT NULL,
    {DEVICE_DEFS},
    reason TEXT NOT NULL,
    started_at REAL NOT NULL,
    ended_at REAL NOT NULL,
    cases_done INTEGER NOT NULL,
    cases_left INTEGER NOT NULL,
    running TEXT NOT NULL DEFAULT '',
    workloads TEXT NOT NULL DEFAULT '[]'
);"""
"""One row per interrupted suite run (:class:`sixdim.core.results.Interruption`), kept forever (a few bytes each)."""

INCIDENT_COLUMNS: tuple[str, ...] = (*SERIES_FIELDS, "model_name", "series", "figure", "state", "now", "opened_at",
                                     "started_at", "regressed_at", "ended_at", "last_at", "baseline", "ratio",
                                     "latest_ratio", "reason", "causes")
"""What the history keeps of an incident of the live verdicts (``sixdim.verdicts.live.Incident.row``): a series out
of ok, from its first run of the change until it is back, with its size and its likely causes (``causes``: JSON).
An incident is one row, found again by its series and ``opened_at`` (the run at which the verdicts saw it), so
saving it again as it goes on, or after a restart replays it, updates that row."""
INCIDENTS_TABLE = f"""
CREATE TABLE IF NOT EXISTS incidents (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    {SERIES_DEFS},
    model_name TEXT NOT NULL,
    series TEXT NOT NULL,
    figure TEXT NOT NULL,
    state TEXT NOT NULL,
    now TEXT NOT NULL,
    opened_at REAL NOT NULL,
    started_at REAL NOT NULL,
    regressed_at REAL,
    ended_at REAL,
    last_at REAL NOT NULL,
    baseline REAL,
    ratio REAL,
    latest_ratio REAL,
    reason TEXT NOT NULL,
    causes TEXT NOT NULL,
    UNIQUE ({SERIES}, opened_at)
);
CREATE INDEX IF NOT EXISTS incidents_by_end ON incidents (ended_at);"""


def legacy_interrupted(table: str = "") -> str:
    """The rows older versions wrote, one per case an interruption left (``skipped``, reason ``interrupted: ...``)."""
    at = f"{table}." if table else ""
    return f"{at}status = 'skipped' AND {at}reason LIKE '{INTERRUPTED}%'"


SCHEMA = f"""
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    suite TEXT NOT NULL,
    workload TEXT NOT NULL,
    precision TEXT NOT NULL,
    params TEXT NOT NULL,
    shape TEXT NOT NULL,
    mode TEXT NOT NULL DEFAULT '',
    kernel_pass TEXT NOT NULL DEFAULT 'forward',
    {DEVICE_DEFS},
    status TEXT NOT NULL,
    reason TEXT NOT NULL,
    started_at REAL NOT NULL,
    ended_at REAL NOT NULL,
    figures TEXT NOT NULL,
    details TEXT NOT NULL,
    environment TEXT NOT NULL,
    uid TEXT NOT NULL DEFAULT '',
    conditions TEXT NOT NULL DEFAULT '{{}}'
);
CREATE INDEX IF NOT EXISTS runs_by_series_v2 ON runs ({SERIES}, status);
CREATE UNIQUE INDEX IF NOT EXISTS runs_by_uid ON runs (uid) WHERE uid != '';
CREATE INDEX IF NOT EXISTS runs_by_end ON runs (ended_at);
CREATE TABLE IF NOT EXISTS daily (
    {SERIES_DEFS},
    day TEXT NOT NULL,
    driver TEXT NOT NULL,
    cuda TEXT NOT NULL,
    torch TEXT NOT NULL,
    runs INTEGER NOT NULL,
    figures TEXT NOT NULL,
    PRIMARY KEY ({SERIES}, day, driver, cuda, torch)
);
{INTERRUPTIONS_TABLE}
{INCIDENTS_TABLE}
CREATE TABLE IF NOT EXISTS pruned_counts (
    {SERIES_DEFS},
    status TEXT NOT NULL,
    runs INTEGER NOT NULL,
    model_name TEXT NOT NULL,
    pci_bus_id TEXT NOT NULL,
    suite TEXT NOT NULL,
    last_ended_at REAL NOT NULL,
    PRIMARY KEY ({SERIES}, status)
);
"""

MIGRATIONS = {
    # version 1 -> 2: the "params" label became "shape"; "mode" and "pass" labels were added.
    1: """
ALTER TABLE runs RENAME COLUMN params_label TO shape;
ALTER TABLE runs ADD COLUMN mode TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN kernel_pass TEXT NOT NULL DEFAULT 'forward';
DROP INDEX IF EXISTS runs_by_series;
""",
    # version 2 -> 3: runs get a unique uid (durable writes); daily medians and pruned counts (retention).
    2: """
ALTER TABLE runs ADD COLUMN uid TEXT NOT NULL DEFAULT '';
""",
    # version 3 -> 4: the conditions each run ran under (sixdim.core.conditions).
    3: """
ALTER TABLE runs ADD COLUMN conditions TEXT NOT NULL DEFAULT '{}';
""",
    # version 4 -> 5: an interrupted suite run is one row of `interruptions`; the rows older versions wrote per
    # case it left (skipped, "interrupted: ...") are folded into one per worker run they came from (its start
    # time), with the cases that worker had finished as cases_done.
    4: INTERRUPTIONS_TABLE + f"""
INSERT OR IGNORE INTO interruptions (uid, suite, hostname, device_type, device, gpu, uuid, model_name, pci_bus_id,
                                     reason, started_at, ended_at, cases_done, cases_left, running, workloads)
SELECT 'folded-' || MIN(r.id), r.suite, r.hostname, r.device_type, r.device, r.gpu, r.uuid, MAX(r.model_name),
       MAX(r.pci_bus_id), r.reason, r.started_at, MAX(r.ended_at),
       (SELECT COUNT(*) FROM runs d WHERE d.started_at = r.started_at AND d.suite = r.suite
               AND d.hostname = r.hostname AND d.device = r.device AND d.uuid = r.uuid
               AND NOT ({legacy_interrupted("d")})),
       COUNT(*), '', json_group_array(DISTINCT r.workload)
FROM runs r WHERE {legacy_interrupted("r")}
GROUP BY r.suite, r.hostname, r.device_type, r.device, r.gpu, r.uuid, r.started_at, r.reason;
DELETE FROM runs WHERE {legacy_interrupted()};
""",
    # version 5 -> 6: the live verdicts' incidents (the table is made by the schema script that follows).
    5: "",
}

JSON_COLUMNS = ("params", "figures", "details", "environment", "conditions")
INTERRUPTION_JSON = ("workloads",)
Recorded = RunRecord | Interruption
"""What the history writes: a run, or a suite run's interruption."""
COLUMNS = ("id", "suite", "workload", "precision", "params", "shape", "mode", "kernel_pass", *DEVICE_FIELDS, "status",
           "reason", "started_at", "ended_at", "figures", "details", "environment", "uid", "conditions")


def prepare(db: sqlite3.Connection, path: Path, busy_timeout: float) -> None:
    """Bring an open history to :data:`SCHEMA_VERSION` (WAL mode, every migration from its version on, then
    the schema script, which makes what is missing); a :class:`HistoryError` for a file a newer sixdim wrote.
    A current file needs no write to open: another process may hold the lock."""
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise HistoryError(f"{path}: written by a newer sixdim (schema {version} > {SCHEMA_VERSION})")
    if version != SCHEMA_VERSION:  # a current file needs no write to open: another process may hold the lock
        for old in range(version, SCHEMA_VERSION) if version > 0 else ():  # 0: a new, empty file
            if old in MIGRATIONS:
                db.executescript(MIGRATIONS[old])
        db.executescript(SCHEMA)
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        db.commit()
    db.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
