"""The onnx-free protobuf reader gives the planner the facts the ``onnx`` package gives, and refuses what it refuses.

The reference is the ``onnx`` package itself (``onnx.load`` + the field access the planner used before), on real
models built with ``onnx.helper`` covering what the reader must get right: dynamic axes by name and unknown,
initializers listed as graph inputs, sparse initializers, Q/DQ nodes, another domain's opset listed first,
external weights, every element type the planner names, and the committed action model.  Then the same facts are
read with ``import onnx`` failing (a JetPack install) and a Q/DQ model still plans as INT8 from its Q/DQ nodes.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from jetforge.errors import ModelError  # noqa: E402
from jetforge.runtime.onnx_file import read_onnx  # noqa: E402
from jetforge.runtime.onnx_wire import parse_model_bytes, read_graph_facts  # noqa: E402
from tests.fuzz.parser_fuzz import onnx_package_facts  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ACTION = ROOT / "src" / "jetforge" / "assets" / "shipped" / "action-mobilenet3d" / "model.onnx"
DTYPES = {1: "float32", 2: "uint8", 3: "int8", 6: "int32", 7: "int64", 9: "bool", 10: "float16", 11: "float64",
          16: "bfloat16"}


def reference(path):
    """The planner's facts as the onnx package gives them (the code read_model_info had before the wire reader)."""
    m = onnx.load(str(path), load_external_data=False)
    return onnx_package_facts(m, DTYPES)


def facts_tuple(path):
    f = read_graph_facts(path)
    return f.inputs, f.outputs, f.has_qdq, f.opset


def _save(model, path, **kwargs):
    model.ir_version = 8
    onnx.save(model, str(path), **kwargs)
    return path


