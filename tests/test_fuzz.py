"""Issue 12: hostile input, fuzzed with hypothesis.

Three entry points get random input built from what they really read:

- configuration: TOML documents over the real schema (every option, suite key, workload and
  parameter), with values that are NaN, infinite, huge, negative, of the wrong type or nested
  deeply, and random ``SIXDIM_*`` variables: ``agent.config.load`` returns a Config whose numbers
  are finite and in their documented ranges, or raises ConfigError; nothing else;
- ``sixdim dimensions``: random JSON-ish documents (the real keys, numbers of 5,000 digits, 1e400,
  NaN, deep nesting) and random bytes: exit 0 with finite standard JSON, or exit 2 with one line;
- the AI-Rank, MLPerf and regex parsers: random lines and mutations of the fixture logs: no parser
  raises, and every number read, and every figure of the run, is finite.

Derandomized (the same examples on every run, as CI needs) and without an example database; each
test takes a few seconds.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis")  # the 'test' extra installs it; see pyproject.toml

from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from agent.cli import main  # noqa: E402
from agent.config import MAX_SECONDS, MIN_SECONDS, OPTIONS, ConfigError, load  # noqa: E402
from workloads import command, registry  # noqa: E402
from workloads.dimensions import KEYS, OUTPUT_KEYS  # noqa: E402
from workloads.logparse import MAX_READING, Metric, TrainingLog, make_parsers, parse_lines  # noqa: E402
from workloads.spec import ParamError  # noqa: E402

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
        sensible = OPTION_VALUES.get(opt.key) or [v for v in [opt.default()] if v is not None] or [""]
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
    st.none() | st.dictionaries(st.sampled_from(["gemm", "gemm/tflops", "seconds"]), good_or([0.02, 0.5])),
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
    from agent.cli import _check_finite

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
