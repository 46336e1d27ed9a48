"""Check the import layers with import-linter, on the package as it installs.

``python -m tests.layers`` (CI runs it through tests/test_layers.py).  ``python -m tests.layers
--lay-out DIR`` only lays the package out in DIR, for a machine where sixdim cannot be installed
(tests/gpu_kit.sh: then ``PYTHONPATH=DIR``).  The contracts are in
pyproject.toml (``[tool.importlinter]``); docs/ARCHITECTURE.md draws them.

Why not plain ``lint-imports``: sixdim installs as one package, ``sixdim``, whose sub-packages
come from four folders (``agent/`` is ``sixdim`` itself; ``workloads/``, ``collectors/`` and
``dashboards/`` are mapped into it by ``[tool.setuptools.package-dir]``).  import-linter's graph
builder (grimp) reads one folder per top-level package, so it would not see the mapped three.
This lays the sources out as the wheel does, in a temporary folder, and runs import-linter there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent


def package_dirs() -> dict[str, Path]:
    """``[tool.setuptools.package-dir]``: each mapped package and its folder."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {name: ROOT / folder for name, folder in setuptools["package-dir"].items()}


def lay_out(target: Path) -> Path:
    """Copy the sources into ``target`` as the wheel installs them (``target/sixdim/...``)."""
    for name, folder in sorted(package_dirs().items()):  # "sixdim" before "sixdim.workloads"
        destination = target.joinpath(*name.split("."))
        shutil.copytree(folder, destination, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.json", "json"))
    return target


def lint(verbose: bool = False, *, laid_out: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``lint-imports`` with the project's contracts over the package laid out in a temporary
    folder (or in ``laid_out``, which :func:`lay_out` made)."""
    with tempfile.TemporaryDirectory(prefix="sixdim-layers-") as temporary:
        folder = str(laid_out) if laid_out is not None else str(lay_out(Path(temporary)))
        env = dict(os.environ, PYTHONPATH=folder)
        command = [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()",
                   str(ROOT / "pyproject.toml"), "--no-cache", "--no-logo", *(["--verbose"] if verbose else [])]
        return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=300)


def main() -> int:
    if "--lay-out" in sys.argv:
        lay_out(Path(sys.argv[sys.argv.index("--lay-out") + 1]))
        return 0
    result = lint(verbose="--verbose" in sys.argv)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
