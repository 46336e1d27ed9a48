"""``sixdim report --html FILE`` over a real history: what the page shows, escaping, the offline
guarantee, the errors a person meets, and the page in headless Chromium (no console error, every
chart drawn, a screenshot).

The screenshot goes to ``$SIXDIM_ARTIFACTS/report.png`` when SIXDIM_ARTIFACTS is set (CI), else
under pytest's temporary folder; the test prints the path either way."""

import json
import os
import random
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from sixdim.cli import main
from sixdim.store.history import History
from tests.conftest import required_tool
from tests.helpers import make_record

RUNS = 100
HOUR = 3600.0
EVIL = '<script>alert("x")</script>'
MODEL = "NVIDIA H100 80GB HBM3"


def _gemm(gpu, uuid, at, driver, flops, **extra):
    record = make_record(seconds=2 * 8192 ** 3 / flops, ended_at=at, driver=driver, gpu=gpu, uuid=uuid,
                         shape="m=8192,n=8192,k=8192,op=NN")
    record.figures = {"seconds": 2 * 8192 ** 3 / flops, "flops": flops, "power_watts": 650.0,
                      "memory_bytes": 402653184, "peak_ratio": flops / 989.4e12, **extra}
    return record


def _model(gpu, uuid, at, driver, samples, **extra):
    record = make_record(workload="resnet50", ended_at=at, driver=driver, gpu=gpu, uuid=uuid, shape="batch=256")
    record.figures = {"seconds": 256 / samples, "samples_per_second": samples, "power_watts": 600.0,
                      "memory_bytes": 38.2 * 2 ** 30, "accuracy": 0.9731, "stability_ratio": 0.8, **extra}
    return record


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """One host, GPUs 0 and 1 (H100), 100 hourly runs each of bf16 GEMM and resnet50, upgraded from
    driver 550.54.15 to 560.28.03 at run 60: GEMM 7% slower on both GPUs, resnet50 unchanged.  The
    newest run of each series has exact values the table must show.  Also: a CPU device with a few
    fp32 GEMM runs, a user's workload whose name and shape carry a script tag, a few failed runs."""
    path = tmp_path_factory.mktemp("html") / "history.db"
    rnd = random.Random(3)
    t0 = time.time() - RUNS * HOUR
    h = History(path)
    for i in range(RUNS):
        driver = "550.54.15" if i < 60 else "560.28.03"
        last = i == RUNS - 1
        for gpu, uuid, base in (("0", "GPU-a", 700e12), ("1", "GPU-b", 690e12)):
            at = t0 + i * HOUR + (0 if gpu == "0" else 60)
            flops = base * (0.93 if i >= 60 else 1.0) * (1 + rnd.gauss(0, 0.01))
            if last:
                flops = 612.5e12 if gpu == "0" else 603.1e12
            h.add(_gemm(gpu, uuid, at, driver, flops, **({"power_watts": 652.0} if last and gpu == "0" else {})))
            samples = (2950.0 if gpu == "0" else 2900.0) * (1 + rnd.gauss(0, 0.01))
            h.add(_model(gpu, uuid, at + 600, driver, 2963.0 if last and gpu == "0" else samples))
        if i % 25 == 7:
            h.add(make_record("failed", ended_at=t0 + i * HOUR + 900, driver=driver))
        if i % 10 == 0:
            cpu = make_record(ended_at=t0 + i * HOUR + 1200, driver=driver, gpu="", uuid="")
            cpu.device_type, cpu.device, cpu.model_name, cpu.precision = "cpu", "cpu", "Intel Xeon Gold 6448Y", "fp32"
            cpu.figures = {"seconds": 0.5, "flops": 1.2e12}
            h.add(cpu)
            evil = make_record(workload=f"cmd{EVIL}", ended_at=t0 + i * HOUR + 1500, driver=driver,
                               shape=f"m=1,{EVIL}")
            evil.figures = {"samples_per_second": 12.5}
            h.add(evil)
    h.close()
    return str(path)


@pytest.fixture(scope="module")
def page(history, tmp_path_factory):
    out = tmp_path_factory.mktemp("page") / "report.html"
    assert main(["report", "--html", str(out), "--history", history]) == 0
    return out.read_text()


