"""The external-data files of an ONNX model (weights stored beside the ``.onnx``), carried into a bundle.

An ONNX model over 2 GB, or one saved with ``save_as_external_data``, keeps its initializers in other files named
by a relative ``location``.  ``bundle create`` used to copy the ``.onnx`` alone: the bundle verified "ok" and the
board's build then failed, or read whatever weights file sat there (issue 25).  Here every location is read from
the model (without loading the weights), checked like any path from someone else - relative, normalised, inside the
model's folder, no link on the way, an existing plain file - and returned, so the bundle copies each file under the
same relative name beside its ``model.onnx`` and the manifest hashes it like every other file.
"""

from pathlib import Path
from typing import Any, Iterator, List

from jetforge.deploy.bundle.manifest import BundleError
from jetforge.deploy.safety import bundle_path_problem, shown_value
from jetforge.optional import is_available


def _tensors(graph: Any) -> Iterator[Any]:
    """Every tensor of ``graph`` that can hold external data: initializers, sparse ones, attribute tensors, subgraphs."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _tensors(attr.g)
            for sub in attr.graphs:
                yield from _tensors(sub)


def external_locations(model_path: Path, what: str = "model") -> List[str]:
    """The relative paths of the files ``model_path`` stores weights in, each checked; [] for a self-contained model.

    Without the ``onnx`` package (a board) nothing can be read: [] and the caller says so.
    """
    if not is_available("onnx"):
        return []
    import onnx

    model = onnx.load(str(model_path), load_external_data=False)
    folder = model_path.resolve().parent
    found: List[str] = []
    for tensor in _tensors(model.graph):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        entries = {e.key: e.value for e in tensor.external_data}
        location = entries.get("location", "")
        if location in found:
            continue
        why = bundle_path_problem(location)
        if why:
            raise BundleError("%s %s keeps weights in %s, which %s" % (what, model_path, shown_value(location), why),
                              hint="save the model with its weights inside (onnx.save(model, path)), or with "
                                   "external data beside it under a plain relative name")
        target = folder / location
        if any(p.is_symlink() for p in [target] + list(target.parents)[:len(Path(location).parts) - 1]):
            raise BundleError("%s %s keeps weights in %s, which is a symbolic link or lies behind one"
                              % (what, model_path, shown_value(location)), hint="copy the weights file itself")
        if not target.is_file():
            raise BundleError("%s %s keeps weights in %s, which is missing beside it" % (what, model_path,
                                                                                           shown_value(location)),
                              hint="copy the weights file next to the model (the model names it)")
        found.append(location)
    return found


__all__ = ["external_locations"]
