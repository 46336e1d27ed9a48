"""MindSpore's summary files (``events.out.events.summary.*_MS``), read without MindSpore.

Torch-free and standard library only.  ``SummaryRecord`` and the ``SummaryCollector`` callback write them;
MindInsight, their only reader, has had no release since 2.3 and no longer installs beside current
MindSpore, so sixdim reads them itself: the record framing and the two protobuf messages it needs are
small enough to decode by hand, and doing so needs neither MindSpore nor the protobuf package.

The framing is TFRecord's, as MindSpore's event writer (``mindspore/ccsrc/utils/summary/event_writer.cc``)
writes it: a little-endian uint64 length, the masked CRC32C of those 8 bytes, the data, the masked CRC32C of
the data.  Both CRCs are checked: a file cut mid-record or with a wrong CRC is refused with the byte it
failed at, never read in part (a reading taken from a damaged file could be any number).

The data is an ``Event`` of ``mindspore/ccsrc/utils/summary.proto`` (proto2): ``wall_time`` (1, double),
``step`` (2, int64), and one of ``version`` (3, ``MindSpore.Event:1``: the first record of every file),
``graph_def`` (4), ``summary`` (5) or ``explain`` (6).  A ``Summary`` is repeated ``Value`` (1): a ``tag``
(1) and one of ``scalar_value`` (3, a float32: TensorBoard keeps its ``simple_value`` in field 2),
``image`` (4), ``tensor`` (8), ``histogram`` (9), or a later kind (``loss_landscape``).  Scalars are
read; everything else is counted, not decoded.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

NAME_MARK = ".out.events.summary."
"""What every summary file's name holds (MindSpore's ``EVENT_FILE_NAME_MARK``)."""
OTHER_SUFFIXES = ("_lineage", "_explain")
"""SummaryCollector's lineage file and the explainer's file share the mark but hold other messages."""
VERSION_MARK = "mindspore.event:"
"""The first event's ``version``, lower-cased (``MindSpore.Event:1``; early releases wrote ``Mindspore``)."""
HEADER = 12
FOOTER = 4
KINDS = {4: "images", 8: "tensors", 9: "histograms"}
"""``Summary.Value`` fields that are not scalars, by the name the details count them under."""


class SummaryError(ValueError):
    """A file that is not a MindSpore summary, or a damaged one: the message says where and why."""


def is_summary_name(name: str) -> bool:
    """Whether a file name is a MindSpore summary file's (not its lineage or explainer file)."""
    return NAME_MARK in name and not name.endswith(OTHER_SUFFIXES)


# --- CRC32C (Castagnoli), masked as TFRecord and MindSpore mask it -----------------------------------

def _table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC_TABLE = _table()


def crc32c(data: bytes | memoryview) -> int:
    """The CRC32C of ``data`` (no CRC32C in the standard library; zlib's CRC-32 is another polynomial)."""
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for byte in bytes(data):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes | memoryview) -> int:
    """MindSpore's ``GetMaskCrc32cValue``: the CRC rotated right by 15 bits plus a constant."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(data: bytes) -> Iterator[memoryview]:
    """Each record's data, in file order, both CRCs checked; a cut or damaged record raises :class:`SummaryError`."""
    view = memoryview(data)
    offset = 0
    while offset < len(data):
        if len(data) - offset < HEADER:
            raise SummaryError(f"cut at byte {len(data)}: a record's header is {HEADER} bytes, "
                               f"{len(data) - offset} are left")
        length, length_crc = struct.unpack_from("<QI", data, offset)
        if masked_crc(view[offset:offset + 8]) != length_crc:
            if offset == 0:
                raise SummaryError("not a MindSpore summary file: its first 12 bytes are not a record header "
                                   "(the length's CRC does not match)")
            raise SummaryError(f"damaged at byte {offset}: the record length's CRC does not match")
        end = offset + HEADER + length + FOOTER
        if end > len(data):
            raise SummaryError(f"cut at byte {len(data)}: the record at byte {offset} needs {length} bytes of data "
                               f"and its CRC, {len(data) - offset - HEADER} are left (a run still writing, or killed)")
        payload = view[offset + HEADER:end - FOOTER]
        if masked_crc(payload) != struct.unpack_from("<I", data, end - FOOTER)[0]:
            raise SummaryError(f"damaged at byte {offset}: the CRC of the record's {length} bytes does not match")
        yield payload
        offset = end


# --- Protobuf wire format, the little of it these messages use ------------------------------------

