"""check_onnx_builds with a real TensorRT ONNX parser and builder (TensorRT-RTX builds on the CPU)."""

import numpy as np
import pytest

from jetforge.errors import ModelError
from jetforge.optional import is_available

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

pytestmark = pytest.mark.skipif(not is_available("tensorrt_rtx") and not is_available("tensorrt"),
                                reason="neither TensorRT-RTX nor TensorRT is installed")


def _conv_model(path, zero_point=0, dynamic=True, extra_node=None):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.zeros(4, np.float32), "b"),
             numpy_helper.from_array(np.array(0.02, np.float32), "s"),
             numpy_helper.from_array(np.array(zero_point, np.int8), "zp")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"], name="quant_x"),
             helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["xd"], name="dequant_x"),
             helper.make_node("Conv", ["xd", "w", "b"], ["y"], name="conv1", pads=[1, 1, 1, 1])]
    out = "y"
    if extra_node is not None:
        nodes.append(extra_node)
        out = extra_node.output[0]
    batch = "N" if dynamic else 1
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 16, 16])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_valid_qdq_model_builds(tmp_path):
    from jetforge.runtime.tensorrt import check_onnx_builds

    result = check_onnx_builds(_conv_model(tmp_path / "ok.onnx"), prefer="tensorrt_rtx")
    assert result.serialized_bytes > 1000 and result.num_layers >= 3
    assert result.inputs == {"x": (1, 3, 16, 16)} and result.outputs == ["y"]
    d = result.to_dict()
    assert d["library"] in ("TensorRT-RTX", "TensorRT") and d["version"]
    # an explicit shape for the dynamic axis is honoured
    result = check_onnx_builds(tmp_path / "ok.onnx", prefer="tensorrt_rtx", input_shapes={"x": (2, 3, 16, 16)},
                               build=False)
    assert result.inputs == {"x": (2, 3, 16, 16)} and result.serialized_bytes == 0


def test_parser_error_names_node_op_and_reason(tmp_path):
    from jetforge.runtime.tensorrt import check_onnx_builds

    path = _conv_model(tmp_path / "asym.onnx", zero_point=3)
    with pytest.raises(ModelError) as info:
        check_onnx_builds(path, prefer="tensorrt_rtx")
    msg = str(info.value)
    assert "cannot parse asym.onnx" in msg and "'quant_x' (QuantizeLinear)" in msg and "zero point" in msg.lower()
    assert "\n" not in msg


def test_unknown_op_is_reported(tmp_path):
    from jetforge.runtime.tensorrt import check_onnx_builds

    node = helper.make_node("NoSuchOp", ["y"], ["z"], name="mystery", domain="")
    path = tmp_path / "unknown.onnx"
    _conv_model(path, extra_node=node)
    with pytest.raises(ModelError, match="'mystery' \\(NoSuchOp\\)"):
        check_onnx_builds(path, prefer="tensorrt_rtx")


def test_missing_file(tmp_path):
    from jetforge.errors import InputFileError
    from jetforge.runtime.tensorrt import check_onnx_builds

    with pytest.raises(InputFileError):
        check_onnx_builds(tmp_path / "nope.onnx")
