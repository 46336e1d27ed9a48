"""Issue 12, hostile input: each fault reproduced, and the clean refusal asserted.

Configuration, ``sixdim run -p``, ``sixdim dimensions`` and the training-log parsers each get input
that used to end in a traceback, a non-finite number in the output or a silently disabled setting.
Now: ConfigError / ParamError (``sixdim`` exit 2 with one line), or, in a parser, the line ignored
with a counted warning and every figure finite.  tests/test_fuzz.py throws random input at the same
entry points."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sixdim.cli import main
from sixdim.config import ConfigError, load
from sixdim.config.schema import MAX_SECONDS
from sixdim.config.suites import is_device_selector
from sixdim.workloads import registry
from sixdim.workloads.logs import command
from sixdim.workloads.logs.airank import parse_ai_rank
from sixdim.workloads.logs.mlperf import parse_mlperf
from sixdim.workloads.logs.model import MAX_READING
from sixdim.workloads.logs.parsers import make_parsers, parse_lines, read_line
from sixdim.workloads.logs.training_log import TrainingLog
from sixdim.workloads.logs.user_regex import RegexParser
from sixdim.workloads.measure.dimensions import DimensionsError, compute
from sixdim.workloads.spec import MAX_MAGNITUDE, ParamError
from tests.helpers import call_sixdim

DEEP = 100_000


def write(tmp_path: Path, text: str | bytes, name: str = "sixdim.toml") -> str:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return str(path)


def suite(extra: str = "", workloads: str = '["gemm"]', schedule: str = "interval_seconds = 60\n") -> str:
    return f'[[suites]]\nname = "s"\nworkloads = {workloads}\n{schedule}{extra}'


def refused(tmp_path: Path, text: str | bytes) -> ConfigError:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load(path, env={})
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and "\n" not in message and len(message) < 400, message
    return caught.value


cli = call_sixdim  # usage errors start nothing: no interpreter of their own


def assert_usage_error(result: subprocess.CompletedProcess, fragment: str) -> None:
    """Exit 2, one line on stderr starting ``sixdim: error:``, no traceback."""
    stderr = result.stderr
    assert result.returncode == 2, stderr
    assert "Traceback" not in stderr
    assert stderr.startswith("sixdim: error: ") and stderr.count("\n") == 1, stderr
    assert fragment in stderr, stderr


# ============================================================================ configuration

@pytest.mark.parametrize("value", ["1e300", "inf", "nan", "-inf", str(10**400)])
def test_interval_seconds_absurd_infinite_nan_or_past_a_float_is_refused(tmp_path, value):
    """Was: 1e300 overflowed the scheduler's date arithmetic, inf/nan gave tracebacks, and a 400-digit
    integer raised OverflowError in math.isfinite."""
    error = refused(tmp_path, suite(schedule=f"interval_seconds = {value}\n"))
    assert error.key == "suites[0].interval_seconds"
    assert f"from 1 to {MAX_SECONDS} (365 days)" in str(error)


def test_misfire_grace_seconds_nan_or_under_a_second_is_refused(tmp_path):
    """Was: nan slipped through every comparison; 0.5 loaded, then APScheduler refused int(0.5) = 0
    with a TypeError when the daemon started."""
    for value in ("nan", "0.5"):
        error = refused(tmp_path, suite(f"misfire_grace_seconds = {value}\n"))
        assert error.key == "suites[0].misfire_grace_seconds" and repr(float(value)) in str(error)
    assert load(write(tmp_path, suite("misfire_grace_seconds = 1\n")), env={}).suites[0].misfire_grace_seconds == 1


def test_timeout_seconds_nan_never_disables_the_timeout(tmp_path, cli_env):
    """Was: accepted, and a NaN timeout compared false with every elapsed time: no timeout at all."""
    error = refused(tmp_path, suite("timeout_seconds = nan\n"))
    assert error.key == "suites[0].timeout_seconds"
    result = cli("serve", "--config", write(tmp_path, suite("timeout_seconds = nan\n")), env=cli_env)
    assert_usage_error(result, "suites[0].timeout_seconds: expected a positive, finite number of seconds")


@pytest.mark.parametrize("document", [
    "x = " + "[" * DEEP + "]" * DEEP + "\n",
    "x = " + "{a = " * DEEP + "1" + "}" * DEEP + "\n",
    suite(workloads='[{name = "gemm", params = {m = ' + "[" * DEEP + "]" * DEEP + "}}]"),
], ids=["array", "inline-table", "in-params"])
def test_toml_nested_100000_deep_is_a_config_error(tmp_path, cli_env, document):
    """Was: tomllib recursed once per level and the RecursionError reached the user as a traceback."""
    error = refused(tmp_path, document)
    assert error.key == "(syntax)" and "nested too deeply" in str(error)
    assert_usage_error(cli("serve", "--config", write(tmp_path, document), env=cli_env), "nested too deeply")


def test_a_config_file_that_is_not_utf8_is_a_config_error(tmp_path):
    """Was: UnicodeDecodeError (and read in the locale's encoding, not TOML's UTF-8)."""
    error = refused(tmp_path, b'[agent]\nhostname = "\xff\xfe"\n')
    assert error.key == "(encoding)" and "byte 0xff at offset 20" in str(error)


def test_an_integer_of_5000_digits_in_the_file_is_a_config_error(tmp_path):
    """Was: ValueError from Python's integer digit limit, which is not a TOMLDecodeError."""
    error = refused(tmp_path, "[agent]\nsample_hz = " + "9" * 5000 + "\n")
    assert error.key == "(syntax)" and "more than 4300 digits" in str(error)


