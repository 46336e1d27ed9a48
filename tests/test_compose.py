"""The local stack in deploy/compose/ (Prometheus, Alertmanager, Grafana and the agent, one command).

No Docker here: what can be checked without it is checked. promtool checks the Prometheus configuration
laid out as the compose file mounts it (so the rules path resolves), amtool the Alertmanager one; every
host path the compose file mounts exists; the mounted rules and dashboards are exactly what
``sixdim rules --out`` and ``sixdim dashboards --out`` write; the Grafana provisioning files have
Grafana's form and point at the compose services and at the folder the dashboards are mounted in; the
scrape target is the agent's service on its default port. Where ``docker compose`` is installed it
validates the file too (skipped otherwise).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path, PurePosixPath

import pytest
import yaml

import sixdim
from sixdim import cli
from sixdim.config.schema import DEFAULT_PORT
from sixdim.monitoring import options as monitoring_options
from tests.conftest import required_tool

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_DIR = ROOT / "deploy" / "compose"
COMPOSE_FILE = COMPOSE_DIR / "compose.yaml"
COMMAND = "docker compose -f deploy/compose/compose.yaml up"
"""The one documented command (run from the repository root)."""
SERVICES = {"sixdim", "prometheus", "alertmanager", "grafana"}
DASHBOARDS_TARGET = "/var/lib/grafana/dashboards/sixdim"
EXAMPLE_ALERTMANAGER = ROOT / "deploy" / "alertmanager" / "alertmanager.yml"


def compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


def service(name: str) -> dict:
    return compose()["services"][name]


def substitute(text: str) -> str:
    """Compose's ``${VAR:-default}`` with VAR unset: the default (what the stack uses out of the box)."""
    def default(match: re.Match) -> str:
        assert match.group(2) is not None, f"{match.group(0)} has no default: the stack needs it set"
        return match.group(2)
    return re.sub(r"\$\{(\w+)(?::?-([^}]*))?\}", default, text)


def mounts(name: str) -> dict[str, Path | str]:
    """A service's mounts by container path: a host Path for a bind mount, the volume's name otherwise."""
    out: dict[str, Path | str] = {}
    for entry in service(name).get("volumes", []):
        assert isinstance(entry, str), f"{name}: use the short volume syntax, got {entry!r}"
        source, target, *_ = substitute(entry).split(":")
        if source.startswith((".", "/")):
            out[target] = (COMPOSE_DIR / source).resolve()
        else:
            out[target] = source
    return out


def container_port(name: str, published: int) -> int:
    """The container port a service publishes on ``published``."""
    for entry in service(name).get("ports", []):
        *_, host, inside = str(entry).split(":")
        if int(host) == published:
            return int(inside)
    raise AssertionError(f"{name} publishes no port {published}")


def flag(name: str, option: str) -> str:
    """A ``--option=value`` of a service's command."""
    values = [arg.split("=", 1)[1] for arg in service(name)["command"] if arg.startswith(f"--{option}=")]
    assert len(values) == 1, f"{name}: expected one --{option}, got {values}"
    return values[0]


def bind_source(name: str, target: str) -> Path:
    source = mounts(name).get(target)
    assert isinstance(source, Path), f"{name} mounts nothing from the host at {target}"
    return source


def provisioning(name: str, kind: str) -> list[Path]:
    """The Grafana provisioning files (datasources or dashboards) the compose file mounts."""
    folder = bind_source(name, f"/etc/grafana/provisioning/{kind}")
    files = sorted(p for p in folder.iterdir() if p.suffix in (".yml", ".yaml"))
    assert files, f"no provisioning file in {folder}"
    return files


def prometheus_config() -> dict:
    return yaml.safe_load(bind_source("prometheus", flag("prometheus", "config.file")).read_text())


