"""Secrets in a command's parameters never reach the history, /metrics, the logs or the progress lines.

The rules one by one (secret names, ``NAME=VALUE``, ``--flag VALUE``, shell lines, ``env``, free
text), what is deliberately *not* secret, a property test over generated names and values, and an
end-to-end run of real ``command`` workloads through the real worker, executor, history, board and
exporter, read back from the SQLite file itself.
"""

import logging
import os
import re
import shlex
import sqlite3
import subprocess
import sys
import textwrap

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from sixdim.collectors.nvml import NvmlCollector
from sixdim.core.redact import (
    REDACTED,
    is_secret_name,
    redact_argv,
    redact_params,
    redact_shell,
    scrub,
    secret_values,
)
from sixdim.core.results import SHAPE_SET
from sixdim.http.board import Board
from sixdim.http.exporter import SixdimCollector
from sixdim.run.devices import cpu_device
from sixdim.run.executor import Executor
from sixdim.store.history import History
from sixdim.workloads import registry
from sixdim.workloads.context import RunContext, WorkloadOutput
from sixdim.workloads.logs import command
from sixdim.workloads.spec import Case, Param, WorkloadSpec

R = REDACTED


# ---------------------------------------------------------------------------- names

@pytest.mark.parametrize("name", [
    "HF_TOKEN", "hf_token", "--hf-token", "WANDB_API_KEY", "--api-key", "-password", "--password", "DB_PASSWORD",
    "MYSQL_PASSWD", "AWS_SECRET_ACCESS_KEY", "--client-secret", "GOOGLE_APPLICATION_CREDENTIALS", "TOKEN", "key",
    "APIKEY", "OPENAI_APIKEY", "wandb.api_key", "++db.password",
    "--sort-key",  # a false positive, and a harmless one: its value is hidden
])
def test_secret_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", [
    "--keep-days", "MONKEY", "KEYBOARD", "TOKENIZER", "--tokenizer-name", "MAX_TOKENS", "NUM_KEYS", "RUN_NAME",
    "--epochs", "", "-", "--",
    # where a secret is, not the secret: the way users are told to pass one, so the path stays readable
    "--key-file", "--password-file", "--secret-file", "AWS_SHARED_CREDENTIALS_FILE", "SSH_KEY_PATH",
    "--secrets-dir", "HF_TOKEN_PATH",
])
def test_names_that_are_not_secret(name):
    assert not is_secret_name(name)


# ---------------------------------------------------------------------------- argument lists

@pytest.mark.parametrize("argv, expected", [
    (["python", "train.py", "--api-key=abc123"], ["python", "train.py", f"--api-key={R}"]),
    (["train", "--token", "abc", "--epochs", "3"], ["train", "--token", R, "--epochs", "3"]),
    (["env", "HF_TOKEN=abc", "python", "t.py"], ["env", f"HF_TOKEN={R}", "python", "t.py"]),
    (["python", "t.py", "wandb.api_key=abc", "++db.password=pw"], ["python", "t.py", f"wandb.api_key={R}",
                                                                   f"++db.password={R}"]),
    (["t", "--password=a b c"], ["t", f"--password={R}"]),  # a value with spaces goes whole
    (["t", "--password", "--verbose", "x"], ["t", "--password", "--verbose", "x"]),  # a switch: no value
    (["t", "--token"], ["t", "--token"]),
    (["t", "--api-key="], ["t", "--api-key="]),  # nothing to hide
    (["bash", "-c", "python t.py --token xyz9 --epochs 3"], ["bash", "-c", f"python t.py --token {R} --epochs 3"]),
])
def test_redact_argv(argv, expected):
    assert redact_argv(argv) == expected


def test_argv_without_secrets_is_unchanged():
    argv = ["python", "t.py", "--keep-days", "3", "MONKEY=1", "--key-file", "/etc/k.pem",
            "--password-file=/run/secrets/db", "--tokenizer", "bpe", "--", "-x"]
    assert redact_argv(argv) == argv


# ---------------------------------------------------------------------------- shell lines

@pytest.mark.parametrize("line, expected", [
    ("HF_TOKEN=abc python train.py --api-key=k1 --token 't o k' --keep-days 3",
     f"HF_TOKEN={R} python train.py --api-key={R} --token {R} --keep-days 3"),
    ("python t.py --password='a b c' --name x", f"python t.py --password={R} --name x"),
    ('python t.py --password="a \\"b\\" c" --name x', f"python t.py --password={R} --name x"),
    ('"--api-key=quoted whole" run', f"--api-key={R} run"),
    ("export DB_PASSWORD=hunter22; python t.py --token abc && echo done | tee log",
     f"export DB_PASSWORD={R}; python t.py --token {R} && echo done | tee log"),
    ("python t.py --token; echo hi", "python t.py --token; echo hi"),  # a value never crosses an operator
    ("python t.py --password 'abc def", f"python t.py --password {R}"),  # unterminated: to the end
    ("sh -c 'python t.py --token xyz9'", f"sh -c 'python t.py --token {R}'"),
    ("echo $(cat --secret s3cr) >out", f"echo $(cat --secret {R}) >out"),
])
def test_redact_shell(line, expected):
    assert redact_shell(line) == expected


