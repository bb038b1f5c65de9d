"""The GraphDef wire-format reader against independently encoded messages, hostile bytes and the real frozen graph.

Independent encodings come from two places: Google's ``protobuf`` runtime (installed with ``onnx``),
given a schema with TensorFlow's field numbers built here from a ``FileDescriptorProto``, and bytes
written by hand in this file from the wire-format rules (a tag is ``field << 3 | wire type``; wire
type 0 = varint, 1 = 8 bytes, 2 = length-delimited, 5 = 4 bytes; varints are little-endian base 128).
"""

import random
import struct

import numpy as np
import pytest

from jetforge.compress.models.tf_graphdef import AttrList, TensorShape, load_graphdef, read_graphdef
from jetforge.errors import JetforgeError, ModelError

# ------------------------------------------------------------------ hand encoding (wire-format rules)


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int64/int32 are written as their 64-bit two's complement (10 bytes)
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def tag(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def ld(field: int, payload: bytes) -> bytes:  # length-delimited
    return tag(field, 2) + varint(len(payload)) + payload


def vi(field: int, value: int) -> bytes:
    return tag(field, 0) + varint(value)


def node(name: str, op: str, *extra: bytes) -> bytes:
    return ld(1, ld(1, name.encode()) + ld(2, op.encode()) + b"".join(extra))


def attr(key: str, value: bytes) -> bytes:  # NodeDef.attr map entry (key=1, value=2)
    return ld(5, ld(1, key.encode()) + ld(2, value))


def shape(*dims: int) -> bytes:
    return b"".join(ld(2, vi(1, d)) for d in dims)


# ------------------------------------------------------------------ protobuf runtime with TF's schema


@pytest.fixture(scope="module")
def tf_messages():
    """GraphDef & co. as protobuf classes, from a descriptor with tensorflow/core/framework/*.proto numbers."""
    pytest.importorskip("google.protobuf")
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="tf_subset.proto", package="tfsub", syntax="proto3")

    def msg(name, fields, nested=(), oneof=None):
        m = fdp.message_type.add(name=name) if isinstance(name, str) else name
        for n in nested:
            m.nested_type.append(n)
        if oneof:
            m.oneof_decl.add(name=oneof)
        for fname, number, ftype, label, type_name, in_oneof in fields:
            f = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                f.type_name = type_name
            if in_oneof:
                f.oneof_index = 0
        return m

    OPT, REP = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    dim = descriptor_pb2.DescriptorProto(name="Dim")
    dim.field.add(name="size", number=1, type=F.TYPE_INT64, label=OPT)
    dim.field.add(name="name", number=2, type=F.TYPE_STRING, label=OPT)
    msg("TensorShapeProto", [("dim", 2, F.TYPE_MESSAGE, REP, ".tfsub.TensorShapeProto.Dim", False),
                             ("unknown_rank", 3, F.TYPE_BOOL, OPT, None, False)], nested=[dim])
    msg("TensorProto", [("dtype", 1, F.TYPE_ENUM, OPT, ".tfsub.DataType", False),
                        ("tensor_shape", 2, F.TYPE_MESSAGE, OPT, ".tfsub.TensorShapeProto", False),
                        ("version_number", 3, F.TYPE_INT32, OPT, None, False),
                        ("tensor_content", 4, F.TYPE_BYTES, OPT, None, False),
                        ("float_val", 5, F.TYPE_FLOAT, REP, None, False),
                        ("double_val", 6, F.TYPE_DOUBLE, REP, None, False),
                        ("int_val", 7, F.TYPE_INT32, REP, None, False),
                        ("string_val", 8, F.TYPE_BYTES, REP, None, False),
                        ("int64_val", 10, F.TYPE_INT64, REP, None, False),
                        ("bool_val", 11, F.TYPE_BOOL, REP, None, False),
                        ("half_val", 13, F.TYPE_INT32, REP, None, False)])
    lv = descriptor_pb2.DescriptorProto(name="ListValue")
    for fname, number, ftype, tname in (("s", 2, F.TYPE_BYTES, None), ("i", 3, F.TYPE_INT64, None),
                                        ("f", 4, F.TYPE_FLOAT, None), ("b", 5, F.TYPE_BOOL, None),
                                        ("type", 6, F.TYPE_ENUM, ".tfsub.DataType"),
                                        ("shape", 7, F.TYPE_MESSAGE, ".tfsub.TensorShapeProto"),
                                        ("tensor", 8, F.TYPE_MESSAGE, ".tfsub.TensorProto"),
                                        ("func", 9, F.TYPE_MESSAGE, ".tfsub.NameAttrList")):
        f = lv.field.add(name=fname, number=number, type=ftype, label=REP)
        if tname:
            f.type_name = tname
    msg("AttrValue", [("list", 1, F.TYPE_MESSAGE, OPT, ".tfsub.AttrValue.ListValue", True),
                      ("s", 2, F.TYPE_BYTES, OPT, None, True), ("i", 3, F.TYPE_INT64, OPT, None, True),
                      ("f", 4, F.TYPE_FLOAT, OPT, None, True), ("b", 5, F.TYPE_BOOL, OPT, None, True),
                      ("type", 6, F.TYPE_ENUM, OPT, ".tfsub.DataType", True),
                      ("shape", 7, F.TYPE_MESSAGE, OPT, ".tfsub.TensorShapeProto", True),
                      ("tensor", 8, F.TYPE_MESSAGE, OPT, ".tfsub.TensorProto", True),
                      ("placeholder", 9, F.TYPE_STRING, OPT, None, True),
                      ("func", 10, F.TYPE_MESSAGE, OPT, ".tfsub.NameAttrList", True)], nested=[lv], oneof="value")

    def map_entry(name):
        e = descriptor_pb2.DescriptorProto(name=name)
        e.options.map_entry = True
        e.field.add(name="key", number=1, type=F.TYPE_STRING, label=OPT)
        e.field.add(name="value", number=2, type=F.TYPE_MESSAGE, label=OPT, type_name=".tfsub.AttrValue")
        return e

    msg("NameAttrList", [("name", 1, F.TYPE_STRING, OPT, None, False),
                         ("attr", 2, F.TYPE_MESSAGE, REP, ".tfsub.NameAttrList.AttrEntry", False)],
        nested=[map_entry("AttrEntry")])
    msg("NodeDef", [("name", 1, F.TYPE_STRING, OPT, None, False), ("op", 2, F.TYPE_STRING, OPT, None, False),
                    ("input", 3, F.TYPE_STRING, REP, None, False), ("device", 4, F.TYPE_STRING, OPT, None, False),
                    ("attr", 5, F.TYPE_MESSAGE, REP, ".tfsub.NodeDef.AttrEntry", False)],
        nested=[map_entry("AttrEntry")])
    msg("GraphDef", [("node", 1, F.TYPE_MESSAGE, REP, ".tfsub.NodeDef", False),
                     ("version", 3, F.TYPE_INT32, OPT, None, False)])
    enum = fdp.enum_type.add(name="DataType")
    for name, number in (("DT_INVALID", 0), ("DT_FLOAT", 1), ("DT_DOUBLE", 2), ("DT_INT32", 3), ("DT_UINT8", 4),
                         ("DT_INT8", 6), ("DT_STRING", 7), ("DT_INT64", 9), ("DT_BOOL", 10), ("DT_HALF", 19)):
        enum.value.add(name=name, number=number)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName("tfsub." + name))
            for name in ("GraphDef", "NodeDef", "AttrValue", "TensorProto", "NameAttrList")}


