"""Synthetic inputs for an ONNX model, made from its declared input shapes and types.

Two steps, so that the daemon can do the first at configuration time without numpy or
onnxruntime (:mod:`sixdim.workloads.onnx.info` reads the declarations):

1. :func:`resolve_shapes`: every dynamic dimension gets a size from the parameters. The first
   dimension of an input, when dynamic, is the batch (and so is every dimension sharing its name);
   a dimension named like a sequence length (:data:`SEQUENCE_DIMS`) gets ``sequence_length``; any
   other needs ``dims = ["NAME=SIZE"]`` (or ``"INPUT:AXIS=SIZE"`` for an unnamed one). One that no
   parameter covers raises :class:`DimError` naming it: a configuration error where the file can be
   read then, a failed case otherwise.
2. :func:`make_inputs`: seeded values of the declared types. Floats are standard normal; integer
   inputs are token ids in ``[0, vocab_size)``, except by name: ``*mask*`` all ones,
   ``*token_type*``/``*segment*`` zeros, ``*position*`` 0, 1, 2, ... along the last axis; uint8
   (images) in [0, 255]; booleans (masks) all true.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sixdim.workloads.onnx.info import TensorInfo

SEQUENCE_DIMS = ("seq", "sequence", "seq_len", "seqlen", "seq_length", "sequence_len", "sequence_length",
                 "num_tokens", "tokens")
"""Dynamic dimension names (case-insensitive) that ``sequence_length`` sets."""

ORT_TYPES = {"float": "float32", "double": "float64", "float16": "float16", "bfloat16": "bfloat16",
             "int64": "int64", "int32": "int32", "int16": "int16", "int8": "int8", "uint8": "uint8",
             "uint16": "uint16", "uint32": "uint32", "uint64": "uint64", "bool": "bool", "string": "string"}
"""onnxruntime's ``tensor(...)`` type names as numpy names them."""


DEFAULT_SEQUENCE_LENGTH = 128
"""A user's model's sequence dimensions get this unless ``sequence_length`` says otherwise."""
DEFAULT_VOCABULARY = 1000
"""Token ids of a user's model are drawn from [0, this) unless ``vocab_size`` says otherwise."""


class DimError(ValueError):
    """A dynamic dimension no parameter sets, or a ``dims`` entry that is malformed or names nothing."""


def parse_dims(items: Iterable[str]) -> dict[str, int]:
    """``["seq=128", "pixel_values:2=224"]`` as a mapping; raises DimError on a malformed item."""
    out: dict[str, int] = {}
    for item in items:
        name, sep, value = str(item).rpartition("=")
        name = name.strip()
        try:
            size = int(value)
        except ValueError:
            size = 0
        if not sep or not name or size < 1:
            raise DimError(f"dims entry {item!r}: expected NAME=SIZE or INPUT:AXIS=SIZE with SIZE >= 1")
        out[name] = size
    return out


def from_ort(node_args: Sequence[Any]) -> tuple[TensorInfo, ...]:
    """onnxruntime's view of a session's inputs (``session.get_inputs()``) as TensorInfo."""
    out = []
    for arg in node_args:
        kind = str(arg.type)
        element = ORT_TYPES.get(kind[len("tensor("):-1], kind) if kind.startswith("tensor(") else ""
        shape = arg.shape
        dims = None if shape is None else tuple(d if isinstance(d, (int, str)) and d != "" and
                                                 not (isinstance(d, int) and d <= 0) else None for d in shape)
        out.append(TensorInfo(arg.name, element, dims))
    return tuple(out)


def fixed_batch(inputs: Sequence[TensorInfo]) -> tuple[str, int] | None:
    """(input, size) of the first input whose leading dimension is fixed, or None when every
    input's batch is dynamic (scalars and undeclared shapes do not count)."""
    for info in inputs:
        if info.dims and isinstance(info.dims[0], int):
            return info.name, info.dims[0]
    return None


