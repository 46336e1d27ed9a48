"""What a workload is, without running it: its name, parameters, cases and entry point.

Specs are plain data so that the daemon, ``sixdim list`` and the configuration
loader can describe and validate workloads without importing torch.  Only the
worker child process imports the entry point.

A workload run expands into **cases**: one per shape, precision and pass (a
GEMM shape set in three precisions is many cases).  One worker runs all the
cases of a run, so torch is imported once; each case becomes its own result.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from sixdim.core.results import SHAPE_SET

DeviceType = Literal["cpu", "cuda"]

MAX_MAGNITUDE = 2**53
"""The largest magnitude of a numeric parameter unless its spec sets a ``maximum`` (9,007,199,254,740,992:
the largest whole number a float, JSON and the history hold exactly).  Beyond it a value is a typo, or an
attack: ``m = 10**4000`` would reach the worker as a 4,000-digit shape."""

MAX_DURATION_SECONDS = 365 * 86400
"""The longest duration parameter (named ``*_seconds`` or ``*_timeout``) unless its spec sets a
``maximum``: a year, as for a suite's seconds keys (:data:`sixdim.config.schema.MAX_SECONDS`)."""


def brief(value: Any, limit: int = 120) -> str:
    """``repr(value)`` cut to about ``limit`` characters, for a one-line error message whatever the
    value: a 4,000-digit number, a long list or a deeply nested one."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # an int past Python's digit limit, a structure nested too deeply
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def is_duration(name: str) -> bool:
    """Whether a parameter is a duration, by its name (``power_seconds``, ``rdzv_timeout``)."""
    return name.endswith(("_seconds", "_timeout"))


class ParamError(ValueError):
    """A workload parameter is unknown or has a value of the wrong kind."""


@dataclass(frozen=True)
class Param:
    """One workload parameter, with a default per device type (CPU shapes are smaller)."""

    name: str
    kind: type
    help: str
    cpu_default: Any
    cuda_default: Any
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    """For a number: the largest value.  None: :data:`MAX_DURATION_SECONDS` for a duration (see
    :func:`is_duration`), else :data:`MAX_MAGNITUDE`.  A float must be finite in any case."""
    many: bool = False
    """A list of values (a comma-separated string on the command line)."""
    allow_empty: bool = False
    """For a list: whether an empty list is a valid value."""

    def default(self, device_type: DeviceType) -> Any:
        return self.cuda_default if device_type == "cuda" else self.cpu_default

    def bounds(self) -> tuple[float, float]:
        """The range of a numeric parameter: (lowest, highest), both inclusive."""
        high = self.maximum if self.maximum is not None else (
            MAX_DURATION_SECONDS if is_duration(self.name) else MAX_MAGNITUDE)
        low = self.minimum if self.minimum is not None else -MAX_MAGNITUDE
        return low, high

    def coerce(self, value: Any) -> Any:
        """Check and convert a configured value; raise ParamError saying what was expected."""
        if self.many:
            items = (value.split(",") if value else []) if isinstance(value, str) else value
            if not isinstance(items, (list, tuple)) or (not items and not self.allow_empty):
                raise ParamError(f"expected a list of {self.describe_expected()}, got {brief(value)}")
            return [self._coerce_one(item.strip() if isinstance(item, str) else item) for item in items]
        return self._coerce_one(value)

    def _coerce_one(self, value: Any) -> Any:
        expected = self.describe_expected()
        given = value
        try:
            if self.kind is bool:
                if isinstance(value, str) and value.lower() in {"true", "1", "yes", "false", "0", "no"}:
                    value = value.lower() in {"true", "1", "yes"}
                elif not isinstance(value, bool):
                    raise ValueError
            elif self.kind is int:
                if isinstance(value, bool) or not isinstance(value, (int, str)):
                    raise ValueError
                value = int(value)  # past Python's 4,300 digits: ValueError
            elif self.kind is float:
                if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                    raise ValueError
                value = float(value)  # an int past a float's range: OverflowError; "1e400": inf
                if not math.isfinite(value):  # NaN passes every range check (it compares false): refuse it here
                    raise ValueError
            elif not isinstance(value, str):
                raise ValueError
        except (ValueError, OverflowError):
            raise ParamError(f"expected {expected}, got {brief(given)}") from None
        if self.choices is not None and value not in self.choices:
            raise ParamError(f"expected {expected}, got {brief(given)}")
        if self.kind in (int, float):
            low, high = self.bounds()
            if not low <= value <= high:
                raise ParamError(f"expected {expected}, got {brief(given)}")
        return value

    def describe_expected(self) -> str:
        if self.choices is not None:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        noun = {int: "an integer", float: "a finite number", str: "a string", bool: "true or false"}[self.kind]
        if self.kind in (int, float):
            low, high = self.bounds()
            unit = " (seconds)" if is_duration(self.name) else ""
            if self.minimum is not None:
                return f"{noun} >= {_number_text(low)} and <= {_number_text(high)}{unit}"
            return f"{noun} from {_number_text(low)} to {_number_text(high)}{unit}"
        return noun


def _number_text(value: float) -> str:
    """A bound as people write it: whole numbers in full (``9007199254740992``), others as ``%g``."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


@dataclass(frozen=True)
class Case:
    """One measurement of a run: the parameters the worker gets, and how its series is labelled."""

    params: dict[str, Any]
    precision: str = ""
    shape: str = ""
    mode: str = ""
    """``training`` or ``inference`` (which DeepBench set the shape comes from), or empty."""
    kernel_pass: str = "forward"
    """``forward``, ``backward_data``, ``backward_weight``, ``backward``, or a workload's own name."""


