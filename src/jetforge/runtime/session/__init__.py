"""Sessions: one interface over inference backends, and the one way jetforge opens a model for inference.

>>> from jetforge.runtime.session import open_session
>>> with open_session("model.onnx", threads=2) as s:       # doctest: +SKIP
...     out = s.infer({s.inputs[0].name: x})
...     request = s.submit({s.inputs[0].name: x})           # asynchronous: returns at once
...     out = s.wait(request)
>>> s = open_session(model_proto, optimization="disable", name="candidate")  # doctest: +SKIP

``open_session(model, backend="auto", dla_core=None, cuda_graph=None, optimization=None, **options)``
picks the backend from the file suffix (``.onnx`` -> ONNX Runtime, ``.engine``/``.plan`` ->
TensorRT, ``.pt``/``.ts``/``.pt2`` -> PyTorch); an in-memory model (``bytes``, ``onnx.ModelProto``)
goes to ONNX Runtime.  ``open`` is the same function.  The backends are registered below as lazy
``"module:Class"`` entries (:func:`register_backend`): their modules, and their packages
(onnxruntime, tensorrt + cuda-python, torch), are imported only when a session is opened.  The
PyTorch backend is for development and GPU comparison only.  Adding a backend: one module with a
:class:`Session` subclass and one ``register_backend`` line here (docs/architecture.md).
"""

from jetforge.runtime.session.base import (BACKENDS, InferRequest, Session, backend_for_path, backend_suffixes,
                                           check_tensor, default_threads, is_in_memory_model, open_session,
                                           register_backend, thread_bound)

register_backend("onnxruntime", "jetforge.runtime.session.ort:OrtSession", (".onnx",),
                 "ONNX Runtime: .onnx files or in-memory models (CPU; CUDA with onnxruntime-gpu)")
register_backend("tensorrt", "jetforge.runtime.tensorrt.session:TrtSession", (".engine", ".plan", ".trt"),
                 "TensorRT engines on a GPU or DLA core (JetPack's TensorRT + cuda-python)")
register_backend("pytorch", "jetforge.runtime.session.torch_backend:TorchSession", (".pt", ".pth", ".ts", ".pt2"),
                 "PyTorch programs and modules (development and GPU comparison only)")

open = open_session  # noqa: A001  (jetforge.runtime.session.open(path, ...), like gzip.open)

__all__ = ["BACKENDS", "InferRequest", "Session", "backend_for_path", "backend_suffixes", "check_tensor",
           "default_threads", "is_in_memory_model", "open", "open_session", "register_backend",
           "thread_bound"]
