"""Issue 12: hostile input, fuzzed with hypothesis.

Three entry points get random input built from what they really read:

- configuration: TOML documents over the real schema (every option, suite key, workload and
  parameter), with values that are NaN, infinite, huge, negative, of the wrong type or nested
  deeply, and random ``SIXDIM_*`` variables: ``sixdim.config.load`` returns a Config whose numbers
  are finite and in their documented ranges, or raises ConfigError; nothing else;
- ``sixdim dimensions``: random JSON-ish documents (the real keys, numbers of 5,000 digits, 1e400,
  NaN, deep nesting) and random bytes: exit 0 with finite standard JSON, or exit 2 with one line;
- the AI-Rank, MLPerf and regex parsers: random lines and mutations of the fixture logs: no parser
  raises, and every number read, and every figure of the run, is finite;
- the web configuration file (``--web.config.file``): YAML documents over the real keys (TLS with
  real certificates, keys and CAs made for the session, headers, bcrypt hashes), with values that are
  YAML's implicit types, tags, anchors, billion-laughs aliases, merge keys, deep nesting, control
  characters and lone surrogates, mutated text, random and non-UTF-8 bytes, and huge documents:
  ``sixdim.http.webconfig.load`` returns a WebConfig the HTTP server can use, or raises ConfigError with
  one printable line that shows no bcrypt hash; nothing else, and never a hang (a watchdog alarm
  fails a load that runs on).  What it loads, ``promtool check web-config`` accepts too.

Derandomized (the same examples on every run, as CI needs) and without an example database; each
test takes a few seconds.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis")  # the 'test' extra installs it; see pyproject.toml

from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from sixdim.cli import main  # noqa: E402
from sixdim.config import ConfigError, load  # noqa: E402
from sixdim.config.schema import MAX_SECONDS, MIN_SECONDS, OPTIONS  # noqa: E402
from sixdim.http import webconfig  # noqa: E402
from sixdim.workloads import registry  # noqa: E402
from sixdim.workloads.logs import command  # noqa: E402
from sixdim.workloads.logs.model import MAX_READING, Metric  # noqa: E402
from sixdim.workloads.logs.parsers import make_parsers, parse_lines  # noqa: E402
from sixdim.workloads.logs.training_log import TrainingLog  # noqa: E402
from sixdim.workloads.measure.dimensions import KEYS, OUTPUT_KEYS  # noqa: E402
from sixdim.workloads.spec import ParamError  # noqa: E402
from tests.certs import encrypt_key, issue, make_ca  # noqa: E402
from tests.conftest import required_tool  # noqa: E402

LOGS = Path(__file__).parent / "fixtures" / "logs"

FUZZ = settings(max_examples=300, deadline=None, derandomize=True, database=None, print_blob=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ============================================================================ shared values

class Raw(str):
    """Text put into a document as it is (a deeply nested array, a 5,000-digit number)."""


def deep(depth: int, opener: str = "[", closer: str = "]", inner: str = "") -> Raw:
    return Raw(opener * depth + inner + closer * depth)


huge_digits = st.integers(300, 5000).map(lambda n: Raw("9" * n))
absurd_floats = st.sampled_from([math.nan, math.inf, -math.inf, 1e300, -1e300, 1e308, 5e-324, -0.0, 0.0])
scalars = st.one_of(
    st.integers(-10, 10), st.integers(), st.integers(-2**70, 2**70),
    st.floats(allow_nan=True, allow_infinity=True), absurd_floats,
    st.booleans(), st.text(max_size=12), st.sampled_from(["nan", "inf", "1e400", "-1", "0", "", "cpu", "auto"]),
    huge_digits,
)
hostile = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                       max_leaves=8) | st.integers(50, 3000).map(deep)


# ============================================================================ configuration

def toml_string(text: str) -> str:
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def toml_value(value: Any) -> str:
    """A value as TOML (inline tables and arrays), NaN and infinities included."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_string(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(value)


def toml_document(document: dict[str, Any]) -> str:
    return "".join(f"{toml_string(key)} = {toml_value(value)}\n" for key, value in document.items())


def mostly(good: st.SearchStrategy, bad: st.SearchStrategy, tenths_bad: int = 1) -> st.SearchStrategy:
    """``good`` nine times in ten (by default), else ``bad``: a document with one hostile value among
    sensible ones reaches further than one with hostile values everywhere."""
    return st.integers(0, 9).flatmap(lambda i: bad if i >= 10 - tenths_bad else good)  # hypothesis favours 0


def good_or(values: list[Any]) -> st.SearchStrategy:
    """Mostly a sensible value, sometimes a hostile one."""
    return mostly(st.sampled_from(values), hostile)


OPTION_VALUES: dict[str, list[Any]] = {
    "agent.listen": [":9480", "127.0.0.1:9999", "[::1]:1"], "agent.history": ["/tmp/sixdim-fuzz.db"],
    "agent.history_keep_days": [1, 90.5, 36500], "agent.history_max_runs": [1000, 10**8],
    "agent.hostname": ["node-1"], "agent.log_level": ["debug", "error"], "agent.sample_hz": [1, 10.0, 100],
    "agent.dcgm_label_names": [True, "yes"], "regression.window": [10, 1000], "regression.min_baseline": [5, 10],
    "regression.min_effect": [0.018, 0.5], "guard.enabled": [False], "guard.max_utilization": [0, 0.05, 1],
}


def option_tables() -> st.SearchStrategy:
    tables = {}
    for opt in OPTIONS:
        section, name = opt.key.split(".", 1)
        sensible = OPTION_VALUES.get(opt.key) or [v for v in [opt.default({})] if v is not None] or [""]
        tables.setdefault(section, {})[name] = good_or(sensible)
    return st.fixed_dictionaries({}, optional={
        section: st.fixed_dictionaries({}, optional=keys) for section, keys in tables.items()})