@pytest.mark.parametrize("text, key", [
    ("[agent]\nsample_hz = " + "1" + "0" * 400 + "\n", "agent.sample_hz"),
    ("[agent]\nhistory_keep_days = " + "1" + "0" * 400 + "\n", "agent.history_keep_days"),
    ("[regression]\nmin_effect = " + "1" + "0" * 400 + "\n", "regression.min_effect"),
    ("[regression.effects]\ngemm = " + "1" + "0" * 400 + "\n", "regression.effects.gemm"),
])
def test_an_integer_past_a_float_for_a_number_option_is_a_config_error(tmp_path, text, key):
    """Was: float(10**400) raised OverflowError, which the loader did not catch.  The value in the
    message is cut, so the error stays one short line."""
    error = refused(tmp_path, text)
    assert error.key == key and "characters)" in str(error)


@pytest.mark.parametrize("params, fragment", [
    ("min_round_seconds = nan", "got nan"),
    ("min_round_seconds = inf", "got inf"),
    ("min_round_seconds = 1e300", "got 1e+300"),
    ('min_round_seconds = "nan"', "got 'nan'"),
    ("power_seconds = " + "1" + "0" * 400, "characters)"),
    ("m = 9223372036854775807, n = 1, k = 1", "got 9223372036854775807"),
    ("m = " + "9" * 4000 + ", n = 1, k = 1", "characters)"),
])
def test_workload_params_in_a_suite_have_finite_documented_ranges(tmp_path, params, fragment):
    """Was: a float param took NaN, infinity and 1e300 (the summary from the earlier review), an int
    param any integer Python could read (a 4,000-digit shape went to the worker), and 10**400 for a
    float param raised OverflowError."""
    error = refused(tmp_path, suite(workloads='[{name = "gemm", params = {' + params + "}}]"))
    assert error.key == "suites[0].workloads[0].params" and fragment in str(error)
    assert "expected an integer" in str(error) or "expected a finite number" in str(error)


