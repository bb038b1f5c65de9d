"""A tiny ONNX network whose costs are computed by hand in the estimator tests (``tests/runtime/test_estimate*.py``).

    x [N,3,16,16] -> Conv 3->8 3x3 pad 1 (no bias) -> BatchNormalization -> Relu = r1
    r1 -> Conv depthwise 8 3x3 pad 1 (no bias) -> Clip(0, 6) -> Add(r1) = a
    a -> Conv 8->16 1x1 (bias) = p -> GlobalAveragePool = g -> Flatten -> Gemm 16->10 (bias) = y [N,10]

Per image: conv1 writes 8x16x16 = 2048 elements and reads 27 (3x3x3) per output; the depthwise
conv reads 9 per output; the 1x1 conv writes 16x16x16 = 4096 elements and reads 8 per output.
"""

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def tiny_net(batch="N", opset=17):
    rng = np.random.default_rng(0)

    def init(name, shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    inits = [init("w1", (8, 3, 3, 3)), init("bn_s", (8,)), init("bn_b", (8,)), init("bn_m", (8,)),
             numpy_helper.from_array(np.ones(8, np.float32), "bn_v"), init("w2", (8, 1, 3, 3)),
             numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6.0, np.float32), "hi"),
             init("w3", (16, 8, 1, 1)), init("b3", (16,)), init("w4", (10, 16)), init("b4", (10,))]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn_s", "bn_b", "bn_m", "bn_v"], ["bn"], name="bn1"),
        helper.make_node("Relu", ["bn"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["d"], name="dw", kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=8),
        helper.make_node("Clip", ["d", "lo", "hi"], ["dc"], name="relu6"),
        helper.make_node("Add", ["dc", "r1"], ["a"], name="add"),
        helper.make_node("Conv", ["a", "w3", "b3"], ["p"], name="pw", kernel_shape=[1, 1]),
        helper.make_node("GlobalAveragePool", ["p"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "w4", "b4"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(nodes, "tiny",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def save_tiny_net(path, batch="N"):
    import onnx

    onnx.save(tiny_net(batch), str(path))
    return path
