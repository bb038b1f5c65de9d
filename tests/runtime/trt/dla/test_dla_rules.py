"""DLA placement rules, tested inside, on and outside every documented boundary (the rule sources in rules.py).

Each case builds a small ONNX graph with ``onnx.helper`` and runs the real analyzer (shape
inference included).  The real-model case exports torchvision's MobileNetV2 (random weights).
"""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from jetforge.errors import TargetError  # noqa: E402
from jetforge.runtime.tensorrt.dla.analyze import analyze_onnx  # noqa: E402
from jetforge.runtime.tensorrt.dla.facts import cbuf_banks  # noqa: E402
from jetforge.runtime.tensorrt.dla.report import format_table  # noqa: E402
from jetforge.runtime.tensorrt.dla.rules import RULES, RULES_BY_ID, UNCERTAIN_KINDS  # noqa: E402

ORIN = {"dla_version": "2.0", "tensorrt_version": "10.3.0"}
XAVIER = {"dla_version": "1.0", "tensorrt_version": "8.5.2"}


def _model(nodes, inputs, output="y", inits=(), opset=17, out_shape=None):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, out_shape)],
        [numpy_helper.from_array(np.asarray(v, dtype=np.float32), n) for n, v in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _layer(model, op, **kw):
    args = dict(ORIN)
    args.update(kw)
    analysis = analyze_onnx(model, **args)
    layers = [l for l in analysis.layers if l.onnx_op == op]
    assert layers, "no %s layer" % op
    return layers[0], analysis


def _conv(kernel=(3, 3), stride=(1, 1), pads=(0, 0, 0, 0), dilation=(1, 1), cin=1, cout=4, groups=1, hw=(40, 40),
          batch=1):
    w = np.zeros((cout, cin // groups) + tuple(kernel), dtype=np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=list(kernel), strides=list(stride),
                            pads=list(pads), dilations=list(dilation), group=groups)
    return _model([node], [("x", [batch, cin, hw[0], hw[1]])], inits=[("w", w)])


def _check(layer, ok, rule):
    if ok:
        assert layer.device == "DLA", (layer.reason, layer.rule_ids)
        assert rule not in layer.rule_ids
    else:
        assert layer.device == "GPU"
        assert rule in layer.rule_ids, layer.rule_ids


# ------------------------------------------------------------------ convolution
@pytest.mark.parametrize("k,ok", [(1, True), (3, True), (32, True), (33, False)])
def test_conv_kernel_1_to_32(k, ok):
    _check(_layer(_conv(kernel=(k, k)), "Conv")[0], ok, "conv.kernel")


def test_conv_kernel_checks_each_dimension():
    _check(_layer(_conv(kernel=(1, 33)), "Conv")[0], False, "conv.kernel")


@pytest.mark.parametrize("s,ok", [(1, True), (4, True), (8, True), (9, False)])
def test_conv_stride_1_to_8(s, ok):
    _check(_layer(_conv(stride=(s, s)), "Conv")[0], ok, "conv.stride")


@pytest.mark.parametrize("p,ok", [(0, True), (15, True), (31, True), (32, False)])
def test_conv_padding_0_to_31(p, ok):
    layer = _layer(_conv(kernel=(32, 32), pads=(p, p, p, p), hw=(40, 40)), "Conv")[0]
    _check(layer, ok, "conv.padding")


@pytest.mark.parametrize("p,ok", [(1, True), (2, True), (3, False)])
def test_conv_padding_must_be_less_than_kernel(p, ok):
    layer = _layer(_conv(kernel=(3, 3), pads=(0, p, 0, 0)), "Conv")[0]
    _check(layer, ok, "conv.padding_lt_kernel")


@pytest.mark.parametrize("d,ok", [(1, True), (16, True), (32, True), (33, False)])
def test_conv_dilation_1_to_32(d, ok):
    layer = _layer(_conv(kernel=(2, 2), dilation=(d, d), hw=(40, 70)), "Conv")[0]
    _check(layer, ok, "conv.dilation")


@pytest.mark.parametrize("c,ok", [(1, True), (8192, True), (8193, False)])
def test_conv_output_maps_up_to_8192(c, ok):
    _check(_layer(_conv(kernel=(1, 1), cout=c, hw=(2, 2)), "Conv")[0], ok, "conv.output_maps")


@pytest.mark.parametrize("g,ok", [(2, True), (8192, True), (8193, False)])
def test_conv_groups_up_to_8192(g, ok):
    _check(_layer(_conv(kernel=(1, 1), cin=g, cout=g, groups=g, hw=(1, 1)), "Conv")[0], ok, "conv.groups")


def test_conv_3d_is_not_supported_and_1d_is_analysed_as_2d():
    w = np.zeros((4, 1, 3, 3, 3), dtype=np.float32)
    m3 = _model([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3, 3])], [("x", [1, 1, 8, 8, 8])],
                inits=[("w", w)])
    _check(_layer(m3, "Conv")[0], False, "conv.spatial_2d")
    w1 = np.zeros((4, 1, 3), dtype=np.float32)
    m1 = _model([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3])], [("x", [1, 1, 16])],
                inits=[("w", w1)])
    layer = _layer(m1, "Conv")[0]
    assert layer.device == "DLA" and "1-D" in layer.notes[0]


