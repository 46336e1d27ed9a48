"""The credentials of HTTP clients in a command never reach the history, ``run --json`` or the logs (issue 44, item 2).

``curl -H 'Authorization: Bearer ...'`` (as one argument, or inside ``sh -c "..."``), ``curl -u user:pass``,
``--oauth2-bearer TOKEN``, ``Authorization: token ...``, ``Cookie:`` and ``X-API-Key:`` headers, ``wget
--header=...`` and URLs with ``user:pass@`` were kept verbatim, because none of them is a ``NAME=VALUE``
with a secret name.  The rules one by one, what must stay readable (``python -u``, ``docker run -u
1000:1000``, ``Accept:`` headers, the user name), and a real ``sixdim run --json`` of a suite of commands
that run stand-in ``curl`` and ``wget`` programs echoing every argument they get.
"""

import json
import os
import shlex
import sqlite3
from pathlib import Path

import pytest

from sixdim.core.redact import REDACTED, is_secret_name, redact_argv, redact_shell, scrub, secret_values
from tests.helpers import run_sixdim

R = REDACTED


# ---------------------------------------------------------------------------- argument lists

@pytest.mark.parametrize("argv, expected, secrets", [
    (["curl", "-H", "Authorization: Bearer abc123", "https://x.example/"],
     ["curl", "-H", f"Authorization: Bearer {R}", "https://x.example/"], {"abc123"}),
    (["curl", "--header", "Authorization: token ghp_abcdef", "https://x.example/"],
     ["curl", "--header", f"Authorization: token {R}", "https://x.example/"], {"ghp_abcdef"}),
    (["curl", "-H", "authorization:Basic YWRtaW46cHc=", "u"], ["curl", "-H", f"authorization:Basic {R}", "u"],
     {"YWRtaW46cHc="}),
    (["curl", "-H", "Authorization: rawtoken99", "u"], ["curl", "-H", f"Authorization: {R}", "u"], {"rawtoken99"}),
    (["curl", "-H", "Proxy-Authorization: Basic cHJveHk6cHc=", "u"],
     ["curl", "-H", f"Proxy-Authorization: Basic {R}", "u"], {"cHJveHk6cHc="}),
    (["curl", "-H", "Cookie: session=c00kie; theme=dark", "u"], ["curl", "-H", f"Cookie: {R}", "u"],
     {"session=c00kie; theme=dark"}),
    (["curl", "-H", "X-API-Key: k3y-value", "-H", "X-Auth-Token: t0ken-value", "-H", "Private-Token: gl-pat1"],
     ["curl", "-H", f"X-API-Key: {R}", "-H", f"X-Auth-Token: {R}", "-H", f"Private-Token: {R}"],
     {"k3y-value", "t0ken-value", "gl-pat1"}),
    (["curl", "-u", "admin:password", "u"], ["curl", "-u", f"admin:{R}", "u"], {"password"}),
    (["/usr/bin/curl", "-sSfu", "admin:pa:ss", "u"], ["/usr/bin/curl", "-sSfu", f"admin:{R}", "u"], {"pa:ss"}),
    (["curl", "--user", "admin:s3cret", "--proxy-user", "p:proxypw", "-U", "q:proxypw2", "u"],
     ["curl", "--user", f"admin:{R}", "--proxy-user", f"p:{R}", "-U", f"q:{R}", "u"],
     {"s3cret", "proxypw", "proxypw2"}),
    (["curl", "--user=admin:s3cret", "-uroot:hunter22", "u"], ["curl", f"--user=admin:{R}", f"-uroot:{R}", "u"],
     {"s3cret", "hunter22"}),
    (["curl", "--oauth2-bearer", "TOKEN123", "u"], ["curl", "--oauth2-bearer", R, "u"], {"TOKEN123"}),
    (["curl", "--oauth2-bearer=TOKEN123", "u"], ["curl", f"--oauth2-bearer={R}", "u"], {"TOKEN123"}),
    (["wget", "--user=bob", "--password=wgetpw", "--header=Authorization: Bearer wg-tok", "u"],
     ["wget", "--user=bob", f"--password={R}", f"--header=Authorization: Bearer {R}", "u"], {"wgetpw", "wg-tok"}),
    (["http", "-a", "me:httpiepw", "u", "Authorization:Bearer hb-tok"],
     ["http", "-a", f"me:{R}", "u", f"Authorization:Bearer {R}"], {"httpiepw", "hb-tok"}),
    (["git", "clone", "https://bob:gh-pass1@github.com/o/r.git"], ["git", "clone", f"https://bob:{R}@github.com/o/r.git"],
     {"gh-pass1"}),
    (["python", "t.py", "--db=postgres://u:dbpw1@h:5432/d", "DATABASE_URL=mysql://root:dbpw2@h/d"],
     ["python", "t.py", f"--db=postgres://u:{R}@h:5432/d", f"DATABASE_URL=mysql://root:{R}@h/d"], {"dbpw1", "dbpw2"}),
    (["curl", "-x", "http://proxyuser:proxypw9@proxy:3128", "u"],
     ["curl", "-x", f"http://proxyuser:{R}@proxy:3128", "u"], {"proxypw9"}),
    (["sh", "-c", "curl -H 'Authorization: Bearer abc123' -u admin:pw12 https://x.example/"],
     ["sh", "-c", f"curl -H 'Authorization: Bearer {R}' -u admin:{R} https://x.example/"], {"abc123", "pw12"}),
    (["bash", "-lc", 'curl -sS -H "Authorization: token ghp_xyz" --oauth2-bearer ob-1234 https://x/'],
     ["bash", "-lc", f"curl -sS -H 'Authorization: token {R}' --oauth2-bearer {R} https://x/"],
     {"ghp_xyz", "ob-1234"}),
])
def test_the_credentials_of_http_clients_are_redacted(argv, expected, secrets):
    assert redact_argv(argv) == expected
    assert {value for value in secrets if len(value) >= 4} <= secret_values({"argv": argv})


