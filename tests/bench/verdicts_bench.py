"""What the live regression verdicts cost the daemon: per-run update, restore at start, rendering.

Usage: python tests/bench/verdicts_bench.py [--series 400] [--runs 1000] [--figures 3] [--conditions]

Builds a history of ``series`` GEMM series with ``runs`` runs each (1% Gaussian noise; ``figures``
watched figures per run: flops, power_watts, memory_bytes), then measures

- the restore the daemon does at start (:meth:`sixdim.verdicts.live.Verdicts.restore`: each series'
  last runs only), wall seconds and runs per second;
- the update after one new run (all of its figures), microseconds, from the restored state;
- rendering the results part of /metrics with every series' verdicts;
- with ``--conditions``, every run carries a GPU's recorded conditions (issue 26), as a real history's
  runs do: what reading them back and keeping them for the diagnosis adds (restore time, the
  process's resident memory after the restore).

Figures go to docs/BENCHMARKS.md; the tests assert behaviour only.  ``SIXDIM_SIM_DETECTOR=/path/detector.py``
measures another copy of the detector module (a previous release's) for a before/after ratio.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

if os.environ.get("SIXDIM_SIM_DETECTOR"):  # another copy of the detector (a previous release's), as regression_sim
    _spec = importlib.util.spec_from_file_location("sixdim.verdicts.detector", os.environ["SIXDIM_SIM_DETECTOR"])
    assert _spec is not None and _spec.loader is not None
    sys.modules["sixdim.verdicts.detector"] = _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)

import psutil  # noqa: E402
from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402

from sixdim.http.board import Board  # noqa: E402
from sixdim.http.exporter import SixdimCollector  # noqa: E402
from sixdim.store.history import History  # noqa: E402
from sixdim.verdicts.live import Verdicts  # noqa: E402
from tests.helpers import make_record  # noqa: E402

FIGURES = ("power_watts", "memory_bytes")


def build(path: Path, series: int, runs: int, figures: int, seed: int = 0, conditions: bool = False) -> int:
    from tests.test_causes import healthy

    rng = random.Random(seed)
    history = History(path)
    records = []
    for run in range(runs):
        for shape in range(series):
            extra = {name: 300.0 * (1 + rng.gauss(0, 0.01)) for name in FIGURES[:max(0, figures - 1)]}
            record = make_record(seconds=0.01 * (1 + rng.gauss(0, 0.01)), ended_at=1e6 + 900.0 * run,
                                 shape=f"m={shape},n=8,k=8", **extra)
            if conditions:
                record.conditions = healthy(rng)
            records.append(record)
    with history._lock, history._db:  # one transaction: building the fixture is not what is measured
        history._db.executemany(
            "INSERT INTO runs (suite, workload, precision, params, shape, mode, kernel_pass, hostname, device_type, "
            "device, gpu, uuid, model_name, pci_bus_id, status, reason, started_at, ended_at, figures, details, "
            "environment, uid, conditions) VALUES (:suite, :workload, :precision, :params, :shape, :mode, "
            ":kernel_pass, :hostname, :device_type, :device, :gpu, :uuid, :model_name, :pci_bus_id, :status, :reason, "
            ":started_at, :ended_at, :figures, :details, :environment, :uid, :conditions)",
            [_row(r, i) for i, r in enumerate(records)])
    history.close()
    return len(records)


def _row(record, index: int) -> dict:
    import json
    row = record.to_dict()
    row.pop("id")
    row["uid"] = f"bench-{index}"
    for column in ("params", "figures", "details", "environment", "conditions"):
        row[column] = json.dumps(row[column], sort_keys=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=400)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--figures", type=int, default=3, choices=(1, 2, 3))
    parser.add_argument("--conditions", action="store_true", help="every run carries a GPU's conditions")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "history.db"
        total = build(path, args.series, args.runs, args.figures, conditions=args.conditions)
        gc.collect()
        before = psutil.Process().memory_info().rss
        history = History(path)
        verdicts = Verdicts()
        started = time.perf_counter()
        read = verdicts.restore(history)
        restore = time.perf_counter() - started
        gc.collect()
        grown = (psutil.Process().memory_info().rss - before) / 2**20
        print(f"history: {total} runs, {args.series} series, {args.figures} watched figure(s) per run")
        print(f"restore: {read} runs read ({verdicts.restore_runs} per series) in {restore:.2f} s "
              f"({read / restore:,.0f} runs/s); resident memory grew {grown:.0f} MiB"
              + (" (runs with conditions)" if args.conditions else ""))
        rng = random.Random(1)
        new = [make_record(seconds=0.01 * (1 + rng.gauss(0, 0.01)), ended_at=2e6 + i,
                           shape=f"m={i % args.series},n=8,k=8",
                           **{name: 300.0 for name in FIGURES[:args.figures - 1]}) for i in range(2000)]
        started = time.perf_counter()
        for record in new:
            verdicts.add(record)
        update = (time.perf_counter() - started) / len(new)
        print(f"update after one run: {update * 1e6:.0f} us ({args.figures} figure(s))")
        board = Board(verdicts)
        for record in new[-args.series:]:
            board._latest[record.key()] = record
        registry = CollectorRegistry()
        registry.register(SixdimCollector(board, [], "bench", part="results"))
        started = time.perf_counter()
        body = generate_latest(registry)
        print(f"render results part with verdicts: {time.perf_counter() - started:.3f} s, {len(body) / 1e6:.2f} MB, "
              f"{body.count(b'sixdim_regression_state{')} state series")
    return 0


if __name__ == "__main__":
    sys.exit(main())
