"""The docs match the code: every metric and option documented, README and CI agree."""

import re
from pathlib import Path

import pytest

from sixdim.config import load
from sixdim.config.schema import OPTIONS
from sixdim.core import catalog

ROOT = Path(__file__).resolve().parent.parent


def test_every_metric_and_option_is_in_the_architecture_doc():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    for metric in catalog.ALL_METRICS:
        assert f"`{metric.name}`" in text, metric.name
    for option in OPTIONS:
        for name in (option.key, option.flag, option.env):
            assert f"`{name}" in text, name


PRODUCT_FOLDERS = ("agent", "workloads", "collectors", "dashboards")


def test_the_architecture_doc_is_a_true_map_of_the_code():
    """Every product module is named in docs/ARCHITECTURE.md, and every file or folder any doc names
    exists (a moved or renamed module leaves no stale path behind)."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    for folder in PRODUCT_FOLDERS:
        for module in sorted((ROOT / folder).rglob("*.py")):
            relative = module.relative_to(ROOT).as_posix()
            if module.name != "__init__.py":
                assert f"`{relative}`" in text, f"{relative} is not in docs/ARCHITECTURE.md"
    folders = "|".join(PRODUCT_FOLDERS)
    pattern = re.compile(rf"\b((?:{folders})/[A-Za-z0-9_./*-]+\.(?:py|toml|json|md))\b")
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(ROOT.glob("*/README.md"))]:
        for path in set(pattern.findall(doc.read_text())):
            assert list(ROOT.glob(path)), f"{doc.relative_to(ROOT)} names {path}, which does not exist"


def test_every_result_figure_is_defined_once_in_the_catalog():
    """A result metric's figure is one of the catalog's FIGURES (its name, unit and verdict come from
    there), but for the run's end time and a summary's shape count, which are bookkeeping."""
    keys = {m.figure for m in catalog.ALL_METRICS if m.figure} - {"ended_at", "shapes"}
    assert keys <= set(catalog.FIGURES_BY_KEY), sorted(keys - set(catalog.FIGURES_BY_KEY))
    assert len(catalog.FIGURES) == len(catalog.FIGURES_BY_KEY)  # no key twice
    assert set(catalog.WATCHED) <= set(catalog.FIGURES_BY_KEY) and set(catalog.RATES) <= set(catalog.WATCHED)


def test_ci_runs_the_readme_install_and_test_commands():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", readme, re.S)
    install = next(b.strip() for b in blocks if "pip install" in b)
    test = next(b.strip() for b in blocks if "pytest" in b)
    assert install.replace("python3 -m pip", "python -m pip") in ci.replace("python -m pip install -q",
                                                                           "python -m pip install")
    assert test in ci


def _toml_blocks():
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for number, block in enumerate(re.findall(r"```toml\n(.*?)```", path.read_text(), re.S)):
            yield pytest.param(block, id=f"{path.name}-{number}")


@pytest.mark.parametrize("block", list(_toml_blocks()))
def test_every_toml_example_in_the_docs_loads_with_the_real_loader(tmp_path, block):
    """A user copies these into a file: each must be a configuration sixdim takes as it is."""
    path = tmp_path / "example.toml"
    path.write_text(block)
    path.chmod(0o644)
    config = load(str(path), env={"SIXDIM_HISTORY": str(tmp_path / "h.db"), "SIXDIM_STATE_DIR": str(tmp_path / "s")})
    assert config.source == str(path)
