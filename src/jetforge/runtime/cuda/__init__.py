"""The CUDA layer: device and pinned buffers, streams, events and graphs through cuda-python.

``cuda-python`` is imported when the first buffer, stream or event is created (never
at import time); :mod:`jetforge.runtime.cuda.policy` holds the graph decisions as
plain Python and imports nothing of CUDA.
"""

from jetforge.runtime.cuda.bindings import check, clear_last_error, device_count, runtime_api  # noqa: F401
from jetforge.runtime.cuda.graph import CudaGraph, GraphCapture, try_capture  # noqa: F401
from jetforge.runtime.cuda.memory import DeviceBuffer, PinnedBuffer, nbytes_of  # noqa: F401
from jetforge.runtime.cuda.policy import CAPTURE, ENQUEUE, LAUNCH, GraphPolicy, shape_key  # noqa: F401
from jetforge.runtime.cuda.stream import Event, Stream  # noqa: F401

__all__ = ["CAPTURE", "CudaGraph", "DeviceBuffer", "ENQUEUE", "Event", "GraphCapture", "GraphPolicy", "LAUNCH",
           "PinnedBuffer", "Stream", "check", "clear_last_error", "device_count", "nbytes_of", "runtime_api",
           "shape_key", "try_capture"]