def test_param_ranges_durations_a_year_numbers_2_to_the_53():
    spec = registry.get("gemm")
    assert spec.param("min_round_seconds").bounds() == (0.0, MAX_SECONDS)
    assert spec.param("m").bounds() == (0, MAX_MAGNITUDE)
    assert registry.get("linearity").param("rdzv_timeout").bounds() == (1, MAX_SECONDS)
    assert registry.get("model").param("seed").bounds() == (-MAX_MAGNITUDE, MAX_MAGNITUDE)
    with pytest.raises(ParamError, match=r"<= 31536000 \(seconds\), got 31536001"):
        spec.resolve({"warmup_seconds": MAX_SECONDS + 1}, "cpu")
    assert spec.resolve({"warmup_seconds": MAX_SECONDS}, "cpu")["warmup_seconds"] == MAX_SECONDS


@pytest.mark.parametrize("param, fragment", [
    ("min_round_seconds=nan", "--param min_round_seconds=nan: expected a finite number, got 'nan'"),
    ("min_round_seconds=1e400", "--param min_round_seconds=1e400: expected a finite number, got '1e400'"),
    ("min_round_seconds=1e300", "parameter 'min_round_seconds': expected a finite number >= 0 and <= 31536000"),
    ("m=" + "9" * 5000, "parameter 'm': expected an integer >= 0 and <= 9007199254740992, got '99999"),
    ("=5", "expected KEY=VALUE"),
])
def test_run_param_flag_refuses_absurd_numbers_in_one_line(cli_env, param, fragment):
    """Was: -p min_round_seconds=1e300 ran (each round 'at least 1e300 s', until the timeout), and a
    5,000-digit -p value was echoed whole into the error."""
    result = cli("run", "-w", "gemm", "-d", "cpu", "-p", param, env=cli_env)
    assert_usage_error(result, fragment)
    assert len(result.stderr) < 400


def test_device_index_must_be_ascii_digits(tmp_path):
    """Was: 'cuda:²' passed str.isdigit, then int('²') raised ValueError when devices were resolved."""
    assert not is_device_selector("cuda:²") and not is_device_selector("cuda:٣") and not is_device_selector("cuda:")
    assert not is_device_selector("cuda:" + "1" * 5000)
    assert is_device_selector("cuda:0") and is_device_selector("cuda:15")
    error = refused(tmp_path, suite('devices = ["cuda:²"]\n'))
    assert error.key == "suites[0].devices"


def test_an_environment_value_that_is_not_utf8_or_a_path_with_nul_is_refused():
    """Was: accepted; a hostname with lone surrogates (bytes that are not UTF-8 in the environment)
    fails when the exposition is encoded, a NUL in the history path when SQLite opens it."""
    with pytest.raises(ConfigError, match="environment variable SIXDIM_HOSTNAME: agent.hostname"):
        load(None, env={"SIXDIM_HOSTNAME": "node\udcff"})
    with pytest.raises(ConfigError, match="environment variable SIXDIM_HISTORY: agent.history"):
        load(None, env={"SIXDIM_HISTORY": "/tmp/a\0b.db"})


def test_a_regex_that_does_not_compile_is_refused_at_load_and_by_run(tmp_path, cli_env):
    """A user regex that fails to compile: a ConfigError naming the key when the file is loaded
    (serve and run exit 2 before running anything), a ParamError for run -p."""
    error = refused(tmp_path, suite(workloads='[{name = "command", params = {argv = ["true"], '
                                              'throughput_regex = "speed (\\\\d+"}}]'))
    assert error.key == "suites[0].workloads[0].params" and "'throughput_regex': not a valid regular" in str(error)
    result = cli("run", "-w", "command", "-d", "cpu", "-p", "argv=true", "-p", "accuracy_regex=top1 ([", env=cli_env)
    assert_usage_error(result, "parameter 'accuracy_regex': not a valid regular expression")


# ============================================================================ sixdim dimensions

def dimensions(tmp_path: Path, data: str | bytes, capsys) -> tuple[int, str, str]:
    path = write(tmp_path, data, "observations.json")
    code = main(["dimensions", path])
    out, err = capsys.readouterr()
    return code, out, err


