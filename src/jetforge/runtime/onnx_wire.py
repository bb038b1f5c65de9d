"""The facts a build plan needs from an ONNX file, read from its protobuf bytes without the ``onnx`` package.

A JetPack device install has no ``onnx`` (NVIDIA ships no wheel with JetPack; TensorRT's parser is C++),
yet ``jetforge build`` must know on the board what it knows on the workstation: the graph's inputs and
outputs (names, shapes, element types), its opset, and whether it carries Q/DQ nodes (a Q/DQ model is INT8
without a calibration cache; without that fact the planner asked for a cache and stopped).

Why a reader of the wire format rather than facts recorded in the bundle at ``bundle create`` time:

* it serves every ONNX file, not only bundles: ``jetforge build model.qdq.onnx`` on the board plans the same
  as on the workstation, and the planner uses this reader on both, so the plan that was prepared is the plan
  that runs (one code path, no "workstation facts" a board trusts on someone's word);
* the facts come from the bytes that TensorRT will parse next, never from a second file that could disagree.

The subset of ``onnx.proto`` read here (field numbers from onnx/onnx.proto3, stable since IR version 3):
ModelProto ``graph`` 7 and ``opset_import`` 8 (OperatorSetIdProto ``domain`` 1, ``version`` 2); GraphProto
``node`` 1, ``initializer`` 5, ``input`` 11, ``output`` 12, ``sparse_initializer`` 15; NodeProto ``input`` 1,
``output`` 2, ``name`` 3, ``op_type`` 4; ValueInfoProto ``name`` 1, ``type`` 2; TypeProto ``tensor_type`` 1
(``elem_type`` 1, ``shape`` 2: ``dim`` 1 with ``dim_value`` 1 / ``dim_param`` 2); TensorProto ``name`` 8;
SparseTensorProto ``values`` 1.  Everything else (weights included) is skipped by its length, never copied.
The file is memory-mapped, so a model with inline weights costs no more than its graph to read.

A file the wire format does not describe (a length past the end, a varint longer than 10 bytes, a deprecated
group, a field of the wrong wire type) is one :class:`~jetforge.errors.ModelError` naming the file; so is a model
:func:`jetforge.runtime.onnx_checks.model_problem` refuses (not whole, versions out of range, unknown operators,
tensors written twice, cycles, non-numeric inputs, weights without their data, ...): the reader builds the same
:class:`~jetforge.runtime.onnx_checks.ModelView` the ``onnx`` package's reader builds, so both refuse alike.  For
that it also reads ``ir_version`` 1, NodeProto ``domain`` 7 and ``attribute`` 5 (its tensors ``t`` 5 and
``tensors`` 10), TensorProto ``dims`` 1, ``data_type`` 2, ``raw_data`` 9 (its length only), ``data_location`` 14
and the typed data fields' value counts.  Torch-free, onnx-free, Python 3.8.
"""

import mmap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from jetforge.errors import ModelError
from jetforge.fileio import PathLike
from jetforge.runtime.onnx_checks import REEXPORT_HINT, ModelView, NodeView, TensorView, ValueView, model_error

# TensorProto.DataType -> numpy-style names (as onnx.helper.tensor_dtype_to_np_dtype names them)
ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
               10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16"}
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5

Buffer = Union[bytes, mmap.mmap]


class WireError(ValueError):
    """The bytes are not the protobuf the reader expects (turned into a ModelError naming the file)."""


@dataclass
class OnnxGraphFacts:
    """What the wire reader found: I/O tensors, node (name, op_type) pairs and the default-domain opset."""

    inputs: List[Dict[str, Any]]
    outputs: List[Dict[str, Any]]
    nodes: List[Tuple[str, str]] = field(default_factory=list)
    opset: Optional[int] = None
    #: (name, dims, dtype) of every initializer (``jetforge info``'s parameter count; never the data itself)
    initializers: List[Tuple[str, List[int], str]] = field(default_factory=list)

    @property
    def has_qdq(self) -> bool:
        return any(op in QDQ_OPS for _, op in self.nodes)


