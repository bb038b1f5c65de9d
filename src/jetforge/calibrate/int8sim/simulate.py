"""Simulated INT8 arithmetic: a Q/DQ ONNX rewritten so that float kernels compute what TensorRT's rules say.

TensorRT's explicit quantization (symmetric, zero point 0, scale ``amax/127``; per-channel weights,
per-tensor activations) runs a quantized Conv/ConvTranspose/Gemm/MatMul as

    acc[c] = sum_k q_x[k] * q_w[c, k] + q_b[c]          (exact, 32-bit integer accumulation)
    y[c]   = float32(acc[c]) * (s_x * s_w[c])            (back to real values)
    q_y    = saturate(round_half_even(y / s_y))          (only where the next Q node sits)

with the float bias quantized to INT32 at scale ``s_x * s_w[c]`` (``q_b = round(b / (s_x s_w))``).
:func:`simulation_model` turns each such node of a Q/DQ model into that computation *on float
kernels whose result does not depend on the CPU*: the convolution runs on the integer values held
in float32 (``Cast(q_x)`` and pre-quantized integer weights).  Every product of two int8 values is
exact in float32, and every partial sum is an integer; a float32 sum of integers is exact while its
magnitude stays below 2**24, in *any* order.  The rewrite bounds every partial sum statically
(``sum_k |q_w[c, k]| * 128 + |q_b[c]|``) and, where the bound reaches 2**24, splits the reduction
into chunks below it whose exact results are added in float64.  So the accumulator is the exact
integer TensorRT's int32 accumulator holds, whichever SIMD kernel, blocking or thread count ONNX
Runtime picks on this CPU.  ``float32(acc)`` then rounds like the GPU's int32 -> float conversion.

The rest is elementwise and IEEE-exact (one rounding per operation, the same on every CPU):
QuantizeLinear (``x / s``, round half to even, saturate), DequantizeLinear, Relu/Clip, Add, Mul.
Global average pooling and ReduceMean/ReduceSum, float reductions between quantize points, run in
float64 and are rounded once to float32, so its summation order cannot move a value across a rounding boundary either.
What is left CPU-dependent is the float math of layers TensorRT would not run in INT8 (Sigmoid,
Softmax, Exp, Resize, ... : last-bit differences between SIMD kernels), whose effect
``docs/int8_evaluation.md`` measures.

Run the result with ``ORT_DISABLE_ALL`` (:func:`jetforge.calibrate.ortrun.session` does): with graph
optimisations off, ONNX Runtime fuses nothing into its integer kernels (QLinearConv, ...), which is
checked by :func:`jetforge.calibrate.ortrun.executed_ops`.
"""

import logging
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

from jetforge.calibrate.int8sim.pool import SIM_SUFFIX, float64_average_pool, float64_reduction
from jetforge.calibrate.qdq.surgery import unique_name
from jetforge.errors import ModelError
from jetforge.optional import require

log = logging.getLogger(__name__)

SIMULATED_LABEL = "simulated INT8 arithmetic (TensorRT rules); TensorRT not run"
EXACT_LIMIT = float(2 ** 24)  # float32 holds every integer of smaller magnitude exactly
QMIN, QMAX = -128, 127
LINEAR_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
FLOAT64_REDUCTIONS = ("GlobalAveragePool", "ReduceMean", "ReduceSum")
_SUFFIX = SIM_SUFFIX


@dataclass
class SimulationSummary:
    """What :func:`simulation_model` rewrote (for reports and tests)."""

    integer_layers: List[str] = field(default_factory=list)   # quantized linear ops on exact integers
    chunked_layers: List[str] = field(default_factory=list)   # ... whose reduction was split below 2**24
    inexact_layers: List[str] = field(default_factory=list)   # grouped convs past 2**24: float32 sums
    float_layers: List[str] = field(default_factory=list)     # linear ops without Q/DQ inputs (FP16/FP32)
    float64_pools: List[str] = field(default_factory=list)
    quantized_bias: bool = True

    def to_dict(self) -> Dict[str, object]:
        return {"integer_layers": len(self.integer_layers), "chunked_layers": list(self.chunked_layers),
                "inexact_layers": list(self.inexact_layers), "float_layers": len(self.float_layers),
                "float64_pools": len(self.float64_pools), "quantized_bias": self.quantized_bias}


