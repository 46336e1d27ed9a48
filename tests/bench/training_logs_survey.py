"""Run sixdim's log parser over a folder of training logs and count how often it agrees with what each
log says, by hand: its benchmark, its quality metric(s) with their direction and final value, its time
to train and whether the run is ok.

    python tests/bench/training_logs_survey.py tests/fixtures/logs/mlperf_real

The expectations are a JSON file (``expectations.json`` in the folder unless ``--expect`` names one):
per file name, any of ``benchmark``, ``metrics`` ({name: {"direction": ..., "final": ...}}),
``time_to_train`` (seconds, or null for none), ``status`` (``ok`` or ``failed``), ``target_reached``,
``evaluations`` ({name: count}).  A field the expectations leave out is not counted.  Without
expectations the script only prints what it read.  It uses only the parser's long-standing interface
(``parse_lines``, ``make_parsers``, ``TrainingLog``), so it also runs against an older sixdim (put that
one first on ``PYTHONPATH``) to compare.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from sixdim.workloads.logs.parsers import make_parsers, parse_lines
from sixdim.workloads.logs.training_log import TrainingLog

FIELDS = ("benchmark", "metrics", "time_to_train", "status", "target_reached", "evaluations")


def read(path: Path, formats: tuple[str, ...] = ("ai_rank", "mlperf")) -> dict[str, Any]:
    """What the parser makes of one log, in the expectations' terms."""
    log = parse_lines(path.read_text(errors="replace").splitlines(), make_parsers(formats), TrainingLog())
    qualities = log.qualities()
    failure = log.run_failure() if hasattr(log, "run_failure") else (  # an older sixdim: command.py's rule
        "unfinished" if log.started and not log.stopped else
        "status" if log.stopped and log.status not in (None, "success") else None)
    if not log.has_figures() and not log.started:
        failure = "nothing read"  # command.py's first rule
    return {"benchmark": log.benchmark,
            "metrics": {q.metric.name: {"direction": q.metric.direction, "final": q.final} for q in qualities},
            "evaluations": {q.metric.name: len(q.values) for q in qualities},
            "time_to_train": log.time_to_train,
            "status": "failed" if failure else "ok",
            "target_reached": getattr(log, "details", {}).get("target_reached"),
            "reason": failure or ""}


def _close(a: Any, b: Any, rel: float = 1e-6, absolute: float = 1e-3) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(float(a), float(b), rel_tol=rel, abs_tol=absolute)


def agrees(field: str, expected: Any, got: dict[str, Any]) -> bool:
    value = got[field]
    if field == "time_to_train":
        return _close(expected, value)
    if field == "metrics":
        return set(expected) == set(value) and all(
            value[name]["direction"] == want.get("direction", value[name]["direction"])
            and _close(want["final"], value[name]["final"], absolute=1e-9) for name, want in expected.items())
    return expected == value


def survey(folder: Path, expectations: dict[str, dict[str, Any]] | None, out=sys.stdout,
           quiet: bool = False) -> Counter:
    """Print each log's reading (and each disagreement); return the counts: per field, how many logs
    agree (``<field>``) of how many the expectations cover (``<field>_checked``), and ``logs``,
    ``logs_agreeing`` (every field of the log agrees); and what was read, expected or not:
    ``read_ok``, ``read_failed``, ``read_with_time_to_train``, ``read_target_reached_<True|False|None>``."""
    counts: Counter = Counter()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in (".txt", ".log")):
        got = read(path)
        want = (expectations or {}).get(str(path.relative_to(folder)))
        counts["logs"] += 1
        counts[f"read_{got['status']}"] += 1
        counts["read_with_time_to_train"] += got["time_to_train"] is not None
        counts[f"read_target_reached_{got['target_reached']}"] += 1
        metrics = ", ".join(f"{n} {m['final']:.6g} ({m['direction']})" for n, m in got["metrics"].items()) or "none"
        ttt = "none" if got["time_to_train"] is None else f"{got['time_to_train']:.3f} s"
        if not quiet:
            print(f"{path.name}: {got['benchmark']}; {metrics}; time to train {ttt}; {got['status']}", file=out)
        if want is None:
            continue
        wrong = []
        for field in FIELDS:
            if field not in want:
                continue
            counts[f"{field}_checked"] += 1
            if agrees(field, want[field], got):
                counts[field] += 1
            else:
                wrong.append(f"{field}: expected {want[field]!r}, read {got[field]!r}")
        counts["logs_agreeing"] += not wrong
        for line in wrong:
            print(f"{path.name}: DISAGREES {line}" if quiet else f"    DISAGREES {line}", file=out)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--expect", type=Path, help="expectations JSON (default: <folder>/expectations.json)")
    parser.add_argument("--quiet", action="store_true", help="print the counts only")
    args = parser.parse_args(argv)
    expect = args.expect or args.folder / "expectations.json"
    expectations = json.loads(expect.read_text()) if expect.exists() else None
    counts = survey(args.folder, expectations, quiet=args.quiet)
    print(f"\nread: {counts['read_ok']} ok, {counts['read_failed']} failed, {counts['read_with_time_to_train']} with a "
          f"time to train; target reached: {counts['read_target_reached_True']} yes, "
          f"{counts['read_target_reached_False']} no, {counts['read_target_reached_None']} not decided")
    print(f"{counts['logs']} logs", end="")
    if expectations is not None:
        print(f", {counts['logs_agreeing']} agreeing in every field checked")
        for field in FIELDS:
            if counts[f"{field}_checked"]:
                print(f"  {field}: {counts[field]}/{counts[f'{field}_checked']}")
    else:
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
