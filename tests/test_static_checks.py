"""The static checks: layers that hold, types in the core and store, lint; and the package list.

The layers and their rules are import-linter contracts in pyproject.toml, drawn in
docs/ARCHITECTURE.md; tests/static_checks.py runs them over the package laid out as the wheel has it.
The wheel itself (one top-level name, every module, runs without the checkout) is built by
tests/test_docker.py, from exactly the files the image build sends.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests import static_checks
from tests.conftest import required_tool

ROOT = Path(__file__).resolve().parent.parent


def test_the_import_layers_hold():
    result = static_checks.lint()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 4 kept, 0 broken." in result.stdout


@pytest.mark.parametrize("module, line, broken", [
    ("core/upward.py", "import sixdim.cli\n", "Layers: each imports only the layers below it BROKEN"),
    ("store/torch_user.py", "import torch\n", "The daemon never imports torch"),
    ("report/regressions.py", "\nfrom sixdim.report import command\n", "No circles"),
    ("workloads/kernels/gemm.py", "\nfrom sixdim.workloads.logs import logparse\n", "Workloads by kind"),
    ("workloads/onnx/session.py", "\nfrom sixdim.workloads.models import linearity\n", "Workloads by kind"),
    ("workloads/measure/stats.py", "\nfrom sixdim.workloads.kernels import gemm\n", "Workloads by kind"),
])
def test_the_contracts_catch_what_they_forbid(tmp_path, module, line, broken):
    """An upward import, torch in the daemon, a circle (command imports regressions), one kind of workload
    reaching into another (onnx's one allowed way across, into the model definitions, is no wider than that
    module), the shared measuring reaching into a kind: each breaks its contract, naming the module."""
    laid_out = static_checks.lay_out(tmp_path)
    with (laid_out / "sixdim" / module).open("a") as source:
        source.write(line)
    result = static_checks.lint(laid_out=laid_out)
    assert result.returncode == 1, result.stdout
    assert broken in result.stdout
    assert Path(module).stem in result.stdout  # named, in full or relative to its package


def test_every_folder_with_modules_is_a_listed_package():
    """pyproject's explicit package list misses no sub-package (a missed one would be absent from
    the wheel, though an editable install still finds it)."""
    listed = set(static_checks.tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for name, folder in static_checks.package_dirs().items():
        for init in folder.rglob("__init__.py"):
            relative = init.parent.relative_to(folder)
            found.add(".".join((name, *relative.parts)))
    assert found == listed


@pytest.mark.slow
def test_the_core_and_store_layers_type_check_strictly():
    result = static_checks.types()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout


@pytest.mark.slow
def test_mypy_would_catch_a_type_error_in_the_core(tmp_path, monkeypatch):
    """The strict check can fail: a wrong return type in a laid-out copy of the core is reported."""
    original = static_checks.lay_out

    def lay_out_with_a_bug(target):
        laid_out = original(target)
        (laid_out / "sixdim" / "core" / "broken.py").write_text("def answer() -> int:\n    return 'forty-two'\n")
        return laid_out

    monkeypatch.setattr(static_checks, "lay_out", lay_out_with_a_bug)
    result = static_checks.types()
    assert result.returncode == 1
    assert "sixdim/core/broken.py:2: error: Incompatible return value type" in result.stdout


def test_ruff_finds_nothing():
    ruff = required_tool("ruff", where="pip install -e '.[test]'")
    result = subprocess.run([ruff, "check", "--no-cache", str(ROOT)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
