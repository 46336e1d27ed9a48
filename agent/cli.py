"""The ``sixdim`` command line: serve, run, list.

Exit codes: 0 success; 1 a run failed or timed out (``run``); 2 bad usage or
configuration, with a message naming the file or variable, the key and what
was expected.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any, Sequence

from agent import __version__
from agent.config import ConfigError, Suite, preset_entries, add_option_flags, is_device_selector, load
from agent.devices import DeviceError
from agent.history import HistoryError
from agent.results import RunRecord
from workloads import registry
from workloads.spec import ParamError

EXIT_OK, EXIT_RUN_FAILED, EXIT_USAGE = 0, 1, 2

_RUN_OPTION_KEYS = ("agent.history", "agent.hostname", "agent.log_level", "agent.sample_hz",
                    "guard.enabled", "guard.max_utilization")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sixdim",
        description="GPU fleet benchmark agent: runs benchmark workloads on a schedule, keeps their results "
                    "in a SQLite history and exports them as Prometheus metrics.",
        epilog="Every option is also a SIXDIM_* environment variable and a key of the TOML file; "
               "flags win over variables, variables over the file. Exit codes: 0 ok, 1 a run failed, "
               "2 bad usage or configuration.")
    parser.add_argument("--version", action="version", version=f"sixdim {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = commands.add_parser(
        "serve", help="run the agent: scheduled suites, /metrics and /healthz",
        description="Run the agent. Without --config it uses the embedded default: a quick GEMM suite every "
                    "15 minutes on every GPU (or the CPU), listening on 0.0.0.0:9480.")
    serve.add_argument("--config", metavar="FILE", help="TOML configuration file [SIXDIM_CONFIG]")
    add_option_flags(serve)

    run = commands.add_parser(
        "run", help="run workloads once now, print the results and record them in history",
        description="Run workloads once, now, in a child process each; print a table (or JSON) and record "
                    "the runs in the history. Exit code 1 if any run failed or timed out.")
    run.add_argument("--config", metavar="FILE", help="TOML configuration file [SIXDIM_CONFIG]")
    run.add_argument("--workload", "-w", action="append", metavar="NAME",
                     help="workload to run (repeatable; see 'sixdim list'); default: the suite's workloads")
    run.add_argument("--suite", metavar="NAME",
                     help="run a configured suite, or a built-in one: quick, full, inference "
                          "(default: the first configured suite)")
    run.add_argument("--device", "-d", default="auto", metavar="auto|cpu|cuda:N",
                     help="where to run: every GPU, else the CPU (auto); the CPU; or one GPU (default: auto)")
    run.add_argument("--param", "-p", action="append", default=[], metavar="KEY=VALUE",
                     help="override a workload parameter, e.g. -p m=2048 (repeatable)")
    run.add_argument("--timeout", type=float, metavar="SECONDS",
                     help="stop a case (one shape, precision and pass) that takes longer "
                          "(default: the suite's timeout_seconds)")
    run.add_argument("--json", action="store_true", help="print the run records as JSON")
    nodes = run.add_argument_group("node linearity (torchrun's c10d rendezvous; run the same command on every node)")
    nodes.add_argument("--nnodes", type=int, metavar="N", help="nodes taking part; implies --workload linearity")
    nodes.add_argument("--nproc-per-node", type=int, metavar="K", help="ranks on each node (its GPUs; default 1)")
    nodes.add_argument("--rdzv-endpoint", metavar="HOST:PORT", help="where the nodes meet (one node's address)")
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
                    "accuracy, linearity, power_watts, memory_mib, stability; null where the input is absent.")
    dims.add_argument("file", metavar="FILE", help="the JSON file, or - for standard input")

    listing = commands.add_parser("list", help="list the workloads and their parameters",
                                  description="List the workloads, their parameters and defaults per device.")
    listing.add_argument("--json", action="store_true", help="print as JSON")
    listing.add_argument("--shapes", action="store_true",
                         help="also print every shape of every set (GPU sizes; CPU runs divide them by 'scale')")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _dispatch(parser, args)
    except BrokenPipeError:  # `sixdim list | head`: the reader left, which is fine
        sys.stderr.close()
        return EXIT_OK


def _dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        if args.command == "list":
            return command_list(args)
        if args.command == "dimensions":
            return command_dimensions(args)
        config = load(args.config, flags=args)
        logging.basicConfig(level=config.log_level.upper(), stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        if config.log_level != "debug":  # APScheduler logs every job start and end at INFO
            logging.getLogger("apscheduler").setLevel(logging.WARNING)
        if args.command == "serve":
            from agent.serve import serve

            return serve(config)
        return command_run(args, config)
    except (ConfigError, DeviceError, HistoryError, ParamError, OSError) as exc:
        if isinstance(exc, BrokenPipeError):
            raise
        print(f"sixdim: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


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
        return EXIT_OK
    for spec in registry.WORKLOADS.values():
        print(f"{spec.name}: {spec.description}")
        if spec.shapes_help:
            print(f"  shapes: {spec.shapes_help}")
        rows = [("parameter", "cpu default", "cuda default", "meaning")]
        for p in spec.params:
            meaning = p.help + (f" ({', '.join(map(str, p.choices))})" if p.choices else "")
            rows.append((p.name, _show(p.cpu_default), _show(p.cuda_default), meaning))
        print(_table(rows, indent="  "))
        print()
        if args.shapes:
            _print_shapes(spec)
    print("built-in suites (sixdim run --suite NAME; preset = NAME in a [[suites]] table):")
    for name, entries in registry.SUITES.items():
        parts = [f"{workload}({', '.join(f'{k}={_show(v)}' for k, v in params.items())})" for workload, params in entries]
        print(f"  {name}: {'; '.join(parts)}")
    return EXIT_OK


def _print_shapes(spec: Any) -> None:
    names = [p for p in spec.params if p.name == "set"]
    for set_name in (names[0].choices if names else ("",)):
        if set_name == "full":
            continue
        overrides = {"set": set_name} if set_name else {}
        try:
            cases = spec.cases(overrides, "cuda")
        except ParamError as exc:  # a workload whose cases come from the user (a command)
            print(f"  cases: given by its parameters ({exc})\n")
            return
        every_precision = list(dict.fromkeys(c.precision for c in cases))
        by_label: dict[str, list[str]] = {}
        for case in cases:
            by_label.setdefault(f"{case.shape} [{case.mode or '-'}]", []).append(case.precision)
        print(f"  {set_name or 'cases'} ({len(by_label)}):")
        for label, precisions in by_label.items():  # a shape only some precisions run says which
            only = "" if len(precisions) == len(every_precision) else f" ({', '.join(precisions)} only)"
            print(f"    {label}{only}")
    print()


def _show(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


# ---------------------------------------------------------------------------- dimensions

def command_dimensions(args: argparse.Namespace) -> int:
    from workloads.dimensions import DimensionsError, compute

    source = "<stdin>" if args.file == "-" else args.file
    try:
        if args.file == "-":
            text = sys.stdin.read()
        else:
            with open(args.file) as handle:
                text = handle.read()
    except FileNotFoundError:
        print(f"sixdim: error: {source}: no such file", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = compute(json.loads(text))
    except json.JSONDecodeError as exc:
        print(f"sixdim: error: {source}: not valid JSON: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except DimensionsError as exc:
        print(f"sixdim: error: {source}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(result, indent=2))
    return EXIT_OK


# ---------------------------------------------------------------------------- run

def _parse_params(pairs: list[str]) -> dict[str, str]:
    params = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ParamError(f"--param {pair!r}: expected KEY=VALUE, e.g. m=2048")
        params[key] = value
    return params


def command_run(args: argparse.Namespace, config: Any) -> int:
    from agent import app, devices

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
    overrides = _parse_params(args.param)
    if args.nnodes:
        overrides.update({"nnodes": args.nnodes, "nproc_per_node": args.nproc_per_node or 1,
                          "rdzv_endpoint": args.rdzv_endpoint or "", "rdzv_id": args.rdzv_id or "sixdim"})
        args.workload = args.workload or ["linearity"]
        if args.device == "auto":
            args.device = "cpu" if _host_has_no_gpu() else "cuda:0"  # one job per node, over all its GPUs
    if args.workload:
        entries = [(registry.get(name), {}) for name in args.workload]
    elif suite is not None:
        entries = [(registry.get(e.name), dict(e.params)) for e in suite.workloads]
    else:
        entries = [(registry.get("gemm"), {})]
    for key in overrides:
        if not any(p.name == key for spec, _ in entries for p in spec.params):
            raise ParamError(f"--param {key}: none of the workloads to run ({', '.join(s.name for s, _ in entries)}) "
                             f"has a parameter {key!r}; 'sixdim list' shows them")
    for spec, params in entries:  # validate every override before running anything
        params.update({key: value for key, value in overrides.items() if any(p.name == key for p in spec.params)}
                      if len(entries) > 1 else overrides)
        spec.cases(params, "cpu")
    timeout = args.timeout or (suite.timeout_seconds if suite else 600.0)

    parts = app.build(config)
    targets = devices.resolve([args.device], parts.nvml)
    progress = _Progress(sys.stderr)
    records: list[RunRecord] = []
    for device in targets:
        progress.prefix = f"{', '.join(dict.fromkeys(spec.name for spec, _ in entries))} on {device.name}"
        progress.update("starting worker")
        records.extend(parts.executor.execute_many(entries, device, suite=args.suite or "", timeout=timeout,
                                                   on_progress=progress.update))
        progress.clear()
    parts.history.close()
    if args.ai_rank_log:
        with open(args.ai_rank_log, "w") as handle:
            for record in records:
                for line in record.details.get("ai_rank_log", []):
                    handle.write(line + "\n")
    if args.json:
        print(json.dumps([r.to_dict() for r in records], indent=2, default=str))
    else:
        print(_results_table(records))
        print(f"\nrecorded in {config.history}")
    return EXIT_RUN_FAILED if any(r.status in ("failed", "timeout") for r in records) else EXIT_OK


def _host_has_no_gpu() -> bool:
    from collectors.nvml import NvmlCollector

    nvml = NvmlCollector("probe")
    return not (nvml.availability().available and nvml.gpus)


class _Progress:
    """One status line on a terminal (stderr), rewritten in place; silent when not a terminal."""

    def __init__(self, stream: Any):
        self._stream = stream
        self._tty = stream.isatty()
        self.prefix = ""

    def update(self, message: str) -> None:
        if self._tty:
            self._stream.write(f"\r\033[K[{self.prefix}] {message}")
            self._stream.flush()

    def clear(self) -> None:
        if self._tty:
            self._stream.write("\r\033[K")
            self._stream.flush()


def _si(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def _rate(r: RunRecord) -> str:
    """The record's main rate: FLOP/s for kernels, bytes/s for copies, samples/s for models."""
    for figure, unit in (("flops", "FLOP/s"), ("bytes_per_second", "B/s"), ("samples_per_second", "samples/s")):
        if r.value(figure) is not None:
            return _si(r.value(figure), unit)
    return "-"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} us"


def _results_table(records: list[RunRecord]) -> str:
    rows = [("workload", "device", "precision", "shape", "mode", "pass", "status", "time", "rate", "power",
             "memory", "device memory")]
    notes = []
    for r in records:
        rows.append((r.workload, r.device, r.precision, r.shape, r.mode or "-", r.kernel_pass, r.status,
                     _duration(r.value("seconds")),
                     _rate(r), _si(r.value("power_watts"), "W"),
                     _si(r.value("memory_bytes"), "B"), _si(r.value("device_memory_bytes"), "B")))
        if r.reason:
            notes.append(f"{r.workload} on {r.device}, {r.status}: {r.reason}")
    counted: dict[str, int] = {}
    for note in notes:
        counted[note] = counted.get(note, 0) + 1
    lines = [note + (f" (x{n})" if n > 1 else "") for note, n in counted.items()]
    return _table(rows) + ("\n\n" + "\n".join(lines) if lines else "")


def _table(rows: list[tuple[str, ...]], indent: str = "") -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(indent + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
                     for row in rows)


if __name__ == "__main__":
    sys.exit(main())
