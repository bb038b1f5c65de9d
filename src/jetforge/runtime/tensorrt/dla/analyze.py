"""Predict which layers of an ONNX model a DLA core runs, before any board is involved.

The ONNX graph is shape-inferred, each node is mapped to the TensorRT layer kind the ONNX
parser creates for it, facts about the layer (kernel, stride, scales, ...) are computed and
every applicable rule of :mod:`jetforge.runtime.tensorrt.dla.rules` is evaluated.  A layer with a
failed ``gpu`` rule is a predicted GPU fallback.  DLA subgraphs (loadables) are counted as
the connected groups of DLA-capable layers that need no GPU work in between, split where
the batch size changes, and compared with the per-core loadable limit.

The graph reading is :mod:`.graph`'s, the facts per layer kind :mod:`.facts`'s, the loadable count
:mod:`.subgraphs`'.  Decisions worth knowing:

* GlobalAveragePool: the ONNX parser imports it as a Reduce(kAVG) layer, not as pooling
  (``onnx/onnx-tensorrt`` builtin_op_importers.cpp), and DLA-SW lists GlobalAveragePool as
  "not exposed by TRT", so it is predicted on the GPU (rule ``reduce.global_avg``, marked
  uncertain); the suggestion is an explicit AveragePool of the map's size.
* BatchNormalization maps to a Scale layer (TensorRT folds it into a preceding conv).
* Constants, Identity/Dropout and subgraphs whose inputs are all constant (including Shape of
  a static tensor) are folded at build time and create no layer.
* 1-D convolutions are analysed as 2-D (k x 1), as the ONNX parser expands them.
* Clip models: DLA layers are "2D only", so every layer on a 5-D (N, C, T, H, W) tensor is predicted on the
  GPU (rules ``*.spatial_2d``); each 3-D window is classified (``time_fold``: a 1 x k x k window is exactly a 2-D
  one over the N*T frames, see :mod:`.fold_time`) so the suggestion says what DLA can run instead.
* Every tensor that crosses between GPU and DLA is listed with its bytes at the analysed shapes
  (:mod:`.transitions`): the cost the placement implies besides the fallback layers themselves.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from jetforge.errors import TargetError, UnknownNameError
from jetforge.runtime.tensorrt.dla.facts import cbuf_banks, layer_facts  # noqa: F401  (cbuf_banks: public here)
from jetforge.runtime.tensorrt.dla.graph import OnnxGraph, load_model
from jetforge.runtime.tensorrt.dla.advice import OP_SUGGESTIONS, TIME_FOLD_SUGGESTIONS
from jetforge.runtime.tensorrt.dla.rules import GPU, INFO, UNCERTAIN_KINDS, WARN, Rule, dla_generation, rules_for
from jetforge.runtime.tensorrt.dla.subgraphs import DLA, FOLDED, GPU_DEVICE, activation_patterns, dla_subgraphs
from jetforge.runtime.tensorrt.dla.transitions import Transition, find_transitions, summarize
from jetforge.runtime.tensorrt.version import TensorRTVersion

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
    time_fold: Optional[str] = None               # "spatial", "temporal", "spatiotemporal", "per-frame" (5-D)

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
                "uncertain_rules": list(self.uncertain_rules), "notes": list(self.notes), "time_fold": self.time_fold}


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
    transitions: List[Transition] = field(default_factory=list)

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
            if layer.time_fold and any(r.endswith("spatial_2d") for r in layer.rule_ids):
                text = TIME_FOLD_SUGGESTIONS[layer.time_fold]
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
                "transitions": summarize(self.transitions),
            },
            "gpu_fallback": [{"name": l.name, "onnx_op": l.onnx_op, "reason": l.reason, "rules": l.rule_ids,
                              "uncertain": l.uncertain} for l in self.gpu_layers],
            "subgraphs": self.subgraphs,
            "transitions": [t.to_dict() for t in self.transitions],
            "suggestions": self.suggestions,
            "patterns": self.patterns,
            "warnings": [{"layer": name, **f.to_dict()} for name, f in self.warnings],
            "notes": self.notes,
            "layers": [l.to_dict() for l in self.layers],
        }


def _settings(target: Any, dla_version: Any, tensorrt_version: Optional[str],
              loadables_per_core: Optional[int]) -> Tuple[Optional[str], int, str, int]:
    """(target name, DLA generation, TensorRT version text, loadables per core) from the target and overrides."""
    target_name = None
    if target is not None:
        target_name = target.name
        if not target.has_dla:
            raise TargetError("target %s has no DLA core" % target.name,
                              hint="choose a DLA target (AGX Orin, Orin NX, AGX Xavier, Xavier NX)")
        if dla_version is None:
            dla_version = target.dla_version
        if tensorrt_version is not None and not target.accepts_tensorrt(tensorrt_version):
            raise TargetError("TensorRT %s does not ship for target %s (its JetPack releases ship %s)"
                              % (tensorrt_version, target.name, ", ".join(target.tensorrt_versions)),
                              hint="choose one of %s, or omit --tensorrt to use %s"
                                   % (", ".join(target.tensorrt_versions), target.default_tensorrt))
        if tensorrt_version is None and target.default_tensorrt != "any":
            tensorrt_version = target.default_tensorrt
        if loadables_per_core is None:
            loadables_per_core = target.dla_loadables_per_core
    gen = dla_generation(dla_version if dla_version is not None else 2)
    if gen not in (1, 2):
        raise TargetError("unknown DLA version %r" % (dla_version,), hint="use 1 (Xavier) or 2 (Orin)")
    return target_name, gen, tensorrt_version or "10.3.0", int(loadables_per_core or DEFAULT_LOADABLES_PER_CORE)


def predict_layer(index: int, node: Any, g: OnnxGraph, gen: int, trt: TensorRTVersion, precision: str,
                  scales: Optional[Mapping[str, float]], rules: Optional[Sequence[Rule]]) -> LayerResult:
    """Where one node runs: folded away, on DLA, or on the GPU because a ``gpu`` rule failed."""
    op = node.op_type
    node_name = node.name or "%s_%d" % (op, index)
    kind = OP_KINDS.get(op, op.lower()) if node.domain in ("", "ai.onnx") else "plugin:" + op
    ys = g.shape(node.output[0]) if node.output else None
    if kind in ("none", "constant") or (node.output and all(o in g.constant for o in node.output if o)):
        return LayerResult(index, node_name, op, kind, FOLDED, output_shape=ys,
                           notes=["folded at build time (constant or pass-through)"])
    facts, flops, lnotes = layer_facts(node, kind, g, precision, scales)
    result = LayerResult(index, node_name, op, kind, DLA, flops=flops, output_shape=ys, notes=lnotes,
                         time_fold=facts.get("time_fold"))
    for rule in rules_for(kind, gen, trt, precision, rules):
        value = facts.get(rule.fact)
        if value is None:
            continue
        result.rules_checked.append(rule.id)
        if rule.passes(value):
            continue
        result.findings.append(Finding(rule.id, rule.effect, rule.explain(value), rule.suggestion, rule.source,
                                       rule.uncertain, value))
        if rule.uncertain and rule.effect in (GPU, INFO):
            result.uncertain_rules.append(rule.id)
    if result.reasons:
        result.device = GPU_DEVICE
    elif kind in UNCERTAIN_KINDS:
        # DLA-capable by the rules we have, but the restriction text of this kind was not retrieved
        result.uncertain_rules.append("kind.%s" % kind)
    return result


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
        raise UnknownNameError("precision", precision, ["fp16", "int8", "best"])
    target_name, gen, trt_text, limit = _settings(target, dla_version, tensorrt_version, loadables_per_core)
    trt = TensorRTVersion.lenient(trt_text)
    proto, name = load_model(model, input_shapes)
    g = OnnxGraph(proto)
    notes: List[str] = []
    if precision == "fp32":
        notes.append("DLA runs FP16 or INT8 only: analysed as FP16 (an fp32 build puts every layer on the GPU)")
        precision = "fp16"
    inputs = {i: g.shape(i) or [] for i in g.inputs}
    for iname, dims in inputs.items():
        if any(d is None for d in dims):
            notes.append("input %s has dynamic dims %s: DLA needs static shapes (pass --shape %s=...)"
                         % (iname, ["?" if d is None else d for d in dims], iname))
    layers = [predict_layer(index, node, g, gen, trt, precision, cache_scales, rules)
              for index, node in enumerate(proto.graph.node)]
    subgraphs = dla_subgraphs(proto, layers)
    for number, members in enumerate(subgraphs):
        for layer in layers:
            if layer.name in members:
                layer.subgraph = number
    return DlaAnalysis(model=name, target=target_name, dla_version=gen, tensorrt_version=trt_text,
                       precision=precision, loadables_per_core=limit, layers=layers, subgraphs=subgraphs,
                       inputs=inputs, patterns=activation_patterns(proto, layers), notes=notes,
                       transitions=find_transitions(proto, layers, g, precision))