def quantize_values(x: np.ndarray, scale: np.ndarray, axis: Optional[int] = None) -> np.ndarray:
    """ONNX QuantizeLinear with zero point 0 in numpy: ``saturate(round_half_even(x / s))`` as int8."""
    x = np.asarray(x, dtype=np.float32)
    s = np.asarray(scale, dtype=np.float32)
    if s.size > 1:
        shape = [1] * x.ndim
        shape[axis if axis is not None else 0] = s.size
        s = s.reshape(shape)
    return np.clip(np.rint(x / s), QMIN, QMAX).astype(np.int8)


class _Graph:
    """Lookups over a ModelProto being rewritten: producers, constant values, unique names."""

    def __init__(self, model) -> None:
        from onnx import numpy_helper

        self.model = model
        self.g = model.graph
        self.numpy_helper = numpy_helper
        self.inits = {i.name: i for i in self.g.initializer}
        self.consts = {n.output[0]: n for n in self.g.node if n.op_type == "Constant" and n.attribute}
        self.producer = {o: n for n in self.g.node for o in n.output if o}
        self.names = {n.name for n in self.g.node} | set(self.inits) | {o for n in self.g.node for o in n.output}
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
        self._shapes: Optional[Dict[str, List[Optional[int]]]] = None

    def value(self, name: str) -> Optional[np.ndarray]:
        """The constant behind ``name``: an initializer, a Constant node, or an Identity of one (the exporter
        shares equal initializers, e.g. the all-zero biases of BN-folded convolutions, through Identity)."""
        for _ in range(len(self.g.node) + 1):
            if name in self.inits:
                return self.numpy_helper.to_array(self.inits[name])
            node = self.consts.get(name)
            if node is not None and node.attribute[0].name == "value":
                return self.numpy_helper.to_array(node.attribute[0].t)
            node = self.producer.get(name)
            if node is None or node.op_type != "Identity":
                return None
            name = node.input[0]
        return None

    def unique(self, base: str) -> str:
        return unique_name(base, self.names)

    def inferred_shapes(self) -> Dict[str, List[Optional[int]]]:
        """``{tensor: dims}`` (None for a dynamic dim) by ONNX shape inference, computed once on first use: the
        rewrite replaces the node list only at its end, so the graph inferred is the model's own plus unused
        new constants."""
        if self._shapes is None:
            import onnx

            try:
                inferred = onnx.shape_inference.infer_shapes(self.model)
            except Exception as err:  # pragma: no cover - a model ONNX cannot infer: shapes stay unknown
                log.debug("shape inference failed: %s", err)
                inferred = self.model
            self._shapes = {vi.name: [d.dim_value if d.HasField("dim_value") else None
                                      for d in vi.type.tensor_type.shape.dim]
                            for vi in list(inferred.graph.value_info) + list(inferred.graph.input)
                            if vi.type.tensor_type.HasField("shape")}
        return self._shapes

    def constant(self, base: str, array: np.ndarray) -> str:
        name = self.unique(base)
        self.g.initializer.append(self.numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name


@dataclass
class _Operand:
    """A quantized input of a linear op: its int8 source (tensor or constant), scale and axis."""

    int8_tensor: Optional[str]          # a dynamic int8 tensor (output of a QuantizeLinear)
    values: Optional[np.ndarray]        # or the constant int8 values
    scale: np.ndarray
    axis: Optional[int]


def _dq_operand(gr: _Graph, tensor: str) -> Optional[_Operand]:
    """The int8 operand behind ``tensor`` if a DequantizeLinear with constant scale and zero point 0 makes it."""
    dq = gr.producer.get(tensor)
    if dq is None or dq.op_type != "DequantizeLinear" or len(dq.input) < 2:
        return None
    scale = gr.value(dq.input[1])
    zp = gr.value(dq.input[2]) if len(dq.input) > 2 and dq.input[2] else np.zeros(1, np.int8)
    if scale is None or zp is None or zp.any() or zp.dtype not in (np.int8,) or not np.all(scale > 0):
        return None
    axis = next((a.i for a in dq.attribute if a.name == "axis"), 1) if scale.size > 1 else None
    src = dq.input[0]
    const = gr.value(src)
    if const is not None:
        return _Operand(None, const.astype(np.int8), scale.astype(np.float32), axis) if const.dtype == np.int8 else None
    q = gr.producer.get(src)
    if q is None or q.op_type != "QuantizeLinear":
        return None
    q_scale = gr.value(q.input[1])
    q_zp = gr.value(q.input[2]) if len(q.input) > 2 and q.input[2] else np.zeros(1, np.int8)
    if q_scale is None or q_zp is None or q_zp.any() or q_zp.dtype != np.int8:
        return None
    float_const = gr.value(q.input[0])
    if float_const is not None:  # a float weight quantized by its Q node: quantize it here, once
        q_axis = next((a.i for a in q.attribute if a.name == "axis"), 1) if q_scale.size > 1 else None
        return _Operand(None, quantize_values(float_const, q_scale, q_axis), scale.astype(np.float32), axis)
    if q_scale.size != 1 or scale.size != 1 or not np.array_equal(q_scale.reshape(-1), scale.reshape(-1)):
        return None  # activations are per tensor, with one scale for the pair
    return _Operand(src, None, scale.astype(np.float32), None)


def _attr(node, name: str, default):
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


@dataclass
class _Plan:
    """How one quantized linear node becomes integer arithmetic."""

    node: object
    x: _Operand
    w: _Operand
    channel_axis_w: int        # output-channel axis of the (integer) weight
    reduce_axis_w: int         # the axis the chunks split (input channels / K)
    reduce_axis_x: int
    out_axis: int              # where output channels sit in the output (for the scale's shape)
    alpha: float = 1.0
    bias: Optional[np.ndarray] = None


def _plan(gr: _Graph, node) -> Optional[_Plan]:
    if node.op_type not in LINEAR_OPS or len(node.input) < 2:
        return None
    x = _dq_operand(gr, node.input[0])
    w = _dq_operand(gr, node.input[1])
    if x is None or w is None or x.int8_tensor is None or x.scale.size != 1:
        return None
    op = node.op_type
    bias = None
    if op in ("Conv", "ConvTranspose") and len(node.input) > 2 and node.input[2]:
        bias = gr.value(node.input[2])
        if bias is None:
            return None
    if op == "Conv":
        return _Plan(node, x, w, 0, 1, 1, 1, bias=bias)
    if op == "ConvTranspose":
        return _Plan(node, x, w, 1, 0, 1, 1, bias=bias)
    if op == "Gemm":
        trans_b = int(_attr(node, "transB", 0))
        beta = float(_attr(node, "beta", 1.0))
        if len(node.input) > 2 and node.input[2]:
            c = gr.value(node.input[2])
            if c is None or c.size not in (1, (w.values.shape[0] if trans_b else w.values.shape[1])
                                           if w.values is not None else -1):
                return None
            bias = (np.float32(beta) * c.astype(np.float32)).reshape(-1)
        if w.values is None:
            return None
        return _Plan(node, x, w, 0 if trans_b else 1, 1 if trans_b else 0, 0 if int(_attr(node, "transA", 0)) else 1,
                     1, alpha=float(_attr(node, "alpha", 1.0)), bias=bias)
    # MatMul: (..., K) x (K, N); a constant 2-D weight may be per column, a dynamic one is per tensor
    if w.values is not None and w.values.ndim != 2:
        return None
    if w.int8_tensor is not None and w.scale.size != 1:
        return None
    return _Plan(node, x, w, -1, -2, -1, -1)


def _integer_weight_bound(w: np.ndarray, channel_axis: int) -> np.ndarray:
    """Per output channel: ``sum |q_w| * 128``, the largest magnitude any partial sum can reach."""
    a = np.abs(np.moveaxis(w.astype(np.int64), channel_axis, 0)).reshape(w.shape[channel_axis], -1)
    return a.sum(axis=1).astype(np.float64) * 128.0


def _chunks(w: np.ndarray, channel_axis: int, reduce_axis: int, limit: float) -> List[Tuple[int, int]]:
    """Contiguous ranges of ``reduce_axis`` whose per-channel bound stays below ``limit``."""
    moved = np.abs(np.moveaxis(w.astype(np.int64), (channel_axis, reduce_axis), (0, 1)))
    per_slice = moved.reshape(moved.shape[0], moved.shape[1], -1).sum(axis=2).astype(np.float64) * 128.0
    ranges: List[Tuple[int, int]] = []
    start, running = 0, np.zeros(per_slice.shape[0])
    for k in range(per_slice.shape[1]):
        if k > start and (running + per_slice[:, k]).max() >= limit:
            ranges.append((start, k))
            start, running = k, np.zeros(per_slice.shape[0])
        running = running + per_slice[:, k]
    ranges.append((start, per_slice.shape[1]))
    return ranges


def simulation_model(qdq_model, quantize_bias: bool = True, summary: Optional[SimulationSummary] = None,
                     exact_limit: float = EXACT_LIMIT):
    """A copy of ``qdq_model`` whose quantized linear ops compute TensorRT's INT8 arithmetic exactly (module doc).

    ``quantize_bias=False`` keeps the bias in float (added after the rescale) instead of INT32 at
    ``s_x * s_w``: the difference is what ``docs/int8_evaluation.md`` reports for bias handling.
    ``exact_limit`` is the bound below which one float32 reduction is exact (2**24); tests lower it
    to exercise the chunked path on small layers.
    """
    onnx = require("onnx", "simulated INT8 evaluation")
    m = onnx.ModelProto()
    m.CopyFrom(qdq_model)
    summary = summary if summary is not None else SimulationSummary()
    summary.quantized_bias = bool(quantize_bias)
    gr = _Graph(m)
    new_nodes: List[object] = []
    casts: Dict[str, str] = {}
    for index, node in enumerate(list(m.graph.node)):
        plan = _plan(gr, node) if node.op_type in LINEAR_OPS else None
        if plan is None:
            if node.op_type in LINEAR_OPS:
                summary.float_layers.append(node.name or "%s_%d" % (node.op_type, index))
            pooled = float64_average_pool(gr, node) if node.op_type == "AveragePool" else None
            if pooled is not None:
                new_nodes.extend(pooled)
                summary.float64_pools.append(node.name or "%s_%d" % (node.op_type, index))
            elif node.op_type in FLOAT64_REDUCTIONS:
                new_nodes.extend(float64_reduction(gr, node))
                summary.float64_pools.append(node.name or "%s_%d" % (node.op_type, index))
            else:
                new_nodes.append(node)
            continue
        new_nodes.extend(_integer_node(gr, plan, casts, quantize_bias, summary,
                                       node.name or "%s_%d" % (node.op_type, index), exact_limit))
    del m.graph.node[:]
    m.graph.node.extend(new_nodes)
    _drop_unused_initializers(m)
    return m


def _int_tensor(gr: _Graph, operand: _Operand, casts: Dict[str, str], nodes: List[object]) -> str:
    """The operand's integer values as a float32 tensor (one Cast per int8 tensor)."""
    from onnx import TensorProto, helper

    if operand.int8_tensor in casts:
        return casts[operand.int8_tensor]
    out = gr.unique(operand.int8_tensor + _SUFFIX + "_int")
    nodes.append(helper.make_node("Cast", [operand.int8_tensor], [out], name=out, to=TensorProto.FLOAT))
    casts[operand.int8_tensor] = out
    return out


def _integer_node(gr: _Graph, plan: _Plan, casts: Dict[str, str], quantize_bias: bool,
                  summary: SimulationSummary, name: str, limit: float = EXACT_LIMIT) -> List[object]:
    from onnx import helper

    node = plan.node
    nodes: List[object] = []
    x_int = _int_tensor(gr, plan.x, casts, nodes)
    s_x = np.float32(plan.x.scale.reshape(-1)[0])
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name not in ("alpha", "beta")}
    dynamic_w = plan.w.int8_tensor is not None
    if dynamic_w:
        w_int = _int_tensor(gr, plan.w, casts, nodes)
        s_w = plan.w.scale.reshape(-1).astype(np.float32)
    else:
        w_vals = plan.w.values
        s_w = plan.w.scale.reshape(-1).astype(np.float32)
        bound = _integer_weight_bound(w_vals, plan.channel_axis_w)
    # the rescale factor s_x * s_w per output channel, in float32 as the engine holds it
    rescale = (s_x * s_w).astype(np.float32)
    if plan.alpha != 1.0:
        rescale = (rescale * np.float32(plan.alpha)).astype(np.float32)
    bias_int = None
    if plan.bias is not None and quantize_bias:
        bias_scale = np.broadcast_to(s_x * s_w, plan.bias.reshape(-1).shape).astype(np.float32)
        bias_int = np.clip(np.rint(plan.bias.reshape(-1).astype(np.float32) / bias_scale),
                           -2.0 ** 31, 2.0 ** 31 - 1).astype(np.float64)
    out = node.output[0]
    acc = gr.unique(out + _SUFFIX + "_acc")
    if dynamic_w:
        k = _reduce_len(gr, node, plan)
        limit_ok = k is not None and k * 128.0 * 128.0 < limit
        if not limit_ok:
            summary.inexact_layers.append(name)
        nodes.append(helper.make_node("MatMul", [x_int, w_int], [acc], name=acc))
    else:
        worst = float(bound.max()) + (float(np.abs(bias_int).max()) if bias_int is not None else 0.0)
        groups = int(attrs.get("group", 1))
        if worst < limit:
            w_name = gr.constant(name + _SUFFIX + "_qweight", w_vals.astype(np.float32))
            inputs = [x_int, w_name]
            if bias_int is not None and node.op_type in ("Conv", "ConvTranspose", "Gemm"):
                inputs.append(gr.constant(name + _SUFFIX + "_qbias", bias_int.astype(np.float32)))
                bias_done = True
            else:
                bias_done = False
            kw = dict(attrs)
            nodes.append(helper.make_node(node.op_type, inputs, [acc], name=acc, **kw))
            if bias_int is not None and not bias_done:
                biased = gr.unique(out + _SUFFIX + "_accb")
                nodes.append(helper.make_node("Add", [acc, gr.constant(name + _SUFFIX + "_qbias",
                                                                          bias_int.astype(np.float32))],
                                              [biased], name=biased))
                acc = biased
        elif groups != 1 or float(bound.max()) < limit:
            # The products' sums fit 2**24 and only the INT32 bias pushes past it (a channel whose tiny weight
            # scale makes q_b huge, as in EfficientNet-Lite0's depthwise convs): the conv without bias is exact,
            # the bias is added in float64 and rounded once. A grouped conv whose products alone pass 2**24
            # cannot be split into chunks here: it runs in float32 sums, said so.
            exact = float(bound.max()) < limit
            if not exact:
                summary.inexact_layers.append(name)
                log.warning("%s: grouped %s with partial sums past 2**24 runs in float32 sums (not CPU-exact)",
                            name, node.op_type)
            w_name = gr.constant(name + _SUFFIX + "_qweight", w_vals.astype(np.float32))
            nodes.append(helper.make_node(node.op_type, [x_int, w_name], [acc], name=acc, **attrs))
            if bias_int is not None:
                acc = _add_bias_float64(gr, plan, node, acc, bias_int, nodes)
        else:
            summary.chunked_layers.append(name)
            acc = _chunked(gr, plan, x_int, w_vals, attrs, bias_int, acc, nodes, limit)
    summary.integer_layers.append(name)
    scale_name = gr.constant(name + _SUFFIX + "_rescale", _channel_shape(rescale, plan, node, gr))
    scaled = out if (plan.bias is None or quantize_bias) else gr.unique(out + _SUFFIX + "_scaled")
    nodes.append(helper.make_node("Mul", [acc, scale_name], [scaled], name=gr.unique(name + _SUFFIX + "_rescale")))
    if plan.bias is not None and not quantize_bias:
        b = plan.bias.reshape(-1).astype(np.float32)
        nodes.append(helper.make_node("Add", [scaled, gr.constant(name + _SUFFIX + "_fbias",
                                                                  _channel_shape(b, plan, node, gr))],
                                      [out], name=gr.unique(name + _SUFFIX + "_bias")))
    return nodes


