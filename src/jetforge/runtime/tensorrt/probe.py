"""What ``jetforge doctor`` (runtime/environment.py) asks of TensorRT: is it importable, which version, DLA cores.

The doctor turns every answer into a report line and never raises; these functions only ask, through
the one import seam (:func:`.library.load_tensorrt`) and the one logger, and let the doctor classify a
failure (absent, or installed but broken).
"""

from types import ModuleType
from typing import Optional

from jetforge.runtime.tensorrt.library import load_tensorrt, version_string
from jetforge.runtime.tensorrt.logger import make_logger

#: How TensorRT-RTX differs from JetPack's TensorRT, for the doctor's line about it.
RTX_NOTE = "not JetPack TensorRT: no DLA, no INT8 calibration flags (used here for ONNX parse/build checks)"


def load(name: str) -> ModuleType:
    """Import ``tensorrt`` or ``tensorrt_rtx``; DependencyError when absent, the import's own error when broken."""
    return load_tensorrt(name)


def version(trt: ModuleType) -> Optional[str]:
    """The library's ``__version__``, None when it reports none."""
    text = version_string(trt)
    return None if text == "0" else text


def dla_cores(trt: ModuleType) -> int:
    """DLA cores as TensorRT's builder sees them (``Builder.num_DLA_cores``; 0 off a Jetson with DLA)."""
    return int(trt.Builder(make_logger(trt, keep=False, forward="ERROR")).num_DLA_cores)