def test_protobuf_encoded_graph_round_trips(tf_messages):
    G = tf_messages["GraphDef"]
    g = G(version=27)
    n = g.node.add(name="conv/weights", op="Const", input=["x:1", "^ctrl"], device="/cpu:0")
    w = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 7.5
    t = n.attr["value"].tensor
    t.dtype = 1
    t.tensor_shape.dim.add(size=2)
    t.tensor_shape.dim.add(size=3)
    t.tensor_shape.dim.add(size=4)
    t.tensor_content = w.tobytes()
    n.attr["dtype"].type = 1
    n.attr["strides"].list.i.extend([1, 2, 2, 1])
    n.attr["floats"].list.f.extend([0.5, -1.25])
    n.attr["flags"].list.b.extend([True, False, True])
    n.attr["names"].list.s.extend([b"a", b"\xff\x00"])
    n.attr["types"].list.type.extend([1, 9])
    shp = n.attr["shapes"].list.shape.add()
    shp.dim.add(size=-1)
    shp.dim.add(size=3)
    n.attr["eps"].f = 0.001
    n.attr["neg"].i = -(1 << 40)
    n.attr["train"].b = True
    n.attr["padding"].s = b"SAME"
    n.attr["shape"].shape.unknown_rank = True
    n.attr["fn"].func.name = "body"
    n.attr["fn"].func.attr["k"].i = 7
    m = g.node.add(name="small", op="Const")
    t2 = m.attr["value"].tensor
    t2.dtype = 3
    t2.tensor_shape.dim.add(size=5)
    t2.int_val.extend([-3, 2**31 - 1])  # fewer values than elements: TF repeats the last one
    h = g.node.add(name="half", op="Const").attr["value"].tensor
    h.dtype = 19
    h.tensor_shape.dim.add(size=3)
    h.half_val.extend(int(v) for v in np.array([1.5, -2.0, 65504.0], dtype=np.float16).view(np.uint16))
    s = g.node.add(name="str", op="Const").attr["value"].tensor
    s.dtype = 7
    s.tensor_shape.dim.add(size=2)
    s.string_val.extend([b"x", b"yz"])
    d = g.node.add(name="dbl", op="Const").attr["value"].tensor
    d.dtype = 2
    d.double_val.extend([1e-300, -2.5])
    d.tensor_shape.dim.add(size=2)
    bl = g.node.add(name="bools", op="Const").attr["value"].tensor
    bl.dtype = 10
    bl.bool_val.extend([True, False])
    bl.tensor_shape.dim.add(size=2)
    i64 = g.node.add(name="i64", op="Const").attr["value"].tensor
    i64.dtype = 9
    i64.int64_val.extend([-(2**63), 2**63 - 1])
    i64.tensor_shape.dim.add(size=2)
    g.node.add(name="empty", op="NoOp")

    graph = read_graphdef(g.SerializeToString())

    assert [x.name for x in graph.nodes] == ["conv/weights", "small", "half", "str", "dbl", "bools", "i64", "empty"]
    conv = graph.nodes[0]
    assert conv.op == "Const" and conv.inputs == ("x:1", "^ctrl") and conv.device == "/cpu:0"
    value = conv.get("value", "tensor")
    assert value.dtype == 1 and value.shape == (2, 3, 4)
    np.testing.assert_array_equal(value.array(), w)
    assert conv.get("dtype", "type") == 1
    assert conv.get("strides", "list").i == (1, 2, 2, 1)
    assert conv.get("floats", "list").f == (0.5, -1.25)
    assert conv.get("flags", "list").b == (True, False, True)
    assert conv.get("names", "list").s == (b"a", b"\xff\x00")
    assert conv.get("types", "list").type == (1, 9)
    assert conv.get("shapes", "list").shape == (TensorShape((-1, 3)),)
    assert conv.get("eps", "f") == pytest.approx(0.001, rel=1e-7)  # a float32 on the wire
    assert conv.get("neg", "i") == -(1 << 40)
    assert conv.get("train", "b") is True and conv.get("padding", "s") == b"SAME"
    assert conv.get("shape", "shape").unknown_rank
    fn = conv.get("fn", "func")
    assert fn.name == "body" and fn.attr["k"].value == 7
    np.testing.assert_array_equal(graph.nodes[1].get("value", "tensor").array(), [-3, 2**31 - 1, 2**31 - 1,
                                                                                  2**31 - 1, 2**31 - 1])
    half = graph.nodes[2].get("value", "tensor").array()
    assert half.dtype == np.float16 and half.tolist() == [1.5, -2.0, 65504.0]
    assert graph.nodes[3].get("value", "tensor").array().tolist() == [b"x", b"yz"]
    assert graph.nodes[4].get("value", "tensor").array().tolist() == [1e-300, -2.5]
    assert graph.nodes[5].get("value", "tensor").array().tolist() == [True, False]
    assert graph.nodes[6].get("value", "tensor").array().tolist() == [-(2**63), 2**63 - 1]
    assert graph.nodes[7].attr == {} and graph.op_counts() == {"Const": 7, "NoOp": 1}