def test_conv_flops_and_cbuf_formula():
    layer, analysis = _layer(_conv(kernel=(3, 3), cin=8, cout=16, pads=(1, 1, 1, 1), hw=(10, 10)), "Conv")
    assert layer.flops == 2 * 16 * 10 * 10 * 8 * 3 * 3
    assert analysis.dla_flops_share == 1.0
    # DG8.4 formula: Cin 512, 3x3, W 224, FP16 -> 1 weight bank + ceil(ceil(32*224/4)*3/256) = 21 data banks
    assert cbuf_banks(512, 224, 3, 3, 1, False) == 1 + 21
    assert cbuf_banks(3, 224, 3, 3, 1, False) == 2
    big = _layer(_conv(kernel=(3, 3), cin=512, cout=8, pads=(1, 1, 1, 1), hw=(8, 224)), "Conv")[0]
    assert big.device == "GPU" and "conv.cbuf" in big.rule_ids and big.uncertain


# ------------------------------------------------------------------ pooling
def _pool(op="MaxPool", kernel=(2, 2), stride=(1, 1), pads=(0, 0, 0, 0), hw=(40, 40), **attrs):
    node = helper.make_node(op, ["x"], ["y"], kernel_shape=list(kernel), strides=list(stride), pads=list(pads), **attrs)
    return _model([node], [("x", [1, 4, hw[0], hw[1]])])


@pytest.mark.parametrize("k,ok", [(1, True), (4, True), (8, True), (9, False)])
def test_pool_window_1_to_8(k, ok):
    _check(_layer(_pool(kernel=(k, k)), "MaxPool")[0], ok, "pool.window")


@pytest.mark.parametrize("s,ok", [(1, True), (16, True), (17, False)])
def test_pool_stride_1_to_16(s, ok):
    _check(_layer(_pool(kernel=(2, 2), stride=(s, s)), "MaxPool")[0], ok, "pool.stride")


@pytest.mark.parametrize("p,ok", [(0, True), (3, True), (7, True), (8, False)])
def test_pool_padding_0_to_7(p, ok):
    _check(_layer(_pool(kernel=(8, 8), pads=(p, p, p, p)), "MaxPool")[0], ok, "pool.padding")


def test_average_pool_exclusive_padding_only_fails_on_xavier():
    excl = _pool("AveragePool", kernel=(3, 3), pads=(1, 1, 1, 1), count_include_pad=0)
    incl = _pool("AveragePool", kernel=(3, 3), pads=(1, 1, 1, 1), count_include_pad=1)
    _check(_layer(excl, "AveragePool", **XAVIER)[0], False, "pool.xavier_inclusive_padding")
    _check(_layer(excl, "AveragePool")[0], True, "pool.xavier_inclusive_padding")  # Orin allows exclusive
    _check(_layer(incl, "AveragePool", **XAVIER)[0], True, "pool.xavier_inclusive_padding")
    nopad = _pool("AveragePool", kernel=(3, 3))
    _check(_layer(nopad, "AveragePool", **XAVIER)[0], True, "pool.xavier_inclusive_padding")


