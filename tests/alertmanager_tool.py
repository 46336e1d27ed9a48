"""The Alertmanager binary for the tests that start one, and why it may not start.

Debian's build (package ``prometheus-alertmanager``) reads its notification templates from a folder compiled
into the binary, ``/usr/share/prometheus/alertmanager`` (``strings`` shows it; no flag or environment variable
moves it).  Unpacked with ``dpkg-deb -x`` into ``.tools``, as README.md's recipe and .ci/run do, the templates
are under ``.tools`` instead, and Alertmanager refuses every configuration at its start ("failed to parse
templates: open /usr/share/prometheus/alertmanager/default.tmpl") and exits.  The recipe's second line copies
them to that folder where they are missing.  Where that was not done, a test that starts Alertmanager skips,
naming the missing file and that line (and fails where ``SIXDIM_REQUIRE_TOOLS=1``, as in CI), rather than wait
for an Alertmanager that is gone.  Upstream's binary embeds its templates and never reads the folder.
"""

from __future__ import annotations

import mmap
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import required_tool

DEBIAN_TEMPLATES = Path("/usr/share/prometheus/alertmanager")
TEMPLATES = ("default.tmpl", "email.tmpl")
"""The templates Alertmanager parses at every configuration load (its own notifications' and e-mails')."""
RECIPE_STEP = ("the second line of README.md's recipe for the tools (as root, as .ci/run runs it), which copies "
               ".tools/usr/share/prometheus/alertmanager/*.tmpl there")


def missing_templates(binary: Path, folder: Path = DEBIAN_TEMPLATES) -> list[Path]:
    """The templates ``binary`` reads from ``folder`` (a path compiled into it) that are not there; none for a
    binary that does not name the folder."""
    with open(binary, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data.find(str(folder).encode() + b"/") < 0:
            return []
    return [folder / name for name in TEMPLATES if not (folder / name).is_file()]


def templates_problem(binary: Path, folder: Path = DEBIAN_TEMPLATES) -> str | None:
    """Why ``binary`` cannot start, in one sentence naming the files and the recipe step, or None."""
    missing = missing_templates(binary, folder)
    if not missing:
        return None
    return (f"{binary} (Debian's build) reads its templates from {folder}, a path compiled into it, and "
            f"{', '.join(map(str, missing))} {'is' if len(missing) == 1 else 'are'} missing: run {RECIPE_STEP}")


def alertmanager_binary() -> str:
    """Alertmanager as Debian installs it (``prometheus-alertmanager``) or as upstream names it, ready to start;
    the test skips (or fails with ``SIXDIM_REQUIRE_TOOLS=1``) where it is missing or its templates are."""
    path = next(filter(None, map(shutil.which, ("prometheus-alertmanager", "alertmanager"))), None)
    if path is None:
        return required_tool("prometheus-alertmanager", "prometheus-alertmanager")
    problem = templates_problem(Path(path))
    if problem:
        if os.environ.get("SIXDIM_REQUIRE_TOOLS") == "1":
            pytest.fail(problem + ", but SIXDIM_REQUIRE_TOOLS=1")
        pytest.skip(problem)
    return path
