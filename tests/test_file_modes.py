"""Least privilege for files, with real files, real modes and the real command line.

- A configuration file (``--config``) or web configuration file (``--web.config.file``), or the
  client CA file it names, that a user other than its owner can change, or (for a root process)
  that a user other than root owns, is refused with exit code 2 and one line naming the file, its
  mode and the fix; ``--insecure-config-permissions`` or ``SIXDIM_INSECURE_CONFIG_PERMISSIONS=true``
  makes it a warning and the command goes on.
- A private key its group or others can read is a warning.
- The history's database, -wal, -shm and spool files are created 0600 and its folder 0700, whatever
  the umask; an existing 0644 history is made 0600.

The owner rule is for a root process: it is tested through :func:`sixdim.config.trust.check_permissions`'
``euid`` parameter with the real ``stat`` of a real file (as root the test gives the file to another
user with ``chown``; as a user the file is already not root's), and end to end when the tests run as
root, as they do in the project's containers.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import signal
import sqlite3
import stat
import subprocess
from pathlib import Path

import pytest

from sixdim.config import ConfigError, load
from sixdim.config.trust import (
    CONFIG_FILE_ROLE,
    INSECURE_PERMISSIONS_ENV,
    INSECURE_PERMISSIONS_FLAG,
    check_permissions,
    permission_problem,
)
from sixdim.store.history import History
from tests.conftest import free_port, required_tool
from tests.helpers import Locker, make_record, run_sixdim

ROOT = Path(__file__).resolve().parent.parent
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
NOBODY = 65534
"""The uid a test running as root gives a file to (``nobody`` on Debian)."""

TINY_GEMM = ["-w", "gemm", "-d", "cpu", "-p", "m=32", "-p", "n=32", "-p", "k=32", "-p", "precisions=fp32",
             "-p", "min_round_seconds=0.01", "-p", "warmup_seconds=0.01"]


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def write(path: Path, text: str, file_mode: int) -> Path:
    """A file with exactly ``file_mode`` (chmod, whatever the umask)."""
    path.write_text(text)
    os.chmod(path, file_mode)
    return path


sixdim = run_sixdim  # some of these start a run or a daemon that must be stopped from outside


def assert_refused(result: subprocess.CompletedProcess, path: Path, octal: str, fix: str = "chmod go-w") -> None:
    """Exit 2 and one line that names the file, its mode, the fix and the escape hatch; no traceback."""
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sixdim: error: "), result.stderr
    line = lines[0]
    for part in (str(path), octal, f"{fix} {shlex.quote(str(path))}", INSECURE_PERMISSIONS_FLAG,
                 f"{INSECURE_PERMISSIONS_ENV}=true"):
        assert part in line, (part, line)


# --------------------------------------------------------------------------- the rules

@pytest.mark.parametrize("file_mode,octal,who", [
    (0o666, "0666", "its group and others"), (0o664, "0664", "its group"), (0o646, "0646", "others"),
    (0o777, "0777", "its group and others"), (0o620, "0620", "its group"), (0o4766, "4766", "its group and others"),
])
def test_a_file_others_can_write_is_a_problem_whoever_runs(file_mode, octal, who):
    for euid in (0, 1000):
        problem, fix = permission_problem(stat.S_IFREG | file_mode, 0, euid)
        assert f"mode {octal}: {who} can write it" == problem and fix == "chmod go-w"


@pytest.mark.parametrize("file_mode", [0o600, 0o640, 0o644, 0o444, 0o400, 0o755])
def test_a_file_only_its_owner_can_write_is_fine(file_mode):
    assert permission_problem(stat.S_IFREG | file_mode, 0, 0) is None
    assert permission_problem(stat.S_IFREG | file_mode, 1000, 1000) is None
    assert permission_problem(stat.S_IFREG | file_mode, 0, 1000) is None  # a user reading root's file


def test_a_root_process_refuses_a_file_another_user_owns():
    problem, fix = permission_problem(stat.S_IFREG | 0o644, NOBODY, 0)
    assert f"uid {NOBODY}" in problem and "not root" in problem and fix == "chown root"
    assert permission_problem(stat.S_IFREG | 0o644, NOBODY, NOBODY) is None  # that user's own process


def test_the_owner_rule_on_a_real_file(tmp_path, caplog):
    """Through the seam: the real ``stat`` of a real file that root does not own, and ``euid=0``."""
    path = write(tmp_path / "sixdim.toml", "", 0o644)
    if IS_ROOT:
        os.chown(path, NOBODY, -1)
    status = os.stat(path)
    assert status.st_uid != 0
    with pytest.raises(ConfigError) as error:
        check_permissions(str(path), status, CONFIG_FILE_ROLE, euid=0)
    message = str(error.value)
    assert "\n" not in message and str(path) in message and f"uid {status.st_uid}" in message
    assert f"chown root {path}" in message and INSECURE_PERMISSIONS_FLAG in message
    with caplog.at_level(logging.WARNING, logger="sixdim"):
        check_permissions(str(path), status, CONFIG_FILE_ROLE, euid=0, insecure=True)
    assert [r.getMessage().startswith(message) for r in caplog.records] == [True]
    check_permissions(str(path), status, CONFIG_FILE_ROLE, euid=status.st_uid)  # its owner's own process


def test_the_flag_wins_over_the_variable_and_a_bad_variable_is_named(tmp_path):
    path = write(tmp_path / "sixdim.toml", "", 0o666)
    on = {INSECURE_PERMISSIONS_ENV: "true"}
    assert load(str(path), env=on).insecure_config_permissions
    with pytest.raises(ConfigError, match="0666"):
        load(str(path), env=on, flags=argparse.Namespace(insecure_config_permissions=False))  # --no-...
    assert load(str(path), env={}, flags=argparse.Namespace(insecure_config_permissions=True))
    with pytest.raises(ConfigError) as error:
        load(str(path), env={INSECURE_PERMISSIONS_ENV: "maybe"})
    assert str(error.value).startswith(f"environment variable {INSECURE_PERMISSIONS_ENV}: ")
    assert not load(None, env={}).insecure_config_permissions  # the embedded default: nothing to check


# --------------------------------------------------------------------------- --config, end to end

@pytest.mark.parametrize("file_mode,octal", [(0o666, "0666"), (0o664, "0664"), (0o606, "0606")])
@pytest.mark.slow
def test_a_config_file_others_can_write_is_refused_with_exit_2(tmp_path, cli_env, file_mode, octal):
    config = write(tmp_path / "my config.toml", "[agent]\nlog_level = \"warning\"\n", file_mode)
    assert_refused(sixdim("run", "--config", str(config), *TINY_GEMM, env=cli_env), config, octal)
    assert_refused(sixdim("serve", "--listen", f"127.0.0.1:{free_port()}",
                          env=dict(cli_env, SIXDIM_CONFIG=str(config))),
                   config, octal)
    assert not Path(cli_env["SIXDIM_HISTORY"]).exists()  # refused before anything was opened


@pytest.mark.parametrize("hatch", ["flag", "variable"])
@pytest.mark.slow
def test_the_escape_hatch_warns_and_the_run_goes_on(tmp_path, cli_env, hatch):
    config = write(tmp_path / "sixdim.toml", "[agent]\nlog_level = \"warning\"\n", 0o666)
    history = tmp_path / "new folder" / "history.db"
    env = dict(cli_env, SIXDIM_HISTORY=str(history))
    args = ["run", "--config", str(config), *TINY_GEMM]
    if hatch == "flag":
        args.insert(1, INSECURE_PERMISSIONS_FLAG)
    else:
        env[INSECURE_PERMISSIONS_ENV] = "true"
    result = sixdim(*args, env=env)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    warning = next(line for line in result.stderr.splitlines() if "0666" in line)
    assert str(config) in warning and "chmod go-w" in warning and "loaded anyway" in warning
    assert "gemm" in result.stdout
    assert (mode(history), mode(history.parent)) == (0o600, 0o700)  # the run's history, private


@pytest.mark.parametrize("command", [["report", "regressions", "--json"], ["report", "--html", "page.html"]])
@pytest.mark.slow
def test_the_reports_take_the_escape_hatch_their_refusal_names(tmp_path, cli_env, command):
    """The refusal says "accept the risk with --insecure-config-permissions": every command that reads
    a configuration file takes that flag, and its warning is shaped like its errors."""
    from sixdim.store.history import History
    from tests.helpers import make_record

    history = tmp_path / "history.db"
    History(history).add(make_record())
    config = write(tmp_path / "sixdim.toml", f'[agent]\nhistory = "{history}"\n', 0o666)
    command = [c if c != "page.html" else str(tmp_path / c) for c in command]
    refused = sixdim(*command, "--config", str(config), env=cli_env)
    assert refused.returncode == 2 and INSECURE_PERMISSIONS_FLAG in refused.stderr, refused.stderr
    accepted = sixdim(*command, "--config", str(config), INSECURE_PERMISSIONS_FLAG, env=cli_env)
    assert accepted.returncode == 0, accepted.stderr
    [warning] = [line for line in accepted.stderr.splitlines() if "0666" in line]
    assert warning.startswith(f"sixdim: warning: {config}: (permissions)") and "loaded anyway" in warning


@pytest.mark.skipif(not IS_ROOT, reason="the owner rule is for a root process, and these tests run as a user")
def test_as_root_a_config_file_another_user_owns_is_refused(tmp_path, cli_env):
    config = write(tmp_path / "sixdim.toml", "", 0o644)
    os.chown(config, NOBODY, -1)
    assert_refused(sixdim("run", "--config", str(config), *TINY_GEMM, env=cli_env), config, f"uid {NOBODY}",
                   fix="chown root")
    os.chown(config, 0, -1)
    result = sixdim("run", "--config", str(config), "--workload", "no-such-workload", env=cli_env)
    assert "permissions" not in result.stderr  # root's own file passes (and the run fails for its own reason)


# --------------------------------------------------------------------------- --web.config.file

HEADERS = "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n"


@pytest.mark.parametrize("file_mode,octal", [(0o666, "0666"), (0o620, "0620")])
def test_a_web_config_file_others_can_write_is_refused_with_exit_2(tmp_path, cli_env, file_mode, octal):
    web = write(tmp_path / "web.yml", HEADERS, file_mode)
    result = sixdim("serve", "--listen", f"127.0.0.1:{free_port()}", "--web.config.file", str(web), env=cli_env,
                    timeout=60)
    assert_refused(result, web, octal)


def test_the_escape_hatch_loads_a_web_config_file_with_a_warning(tmp_path, caplog):
    from sixdim.http import webconfig

    web = write(tmp_path / "web.yml", HEADERS, 0o666)
    with pytest.raises(ConfigError, match="0666"):
        webconfig.load(str(web))  # refused by default, whoever calls it
    with caplog.at_level(logging.WARNING, logger="sixdim"):
        loaded = webconfig.load(str(web), insecure_permissions=True)
    assert loaded.headers == (("X-Content-Type-Options", "nosniff"),)
    assert any("0666" in r.getMessage() and "loaded anyway" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
def test_serve_passes_the_escape_hatch_to_the_web_config(tmp_path, cli_env):
    """``serve --insecure-config-permissions`` starts with a web configuration file others can write
    (agent/daemon/serve.py passes ``config.insecure_config_permissions`` to ``webconfig.load``)."""
    from tests.daemon import Daemon, write_config

    web = write(tmp_path / "web.yml", HEADERS, 0o666)
    quiet = '[[suites]]\nname = "quiet"\ninterval_seconds = 3600\nrun_at_start = false\ndevices = ["cpu"]\n' \
            'workloads = ["gemm"]\n'
    config = write_config(tmp_path / "serve.toml", tmp_path / "history.db", quiet)
    env = dict(cli_env, SIXDIM_WEB_CONFIG_FILE=str(web), SIXDIM_INSECURE_CONFIG_PERMISSIONS="true",
               SIXDIM_LOG_LEVEL="info")
    daemon = Daemon(config, free_port(), env, tmp_path / "serve.log")
    try:
        daemon.wait_ready()
        assert daemon.get("/healthz")[0] == 200
    finally:
        if daemon.process.poll() is None:
            daemon.process.send_signal(signal.SIGTERM)
        daemon.stop()
    log = daemon.log_path.read_text()
    assert "0666" in log and "loaded anyway" in log


# --------------------------------------------------------------------------- certificates and keys

@pytest.fixture(scope="module")
def pem(tmp_path_factory) -> Path:
    """A self-signed certificate (cert.pem) and its key (key.pem, 0600), also usable as a client CA."""
    folder = tmp_path_factory.mktemp("pem")
    subprocess.run([required_tool("openssl", "openssl"), "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "key.pem", "-out", "cert.pem", "-days", "2",
                    "-subj", "/CN=localhost", "-addext", "basicConstraints=critical,CA:TRUE"],
                   cwd=folder, check=True, capture_output=True)
    os.chmod(folder / "key.pem", 0o600)
    return folder


def tls_web_config(folder: Path, pem: Path, extra: str = "") -> Path:
    text = f"tls_server_config:\n  cert_file: {pem}/cert.pem\n  key_file: {pem}/key.pem\n{extra}"
    return write(folder / "web.yml", text, 0o600)


def test_a_private_key_others_can_read_is_a_warning(tmp_path, pem, caplog):
    from sixdim.http import webconfig

    with caplog.at_level(logging.WARNING, logger="sixdim"):
        assert webconfig.load(str(tls_web_config(tmp_path, pem))).tls
    assert not caplog.records  # 0600: nothing to say
    os.chmod(pem / "key.pem", 0o644)
    try:
        with caplog.at_level(logging.WARNING, logger="sixdim"):
            assert webconfig.load(str(tls_web_config(tmp_path, pem))).tls  # loaded: a warning, not a refusal
    finally:
        os.chmod(pem / "key.pem", 0o600)
    [record] = caplog.records
    assert f"{pem}/key.pem" in record.getMessage() and "0644" in record.getMessage()
    assert "chmod go-r" in record.getMessage()


def test_an_inline_key_in_a_readable_web_config_is_a_warning(tmp_path, pem, caplog):
    from sixdim.http import webconfig

    indent = "".join("    " + line + "\n" for line in (pem / "key.pem").read_text().splitlines())
    text = f"tls_server_config:\n  cert_file: {pem}/cert.pem\n  key: |\n{indent}"
    web = write(tmp_path / "web.yml", text, 0o644)
    with caplog.at_level(logging.WARNING, logger="sixdim"):
        assert webconfig.load(str(web)).tls
    assert any(str(web) in r.getMessage() and "0644" in r.getMessage() for r in caplog.records)


def test_a_client_ca_file_others_can_write_is_refused(tmp_path, pem, caplog):
    from sixdim.http import webconfig

    ca = tmp_path / "ca.pem"
    ca.write_bytes((pem / "cert.pem").read_bytes())
    os.chmod(ca, 0o666)
    web = tls_web_config(tmp_path, pem, f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {ca}\n")
    with pytest.raises(ConfigError) as error:
        webconfig.load(str(web))
    assert str(ca) in str(error.value) and "0666" in str(error.value) and "client certificates" in str(error.value)
    with caplog.at_level(logging.WARNING, logger="sixdim"):
        assert webconfig.load(str(web), insecure_permissions=True).client_auth_type == "RequireAndVerifyClientCert"
    assert any(str(ca) in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------------------- the history

@pytest.fixture(params=[0o022, 0o000], ids=["umask 022", "umask 000"])
def umask(request):
    """The history's modes do not depend on the umask (0 would make SQLite's own files 0644)."""
    previous = os.umask(request.param)
    yield request.param
    os.umask(previous)


def test_a_new_history_is_private(tmp_path, umask):
    path = tmp_path / "made" / "by" / "sixdim" / "history.db"
    history = History(path)
    try:
        history.add(make_record())
        files = {p.name: mode(p) for p in path.parent.iterdir()}
        assert files == {"history.db": 0o600, "history.db-wal": 0o600, "history.db-shm": 0o600}, files
        assert mode(path.parent) == 0o700
    finally:
        history.close()


def test_an_existing_folder_keeps_its_mode(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chmod(folder, 0o755)
    History(folder / "history.db").close()
    assert mode(folder) == 0o755 and mode(folder / "history.db") == 0o600


def test_an_existing_history_others_can_read_is_made_private(tmp_path, caplog):
    path = tmp_path / "history.db"
    History(path).close()
    with sqlite3.connect(path) as db:  # what an older sixdim (or SQLite alone) left: 0644 files
        db.execute("PRAGMA journal_mode=WAL")
        os.chmod(path, 0o644)
        for suffix in ("-wal", "-shm"):
            os.chmod(str(path) + suffix, 0o644)
        with caplog.at_level(logging.WARNING, logger="sixdim"):
            history = History(path)
        try:
            assert mode(path) == 0o600
            assert mode(str(path) + "-wal") == mode(str(path) + "-shm") == 0o600
            assert any(str(path) in r.getMessage() and "0644" in r.getMessage() and "0600" in r.getMessage()
                       for r in caplog.records), [r.getMessage() for r in caplog.records]
        finally:
            history.close()


def test_tightening_takes_bits_away_and_never_adds_one(tmp_path):
    from sixdim.store.files import tighten

    for before, after in ((0o644, 0o600), (0o444, 0o400), (0o666, 0o600), (0o640, 0o600), (0o600, 0o600)):
        path = write(tmp_path / f"h-{before:o}.db", "", before)
        tighten(path)
        assert mode(path) == after, (oct(before), oct(mode(path)))


@pytest.mark.skipif(not IS_ROOT, reason="giving a file to another user needs root")
def test_another_users_history_is_left_alone(tmp_path):
    path = tmp_path / "history.db"
    History(path).close()
    os.chmod(path, 0o644)
    os.chown(path, NOBODY, -1)
    History(path).close()
    assert mode(path) == 0o644  # theirs to fix


def test_the_spool_is_private(tmp_path, umask):
    path = tmp_path / "history.db"
    history = History(path)
    locker = Locker(path)
    try:
        assert history.add(make_record()) is None  # locked: spooled
        assert mode(history.spool_path) == 0o600
    finally:
        locker.release()
        history.close()
    spool = history.spool_path
    spool.write_text("")
    os.chmod(spool, 0o644)
    History(path).close()  # an earlier spool, read back: tightened first
    assert not spool.exists() or mode(spool) == 0o600


def test_the_security_doc_names_the_escape_hatch():
    text = (ROOT / "docs" / "SECURITY.md").read_text()
    assert INSECURE_PERMISSIONS_FLAG in text and INSECURE_PERMISSIONS_ENV in text