def sixdim_job() -> dict:
    jobs = [job for job in prometheus_config()["scrape_configs"] if job["job_name"] == monitoring_options.Options().job]
    assert len(jobs) == 1, "no scrape job with the name the alert rules expect (sixdim rules --job)"
    return jobs[0]


# --------------------------------------------------------------------------- the compose file


def test_the_compose_file_has_the_four_services_with_pinned_images():
    data = compose()
    assert set(data["services"]) == SERVICES
    for name, spec in data["services"].items():
        image = spec["image"]
        repository, _, tag = image.rpartition(":")
        pinned = re.fullmatch(r"v?\d+\.\d+\.\d+(-\w+)?", tag)
        assert repository and pinned, f"{name}: {image} is not pinned to a version"
    assert data["services"]["sixdim"]["image"] == f"sixdim:{sixdim.__version__}-cpu"  # as Dockerfile.cpu says
    build = data["services"]["sixdim"]["build"]
    context = (COMPOSE_DIR / build["context"]).resolve()
    assert context == ROOT and (context / build["dockerfile"]).is_file()
    declared = set(data.get("volumes") or {})
    for name in SERVICES:
        for target, source in mounts(name).items():
            if isinstance(source, str):
                assert source in declared, f"{name}: volume {source} at {target} is not declared"


def test_every_host_path_the_compose_file_mounts_exists_in_the_repository():
    for name in SERVICES:
        for target, source in mounts(name).items():
            if isinstance(source, Path):
                assert source.exists(), f"{name}: {source} (mounted at {target}) does not exist"
                assert source.is_relative_to(ROOT), f"{name}: {source} is outside the repository"


def test_the_agent_listens_on_its_default_port_and_keeps_its_history_on_a_volume():
    assert container_port("sixdim", DEFAULT_PORT) == DEFAULT_PORT
    assert isinstance(mounts("sixdim").get("/var/lib/sixdim"), str)


