"""The estimator's arithmetic on a tiny hand-checked graph: FLOPs, fusion, bytes, liveness, transitions, roofline.

Every expected number is worked out by hand in the comments from the graph in ``estimate_graphs.py``
(not read back from the implementation).  FLOPs count a multiply-add as 2.
"""

import math

import numpy as np
import pytest

pytest.importorskip("onnx")

from estimate_graphs import tiny_net  # noqa: E402

from jetforge.runtime.estimate.efficiency import EfficiencySet, Factor, Overheads  # noqa: E402
from jetforge.runtime.estimate.graph import CATEGORIES  # noqa: E402
from jetforge.runtime.estimate.model import kernel_time, memory, place, time_placed, transitions  # noqa: E402
from jetforge.runtime.estimate.rates import target_rates  # noqa: E402
from jetforge.targets import get_target  # noqa: E402


def flat_set(compute=0.5, memory_eff=0.5, kernel_us=3.0, transition_us=10.0, subgraph_us=40.0):
    """Every type at the same factors, overheads given: the expected times below use these numbers."""
    table = {c: Factor(compute, memory_eff) for c in CATEGORIES}
    return EfficiencySet("test", "set in the test", dict(table), dict(table),
                         Overheads(gpu_kernel_us=kernel_us, dla_layer_us=1.0, dla_subgraph_us=subgraph_us,
                                   transition_us=transition_us, inference_us=0.0), transition_memory_efficiency=0.5,
                         tile_m=128, tile_n=128, min_occupancy=0.15)


def by_layer(placed):
    return {l.name: l for k in placed.kernels for l in k.layers}


def test_layer_flops_match_hand_counts():
    placed = place(tiny_net(), 1, "fp16", fusion="none")
    layers = by_layer(placed)
    assert layers["conv1"].flops == 2 * 2048 * 27          # 2 x outputs x (3 in-channels x 3 x 3)
    assert layers["dw"].flops == 2 * 2048 * 9              # depthwise: 1 in-channel x 3 x 3 per output
    assert layers["pw"].flops == 2 * 4096 * 8              # 1x1, 8 in-channels
    assert layers["fc"].flops == 2 * 10 * 16
    assert layers["bn1"].flops == 2 * 2048                 # scale and shift per element
    assert layers["gap"].flops == 4096                     # one add per input element
    assert layers["conv1"].gemm == (256, 8, 27, 1)         # M = 16x16 outputs, N = 8 channels, K = 27
    assert layers["dw"].category == "conv_depthwise" and layers["conv1"].category == "conv"
    assert "flatten" not in layers                         # a view: no kernel


def test_flops_scale_with_batch():
    one = place(tiny_net(), 1, "fp16", fusion="none")
    eight = place(tiny_net(), 8, "fp16", fusion="none")
    assert sum(k.flops for k in eight.kernels) == 8 * sum(k.flops for k in one.kernels)


def test_tensorrt_fusion_groups():
    placed = place(tiny_net(), 1, "fp16", fusion="tensorrt")
    groups = [[l.name for l in k.layers] for k in placed.kernels]
    # conv+BN+ReLU; depthwise conv + ReLU6 + the residual add; 1x1 conv; pool; GEMM
    assert groups == [["conv1", "bn1", "relu1"], ["dw", "relu6", "add"], ["pw"], ["gap"], ["fc"]]
    unfused = place(tiny_net(), 1, "fp16", fusion="none")
    assert len(unfused.kernels) == 9


def test_kernel_tensors_and_bytes():
    placed = place(tiny_net(), 1, "fp16", fusion="tensorrt")
    dw = placed.kernels[1]
    assert dw.inputs == ["r1"] and dw.outputs == ["a"]      # r1 read once (depthwise input and residual)
    assert dw.weight_elems == 72 and dw.const_elems == 2    # 8x1x3x3 kernel; Clip's two bounds
    rates = target_rates(get_target("orin-nx-16gb"), "fp16")
    t = kernel_time(dw, placed.info, rates, flat_set(), "fp16")
    assert t.bytes == (2048 + 2048) * 2 + 72 * 2 + 2 * 2     # FP16 activations in and out, weights, constants


