"""A small, strict reader for TensorFlow's frozen ``GraphDef`` (``.pb``) files, without TensorFlow or protobuf.

jetforge ports detectors that exist only as TensorFlow frozen graphs (the TF Object
Detection API's ``frozen_inference_graph.pb``).  Reading their weights needs five protobuf
messages; depending on TensorFlow (hundreds of MB) or on TensorBoard's compiled protos for
that would be out of proportion, so this module decodes the protobuf *wire format* directly,
with the standard library and numpy.

The file is untrusted input.  Every malformed byte sequence -- a truncated or over-long
varint, a length running past its message, a wrong wire type for a known field, a group,
an absurd tensor shape, a tensor whose data does not fit its shape, invalid UTF-8 in a name,
nesting deeper than :data:`MAX_DEPTH` -- ends in one :class:`jetforge.errors.ModelError`
naming where it happened; memory stays proportional to the file plus a fixed budget
(``max_expanded_elements``) for TensorFlow's "repeat the last value" tensor shorthand.

The protobuf wire format is decoded by :mod:`jetforge.compress.models.protobuf_wire`.

Schema subset (field numbers from tensorflow/core/framework/*.proto)::

    GraphDef      node=1 (NodeDef, repeated)
    NodeDef       name=1 op=2 input=3 (repeated) device=4 attr=5 (map<string, AttrValue>: key=1 value=2)
    AttrValue     list=1 s=2 i=3 f=4 b=5 type=6 shape=7 tensor=8 placeholder=9 func=10  (a oneof)
    ListValue     s=2 i=3 f=4 b=5 type=6 shape=7 tensor=8 func=9  (all repeated)
    NameAttrList  name=1 attr=2 (map<string, AttrValue>)
    TensorShape   dim=2 (Dim: size=1 name=2) unknown_rank=3
    TensorProto   dtype=1 tensor_shape=2 tensor_content=4 float_val=5 double_val=6 int_val=7
                  string_val=8 int64_val=10 bool_val=11 half_val=13 uint32_val=16 uint64_val=17
"""

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from jetforge.compress.models.protobuf_wire import (WIRE_I32, WIRE_LEN, WIRE_VARINT, Repeated, expect_wire, malformed,
                                                     read_fields, read_text, signed32, signed64)
from jetforge.errors import ModelError
from jetforge.fileio import PathLike, require_file

MAX_DEPTH = 32  # NameAttrList -> AttrValue -> NameAttrList ... is the only recursion in the schema
MAX_FILE_BYTES = 2 << 30  # protobuf's own 2 GiB message limit
MAX_DIMS = 32
MAX_TENSOR_ELEMENTS = 1 << 32
DEFAULT_MAX_EXPANDED = 1 << 24  # elements materialised beyond what the file spells out (float: 64 MiB)

# DataType enum (types.proto) -> numpy dtype; values in the typed field named in TYPED_FIELD
DTYPES: Dict[int, str] = {1: "float32", 2: "float64", 3: "int32", 4: "uint8", 5: "int16", 6: "int8", 7: "object",
                          9: "int64", 10: "bool", 17: "uint16", 19: "float16", 22: "uint32", 23: "uint64"}
DTYPE_NAMES: Dict[int, str] = {0: "DT_INVALID", 1: "DT_FLOAT", 2: "DT_DOUBLE", 3: "DT_INT32", 4: "DT_UINT8",
                               5: "DT_INT16", 6: "DT_INT8", 7: "DT_STRING", 8: "DT_COMPLEX64", 9: "DT_INT64",
                               10: "DT_BOOL", 14: "DT_BFLOAT16", 17: "DT_UINT16", 18: "DT_COMPLEX128",
                               19: "DT_HALF", 20: "DT_RESOURCE", 21: "DT_VARIANT", 22: "DT_UINT32", 23: "DT_UINT64"}
# dtype -> the TensorProto field holding its values when tensor_content is empty.  int32 fields carry the
# narrower integer types; half_val carries float16 bit patterns (tensor.proto's comments say so).
TYPED_FIELD: Dict[int, int] = {1: 5, 2: 6, 3: 7, 4: 7, 5: 7, 6: 7, 7: 8, 9: 10, 10: 11, 17: 7, 19: 13, 22: 16, 23: 17}


@dataclass(frozen=True)
class TensorShape:
    """``dims`` uses -1 for an unknown size; ``unknown_rank`` means even the rank is unknown."""

    dims: Tuple[int, ...] = ()
    unknown_rank: bool = False


