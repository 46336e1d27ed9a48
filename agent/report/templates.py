"""The HTML report's markup, as Jinja2 templates with autoescaping: every value a template shows is
escaped unless it is :class:`markupsafe.Markup` (the page's own CSS and scripts, plotly's chart
HTML, and the parts one template renders for another), so no text from the history (a workload's
name, a shape, a cause's evidence) reaches the page as markup, and no call site has to remember to
escape it.  :mod:`sixdim.report.page` decides what each part shows; the markup is here.

The templates are strings in this module, not files, so the wheel needs no package data for them.
Block tags on lines of their own leave no blank line (``trim_blocks``, ``lstrip_blocks``); a long
sentence may be broken over lines, which a browser shows as one space."""

from __future__ import annotations

from typing import Any

from jinja2 import DictLoader, Environment, StrictUndefined
from markupsafe import Markup

PARTS = """\
{% macro cell(c) %}
{% if c.kind == "device" %}
<td class="device"><span style="display:inline-block;width:10px;height:10px;border-radius:2px;background:{{ c.colour
}};margin-right:6px"></span>{{ c.text }}</td>
{%- elif c.kind == "series" %}
<td class="series">{{ c.text | replace(",", wbr) }}</td>
{%- else %}
<td{% if c.classes %} class="{{ c.classes }}"{% endif %}{% if c.title %} title="{{ c.title }}"{% endif %}>
{%- if c.kind == "badge" %}{{ badge(c.text) }}
{%- elif c.kind == "when" %}<span class="nb">{{ c.extra.date }}</span> <span class="nb">{{ c.extra.clock }}</span>
{%- elif c.kind == "compare" %}<span class="{{ c.extra.cls }}">{{ c.extra.percent }}</span> {{ c.extra.figure
}}<br><small>{{ c.extra.pair }}<br>{{ c.extra.counts }}</small>
{%- elif c.kind == "medians" %}{{ c.extra.pair }}<br><small>{{ c.extra.runs }}, p {{ c.extra.p }}</small>
{%- else %}{{ c.text }}{% endif %}</td>
{%- endif %}
{% endmacro %}

{% macro badge(state) %}<span class="badge {{ state }}">{{ state }}</span>{% endmacro %}

{% macro table(head, rows, cls="") %}
<div class="wrap"><table class="{{ cls }}"><thead><tr>
{%- for title, num in head %}{% if num %}<th class="num">{{ title }}</th>{% else %}<th>{{ title }}</th>{% endif %}
{%- endfor %}</tr></thead><tbody>
{%- for row in rows %}<tr{% if row.first %} class="first"{% endif %}>{% for c in row.cells %}{{ cell(c) }}{% endfor
%}</tr>{% endfor %}</tbody></table></div>
{%- endmacro %}
"""
"""The pieces every section uses: a table (a head of (title, numeric) pairs and rows of
:class:`sixdim.report.page.Row`), its cells by kind, and a verdict's badge."""

PAGE = """\
<!DOCTYPE html>
<html lang="en" data-errors="0" data-charts="{{ charts }}">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title>
<script>{{ error_script }}</script>
<style>{{ css }}</style>
<script type="text/javascript">{{ plotlyjs }}</script>
</head>
<body>
<main>
<div id="errors" hidden></div>
{{ header }}
{% for section in sections %}<section id="{{ section.id }}"><h2>{{ section.title }}</h2>{{ section.html }}</section>
{%- endfor %}

<footer>Made by <code>sixdim report --html</code> at {{ made }} UTC from <code>{{ path }}</code>. All times are UTC. \
The page is self-contained: plotly.js is embedded and nothing is fetched from the network.</footer>
</main>
<script>{{ done_script }}</script>
</body>
</html>
"""

