"""jetforge.runtime.environment: the machine probes behind `jetforge doctor`.

The real probes run against this machine (ONNX Runtime installed, no TensorRT, no
GPU driver, not a Jetson).  A missing package is simulated the way Python itself
reports one (``sys.modules[name] = None`` makes ``import name`` raise
ModuleNotFoundError); a broken install is a real package on disk whose import fails.
Jetson facts come from recorded device files read by ``jetforge.targets.detect``.
The only fake is TensorRT's builder with DLA cores, hardware that does not exist here.
"""

import json
import sys
import types

import pytest

from jetforge.runtime import environment as env
from jetforge.runtime.environment import Probe
from jetforge.runtime.tensorrt import probe as trt_probe

AGX_ORIN_JP511 = {
    "etc/nv_tegra_release": "# R35 (release), REVISION: 3.1, GCID: 32827747, BOARD: t186ref, EABI: aarch64\n",
    "proc/device-tree/model": "NVIDIA Jetson AGX Orin Developer Kit\x00",
    "proc/device-tree/compatible": "nvidia,p3737-0000+p3701-0005\x00nvidia,p3701-0005\x00nvidia,tegra234\x00",
    "proc/meminfo": "MemTotal:       64335836 kB\n",
}


def _missing(monkeypatch, *modules):
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)


def _recorded_board(tmp_path, files):
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode())
    from jetforge.targets.detect import detect

    return detect(tmp_path, gpu_names=[]), ""


# ---- this machine, as it is --------------------------------------------------------------------------

def test_real_onnxruntime_found_with_cpu_provider():
    import onnxruntime

    probe = env.probe_onnxruntime()
    assert probe.found is True
    assert probe.version == onnxruntime.__version__
    assert "CPUExecutionProvider" in probe.info["providers"]
    assert "CPUExecutionProvider" in probe.detail


def test_real_tensorrt_missing_with_jetpack_hint():
    if env._import("tensorrt", trt_probe.load)[0] is not None:
        pytest.skip("TensorRT is installed on this machine")
    probe = env.probe_tensorrt()
    assert probe.found is False
    assert probe.detail.startswith("not installed")
    assert "JetPack" in probe.hint and "python3-libnvinfer" in probe.hint
    dla = env.probe_dla(board=(None, "no board"))
    assert dla.found is False
    assert dla.detail.startswith("unknown: needs TensorRT")
    assert dla.info["cores"] is None
    assert "JetPack" in dla.hint


def test_real_tensorrt_rtx_is_reported_as_not_jetpack_tensorrt():
    rtx = env._import("tensorrt_rtx", trt_probe.load)[0]
    if rtx is None:
        pytest.skip("tensorrt-rtx is not installed")
    probe = env.probe_tensorrt_rtx()
    assert probe.found is True and probe.version == rtx.__version__
    assert "not JetPack TensorRT" in probe.detail
    assert "DLA" in probe.detail and "INT8" in probe.detail


def test_real_opencv_gstreamer_matches_build_information():
    import cv2

    opencv = env.probe_opencv()
    gst = env.probe_gstreamer()
    assert opencv.found is True and opencv.version == cv2.__version__
    line = [x for x in cv2.getBuildInformation().splitlines() if x.strip().startswith("GStreamer:")][0]
    has = line.split(":", 1)[1].strip().startswith("YES")
    assert opencv.info["gstreamer"] is has
    assert gst.found is has
    if not has:
        assert "GStreamer" in gst.hint and "JetPack" in gst.hint


def test_real_python_and_numpy():
    import numpy

    py = env.probe_python()
    assert py.found and py.version == "%d.%d.%d" % sys.version_info[:3]
    assert env.probe_numpy().version == numpy.__version__


def test_real_cuda_probe_reports_runtime_or_absence():
    probe = env.probe_cuda()
    assert isinstance(probe.found, bool)
    if not probe.found:
        assert "cuda-python" in probe.hint and "JetPack" in probe.hint
        assert probe.detail
    if env._import("cuda.bindings.runtime")[0] is not None:
        assert probe.info["via"] == "cuda-python"
        assert probe.info["runtime"] is not None and "." in probe.info["runtime"]


def test_probe_all_order_names_and_json():
    probes = env.probe_all()
    names = [p.name for p in probes]
    assert names[:3] == ["target", "python", "jetson"]
    assert len(names) == len(set(names)) == len(env.PROBES)
    for required in ("cuda", "cuda-python", "pycuda", "tensorrt", "dla", "tensorrt-rtx", "onnxruntime", "opencv",
                     "gstreamer", "pynvml", "tegrastats"):
        assert required in names
    for p in probes:
        assert isinstance(p, Probe)
        json.dumps(p.to_dict())  # serializable as is
        if not p.found:
            assert p.hint, "%s is missing but has no hint" % p.name


# ---- missing and broken packages ---------------------------------------------------------------------

@pytest.mark.parametrize("probe, modules, needle", [
    ("probe_onnxruntime", ["onnxruntime"], "pip install onnxruntime"),
    ("probe_tensorrt", ["tensorrt"], "JetPack"),
    ("probe_tensorrt_rtx", ["tensorrt_rtx"], "pip install tensorrt-rtx-cu13"),
    ("probe_cuda_python", ["cuda", "cuda.bindings", "cuda.cudart"], "jetforge[cuda]"),
    ("probe_pycuda", ["pycuda"], "pip install pycuda"),
    ("probe_pynvml", ["pynvml"], "pip install nvidia-ml-py"),
    ("probe_opencv", ["cv2"], "opencv-python-headless"),
    ("probe_gstreamer", ["cv2"], "opencv-python-headless"),
])
def test_missing_package_gives_not_found_and_install_hint(monkeypatch, probe, modules, needle):
    _missing(monkeypatch, *modules)
    result = getattr(env, probe)()
    assert result.found is False
    assert "not installed" in result.detail or "needs OpenCV" in result.detail
    assert needle in result.hint