def test_global_average_pool_is_a_reduce_layer_on_the_gpu():
    m = _model([helper.make_node("GlobalAveragePool", ["x"], ["y"])], [("x", [1, 8, 7, 7])])
    layer = _layer(m, "GlobalAveragePool")[0]
    _check(layer, False, "reduce.global_avg")
    assert layer.kind == "reduce" and layer.uncertain
    assert "onnx-tensorrt" in RULES_BY_ID["reduce.global_avg"].source


# ------------------------------------------------------------------ deconvolution
def _deconv(kernel=(2, 2), stride=(2, 2), pads=(0, 0, 0, 0), groups=1, dilation=(1, 1), cin=2, cout=2, hw=(4, 4)):
    w = np.zeros((cin, cout // groups) + tuple(kernel), dtype=np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], kernel_shape=list(kernel), strides=list(stride),
                            pads=list(pads), group=groups, dilations=list(dilation))
    return _model([node], [("x", [1, cin, hw[0], hw[1]])], inits=[("w", w)])


@pytest.mark.parametrize("kernel,ok", [((1, 1), True), ((16, 8), True), ((32, 16), True), ((33, 16), False),
                                       ((64, 1), True), ((1, 96), True), ((128, 1), True), ((64, 64), False),
                                       ((64, 2), False), ((65, 1), False)])
def test_deconv_kernel_range_and_long_combos(kernel, ok):
    _check(_layer(_deconv(kernel=kernel, stride=(1, 1)), "ConvTranspose")[0], ok, "deconv.kernel")


@pytest.mark.parametrize("stride,ok", [((1, 1), True), ((32, 16), True), ((33, 1), False), ((1, 64), True),
                                       ((96, 96), False)])
def test_deconv_stride_same_rule_as_kernel(stride, ok):
    _check(_layer(_deconv(kernel=(1, 1), stride=stride), "ConvTranspose")[0], ok, "deconv.stride")


@pytest.mark.parametrize("p,ok", [(0, True), (1, False)])
def test_deconv_padding_must_be_zero(p, ok):
    _check(_layer(_deconv(kernel=(3, 3), stride=(2, 2), pads=(p, p, p, p)), "ConvTranspose")[0], ok, "deconv.padding")


def test_deconv_groups_dilation_and_square_23_32():
    _check(_layer(_deconv(groups=2), "ConvTranspose")[0], False, "deconv.groups")
    _check(_layer(_deconv(dilation=(2, 2)), "ConvTranspose")[0], False, "deconv.dilation")
    _check(_layer(_deconv(kernel=(22, 22), stride=(1, 1)), "ConvTranspose")[0], True, "deconv.square_23_32")
    sq = _layer(_deconv(kernel=(23, 23), stride=(1, 1)), "ConvTranspose")[0]
    _check(sq, False, "deconv.square_23_32")
    assert sq.uncertain
    _check(_layer(_deconv(kernel=(23, 22), stride=(1, 1)), "ConvTranspose")[0], True, "deconv.square_23_32")


# ------------------------------------------------------------------ resize
def _resize(scales=(1, 1, 2, 2), mode="nearest", sizes=None, **attrs):
    names = ["x", "", "scales"] if sizes is None else ["x", "", "", "sizes"]
    inits = [("scales", np.asarray(scales, dtype=np.float32))] if sizes is None else []
    node = helper.make_node("Resize", names, ["y"], mode=mode, **attrs)
    model = _model([node], [("x", [1, 2, 4, 4])], inits=inits)
    if sizes is not None:
        model.graph.initializer.append(numpy_helper.from_array(np.asarray(sizes, dtype=np.int64), "sizes"))
    return model


@pytest.mark.parametrize("s,ok", [(1, True), (2, True), (32, True), (33, False)])
def test_resize_nearest_integer_scales_1_to_32(s, ok):
    m = _resize((1, 1, s, s), coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    _check(_layer(m, "Resize")[0], ok, "resize.nearest_scale")


@pytest.mark.parametrize("s,ok", [(1, True), (4, True), (5, False)])
def test_resize_linear_integer_scales_1_to_4(s, ok):
    m = _resize((1, 1, s, s), mode="linear", coordinate_transformation_mode="half_pixel")
    _check(_layer(m, "Resize")[0], ok, "resize.linear_scale")


def test_resize_other_restrictions():
    frac = _resize((1, 1, 2.5, 2.5), coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    _check(_layer(frac, "Resize")[0], False, "resize.integer_scales")
    _check(_layer(_resize((1, 2, 2, 2), coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
                  "Resize")[0], False, "resize.nc_scales_one")
    _check(_layer(_resize(sizes=(1, 2, 8, 8)), "Resize")[0], False, "resize.uses_scales")
    _check(_layer(_resize(mode="linear", coordinate_transformation_mode="align_corners"), "Resize")[0],
           False, "resize.combo")
    _check(_layer(_resize(mode="cubic"), "Resize")[0], False, "resize.mode")
    _check(_layer(_resize(coordinate_transformation_mode="half_pixel", nearest_mode="round_prefer_ceil"),
                  "Resize")[0], True, "resize.combo")
    _check(_layer(_resize(coordinate_transformation_mode="asymmetric", nearest_mode="ceil"), "Resize")[0],
           False, "resize.combo")


# ------------------------------------------------------------------ concat, LRN
@pytest.mark.parametrize("axis,ok", [(1, True), (-3, True), (0, False), (2, False), (3, False)])
def test_concat_channel_axis_only(axis, ok):
    m = _model([helper.make_node("Concat", ["a", "b"], ["y"], axis=axis)], [("a", [1, 2, 4, 4]), ("b", [1, 2, 4, 4])])
    _check(_layer(m, "Concat")[0], ok, "concat.channel_axis")


def test_concat_needs_two_inputs():
    m = _model([helper.make_node("Concat", ["a"], ["y"], axis=1)], [("a", [1, 2, 4, 4])])
    _check(_layer(m, "Concat")[0], False, "concat.min_inputs")


@pytest.mark.parametrize("size,ok", [(1, False), (3, True), (4, False), (5, True), (7, True), (9, True), (11, False)])
def test_lrn_window_3_5_7_9(size, ok):
    m = _model([helper.make_node("LRN", ["x"], ["y"], size=size)], [("x", [1, 8, 4, 4])])
    _check(_layer(m, "LRN")[0], ok, "lrn.window")


# ------------------------------------------------------------------ activations and element-wise
@pytest.mark.parametrize("op,ok", [("Relu", True), ("Sigmoid", True), ("Tanh", True), ("LeakyRelu", True),
                                   ("HardSwish", False), ("HardSigmoid", False), ("Elu", False),
                                   ("Softplus", False)])
def test_activation_types(op, ok):
    m = _model([helper.make_node(op, ["x"], ["y"])], [("x", [1, 4, 4, 4])])
    layer, analysis = _layer(m, op)
    _check(layer, ok, "act.type")
    if op == "HardSwish":
        assert any("Clip(x + 3, 0, 6)" in s for s in analysis.suggestions)
    if op == "LeakyRelu":
        assert layer.uncertain  # header omits it; DG8.4 / latest / DLA-SW list it


@pytest.mark.parametrize("lo,hi,ok,rule", [(0, 6, True, "act.clip_max"), (0, 1, True, "act.clip_max"),
                                           (0, 127, True, "act.clip_max"), (0, 128, False, "act.clip_max"),
                                           (0, 0.5, False, "act.clip_max"), (-1, 6, False, "act.clip_min")])
def test_clip_as_clipped_relu(lo, hi, ok, rule):
    m = _model([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], [("x", [1, 4, 4, 4])],
               inits=[("lo", np.float32(lo)), ("hi", np.float32(hi))])
    _check(_layer(m, "Clip")[0], ok, rule)


@pytest.mark.parametrize("op,ok", [("Add", True), ("Sub", True), ("Mul", True), ("Max", True), ("Min", True),
                                   ("Div", False), ("Pow", False)])
def test_elementwise_op_set(op, ok):
    m = _model([helper.make_node(op, ["a", "b"], ["y"])], [("a", [1, 2, 4, 4]), ("b", [1, 2, 4, 4])])
    layer = _layer(m, op)[0]
    _check(layer, ok, "eltwise.op")
    if op in ("Div", "Pow"):
        assert layer.uncertain and "eltwise.div_pow_uncertain" in layer.uncertain_rules


def test_sub_on_xavier_is_noted_as_scale_plus_sum():
    m = _model([helper.make_node("Sub", ["a", "b"], ["y"])], [("a", [1, 2, 4, 4]), ("b", [1, 2, 4, 4])])
    layer = _layer(m, "Sub", **XAVIER)[0]
    assert layer.device == "DLA" and [f.rule_id for f in layer.findings] == ["eltwise.xavier_sub"]


def test_int8_range_equality_warns_with_cache_scales():
    m = _model([helper.make_node("Add", ["a", "b"], ["y"])], [("a", [1, 2, 4, 4]), ("b", [1, 2, 4, 4])])
    layer = _layer(m, "Add", precision="int8", cache_scales={"a": 0.01, "b": 0.02, "y": 0.02})[0]
    assert layer.device == "DLA" and [f.rule_id for f in layer.findings] == ["eltwise.int8_equal_ranges"]
    same = _layer(m, "Add", precision="int8", cache_scales={"a": 0.02, "b": 0.02, "y": 0.03})[0]
    assert same.findings == []


# ------------------------------------------------------------------ softmax, gather, matmul, qdq
def test_softmax_xavier_trt85_unsupported_orin_supported():
    m = _model([helper.make_node("Softmax", ["x"], ["y"], axis=1)], [("x", [1, 10, 1, 1])])
    _check(_layer(m, "Softmax", **XAVIER)[0], False, "softmax.xavier")
    _check(_layer(m, "Softmax")[0], True, "softmax.xavier")
    # absent from the 10.3 header: not applied on Xavier with TensorRT 10
    _check(_layer(m, "Softmax", dla_version="1.0", tensorrt_version="10.3.0")[0], True, "softmax.xavier")


@pytest.mark.parametrize("c,ok", [(1024, True), (1025, False)])
def test_softmax_axis_length_with_spatial_dims(c, ok):
    m = _model([helper.make_node("Softmax", ["x"], ["y"], axis=1)], [("x", [1, c, 2, 1])])
    _check(_layer(m, "Softmax")[0], ok, "softmax.size")


def test_gather_qdq_and_nonconstant_matmul_fall_back():
    idx = numpy_helper.from_array(np.asarray([0], dtype=np.int64), "i")
    g = _model([helper.make_node("Gather", ["x", "i"], ["y"], axis=1)], [("x", [1, 4, 2, 2])])
    g.graph.initializer.append(idx)
    _check(_layer(g, "Gather")[0], False, "global.kind")
    mm = _model([helper.make_node("MatMul", ["a", "b"], ["y"])], [("a", [1, 1, 4, 8]), ("b", [1, 1, 8, 4])])
    _check(_layer(mm, "MatMul")[0], False, "matmul.constant_weights")
    mmc = _model([helper.make_node("MatMul", ["a", "w"], ["y"])], [("a", [1, 1, 4, 8])], inits=[("w", np.ones((8, 4)))])
    _check(_layer(mmc, "MatMul")[0], True, "matmul.constant_weights")
    q = helper.make_node("QuantizeLinear", ["x", "s"], ["q"])
    dq = helper.make_node("DequantizeLinear", ["q", "s"], ["y"])
    qm = _model([q, dq], [("x", [1, 2, 4, 4])], inits=[("s", np.float32(0.1))])
    _check(_layer(qm, "QuantizeLinear")[0], False, "global.qdq")


# ------------------------------------------------------------------ dynamic shapes and batch
def test_dynamic_shape_falls_back_until_fixed():
    dyn = _model([helper.make_node("Relu", ["x"], ["y"])], [("x", ["N", 4, 8, 8])])
    layer, analysis = _layer(dyn, "Relu")
    _check(layer, False, "global.static_shape")
    assert any("dynamic" in n for n in analysis.notes)
    fixed = _layer(dyn, "Relu", input_shapes={"x": [2, 4, 8, 8]})[0]
    _check(fixed, True, "global.static_shape")


@pytest.mark.parametrize("n,ok", [(1, True), (4096, True), (4097, False)])
def test_batch_up_to_4096(n, ok):
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [("x", [n, 1, 2, 2])])
    _check(_layer(m, "Relu")[0], ok, "global.batch")


@pytest.mark.parametrize("c,ok", [(8192, True), (8193, False)])
def test_non_batch_dims_up_to_8192(c, ok):
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [("x", [1, c, 1, 1])])
    _check(_layer(m, "Relu")[0], ok, "global.dims")


# ------------------------------------------------------------------ subgraphs, strict, patterns
def _two_islands():
    w = np.zeros((4, 4, 1, 1), dtype=np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], kernel_shape=[1, 1]),
             helper.make_node("HardSwish", ["a"], ["b"]),
             helper.make_node("Conv", ["b", "w"], ["c"], kernel_shape=[1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    return _model(nodes, [("x", [1, 4, 8, 8])], inits=[("w", w)])


def test_gpu_island_splits_dla_subgraphs_and_strict_reports_it():
    analysis = analyze_onnx(_two_islands(), **ORIN)
    assert [l.device for l in analysis.real_layers] == ["DLA", "GPU", "DLA", "DLA"]
    assert analysis.num_subgraphs == 2
    assert [len(s) for s in analysis.subgraphs] == [1, 2]
    assert not analysis.exceeds_loadables
    failures = analysis.strict_failures()
    assert len(failures) == 1 and "HardSwish" in failures[0]
    tight = analyze_onnx(_two_islands(), loadables_per_core=1, **ORIN)
    assert tight.exceeds_loadables and any("exceed" in f for f in tight.strict_failures())
    assert any("loadables per core" in s for s in tight.suggestions)
    text = format_table(analysis)
    assert "DLA subgraphs: 2 (limit 16 loadables per core)" in text and "HardSwish" in text


def test_parallel_branches_stay_one_subgraph_and_swish_is_recognised():
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])]
    analysis = analyze_onnx(_model(nodes, [("x", [1, 4, 8, 8])]), **ORIN)
    assert analysis.fully_on_dla and analysis.num_subgraphs == 1
    assert any(p.startswith("Swish/SiLU") for p in analysis.patterns)


