"""The TensorRT backend on real engines, compared with ONNX Runtime (marked tensorrt; DLA cases marked dla/jetson).

Builds FP32 and FP16 engines of the real MobileNetV2 ONNX with the documented TensorRT API,
runs them through ``open_session`` and compares with ONNX Runtime on real frames.  Skipped
with its reason where TensorRT is missing (JetPack's TensorRT cannot be installed in the
development workplace; run this on a Jetson or a desktop GPU with ``pip install tensorrt``).
"""

import numpy as np
import pytest

from jetforge.optional import is_available
from jetforge.runtime.tensorrt.library import installed_version
from tests.hardware.trt_build import build_test_engine as build_engine

HAVE_TENSORRT = installed_version() is not None
pytestmark = [pytest.mark.tensorrt, pytest.mark.gpu,
              pytest.mark.skipif(not HAVE_TENSORRT, reason="TensorRT is not installed"),
              pytest.mark.skipif(not is_available("cuda.bindings.runtime") and not is_available("cuda.cudart"),
                                 reason="cuda-python is not installed (pip install 'jetforge[cuda]')")]

FRAMES = (5, 30, 75, 140)


def _num_dla_cores():
    if not HAVE_TENSORRT:
        return 0
    from jetforge.runtime.tensorrt.library import load_tensorrt
    from jetforge.runtime.tensorrt.probe import dla_cores

    return dla_cores(load_tensorrt())


@pytest.fixture(scope="module")
def frames(mobilenet_onnx, bikes_frames):
    from jetforge.runtime.sidecar import read_sidecar

    return read_sidecar(mobilenet_onnx).preprocess.batch([bikes_frames[i] for i in FRAMES])


@pytest.fixture(scope="module")
def reference(mobilenet_onnx, frames):
    from jetforge.runtime.session import open_session

    with open_session(mobilenet_onnx, threads=2) as s:
        return s.infer({"input": frames})["logits"]


def _rel(a, b):
    return float(np.abs(a.astype(np.float64) - b).max() / np.abs(b).max())


@pytest.mark.parametrize("fp16,tol", [(False, 1e-3), (True, 3e-2)], ids=["fp32", "fp16"])
def test_engine_matches_onnxruntime_with_cuda_graph(mobilenet_onnx, frames, reference, tmp_path, fp16, tol):
    from jetforge.runtime.session import open_session

    engine = build_engine(mobilenet_onnx, tmp_path / "m.engine", fp16)
    with open_session(engine) as s:
        assert s.backend == "tensorrt" and [t.name for t in s.inputs] == ["input"]
        out = s.infer({"input": frames})["logits"]
        assert _rel(out, reference) <= tol and list(out.argmax(1)) == list(reference.argmax(1))
        assert s.info()["cuda_graph"] == "on" and s.info()["cuda_graph_captures"] == 1
        replay = s.infer({"input": frames})["logits"]  # graph launch
        assert _rel(replay, out) <= 1e-6 and s.info()["cuda_graph_captures"] == 1
        one = s.infer({"input": frames[:1]})["logits"]  # shape change: re-capture
        assert s.info()["cuda_graph_captures"] == 2 and _rel(one[0], reference[0]) <= tol
        s.set_timing(True)
        s.infer({"input": frames})
        timing = s.last_timing()
        assert set(timing) == {"h2d_ms", "compute_ms", "d2h_ms"} and timing["compute_ms"] > 0
        request = s.submit({"input": frames})
        assert _rel(s.wait(request)["logits"], out) <= 1e-6


def test_engine_without_cuda_graph(mobilenet_onnx, frames, reference, tmp_path):
    from jetforge.runtime.session import open_session

    engine = build_engine(mobilenet_onnx, tmp_path / "m.engine", False)
    with open_session(engine, cuda_graph=False) as s:
        out = s.infer({"input": frames})["logits"]
        assert s.info()["cuda_graph"] == "off" and _rel(out, reference) <= 1e-3


def test_shape_outside_profile_is_refused(mobilenet_onnx, frames, tmp_path):
    from jetforge.errors import ModelError
    from jetforge.runtime.session import open_session

    engine = build_engine(mobilenet_onnx, tmp_path / "m.engine", False, max_batch=2)
    with open_session(engine) as s:
        with pytest.raises(ModelError, match="optimization profile"):
            s.infer({"input": np.concatenate([frames, frames])})


@pytest.mark.dla
@pytest.mark.jetson
@pytest.mark.skipif(_num_dla_cores() == 0, reason="no DLA core (TensorRT is missing, or it reports 0 DLA cores)")
@pytest.mark.parametrize("core", [0, 1])
def test_dla_engine_runs_on_the_chosen_core(mobilenet_onnx, frames, reference, tmp_path, core):
    from jetforge.runtime.session import open_session
    from jetforge.runtime.tensorrt.library import installed_version
    from jetforge.runtime.tensorrt.version import major_of

    if core >= _num_dla_cores():
        pytest.skip("this board has %d DLA core(s)" % _num_dla_cores())
    engine = build_engine(mobilenet_onnx, tmp_path / "m_dla.engine", True, max_batch=4, dla_core=0)
    with open_session(engine, dla_core=core) as s:
        out = s.infer({"input": frames})["logits"]
        info = s.info()
        assert info["device"] == "dla" and info["dla_core"] == core
        if major_of(installed_version()) < 10:
            assert info["cuda_graph"].startswith("fallback: DLA engines cannot be captured")
        else:  # captured, or fell back with the reason CUDA gave
            assert info["cuda_graph"] == "on" or info["cuda_graph"].startswith("fallback: ")
        assert _rel(out, reference) <= 5e-2
        assert (out.argmax(1) == reference.argmax(1)).mean() >= 0.75
