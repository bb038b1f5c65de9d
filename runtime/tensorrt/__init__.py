"""Everything TensorRT-specific: build plans validated as plain data (:mod:`.plan`), the engine sidecar
(:mod:`.engine_sidecar`), the thin builder layer (:mod:`.builder`), ONNX parse/build checks shared by
TensorRT and TensorRT-RTX (:mod:`.onnx_check`), the calibration-cache format (:mod:`.calib_cache`), the
session backend (:mod:`.session`), the engine cache (:mod:`.engine_cache`) and DLA placement (:mod:`.dla`).

Nothing here imports TensorRT at module import time; every function imports ``tensorrt``
(JetPack / desktop) or ``tensorrt_rtx`` (CPU-capable builder used in CI) when called.
"""

from jetforge.runtime.tensorrt.onnx_check import BuildCheck, check_onnx_builds, import_tensorrt  # noqa: F401
