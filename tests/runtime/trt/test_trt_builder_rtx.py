"""The builder layer on TensorRT-RTX: the shared path (ONNX parser, profiles, serialization, inspection).

TensorRT-RTX builds engines on the CPU; deserializing them (which the engine inspector needs) needs a
CUDA device the engine supports, so here the report records why inspection was impossible, and the
inspector parser is checked on JSON in the documented ``get_engine_information`` layout.
JetPack-only calls (precision flags, calibrator, DLA) are skipped with a note: asserted below.
"""

import json
import struct

import numpy as np
import pytest

trt = pytest.importorskip("tensorrt_rtx", reason="tensorrt_rtx is not installed (pip install tensorrt-rtx-cu13)")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from jetforge.errors import EngineBuildError  # noqa: E402
from jetforge.runtime.tensorrt.plan import BuildOptions, ShapeRange, make_plan  # noqa: E402
from jetforge.runtime.tensorrt.engine_sidecar import read_engine_sidecar  # noqa: E402
from jetforge.runtime.tensorrt import compat  # noqa: E402
from jetforge.runtime.tensorrt.builder import build_engine, parse_inspector_json  # noqa: E402
from jetforge.targets import get_target  # noqa: E402

ORIN = "agx-orin-64gb"


def _cnn(path, batch):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal((8,)).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.standard_normal((10, 8)).astype(np.float32), "fc")]
    nodes = [helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("GlobalAveragePool", ["r1"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fc"], ["logits"], transB=1)]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                           [batch, 3, 32, 32])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_compat_sees_tensorrt_rtx():
    assert compat.is_rtx(trt)
    assert not compat.has_precision_flags(trt) and not compat.supports_dla(trt) and not compat.has_calibrator(trt)
    assert compat.network_flags(trt) == 0
    assert compat.memory_pool(trt, "workspace") == trt.MemoryPoolType.WORKSPACE


def test_static_shape_engine(tmp_path):
    onnx_path = _cnn(tmp_path / "cnn.onnx", 1)
    plan = make_plan(onnx_path, get_target(ORIN), BuildOptions(precision="fp16", workspace_mib=64))
    engine = tmp_path / "cnn.engine"
    result = build_engine(plan, engine, trt=trt)
    data = engine.read_bytes()
    assert result.engine_bytes == len(data) > 1000
    report = json.loads((tmp_path / "cnn.engine.report.json").read_text())
    assert report["backend"] == "tensorrt_rtx" and report["network"]["layers"] >= 4
    assert report["network"]["inputs"] == [{"name": "input", "shape": [1, 3, 32, 32], "dtype": "float32"}]
    assert "workspace=%d" % (64 << 20) in report["applied"]
    assert any("builder flags skipped" in n and "FP16" in n for n in report["notes"])
    inspector = report["inspector"]
    if inspector["available"]:  # on a machine whose GPU runs TensorRT-RTX engines
        assert inspector["summary"]["layers"] >= 1
    else:
        assert "deserialized" in inspector["reason"]
    sidecar = read_engine_sidecar(engine)
    assert sidecar.backend == "tensorrt_rtx" and sidecar.inputs[0].name == "input"
    assert sidecar.source_onnx["sha256"] == plan.onnx_sha256 and sidecar.tensorrt_version == trt.__version__


def test_dynamic_profile_engine(tmp_path):
    onnx_path = _cnn(tmp_path / "dyn.onnx", "batch")
    plan = make_plan(onnx_path, get_target(ORIN), BuildOptions(
        profiles=[{"input": ShapeRange([1, 3, 32, 32], [4, 3, 32, 32], [8, 3, 32, 32])}],
        timing_cache=str(tmp_path / "timing.cache")))
    result = build_engine(plan, tmp_path / "dyn.engine", trt=trt)
    assert result.engine_bytes > 1000
    assert "profiles(1)" in result.report["applied"]
    assert result.report["network"]["inputs"][0]["shape"] == [-1, 3, 32, 32]
    # TensorRT-RTX deprecated timing caches (no-ops): skipped with a note, applied on JetPack TensorRT
    assert any("timing cache skipped" in n for n in result.notes)


def test_profile_missing_for_a_dynamic_input_is_refused_on_the_parsed_network(tmp_path):
    onnx_path = _cnn(tmp_path / "dyn.onnx", "batch")
    plan = make_plan(onnx_path, get_target(ORIN), BuildOptions(input_shapes={"input": [2, 3, 32, 32]}))
    plan.profiles = []
    with pytest.raises(EngineBuildError) as err:
        build_engine(plan, None, trt=trt, inspect=False)
    assert "--shape input=" in err.value.one_line()


def test_jetpack_only_parts_are_skipped_with_notes(tmp_path):
    onnx_path = _cnn(tmp_path / "cnn.onnx", 1)
    cache = tmp_path / "cnn.calib"
    cache.write_text("TRT-100300-EntropyCalibration2\ninput: %s\n" % struct.pack(">f", 1 / 127.0).hex())
    plan = make_plan(onnx_path, get_target(ORIN), BuildOptions(
        precision="int8", dla_core=0, calibration_cache=str(cache), dla_sram_bytes=1 << 19))
    result = build_engine(plan, None, trt=trt, inspect=False)
    notes = " | ".join(result.notes)
    assert "INT8 calibrator skipped" in notes
    assert "DLA settings skipped" in notes
    assert "memory pool dla_managed_sram skipped" in notes
    assert result.engine_bytes > 1000 and result.engine_path is None


def test_parse_errors_are_engine_build_errors(tmp_path):
    # an operator of a custom domain (a plugin the builder lacks): jetforge's model checks leave those to the
    # parser; an unknown operator of the ONNX domain is refused before planning (tests/runtime/test_onnx_checks.py)
    bad = tmp_path / "bad.onnx"
    graph = helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["y"], domain="example.plugins")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("example.plugins", 1)])
    model.ir_version = 8
    onnx.save(model, str(bad))
    plan = make_plan(bad, get_target(ORIN), BuildOptions())
    with pytest.raises(EngineBuildError) as err:
        build_engine(plan, None, trt=trt, inspect=False)
    assert "could not parse" in err.value.message


