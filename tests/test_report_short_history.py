"""The HTML report over a short history, and its six-dimensions table in a narrow window, in the model's
data and in headless Chromium:

- a workload with several shapes run 9 times minutes apart is 9 points (one per suite run, each at
  its runs' median time, so none before the first run), not one point per hour at the hour's centre;
- the time axis's tick labels are all different (a span of minutes: times, the date once in the axis
  title), and the value axis spans at least ±5% of the data's middle (``format.value_range``), never
  ±0.1% around one value;
- the six-dimensions table (two long host names, two suites, two modes, every dimension) fits the
  window at 1,400 px and narrower: its last column visible, nothing to scroll.

Screenshots go to ``$SIXDIM_ARTIFACTS`` when SIXDIM_ARTIFACTS is set (CI), else under pytest's
temporary folder; each test prints the path."""

import json
import os
import random
import re
import statistics
import time
from pathlib import Path

import pytest

from sixdim.cli import main
from sixdim.store.history import History
from tests.conftest import required_tool
from tests.helpers import make_record
from tests.test_html_report import _charts, console_messages, errors_in, open_in_chromium

SUITE_RUNS = 9
SHAPES = (("m=8192,n=8192,k=8192,op=NN", 700e12), ("m=4096,n=4096,k=4096,op=NN", 610e12),
          ("m=1024,n=1024,k=1024,op=NN", 320e12))
MIN_HALF_SPAN = 0.05
"""The value axis's least half span, relative to the data's middle (agent/report/format.py says why)."""


