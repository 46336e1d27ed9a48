"""What a workload is, without running it: its name, parameters and entry point.

Specs are plain data so that the daemon, ``sixdim list`` and the configuration
loader can describe and validate workloads without importing torch.  Only the
worker child process imports the entry point.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

DeviceType = Literal["cpu", "cuda"]


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

    def default(self, device_type: DeviceType) -> Any:
        return self.cuda_default if device_type == "cuda" else self.cpu_default

    def coerce(self, value: Any) -> Any:
        """Check and convert a configured value; raise ParamError saying what was expected."""
        expected = self.describe_expected()
        if self.kind is int:
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                raise ParamError(f"expected {expected}, got {value!r}")
            try:
                value = int(value)
            except ValueError:
                raise ParamError(f"expected {expected}, got {value!r}") from None
        elif self.kind is float:
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                raise ParamError(f"expected {expected}, got {value!r}")
            try:
                value = float(value)
            except ValueError:
                raise ParamError(f"expected {expected}, got {value!r}") from None
        elif self.kind is str:
            if not isinstance(value, str):
                raise ParamError(f"expected {expected}, got {value!r}")
        if self.choices is not None and value not in self.choices:
            raise ParamError(f"expected {expected}, got {value!r}")
        if self.minimum is not None and value < self.minimum:
            raise ParamError(f"expected {expected}, got {value!r}")
        return value

    def describe_expected(self) -> str:
        if self.choices is not None:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        noun = {int: "an integer", float: "a number", str: "a string"}[self.kind]
        if self.minimum is not None:
            return f"{noun} >= {self.minimum:g}"
        return noun


@dataclass(frozen=True)
class WorkloadSpec:
    """A named workload: its parameters and the ``module:function`` the worker runs."""

    name: str
    description: str
    entry: str
    params: tuple[Param, ...] = field(default_factory=tuple)
    precision_param: str | None = None
    """Which parameter names the numeric precision (exported as the ``precision`` label)."""
    label_params: tuple[str, ...] = ()
    """Parameters that identify the measurement (shape); the rest (repetitions) do not."""

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

    def precision(self, params: dict[str, Any]) -> str:
        return str(params.get(self.precision_param, "")) if self.precision_param else ""

    def params_label(self, params: dict[str, Any]) -> str:
        """The ``params`` label: the identifying parameters, e.g. ``m=1024,n=1024,k=1024``."""
        return ",".join(f"{k}={params[k]}" for k in self.label_params if k in params)
