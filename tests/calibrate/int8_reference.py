"""An independent INT8 reference: a small numpy executor for Q/DQ ONNX models with integer arithmetic.

It shares no code with ``jetforge.calibrate.int8sim.simulate`` (which rewrites the graph for ONNX Runtime's
float kernels); it reads the Q/DQ graph and computes, node by node, what TensorRT's explicit
quantization rules say:

* ``QuantizeLinear``: ``saturate(round_half_even(x / s))`` to int8 (zero point 0);
* a ``Conv``/``Gemm``/``MatMul`` whose inputs are ``DequantizeLinear`` outputs: the int8 values are
  multiplied and accumulated in int64 (checked to fit int32, as TensorRT's accumulator), the bias
  is quantized to int32 at scale ``s_x * s_w`` and added, and the sum is converted to float32 and
  multiplied by ``float32(s_x * s_w)``;
* every other op in float32 on dequantized values (``q * s``), global average pooling in float64.

Ops: Conv (2D and 3D; groups, strides, pads, dilations), Gemm, MatMul, Relu, Clip, Add, Mul, Sub, Div,
MaxPool, AveragePool (2D and 3D), GlobalAveragePool, ReduceMean, ReduceSum, Flatten, Reshape, Transpose, Concat, Identity, Constant,
Shape, Gather, Unsqueeze, Squeeze, Softmax.  Enough for the small networks of the tests; an
unknown op raises.

``run(model, x)`` returns the graph outputs and, in ``trace``, every quantized tensor (int8 values
at each QuantizeLinear output) so tests can compare quantize points one by one.
"""

from typing import Dict, List, Optional, Tuple

import numpy as np
import onnx
from onnx import helper, numpy_helper


class Quantized:
    """int8 values with their scale (per tensor, or per channel along ``axis``)."""

    def __init__(self, values: np.ndarray, scale: np.ndarray, axis: Optional[int]) -> None:
        self.values = values
        self.scale = np.asarray(scale, dtype=np.float32)
        self.axis = axis

    def dequantize(self) -> np.ndarray:
        s = self.scale
        if s.size > 1:
            shape = [1] * self.values.ndim
            shape[self.axis] = s.size
            s = s.reshape(shape)
        return (self.values.astype(np.float32) * s).astype(np.float32)


def _attrs(node) -> Dict[str, object]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _quantize(x: np.ndarray, scale: np.ndarray, axis: Optional[int]) -> np.ndarray:
    s = np.asarray(scale, dtype=np.float32)
    if s.size > 1:
        shape = [1] * x.ndim
        shape[axis] = s.size
        s = s.reshape(shape)
    return np.clip(np.rint(np.asarray(x, np.float32) / s), -128, 127).astype(np.int8)


def _pad_nchw(x: np.ndarray, pads: List[int], value=0) -> np.ndarray:
    """Pad the spatial axes (2 and on: H, W or T, H, W) with ONNX's ``pads`` (all begins, then all ends)."""
    n = len(pads) // 2
    width = [(0, 0), (0, 0)] + [(pads[i], pads[i + n]) for i in range(n)]
    return np.pad(x, width, constant_values=value)


def _windows(x: np.ndarray, kernel: Tuple[int, ...], strides, dilations) -> np.ndarray:
    """(N, C, *out, *kernel) views of a padded tensor with any number of spatial axes (2D: NCHW, 3D: NCTHW)."""
    spatial = x.shape[2:]
    out = [(size - d * (k - 1) - 1) // s + 1 for size, k, s, d in zip(spatial, kernel, strides, dilations)]
    st = x.strides
    return np.lib.stride_tricks.as_strided(
        x, tuple(x.shape[:2]) + tuple(out) + tuple(kernel),
        tuple(st[:2]) + tuple(st[2 + i] * strides[i] for i in range(len(kernel)))
        + tuple(st[2 + i] * dilations[i] for i in range(len(kernel))))


def _einsum_spec(rank: int) -> str:
    """``"nc<out><kernel>,mc<kernel>->nm<out>"`` for ``rank`` spatial axes."""
    out, ker = "hwt"[:rank], "ijk"[:rank]
    return "nc%s%s,mc%s->nm%s" % (out, ker, ker, out)


def _grouped_conv(x: np.ndarray, w: np.ndarray, a: Dict[str, object], dtype) -> np.ndarray:
    """``group``-wise convolution of ``x`` (N, C, *spatial) with ``w`` (M, C/group, *kernel) in ``dtype``."""
    rank = w.ndim - 2
    group = int(a.get("group", 1))
    xp = _pad_nchw(x.astype(dtype), list(a.get("pads", [0] * (2 * rank))))
    win = _windows(np.ascontiguousarray(xp), tuple(w.shape[2:]), a.get("strides", [1] * rank),
                   a.get("dilations", [1] * rank))
    cin_g, m = w.shape[1], w.shape[0]
    m_g = m // group
    spec = _einsum_spec(rank)
    return np.concatenate([np.einsum(spec, win[:, g * cin_g:(g + 1) * cin_g], w[g * m_g:(g + 1) * m_g].astype(dtype),
                                     optimize=True) for g in range(group)], axis=1)


def _conv_int(x: np.ndarray, w: np.ndarray, a: Dict[str, object]) -> np.ndarray:
    """Integer convolution (int64) of ``x`` with (M, C/group, *kernel) ``w``: 2D or 3D."""
    return _grouped_conv(x, w, a, np.int64)


def _conv_float(x: np.ndarray, w: np.ndarray, b: Optional[np.ndarray], a: Dict[str, object]) -> np.ndarray:
    y = _grouped_conv(x, w, a, np.float64)
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * (w.ndim - 2))
    return y.astype(np.float32)