@pytest.mark.parametrize("line, expected", [
    ("curl -H 'Authorization: Bearer abc123' https://x.example/", f"curl -H 'Authorization: Bearer {R}' https://x.example/"),
    ('curl -H "Authorization: Bearer abc123" -u admin:password https://x | jq .',
     f"curl -H 'Authorization: Bearer {R}' -u admin:{R} https://x | jq ."),
    ("sh -c \"curl -H 'Authorization: Bearer abc123' https://x\"",
     "sh -c " + shlex.quote(f"curl -H 'Authorization: Bearer {R}' https://x")),
    ("git clone https://bob:pw-123@github.com/o/r; curl -u me:pw-456 u",
     f"git clone https://bob:{R}@github.com/o/r; curl -u me:{R} u"),
    ("sudo -u bob curl -u admin:pw-789 u", f"sudo -u bob curl -u admin:{R} u"),
])
def test_the_same_inside_a_shell_line(line, expected):
    assert redact_shell(line) == expected


@pytest.mark.parametrize("argv", [
    ["python", "-u", "train.py"],
    ["docker", "run", "-u", "1000:1000", "image"],
    ["sudo", "-u", "bob", "python", "t.py"],
    ["git", "push", "-u", "origin", "main"],
    ["sort", "-u", "a:b"],
    ["wget", "--user=bob", "u"],
    ["curl", "-u", "admin", "u"],  # no password given: curl asks for it
    ["curl", "-H", "Accept: application/json", "-H", "Content-Type: text/plain", "-H", "Author: me"],
    ["ssh", "git@github.com"], ["git", "clone", "https://github.com/o/r.git"], ["curl", "http://localhost:8080/x"],
    ["curl", "https://bob@x.example/"],
    ["python", "t.py", "--label", "a: b"],
])
def test_what_is_not_a_credential_stays_readable(argv):
    assert redact_argv(argv) == argv and secret_values({"argv": argv}) == set()


def test_bearer_names_a_secret():
    assert is_secret_name("--oauth2-bearer") and is_secret_name("BEARER_TOKEN") and is_secret_name("bearer")


def test_a_header_credential_is_hunted_in_the_commands_output():
    params = {"argv": ["sh", "-c", "curl -H 'Authorization: Bearer abc123' -u admin:pw12 https://x"]}
    assert scrub("401 for Bearer abc123 (admin:pw12)", secret_values(params)) == f"401 for Bearer {R} (admin:{R})"