def _varint(buf: Buffer, pos: int, end: int) -> Tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise WireError("a number runs past the end of its field")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise WireError("a number is longer than 10 bytes")


def _fields(buf: Buffer, start: int, end: int) -> Iterator[Tuple[int, int, int, int]]:
    """(field number, wire type, value or payload start, payload end) of each field in ``buf[start:end]``."""
    pos = start
    while pos < end:
        tag, pos = _varint(buf, pos, end)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise WireError("a field has number 0")
        if wire == _VARINT:
            value, pos = _varint(buf, pos, end)
            yield number, wire, value, pos
        elif wire == _LEN:
            length, pos = _varint(buf, pos, end)
            if length > end - pos:
                raise WireError("a field of %d bytes runs past the end (the file is cut short)" % length)
            yield number, wire, pos, pos + length
            pos += length
        elif wire in (_FIXED64, _FIXED32):
            size = 8 if wire == _FIXED64 else 4
            if size > end - pos:
                raise WireError("a fixed-size field runs past the end")
            yield number, wire, pos, pos + size
            pos += size
        else:
            raise WireError("wire type %d (a deprecated group, or not protobuf at all)" % wire)


def _text(buf: Buffer, start: int, end: int) -> str:
    try:
        return bytes(buf[start:end]).decode("utf-8")
    except UnicodeDecodeError as err:
        raise WireError("a name is not UTF-8") from err


def _expect(wire: int, want: int, what: str) -> None:
    if wire != want:
        raise WireError("%s has wire type %d, not %d" % (what, wire, want))


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _tensor_spec(buf: Buffer, start: int, end: int) -> Tuple[Dict[str, Any], ValueView]:
    """A ValueInfoProto -> (``{"name", "shape", "dtype"}`` (a dim without a positive size: its name, else -1),
    the checks' view of it), read as protobuf merges repeated parts: a second ``type`` of the same kind adds its
    dims, one of another kind replaces it (a oneof), scalars take the last value."""
    name, elem, shape = "", 0, []  # type: str, int, List[Union[int, str]]
    view = ValueView("")
    for number, wire, a, b in _fields(buf, start, end):
        if number == 1:
            _expect(wire, _LEN, "ValueInfoProto.name")
            name = _text(buf, a, b)
        elif number == 2 and wire == _LEN:
            for tn, tw, ta, tb in _fields(buf, a, b):
                if tw != _LEN or tn not in _TYPE_KINDS:
                    continue
                if view.kind != _TYPE_KINDS[tn]:  # another case of the oneof: the earlier one is gone
                    view.kind, elem, shape, view.dims = _TYPE_KINDS[tn], 0, [], None
                if tn != 1:
                    continue  # a sequence, map or optional type: no tensor shape to report
                for fn, fw, fa, fb in _fields(buf, ta, tb):
                    if fn == 1 and fw == _VARINT:
                        elem = fa
                    elif fn == 2 and fw == _LEN:
                        dims = [_dim(buf, da, db) for dn, dw, da, db in _fields(buf, fa, fb) if dn == 1 and dw == _LEN]
                        shape = shape + [d for d, _ in dims]
                        view.dims = (view.dims or []) + [v for _, v in dims]
    view.name, view.elem = name, int(elem)
    return {"name": name, "shape": shape, "dtype": ONNX_DTYPES.get(elem, str(elem))}, view


# TypeProto's value fields -> the kind the checks name
_TYPE_KINDS = {1: "tensor", 4: "sequence", 5: "map", 8: "sparse tensor", 9: "optional"}


