"""Real engine builds with JetPack's TensorRT on a Jetson: GPU FP16, DLA FP16 with fallback, DLA INT8 from a cache.

Run on the board (``pytest -m "tensorrt and jetson" tests/hardware``). Everywhere else these skip:
JetPack's TensorRT cannot be installed in the development workplace. The placement the engine inspector
reports is compared with ``jetforge dla-check``'s prediction for the same model.  TensorRT is reached
through the TensorRT package only (``load_tensorrt``), as everywhere in jetforge.
"""

import struct

import numpy as np
import pytest

pytestmark = [pytest.mark.tensorrt, pytest.mark.jetson]

from jetforge.errors import DependencyError  # noqa: E402
from jetforge.runtime.tensorrt.library import load_tensorrt, version_string  # noqa: E402

try:
    trt = load_tensorrt()  # JetPack: python3-libnvinfer
except (DependencyError, ImportError):  # pragma: no cover - the normal case off the board
    pytest.skip("TensorRT not installed", allow_module_level=True)

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from jetforge.runtime.tensorrt.builder import build_engine  # noqa: E402
from jetforge.runtime.tensorrt.dla.analyze import analyze_onnx  # noqa: E402
from jetforge.runtime.tensorrt.engine_sidecar import read_engine_sidecar  # noqa: E402
from jetforge.runtime.tensorrt.plan import BuildOptions, make_plan  # noqa: E402
from jetforge.runtime.tensorrt.probe import dla_cores  # noqa: E402
from jetforge.runtime.tensorrt.version import TensorRTVersion  # noqa: E402
from jetforge.targets import detect_target  # noqa: E402


@pytest.fixture(scope="module")
def target():
    found = detect_target()
    if found is None or found.kind != "jetson":
        pytest.skip("not running on a Jetson with a known profile")
    return found


@pytest.fixture(scope="module")
def dla_target(target):
    if not target.has_dla or dla_cores(trt) < 1:
        pytest.skip("this Jetson has no DLA core")
    return target


def _model(path, hardswish=False):
    """conv-relu-conv(-HardSwish)-conv: DLA-capable except the optional HardSwish (predicted GPU)."""
    rng = np.random.default_rng(0)
    w = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.1, "w%d" % i)
         for i, s in enumerate([(16, 3, 3, 3), (16, 16, 3, 3), (16, 16, 1, 1)])]
    nodes = [helper.make_node("Conv", ["input", "w0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", "w1"], ["c1"], pads=[1, 1, 1, 1])]
    last = "c1"
    if hardswish:
        nodes.append(helper.make_node("HardSwish", ["c1"], ["h1"]))
        last = "h1"
    nodes.append(helper.make_node("Conv", [last, "w2"], ["output"]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 64, 64])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 16, 64, 64])], w)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path, [n for node in nodes for n in node.output] + ["input"]


def _cache(path, tensors, scale=0.05):
    header = "TRT-%d-EntropyCalibration2" % TensorRTVersion.of_module(trt).cache_header_number()
    lines = [header] + ["%s: %s" % (t, struct.pack(">f", scale).hex()) for t in tensors]
    path.write_text("\n".join(lines) + "\n")
    return path


def _options(**kw):
    return BuildOptions(tensorrt_version=version_string(trt), **kw)


def test_fp16_gpu_engine(tmp_path, target):
    onnx_path, _ = _model(tmp_path / "m.onnx")
    plan = make_plan(onnx_path, target, _options(precision="fp16"))
    result = build_engine(plan, tmp_path / "m.engine")
    assert result.engine_bytes > 0 and (tmp_path / "m.engine").stat().st_size == result.engine_bytes
    inspector = result.report["inspector"]
    assert inspector["available"] and inspector["summary"]["dla"] == 0 and inspector["summary"]["gpu"] >= 1
    assert any("FP16" in p or "Half" in p for l in inspector["layers"] for p in l["precisions"])
    sidecar = read_engine_sidecar(tmp_path / "m.engine", tensorrt_version=version_string(trt))
    assert sidecar.device == "gpu" and sidecar.outputs[0].shape == [1, 16, 64, 64]


@pytest.mark.dla
def test_fp16_dla_with_gpu_fallback_matches_the_prediction(tmp_path, dla_target):
    onnx_path, _ = _model(tmp_path / "hs.onnx", hardswish=True)
    predicted = analyze_onnx(onnx_path, dla_target, tensorrt_version=version_string(trt))
    assert [l.onnx_op for l in predicted.gpu_layers] == ["HardSwish"]
    plan = make_plan(onnx_path, dla_target, _options(precision="fp16", dla_core=0))
    result = build_engine(plan, tmp_path / "hs.engine")
    audit = result.report["dla_audit"]
    assert audit is not None and len(audit["cannot_run_on_dla"]) >= 1   # TensorRT's own can_run_on_DLA
    summary = result.report["inspector"]["summary"]
    assert summary["dla"] >= 1, result.report["inspector"]["layers"]
    assert summary["gpu"] >= 1                                           # the HardSwish fell back


@pytest.mark.dla
def test_int8_dla_from_a_cache(tmp_path, dla_target):
    onnx_path, tensors = _model(tmp_path / "q.onnx")
    cache = _cache(tmp_path / "q.calib", tensors)
    plan = make_plan(onnx_path, dla_target, _options(precision="int8", dla_core=0, calibration_cache=str(cache)))
    assert plan.int8_source == "cache"
    result = build_engine(plan, tmp_path / "q.engine")
    assert not any("did not accept the cache" in n for n in result.notes)   # get_batch never called
    inspector = result.report["inspector"]
    assert inspector["summary"]["dla"] >= 1
    assert any("Int8" in p or "INT8" in p for l in inspector["layers"] for p in l["precisions"])
    sidecar = read_engine_sidecar(tmp_path / "q.engine")
    assert sidecar.dla_core == 0 and sidecar.int8_source == "cache"


@pytest.mark.dla
def test_dla_without_fallback_refuses_an_unsupported_layer(tmp_path, dla_target):
    from jetforge.errors import EngineBuildError

    onnx_path, _ = _model(tmp_path / "hs.onnx", hardswish=True)
    plan = make_plan(onnx_path, dla_target, _options(precision="fp16", dla_core=0, gpu_fallback=False))
    with pytest.raises(EngineBuildError) as err:
        build_engine(plan, tmp_path / "hs.engine")
    assert "cannot run on DLA" in err.value.message