def _text(html):
    """The page's visible text, roughly: tags dropped, the common entities decoded."""
    text = re.sub(r"<script.*?</script>", " ", html, flags=re.S)
    text = re.sub(r"<[^>]+>", " ", text)
    return re.sub(r"\s+", " ", text.replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))


def _section(html, sid):
    start = html.index(f'<section id="{sid}">')
    return html[start:html.index("</section>", start)]


def _charts(html):
    """Each chart's figure, as plotly's to_html wrote it: Plotly.newPlot(id, data, layout, config)."""
    out = []
    for match in re.finditer(r'Plotly\.newPlot\(\s*"([^"]+)",\s*(\[.*?\]),\s*(\{.*?\}),\s*\{"displaylogo"', html, re.S):
        out.append({"id": match.group(1), "data": json.loads(match.group(2)), "layout": json.loads(match.group(3))})
    return out


def test_the_command_writes_the_page_and_says_what_it_did(history, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["report", "--html", str(out), "--history", history]) == 0
    said = capsys.readouterr().out
    assert said.startswith(f"wrote {out} (") and "runs of" in said and history in said
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert not list(tmp_path.glob(".report.html.*"))  # the temporary file was renamed, not left


def test_the_six_dimensions_table_shows_the_latest_values_formatted_and_a_dash_where_absent(page):
    table = _section(page, "dimensions")
    rows = {}
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S):
        cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        if cells:
            rows.setdefault(cells[1], []).append(cells)
    gemm0 = next(r for r in rows["GPU 0"] if "612.5 TFLOP/s" in r)
    assert gemm0[:4] == ["bf16 gemm", "GPU 0", "1", "612.5 TFLOP/s"]
    assert gemm0[4:11] == ["\u2014", "\u2014", "652 W", "384 MiB", "\u2014", "61.9%", gemm0[10]]
    model0 = next(r for r in rows["GPU 0"] if r[0] == "bf16 resnet50")
    assert model0[3:10] == ["2,963 samples/s", "97.3%", "\u2014", "600 W", "38.2 GiB", "0.800", "\u2014"]
    assert any(r[3] == "603.1 TFLOP/s" for r in rows["GPU 1"])
    cpu = rows["CPU"][0]
    assert cpu[0] == "fp32 gemm" and cpu[3] == "1.2 TFLOP/s" and cpu[6] == "\u2014"  # no power: a dash, never 0
    assert '<td class="absent">\u2014</td>' in table
    assert not re.search(r"(?<![\d.,])0 W|(?<![\d.,])0\.0%", _text(table))


def test_the_header_names_the_host_devices_span_versions_and_runs(page):
    text = _text(page[:page.index('<section id="dimensions">')])
    assert "node1" in text and f"2 \u00d7 {MODEL}" in text and "1 CPU device(s)" in text
    runs = 2 * 2 * RUNS + 4 + 2 * 10
    assert f"Runs {runs}" in text and "Failures 4" in text and "failed 4" in text
    assert "Not run 0" in text and "Interrupted 0" in text  # failures apart from cases not run and interruptions
    assert "550.54.15 \u2192 560.28.03" in text
    assert "Intel Xeon Gold 6448Y" in text


def test_the_trend_charts_mark_the_driver_change_with_both_versions(page):
    charts = _charts(page)
    trends = [c for c in charts if c["layout"].get("xaxis", {}).get("type") == "date"]
    assert len(trends) >= 3  # bf16 gemm, bf16 resnet50, fp32 gemm (CPU), the user's command
    gemm = next(c for c in trends if "FLOP/s" in c["layout"]["yaxis"]["title"]["text"]
                and {t["name"] for t in c["data"] if t.get("visible")} == {"GPU 0", "GPU 1"})
    labels = [a["text"] for a in gemm["layout"]["annotations"]]
    assert labels == ["driver 550.54.15 \u2192 560.28.03"]
    [mark] = gemm["layout"]["shapes"]
    assert mark["x0"] == mark["x1"] and mark["type"] == "line"
    speed = [t for t in gemm["data"] if t["visible"]]
    assert all(len(t["x"]) == RUNS for t in speed)  # 100 runs a line: drawn as they are
    before = [y for x, y in zip(speed[0]["x"], speed[0]["y"]) if x < mark["x0"]]
    after = [y for x, y in zip(speed[0]["x"], speed[0]["y"]) if x >= mark["x0"]]
    assert len(before) == 60 and sum(after) / len(after) / (sum(before) / len(before)) == pytest.approx(0.93, abs=0.02)
    colours = {t["name"]: t["line"]["color"] for c in trends for t in c["data"]}
    assert colours["GPU 0"] != colours["GPU 1"]  # one colour per device, the same in every chart
    assert len({t["line"]["color"] for c in trends for t in c["data"] if t["name"] == "GPU 0"}) == 1
    assert [b["label"] for b in gemm["layout"]["updatemenus"][0]["buttons"]] == ["Speed", "Power", "Memory"]