def _dim(buf: Buffer, start: int, end: int) -> Tuple[Union[int, str], Optional[int]]:
    """(the dim as the facts give it, its dim_value as written or None); dim_value and dim_param are a oneof:
    the last one written is the dim."""
    value: Optional[int] = None
    param = ""
    for number, wire, a, b in _fields(buf, start, end):
        if number == 1 and wire == _VARINT:
            value, param = _signed(a), ""
        elif number == 2 and wire == _LEN:
            value, param = None, _text(buf, a, b)
    if value is not None and value > 0:
        return int(value), value
    return param or -1, value


def _name_field(buf: Buffer, start: int, end: int, number_wanted: int) -> str:
    """The string field ``number_wanted`` (the last one written, as protobuf reads a repeated scalar)."""
    text = ""
    for number, wire, a, b in _fields(buf, start, end):
        if number == number_wanted and wire == _LEN:
            text = _text(buf, a, b)
    return text


_HIGH_BYTES = bytes(range(0x80, 0x100))


def _varint_count(buf: Buffer, start: int, end: int) -> int:
    """How many varints a packed field holds: each ends in the one byte below 0x80."""
    return len(bytes(buf[start:end]).translate(None, _HIGH_BYTES))


def _tensor(buf: Buffer, start: int, end: int, where: str) -> TensorView:
    """A TensorProto -> its view: name 8, dims 1, data_type 2, raw_data 9, data_location 14 and the typed fields'
    value counts (float_data 4, int32_data 5, string_data 6, int64_data 7, double_data 10, uint64_data 11)."""
    tensor = TensorView("", [], 0, where=where)
    for number, wire, a, b in _fields(buf, start, end):
        if number == 8 and wire == _LEN:
            tensor.name = _text(buf, a, b)
        elif number == 1:
            if wire == _LEN:
                pos = a
                while pos < b:
                    value, pos = _varint(buf, pos, b)
                    tensor.dims.append(_signed(value))
            elif wire == _VARINT:
                tensor.dims.append(_signed(a))
        elif number == 2 and wire == _VARINT:
            tensor.elem = a
        elif number == 9 and wire == _LEN:
            tensor.raw_bytes = b - a
        elif number == 14 and wire == _VARINT:
            tensor.external = a == 1
        elif number in (4, 10):  # packed fixed32 / fixed64, or one value per field
            tensor.typed_values += (b - a) // (4 if number == 4 else 8) if wire == _LEN else 1
        elif number in (5, 7, 11):  # packed varints, or one per field
            tensor.typed_values += _varint_count(buf, a, b) if wire == _LEN else 1
        elif number == 6 and wire == _LEN:
            tensor.typed_values += 1
    return tensor


def _node(buf: Buffer, start: int, end: int, view: ModelView) -> NodeView:
    """A NodeProto -> its view (input 1, output 2, name 3, op_type 4, domain 7); the tensors of its attributes
    (AttributeProto ``t`` 5, ``tensors`` 10) join ``view.tensors``."""
    node = NodeView("", "", "", [], [])
    attributes = []
    for nn, nw, na, nb in _fields(buf, start, end):
        if nw != _LEN:
            continue
        if nn == 1:
            node.inputs.append(_text(buf, na, nb))
        elif nn == 2:
            node.outputs.append(_text(buf, na, nb))
        elif nn == 3:
            node.name = _text(buf, na, nb)
        elif nn == 4:
            node.op = _text(buf, na, nb)
        elif nn == 7:
            node.domain = _text(buf, na, nb)
        elif nn == 5:
            attributes.append((na, nb))
    where = "tensor of node %s (%s)" % (node.name or "?", node.op)
    for na, nb in attributes:
        for an, aw, aa, ab in _fields(buf, na, nb):
            if an in (5, 10) and aw == _LEN:
                view.tensors.append(_tensor(buf, aa, ab, where))
    return node