def param_values(spec) -> st.SearchStrategy:
    optional = {}
    for param in spec.params:
        sensible = [param.cpu_default] if param.cpu_default is not None else []
        if param.choices:
            sensible += list(param.choices)
        if param.kind in (int, float) and not param.many:
            low, high = param.bounds()
            sensible += [low, high, param.kind(low + 1)]  # the edges of the documented range
        optional[param.name] = good_or(sensible or [0])
    return st.fixed_dictionaries({}, optional=optional)


@st.composite
def workload_entries(draw) -> Any:
    name = draw(st.sampled_from(sorted(registry.WORKLOADS)))
    spec = registry.get(name)
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return name
    if kind == 1:
        return draw(hostile)
    params = draw(param_values(spec))
    if name == "command":  # its one required parameter, most of the time
        params.setdefault("argv", draw(good_or([["python", "train.py"], ["true"]])))
    return {"name": name, "params": params}


suite_tables = st.fixed_dictionaries(
    {"name": good_or(["s", "nightly"]),
     "workloads": mostly(st.lists(workload_entries(), min_size=1, max_size=2), hostile),
     "interval_seconds": good_or([1, 60, 900.5, MAX_SECONDS])},
    optional={
        "preset": good_or(list(registry.SUITES)),
        "cron": good_or(["0 3 * * *", "*/5 * * * *"]),
        "devices": good_or([["auto"], ["cpu"], ["cuda:0", "cuda:1"], "cpu"]),
        "timeout_seconds": good_or([1, 600, MAX_SECONDS]),
        "misfire_grace_seconds": good_or([1, 300]),
        "run_at_start": good_or([True, False]),
        "export": good_or(["summary", "shapes"]),
    })

config_documents = st.builds(
    lambda options, suites, effects, extra: {**options,
                                             **({"suites": suites} if suites is not None else {}),
                                             **({"regression": {**options.get("regression", {}), "effects": effects}}
                                                if effects is not None and isinstance(options.get("regression", {}),
                                                                                      dict) else {}),
                                             **extra},
    option_tables(), mostly(st.none() | st.lists(suite_tables, min_size=1, max_size=2), hostile),
    st.none() | st.dictionaries(st.sampled_from(["gemm", "gemm/flops", "seconds", "gemm/tflops", "gemmm"]),
                                good_or([0.02, 0.5])),
    mostly(st.just({}), st.dictionaries(st.sampled_from(["agent", "bogus", "suites"]), hostile, max_size=1)),
)

environments = mostly(st.just({}), st.dictionaries(st.sampled_from([opt.env for opt in OPTIONS]),
                               st.one_of(st.sampled_from(["nan", "inf", "-1", "1e400", "9" * 5000, "10", "0.5",
                                                          "true", "", "cuda:²"]),
                                         st.text(max_size=10).filter(lambda t: "\0" not in t)),
                               max_size=2), tenths_bad=3)


def check_config(config) -> None:
    """A loaded configuration's numbers are finite and within their documented ranges."""
    ranges = {"history_keep_days": (1, 36500), "history_max_runs": (1000, 10**8), "sample_hz": (1, 100),
              "regression_window": (10, 1000), "regression_min_baseline": (5, 1000),
              "regression_min_effect": (0, 1), "guard_max_utilization": (0, 1)}
    for name, (low, high) in ranges.items():
        value = getattr(config, name)
        assert math.isfinite(value) and low <= value <= high, (name, value)
    assert all(math.isfinite(v) and 0 < v < 1 for v in config.regression_effects.values())
    for suite in config.suites:
        for value in (suite.interval_seconds, suite.timeout_seconds, suite.misfire_grace_seconds):
            assert value is None or (math.isfinite(value) and MIN_SECONDS <= value <= MAX_SECONDS), value
        for entry in suite.workloads:
            spec = registry.get(entry.name)
            for key, value in spec.resolve(entry.params, "cpu").items():
                for item in value if isinstance(value, list) else [value]:
                    if spec.param(key).kind in (int, float) and not isinstance(item, bool):
                        low, high = spec.param(key).bounds()
                        assert math.isfinite(item) and low <= item <= high, (entry.name, key, item)


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@FUZZ
@given(document=config_documents, env=environments)
@pytest.mark.slow
def test_configuration_loads_in_range_or_raises_config_error(fuzz_dir, document, env):
    path = fuzz_dir / "sixdim.toml"
    path.write_text(toml_document(document))
    try:
        config = load(str(path), env=env)
    except ConfigError as exc:
        message = str(exc)
        assert "\n" not in message and len(message) < 1000, message
        event(f"ConfigError on {exc.key.split('[')[0].split('.')[0]}")
        return
    event(f"loaded, {len(config.suites)} suite(s), "
          f"{'some' if any(e.params for s in config.suites for e in s.workloads) else 'no'} params")
    check_config(config)


@FUZZ
@given(data=st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode),
                      st.integers(100, 200_000).map(lambda n: ("x = " + deep(n)).encode())))
def test_configuration_of_random_bytes_loads_or_raises_config_error(fuzz_dir, data):
    path = fuzz_dir / "random.toml"
    path.write_bytes(data)
    try:
        check_config(load(str(path), env={}))
    except ConfigError as exc:
        assert "\n" not in str(exc)


@FUZZ
@given(name=st.sampled_from(sorted(registry.WORKLOADS)), data=st.data(),
       value=st.one_of(st.sampled_from(["nan", "inf", "-inf", "1e400", "1e300", "-1", "0", "1", "9" * 5000,
                                        "9" * 20, "2", "3,4", "fp32,bf16", "", ",", "true", "(", "cpu"]),
                       st.text(max_size=12)))
