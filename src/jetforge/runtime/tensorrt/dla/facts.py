"""The facts about one layer that the DLA rules read: kernel, stride, padding, channels, scales, batch...

:func:`layer_facts` computes, for one ONNX node mapped to a TensorRT layer kind, the values the rules
of :mod:`.rules` compare with their limits (a rule whose fact is missing is skipped), the layer's FLOPs
and notes.  One function per layer kind; the ONNX semantics they follow are the operator spec's (default
attributes by opset), the TensorRT ONNX parser's mapping (1-D convolution as k x 1) and the documented
DLA conditions the rules cite.
"""

import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from jetforge.runtime.tensorrt.dla.graph import OnnxGraph, as_str, conv_pads, node_attrs, prod

Shape = Optional[List[Optional[int]]]


@dataclass
class NodeView:
    """One node with what every kind's facts need: attributes, data input, shapes, precision, scales."""

    node: Any
    op: str
    attrs: Dict[str, Any]
    g: OnnxGraph
    data_inputs: List[str]
    x: str
    xs: Shape
    ys: Shape
    int8: bool
    scales: Optional[Mapping[str, float]]
    out_elems: int


def _rank(shape: Shape) -> Optional[int]:
    return len(shape) if shape is not None else None


def _view(node: Any, g: OnnxGraph, precision: str, scales: Optional[Mapping[str, float]]) -> NodeView:
    data_inputs = [i for i in node.input if i and i not in g.constant]
    x = data_inputs[0] if data_inputs else (node.input[0] if node.input else "")
    ys = g.shape(node.output[0]) if node.output else None
    return NodeView(node, node.op_type, node_attrs(node), g, data_inputs, x, g.shape(x) if x else None, ys,
                    precision in ("int8", "best"), scales, prod(ys) if ys and all(ys) else 0)


def _global_facts(v: NodeView, facts: Dict[str, Any], notes: List[str]) -> None:
    """Over the layer's non-constant tensors: dynamic dims, batch (dims before C, H, W), largest C/H/W."""
    tensors = [v.g.shape(t) for t in v.data_inputs + [o for o in v.node.output if o]]
    known = [s for s in tensors if s is not None]
    if not known:
        notes.append("shape unknown after shape inference")
        return
    facts["dynamic"] = any(d is None for s in known for d in s)
    if not facts["dynamic"]:
        batches = [prod(s[:-3]) if len(s) > 3 else 1 for s in known]
        facts["batch"] = max(batches)
        chw = [d for s in known for d in (s[-3:] if len(s) >= 3 else s[1:] if len(s) > 1 else s)]
        facts["max_chw"] = max(chw) if chw else None


def _conv_geometry(v: NodeView, kind: str, facts: Dict[str, Any], notes: List[str]) -> Tuple[Any, ...]:
    """Kernel, strides, dilations, pads, groups and input H/W; a 1-D convolution as 2-D (k x 1)."""
    w = v.g.shape(v.node.input[1]) if len(v.node.input) > 1 else None
    kernel = list(v.attrs.get("kernel_shape") or (w[2:] if w else []))
    n = len(kernel)
    strides = list(v.attrs.get("strides", [1] * n))
    dilations = list(v.attrs.get("dilations", [1] * n))
    in_spatial = v.xs[2:] if v.xs else None
    pads = conv_pads(v.attrs, in_spatial, kernel, strides, dilations)
    groups = int(v.attrs.get("group", 1))
    if n == 1:  # the ONNX parser expands 1-D convolution to 2-D (k x 1)
        notes.append("1-D %s analysed as 2-D (k x 1), as the ONNX parser expands it" % kind)
        kernel, strides, dilations = kernel + [1], strides + [1], dilations + [1]
        pads = [pads[0], 0, pads[1], 0]
        in_spatial = (list(in_spatial) + [1]) if in_spatial else None
        n = 2
    facts.update(spatial_rank=n, kernel=kernel, stride=strides, dilation=dilations, groups=groups, padding=pads)
    facts["time_fold"] = time_fold_kind(kernel, strides, pads)
    return w, kernel, strides, dilations, pads, groups, in_spatial, n


