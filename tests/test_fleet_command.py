"""``sixdim fleet``'s inputs: the flags it refuses and how it says so, the Prometheus HTTP client configuration
file as promtool reads it, and the queries it sends (checked by Debian's promtool where it is installed).  The
answers of a real Prometheus are tests/test_fleet_e2e.py's."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from sixdim.cli import main
from sixdim.core import catalog
from sixdim.fleet import queries
from sixdim.fleet.errors import FleetError
from sixdim.fleet.prometheus import HttpConfig, Prometheus, load_http_config, merged
from tests.conftest import free_port, required_tool


def run(capsys, *args: str) -> tuple[int, str]:
    try:
        code = main(["fleet", *args])
    except SystemExit as exc:  # argparse's refusals
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.err


@pytest.mark.parametrize(("args", "said"), [
    ((), "--prometheus: give the Prometheus API's URL"),
    (("--prometheus", "prometheus:9090"), "expected an http:// or https:// URL"),
    (("--prometheus", "http://p:9090", "--selector", "cluster=eu-1"), "expected PromQL label matchers"),
    (("--prometheus", "http://p:9090", "--threshold", "20"), "expected a fraction such as 0.02"),
    (("--prometheus", "http://p:9090", "--alpha", "0"), "expected a probability"),
    (("--prometheus", "http://p:9090", "--min-hosts", "1"), "at least 2"),
    (("--prometheus", "http://p:9090", "--new", "560.35.03"), "with --split all, name the labels"),
    (("--prometheus", "http://p:9090", "--split", "driver", "--new", "torch_version=2.6"), "is not split on"),
    (("--prometheus", "http://p:9090", "--new", "driver=1"), "is not a version label"),
    (("--prometheus", "http://p:9090", "--password-file", "/nonexistent"), "--password-file: needs --username"),
    (("--prometheus", "http://p:9090", "--username", "ops", "--password-file", "/nonexistent"),
     "--password-file: cannot read /nonexistent"),
    (("--prometheus", "http://p:9090", "--cluster-label", "not a label"), "--cluster-label: expected a label name"),
])
def test_bad_input_exits_2_saying_which_flag_and_what_was_expected(capsys, args, said):
    code, err = run(capsys, *args)
    assert code == 2 and said in err, err


def test_a_prometheus_that_is_not_there_is_named(capsys):
    code, err = run(capsys, "--prometheus", f"http://127.0.0.1:{free_port()}")
    assert code == 2 and "cannot reach the Prometheus API" in err and "127.0.0.1" in err


def test_the_http_configuration_file_as_promtool_reads_it(tmp_path):
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "password").write_text("pa55\n")
    (tmp_path / "token").write_text("tok\n")
    basic = tmp_path / "basic.yml"
    basic.write_text(yaml.safe_dump({"basic_auth": {"username": "ops", "password_file": "secrets/password"},
                                     "tls_config": {"ca_file": "ca.crt", "server_name": "prom.test",
                                                    "insecure_skip_verify": False}}))
    config = load_http_config(str(basic))
    assert (config.username, config.password, config.server_name) == ("ops", "pa55", "prom.test")
    assert config.ca_file == str(tmp_path / "ca.crt")  # relative to the file, as Prometheus takes it
    bearer = tmp_path / "bearer.yml"
    bearer.write_text(yaml.safe_dump({"authorization": {"type": "Bearer", "credentials_file": "token"}}))
    assert load_http_config(str(bearer)).authorization == "Bearer tok"
    old_style = tmp_path / "old.yml"
    old_style.write_text(yaml.safe_dump({"bearer_token_file": str(tmp_path / "token")}))
    assert load_http_config(str(old_style)).authorization == "Bearer tok"
    # flags over the file: a user name replaces the file's token
    flagged = merged(load_http_config(str(bearer)), username="ops", password_file=str(tmp_path / "token"))
    assert (flagged.username, flagged.password, flagged.authorization) == ("ops", "tok", "")


@pytest.mark.parametrize(("content", "said"), [
    ({"oauth2": {"client_id": "x"}}, "unknown key 'oauth2'"),
    ({"basic_auth": {"username": "ops"}, "authorization": {"credentials": "x"}}, "at most one of"),
    ({"basic_auth": {"password": "x"}}, "basic_auth: username: expected a user name"),
    ({"authorization": {"type": "Bearer"}}, "expected credentials or credentials_file"),
    ({"bearer_token_file": "missing-token"}, "bearer_token_file: cannot read"),
    ({"tls_config": {"cert_file": "c.crt", "ca_file": 3}}, "tls_config: ca_file: expected a file path"),
    ("- a list", "expected a mapping"),
])
def test_a_bad_http_configuration_file_names_the_file_and_the_key(tmp_path, content, said):
    path = tmp_path / "http.yml"
    path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    with pytest.raises(FleetError, match=said.replace("(", r"\(").replace(")", r"\)")) as caught:
        load_http_config(str(path))
    assert str(path) in str(caught.value)


def test_a_client_certificate_needs_its_key():
    with pytest.raises(FleetError, match="needs both cert_file and key_file"):
        Prometheus("https://p:9090", merged(HttpConfig(), cert_file="c.crt"))


def test_selectors_are_checked_matcher_by_matcher():
    assert queries.check_matchers('cluster="eu-1", suite=~"quick|full"') == ['cluster="eu-1"', 'suite=~"quick|full"']
    assert queries.check_matchers('{shape="m=1,n=2"}') == ['shape="m=1,n=2"']  # a comma inside quotes
    for bad in ('cluster=eu-1', 'cluster=="x"', '"x"', 'cluster="x'):
        with pytest.raises(ValueError):
            queries.check_matchers(bad)


def test_the_queries_keep_hosts_as_the_unit_and_the_names_the_agents_export():
    layout = queries.Layout(cluster="site", host=catalog.HOSTNAME_DCGM, model=catalog.MODEL_NAME_DCGM)
    now = queries.now_query(catalog.SUMMARY_FLOPS, layout, ['suite="quick"'])
    by = now.split("quantile by (", 1)[1].split(")", 1)[0].split(", ")
    assert by[:2] == ["site", "Hostname"] and "modelName" in by and catalog.GPU not in by
    assert catalog.UUID not in by and set(catalog.VERSION_LABELS) <= set(by)
    assert 'sixdim_suite_flops{suite="quick"}' in now and catalog.SUMMARY_SHAPES.name not in now
    assert "count by" not in now  # a summary's GPU counts come with the shapes, once for every summary metric
    shapes = queries.shapes_query(layout, ['suite="quick"'])
    assert 'sixdim_suite_shapes{suite="quick"}' in shapes and "count_values by (site, Hostname" in shapes
    paired = queries.paired_query(catalog.WORKLOAD_FLOPS, layout, [], {catalog.DRIVER_VERSION: "550"},
                                  {catalog.DRIVER_VERSION: "560"}, ["h-1", "h.2"], "1d")
    assert 'Hostname=~"h\\\\-1|h\\\\.2"' in paired and "offset 1d" in paired and "last_over_time" not in paired
    assert "shape" in paired.split("quantile by (", 1)[1].split(")", 1)[0]


def test_the_shape_counts_give_each_hosts_median_gpu_and_its_gpus():
    layout = queries.Layout(cluster="cluster", host=catalog.HOSTNAME, model=catalog.MODEL_NAME)
    base = {"cluster": "eu-1", catalog.HOSTNAME: "h1", catalog.MODEL_NAME: "H100", catalog.WORKLOAD: "gemm",
            catalog.DRIVER_VERSION: "550"}
    answer = [{"metric": {**base, queries.SHAPES_VALUE: "4"}, "value": [0, "7"]},
              {"metric": {**base, queries.SHAPES_VALUE: "3"}, "value": [0, "1"]},
              {"metric": {**base, catalog.HOSTNAME: "h2", queries.SHAPES_VALUE: "3"}, "value": [0, "5"]},
              {"metric": {**base, catalog.HOSTNAME: "h2", queries.SHAPES_VALUE: "4"}, "value": [0, "3"]}]
    rows = {r.host[1]: (r.median, r.gpus) for r in queries.shape_rows(answer, layout)}
    assert rows == {"h1": (4.0, 8), "h2": (3.0, 8)}


def test_summaries_are_compared_where_they_cover_their_groups_usual_shapes():
    """A host whose summaries cover another number of shapes than most of its group's is left out, whichever
    side it is on; the GPU counts come from the shapes' rows; a tie keeps the larger count."""
    group = ("eu-1", "H100", "cuda", "quick", "gemm", "bf16", "training", "forward")
    old, new = ("550", "12.4", "", "", "2.5"), ("560", "12.4", "", "", "2.5")
    rows = [queries.HostRow(group, ("eu-1", f"h{i}"), old if i < 4 else new, 1.0, 0) for i in range(8)]
    shapes = [queries.HostRow(group, r.host, r.versions, 3.0 if r.host[1] in ("h1", "h5") else 4.0, 6)
              for r in rows]
    kept, left_out = queries.covering(rows, shapes)
    assert left_out == 2 and {r.host[1] for r in kept} == {"h0", "h2", "h3", "h4", "h6", "h7"}
    assert {r.gpus for r in kept} == {6}
    tie = [queries.HostRow(group, r.host, r.versions, 3.0 if r.versions == new else 4.0, 8) for r in rows]
    kept, left_out = queries.covering(rows, tie)
    assert left_out == 4 and {r.versions for r in kept} == {old}  # the new side lost a shape everywhere
    missing = queries.covering(rows, shapes[:4])
    assert missing[1] == 5  # h1 (3 shapes), and h4-h7 with no shapes row: not compared


def test_promtool_parses_every_query(tmp_path):
    """Every query shape sixdim fleet sends, through Debian's PromQL parser (promtool check rules)."""
    promtool = required_tool("promtool")
    layout = queries.Layout(cluster="cluster", host=catalog.HOSTNAME, model=catalog.MODEL_NAME)
    exprs = [queries.now_query(m, layout, ['cluster="eu-1"']) for m in queries.DEFAULT_METRICS]
    exprs.append(queries.shapes_query(layout, []))
    exprs += [queries.paired_query(m, layout, [], {catalog.DRIVER_VERSION: "550.54.15", catalog.TORCH_VERSION: ""},
                                   {catalog.DRIVER_VERSION: "560.35.03"}, ["a", "b"], "2h")
              for m in queries.DEFAULT_METRICS]
    rules = {"groups": [{"name": "fleet", "rules": [{"record": f"fleet:query{i}", "expr": e}
                                                     for i, e in enumerate(exprs)]}]}
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump(rules))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
