"""Issue 29, item 12: the install command a newcomer copies from the README is the fast one where PyTorch's
index cannot be reached (one retry, a short timeout per try, instead of pip's five retries with backoff for
each package: measured 13 min 16 s without them, 1 min 51 s and 2 min 22 s with them), still uses that
index where it can be reached, and is the command CI runs, character for character."""

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTORCH_CPU = "https://download.pytorch.org/whl/cpu"


def _readme_install() -> str:
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    installs = [b.strip() for b in blocks if "pip install -e" in b and "torch==" in b]
    assert len(installs) == 1, installs
    assert "\n" not in installs[0], installs[0]  # one line to copy
    return installs[0]


def _ci_lines() -> list[str]:
    return [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]


def test_the_readme_install_command_gives_up_on_an_unreachable_index_quickly():
    words = shlex.split(_readme_install())
    assert words[:4] == ["python", "-m", "pip", "install"], words
    assert "--retries" in words and words[words.index("--retries") + 1] == "1"
    assert "--timeout" in words and words[words.index("--timeout") + 1] == "10"


def test_pip_reads_the_readme_command_as_meant():
    """pip's own parser: the options are options (not package names), the command line's timeout beats a
    PIP_DEFAULT_TIMEOUT or configuration file, and PyTorch's index is still asked, beside any configured."""
    from pip._internal.commands import create_command

    options, packages = create_command("install").parse_args(shlex.split(_readme_install())[4:])
    assert options.retries == 1 and options.timeout == 10
    assert PYTORCH_CPU in options.extra_index_urls
    assert packages == ["torch==2.13.0"] and options.editables == [".[test]"]


def test_ci_runs_the_readme_install_command_exactly():
    command = _readme_install()
    assert command in _ci_lines(), "'.ci/run' does not run the README's install command as it is written"
    ci = (ROOT / ".ci" / "run").read_text()
    # nothing in CI's environment makes its install faster or slower than the newcomer's
    assert not re.search(r"^\s*export\s+PIP_", ci, re.M), "CI's pip settings differ from the README's command"
