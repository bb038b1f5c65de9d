"""Lazy import of optional packages with an error that says how to install them.

A deployed Jetson has numpy, OpenCV, TensorRT and a CUDA binding and nothing
more, so nothing here is imported at module import time: callers ask for a
package at the moment they need it and get a :class:`DependencyError` naming the
package and the install step if it is absent.
"""

import importlib
from types import ModuleType
from typing import Dict, Tuple

from jetforge.errors import DependencyError

# import name -> (what it is, how to install it)
INSTALL_HINTS: Dict[str, Tuple[str, str]] = {
    "torch": ("PyTorch", "pip install 'jetforge[compress]' (or torch for your platform from pytorch.org)"),
    "torchvision": ("torchvision", "pip install 'jetforge[compress]'"),
    "onnx": ("the onnx package", "pip install 'jetforge[calibrate]'"),
    "onnxruntime": ("ONNX Runtime", "pip install onnxruntime (on Jetson: the onnxruntime-gpu wheel for your JetPack)"),
    "onnx_graphsurgeon": ("onnx-graphsurgeon", "pip install 'jetforge[calibrate]'"),
    "tensorrt": ("TensorRT", "on Jetson it ships with JetPack (sudo apt install python3-libnvinfer); "
                 "on a desktop GPU: pip install tensorrt"),
    "tensorrt_rtx": ("TensorRT-RTX", "pip install tensorrt-rtx-cu13"),
    "cuda": ("cuda-python", "pip install 'jetforge[cuda]'"),
    "pycuda": ("PyCUDA", "pip install pycuda"),
    "pynvml": ("pynvml (NVML bindings)", "pip install nvidia-ml-py"),
    "matplotlib": ("matplotlib", "pip install matplotlib"),
    "cv2": ("OpenCV", "pip install 'opencv-python-headless<5' (on Jetson keep JetPack's OpenCV, which has GStreamer)"),
    "yaml": ("PyYAML", "pip install pyyaml"),
    "av": ("PyAV (FFmpeg's encoders, for H.264 MP4)", "pip install av==12.3.0 (wheels for Python 3.8-3.12, "
           "x86_64 and aarch64)"),
    "paho": ("paho-mqtt", "pip install paho-mqtt==2.2.0"),
    "gi": ("PyGObject with GStreamer's RTSP server", "sudo apt install python3-gi gir1.2-gst-rtsp-server-1.0 "
           "gstreamer1.0-plugins-ugly (JetPack's system Python has them; a venv needs --system-site-packages)"),
}


def is_available(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it twice on success."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def require(module: str, purpose: str = "") -> ModuleType:
    """Import ``module`` or raise a DependencyError saying what needs it and how to install it.

    Only a missing ``module`` itself is translated; an ImportError raised *inside*
    an installed package (a broken install) is re-raised as is, since hiding it
    would send the user after the wrong fix.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        top = module.split(".")[0]
        # Missing means `module` itself or one of its parent packages; a module that the
        # installed package fails to find inside itself (onnxruntime.capi...) is a broken install.
        if err.name is not None and not (module == err.name or module.startswith(err.name + ".")):
            raise
        label, hint = INSTALL_HINTS.get(top, (top, "pip install " + top))
        need = " for " + purpose if purpose else ""
        raise DependencyError("%s is not installed; it is needed%s" % (label, need), hint=hint) from err
