"""Which video decoders this machine has, for ``jetforge doctor`` and ``--decode auto``.

Four ways a frame can be decoded, fastest first where each exists:

* ``nvdec``: NVIDIA's PyNvVideoCodec (desktop/server GPUs; frames stay in GPU memory). Not for Jetson.
* ``jetson-utils``: NVIDIA's jetson-utils ``videoSource`` (Jetson; NVDEC through GStreamer, CUDA images out).
* ``nvv4l2decoder``: the Jetson's GStreamer hardware decoder, reached through OpenCV's appsink (frames land
  in CPU memory: the fallback on a Jetson without jetson-utils).
* ``opencv``: FFmpeg inside OpenCV, on the CPU (everywhere).

Probing imports nothing heavy by default: a module is looked up with ``find_spec`` (importing PyNvVideoCodec
loads the CUDA driver), and GStreamer elements are asked of ``gst-inspect-1.0``.
"""

import importlib.util
import shutil
import subprocess
from dataclasses import dataclass
from typing import Dict, List, Optional

DECODERS = ("nvdec", "jetson-utils", "nvv4l2decoder", "opencv")


@dataclass(frozen=True)
class DecoderStatus:
    """One decoder: whether it is here, and a detail line (or the fix)."""

    name: str
    found: bool
    detail: str


def _module_here(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _dist_version(name: str) -> Optional[str]:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # not installed, or metadata missing
        return None


def gst_element_exists(element: str, timeout_s: float = 10.0) -> Optional[bool]:
    """True/False from ``gst-inspect-1.0 --exists``; None when GStreamer's tools are not installed."""
    exe = shutil.which("gst-inspect-1.0")
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, "--exists", "--", element], capture_output=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.returncode == 0


def probe_decoders() -> List[DecoderStatus]:
    """Every decoder of :data:`DECODERS`, in that order."""
    out = []
    if _module_here("PyNvVideoCodec"):
        out.append(DecoderStatus("nvdec", True, "PyNvVideoCodec %s (NVDEC, frames in GPU memory)"
                                 % (_dist_version("pynvvideocodec") or "?")))
    else:
        out.append(DecoderStatus("nvdec", False, "PyNvVideoCodec not installed (desktop/server GPUs: "
                                 "pip install pynvvideocodec)"))
    if _module_here("jetson_utils") or _module_here("jetson.utils"):
        out.append(DecoderStatus("jetson-utils", True, "jetson-utils videoSource (Jetson NVDEC, CUDA images)"))
    else:
        out.append(DecoderStatus("jetson-utils", False, "not installed (Jetson: build dusty-nv/jetson-utils)"))
    gst = gst_element_exists("nvv4l2decoder")
    out.append(DecoderStatus("nvv4l2decoder", bool(gst),
                             {True: "GStreamer element present (Jetson hardware decode via appsink)",
                              False: "GStreamer has no nvv4l2decoder (not a Jetson)",
                              None: "gst-inspect-1.0 not found (no GStreamer tools)"}[gst]))
    if _module_here("cv2"):
        out.append(DecoderStatus("opencv", True, "OpenCV %s (FFmpeg, CPU)" % (_dist_version("opencv-python-headless")
                                                                             or _dist_version("opencv-python") or "")))
    else:
        out.append(DecoderStatus("opencv", False, "OpenCV not installed (pip install opencv-python-headless)"))
    return out


def choose_decoder(wanted: str, available: Optional[Dict[str, bool]] = None) -> str:
    """``--decode gpu|cpu|auto`` -> the decoder to use: ``nvdec``, ``jetson-utils`` or ``opencv``.

    ``auto`` takes a GPU decoder when one is here, else OpenCV; ``gpu`` insists on one (a ConfigError naming
    what to install otherwise); ``cpu`` is OpenCV.
    """
    from jetforge.errors import ConfigError

    if wanted not in ("gpu", "cpu", "auto"):
        raise ConfigError("--decode must be gpu, cpu or auto, got %r" % (wanted,))
    if wanted == "cpu":
        return "opencv"
    have = available if available is not None else {d.name: d.found for d in probe_decoders()}
    for name in ("nvdec", "jetson-utils"):
        if have.get(name):
            return name
    if wanted == "gpu":
        raise ConfigError("--decode gpu: no GPU decoder here (PyNvVideoCodec or jetson-utils)",
                          hint="pip install pynvvideocodec on a desktop/server NVIDIA GPU, jetson-utils on a "
                               "Jetson; or use --decode auto/cpu")
    return "opencv"


__all__ = ["DECODERS", "DecoderStatus", "choose_decoder", "gst_element_exists", "probe_decoders"]