@dataclass(frozen=True)
class Tensor:
    """A decoded ``TensorProto``: ``value`` is None for dtypes numpy cannot hold (bfloat16, complex, resource)."""

    dtype: int
    shape: Tuple[int, ...]
    value: Optional[np.ndarray]

    @property
    def dtype_name(self) -> str:
        return DTYPE_NAMES.get(self.dtype, "DataType %d" % self.dtype)

    def array(self) -> np.ndarray:
        if self.value is None:
            raise ModelError("tensor of %s cannot be read as a numpy array" % self.dtype_name,
                             hint="only numeric, bool and string tensors are supported")
        return self.value


@dataclass(frozen=True)
class NameAttrList:
    name: str
    attr: Dict[str, "AttrValue"]


@dataclass(frozen=True)
class AttrList:
    s: Tuple[bytes, ...] = ()
    i: Tuple[int, ...] = ()
    f: Tuple[float, ...] = ()
    b: Tuple[bool, ...] = ()
    type: Tuple[int, ...] = ()
    shape: Tuple[TensorShape, ...] = ()
    tensor: Tuple[Tensor, ...] = ()
    func: Tuple[NameAttrList, ...] = ()


@dataclass(frozen=True)
class AttrValue:
    """One attribute: ``kind`` names the oneof member that is set ("" when none is); ``value`` holds it."""

    kind: str = ""
    value: Any = None


@dataclass(frozen=True)
class NodeDef:
    name: str
    op: str
    inputs: Tuple[str, ...] = ()
    device: str = ""
    attr: Dict[str, AttrValue] = field(default_factory=dict)

    def get(self, key: str, kind: str) -> Any:
        """Attribute ``key``'s value, required to be of ``kind`` (e.g. "tensor", "i", "list")."""
        a = self.attr.get(key)
        if a is None or a.kind != kind:
            raise ModelError("node %s (%s) has no %s attribute %r" % (self.name, self.op, kind, key),
                             hint="this graph is not laid out as expected")
        return a.value


@dataclass(frozen=True)
class GraphDef:
    nodes: Tuple[NodeDef, ...]

    def by_name(self) -> Dict[str, NodeDef]:
        return {n.name: n for n in self.nodes}

    def op_counts(self) -> Dict[str, int]:
        counts: Dict[str, int] = {}
        for n in self.nodes:
            counts[n.op] = counts.get(n.op, 0) + 1
        return counts


class _Budget:
    """Elements the reader may still materialise beyond the file's own bytes (repeat-last-value fills)."""

    def __init__(self, elements: int) -> None:
        self.left = int(elements)

    def take(self, n: int, where: str) -> None:
        if n > self.left:
            raise ModelError("%s: the tensor expands to %d elements from a few values, more than this reader's "
                             "budget allows" % (where, n),
                             hint="the file is damaged or not a model's frozen graph; raise max_expanded_elements "
                                  "only for a file you trust")
        self.left -= n


def _shape(buf: memoryview, where: str) -> TensorShape:
    dims: List[int] = []
    unknown = False
    for number, wire, value in read_fields(buf, 0, len(buf), where):
        if number == 2:
            expect_wire(wire, WIRE_LEN, number, where)
            size = 0
            for n2, w2, v2 in read_fields(value, 0, len(value), where + ".dim"):
                if n2 == 1:
                    expect_wire(w2, WIRE_VARINT, n2, where + ".dim")
                    size = signed64(v2)
            if size < -1:
                raise malformed(where, "dimension size %d (only -1 may mean unknown)" % size)
            dims.append(size)
            if len(dims) > MAX_DIMS:
                raise malformed(where, "more than %d dimensions" % MAX_DIMS)
        elif number == 3:
            expect_wire(wire, WIRE_VARINT, number, where)
            unknown = bool(value)
    return TensorShape(tuple(dims), unknown)


# TensorProto's typed value fields: float_val, double_val, int_val, int64_val, bool_val, half_val, uint32/64_val
_TENSOR_FIELDS = {5: "<f4", 6: "<f8", 7: "int32", 10: "int64", 11: "bool", 13: "int32", 16: "uint32", 17: "uint64"}


