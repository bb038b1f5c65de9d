"""What this machine has: Python, CUDA, TensorRT, DLA, ONNX Runtime, OpenCV, Jetson facts.

Each ``probe_*`` function looks at one component and returns a :class:`Probe`
(found or not, version, a one-line detail and, when something is missing, the
install hint).  Probes never raise and import their package only when called, so
``jetforge doctor`` works on a bare Jetson, on a workstation without a GPU and
on a machine where an install is half broken (that is reported, not crashed on).
Nothing here imports torch.
"""

import functools
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from jetforge.errors import DependencyError
from jetforge.optional import INSTALL_HINTS, require
from jetforge.runtime import nvml
from jetforge.runtime.tensorrt import probe as trt_probe


@dataclass
class Probe:
    """One component: whether it is here, its version, a detail line and the fix if it is missing."""

    name: str
    found: bool
    version: Optional[str] = None
    detail: str = ""
    hint: str = ""
    info: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def _hint(module: str) -> str:
    return INSTALL_HINTS.get(module, ("", "pip install " + module))[1]


def _import(module: str, load: Callable[[str], Any] = require) -> Tuple[Optional[Any], str]:
    """(module, "") or (None, why it could not be imported); never raises.

    ``load`` imports it (TensorRT through the TensorRT package's own seam, everything else via ``require``).
    """
    try:
        return load(module), ""
    except DependencyError:
        return None, "not installed"
    except ImportError as err:  # require() passes on what is not a plain absence: a broken install
        return None, "installed but fails to import: %s" % _short(err)
    except Exception as err:  # a broken install can raise anything (OSError for a missing .so)
        return None, "installed but fails to import: %s: %s" % (type(err).__name__, _short(err))


