"""The systemd deployment (deploy/systemd/): the unit, its sysusers.d entry and its environment file.

- systemd's own checks: ``systemd-analyze verify`` and ``systemd-analyze security --offline=true``;
- the unit's essentials read as data (user, kill mode, reload, privileges, state directory, and
  that every ``SIXDIM_*`` variable it or the example file names is a real option), and the
  sysusers.d entry applied by ``systemd-sysusers --root`` to an empty tree;
- ``sixdim serve`` started the way the unit starts it, without systemd: its ExecStart, its
  Environment= lines and an EnvironmentFile, as a user other than root with the unit's
  supplementary group and umask, its StateDirectory= emulated by a 0700 folder of that user's; then
  scraped, reloaded with the unit's ExecReload= and stopped within its TimeoutStopSec=;
- the unit itself, unmodified, under a real systemd 252 booted by ``systemd-nspawn`` on a
  throw-away overlay of ``/`` (only where this machine can boot one: root, overlayfs, namespaces).

Where the unit says ``/usr/local/bin/sixdim`` (a system-wide ``pip install``), the tests run this
checkout's ``sixdim``. A user other than root must be able to run it: a virtual environment made
from an interpreter under ``/root`` (pyenv, say) is not, so then the tests use the system's
interpreter of the same Python minor version with this checkout's installed packages added by a
``.pth`` file (nothing is copied), and say so; with neither, they skip with the reason.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sixdim.config.schema import OPTIONS
from sixdim.config.trust import INSECURE_PERMISSIONS_ENV
from tests.conftest import free_port, required_tool
from tests.daemon import FAST_GEMM_SUITE

ROOT = Path(__file__).resolve().parent.parent
UNIT = ROOT / "deploy" / "systemd" / "sixdim.service"
SYSUSERS = ROOT / "deploy" / "systemd" / "sixdim.sysusers"
ENV_EXAMPLE = ROOT / "deploy" / "systemd" / "sixdim.env"
INSTALLED = "/usr/local/bin/sixdim"  # where the unit expects `pip install sixdim` to put it
STATE = "/var/lib/sixdim"  # StateDirectory=sixdim
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"  # systemd's PATH for services
AGENT_STOP_SECONDS = 10  # docs/SECURITY.md, "Signals": SIGTERM stops the agent within 10 s
REAL_VARIABLES = {opt.env for opt in OPTIONS} | {"SIXDIM_CONFIG", INSECURE_PERMISSIONS_ENV}
# Where the unit's ProtectHome= and PrivateTmp= make a path invisible to the service.
HIDDEN_FROM_SERVICE = ("/home", "/root", "/run/user", "/tmp", "/var/tmp")
PROBE = "import sys, sixdim.cli, torch; print(sys.version)"


# --------------------------------------------------------------------------- reading the unit

def parse_unit(text: str) -> dict[str, list[tuple[str, str]]]:
    """A unit file as {section: [(key, value), ...]}, every assignment kept in order (configparser
    would refuse the repeated keys systemd allows: DeviceAllow=, Environment=, ...)."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    logical = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not logical and (not line or line[0] in "#;"):
            continue
        if line.endswith("\\"):  # a continued line
            logical += line[:-1] + " "
            continue
        line, logical = logical + line, ""
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        key, sep, value = line.partition("=")
        assert sep and current is not None, f"not an assignment in a section: {raw!r}"
        current.append((key.strip(), value.strip()))
    return sections


def values(unit: dict, section: str, key: str) -> list[str]:
    """Every value of a list setting, where an empty assignment resets the list, as systemd does."""
    found: list[str] = []
    for k, v in unit.get(section, []):
        if k == key:
            found = [] if v == "" else found + [v]
    return found


def value(unit: dict, section: str, key: str) -> str | None:
    """A single-valued setting: the last assignment wins."""
    found = [v for k, v in unit.get(section, []) if k == key]
    return found[-1] if found else None


def boolean(text: str | None) -> bool:
    return text is not None and text.lower() in {"yes", "true", "on", "1"}


def command(line: str) -> list[str]:
    """An Exec*= line's argv, without systemd's prefixes (- @ : + !)."""
    return shlex.split(line.lstrip("-@:+!"))


def timespan(text: str) -> float:
    """A systemd time span (30s, 1min 30s, 90) in seconds."""
    units = {"us": 1e-6, "ms": 1e-3, "": 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0,
             "hr": 3600.0}
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", text)
    assert parts and "".join(n + u for n, u in parts) == text.replace(" ", ""), text
    return sum(float(number) * units[unit] for number, unit in parts)