def test_shell_line_without_secrets_is_unchanged():
    line = "MONKEY=1 python 't.py' --keep-days 3 --key-file k.pem 2>&1 | tee \"a b.log\"; echo done"
    assert redact_shell(line) == line


# ---------------------------------------------------------------------------- env, params, free text

def redact_env(pairs: list[str]) -> list[str]:
    """A command's ``env`` items as a run keeps them (the rules of :func:`redact_params` for ``env``)."""
    return redact_params({"env": pairs})["env"]


def test_redact_env():
    assert redact_env(["HF_TOKEN=abc", "RUN_NAME=x", "DB_PASSWORD=p=q", "NOEQUALS", "EMPTY_TOKEN="]) == \
        [f"HF_TOKEN={R}", "RUN_NAME=x", f"DB_PASSWORD={R}", "NOEQUALS", "EMPTY_TOKEN="]


def test_redact_params_of_a_command_and_of_any_params():
    params = {"argv": ["HF_TOKEN=abcd python t.py --api-key k123"], "shell": True,
              "env": ["A=1", "WANDB_API_KEY=w5678"], "label": "mine", "db_password": "pw12", "token": 5}
    original = {**params, "argv": list(params["argv"]), "env": list(params["env"])}
    assert redact_params(params) == {"argv": [f"HF_TOKEN={R} python t.py --api-key {R}"], "shell": True,
                                     "env": ["A=1", f"WANDB_API_KEY={R}"], "label": "mine", "db_password": R,
                                     "token": 5}
    assert params == original  # a copy: the worker still runs the real command
    assert secret_values(params) == {"abcd", "k123", "w5678", "pw12"}
    listed = {"argv": ["python", "t.py", "--token", "tok9"], "shell": False, "env": []}
    assert redact_params(listed)["argv"] == ["python", "t.py", "--token", R]


def test_short_values_are_redacted_in_place_but_not_hunted_in_free_text():
    params = {"argv": ["t", "--token", "abc"], "env": ["HF_TOKEN=xy"]}
    assert redact_params(params)["argv"] == ["t", "--token", R] and redact_params(params)["env"] == [f"HF_TOKEN={R}"]
    assert secret_values(params) == set()  # "abc" and "xy" would scrub half of every reason


@pytest.mark.parametrize("name", sorted(set(registry.WORKLOADS) - {"command"}))
def test_every_other_workloads_params_pass_through(name):
    for case in registry.get(name).cases({}, "cpu"):
        assert redact_params(case.params) == case.params and secret_values(case.params) == set()


def test_scrub_walks_strings_lists_tuples_and_dicts_keys_too():
    obj = {"why abcd": ["x abcd y", ("abcdef", 1)], "n": 3.5, "none": None}
    assert scrub(obj, {"abcd", "abcdef"}) == {f"why {R}": [f"x {R} y", (R, 1)], "n": 3.5, "none": None}
    assert scrub(obj, set()) is obj and scrub(obj, {""}) is obj


# ---------------------------------------------------------------------------- the default label

@pytest.mark.parametrize("argv, shell, label", [
    (["HF_TOKEN=abc python train.py --epochs 3"], True, "python"),
    (["A=1 HF_TOKEN='a b' /usr/bin/python3 t.py"], True, "python3"),
    (["./train.sh --token abc"], True, "train.sh"),
    (["HF_TOKEN=abc"], True, "sh"),
    (["HF_TOKEN='unterminated python t.py"], True, "sh"),
    (["   "], True, "sh"),
    (["/opt/venv/bin/torchrun", "--nproc_per_node=8", "train.py"], False, "torchrun"),
])
def test_the_default_label_of_a_command_is_its_program_never_an_assignment(argv, shell, label):
    [case] = registry.get("command").cases({"argv": argv, "shell": shell}, "cpu")
    program, digest = case.shape.split("@")
    assert program == label and re.fullmatch("[0-9a-f]{8}", digest)  # a digest of the redacted command