def test_run_param_flag_values_resolve_in_range_or_raise_param_error(name, data, value):
    """``sixdim run -p KEY=VALUE``: the text goes through the CLI's finiteness check and the workload's
    own parsing; the result is in the documented range, or a ParamError of one line."""
    from sixdim.cli import _check_finite

    spec = registry.get(name)
    param = data.draw(st.sampled_from(spec.params))
    overrides = {param.name: value}
    if name == "command" and param.name != "argv":
        overrides["argv"] = "true"
    try:
        _check_finite(overrides, [spec])
        cases = spec.cases(overrides, "cpu")
    except ParamError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 600, str(exc)
        return
    resolved = spec.resolve(overrides, "cpu")
    for item in resolved[param.name] if param.many else [resolved[param.name]]:
        if param.kind in (int, float):
            low, high = param.bounds()
            assert math.isfinite(item) and low <= item <= high, item
    assert cases


# ============================================================================ sixdim dimensions

def json_number() -> st.SearchStrategy:
    sensible = st.one_of(st.integers(1, 10**6).map(str), st.floats(0.001, 1e6).map(repr))
    hostile_numbers = st.one_of(
        st.integers(-10**6, 10**6).map(str), st.floats(allow_nan=False, allow_infinity=False).map(repr),
        st.sampled_from(["1e400", "-1e400", "1e308", "NaN", "Infinity", "-Infinity", "0", "-0", "1E+308", "5e-324"]),
        st.integers(300, 5000).map(lambda n: "9" * n),
    )
    return mostly(sensible, hostile_numbers, tenths_bad=2)