def assert_refused(result: tuple[int, str, str], fragment: str) -> None:
    code, out, err = result
    assert code == 2 and out == "", (out, err)
    assert err.startswith("sixdim: error: ") and err.count("\n") == 1 and len(err) < 400, err
    assert fragment in err, err


def test_dimensions_nested_100000_deep_exits_2(tmp_path, capsys):
    """Was: RecursionError from json.loads, exit 1 with a traceback."""
    assert_refused(dimensions(tmp_path, "[" * DEEP + "]" * DEEP, capsys), "nested too deeply")
    assert_refused(dimensions(tmp_path, '{"speed": ' + "[" * DEEP + "]" * DEEP + "}", capsys), "nested too deeply")


def test_dimensions_5000_digit_integer_exits_2(tmp_path, capsys):
    """Was: ValueError (Python's integer digit limit) from json.loads, a traceback."""
    assert_refused(dimensions(tmp_path, '{"accuracy": ' + "9" * 5000 + "}", capsys), "too many digits")


def test_dimensions_integers_past_a_float_exit_2(tmp_path, capsys):
    """Was: OverflowError (int too large to convert to float) from math.isfinite and the division."""
    big = "9" * 400
    assert_refused(dimensions(tmp_path, '{"speed": [' + ", ".join([big] * 5) + "]}", capsys),
                   "key 'speed': expected a list of 5 or more positive throughputs")
    assert_refused(dimensions(tmp_path, '{"linearity": {"single": 1, "multi": 2, "count": ' + big + "}}", capsys),
                   "key 'linearity.count': expected a whole number of cards or nodes, 1 or more and at most 1000000")


def test_dimensions_1e400_exits_2(tmp_path, capsys):
    """1e400 reads as infinity: refused as out of range, never printed."""
    assert_refused(dimensions(tmp_path, '{"accuracy": 1e400}', capsys), "key 'accuracy': expected a number "
                                                                        "(out of range), got inf")


def test_dimensions_mean_of_1e308_1e308_exits_2(tmp_path, capsys):
    """Was: statistics.fmean raised OverflowError (intermediate overflow in fsum): a traceback."""
    assert_refused(dimensions(tmp_path, '{"power_watts": [1e308, 1e308]}', capsys),
                   "key 'power_watts': expected values whose mean a float can hold (out of range")


@pytest.mark.parametrize("observations, key", [
    ({"speed": [1e308] * 5}, "speed"),
    ({"linearity": {"single": 1e-308, "multi": 1e308, "count": 1}}, "linearity"),
    ({"convergence": [1e308] * 6}, "convergence"),
])
def test_dimensions_never_prints_infinity(tmp_path, capsys, observations, key):
    """Was: exit 0 and ``"speed": Infinity`` (not JSON): the DeepSpark mean and the linearity ratio
    overflowed; an even count's median too."""
    code, out, err = dimensions(tmp_path, json.dumps(observations), capsys)
    assert "Infinity" not in out and "NaN" not in out
    assert_refused((code, out, err), f"key '{key}': expected values whose")


def test_dimensions_not_utf8_exits_2(tmp_path, capsys, monkeypatch):
    """Was: UnicodeDecodeError, a traceback (from a file and from standard input)."""
    assert_refused(dimensions(tmp_path, b'{"accuracy": "\xff"}', capsys), "not UTF-8 text: byte 0xff at offset 14")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'{"accuracy": 0.5\xc3}')))
    code = main(["dimensions", "-"])
    out, err = capsys.readouterr()
    assert_refused((code, out, err), "<stdin>: not UTF-8 text")


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_dimensions_nan_and_infinity_literals_exit_2(tmp_path, capsys, literal):
    """Not standard JSON: refused while parsing, with its name."""
    assert_refused(dimensions(tmp_path, f'{{"accuracy": {literal}}}', capsys),
                   f"not valid JSON: {literal} is not a JSON number")


