"""The ``sixdim`` command line: serve, run, list, dimensions, report, rules, dashboards.

Exit codes: 0 success; 1 a case failed, was incorrect or timed out (``run``: unsupported and skipped
cases are no failures); 2 bad usage or configuration, with a message naming the file, variable or flag, the key and what
was expected (an address ``serve`` cannot listen on included); 3 when ``run --no-wait``
finds a device another sixdim holds; 130 and 143 when
``run`` is stopped by SIGINT (Ctrl-C) or SIGTERM, after it has stopped its worker,
recorded and printed what finished.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import signal
import sys
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

from sixdim import __version__
from sixdim.config import ConfigError, Suite, add_insecure_permissions_flag, add_option_flags, load
from sixdim.config.schema import DEFAULT_TIMEOUT_SECONDS, MAX_SECONDS, parse_bool
from sixdim.config.suites import case_timeout, is_device_selector, preset_entries
from sixdim.core import catalog, exits, text
from sixdim.core.results import Interruption, RunRecord, plural, status_counts_text
from sixdim.report.format import binary
from sixdim.run.devices import DeviceError
from sixdim.run.instance import InstanceError
from sixdim.store.errors import HistoryError
from sixdim.workloads import registry
from sixdim.workloads.spec import ParamError, WorkloadSpec, brief

"""A command stopped by signal N exits with 128 + N, as a shell reports it: 130 for SIGINT, 143 for SIGTERM."""

_RUN_OPTION_KEYS = ("agent.history", "agent.state_dir", "agent.hostname", "agent.log_level", "agent.sample_hz",
                    "guard.enabled", "guard.max_utilization")


def _positive_seconds(text: str) -> float:
    """``--timeout``: a positive, finite number of seconds.  NaN is refused by name: it compares
    false with everything, so it would mean no timeout at all."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= MAX_SECONDS):
        raise argparse.ArgumentTypeError(
            f"expected a positive, finite number of seconds (at most {MAX_SECONDS}), got {text!r}")
    return value


