"""Sessions: one interface over inference backends.

>>> from jetforge.runtime.session import open_session
>>> with open_session("model.onnx", threads=2) as s:       # doctest: +SKIP
...     out = s.infer({s.inputs[0].name: x})
...     request = s.submit({s.inputs[0].name: x})           # asynchronous: returns at once
...     out = s.wait(request)

``open_session(path, backend="auto", dla_core=None, cuda_graph=None, **options)``
picks the backend from the file suffix (``.onnx`` -> ONNX Runtime, ``.engine``/
``.plan`` -> TensorRT, ``.pt``/``.ts``/``.pt2`` -> PyTorch); ``open`` is the same
function.  Backends register themselves in :data:`BACKENDS`; their packages
(onnxruntime, tensorrt + cuda-python, torch) are imported only when a session is
opened.  The PyTorch backend is for development and GPU comparison only.
"""

from jetforge.runtime.session.base import (BACKENDS, InferRequest, Session, backend_for_path, check_tensor,
                                           default_threads, open_session)
from jetforge.runtime.session import ort as _ort  # noqa: F401  (registers "onnxruntime")
from jetforge.runtime.tensorrt import session as _trt  # noqa: F401  (registers "tensorrt")
from jetforge.runtime.session import torch_backend as _torch  # noqa: F401  (registers "pytorch"; torch is lazy)

open = open_session  # noqa: A001  (jetforge.runtime.session.open(path, ...), like gzip.open)

__all__ = ["BACKENDS", "InferRequest", "Session", "backend_for_path", "check_tensor", "default_threads", "open",
           "open_session"]
