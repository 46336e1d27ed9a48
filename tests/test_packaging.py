"""The package as it installs: one name (``sixdim``) in site-packages, and layers that hold.

The layers and their rules are import-linter contracts in pyproject.toml, drawn in
docs/ARCHITECTURE.md; tests/layers.py runs them over the package laid out as the wheel has it.
The wheel itself (one top-level name, every module, runs without the checkout) is built by
tests/test_docker.py, from exactly the files the image build sends.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import layers

ROOT = Path(__file__).resolve().parent.parent


def test_the_import_layers_hold():
    result = layers.lint()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 3 kept, 0 broken." in result.stdout


@pytest.mark.parametrize("module, line, broken", [
    ("core/upward.py", "import sixdim.cli\n", "Layers: each imports only the layers below it BROKEN"),
    ("store/torch_user.py", "import torch\n", "The daemon never imports torch"),
    ("report/regressions.py", "\nfrom sixdim.report import command\n", "No circles"),
])
def test_the_contracts_catch_what_they_forbid(tmp_path, module, line, broken):
    """An upward import, torch in the daemon, a circle (command imports regressions): each breaks
    its contract, naming the module."""
    laid_out = layers.lay_out(tmp_path)
    with (laid_out / "sixdim" / module).open("a") as source:
        source.write(line)
    result = layers.lint(laid_out=laid_out)
    assert result.returncode == 1, result.stdout
    assert broken in result.stdout
    assert Path(module).stem in result.stdout  # named, in full or relative to its package


def test_every_folder_with_modules_is_a_listed_package():
    """pyproject's explicit package list misses no sub-package (a missed one would be absent from
    the wheel, though an editable install still finds it)."""
    listed = set(layers.tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for name, folder in layers.package_dirs().items():
        for init in folder.rglob("__init__.py"):
            relative = init.parent.relative_to(folder)
            found.add(".".join((name, *relative.parts)))
    assert found == listed