def test_liveness_peak_and_weights():
    placed = place(tiny_net(), 1, "fp16", fusion="tensorrt")
    mem = memory(placed, [])
    # r1 (4096 B) lives until the depthwise kernel; a (4096 B) until the 1x1 conv, which writes p (8192 B):
    # at that step a and p are live -> 12288 B; input x and output y are I/O bindings, counted apart.
    assert mem.activations_peak == 12288
    # FP16 weights: conv1 216, dw 72, pw 128, fc 160 elements x 2 B; constants x 2 B: Clip 2, pw bias 16,
    # fc bias 10; BatchNorm's 32 parameters are folded into conv1.
    assert mem.weights == (216 + 72 + 128 + 160) * 2 + (2 + 16 + 10) * 2
    assert mem.io_bindings == (768 + 10) * 4                # FP32 engine I/O
    assert mem.workspace_lower_bound == 768 * 2             # input converted to FP16 is the largest reformat
    eight = memory(place(tiny_net(), 8, "fp16", fusion="tensorrt"), [])
    assert eight.activations_peak == 8 * 12288 and eight.weights == mem.weights


def test_int8_weights_are_one_byte():
    placed = place(tiny_net(), 1, "int8", fusion="tensorrt")
    assert memory(placed, []).weights == (216 + 72 + 128 + 160) * 1 + (2 + 16 + 10) * 2


def test_dla_placement_and_transitions():
    target = get_target("orin-nx-16gb")
    placed = place(tiny_net(), 1, "fp16", target=target, dla_core=0)
    devices = {k.name: k.device for k in placed.kernels}
    # GlobalAveragePool is imported as a Reduce layer, which the DLA does not run (dla-check rule)
    assert devices == {"conv1": "DLA", "dw": "DLA", "pw": "DLA", "gap": "GPU", "fc": "DLA"}
    assert placed.dla_subgraphs == 2
    eff = flat_set(transition_us=10.0)
    rates = target_rates(target, "fp16", dla=True)
    moves = transitions(placed, rates, eff)
    assert [(m.tensor, m.source, m.dest) for m in moves] == [
        ("x", "GPU", "DLA"), ("p", "DLA", "GPU"), ("g", "GPU", "DLA"), ("y", "DLA", "GPU")]
    assert [m.bytes for m in moves] == [768 * 2, 4096 * 2, 16 * 2, 10 * 2]
    bandwidth = 102.4e9                                     # Orin NX 16GB profile, MAXN: no memory clock cap
    for m in moves:                                         # 10 us + read and write once at half the bandwidth
        assert m.time_s == pytest.approx(10e-6 + 2 * m.bytes / (bandwidth * 0.5), rel=1e-12)
    est = time_placed(placed, rates, eff)
    assert est.subgraph_s == pytest.approx(2 * 40e-6)
    assert est.latency_s == pytest.approx(est.device_s("GPU") + est.device_s("DLA") + est.transitions_s + 80e-6)


def test_roofline_of_one_kernel_by_hand():
    target = get_target("orin-nx-16gb")
    placed = place(tiny_net(), 1, "fp16", fusion="tensorrt")
    pw = placed.kernels[2]
    rates = target_rates(target, "fp16")
    t = kernel_time(pw, placed.info, rates, flat_set(compute=0.5, memory_eff=0.5, kernel_us=3.0), "fp16")
    # Tensor Core FP16 peak 15.05 TFLOPS (profile). Channels 8 -> 16: both multiples of 8 (FP16 alignment).
    # M = 256 outputs, N = 16: two 128x128 tiles on 8 SMs -> occupancy 2/8 = 0.25 (above the 0.15 floor).
    compute = 2 * 4096 * 8 / (15.05e12 * 0.5 * 0.25)
    moved = (2048 + 4096) * 2 + 128 * 2 + 16 * 2             # a in, p out, weights, bias (FP16)
    mem = moved / (102.4e9 * 0.5)
    assert t.shape == pytest.approx(0.25)
    assert t.compute_s == pytest.approx(compute, rel=1e-12)
    assert t.memory_s == pytest.approx(mem, rel=1e-12)
    assert t.time_s == pytest.approx(max(compute, mem) + 3e-6, rel=1e-12)


