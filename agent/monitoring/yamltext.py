"""YAML as the generated files are written: PyYAML, deterministic, readable.

The rule files, the PrometheusRule and the dashboards' ConfigMaps are data written with
``yaml.dump``: keys in the order given (not sorted), multi-line strings (PromQL, JSON) as literal
block scalars, no line folding, no anchors.  :func:`dump` reads its own output back and refuses a
text that does not give the same data, so a file is never written that Prometheus or kubectl would
read differently from what was meant.
"""

from __future__ import annotations

from typing import Any

import yaml

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML was built with it (the check reads back half a megabyte of
ConfigMaps), the pure-Python one elsewhere: they read the same documents."""


class _Dumper(yaml.SafeDumper):
    """SafeDumper with literal blocks for multi-line strings and without aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _string)


def dump(data: Any) -> str:
    """``data`` as YAML text (sequences indented under their key, as kubectl and promtool write them)."""
    text = yaml.dump(data, Dumper=_IndentedDumper, sort_keys=False, allow_unicode=True, width=1_000_000,
                     default_flow_style=False)
    if yaml.load(text, Loader=_Loader) != data:
        raise ValueError("the YAML written does not read back as the data given")
    return text


class _IndentedDumper(_Dumper):
    """Sequences inside mappings indented by two spaces (``groups:\\n  - name: ...``)."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def dump_all(documents: list[Any]) -> str:
    """Several documents, ``---`` between them (a multi-document file such as a list of ConfigMaps)."""
    return "---\n".join(dump(document) for document in documents)