def test_packed_and_unpacked_repeats_and_merges_agree_with_protobuf(tf_messages):
    """Hand-written variants protobuf also accepts: unpacked repeats, split packed runs, a sub-message given twice."""
    unpacked = b"".join(vi(3, v) for v in (1, 2, 2, 1))  # ListValue.i, one record per value
    split = ld(3, varint(1) + varint(2)) + ld(3, varint(2) + varint(1))  # two packed runs
    two_shapes = ld(2, shape(4)) + ld(2, shape(5))  # tensor_shape twice: protobuf merges (dims append)
    tensor = vi(1, 1) + two_shapes + ld(5, struct.pack("<f", 2.0))
    data = node("n", "Op", attr("a", ld(1, unpacked)), attr("b", ld(1, split)), attr("t", ld(8, tensor)),
                attr("a2", vi(3, 5) + vi(3, 6)))  # a scalar given twice: the last wins
    ours = read_graphdef(data).nodes[0]
    theirs = tf_messages["GraphDef"].FromString(data).node[0]
    assert ours.get("a", "list").i == tuple(theirs.attr["a"].list.i) == (1, 2, 2, 1)
    assert ours.get("b", "list").i == tuple(theirs.attr["b"].list.i) == (1, 2, 2, 1)
    assert ours.get("t", "tensor").shape == tuple(d.size for d in theirs.attr["t"].tensor.tensor_shape.dim) == (4, 5)
    assert np.all(ours.get("t", "tensor").array() == 2.0)
    assert ours.get("a2", "i") == theirs.attr["a2"].i == 6