# ---------------------------------------------------------------------------- a real sixdim run --json

STAND_IN = "#!/bin/sh\necho \"$(basename \"$0\") was given: $*\"\nexit 3\n"
"""A ``curl`` or ``wget`` that prints every argument it got, as a failing client's verbose output
does, and fails: its reason then quotes the credentials too."""

SECRETS = {
    "sh_bearer": "shBearer-0001", "sh_password": "shPassw0rd-2", "sh_oauth": "shOauth-0003", "sh_url": "shUrlpw-04",
    "bearer": "argvBearer-05", "gh_token": "ghToken-0006", "api_key": "xApiKey-0007", "cookie": "c00kie-0008",
    "password": "argvPassw-09", "oauth": "argvOauth-10", "wget": "wgetPassw-11", "basic": "cHJveHk6cHc=",
}


def _suite(tmp_path: Path, history: Path) -> Path:
    s = SECRETS
    commands = [
        ["sh", "-c", f"curl -sS -H 'Authorization: Bearer {s['sh_bearer']}' -u admin:{s['sh_password']} "
                     f"--oauth2-bearer {s['sh_oauth']} https://bob:{s['sh_url']}@example.invalid/visible-path"],
        ["curl", "-H", f"Authorization: Bearer {s['bearer']}", "-H", f"Authorization: token {s['gh_token']}",
         "--header", f"X-API-Key: {s['api_key']}", "-H", f"Cookie: session={s['cookie']}",
         "-u", f"admin:{s['password']}", "--oauth2-bearer", s["oauth"], "https://example.invalid/visible-path"],
        ["wget", "--user=visible-user", f"--password={s['wget']}",
         f"--header=Proxy-Authorization: Basic {s['basic']}", "https://example.invalid/visible-path"],
    ]
    workloads = ", ".join(f'{{name = "command", params = {{argv = {json.dumps(argv)}}}}}' for argv in commands)
    config = tmp_path / "sixdim.toml"
    config.write_text(f'[agent]\nhistory = "{history}"\nhostname = "h"\n\n[[suites]]\nname = "clients"\n'
                      f'interval_seconds = 3600\nrun_at_start = false\ndevices = ["cpu"]\ntimeout_seconds = 60\n'
                      f'workloads = [{workloads}]\n')
    config.chmod(0o600)
    return config


@pytest.mark.slow
def test_http_client_credentials_are_in_neither_run_json_nor_the_history_nor_the_logs(tmp_path, cli_env):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("curl", "wget"):
        (bin_dir / name).write_text(STAND_IN)
        (bin_dir / name).chmod(0o755)
    history = Path(cli_env["SIXDIM_HISTORY"])
    env = {**cli_env, "PATH": f"{bin_dir}{os.pathsep}{cli_env['PATH']}", "SIXDIM_LOG_LEVEL": "debug"}
    result = run_sixdim("run", "--config", str(_suite(tmp_path, history)), "--suite", "clients", "--json",
                        env=env, timeout=120)
    assert result.returncode == 1, result.stderr  # the stand-ins fail
    records = json.loads(result.stdout)
    assert [r["status"] for r in records] == ["failed"] * 3, [r["reason"] for r in records]
    assert all("was given:" in r["reason"] for r in records), [r["reason"] for r in records]

    rows = []
    with sqlite3.connect(history) as db:
        for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            rows += db.execute(f"SELECT * FROM {table}").fetchall()
    raw = b"".join(path.read_bytes() for path in history.parent.glob(history.name + "*")).decode("latin-1")
    for where, text in (("run --json", result.stdout), ("stderr", result.stderr), ("history rows", repr(rows)),
                        ("history file", raw)):
        for name, secret in SECRETS.items():
            assert secret not in text, (where, name)
    shown = result.stdout
    for visible in ("visible-path", "visible-user", "admin:", "Authorization: Bearer", "Authorization: token",
                    "X-API-Key:", "Cookie:", "--oauth2-bearer", "https://bob:", "curl was given:"):
        assert visible in shown, visible
    assert records[1]["params"]["argv"][:3] == ["curl", "-H", f"Authorization: Bearer {R}"]