def test_target_without_dla_is_refused():
    class NoDla:  # the fields analyze reads; real profiles are checked in test_build_plan
        name, has_dla = "orin-nano", False
    with pytest.raises(TargetError):
        analyze_onnx(_two_islands(), NoDla())


# ------------------------------------------------------------------ the rule set itself
def test_every_rule_cites_a_source_and_has_a_fix():
    for rule in RULES:
        # a primary source a reader can open (never a document outside the repository)
        assert any(where in rule.source for where in ("docs.nvidia.com", "NVIDIA/", "onnx-tensorrt",
                                                       "developer guide")), rule.id
        assert ".md §" not in rule.source and "reference" not in rule.source, rule.id
        assert rule.message and rule.suggestion and rule.condition, rule.id
        assert rule.to_dict()["id"] == rule.id
    assert {"shuffle", "reduce"} <= set(UNCERTAIN_KINDS)


# ------------------------------------------------------------------ a real model
@pytest.mark.slow
def test_mobilenet_v2_placement(tmp_path):
    torch = pytest.importorskip("torch")
    torchvision = pytest.importorskip("torchvision")
    model = torchvision.models.mobilenet_v2(weights=None).eval()
    path = tmp_path / "mobilenet_v2.onnx"
    torch.onnx.export(model, torch.randn(1, 3, 224, 224), str(path), input_names=["input"],
                      output_names=["logits"], opset_version=17, dynamo=False)
    analysis = analyze_onnx(path, **ORIN)
    convs = [l for l in analysis.layers if l.onnx_op == "Conv"]
    clips = [l for l in analysis.layers if l.onnx_op == "Clip"]
    assert len(convs) == 52 and all(l.device == "DLA" for l in convs)
    assert len(clips) == 35 and all(l.device == "DLA" for l in clips)      # ReLU6 runs as kCLIP
    assert all(l.device == "DLA" for l in analysis.layers if l.onnx_op == "Add")
    assert [l.onnx_op for l in analysis.gpu_layers] == ["GlobalAveragePool"]  # Reduce layer, uncertain
    gemm = next(l for l in analysis.layers if l.onnx_op == "Gemm")
    assert gemm.device == "DLA"                                             # constant weights
    assert analysis.num_subgraphs == 2                                       # features | flatten+classifier
    assert analysis.dla_flops_share > 0.99
    assert any("AveragePool" in s for s in analysis.suggestions)
    xavier = analyze_onnx(path, **XAVIER)
    assert [l.onnx_op for l in xavier.gpu_layers] == ["GlobalAveragePool"]


