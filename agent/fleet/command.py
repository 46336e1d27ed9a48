"""``sixdim fleet``: during a rollout, are the hosts on the new driver (CUDA, cuDNN, NCCL, torch) slower than
the hosts still on the old one, on the same GPU model and case, by how much, and how sure is that?

It reads the fleet from the Prometheus HTTP API that already holds it (Prometheus, Thanos, Mimir) and
judges every group (:mod:`sixdim.fleet.judge`) with hosts as the unit.  A table for people, ``--json`` for
programs, and ``--exit-code`` for an upgrade pipeline: exit 1 when a group is ``slower`` by at least
``--threshold``.  Only the parser is built at start; the statistics load when the command runs.

Exit codes: 0 done (with ``--exit-code``: no group slower by the threshold); 1 ``--exit-code`` and some
group is slower by at least the threshold; 2 bad usage, an unreadable credentials file, or a Prometheus
API that cannot be reached or refuses the query.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from sixdim.core import catalog, exits, text
from sixdim.core.durations import format_duration, whole_seconds
from sixdim.fleet import queries
from sixdim.fleet.errors import FleetError
from sixdim.monitoring.options import Options

if TYPE_CHECKING:
    from sixdim.fleet.prometheus import Prometheus

# The client (PyYAML), numpy and scipy are imported when the command runs: every `sixdim` command builds this
# module's parser, and none but this one should pay for them.

DEFAULT_THRESHOLD = Options().rollout_threshold
"""``--threshold``: the slowdown ``--exit-code`` fails on, the rollout alert's (docs/FLEET.md says how it was
chosen)."""
DEFAULT_ALPHA = 0.05
DEFAULT_MIN_HOSTS = Options().rollout_min_hosts
DEFAULT_BEFORE = 86400
PARALLEL_REQUESTS = 4
SPLIT_NAMES = ("all", "driver", "cuda", "cudnn", "nccl", "torch")


def _threshold(value: str) -> float:
    try:
        number = float(value.rstrip("%")) / (100 if value.endswith("%") else 1)
    except ValueError:
        number = -1.0
    if not 0 <= number < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction such as 0.02 or a percentage such as 2%, got {value!r}")
    return number


def _alpha(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not 0 < number < 1:
        raise argparse.ArgumentTypeError(f"expected a probability between 0 and 1 such as 0.05, got {value!r}")
    return number


def _count(value: str) -> int:
    if not value.isdigit() or int(value) < 2:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 2, got {value!r}")
    return int(value)


def _duration(value: str) -> int:
    try:
        return whole_seconds(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _time(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        pass
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected Unix seconds or an RFC 3339 time such as "
                                         f"2026-11-29T06:00:00Z, got {value!r}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.timezone.utc)
    return parsed.timestamp()


def _selector(value: str) -> list[str]:
    try:
        return queries.check_matchers(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _versions(value: str) -> dict[str, str]:
    """``--old``/``--new``: ``560.35.03`` (the split's one label) or ``driver_version=560.35.03,torch_version=..``."""
    out: dict[str, str] = {}
    for part in value.split(","):
        label, eq, version = part.partition("=")
        if not eq:
            out[""] = part.strip()
            continue
        if label.strip() not in catalog.VERSION_LABELS:
            raise argparse.ArgumentTypeError(f"{label.strip()!r} is not a version label (one of "
                                             f"{', '.join(catalog.VERSION_LABELS)})")
        out[label.strip()] = version.strip()
    return out


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Register ``fleet`` on the CLI's sub-commands."""
    env = os.environ.get
    fleet = commands.add_parser(
        "fleet", help="rollout verdicts across hosts from Prometheus: is the new driver, CUDA or torch slower "
                      "than the old one on the same GPU model and case?",
        description="Compare, for every GPU model and case, the hosts that run the new version of the driver, "
                    "CUDA runtime, cuDNN, NCCL or torch with the hosts still on the old one, from the sixdim "
                    "results a Prometheus-compatible API (Prometheus, Thanos, Mimir) holds. Each host counts once "
                    "(the median of its GPUs); the ratio new/old is the Hodges-Lehmann estimate with a "
                    "distribution-free confidence interval, and where hosts ran both versions (they upgraded) "
                    "the paired change on the same GPUs is given too. Verdicts: slower, faster, no change, too "
                    "few. See docs/FLEET.md.",
        epilog="Exit codes: 0 done; 1 with --exit-code, some group is slower by at least --threshold; 2 bad "
               "usage, an unreadable file, or a Prometheus API that cannot be reached or refuses the query.")
    fleet.add_argument("--prometheus", metavar="URL", default=env("SIXDIM_FLEET_PROMETHEUS"),
                       help="the Prometheus HTTP API's base URL, such as http://prometheus:9090 (Thanos Query and "
                            "Mimir's Prometheus path work too) [env SIXDIM_FLEET_PROMETHEUS]")
    fleet.add_argument("--split", choices=SPLIT_NAMES, default=env("SIXDIM_FLEET_SPLIT", "all"),
                       help="the version that makes the two sides: one label, or all (every version label at once: "
                            "hosts differing in any are on different sides) (default: all) [env SIXDIM_FLEET_SPLIT]")
    fleet.add_argument("--old", type=_versions, default={}, metavar="VERSION",
                       help="the old side's version: a value of the --split label, or label=value pairs separated "
                            "by commas (default: the version on the most hosts other than the new one)")
    fleet.add_argument("--new", type=_versions, default={}, metavar="VERSION",
                       help="the new side's version, given as --old is (default: the newest version present, "
                            "numbers compared as numbers)")
    fleet.add_argument("--threshold", type=_threshold, default=DEFAULT_THRESHOLD, metavar="FRACTION",
                       help="--exit-code fails on a group slower by at least this much: 0.02 or 2%% "
                            f"(default: {DEFAULT_THRESHOLD * 100:g}%%)")
    fleet.add_argument("--exit-code", action="store_true",
                       help="exit 1 when any group is slower by at least --threshold (for an upgrade pipeline)")
    fleet.add_argument("--alpha", type=_alpha, default=DEFAULT_ALPHA, metavar="P",
                       help="the chance of any false verdict in the whole answer, shared by every comparison "
                            f"(Bonferroni) (default: {DEFAULT_ALPHA})")
    fleet.add_argument("--min-hosts", type=_count, default=DEFAULT_MIN_HOSTS, metavar="N",
                       help=f"hosts each side needs for a verdict (default: {DEFAULT_MIN_HOSTS})")
    fleet.add_argument("--before", type=_duration, default=DEFAULT_BEFORE, metavar="DURATION",
                       help="the paired comparison takes each upgraded GPU's value this long before --time, when "
                            "it still ran the old version: make it reach back to before the hosts you want paired "
                            f"upgraded (default: {format_duration(DEFAULT_BEFORE)})")
    fleet.add_argument("--time", type=_time, default=None, metavar="TIME",
                       help="judge the fleet as it was at TIME (Unix seconds or RFC 3339; default: now)")
    fleet.add_argument("--metric", action="append", choices=sorted(queries.judged_metrics()), metavar="NAME",
                       help="a result metric to compare (repeat for several; default: the summary and per-shape "
                            "FLOP/s, samples/s and bytes/s)")
    fleet.add_argument("--selector", type=_selector, default=[], metavar="MATCHERS",
                       help='PromQL label matchers every series must meet, such as cluster="eu-1",suite="quick"')
    fleet.add_argument("--across-clusters", action="store_true",
                       help="pool the clusters: one comparison per model and case across every cluster (default: "
                            "one per cluster)")
    fleet.add_argument("--cluster-label", default=env("SIXDIM_FLEET_CLUSTER_LABEL", "cluster"), metavar="LABEL",
                       help="the label that tells clusters apart, as the rules' --cluster-label (default: cluster)")
    fleet.add_argument("--dcgm-label-names", action="store_true",
                       help="the agents run with --dcgm-label-names (dcgm-exporter's label names)")
    fleet.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    auth = fleet.add_argument_group("reaching Prometheus (as promtool's --http.config.file)")
    auth.add_argument("--http-config-file", metavar="FILE", default=env("SIXDIM_FLEET_HTTP_CONFIG_FILE"),
                      help="a Prometheus HTTP client configuration: basic_auth, authorization, bearer_token_file, "
                           "tls_config [env SIXDIM_FLEET_HTTP_CONFIG_FILE]")
    auth.add_argument("--username", default=env("SIXDIM_FLEET_USERNAME", ""), help="basic auth user name")
    auth.add_argument("--password-file", default=env("SIXDIM_FLEET_PASSWORD_FILE", ""), metavar="FILE",
                      help="basic auth password, read from FILE")
    auth.add_argument("--bearer-token-file", default=env("SIXDIM_FLEET_BEARER_TOKEN_FILE", ""), metavar="FILE",
                      help="a bearer token, read from FILE")
    auth.add_argument("--ca-file", default="", metavar="FILE", help="CA certificates to verify the server with")
    auth.add_argument("--cert-file", default="", metavar="FILE", help="a client certificate (with --key-file)")
    auth.add_argument("--key-file", default="", metavar="FILE", help="the client certificate's key")
    auth.add_argument("--server-name", default="", metavar="NAME", help="the name the server's certificate must have")
    auth.add_argument("--insecure-skip-verify", action="store_true", help="do not verify the server's certificate")
    fleet.set_defaults(handler=command_fleet)


def _client(args: argparse.Namespace) -> Prometheus:
    from sixdim.fleet.prometheus import HttpConfig, Prometheus, load_http_config, merged

    if not args.prometheus:
        raise FleetError("--prometheus: give the Prometheus API's URL (or set SIXDIM_FLEET_PROMETHEUS)")
    config = load_http_config(args.http_config_file) if args.http_config_file else HttpConfig()
    config = merged(config, username=args.username, password_file=args.password_file,
                    bearer_token_file=args.bearer_token_file, ca_file=args.ca_file, cert_file=args.cert_file,
                    key_file=args.key_file, server_name=args.server_name,
                    insecure_skip_verify=args.insecure_skip_verify)
    return Prometheus(args.prometheus, config)


def _named(wanted: dict[str, str], split: tuple[str, ...], flag: str) -> dict[str, str]:
    if "" in wanted:
        if len(split) != 1:
            raise FleetError(f"{flag}: with --split all, name the labels: such as "
                             f"{flag} driver_version=560.35.03")
        return {split[0]: wanted[""]}
    return wanted


def command_fleet(args: argparse.Namespace) -> int:
    try:
        answer = compare(args)
    except FleetError as exc:
        print(f"sixdim: error: {exc}", file=sys.stderr)
        return exits.USAGE
    if args.json:
        print(json.dumps(answer, indent=2))
    else:
        print(render(answer))
    failing = answer["slower_beyond_threshold"]
    return exits.FAILED if args.exit_code and failing else exits.OK


def compare(args: argparse.Namespace) -> dict[str, Any]:
    """Query, judge and describe: the answer as JSON-ready data."""
    from sixdim.fleet import judge

    started = time.perf_counter()
    client = _client(args)
    if not queries.LABEL.match(args.cluster_label):
        raise FleetError(f"--cluster-label: expected a label name, got {args.cluster_label!r}")
    layout = queries.Layout(cluster=args.cluster_label,
                            host=catalog.exported_label(catalog.HOSTNAME, args.dcgm_label_names),
                            model=catalog.exported_label(catalog.MODEL_NAME, args.dcgm_label_names),
                            pooled=args.across_clusters)
    split = judge.SPLITS[args.split]
    old, new = _named(args.old, split, "--old"), _named(args.new, split, "--new")
    for flag, wanted in (("--old", old), ("--new", new)):
        stray = [label for label in wanted if label not in split]
        if stray:
            raise FleetError(f"{flag}: {stray[0]} is not split on (--split {args.split})")
    registry = queries.judged_metrics()
    metrics = [registry[name] for name in args.metric] if args.metric else list(queries.DEFAULT_METRICS)
    at = args.time if args.time is not None else time.time()

    def now(metric: catalog.MetricDef | None) -> list[queries.HostRow]:
        if metric is None:  # every summary's GPU counts and shape counts, in one request
            return queries.shape_rows(client.query(queries.shapes_query(layout, args.selector), at), layout)
        return queries.rows(client.query(queries.now_query(metric, layout, args.selector), at), metric, layout)
    summaries = any(queries.is_summary(m) for m in metrics)
    with ThreadPoolExecutor(PARALLEL_REQUESTS) as pool:
        answers = list(pool.map(now, [*metrics, None] if summaries else metrics))
        current, shapes = answers[:len(metrics)], (answers[-1] if summaries else [])
        groups: list[judge.Group] = []
        single = left_out = 0
        for metric, rows in zip(metrics, current):
            if queries.is_summary(metric):
                rows, dropped = queries.covering(rows, shapes)
                left_out += dropped
            found, alone = judge.build_groups(metric, layout.group_labels(metric), rows, split, old, new)
            groups.extend(found)
            single += alone
        paired = _paired(pool, client, groups, layout, args, at)
    judge.judge(groups, paired, alpha=args.alpha, threshold=args.threshold, min_hosts=args.min_hosts)
    order = {judge.SLOWER: 0, judge.FASTER: 1, judge.NO_CHANGE: 2, judge.TOO_FEW: 3}
    groups.sort(key=lambda g: (not g.beyond_threshold, order[g.verdict], g.change() or 0.0,
                               tuple(g.labels.values()), g.metric.name))
    return {
        "prometheus": client.url, "time": at, "split": args.split, "split_labels": list(split),
        "cluster_label": layout.cluster, "model_label": layout.model,
        "threshold": args.threshold, "alpha": args.alpha, "min_hosts": args.min_hosts,
        "before_seconds": args.before, "selector": args.selector,
        "requests": client.requests, "seconds": round(time.perf_counter() - started, 3),
        "groups_compared": len(groups), "groups_with_one_version": single,
        "host_rows_left_out": left_out,
        "slower_beyond_threshold": len(judge.exit_worthy(groups)),
        "groups": [_group_json(g) for g in groups],
    }


def _paired(pool: ThreadPoolExecutor, client: Prometheus, groups: list, layout: queries.Layout,
            args: argparse.Namespace, at: float) -> dict[int, list[queries.HostRow]]:
    """The paired rows of each group (by index), one request per metric and version pair."""
    asks: dict[tuple, list[int]] = {}
    for index, group in enumerate(groups):
        key = (group.metric.name, tuple(group.old.versions.items()), tuple(group.new.versions.items()))
        asks.setdefault(key, []).append(index)
    registry = {g.metric.name: g.metric for g in groups}

    def ask(key: tuple) -> tuple[tuple, list[queries.HostRow]]:
        name, old, new = key
        hosts = sorted({host for i in asks[key] for _, host in groups[i].new_hosts})
        if not hosts:
            return key, []
        promql = queries.paired_query(registry[name], layout, args.selector, dict(old), dict(new), hosts,
                                      format_duration(args.before))
        return key, queries.rows(client.query(promql, at), registry[name], layout, with_versions=False)
    out: dict[int, list[queries.HostRow]] = {}
    for key, rows in pool.map(ask, list(asks)):
        by_group: dict[tuple, list[queries.HostRow]] = {}
        for row in rows:
            by_group.setdefault(row.group, []).append(row)
        for index in asks[key]:
            group = groups[index]
            wanted = tuple(group.labels.values())
            # a paired host's GPUs: those it has on the new side now (counting the pairs would be a second
            # aggregation over every upgraded GPU, doubling the paired queries' cost)
            out[index] = [queries.HostRow(r.group, r.host, (), r.median, group.new_hosts[r.host])
                          for r in by_group.get(wanted, []) if r.host in group.new_hosts]
    return out


def _group_json(group: Any) -> dict[str, Any]:
    from sixdim.fleet.judge import percent

    change = group.change()
    return {
        "metric": group.metric.name, "figure": group.metric.figure,
        "labels": group.labels,
        "old": {"versions": group.old.versions, "hosts": group.old.hosts, "gpus": group.old.gpus},
        "new": {"versions": group.new.versions, "hosts": group.new.hosts, "gpus": group.new.gpus},
        "other_hosts": group.other_hosts,
        "cross_section": group.cross.as_json() if group.cross else None,
        "paired": group.paired.as_json() if group.paired else None,
        "verdict": group.verdict, "basis": group.basis, "change": None if change is None else round(change, 6),
        "change_text": percent(change), "beyond_threshold": group.beyond_threshold, "notes": group.notes,
    }


# ----------------------------------------------------------------------------- the table

def _case(entry: dict[str, Any]) -> str:
    labels = entry["labels"]
    parts = [labels.get(catalog.WORKLOAD, ""), labels.get(catalog.PRECISION, ""), labels.get(catalog.MODE, ""),
             labels.get(catalog.PASS, "")]
    where = labels.get(catalog.SHAPE) or (f"suite {labels[catalog.SUITE]}" if labels.get(catalog.SUITE) else "")
    figure = catalog.figure_name(entry["figure"])
    return " ".join(p for p in parts if p) + (f" [{where}]" if where else "") + f" {figure}"


def _versions_text(entry: dict[str, Any]) -> str:
    old, new = entry["old"]["versions"], entry["new"]["versions"]
    differing = [label for label in new if old.get(label) != new[label]] or list(new)
    short = {catalog.DRIVER_VERSION: "driver", catalog.CUDA_VERSION: "CUDA", catalog.CUDNN_VERSION: "cuDNN",
             catalog.NCCL_VERSION: "NCCL", catalog.TORCH_VERSION: "torch"}
    return ", ".join(f"{short.get(label, label)} {old.get(label) or '-'} -> {new[label] or '-'}"
                     for label in differing)


def _ratio(comparison: dict[str, Any] | None) -> str:
    if not comparison or "ratio" not in comparison:
        return "-"
    return f"{comparison['ratio']:.3f} [{comparison['ratio_low']:.3f}, {comparison['ratio_high']:.3f}]"


def render(answer: dict[str, Any], when: Callable[[float], str] | None = None) -> str:
    """The answer as a table for people: the groups that fail the threshold first."""
    stamp = (when or (lambda t: dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")))
    head = (f"sixdim fleet: {answer['groups_compared']} groups compared at {stamp(answer['time'])} "
            f"({answer['prometheus']}, {answer['requests']} requests, {answer['seconds']:.1f} s); split by "
            f"{answer['split']}; {answer['groups_with_one_version']} groups have one version only")
    if not answer["groups"]:
        return head + "\nno group has hosts on two versions to compare"
    across = False
    rows = [("model", "case", "versions", "hosts old/new", "GPUs old/new", "ratio new/old [CI]", "paired hosts",
             "paired ratio [CI]", "verdict")]
    for entry in answer["groups"]:
        labels = entry["labels"]
        model = labels.get(answer["model_label"], "")
        cluster = labels.get(answer["cluster_label"], "")
        paired = entry["paired"]
        verdict = entry["verdict"] + (f" {entry['change_text']}" if entry["verdict"] in ("slower", "faster") else "")
        if entry["verdict"] in ("slower", "faster") and entry["basis"] == "cross-section":
            verdict += " *"
            across = True
        if entry["beyond_threshold"]:
            verdict += " (beyond threshold)"
        rows.append(((cluster + " " if cluster else "") + model, _case(entry), _versions_text(entry),
                     f"{entry['old']['hosts']}/{entry['new']['hosts']}",
                     f"{entry['old']['gpus']}/{entry['new']['gpus']}", _ratio(entry["cross_section"]),
                     str(paired["hosts"]) if paired else "0", _ratio(paired), verdict))
    tail = (f"{answer['slower_beyond_threshold']} group(s) slower by at least {answer['threshold']:.1%}"
            if answer["slower_beyond_threshold"] else f"no group slower by {answer['threshold']:.1%} or more")
    notes = [f"  note: {_case(e)}: {n}" for e in answer["groups"] for n in e["notes"]]
    if across:
        notes.append("  * across hosts only (too few hosts with results under both versions yet): the hosts on the "
                     "new version may differ from the others for another reason, such as a rack upgraded first")
    return "\n".join([head, text.table(rows), *notes, tail])