def test_first_conv_with_three_channels_packs_to_four():
    target = get_target("orin-nx-16gb")
    placed = place(tiny_net(), 32, "int8", fusion="tensorrt")
    rates = target_rates(target, "int8")
    t = kernel_time(placed.kernels[0], placed.info, rates, flat_set(), "int8")
    # C_in 3 of 4 (kCHW4 packing) x C_out 8 of 16 (INT8 alignment of the profile);
    # M = 32 x 256 = 8192 -> 64 tiles of 128 over 8 SMs: whole waves, occupancy 1
    assert t.shape == pytest.approx(3 / 4 * 8 / 16)


def test_throughput_is_batch_over_latency():
    target = get_target("orin-nx-16gb")
    est = time_placed(place(tiny_net(), 4, "fp16"), target_rates(target, "fp16"), flat_set())
    assert est.throughput == pytest.approx(4 / est.latency_s)
    assert math.isclose(est.latency_s, sum(k.time_s for k in est.kernels), rel_tol=1e-12)


def _padded_conv_model():
    """x [N,4,8,8] -> Pad (pads computed at run time: Constant -> Transpose -> Reshape -> Cast) -> Conv 4->8 3x3.

    The exporter pattern of ``F.pad`` with a computed padding: ONNX shape inference cannot see through the
    Transpose, so without constant folding the convolution's output shape is unknown.
    """
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    pads = np.array([[0, 0, 1, 1], [0, 0, 1, 1]], dtype=np.float32)      # begin/end rows, transposed below
    nodes = [
        helper.make_node("Constant", [], ["p0"], value=numpy_helper.from_array(pads.T.copy())),
        helper.make_node("Transpose", ["p0"], ["p1"], perm=[1, 0]),
        helper.make_node("Reshape", ["p1", "flat"], ["p2"]),
        helper.make_node("Cast", ["p2"], ["pads"], to=TensorProto.INT64),
        helper.make_node("Pad", ["x", "pads"], ["xp"]),
        helper.make_node("Conv", ["xp", "w"], ["y"], name="conv", kernel_shape=[3, 3]),
    ]
    inits = [numpy_helper.from_array(np.array([-1], np.int64), "flat"),
             numpy_helper.from_array(np.ones((8, 4, 3, 3), np.float32), "w")]
    graph = helper.make_graph(nodes, "pad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_constant_folding_lets_shapes_through_computed_paddings():
    import onnx

    from jetforge.runtime.estimate.fold import fold_constants

    model = _padded_conv_model()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    unknown = [vi for vi in inferred.graph.value_info if vi.name == "xp"]
    assert not unknown or not unknown[0].type.tensor_type.shape.dim[2].HasField("dim_value")   # the case is real
    folded = fold_constants(inferred)
    assert [n.op_type for n in folded.graph.node] == ["Pad", "Conv"]       # the padding arithmetic became a constant
    placed = place(_padded_conv_model(), 2, "fp16", fusion="none")
    conv = by_layer(placed)["conv"]
    assert conv.flops == 2 * (2 * 8 * 8 * 8) * (4 * 3 * 3)                 # 10x10 padded input -> 8x8 output


def test_eager_views_and_linear_bias():
    """x [N,4,6] -> Transpose -> MatMul W[4,5] -> Add b[5]: a 3-D nn.Linear after a permute, as exported."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Transpose", ["x"], ["xt"], name="perm", perm=[0, 2, 1]),
             helper.make_node("MatMul", ["xt", "w"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "b"], ["y"], name="bias")]
    graph = helper.make_graph(nodes, "lin", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.ones((4, 5), np.float32), "w"),
                               numpy_helper.from_array(np.ones(5, np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    eager = place(model, 2, "fp16", fusion="none")
    assert [[l.name for l in k.layers] for k in eager.kernels] == [["mm", "bias"]]   # permute is a view
    # the GEMM (2 x 60 outputs x K=4) plus one add per output for the bias
    assert eager.kernels[0].inputs == ["x"] and eager.kernels[0].flops == 2 * (2 * 6 * 5) * 4 + 2 * 6 * 5
    trt = place(model, 2, "fp16", fusion="tensorrt")
    assert [[l.name for l in k.layers] for k in trt.kernels] == [["perm"], ["mm", "bias"]]   # a shuffle kernel


def _video_block():
    """x [N,4,4,8,8] -> Conv3d 4->8 3x3x3 pad 1 -> BatchNormalization -> Relu -> MaxPool3d 3x3x3 stride 1 pad 1 = y.

    Per clip: the convolution, BN, ReLU and pool each write 8 x 4 x 8 x 8 = 2048 elements.
    """
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("w", (8, 4, 3, 3, 3)), ("s", (8,)), ("b", (8,)), ("m", (8,)))]
    inits.append(numpy_helper.from_array(np.ones(8, np.float32), "v"))
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3, 3], pads=[1] * 6),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"], name="bn"),
             helper.make_node("Relu", ["n"], ["r"], name="relu"),
             helper.make_node("MaxPool", ["r"], ["y"], name="pool", kernel_shape=[3, 3, 3], pads=[1] * 6)]
    graph = helper.make_graph(nodes, "video", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, 4, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_video_batchnorm_is_its_own_type_and_still_fuses():
    layers = by_layer(place(_video_block(), 2, "fp16", fusion="none"))
    assert layers["bn"].category == "batchnorm_3d"
    assert layers["bn"].flops == 2 * 2 * 2048                             # scale and shift per element, 2 clips
    assert by_layer(place(tiny_net(), 1, "fp16", fusion="none"))["bn1"].category == "batchnorm"   # 2-D unchanged
    fused = place(_video_block(), 1, "fp16", fusion="tensorrt")
    assert [[l.name for l in k.layers] for k in fused.kernels] == [["conv", "bn", "relu"], ["pool"]]


def test_pool_window_reads_count_every_window_element():
    target = get_target("server-hopper-h200")
    rates = target_rates(target, "fp16")
    placed = place(_video_block(), 1, "fp16", fusion="none")
    pool = [k for k in placed.kernels if k.category == "pool"][0]
    assert pool.flops == 2048 * 27                                        # outputs x 3x3x3 window
    plain, windows = flat_set(memory_eff=0.5), flat_set(memory_eff=0.5)
    windows.pool_window_reads = True
    # plain: input 2048 + output 2048 elements; window reads: 27 per output + the output, FP16 (2 bytes)
    assert kernel_time(pool, placed.info, rates, plain, "fp16").bytes == (2048 + 2048) * 2
    t = kernel_time(pool, placed.info, rates, windows, "fp16")
    assert t.bytes == (2048 * 27 + 2048) * 2
    assert t.memory_s == pytest.approx((2048 * 27 + 2048) * 2 / (rates.bandwidth * 0.5), rel=1e-12)
    relu = [k for k in placed.kernels if k.category == "pointwise"][0]   # other types keep input + output
    assert kernel_time(relu, placed.info, rates, windows, "fp16").bytes == (2048 + 2048) * 2



def _dilated_block():
    """x [N,4,8,8] -> depthwise 3x3 dilation 2 pad 2 -> BN -> Relu -> depthwise 3x3 pad 1 -> Conv 4->4 3x3 dilation 2
    pad 2 = y.  Every layer keeps 4 x 8 x 8 = 256 elements per image.
    """
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("wd", (4, 1, 3, 3)), ("wu", (4, 1, 3, 3)), ("wc", (4, 4, 3, 3)), ("s", (4,)), ("b", (4,)),
                          ("m", (4,)))]
    inits.append(numpy_helper.from_array(np.ones(4, np.float32), "v"))
    nodes = [helper.make_node("Conv", ["x", "wd"], ["d"], name="dw_dilated", group=4, kernel_shape=[3, 3],
                              dilations=[2, 2], pads=[2] * 4),
             helper.make_node("BatchNormalization", ["d", "s", "b", "m", "v"], ["n"], name="bn"),
             helper.make_node("Relu", ["n"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "wu"], ["u"], name="dw", group=4, kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Conv", ["u", "wc"], ["y"], name="dense_dilated", kernel_shape=[3, 3], dilations=[2, 2],
                              pads=[2] * 4)]
    graph = helper.make_graph(nodes, "dilated", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_dilated_depthwise_is_its_own_type_with_the_same_costs():
    placed = place(_dilated_block(), 2, "fp16", fusion="none")
    layers = by_layer(placed)
    assert layers["dw_dilated"].category == "conv_depthwise_dilated"
    assert layers["dw"].category == "conv_depthwise"
    assert layers["dense_dilated"].category == "conv"          # only depthwise ones: dense dilated convs run fast
    # dilation spreads the taps, it does not add any: 2 x outputs (2 images x 256) x 9 taps, like the undilated one
    assert layers["dw_dilated"].flops == layers["dw"].flops == 2 * 2 * 256 * 9
    assert layers["dw_dilated"].gemm == layers["dw"].gemm == (2 * 64, 1, 9, 4)
    fused = place(_dilated_block(), 1, "fp16", fusion="tensorrt")   # BN and ReLU still join its epilogue
    assert [[l.name for l in k.layers] for k in fused.kernels] == [["dw_dilated", "bn", "relu"], ["dw"],
                                                                   ["dense_dilated"]]


def test_dilated_depthwise_leaves_tensorrt_estimates_unchanged():
    """The TensorRT set has no data on dilated depthwise convolutions: it must time them like undilated ones
    (GPU and DLA, fit scales included) so the eager-PyTorch type cannot move a Jetson estimate."""
    from jetforge.runtime.estimate.efficiency import efficiency_set

    for fitted in (False, True):
        trt = efficiency_set("tensorrt", fitted=fitted)
        for device in ("GPU", "DLA"):
            dilated, plain = trt.factor(device, "conv_depthwise_dilated"), trt.factor(device, "conv_depthwise")
            assert (dilated.compute, dilated.memory) == (plain.compute, plain.memory)
    rates = target_rates(get_target("orin-nx-16gb"), "int8")
    placed = place(_dilated_block(), 4, "int8", target=get_target("orin-nx-16gb"), fusion="none")
    kernels = {k.name: k for k in placed.kernels}
    trt = efficiency_set("tensorrt")
    dilated = kernel_time(kernels["dw_dilated"], placed.info, rates, trt, "int8")
    plain = kernel_time(kernels["dw"], placed.info, rates, trt, "int8")
    assert dilated.time_s == pytest.approx(plain.time_s, rel=1e-12)   # same shapes, same bytes, same factor


def _attention_block(extra_reader=False):
    """x [N,6,8] -> MatMul 8x24 -> Split q,k,v [N,6,8] -> q x s, (k^T) x s -> MatMul [N,6,6] -> Softmax -> MatMul v = y.

    ``extra_reader``: the softmax output is also a graph output (someone reads the attention weights).
    """
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.ones((8, 24), np.float32), "w"),
             numpy_helper.from_array(np.array(8 ** -0.25, np.float32), "s"),
             numpy_helper.from_array(np.array([8, 8, 8], np.int64), "sizes")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["qkv"], name="in_proj"),
             helper.make_node("Split", ["qkv", "sizes"], ["q", "k", "v"], name="split", axis=2),
             helper.make_node("Mul", ["q", "s"], ["qs"], name="scale_q"),
             helper.make_node("Transpose", ["k"], ["kt"], name="kt", perm=[0, 2, 1]),
             helper.make_node("Mul", ["kt", "s"], ["ks"], name="scale_k"),
             helper.make_node("MatMul", ["qs", "ks"], ["scores"], name="scores"),
             helper.make_node("Softmax", ["scores"], ["p"], name="softmax", axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"], name="context")]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 6, 8])]
    if extra_reader:
        outs.append(helper.make_tensor_value_info("p", TensorProto.FLOAT, ["N", 6, 6]))
    graph = helper.make_graph(nodes, "attn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6, 8])],
                              outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_eager_attention_is_one_kernel_that_never_writes_the_scores():
    placed = place(_attention_block(), 2, "fp16", fusion="none")
    names = [[l.name for l in k.layers] for k in placed.kernels]
    assert names == [["in_proj"], ["scale_q", "scale_k", "scores", "softmax", "context"]]
    attention = placed.kernels[1]
    assert attention.category == "gemm"
    # split and transpose are views of qkv: the kernel reads qkv once and writes y; scores and p stay inside
    assert attention.inputs == ["qkv"] and attention.outputs == ["y"]
    # 2 images: scales 2 x 48 elements each, scores 2 x 36 outputs x K=8 x 2, softmax 5 x 72, context 2 x 48 x K=6 x 2
    assert attention.flops == 96 + 96 + 2 * 36 * 8 * 2 + 5 * 72 + 2 * 48 * 6 * 2
    rates = target_rates(get_target("server-hopper-h200"), "fp16")
    t = kernel_time(attention, placed.info, rates, flat_set(), "fp16")
    assert t.bytes == (2 * 6 * 24 + 2 * 6 * 8 + 2) * 2                    # qkv in, y out, the 2 scales, FP16
    # TensorRT's fusion is not touched; nor is an attention whose weights are read outside it
    trt = place(_attention_block(), 2, "fp16", fusion="tensorrt")
    assert ["softmax"] in [[l.name for l in k.layers] for k in trt.kernels]
    kept = place(_attention_block(extra_reader=True), 2, "fp16", fusion="none")
    assert [[l.name for l in k.layers] for k in kept.kernels] == [["in_proj"], ["scale_q"], ["scale_k"], ["scores"],
                                                                  ["softmax"], ["context"]]


def _constant_of_shape_graph(count, dims):
    """``count`` ConstantOfShape nodes of ``dims`` each, summed into the output (the hostile probe's shape)."""
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.array(dims, dtype=np.int64), "shape")]
    nodes, sums = [], []
    for i in range(count):
        nodes.append(helper.make_node("ConstantOfShape", ["shape"], ["c%d" % i],
                                      value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])))
        nodes.append(helper.make_node("ReduceSum", ["c%d" % i], ["r%d" % i], keepdims=0))
        sums.append("r%d" % i)
    nodes += [helper.make_node("Sum", sums, ["s"]), helper.make_node("Add", ["x", "s"], ["y"])]
    graph = helper.make_graph(nodes, "cos", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_folding_never_builds_a_tensor_it_would_refuse(monkeypatch):
    """1,500 ConstantOfShape nodes declaring 2^40 elements each: none is built (the estimate ran past 120 s)."""
    import onnx

    from jetforge.runtime.estimate import fold

    built = []
    real = fold._evaluate
    monkeypatch.setattr(fold, "_evaluate", lambda node, values, opsets: built.append(node.op_type) or
                        real(node, values, opsets))
    model = onnx.shape_inference.infer_shapes(_constant_of_shape_graph(1500, [1 << 20, 1 << 20]))
    folded = fold.fold_constants(model)
    assert "ConstantOfShape" not in built
    assert sum(n.op_type == "ConstantOfShape" for n in folded.graph.node) == 1500  # left to the engine


def test_folding_still_folds_small_constants_of_shape():
    import onnx

    from jetforge.runtime.estimate import fold

    folded = fold.fold_constants(onnx.shape_inference.infer_shapes(_constant_of_shape_graph(3, [2, 3])))
    assert not any(n.op_type in ("ConstantOfShape", "ReduceSum", "Sum") for n in folded.graph.node)
    value = {i.name: onnx.numpy_helper.to_array(i) for i in folded.graph.initializer}["s"]
    assert float(value) == 18.0  # three 2x3 tensors of ones, summed


@pytest.mark.parametrize("op, inputs, expect", [
    ("ConstantOfShape", {"a": np.array([3, 4], np.int64)}, 12),
    ("Expand", {"a": np.ones((1, 3)), "b": np.array([5, 1], np.int64)}, 15),
    ("Tile", {"a": np.ones((2, 3)), "b": np.array([4, 2], np.int64)}, 48),
    ("Range", {"a": np.array(0.0), "b": np.array(10.0), "c": np.array(3.0)}, 4),
])
def test_predicted_sizes_match_what_the_evaluator_builds(op, inputs, expect):
    from onnx import helper

    from jetforge.runtime.estimate import fold

    node = helper.make_node(op, list(inputs), ["out"])
    assert fold._predicted_elems(node, inputs, {}) == expect
    built = fold._evaluate(node, inputs, [helper.make_opsetid("", 17)])
    assert np.asarray(built[0]).size == expect