def test_docker_compose_accepts_the_file():
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "compose", "version"], capture_output=True).returncode != 0:
        pytest.skip("docker compose is not installed")
    result = subprocess.run([docker, "compose", "-f", str(COMPOSE_FILE), "config", "--quiet"], capture_output=True,
                            text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr


# --------------------------------------------------------------------------- Prometheus


def test_promtool_accepts_the_prometheus_config_as_the_compose_file_mounts_it(tmp_path, promtool):
    """Every host file mounted under the config file's folder is copied to the same place under a
    temporary folder, so the relative rules path resolves as it does in the container."""
    config_file = PurePosixPath(flag("prometheus", "config.file"))
    for target, source in mounts("prometheus").items():
        inside = PurePosixPath(target)
        if isinstance(source, Path) and inside.is_relative_to(config_file.parent):
            copy = tmp_path / inside.relative_to(config_file.parent)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, copy)
    result = subprocess.run([promtool, "check", "config", str(tmp_path / config_file.name)], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 1 rule files found" in result.stdout + result.stderr


def test_the_mounted_rules_are_what_sixdim_rules_writes(tmp_path):
    config_dir = PurePosixPath(flag("prometheus", "config.file")).parent
    rule_files = prometheus_config()["rule_files"]
    assert len(rule_files) == 1
    target = str(config_dir / rule_files[0])
    out = tmp_path / "sixdim-rules.yml"
    assert cli.main(["rules", "--out", str(out)]) == 0
    assert bind_source("prometheus", target).read_bytes() == out.read_bytes()


def test_prometheus_scrapes_the_agent_service_on_its_default_port_and_alerts_the_alertmanager_service():
    job = sixdim_job()
    targets = [t for group in job["static_configs"] for t in group["targets"]]
    assert targets == [f"sixdim:{DEFAULT_PORT}"]
    alertmanagers = [t for am in prometheus_config()["alerting"]["alertmanagers"] for group in am["static_configs"]
                     for t in group["targets"]]
    assert alertmanagers == [f"alertmanager:{container_port('alertmanager', 9093)}"]
    assert job.get("metrics_path", "/metrics") == "/metrics"


# --------------------------------------------------------------------------- Alertmanager


def test_amtool_accepts_the_alertmanager_config():
    amtool = required_tool("amtool", "prometheus-alertmanager")
    path = bind_source("alertmanager", flag("alertmanager", "config.file"))
    result = subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_alertmanager_config_needs_no_external_service_and_groups_as_the_example():
    local = yaml.safe_load(bind_source("alertmanager", flag("alertmanager", "config.file")).read_text())
    example = yaml.safe_load(EXAMPLE_ALERTMANAGER.read_text())
    for receiver in local["receivers"]:
        assert set(receiver) == {"name"}, f"receiver {receiver['name']} sends somewhere"
    assert local["route"]["group_by"] == example["route"]["group_by"]
    assert local["inhibit_rules"] == example["inhibit_rules"]
    by_matchers = {tuple(r["matchers"]): r.get("group_by") for r in example["route"]["routes"] if "group_by" in r}
    assert by_matchers and by_matchers == {tuple(r["matchers"]): r["group_by"] for r in local["route"]["routes"]
                                           if "group_by" in r}


# --------------------------------------------------------------------------- Grafana


def test_the_grafana_datasource_is_the_prometheus_service():
    files = provisioning("grafana", "datasources")
    datasources = []
    for path in files:
        data = yaml.safe_load(path.read_text())
        assert data["apiVersion"] == 1 and set(data) <= {"apiVersion", "datasources", "deleteDatasources"}, path
        datasources += data["datasources"]
    [default] = [d for d in datasources if d.get("isDefault")]
    assert default["type"] == "prometheus" and default["access"] == "proxy"
    assert default["url"] == f"http://prometheus:{container_port('prometheus', 9090)}"
    assert default["jsonData"]["timeInterval"] == sixdim_job().get("scrape_interval",
                                                                     prometheus_config()["global"]["scrape_interval"])


def test_the_dashboard_provider_reads_the_folder_the_dashboards_are_mounted_in():
    [path] = provisioning("grafana", "dashboards")
    data = yaml.safe_load(path.read_text())
    assert data["apiVersion"] == 1 and set(data) == {"apiVersion", "providers"}
    [provider] = data["providers"]
    assert provider["type"] == "file" and provider["name"] and provider["orgId"] == 1
    assert provider["options"]["path"] == DASHBOARDS_TARGET
    assert isinstance(mounts("grafana").get(DASHBOARDS_TARGET), Path)
    # and its comment gives the command that writes the dashboards there
    assert f"sixdim dashboards --out {DASHBOARDS_TARGET}\n" in path.read_text()


def test_the_mounted_dashboards_are_what_sixdim_dashboards_writes(tmp_path):
    """Fails if the provider's folder, the mount, or the mounted files are not what
    ``sixdim dashboards --out`` writes (a renamed dashboard, a moved folder)."""
    out = tmp_path / "dashboards"
    assert cli.main(["dashboards", "--out", str(out)]) == 0
    written = {p.name: p.read_bytes() for p in out.iterdir()}
    assert written
    [path] = provisioning("grafana", "dashboards")
    folder = yaml.safe_load(path.read_text())["providers"][0]["options"]["path"]
    source = bind_source("grafana", folder)
    assert {p.name: p.read_bytes() for p in source.iterdir() if p.is_file()} == written
    home = PurePosixPath(service("grafana")["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"])
    assert str(home.parent) == folder and home.name in written


# --------------------------------------------------------------------------- docs


def test_the_one_command_is_documented():
    assert COMMAND in (ROOT / "README.md").read_text()
    deploy = (ROOT / "docs" / "DEPLOY.md").read_text()
    assert "## A local stack" in deploy and COMMAND in deploy
    assert COMMAND in COMPOSE_FILE.read_text()
    assert "compose/" in (ROOT / "deploy" / "README.md").read_text()