def _short_history(path: Path) -> list[float]:
    """9 suite runs, 3 minutes apart, of bf16 GEMM in 3 shapes (10 s apart within a suite run) on one
    GPU, from 33 minutes past an hour: all within that hour, so hourly buckets made them one point at
    half past, before the first run.  1% noise.  Returns the runs' start times."""
    rnd = random.Random(11)
    first = (time.time() // 3600 - 3) * 3600 + 33 * 60
    starts = []
    h = History(path)
    for i in range(SUITE_RUNS):
        for j, (shape, rate) in enumerate(SHAPES):
            ended = first + i * 180 + j * 10
            flops = rate * (1 + rnd.gauss(0, 0.01))
            record = make_record(seconds=2 * 8192 ** 3 / flops, ended_at=ended, shape=shape)
            record.figures = {"seconds": 2 * 8192 ** 3 / flops, "flops": flops,
                              "power_watts": 650.0 * (1 + rnd.gauss(0, 0.005)), "memory_bytes": 402653184}
            h.add(record)
            starts.append(record.started_at)
    h.close()
    return starts


@pytest.fixture(scope="module")
def short(tmp_path_factory):
    """The short history, its page as the command writes it, and its runs' start times."""
    folder = tmp_path_factory.mktemp("short")
    starts = _short_history(folder / "history.db")
    out = folder / "report.html"
    assert main(["report", "--html", str(out), "--history", str(folder / "history.db")]) == 0
    return folder / "history.db", out, starts


def _artifacts(tmp_path: Path) -> Path:
    artifacts = os.environ.get("SIXDIM_ARTIFACTS")
    folder = Path(artifacts) if artifacts else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_the_model_draws_a_point_per_suite_run_within_the_runs_times(short):
    from sixdim.report.data import read
    from sixdim.report.model import Report

    path, _, starts = short
    report = Report(read(str(path), 256))
    (group,) = report.groups
    for figure in ("flops", "power_watts", "memory_bytes"):
        lines, _, shapes = report.trend(group, figure)
        assert shapes == 3 and len(lines) == 1
        (line,) = lines
        assert len(line["x"]) == SUITE_RUNS, (figure, line["x"])  # one point per suite run, not one per hour
        assert line["counts"] == [3] * SUITE_RUNS
        for n, x in enumerate(line["x"]):  # each at its own runs' median start: within the runs' times
            runs = starts[3 * n:3 * n + 3]
            assert min(runs) * 1000 - 1 <= x <= max(runs) * 1000 + 1, (figure, n, x, runs)
    speed, _, _ = report.trend(group, "flops")
    geomean = statistics.geometric_mean(rate for _, rate in SHAPES)
    assert all(abs(y / geomean - 1) < 0.05 for y in speed[0]["y"])  # the shapes' geometric mean, about


def test_the_page_charts_each_suite_run_with_an_honest_value_range(short):
    _, page, starts = short
    html = page.read_text()
    (chart,) = [c for c in _charts(html) if c["layout"].get("xaxis", {}).get("type") == "date"]
    speed = [t for t in chart["data"] if t["visible"]]
    assert len(speed) == 1 and len(speed[0]["x"]) == SUITE_RUNS
    assert all(min(starts) * 1000 - 1 <= x <= max(starts) * 1000 + 1 for x in speed[0]["x"])
    assert "geometric mean of %{customdata} shape(s)" in speed[0]["hovertemplate"]
    assert "a point is each suite run, the geometric mean over 3 shapes" in html
    bottom, top = chart["layout"]["yaxis"]["range"]
    middle = (min(speed[0]["y"]) + max(speed[0]["y"])) / 2
    assert top - bottom >= 2 * MIN_HALF_SPAN * middle * 0.999, (bottom, top, middle)
    assert bottom <= min(speed[0]["y"]) and top >= max(speed[0]["y"]) and bottom > 0  # zero not forced in
    for button in chart["layout"]["updatemenus"][0]["buttons"]:  # power and memory: the same rule
        low, high = button["args"][1]["yaxis.range"]
        assert high - low >= 2 * MIN_HALF_SPAN * (low + high) / 2 * 0.9, button["label"]
    left, right = chart["layout"]["xaxis"]["range"]
    assert left <= min(speed[0]["x"]) and right >= max(speed[0]["x"])


PROBE = """<script>
window.addEventListener('load', function () {
  setTimeout(function () {
    var out = [];
    document.querySelectorAll('.js-plotly-plot').forEach(function (gd) {
      var full = gd._fullLayout, trace = gd._fullData.filter(function (t) { return t.visible === true; })[0];
      out.push({xrange: full.xaxis.range, yrange: full.yaxis.range, x: trace.x, y: trace.y,
                points: gd.querySelectorAll('.scatterlayer path.point').length});  // hidden traces are not drawn
    });
    var pre = document.createElement('pre');
    pre.id = 'probe';
    pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  }, 300);
});
</script></body>"""
"""Writes each chart's drawn axes and its visible trace, as plotly laid them out, into the DOM."""


@pytest.mark.slow
def test_in_chromium_the_short_history_shows_each_run_with_distinct_ticks(short, tmp_path, capsys):
    chromium = required_tool("chromium", "chromium")
    _, page, starts = short
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text().replace("</body>", PROBE, 1))
    png = _artifacts(tmp_path) / "report-short-history.png"
    dom, stderr = open_in_chromium(chromium, probed, screenshot=png, window="1400,1600")
    with capsys.disabled():
        print(f"\nHTML report of a short history (headless Chromium): {png}")
    assert console_messages(stderr) == [] and errors_in(dom) == 0
    ticks = [re.sub(r"<[^>]+>", "", t) for t in re.findall(r'<g class="xtick">\s*<text[^>]*>(.*?)</text>', dom)]
    assert len(ticks) >= 3, ticks
    assert len(set(ticks)) == len(ticks), ticks  # no tick label twice
    assert all(re.fullmatch(r"\d\d:\d\d", t) for t in ticks), ticks  # minutes apart: times, not the date again
    title = re.search(r'class="g-xtitle".*?<text[^>]*>(.*?)</text>', dom, re.S)
    assert title and re.fullmatch(r"[A-Z][a-z]{2} \d{1,2}, \d{4} \(UTC\)", title.group(1)), title  # the date once
    (chart,) = json.loads(re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S).group(1))
    assert chart["points"] == SUITE_RUNS  # drawn: one marker per suite run
    assert len(chart["x"]) == SUITE_RUNS
    first, last = min(starts), max(starts)
    for x in chart["x"]:  # plotly gives dates as "YYYY-MM-DD HH:MM:SS" (UTC) or ms
        seconds = x / 1000 if isinstance(x, (int, float)) else _utc_seconds(x)
        assert first - 1 <= seconds <= last + 1, (x, first, last)
    left, right = (_utc_seconds(v) for v in chart["xrange"])
    assert left <= first and right >= last
    bottom, top = chart["yrange"]
    middle = (min(chart["y"]) + max(chart["y"])) / 2
    assert top - bottom >= 2 * MIN_HALF_SPAN * middle * 0.999, (bottom, top, middle)