def _graph(buf: Buffer, start: int, end: int, view: ModelView, inputs: List[Dict[str, Any]],
           outputs: List[Dict[str, Any]]) -> None:
    """Add one GraphProto's parts to ``view`` and the I/O facts to ``inputs``/``outputs``.  A model whose graph
    field appears twice is read as protobuf reads it: the second merged into the first (repeated fields joined)."""
    view.has_graph = True
    for number, wire, a, b in _fields(buf, start, end):
        if number == 1:
            _expect(wire, _LEN, "GraphProto.node")
            view.nodes.append(_node(buf, a, b, view))
        elif number == 5:
            _expect(wire, _LEN, "GraphProto.initializer")
            view.tensors.append(_tensor(buf, a, b, "initializer"))
        elif number == 15 and wire == _LEN:
            values = [(sa, sb) for sn, sw, sa, sb in _fields(buf, a, b) if sn == 1 and sw == _LEN]
            if values:  # a repeated message field merges: the last values' name is the name
                view.sparse.append(next((n for n in (_name_field(buf, sa, sb, 8) for sa, sb in reversed(values)) if n),
                                        ""))
        elif number in (11, 12):
            _expect(wire, _LEN, "GraphProto.input/output")
            spec, value = _tensor_spec(buf, a, b)
            (inputs if number == 11 else outputs).append(spec)
            (view.inputs if number == 11 else view.outputs).append(value)


def parse_model_bytes(buf: Buffer, where: str = "ONNX model") -> OnnxGraphFacts:
    """The facts of a serialised ModelProto; a damaged, partial or unusable model is a ModelError naming ``where``.

    What is judged is :func:`jetforge.runtime.onnx_checks.model_problem`'s, as for the ``onnx`` package's reader.
    """
    view = ModelView()
    inputs: List[Dict[str, Any]] = []
    outputs: List[Dict[str, Any]] = []
    try:
        for number, wire, a, b in _fields(buf, 0, len(buf)):
            if number == 1 and wire == _VARINT:
                view.ir_version = _signed(a)
            elif number == 7:
                _expect(wire, _LEN, "ModelProto.graph")
                _graph(buf, a, b, view, inputs, outputs)
            elif number == 8:
                _expect(wire, _LEN, "ModelProto.opset_import")
                domain, version = "", 0  # protobuf's defaults, as the onnx package reads an absent field
                for on, ow, oa, ob in _fields(buf, a, b):
                    if on == 1 and ow == _LEN:
                        domain = _text(buf, oa, ob)
                    elif on == 2 and ow == _VARINT:
                        version = _signed(oa)
                view.add_opset(domain, version)
    except WireError as err:
        raise ModelError("%s is not a readable ONNX model: protobuf cannot parse it (%s; the file is truncated, "
                         "damaged, or not an ONNX model)" % (where, err), hint=REEXPORT_HINT) from err
    error = model_error(view, where)
    if error is not None:
        raise error
    defined = {t.name for t in view.tensors if t.where == "initializer"} | set(view.sparse)
    initializers = [(t.name, list(t.dims), ONNX_DTYPES.get(t.elem, str(t.elem)))
                    for t in view.tensors if t.where == "initializer"]
    return OnnxGraphFacts([i for i in inputs if i["name"] not in defined], outputs,
                          [(n.name, n.op) for n in view.nodes], view.opsets.get(""), initializers)


def read_graph_facts(path: PathLike, what: str = "ONNX model") -> OnnxGraphFacts:
    """:func:`parse_model_bytes` of the file at ``path`` (memory-mapped; external weights are never read)."""
    from jetforge.runtime.onnx_file import check_onnx_file

    p = check_onnx_file(Path(path), what, parse=False)  # a folder, an empty or a text file, in the usual words
    try:
        with open(str(p), "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return parse_model_bytes(buf, "%s %s" % (what, p))
    except (OSError, ValueError) as err:  # ValueError: mmap of a file emptied since the check
        if isinstance(err, ModelError):
            raise
        raise ModelError("%s %s cannot be read: %s" % (what, p, getattr(err, "strerror", None) or err),
                         hint="check the file's permissions") from err


__all__ = ["ONNX_DTYPES", "OnnxGraphFacts", "QDQ_OPS", "parse_model_bytes", "read_graph_facts"]