def environment(unit: dict) -> dict[str, str]:
    """The unit's Environment= assignments."""
    env: dict[str, str] = {}
    for line in values(unit, "Service", "Environment"):
        for item in shlex.split(line):
            key, _, val = item.partition("=")
            env[key] = val
    return env


def environment_file(text: str) -> dict[str, str]:
    """KEY=VALUE lines as systemd reads an EnvironmentFile= (# and ; comments, optional quotes)."""
    env: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;" or "=" not in line:
            continue
        key, _, val = line.partition("=")
        val = val.strip()
        if len(val) >= 2 and val[0] == val[-1] and val[0] in "'\"":
            val = val[1:-1]
        env[key.strip()] = val
    return env


@pytest.fixture(scope="module")
def unit() -> dict:
    return parse_unit(UNIT.read_text())


def test_the_parser_keeps_repeated_keys_resets_and_continuations():
    parsed = parse_unit("# c\n[Service]\nA=1\nA=2\n; c\nA=\nA=3\\\n  4\n[Unit]\nB=x=y\n")
    assert values(parsed, "Service", "A") == ["3 4"] and value(parsed, "Unit", "B") == "x=y"
    assert timespan("1min 30s") == 90 and timespan("30s") == 30 and timespan("15") == 15


# --------------------------------------------------------------------------- (c) the unit as data

def test_the_unit_runs_the_agent_as_its_own_user_and_stops_reloads_and_restarts_it_as_the_agent_expects(unit):
    assert command(values(unit, "Service", "ExecStart")[-1]) == [INSTALLED, "serve"]
    assert value(unit, "Service", "Type") == "exec"
    user = value(unit, "Service", "User")
    assert user == "sixdim" and value(unit, "Service", "Group") == "sixdim"
    assert value(unit, "Service", "DynamicUser") is None  # a static user: its history survives
    # every process of the service, workers and whatever they started, dies with it
    assert value(unit, "Service", "KillMode") == "control-group"
    assert value(unit, "Service", "KillSignal") in (None, "SIGTERM", "TERM", "15")
    assert timespan(value(unit, "Service", "TimeoutStopSec")) > AGENT_STOP_SECONDS
    assert value(unit, "Service", "Restart") == "on-failure"
    assert value(unit, "Service", "OOMPolicy") == "continue"  # an OOM-killed worker is a failed case, not a stop
    # a reload checks the files first (a bad one fails `systemctl reload`, the daemon untold), then SIGHUP
    check, signal_line = (command(line) for line in values(unit, "Service", "ExecReload"))
    assert check == [INSTALLED, "serve", "--check-config"]
    assert Path(signal_line[0]).name == "kill" and signal_line[1:] in (["-HUP", "$MAINPID"],
                                                                      ["-s", "HUP", "$MAINPID"])
    assert value(unit, "Install", "WantedBy") == "multi-user.target"


def test_the_unit_gives_no_privileges_and_keeps_its_state_in_a_private_state_directory(unit):
    service = lambda key: value(unit, "Service", key)  # noqa: E731
    assert boolean(service("NoNewPrivileges"))
    assert values(unit, "Service", "CapabilityBoundingSet") == []  # the empty assignment: no capability
    assert values(unit, "Service", "AmbientCapabilities") == []
    assert service("StateDirectory") == "sixdim" and service("StateDirectoryMode") == "0700"
    env = environment(unit)
    assert env["SIXDIM_STATE_DIR"] == STATE
    assert Path(env["SIXDIM_HISTORY"]).parent == Path(STATE)
    assert values(unit, "Service", "EnvironmentFile") == ["-/etc/default/sixdim"]
    assert service("ProtectSystem") == "strict" and service("UMask") == "0077"
    for key in ("ProtectHome", "PrivateTmp", "PrivateMounts", "ProtectKernelTunables", "ProtectKernelModules",
                "ProtectKernelLogs", "ProtectControlGroups", "ProtectClock", "ProtectHostname", "LockPersonality",
                "RestrictRealtime", "RestrictNamespaces", "RestrictSUIDSGID", "RemoveIPC"):
        assert boolean(service(key)), key
    assert service("SystemCallArchitectures") == "native"
    # what would break CUDA, NVML, the guard or the all-reduce is not set
    assert not boolean(service("MemoryDenyWriteExecute"))  # PyTorch/Triton/CUDA JIT map W+X memory
    assert not boolean(service("PrivateDevices"))  # it would hide /dev/nvidia*
    assert service("ProtectProc") in (None, "default") and service("ProcSubset") in (None, "all")
    assert not boolean(service("PrivateNetwork"))
    families = set(" ".join(values(unit, "Service", "RestrictAddressFamilies")).split())
    assert families == {"AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"}  # gloo/NCCL call getifaddrs()
    [syscalls] = values(unit, "Service", "SystemCallFilter")
    assert syscalls.startswith("~") and not {"@debug", "@resources", "@privileged"} & set(syscalls[1:].split())


