"""Shared test helpers: tools that must exist in CI, free ports, a CPU-only environment."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess

import pytest


def required_tool(name: str, package: str = "prometheus", *, where: str = "") -> str:
    """Path of an external tool; skip with a reason where it is missing, but fail in CI
    (SIXDIM_REQUIRE_TOOLS=1), where .ci/run installs it, so a check never vanishes silently there.
    ``where`` says how to get it, when that is not Debian's ``package``."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed ({where or f'Debian package {package!r}'})"
        if os.environ.get("SIXDIM_REQUIRE_TOOLS") == "1":
            pytest.fail(message + " but SIXDIM_REQUIRE_TOOLS=1")
        pytest.skip(message)
    return path


@pytest.fixture(autouse=True)
def private_state_dir(tmp_path, monkeypatch) -> None:
    """Each test's sixdim processes get their own state directory (lock files, worker records), so
    tests never share a device lock with each other, nor with a sixdim running on the machine."""
    monkeypatch.setenv("SIXDIM_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture
def promtool() -> str:
    return required_tool("promtool")


def promtool_check(promtool: str, text: str) -> subprocess.CompletedProcess:
    return subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def cli_env(tmp_path) -> dict[str, str]:
    """Environment for running the sixdim CLI in a child: history under tmp_path, no user config, and
    temporary folders (``sixdim-run-*``) under ``tmp_path/tmp``, so that a test that kills a child
    on purpose (a crash) leaves nothing in /tmp, and a test can check a child cleaned up."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIXDIM_")}
    env["SIXDIM_HISTORY"] = str(tmp_path / "history.db")
    env["SIXDIM_STATE_DIR"] = str(tmp_path / "state")
    env["SIXDIM_LOG_LEVEL"] = "warning"
    temporary = tmp_path / "tmp"
    temporary.mkdir(exist_ok=True)
    env["TMPDIR"] = str(temporary)
    return env


@contextlib.contextmanager
def small_tmpfs(folder):
    """A real full-disk stage: a 1 MiB tmpfs mounted on ``folder`` (made here, mode 0700, so it passes the
    agent's folder checks), unmounted after; the test skips where mounting is refused (it needs root)."""
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    os.chmod(folder, 0o700)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.fixture(autouse=True)
def fresh_verified_credentials(monkeypatch) -> None:
    """The credentials basic auth verified are remembered process-wide (across reloads); each test starts with
    none, so one test's verified password does not spare another's bcrypt."""
    from sixdim.http import webconfig

    monkeypatch.setattr(webconfig, "_VERIFIED", webconfig._Verified(webconfig.VERIFIED_CACHE_SIZE))


def nvml_or_skip(*, torch_cuda: bool = True):
    """NVML's collector for the GPU tests, or a skip saying why there is none here: no NVML, no GPU listed, or
    (``torch_cuda``) a torch without CUDA.  The one check every GPU test module's ``nvml`` fixture makes."""
    from sixdim.collectors.nvml import NvmlCollector

    collector = NvmlCollector("gpu-test")
    if not collector.availability().available:
        pytest.skip(f"no NVIDIA GPU here: {collector.availability().reason}")
    if not collector.gpus:
        pytest.skip("NVML works but lists no GPU")
    if torch_cuda:
        import torch

        if not torch.cuda.is_available():
            pytest.skip(f"torch {torch.__version__} has no CUDA support on this host")
    return collector
