"""Version and setting changes seen between runs: the ``on_change`` suites run at once.

A driver, CUDA, cuDNN, NCCL or torch upgrade, or a changed power limit, clock setting, ECC or MIG mode,
is when performance is most likely to change, and the daily full suite would measure it up to a day
later.  :class:`ChangeWatch` looks every :data:`CHANGE_POLL_SECONDS` and starts each suite that says
``on_change = true`` (the embedded default's ``quick``) on every device where what it would run under now
differs from what it last ran under there, or where it never ran.

What it would run under now is the newest of two views, neither of which needs a worker:

- NVML's, read by the daemon: the driver's version (read afresh, not the one cached at start) and the
  GPU's settings (:func:`sixdim.core.conditions.setting_versions`);
- the history's: the versions the newest run of any suite on that device recorded (torch, the CUDA
  runtime, cuDNN and NCCL are known only to a worker, and the frequent tier reports them every 15
  minutes).

A version the two sides do not both name (an unreadable setting, a CPU run without cuDNN) is no change.
Each change starts a suite once per device: the watch remembers what it started the suite for, so a
run the idle guard skipped is not retried every minute (the next change, or the suite's own schedule,
runs it).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from sixdim.collectors.nvml import NvmlCollector
from sixdim.config import Suite
from sixdim.core.conditions import VERSION_KEYS, WORKLOAD_VERSION_KEYS, setting_versions
from sixdim.run.devices import Device
from sixdim.store.history import History

log = logging.getLogger(__name__)

CHANGE_POLL_SECONDS = 60.0
"""How often the watch looks: a change starts its suites within about a minute (the bound is 5)."""

CHANGE_KEYS: tuple[str, ...] = tuple(k for k in VERSION_KEYS if k not in WORKLOAD_VERSION_KEYS)
"""The versions and settings whose change starts the ``on_change`` suites: every break point of the
verdicts that concerns every workload (an ONNX Runtime upgrade concerns the onnx workload alone)."""

NEVER_RAN = "it has not run on this device yet"


def nvml_view(nvml: NvmlCollector, device: Device) -> dict[str, str]:
    """What NVML says of a GPU now, without a worker: the driver's version and the GPU's settings."""
    if device.type != "cuda" or device.index is None:
        return {}
    view = setting_versions(nvml.conditions(device.index))
    driver = nvml.read_driver_version()
    if driver:
        view["driver"] = driver
    return view


def changes(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """Each version or setting both sides name and that differs, as ``driver 550.54.15 → 560.35.03``."""
    return [f"{key} {before[key]} → {now[key]}" for key in CHANGE_KEYS
            if before.get(key) and now.get(key) and str(before[key]) != str(now[key])]


class ChangeWatch:
    """Starts the ``on_change`` suites of a plan where versions or settings changed (see the module)."""

    def __init__(self, history: History, nvml: NvmlCollector, plan: list[tuple[Suite, list[Device]]],
                 run_now: Callable[[Suite, Device, str], bool], *, poll_seconds: float = CHANGE_POLL_SECONDS):
        """``run_now(suite, device, why)`` starts a suite run now and says whether it did (False: one is
        already waiting to start)."""
        self._history = history
        self._nvml = nvml
        self._run_now = run_now
        self.poll_seconds = poll_seconds
        self._lock = threading.Lock()
        self._plan = self._watched(plan)
        self._latest: dict[tuple[str, str, str | None], tuple[int, dict[str, Any]]] = {}
        """(device, UUID, suite or None for any) -> the row id and environment of the newest such run found:
        each look reads only the runs recorded since."""
        self._started: dict[tuple[str, str], tuple[str, ...]] = {}
        """(suite, device) -> what its last change-started run was for: one run per change."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def _watched(plan: list[tuple[Suite, list[Device]]]) -> list[tuple[Suite, Device]]:
        return [(suite, device) for suite, devices in plan if suite.on_change for device in devices]

    def replace(self, plan: list[tuple[Suite, list[Device]]]) -> None:
        """A reloaded configuration's plan (SIGHUP)."""
        with self._lock:
            self._plan = self._watched(plan)

    def check(self) -> list[tuple[str, str, str]]:
        """Look once: start every watched suite whose device changed; returns (suite, device, why) of each
        suite started."""
        with self._lock:
            plan = list(self._plan)
        started = []
        now: dict[str, dict[str, Any]] = {}  # each device read once a look, however many suites watch it
        for suite, device in plan:
            why, target = self._why(suite, device, now)
            key = (suite.name, device.name)
            if why is None or self._started.get(key) == target:
                continue
            if self._run_now(suite, device, why):
                self._started[key] = target
                started.append((suite.name, device.name, why))
        return started

    def _why(self, suite: Suite, device: Device, now: dict[str, dict[str, Any]]) -> tuple[str | None, tuple[str, ...]]:
        """Why ``suite`` should run on ``device`` now (None: no reason), and what it would run for; ``now``: what
        each device would run under, as read in this look (filled here where missing)."""
        last = self._environment(device, suite.name)
        if last is None:
            return NEVER_RAN, (NEVER_RAN,)
        if device.name not in now:
            now[device.name] = {**(self._environment(device) or {}), **nvml_view(self._nvml, device)}
        found = changes(last, now[device.name])
        if not found:
            return None, ()
        return "changed since its last run here: " + ", ".join(found), tuple(found)

    def _environment(self, device: Device, suite: str | None = None) -> dict[str, Any] | None:
        """The environment of the newest run on ``device`` (of ``suite``, or of any)."""
        key = (device.name, device.uuid, suite)
        known = self._latest.get(key)
        found = self._history.latest_environment(device.name, device.uuid, suite, after_id=known[0] if known else 0)
        if found is not None:
            self._latest[key] = known = found
        return known[1] if known is not None else None

    def start(self) -> ChangeWatch:
        """Look now, then every :attr:`poll_seconds`, on a thread of its own, until :meth:`stop`."""
        self._thread = threading.Thread(target=self._loop, daemon=True, name="change-watch")
        self._thread.start()
        return self

    def _loop(self) -> None:
        wait = 0.0
        while not self._stop.wait(wait):
            wait = self.poll_seconds
            try:
                self.check()
            except Exception as exc:  # a locked history, NVML mid-upgrade: look again at the next poll
                log.warning("version watch: could not look for changes (%s); trying again in %g s", exc,
                            self.poll_seconds)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10.0)
