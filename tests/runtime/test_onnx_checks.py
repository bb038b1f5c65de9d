"""ONNX models from others are checked in one place (runtime/onnx_checks.py) before any command uses them.

Each hostile model below was bundled by ``bundle create`` (exit 0), estimated by ``estimate`` (a batch-0 model at
~280,000 inferences/s) or crashed a command (exit 2).  Now each is one line, exit 1, nothing written, and the
``onnx`` package's reader and the onnx-free wire reader (the board's) refuse it with the same words, because both
judge the same view of the file.  Real models (the committed action model, Q/DQ, external data, typed and raw
weights) still pass.
"""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from jetforge.cli.main import main  # noqa: E402
from jetforge.errors import ModelError  # noqa: E402
from jetforge.runtime.onnx_checks import MAX_IR_VERSION, MAX_OPSET, ONNX_OPERATORS  # noqa: E402
from jetforge.runtime.onnx_file import read_onnx  # noqa: E402
from jetforge.runtime.onnx_wire import parse_model_bytes  # noqa: E402
from jetforge.runtime.sidecar import ModelSidecar, TensorSpec, write_sidecar  # noqa: E402

X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])


def _model(nodes, inputs=(X,), outputs=(Y,), inits=(), opset=13, ir=8):
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir
    return model


def _no_data(name, dims, data_type=TensorProto.FLOAT):
    t = TensorProto()
    t.name, t.data_type = name, data_type
    t.dims.extend(dims)
    return t


def _hostile():
    """name -> (model, words of the refusal)."""
    relu = helper.make_node("Relu", ["x"], ["y"], name="r")
    w = numpy_helper.from_array(np.ones((1, 3, 8, 8), np.float32), "w")
    w2 = numpy_helper.from_array(np.zeros((1, 3, 8, 8), np.float32), "w")
    cut = numpy_helper.from_array(np.ones((1, 3, 8, 8), np.float32), "w")
    cut.raw_data = cut.raw_data[:100]  # 25 of 192 values
    conv_w = numpy_helper.from_array(np.ones((3, 3, 3, 3), np.float32), "wc")
    huge_const = helper.make_node("Constant", [], ["c"], value=_no_data("v", [1 << 20, 1 << 20]))
    return {
        "opset 1": (_model([relu], opset=1), "opset 1"),
        "opset 99": (_model([relu], opset=99), "opset 99"),
        "IR 99": (_model([relu], ir=99), "IR version is 99"),
        "unknown op": (_model([helper.make_node("FooBar", ["x"], ["y"], name="foo")]), "'foo' (FooBar) uses an operator"),
        "string input": (_model([helper.make_node("Identity", ["x"], ["y"])],
                                inputs=[helper.make_tensor_value_info("x", TensorProto.STRING, [1, 3, 8, 8])]),
                         "is a string tensor"),
        "cycle": (_model([helper.make_node("Relu", ["b"], ["a"], name="n1"), helper.make_node("Relu", ["a"], ["b"],
                                                                                              name="n2"),
                          helper.make_node("Add", ["x", "a"], ["y"], name="n3")]), "cycle"),
        "self-loop": (_model([helper.make_node("Add", ["x", "y"], ["y"], name="loop")]), "reads its own output"),
        "written twice": (_model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Sigmoid", ["x"], ["y"])]),
                          "written twice"),
        "duplicate initializer": (_model([helper.make_node("Add", ["x", "w"], ["y"])], inits=[w, w2]),
                                  "defined twice"),
        "overwritten input": (_model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Relu", ["y"], ["x"])]),
                              "already a graph input"),
        "huge initializer without data": (_model([helper.make_node("Add", ["x", "w"], ["y"])],
                                                 inits=[_no_data("w", [1 << 20, 1 << 20, 3, 8])]),
                                          "declares dims [1048576, 1048576, 3, 8]"),
        "raw data cut short": (_model([helper.make_node("Add", ["x", "w"], ["y"])], inits=[cut]), "but stores 25"),
        "huge Constant without data": (_model([huge_const, helper.make_node("Relu", ["x"], ["y"])]),
                                       "tensor of node"),
        "rank-1 input into Conv": (_model([helper.make_node("Conv", ["x", "wc"], ["y"])],
                                          inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
                                          outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                                          inits=[conv_w]), "of rank 1"),
        "batch 0": (_model([relu], inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [0, 3, 8, 8])],
                           outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, [0, 3, 8, 8])]),
                    "axis 0 of size 0"),
    }


