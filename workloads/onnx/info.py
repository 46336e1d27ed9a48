"""The declared inputs and outputs of an ONNX file, read with the standard library only.

Why not ``onnx`` or ``onnxruntime``: the daemon expands a configured workload into cases (and
refuses a bad configuration) without importing either, and a dynamic dimension that no parameter
sets should be a configuration error, not a failed run hours later.  So this module reads just
enough of the protobuf wire format (``ModelProto.graph`` → ``input``, ``output``, initializer
names) to list each input's name, element type and dimensions.  The file is memory-mapped and
every other field (weights included) is skipped by its length, so a 1 GB model costs a few page
reads, not 1 GB of memory.

Anything unexpected (not a protobuf, truncated, an unknown wire type) raises :class:`OnnxInfoError`;
callers treat that as "not knowable now" and let the worker report the problem at run time.
"""

from __future__ import annotations

import mmap
import os
import stat
from dataclasses import dataclass

Dim = int | str | None
"""One dimension: a fixed size, a named dynamic dimension (``dim_param``), or None (dynamic, unnamed)."""

ELEMENT_TYPES: dict[int, str] = {
    1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 8: "string",
    9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16",
}
"""``TensorProto.DataType`` codes, named as numpy names them (bfloat16 has no numpy type)."""

PRECISIONS = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64"}
"""Floating-point element types as sixdim's precision labels name them."""

MAX_VALUES = 100_000
"""Inputs or outputs beyond this many: not a real model (a hostile or corrupt file); refused."""


class OnnxInfoError(ValueError):
    """The file is not an ONNX model this reader understands."""


@dataclass(frozen=True)
class TensorInfo:
    """One declared graph input or output."""

    name: str
    element_type: str
    """numpy's name of the element type (``float32``, ``int64``, ``bool``, ...), or ``""`` for a
    value that is not a tensor (a sequence, a map)."""
    dims: tuple[Dim, ...] | None
    """None where the model declares no shape (any rank)."""


@dataclass(frozen=True)
class ModelInfo:
    inputs: tuple[TensorInfo, ...]
    """The inputs a caller feeds (initializers listed as inputs, as IR < 4 models do, left out)."""
    outputs: tuple[TensorInfo, ...]


def precision_of(values: tuple[TensorInfo, ...]) -> str:
    """The precision label of a model: its first floating-point output's, or "" when it has none."""
    return next((PRECISIONS[v.element_type] for v in values if v.element_type in PRECISIONS), "")


class _Reader:
    """A cursor over protobuf wire-format bytes between ``start`` and ``end``."""

    def __init__(self, data: bytes | mmap.mmap, start: int, end: int):
        self.data, self.pos, self.end = data, start, end

    def varint(self) -> int:
        value, shift = 0, 0
        while True:
            if self.pos >= self.end or shift > 63:
                raise OnnxInfoError("truncated or malformed varint")
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def fields(self):
        """(field number, wire type, value): an int for varints, a (start, end) span for
        length-delimited fields; fixed-width fields are skipped and yielded as None."""
        while self.pos < self.end:
            key = self.varint()
            number, wire = key >> 3, key & 7
            if wire == 0:
                yield number, wire, self.varint()
            elif wire == 2:
                length = self.varint()
                start = self.pos
                if length > self.end - start:
                    raise OnnxInfoError("a field runs past the end of its message (truncated file?)")
                self.pos = start + length
                yield number, wire, (start, self.pos)
            elif wire in (1, 5):
                self.pos += 8 if wire == 1 else 4
                if self.pos > self.end:
                    raise OnnxInfoError("truncated fixed-width field")
                yield number, wire, None
            else:  # groups (3, 4) are not used by ONNX; anything else is not protobuf
                raise OnnxInfoError(f"unexpected protobuf wire type {wire}")

    def sub(self, span: tuple[int, int]) -> _Reader:
        return _Reader(self.data, span[0], span[1])

    def text(self, span: tuple[int, int]) -> str:
        return bytes(self.data[span[0]:span[1]]).decode("utf-8", errors="replace")


def read(path: str | os.PathLike[str]) -> ModelInfo:
    """The declared inputs and outputs of the ONNX file at ``path``; raises OSError when it cannot
    be opened (ValueError for a path with a NUL byte) and :class:`OnnxInfoError` when it is not a
    regular file holding a model this reader understands."""
    if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO or a device would block or never end
        raise OnnxInfoError("not a regular file")
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size == 0:
            raise OnnxInfoError("empty file")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return parse(data, size)


def parse(data: bytes | mmap.mmap, size: int | None = None) -> ModelInfo:
    """:func:`read` on bytes already in memory (or mapped)."""
    model = _Reader(data, 0, len(data) if size is None else size)
    graph = None
    for number, wire, value in model.fields():
        if number == 7 and wire == 2:  # ModelProto.graph
            graph = value
    if graph is None:
        raise OnnxInfoError("no graph: not an ONNX model")
    inputs: list[TensorInfo] = []
    outputs: list[TensorInfo] = []
    initializers: set[str] = set()
    for number, wire, value in model.sub(graph).fields():
        if wire != 2:
            continue
        if number in (11, 12):  # GraphProto.input, GraphProto.output: ValueInfoProto
            (inputs if number == 11 else outputs).append(_value_info(model, value))
            if len(inputs) + len(outputs) > MAX_VALUES:
                raise OnnxInfoError(f"more than {MAX_VALUES} inputs and outputs")
        elif number == 5:  # GraphProto.initializer: TensorProto, whose name is field 8
            for n, w, v in model.sub(value).fields():
                if n == 8 and w == 2:
                    initializers.add(model.text(v))
    if not outputs:
        raise OnnxInfoError("the graph declares no output: not an ONNX model")
    return ModelInfo(tuple(i for i in inputs if i.name not in initializers), tuple(outputs))


def _value_info(model: _Reader, span: tuple[int, int]) -> TensorInfo:
    name, element_type, dims = "", "", None
    for number, wire, value in model.sub(span).fields():
        if number == 1 and wire == 2:
            name = model.text(value)
        elif number == 2 and wire == 2:  # TypeProto
            for n, w, v in model.sub(value).fields():
                if n == 1 and w == 2:  # TypeProto.tensor_type
                    element_type, dims = _tensor_type(model, v)
    return TensorInfo(name, element_type, dims)


def _tensor_type(model: _Reader, span: tuple[int, int]) -> tuple[str, tuple[Dim, ...] | None]:
    element_type, dims = "", None
    for number, wire, value in model.sub(span).fields():
        if number == 1 and wire == 0:
            element_type = ELEMENT_TYPES.get(value, f"type{value}")
        elif number == 2 and wire == 2:  # TensorShapeProto
            found: list[Dim] = []
            for n, w, v in model.sub(value).fields():
                if n == 1 and w == 2:
                    found.append(_dimension(model, v))
                    if len(found) > MAX_VALUES:
                        raise OnnxInfoError("a tensor of absurd rank")
            dims = tuple(found)
    return element_type, dims


def _dimension(model: _Reader, span: tuple[int, int]) -> Dim:
    dim: Dim = None
    for number, wire, value in model.sub(span).fields():
        if number == 1 and wire == 0:
            dim = value if value < 2**63 else value - 2**64  # int64 (a negative size means dynamic)
        elif number == 2 and wire == 2:
            dim = model.text(value) or None
    if isinstance(dim, int) and dim <= 0:
        return None
    return dim