def _convolution(v: NodeView, facts: Dict[str, Any], notes: List[str]) -> int:
    w, kernel, _strides, dilations, pads, groups, in_spatial, n = _conv_geometry(v, "convolution", facts, notes)
    c_out = w[0] if w else (v.ys[1] if v.ys else None)
    c_in = v.xs[1] if v.xs else None
    facts["out_channels"] = c_out
    facts["padding_lt_kernel"] = all(pads[i] < kernel[i % n] for i in range(len(pads))) if kernel else None
    if c_in and c_out and groups > 1:
        facts["int8_group_channels_ok"] = (c_in // groups) % 4 == 0 and (c_out // groups) % 4 == 0
    if c_in and in_spatial and all(in_spatial) and n == 2:
        facts["cbuf_banks"] = cbuf_banks(c_in // groups if groups > 1 else c_in, int(in_spatial[1]),
                                         kernel[0], kernel[1], dilations[0], v.int8)
    if w and v.ys and all(v.ys):
        return 2 * v.out_elems * prod(w[1:])
    return v.out_elems


def _deconvolution(v: NodeView, facts: Dict[str, Any], notes: List[str]) -> int:
    w, kernel, strides, _dilations, pads, groups, _in_spatial, _n = _conv_geometry(v, "deconvolution", facts, notes)
    c_in = w[0] if w else (v.xs[1] if v.xs else None)
    c_out = (w[1] * groups) if w else (v.ys[1] if v.ys else None)
    facts["channels"] = [c for c in (c_in, c_out) if c is not None] or None
    squares = []
    if len(kernel) == 2 and kernel[0] == kernel[1]:
        squares.append(kernel[0])
    if len(strides) == 2 and strides[0] == strides[1]:
        squares.append(strides[0])
    facts["square_kernel_or_stride"] = squares
    facts["padding"] = pads + [int(p) for p in v.attrs.get("output_padding", [])]
    if w and v.xs and all(v.xs):
        return 2 * prod(v.xs) * prod(w[1:])
    return v.out_elems


def _pooling(v: NodeView, facts: Dict[str, Any], notes: List[str]) -> int:
    kernel = list(v.attrs.get("kernel_shape", []))
    n = len(kernel)
    strides = list(v.attrs.get("strides", [1] * n))
    pads = conv_pads(v.attrs, v.xs[2:] if v.xs else None, kernel, strides, [1] * n)
    facts.update(spatial_rank=n, kernel=kernel, stride=strides, padding=pads)
    facts["time_fold"] = time_fold_kind(kernel, strides, pads)
    facts["exclusive_padding"] = (v.op == "AveragePool" and any(pads) and
                                  int(v.attrs.get("count_include_pad", 0)) == 0)
    if v.int8 and v.scales is not None:
        facts["int8_ranges_equal"] = ranges_equal(v.scales, [v.x, v.node.output[0]])
    return v.out_elems * (prod(kernel) if kernel else 1)


def _data_rank_facts(v: NodeView, facts: Dict[str, Any]) -> None:
    """Spatial rank of a per-element layer (largest data tensor's rank - 2) and whether time folding covers it.

    DLA runs these layers "2D only": a 5-D (N, C, T, H, W) tensor has three spatial axes.  Such a layer is
    per element, so it is exact on the same data folded to (N*T, C, H, W) (:mod:`.fold_time`).
    """
    ranks = [len(s) for s in (v.g.shape(t) for t in v.data_inputs + [o for o in v.node.output if o]) if s]
    if ranks:
        facts["spatial_rank"] = max(ranks) - 2
        if max(ranks) == 5:
            facts["time_fold"] = "per-frame"


def _activation(v: NodeView, facts: Dict[str, Any], notes: List[str]) -> int:
    _data_rank_facts(v, facts)
    facts["is_leaky_relu"] = v.op == "LeakyRelu"
    facts["int8_upgraded"] = v.int8 and v.op in ("Sigmoid", "Tanh")
    if v.op == "Clip":
        facts["clip_min"], facts["clip_max"] = _clip_bounds(v.node, v.attrs, v.g)
    return v.out_elems


def _prelu(v: NodeView, facts: Dict[str, Any], notes: List[str]) -> int:
    _data_rank_facts(v, facts)
    facts["slope_constant"] = len(v.node.input) > 1 and v.node.input[1] in v.g.constant
    return v.out_elems


def _elementwise(v: NodeView, facts: Dict[str, Any], notes: List[str]) -> int:
    _data_rank_facts(v, facts)
    facts["xavier_sub"] = v.op == "Sub"
    if v.int8 and v.scales is not None and len(v.data_inputs) >= 2:
        facts["int8_ranges_equal"] = ranges_equal(v.scales, v.data_inputs[:2])
    return v.out_elems


def _scale(v: NodeView, facts: Dict[str, Any], notes: List[str]) -> int:
    """BatchNormalization (TensorRT folds it into a preceding convolution, else a Scale layer)."""
    _data_rank_facts(v, facts)
    return 2 * v.out_elems


def _lrn(v: NodeView, facts: Dict[str, Any], notes: List[str]) -> int:
    facts["lrn_size"] = int(v.attrs.get("size", 0))
    facts["int8_upgraded"] = v.int8
    return v.out_elems


def _concatenation(v: NodeView, facts: Dict[str, Any], notes: List[str]) -> int:
    axis = int(v.attrs.get("axis", 1))
    r = _rank(v.ys) or _rank(v.xs)
    if r is not None:
        axis = axis + r if axis < 0 else axis
        facts["concat_channel_axis"] = r >= 3 and axis == r - 3
    inputs = [i for i in v.node.input if i]
    facts["num_inputs"] = len(inputs)
    spatial = [tuple(v.g.shape(i)[-2:]) for i in inputs if v.g.shape(i) is not None and len(v.g.shape(i)) >= 4]
    if spatial:
        facts["same_spatial"] = len(set(spatial)) == 1
    if v.int8 and v.scales is not None:
        facts["int8_ranges_equal"] = ranges_equal(v.scales, inputs + [v.node.output[0]])
    return v.out_elems


def _resize(v: NodeView, facts: Dict[str, Any], notes: List[str]) -> int:
    facts.update(_resize_facts(v.node, v.attrs, v.g))
    return v.out_elems * (4 if facts.get("resize_mode") == "linear" else 1)


def _softmax(v: NodeView, facts: Dict[str, Any], notes: List[str]) -> int:
    facts["is_softmax"] = True
    r = _rank(v.xs)
    default_axis = -1 if v.g.opset >= 13 else 1
    axis = int(v.attrs.get("axis", default_axis))
    if r is not None and v.xs is not None and all(v.xs):
        axis = axis + r if axis < 0 else axis
        facts["softmax_axis_ok"] = axis != 0
        others = [d for i, d in enumerate(v.xs) if i not in (0, axis)]
        limit = 8192 if all(d == 1 for d in others) else 1024
        facts["softmax_size_ok"] = v.xs[axis] <= limit
    return 3 * v.out_elems


def _slice(v: NodeView, facts: Dict[str, Any], notes: List[str]) -> int:
    facts["rank"] = _rank(v.xs)
    facts.update(_slice_facts(v.node, v.attrs, v.g, v.xs))
    return v.out_elems


def _shuffle(v: NodeView, facts: Dict[str, Any], notes: List[str]) -> int:
    facts["rank"] = _rank(v.xs)
    if v.xs and v.ys and v.xs[0] is not None and v.ys[0] is not None:
        moved = v.xs[0] != v.ys[0]
        if v.op == "Transpose":
            perm = list(v.attrs.get("perm", []))
            moved = bool(perm) and perm[0] != 0
        facts["reshapes_batch"] = moved
    return 0


def _matmul(v: NodeView, facts: Dict[str, Any], notes: List[str]) -> int:
    weight = v.node.input[1] if len(v.node.input) > 1 else ""
    facts["weights_constant"] = weight in v.g.constant
    if v.ys and v.ys[-1]:
        facts["out_channels"] = v.ys[-1]
    ws = v.g.shape(weight)
    if ws and v.ys and all(v.ys):
        k = ws[-1] if (v.op == "Gemm" and int(v.attrs.get("transB", 0))) else (ws[-2] if len(ws) >= 2 else ws[0])
        return 2 * v.out_elems * int(k or 0)
    return v.out_elems


def _comparison(v: NodeView, facts: Dict[str, Any], notes: List[str]) -> int:
    facts["precision_int8"] = v.int8
    return v.out_elems


_KIND_FACTS: Dict[str, Callable[[NodeView, Dict[str, Any], List[str]], int]] = {
    "convolution": _convolution, "deconvolution": _deconvolution, "pooling": _pooling, "activation": _activation,
    "prelu": _prelu, "elementwise": _elementwise, "scale": _scale, "lrn": _lrn, "concatenation": _concatenation, "resize": _resize,
    "softmax": _softmax, "slice": _slice, "shuffle": _shuffle, "matmul": _matmul, "comparison": _comparison,
}


def layer_facts(node: Any, kind: str, g: OnnxGraph, precision: str,
                scales: Optional[Mapping[str, float]]) -> Tuple[Dict[str, Any], int, List[str]]:
    """Facts the rules read, the layer's FLOPs, and notes."""
    v = _view(node, g, precision, scales)
    notes: List[str] = []
    facts: Dict[str, Any] = {"kind": kind, "onnx_op": v.op}
    _global_facts(v, facts, notes)
    handler = _KIND_FACTS.get(kind)
    flops = handler(v, facts, notes) if handler is not None else v.out_elems
    return facts, int(flops), notes


def time_fold_kind(kernel: Sequence[int], strides: Sequence[int], pads: Sequence[int]) -> Optional[str]:
    """How a 3-D (T, H, W) window relates to 2-D ones: ``"spatial"`` (1 x kh x kw, time stride 1, no time
    padding: exactly a 2-D window over each of the N*T frames), ``"time-strided"`` (the same on every s-th
    frame), ``"temporal"`` (kt x 1 x 1: mixes frames, no per-frame form), ``"spatiotemporal"`` (both) or
    None (not 3-D)."""
    if len(kernel) != 3 or len(strides) != 3 or len(pads) != 6:
        return None
    if kernel[0] == 1 and pads[0] == 0 and pads[3] == 0:
        return "spatial" if strides[0] == 1 else "time-strided"
    if list(kernel[1:]) == [1, 1]:
        return "temporal"
    return "spatiotemporal"


def cbuf_banks(c_in: int, w_in: int, k_h: int, k_w: int, dilation_h: int, int8: bool) -> int:
    """Convolution-buffer banks a DLA convolution needs (DG8.4 heuristic; unsupported when > 16)."""
    bpe = 1 if int8 else 2
    raw = c_in * k_h * k_w * bpe
    rounded = -(-raw // 128) * 128
    wt_banks = int(math.ceil(rounded / 32768.0))
    entries_per_slice = int(math.ceil(math.ceil(c_in * bpe / 32.0) * w_in / 4.0))
    dilated_kh = (k_h - 1) * dilation_h + 1
    min_data_banks = int(math.ceil(float(entries_per_slice * dilated_kh) / 256.0))
    return wt_banks + min_data_banks


def ranges_equal(scales: Mapping[str, float], names: Sequence[str]) -> Optional[bool]:
    """Whether the INT8 scales of ``names`` are equal (DLA needs that at some layers); None if one is unknown."""
    values = [scales.get(n) for n in names]
    if any(v is None for v in values):
        return None
    return max(values) - min(values) <= 1e-6 * max(abs(v) for v in values)


def _clip_bounds(node: Any, attrs: Mapping[str, Any], g: OnnxGraph) -> Tuple[Optional[float], Optional[float]]:
    """Clip's min and max: attributes before opset 11, constant inputs from 11 (None when not constant)."""
    inf = float("inf")
    if g.opset < 11 or ("min" in attrs or "max" in attrs):
        return float(attrs.get("min", -3.4028234663852886e38)), float(attrs.get("max", 3.4028234663852886e38))
    bounds: List[Optional[float]] = []
    for idx, missing in ((1, -inf), (2, inf)):
        name = node.input[idx] if len(node.input) > idx else ""
        if not name:
            bounds.append(missing)
            continue
        value = g.value(name)
        bounds.append(float(value.reshape(-1)[0]) if value is not None else None)
    return bounds[0], bounds[1]


def _resize_facts(node: Any, attrs: Mapping[str, Any], g: OnnxGraph) -> Dict[str, Any]:
    """Mode, scales (nearest/linear, N and C scales), and whether the coordinate/rounding mode pair is DLA's."""
    facts: Dict[str, Any] = {}
    mode = as_str(attrs.get("mode", "nearest"))
    mode = {"bilinear": "linear", "trilinear": "linear"}.get(mode, mode)
    facts["resize_mode"] = mode
    scales_name, sizes_name = "", ""
    if node.op_type == "Upsample" or g.opset < 11:
        scales_name = node.input[1] if len(node.input) > 1 else ""
    else:
        scales_name = node.input[2] if len(node.input) > 2 else ""
        sizes_name = node.input[3] if len(node.input) > 3 else ""
    scales = g.value(scales_name)
    if scales is not None and scales.size == 0:
        scales = None
    if sizes_name:
        facts["uses_scales"] = False
    elif scales is not None:
        facts["uses_scales"] = True
    if scales is not None:
        values = [float(v) for v in scales.reshape(-1)]
        facts["num_scales"] = len(values)
        facts["nc_scales"] = values[:2]
        hw = values[2:]
        facts["hw_scales_integer"] = all(v.is_integer() for v in hw)
        if mode == "nearest":
            facts["nearest_scales"] = hw
        elif mode == "linear":
            facts["linear_scales"] = hw
    ctm = as_str(attrs.get("coordinate_transformation_mode", "half_pixel"))
    if node.op_type == "Upsample" or g.opset < 11:
        ctm = "asymmetric"
    nearest_mode = as_str(attrs.get("nearest_mode", "round_prefer_floor"))
    if node.op_type == "Upsample" or g.opset < 11:
        nearest_mode = "floor"
    half = ("half_pixel", "pytorch_half_pixel")
    if mode == "nearest":
        facts["resize_combo_ok"] = (ctm == "asymmetric" and nearest_mode == "floor") or \
            (ctm in half and nearest_mode in ("round_prefer_floor", "round_prefer_ceil"))
    elif mode == "linear":
        facts["resize_combo_ok"] = ctm in half
    return facts


def _slice_facts(node: Any, attrs: Mapping[str, Any], g: OnnxGraph,
                 xs: Optional[List[Optional[int]]]) -> Dict[str, Any]:
    """Whether the slice is constant, its steps, and whether it cuts the batch axis (Slice and Split)."""
    facts: Dict[str, Any] = {}
    r = len(xs) if xs is not None else None
    if node.op_type == "Split":
        axis = int(attrs.get("axis", 0))
        split_in = node.input[1] if len(node.input) > 1 else ""
        facts["slice_constant"] = (not split_in) or split_in in g.constant
        facts["slice_steps"] = [1]
        if r is not None:
            facts["slices_batch"] = (axis + r if axis < 0 else axis) == 0
        return facts
    if g.opset < 10:
        starts, ends = list(attrs.get("starts", [])), list(attrs.get("ends", []))
        axes = list(attrs.get("axes", range(len(starts))))
        steps = [1] * len(starts)
        facts["slice_constant"] = True
    else:
        names = list(node.input[1:5])
        facts["slice_constant"] = all((not n) or n in g.constant for n in names)
        vals = [g.value(n) if n else None for n in names] + [None] * (4 - len(names))
        starts = [int(v) for v in vals[0].reshape(-1)] if vals[0] is not None else None
        ends = [int(v) for v in vals[1].reshape(-1)] if vals[1] is not None else None
        axes = [int(v) for v in vals[2].reshape(-1)] if vals[2] is not None else \
            (list(range(len(starts))) if starts is not None and not (len(names) > 2 and names[2]) else None)
        steps = [int(v) for v in vals[3].reshape(-1)] if vals[3] is not None else \
            ([1] * len(starts) if starts is not None and not (len(names) > 3 and names[3]) else None)
    if steps is not None:
        facts["slice_steps"] = steps
    if axes is not None and starts is not None and ends is not None and r is not None:
        touches = False
        for a, s, e in zip(axes, starts, ends):
            a = a + r if a < 0 else a
            if a == 0:
                dim = xs[0] if xs else None
                full_end = e >= (dim or 0) or e >= 2 ** 31 - 1
                touches = touches or s != 0 or not full_end
        facts["slices_batch"] = touches
    return facts