HOSTILE = _hostile()


def _save(model, path):
    path.write_bytes(model.SerializeToString())
    write_sidecar(path, ModelSidecar(task="classify", model_name=path.stem, inputs=[TensorSpec("x", [1, 3, 8, 8])],
                                     outputs=[TensorSpec("y", [1, 3, 8, 8])]))
    return path


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_both_onnx_readers_refuse_a_hostile_model_in_the_same_words(tmp_path, name):
    model, words = HOSTILE[name]
    path = _save(model, tmp_path / "m.onnx")
    with pytest.raises(ModelError) as by_onnx:
        read_onnx(path)
    with pytest.raises(ModelError) as by_wire:
        parse_model_bytes(path.read_bytes(), "ONNX model %s" % path)
    assert words in by_onnx.value.one_line() and "\n" not in by_onnx.value.one_line()
    assert by_wire.value.one_line() == by_onnx.value.one_line()


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_bundle_create_refuses_a_hostile_model_in_one_line_and_writes_nothing(tmp_path, capsys, name):
    model, words = HOSTILE[name]
    path = _save(model, tmp_path / "m.onnx")
    code = main(["bundle", "create", str(path), "--target", "orin-nx-16gb", "--out", str(tmp_path / "b")])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("jetforge:")]
    assert code == 1 and len(lines) == 1 and words in lines[0], err
    assert not (tmp_path / "b").exists()


def test_estimate_refuses_a_batch_0_model_instead_of_estimating_it(tmp_path, capsys):
    path = _save(HOSTILE["batch 0"][0], tmp_path / "batch0.onnx")
    code = main(["estimate", str(path), "--target", "orin-nx-16gb"])
    captured = capsys.readouterr()
    assert code == 1 and "axis 0 of size 0" in captured.err and "throughput" not in captured.out


def test_real_models_pass_the_checks(tmp_path):
    from pathlib import Path

    action = Path(__file__).resolve().parents[2] / "src" / "jetforge" / "assets" / "shipped" / "action-mobilenet3d" / "model.onnx"
    assert read_onnx(action).graph.node
    parse_model_bytes(action.read_bytes(), "action")
    # typed (not raw) weights, a Constant holding its data, int64 packed values, a Q/DQ pair, external data
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 3, 3], np.ones(108, np.float32).tolist())
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [1, -1])
    scale = numpy_helper.from_array(np.asarray(0.02, np.float32), "s")
    nodes = [helper.make_node("QuantizeLinear", ["x", "s"], ["q"]), helper.make_node("DequantizeLinear", ["q", "s"],
                                                                                      ["d"]),
             helper.make_node("Conv", ["d", "w"], ["c"]), helper.make_node("Reshape", ["c", "shape"], ["r"]),
             helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.full(144, 2, np.float32))),
             helper.make_node("Mul", ["r", "k"], ["y"])]
    model = _model(nodes, outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 144])],
                   inits=[w, shape, scale], opset=17)
    path = tmp_path / "typed.onnx"
    onnx.save(model, str(path))
    read_onnx(path)
    parse_model_bytes(path.read_bytes(), "typed")
    external = tmp_path / "ext.onnx"
    onnx.save(model, str(external), save_as_external_data=True, location="ext.bin", size_threshold=0)
    read_onnx(external)
    read_onnx(external, load_external_data=False)
    parse_model_bytes(external.read_bytes(), "external")


def test_the_operator_list_is_the_onnx_releases_own():
    """ONNX_OPERATORS is every ONNX-domain operator the onnx package knows (regenerate it when onnx moves on)."""
    known = {s.name for s in onnx.defs.get_all_schemas_with_history() if s.domain in ("", "ai.onnx")}
    assert ONNX_OPERATORS <= known  # nothing invented
    newest = {s.name for s in onnx.defs.get_all_schemas_with_history()
              if s.domain in ("", "ai.onnx") and s.since_version <= MAX_OPSET}
    assert newest <= ONNX_OPERATORS
    assert MAX_OPSET <= onnx.defs.onnx_opset_version() and MAX_IR_VERSION <= onnx.IR_VERSION
