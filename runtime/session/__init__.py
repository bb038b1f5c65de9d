"""Sessions: one interface over inference backends.

>>> from jetforge.runtime.session import open_session
>>> with open_session("model.onnx", threads=2) as s:       # doctest: +SKIP
...     out = s.infer({s.inputs[0].name: x})

``open_session(path, backend="auto", **options)`` picks the backend from the file
suffix (``.onnx`` -> ONNX Runtime).  Backends register themselves in
:data:`BACKENDS`; their packages are imported only when a session is opened.
"""

from jetforge.runtime.session.base import (BACKENDS, Session, backend_for_path, check_tensor, default_threads,
                                           open_session)
from jetforge.runtime.session import ort as _ort  # noqa: F401  (registers "onnxruntime")

__all__ = ["BACKENDS", "Session", "backend_for_path", "check_tensor", "default_threads", "open_session"]