def test_missing_cuda_python_and_no_nvidia_smi(monkeypatch):
    _missing(monkeypatch, "cuda", "cuda.bindings", "cuda.bindings.runtime", "cuda.cudart")
    monkeypatch.setenv("PATH", "")
    probe = env.probe_cuda()
    assert probe.found is False
    assert "no cuda-python, no nvidia-smi" in probe.detail
    assert "pip install 'jetforge[cuda]'" in probe.hint


def test_missing_onnxruntime_reports_no_providers(monkeypatch):
    _missing(monkeypatch, "onnxruntime")
    assert env.probe_onnxruntime().info["providers"] == []


def test_broken_install_is_reported_not_disguised(monkeypatch, tmp_path):
    pkg = tmp_path / "tensorrt"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise OSError('libnvinfer.so.10: cannot open shared object file')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "tensorrt", raising=False)
    probe = env.probe_tensorrt()
    assert probe.found is False
    assert probe.detail.startswith("installed but fails to import: OSError: libnvinfer.so.10")
    dla = env.probe_dla(board=(None, ""))
    assert "unknown: needs TensorRT (installed but fails to import" in dla.detail


def test_missing_inner_module_is_a_broken_install(monkeypatch, tmp_path):
    pkg = tmp_path / "pycuda"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import pycuda._driver_missing_part\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "pycuda", raising=False)
    probe = env.probe_pycuda()
    assert probe.found is False
    assert probe.detail.startswith("installed but fails to import")


def test_a_probe_that_raises_is_reported_not_raised(monkeypatch):
    import onnxruntime

    def boom():
        raise RuntimeError("provider library failed to load")

    monkeypatch.setattr(onnxruntime, "get_available_providers", boom)
    probe = env.probe_onnxruntime()
    assert probe.found is False and probe.name == "onnxruntime"
    assert probe.detail == "probe failed: RuntimeError: provider library failed to load"


# ---- TensorRT with DLA (hardware that does not exist here) --------------------------------------------

class FakeILogger:
    """trt.ILogger: jetforge subclasses it (the one TensorRT logger) and calls its __init__."""

    def __init__(self):
        self.initialised = True


class FakeBuilder:
    num_DLA_cores = 2

    def __init__(self, logger):
        assert isinstance(logger, FakeILogger) and logger.initialised and callable(logger.log)


def _fake_tensorrt(cores):
    module = types.ModuleType("tensorrt")
    module.__version__ = "8.5.2.2"
    module.ILogger = FakeILogger
    module.Builder = type("FakeBuilder%d" % cores, (FakeBuilder,), {"num_DLA_cores": cores})
    return module


def test_dla_cores_from_tensorrt_builder(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", _fake_tensorrt(2))
    assert env.probe_tensorrt().version == "8.5.2.2"
    dla = env.probe_dla(board=(None, ""))
    assert dla.found is True and dla.info["cores"] == 2
    assert dla.detail == "2 DLA core(s)"


def test_zero_dla_cores_is_not_found_with_explanation(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", _fake_tensorrt(0))
    dla = env.probe_dla(board=(None, ""))
    assert dla.found is False and dla.info["cores"] == 0
    assert "Orin Nano" in dla.hint


# ---- the board, from recorded Jetson files -------------------------------------------------------------

def test_jetson_facts_from_recorded_files(tmp_path):
    board = _recorded_board(tmp_path, AGX_ORIN_JP511)
    jetson = env.probe_jetson(board)
    assert jetson.found is True
    assert jetson.version == "35.3.1"
    assert jetson.info["jetpack"] == "5.1.1"
    assert jetson.info["jetpack_tensorrt"].startswith("8.5")
    assert "NVIDIA Jetson AGX Orin Developer Kit" in jetson.detail and "JetPack 5.1.1" in jetson.detail
    target = env.probe_target(board)
    assert target.found is True
    assert target.info["name"] == "agx-orin-64gb"
    assert "p3701-0005" in target.detail


def test_dla_without_tensorrt_quotes_the_detected_profile(monkeypatch, tmp_path):
    _missing(monkeypatch, "tensorrt")
    board = _recorded_board(tmp_path, AGX_ORIN_JP511)
    dla = env.probe_dla(board)
    assert dla.found is False
    assert dla.detail.startswith("unknown: needs TensorRT")
    assert "agx-orin-64gb profile says 2" in dla.detail


def test_this_machine_is_not_a_jetson():
    board = env.detect_board()
    if board[0] is not None and board[0].l4t:
        pytest.skip("running on a Jetson")
    jetson = env.probe_jetson(board)
    assert jetson.found is False and jetson.detail.startswith("not a Jetson")
    assert "JetPack" in jetson.hint


def test_target_detection_absent_is_handled(monkeypatch):
    monkeypatch.setitem(sys.modules, "jetforge.targets.detect", None)
    board = env.detect_board()
    assert board[0] is None and "target detection is not available" in board[1]
    target = env.probe_target(board)
    assert target.found is False and "jetforge targets list" in target.hint
    assert env.probe_jetson(board).detail.startswith("unknown: target detection is not available")


def test_gstreamer_line_parsing():
    yes = "  Video I/O:\n    FFMPEG:                      YES\n    GStreamer:                   YES (1.16.3)\n"
    no = "  Video I/O:\n    GStreamer:                   NO\n"
    assert env.gstreamer_from_build_info(yes) == (True, "YES (1.16.3)")
    assert env.gstreamer_from_build_info(no) == (False, "NO")
    assert env.gstreamer_from_build_info("nothing here") == (None, "")