def resolve_shapes(inputs: Sequence[TensorInfo], batch: int, sequence_length: int,
                   dims: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
    """The concrete shape of every input for one case (see the module's docstring)."""
    batch_names = {info.dims[0] for info in inputs if info.dims and isinstance(info.dims[0], str)}
    used: set[str] = set()
    shapes: dict[str, tuple[int, ...]] = {}
    for info in inputs:
        if info.dims is None:
            raise DimError(f"input {info.name!r} declares no shape, so its size cannot be chosen "
                           "(export the model with a shape for it)")
        shape = []
        for axis, dim in enumerate(info.dims):
            by_axis = f"{info.name}:{axis}"
            if by_axis in dims:
                used.add(by_axis)
                shape.append(dims[by_axis])
            elif isinstance(dim, int):
                shape.append(dim)
            elif dim is not None and dim in dims:
                used.add(dim)
                shape.append(dims[dim])
            elif axis == 0 or (dim is not None and dim in batch_names):
                shape.append(batch)
            elif dim is not None and dim.lower() in SEQUENCE_DIMS:
                shape.append(sequence_length)
            elif dim is None:
                raise DimError(f"input {info.name!r} has a dynamic, unnamed dimension at axis {axis} that no "
                               f"parameter sets: give its size with dims = [\"{by_axis}=SIZE\"]")
            else:
                raise DimError(f"input {info.name!r} has the dynamic dimension {dim!r} (axis {axis}) that no "
                               f"parameter sets: give its size with dims = [\"{dim}=SIZE\"]")
        shapes[info.name] = tuple(shape)
    unused = sorted(set(dims) - used)
    if unused:
        named = sorted({d for info in inputs for d in (info.dims or ()) if isinstance(d, str)})
        raise DimError(f"dims names {', '.join(map(repr, unused))}, which is no dynamic dimension of the model "
                       f"(its named ones: {', '.join(named) or 'none'}; unnamed ones are INPUT:AXIS)")
    return shapes


def make_inputs(inputs: Sequence[TensorInfo], shapes: Mapping[str, tuple[int, ...]], vocab_size: int,
                seed: int) -> dict[str, Any]:
    """Seeded numpy arrays for every input (see the module's docstring); raises TypeError for an
    input type that cannot be made (strings, sequences, maps, bfloat16, which numpy lacks).

    Each item along the first (batch) axis has its own seed, so the first sample is the same at
    every batch size: its reference output is computed once for all of a model's cases."""
    import numpy as np

    out: dict[str, Any] = {}
    for index, info in enumerate(inputs):
        shape = shapes[info.name]
        if not shape:
            out[info.name] = _values(info, shape, vocab_size, np.random.default_rng([seed, index]))
            continue
        rows = [_values(info, shape[1:], vocab_size, np.random.default_rng([seed, index, i])) for i in range(shape[0])]
        out[info.name] = np.ascontiguousarray(np.stack(rows)) if rows else \
            _values(info, shape, vocab_size, np.random.default_rng([seed, index]))
    return out


def _values(info: TensorInfo, shape: tuple[int, ...], vocab_size: int, rng: Any) -> Any:
    import numpy as np

    kind, name = info.element_type, info.name.lower()
    if kind in ("float16", "float32", "float64"):
        return rng.standard_normal(shape, dtype=np.float32).astype(kind)
    if kind == "bool":
        return np.ones(shape, dtype=bool)
    if kind in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"):
        if "mask" in name:
            values = np.ones(shape, dtype=np.int64)
        elif "token_type" in name or "segment" in name:
            values = np.zeros(shape, dtype=np.int64)
        elif "position" in name and shape:
            values = np.broadcast_to(np.arange(shape[-1], dtype=np.int64), shape)
        else:
            high = 256 if kind == "uint8" else vocab_size
            values = rng.integers(0, min(high, int(np.iinfo(kind).max) + 1), shape, dtype=np.int64)
        return values.astype(kind)
    raise TypeError(f"input {info.name!r} is of type {kind or 'non-tensor'}, which sixdim cannot make synthetic "
                    "values for")
