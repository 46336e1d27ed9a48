"""DeepSpark's rules on worked examples, edge cases included, and the `sixdim dimensions` command."""

import json

import pytest

from sixdim.workloads.measure.dimensions import DimensionsError, compute, stability
from tests.helpers import call_sixdim


def test_worked_example_every_dimension():
    # skewed samples, so that a mean, a median and a trimmed mean all differ: each rule is pinned
    result = compute({
        "speed": [200, 210, 230, 212, 260],            # drop 200 and 260 -> mean(210, 230, 212) = 217.33 (median 212)
        "accuracy": 0.72,
        "linearity": {"single": 220.0, "multi": 1689.6, "count": 8},  # (1689.6 / 8) / 220 = 0.96
        "power_watts": [150, 152, 160],                # mean 154 (median 152)
        "memory_mib": [20000, 21000, 25000],           # mean 22000 (median 21000)
        "convergence": [0.72, 0.721, 0.719, 0.7205, 0.7195],
    })
    assert result == {"speed": pytest.approx(652 / 3), "accuracy": 0.72, "linearity": pytest.approx(0.96),
                      "power_watts": pytest.approx(154.0), "memory_mib": pytest.approx(22000.0),
                      "stability": 1.0}


def test_absent_inputs_give_null():
    assert compute({"accuracy": 0.5}) == {"speed": None, "accuracy": 0.5, "linearity": None, "power_watts": None,
                                          "memory_mib": None, "stability": None}


def test_stability_outlier_costs_twenty_percent():
    # median 0.75; 0.76 is +1.33% (outside), 0.70 is -6.7% (outside), the rest inside
    score, differences = stability([0.75, 0.752, 0.748, 0.76, 0.70])
    assert score == pytest.approx(0.6)
    assert differences[3] == pytest.approx(0.01 / 0.75)


def test_stability_band_is_open():
    # exactly +1% is not inside (-0.01, +0.01)
    assert stability([1.0, 1.0, 1.0, 1.0, 1.01])[0] == pytest.approx(0.8)
    assert stability([1.0, 1.0, 1.0, 1.0, 1.0099])[0] == 1.0


def test_stability_floor_is_zero():
    assert stability([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])[0] == 0.0


@pytest.mark.parametrize("observations, key, fragment", [
    ({"speed": [1, 2, 3]}, "speed", "5 or more"),
    ({"speed": []}, "speed", "5 or more"),
    ({"power_watts": []}, "power_watts", "non-empty list"),
    ({"memory_mib": ["a"]}, "memory_mib", "non-empty list of samples"),
    ({"convergence": [0.7, 0.71]}, "convergence", "5 or more"),
    ({"linearity": {"single": 0, "multi": 2, "count": 2}}, "linearity.single", "positive"),
    ({"linearity": {"single": 1, "multi": 2, "count": 0}}, "linearity.count", "1 or more"),
    ({"linearity": [1, 2]}, "linearity", '"single"'),
    ({"accuracy": "high"}, "accuracy", "a number"),
    ({"speeds": [1, 2, 3, 4, 5]}, "speeds", "unknown key"),
    ([1, 2], "(top level)", "JSON object"),
])
def test_bad_input_names_the_key(observations, key, fragment):
    with pytest.raises(DimensionsError) as caught:
        compute(observations)
    assert caught.value.key == key and fragment in str(caught.value)


def run(*args, stdin=None, env):
    return call_sixdim("dimensions", *args, stdin=stdin, env=env)


def test_command_reads_a_file_and_stdin(tmp_path, cli_env):
    path = tmp_path / "obs.json"
    path.write_text(json.dumps({"speed": [10, 10, 10, 10, 10], "convergence": [1, 1, 1, 1, 0.9]}))
    result = run(str(path), env=cli_env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"speed": 10.0, "accuracy": None, "linearity": None, "power_watts": None,
                                         "memory_mib": None, "stability": 0.8}
    piped = run("-", stdin=json.dumps({"accuracy": 0.9}), env=cli_env)
    assert json.loads(piped.stdout)["accuracy"] == 0.9


@pytest.mark.slow
def test_command_bad_input_exits_2(tmp_path, cli_env):
    path = tmp_path / "obs.json"
    path.write_text('{"speed": [1, 2]}')
    result = run(str(path), env=cli_env)
    assert result.returncode == 2
    assert f"sixdim: error: {path}: key 'speed': expected a list of 5 or more" in result.stderr
    assert run("-", stdin="{not json", env=cli_env).returncode == 2
    assert "no such file" in run(str(tmp_path / "absent.json"), env=cli_env).stderr