@pytest.mark.parametrize("observations, key, fragment", [
    ({"speed": [0, 1, 2, 3, 4]}, "speed", "positive throughputs"),
    ({"speed": [-5, 1, 2, 3, 4]}, "speed", "positive throughputs"),
    ({"power_watts": [-1]}, "power_watts", "samples >= 0"),
    ({"memory_mib": [1, -1]}, "memory_mib", "samples >= 0"),
    ({"linearity": {"single": 1, "multi": -2, "count": 2}}, "linearity.multi", "a number >= 0"),
    ({"linearity": {"single": 1, "multi": 2, "count": 10**7}}, "linearity.count", "at most 1000000"),
])
def test_dimensions_numbers_out_of_their_documented_range(observations, key, fragment):
    with pytest.raises(DimensionsError) as caught:
        compute(observations)
    assert caught.value.key == key and fragment in str(caught.value)


def test_dimensions_of_a_folder_exits_2(tmp_path, capsys):
    code = main(["dimensions", str(tmp_path)])
    out, err = capsys.readouterr()
    assert_refused((code, out, err), "cannot read it")


def test_dimensions_huge_valid_input_still_works(tmp_path, capsys):
    """The ranges refuse only what cannot be computed: large finite speeds are fine."""
    code, out, err = dimensions(tmp_path, json.dumps({"speed": [1e300] * 5, "power_watts": [1e300, 1e300]}), capsys)
    assert code == 0, err
    assert json.loads(out)["speed"] == pytest.approx(1e300) and json.loads(out)["power_watts"] == pytest.approx(1e300)


# ============================================================================ training-log parsers

def finite_figures(log: TrainingLog) -> list[float]:
    """Every number the parse produced, for the 'never non-finite' check."""
    numbers = list(log.throughputs) + list(log.latencies.values())
    numbers += [v for v in (log.average_throughput, log.time_to_train, log.total_time) if v is not None]
    numbers += [v for q in log.qualities() for v in q.values]
    numbers += list(log.inference.get("rates", {}).values())
    return numbers


def assert_all_finite(log: TrainingLog) -> None:
    assert all(math.isfinite(v) for v in finite_figures(log)), finite_figures(log)


def test_mlperf_metadata_that_is_not_an_object_is_ignored_and_counted():
    """A crash in an earlier version (metadata.get on a list); now the line's metadata is ignored with
    a warning, the figure kept, and the line counted."""
    lines = [':::MLLOG {"key": "eval_accuracy", "value": 0.5, "time_ms": 1, "metadata": [1, 2]}',
             ':::MLLOG {"key": "throughput", "value": 10, "time_ms": 2, "metadata": "fast"}',
             ':::MLL 1.0 eval_accuracy: {"value": 0.6, "metadata": 7}']
    log = parse_lines(lines, [parse_mlperf])
    assert log.ignored_lines == 3 and "metadata is not an object" in log.warnings[0]
    assert log.accuracies == [0.5, 0.6] and log.throughputs == [10.0]


@pytest.mark.parametrize("line", [
    ':::MLLOG {"key": "eval_accuracy", "value": ' + "[" * DEEP + "]" * DEEP + ', "time_ms": 1}',
    ':::MLLOG {"key": "run_stop", "metadata": ' + '{"a": ' * DEEP + "1" + "}" * DEEP + "}",
    ":::MLL 1.0 eval_accuracy: " + "[" * DEEP + "]" * DEEP,
    ":::MLPv0.5.0 resnet 1.0 (a.py:1) eval_accuracy: " + "[" * DEEP + "]" * DEEP,
])
def test_deeply_nested_json_in_an_mlperf_line_is_ignored_and_counted(line):
    log = TrainingLog()
    read_line(line, make_parsers(["ai_rank", "mlperf"]), log)
    assert log.ignored_lines == 1 and "nested too deeply" in log.warnings[0]
    assert not log.series and not log.stopped


