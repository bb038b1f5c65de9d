"""Float reductions between quantize points for the simulated INT8 evaluator (:mod:`jetforge.calibrate.int8sim.simulate`).

Global average pooling, ReduceMean/ReduceSum and non-overlapping AveragePool (2D and 3D) run as
``Cast(float64) -> reduce -> Cast(float32)``: one rounding to float32 at the end, so the summation order of
this CPU's kernel cannot move a value across a float32 (and so a quantization) rounding boundary.  ``gr`` is
int8sim's graph view (``unique``, ``constant``, ``opset``, ``g``, ``inferred_shapes``); the ranks and sizes of
3D tensors come from ONNX shape inference, never assumed.
"""

import logging
from typing import List, Optional

import numpy as np

log = logging.getLogger(__name__)

SIM_SUFFIX = "__jf_sim"


def _attr(node, name: str, default):
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def float64_reduction(gr, node) -> List[object]:
    """A float reduction (global average pooling, ReduceMean/Sum) as Cast(float64) -> reduce -> Cast(float32).

    One rounding to float32 at the end, so the summation order of this CPU's kernel cannot move a
    value across a float32 (and so a quantization) rounding boundary.
    """
    from onnx import TensorProto, helper

    x, out = node.input[0], node.output[0]
    rank = _value_rank(gr, x) if node.op_type == "GlobalAveragePool" else 0
    if node.op_type == "GlobalAveragePool" and not rank:  # pragma: no cover - shape inference failed
        log.warning("%s: the input's rank is unknown; global pooling stays in float32", node.name or out)
        return [node]
    wide = gr.unique(x + SIM_SUFFIX + "_f64")
    reduced = gr.unique(out + SIM_SUFFIX + "_f64")
    nodes = [helper.make_node("Cast", [x], [wide], name=wide, to=TensorProto.DOUBLE)]
    if node.op_type == "GlobalAveragePool":
        axes = list(range(2, rank))  # every spatial (and temporal) axis: (H, W) or (T, H, W)
        if gr.opset >= 18:
            axes_name = gr.constant(reduced + "_axes", np.array(axes, np.int64))
            nodes.append(helper.make_node("ReduceMean", [wide, axes_name],
                                          [reduced], name=reduced, keepdims=1))
        else:
            nodes.append(helper.make_node("ReduceMean", [wide], [reduced], name=reduced, axes=axes, keepdims=1))
    else:
        copy = helper.make_node(node.op_type, [wide] + list(node.input[1:]), [reduced], name=reduced)
        copy.attribute.extend(node.attribute)
        nodes.append(copy)
    nodes.append(helper.make_node("Cast", [reduced], [out], name=node.name or gr.unique(out + "_cast"),
                                  to=TensorProto.FLOAT))
    return nodes


def float64_average_pool(gr, node) -> Optional[List[object]]:
    """A non-overlapping AveragePool (kernel = stride, no padding, sizes divisible: ``AvgPool2d/3d(k)``, an adaptive
    pool to an output that divides its input) as Cast(float64) -> Reshape into windows -> ReduceMean -> Cast(float32).

    ONNX Runtime has no float64 AveragePool; the reshape puts each window on axes of its own, so the mean is
    taken in float64 and rounded once, like global pooling.  Any other AveragePool (overlapping, padded, a
    dynamic spatial size) stays a float32 kernel: None.
    """
    from onnx import TensorProto, helper

    kernel = [int(k) for k in _attr(node, "kernel_shape", [])]
    rank = len(kernel)
    shape = gr.inferred_shapes().get(node.input[0], [])
    if (not kernel or list(_attr(node, "strides", kernel)) != kernel or any(_attr(node, "pads", [0] * 2 * rank))
            or any(d != 1 for d in _attr(node, "dilations", [1] * rank)) or int(_attr(node, "ceil_mode", 0))
            or _attr(node, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET", b"VALID", "VALID")
            or len(shape) != rank + 2 or any(d is None or d % k for d, k in zip(shape[2:], kernel))):
        return None
    x, out = node.input[0], node.output[0]
    split = [0, 0]  # 0: N and C as they are
    for d, k in zip(shape[2:], kernel):
        split += [d // k, k]
    wide = gr.unique(x + SIM_SUFFIX + "_f64")
    windows = gr.unique(out + SIM_SUFFIX + "_windows")
    reduced = gr.unique(out + SIM_SUFFIX + "_f64")
    axes = [3 + 2 * i for i in range(rank)]
    nodes = [helper.make_node("Cast", [x], [wide], name=wide, to=TensorProto.DOUBLE),
             helper.make_node("Reshape", [wide, gr.constant(windows + "_shape", np.array(split, np.int64))],
                              [windows], name=windows)]
    if gr.opset >= 18:
        nodes.append(helper.make_node("ReduceMean", [windows, gr.constant(reduced + "_axes", np.array(axes, np.int64))],
                                      [reduced], name=reduced, keepdims=0))
    else:
        nodes.append(helper.make_node("ReduceMean", [windows], [reduced], name=reduced, axes=axes, keepdims=0))
    nodes.append(helper.make_node("Cast", [reduced], [out], name=node.name or gr.unique(out + "_cast"),
                                  to=TensorProto.FLOAT))
    return nodes


def _value_rank(gr, tensor: str) -> int:
    """The rank of ``tensor``: from the model's value info, else from ONNX shape inference (0 when unknown).

    The exporter records no value info for inner tensors, and a 3D network's global pooling reduces three
    axes, not two, so the rank must be known, never assumed."""
    for vi in list(gr.g.value_info) + list(gr.g.input) + list(gr.g.output):
        if vi.name == tensor and vi.type.tensor_type.HasField("shape"):
            return len(vi.type.tensor_type.shape.dim)
    rank = len(gr.inferred_shapes().get(tensor, []))
    if not rank and len(gr.g.input) == 1 and gr.g.input[0].type.tensor_type.HasField("shape"):
        # shape inference failed (e.g. a model past protobuf's 2 GB): a single-input CNN pools at its input's rank
        rank = len(gr.g.input[0].type.tensor_type.shape.dim)
    return rank


__all__ = ["SIM_SUFFIX", "float64_average_pool", "float64_reduction"]
