"""The fixed cost of a case, before and after a change to the workloads: interleaved suite runs (issue 41).

    python tests/bench/case_cost.py --before 4f40dbd [--suites frequent,power,quick] [--pairs 3] [--out FILE]

Each suite runs as ``sixdim run --suite NAME --json --device cpu`` (a fresh worker, a history of its own)
alternately from two copies of the package laid out as the wheel installs it (``tests.static_checks``'s
``lay_out``): **after**, this checkout's files; **before**, the same with the workload modules that differ
from ``--before`` (``git diff --name-only REV -- workloads/``, less ``registry.py`` and ``shapes.py``: the
presets stay the checkout's, so both sides run the same cases) read back from that revision with
``git show``.  Nothing in the checkout or its index changes.  The pairs alternate their order (before
first, then after first), so a drift in the machine's load weighs on both alike.

A run's device time is the sum of its cases' ``details.case_wall`` spans (the definition of issue 41:
the worker's start-up is not counted); the script also keeps each case's span, the process's wall time
and the load average (``os.getloadavg``) when each run started.  It prints, per suite, each pair's
after/before ratio of the summed spans and their median, the best run of each side (the one least
disturbed by other processes), and per workload the median and best span on each side.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.static_checks import lay_out  # noqa: E402

NOT_SWAPPED = {"workloads/registry.py", "workloads/kernels/shapes.py"}
"""The presets and shape sets: the same on both sides, so both run the same cases."""


def changed_workload_files(revision: str) -> list[str]:
    """Workload modules that differ between ``revision`` and the checkout (the presets excepted)."""
    names = subprocess.run(["git", "diff", "--name-only", revision, "--", "workloads/"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    return [name for name in names if name.endswith(".py") and name not in NOT_SWAPPED]


def build_trees(folder: Path, revision: str, files: list[str]) -> dict[str, Path]:
    """Two layouts of the package: ``after`` (the checkout), ``before`` (``files`` as at ``revision``)."""
    trees = {"after": lay_out(folder / "after"), "before": lay_out(folder / "before")}
    for name in files:
        target = trees["before"] / "sixdim" / "workloads" / Path(name).name
        shown = subprocess.run(["git", "show", f"{revision}:{name}"], cwd=ROOT, capture_output=True, text=True)
        if shown.returncode == 0:
            target.write_text(shown.stdout)
        else:  # a module the change added: absent before it
            target.unlink(missing_ok=True)
    return trees


def run_suite(tree: Path, suite: str, folder: Path) -> dict[str, Any]:
    """One run of ``suite`` from ``tree``: each case's span, their sum, the process's wall and the load."""
    state = Path(tempfile.mkdtemp(dir=folder))
    env = dict(os.environ, PYTHONPATH=str(tree))
    load = os.getloadavg()
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "sixdim", "run", "--suite", suite, "--json", "--device", "cpu",
                           "--no-guard", "--history", str(state / "history.db"), "--state-dir", str(state / "state")],
                          env=env, capture_output=True, text=True, cwd=folder)
    wall = time.perf_counter() - started
    records = json.loads(done.stdout) if done.stdout.strip() else []
    cases = []
    for record in records:
        span = record.get("details", {}).get("case_wall")
        cases.append({"workload": record["workload"], "shape": record.get("shape", ""),
                      "precision": record.get("precision", ""), "pass": record.get("kernel_pass", ""),
                      "status": record["status"], "seconds": span[1] - span[0] if span else None})
    return {"suite": suite, "load": list(load), "wall_seconds": wall, "exit": done.returncode,
            "device_seconds": sum(c["seconds"] or 0.0 for c in cases), "cases": cases,
            "statuses": sorted({c["status"] for c in cases})}


def _seconds(runs: list[dict[str, Any]]) -> str:
    return ", ".join(f"{run['device_seconds']:.2f}" for run in runs)


def _spans(runs: list[dict[str, Any]], workload: str) -> list[float]:
    """Each run's summed case spans of one workload."""
    return [sum(c["seconds"] or 0.0 for c in run["cases"] if c["workload"] == workload) for run in runs]


def summary(runs: list[dict[str, Any]], suite: str) -> list[str]:
    """Lines of the suite's figures: per pair the after/before ratio, then per workload the medians."""
    mine = [r for r in runs if r["suite"] == suite]
    before = [r for r in mine if r["side"] == "before"]
    after = [r for r in mine if r["side"] == "after"]
    ratios = [a["device_seconds"] / b["device_seconds"] for b, a in zip(before, after) if b["device_seconds"]]
    lines = [f"{suite}: {len(before)} pairs; device seconds per run (sum of case_wall) "
             f"before {_seconds(before)}; after {_seconds(after)}",
             f"  after/before per pair {', '.join(f'{x:.3f}' for x in ratios)}; median "
             f"{statistics.median(ratios):.3f}; best run (least interference) "
             f"{min(r['device_seconds'] for r in before):.2f} s before, "
             f"{min(r['device_seconds'] for r in after):.2f} s after" if ratios else "  no pair",
             f"  load average (1 min) at each run's start {min(r['load'][0] for r in mine):.2f}-"
             f"{max(r['load'][0] for r in mine):.2f}; statuses {sorted({s for r in mine for s in r['statuses']})}"]
    workloads = dict.fromkeys(c["workload"] for r in mine for c in r["cases"])
    for workload in workloads:
        b, a = statistics.median(_spans(before, workload)), statistics.median(_spans(after, workload))
        count = sum(1 for c in mine[0]["cases"] if c["workload"] == workload)
        lines.append(f"  {workload:18} {count:3} case(s): median {b:7.2f} s before, {a:7.2f} s after "
                     f"({a / b if b else float('nan'):.3f}); best {min(_spans(before, workload)):.2f} / "
                     f"{min(_spans(after, workload)):.2f} s")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the revision whose workload modules are 'before'")
    parser.add_argument("--suites", default="frequent,power,quick")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--files", help="comma-separated workload files to swap (default: those that differ)")
    parser.add_argument("--out", help="write every run's figures here (JSON)")
    args = parser.parse_args()
    files = args.files.split(",") if args.files else changed_workload_files(args.before)
    print(f"before = {args.before} for {', '.join(files) or 'nothing (no workload module differs)'}")
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="sixdim-case-cost-") as temporary:
        folder = Path(temporary)
        trees = build_trees(folder, args.before, files)
        for suite in args.suites.split(","):
            for pair in range(args.pairs):
                order = ("before", "after") if pair % 2 == 0 else ("after", "before")
                for side in order:
                    run = run_suite(trees[side], suite, folder)
                    run["side"], run["pair"] = side, pair
                    runs.append(run)
                    print(f"{suite} pair {pair} {side:6}: {run['device_seconds']:7.2f} s of cases, "
                          f"{run['wall_seconds']:6.1f} s wall, load {run['load'][0]:.2f}, exit {run['exit']}",
                          flush=True)
    for suite in args.suites.split(","):
        print("\n".join(summary(runs, suite)))
    if args.out:
        Path(args.out).write_text(json.dumps({"before": args.before, "files": files, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