def test_deep_brackets_in_an_ai_rank_line_are_text_not_a_crash():
    log = parse_lines(["AI-Rank-log 1 eval_accuracy:" + "[" * DEEP + "0.5" + "]" * DEEP], [parse_ai_rank])
    assert log.accuracies == [0.5] and log.ignored_lines == 0


def test_a_regex_whose_optional_first_group_did_not_match_is_ignored_and_counted():
    """Was: float(None) (a TypeError) ended the case; now the line is ignored with a warning."""
    log = parse_lines(["speed img/s", "speed 300 img/s", "speed img/s"], [RegexParser(r"speed(?: (\d+))? img/s")])
    assert log.throughputs == [300.0] and log.ignored_lines == 2 and log.warning_count == 2
    assert log.warnings == ["throughput_regex: the expression matched but its first group matched nothing: ignored"]


@pytest.mark.parametrize("line, fragment", [
    (':::MLLOG {"key": "throughput", "value": ' + "9" * 5000 + ', "time_ms": 1}', "not valid JSON"),
    (':::MLLOG {"key": "throughput", "value": ' + "9" * 400 + ', "time_ms": 1}', "is not finite"),
    (':::MLLOG {"key": "throughput", "value": 1e400, "time_ms": 1}', "is not finite"),
    (':::MLLOG {"key": "throughput", "value": 1e300, "time_ms": 1}', "is too large (above 1e+15)"),
    ("AI-Rank-log 1 ips:" + "9" * 5000, "is not finite"),
    ("AI-Rank-log 1 ips:" + "9" * 20, "is too large"),
    ("AI-Rank-log 1 target_quality_time:1e308hours", "is too large"),
    ("speed " + "9" * 5000 + " img/s", "is not finite"),
])
def test_absurdly_long_numbers_are_ignored_and_counted(line, fragment):
    """Was: ``target_quality_time:1e308hours`` became an infinite time to train (1e308 * 3600), and a
    run of huge throughputs an infinite DeepSpark mean."""
    log = parse_lines([line], make_parsers(["ai_rank", "mlperf"], r"speed (\d+) img/s"))
    assert log.ignored_lines == 1 and fragment in log.warnings[0], log.warnings
    assert not log.throughputs and log.time_to_train is None
    assert_all_finite(log)


@pytest.mark.parametrize("line", [
    ':::MLLOG {"key": "throughput", "value": NaN, "time_ms": 1}',
    ':::MLLOG {"key": "eval_accuracy", "value": -Infinity, "time_ms": 1}',
    "AI-Rank-log 1 ips:inf, avg_ips:nan, eval_accuracy:-inf",
    "speed nan img/s",
])
def test_non_finite_numbers_are_ignored_and_counted(line):
    log = parse_lines([line], make_parsers(["ai_rank", "mlperf"], r"speed (\S+) img/s"))
    assert log.ignored_lines == 1 and "not finite" in log.warnings[0]
    assert not log.throughputs and not log.series and log.average_throughput is None


def test_run_stop_minus_run_start_that_overflows_gives_no_time():
    """Was: ``:::MLL`` times of -1e308 and 1e308 made an infinite time to train."""
    log = parse_lines([":::MLL -1e308 run_start:", ":::MLL 1e308 run_stop: {\"value\": null}"], [parse_mlperf])
    assert log.stopped and log.time_to_train is None and log.total_time is None
    assert "out of range" in log.warnings[0] and log.ignored_lines == 1