def _positive_int(text: str) -> int:
    """``--nnodes``, ``--nproc-per-node``: a count of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def _endpoint(text: str) -> str:
    """``--rdzv-endpoint``: HOST:PORT, a host the other nodes can reach and a port from 1 to 65535."""
    host, _, port = text.rpartition(":")
    if not host.strip("[]") or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT with a port from 1 to 65535, got {text!r}")
    return text


def _embedded_default_summary() -> str:
    """What ``serve`` runs with no configuration file, read from ``agent/default.toml`` itself so
    that the help cannot drift from it."""
    from importlib import resources

    from sixdim.config.loader import tomllib

    document = tomllib.loads(resources.files("sixdim").joinpath("default.toml").read_text())
    parts = []
    for suite in document.get("suites", []):
        kinds = ", ".join(dict.fromkeys(name for name, _ in registry.SUITES.get(suite.get("preset", ""), [])))
        every = suite.get("interval_seconds")
        schedule = f"every {every / 60:g} minutes" if every else f"at cron '{suite.get('cron')}' (UTC)"
        at_start = ", starting at once" if suite.get("run_at_start") else ""
        if suite.get("on_change"):
            at_start += ", and at once after a version or setting change (or where it never ran)"
        if suite.get("confirm_per_hour"):
            at_start += (f", a slow or suspicious case run again alone (at most {suite['confirm_per_hour']} "
                         "an hour)")
        parts.append(f"the built-in {suite.get('preset', suite.get('name'))} suite ({kinds}) {schedule}{at_start}")
    return "; ".join(parts)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sixdim",
        description="GPU fleet benchmark agent: runs benchmark workloads on a schedule, keeps their results "
                    "in a SQLite history and exports them as Prometheus metrics. 'sixdim COMMAND --help' "
                    "explains each command.",
        epilog="Every agent option (listed under 'options (each also a SIXDIM_* variable ...)' in serve and run: "
               "--listen, --history, "
               "--guard, ...) is also a SIXDIM_* environment variable and a key of the TOML file; "
               "flags win over variables, variables over the file. Exit codes: 0 ok, 1 a run failed, "
               "2 bad usage or configuration, 3 'run --no-wait' found a device busy with another sixdim, "
               "130/143 'run' stopped by SIGINT/SIGTERM.")
    parser.add_argument("--version", action="version", version=f"sixdim {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    suite_names = ", ".join(registry.SUITES)

    serve = commands.add_parser(
        "serve", help="run the agent: scheduled suites, /metrics and /healthz",
        description="Run the agent: run the configured suites on their schedules on each of their devices, "
                    "record every result in the history, and serve /metrics (Prometheus) and /healthz. "
                    f"Without --config it uses the embedded default configuration: {_embedded_default_summary()}, "
                    "on every GPU (or the CPU where there is none), listening on 0.0.0.0:9480. In a file, "
                    "each [[suites]] table says what runs (preset: " + suite_names + "; or workloads) and when "
                    "(interval_seconds or cron); a cron suite waits for its time unless run_at_start = true. "
                    "SIGTERM or Ctrl-C stops the running worker and exits 0.",
        epilog="Exit codes: 0 stopped by a signal (with --check-config: the daemon would take the "
               "configuration); 2 bad configuration (a device this host lacks included), an address it cannot "
               "listen on, or another sixdim holding the state directory or the history.")
    serve.add_argument("--config", metavar="FILE", help="TOML configuration file [SIXDIM_CONFIG]")
    serve.add_argument("--check-config", action="store_true",
                       help="load the configuration and the web configuration as serve would (the file, the "
                            "SIXDIM_* variables, these flags; certificates; the suites' devices and cases), "
                            "print what it would run and exit: 0 if the daemon would take it, 2 with the error "
                            "if not. Starts nothing (no lock, history, port or worker), so it is safe beside "
                            "a running daemon: run it before 'systemctl reload sixdim'. Deliberately no "
                            "variable: one in an environment file would stop the service from serving")
    add_insecure_permissions_flag(serve)
    add_option_flags(serve)

    run = commands.add_parser(
        "run", help="run workloads once now, print the results and record them in history",
        description="Run workloads once, now, on each device; print a table (or JSON) and record the runs in "
                    "the history. The cases of consecutive workloads share one worker process per device (a "
                    "fresh one after a crash), each case with its own timeout. SIGTERM or Ctrl-C stops the "
                    "worker and everything it started, records and prints the cases that finished.",
        epilog="Exit codes: 0 ok; 1 a case failed, was incorrect or timed out (unsupported or skipped: no failure); "
               "2 bad usage or configuration; 3 a device is in use by another sixdim (with --no-wait); 130 stopped "
               "by SIGINT (Ctrl-C), 143 by SIGTERM.")
    run.add_argument("--config", metavar="FILE", help="TOML configuration file [SIXDIM_CONFIG]")
    add_insecure_permissions_flag(run)
    run.add_argument("--workload", "-w", action="append", metavar="NAME",
                     help="workload to run (repeatable; see 'sixdim list'); default: the suite's workloads")
    run.add_argument("--suite", metavar="NAME",
                     help=f"run a configured suite, or a built-in one: {suite_names} ('sixdim list' shows "
                          "what each runs; default: the first configured suite)")
    run.add_argument("--device", "-d", default="auto", metavar="auto|cpu|cuda:N",
                     help="where to run: every GPU, else the CPU (auto); the CPU; or one GPU (default: auto)")
    run.add_argument("--param", "-p", action="append", default=[], metavar="KEY=VALUE",
                     help="override a workload parameter, e.g. -p m=2048, -p precisions=fp32,bf16 (repeatable; "
                          "'sixdim list' shows each workload's parameters)")
    run.add_argument("--timeout", type=_positive_seconds, metavar="SECONDS",
                     help="stop a case (one shape, precision and pass) that takes longer; a positive number "
                          "(default: the suite's timeout_seconds, else 600; on the CPU that default of 600 "
                          "grows with the host's load: x (1 + 3 x load / threads), at most x10, threads being the "
                          "CPUs the run may use; a --timeout or timeout_seconds given is used as it is)")
    run.add_argument("--json", action="store_true", help="print the run records as JSON instead of a table")
    run.add_argument("--no-wait", action="store_true",
                     help="refuse (exit code 3, naming the holder) instead of waiting when another sixdim, such as "
                          "the daemon's scheduled suite, is running on the device [SIXDIM_NO_WAIT]")
    nodes = run.add_argument_group("node linearity (torchrun's c10d rendezvous; run the same command on every node)")
    nodes.add_argument("--nnodes", type=_positive_int, metavar="N",
                       help="nodes taking part, at least 1; implies --workload linearity")
    nodes.add_argument("--nproc-per-node", type=_positive_int, metavar="K",
                       help="ranks on each node (its GPUs; default 1)")
    nodes.add_argument("--rdzv-endpoint", type=_endpoint, metavar="HOST:PORT",
                       help="where the nodes meet (one node's address and a free port)")
    nodes.add_argument("--rdzv-id", metavar="ID", help="a name shared by the nodes of one run (default: sixdim)")
    run.add_argument("--ai-rank-log", metavar="FILE",
                     help="also write the runs' AI-Rank log lines (convergence and model training) to FILE")
    add_option_flags(run, _RUN_OPTION_KEYS)

    dims = commands.add_parser(
        "dimensions", help="rate raw observations by DeepSpark's six-dimension rules (JSON in, JSON out)",
        description="Read raw observations as a JSON object and print DeepSpark's six dimensions as JSON. "
                    "Input keys, each optional: speed (5+ per-epoch throughputs), accuracy (a number), "
                    'linearity ({"single": x, "multi": y, "count": n}), power_watts (samples), memory_mib '
                    "(samples), convergence (5+ converged values of complete runs). Output keys: speed, "
                    "accuracy, linearity, power_watts, memory_mib, stability; null where the input is absent.",
        epilog="Exit codes: 0 ok; 2 unreadable file, invalid JSON or values.")
    dims.add_argument("file", metavar="FILE", help="the JSON file, or - for standard input")

    listing = commands.add_parser(
        "list", help="list the workloads, their parameters and the built-in suites",
        description="List every workload with its parameters and their defaults on a CPU and on a GPU, then "
                    f"the built-in suites ({suite_names}) and what each runs.")
    listing.add_argument("--json", action="store_true", help="print the workloads as JSON")
    listing.add_argument("--shapes", action="store_true",
                         help="also print every shape of every set (GPU sizes; CPU runs divide them by 'scale')")

    from sixdim import generate  # each owns its command's arguments and work
    from sixdim.dashboards import command as dashboards_command
    from sixdim.fleet import command as fleet_command
    from sixdim.monitoring import rules
    from sixdim.report import command as report_command

    report_command.add_parser(commands)
    rules.add_parser(commands)
    dashboards_command.add_parser(commands)
    generate.add_parser(commands)
    fleet_command.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from sixdim.report.command import legacy_argv

    parser = build_parser()
    args = parser.parse_args(legacy_argv(sys.argv[1:] if argv is None else argv))
    try:
        return _dispatch(parser, args)
    except BrokenPipeError:  # `sixdim list | head`: the reader left, which is fine
        sys.stderr.close()
        return exits.OK
    except KeyboardInterrupt:  # Ctrl-C before a command installed its own handling: nothing to clean up
        print("sixdim: interrupted", file=sys.stderr)
        return exits.SIGNAL_BASE + signal.SIGINT


class _BriefFormatter(logging.Formatter):
    """``sixdim run``'s log lines, shaped like its errors (``sixdim: warning: NVML unavailable: ...``):
    a person at a terminal reads them, so no timestamp or logger name."""

    def __init__(self) -> None:
        super().__init__("sixdim: %(level)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        record.level = record.levelname.lower()
        return super().format(record)


def _setup_logging(command: str, level: str) -> None:
    """The daemon logs with timestamps and logger names (a journal); ``run`` briefly (a terminal)."""
    handler = logging.StreamHandler(sys.stderr)
    journal = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    handler.setFormatter(journal if command == "serve" else _BriefFormatter())
    logging.basicConfig(level=level.upper(), handlers=[handler])
    if level != "debug":  # APScheduler logs every job start and end at INFO
        logging.getLogger("apscheduler").setLevel(logging.WARNING)


def _dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.command is None:
        parser.print_help()
        return exits.USAGE
    try:
        if args.command == "list":
            return command_list(args)
        if args.command == "dimensions":
            return command_dimensions(args)
        if getattr(args, "handler", None) is not None:  # commands whose module runs them (report, rules)
            _setup_logging(args.command, "warning")  # their warnings shaped like their errors
            return args.handler(args)
        config = load(args.config, flags=args)
        checking = args.command == "serve" and args.check_config
        _setup_logging("check" if checking else args.command, config.log_level)
        if checking:
            from sixdim.daemon.check import check

            lines = ("  " + line for line in check(config))
            print("\n".join(["sixdim: configuration OK (nothing was started):", *lines]))
            return exits.OK
        if args.command == "serve":
            from sixdim.daemon.serve import serve

            return serve(config, lambda: load(args.config, flags=args))
        return command_run(args, config)
    except InstanceError as exc:  # another agent, or (--no-wait) a run holding the device
        print(f"sixdim: error: {exc}", file=sys.stderr)
        return exits.USAGE if args.command == "serve" else exits.BUSY
    except (ConfigError, DeviceError, HistoryError, ParamError, OSError) as exc:
        if isinstance(exc, BrokenPipeError):
            raise
        print(f"sixdim: error: {exc}", file=sys.stderr)
        return exits.USAGE


# ---------------------------------------------------------------------------- list

def command_list(args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps([{
            "name": spec.name, "description": spec.description,
            "shapes": spec.shapes_help,
            "params": [{"name": p.name, "type": p.kind.__name__, "cpu_default": p.cpu_default,
                        "cuda_default": p.cuda_default, "choices": list(p.choices) if p.choices else None,
                        "help": p.help} for p in spec.params],
        } for spec in registry.WORKLOADS.values()], indent=2))
        return exits.OK
    for spec in registry.WORKLOADS.values():
        print(f"{spec.name}: {spec.description}")
        if spec.shapes_help:
            print(f"  shapes: {spec.shapes_help}")
            _print_counts(spec)
        rows = [("parameter", "cpu default", "cuda default", "meaning")]
        for p in spec.params:
            meaning = p.help + (f" ({', '.join(map(str, p.choices))})" if p.choices else "")
            rows.append((p.name, _show(p.cpu_default), _show(p.cuda_default), meaning))
        print(text.table(rows, indent="  "))
        print()
        if args.shapes:
            _print_shapes(spec)
    print("built-in suites (sixdim run --suite NAME; preset = NAME in a [[suites]] table):")
    for name, entries in registry.SUITES.items():
        parts = [f"{workload}({', '.join(f'{k}={_show(v)}' for k, v in params.items())})"
                 for workload, params in entries]
        print(f"  {name}: {'; '.join(parts)}")
    return exits.OK


def _sets(spec: Any) -> list[tuple[str, dict[str, list[str]]]] | str:
    """Each shape set of the workload as a GPU runs it with the default parameters (``full``, both sets, left
    out): its shapes, each label once with the precisions that run it; or, for a workload whose cases come
    from the user (a command), why there is none."""
    names = [p for p in spec.params if p.name == "set"]
    sets = []
    for set_name in (names[0].choices if names else ("",)):
        if set_name == "full":
            continue
        try:
            cases = spec.cases({"set": set_name} if set_name else {}, "cuda")
        except ParamError as exc:
            return str(exc)
        by_label: dict[str, list[str]] = {}
        for case in cases:  # a shape's passes run the same precisions: each precision once
            precisions = by_label.setdefault(f"{case.shape} [{case.mode or '-'}]", [])
            if case.precision not in precisions:
                precisions.append(case.precision)
        sets.append((set_name, by_label))
    return sets


def _counted(by_label: dict[str, list[str]]) -> str:
    """``233 shapes, 160 per precision``: what ``list`` and ``list --shapes`` both print for a set.  A shape
    is a label of ``list --shapes`` (its transposes and layout included), counted once however many
    precisions and passes run it; where a precision runs fewer of them (int8 and fp8 GEMMs run every shape
    as NT, their one layout), how many each precision runs."""
    per_precision = Counter(p for precisions in by_label.values() for p in precisions)
    counts = sorted(set(per_precision.values()))
    shapes = plural(len(by_label), "shape")
    if not counts or counts == [len(by_label)]:
        return shapes
    each = str(counts[0]) if len(counts) == 1 else f"{counts[0]}\u2013{counts[-1]}"
    return f"{shapes}, {each} per precision"


def _print_counts(spec: Any) -> None:
    """Under the workload's own description of its sets (which counts shapes as DeepBench lists them), the
    counts of :func:`_counted`: the same text ``list --shapes`` heads each set with."""
    sets = _sets(spec)
    if isinstance(sets, str):
        return
    counts = "; ".join(f"{name}: {_counted(by_label)}" if name else _counted(by_label) for name, by_label in sets)
    print(f"  run on a GPU by default: {counts} (a shape: a line of 'sixdim list --shapes', its transposes and layout "
          f"included, once for all its precisions and passes)")


def _print_shapes(spec: Any) -> None:
    sets = _sets(spec)
    if isinstance(sets, str):  # a workload whose cases come from the user (a command)
        print(f"  cases: made from the parameters you give it ({sets})\n")
        return
    for set_name, by_label in sets:
        every_precision = set(p for precisions in by_label.values() for p in precisions)
        print(f"  {set_name or 'cases'} ({_counted(by_label)}):")
        for label, precisions in by_label.items():  # a shape only some precisions run says which
            only = "" if set(precisions) == every_precision else f" ({', '.join(precisions)} only)"
            print(f"    {label}{only}")
    print()


def _show(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


# ---------------------------------------------------------------------------- dimensions

def command_dimensions(args: argparse.Namespace) -> int:
    """Exit 0 with finite JSON, or 2 with one line on stderr: unreadable, not UTF-8, not JSON (NaN,
    nesting too deep and 5,000-digit numbers included), or values out of their range."""
    from sixdim.workloads.measure.dimensions import (
        MAX_INPUT_BYTES,
        DimensionsError,
        InputError,
        compute,
        read_json,
        to_json,
    )

    source = "<stdin>" if args.file == "-" else args.file
    try:
        if args.file == "-":
            stream = getattr(sys.stdin, "buffer", None)
            data = stream.read(MAX_INPUT_BYTES + 1) if stream is not None else \
                sys.stdin.read(MAX_INPUT_BYTES + 1).encode("utf-8", errors="surrogateescape")
        else:
            with open(args.file, "rb") as handle:
                data = handle.read(MAX_INPUT_BYTES + 1)
    except FileNotFoundError:
        print(f"sixdim: error: {source}: no such file", file=sys.stderr)
        return exits.USAGE
    except OSError as exc:
        print(f"sixdim: error: {source}: cannot read it: {exc.strerror or exc}", file=sys.stderr)
        return exits.USAGE
    try:
        output = to_json(compute(read_json(data)))
    except (InputError, DimensionsError) as exc:
        print(f"sixdim: error: {source}: {exc}", file=sys.stderr)
        return exits.USAGE
    print(output)
    return exits.OK


# ---------------------------------------------------------------------------- run

def _parse_params(pairs: list[str]) -> dict[str, str]:
    params = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ParamError(f"--param {brief(pair)}: expected KEY=VALUE, e.g. m=2048")
        params[key] = value
    return params


def _check_finite(overrides: dict[str, Any], specs: list[Any]) -> None:
    """Refuse 'nan', 'inf', '-Infinity' for a numeric parameter: NaN passes every minimum (it compares
    false), and neither is a setting a workload can use.  (Text parameters, a command's argv, may
    hold such words.)"""
    numeric = {p.name for spec in specs for p in spec.params if p.kind is float}
    for key, value in overrides.items():
        if key not in numeric or not isinstance(value, str):
            continue
        for item in value.split(","):
            try:
                finite = math.isfinite(float(item))
            except ValueError:
                continue  # not a number at all: the workload's own check says what it expected
            if not finite:
                pair = f"{key}={value}"
                shown = pair if pair.isprintable() and len(pair) <= 120 else brief(pair)
                raise ParamError(f"--param {shown}: expected a finite number, got {brief(item.strip())}")


class _StopOnSignal:
    """SIGINT (Ctrl-C) and SIGTERM stop ``sixdim run`` as they stop the daemon: through the executor's
    stop event, which stops the worker's whole process group (the worker runs in its own session, so a
    Ctrl-C at the terminal never reaches it: stopping it is ours to do), removes its temporary folder
    and records what finished.  :attr:`received` then gives the exit code."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, stop: threading.Event):
        self._stop = stop
        self._previous: dict[int, Any] = {}
        self.received: int | None = None

    def __enter__(self) -> _StopOnSignal:
        for number in self.SIGNALS:
            self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *_exc: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)

    def _handle(self, number: int, _frame: object) -> None:
        if self.received is None:
            self.received = number
            # os.write, not print: a handler may run in the middle of another write to stderr
            os.write(2, f"\nsixdim: {signal.Signals(number).name} received: stopping the running case\n".encode())
        self._stop.set()

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a command a signal ended."""
        return exits.SIGNAL_BASE + (self.received or 0)


def _node_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The linearity parameters of ``--nnodes`` and its companions, which mean nothing without it."""
    if not args.nnodes:
        given = [flag for flag, value in (("--nproc-per-node", args.nproc_per_node),
                                          ("--rdzv-endpoint", args.rdzv_endpoint), ("--rdzv-id", args.rdzv_id))
                 if value is not None]
        if given:
            raise ParamError(f"{', '.join(given)}: only with --nnodes (node linearity)")
        return {}
    return {"nnodes": args.nnodes, "nproc_per_node": args.nproc_per_node or 1,
            "rdzv_endpoint": args.rdzv_endpoint or "", "rdzv_id": args.rdzv_id or "sixdim"}