def _linear_int(node, xq: Quantized, wq: Quantized, bias: Optional[np.ndarray]) -> np.ndarray:
    """The TensorRT INT8 arithmetic of one quantized Conv/Gemm/MatMul (module doc)."""
    a = _attrs(node)
    s_x = np.float32(xq.scale.reshape(-1)[0])
    s_w = wq.scale.reshape(-1).astype(np.float32)
    if node.op_type == "Conv":
        acc = _conv_int(xq.values, wq.values, a)
        channel_shape = (1, -1) + (1,) * (wq.values.ndim - 2)
    elif node.op_type == "Gemm":
        xa = xq.values.astype(np.int64)
        wa = wq.values.astype(np.int64)
        xa = xa.T if a.get("transA", 0) else xa
        wa = wa.T if a.get("transB", 0) else wa
        acc = xa @ wa
        channel_shape = (1, -1)
        if bias is not None:
            bias = bias.astype(np.float32) * np.float32(a.get("beta", 1.0))
    else:  # MatMul
        acc = np.matmul(xq.values.astype(np.int64), wq.values.astype(np.int64))
        channel_shape = (1, -1)
    rescale = (s_x * s_w).astype(np.float32)
    if node.op_type == "Gemm" and a.get("alpha", 1.0) != 1.0:
        rescale = (rescale * np.float32(a["alpha"])).astype(np.float32)
    if bias is not None:
        bias_scale = np.broadcast_to((s_x * s_w).astype(np.float32), bias.reshape(-1).shape)
        acc = acc + np.rint(bias.reshape(-1).astype(np.float32) / bias_scale).astype(np.int64).reshape(channel_shape)
    assert np.abs(acc).max() < 2 ** 31, "int32 accumulator overflow in %s" % node.name
    r = rescale.reshape(channel_shape) if rescale.size > 1 else rescale.reshape(())
    return (acc.astype(np.float32) * r).astype(np.float32)


def _pool(x: np.ndarray, a: Dict[str, object], kind: str) -> np.ndarray:
    """Max or average pooling over 2 or 3 spatial axes; the average in float64 (ONNX: padding counted only with
    ``count_include_pad``)."""
    kernel = tuple(a["kernel_shape"])
    rank = len(kernel)
    pads = list(a.get("pads", [0] * (2 * rank)))
    if a.get("ceil_mode", 0):
        raise NotImplementedError("the INT8 reference has no ceil_mode pooling")
    strides, dilations = a.get("strides", [1] * rank), a.get("dilations", [1] * rank)
    axes = tuple(range(2 + rank, 2 + 2 * rank))
    xp = _pad_nchw(x, pads, value=-np.inf if kind == "max" else 0.0)
    win = _windows(np.ascontiguousarray(xp), kernel, strides, dilations)
    if kind == "max":
        return win.max(axis=axes).astype(np.float32)
    total = win.astype(np.float64).sum(axis=axes)
    if a.get("count_include_pad", 0) or not any(pads):
        return (total / float(np.prod(kernel))).astype(np.float32)
    ones = _windows(np.ascontiguousarray(_pad_nchw(np.ones((1, 1) + x.shape[2:]), pads)), kernel, strides, dilations)
    return (total / ones.sum(axis=axes)).astype(np.float32)


