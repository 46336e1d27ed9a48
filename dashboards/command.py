"""``sixdim dashboards``: write the Grafana dashboards' JSON (placeholder, being written)."""

from __future__ import annotations

import argparse


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Register ``dashboards`` on the CLI's subcommands."""
