"""``sixdim report regressions``: change points over the whole history (placeholder, being written)."""

from __future__ import annotations

import argparse


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Register ``report`` (``report regressions``) on the CLI's subcommands."""
