"""The thin TensorRT-bound layer: ONNX parse/build checks, shared by TensorRT and TensorRT-RTX.

Nothing here imports TensorRT at module import time; every function imports ``tensorrt``
(JetPack / desktop) or ``tensorrt_rtx`` (CPU-capable builder used in CI) when called.
"""

from jetforge.runtime.tensorrt.onnx_check import BuildCheck, check_onnx_builds, import_tensorrt  # noqa: F401