def test_the_version_comparison_shows_the_driver_change_per_workload(page):
    section = _section(page, "versions")
    text = _text(section)
    assert "driver 550.54.15 \u2192 560.28.03" in text
    row = next(r for r in re.findall(r"<tr>(.*?)</tr>", section, re.S) if "bf16 gemm" in r)
    change = re.search(r'class="worse">\u2212(\d+\.\d)%', row)
    assert change and 6.0 <= float(change.group(1)) <= 8.0
    resnet = next(r for r in re.findall(r"<tr>(.*?)</tr>", section, re.S) if "bf16 resnet50" in r)
    assert "worse" not in resnet and "better" not in resnet  # unchanged: not coloured
    [bars] = [c for c in _charts(section) if c["data"][0]["type"] == "bar"]
    assert bars["data"][0]["name"].startswith("driver 550.54.15 \u2192 560.28.03")


def test_the_regressions_section_lists_the_change_with_its_versions(page):
    section = _section(page, "regressions")
    rows = [_text(r) for r in re.findall(r"<tr>(.*?)</tr>", section, re.S)]
    shifts = [r for r in rows if "regression" in r and "driver 550.54.15 \u2192 560.28.03" in r and "FLOP/s" in r]
    assert len(shifts) >= 4  # both GPUs: the version-change verdict and the change point
    assert all(re.search(r"\u2212[67]\.\d%", r) for r in shifts)
    assert not [r for r in rows if "resnet50" in r and "driver" in r]  # the model did not move


def test_text_from_the_history_is_escaped(page):
    assert EVIL not in page
    assert "alert(" not in page.replace("&quot;", '"').split("</head>")[1].replace("&lt;script&gt;alert(", "")
    # the tables' cells: Jinja2's autoescaping writes a double quote &#34; (plotly's hover texts, escaped for
    # plotly, keep &quot;)
    assert "cmd&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in page
    assert "m=1,&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in page


HOSTILE = """"'><script>alert(1)</script>&amp;"""
"""Text that breaks out of an element or an attribute value if it is not escaped: both quotes, a tag, an entity."""