def test_the_unit_lets_the_agent_reach_the_nvidia_device_nodes_and_nothing_else(unit):
    assert value(unit, "Service", "DevicePolicy") == "closed"  # plus /dev/null, /dev/urandom, ...
    allowed = dict(line.split() for line in values(unit, "Service", "DeviceAllow"))
    # by /proc/devices group: every GPU (/dev/nvidia0..N, nvidiactl, nvidia-modeset on major 195, called
    # nvidia-frontend by older drivers), nvidia-uvm (and -tools), nvidia-caps (MIG, IMEX channels)
    assert set(allowed) == {"char-nvidia-frontend", "char-nvidia", "char-nvidiactl", "char-nvidia-uvm",
                            "char-nvidia-caps*"}
    assert set(allowed.values()) == {"rw"}  # no mknod
    assert values(unit, "Service", "SupplementaryGroups") == ["video"]
    assert "modprobe@nvidia-uvm.service" in " ".join(values(unit, "Unit", "Wants"))
    assert "modprobe@nvidia-uvm.service" in " ".join(values(unit, "Unit", "After"))


def test_every_sixdim_variable_of_the_unit_and_of_the_example_environment_file_is_a_real_option(unit):
    assert set(environment(unit)) <= REAL_VARIABLES
    named = set(re.findall(r"\bSIXDIM_[A-Z_]+", ENV_EXAMPLE.read_text()))
    assert named - REAL_VARIABLES == set()
    assert {"SIXDIM_CONFIG", "SIXDIM_LISTEN", "SIXDIM_WEB_CONFIG_FILE"} <= named
    assert environment_file(ENV_EXAMPLE.read_text()) == {}  # an example: every line commented out


