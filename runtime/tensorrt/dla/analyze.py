"""Predict which layers of an ONNX model a DLA core runs, before any board is involved.

The ONNX graph is shape-inferred, each node is mapped to the TensorRT layer kind the ONNX
parser creates for it, facts about the layer (kernel, stride, scales, ...) are computed and
every applicable rule of :mod:`jetforge.runtime.tensorrt.dla.rules` is evaluated.  A layer with a
failed ``gpu`` rule is a predicted GPU fallback.  DLA subgraphs (loadables) are counted as
the connected groups of DLA-capable layers that need no GPU work in between, split where
the batch size changes, and compared with the per-core loadable limit.

Decisions worth knowing:

* GlobalAveragePool: the ONNX parser imports it as a Reduce(kAVG) layer, not as pooling
  (``onnx/onnx-tensorrt`` builtin_op_importers.cpp), and DLA-SW lists GlobalAveragePool as
  "not exposed by TRT", so it is predicted on the GPU (rule ``reduce.global_avg``, marked
  uncertain); the suggestion is an explicit AveragePool of the map's size.
* BatchNormalization maps to a Scale layer (TensorRT folds it into a preceding conv).
* Constants, Identity/Dropout and subgraphs whose inputs are all constant (including Shape of
  a static tensor) are folded at build time and create no layer.
* 1-D convolutions are analysed as 2-D (k x 1), as the ONNX parser expands them.
"""

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Union

from jetforge.errors import TargetError
from jetforge.runtime.tensorrt.dla.rules import (GPU, INFO, OP_SUGGESTIONS, UNCERTAIN_KINDS, WARN, Rule, dla_generation,
                                                 rules_for)
from jetforge.runtime.tensorrt.version import TensorRTVersion

log = logging.getLogger(__name__)

DEFAULT_LOADABLES_PER_CORE = 16