class _Parsed(HTMLParser):
    """The page as a browser's parser reads it: every start tag's attributes, the text of each table cell,
    the text of each script, and the report's note (entities decoded, as a browser shows them)."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.attributes: list[tuple[str, str, str | None]] = []
        self.cells: list[str] = []
        self.scripts: list[str] = []
        self.note = ""
        self._open: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.attributes += [(tag, name, value) for name, value in attrs]
        if tag == "td":
            self.cells.append("")
        self._open.append("demo" if ("class", "demo") in attrs else tag)

    def handle_endtag(self, tag):
        if self._open:
            self._open.pop()

    def handle_data(self, data):
        if "td" in self._open and self.cells:
            self.cells[-1] += data
        if self._open and self._open[-1] == "script":
            self.scripts.append(data)
        if self._open and self._open[-1] == "demo":
            self.note += data


def test_hostile_labels_and_notes_are_text_on_the_page_never_markup(tmp_path):
    """A host, model, workload, shape and UUID (in a cell's title) that each carry quotes, a script tag and an
    entity, and a note that does too: the browser's parser reads each back as the very text, and the page
    gains no element, attribute or script from them."""
    from sixdim.report.html import build

    path = tmp_path / "history.db"
    h = History(path)
    for i in range(12):
        record = make_record(workload=f"w{HOSTILE}", shape=f"m=1,{HOSTILE}", uuid=f"GPU-{HOSTILE}",
                             ended_at=1_790_000_000.0 + i * HOUR)
        record.hostname, record.model_name = f"host{HOSTILE}", f"model{HOSTILE}"
        h.add(record)
    h.close()
    page, _ = build(str(path), now=1_790_000_000.0 + 12 * HOUR, note=f"note{HOSTILE}")
    parsed = _Parsed(page)
    assert parsed.note == f"note{HOSTILE}"
    assert f"w{HOSTILE}" in " ".join(parsed.cells)  # the workload and the series labels, as text
    assert any(cell.endswith(f"m=1,{HOSTILE}") for cell in parsed.cells)
    assert any(cell.endswith(f"model{HOSTILE}") for cell in parsed.cells)
    assert ("td", "title", f"GPU-{HOSTILE}") in parsed.attributes  # an attribute value kept whole
    assert not [a for a in parsed.attributes if a[1].startswith("on")]  # no handler slipped in
    assert not [s for s in parsed.scripts if "alert(1)" in s and "&lt;script&gt;alert(1)" not in s]
    assert "<script>alert(1)" not in page

def test_the_page_fetches_nothing(page):
    assert 'src="http' not in page and "src='http" not in page
    assert "<link" not in page and "@import" not in page and "url(http" not in page
    assert "<script src" not in page and "<iframe" not in page
    assert page.count("* plotly.js v") == 1  # plotly.js embedded once, inline
    assert "https://cdn.plot.ly" not in page.split("</head>")[1]


def test_since_limits_the_page_to_recent_runs(history, tmp_path):
    out = tmp_path / "recent.html"
    assert main(["report", "--html", str(out), "--history", history, "--since", "10h"]) == 0
    html = out.read_text()
    assert "Showing runs since" in html
    assert "No software version changed in the shown time" in _section(html, "versions")


def test_the_history_and_the_minimum_effect_come_from_the_configuration(history, tmp_path, monkeypatch):
    monkeypatch.setenv("SIXDIM_HISTORY", history)
    out = tmp_path / "env.html"
    assert main(["report", "--html", str(out)]) == 0
    assert "driver 550.54.15 \u2192 560.28.03" in _section(out.read_text(), "regressions")
    config = tmp_path / "sixdim.toml"
    config.write_text("[regression]\nmin_effect = 0.08\n")  # every shift here is 7%: none is listed
    assert main(["report", "--html", str(out), "--config", str(config)]) == 0
    assert "Change points in the history</h3><p>Every shift" in out.read_text()
    assert "<p>None found.</p>" in _section(out.read_text(), "regressions")
    assert main(["report", "--html", str(out), "--regression-min-effect", "0.08"]) == 0
    assert "<p>None found.</p>" in _section(out.read_text(), "regressions")


def test_a_workloads_own_minimum_effect_decides_its_colour(history, tmp_path):
    """[regression.effects] holds for the colouring as for the verdicts: with 10% for gemm, its 7%
    driver change is shown uncoloured; with the default 1.8% it is red (the test above)."""
    config = tmp_path / "sixdim.toml"
    config.write_text('[regression.effects]\n"gemm" = 0.10\n')
    out = tmp_path / "effects.html"
    assert main(["report", "--html", str(out), "--history", history, "--config", str(config)]) == 0
    section = _section(out.read_text(), "versions")
    row = next(r for r in re.findall(r"<tr>(.*?)</tr>", section, re.S) if "bf16 gemm" in r)
    assert re.search(r"\u2212[67]\.\d%", _text(row)) and "worse" not in row and "better" not in row


def test_a_long_series_is_bucketed_and_the_charts_are_limited(history, tmp_path, monkeypatch):
    from sixdim.report import model as report_model
    from sixdim.report import page as report_page

    monkeypatch.setattr(report_model, "MAX_POINTS", 40)  # where each limit is used
    monkeypatch.setattr(report_page, "MAX_CHARTS", 1)
    out = tmp_path / "small.html"
    assert main(["report", "--html", str(out), "--history", history]) == 0
    html = out.read_text()
    trends = [c for c in _charts(html) if c["layout"].get("xaxis", {}).get("type") == "date"]
    assert len(trends) == 1  # the one that most needs a look: the regressed GEMM
    assert sum(len(t["x"]) for t in trends[0]["data"] if t["visible"]) <= 40
    assert "a point is the median per" in html and "Not charted:" in html
    assert all("median of %{customdata} run(s)" in t["hovertemplate"] for t in trends[0]["data"])


def test_a_missing_history_is_exit_2_naming_it_and_writes_nothing(tmp_path, capsys):
    missing = tmp_path / "nowhere" / "history.db"
    out = tmp_path / "report.html"
    assert main(["report", "--html", str(out), "--history", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sixdim: error: ") and str(missing) in err
    assert not out.exists() and not missing.parent.exists()


def test_a_file_that_is_not_a_history_is_exit_2(tmp_path, capsys):
    junk = tmp_path / "notes.txt"
    junk.write_text("not a database\n" * 100)
    assert main(["report", "--html", str(tmp_path / "r.html"), "--history", str(junk)]) == 2
    assert str(junk) in capsys.readouterr().err
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).execute("CREATE TABLE other (x)").connection.close()
    assert main(["report", "--html", str(tmp_path / "r.html"), "--history", str(empty)]) == 2
    assert "runs" in capsys.readouterr().err


def test_without_plotly_it_says_which_extra_to_install(history, tmp_path, capsys, monkeypatch):
    for name in ("plotly", "plotly.io", "plotly.offline"):
        monkeypatch.setitem(sys.modules, name, None)  # import plotly now raises ImportError
    out = tmp_path / "report.html"
    assert main(["report", "--html", str(out), "--history", history]) == 2
    err = capsys.readouterr().err
    assert "plotly" in err and "pip install -e '.[report]'" in err and "'sixdim[report]'" in err
    assert not out.exists()


def test_report_takes_one_kind_and_no_kind_is_latest(capsys, history, tmp_path):
    assert main(["report", "--history", history]) == 0  # no report named: the latest result of each workload
    assert capsys.readouterr().out.startswith("host  ")
    with pytest.raises(SystemExit) as exit:  # the older spelling and a report kind: two reports
        main(["report", "--html", str(tmp_path / "r.html"), "regressions", "--history", history])
    assert exit.value.code == 2
    assert "unrecognized arguments: regressions" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()
    # an option before the report kind is nobody's: an error, not the default history read without a word
    with pytest.raises(SystemExit) as exit:
        main(["report", "--history", history, "regressions"])
    assert exit.value.code == 2
    assert "choose from 'latest', 'html', 'regressions'" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["report", "--html", "{out}", "--history", "{history}"],
    ["report", "--history", "{history}", "--html", "{out}"],
    ["report", "--html={out}", "--history={history}"],
    ["report", "html", "{out}", "--history", "{history}"],
])
def test_report_html_and_its_older_spelling_write_the_same_page(argv, history, tmp_path):
    out = tmp_path / "page.html"
    assert main([a.format(out=out, history=history) for a in argv]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_an_empty_history_still_makes_a_page(tmp_path):
    path = tmp_path / "history.db"
    History(path).close()
    out = tmp_path / "report.html"
    assert main(["report", "--html", str(out), "--history", str(path)]) == 0
    assert "The history has no runs yet." in out.read_text()


def test_the_command_line_loads_neither_plotly_nor_numpy(cli_env):
    probe = ("import sys, sixdim.cli; sixdim.cli.build_parser(); "
             "print(sorted(m for m in ('numpy', 'scipy', 'plotly') if m in sys.modules))")
    light = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=cli_env, timeout=60)
    assert light.stdout.strip() == "[]", light.stderr


# ---------------------------------------------------------------------------- headless Chromium

def open_in_chromium(chromium: str, page: Path, *, screenshot: Path | None = None,
                     window: str = "1400,3000") -> tuple[str, str]:
    """The DOM after the page's scripts ran (``--dump-dom``) and Chromium's stderr, where
    ``--enable-logging=stderr`` writes each console message (``INFO:CONSOLE``) and uncaught error.
    ``window``: the window's width and height in CSS pixels."""
    with tempfile.TemporaryDirectory() as profile:
        common = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
                  f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000",
                  f"--window-size={window}"]
        dom = subprocess.run(common + ["--dump-dom", page.resolve().as_uri()], capture_output=True, text=True,
                             timeout=180)
        assert dom.returncode == 0, dom.stderr[-2000:]
        if screenshot is not None:
            shot = subprocess.run(common + [f"--screenshot={screenshot}", page.resolve().as_uri()],
                                  capture_output=True, text=True, timeout=180)
            assert shot.returncode == 0, shot.stderr[-2000:]
    return dom.stdout, dom.stderr


