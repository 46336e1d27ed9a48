"""The static checks CI runs (through tests/test_static_checks.py), on the package as it installs.

    python -m tests.static_checks imports       # import-linter: the layers of docs/ARCHITECTURE.md
    python -m tests.static_checks types         # mypy, strict over the core and store layers
    python -m tests.static_checks lay-out DIR   # only lay the package out in DIR (tests/bench/gpu_kit.sh)

The settings are in pyproject.toml (``[tool.importlinter]``, ``[tool.mypy]``).  ``ruff check .``
needs nothing of this: it reads the checkout as it is.

Why a layout: sixdim installs as one package, ``sixdim``, whose sub-packages come from four
folders (``agent/`` is ``sixdim`` itself; ``workloads/``, ``collectors/`` and ``dashboards/`` are
mapped into it by ``[tool.setuptools.package-dir]``).  import-linter's graph builder (grimp) and
mypy read one folder per top-level package and follow no editable-install finder, so both would
miss the mapped three.  This copies the sources into a temporary folder as the wheel lays them out
and runs the tools there.
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


def types() -> subprocess.CompletedProcess:
    """mypy with ``[tool.mypy]`` of pyproject.toml (strict for the packages it names) over the layout."""
    with tempfile.TemporaryDirectory(prefix="sixdim-types-") as folder:
        lay_out(Path(folder))
        command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                   "--cache-dir", str(Path(folder) / ".mypy_cache")]
        return subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=600)


def main() -> int:
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "lay-out" and len(sys.argv) == 3:
        lay_out(Path(sys.argv[2]))
        return 0
    if what not in ("imports", "types"):
        print(__doc__, file=sys.stderr)
        return 2
    result = lint(verbose="--verbose" in sys.argv) if what == "imports" else types()
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