def test_the_module_imports_nothing_of_sixdim():
    """workloads/logs/command.py (the worker side) imports it: it must never import the daemon or workloads back."""
    probe = ("import sys, sixdim.core.redact; print(sorted(m for m in sys.modules if m.split('.')[0] in "
             "('sixdim', 'torch')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['sixdim', 'sixdim.core', 'sixdim.core.redact']"


# ---------------------------------------------------------------------------- property

hypothesis = pytest.importorskip("hypothesis")  # the 'test' extra installs it; see pyproject.toml

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

secret_names = st.builds(
    lambda prefix, core: prefix + core,
    st.one_of(st.just(""), st.from_regex(r"[A-Za-z][A-Za-z0-9]{0,6}_", fullmatch=True)),
    st.sampled_from(["TOKEN", "KEY", "APIKEY", "API_KEY", "PASSWORD", "passwd", "Secret", "CREDENTIALS",
                     "auth_token", "client_secret_value"]))
secret_texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="<>\x00"),
                       min_size=4, max_size=24).filter(lambda v: not v.startswith("-") and v not in R)
PROPERTY = settings(max_examples=300, deadline=None, derandomize=True, database=None)


@PROPERTY
@given(name=secret_names, value=secret_texts)
def test_no_value_of_a_secret_name_survives_in_any_form(name, value):
    assert is_secret_name(name) and is_secret_name("--" + name)
    before, after = ["python", "train.py"], ["--epochs", "3"]
    assert redact_argv([*before, f"--{name}={value}", *after]) == [*before, f"--{name}={R}", *after]
    assert redact_argv([*before, f"--{name}", value, *after]) == [*before, f"--{name}", R, *after]
    assert redact_argv([f"{name}={value}", *before]) == [f"{name}={R}", *before]
    assert redact_env([f"{name}={value}", "RUN_NAME=x"]) == [f"{name}={R}", "RUN_NAME=x"]
    quoted = shlex.quote(value)
    line = f"{name}={quoted} python train.py --{name} {quoted} --{name}={quoted} --epochs 3"
    assert redact_shell(line) == f"{name}={R} python train.py --{name} {R} --{name}={R} --epochs 3"
    params = {"argv": [line], "shell": True, "env": [f"{name}={value}"]}
    assert value in secret_values(params)
    assert value not in scrub(f"crashed: {value} (and {value}{value})", secret_values(params))


# ---------------------------------------------------------------------------- end to end

def assert_nowhere(secrets, database, board, caplog, progress=()) -> str:
    """No secret in any row of the SQLite file, in the bytes of the file and its WAL, in the rendered
    /metrics, in the log records or in the progress lines; returns the rows, as text, for the
    checks of what must still be there."""
    rows = []
    with sqlite3.connect(database) as db:
        for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            rows += db.execute(f"SELECT * FROM {table}").fetchall()
    stored = repr(rows)
    collectors = CollectorRegistry()
    collectors.register(SixdimCollector(board, [], "h"))
    metrics = generate_latest(collectors).decode()
    logged = caplog.text + "".join(repr(record.args) for record in caplog.records)
    for secret in secrets:
        assert secret not in stored
        for path in database.parent.glob(database.name + "*"):  # the database, its WAL, any spool
            assert secret.encode() not in path.read_bytes(), path
        assert secret not in metrics
        assert secret not in logged
        assert all(secret not in line for line in progress)
    return stored + metrics + logged


TOKEN, API_KEY = "s3cr3t-value-123", "another-s3cret"

LEAKY = """
    import os, sys
    print("run", os.environ["RUN_NAME"], "with", " ".join(sys.argv[1:]), flush=True)
    print("speed 100 img/s", flush=True)
    print("auth failed for token", os.environ["HF_TOKEN"], flush=True)
    sys.exit(int(os.environ["EXIT_CODE"]))
"""


def test_a_commands_secrets_reach_neither_the_history_nor_metrics_nor_logs_nor_progress(tmp_path, caplog):
    """A failing command that prints its token (so its reason quotes it) and a shell command with the
    secrets inline, run by the real worker, executor, history, board and exporter."""
    caplog.set_level(logging.DEBUG)
    leaky = tmp_path / "leaky.py"
    leaky.write_text(textwrap.dedent(LEAKY))
    python = os.path.basename(sys.executable)
    failing = {"argv": [sys.executable, str(leaky), f"--api-key={API_KEY}", "--epochs", "3"],
               "env": [f"HF_TOKEN={TOKEN}", "RUN_NAME=visible-run", "EXIT_CODE=3"],
               "formats": [], "throughput_regex": r"speed (\d+)"}
    shell = {"argv": [f"HF_TOKEN={TOKEN} RUN_NAME=visible-shell EXIT_CODE=0 {shlex.quote(sys.executable)} "
                      f"{shlex.quote(str(leaky))} --api-key {API_KEY} --keep-days 3"],
             "shell": True, "formats": [], "throughput_regex": r"speed (\d+)"}
    database = tmp_path / "h.db"
    board = Board()
    executor = Executor(hostname="h", history=History(database), nvml=NvmlCollector("h"), rapl=None,
                        on_recorded=board.catch_up)
    progress: list[str] = []
    spec = registry.get("command")
    failed, ok = executor.execute_many([(spec, failing), (spec, shell)], cpu_device(), timeout=60.0,
                                       on_progress=progress.append)

    assert failed.status == "failed" and ok.status == "ok", (failed.reason, ok.reason)
    assert failed.reason == f"CommandFailed: command exited with code 3; last output: auth failed for token {R}"
    assert failed.params["argv"] == [sys.executable, str(leaky), f"--api-key={R}", "--epochs", "3"]
    assert failed.params["env"] == [f"HF_TOKEN={R}", "RUN_NAME=visible-run", "EXIT_CODE=3"]
    assert ok.shape.startswith(python + "@") and ok.figures["samples_per_second"] == 100.0  # labelled by its program

    seen = assert_nowhere((TOKEN, API_KEY), database, board, caplog, progress)
    for visible in ("visible-run", "visible-shell", str(leaky), "--epochs", "--keep-days", f"HF_TOKEN={R}",
                    "auth failed for token", f'shape="{ok.shape}"', 'workload="command"', "exited with code 3"):
        assert visible in seen, visible
    shown = "\n".join(progress)
    assert "visible-run" in shown and "speed 100 img/s" in shown  # the rest of the output is still relayed
    starts = [line for line in progress if "starting " in line]
    assert len(starts) == 2 and all(str(leaky) in line and R in line for line in starts), starts