def _utc_seconds(value):
    from datetime import datetime, timezone

    if isinstance(value, (int, float)):
        return value / 1000
    text = value if "." in value else value + ".0"
    return datetime.strptime(text[:26], "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp()


# ---------------------------------------------------------------------------- the six-dimensions table

def _wide_history(path: Path) -> None:
    """Two hosts with long names, two suites, resnet50 in two modes, every dimension measured: the
    widest six-dimensions table one host pair makes (a Suite column, wrapped workload labels)."""
    h = History(path)
    t0 = time.time() - 3 * 86400
    for n, host in enumerate(("gpu-node-07.training.example.com", "gpu-node-08.training.example.com")):
        for suite in ("quick", "nightly"):
            for mode in ("training", "inference"):
                for i in range(3):
                    record = make_record(workload="resnet50", ended_at=t0 + i * 3600 + n * 60, shape="batch=256",
                                         uuid=f"GPU-{n}")
                    record.hostname, record.suite, record.mode = host, suite, mode
                    record.figures = {"seconds": 0.0868, "samples_per_second": 2950.123, "power_watts": 612.0,
                                      "memory_bytes": 38.2 * 2 ** 30, "accuracy": 0.9731, "stability_ratio": 0.812,
                                      "peak_ratio": 0.4321, "linearity_ratio": 0.9512, "linearity_count": 8}
                    h.add(record)
    h.close()


TABLE_PROBE = """<script>
window.addEventListener('load', function () {
  var table = document.querySelector('table.dims'), box = table.parentElement;
  var last = table.querySelector('thead th:last-child').getBoundingClientRect();
  var cell = table.querySelector('tbody tr td:last-child').getBoundingClientRect();
  var pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify({scrollWidth: box.scrollWidth, clientWidth: box.clientWidth,
                                    headRight: last.right, cellRight: cell.right,
                                    viewport: document.documentElement.clientWidth});
  document.body.appendChild(pre);
  Array.prototype.forEach.call(document.querySelectorAll('main > :not(#dimensions)'), function (e) {
    e.style.display = 'none';  // measured: now the table at the top of the screenshot
  });
});
</script></body>"""
"""Writes where the six-dimensions table's last column ends, and whether its box scrolls, into the DOM."""


@pytest.fixture(scope="module")
def wide_page(tmp_path_factory):
    folder = tmp_path_factory.mktemp("wide")
    _wide_history(folder / "history.db")
    out = folder / "report.html"
    assert main(["report", "--html", str(out), "--history", str(folder / "history.db")]) == 0
    probed = folder / "probed.html"
    probed.write_text(out.read_text().replace("</body>", TABLE_PROBE, 1))
    return probed


@pytest.mark.slow
@pytest.mark.parametrize("width", [1400, 1200, 1000])
def test_in_chromium_the_six_dimensions_table_fits_the_window(wide_page, width, tmp_path, capsys):
    chromium = required_tool("chromium", "chromium")
    png = _artifacts(tmp_path) / f"report-table-{width}.png"
    dom, stderr = open_in_chromium(chromium, wide_page, screenshot=png, window=f"{width},900")
    with capsys.disabled():
        print(f"\nsix-dimensions table at {width} px (headless Chromium): {png}")
    assert console_messages(stderr) == [] and errors_in(dom) == 0
    head = re.search(r'<table class="dims"><thead><tr>(.*?)</tr>', dom, re.S).group(1)
    titles = [re.sub(r"<[^>]+>", "", t) for t in re.findall(r"<th[^>]*>(.*?)</th>", head)]
    assert titles[-1] == "Last run (UTC)" and "Suite" in titles and len(titles) == 12, titles  # the widest table
    box = json.loads(re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S).group(1))
    assert box["viewport"] == width, box
    assert box["scrollWidth"] <= box["clientWidth"], box  # nothing hidden to scroll to
    assert box["headRight"] <= box["viewport"] and box["cellRight"] <= box["viewport"], box  # the last column shows