@pytest.mark.parametrize("line", [
    "AI-Rank-log 1 a" + " " * 65536 + "x",
    ":::MLL 1 run_stop: a" + " " * 65536 + "x",
    ":::MLPv0.5.0 resnet 1 (a:1) run_stop: a" + " " * 65536 + "x",
    ":::MLLOG {" * 6553,
    ":::MLPv0.5.0 a b (" * 3640,
])
def test_a_64_kib_line_parses_in_linear_time(line):
    """Was: a lazy group before trailing spaces (``(.*?)\\s*$``) took 15 s on a 64 KiB line of spaces,
    and ``:::MLLOG {`` repeated scanned the line once per repeat."""
    started = time.perf_counter()
    read_line(line, make_parsers(["ai_rank", "mlperf"]), TrainingLog())
    assert time.perf_counter() - started < 3.0  # milliseconds when linear; the bug took 15 s


def command_params(**overrides) -> dict:
    return registry.get("command").resolve({"argv": ["x"], **overrides}, "cpu")


def test_ignored_lines_are_surfaced_in_the_run_details_and_figures_stay_finite():
    lines = [':::MLLOG {"key": "submission_benchmark", "value": "resnet", "time_ms": 0}',
             ':::MLLOG {"key": "run_start", "value": null, "time_ms": 0}',
             *[f':::MLLOG {{"key": "throughput", "value": {v}, "time_ms": {i + 1}}}' for i, v in
               enumerate([100, 110, 120, 130, 140])],
             ':::MLLOG {"key": "throughput", "value": 1e300, "time_ms": 10}',
             ':::MLLOG {"key": "eval_accuracy", "value": 0.76, "time_ms": 11, "metadata": "x"}',
             ':::MLLOG {"key": "eval_accuracy", "value": ' + "[" * DEEP + "]" * DEEP + "}",
             ':::MLLOG {"key": "run_stop", "value": null, "time_ms": 20000, "metadata": {"status": "success"}}']
    params = command_params()
    log = parse_lines(lines, make_parsers(params["formats"]))
    output = command.dimensions(log, 1.0, len(lines), params)
    assert output.status == "ok", output.reason
    assert output.details["ignored_lines"] == 3
    assert output.figures["samples_per_second"] == 120.0 and output.figures["accuracy"] == 0.76
    assert all(math.isfinite(v) for v in output.figures.values())


def test_a_hostile_log_does_not_crash_the_case(tmp_path):
    """The whole path: a command printing every fault above, read by the real worker."""
    from sixdim.collectors.nvml import NvmlCollector
    from sixdim.run.devices import cpu_device
    from sixdim.run.executor import Executor
    from sixdim.store.history import History

    log = tmp_path / "hostile.txt"
    log.write_text("\n".join([
        ':::MLLOG {"key": "throughput", "value": 1e300, "time_ms": 1}',
        ':::MLLOG {"key": "throughput", "value": ' + "9" * 5000 + ', "time_ms": 2}',
        ':::MLLOG {"key": "eval_accuracy", "value": ' + "[" * 20000 + "]" * 20000 + "}",  # within a 64 KiB line
        ':::MLLOG {"key": "eval_accuracy", "value": 0.5, "metadata": [1]}',
        "AI-Rank-log 1 ips:nan, target_quality_time:1e308hours",
        "speed img/s", "speed 250 img/s", "AI-Rank-log 1 " + " " * 60000 + "x"]) + "\n")
    executor = Executor(hostname="h", history=History(tmp_path / "h.db"), nvml=NvmlCollector("h"),
                        rapl=None)
    [record] = executor.execute(registry.get("command"), {"argv": ["cat", str(log)],
                                                          "throughput_regex": r"speed(?: (\d+))? img/s"},
                                cpu_device(), timeout=60)
    assert record.status == "ok", record.reason
    assert record.figures["samples_per_second"] == 250.0 and record.figures["accuracy"] == 0.5
    assert "time_to_train_seconds" not in record.figures
    assert all(math.isfinite(v) for v in record.figures.values())
    assert record.details["ignored_lines"] == 6


def test_max_reading_keeps_every_sum_finite():
    """The cap's reason: a million readings at the cap still sum to a finite number."""
    assert math.isfinite(MAX_READING * 10**6 * 3600)
