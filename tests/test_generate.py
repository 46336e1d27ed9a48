"""``sixdim generate``: every generated monitoring file from one set of options, and kept current.

The committed rules, PrometheusRule, dashboards and ConfigMaps are what ``sixdim generate`` writes
with the defaults; a change to the catalog, the rules or the dashboards fails here until they are
regenerated.  The alerts and the dashboards take one options object, so the panels that explain an
alert show the threshold it fires at.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from sixdim import cli, generate
from sixdim.dashboards import command as dashboards
from sixdim.monitoring import rules
from sixdim.monitoring.options import Options

ROOT = Path(__file__).resolve().parent.parent


def test_the_committed_files_are_what_generate_writes(capsys):
    code = cli.main(["generate", "--check", "--root", str(ROOT)])
    out = capsys.readouterr()
    assert code == 0, f"stale generated files: run `sixdim generate` in the checkout and commit them\n{out.out}"
    assert re.search(r"all \d+ generated files are current", out.out)


@pytest.mark.slow
def test_check_names_each_stale_or_missing_file_and_writes_nothing(tmp_path, capsys):
    assert cli.main(["generate", "--root", str(tmp_path)]) == 0
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written == sorted(generate.artefacts(Options()))
    assert cli.main(["generate", "--check", "--root", str(tmp_path)]) == 0
    capsys.readouterr()
    (tmp_path / rules.COMMITTED).write_text("groups: []\n")
    (tmp_path / dashboards.COMMITTED_DIR / "sixdim-gpu.json").unlink()
    assert cli.main(["generate", "--check", "--root", str(tmp_path)]) == 1
    out = capsys.readouterr()
    assert out.out.splitlines() == [f"stale: {rules.COMMITTED}", f"stale: {dashboards.COMMITTED_DIR}/sixdim-gpu.json"]
    assert "2 of 9 generated files are stale" in out.err
    assert (tmp_path / rules.COMMITTED).read_text() == "groups: []\n"


def test_generate_makes_a_missing_root_and_refuses_a_file_and_a_bad_option(tmp_path, capsys):
    """As the README's walk does it on a fresh machine: --root names a folder that is not there yet."""
    assert cli.main(["generate", "--root", str(tmp_path / "new" / "folder")]) == 0
    assert (tmp_path / "new" / "folder" / rules.COMMITTED).is_file()
    assert cli.main(["generate", "--check", "--root", str(tmp_path / "nowhere")]) == 2
    assert "no such folder" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert cli.main(["generate", "--root", str(tmp_path / "file")]) == 2
    assert "not a folder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit:
        cli.main(["generate", "--root", str(tmp_path / "bad"), "--peer-ratio", "1.5"])
    assert exit.value.code == 2
    assert "--peer-ratio: expected a ratio between 0 and 1" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()  # nothing written


def _thresholds(text: str) -> set[str]:
    """Every peer threshold and peer count a text compares with."""
    ratios = set(re.findall(r"ratio_to_median(?:\{[^}]*\})?\)? < ([0-9.]+)", text))
    counts = set(re.findall(r":count(?:\{[^}]*\})? >= (\d+)", text))
    return {f"ratio {r}" for r in ratios} | {f"count {c}" for c in counts}


def test_rules_and_dashboards_built_with_the_same_options_agree(tmp_path):
    """``sixdim rules --peer-ratio 0.8 --min-peers 4`` and ``sixdim dashboards`` with the same flags:
    the alert, the fleet dashboard's queries, its colour thresholds and its words all say 0.8 and 4."""
    flags = ["--peer-ratio", "0.8", "--min-peers", "4"]
    assert cli.main(["rules", "--out", str(tmp_path / "rules.yml"), *flags]) == 0
    assert cli.main(["dashboards", "--out", str(tmp_path / "json"), *flags]) == 0
    alert = next(r for g in yaml.safe_load((tmp_path / "rules.yml").read_text())["groups"] for r in g["rules"]
                 if r.get("alert") == "SixdimSlowerThanPeers")
    assert _thresholds(alert["expr"]) == {"ratio 0.8", "count 4"}
    fleet = json.loads((tmp_path / "json" / "sixdim-fleet.json").read_text())
    panels = [p for p in fleet["panels"] if "peers" in p.get("title", "").lower()]
    queries = " ".join(t["expr"] for p in panels for t in p.get("targets", []))
    assert _thresholds(queries) == {"ratio 0.8", "count 4"}
    steps = [s["value"] for p in panels for s in p.get("fieldConfig", {}).get("defaults", {})
             .get("thresholds", {}).get("steps", [])]
    assert 0.8 in steps and 0.9 not in steps
    words = " ".join(p.get("description", "") for p in panels)
    assert "0.8" in words and "0.9" not in words
    default = json.loads(dashboards.files()["sixdim-fleet.json"])
    default_queries = " ".join(t["expr"] for p in default["panels"] if "peers" in p.get("title", "").lower()
                               for t in p.get("targets", []))
    assert _thresholds(default_queries) == {"ratio 0.9", "count 3"}
