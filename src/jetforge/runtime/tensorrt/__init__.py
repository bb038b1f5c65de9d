"""Everything TensorRT-specific, in one package; nothing outside it imports ``tensorrt`` or ``tensorrt_rtx``.

Shaped like an inference tool's backend folder (docs/architecture.md, "The TensorRT package"):

* the library and its versions: :mod:`.library` (``load_tensorrt(prefer="tensorrt"|"rtx")``, the only
  import of either), :mod:`.version` (``TensorRTVersion``: parsing, releases, the calibration-cache header
  number), :mod:`.compat` (what each TensorRT has), :mod:`.logger` (the one ``ILogger``), :mod:`.probe`
  (what ``jetforge doctor`` asks);
* INT8: :mod:`.calib_cache` (the one calibration-cache reader/writer), :mod:`.calibrator` (the
  cache-serving ``IInt8EntropyCalibrator2``), :mod:`.int8_source` (cache or Q/DQ, by version and device);
* the build: :mod:`.plan` + :mod:`.plan_steps` + :mod:`.profile` + :mod:`.model_info` (a build as
  validated plain data), :mod:`.network`, :mod:`.config`, :mod:`.builder`, :mod:`.inspect` (TensorRT
  calls), :mod:`.engine_sidecar`, :mod:`.engine_cache`, :mod:`.onnx_check` (does an ONNX parse and build);
* running: :mod:`.session` (the ``"tensorrt"`` session backend) over :mod:`.session_logic`;
* DLA placement: :mod:`.dla`.

Nothing here imports TensorRT at module import time; functions call :func:`.library.load_tensorrt`.
"""

from jetforge.runtime.tensorrt.library import load_tensorrt  # noqa: F401
from jetforge.runtime.tensorrt.onnx_check import BuildCheck, check_onnx_builds  # noqa: F401
from jetforge.runtime.tensorrt.version import TensorRTVersion  # noqa: F401