# ONNX op -> TensorRT layer kind the ONNX parser creates ("none": no layer, passes its input through)
OP_KINDS: Dict[str, str] = {}
for _ops, _kind in (
    (("Conv",), "convolution"),
    (("ConvTranspose",), "deconvolution"),
    (("MaxPool", "AveragePool"), "pooling"),
    (("GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum", "ReduceProd",
      "ReduceL1", "ReduceL2", "ReduceLogSumExp", "ReduceSumSquare"), "reduce"),
    (("Relu", "Sigmoid", "Tanh", "Clip", "LeakyRelu", "HardSigmoid", "HardSwish", "Elu", "Selu", "Softplus",
      "Softsign", "ThresholdedRelu", "Gelu", "Mish", "Celu"), "activation"),
    (("PRelu",), "prelu"),
    (("Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "Sum", "Mean", "And", "Or", "Xor", "Mod"), "elementwise"),
    (("Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual"), "comparison"),
    (("BatchNormalization",), "scale"),
    (("LRN",), "lrn"),
    (("Concat",), "concatenation"),
    (("Resize", "Upsample"), "resize"),
    (("Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh",
      "Cosh", "Asinh", "Acosh", "Atanh", "Floor", "Ceil", "Erf", "Not", "Sign", "Round"), "unary"),
    (("Softmax",), "softmax"),
    (("Slice", "Split"), "slice"),
    (("Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze"), "shuffle"),
    (("Gemm", "MatMul"), "matmul"),
    (("Gather", "GatherElements", "GatherND"), "gather"),
    (("Identity", "Dropout"), "none"),
    (("Constant",), "constant"),
):
    for _op in _ops:
        OP_KINDS[_op] = _kind

FOLDED = "folded"     # device of a layer TensorRT folds away
DLA = "DLA"
GPU_DEVICE = "GPU"


@dataclass
class Finding:
    """One rule evaluated on one layer that did not simply pass."""

    rule_id: str
    effect: str
    message: str
    suggestion: str
    source: str
    uncertain: bool
    value: Any = None

    def to_dict(self) -> Dict[str, Any]:
        value = sorted(self.value) if isinstance(self.value, (set, frozenset)) else self.value
        return {"rule": self.rule_id, "effect": self.effect, "message": self.message, "suggestion": self.suggestion,
                "source": self.source, "uncertain": self.uncertain, "value": value}


@dataclass
class LayerResult:
    """The prediction for one ONNX node."""

    index: int
    name: str
    onnx_op: str
    kind: str
    device: str                                   # "DLA", "GPU" or "folded"
    findings: List[Finding] = field(default_factory=list)
    flops: int = 0
    output_shape: Optional[List[Optional[int]]] = None
    rules_checked: List[str] = field(default_factory=list)
    uncertain_rules: List[str] = field(default_factory=list)   # uncertain rules the decision rests on
    subgraph: Optional[int] = None
    notes: List[str] = field(default_factory=list)

    @property
    def reasons(self) -> List[Finding]:
        return [f for f in self.findings if f.effect == GPU]

    @property
    def reason(self) -> str:
        return "; ".join(f.message for f in self.reasons)

    @property
    def rule_ids(self) -> List[str]:
        return [f.rule_id for f in self.reasons]

    @property
    def uncertain(self) -> bool:
        return bool(self.uncertain_rules)

    def to_dict(self) -> Dict[str, Any]:
        return {"index": self.index, "name": self.name, "onnx_op": self.onnx_op, "kind": self.kind,
                "device": self.device, "reason": self.reason, "rules": self.rule_ids,
                "findings": [f.to_dict() for f in self.findings], "flops": self.flops,
                "output_shape": self.output_shape, "subgraph": self.subgraph, "uncertain": self.uncertain,
                "uncertain_rules": list(self.uncertain_rules), "notes": list(self.notes)}


@dataclass
class DlaAnalysis:
    """The placement prediction for one model on one DLA generation and TensorRT version."""

    model: str
    target: Optional[str]
    dla_version: int
    tensorrt_version: str
    precision: str
    loadables_per_core: int
    layers: List[LayerResult]
    subgraphs: List[List[str]]
    inputs: Dict[str, List[Optional[int]]]
    patterns: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    @property
    def real_layers(self) -> List[LayerResult]:
        return [l for l in self.layers if l.device != FOLDED]

    @property
    def dla_layers(self) -> List[LayerResult]:
        return [l for l in self.layers if l.device == DLA]

    @property
    def gpu_layers(self) -> List[LayerResult]:
        return [l for l in self.layers if l.device == GPU_DEVICE]

    @property
    def flops_total(self) -> int:
        return sum(l.flops for l in self.real_layers)

    @property
    def flops_dla(self) -> int:
        return sum(l.flops for l in self.dla_layers)

    @property
    def dla_flops_share(self) -> float:
        total = self.flops_total
        return float(self.flops_dla) / total if total else 0.0

    @property
    def num_subgraphs(self) -> int:
        return len(self.subgraphs)

    @property
    def exceeds_loadables(self) -> bool:
        return self.num_subgraphs > self.loadables_per_core

    @property
    def fully_on_dla(self) -> bool:
        return not self.gpu_layers

    @property
    def warnings(self) -> List[Tuple[str, Finding]]:
        return [(l.name, f) for l in self.layers for f in l.findings if f.effect == WARN]

    @property
    def suggestions(self) -> List[str]:
        """One line per distinct fix, most frequent first."""
        counts: Dict[str, List[str]] = {}
        for layer in self.gpu_layers:
            text = OP_SUGGESTIONS.get(layer.onnx_op)
            if text is None:
                text = layer.reasons[0].suggestion if layer.reasons else ""
            if text:
                counts.setdefault("%s: %s" % (layer.onnx_op, text), []).append(layer.name)
        out = ["%s (%d layer%s)" % (text, len(names), "" if len(names) == 1 else "s")
               for text, names in sorted(counts.items(), key=lambda kv: -len(kv[1]))]
        if self.exceeds_loadables:
            out.append("%d DLA subgraphs exceed the %d loadables per core: remove the GPU islands between DLA "
                       "layers (see the fallback list) or build without DLA" % (self.num_subgraphs,
                                                                                 self.loadables_per_core))
        return out

    def strict_failures(self) -> List[str]:
        """What ``--strict`` fails on: any GPU fallback, or more subgraphs than loadables per core."""
        out = ["%s (%s) falls back to the GPU: %s" % (l.name, l.onnx_op, l.reason) for l in self.gpu_layers]
        if self.exceeds_loadables:
            out.append("%d DLA subgraphs exceed %d loadables per core" % (self.num_subgraphs,
                                                                           self.loadables_per_core))
        return out

    def to_dict(self) -> Dict[str, Any]:
        return {
            "model": self.model, "target": self.target, "dla_version": self.dla_version,
            "tensorrt_version": self.tensorrt_version, "precision": self.precision,
            "inputs": self.inputs,
            "summary": {
                "layers": len(self.real_layers), "dla_layers": len(self.dla_layers),
                "gpu_layers": len(self.gpu_layers), "folded": len(self.layers) - len(self.real_layers),
                "dla_subgraphs": self.num_subgraphs, "loadables_per_core": self.loadables_per_core,
                "exceeds_loadables": self.exceeds_loadables, "flops_total": self.flops_total,
                "flops_dla": self.flops_dla, "dla_flops_share": round(self.dla_flops_share, 6),
                "fully_on_dla": self.fully_on_dla,
                "uncertain_layers": sum(1 for l in self.real_layers if l.uncertain),
            },
            "gpu_fallback": [{"name": l.name, "onnx_op": l.onnx_op, "reason": l.reason, "rules": l.rule_ids,
                              "uncertain": l.uncertain} for l in self.gpu_layers],
            "subgraphs": self.subgraphs,
            "suggestions": self.suggestions,
            "patterns": self.patterns,
            "warnings": [{"layer": name, **f.to_dict()} for name, f in self.warnings],
            "notes": self.notes,
            "layers": [l.to_dict() for l in self.layers],
        }


# ------------------------------------------------------------------------------------------------
# graph helpers
# ------------------------------------------------------------------------------------------------
class _Graph:
    """Shapes, constants and producers of an ONNX graph after shape inference."""

    def __init__(self, model: Any) -> None:
        from onnx import numpy_helper

        graph = model.graph
        self.opset = 13
        for imp in model.opset_import:
            if imp.domain in ("", "ai.onnx"):
                self.opset = int(imp.version)
        self.shapes: Dict[str, Optional[List[Optional[int]]]] = {}
        for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
            self.shapes[vi.name] = _dims(vi)
        self.values: Dict[str, Any] = {}
        for init in graph.initializer:
            self.values[init.name] = numpy_helper.to_array(init)
            self.shapes[init.name] = list(self.values[init.name].shape)
        self.constant: Set[str] = set(self.values)
        self.inputs = [vi.name for vi in graph.input if vi.name not in self.constant]
        self.outputs = [vi.name for vi in graph.output]
        for node in graph.node:
            if node.op_type == "Constant":
                for attr in node.attribute:
                    if attr.name == "value":
                        self.values[node.output[0]] = numpy_helper.to_array(attr.t)
                self.constant.add(node.output[0])
            elif node.op_type == "Shape" and self.static(node.input[0]):
                self.constant.update(node.output)
            elif node.op_type != "Constant" and [i for i in node.input if i] and \
                    all(i in self.constant for i in node.input if i):
                self.constant.update(node.output)

    def shape(self, name: str) -> Optional[List[Optional[int]]]:
        return self.shapes.get(name)

    def static(self, name: str) -> bool:
        s = self.shapes.get(name)
        return s is not None and all(isinstance(d, int) and d > 0 for d in s)

    def value(self, name: str) -> Any:
        return self.values.get(name) if name else None


def _dims(vi: Any) -> Optional[List[Optional[int]]]:
    t = vi.type
    if not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return None
    out: List[Optional[int]] = []
    for d in t.tensor_type.shape.dim:
        out.append(int(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else None)
    return out


def _attrs(node: Any) -> Dict[str, Any]:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _as_str(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def _prod(values: Sequence[Optional[int]]) -> int:
    out = 1
    for v in values:
        out *= int(v or 0)
    return out


def _pads(attrs: Mapping[str, Any], in_spatial: Optional[Sequence[Optional[int]]], kernel: Sequence[int],
          strides: Sequence[int], dilations: Sequence[int]) -> List[int]:
    n = len(kernel)
    auto = _as_str(attrs.get("auto_pad", "NOTSET"))
    if auto in ("SAME_UPPER", "SAME_LOWER") and in_spatial and all(in_spatial):
        begin, end = [], []
        for i in range(n):
            size = int(in_spatial[i] or 0)
            out = -(-size // strides[i])
            total = max((out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - size, 0)
            small, big = total // 2, total - total // 2
            begin.append(small if auto == "SAME_UPPER" else big)
            end.append(big if auto == "SAME_UPPER" else small)
        return begin + end
    if auto == "VALID":
        return [0] * (2 * n)
    pads = list(attrs.get("pads", [0] * (2 * n)))
    return [int(p) for p in pads]


# ------------------------------------------------------------------------------------------------
# facts per layer kind
# ------------------------------------------------------------------------------------------------
def _layer_facts(node: Any, kind: str, g: _Graph, precision: str,
                 scales: Optional[Mapping[str, float]]) -> Tuple[Dict[str, Any], int, List[str]]:
    """Facts the rules read, the layer's FLOPs, and notes."""
    attrs = _attrs(node)
    op = node.op_type
    notes: List[str] = []
    facts: Dict[str, Any] = {"kind": kind, "onnx_op": op}
    data_inputs = [i for i in node.input if i and i not in g.constant]
    x = data_inputs[0] if data_inputs else (node.input[0] if node.input else "")
    xs = g.shape(x) if x else None
    ys = g.shape(node.output[0]) if node.output else None
    int8 = precision in ("int8", "best")

    # --- global facts over the layer's non-constant tensors
    tensors = [g.shape(t) for t in data_inputs + [o for o in node.output if o]]
    known = [s for s in tensors if s is not None]
    if known:
        facts["dynamic"] = any(d is None for s in known for d in s)
        if not facts["dynamic"]:
            batches = [_prod(s[:-3]) if len(s) > 3 else 1 for s in known]
            facts["batch"] = max(batches)
            chw = [d for s in known for d in (s[-3:] if len(s) >= 3 else s[1:] if len(s) > 1 else s)]
            facts["max_chw"] = max(chw) if chw else None
    else:
        notes.append("shape unknown after shape inference")
    out_elems = _prod(ys) if ys and all(ys) else 0
    flops = out_elems

    def rank(shape: Optional[List[Optional[int]]]) -> Optional[int]:
        return len(shape) if shape is not None else None

    if kind in ("convolution", "deconvolution"):
        w = g.shape(node.input[1]) if len(node.input) > 1 else None
        kernel = list(attrs.get("kernel_shape") or (w[2:] if w else []))
        n = len(kernel)
        strides = list(attrs.get("strides", [1] * n))
        dilations = list(attrs.get("dilations", [1] * n))
        in_spatial = xs[2:] if xs else None
        pads = _pads(attrs, in_spatial, kernel, strides, dilations)
        groups = int(attrs.get("group", 1))
        if n == 1:  # the ONNX parser expands 1-D convolution to 2-D (k x 1)
            notes.append("1-D %s analysed as 2-D (k x 1), as the ONNX parser expands it" % kind)
            kernel, strides, dilations = kernel + [1], strides + [1], dilations + [1]
            pads = [pads[0], 0, pads[1], 0]
            in_spatial = (list(in_spatial) + [1]) if in_spatial else None
            n = 2
        facts.update(spatial_rank=n, kernel=kernel, stride=strides, dilation=dilations, groups=groups,
                     padding=pads)
        if kind == "convolution":
            c_out = w[0] if w else (ys[1] if ys else None)
            c_in = xs[1] if xs else None
            facts["out_channels"] = c_out
            facts["padding_lt_kernel"] = all(pads[i] < kernel[i % n] for i in range(len(pads))) if kernel else None
            if c_in and c_out and groups > 1:
                facts["int8_group_channels_ok"] = (c_in // groups) % 4 == 0 and (c_out // groups) % 4 == 0
            if c_in and in_spatial and all(in_spatial) and n == 2:
                facts["cbuf_banks"] = cbuf_banks(c_in // groups if groups > 1 else c_in, int(in_spatial[1]),
                                                 kernel[0], kernel[1], dilations[0], int8)
            if w and ys and all(ys):
                flops = 2 * out_elems * _prod(w[1:])
        else:
            c_in = w[0] if w else (xs[1] if xs else None)
            c_out = (w[1] * groups) if w else (ys[1] if ys else None)
            facts["channels"] = [c for c in (c_in, c_out) if c is not None] or None
            squares = []
            if len(kernel) == 2 and kernel[0] == kernel[1]:
                squares.append(kernel[0])
            if len(strides) == 2 and strides[0] == strides[1]:
                squares.append(strides[0])
            facts["square_kernel_or_stride"] = squares
            facts["padding"] = pads + [int(p) for p in attrs.get("output_padding", [])]
            if w and xs and all(xs):
                flops = 2 * _prod(xs) * _prod(w[1:])
    elif kind == "pooling":
        kernel = list(attrs.get("kernel_shape", []))
        n = len(kernel)
        strides = list(attrs.get("strides", [1] * n))
        pads = _pads(attrs, xs[2:] if xs else None, kernel, strides, [1] * n)
        facts.update(spatial_rank=n, kernel=kernel, stride=strides, padding=pads)
        facts["exclusive_padding"] = (op == "AveragePool" and any(pads) and
                                      int(attrs.get("count_include_pad", 0)) == 0)
        flops = out_elems * (_prod(kernel) if kernel else 1)
        if int8 and scales is not None:
            facts["int8_ranges_equal"] = _ranges_equal(scales, [x, node.output[0]])
    elif kind == "activation":
        facts["is_leaky_relu"] = op == "LeakyRelu"
        facts["int8_upgraded"] = int8 and op in ("Sigmoid", "Tanh")
        if op == "Clip":
            lo, hi = _clip_bounds(node, attrs, g)
            facts["clip_min"] = lo
            facts["clip_max"] = hi
    elif kind == "prelu":
        facts["slope_constant"] = len(node.input) > 1 and node.input[1] in g.constant
    elif kind == "elementwise":
        facts["xavier_sub"] = op == "Sub"
        if int8 and scales is not None and len(data_inputs) >= 2:
            facts["int8_ranges_equal"] = _ranges_equal(scales, data_inputs[:2])
    elif kind == "lrn":
        facts["lrn_size"] = int(attrs.get("size", 0))
        facts["int8_upgraded"] = int8
    elif kind == "concatenation":
        axis = int(attrs.get("axis", 1))
        r = rank(ys) or rank(xs)
        if r is not None:
            axis = axis + r if axis < 0 else axis
            facts["concat_channel_axis"] = r >= 3 and axis == r - 3
        inputs = [i for i in node.input if i]
        facts["num_inputs"] = len(inputs)
        spatial = [tuple(g.shape(i)[-2:]) for i in inputs if g.shape(i) is not None and len(g.shape(i)) >= 4]
        if spatial:
            facts["same_spatial"] = len(set(spatial)) == 1
        if int8 and scales is not None:
            facts["int8_ranges_equal"] = _ranges_equal(scales, inputs + [node.output[0]])
    elif kind == "resize":
        facts.update(_resize_facts(node, attrs, g))
        if facts.get("nearest_scales") is not None or facts.get("linear_scales") is not None:
            pass
        flops = out_elems * (4 if facts.get("resize_mode") == "linear" else 1)
    elif kind == "softmax":
        facts["is_softmax"] = True
        r = rank(xs)
        default_axis = -1 if g.opset >= 13 else 1
        axis = int(attrs.get("axis", default_axis))
        if r is not None and xs is not None and all(xs):
            axis = axis + r if axis < 0 else axis
            facts["softmax_axis_ok"] = axis != 0
            others = [d for i, d in enumerate(xs) if i not in (0, axis)]
            limit = 8192 if all(d == 1 for d in others) else 1024
            facts["softmax_size_ok"] = xs[axis] <= limit
        flops = 3 * out_elems
    elif kind == "slice":
        facts["rank"] = rank(xs)
        facts.update(_slice_facts(node, attrs, g, xs))
    elif kind == "shuffle":
        facts["rank"] = rank(xs)
        if xs and ys and xs[0] is not None and ys[0] is not None:
            moved = xs[0] != ys[0]
            if op == "Transpose":
                perm = list(attrs.get("perm", []))
                moved = bool(perm) and perm[0] != 0
            facts["reshapes_batch"] = moved
        flops = 0
    elif kind == "matmul":
        weight = node.input[1] if len(node.input) > 1 else ""
        facts["weights_constant"] = weight in g.constant
        if ys and ys[-1]:
            facts["out_channels"] = ys[-1]
        ws = g.shape(weight)
        if ws and ys and all(ys):
            k = ws[-1] if (op == "Gemm" and int(attrs.get("transB", 0))) else (ws[-2] if len(ws) >= 2 else ws[0])
            flops = 2 * out_elems * int(k or 0)
    elif kind == "comparison":
        facts["precision_int8"] = int8
    return facts, int(flops), notes


def cbuf_banks(c_in: int, w_in: int, k_h: int, k_w: int, dilation_h: int, int8: bool) -> int:
    """Convolution-buffer banks a DLA convolution needs (DG8.4 heuristic; unsupported when > 16)."""
    import math

    bpe = 1 if int8 else 2
    raw = c_in * k_h * k_w * bpe
    rounded = -(-raw // 128) * 128
    wt_banks = int(math.ceil(rounded / 32768.0))
    entries_per_slice = int(math.ceil(math.ceil(c_in * bpe / 32.0) * w_in / 4.0))
    dilated_kh = (k_h - 1) * dilation_h + 1
    min_data_banks = int(math.ceil(float(entries_per_slice * dilated_kh) / 256.0))
    return wt_banks + min_data_banks


def _ranges_equal(scales: Mapping[str, float], names: Sequence[str]) -> Optional[bool]:
    values = [scales.get(n) for n in names]
    if any(v is None for v in values):
        return None
    return max(values) - min(values) <= 1e-6 * max(abs(v) for v in values)


def _clip_bounds(node: Any, attrs: Mapping[str, Any], g: _Graph) -> Tuple[Optional[float], Optional[float]]:
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


def _resize_facts(node: Any, attrs: Mapping[str, Any], g: _Graph) -> Dict[str, Any]:
    facts: Dict[str, Any] = {}
    mode = _as_str(attrs.get("mode", "nearest"))
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
    ctm = _as_str(attrs.get("coordinate_transformation_mode", "half_pixel"))
    if node.op_type == "Upsample" or g.opset < 11:
        ctm = "asymmetric"
    nearest_mode = _as_str(attrs.get("nearest_mode", "round_prefer_floor"))
    if node.op_type == "Upsample" or g.opset < 11:
        nearest_mode = "floor"
    half = ("half_pixel", "pytorch_half_pixel")
    if mode == "nearest":
        facts["resize_combo_ok"] = (ctm == "asymmetric" and nearest_mode == "floor") or \
            (ctm in half and nearest_mode in ("round_prefer_floor", "round_prefer_ceil"))
    elif mode == "linear":
        facts["resize_combo_ok"] = ctm in half
    return facts


def _slice_facts(node: Any, attrs: Mapping[str, Any], g: _Graph, xs: Optional[List[Optional[int]]]) -> Dict[str, Any]:
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


# ------------------------------------------------------------------------------------------------
# the analysis
# ------------------------------------------------------------------------------------------------
def _load_model(model: Any, input_shapes: Optional[Mapping[str, Sequence[int]]]) -> Tuple[Any, str]:
    from jetforge.optional import require

    from jetforge.runtime.onnx_file import check_model_structure, read_onnx

    purpose = "DLA placement analysis (jetforge dla-check)"
    onnx = require("onnx", purpose)
    if isinstance(model, (str, Path)):
        proto = read_onnx(model, purpose=purpose)  # refuses empty, truncated, foreign and hollow files
        name = str(model)
    else:
        proto = onnx.ModelProto()
        proto.CopyFrom(model)
        name = proto.graph.name or "model"
        check_model_structure(proto, "model %s" % name)
    if input_shapes:
        known = {vi.name: vi for vi in proto.graph.input}
        for iname, dims in input_shapes.items():
            if iname not in known:
                from jetforge.errors import UnknownNameError

                raise UnknownNameError("model input", iname, list(known))
            shape = known[iname].type.tensor_type.shape
            while len(shape.dim) < len(dims):
                shape.dim.add()
            while len(shape.dim) > len(dims):
                shape.dim.pop()
            for d, v in zip(shape.dim, dims):
                d.Clear()
                d.dim_value = int(v)
        del proto.graph.value_info[:]
    try:
        proto = onnx.shape_inference.infer_shapes(proto, strict_mode=False, data_prop=True)
    except Exception as err:  # a partially inferred graph still analyses; say so
        log.warning("ONNX shape inference failed (%s); shapes may be unknown", err)
    return proto, name


def analyze_onnx(model: Union[str, Path, Any], target: Any = None, *, dla_version: Any = None,
                 tensorrt_version: Optional[str] = None, precision: str = "fp16",
                 loadables_per_core: Optional[int] = None,
                 input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
                 cache_scales: Optional[Mapping[str, float]] = None,
                 rules: Optional[Sequence[Rule]] = None) -> DlaAnalysis:
    """Predict the DLA placement of every node of ``model`` (a path or an ``onnx.ModelProto``).

    ``target`` (a :class:`jetforge.targets` profile) supplies the DLA generation, the default
    TensorRT version and the loadables-per-core limit; each can be given explicitly instead.
    ``input_shapes`` fixes dynamic inputs (DLA needs static shapes); ``cache_scales`` (tensor ->
    INT8 scale, from a calibration cache) enables the INT8 range-equality checks.
    """
    if precision not in ("fp16", "int8", "best", "fp32"):
        from jetforge.errors import UnknownNameError

        raise UnknownNameError("precision", precision, ["fp16", "int8", "best"])
    target_name = None
    if target is not None:
        target_name = target.name
        if not target.has_dla:
            raise TargetError("target %s has no DLA core" % target.name,
                              hint="choose a DLA target (AGX Orin, Orin NX, AGX Xavier, Xavier NX)")
        if dla_version is None:
            dla_version = target.dla_version
        if tensorrt_version is None and target.default_tensorrt != "any":
            tensorrt_version = target.default_tensorrt
        if loadables_per_core is None:
            loadables_per_core = target.dla_loadables_per_core
    gen = dla_generation(dla_version if dla_version is not None else 2)
    if gen not in (1, 2):
        raise TargetError("unknown DLA version %r" % (dla_version,), hint="use 1 (Xavier) or 2 (Orin)")
    trt_text = tensorrt_version or "10.3.0"
    trt = TensorRTVersion.lenient(trt_text)
    limit = int(loadables_per_core or DEFAULT_LOADABLES_PER_CORE)
    proto, name = _load_model(model, input_shapes)
    g = _Graph(proto)
    notes: List[str] = []
    if precision == "fp32":
        notes.append("DLA runs FP16 or INT8 only: analysed as FP16 (an fp32 build puts every layer on the GPU)")
        precision = "fp16"
    inputs = {i: g.shape(i) or [] for i in g.inputs}
    for iname, dims in inputs.items():
        if any(d is None for d in dims):
            notes.append("input %s has dynamic dims %s: DLA needs static shapes (pass --shape %s=...)"
                         % (iname, ["?" if d is None else d for d in dims], iname))

    layers: List[LayerResult] = []
    for index, node in enumerate(proto.graph.node):
        op = node.op_type
        node_name = node.name or "%s_%d" % (op, index)
        kind = OP_KINDS.get(op, op.lower()) if node.domain in ("", "ai.onnx") else "plugin:" + op
        ys = g.shape(node.output[0]) if node.output else None
        if kind in ("none", "constant") or (node.output and all(o in g.constant for o in node.output if o)):
            layers.append(LayerResult(index, node_name, op, kind, FOLDED, output_shape=ys,
                                      notes=["folded at build time (constant or pass-through)"]))
            continue
        facts, flops, lnotes = _layer_facts(node, kind, g, precision, cache_scales)
        result = LayerResult(index, node_name, op, kind, DLA, flops=flops, output_shape=ys, notes=lnotes)
        for rule in rules_for(kind, gen, trt, precision, rules):
            value = facts.get(rule.fact)
            if value is None:
                continue
            result.rules_checked.append(rule.id)
            if rule.passes(value):
                continue
            finding = Finding(rule.id, rule.effect, rule.explain(value), rule.suggestion, rule.source,
                              rule.uncertain, value)
            result.findings.append(finding)
            if rule.uncertain and rule.effect in (GPU, INFO):
                result.uncertain_rules.append(rule.id)
        if result.reasons:
            result.device = GPU_DEVICE
        elif kind in UNCERTAIN_KINDS:
            # DLA-capable by the rules we have, but the restriction text of this kind was not retrieved
            result.uncertain_rules.append("kind.%s" % kind)
        layers.append(result)

    subgraphs = _subgraphs(proto, g, layers)
    for number, members in enumerate(subgraphs):
        for layer in layers:
            if layer.name in members:
                layer.subgraph = number
    analysis = DlaAnalysis(model=name, target=target_name, dla_version=gen, tensorrt_version=trt_text,
                           precision=precision, loadables_per_core=limit, layers=layers, subgraphs=subgraphs,
                           inputs=inputs, patterns=_patterns(proto, layers), notes=notes)
    return analysis


def _subgraphs(proto: Any, g: _Graph, layers: List[LayerResult]) -> List[List[str]]:
    """Group DLA layers into loadables: connected, same stage (no GPU work in between), same batch."""
    by_index = {l.index: l for l in layers}
    producer: Dict[str, int] = {}
    nodes = list(proto.graph.node)
    # pass-through layers (Identity, Dropout, folded) forward their producer
    for i, node in enumerate(nodes):
        layer = by_index[i]
        if layer.device == FOLDED:
            src = next((producer[t] for t in node.input if t in producer), None)
            for o in node.output:
                if src is not None and layer.kind == "none":
                    producer[o] = src
            continue
        for o in node.output:
            producer[o] = i
    stage: Dict[int, int] = {}      # DLA layer -> stage index
    after: Dict[int, int] = {}      # GPU layer -> earliest DLA stage that may follow it
    parent: Dict[int, int] = {}

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    def batch(layer: LayerResult) -> Optional[int]:
        s = layer.output_shape
        if not s or any(d is None for d in s):
            return None
        return _prod(s[:-3]) if len(s) > 3 else 1

    for i, node in enumerate(nodes):
        layer = by_index[i]
        if layer.device == FOLDED:
            continue
        preds = sorted({producer[t] for t in node.input if t in producer})
        if layer.device == DLA:
            s = 0
            for p in preds:
                s = max(s, stage[p] if by_index[p].device == DLA else after.get(p, 0))
            stage[i] = s
            parent[i] = i
            for p in preds:
                if by_index[p].device == DLA and stage[p] == s and batch(by_index[p]) == batch(layer):
                    parent[find(p)] = find(i)
        else:
            a = 0
            for p in preds:
                a = max(a, stage[p] + 1 if by_index[p].device == DLA else after.get(p, 0))
            after[i] = a
    groups: Dict[int, List[str]] = {}
    for i in sorted(stage):
        groups.setdefault(find(i), []).append(by_index[i].name)
    return sorted(groups.values(), key=lambda names: min(by_index_name(layers, n) for n in names))


def by_index_name(layers: Sequence[LayerResult], name: str) -> int:
    for l in layers:
        if l.name == name:
            return l.index
    return -1


def _patterns(proto: Any, layers: List[LayerResult]) -> List[str]:
    """Recognised activation patterns and what DLA does with them."""
    out: List[str] = []
    nodes = list(proto.graph.node)
    consumers: Dict[str, List[Any]] = {}
    for node in nodes:
        for t in node.input:
            consumers.setdefault(t, []).append(node)
    swish = hsig_mul = 0
    for node in nodes:
        if node.op_type in ("Sigmoid", "HardSigmoid") and node.input:
            for c in consumers.get(node.output[0], []):
                if c.op_type == "Mul" and node.input[0] in c.input:
                    if node.op_type == "Sigmoid":
                        swish += 1
                    else:
                        hsig_mul += 1
    if swish:
        out.append("Swish/SiLU (Sigmoid + Mul) x%d: both run on DLA (kSIGMOID + element-wise kPROD)" % swish)
    if hsig_mul:
        out.append("HardSwish as HardSigmoid + Mul x%d: HardSigmoid falls back to the GPU; write it as "
                   "Clip(x + 3, 0, 6) * (1/6)" % hsig_mul)
    hswish = sum(1 for l in layers if l.onnx_op == "HardSwish")
    if hswish:
        out.append("HardSwish x%d: not a DLA activation; write it as x * Clip(x + 3, 0, 6) * (1/6)" % hswish)
    relu6 = sum(1 for l in layers if l.onnx_op == "Clip" and l.device == DLA)
    if relu6:
        out.append("Clip (ReLU6) x%d: runs on DLA as kCLIP" % relu6)
    return out