def model_zoo(folder):
    """Real models, each exercising one part of the wire format."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    paths = {}
    conv = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    # dynamic axes: a name, an unknown dim (no value, no name), and a static one; the weight listed as an input too
    g = helper.make_graph([conv], "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, None, 16]),
                                          helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3, 3, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, None, 16])], [w])
    paths["dynamic"] = _save(helper.make_model(g, opset_imports=[helper.make_opsetid("com.microsoft", 1),
                                                                 helper.make_opsetid("", 13)]), folder / "dyn.onnx")
    # Q/DQ on the input, fp16 and int64 tensors, two outputs
    s = numpy_helper.from_array(np.asarray(0.02, np.float32), "s")
    nodes = [helper.make_node("QuantizeLinear", ["x", "s"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s"], ["d"]),
             helper.make_node("Conv", ["d", "w"], ["y"]), helper.make_node("Shape", ["y"], ["shape"]),
             helper.make_node("Cast", ["y"], ["half"], to=TensorProto.FLOAT16)]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("half", TensorProto.FLOAT16, [1, 4, 6, 6]),
                           helper.make_tensor_value_info("shape", TensorProto.INT64, [4])], [s, w])
    paths["qdq"] = _save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), folder / "qdq.onnx")
    # a sparse initializer and uint8/bool inputs
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.ones(2, np.float32), "sp"),
                                       numpy_helper.from_array(np.asarray([0, 3], np.int64), "sp_idx"), [4])
    g = helper.make_graph([helper.make_node("Cast", ["img"], ["f"], to=TensorProto.FLOAT),
                           helper.make_node("Add", ["f", "sp"], ["out"]),
                           helper.make_node("Not", ["flag"], ["nflag"])], "sparse",
                          [helper.make_tensor_value_info("img", TensorProto.UINT8, [4]),
                           helper.make_tensor_value_info("flag", TensorProto.BOOL, [1])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [4]),
                           helper.make_tensor_value_info("nflag", TensorProto.BOOL, [1])], sparse_initializer=[sparse])
    paths["sparse"] = _save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), folder / "sparse.onnx")
    # weights stored beside the model (external data): the reader never needs them
    big = numpy_helper.from_array(rng.standard_normal((64, 3, 3, 3)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"])], "ext",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 6, 6])], [big])
    paths["external"] = _save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), folder / "ext.onnx",
                              save_as_external_data=True, all_tensors_to_one_file=True, location="ext.bin",
                              size_threshold=0)
    paths["action"] = ACTION
    return paths


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    return model_zoo(tmp_path_factory.mktemp("zoo"))


@pytest.mark.parametrize("name", ["dynamic", "qdq", "sparse", "external", "action"])
def test_the_wire_reader_gives_what_the_onnx_package_gives(zoo, name):
    assert facts_tuple(zoo[name]) == reference(zoo[name])


def test_the_facts_read_are_the_ones_that_matter(zoo):
    inputs, outputs, has_qdq, opset = facts_tuple(zoo["dynamic"])
    assert inputs == [{"name": "x", "shape": ["N", 3, -1, 16], "dtype": "float32"}]  # the weight is not an input
    assert not has_qdq and opset == 13  # the default domain's, not com.microsoft's listed first
    inputs, outputs, has_qdq, _ = facts_tuple(zoo["qdq"])
    assert has_qdq and [o["dtype"] for o in outputs] == ["float16", "int64"]
    assert [i["name"] for i in facts_tuple(zoo["sparse"])[0]] == ["img", "flag"]


def test_every_truncation_of_a_real_model_is_refused_like_the_checked_reader_refuses_it(zoo, tmp_path):
    data = Path(zoo["qdq"]).read_bytes()
    for cut in range(1, len(data)):
        path = tmp_path / "cut.onnx"
        path.write_bytes(data[:cut])
        try:
            read_onnx(path, load_external_data=False)
            accepted = True
        except ModelError:
            accepted = False
        if accepted:  # protobuf accepted this prefix as a whole model: so must the wire reader, with the same facts
            assert facts_tuple(path) == reference(path), cut
        else:
            with pytest.raises(ModelError) as err:
                parse_model_bytes(data[:cut], "cut")
            assert "\n" not in err.value.one_line()


@pytest.mark.parametrize("data", [b"\x08", b"\x08" + b"\xff" * 11, b"\x3a\xff\xff\xff\xff\x0f", b"\x3b\x00",
                                  b"\x00\x01", bytes(range(256)) * 4, b"\x3a\x02\x0a\x00"])
def test_bytes_that_are_no_onnx_model_are_one_model_error(data):
    with pytest.raises(ModelError) as err:
        parse_model_bytes(data, "hostile.onnx")
    line = err.value.one_line()
    assert "hostile.onnx" in line and "\n" not in line


def test_without_the_onnx_package_a_qdq_model_still_plans_as_int8(zoo, monkeypatch):
    from jetforge.runtime.tensorrt.plan import BuildOptions, make_plan
    from jetforge.targets import get_target

    monkeypatch.setitem(sys.modules, "onnx", None)  # `import onnx` now raises ImportError, as on a JetPack install
    with pytest.raises(ImportError):
        import onnx as _  # noqa: F401
    assert facts_tuple(zoo["qdq"])[2] is True
    plan = make_plan(zoo["qdq"], get_target("orin-nx-16gb"), BuildOptions(precision="int8"))
    assert plan.int8_source == "qdq" and "INT8" in plan.flags and plan.inputs[0]["name"] == "x"
    plain = make_plan(zoo["dynamic"], get_target("orin-nx-16gb"), BuildOptions(precision="fp16",
                                                                              input_shapes={"x": [1, 3, 16, 16]}))
    assert plain.int8_source is None and plain.inputs[0]["shape"] == ["N", 3, -1, 16]


def _field(number, payload):
    """A length-delimited protobuf field (the bytes protobuf appends when a message sets it again)."""
    length, out = len(payload), bytearray()
    while True:
        byte, length = length & 0x7F, length >> 7
        out.append(byte | (0x80 if length else 0))
        if not length:
            break
    return bytes([number << 3 | 2]) + bytes(out) + payload


def test_fields_written_twice_are_read_as_protobuf_merges_them(zoo, tmp_path):
    """A crafted file may set a message twice: protobuf merges the two (repeated parts joined, scalars and oneofs
    last-wins); the wire reader took the last graph only and so refused or misread what the onnx package reads."""
    base = Path(zoo["qdq"]).read_bytes()
    extra = onnx.ModelProto()
    node = extra.graph.node.add()
    node.op_type, node.input[:], node.output[:] = "Relu", ["x"], ["r2"]
    extra.graph.output.add().CopyFrom(helper.make_tensor_value_info("r2", TensorProto.FLOAT, [1, 3, 8, 8]))
    # the graph field again, holding one more node and output: protobuf joins the two graphs
    cases = {"graph twice": base + extra.SerializeToString()}
    # an output's ValueInfo with its type field again (appended to the message's bytes): the two shapes' dims join
    model = onnx.ModelProto()
    model.ParseFromString(base)
    output = model.graph.output[0]
    raw_output = output.SerializeToString() + _field(2, output.type.SerializeToString())
    marker = helper.make_tensor_value_info("MARKER", TensorProto.FLOAT, None).SerializeToString()
    model.graph.output.add().ParseFromString(marker)
    data = model.SerializeToString()
    graph = model.graph.SerializeToString()
    patched_graph = graph.replace(_field(12, marker), _field(12, raw_output)).replace(_field(12, output.SerializeToString()), b"", 1)
    cases["an output's type twice"] = data.replace(_field(7, graph), _field(7, patched_graph))
    for name, data in cases.items():
        path = tmp_path / "twice.onnx"
        path.write_bytes(data)
        assert facts_tuple(path) == reference(path), name