def test_unknown_fields_are_skipped():
    data = (ld(4, b"\x08\x01") + vi(3, 27)  # GraphDef.versions and .version
            + node("a", "Op", ld(6, b"\x0a\x00"), tag(9, 1) + b"\x00" * 8, tag(10, 5) + b"\x00" * 4))
    g = read_graphdef(data)
    assert [(n.name, n.op) for n in g.nodes] == [("a", "Op")]


def const(*fields: bytes) -> bytes:
    return node("c", "Const", attr("value", ld(8, b"".join(fields))))


# case -> (bytes, what the message must say)
MALFORMED = {
    "truncated varint": (b"\x0a\x80", "truncated varint"),
    "varint longer than 10 bytes": (b"\x08" + b"\xff" * 10 + b"\x01", "longer than 10 bytes"),
    "varint overflows 64 bits": (b"\x08" + b"\xff" * 9 + b"\x02", "overflows 64 bits"),
    "length past the end": (b"\x0a\x05ab", "declares 5 bytes but only 2 remain"),
    "huge length": (b"\x0a" + varint(1 << 62), "but only 0 remain"),
    "field number 0": (b"\x02\x00", "invalid field number 0"),
    "group wire type": (b"\x0b\x0c", "group"),
    "invalid wire type 6": (b"\x0e", "invalid wire type 6"),
    "wrong wire type for node": (b"\x08\x01", "wire type 0, expected 2"),
    "wrong wire type for a name": (ld(1, vi(1, 5)), "node[0]: field 1 has wire type 0"),
    "invalid utf-8 name": (ld(1, ld(1, b"\xff\xfe")), "not valid UTF-8"),
    "truncated fixed32": (node("x", "Op", attr("f", tag(4, 5) + b"\x00\x00")), "truncated 4-byte field"),
    "tensor content too short": (const(vi(1, 1), ld(2, shape(2, 2)), ld(4, b"\x00" * 12)), "has 12 bytes"),
    "more values than elements": (const(vi(1, 1), ld(2, shape(1)), ld(5, b"\x00" * 8)), "2 values for a tensor"),
    "absurd shape": (const(vi(1, 1), ld(2, shape(1 << 30, 1 << 30))), "more than 4294967296 elements"),
    "expansion past the budget": (const(vi(1, 1), ld(2, shape(1 << 13, 1 << 13)), ld(5, b"\x00" * 4)), "budget"),
    "negative dimension": (const(vi(1, 1), ld(2, shape(-2))), "dimension size -2"),
    "unknown dimension in a constant": (const(vi(1, 1), ld(2, shape(-1))), "fully known shape"),
    "too many dimensions": (const(vi(1, 1), ld(2, shape(*([1] * 40)))), "more than 32 dimensions"),
    "packed floats not a multiple of 4": (node("x", "Op", attr("l", ld(1, ld(4, b"\x00" * 5)))), "multiple of 4"),
    "truncated packed varint": (node("x", "Op", attr("l", ld(1, ld(3, b"\x01\x80")))), "truncated varint"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_input_is_one_model_error(case):
    data, says = MALFORMED[case]
    with pytest.raises(ModelError) as info:
        read_graphdef(data)
    assert says in info.value.message
    assert info.value.hint


def test_nesting_deeper_than_the_limit_is_refused():
    value = vi(3, 1)
    for _ in range(40):  # AttrValue.func -> NameAttrList.attr -> AttrValue.func -> ...
        value = ld(10, ld(1, b"f") + ld(2, ld(1, b"k") + ld(2, value)))
    with pytest.raises(ModelError, match="deeper"):
        read_graphdef(node("x", "Op", attr("a", value)))


def test_the_expansion_budget_is_configurable():
    data = node("c", "Const", attr("value", ld(8, vi(1, 1) + ld(2, shape(100)) + ld(5, struct.pack("<f", 3.0)))))
    assert read_graphdef(data).nodes[0].get("value", "tensor").array().tolist() == [3.0] * 100
    with pytest.raises(ModelError, match="budget"):
        read_graphdef(data, max_expanded_elements=98)


def test_not_bytes_is_refused():
    with pytest.raises(ModelError):
        read_graphdef("a string")  # type: ignore[arg-type]


def test_random_corruption_never_escapes_as_another_exception(tf_messages):
    """Seeded mutations of a valid graph (truncation, byte flips, insertions): parsed, or one ModelError."""
    g = tf_messages["GraphDef"]()
    for i in range(6):
        n = g.node.add(name="n%d" % i, op="Const", input=["a", "b:1"])
        t = n.attr["value"].tensor
        t.dtype = [1, 3, 9, 19, 7, 10][i]
        t.tensor_shape.dim.add(size=3)
        if i == 0:
            t.tensor_content = np.ones(3, np.float32).tobytes()
        elif i in (1, 3):
            t.int_val.append(5) if i == 1 else t.half_val.extend([1, 2, 3])
        elif i == 2:
            t.int64_val.extend([1, -1, 2])
        n.attr["l"].list.i.extend([1, -2, 3])
        n.attr["l2"].list.f.extend([1.0, 2.0])
        n.attr["fn"].func.attr["x"].list.shape.add().dim.add(size=4)
    data = g.SerializeToString()
    read_graphdef(data)
    rng = random.Random(0)
    outcomes = {"parsed": 0, "refused": 0}
    for _ in range(400):
        b = bytearray(data)
        kind = rng.randrange(3)
        if kind == 0:
            b = b[:rng.randrange(len(b))]
        elif kind == 1:
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(len(b))] = rng.randrange(256)
        else:
            pos = rng.randrange(len(b))
            b[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 6)))
        try:
            read_graphdef(bytes(b))
            outcomes["parsed"] += 1
        except JetforgeError as err:
            assert isinstance(err, ModelError), type(err)
            outcomes["refused"] += 1
    assert outcomes["refused"] > 100 and outcomes["parsed"] > 10  # both paths were exercised