METHOD_PARAMS: frozenset[str] = frozenset({
    "rounds", "min_round_seconds", "warmup_seconds", "power_seconds", "latency_samples", "warmup_steps",
    "steps_per_window", "windows", "seed", "corrupt", "slowdown_seconds"})
"""Parameters of any workload that change how a figure is measured (how many repetitions, how long a
warm-up or power phase, which random data, an injected fault for the self-test), not what it means:
they never split a series.  Everything else a suite can set does (:meth:`WorkloadSpec.cases`)."""


def _label_value(value: Any) -> str:
    """A parameter's value in a shape label: a list joined by ``+``, a float as ``%g``."""
    if isinstance(value, (list, tuple)):
        return "+".join(_label_value(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value).lower() if isinstance(value, bool) else str(value)


def shape_set_id(shapes: list[str]) -> str:
    """A short id of a set of shapes: what a suite's summary of one precision, mode and pass is a
    geometric mean over.  Two runs with the same id measured the same shapes; a configuration change
    that adds, drops or changes a shape gives a new id, and the summary starts over rather than mix
    the old shapes' last results with the new ones' (agent/verdicts/summary.py)."""
    import hashlib

    return hashlib.sha256("\n".join(sorted(set(shapes))).encode()).hexdigest()[:12]


def single_case(spec: WorkloadSpec, params: dict[str, Any], device_type: DeviceType) -> list[Case]:
    """The default expansion: the resolved parameters are the one case."""
    return [Case(params=params, precision=spec.precision(params), shape=spec.params_label(params))]


@dataclass(frozen=True)
class WorkloadSpec:
    """A named workload: its parameters, how they expand into cases, and the ``module:function`` to run."""

    name: str
    description: str
    entry: str
    params: tuple[Param, ...] = field(default_factory=tuple)
    precision_param: str | None = None
    """Which parameter names the numeric precision (exported as the ``precision`` label)."""
    label_params: tuple[str, ...] = ()
    """Parameters that change what is measured but that the expander's shape label does not name:
    each is appended to every case's shape as ``name=value`` where it differs from the device type's
    default (:meth:`cases`).  A suite that sets one gets series of its own; one that keeps the default
    keeps its series."""
    method_params: frozenset[str] = frozenset()
    """This workload's parameters that change how it is measured, not what (beyond
    :data:`METHOD_PARAMS`): they never split a series.  Every other parameter changes the cases'
    shapes (tests/test_series_identity.py holds every workload to this)."""
    expander: Callable[[WorkloadSpec, dict[str, Any], DeviceType], list[Case]] = single_case
    shapes_help: str = ""
    """What ``sixdim list`` says about the shape sets."""
    peak_kind: str | None = None
    """What to compare with the GPU's published peak: ``flops``, ``bandwidth``, or nothing."""
    uses_torch: bool = True
    """False for workloads that never import torch (a user's command): the worker then reports
    only the Python version, not torch's."""
    scope: str = "device"
    """``device``: runs on each device it is given.  ``host``: runs once per host over all its GPUs
    (all-reduce), from the job of the host's first device."""
    figures: tuple[str, ...] = ()
    """The figures this workload's own code can put in a result (``WorkloadOutput.figures``), before the
    executor adds the window's telemetry: an upper bound, read off the workload's ``run`` (and
    workloads/measure/report.py's ``kernel_output`` for the kernels); ``quality`` stands for a command's quality
    metrics, one series each.  What the series budget counts
    (agent/daemon/series.py); tests/test_series_budget.py holds each workload's real CPU results to it."""
    runs_in_ranks: bool = False
    """True where the case's work runs in rank processes it starts (all-reduce, linearity): the
    worker itself then neither resets and synchronizes its own allocator for it nor reports that
    allocator's peak as the case's memory (it would read 0, a reading of nothing)."""

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        known = ", ".join(p.name for p in self.params)
        raise ParamError(f"workload {self.name!r} has no parameter {name!r} (known: {known})")

    def resolve(self, overrides: dict[str, Any], device_type: DeviceType) -> dict[str, Any]:
        """Defaults for the device type, overridden and validated; raises ParamError."""
        resolved = {p.name: p.default(device_type) for p in self.params}
        for key, value in overrides.items():
            param = self.param(key)
            try:
                resolved[key] = param.coerce(value)
            except ParamError as exc:
                raise ParamError(f"workload {self.name!r} parameter {key!r}: {exc}") from None
        return resolved

    def cases(self, overrides: dict[str, Any], device_type: DeviceType) -> list[Case]:
        """The cases one run of this workload measures on a device of this type, each shape naming
        every parameter that changes what it measures (:attr:`label_params`), and each case's params
        carrying the id of its shape set (:data:`sixdim.core.results.SHAPE_SET`)."""
        params = self.resolve(overrides, device_type)
        cases = self.expander(self, params, device_type)
        extra = ",".join(f"{name}={_label_value(params[name])}" for name in self.label_params
                         if params[name] != self.param(name).default(device_type))
        if extra:
            cases = [replace(c, shape=f"{c.shape},{extra}" if c.shape else extra) for c in cases]
        groups: dict[tuple[str, str, str], list[str]] = {}
        for c in cases:
            groups.setdefault((c.precision, c.mode, c.kernel_pass), []).append(c.shape)
        ids = {group: shape_set_id(shapes) for group, shapes in groups.items()}
        return [replace(c, params={**c.params, SHAPE_SET: ids[(c.precision, c.mode, c.kernel_pass)]}) for c in cases]

    def precision(self, params: dict[str, Any]) -> str:
        return str(params.get(self.precision_param, "")) if self.precision_param else ""

    def params_label(self, params: dict[str, Any]) -> str:
        """The ``shape`` label: the identifying parameters, e.g. ``m=1024,n=1024,k=1024``."""
        return ",".join(f"{k}={params[k]}" for k in self.label_params if k in params)