def test_sysusers_creates_the_system_user_with_its_home_in_the_state_directory_and_the_video_group(tmp_path):
    sysusers = required_tool("systemd-sysusers", "systemd")
    root = tmp_path / "root"
    (root / "etc" / "sysusers.d").mkdir(parents=True)
    shutil.copy(SYSUSERS, root / "etc" / "sysusers.d" / "sixdim.conf")
    done = subprocess.run([sysusers, f"--root={root}"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    users = {line.split(":")[0]: line.split(":") for line in (root / "etc" / "passwd").read_text().splitlines()}
    groups = {line.split(":")[0]: line.split(":") for line in (root / "etc" / "group").read_text().splitlines()}
    name, _, uid, gid, _, home, shell = users["sixdim"]
    assert 0 < int(uid) < 1000 and home == STATE and shell == "/usr/sbin/nologin"
    assert groups["sixdim"][2] == gid
    assert "sixdim" in groups["video"][3].split(",")


# --------------------------------------------------------------------------- (a) systemd's own checks

def _copy_running_this_checkout(tmp_path: Path) -> Path:
    """The unit with ExecStart= pointing at this checkout's sixdim: verify refuses a missing binary."""
    sixdim = Path(sys.prefix) / "bin" / "sixdim"
    assert os.access(sixdim, os.X_OK), f"{sixdim} missing: pip install -e . first"
    copy = tmp_path / "sixdim.service"
    copy.write_text(UNIT.read_text().replace(f"={INSTALLED} ", f"={sixdim} "))  # ExecStart=, ExecReload=
    assert copy.read_text() != UNIT.read_text()
    return copy


def test_systemd_analyze_verify_accepts_the_unit(tmp_path):
    analyze = required_tool("systemd-analyze", "systemd")
    copy = _copy_running_this_checkout(tmp_path)
    done = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True, timeout=120)
    # verify exits 0 on an unknown key or a bad value too, printing a warning naming the file
    assert done.returncode == 0 and copy.name not in done.stdout + done.stderr, done.stdout + done.stderr


def test_systemd_analyze_security_rates_the_unit_ok():
    analyze = required_tool("systemd-analyze", "systemd")
    done = subprocess.run([analyze, "security", "--offline=true", "--no-pager", str(UNIT)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    exposure = float(re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", done.stdout).group(1))
    # 2.1 when written (systemd 252); what is left is the GPU, the network and JIT's W+X memory
    assert exposure <= 2.5, done.stdout


# --------------------------------------------------------------------------- who runs sixdim

@dataclass(frozen=True)
class Runtime:
    """How a user other than root runs this checkout's sixdim."""

    sixdim: Path  # the entry point standing in for /usr/local/bin/sixdim, for that user
    bridge_python: str | None  # None: the virtual environment itself; else the interpreter used
    site_dirs: tuple[str, ...]  # this checkout's installed packages, added by a .pth file for a bridge
    note: str


def _service_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user 'nobody' to run the agent as")


def _as(user: pwd.struct_passwd, argv: list[str]) -> subprocess.CompletedProcess:
    """Run argv as user, as systemd would: real and effective ids and groups changed before exec, so
    the exec itself is checked without root's capabilities (setpriv keeps them across the exec)."""
    return subprocess.run(argv, user=user.pw_uid, group=user.pw_gid, extra_groups=[], cwd="/",
                          env={"PATH": SYSTEMD_PATH, "HOME": "/"}, capture_output=True, text=True, timeout=300)


def _make_bridge(folder: Path, python: str, site_dirs: tuple[str, ...]) -> Path:
    """A virtual environment of a readable interpreter that imports this checkout's packages."""
    subprocess.run([python, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    purelib = Path(subprocess.run([str(folder / "bin" / "python"), "-c",
                                   "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    (purelib / "sixdim-checkout.pth").write_text(
        "import site; " + "; ".join(f"site.addsitedir({d!r})" for d in site_dirs) + "\n")
    sixdim = folder / "bin" / "sixdim"
    sixdim.write_text(f"#!{folder}/bin/python\nimport sys\nfrom sixdim.cli import main\nsys.exit(main())\n")
    sixdim.chmod(0o755)
    for path in [folder, *folder.rglob("*")]:
        if not path.is_symlink():  # chmod would follow it to the interpreter itself
            path.chmod(0o755 if path.is_dir() or path == sixdim else 0o644)
    return sixdim


@pytest.fixture(scope="module")
def runtime():
    if os.geteuid() != 0:
        pytest.skip("needs root: the agent is started as another user, as systemd does")
    user = _service_user()
    venv_sixdim = Path(sys.prefix) / "bin" / "sixdim"
    try:
        direct = _as(user, [str(Path(sys.prefix) / "bin" / "python"), "-c", PROBE])
        why = (direct.stderr.strip().splitlines() or [f"it runs Python {direct.stdout.strip()}"])[-1]
    except OSError as error:  # the exec itself failed: an interpreter under /root, say
        direct, why = None, str(error)
    if direct is not None and direct.returncode == 0 and direct.stdout.strip() == sys.version:
        yield Runtime(venv_sixdim, None, (), f"the virtual environment {sys.prefix} as it is")
        return
    site_dirs = tuple(dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib")))
    minor = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [p for p in (f"/usr/bin/{minor}", f"/usr/local/bin/{minor}") if os.access(p, os.X_OK)
                  and not os.path.realpath(p).startswith(HIDDEN_FROM_SERVICE)]
    folder = Path(tempfile.mkdtemp(prefix="sixdim-bridge-"))
    try:
        folder.chmod(0o755)
        for python in candidates:
            sixdim = _make_bridge(folder / "venv", python, site_dirs)
            probe = _as(user, [str(folder / "venv" / "bin" / "python"), "-c", PROBE])
            if probe.returncode == 0:
                yield Runtime(sixdim, python, site_dirs,
                              f"{python} (Python {probe.stdout.split()[0]}) with the packages of {sys.prefix}, "
                              f"since {user.pw_name} cannot run {sys.prefix}/bin/python: {why}")
                return
            shutil.rmtree(folder / "venv")
        pytest.skip(f"{user.pw_name} cannot run this checkout's sixdim ({sys.prefix}/bin/python: {why}) and no "
                    f"{minor} outside /root and /home can import its packages ({', '.join(site_dirs)}); make the "
                    f"virtual environment from a system interpreter, or install sixdim system-wide")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def scrape(url: str) -> dict[str, list]:
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    found: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append(sample)
    return found


def _processes_with(marker: str) -> list[int]:
    """PIDs whose environment holds marker (every process of a run inherits the agent's)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "environ").read_bytes().split(b"\0"):
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


# --------------------------------------------------------------------------- (b) started as the unit starts it

@pytest.mark.slow
def test_sixdim_serve_started_as_the_unit_starts_it_serves_reloads_and_stops_as_a_user_other_than_root(unit, runtime):
    user = _service_user()
    base = Path(tempfile.mkdtemp(prefix="sixdim-systemd-"))
    process = None
    try:
        base.chmod(0o755)
        # StateDirectory=sixdim, StateDirectoryMode=0700: owned by the service's user
        state = base / "state"
        state.mkdir(mode=0o700)
        os.chown(state, user.pw_uid, user.pw_gid)
        # PrivateTmp=yes: a /tmp of its own (here a folder of its own: no mount namespace without systemd)
        private_tmp = base / "tmp"
        private_tmp.mkdir(mode=0o700)
        os.chown(private_tmp, user.pw_uid, user.pw_gid)
        # the configuration: root's, mode 0644, as docs/SECURITY.md asks; the history comes from the unit
        config = base / "sixdim.toml"
        config.write_text('[agent]\nhostname = "testhost"\n' + FAST_GEMM_SUITE)
        config.chmod(0o644)
        env_file = base / "default-sixdim"
        env_file.write_text(f"# as /etc/default/sixdim\nSIXDIM_CONFIG={config}\nSIXDIM_LOG_LEVEL=info\n")

        # the environment systemd gives the service: its own variables (HOME from the user database,
        # i.e. the sysusers entry: the state directory), Environment=, then EnvironmentFile= over them
        env = {"PATH": SYSTEMD_PATH, "HOME": str(state), "USER": user.pw_name, "LOGNAME": user.pw_name,
               "SHELL": "/usr/sbin/nologin", "LANG": "C.UTF-8", "TMPDIR": str(private_tmp)}
        env.update({key: val.replace(STATE, str(state)) for key, val in environment(unit).items()})
        [optional_file] = values(unit, "Service", "EnvironmentFile")
        assert optional_file.startswith("-")
        env.update(environment_file(env_file.read_text()))
        assert env["SIXDIM_STATE_DIR"] == str(state) and env["SIXDIM_HISTORY"].startswith(str(state) + "/")

        argv = command(values(unit, "Service", "ExecStart")[-1])
        assert argv[0] == INSTALLED
        port = free_port()
        argv = [str(runtime.sixdim), *argv[1:], "--listen", f"127.0.0.1:{port}"]
        groups = [grp.getgrnam(g).gr_gid for g in values(unit, "Service", "SupplementaryGroups")[0].split()
                  if _group_exists(g)]
        log_path = base / "serve.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                argv, user=user.pw_uid, group=user.pw_gid, extra_groups=groups, env=env, cwd="/",
                umask=int(value(unit, "Service", "UMask"), 8), start_new_session=True,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        print(f"sixdim serve as {user.pw_name} ({user.pw_uid}), via {runtime.note}")
        url = f"http://127.0.0.1:{port}/metrics"

        def wait_for(check, what: str, timeout: float):
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                assert process.poll() is None, f"sixdim exited with {process.returncode}: {log_path.read_text()}"
                try:
                    found = check(scrape(url))
                    if found:
                        return found
                except OSError:
                    pass
                time.sleep(0.3)
            raise AssertionError(f"{what} not seen within {timeout} s: {log_path.read_text()}")

        flops = wait_for(lambda m: m.get("sixdim_workload_flops"), "sixdim_workload_flops", 180)
        assert flops[0].value > 0
        assert Path(env["SIXDIM_HISTORY"]).stat().st_uid == user.pw_uid
        assert (Path(env["SIXDIM_HISTORY"]).stat().st_mode & 0o777) == 0o600
        assert (state.stat().st_mode & 0o777) == 0o700
        loaded = scrape(url)["sixdim_config_last_reload_timestamp_seconds"][0].value

        # ExecReload=, run as systemd runs it: as the service's user, $MAINPID substituted, its
        # commands in order, the first failure ending the reload
        def reload() -> list[subprocess.CompletedProcess]:
            ran = []
            for line in values(unit, "Service", "ExecReload"):
                argv = [str(runtime.sixdim) if a == INSTALLED else str(process.pid) if a == "$MAINPID" else a
                        for a in command(line)]
                ran.append(subprocess.run(argv, user=user.pw_uid, group=user.pw_gid, extra_groups=groups,
                                          env=env, cwd="/", capture_output=True, text=True, timeout=60))
                if ran[-1].returncode != 0:
                    break
            return ran

        good = config.read_text()
        config.write_text(good + "\n[bogus]\nx = 1\n")  # a bad edit: the check refuses it, no SIGHUP
        [refused] = reload()
        assert refused.returncode == 2 and f"sixdim: error: {config}: bogus: " in refused.stderr, refused.stderr
        time.sleep(1)
        assert scrape(url)["sixdim_config_last_reload_timestamp_seconds"][0].value == loaded
        assert "SIGHUP" not in log_path.read_text()
        config.write_text(good)
        checked, signalled = reload()
        assert checked.returncode == 0 and signalled.returncode == 0, checked.stderr + signalled.stderr
        assert "sixdim: configuration OK" in checked.stdout and "suite fast: every 2 s" in checked.stdout
        reloaded = wait_for(lambda m: [s for s in m["sixdim_config_last_reload_timestamp_seconds"]
                                       if s.value > loaded], "a newer sixdim_config_last_reload_timestamp_seconds", 30)
        assert reloaded and scrape(url)["sixdim_config_reload_success"][0].value == 1.0
        assert "SIGHUP: configuration reloaded" in log_path.read_text()

        # systemctl stop: KillSignal= (SIGTERM), exit 0 well within TimeoutStopSec=
        marker = f"SIXDIM_STATE_DIR={state}"
        assert process.pid in _processes_with(marker)
        started = time.monotonic()
        process.send_signal(getattr(signal, value(unit, "Service", "KillSignal") or "SIGTERM"))
        code = process.wait(timeout=timespan(value(unit, "Service", "TimeoutStopSec")))
        took = time.monotonic() - started
        assert code == 0, log_path.read_text()
        assert took < AGENT_STOP_SECONDS, took
        assert _processes_with(marker) == []  # no worker left for KillMode=control-group to find
    finally:
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
        shutil.rmtree(base, ignore_errors=True)


def _group_exists(name: str) -> bool:
    try:
        grp.getgrnam(name)
        return True
    except KeyError:
        return False


# --------------------------------------------------------------------------- (d) the unit under systemd

NEST = r"""
set -eu
# private mount namespace (unshare -m --propagation private): nothing below is seen outside
mount -t tmpfs -o mode=0755 sixdim-nest "$NEST"
mount -t tmpfs tmpfs /run
mkdir -p "$NEST/upper" "$NEST/work" "$NEST/root"
mount -t overlay overlay -o "lowerdir=/,upperdir=$NEST/upper,workdir=$NEST/work" "$NEST/root"
R="$NEST/root"
# the unit as shipped, its sysusers.d entry applied, an environment file, a configuration
install -m 0644 "$STAGE/sixdim.service" "$R/etc/systemd/system/sixdim.service"
mkdir -p "$R/etc/sysusers.d" "$R/etc/sixdim" "$R/etc/default"
install -m 0644 "$STAGE/sixdim.sysusers" "$R/etc/sysusers.d/sixdim.conf"
systemd-sysusers --root="$R" >/dev/null
install -m 0644 "$STAGE/sixdim.toml" "$R/etc/sixdim/sixdim.toml"
install -m 0644 "$STAGE/default-sixdim" "$R/etc/default/sixdim"
# /usr/local/bin/sixdim: this checkout's, as a system-wide pip install would put it there
mkdir -p "$R/usr/local/bin"
if [ -n "${BRIDGE_PYTHON:-}" ]; then
    "$BRIDGE_PYTHON" -m venv --without-pip "$R/opt/sixdim"
    SITE=$("$R/opt/sixdim/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    printf '%s\n' "$PTH" > "$SITE/sixdim-checkout.pth"
    printf '#!/opt/sixdim/bin/python\nimport sys\nfrom sixdim.cli import main\nsys.exit(main())\n' \
        > "$R/usr/local/bin/sixdim"
    chmod 0755 "$R/usr/local/bin/sixdim"
else
    ln -sf "$VENV_SIXDIM" "$R/usr/local/bin/sixdim"
fi
# boot only what the service needs: none of the host's enabled units, nothing that touches hardware
rm -rf "$R"/etc/systemd/system/*.wants
install -m 0644 "$STAGE/nest.target" "$R/etc/systemd/system/nest.target"
for u in systemd-udevd.service systemd-udev-trigger.service systemd-firstboot.service systemd-repart.service \
         systemd-timesyncd.service systemd-sysctl.service systemd-binfmt.service systemd-modules-load.service \
         systemd-pstore.service dev-hugepages.mount proc-sys-fs-binfmt_misc.automount; do
    ln -sf /dev/null "$R/etc/systemd/system/$u"
done
systemd-id128 new > "$R/etc/machine-id"
exec systemd-nspawn --quiet -D "$R" --register=no --keep-unit --private-network -M sixdim-nest "$@" \
    -b -- --unit=nest.target
"""

# The CPU all-reduce too: gloo needs AF_NETLINK (getifaddrs), which RestrictAddressFamilies= must allow.
ALLREDUCE_SUITE = """
[[suites]]
name = "net"
interval_seconds = 3600
export = "shapes"
devices = ["cpu"]
timeout_seconds = 120
workloads = [{name = "allreduce", params = {scale = 256, rounds = 3}}]
"""

NEST_TARGET = """[Unit]
Description=sixdim.service and what it depends on, nothing else
Requires=sixdim.service
After=sixdim.service
"""


class Nest:
    """A systemd 252 booted by systemd-nspawn on an overlay of / in a private mount namespace."""

    def __init__(self, stage: Path, env: dict[str, str], binds: list[str]):
        self.log = open(stage / "nspawn.log", "wb")
        self.log_path = stage / "nspawn.log"
        self.process = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", NEST, "nest",
                                         *(f"--bind-ro={path}" for path in binds)],
                                        env={**os.environ, **env}, stdin=subprocess.DEVNULL, stdout=self.log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        self.leader = self._find_leader(timeout=60)

    def _find_leader(self, timeout: float) -> int | None:
        """The container's PID 1 (systemd): nspawn's child."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit():
                    try:
                        stat = (entry / "stat").read_text()
                        comm = (entry / "comm").read_text().strip()
                    except OSError:
                        continue
                    if int(stat.rsplit(")", 1)[1].split()[1]) == self.process.pid and comm == "systemd":
                        return int(entry.name)
            time.sleep(0.2)
        return None

    def run(self, *argv: str, net_only: bool = False, timeout: float = 60) -> subprocess.CompletedProcess:
        where = ["-n"] if net_only else ["-a"]
        return subprocess.run(["nsenter", "-t", str(self.leader), *where, *argv], capture_output=True, text=True,
                              timeout=timeout)

    def shell(self, line: str) -> str:
        done = self.run("sh", "-c", line)
        assert done.returncode == 0, f"{line}: {done.stdout}{done.stderr}"
        return done.stdout.strip()

    def metrics(self) -> dict[str, list]:
        done = self.run(sys.executable, "-c", "import sys, urllib.request; sys.stdout.write(urllib.request."
                        "urlopen('http://127.0.0.1:9480/metrics', timeout=5).read().decode())", net_only=True)
        if done.returncode != 0:
            return {}
        found: dict[str, list] = {}
        for family in text_string_to_metric_families(done.stdout):
            for sample in family.samples:
                found.setdefault(sample.name, []).append(sample)
        return found

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # nspawn: halt the container
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()


@pytest.mark.slow
def test_the_unit_under_a_real_systemd_runs_the_agent_sandboxed_reloads_it_and_stops_it(unit, runtime, tmp_path):
    for tool, package in (("systemd-nspawn", "systemd-container"), ("unshare", "util-linux"),
                          ("nsenter", "util-linux"), ("systemd-sysusers", "systemd"), ("systemd-id128", "systemd")):
        required_tool(tool, package)
    # what the service reads of this checkout, at the same paths in the container (read-only)
    paths = {str(ROOT), sys.prefix, *runtime.site_dirs}
    binds = sorted(p for p in paths if not any(p.startswith(q + "/") for q in paths))
    hidden = sorted(p for p in binds if (p + "/").startswith(tuple(h + "/" for h in HIDDEN_FROM_SERVICE)))
    if hidden:
        pytest.skip(f"the unit's ProtectHome=/PrivateTmp= hide {', '.join(hidden)} from the service: the unit "
                    f"expects sixdim installed outside /home, /root and /tmp")
    stage = tmp_path / "stage"
    stage.mkdir()
    shutil.copy(UNIT, stage / "sixdim.service")
    shutil.copy(SYSUSERS, stage / "sixdim.sysusers")
    (stage / "sixdim.toml").write_text('[agent]\nhostname = "nested"\n' + FAST_GEMM_SUITE + ALLREDUCE_SUITE)
    (stage / "default-sixdim").write_text("SIXDIM_CONFIG=/etc/sixdim/sixdim.toml\n")
    (stage / "nest.target").write_text(NEST_TARGET)
    nest_dir = tmp_path / "nest"
    nest_dir.mkdir()
    env = {"NEST": str(nest_dir), "STAGE": str(stage), "BRIDGE_PYTHON": runtime.bridge_python or "",
           "PTH": "import site; " + "; ".join(f"site.addsitedir({d!r})" for d in runtime.site_dirs),
           "VENV_SIXDIM": str(runtime.sixdim)}
    nest = Nest(stage, env, binds)
    try:
        if nest.leader is None:
            pytest.skip(f"this machine cannot boot systemd in systemd-nspawn: {nest.output()}")
        state = ""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            state = nest.run("systemctl", "is-active", "sixdim.service").stdout.strip()
            if state in ("active", "failed"):
                break
            time.sleep(0.5)
        status = lambda: nest.run("sh", "-c", "systemctl status --no-pager -n 0 sixdim.service; "  # noqa: E731
                                  "journalctl --no-pager -n 40 -u sixdim.service").stdout
        assert state == "active", f"sixdim.service is {state!r}:\n{status()}\n{nest.output()}"

        deadline = time.monotonic() + 240
        wanted = ("sixdim_workload_flops", "sixdim_workload_bus_bytes_per_second")
        while not all((metrics := nest.metrics()).get(name) for name in wanted):
            failed = [s for s in metrics.get("sixdim_workload_runs_total", []) if s.labels["status"] != "ok"]
            assert not failed, f"{failed}\n{status()}"
            assert time.monotonic() < deadline, f"no {' and '.join(wanted)}:\n{status()}"
            assert nest.run("systemctl", "is-active", "sixdim.service").stdout.strip() == "active", status()
            time.sleep(1)

        # the agent as the unit made it: user sixdim with video, no privilege, seccomp, its state directory
        main_pid = nest.shell("systemctl show -p MainPID --value sixdim.service")
        proc = dict(line.split(":", 1) for line in nest.shell(f"cat /proc/{main_pid}/status").splitlines())
        uid, video = nest.shell("id -u sixdim"), nest.shell("getent group video | cut -d: -f3")
        assert proc["Uid"].split() == [uid] * 4
        assert video in proc["Groups"].split()
        assert proc["NoNewPrivs"].strip() == "1" and proc["Seccomp"].strip() == "2"
        assert int(proc["CapBnd"], 16) == 0 and int(proc["CapEff"], 16) == 0
        assert nest.shell(f"stat -c '%a %U' {STATE} {STATE}/history.db").splitlines() == ["700 sixdim", "600 sixdim"]
        environ = nest.shell(f"tr '\\0' '\\n' < /proc/{main_pid}/environ").splitlines()
        assert f"SIXDIM_STATE_DIR={STATE}" in environ and f"HOME={STATE}" in environ

        # systemctl reload of a bad edit: the check fails the reload, with the error in the journal;
        # the daemon is not signalled and keeps running
        loaded = nest.metrics()["sixdim_config_last_reload_timestamp_seconds"][0].value
        nest.shell("cp -p /etc/sixdim/sixdim.toml /etc/sixdim/good.toml && "
                   "printf '\\n[bogus]\\nx = 1\\n' >> /etc/sixdim/sixdim.toml")
        assert nest.run("systemctl", "reload", "sixdim.service").returncode != 0
        assert nest.run("systemctl", "is-active", "sixdim.service").stdout.strip() == "active", status()
        journal = nest.shell("journalctl --no-pager -u sixdim.service")
        assert "sixdim: error: /etc/sixdim/sixdim.toml: bogus: " in journal, journal
        assert nest.metrics()["sixdim_config_last_reload_timestamp_seconds"][0].value == loaded
        nest.shell("mv /etc/sixdim/good.toml /etc/sixdim/sixdim.toml")

        # systemctl reload: ExecReload= (the check, then SIGHUP), a newer load time and success
        assert nest.run("systemctl", "reload", "sixdim.service").returncode == 0
        deadline = time.monotonic() + 30
        while nest.metrics()["sixdim_config_last_reload_timestamp_seconds"][0].value <= loaded:
            assert time.monotonic() < deadline, status()
            time.sleep(0.5)
        assert nest.metrics()["sixdim_config_reload_success"][0].value == 1.0

        # systemctl stop: every process of the service gone, exit 0, well within TimeoutStopSec=
        started = time.monotonic()
        assert nest.run("systemctl", "stop", "sixdim.service", timeout=120).returncode == 0
        took = time.monotonic() - started
        shown = dict(line.split("=", 1) for line in nest.shell(
            "systemctl show -p Result -p ExecMainStatus -p ActiveState sixdim.service").splitlines())
        assert shown == {"Result": "success", "ExecMainStatus": "0", "ActiveState": "inactive"}, status()
        assert took < AGENT_STOP_SECONDS, took
        assert nest.run("pgrep", "-u", "sixdim").stdout == ""
        print(f"nested systemd: {nest.shell('systemctl --version | head -1')}; sixdim via {runtime.note}; "
              f"stopped in {took:.2f} s")
    finally:
        nest.close()
