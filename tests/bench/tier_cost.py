"""What one run of each tier costs a device, and its share of the device's hour at the schedule's intervals.

    python3 tests/bench/tier_cost.py [--schedule agent/default.toml] RUN.json [RUN.json ...]

Each RUN.json is the output of ``sixdim run --suite NAME --json`` (one suite run on one or more
devices).  A run's device time is the sum of its cases' ``details.case_wall`` spans, per device (issue
41's definition: set-up, warm-up, timed rounds, power phase and check of each case; the worker's
start-up, importing torch and creating the CUDA context, is not device work and is not counted).  The
runs per hour come from the schedule's suite of the same name: ``interval_seconds``, or a cron line
whose minute and hour are numbers, lists or ``*`` (and the other fields ``*``); a suite the schedule
does not name, or runs by a cron it cannot count, gets no share.  tests/bench/gpu_kit.sh ``tiers``
runs it on a GPU; on the CPU the same lines come from runs there.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

HOUR = 3600.0


def runs_per_hour(suite: dict[str, Any]) -> float | None:
    """How often the schedule runs ``suite`` per hour (None: it cannot tell)."""
    if suite.get("interval_seconds"):
        return HOUR / float(suite["interval_seconds"])
    fields = str(suite.get("cron", "")).split()
    if len(fields) != 5 or any(field != "*" for field in fields[2:]):
        return None
    counts = []
    for field, size in zip(fields[:2], (60, 24)):
        if field == "*":
            counts.append(size)
        elif all(part.isdigit() for part in field.split(",")):
            counts.append(len(set(field.split(","))))
        else:
            return None
    return counts[0] * counts[1] / 24.0


def device_seconds(records: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """(suite, device) -> the sum of its cases' case_wall spans."""
    sums: dict[tuple[str, str], float] = defaultdict(float)
    for record in records:
        wall = record.get("details", {}).get("case_wall")
        if isinstance(wall, list) and len(wall) == 2:
            sums[(record["suite"], record.get("device") or record.get("device_type", ""))] += wall[1] - wall[0]
    return dict(sums)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schedule", default=str(Path(__file__).resolve().parents[2] / "agent" / "default.toml"),
                        help="the configuration whose suites' intervals give the runs per hour")
    parser.add_argument("runs", nargs="+", help="outputs of sixdim run --suite NAME --json")
    args = parser.parse_args()
    schedule = {suite["name"]: suite for suite in tomllib.loads(Path(args.schedule).read_text()).get("suites", [])}
    per_run: dict[tuple[str, str], list[float]] = defaultdict(list)
    statuses: dict[str, set[str]] = defaultdict(set)
    for path in args.runs:
        text = Path(path).read_text()
        records = json.loads(text) if text.strip() else []
        for key, seconds in device_seconds(records).items():
            per_run[key].append(seconds)
        for record in records:
            statuses[record["suite"]].add(record["status"])
    total: dict[str, float] = defaultdict(float)
    for (suite, device), seconds in sorted(per_run.items()):
        rate = runs_per_hour(schedule.get(suite, {}))
        typical = statistics.median(seconds)
        line = (f"{suite} on {device}: {len(seconds)} run(s), device seconds per run (sum of case_wall) "
                f"{', '.join(f'{s:.1f}' for s in seconds)}; median {typical:.1f} s")
        if rate is None:
            line += f"; no share (the schedule {args.schedule} has no countable interval for {suite!r})"
        else:
            share = typical * rate
            total[device] += share
            line += f"; {rate:g} run(s) an hour: {share:.1f} s of each hour ({share / HOUR:.2%})"
        print(line + f"; statuses {sorted(statuses[suite])}")
    for device, seconds in sorted(total.items()):
        print(f"these tiers on {device}: {seconds:.1f} s of each hour ({seconds / HOUR:.2%}) "
              f"at {args.schedule}'s intervals")
    return 0


if __name__ == "__main__":
    sys.exit(main())