def _tensor(buf: memoryview, where: str, budget: _Budget) -> Tensor:
    dtype = 0
    shape_parts: List[bytes] = []
    content = b""
    typed: Dict[int, Repeated] = {k: Repeated(v) for k, v in _TENSOR_FIELDS.items()}
    strings: List[bytes] = []
    for number, wire, value in read_fields(buf, 0, len(buf), where):
        if number == 1:
            expect_wire(wire, WIRE_VARINT, number, where)
            dtype = signed32(value)
        elif number == 2:
            expect_wire(wire, WIRE_LEN, number, where)
            shape_parts.append(bytes(value))
        elif number == 4:
            expect_wire(wire, WIRE_LEN, number, where)
            content = value
        elif number == 8:
            expect_wire(wire, WIRE_LEN, number, where)
            strings.append(bytes(value))
        elif number in typed:
            typed[number].add(wire, value, number, where)
    shape = _shape(memoryview(b"".join(shape_parts)), where + ".tensor_shape")
    if shape.unknown_rank or any(d < 0 for d in shape.dims):
        raise malformed(where, "a constant tensor needs a fully known shape, got %s" % (shape.dims,))
    count = 1
    for d in shape.dims:
        count *= d
        if count > MAX_TENSOR_ELEMENTS:
            raise malformed(where, "shape %s has more than %d elements" % (shape.dims, MAX_TENSOR_ELEMENTS))
    if dtype not in DTYPES:
        return Tensor(dtype, shape.dims, None)
    return Tensor(dtype, shape.dims, _tensor_values(dtype, shape.dims, count, content, typed, strings, where, budget))


def _tensor_values(dtype: int, dims: Tuple[int, ...], count: int, content: Any, typed: Dict[int, Repeated],
                   strings: List[bytes], where: str, budget: _Budget) -> np.ndarray:
    """Values from ``tensor_content`` (raw little-endian bytes) or the typed repeated field."""
    np_dtype = DTYPES[dtype]
    if np_dtype == "object":
        values: Any = strings
    elif len(content):
        dt = np.dtype(np_dtype).newbyteorder("<")
        if len(content) != count * dt.itemsize:
            raise malformed(where, "tensor_content has %d bytes, shape %s of %s needs %d"
                         % (len(content), dims, DTYPE_NAMES[dtype], count * dt.itemsize))
        return np.frombuffer(content, dtype=dt).astype(np_dtype).reshape(dims)
    elif dtype == 19:
        values = typed[13].array().astype(np.uint16).view(np.float16)  # the low 16 bits of each int32
    else:
        values = typed[TYPED_FIELD[dtype]].array().astype(np_dtype)
    n = len(values)
    if n > count:
        raise malformed(where, "%d values for a tensor of shape %s (%d elements)" % (n, dims, count))
    out = np.empty(count, dtype=np_dtype)
    out[:n] = values
    if n < count:
        # TensorFlow's shorthand: the last value fills the rest (zeros when no value is given).
        budget.take(count - n, where)
        out[n:] = values[-1] if n else (b"" if np_dtype == "object" else 0)
    return out.reshape(dims)


def _list(buf: memoryview, where: str, budget: _Budget, depth: int) -> AttrList:
    rep = {3: Repeated("int64"), 4: Repeated("<f4"), 5: Repeated("bool"), 6: Repeated("int32")}
    s: List[bytes] = []
    shapes: List[TensorShape] = []
    tensors: List[Tensor] = []
    funcs: List[NameAttrList] = []
    for number, wire, value in read_fields(buf, 0, len(buf), where):
        if number in rep:
            rep[number].add(wire, value, number, where)
        elif number in (2, 7, 8, 9):
            expect_wire(wire, WIRE_LEN, number, where)
            if number == 2:
                s.append(bytes(value))
            elif number == 7:
                shapes.append(_shape(value, where + ".shape"))
            elif number == 8:
                tensors.append(_tensor(value, where + ".tensor", budget))
            else:
                funcs.append(_name_attr_list(value, where + ".func", budget, depth + 1))
    return AttrList(s=tuple(s), i=tuple(rep[3].values()), f=tuple(float(x) for x in rep[4].values()),
                    b=tuple(rep[5].values()), type=tuple(rep[6].values()), shape=tuple(shapes),
                    tensor=tuple(tensors), func=tuple(funcs))


def _attr_value(buf: memoryview, where: str, budget: _Budget, depth: int) -> AttrValue:
    if depth > MAX_DEPTH:
        raise malformed(where, "attributes nested deeper than %d levels" % MAX_DEPTH)
    # AttrValue's oneof: field number -> (wire type, member name, decoder); the last member given wins
    members: Dict[int, Tuple[int, str, Callable[[Any], Any]]] = {
        1: (WIRE_LEN, "list", lambda raw: _list(raw, where + ".list", budget, depth)),
        2: (WIRE_LEN, "s", bytes),
        3: (WIRE_VARINT, "i", signed64),
        4: (WIRE_I32, "f", lambda raw: struct.unpack("<f", raw)[0]),
        5: (WIRE_VARINT, "b", bool),
        6: (WIRE_VARINT, "type", signed32),
        7: (WIRE_LEN, "shape", lambda raw: _shape(raw, where + ".shape")),
        8: (WIRE_LEN, "tensor", lambda raw: _tensor(raw, where + ".tensor", budget)),
        9: (WIRE_LEN, "placeholder", lambda raw: read_text(raw, where + ".placeholder")),
        10: (WIRE_LEN, "func", lambda raw: _name_attr_list(raw, where + ".func", budget, depth + 1)),
    }
    kind, value = "", None
    for number, wire, raw in read_fields(buf, 0, len(buf), where):
        if number in members:
            wanted, name, decode = members[number]
            expect_wire(wire, wanted, number, where)
            kind, value = name, decode(raw)
    return AttrValue(kind, value)


