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
from typing import Any, Optional

from jetforge.errors import ModelError
from jetforge.fileio import PathLike, require_file

REEXPORT_HINT = "export the model again (jetforge export), or copy it again and compare its size with the original"
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
    """Refuse a parsed ``ModelProto`` that is not a whole model (``where`` names it in the message)."""
    problem = _structure_problem(model)
    if problem:
        raise ModelError("%s is not a complete ONNX model: %s" % (where, problem), hint=REEXPORT_HINT)


def _structure_problem(model: Any) -> Optional[str]:
    if not model.HasField("graph"):
        return "it has no graph"
    if not list(model.opset_import):
        return "it declares no opset (a file cut short loses it: it is stored after the graph)"
    graph = model.graph
    if not graph.node:
        return "its graph has no nodes"
    defined = {i.name for i in graph.initializer}
    defined.update(i.values.name for i in graph.sparse_initializer)
    inputs = [i.name for i in graph.input if i.name not in defined]
    if not inputs:
        return "its graph has no inputs"
    if not graph.output:
        return "its graph has no outputs"
    defined.update(i.name for i in graph.input)
    for node in graph.node:
        defined.update(o for o in node.output if o)
    for index, node in enumerate(graph.node):
        for name in node.input:
            if name and name not in defined:
                return "node %s (%s) reads tensor %r, which no input, initializer or node defines" % (
                    node.name or "#%d" % index, node.op_type, name)
    missing = [o.name for o in graph.output if o.name not in defined]
    if missing:
        return "graph output %r is produced by no node" % missing[0]
    return None


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