# ------------------------------------------------------------------ the CLI
def test_cli_dla_check_table_json_and_strict(tmp_path, capsys):
    import json

    from jetforge.cli.main import main

    path = tmp_path / "islands.onnx"
    onnx.save(_two_islands(), str(path))
    assert main(["dla-check", str(path), "--target", "agx-orin-64gb"]) == 0
    out = capsys.readouterr().out
    assert "GPU fallback: HardSwish_1 (HardSwish)" in out and "TensorRT 10.3.0" in out
    assert main(["dla-check", str(path), "--target", "agx-orin-64gb", "--json", "--loadables-per-core", "4"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["summary"]["dla_subgraphs"] == 2 and data["summary"]["loadables_per_core"] == 4
    assert data["gpu_fallback"][0]["rules"] == ["act.type"]
    assert main(["dla-check", str(path), "--target", "agx-orin-64gb", "--strict"]) == 1
    assert "--strict" in capsys.readouterr().err
    assert main(["dla-check", str(path), "--target", "orin-nano-8gb"]) == 1
    assert "has no DLA" in capsys.readouterr().err


def test_cli_assumes_batch_one_for_a_dynamic_batch_axis_only(tmp_path, capsys):
    """An exported model's dynamic batch axis is set to 1 (with a note); another dynamic axis is not guessed."""
    from jetforge.cli.main import main

    batch_only = tmp_path / "batch.onnx"
    onnx.save(_model([helper.make_node("Relu", ["x"], ["y"])], [("x", ["N", 4, 8, 8])]), str(batch_only))
    assert main(["dla-check", str(batch_only), "--target", "agx-orin-64gb", "--strict"]) == 0
    assert "assumed x=1x4x8x8" in capsys.readouterr().out
    spatial = tmp_path / "spatial.onnx"
    onnx.save(_model([helper.make_node("Relu", ["x"], ["y"])], [("x", [1, 4, "H", 8])]), str(spatial))
    assert main(["dla-check", str(spatial), "--target", "agx-orin-64gb", "--strict"]) == 1
    assert "assumed" not in capsys.readouterr().out


def test_static_shape_sets_only_the_batch_axis():
    from jetforge.errors import ModelError
    from jetforge.runtime.sidecar import TensorSpec, static_shape

    assert static_shape(TensorSpec("x", ["batch", 3, 224, 224]), 4) == [4, 3, 224, 224]
    assert static_shape(TensorSpec("x", [2, 3, 8, 8])) == [2, 3, 8, 8]
    with pytest.raises(ModelError, match="dynamic axis 2") as info:
        static_shape(TensorSpec("x", [1, 3, "H", 8]), purpose="the bundle")
    assert "--shape x=1x3xNx8" in str(info.value)


# ------------------------------------------------------------------ loading
def test_an_empty_or_hollow_model_is_refused_not_reported_as_an_empty_table(tmp_path):
    """An empty .onnx used to give an empty table that passed --strict; in memory or on disk it is an error."""
    from jetforge.errors import ModelError

    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(ModelError, match="empty.onnx is empty"):
        analyze_onnx(empty, **ORIN)
    hollow = _model([], [("x", [1, 4, 8, 8])], output="x")  # inputs and outputs, but no layer at all
    with pytest.raises(ModelError, match="its graph has no nodes"):
        analyze_onnx(hollow, **ORIN)