def console_messages(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


def errors_in(dom: str) -> int:
    found = re.search(r'<html[^>]*\sdata-errors="(\d+)"', dom)
    assert found, "the page's error recorder is missing from the DOM"
    return int(found.group(1))


@pytest.fixture(scope="module")
def chromium():
    return required_tool("chromium", "chromium")


@pytest.fixture(scope="module")
def demo_page(tmp_path_factory):
    """The README's demo history (tests/bench/html_report_demo.py), rendered as the command renders it."""
    from tests.bench import html_report_demo

    folder = tmp_path_factory.mktemp("demo")
    html_report_demo.write_history(folder / "history.db")
    html_report_demo.render(folder / "history.db", folder / "report.html")
    return folder / "report.html"


@pytest.mark.slow
def test_the_page_opens_in_headless_chromium_with_every_chart_drawn_and_no_error(chromium, demo_page, tmp_path,
                                                                                   capsys):
    artifacts = os.environ.get("SIXDIM_ARTIFACTS")
    folder = Path(artifacts) if artifacts else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    png = folder / "report.png"
    dom, stderr = open_in_chromium(chromium, demo_page, screenshot=png)
    with capsys.disabled():
        print(f"\nHTML report screenshot (headless Chromium): {png}")
    assert console_messages(stderr) == []
    assert errors_in(dom) == 0
    charts = int(re.search(r'data-charts="(\d+)"', dom).group(1))
    assert charts >= 5  # 5 trend charts and the version comparison
    assert dom.count('class="plot-container plotly"') == charts  # plotly drew every one
    assert int(re.search(r'data-drawn="(\d+)"', dom).group(1)) == charts
    assert dom.count('class="main-svg"') >= charts
    assert 'id="errors" hidden' in dom  # the error banner stayed hidden
    assert png.stat().st_size > 20_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_the_chromium_check_catches_an_error_in_the_page(chromium, demo_page, tmp_path):
    """The check above would see a failing page: a script that throws, and plotly given bad data."""
    html = demo_page.read_text()
    thrown = tmp_path / "thrown.html"
    thrown.write_text(html.replace("</body>", "<script>undefinedFunctionForTheTest();</script></body>"))
    dom, stderr = open_in_chromium(chromium, thrown)
    assert errors_in(dom) == 1
    assert any("undefinedFunctionForTheTest" in line for line in console_messages(stderr))
    assert "Part of this page could not be drawn" in dom
    broken = tmp_path / "broken.html"
    broken.write_text(html.replace("Plotly.newPlot(", "Plotly.newPlott(", 1))
    dom, stderr = open_in_chromium(chromium, broken)
    assert errors_in(dom) >= 1 and console_messages(stderr)
    charts = int(re.search(r'data-charts="(\d+)"', dom).group(1))
    assert dom.count('class="plot-container plotly"') == charts - 1


def test_integer_precisions_are_rated_in_op_per_second_not_flop(tmp_path):
    """int8 GEMM's rate is integer operations: POP/s or TOP/s in the table, OP/s on its chart, as in `sixdim run`'s
    table; the bf16 series beside it stays in FLOP/s."""
    path = tmp_path / "history.db"
    h = History(path)
    t0 = time.time() - 20 * HOUR
    for i in range(20):
        for precision, rate in (("int8", 1.65e15), ("bf16", 700e12)):
            record = _gemm("0", "GPU-a", t0 + i * HOUR, "560.28.03", rate * (1 + 0.001 * i))
            record.precision = precision
            h.add(record)
    h.close()
    out = tmp_path / "report.html"
    assert main(["report", "--html", str(out), "--history", str(path)]) == 0
    html = out.read_text()
    rows = {}
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", _section(html, "dimensions"), re.S):
        cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        if cells:
            rows.setdefault(cells[0], cells)  # the six-dimensions table's row, before the shapes table's
    assert re.fullmatch(r"[\d.]+ POP/s", rows["int8 gemm"][3]), rows["int8 gemm"]
    assert re.fullmatch(r"[\d.]+ TFLOP/s", rows["bf16 gemm"][3]), rows["bf16 gemm"]
    titles = re.findall(r'<h3 id="trend-\d+">(.*?)</h3>', _section(html, "trends"))
    assert any(t.startswith("int8 gemm") and t.endswith("(OP/s)") for t in titles), titles
    assert any(t.startswith("bf16 gemm") and t.endswith("(FLOP/s)") for t in titles), titles
