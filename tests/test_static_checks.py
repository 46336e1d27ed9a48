"""The static checks: layers that hold, types over the whole package (strict in core, store and verdicts),
lint; and the package list.

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
    ("workloads/kernels/gemm.py", "\nfrom sixdim.workloads.logs import parsers\n", "Workloads by kind"),
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


def test_every_package_is_type_checked_and_core_store_verdicts_strictly():
    """mypy checks all of sixdim, strict by default; the override that lifts the strict flags names only
    existing packages, never core, store or verdicts, and the package list it leaves strict includes them."""
    mypy = static_checks.tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert mypy["packages"] == ["sixdim"] and mypy["strict"] is True
    lenient = next(o for o in mypy["overrides"] if o.get("disallow_untyped_defs") is False)
    assert lenient["check_untyped_defs"] is True
    packages = {name for name in static_checks.tomllib.loads((ROOT / "pyproject.toml").read_text())
                ["tool"]["setuptools"]["packages"]}
    top_modules = {f"sixdim.{path.stem}" for path in (ROOT / "agent").glob("*.py") if path.stem != "__init__"}
    named = {m.removesuffix(".*") for m in lenient["module"]}  # "x.*": x and everything under it
    assert named <= packages | top_modules, named - packages - top_modules
    trees = {m.removesuffix(".*") for m in lenient["module"] if m.endswith(".*")}
    strict = {p for p in packages if p not in named and not any(p.startswith(t + ".") for t in trees)}
    assert {"sixdim.core", "sixdim.store", "sixdim.verdicts"} <= strict
    assert top_modules <= named  # the top-level modules (cli, generate) are checked, leniently


@pytest.mark.slow
def test_the_whole_package_type_checks_and_the_check_can_fail_strict_where_strict(tmp_path, monkeypatch):
    """One mypy run over the whole package (a run costs half a minute here) with four files planted: a wrong return
    type in the core and in a workload is reported, a function without annotations is an error in verdicts
    (strict) and not in a workload, and those three are the only errors: the package itself checks clean."""
    original = static_checks.lay_out
    wrong = "def answer() -> int:\n    return 'forty-two'\n"
    untyped = "def double(x):\n    return 2 * x\n"

    def lay_out_with_bugs(target):
        laid_out = original(target)
        (laid_out / "sixdim" / "core" / "broken.py").write_text(wrong)
        (laid_out / "sixdim" / "workloads" / "kernels" / "broken.py").write_text(wrong)
        (laid_out / "sixdim" / "verdicts" / "untyped.py").write_text(untyped)
        (laid_out / "sixdim" / "workloads" / "kernels" / "untyped.py").write_text(untyped)
        return laid_out

    monkeypatch.setattr(static_checks, "lay_out", lay_out_with_bugs)
    result = static_checks.types()
    assert result.returncode == 1
    assert "sixdim/core/broken.py:2: error: Incompatible return value type" in result.stdout
    assert "sixdim/workloads/kernels/broken.py:2: error: Incompatible return value type" in result.stdout
    assert "sixdim/verdicts/untyped.py:1: error: Function is missing a type annotation" in result.stdout
    assert "workloads/kernels/untyped.py" not in result.stdout
    assert "Found 3 errors in 3 files" in result.stdout, result.stdout  # nothing else in the package


def test_ruff_finds_nothing():
    ruff = required_tool("ruff", where="pip install -e '.[test]'")
    result = subprocess.run([ruff, "check", "--no-cache", str(ROOT)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