def test_inspector_json_layout():
    # the documented layout of get_engine_information(LayerInformationFormat.JSON) with DETAILED verbosity
    text = json.dumps({"Layers": [
        {"Name": "Reformatting CopyNode for Input Tensor 0 to conv1", "LayerType": "Reformat",
         "Inputs": [{"Name": "input", "Location": "Device", "Dimensions": [1, 3, 224, 224],
                     "Format/Datatype": "Row major linear FP32"}],
         "Outputs": [{"Name": "input_fp16", "Location": "Device", "Dimensions": [1, 3, 224, 224],
                      "Format/Datatype": "Channel major FP16 format where channel % 16 == 0"}]},
        {"Name": "{ForeignNode[conv1...relu5]}", "LayerType": "DLA", "Inputs": [], "Outputs": [
            {"Name": "r5", "Format/Datatype": "Channel major FP16 format where channel % 16 == 0"}],
         "TacticName": "DLA"},
        {"Name": "gap", "LayerType": "Reduce", "Outputs": [{"Name": "g", "Format/Datatype": "Row major linear FP16"}]},
    ], "Bindings": ["input", "logits"]})
    parsed = parse_inspector_json(text)
    assert [l["device"] for l in parsed["layers"]] == ["GPU", "DLA", "GPU"]
    assert parsed["summary"] == {"layers": 3, "dla": 1, "gpu": 2}
    assert parsed["layers"][0]["precisions"] == ["Channel major FP16 format where channel % 16 == 0",
                                                 "Row major linear FP32"]
    names_only = parse_inspector_json(json.dumps({"Layers": ["conv1", "relu1"], "Bindings": []}))
    assert names_only["summary"]["layers"] == 2