def _add_bias_float64(gr: _Graph, plan: _Plan, node, acc: str, bias_int: np.ndarray, nodes: List[object]) -> str:
    """``acc + q_b`` with the INT32 bias shaped per output channel, summed in float64 and rounded once to float32
    (TensorRT adds it to the int32 accumulator, then converts: one rounding)."""
    from onnx import TensorProto, helper

    wide = gr.unique(acc + "_f64")
    nodes.append(helper.make_node("Cast", [acc], [wide], name=wide, to=TensorProto.DOUBLE))
    biased = _float64_bias_add(gr, plan, node, acc, wide, bias_int, nodes)
    out = gr.unique(acc + "_b")
    nodes.append(helper.make_node("Cast", [biased], [out], name=out, to=TensorProto.FLOAT))
    return out


def _float64_bias_add(gr: _Graph, plan: _Plan, node, acc: str, wide: str, bias_int: np.ndarray,
                      nodes: List[object]) -> str:
    """``wide + q_b`` for a float64 accumulator ``wide``, the bias shaped per output channel."""
    from onnx import helper

    b = bias_int.astype(np.float64)
    b = b.reshape(_channel_shape(b, plan, node, gr).shape)
    biased = gr.unique(acc + "_f64b")
    nodes.append(helper.make_node("Add", [wide, gr.constant(acc + "_qbias64", b)], [biased], name=biased))
    return biased


