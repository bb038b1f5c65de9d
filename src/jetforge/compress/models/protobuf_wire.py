"""The protobuf wire format, decoded with the standard library and numpy: the part of the frozen-GraphDef reader
(:mod:`jetforge.compress.models.tf_graphdef`) that knows nothing of TensorFlow's schema.

Wire format (https://protobuf.dev/programming-guides/encoding/): a message is a sequence of
``tag value`` records, ``tag = field_number << 3 | wire_type`` as a varint; wire type 0 is a
varint (7 bits per byte, low group first, high bit set on every byte but the last, at most 10
bytes for 64 bits), 1 is 8 little-endian bytes, 2 is a varint length then that many bytes
(strings, bytes, sub-messages, packed repeated scalars), 5 is 4 little-endian bytes; 3/4 are
the deprecated groups, which TensorFlow never writes.  Unknown fields are skipped; a repeated
singular scalar keeps the last value and a repeated singular sub-message is merged (its byte
ranges concatenated, which is protobuf's merge rule); repeated scalars may come packed or not.

Every malformed byte sequence ends in one :class:`jetforge.errors.ModelError` naming where it happened (the
messages name a GraphDef: that reader is this module's one user).
"""

from typing import Any, Iterator, List, Tuple

import numpy as np

from jetforge.errors import ModelError

WIRE_VARINT, WIRE_I64, WIRE_LEN, WIRE_I32 = 0, 1, 2, 5


def malformed(where: str, problem: str) -> ModelError:
    return ModelError("malformed TensorFlow GraphDef at %s: %s" % (where, problem),
                      hint="the file is truncated, damaged or not a frozen GraphDef (.pb); fetch it again")


def read_varint(buf: memoryview, pos: int, end: int, where: str) -> Tuple[int, int]:
    result = 0
    shift = 0
    for _ in range(10):
        if pos >= end:
            raise malformed(where, "truncated varint at byte %d" % pos)
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            if result >> 64:
                raise malformed(where, "varint at byte %d overflows 64 bits" % (pos - 1))
            return result, pos
        shift += 7
    raise malformed(where, "varint longer than 10 bytes at byte %d" % (pos - 10))


def read_fields(buf: memoryview, start: int, end: int, where: str) -> Iterator[Tuple[int, int, Any]]:
    """(field number, wire type, value) of each record in ``buf[start:end]``; LEN values are memoryviews."""
    pos = start
    while pos < end:
        tag, pos = read_varint(buf, pos, end, where)
        number, wire = tag >> 3, tag & 7
        if number == 0 or number > 0x1FFFFFFF:
            raise malformed(where, "invalid field number %d at byte %d" % (number, pos))
        if wire == WIRE_VARINT:
            value, pos = read_varint(buf, pos, end, where)
        elif wire == WIRE_LEN:
            size, pos = read_varint(buf, pos, end, where)
            if size > end - pos:
                raise malformed(where, "field %d declares %d bytes but only %d remain" % (number, size, end - pos))
            value = buf[pos:pos + size]
            pos += size
        elif wire in (WIRE_I32, WIRE_I64):
            size = 4 if wire == WIRE_I32 else 8
            if size > end - pos:
                raise malformed(where, "truncated %d-byte field %d" % (size, number))
            value = buf[pos:pos + size]
            pos += size
        elif wire in (3, 4):
            raise malformed(where, "field %d uses a protobuf group (wire type %d), which GraphDefs never contain"
                         % (number, wire))
        else:
            raise malformed(where, "invalid wire type %d for field %d" % (wire, number))
        yield number, wire, value


def expect_wire(wire: int, wanted: int, number: int, where: str) -> None:
    if wire != wanted:
        raise malformed(where, "field %d has wire type %d, expected %d" % (number, wire, wanted))


def read_text(value: memoryview, where: str) -> str:
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError as err:
        raise malformed(where, "string is not valid UTF-8 (%s)" % err.reason) from None


def signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def signed32(v: int) -> int:
    """int32 fields are sign-extended to 64 bits on the wire; protobuf keeps the low 32 bits."""
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def packed_varints(value: memoryview, where: str) -> np.ndarray:
    """All varints of a packed field as uint64, decoded with numpy (a packed field can hold millions)."""
    b = np.frombuffer(value, dtype=np.uint8)
    if len(b) == 0:
        return np.zeros(0, dtype=np.uint64)
    if b[-1] & 0x80:
        raise malformed(where, "truncated varint at the end of a packed field")
    ends = np.flatnonzero(b < 0x80)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts + 1
    if int(lengths.max()) > 10:
        raise malformed(where, "varint longer than 10 bytes in a packed field")
    position = np.arange(len(b)) - np.repeat(starts, lengths)  # byte index inside its varint
    if np.any(b[position == 9] > 1):
        raise malformed(where, "varint in a packed field overflows 64 bits")
    parts = (b & 0x7F).astype(np.uint64) << (7 * position).astype(np.uint64)
    return np.bitwise_or.reduceat(parts, starts)


def fixed_values(value: memoryview, fmt: str, where: str) -> np.ndarray:
    """Packed little-endian fixed-width values (float, double) as a numpy array (a copy)."""
    dt = np.dtype(fmt)
    if len(value) % dt.itemsize:
        raise malformed(where, "packed field of %d bytes is not a multiple of %d" % (len(value), dt.itemsize))
    return np.frombuffer(value, dtype=dt).copy()


# how a varint field's 64 raw bits become its value: int32 fields are sign-extended to 64 bits on the
# wire and protobuf keeps the low 32 bits; uint32 keeps the low 32 bits unsigned
VARINT_AS = {
    "int32": lambda u: (u & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.int32),
    "uint32": lambda u: (u & np.uint64(0xFFFFFFFF)).astype(np.uint32),
    "int64": lambda u: u.view(np.int64),
    "uint64": lambda u: u,
    "bool": lambda u: u != 0,
}


class Repeated:
    """Collects one repeated scalar field, packed or not, as protobuf parsers accept both encodings.

    ``kind`` is a key of ``VARINT_AS`` for varint fields, or a numpy format ("<f4", "<f8") for
    fixed-width ones.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.wire = WIRE_VARINT if kind in VARINT_AS else (WIRE_I32 if kind == "<f4" else WIRE_I64)
        self.chunks: List[np.ndarray] = []

    def add(self, wire: int, value: Any, number: int, where: str) -> None:
        if wire == WIRE_LEN:  # packed
            raw = packed_varints(value, where) if self.wire == WIRE_VARINT else fixed_values(value, self.kind, where)
        else:
            expect_wire(wire, self.wire, number, where)
            raw = np.array([value], dtype=np.uint64) if self.wire == WIRE_VARINT else fixed_values(value, self.kind, where)
        self.chunks.append(VARINT_AS[self.kind](raw) if self.wire == WIRE_VARINT else raw)

    def array(self) -> np.ndarray:
        if not self.chunks:
            return np.zeros(0, dtype=np.float32 if self.wire != WIRE_VARINT else np.int64)
        return np.concatenate(self.chunks) if len(self.chunks) > 1 else self.chunks[0]

    def values(self) -> List[Any]:
        return self.array().tolist()