def test_a_long_last_line_is_scrubbed_before_it_is_cut(tmp_path):
    """The failure reason and the progress lines keep the end of a line: cut first, a secret would
    lose its head and no longer match, and its tail would be kept for good."""
    code = ("import os; t = os.environ['HF_TOKEN']; print('token', t, '.' * 110)  # cut at 120 for progress\n"
            "print('token', t, '.' * 290); raise SystemExit(2)  # cut at 300 for the reason")
    [case] = registry.get("command").cases({"argv": [sys.executable, "-c", code], "env": [f"HF_TOKEN={TOKEN}"]},
                                           "cpu")
    progress: list[str] = []
    with pytest.raises(command.CommandFailed) as failure:
        command.run(case.params, RunContext("cpu", progress=progress.append))
    for text in (str(failure.value), *progress):
        assert not any(TOKEN[start:] in text for start in range(len(TOKEN) - 3)), text


def quotes_its_secret(params: dict, ctx: RunContext) -> WorkloadOutput:
    """Any workload whose reason, details or own output quote a secret parameter (a refused login)."""
    key = params["api_key"]
    if params["end"] == "crash":
        print(f"login refused for key {key}", flush=True)
        os._exit(3)
    ctx.mark_window_start()
    ctx.mark_window_end()
    if params["end"] == "fail":
        return WorkloadOutput({}, {"login": f"refused for {key}", key: "as a key"}, status="failed",
                              reason=f"login refused for key {key}")
    return WorkloadOutput({"seconds": 0.01}, {"user": params["user"]})


QUOTING = WorkloadSpec(
    name="quoting", description="test", entry="tests.test_redact:quotes_its_secret", uses_torch=False,
    params=(Param("api_key", str, "a secret", "", ""),),
    expander=lambda spec, params, device_type: [
        Case({"api_key": params["api_key"], "user": "visible-user", "end": end}, precision="fp32",
             shape=f"{end}-{params['api_key']}") for end in ("fail", "crash", "ok")])


@pytest.mark.slow
def test_the_executor_scrubs_any_workloads_reason_details_output_and_shape(tmp_path, caplog):
    """What a workload itself quotes (not only the command workload's), what the worker printed
    before it died (the runner's reason and output tail) and a shape built from the secret."""
    caplog.set_level(logging.DEBUG)
    database = tmp_path / "h.db"
    board = Board()
    executor = Executor(hostname="h", history=History(database), nvml=NvmlCollector("h"), rapl=None,
                        on_recorded=board.catch_up)
    failed, crashed, ok = executor.execute(QUOTING, {"api_key": API_KEY}, cpu_device(), timeout=60.0)

    assert (failed.status, crashed.status, ok.status) == ("failed", "failed", "ok")
    assert failed.reason == f"login refused for key {R}"
    assert failed.details["login"] == f"refused for {R}" and failed.details[R] == "as a key"
    assert crashed.reason == f"worker exited with code 3; last output: login refused for key {R}"
    assert crashed.details["output_tail"] == [f"login refused for key {R}"]
    assert [r.shape for r in (failed, crashed, ok)] == [f"fail-{R}", f"crash-{R}", f"ok-{R}"]
    assert {k: v for k, v in ok.params.items() if k != SHAPE_SET} == {"api_key": R, "user": "visible-user", "end": "ok"}

    seen = assert_nowhere((API_KEY,), database, board, caplog)
    for visible in ("visible-user", "login refused for key", f'shape="ok-{R}"', 'workload="quoting"'):
        assert visible in seen, visible