def _reduce_len(gr: _Graph, node, plan: _Plan) -> Optional[int]:
    """K of a MatMul between two dynamic tensors, from the value info (None when unknown)."""
    for vi in list(gr.g.value_info) + list(gr.g.input):
        if vi.name == plan.w.int8_tensor or vi.name == node.input[1]:
            dims = vi.type.tensor_type.shape.dim
            if len(dims) >= 2 and dims[-2].dim_value:
                return int(dims[-2].dim_value)
    return None


def _channel_shape(values: np.ndarray, plan: _Plan, node, gr: Optional[_Graph] = None) -> np.ndarray:
    """Per-channel values shaped to broadcast over the op's output (channels at axis 1 or last)."""
    v = np.asarray(values, dtype=np.float32).reshape(-1)
    if v.size == 1 or plan.out_axis == -1 or node.op_type in ("Gemm", "MatMul"):
        return v if v.size > 1 else v.reshape(())
    rank = plan.w.values.ndim if plan.w.values is not None else 4  # a conv's output has its weight's rank
    shape = [1] * rank
    shape[1] = v.size
    return v.reshape(shape)


def _chunked(gr: _Graph, plan: _Plan, x_int: str, w_vals: np.ndarray, attrs: Dict[str, object],
             bias_int: Optional[np.ndarray], acc: str, nodes: List[object], limit: float = EXACT_LIMIT) -> str:
    """Split the reduction below 2**24 per chunk, add the exact chunks in float64, round once to float32."""
    from onnx import TensorProto, helper

    node = plan.node
    ranges = _chunks(w_vals, plan.channel_axis_w, plan.reduce_axis_w, limit)
    parts: List[str] = []
    x_axis = plan.reduce_axis_x if plan.reduce_axis_x >= 0 else -1
    for j, (a, b) in enumerate(ranges):
        base = "%s_c%d" % (acc, j)
        xs = gr.unique(base + "_x")
        nodes.append(helper.make_node("Slice", [x_int, gr.constant(base + "_s", np.array([a], np.int64)),
                                                gr.constant(base + "_e", np.array([b], np.int64)),
                                                gr.constant(base + "_a", np.array([x_axis], np.int64))],
                                      [xs], name=xs))
        w_part = np.take(w_vals, np.arange(a, b), axis=plan.reduce_axis_w).astype(np.float32)
        part = gr.unique(base)
        nodes.append(helper.make_node(node.op_type, [xs, gr.constant(base + "_w", w_part)], [part], name=part,
                                      **attrs))
        wide = gr.unique(base + "_f64")
        nodes.append(helper.make_node("Cast", [part], [wide], name=wide, to=TensorProto.DOUBLE))
        parts.append(wide)
    total = gr.unique(acc + "_f64")
    nodes.append(helper.make_node("Sum", parts, [total], name=total))
    if bias_int is not None:
        total = _float64_bias_add(gr, plan, node, acc, total, bias_int, nodes)
    nodes.append(helper.make_node("Cast", [total], [acc], name=acc, to=TensorProto.FLOAT))
    return acc


def _drop_unused_initializers(m) -> None:
    used = {i for n in m.graph.node for i in n.input} | {o.name for o in m.graph.output}
    keep = [i for i in m.graph.initializer if i.name in used]
    if len(keep) != len(m.graph.initializer):
        del m.graph.initializer[:]
        m.graph.initializer.extend(keep)


def check_simulation_model(model) -> None:
    """Refuse a simulation model ONNX's checker rejects (a bug in the rewrite, not the user's model)."""
    onnx = require("onnx", "simulated INT8 evaluation")
    try:
        onnx.checker.check_model(model)
    except Exception as err:  # pragma: no cover - a bug in the rewrite
        raise ModelError("the simulated INT8 model fails the ONNX checker: %s" % err) from err


__all__ = ["EXACT_LIMIT", "SIMULATED_LABEL", "SimulationSummary", "check_simulation_model", "quantize_values",
           "simulation_model"]