def _short(err: Any, limit: int = 160) -> str:
    text = " ".join(str(err).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _dist_version(*names: str) -> Optional[str]:
    """Installed distribution version by pip name (for packages without ``__version__``)."""
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover - Python < 3.8
        return None
    for name in names:
        try:
            return metadata.version(name)
        except Exception:
            continue
    return None


def _safe(name: str) -> Callable[[Callable[..., Probe]], Callable[..., Probe]]:
    """Turn any exception inside a probe into a not-found result that says what happened."""
    def deco(fn: Callable[..., Probe]) -> Callable[..., Probe]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Probe:
            try:
                return fn(*args, **kwargs)
            except Exception as err:
                return Probe(name, False, detail="probe failed: %s: %s" % (type(err).__name__, _short(err)))
        return wrapper
    return deco


Board = Tuple[Any, str]  # (jetforge.targets.Detection or None, why there is none)


def detect_board() -> Board:
    """``jetforge.targets.detect()`` (board or GPU, L4T, JetPack) and, if it gave nothing, why."""
    try:
        from jetforge.targets.detect import detect
    except ImportError as err:
        return None, "target detection is not available (%s)" % _short(err)
    try:
        return detect(), ""
    except Exception as err:  # a JetforgeError (a bad profile) says why; anything else is reported as is
        one_line = getattr(err, "one_line", None)
        return None, one_line() if callable(one_line) else "%s: %s" % (type(err).__name__, _short(err))


@_safe("target")
def probe_target(board: Optional[Board] = None) -> Probe:
    """The target profile matching this machine (``jetforge.targets.detect``), and how it was decided."""
    det, why = board or detect_board()
    hint = "pass --target NAME to commands (see `jetforge targets list`)"
    if det is None:
        return Probe("target", False, detail=why, hint=hint)
    warnings = list(det.warnings)
    if det.target is None:
        return Probe("target", False, detail=det.how, hint=hint, info={"how": det.how, "warnings": warnings})
    detail = "%s (%s), from %s" % (det.target.name, det.target.display_name, det.how)
    if warnings:
        detail += "; " + "; ".join(warnings)
    return Probe("target", True, detail=detail, info={"name": det.target.name, "how": det.how, "warnings": warnings})


@_safe("python")
def probe_python() -> Probe:
    """The interpreter (JetPack 5 ships Python 3.8, JetPack 6 ships 3.10)."""
    ok = sys.version_info >= (3, 8)
    return Probe("python", ok, version=platform.python_version(),
                 detail="%s on %s (%s)" % (platform.python_implementation(), platform.machine(), sys.executable),
                 hint="" if ok else "jetforge needs Python 3.8 or newer")


@_safe("jetson")
def probe_jetson(board: Optional[Board] = None) -> Probe:
    """Jetson facts: the board model, L4T release and its JetPack (TensorRT, CUDA) release."""
    det, why = board or detect_board()
    hint = "DLA, tegrastats and JetPack TensorRT exist only on a Jetson with JetPack 5 or 6"
    if det is None:
        return Probe("jetson", False, detail="unknown: " + why, hint=hint)
    if not (det.l4t or det.soc or "jetson" in (det.model or "").lower()):
        return Probe("jetson", False, detail="not a Jetson (no /etc/nv_tegra_release, no Tegra device tree)",
                     hint=hint)
    jp = det.jetpack
    detail = "%s, L4T %s" % (det.model or "unknown board", det.l4t or "unknown")
    if jp is not None:
        detail += " = JetPack %s (TensorRT %s, CUDA %s)" % (jp.jetpack, jp.tensorrt, jp.cuda)
    return Probe("jetson", True, version=det.l4t, detail=detail,
                 info={"model": det.model, "l4t": det.l4t, "soc": det.soc, "jetpack": jp.jetpack if jp else None,
                       "jetpack_tensorrt": jp.tensorrt if jp else None})


def _cuda_version(v: int) -> str:
    """CUDA's integer version (12060) as text (12.6)."""
    return "%d.%d" % (v // 1000, (v % 1000) // 10)


def _cuda_runtime_module() -> Tuple[Optional[Any], str]:
    """cuda-python's runtime bindings: ``cuda.bindings.runtime`` (>= 12.x) or ``cuda.cudart`` (older)."""
    mod, why = _import("cuda.bindings.runtime")
    if mod is not None:
        return mod, ""
    old, _ = _import("cuda.cudart")
    if old is not None:
        return old, ""
    return None, why


def _err_ok(err: Any) -> bool:
    return int(err) == 0


def _nvidia_smi() -> Optional[Dict[str, str]]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=10,
                             universal_newlines=True).stdout
    except (OSError, subprocess.SubprocessError) as err:
        return {"error": _short(err)}
    facts = {}
    m = re.search(r"CUDA Version:\s*([\d.]+)", out)
    if m:
        facts["cuda"] = m.group(1)
    m = re.search(r"Driver Version:\s*([\d.]+)", out)
    if m:
        facts["driver"] = m.group(1)
    if not facts:
        facts["error"] = _short(out or "no output")
    return facts


@_safe("cuda")
def probe_cuda() -> Probe:
    """A usable CUDA driver and device, asked through cuda-python if present, else nvidia-smi."""
    rt, _ = _cuda_runtime_module()
    hint = ("install the NVIDIA driver and CUDA (on Jetson they come with JetPack); "
            "jetforge asks CUDA through cuda-python: " + _hint("cuda"))
    if rt is not None:
        err, runtime_v = rt.cudaRuntimeGetVersion()
        err_d, driver_v = rt.cudaDriverGetVersion()
        err_n, count = rt.cudaGetDeviceCount()
        info = {"via": "cuda-python", "runtime": _cuda_version(runtime_v) if _err_ok(err) else None,
                "driver": _cuda_version(driver_v) if _err_ok(err_d) and driver_v else None,
                "devices": count if _err_ok(err_n) else 0}
        if _err_ok(err_n) and count:
            names = []
            for i in range(count):
                e, prop = rt.cudaGetDeviceProperties(i)
                if _err_ok(e):
                    name = prop.name.decode() if isinstance(prop.name, bytes) else str(prop.name)
                    names.append("%s (sm_%d%d)" % (name.split("\x00")[0], prop.major, prop.minor))
            info["names"] = names
            return Probe("cuda", True, version=info["driver"] or info["runtime"],
                         detail="%d device(s): %s; runtime %s" % (count, ", ".join(names), info["runtime"]),
                         info=info)
        detail = "no usable CUDA device (%s); cuda-python runtime %s" % (getattr(err_n, "name", err_n), info["runtime"])
        smi = _nvidia_smi()  # e.g. a driver older than the runtime cuda-python was built for
        if smi and "cuda" in smi:
            detail += "; nvidia-smi: driver %s supports CUDA %s" % (smi.get("driver", "?"), smi["cuda"])
        return Probe("cuda", False, version=info["runtime"], detail=detail, hint=hint, info=info)
    smi = _nvidia_smi()
    if smi and "cuda" in smi:
        return Probe("cuda", True, version=smi["cuda"],
                     detail="driver %s (from nvidia-smi; cuda-python not installed)" % smi.get("driver", "?"),
                     info=dict(smi, via="nvidia-smi"))
    detail = "no CUDA driver found (no cuda-python, no nvidia-smi)"
    if smi:
        detail = "nvidia-smi failed: %s" % smi.get("error", "")
    return Probe("cuda", False, detail=detail, hint=hint)


@_safe("cuda-python")
def probe_cuda_python() -> Probe:
    """The cuda-python binding (``cuda.bindings``, or the older ``cuda.cudart`` layout)."""
    mod, why = _import("cuda.bindings")
    if mod is None:
        old, _ = _import("cuda.cudart")
        if old is not None:
            return Probe("cuda-python", True, version=_dist_version("cuda-python"),
                         detail="cuda.cudart (pre-12.x layout)")
        return Probe("cuda-python", False, detail=why, hint=_hint("cuda"))
    version = getattr(mod, "__version__", None) or _dist_version("cuda-bindings", "cuda-python")
    return Probe("cuda-python", True, version=version, detail="cuda.bindings")


@_safe("pycuda")
def probe_pycuda() -> Probe:
    """PyCUDA, the other CUDA binding TensorRT samples use (only imported, no context created)."""
    mod, why = _import("pycuda")
    if mod is None:
        return Probe("pycuda", False, detail=why + " (optional: cuda-python is enough)", hint=_hint("pycuda"))
    return Probe("pycuda", True, version=getattr(mod, "VERSION_TEXT", None) or _dist_version("pycuda"))


@_safe("tensorrt")
def probe_tensorrt() -> Probe:
    """JetPack / desktop TensorRT (``import tensorrt``)."""
    mod, why = _import("tensorrt", trt_probe.load)
    if mod is None:
        return Probe("tensorrt", False, detail=why + " (needed to build and run engines)", hint=_hint("tensorrt"))
    return Probe("tensorrt", True, version=trt_probe.version(mod))


@_safe("tensorrt-rtx")
def probe_tensorrt_rtx() -> Probe:
    """TensorRT-RTX (``import tensorrt_rtx``), reported apart because it is not JetPack TensorRT."""
    mod, why = _import("tensorrt_rtx", trt_probe.load)
    if mod is None:
        return Probe("tensorrt-rtx", False, detail=why + " (optional: CPU-side ONNX parse/build checks)",
                     hint=_hint("tensorrt_rtx"))
    return Probe("tensorrt-rtx", True, version=trt_probe.version(mod), detail=trt_probe.RTX_NOTE)


@_safe("dla")
def probe_dla(board: Optional[Board] = None) -> Probe:
    """DLA cores as TensorRT's builder reports them (``Builder.num_DLA_cores``); unknown without TensorRT."""
    trt, why = _import("tensorrt", trt_probe.load)
    if trt is None:
        detail = "unknown: needs TensorRT (%s)" % why
        target = getattr((board or detect_board())[0], "target", None)
        if target is not None:
            detail += "; the %s profile says %d" % (target.name, target.dla_cores)
        return Probe("dla", False, detail=detail, hint=_hint("tensorrt"), info={"cores": None})
    cores = trt_probe.dla_cores(trt)
    if cores:
        return Probe("dla", True, detail="%d DLA core(s)" % cores, info={"cores": cores})
    return Probe("dla", False, detail="TensorRT reports 0 DLA cores",
                 hint="DLA exists on Jetson AGX Orin, Orin NX and Xavier; not on Orin Nano, Thor or desktop GPUs",
                 info={"cores": 0})


@_safe("onnxruntime")
def probe_onnxruntime() -> Probe:
    """ONNX Runtime and its execution providers."""
    mod, why = _import("onnxruntime")
    if mod is None:
        return Probe("onnxruntime", False, detail=why, hint=_hint("onnxruntime"), info={"providers": []})
    providers = list(mod.get_available_providers())
    return Probe("onnxruntime", True, version=getattr(mod, "__version__", None),
                 detail="providers: " + ", ".join(providers), info={"providers": providers})


def gstreamer_from_build_info(text: str) -> Tuple[Optional[bool], str]:
    """(has GStreamer, the build line) from ``cv2.getBuildInformation()``; None if the line is absent."""
    for line in text.splitlines():
        if line.strip().startswith("GStreamer:"):
            value = line.split(":", 1)[1].strip()
            return value.upper().startswith("YES"), value
    return None, ""


@_safe("opencv")
def probe_opencv() -> Probe:
    """OpenCV, and whether its build has GStreamer (camera and RTSP pipelines on Jetson)."""
    cv2, why = _import("cv2")
    if cv2 is None:
        return Probe("opencv", False, detail=why, hint=_hint("cv2"))
    has_gst, line = gstreamer_from_build_info(cv2.getBuildInformation())
    gst = "GStreamer: " + (line or "not listed")
    return Probe("opencv", True, version=getattr(cv2, "__version__", None), detail=gst,
                 info={"gstreamer": bool(has_gst)})


@_safe("gstreamer")
def probe_gstreamer() -> Probe:
    """Whether OpenCV can open GStreamer pipelines (CSI cameras, hardware decode, RTSP on Jetson)."""
    cv2, why = _import("cv2")
    if cv2 is None:
        return Probe("gstreamer", False, detail="unknown: needs OpenCV (%s)" % why, hint=_hint("cv2"))
    has_gst, line = gstreamer_from_build_info(cv2.getBuildInformation())
    if has_gst:
        return Probe("gstreamer", True, version=line.partition("(")[2].rstrip(")") or None, detail="in OpenCV's build")
    return Probe("gstreamer", False, detail="OpenCV was built without GStreamer (files and USB cameras still work)",
                 hint="for CSI cameras and hardware decode use an OpenCV built with GStreamer "
                      "(on Jetson: JetPack's python3-opencv, not pip's opencv-python-headless)")


@_safe("video decoders")
def probe_video_decoders() -> Probe:
    """Which video decoders exist: NVDEC via PyNvVideoCodec, jetson-utils, GStreamer nvv4l2decoder, OpenCV."""
    from jetforge.runtime.decoders import probe_decoders

    found = probe_decoders()
    names = [d.name for d in found if d.found]
    missing = [d.name for d in found if not d.found]
    detail = "; ".join("%s: %s" % (d.name, d.detail) for d in found if d.found) or "none"
    detail += " (not here: %s)" % ", ".join(missing) if missing else ""
    return Probe("video decoders", bool(names), detail=detail,
                 hint="" if names else "pip install opencv-python-headless",
                 info={d.name: d.found for d in found})


@_safe("pynvml")
def probe_pynvml() -> Probe:
    """NVML bindings (desktop GPU memory and power); Jetson before JetPack 6 has no NVML, use tegrastats."""
    mod, why = _import("pynvml", nvml.load)
    if mod is None:
        return Probe("pynvml", False, detail=why + " (optional: GPU memory/power on desktop GPUs)",
                     hint=_hint("pynvml"))
    version = _dist_version("nvidia-ml-py", "pynvml")
    driver, failure = nvml.driver_version(mod)
    if driver is None:
        return Probe("pynvml", True, version=version, detail="installed; NVML unavailable: %s" % _short(failure))
    return Probe("pynvml", True, version=version, detail="NVML driver %s" % driver)


@_safe("tegrastats")
def probe_tegrastats() -> Probe:
    """tegrastats, the Jetson source of power, clocks and DLA/GPU load."""
    exe = shutil.which("tegrastats") or ("/usr/bin/tegrastats" if os.path.exists("/usr/bin/tegrastats") else None)
    if exe is None:
        return Probe("tegrastats", False, detail="not found (Jetson power and DLA load are read from it)",
                     hint="tegrastats comes with JetPack (L4T); it exists only on a Jetson")
    return Probe("tegrastats", True, detail=exe)


@_safe("numpy")
def probe_numpy() -> Probe:
    """numpy (a required dependency)."""
    mod, why = _import("numpy")
    if mod is None:
        return Probe("numpy", False, detail=why, hint="pip install numpy")
    return Probe("numpy", True, version=mod.__version__)


@_safe("torch")
def probe_torch() -> Probe:
    """Whether PyTorch is present, without importing it (needed only for `compress` on a workstation)."""
    try:
        import importlib.util
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return Probe("torch", False, detail="not installed (needed only to compress/export on a workstation)",
                     hint=_hint("torch"))
    return Probe("torch", True, version=_dist_version("torch"), detail="compress/export available (not imported)")


PROBES: List[Callable[[], Probe]] = [
    probe_target, probe_python, probe_jetson, probe_cuda, probe_cuda_python, probe_pycuda,
    probe_tensorrt, probe_dla, probe_tensorrt_rtx, probe_onnxruntime, probe_opencv, probe_gstreamer,
    probe_video_decoders, probe_pynvml, probe_tegrastats, probe_numpy, probe_torch,
]
_USE_BOARD = (probe_target, probe_jetson, probe_dla)


def probe_all() -> List[Probe]:
    """Every probe, in the order ``jetforge doctor`` shows them (the board is detected once)."""
    board = detect_board()
    return [probe(board) if probe in _USE_BOARD else probe() for probe in PROBES]