HEADER = """\
{% from "parts" import table %}
<h1>sixdim report</h1>
<p class="subtitle">{{ subtitle }}</p>
{% if note %}
<div class="demo">{{ note }}</div>
{% endif %}
{% if since %}
<p class="note">Showing runs since {{ since }} UTC (<code>--since</code>); the verdicts and the change-point analysis \
use the whole history.</p>
{% endif %}
<div class="cards">
{%- for title, value, cls in cards %}<div class="card {{ cls }}"><div class="k">{{ title }}</div><div class="v">
{{- value }}</div></div>{% endfor %}</div>
{% for note in notes %}
<p class="note">{{ note }}</p>
{% endfor %}
<nav class="toc"><strong>Contents</strong> {% for id, title in toc %}{% if not loop.first %} \u00b7 {% endif
%}<a href="#{{ id }}">{{ title }}</a>{% endfor %}</nav>
{% if not runs %}
<p>The history has no runs yet.</p>
{%- else %}
<div class="cols"><div><h3>Devices</h3>{{ table(device_head, devices) }}</div><div><h3>Software versions</h3>
{%- if versions %}{{ table(version_head, versions) }}
{%- else %}<p class="note">No ok run in the shown time said its versions.</p>{% endif %}</div></div>
{%- endif %}"""

CHART = """<div class="chart">{{ body }}</div>"""

DIMENSIONS = """\
{% from "parts" import table %}
{% if not rows %}
<p>No ok run in the shown time.</p>
{%- else %}
<p>The latest <code>ok</code> value of each series. Where a workload has several shapes, a row summarises the shapes \
last measured under the device's newest software versions: speed and fraction of peak are their geometric mean (as \
the <code>sixdim_suite_*</code> series), power the mean, memory the largest, accuracy, linearity and stability the \
lowest. Speed is FLOP/s for kernels, samples/s for models, bytes/s for copies and all-reduce (algbw), or the time of \
one operation where a workload has no rate. \u2014 means the workload does not measure it.</p>
{{- table(head, rows, "dims") }}
{%- if shapes %}<details><summary>Every series: the latest ok run of each shape ({{ total | thousands }})</summary>\
<p class="note">{{ more }}</p>{{ table(shape_head, shapes, "dims") }}</details>{% endif %}
{%- endif %}"""

TRENDS = """\
{% if not charts %}
<p>No ok run with a speed figure in the shown time.</p>
{%- else %}
<p>The speed figure of every <code>ok</code> run, a line per device (the same colour in every chart). Dotted vertical \
lines mark software version changes, labelled with the versions either side. A workload with several shapes is drawn \
as the geometric mean over its shapes per suite run (each run divided by its shape's median, times the shapes' \
geometric mean); a long series as the median per time bucket, each point at the middle of its runs' times. The value \
axis spans at least \u00b15% of the data's middle, so run-to-run noise is not magnified into a trend. The buttons \
switch to power and memory where measured; drag to zoom, double-click to reset.</p>
{%- if not_charted %}<p class="note">{{ groups }} workload and precision groups; the {{ most }} that most need a look \
(a regression, then a change point, then the most runs) are charted. Not charted: {{ not_charted }}.</p>{% endif %}
{%- for chart in charts %}<h3 id="trend-{{ chart.number }}">{{ chart.title }}</h3><p class="note">{{ chart.note }}</p>
{{- chart.html }}{% endfor %}
{%- endif %}"""

VERSIONS = """\
{% from "parts" import table %}
{% if not compared %}
<p>No software version changed in the shown time{% if single %} ({{ single }}){% endif %}: there is nothing to \
compare.</p>
{%- else %}
<p>Each software version change, oldest first: the speed figure of every workload under the old versions and under \
the new ones (the median of each series' runs between the neighbouring changes, then the geometric mean over the \
series measured on both sides: the same devices and shapes, so a host that did not upgrade does not blur it) and the \
change. Components that changed at the same moment are one change: nothing tells their effects apart. A plain \
grouping by one component's version would not do: it would blame, say, a torch version for a driver change made \
while it was in use. A change of at least the minimum effect ({{ min_effect }}, or the workload's own in \
[regression.effects]) is coloured: red slower, green faster.</p>
{{- chart }}{{ table(head, rows, "versions") }}<ul class="note">
{%- for label, at in dates %}<li>{{ label }}: first run under the new versions {{ at }} UTC</li>{% endfor %}</ul>
{%- endif %}"""