def _env_flag(variable: str, flag: str) -> bool:
    """A flag's environment variable (true or false); anything else is a configuration error."""
    raw = os.environ.get(variable)
    if raw is None:
        return False
    try:
        return parse_bool(raw)
    except ValueError:
        raise ConfigError(f"environment variable {variable}", flag, "true or false", raw) from None


def command_run(args: argparse.Namespace, config: Any) -> int:
    from sixdim.daemon import app
    from sixdim.run import devices

    if not is_device_selector(args.device):
        raise DeviceError(f"--device {args.device!r}: expected 'auto', 'cpu' or 'cuda:N'")
    suites = {s.name: s for s in config.suites}
    if args.suite is not None and args.suite not in suites:
        if args.suite not in registry.SUITES:
            raise ConfigError(config.source, "suites", f"a configured suite or a built-in one "
                              f"({', '.join(registry.SUITES)})", args.suite,
                              detail=f"configured: {', '.join(suites) or 'none'}")
        suites[args.suite] = Suite(name=args.suite, workloads=preset_entries(args.suite), interval_seconds=1.0)
    suite = suites[args.suite] if args.suite else (config.suites[0] if config.suites else None)
    overrides: dict[str, Any] = _parse_params(args.param)
    nodes = _node_overrides(args)
    overrides.update(nodes)
    if nodes:
        args.workload = args.workload or ["linearity"]
    entries: list[tuple[WorkloadSpec, dict[str, Any]]]
    if args.workload:
        entries = [(registry.get(name), {}) for name in args.workload]
    elif suite is not None:
        entries = [(registry.get(e.name), dict(e.params)) for e in suite.workloads]
    else:
        entries = [(registry.get("gemm"), {})]
    _check_finite(overrides, [spec for spec, _ in entries])
    for key in overrides:
        if not any(p.name == key for spec, _ in entries for p in spec.params):
            raise ParamError(f"--param {key}: none of the workloads to run ({', '.join(s.name for s, _ in entries)}) "
                             f"has a parameter {key!r}; 'sixdim list' shows them")
    for spec, params in entries:  # validate every override before running anything
        params.update({key: value for key, value in overrides.items() if any(p.name == key for p in spec.params)}
                      if len(entries) > 1 else overrides)
        spec.cases(params, "cpu")
    timeout = args.timeout or (suite.timeout_seconds if suite else DEFAULT_TIMEOUT_SECONDS)
    timeout_given = args.timeout is not None or (suite is not None and suite.timeout_given)

    no_wait = args.no_wait or _env_flag("SIXDIM_NO_WAIT", "--no-wait")
    from sixdim.collectors.nvml import NvmlCollector

    nvml = NvmlCollector(config.hostname)
    if nodes and args.device == "auto":  # one job per node, over all its GPUs
        args.device = "cuda:0" if nvml.availability().available and nvml.gpus else "cpu"
    targets = devices.resolve([args.device], nvml, where="--device")  # before any file is made
    parts = app.build(config, command="sixdim run", wait_for_devices=not no_wait, nvml=nvml)
    parts.executor.recover_left_behind()
    progress = text.Progress(sys.stderr)
    records: list[RunRecord] = []
    with _StopOnSignal(parts.executor.stop) as interrupt:
        for device in targets:
            if parts.executor.stop.is_set():
                break  # the devices not begun are not run, nor recorded as skipped
            prefix = f"[{', '.join(dict.fromkeys(spec.name for spec, _ in entries))} on {device.name}] "
            progress.update(prefix + "starting worker")
            def show(message: str, prefix: str = prefix) -> None:
                progress.update(prefix + message)

            seconds, why = case_timeout(timeout, device.type, timeout_given)
            if seconds != timeout:
                logging.getLogger("sixdim").info("%stimeout %g s per case (%s)", prefix, seconds, why)
            records.extend(parts.executor.execute_many(entries, device, suite=args.suite or "", timeout=seconds,
                                                       on_progress=show))
            progress.clear()
        parts.history.retry_pending()
        kept = parts.executor.kept()  # the worker records that keep what the history could not take
        waiting = parts.history.waiting()
        parts.history.close()
        interruptions = [run.interruption for device in targets
                         if (run := parts.executor.progress.last(args.suite or "", device)) is not None
                         and run.interruption is not None]
        _report(args, config, records, interruptions)
        in_records = sum(count for _, count in kept)
        total = max(waiting.results, in_records + waiting.spooled)
        if total:
            places = [f"{folder} ({count})" for folder, count in kept]
            places += [f"{parts.history.spool_path} ({waiting.spooled})"] if waiting.spooled else []
            lost = total - in_records - waiting.spooled
            print(f"sixdim: warning: {total} result(s) could not be written to {config.history} "
                  f"({waiting.reason or 'see the warning above'}); they are kept in {', '.join(places) or 'memory'}"
                  f"{f' ({lost} in memory only, lost)' if lost > 0 else ''} and written by the next sixdim that "
                  f"opens this history", file=sys.stderr)
    if interrupt.received is not None:
        print(f"sixdim: stopped by {signal.Signals(interrupt.received).name}; the cases above that finished are "
              f"recorded", file=sys.stderr)
        return interrupt.exit_code
    return exits.FAILED if any(r.status in catalog.FAILURE_STATUSES for r in records) else exits.OK


