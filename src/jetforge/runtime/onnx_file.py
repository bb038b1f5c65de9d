"""The one checked reader of ONNX files that users hand to jetforge.

Every command that reads an ONNX model from a path (``dla-check``, ``build``, ``bench``,
``calibrate``, ``bundle create``, ``app``, the export check) goes through
:func:`read_onnx` (when it needs the graph) or :func:`check_onnx_file` (when another
library, ONNX Runtime or TensorRT's parser, reads the file next).

Why a reader of our own: protobuf accepts far too much.  An empty file parses as an empty
``ModelProto``; a file cut at a field boundary parses as a model without its opset or its
last initializers; a text file or random bytes raise ``google.protobuf`` exceptions that
are no :class:`~jetforge.errors.JetforgeError`.  Left alone, that became an empty DLA
report that passed ``--strict``, a build plan for nothing, or an internal error.  Here
each of those is one :class:`~jetforge.errors.ModelError` line that names the file, what
is wrong with it and the fix.

Torch-free; ``onnx`` is imported only inside the functions (a Jetson may not have it:
:func:`check_onnx_file` then checks what it can without it).
"""

from pathlib import Path
from typing import Any

from jetforge.errors import ModelError
from jetforge.fileio import PathLike, require_file

from jetforge.runtime.onnx_checks import REEXPORT_HINT, model_error
_SNIFF_BYTES = 512


def read_onnx(path: PathLike, what: str = "ONNX model", *, load_external_data: bool = True,
              purpose: str = "reading ONNX models") -> Any:
    """Load ``path`` as an ``onnx.ModelProto`` after checking that it is a complete ONNX model.

    Refused, each with one line naming the file and the fix: a missing path, a folder, an
    empty file, text or other non-ONNX bytes, a truncated or damaged file, and a model with
    no graph, nodes, inputs, outputs or opset, or whose nodes read tensors nothing defines.
    ``load_external_data=False`` leaves large weights stored beside the file unread.
    """
    from jetforge.optional import require

    onnx = require("onnx", purpose)
    p = _check_bytes(path, what)
    try:
        model = onnx.load(str(p), load_external_data=load_external_data)
    except Exception as err:  # DecodeError, RuntimeWarning-turned-error, OSError for external data, ...
        raise _unreadable(p, what, err) from err
    check_model_structure(model, "%s %s" % (what, p))
    return model


def check_onnx_file(path: PathLike, what: str = "ONNX model", parse: bool = True) -> Path:
    """Check ``path`` before another library reads it; the path.

    With ``parse`` (and the ``onnx`` package installed) everything :func:`read_onnx` checks.
    ``parse=False``, or without ``onnx`` (a Jetson runtime), only what needs no parser: a
    file, not empty, not text.  That is for callers whose library parses the file next and
    turns a damaged one into a ModelError itself (the ONNX Runtime session): importing
    ``onnx`` there would add a second or more to every start and its memory to every
    measurement.
    """
    if parse:
        from jetforge.optional import is_available

        if is_available("onnx"):
            read_onnx(path, what, load_external_data=False)
            return Path(path)
    return _check_bytes(path, what)


def check_model_structure(model: Any, where: str) -> None:
    """Refuse a parsed ``ModelProto`` that :func:`jetforge.runtime.onnx_checks.model_error` refuses (the wire
    reader's rules: not whole, or not usable); ``where`` names it in the message."""
    error = model_error(model_view(model), where)
    if error is not None:
        raise error


