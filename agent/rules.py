"""``sixdim rules``: the Prometheus alert rules, generated from the catalog (placeholder, being written)."""

from __future__ import annotations

import argparse


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Register ``rules`` on the CLI's subcommands."""