REGRESSIONS = """\
{% from "parts" import table %}
<h3>Verdicts now</h3><p>The agent's live verdicts, computed as it restores them (each series' last runs): every \
watched figure in <span class="badge regression">regression</span>, <span class="badge suspicious">suspicious</span> \
or <span class="badge improvement">improvement</span>. The change is the median of the last 3 runs over the baseline \
(the median of the current segment's accepted runs). The likely cause is the agent's own \
(<code>sixdim_regression_cause</code>): the conditions recorded with the runs since the episode began against those \
before it (the most likely one shown; hover for the others). See docs/REGRESSIONS.md.</p>
{%- if verdicts %}{{ table(verdict_head, verdicts) }}
{%- if verdicts_total > most %}<p class="note">The first {{ most }} of {{ verdicts_total | thousands }} are \
listed.</p>{% endif %}
{%- elif not suspicious_total %}<p><span class="badge ok">ok</span> No series is in regression, suspicious or improved \
now.</p>{% endif %}
{%- if many_suspicious %}<details><summary>{{ suspicious_total | thousands }} suspicious verdicts (a few runs \
beyond the minimum effect, not yet a regression)</summary>{{ table(verdict_head, suspicious) }}
{%- if suspicious_total > most %}<p class="note">The first {{ most }} are listed.</p>{% endif %}</details>{% endif %}
<h3>Version changes that moved a figure</h3><p>The latest version change of each series (while among its last runs), \
judged on its own as the agent does: the first 10 runs after it against the last 10 before (Mann\u2013Whitney, \
p \u2264 0.01, and at least the minimum effect); figures that restate the speed are left out. The likely cause of a \
regression compares the conditions recorded with the last 20 ok runs before the change and the first 20 from it; the \
version change itself is named when no recorded condition explains it.</p>
{%- if changes %}{{ table(change_head, changes) }}
{%- else %}<p>None: no recent version change moved a watched figure.</p>{% endif %}
<h3>Change points in the history</h3><p>Every shift of the whole history found by the change-point analysis of \
<code>sixdim report regressions</code> (E-Divisive means, version changes as known break points, p \u2264 0.001 and \
at least the minimum effect), newest first, with the versions either side. For a series with a rate, time, fraction \
of peak, energy efficiency and p50 latency are left out: they restate its speed's or power's shift. The likely cause \
of a regression compares the conditions recorded with the 20 ok runs before the shift and the 20 from it, as \
<code>sixdim report regressions</code> does.</p>
{%- if shifts %}
{%- if shifts_total > most_shifts %}<p class="note">The newest {{ most_shifts }} of {{ shifts_total | thousands }} \
are listed; <code>sixdim report regressions</code> lists them all.</p>{% endif %}{{ table(shift_head, shifts) }}
{%- else %}<p>None found.</p>{% endif %}"""

TEMPLATES = {"parts": PARTS, "page": PAGE, "header": HEADER, "chart": CHART, "dimensions": DIMENSIONS,
             "trends": TRENDS, "versions": VERSIONS, "regressions": REGRESSIONS}

ENVIRONMENT = Environment(loader=DictLoader(TEMPLATES), autoescape=True, undefined=StrictUndefined,
                          trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
"""Autoescaping on for every template (whatever its name), and an undefined name an error, not an
empty string: a section that misses a value fails its test instead of showing nothing."""
ENVIRONMENT.globals["wbr"] = Markup(",<wbr>")  # a series' label may break after each of its commas
ENVIRONMENT.filters["thousands"] = "{:,}".format


def render(name: str, **context: Any) -> Markup:
    """The template ``name`` rendered with ``context``, as markup another template shows as it is."""
    return Markup(ENVIRONMENT.get_template(name).render(**context))