def run(model, x: np.ndarray, trace: Optional[Dict[str, np.ndarray]] = None) -> List[np.ndarray]:
    """Outputs of the Q/DQ ``model`` on input ``x`` (module doc); int8 tensors go into ``trace``."""
    env: Dict[str, object] = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    env[model.graph.input[0].name] = np.asarray(x, np.float32)

    def flt(name: str) -> np.ndarray:
        v = env[name]
        return v.dequantize() if isinstance(v, Quantized) else v

    for node in model.graph.node:
        a = _attrs(node)
        op, ins = node.op_type, list(node.input)
        out: object
        if op == "Constant":
            out = numpy_helper.to_array(a["value"]) if "value" in a else np.array(a.get("value_float"))
        elif op == "QuantizeLinear":
            scale = env[ins[1]]
            axis = a.get("axis", 1) if np.size(scale) > 1 else None
            out = _quantize(flt(ins[0]), scale, axis)
            if trace is not None and ins[0] not in {i.name for i in model.graph.initializer}:
                trace[node.output[0]] = out
        elif op == "DequantizeLinear":
            scale = env[ins[1]]
            out = Quantized(np.asarray(env[ins[0]]), scale, a.get("axis", 1) if np.size(scale) > 1 else None)
        elif op in ("Conv", "Gemm", "MatMul") and all(isinstance(env.get(t), Quantized) for t in ins[:2]):
            bias = env[ins[2]] if len(ins) > 2 and ins[2] else None
            out = _linear_int(node, env[ins[0]], env[ins[1]], bias)
        elif op == "Conv":
            out = _conv_float(flt(ins[0]), flt(ins[1]), flt(ins[2]) if len(ins) > 2 and ins[2] else None, a)
        elif op == "Gemm":
            xa, wa = flt(ins[0]), flt(ins[1])
            xa = xa.T if a.get("transA", 0) else xa
            wa = wa.T if a.get("transB", 0) else wa
            y = (xa.astype(np.float64) @ wa.astype(np.float64)) * a.get("alpha", 1.0)
            if len(ins) > 2 and ins[2]:
                y = y + a.get("beta", 1.0) * flt(ins[2])
            out = y.astype(np.float32)
        elif op == "MatMul":
            out = np.matmul(flt(ins[0]).astype(np.float64), flt(ins[1]).astype(np.float64)).astype(np.float32)
        elif op == "Relu":
            out = np.maximum(flt(ins[0]), np.float32(0))
        elif op == "Clip":
            lo = flt(ins[1]) if len(ins) > 1 and ins[1] else -np.inf
            hi = flt(ins[2]) if len(ins) > 2 and ins[2] else np.inf
            out = np.clip(flt(ins[0]), lo, hi).astype(np.float32)
        elif op in ("Add", "Mul", "Sub", "Div"):
            fn = {"Add": np.add, "Mul": np.multiply, "Sub": np.subtract, "Div": np.divide}[op]
            out = fn(flt(ins[0]), flt(ins[1])).astype(np.float32)
        elif op == "MaxPool":
            out = _pool(flt(ins[0]), a, "max")
        elif op == "AveragePool":
            out = _pool(flt(ins[0]), a, "avg")
        elif op == "GlobalAveragePool":
            v = flt(ins[0])
            out = v.astype(np.float64).mean(axis=tuple(range(2, v.ndim)), keepdims=True).astype(np.float32)
        elif op in ("ReduceMean", "ReduceSum"):
            axes = a.get("axes") if "axes" in a else ([int(v) for v in env[ins[1]]] if len(ins) > 1 else None)
            fn = np.mean if op == "ReduceMean" else np.sum
            out = fn(flt(ins[0]).astype(np.float64), axis=tuple(axes) if axes is not None else None,
                     keepdims=bool(a.get("keepdims", 1))).astype(np.float32)
        elif op == "Flatten":
            v = flt(ins[0])
            axis = a.get("axis", 1)
            out = v.reshape(int(np.prod(v.shape[:axis])), -1)
        elif op == "Reshape":
            v, shape = flt(ins[0]), [int(s) for s in env[ins[1]]]
            shape = [v.shape[i] if s == 0 else s for i, s in enumerate(shape)]
            out = v.reshape(shape)
        elif op == "Transpose":
            out = np.transpose(flt(ins[0]), a.get("perm"))
        elif op == "Concat":
            out = np.concatenate([flt(t) for t in ins], axis=a["axis"])
        elif op == "Identity":
            out = env[ins[0]]
        elif op == "Shape":
            out = np.array(np.shape(flt(ins[0])), dtype=np.int64)
        elif op == "Gather":
            out = np.take(np.asarray(env[ins[0]]), np.asarray(env[ins[1]]), axis=a.get("axis", 0))
        elif op == "Unsqueeze":
            axes = a.get("axes") if "axes" in a else [int(v) for v in env[ins[1]]]
            out = np.expand_dims(np.asarray(env[ins[0]]), tuple(axes))
        elif op == "Squeeze":
            axes = a.get("axes") if "axes" in a else ([int(v) for v in env[ins[1]]] if len(ins) > 1 else None)
            out = np.squeeze(flt(ins[0]), axis=tuple(axes) if axes is not None else None)
        elif op == "Softmax":
            v = flt(ins[0]).astype(np.float64)
            e = np.exp(v - v.max(axis=a.get("axis", -1), keepdims=True))
            out = (e / e.sum(axis=a.get("axis", -1), keepdims=True)).astype(np.float32)
        else:
            raise NotImplementedError("the INT8 reference has no %s" % op)
        env[node.output[0]] = out
    return [flt(o.name) for o in model.graph.output]


def with_quantized_outputs(model: onnx.ModelProto, names: List[str]) -> onnx.ModelProto:
    """A copy of ``model`` that also outputs the int8 tensors ``names``, so a test can compare a runtime's quantize
    points one by one with ``run(..., trace)`` (the input model is left as it was)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for n in names:
        m.graph.output.append(helper.make_tensor_value_info(n, onnx.TensorProto.INT8, None))
    return m
