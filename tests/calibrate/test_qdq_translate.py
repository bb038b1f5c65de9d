"""QAT -> DLA translation: Q/DQ ONNX -> plain ONNX + TensorRT cache + FP16 layer list (no torch here).

The Q/DQ models are built from a real float graph (conv, ReLU, residual add, pooling, Gemm) with
jetforge's own ``insert_qdq`` and with hand-made variants that must be refused.
"""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from jetforge.calibrate.cache.format import CalibrationCache, scale_to_hex  # noqa: E402
from jetforge.calibrate.qdq.export import insert_qdq  # noqa: E402
from jetforge.calibrate.qdq.translate import tensor_names, translate_file, translate_qdq  # noqa: E402
from jetforge.errors import CalibrationError  # noqa: E402


def float_model():
    """input -> Conv -> Relu -> Conv -> Add(residual) -> Relu -> GAP -> Flatten -> Gemm -> logits."""
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((8, 1, 3, 3)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((8, 8, 3, 3)) * 0.1).astype(np.float32)
    fc = (rng.standard_normal((10, 8)) * 0.3).astype(np.float32)
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(np.zeros(8, np.float32), "b1"),
             numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(fc, "fc_w"),
             numpy_helper.from_array(np.zeros(10, np.float32), "fc_b")]
    nodes = [
        helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"], name="gap"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
    ]
    g = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [None, 1, 12, 12])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [None, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    return m


AMAX = {"input": 2.5, "r1": 1.7, "c2": 0.9, "f": 0.6}


def run(model, x):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"input": x})[0]


@pytest.fixture(scope="module")
def qdq_model():
    return insert_qdq(float_model(), AMAX)


def test_translation_gives_the_trained_scales_bit_exact(qdq_model, tmp_path):
    res = translate_qdq(qdq_model, trt_version="10.3")
    assert dict(res.trained) == {k: pytest.approx(np.float32(v / 127.0), rel=0, abs=0) for k, v in AMAX.items()}
    text = res.cache.to_text()
    parsed = CalibrationCache.from_text(text)
    assert parsed.header == "TRT-100300-EntropyCalibration2"
    for name, amax in AMAX.items():  # scale == amax/127 as float32, written as its big-endian hex
        assert parsed.scales[name] == float(np.float32(amax) / np.float32(127.0))
        assert "%s: %s" % (name, scale_to_hex(np.float32(amax) / np.float32(127.0))) in text
    plain = res.plain
    assert not [n for n in plain.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    validation = parsed.validate_against(tensor_names(plain))
    assert validation.ok and not validation.not_in_model
    # the ReLU-activated conv output takes the ReLU output's scale (TensorRT fuses them)
    assert res.inferred["c1"][0] == res.trained["r1"]
    assert "conv1" in res.int8_layers and "relu1" in res.int8_layers and "conv2" in res.int8_layers
    # the add's output feeds only ReLU -> GlobalAveragePool, which no quantizer follows: no range, FP16;
    # likewise the logits of the last Gemm
    assert "s" not in res.cache.scales and "add" in res.fp16_layers and "fc" in res.fp16_layers
    assert not res.weight_scale_mismatch


def test_plain_model_computes_the_float_model(qdq_model):
    x = np.random.default_rng(1).standard_normal((4, 1, 12, 12)).astype(np.float32)
    plain = translate_qdq(qdq_model).plain
    np.testing.assert_allclose(run(plain, x), run(float_model(), x), rtol=1e-6, atol=1e-6)


def test_files_and_trtexec_arguments(qdq_model, tmp_path):
    src = tmp_path / "net.qdq.onnx"
    onnx.save(qdq_model, str(src))
    res, paths = translate_file(src, tmp_path / "dla", trt_version="8.6.2")
    assert {p.name for p in paths.values()} == {"net.plain.onnx", "net.calib", "net.fp16_layers.txt", "net.dla.json"}
    cache = CalibrationCache.read(paths["cache"])
    assert cache.header == "TRT-8602-EntropyCalibration2" and len(cache) == len(res.cache)
    assert paths["fp16_layers"].read_text().split() == res.fp16_layers
    report = __import__("json").loads(paths["report"].read_text())
    assert "--layerPrecisions=" + ",".join("%s:fp16" % n for n in res.fp16_layers) in report["trtexec"]
    assert "--calib=net.calib" in report["trtexec"]


def test_tensorrt_parses_and_builds_the_plain_model(qdq_model, tmp_path):
    pytest.importorskip("tensorrt_rtx", reason="TensorRT-RTX (pip install tensorrt-rtx-cu13) is not installed")
    from jetforge.runtime.tensorrt.onnx_check import check_onnx_builds

    src = tmp_path / "net.qdq.onnx"
    onnx.save(qdq_model, str(src))
    _, paths = translate_file(src, tmp_path)
    build = check_onnx_builds(str(paths["plain_onnx"]))
    assert build.num_layers > 0 and build.serialized_bytes > 0


def _edit_first(model, op, fn):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    node = next(n for n in m.graph.node if n.op_type == op and n.input[0] == "r1")
    fn(m, node)
    return m


def test_weight_scales_other_than_max_abs_are_reported(qdq_model):
    m = onnx.ModelProto()
    m.CopyFrom(qdq_model)
    q = next(n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0].endswith("_weight"))
    init = next(i for i in m.graph.initializer if i.name == q.input[1])
    init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(1.5), init.name))
    assert translate_qdq(m).weight_scale_mismatch == [q.input[0]]


def test_int8_weights_behind_a_lone_dequantize_are_dequantized():
    w = np.arange(-4, 4, dtype=np.int8).reshape(2, 4)
    s = np.array([0.5, 0.25], np.float32)
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["wd"], axis=0),
             helper.make_node("Gemm", ["xd", "wd"], ["y"], name="fc", transB=1)]
    inits = [numpy_helper.from_array(np.array(0.1, np.float32), "sx"), numpy_helper.from_array(np.array(0, np.int8), "zx"),
             numpy_helper.from_array(w, "wq"), numpy_helper.from_array(s, "sw"),
             numpy_helper.from_array(np.zeros(2, np.int8), "zw")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])], inits)
    res = translate_qdq(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    wf = next(numpy_helper.to_array(i) for i in res.plain.graph.initializer if i.name.endswith("_float"))
    np.testing.assert_array_equal(wf, w.astype(np.float32) * s[:, None])
    assert res.trained == {"x": pytest.approx(np.float32(0.1), abs=0)}


@pytest.mark.parametrize("change, message", [
    ("zero_point", "non-zero zero point"),
    ("per_channel", "per channel"),
    ("no_qdq", "no activation QuantizeLinear"),
])
def test_models_that_cannot_be_translated_give_clear_errors(qdq_model, change, message):
    m = onnx.ModelProto()
    m.CopyFrom(qdq_model if change != "no_qdq" else float_model())
    if change in ("zero_point", "per_channel"):
        q = next(n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "r1")
        if change == "zero_point":
            zp = next(i for i in m.graph.initializer if i.name == q.input[2])
            zp.CopyFrom(numpy_helper.from_array(np.array(3, np.int8), zp.name))
        else:
            sc = next(i for i in m.graph.initializer if i.name == q.input[1])
            sc.CopyFrom(numpy_helper.from_array(np.full(8, 0.01, np.float32), sc.name))
    with pytest.raises(CalibrationError, match=message):
        translate_qdq(m)
