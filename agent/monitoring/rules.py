"""``sixdim rules``: the Prometheus rule files, generated from the metric catalog.

One file holds the recording rules (:mod:`sixdim.monitoring.recording`) and the alerts
(:mod:`sixdim.monitoring.alerts`), written as YAML by PyYAML (:mod:`sixdim.monitoring.yamltext`):
the same options always give the same file.  ``--prometheus-rule FILE`` writes the same groups as a
prometheus-operator ``PrometheusRule`` object (``spec.groups``), committed as
``deploy/k8s/base/prometheusrule.yaml`` for the Kubernetes deployment.  ``sixdim generate``
(:mod:`sixdim.generate`) writes both with the dashboards, from the same options.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from sixdim.core import exits
from sixdim.core.files import STANDARD_OUTPUT, write_outputs
from sixdim.monitoring import options as monitoring_options
from sixdim.monitoring.options import Options

# The rules themselves (alerts, recording rules) and the YAML writer are imported where rules are made:
# every `sixdim` command builds this module's parser, and none but these should pay for them.

COMMITTED = "deploy/prometheus/sixdim-rules.yml"
"""Where the rules generated with the default options are committed (a test keeps it current)."""
COMMITTED_PROMETHEUS_RULE = "deploy/k8s/base/prometheusrule.yaml"
"""Where the same rules are committed as a prometheus-operator PrometheusRule (a test keeps it current)."""
REGENERATE = "sixdim generate"
PROMETHEUS_RULE_API_VERSION = "monitoring.coreos.com/v1"
PROMETHEUS_RULE_NAME = "sixdim"


def groups(options: Options | None = None) -> list[dict[str, Any]]:
    """The rule groups as data (what :func:`render` writes): the recording rules first, then the alerts."""
    from sixdim.monitoring import recording
    from sixdim.monitoring.alerts import Alerts

    options = options or Options()
    return [recording.group(options), *Alerts(options).groups()]


def render(options: Options | None = None) -> str:
    """The rules file for the options (the defaults without any): deterministic YAML text."""
    options = options or Options()
    out = [
        "# Prometheus rules for the sixdim agents (recording rules and alerts), generated from the metric",
        "# catalog by `sixdim rules`. Do not edit: change agent/monitoring/ (or the options) and regenerate the",
        f"# committed copies with `{REGENERATE}`.",
        f"# Options: {options.as_flags()}",
        "# Runbooks: docs/ALERTS.md. Alertmanager example: deploy/alertmanager/alertmanager.yml.",
    ]
    from sixdim.monitoring import yamltext

    return "\n".join(out) + "\n" + yamltext.dump({"groups": groups(options)})


def prometheus_rule(options: Options | None = None) -> str:
    """The same rules as a prometheus-operator ``PrometheusRule`` object: ``spec.groups`` holds exactly
    the groups :func:`render` writes, so the Kubernetes deployment's alerts never drift from the rules
    file.  No namespace: kustomize (or ``kubectl apply -n``) gives it one."""
    options = options or Options()
    out = [
        "# The sixdim rules (recording rules and alerts) as a prometheus-operator PrometheusRule, generated",
        "# from the metric catalog by `sixdim rules --prometheus-rule FILE`. Do not edit: change",
        f"# agent/monitoring/ (or the options) and regenerate the committed copies with `{REGENERATE}`.",
        f"# Options: {options.as_flags()}",
        f"# spec.groups are exactly the groups of {COMMITTED} (a test checks both files).",
        "# Runbooks: docs/ALERTS.md. Prometheus selects it by its ruleSelector (kube-prometheus-stack: the",
        "# release label, unless ruleSelectorNilUsesHelmValues is false).",
    ]
    document = {
        "apiVersion": PROMETHEUS_RULE_API_VERSION,
        "kind": "PrometheusRule",
        "metadata": {
            "name": PROMETHEUS_RULE_NAME,
            "labels": {"app.kubernetes.io/name": "sixdim", "app.kubernetes.io/component": "alert-rules"},
        },
        "spec": {"groups": groups(options)},
    }
    from sixdim.monitoring import yamltext

    return "\n".join(out) + "\n" + yamltext.dump(document)


# ----------------------------------------------------------------------------- the command

def add_parser(commands: argparse._SubParsersAction) -> None:
    """Register ``rules`` on the CLI's subcommands."""
    rules = commands.add_parser(
        "rules", help="print the Prometheus rules (recording rules and alerts) generated from the metric catalog",
        description="Print (or write with --out) the Prometheus rules for sixdim agents, generated from "
                    "the metric catalog, so their metric and label names always match what the agent exports: "
                    "recording rules (the peer ratios the alerts and the dashboards read) and alerting rules. "
                    "--prometheus-rule writes the same groups as a prometheus-operator PrometheusRule object. "
                    f"The copies generated with the defaults are committed as {COMMITTED} and "
                    f"{COMMITTED_PROMETHEUS_RULE}. Each alert carries a "
                    "severity label and summary, description and runbook_url annotations; the runbooks are in "
                    "docs/ALERTS.md. Check the output with 'promtool check rules FILE'. The options are the "
                    "same as 'sixdim dashboards' takes: give both the same, or use 'sixdim generate'. Durations "
                    "are such as 90m, 2h, 1d12h or 1.5d (whole seconds).",
        epilog="Exit codes: 0 ok; 2 a bad option value, or a file --out or --prometheus-rule cannot write.")
    rules.add_argument("--out", metavar="FILE",
                       help="write the rules to FILE (its folder is created if missing; an existing FILE must be a "
                            "regular file, which is replaced whole) instead of standard output; - is standard output")
    rules.add_argument("--prometheus-rule", metavar="FILE",
                       help="write the same rule groups as a prometheus-operator PrometheusRule "
                            "(monitoring.coreos.com/v1) to FILE, for Kubernetes (its folder is created if missing); "
                            "with --out too, both files are written, and with either nothing is printed; - is standard "
                            "output")
    monitoring_options.add_arguments(rules)
    rules.set_defaults(handler=command_rules)


def command_rules(args: argparse.Namespace) -> int:
    try:
        options = monitoring_options.from_args(args)
        text = render(options)
        crd_text = prometheus_rule(options) if args.prometheus_rule else ""
    except ValueError as exc:
        print(f"sixdim: error: {exc}", file=sys.stderr)
        return exits.USAGE
    if not args.out and not args.prometheus_rule:
        sys.stdout.write(text)
        return exits.OK
    if args.out == args.prometheus_rule == STANDARD_OUTPUT:
        print("sixdim: error: --out - and --prometheus-rule -: only one of them can go to standard output",
              file=sys.stderr)
        return exits.USAGE
    error = write_outputs([(flag, path, content) for flag, path, content in (
        ("--out", args.out, text), ("--prometheus-rule", args.prometheus_rule, crd_text)) if path])
    if error is not None:
        print(f"sixdim: error: {error}", file=sys.stderr)
        return exits.USAGE
    return exits.OK