def model_view(model: Any) -> Any:
    """The :class:`~jetforge.runtime.onnx_checks.ModelView` of a parsed ``ModelProto``."""
    from jetforge.runtime.onnx_checks import ModelView, NodeView

    view = ModelView(has_graph=model.HasField("graph"), ir_version=int(model.ir_version))
    for opset in model.opset_import:
        view.add_opset(opset.domain, opset.version)
    if not view.has_graph:
        return view
    graph = model.graph
    for node in graph.node:
        view.nodes.append(NodeView(node.name, node.op_type, node.domain, list(node.input), list(node.output)))
        for attr in node.attribute:
            if attr.HasField("t"):
                view.tensors.append(_tensor_view(attr.t, "tensor of node %s (%s)" % (node.name or "?", node.op_type)))
            for t in attr.tensors:
                view.tensors.append(_tensor_view(t, "tensor of node %s (%s)" % (node.name or "?", node.op_type)))
    view.tensors.extend(_tensor_view(t, "initializer") for t in graph.initializer)
    view.sparse.extend(t.values.name for t in graph.sparse_initializer)
    view.inputs.extend(_value_view(v) for v in graph.input)
    view.outputs.extend(_value_view(v) for v in graph.output)
    return view


def _tensor_view(t: Any, where: str) -> Any:
    from jetforge.runtime.onnx_checks import TensorView

    typed = (len(t.float_data) + len(t.int32_data) + len(t.string_data) + len(t.int64_data) + len(t.double_data)
             + len(t.uint64_data))
    return TensorView(t.name, [int(d) for d in t.dims], int(t.data_type),
                      raw_bytes=len(t.raw_data) if t.HasField("raw_data") else None, typed_values=typed,
                      external=int(t.data_location) == 1, where=where)


def _value_view(value: Any) -> Any:
    from jetforge.runtime.onnx_checks import ValueView

    view = ValueView(value.name)
    if not value.HasField("type"):
        return view
    kind = value.type.WhichOneof("value")
    if kind is None:  # a TypeProto with nothing in it: no type given
        return view
    if kind != "tensor_type":
        view.kind = {"sequence_type": "sequence", "map_type": "map", "optional_type": "optional",
                     "sparse_tensor_type": "sparse tensor"}.get(kind, kind)
        return view
    tt = value.type.tensor_type
    view.kind, view.elem = "tensor", int(tt.elem_type)
    if tt.HasField("shape"):
        view.dims = [int(d.dim_value) if d.HasField("dim_value") else None for d in tt.shape.dim]
    return view


def _check_bytes(path: PathLike, what: str) -> Path:
    """The checks that need no ONNX parser: a file, not empty, not text."""
    p = require_file(path, what, hint="check the path, or export the model first")
    try:
        size = p.stat().st_size
        with open(str(p), "rb") as f:
            head = f.read(_SNIFF_BYTES)
    except OSError as err:
        raise ModelError("%s %s cannot be read: %s" % (what, p, err.strerror or err),
                         hint="check the file's permissions") from err
    if size == 0:
        raise ModelError("%s %s is empty (0 bytes)" % (what, p),
                         hint="the export or copy that wrote it was interrupted: " + REEXPORT_HINT)
    if _looks_like_text(head):
        raise ModelError("%s %s is a text file, not an ONNX model (ONNX files are binary protobuf)" % (what, p),
                         hint="give the .onnx file that `jetforge export` or your exporter wrote")
    return p


def _looks_like_text(head: bytes) -> bool:
    """Whether the first bytes are printable text (ONNX starts with a binary field tag, 0x08 for ir_version)."""
    if not head:
        return False
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        # A cut in the middle of a multi-byte character at the end of the sample is still text.
        try:
            text = head[:-3].decode("utf-8")
        except UnicodeDecodeError:
            return False
    return all(c.isprintable() or c in "\t\r\n\f" for c in text)


def _unreadable(p: Path, what: str, err: BaseException) -> ModelError:
    name = type(err).__name__
    if name == "DecodeError" or "protobuf" in type(err).__module__ or "parsing" in str(err).lower():
        detail = "protobuf cannot parse it (the file is truncated, damaged, or not an ONNX model)"
    elif isinstance(err, OSError):
        detail = "%s (external weights stored beside it are missing or unreadable)" % (err.strerror or err)
    else:
        detail = " ".join(str(err).split())[:200] or name
    return ModelError("%s %s is not a readable ONNX model: %s" % (what, p, detail), hint=REEXPORT_HINT)


__all__ = ["REEXPORT_HINT", "check_model_structure", "check_onnx_file", "read_onnx"]