def _varint(data: memoryview, offset: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if offset >= len(data) or shift > 63:
            raise SummaryError("a message's varint is cut or too long")
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, offset
        shift += 7


def fields(data: memoryview) -> Iterator[tuple[int, int, int | memoryview]]:
    """(field number, wire type, value) of each field of a message: a varint as an int, a fixed64,
    fixed32 or length-delimited field as its bytes.  Groups (wire types 3, 4) are not used by these
    messages and are refused."""
    offset = 0
    while offset < len(data):
        key, offset = _varint(data, offset)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, offset = _varint(data, offset)
            yield number, wire, value
            continue
        if wire == 2:
            size, offset = _varint(data, offset)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
        else:
            raise SummaryError(f"field {number} has wire type {wire}, which summary.proto never writes")
        if offset + size > len(data):
            raise SummaryError(f"field {number} runs past the end of its message")
        yield number, wire, data[offset:offset + size]
        offset += size


def float32(raw: bytes | memoryview) -> float:
    """A stored float32 as the shortest decimal that is the same float32 (0.6, not 0.6000000238418579)."""
    value: float = struct.unpack("<f", raw)[0]
    if value != value or value in (float("inf"), float("-inf")):
        return value
    for digits in range(1, 10):
        short = float(f"{value:.{digits}g}")
        if struct.pack("<f", short) == bytes(raw):
            return short
    return value


# --- Events ------------------------------------------------------------------------------------

@dataclass
class Scalar:
    wall: float
    step: int
    value: float


@dataclass
class Summary:
    """What one summary file holds: every scalar by tag (in the order written), the counts of what is
    not read, the file's version and its first event's wall time."""

    scalars: dict[str, list[Scalar]] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    version: str = ""
    first_wall: float | None = None
    """The earliest event's wall time: the version event is written when the writer process opens the
    file, which may be after the first values were taken."""
    events: int = 0
    rewritten: int = 0
    """Readings of a tag at the step of its previous one, which replaced it: SummaryCollector writes an
    epoch's last step again at the epoch's end (MindInsight, too, shows one value per step)."""

    def skip(self, kind: str, count: int = 1) -> None:
        self.skipped[kind] = self.skipped.get(kind, 0) + count

    def add(self, tag: str, scalar: Scalar) -> None:
        series = self.scalars.setdefault(tag, [])
        if series and series[-1].step == scalar.step:
            series[-1] = scalar
            self.rewritten += 1
        else:
            series.append(scalar)


def _text(raw: int | memoryview) -> str:
    return bytes(raw).decode("utf-8", "replace") if isinstance(raw, memoryview) else ""


def _value(raw: memoryview, wall: float, step: int, summary: Summary) -> None:
    """One ``Summary.Value``: a scalar into its tag's series, anything else counted by kind."""
    tag, scalar, kinds = "", None, []
    for number, wire, value in fields(raw):
        if number == 1 and wire == 2:
            tag = _text(value)
        elif number == 3 and wire == 5 and isinstance(value, memoryview):
            scalar = float32(value)
        elif number != 1:
            kinds.append(KINDS.get(number, "other values"))
    if scalar is not None:
        summary.add(tag, Scalar(wall, step, scalar))
    for kind in kinds[:1]:
        summary.skip(kind)


def _event(raw: memoryview, summary: Summary, first: bool) -> None:
    wall, step = None, 0
    version: str | None = None
    payloads: list[memoryview] = []
    for number, wire, value in fields(raw):
        if number == 1 and wire == 1 and isinstance(value, memoryview):
            wall = struct.unpack("<d", value)[0]
        elif number == 2 and wire == 0 and isinstance(value, int):
            step = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 3 and wire == 2:
            version = _text(value)
        elif number == 4:
            summary.skip("graphs")
        elif number == 5 and wire == 2 and isinstance(value, memoryview):
            payloads.append(value)
        elif number == 6:
            summary.skip("explanations")
    if first:
        if version is None:
            raise SummaryError("not a MindSpore summary file: its first record is not the version event "
                               "(MindSpore.Event:1)")
        if not version.lower().startswith(VERSION_MARK):
            raise SummaryError(f"not a MindSpore summary file: its version is {version[:40]!r}, not MindSpore.Event "
                               "(a TensorBoard file says brain.Event: name it *tfevents* and use format 'tensorboard')")
        summary.version = version
    if wall is None:
        raise SummaryError(f"event {summary.events + 1} has no wall_time, which summary.proto requires")
    if summary.first_wall is None or wall < summary.first_wall:
        summary.first_wall = wall
    for payload in payloads:
        for number, wire, value in fields(payload):
            if number == 1 and wire == 2 and isinstance(value, memoryview):
                _value(value, wall, step, summary)


def read_summary(data: bytes) -> Summary:
    """Every scalar of a summary file's bytes; :class:`SummaryError` for a file that is not one, or a damaged one."""
    summary = Summary()
    for index, record in enumerate(records(data)):
        _event(record, summary, first=index == 0)
        summary.events += 1
    if not summary.events:
        raise SummaryError("empty: no record written yet")
    return summary
