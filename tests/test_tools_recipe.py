"""README.md's recipe for the Prometheus tools, as .ci/run runs it, makes Debian's Alertmanager start.

Debian's Alertmanager reads its templates from a folder compiled into it (tests/alertmanager_tool.py); the
recipe unpacks the packages into ``.tools`` and then copies the templates to that folder where they are missing.
README.md and .ci/run hold the same lines, the template step's shell does what it says (run here on a copy of
the paths), and a test that starts Alertmanager knows when the templates are missing and says which file and
which step.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.alertmanager_tool import DEBIAN_TEMPLATES, RECIPE_STEP, TEMPLATES, missing_templates, templates_problem

ROOT = Path(__file__).resolve().parent.parent
UNPACKED = ".tools" + str(DEBIAN_TEMPLATES)
"""Where dpkg-deb -x puts Debian's /usr/share/prometheus/alertmanager."""


def recipe() -> list[str]:
    """The lines of README.md's block that unpacks Debian's Prometheus packages."""
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    found = [b for b in blocks if "apt-get download prometheus prometheus-alertmanager" in b]
    assert len(found) == 1, found
    return found[0].strip().splitlines()


def template_step() -> str:
    [line] = [line for line in recipe() if str(DEBIAN_TEMPLATES) in line]
    return line


def test_the_readme_and_ci_run_the_same_recipe_with_the_template_step():
    lines = recipe()
    assert len(lines) == 2 and lines[0].startswith("apt-get download prometheus prometheus-alertmanager")
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    start = ci.index(lines[0])
    assert ci[start:start + len(lines)] == lines  # the same lines, one after the other
    step = template_step()
    assert f"[ -e {DEBIAN_TEMPLATES}/{TEMPLATES[0]} ] ||" in step and f"cp {UNPACKED}/*.tmpl " in step
    assert "README.md" in RECIPE_STEP and "second line" in RECIPE_STEP


def run_step(tmp_path: Path) -> Path:
    """The template step with its absolute folder moved under ``tmp_path/root`` (the unpacked copy stays
    relative to the working folder, ``tmp_path``); the folder it fills."""
    target = tmp_path / "root" / str(DEBIAN_TEMPLATES).lstrip("/")
    step = re.sub(rf"(?<!\.tools){re.escape(str(DEBIAN_TEMPLATES.parent))}", str(target.parent), template_step())
    assert step.count(str(target)) == 3  # the test, the folder made, the copies' destination
    subprocess.run(["sh", "-euc", step], cwd=tmp_path, check=True)
    return target


def test_the_template_step_copies_the_unpacked_templates_only_where_they_are_missing(tmp_path):
    unpacked = tmp_path / ".tools" / str(DEBIAN_TEMPLATES).lstrip("/")
    (unpacked / "ui").mkdir(parents=True)
    for name in TEMPLATES:
        (unpacked / name).write_text(f"{{{{ define {name!r} }}}}{{{{ end }}}}\n")
    target = run_step(tmp_path)  # a fresh machine: no such folder
    assert sorted(p.name for p in target.iterdir()) == sorted(TEMPLATES)
    assert all((target / name).read_text() == (unpacked / name).read_text() for name in TEMPLATES)
    (target / TEMPLATES[0]).write_text("installed by the package\n")
    run_step(tmp_path)  # there already: left alone
    assert (target / TEMPLATES[0]).read_text() == "installed by the package\n"
    shutil.rmtree(target)
    target.mkdir()  # the folder without the templates (an Alertmanager package's UI only)
    run_step(tmp_path)
    assert sorted(p.name for p in target.iterdir()) == sorted(TEMPLATES)


def test_a_binary_that_reads_the_folder_is_told_apart_and_the_reason_names_file_and_step(tmp_path):
    folder = tmp_path / "share" / "alertmanager"
    debian = tmp_path / "prometheus-alertmanager"
    debian.write_bytes(b"\0go build\0" + str(folder).encode() + b"/ui/\0" + str(folder).encode() + b"\0rest")
    upstream = tmp_path / "alertmanager"
    upstream.write_bytes(b"\0go build\0embedded templates\0")
    problem = templates_problem(debian, folder)
    assert problem and all(str(folder / name) in problem for name in TEMPLATES) and RECIPE_STEP in problem
    assert templates_problem(upstream, folder) is None
    folder.mkdir(parents=True)
    (folder / TEMPLATES[0]).write_text("")
    assert missing_templates(debian, folder) == [folder / TEMPLATES[1]]
    (folder / TEMPLATES[1]).write_text("")
    assert templates_problem(debian, folder) is None


def test_debians_alertmanager_names_the_folder():
    """What the skip rests on, where Debian's binary is installed: the folder is compiled into it."""
    binary = shutil.which("prometheus-alertmanager")
    if binary is None:
        pytest.skip("Debian's prometheus-alertmanager is not installed (README.md's recipe unpacks it)")
    assert str(DEBIAN_TEMPLATES).encode() + b"/" in Path(binary).read_bytes()