def _attr_map_entry(buf: memoryview, where: str, budget: _Budget, depth: int) -> Tuple[str, AttrValue]:
    key = ""
    raw: Optional[memoryview] = None
    for number, wire, value in read_fields(buf, 0, len(buf), where):
        if number == 1:
            expect_wire(wire, WIRE_LEN, number, where)
            key = read_text(value, where + ".key")
        elif number == 2:
            expect_wire(wire, WIRE_LEN, number, where)
            raw = value
    attr_where = "%s[%r]" % (where, key)
    return key, (_attr_value(raw, attr_where, budget, depth) if raw is not None else AttrValue())


def _name_attr_list(buf: memoryview, where: str, budget: _Budget, depth: int) -> NameAttrList:
    if depth > MAX_DEPTH:
        raise malformed(where, "attributes nested deeper than %d levels" % MAX_DEPTH)
    name = ""
    attrs: Dict[str, AttrValue] = {}
    for number, wire, value in read_fields(buf, 0, len(buf), where):
        if number == 1:
            expect_wire(wire, WIRE_LEN, number, where)
            name = read_text(value, where + ".name")
        elif number == 2:
            expect_wire(wire, WIRE_LEN, number, where)
            key, attr = _attr_map_entry(value, where + ".attr", budget, depth + 1)
            attrs[key] = attr
    return NameAttrList(name, attrs)


def _node(buf: memoryview, where: str, budget: _Budget) -> NodeDef:
    name = op = device = ""
    inputs: List[str] = []
    attrs: Dict[str, AttrValue] = {}
    for number, wire, value in read_fields(buf, 0, len(buf), where):
        if number in (1, 2, 3, 4, 5):
            expect_wire(wire, WIRE_LEN, number, where)
        if number == 1:
            name = read_text(value, where + ".name")
        elif number == 2:
            op = read_text(value, where + ".op")
        elif number == 3:
            inputs.append(read_text(value, where + ".input"))
        elif number == 4:
            device = read_text(value, where + ".device")
        elif number == 5:
            key, attr = _attr_map_entry(value, "%s(%s).attr" % (where, name or "?"), budget, 1)
            attrs[key] = attr
    return NodeDef(name=name, op=op, inputs=tuple(inputs), device=device, attr=attrs)


def read_graphdef(data: bytes, max_expanded_elements: int = DEFAULT_MAX_EXPANDED) -> GraphDef:
    """Decode a serialized ``tensorflow.GraphDef``; any malformed input raises :class:`ModelError`.

    ``max_expanded_elements`` bounds the elements materialised by TensorFlow's shorthand of
    giving fewer values than a constant's shape holds (the last value repeats), the one place
    where a small file could otherwise ask for unbounded memory.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ModelError("read_graphdef needs bytes, got %s" % type(data).__name__)
    buf = memoryview(data).cast("B") if isinstance(data, memoryview) else memoryview(data)
    if len(buf) > MAX_FILE_BYTES:
        raise ModelError("GraphDef of %d bytes is larger than protobuf's 2 GiB limit" % len(buf))
    budget = _Budget(max_expanded_elements)
    nodes: List[NodeDef] = []
    for number, wire, value in read_fields(buf, 0, len(buf), "GraphDef"):
        if number == 1:
            expect_wire(wire, WIRE_LEN, number, "GraphDef")
            nodes.append(_node(value, "GraphDef.node[%d]" % len(nodes), budget))
    return GraphDef(tuple(nodes))


def load_graphdef(path: PathLike, max_expanded_elements: int = DEFAULT_MAX_EXPANDED) -> GraphDef:
    """Read and decode a frozen graph file (``frozen_inference_graph.pb``)."""
    p = require_file(path, "TensorFlow frozen graph")
    if p.stat().st_size > MAX_FILE_BYTES:
        raise ModelError("%s is larger than protobuf's 2 GiB limit" % p, hint="this is not a frozen GraphDef")
    return read_graphdef(Path(p).read_bytes(), max_expanded_elements)


__all__ = ["AttrList", "AttrValue", "GraphDef", "NameAttrList", "NodeDef", "Tensor", "TensorShape",
           "load_graphdef", "read_graphdef"]
