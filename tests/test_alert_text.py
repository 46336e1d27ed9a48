"""The texts of the regression alerts, rendered by promtool from the generated rules (issue 42, item 8):
the causes they count are those of the series the alert counts, and an empty precision leaves no
double space.

Was: "stream  on the CPU (...) regressed on 1 shape(s) ... Likely cause: none (2 series)": the causes
were counted over every series of the GPU and workload with one, the suspicious ones included, and
the precision was printed whether or not the series has one.  promtool's rule unit tests evaluate
the annotations' queries against the test's own series, as Prometheus does (a real promtool, no mock)."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

from sixdim.monitoring import rules

CPU = ('hostname="cpu-a",gpu="",UUID="",model_name="AMD EPYC 9654",pci_bus_id="",device_type="cpu",'
       'workload="stream",precision="",mode="",pass="",driver_version="",cuda_version="",torch_version="2.4.0"')
"""A CPU host's series: no GPU, no driver, and a workload without a precision."""
CHANGE = 'figure="bytes_per_second",component="torch",from="2.3.1",to="2.4.0"'


def series(metric: str, labels: str, values: str) -> str:
    return f"      - series: '{metric}{{{labels}}}'\n        values: '{values}'\n"


def unit_test(rules_file: Path) -> str:
    """Shape n=1 regressed (and its torch upgrade regressed it), shape n=2 only suspicious; the agent
    names a cause, "none", for both (it does for a suspicious series too)."""
    inputs = "".join([
        series("sixdim_regression_state", f'{CPU},shape="n=1",figure="bytes_per_second"', "3x10"),
        series("sixdim_regression_state", f'{CPU},shape="n=2",figure="bytes_per_second"', "2x10"),
        series("sixdim_version_change_ratio", f'{CPU},shape="n=1",{CHANGE},verdict="regression"', "0.9x10"),
        series("sixdim_version_change_ratio", f'{CPU},shape="n=2",{CHANGE},verdict="ok"', "0.99x10"),
        series("sixdim_regression_cause", f'{CPU},shape="n=1",cause="none",rank="1"', "1x10"),
        series("sixdim_regression_cause", f'{CPU},shape="n=2",cause="none",rank="1"', "1x10"),
    ])
    device = textwrap.indent(textwrap.dedent("""\
        hostname: 'cpu-a'
        model_name: 'AMD EPYC 9654'
        device_type: 'cpu'
        workload: 'stream'
        severity: 'warning'
        """), " " * 14)
    base = "https://github.com/sixdim/sixdim/blob/main/docs/ALERTS.md"
    regression = (
        "stream on the CPU (AMD EPYC 9654) of cpu-a regressed on 1 shape(s), counting each mode and pass "
        "(figures: bytes_per_second), under torch 2.4.0. The agent calls a regression only after it persisted "
        "over several runs against the series'' own baseline. Likely cause: none (1 series) (see the runbook).")
    change = (
        "After torch changed from 2.3.1 to 2.4.0 on the CPU (AMD EPYC 9654) of cpu-a, stream''s bytes_per_second "
        "is 90% of its value before the change (median over the 1 result series the agent judged worse). "
        "Likely cause: none (1 series) (see the runbook).")
    return (f"rule_files:\n  - {rules_file}\nevaluation_interval: 1m\ntests:\n"
            f"  - interval: 1m\n    input_series:\n{inputs}"
            "    alert_rule_test:\n"
            "      - eval_time: 7m\n        alertname: SixdimRegression\n        exp_alerts:\n"
            f"          - exp_labels:\n{device}              torch_version: '2.4.0'\n"
            "            exp_annotations:\n"
            "              summary: 'stream regressed on cpu-a'\n"
            f"              description: '{regression}'\n"
            f"              runbook_url: '{base}#sixdimregression'\n"
            "      - eval_time: 7m\n        alertname: SixdimVersionChangeRegression\n        exp_alerts:\n"
            f"          - exp_labels:\n{device}"
            "              figure: 'bytes_per_second'\n              component: 'torch'\n"
            "              from: '2.3.1'\n              to: '2.4.0'\n"
            "            exp_annotations:\n"
            "              summary: 'torch 2.3.1 to 2.4.0 made stream worse on cpu-a'\n"
            f"              description: '{change}'\n"
            f"              runbook_url: '{base}#sixdimversionchangeregression'\n")


def test_the_causes_counted_are_the_regressed_series_and_no_double_space(tmp_path, promtool):
    rules_file = tmp_path / "rules.yml"
    rules_file.write_text(rules.render())
    test_file = tmp_path / "test.yml"
    test_file.write_text(unit_test(rules_file))
    result = subprocess.run([promtool, "test", "rules", str(test_file)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