def _report(args: argparse.Namespace, config: Any, records: list[RunRecord],
            interruptions: list[Interruption] | None = None) -> None:
    """The runs' AI-Rank log (if asked for), then the table and its summary, or JSON, on stdout."""
    if args.ai_rank_log:
        with open(args.ai_rank_log, "w") as handle:
            for record in records:
                for line in record.details.get("ai_rank_log", []):
                    handle.write(line + "\n")
    if args.json:
        print(json.dumps([r.to_dict() for r in records], indent=2, default=str))
    else:
        print(_results_table(records))
        print("\n" + _summary(records, interruptions or []))
        print(f"recorded in {config.history}")


def _summary(records: list[RunRecord], interruptions: list[Interruption]) -> str:
    """The cases by outcome, failures apart from the cases that did not run (``unsupported``,
    ``skipped``: never failures), and what an interruption left, once per device."""
    left = sum(i.cases_left for i in interruptions)
    lines = [status_counts_text(Counter(r.status for r in records), left)]
    for i in interruptions:
        running = f"; it stopped {i.running}" if i.running else ""
        lines.append(f"interrupted on {i.device}: {plural(i.cases_left, 'case')} of {i.cases_done + i.cases_left} "
                     f"not run ({', '.join(i.workloads)}){running}; recorded once, not as runs")
    return "\n".join(lines)


