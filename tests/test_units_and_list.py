"""Issue 29, item 11: the command line and the report say the same thing the same way.

Memory in ``sixdim run``'s table and in the HTML report (and ``sixdim report``) comes from one formatter with
binary prefixes (``321 MiB``), never MB in one place and MiB in the other; and ``sixdim list`` and
``sixdim list --shapes`` print the same count, in the same words, for each shape set."""

import json
import re
import sqlite3
import subprocess
import sys

import pytest

from sixdim.report.format import fmt
from tests.helpers import call_sixdim, make_record

BYTES = (0, 512, 1536, 150e6, 337e6, 3.82 * 2 ** 30, 80e9, 141e9)


def _cells(table: str, column: str) -> list[str]:
    """A column of ``sixdim run``'s table, read by the header's position (cells may hold spaces)."""
    header, *rows = table.split("\n\n", 1)[0].splitlines()
    start = re.search(rf"(?<!\S){re.escape(column)}(?!\S| memory)", header).start()
    end = header.find("  ", start + len(column))
    while end != -1 and header[end] == " ":
        end += 1
    return [row[start:end if end != -1 else None].strip() for row in rows]


@pytest.mark.parametrize("value", BYTES)
def test_the_run_table_prints_memory_as_the_report_does(value):
    from sixdim.cli import _results_table

    table = _results_table([make_record(memory_bytes=value, device_memory_bytes=value)])
    assert _cells(table, "memory") == [fmt("memory_bytes", value)], table
    assert _cells(table, "device memory") == [fmt("device_memory_bytes", value)], table
    assert not re.search(r"\d [kMGT]B\b", table), table  # no SI bytes left


def test_a_missing_memory_is_a_dash_in_the_table():
    from sixdim.cli import _results_table

    table = _results_table([make_record()])
    assert _cells(table, "memory") == ["-"] and _cells(table, "device memory") == ["-"]


@pytest.mark.slow
def test_a_real_run_prints_its_recorded_memory_as_the_report_would(cli_env, tmp_path):
    """``sixdim run`` as a user types it, then the figure it recorded, formatted by the report."""
    result = subprocess.run(
        [sys.executable, "-m", "sixdim", "run", "-w", "gemm", "-d", "cpu", "-p", "m=64", "-p", "n=64", "-p", "k=64",
         "-p", "precisions=fp32", "-p", "min_round_seconds=0.01", "-p", "warmup_seconds=0.01",
         "-p", "power_seconds=0"], capture_output=True, text=True, env=cli_env, timeout=300)
    assert result.returncode == 0, result.stderr
    with sqlite3.connect(cli_env["SIXDIM_HISTORY"]) as db:
        (figures,) = db.execute("SELECT figures FROM runs").fetchone()
    recorded = json.loads(figures)["memory_bytes"]
    assert _cells(result.stdout, "memory") == [fmt("memory_bytes", recorded)], result.stdout
    assert "iB" in _cells(result.stdout, "memory")[0]


# ---------------------------------------------------------------------------- list and list --shapes

def _sets_in_list(text: str) -> dict[str, dict[str, str]]:
    """Per workload, each set's count as ``sixdim list`` prints it (its 'run on a GPU by default' line)."""
    out: dict[str, dict[str, str]] = {}
    workload = ""
    for line in text.splitlines():
        if re.match(r"[a-z_0-9]+: ", line):
            workload = line.split(":", 1)[0]
        elif line.startswith("  run on a GPU by default: "):
            counts = line.split(": ", 1)[1].split(" (a shape: ", 1)[0]
            out[workload] = dict(part.split(": ", 1) if ": " in part else ("cases", part)
                                 for part in counts.split("; "))
    return out


def _sets_in_shapes(text: str) -> dict[str, dict[str, tuple[str, int]]]:
    """Per workload, each set's header count in ``sixdim list --shapes`` and the lines listed under it."""
    out: dict[str, dict[str, tuple[str, int]]] = {}
    workload, current = "", None
    for line in text.splitlines():
        if re.match(r"[a-z_0-9]+: ", line):
            workload, current = line.split(":", 1)[0], None
        elif header := re.fullmatch(r"  ([a-z_]+) \((.*)\):", line):
            current = [header.group(2), 0]
            out.setdefault(workload, {})[header.group(1)] = current
        elif line.startswith("    ") and current is not None:
            current[1] += 1
        elif not line.startswith("    "):
            current = None
    return {w: {s: (c[0], c[1]) for s, c in sets.items()} for w, sets in out.items()}


def test_list_and_list_shapes_print_the_same_count_for_every_set(cli_env):
    listed = call_sixdim("list", env=cli_env)
    shapes = call_sixdim("list", "--shapes", env=cli_env)
    assert listed.returncode == 0 and shapes.returncode == 0, listed.stderr + shapes.stderr
    in_list, in_shapes = _sets_in_list(listed.stdout), _sets_in_shapes(shapes.stdout)
    assert {"gemm", "conv", "rnn", "sparse_gemm", "allreduce"} <= set(in_list), in_list
    for workload, sets in in_list.items():
        assert {name: count for name, (count, _) in in_shapes[workload].items()} == sets, workload
        for name, (count, lines) in in_shapes[workload].items():
            assert count.startswith(f"{lines} shape"), (workload, name, count, lines)  # the lines it lists
    # GEMM: int8 and fp8 run DeepBench's NN and TN shapes in their one layout, NT, so a set has more
    # shapes than each precision runs, and both outputs say how many each runs
    assert in_list["gemm"]["quick"] == "9 shapes, 5 per precision"
    assert in_list["gemm"]["training"] == "233 shapes, 83\u2013160 per precision"
    assert "a shape: a line of 'sixdim list --shapes', its transposes and layout included" in listed.stdout


def test_list_shapes_names_each_precision_once_however_many_passes_run_it(cli_env):
    """A convolution runs forward, backward-data and backward-weight in the same precisions: its shapes
    are run by every precision, and no line repeats a precision once per pass."""
    text = call_sixdim("list", "--shapes", env=cli_env).stdout
    conv = text.split("\nconv: ", 1)[1].split("\nrnn: ", 1)[0]
    lines = [line.strip() for line in conv.split("  training (", 1)[1].splitlines()[1:] if line.startswith("    ")]
    assert lines and all(" only)" not in line for line in lines), lines[:3]
    assert "fp32, fp32" not in text
