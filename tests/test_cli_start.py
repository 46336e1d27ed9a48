"""The command line starts light (issue 31): building its parser, ``--help`` and the terminal report
import none of the heavy libraries that only some commands use (grafanalib and PyYAML for dashboards
and rules, numpy, plotly, APScheduler, prometheus-client, bcrypt, torch, NVML).  Every ``sixdim``
command builds the whole parser, so a heavy import at the top of one command's module is paid by all.

Times are not asserted here (a busy machine would break any bound): tests/bench/cli_start.py measures
them, and docs/BENCHMARKS.md has the figures.  What is asserted is what makes them: the modules loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import make_record

HEAVY = ("numpy", "yaml", "grafanalib", "attr", "plotly", "scipy", "apscheduler", "prometheus_client", "bcrypt",
         "torch", "pynvml")

PROBE = """
import json, sys
from sixdim.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:  # argparse's --help
    code = exc.code
sys.stdout.flush()
print("\\nMODULES " + json.dumps(sorted({m.split(".")[0] for m in sys.modules})), file=sys.stderr)
"""


def loaded(*argv: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120)
    line = [text for text in done.stderr.splitlines() if text.startswith("MODULES ")]
    assert line, done.stderr[-2000:]
    return set(json.loads(line[-1].removeprefix("MODULES ")))


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["report", "--help"], ["dashboards", "--help"],
                                  ["rules", "--help"], ["fleet", "--help"], ["list"]])
def test_help_and_list_import_no_heavy_library(argv):
    heavy = loaded(*argv) & set(HEAVY)
    assert not heavy, f"sixdim {' '.join(argv)} imported {sorted(heavy)}"


def test_the_terminal_report_imports_no_heavy_library(tmp_path):
    from sixdim.store.history import History

    history = History(tmp_path / "h.db")
    history.add(make_record())
    history.close()
    heavy = loaded("report", "--history", str(tmp_path / "h.db")) & set(HEAVY)
    assert not heavy, f"sixdim report imported {sorted(heavy)}"


def test_the_commands_that_need_them_still_load_them(tmp_path):
    """The probe sees imports at all: the dashboards command does load grafanalib."""
    assert "grafanalib" in loaded("dashboards", "--out", str(tmp_path / "boards"))