def _si(value: float | None, unit: str) -> str:
    return "-" if value is None else text.si(value, unit, digits=3)


def _bytes(value: float | None) -> str:
    """Memory as the HTML report and ``sixdim report`` show it, with binary prefixes (``321 MiB``): one formatter."""
    return "-" if value is None else binary(value)


def _rate(r: RunRecord) -> str:
    """The record's main rate: FLOP/s for kernels (OP/s for integer ones), bytes/s for copies,
    samples/s for models."""
    integer = r.precision in registry.INTEGER_PRECISIONS
    for figure in catalog.RATES:
        if r.value(figure) is not None:
            return _si(r.value(figure), catalog.figure_unit(figure, integer))
    return "-"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 3600:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"
    if seconds >= 100:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} us"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


TRAINING_COLUMNS: tuple[tuple[str, str, Any], ...] = tuple(
    (figure, catalog.figure_name(figure), show) for figure, show in (
        ("accuracy", _number), ("time_to_train_seconds", _duration), ("linearity_ratio", _number),
        ("stability_ratio", _number)))
"""Figures of training runs (convergence, a user's command, linearity), each a column only when a
row has it, so a kernel table stays as narrow as before."""


def _results_table(records: list[RunRecord]) -> str:
    extra = [(figure, title, show) for figure, title, show in TRAINING_COLUMNS
             if any(r.value(figure) is not None for r in records)]
    rows = [("workload", "device", "precision", "shape", "mode", "pass", "status", "time", "rate",
             *(title for _, title, _ in extra), "power", "memory", "device memory")]
    notes = []
    for r in records:
        rows.append((r.workload, r.device, r.precision, r.shape, r.mode or "-", r.kernel_pass, r.status,
                     _duration(r.value("seconds")), _rate(r), *(show(r.value(figure)) for figure, _, show in extra),
                     _si(r.value("power_watts"), "W"), _bytes(r.value("memory_bytes")),
                     _bytes(r.value("device_memory_bytes"))))
        if r.reason:
            notes.append(f"{r.workload} on {r.device}, {r.status}: {r.reason}")
    counted: dict[str, int] = {}
    for note in notes:
        counted[note] = counted.get(note, 0) + 1
    lines = [note + (f" (x{n})" if n > 1 else "") for note, n in counted.items()]
    return text.table(rows) + ("\n\n" + "\n".join(lines) if lines else "")


if __name__ == "__main__":
    sys.exit(main())