def json_text(value: Any) -> str:
    """A JSON document with numbers as written tokens (a 5,000-digit one included)."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {json_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(json_text(v) for v in value) + "]"
    return json.dumps(value)


json_leaves = st.one_of(json_number().map(Raw), st.booleans(), st.none(), st.text(max_size=5))
json_values = st.recursive(json_leaves, lambda inner: st.one_of(
    st.lists(inner, max_size=7), st.dictionaries(st.sampled_from(["single", "multi", "count", "x"]), inner,
                                                 max_size=4)), max_leaves=20)
speeds = mostly(st.lists(json_number().map(Raw), min_size=5, max_size=8),
                st.lists(json_number().map(Raw), max_size=4))
OBSERVATIONS = {
    "speed": mostly(speeds, json_values),
    "accuracy": mostly(json_number().map(Raw), json_values),
    "linearity": mostly(st.fixed_dictionaries({"single": json_number().map(Raw), "multi": json_number().map(Raw),
                                               "count": mostly(st.integers(1, 64), st.integers()).map(str).map(Raw)}),
                        json_values),
    "power_watts": mostly(speeds, json_values),
    "memory_mib": mostly(speeds, json_values),
    "convergence": mostly(speeds, json_values),
}
observations = st.fixed_dictionaries({}, optional=OBSERVATIONS).flatmap(
    lambda o: mostly(st.just(o), st.just({**o, "bogus": 1})))
dimension_inputs = st.one_of(
    observations.map(lambda o: json_text(o).encode()),
    observations.map(lambda o: json_text(o).encode()),
    observations.map(lambda o: json_text(o).encode()),
    json_values.map(lambda v: json_text(v).encode()),
    st.binary(max_size=100),
    st.integers(500, 200_000).map(lambda n: deep(n).encode()),
    st.tuples(observations, st.integers(0, 40)).map(lambda t: json_text(t[0]).encode()[:t[1]]),  # cut short
)


def _reject(name: str) -> Any:
    raise AssertionError(f"non-standard JSON constant {name} in the output")


@FUZZ
@given(data=dimension_inputs)
@pytest.mark.slow
def test_dimensions_exits_0_with_finite_json_or_2_with_one_line(fuzz_dir, data):
    path = fuzz_dir / "observations.json"
    path.write_bytes(data)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["dimensions", str(path)])
    event(f"exit {code}")
    if code == 0:
        assert err.getvalue() == ""
        result = json.loads(out.getvalue(), parse_constant=_reject)
        assert set(result) == set(OUTPUT_KEYS)
        assert all(v is None or (isinstance(v, float) and math.isfinite(v)) for v in result.values()), result
    else:
        assert code == 2 and out.getvalue() == ""
        message = err.getvalue()
        event("exit 2: " + message.split(": ", 3)[-1][:14])
        assert message.startswith("sixdim: error: ") and message.count("\n") == 1 and len(message) < 600, message


def test_the_fuzzed_keys_are_the_real_ones():
    """A key added to sixdim dimensions must be added to the fuzzer too."""
    assert set(OBSERVATIONS) == set(KEYS)


# ============================================================================ training-log parsers

FIXTURES = {path.name: path.read_text().splitlines() for path in sorted(LOGS.glob("*.txt"))}
FIXTURE_LINES = sorted({line for lines in FIXTURES.values() for line in lines if line.strip()})
REPLACEMENTS = ["NaN", "Infinity", "-1", "1e400", "1e308", "9" * 5000, "9" * 20, "null", "true", "[1, 2]", "{}",
                '"x"', "[" * 3000, "{" * 3000, "%", " " * 3000, ":::MLLOG", "AI-Rank-log", "\x00", "\ufffd"]
REGEXES = {  # the fixtures' own expressions (tests/test_logparse.py), and ones with optional groups
    "hf_trainer.txt": (r"'train_samples_per_second': ([\d.]+)", r"'eval_loss': ([\d.]+)"),
    "torchvision_percent.txt": (r"img/s: ([\d.]+)", r"Acc@1 ([\d.]+)"),
    "other": (r"speed(?: (\d+))? img/s", r"top1[ =]+([\d.eE+-]+|nan|inf)?\s*%?"),
    "loose": (r"(\S+) samples/s", r"acc=(\S*)"),
}


@st.composite
def mutated(draw, line: str) -> str:
    """A line with a few edits: a number or a JSON value swapped for a hostile one, a slice cut out,
    text inserted."""
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.integers(0, len(line)))
        action = draw(st.integers(0, 3))
        if action == 0:  # replace the token at a position
            end = where
            while end < len(line) and line[end] not in " ,}]":
                end += 1
            line = line[:where] + draw(st.sampled_from(REPLACEMENTS)) + line[end:]
        elif action == 1:
            line = line[:where] + line[draw(st.integers(where, len(line))):]
        elif action == 2:
            line = line[:where] + draw(st.text(max_size=10)) + line[where:]
        else:
            line = line[:where] + draw(st.sampled_from(REPLACEMENTS)) + line[where:]
    return line


odd_lines = st.one_of(st.sampled_from(FIXTURE_LINES).flatmap(mutated), st.text(max_size=60), st.sampled_from([
    "speed img/s", "speed 1e999 img/s", "top1 = nan %", "acc=", "x samples/s", "AI-Rank-log 1 ips",
    "AI-Rank-log " + "9" * 400 + " test_begin", ":::MLL 1e308 run_stop: {}", ":::MLL -1e308 run_start: {}"]))


@st.composite
def training_logs(draw) -> tuple[str, list[str]]:
    """A fixture log with a few of its lines mutated and a few odd lines put in."""
    name = draw(st.sampled_from(sorted(FIXTURES)))
    lines = list(FIXTURES[name])
    for _ in range(draw(st.integers(0, 3))):
        if lines:
            i = draw(st.integers(0, len(lines) - 1))
            lines[i] = draw(mutated(lines[i]))
    for _ in range(draw(st.integers(0, 3))):
        lines.insert(draw(st.integers(0, len(lines))), draw(odd_lines))
    return name, lines


def all_numbers(log: TrainingLog) -> list[float]:
    numbers = list(log.throughputs) + list(log.latencies.values())
    numbers += [v for v in (log.average_throughput, log.time_to_train, log.total_time) if v is not None]
    numbers += [e.value for _, evaluations in log.series.values() for e in evaluations]
    numbers += list(log.inference.get("rates", {}).values())
    return numbers


@FUZZ
@given(log_lines=training_logs(), regexes=st.sampled_from(["own", "other", "loose", "none"]),
       unit=st.sampled_from(["auto", "ratio", "percent", "score"]), higher=st.booleans(),
       warmup=st.integers(0, 3), target=st.sampled_from([0.0, 0.5, 0.75, 80.0]))
@pytest.mark.slow
def test_parsers_never_raise_and_every_number_is_finite(log_lines, regexes, unit, higher, warmup, target):
    name, lines = log_lines
    throughput_regex, accuracy_regex = ("", "") if regexes == "none" else \
        REGEXES.get(name, REGEXES["other"]) if regexes == "own" else REGEXES[regexes]
    formats = ["ai_rank", "mlperf"]
    parsers = make_parsers(formats, throughput_regex, accuracy_regex)
    log = parse_lines(lines, parsers, TrainingLog(user_metric=Metric("accuracy", higher, unit)))
    failures = [w for w in log.warnings if w.startswith("a parser failed")]
    assert not failures, failures  # the catch-all is a safety net: no parser should need it
    assert all(math.isfinite(v) and 0 <= v <= MAX_READING for v in all_numbers(log)), all_numbers(log)
    assert log.ignored_lines <= len(lines) and log.warning_count >= len(log.warnings)

    params = registry.get("command").resolve({"argv": ["x"], "formats": formats, "throughput_regex":
                                              throughput_regex, "accuracy_regex": accuracy_regex,
                                              "warmup_throughputs": warmup, "accuracy_unit": unit,
                                              "higher_is_better": higher}, "cpu")
    params["target_accuracy"] = target
    output = command.dimensions(log, 1.0, len(lines), params)
    event(f"{output.status}, {'some' if output.figures else 'no'} figures, "
          f"{'some' if log.ignored_lines else 'no'} lines ignored")
    assert output.status in ("ok", "failed")
    assert all(isinstance(v, float) and math.isfinite(v) for v in output.figures.values()), output.figures
    json.dumps(output.details, allow_nan=False, default=str)  # no NaN or infinity in the details either


@FUZZ
@given(lines=st.lists(odd_lines, min_size=1, max_size=20))
def test_parsers_on_odd_lines_alone(lines):
    log = parse_lines(lines, make_parsers(["ai_rank", "mlperf"], *REGEXES["other"]))
    assert not [w for w in log.warnings if w.startswith("a parser failed")], log.warnings
    assert all(math.isfinite(v) and 0 <= v <= MAX_READING for v in all_numbers(log))


# ============================================================================ the web configuration file

WEB_FUZZ = settings(FUZZ)
"""No deadline (as for the rest): a loaded machine can stall any example for seconds, and a busy CI
host failed on a 5 s one; a real hang is caught by :func:`watchdog` instead."""

HANG_SECONDS = 60.0
"""What :func:`watchdog` allows one load: well past any honest load, the huge documents included."""


class Hang(AssertionError):
    """A load still running after :data:`HANG_SECONDS` (a failure hypothesis can shrink)."""


@contextlib.contextmanager
def watchdog(seconds: float = HANG_SECONDS):
    """Turn a hang (which a deadline cannot catch: it is checked when the example ends) into a failure.
    PyYAML is pure Python, so the alarm interrupts it."""
    def expired(_signum: int, _frame: Any) -> None:
        raise Hang(f"still loading after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def yaml_string(text: str) -> str:
    """A double-quoted YAML scalar: any text, control characters and lone surrogates included."""
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char.isprintable() and not 0xD800 <= ord(char) <= 0xDFFF:
            out.append(char)
        elif ord(char) <= 0xFF:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) <= 0xFFFF:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    return '"' + "".join(out) + '"'


def yaml_flow(value: Any) -> str:
    """A value as flow YAML (NaN, huge and raw tokens included)."""
    if isinstance(value, Raw):
        return str(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return yaml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(yaml_flow(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{yaml_key(k)}: {yaml_flow(v)}" for k, v in value.items()) + "}"
    raise TypeError(value)


def yaml_key(key: Any) -> str:
    return str(key) if isinstance(key, Raw) else yaml_string(str(key))


def yaml_block(document: Any, indent: int = 0) -> str:
    """Mappings as block YAML (as people write the file), other values in flow style."""
    if not isinstance(document, dict) or isinstance(document, Raw) or not document:
        return " " * indent + yaml_flow(document) + "\n"
    lines = []
    for key, value in document.items():
        if isinstance(value, dict) and value and not isinstance(value, Raw):
            lines.append(f"{' ' * indent}{yaml_key(key)}:\n{yaml_block(value, indent + 2)}")
        else:
            lines.append(f"{' ' * indent}{yaml_key(key)}: {yaml_flow(value)}\n")
    return "".join(lines)


def laughs(levels: int) -> Raw:
    """A billion laughs in flow YAML: ``levels`` anchors, each a list of nine aliases of the previous one."""
    items = ["&l0 [x, x, x, x, x, x, x, x, x]"] + [f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]"
                                                   for i in range(1, levels)]
    return Raw("[" + ", ".join(items) + "]")


# the YAML a person or an attacker may write where a value goes: implicit types, tags, anchors
YAML_TOKENS = ["2001-02-30", "2001-12-14t21:59:43.10-05:00", "yes", "No", "on", "~", "0x1F", "0o17", "0b101",
               "1_000", "190:20:30", ".nan", "-.inf", "1e400", "!!float abc", "!!bool maybe", "!!int x", "!!int 0x",
               "!!binary AAAA", "!!binary ~~~", "!!set {a, b}", "!!omap [a: 1]", "!!pairs [a: 1, a: 2]",
               "!!timestamp 2001-99-99", "!!python/object/apply:os.system [echo]", "!!str 1", "!<tag:x> 1",
               "&a x", "*undefined", "'single '' quoted'", "\"\\ud800\"", "\"\\0\"", "\"a\\nb\"", "[a, *a]",
               "&r [*r]", "{a: 1, a: 2}", "{? [a] : 1}", "{? {b: 1} : 2}", "{<<: {a: 1}}", "!!null x", "@", "`",
               "%", "|\n  text", ">-\n  folded", "- [", "}", "? x", ": x"]
PEM_MARKERS = ["@SERVER_CRT@", "@SERVER_KEY@", "@CA_CRT@"]
"""Inline PEM values, put in when the file is written (the certificates are made per test session)."""
CERT_NAMES = ["server.crt", "server.key", "ca.crt", "client.crt", "client.key", "encrypted.key", "not-pem.txt",
              "missing.crt", ".", "..", "/dev/null", "~/nope.crt", "~root/x", "a" * 300, "x\0y", "x\ny", "\ud800",
              "dir/", "ca.crt/"]
HASHES = ["$2y$04$" + "a" * 53, "$2b$05$" + "./AZaz09" * 6 + "abcde", "$2a$04$" + "b" * 53, "$2$04$" + "c" * 53,
          "$2x$06$" + "d" * 53, "$2b$31$" + "e" * 53, "$2b$18$" + "f" * 53, "$2b$03$" + "g" * 53, "$2b$99$" + "h" * 53,
          "$2b$04$" + "i" * 52, "plaintext", "", "$2b$04$" + "j" * 53 + "\n"]
"""bcrypt hashes: valid ones of costs 4 to 6 (cheap: the load makes a dummy hash of the highest cost),
and costs past the limit, cut short, of other kinds, plain text."""

yaml_scalars = st.one_of(scalars, st.sampled_from(YAML_TOKENS).map(Raw), st.sampled_from(CERT_NAMES),
                         st.sampled_from(HASHES), st.sampled_from(PEM_MARKERS).map(Raw))
web_hostile = st.recursive(yaml_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.text(max_size=6), st.sampled_from(
        ["cert_file", "key_file", "headers", "<<", "? [a]"]).map(lambda k: Raw(k) if k in ("<<", "? [a]") else k)),
        inner, max_size=3)), max_leaves=8) | st.integers(50, 3000).map(deep) | st.integers(2, 12).map(laughs)


def web_good_or(values: list[Any]) -> st.SearchStrategy:
    """Mostly one of the real values, sometimes anything YAML can say."""
    return mostly(st.sampled_from(values), web_hostile)


TLS_NAMES = ["TLS10", "TLS11", "TLS12", "TLS13"]
CLIENT_AUTH = ["NoClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert", "RequestClientCert",
               "RequireAnyClientCert", "RequireClientCert", "Always", ""]
CIPHERS = sorted(webconfig.GO_CIPHERS) + list(webconfig.GO_TLS13_CIPHERS) + [
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", "ECDHE-RSA-AES128-GCM-SHA256", "TLS_RSA_WITH_RC4_128_SHA"]
HEADER_NAMES = list(webconfig.HEADERS) + ["Server", "x-frame-options", ""]
HEADER_VALUES = ["nosniff", "deny", "sameorigin", "DENY", "max-age=31536000; includeSubDomains", "default-src 'self'",
                 "", "a\r\nSet-Cookie: x=1", "caf\u00e9", "\u20ac", "a\tb", "a\x00b", "1; mode=block"]

random_tls_tables = st.fixed_dictionaries({}, optional={
    "cert_file": web_good_or(["server.crt", "server.crt", "client.crt", "not-pem.txt", "missing.crt", "server.key"]),
    "key_file": web_good_or(["server.key", "server.key", "client.key", "encrypted.key", "not-pem.txt"]),
    "cert": web_good_or([Raw("@SERVER_CRT@"), Raw("@CA_CRT@"), "-----BEGIN CERTIFICATE-----\nMIIB\n", ""]),
    "key": web_good_or([Raw("@SERVER_KEY@"), "-----BEGIN PRIVATE KEY-----\n", ""]),
    "client_ca_file": web_good_or(["ca.crt", "server.crt", "not-pem.txt", "missing.crt"]),
    "client_ca": web_good_or([Raw("@CA_CRT@"), "not pem", ""]),
    "client_auth_type": web_good_or(CLIENT_AUTH),
    "client_allowed_sans": web_good_or([["prometheus.test"], ["127.0.0.1", "::1"], [], "x"]),
    "min_version": web_good_or(TLS_NAMES + ["TLS1.2", ""]),
    "max_version": web_good_or(TLS_NAMES),
    "cipher_suites": mostly(st.lists(st.sampled_from(CIPHERS), max_size=3), web_hostile),
    "prefer_server_cipher_suites": web_good_or([True, False]),
    "curve_preferences": mostly(st.lists(st.sampled_from(list(webconfig.GO_CURVES) + ["P256"]), max_size=2),
                                web_hostile),
})


@st.composite
def coherent_tls_tables(draw, spoil: bool = True) -> tuple[dict[str, Any], bool]:
    """A TLS section that makes sense (a certificate and its key, from files or inline; mTLS with a CA;
    SANs with a required certificate), and whether one of its keys (now and then, with ``spoil``) got
    a hostile value: the fuzzer gets past the first check as often as not, into the certificate
    loading and the ssl calls."""
    table: dict[str, Any] = {}
    if draw(st.booleans()):
        table.update(cert_file="server.crt", key_file="server.key")
    else:
        table.update(cert=Raw("@SERVER_CRT@"), key=Raw("@SERVER_KEY@"))
    auth = draw(st.sampled_from(CLIENT_AUTH[:3]))
    if auth != "NoClientCert":
        table["client_auth_type"] = auth
        table.update(draw(st.sampled_from([{"client_ca_file": "ca.crt"}, {"client_ca": Raw("@CA_CRT@")}])))
        if auth == "RequireAndVerifyClientCert" and draw(st.booleans()):
            table["client_allowed_sans"] = draw(st.lists(st.sampled_from(["client.test", "127.0.0.1", "::1"]),
                                                         min_size=1, max_size=2))
    versions = sorted(draw(st.lists(st.sampled_from(TLS_NAMES), max_size=2)))
    table.update(zip(("min_version", "max_version"), versions))
    for key, values in (("cipher_suites", st.lists(st.sampled_from(CIPHERS[:len(webconfig.GO_CIPHERS)]), max_size=3)),
                        ("curve_preferences", st.lists(st.sampled_from(sorted(webconfig.GO_CURVES)), max_size=1)),
                        ("prefer_server_cipher_suites", st.booleans())):
        if draw(st.booleans()):
            table[key] = draw(values)
    spoilt = spoil and draw(st.integers(0, 2)) == 0
    if spoilt:
        table[draw(st.sampled_from(sorted(webconfig._TLS_KEYS)))] = draw(web_hostile)
    return table, spoilt


tls_tables = st.one_of(coherent_tls_tables().map(lambda pair: pair[0]), random_tls_tables)
http_tables = st.fixed_dictionaries({}, optional={
    "headers": mostly(st.dictionaries(st.sampled_from(HEADER_NAMES), st.sampled_from(HEADER_VALUES), max_size=3),
                      web_hostile),
    "http2": web_good_or([True, False, "yes"]),
})
users_tables = mostly(st.dictionaries(st.one_of(st.sampled_from(["prometheus", "a:b", "", "ünï"]), st.text(max_size=8)),
                                      web_good_or(HASHES[:5]), max_size=3), web_hostile)
web_documents = st.builds(
    lambda sections, extra: {**sections, **extra},
    st.fixed_dictionaries({}, optional={"tls_server_config": mostly(tls_tables, web_hostile),
                                        "http_server_config": mostly(http_tables, web_hostile),
                                        "basic_auth_users": users_tables}),
    mostly(st.just({}), st.dictionaries(st.one_of(st.sampled_from(["rate_limit", "tls_config", "Basic_auth_users"]),
                                                  st.text(max_size=6)), web_hostile, max_size=1)),
)


@st.composite
def mutated_text(draw, text: str) -> str:
    """``text`` with a few edits of the characters that mean something in YAML."""
    for _ in range(draw(st.integers(1, 4))):
        where = draw(st.integers(0, len(text)))
        piece = draw(st.one_of(st.sampled_from(list(":-[]{}&*!|>'\"%@`#,?\n\t ") + ["  ", "\n  ", "<<: ", "- "]),
                               st.text(max_size=4)))
        end = where + draw(st.integers(0, 3))
        text = text[:where] + piece + text[end:]
    return text


def non_utf8(data: bytes, where: int, byte: int) -> bytes:
    where %= len(data) + 1
    return data[:where] + bytes([byte]) + data[where:]


web_inputs = st.one_of(
    web_documents.map(lambda d: yaml_block(d).encode("utf-8", "surrogatepass")),
    web_documents.map(lambda d: yaml_block(d).encode("utf-8", "surrogatepass")),
    web_documents.map(lambda d: yaml_flow(d).encode("utf-8", "surrogatepass")),
    web_documents.map(yaml_block).flatmap(mutated_text).map(lambda t: t.encode("utf-8", "surrogatepass")),
    web_hostile.map(lambda v: yaml_block(v).encode("utf-8", "surrogatepass")),
    st.builds(non_utf8, web_documents.map(lambda d: yaml_block(d).encode("utf-8", "surrogatepass")),
              st.integers(0, 10_000), st.sampled_from([0x80, 0xC3, 0xED, 0xF8, 0xFF, 0xFE])),
    st.binary(max_size=200),
    st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.sampled_from([b"\xef\xbb\xbftls_server_config: {}\n", b"\xff\xfet\x00l\x00s\x00", b"---\na: 1\n---\nb: 2\n",
                     b"%YAML 1.1\n---\n{}\n", b"...\n", b"\t", b"\x00", b"~\n", b"[]\n", b"\"\"\n"]),
)


@pytest.fixture(scope="module")
def web_dir(tmp_path_factory) -> Path:
    """A folder with what a web configuration names (relative paths are relative to its file): a CA,
    a server and a client certificate it signed, an encrypted key, a file that is not PEM."""
    folder = tmp_path_factory.mktemp("webfuzz")
    make_ca(folder, "fuzz CA")
    for name in ("server", "client"):
        issue(folder, name, name, f"subjectAltName=DNS:{name}.test,IP:127.0.0.1\n")
    encrypt_key(folder, "server.key", "encrypted.key", "abcd")
    (folder / "not-pem.txt").write_text("not a certificate\n")
    (folder / "dir").mkdir()
    for path in folder.iterdir():
        os.chmod(path, 0o700 if path.is_dir() else 0o600)  # keys private: no warning per example
    return folder


def with_pem(data: bytes, folder: Path) -> bytes:
    """The inline PEM markers replaced by the real PEM text (a double-quoted YAML string)."""
    for marker, name in zip(PEM_MARKERS, ("server.crt", "server.key", "ca.crt")):
        if marker.encode() in data:
            data = data.replace(marker.encode(), yaml_string((folder / name).read_text()).encode())
    return data


BCRYPT_IN_FULL = re.compile(r"\$2[abxy]?\$\d\d\$[./A-Za-z0-9]{53}")


def load_web(folder: Path, data: bytes, record: bool = True) -> Any:
    """Load ``data`` as a web configuration file: the WebConfig, or the ConfigError's message, which
    must be one printable line that shows no bcrypt hash; anything else fails the test."""
    path = folder / "web.yml"
    path.write_bytes(with_pem(data, folder))
    os.chmod(path, 0o600)
    try:
        with watchdog():
            return webconfig.load(str(path))
    except ConfigError as exc:
        message = str(exc)
        assert message.isprintable() and len(message) < 2000, message  # one line: no \n, \r, NUL, U+2028
        if exc.key.startswith("basic_auth_users"):
            assert not BCRYPT_IN_FULL.search(message), message  # a hash is a secret of sorts
        if record:
            event(f"ConfigError on {exc.key.split('.')[0][:24]}")
        return message


def check_web_config(config: Any) -> None:
    """What a loaded web configuration promises the HTTP server."""
    assert isinstance(config.http2, bool)
    assert config.client_auth_type in webconfig.CLIENT_AUTH_TYPES
    assert config.min_version in webconfig.TLS_VERSIONS
    for name, value in config.headers:
        assert name in webconfig.HEADERS and value and value.isascii() and value.isprintable(), (name, value)
        value.encode("iso-8859-1")  # what wsgiref sends them as
    if config.auth is not None:
        assert config.auth.users and all(isinstance(u, str) and u and ":" not in u for u in config.auth.users)
    if config.client_allowed_sans:
        assert config.tls and config.client_auth_type == "RequireAndVerifyClientCert"
    event(f"loaded: {'TLS' if config.tls else 'plain'}{', mTLS' if config.client_auth_type != 'NoClientCert' else ''}"
          f"{', auth' if config.auth else ''}{', headers' if config.headers else ''}")


@WEB_FUZZ
@given(data=web_inputs)
@pytest.mark.slow
def test_web_configuration_loads_or_raises_config_error(web_dir, data):
    loaded = load_web(web_dir, data)
    if not isinstance(loaded, str):
        check_web_config(loaded)


@WEB_FUZZ
@given(tls=coherent_tls_tables(), style=st.sampled_from([yaml_block, yaml_flow]))
@pytest.mark.slow
def test_tls_sections_load_when_sound_and_are_refused_cleanly_when_not(web_dir, tls, style):
    """The TLS section alone, where the work is (certificates, keys, CAs, versions, ciphers, curves): a
    sound one always loads, with what it says; a spoilt one loads or is refused in one line."""
    table, spoilt = tls
    loaded = load_web(web_dir, style({"tls_server_config": table}).encode("utf-8", "surrogatepass"))
    if spoilt:
        if not isinstance(loaded, str):
            check_web_config(loaded)
        return
    assert not isinstance(loaded, str), (table, loaded)
    check_web_config(loaded)
    assert loaded.tls and loaded.client_auth_type == table.get("client_auth_type", "NoClientCert")
    assert loaded.min_version == table.get("min_version", "TLS12")
    assert loaded.client_allowed_sans == tuple(table.get("client_allowed_sans", ()))


HUGE_WEB_DOCUMENTS = {
    "1 MiB of [": b"x: " + b"[" * (webconfig.MAX_FILE_BYTES - 3),
    "flow mappings nested 100,000 deep": b"x: " + b"{a: " * 100_000,
    "block sequences nested to 1 MiB":
        "".join(" " * i + "- \n" for i in range(1400)).encode()[:webconfig.MAX_FILE_BYTES],
    "block mappings nested to 1 MiB":
        "".join(" " * i + "a:\n" for i in range(1400)).encode()[:webconfig.MAX_FILE_BYTES],
    "80,000 unknown keys": "".join(f"k{i}: {i}\n" for i in range(80_000)).encode()[:webconfig.MAX_FILE_BYTES],
    "a 1 MiB key": b"a" * (webconfig.MAX_FILE_BYTES - 10) + b": 1\n",
    "a 1 MiB file name":
        b"tls_server_config:\n  cert_file: " + b"a" * (webconfig.MAX_FILE_BYTES - 60) + b"\n  key_file: x\n",
    "one byte too many": b"#" * (webconfig.MAX_FILE_BYTES + 1),
    "200,000 aliases": b"http_server_config: &a {}\nq: [" + b", ".join([b"*a"] * 200_000) + b"]\n",
    "a billion laughs in a refused value": ("tls_server_config: " + laughs(30) + "\n").encode(),
    "a billion laughs in headers": ("http_server_config:\n  headers: " + laughs(30) + "\n").encode(),
    "a billion laughs as users": ("basic_auth_users: {a: " + laughs(30) + "}\n").encode(),
    "merge keys merging merges": ("a: &m0 {x: 1, y: 2, z: 3}\n" + "".join(
        f"m{i}: &m{i} {{<<: [" + ", ".join([f"*m{i - 1}"] * 9) + "]}\n" for i in range(1, 30))).encode(),
    "a 5,000-digit integer": b"http_server_config:\n  http2: " + b"9" * 5000 + b"\n",
    "a sexagesimal integer of 5,000 places": b"http_server_config:\n  http2: " + b":".join([b"59"] * 5000) + b"\n",
    "a cost-31 bcrypt hash": b"basic_auth_users:\n  a: '$2b$31$" + b"a" * 53 + b"'\n",
}


@pytest.mark.parametrize("name", list(HUGE_WEB_DOCUMENTS))
@pytest.mark.slow
def test_huge_and_deep_web_configurations_are_refused_in_seconds(web_dir, name):
    started = time.monotonic()
    loaded = load_web(web_dir, HUGE_WEB_DOCUMENTS[name], record=False)
    assert isinstance(loaded, str), "loaded"  # every one of them is refused
    assert time.monotonic() - started < 30, name  # about 3 s for the slowest on a busy 2-core machine


# ---------------------------------------------------------------------------- against promtool

def promtool_verdicts(promtool: str, paths: list[Path]) -> dict[Path, str]:
    """``promtool check web-config`` on many files at once: each file's line (``SUCCESS`` or
    ``FAILED: why``)."""
    check = subprocess.run([promtool, "check", "web-config", *map(str, paths)], capture_output=True, text=True,
                           timeout=120)
    output = check.stdout + check.stderr
    return {path: next((line[len(str(path)) + 1:] for line in output.splitlines() if line.startswith(f"{path} ")),
                       "no verdict") for path in paths}


def single_value_documents() -> list[dict[str, Any]]:
    """Every enumerable value of every key, one at a time, beside a working certificate and key."""
    tls = {"cert_file": "server.crt", "key_file": "server.key"}
    return [
        *({"tls_server_config": {**tls, "cipher_suites": [name]}} for name in CIPHERS),
        *({"tls_server_config": {**tls, key: name}} for key in ("min_version", "max_version")
          for name in TLS_NAMES + ["", "TLS1.2"]),
        *({"tls_server_config": {**tls, "curve_preferences": [name]}} for name in list(webconfig.GO_CURVES) + ["P256"]),
        *({"tls_server_config": {**tls, "client_auth_type": name, "client_ca_file": "ca.crt"}} for name in CLIENT_AUTH),
        *({"tls_server_config": {**tls, "prefer_server_cipher_suites": value}} for value in (True, False)),
        *({"http_server_config": {"headers": {name: value}}} for name in HEADER_NAMES for value in HEADER_VALUES),
        *({"http_server_config": {"http2": value}} for value in (True, False)),
        *({"basic_auth_users": {user: hashed}} for user in ("prometheus", "ünï", "a:b") for hashed in HASHES),
    ]


def test_every_single_value_sixdim_loads_promtool_accepts(web_dir):
    """A sweep rather than a sample: sixdim must not load a value that the exporter-toolkit refuses (a
    cipher name Go does not list, a blank restricted header), or the same file fails on node_exporter."""
    promtool = required_tool("promtool")
    folder = web_dir / "sweep"
    folder.mkdir(exist_ok=True)
    loaded = []
    for number, document in enumerate(single_value_documents()):
        text = yaml_block(document)
        if not isinstance(load_web(web_dir, text.encode(), record=False), str):
            path = folder / f"web-{number:03d}.yml"
            path.write_text(text.replace("server.crt", "../server.crt").replace("server.key", "../server.key")
                            .replace("ca.crt", "../ca.crt"))
            loaded.append(path)
    assert len(loaded) > 60  # the sweep reaches the checks (most refusals: headers and hashes by design)
    refused = {path.read_text(): verdict for path, verdict in promtool_verdicts(promtool, loaded).items()
               if verdict != "SUCCESS"}
    assert not refused, refused


valid_tls = st.fixed_dictionaries({"cert_file": st.sampled_from(["server.crt", "client.crt"]),
                                   "key_file": st.just("server.key")}, optional={
    "min_version": st.sampled_from(TLS_NAMES), "max_version": st.sampled_from(TLS_NAMES),
    "client_auth_type": st.sampled_from(CLIENT_AUTH[:3]), "client_ca_file": st.just("ca.crt"),
    "cipher_suites": st.lists(st.sampled_from(CIPHERS), max_size=3),
    "prefer_server_cipher_suites": st.booleans(),
    "curve_preferences": st.lists(st.sampled_from(sorted(webconfig.GO_CURVES)), max_size=1),
    # (no client_allowed_sans: Debian's promtool 2.42 predates it; no inline PEM either)
})
valid_web_documents = st.fixed_dictionaries({}, optional={
    "tls_server_config": valid_tls,
    "http_server_config": st.fixed_dictionaries({}, optional={
        "headers": st.dictionaries(st.sampled_from(list(webconfig.HEADERS)), st.sampled_from(HEADER_VALUES),
                                   max_size=3),
        "http2": st.booleans()}),
    "basic_auth_users": st.dictionaries(st.sampled_from(["prometheus", "grafana", "ünï"]), st.sampled_from(HASHES[:5]),
                                        max_size=2),
})


@settings(WEB_FUZZ, max_examples=40)
@given(document=valid_web_documents)
@pytest.mark.slow
def test_what_sixdim_loads_promtool_accepts(web_dir, document):
    """The values combined.  One direction only: sixdim refuses some files promtool accepts, by design
    (``RequestClientCert``, several curves, a user name with ':', a hash that is not bcrypt), but a
    file it loads must be one the exporter-toolkit reads too."""
    promtool = required_tool("promtool")
    loaded = load_web(web_dir, yaml_block(document).encode())
    if isinstance(loaded, str):
        return
    event("checked by promtool")
    verdict = promtool_verdicts(promtool, [web_dir / "web.yml"])[web_dir / "web.yml"]
    assert verdict == "SUCCESS", (yaml_block(document), verdict)