def test_real_frozen_graph():
    from jetforge.assets import asset_path

    graph = load_graphdef(asset_path("ssdlite_mobilenet_v2_person", "frozen_inference_graph.pb"))
    counts = graph.op_counts()
    assert len(graph.nodes) == 2790
    assert (counts["Const"], counts["Conv2D"], counts["DepthwiseConv2dNative"], counts["FusedBatchNorm"],
            counts["Relu6"]) == (1163, 55, 33, 76, 59)
    nodes = graph.by_name()
    assert nodes["BoxPredictor_0/ClassPredictor/weights"].get("value", "tensor").shape == (1, 1, 576, 6)
    assert nodes["BoxPredictor_5/ClassPredictor/weights"].get("value", "tensor").shape == (1, 1, 128, 12)
    w = nodes["FeatureExtractor/MobilenetV2/expanded_conv_1/expand/weights"].get("value", "tensor").array()
    assert w.shape == (1, 1, 16, 96) and w.dtype == np.float32 and np.isfinite(w).all() and w.std() > 0
    placeholder = nodes["image_tensor"]
    assert placeholder.op == "Placeholder" and placeholder.get("dtype", "type") == 4  # DT_UINT8
    assert isinstance(nodes["FeatureExtractor/MobilenetV2/Conv/Conv2D"].get("strides", "list"), AttrList)
