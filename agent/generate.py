"""``sixdim generate``: every generated monitoring file, from one set of options, in one command.

The rules file (recording rules and alerts), the same rules as a PrometheusRule, the dashboards'
JSON and their ConfigMaps all follow from the metric catalog and the options of
:mod:`sixdim.monitoring.options`.  Generating them together is how they stay in agreement: a
dashboard panel that explains SixdimSlowerThanPeers shows the threshold the alert fires at.

``sixdim generate`` writes them where a checkout of sixdim keeps them (the committed copies, made
with the defaults); ``--root DIR`` writes the same tree under DIR (an operator's tuned copy);
``--check`` writes nothing and exits 1 naming each file that is not what it would write (CI keeps the
committed copies current with it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sixdim.core import exits
from sixdim.core.files import write_atomically
from sixdim.dashboards import command as dashboards
from sixdim.monitoring import options as monitoring_options
from sixdim.monitoring import rules
from sixdim.monitoring.options import Options


def artefacts(options: Options) -> dict[str, str]:
    """Every generated file's text by its path in a checkout, in a stable order."""
    out = {rules.COMMITTED: rules.render(options), rules.COMMITTED_PROMETHEUS_RULE: rules.prometheus_rule(options)}
    texts = dashboards.files(options)  # built once, for the JSON files and their ConfigMaps
    out.update({f"{dashboards.COMMITTED_DIR}/{name}": text for name, text in texts.items()})
    out[dashboards.COMMITTED_CONFIGMAP] = dashboards.configmap(options, texts)
    return out


def stale(root: Path, options: Options) -> list[str]:
    """The paths under ``root`` whose content is not what :func:`artefacts` gives (missing included)."""
    return [path for path, text in artefacts(options).items()
            if not (root / path).is_file() or (root / path).read_text() != text]


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Register ``generate`` on the CLI's subcommands."""
    parser = commands.add_parser(
        "generate", help="write the rules, the PrometheusRule, the dashboards and their ConfigMaps in one go",
        description="Write every generated monitoring file from one set of options, so the alerts and the "
                    f"dashboard panels that explain them agree: {rules.COMMITTED}, {rules.COMMITTED_PROMETHEUS_RULE}, "
                    f"{dashboards.COMMITTED_DIR}/*.json and {dashboards.COMMITTED_CONFIGMAP} (paths "
                    "under --root, by default the current folder, as a checkout of sixdim keeps them). --check "
                    "writes nothing and lists the files that differ.",
        epilog="Exit codes: 0 written (or, with --check, all current); 1 with --check, some file is stale; 2 bad "
               "usage or a file it cannot write.")
    parser.add_argument("--root", metavar="DIR", default=".",
                        help="the folder the paths are relative to (default: the current folder; made if missing)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 naming each file that is not what would be written")
    monitoring_options.add_arguments(parser)
    parser.set_defaults(handler=command_generate)


def command_generate(args: argparse.Namespace) -> int:
    root = Path(args.root)
    if root.exists() and not root.is_dir() or args.check and not root.is_dir():
        # a missing folder is made when writing (as rules --out and dashboards --out do); --check writes nothing
        print(f"sixdim: error: --root {args.root}: {'not a folder' if root.exists() else 'no such folder'}",
              file=sys.stderr)
        return exits.USAGE
    try:
        options = monitoring_options.from_args(args)
        files = artefacts(options)
    except ValueError as exc:
        print(f"sixdim: error: {exc}", file=sys.stderr)
        return exits.USAGE
    if args.check:
        behind = stale(root, options)
        for path in behind:
            print(f"stale: {path}")
        if behind:
            print(f"sixdim: {len(behind)} of {len(files)} generated files are stale: run 'sixdim generate"
                  f"{' ' + options.as_flags() if options != Options() else ''}'", file=sys.stderr)
            return exits.FAILED
        print(f"all {len(files)} generated files are current")
        return exits.OK
    for path, text in files.items():
        try:
            write_atomically(root / path, text)
        except OSError as exc:
            print(f"sixdim: error: cannot write {root / path}: {exc.strerror or exc}", file=sys.stderr)
            return exits.USAGE
    print(f"wrote {len(files)} files under {root}")
    return exits.OK
