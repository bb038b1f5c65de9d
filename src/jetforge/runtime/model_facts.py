"""One accessor for a model's facts, whatever was opened: an ONNX model, a TensorRT engine, a bundle or a session.

A model's facts are its :class:`~jetforge.runtime.sidecar.ModelSidecar`: task, labels, the input contract
(image, clip or image pyramid), ``extra`` (the SSD block with its anchors, MTCNN's stage, an action model's
accuracy), the model's tensors and content hash.  They travel with the model: in ``model.onnx.json``, in a
bundle's ``model.onnx.json``, and embedded whole in an engine's ``model.engine.json`` (engine sidecar format 2,
:mod:`jetforge.runtime.tensorrt.engine_sidecar`).  Every consumer -- the apps' tasks, the SSD detector, MTCNN,
the GPU pipeline, :func:`jetforge.runtime.inputs.input_contract` -- asks :func:`model_facts`, so an engine
opens wherever its ONNX opens and no consumer knows which container the facts came from.

>>> facts = model_facts(session)              # doctest: +SKIP  (any backend's session)
>>> facts = model_facts("model.engine")       # doctest: +SKIP  (the engine sidecar's embedded model)
>>> facts = model_facts(open_bundle("cam"))   # doctest: +SKIP  (jetforge.deploy.bundle: a verified bundle)

Torch-free, onnx-free, TensorRT-free (reading an engine's sidecar needs no TensorRT), Python 3.8.
"""

from pathlib import Path
from typing import Any, Optional, Union

from jetforge.errors import ModelError
from jetforge.fileio import PathLike
from jetforge.runtime.sidecar import ModelSidecar, read_sidecar

ENGINE_SUFFIXES = (".engine", ".plan", ".trt")  # the tensorrt backend's (runtime/tensorrt/session.py)


def model_facts(source: Any, verify_hash: bool = True) -> Optional[ModelSidecar]:
    """The model facts of ``source``; None where it has none (a session opened on a file without a sidecar).

    ``source`` is a :class:`ModelSidecar` (returned as is), an engine sidecar (its embedded ``model``), a
    session (its sidecar's facts), a verified bundle (``jetforge.deploy.bundle.open_bundle``: its model's
    sidecar), or a path: an engine file (``.engine``/``.plan``/``.trt``: the facts embedded in its sidecar)
    or any other model file (its ``.json`` sidecar).  For a path, a missing sidecar is an InputFileError
    and a stale one (``verify_hash``) a ModelError, as :func:`read_sidecar` says.
    """
    if source is None or isinstance(source, ModelSidecar):
        return source
    if isinstance(source, (str, Path)):
        return read_model_facts(source, verify_hash=verify_hash)
    embedded = getattr(source, "model", None)
    if isinstance(embedded, ModelSidecar):  # an engine sidecar (format 2, or format 1 upgraded)
        return embedded
    if hasattr(source, "manifest") and isinstance(getattr(source, "onnx", None), Path):  # an opened bundle
        return read_sidecar(source.onnx, verify_hash=verify_hash)
    if hasattr(source, "sidecar"):  # a session of any backend
        return model_facts(source.sidecar, verify_hash=verify_hash)
    raise ModelError("cannot tell the model facts of a %s" % type(source).__name__,
                     hint="pass a session, a sidecar, a model or engine path, or an opened bundle")


def read_model_facts(path: PathLike, verify_hash: bool = True) -> ModelSidecar:
    """The facts of the model file at ``path``: an engine's embedded model sidecar, or the file's own sidecar.

    An engine's facts need no TensorRT and do not depend on the TensorRT version (a session checks that).
    """
    p = Path(path)
    if p.suffix.lower() in ENGINE_SUFFIXES:
        from jetforge.runtime.tensorrt.engine_sidecar import read_engine_sidecar

        facts = read_engine_sidecar(p, verify_hash=verify_hash).model
        assert facts is not None  # EngineSidecar always has one
        return facts
    return read_sidecar(p, verify_hash=verify_hash)


def same_facts(a: ModelSidecar, b: ModelSidecar, ignore: Union[tuple, list] = ("produced_by",)) -> bool:
    """Whether two fact sets agree on everything but ``ignore`` (by default where they were written)."""
    da, db = a.to_dict(), b.to_dict()
    for key in ignore:
        da.pop(key, None)
        db.pop(key, None)
    return da == db


__all__ = ["ENGINE_SUFFIXES", "model_facts", "read_model_facts", "same_facts"]
