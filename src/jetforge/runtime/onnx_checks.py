"""The one place where an ONNX model from someone else is checked before jetforge uses it.

Two readers turn ONNX bytes into facts: :func:`jetforge.runtime.onnx_file.read_onnx` (the ``onnx`` package, on
the workstation) and :mod:`jetforge.runtime.onnx_wire` (the protobuf bytes, on a board without ``onnx``).  Each
builds the same :class:`ModelView` of what it read, and :func:`model_problem` judges that view, so both readers
accept and refuse exactly the same files with the same words, and a rule is added once.

What is refused (each is one :class:`~jetforge.errors.ModelError` line naming the file), and why:

* a model that is not whole: no graph, opset, nodes, inputs or outputs; a node reading a tensor nothing defines;
  an output no node produces (what a file cut short or written by a broken tool looks like);
* an IR version or a default-domain opset outside what the tools downstream read (``MIN_OPSET``: ONNX Runtime
  reads opset 7 and newer, TensorRT's parser likewise; ``MAX_OPSET``/``MAX_IR_VERSION``: the newest the ONNX
  release of :data:`KNOWN_ONNX_RELEASE` defines); a node whose domain the model declares no opset for;
* an operator of the ONNX domain that no ONNX opset defines (:data:`ONNX_OPERATORS`; custom domains are left to
  the runtime, which may have a plugin for them);
* a tensor written twice (two nodes writing one name, a node overwriting an input or initializer, two
  initializers of one name), a cycle or a node reading its own output: ONNX graphs are acyclic and in SSA form,
  and ONNX Runtime refuses both only when a session is made, after jetforge has bundled the file;
* an input or output that is not a numeric tensor (strings, complex numbers, sequences, maps): no jetforge
  runtime or TensorRT engine can feed or read one; an input declaring an axis of size 0 (nothing to compute:
  a "batch of 0" was estimated at 88,505 inferences/s);
* an initializer or a Constant's tensor whose stored data does not fill its declared dims (2^40 values declared,
  none stored: readers that trust the dims allocate for them or crash reshaping);
* a convolution or pooling node fed a graph input of rank below 3, or weights of another rank than its input.

Torch-free, onnx-free, Python 3.8.
"""

from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence

from jetforge.errors import ModelError

KNOWN_ONNX_RELEASE = "1.23.2"
MIN_IR_VERSION = 3  # IR 3 introduced opset_import; ONNX Runtime reads IR 3 and newer
MAX_IR_VERSION = 14  # onnx.IR_VERSION of KNOWN_ONNX_RELEASE
MIN_OPSET = 7  # ONNX Runtime: "opset version 7 and higher"; TensorRT's ONNX parser likewise
MAX_OPSET = 28  # onnx.defs.onnx_opset_version() of KNOWN_ONNX_RELEASE
DEFAULT_DOMAINS = ("", "ai.onnx")

#: Every operator name any opset of the ONNX domain defines (onnx.defs.get_all_schemas_with_history() of
#: KNOWN_ONNX_RELEASE; tests/runtime/test_onnx_checks.py compares it with the installed onnx package), plus the
#: experimental operators ONNX 1.5 removed, which old exporters wrote and TensorRT's parser still reads.
ONNX_OPERATORS = frozenset("""
Abs Acos Acosh Add AffineGrid And ArgMax ArgMin Asin Asinh Atan Atanh Attention AveragePool BatchNormalization
Bernoulli BitCast BitShift BitwiseAnd BitwiseNot BitwiseOr BitwiseXor BlackmanWindow Cast CastLike
CausalConvWithState Ceil Celu CenterCropPad Clip Col2Im Compress Concat ConcatFromSequence Constant ConstantOfShape
Conv ConvInteger ConvTranspose Cos Cosh CumProd CumSum DFT DeformConv DepthToSpace DequantizeLinear Det Div Dropout
DynamicQuantizeLinear Einsum Elu Equal Erf Exp Expand EyeLike Flatten Floor GRU Gather GatherElements GatherND Gelu
Gemm GlobalAveragePool GlobalLpPool GlobalMaxPool Greater GreaterOrEqual GridSample GroupNormalization
HammingWindow HannWindow HardSigmoid HardSwish Hardmax Identity If ImageDecoder InstanceNormalization IsInf IsNaN
LRN LSTM LayerNormalization LeakyRelu Less LessOrEqual LinearAttention Log LogSoftmax Loop LpNormalization LpPool
MatMul MatMulInteger Max MaxPool MaxRoiPool MaxUnpool Mean MeanVarianceNormalization MelWeightMatrix Min Mish Mod
Mul Multinomial Neg NegativeLogLikelihoodLoss NonMaxSuppression NonZero Not OneHot Optional OptionalGetElement
OptionalHasElement Or PRelu Pad Pow QLinearConv QLinearMatMul QuantizeLinear RMSNormalization RNN RandomNormal
RandomNormalLike RandomUniform RandomUniformLike Range Reciprocal ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp
ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum ReduceSumSquare RegexFullMatch Relu Reshape Resize
ReverseSequence RoiAlign RotaryEmbedding Round STFT Scan Scatter ScatterElements ScatterND Selu SequenceAt
SequenceConstruct SequenceEmpty SequenceErase SequenceInsert SequenceLength SequenceMap Shape Shrink Sigmoid Sign
Sin Sinh Size Slice Softmax SoftmaxCrossEntropyLoss Softplus Softsign SpaceToDepth Split SplitToSequence Sqrt
Squeeze StringConcat StringNormalizer StringSplit Sub Sum SwiGLU Swish Tan Tanh TensorScatter TfIdfVectorizer
ThresholdedRelu Tile TopK Transpose Trilu Unique Unsqueeze Upsample Where Xor
""".split())
REMOVED_EXPERIMENTAL_OPERATORS = frozenset(
    "ATen Affine ConstantFill Crop DynamicSlice GRUUnit GivenTensorFill ImageScaler ParametricSoftplus Scale "
    "ScaledTanh".split())

#: TensorProto.DataType -> bits per element (what raw_data holds); types not listed are not size-checked
ELEMENT_BITS = {1: 32, 2: 8, 3: 8, 4: 16, 5: 16, 6: 32, 7: 64, 9: 8, 10: 16, 11: 64, 12: 32, 13: 64, 14: 64,
                15: 128, 16: 16, 17: 8, 18: 8, 19: 8, 20: 8, 21: 4, 22: 4, 23: 4, 24: 8, 25: 2, 26: 2}
#: element types whose typed fields (float_data, int32_data, ...) hold one value per element
ONE_VALUE_PER_ELEMENT = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 16)
NOT_NUMERIC = {8: "a string tensor", 14: "a complex64 tensor", 15: "a complex128 tensor"}
#: operators whose first input is (N, C, spatial...): rank 3 or more
SPATIAL_OPS = ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool",
               "GlobalLpPool", "InstanceNormalization")


@dataclass
class NodeView:
    name: str
    op: str
    domain: str
    inputs: List[str]
    outputs: List[str]


@dataclass
class ValueView:
    """A graph input or output: ``kind`` "tensor", "none" (no type given) or the other type's name."""

    name: str
    kind: str = "none"
    elem: int = 0
    dims: Optional[List[Optional[int]]] = None  # None: no shape; a dim without a value: None


@dataclass
class TensorView:
    """An initializer's or a Constant node's tensor: its declared dims and how much data it stores."""

    name: str
    dims: List[int]
    elem: int
    raw_bytes: Optional[int] = None  # None: no raw_data field
    typed_values: int = 0  # values in float_data, int32_data, string_data, int64_data, double_data, uint64_data
    external: bool = False
    where: str = "initializer"


@dataclass
class ModelView:
    """What a reader found in a ModelProto, in the terms :func:`model_problem` judges."""

    has_graph: bool = False
    ir_version: int = 0
    opsets: Dict[str, int] = field(default_factory=dict)
    declares_opset: bool = False
    nodes: List[NodeView] = field(default_factory=list)
    inputs: List[ValueView] = field(default_factory=list)
    outputs: List[ValueView] = field(default_factory=list)
    tensors: List[TensorView] = field(default_factory=list)
    sparse: List[str] = field(default_factory=list)

    def add_opset(self, domain: str, version: int) -> None:
        self.declares_opset = True
        key = "" if domain in DEFAULT_DOMAINS else domain
        self.opsets.setdefault(key, int(version))


REEXPORT_HINT = "export the model again (jetforge export), or copy it again and compare its size with the original"
UNUSABLE_HINT = ("export the model again with standard ONNX operators at an opset from %d to %d (jetforge export "
                 "--opset 17), or fix the tool that wrote it" % (MIN_OPSET, MAX_OPSET))


def model_problem(view: ModelView) -> Optional[str]:
    """The first reason ``view`` is no model jetforge may use (words for "... is not ... : <problem>"); None if fine."""
    error = model_error(view, "")
    return error.message.split(": ", 1)[1] if error is not None else None


def model_error(view: ModelView, where: str) -> Optional[ModelError]:
    """The one-line error for the first problem of ``view`` (``where`` names the file), or None."""
    problem = _whole(view)
    if problem:
        return ModelError("%s is not a complete ONNX model: %s" % (where, problem), hint=REEXPORT_HINT)
    for check in (_versions, _operators, _single_assignment, _acyclic, _io_types, _tensor_data, _ranks):
        problem = check(view)
        if problem:
            return ModelError("%s cannot be used: %s" % (where, problem), hint=UNUSABLE_HINT)
    return None


def _initializer_names(view: ModelView) -> set:
    return {t.name for t in view.tensors if t.where == "initializer"} | set(view.sparse)


def _whole(view: ModelView) -> Optional[str]:
    if not view.has_graph:
        return "it has no graph"
    if not view.declares_opset:
        return "it declares no opset (a file cut short loses it: it is stored after the graph)"
    if not view.nodes:
        return "its graph has no nodes"
    defined = _initializer_names(view)
    if not [i for i in view.inputs if i.name not in defined]:
        return "its graph has no inputs"
    if not view.outputs:
        return "its graph has no outputs"
    known = defined | {i.name for i in view.inputs}
    for node in view.nodes:
        known.update(o for o in node.outputs if o)
    for index, node in enumerate(view.nodes):
        for tensor in node.inputs:
            if tensor and tensor not in known:
                return "node %s (%s) reads tensor %r, which no input, initializer or node defines" % (
                    _node_name(node, index), node.op, tensor)
    missing = [o.name for o in view.outputs if o.name not in known]
    if missing:
        return "graph output %r is produced by no node" % missing[0]
    return None


def _versions(view: ModelView) -> Optional[str]:
    if not MIN_IR_VERSION <= view.ir_version <= MAX_IR_VERSION:
        return ("its IR version is %d; jetforge, ONNX Runtime and TensorRT read IR versions %d to %d"
                % (view.ir_version, MIN_IR_VERSION, MAX_IR_VERSION))
    opset = view.opsets.get("")
    uses_default = any(n.domain in DEFAULT_DOMAINS for n in view.nodes)
    if opset is None and uses_default:
        return "its nodes use ONNX operators but it declares no opset for the ONNX domain"
    if opset is not None and not MIN_OPSET <= opset <= MAX_OPSET:
        return ("it declares ONNX opset %d; jetforge, ONNX Runtime and TensorRT read opsets %d to %d (ONNX %s)"
                % (opset, MIN_OPSET, MAX_OPSET, KNOWN_ONNX_RELEASE))
    for index, node in enumerate(view.nodes):
        if node.domain not in DEFAULT_DOMAINS and node.domain not in view.opsets:
            return "node %s (%s) is in domain %r, for which the model declares no opset" % (
                _node_name(node, index), node.op, _short(node.domain))
    return None


def _operators(view: ModelView) -> Optional[str]:
    for index, node in enumerate(view.nodes):
        if node.domain in DEFAULT_DOMAINS and node.op not in ONNX_OPERATORS | REMOVED_EXPERIMENTAL_OPERATORS:
            return "node %r (%s) uses an operator no ONNX opset defines" % (_node_name(node, index), _short(node.op))
    return None


def _single_assignment(view: ModelView) -> Optional[str]:
    """Every tensor is written once: by a graph input, an initializer or one node output."""
    initializers: set = set()
    for name in [t.name for t in view.tensors if t.where == "initializer"] + list(view.sparse):
        if name in initializers:
            return "tensor %r is defined twice (two initializers of that name)" % _short(name)
        initializers.add(name)
    inputs: set = set()
    for value in view.inputs:
        if value.name in inputs:
            return "graph input %r is listed twice" % _short(value.name)
        inputs.add(value.name)
    written: Dict[str, str] = {}
    for index, node in enumerate(view.nodes):
        here = _node_name(node, index)
        for tensor in node.outputs:
            if not tensor:
                continue
            if tensor in node.inputs:
                return "node %s (%s) reads its own output %r (a self-loop)" % (here, node.op, _short(tensor))
            if tensor in inputs or tensor in initializers:
                return "node %s (%s) writes tensor %r, which is already a graph input or initializer" % (
                    here, node.op, _short(tensor))
            if tensor in written:
                return "tensor %r is written twice (by node %s and node %s (%s))" % (
                    _short(tensor), written[tensor], here, node.op)
            written[tensor] = "%s (%s)" % (here, node.op)
    return None


def _acyclic(view: ModelView) -> Optional[str]:
    """Kahn's algorithm over the nodes: what never becomes ready sits on a cycle."""
    producer: Dict[str, int] = {}
    for index, node in enumerate(view.nodes):
        for tensor in node.outputs:
            if tensor:
                producer[tensor] = index
    waiting = []
    readers: Dict[int, List[int]] = {}
    for index, node in enumerate(view.nodes):
        deps = {producer[t] for t in node.inputs if t in producer}
        waiting.append(len(deps))
        for dep in deps:
            readers.setdefault(dep, []).append(index)
    ready = [i for i, count in enumerate(waiting) if count == 0]
    done = 0
    while ready:
        index = ready.pop()
        done += 1
        for reader in readers.get(index, ()):
            waiting[reader] -= 1
            if waiting[reader] == 0:
                ready.append(reader)
    if done == len(view.nodes):
        return None
    stuck = [i for i, count in enumerate(waiting) if count > 0]
    names = ", ".join("%s (%s)" % (_node_name(view.nodes[i], i), view.nodes[i].op) for i in stuck[:3])
    return "its graph has a cycle (nodes %s%s depend on each other's outputs); ONNX graphs are acyclic" % (
        names, " and %d more" % (len(stuck) - 3) if len(stuck) > 3 else "")


def _io_types(view: ModelView) -> Optional[str]:
    defined = _initializer_names(view)
    for role, values in (("input", [v for v in view.inputs if v.name not in defined]), ("output", view.outputs)):
        for value in values:
            if value.kind not in ("tensor", "none"):
                return "graph %s %r is a %s, not a tensor; jetforge's runtimes and TensorRT take tensors" % (
                    role, _short(value.name), value.kind)
            if value.kind == "tensor" and value.elem in NOT_NUMERIC:
                return "graph %s %r is %s; jetforge's runtimes and TensorRT take numeric tensors" % (
                    role, _short(value.name), NOT_NUMERIC[value.elem])
            if role == "input" and value.dims and 0 in value.dims:
                return "graph input %r declares axis %d of size 0 (an empty input: nothing to compute)" % (
                    _short(value.name), value.dims.index(0))
    return None


def _tensor_data(view: ModelView) -> Optional[str]:
    for tensor in view.tensors:
        problem = tensor_data_problem(tensor)
        if problem:
            return problem
    return None


def tensor_data_problem(tensor: TensorView) -> Optional[str]:
    """Why ``tensor``'s stored data does not fill its declared dims (None when it does, or cannot be told here)."""
    what = "%s %r" % (tensor.where, _short(tensor.name))
    if any(d < 0 for d in tensor.dims):
        return "%s declares a negative dimension %s" % (what, _dims(tensor.dims))
    count = 1
    for d in tensor.dims:
        count *= d
    if tensor.external:
        return None  # stored beside the model: the bundle's external-data checks and the runtime read it
    bits = ELEMENT_BITS.get(tensor.elem)
    if tensor.raw_bytes is not None and bits is not None:
        stored = tensor.raw_bytes * 8 // bits
        if (count * bits + 7) // 8 == tensor.raw_bytes:
            return None
    elif tensor.raw_bytes is None and tensor.typed_values:
        per_element = 1 if tensor.elem in ONE_VALUE_PER_ELEMENT else 2 if tensor.elem in (14, 15) else 0
        if not per_element:
            return None
        stored = tensor.typed_values // per_element
        if tensor.typed_values == count * per_element:
            return None
    elif tensor.raw_bytes is None and count == 0:
        return None
    elif tensor.raw_bytes is None:
        stored = 0
    else:
        return None  # raw data of an element type without a fixed size here
    return "%s declares dims %s (%d values) but stores %d (declared sizes without their data)" % (
        what, _dims(tensor.dims), count, stored)


def _ranks(view: ModelView) -> Optional[str]:
    inputs = {v.name: v for v in view.inputs}
    weights = {t.name: t for t in view.tensors if t.where == "initializer"}
    for index, node in enumerate(view.nodes):
        if node.domain not in DEFAULT_DOMAINS or node.op not in SPATIAL_OPS or not node.inputs:
            continue
        value = inputs.get(node.inputs[0])
        rank = len(value.dims) if value is not None and value.dims else None
        if rank is not None and rank < 3:
            return "node %s (%s) takes graph input %r of rank %d; %s needs rank 3 or more (N, C, spatial axes)" % (
                _node_name(node, index), node.op, _short(value.name), rank, node.op)  # type: ignore[union-attr]
        weight = weights.get(node.inputs[1]) if node.op in ("Conv", "ConvTranspose") and len(node.inputs) > 1 else None
        if weight is not None and (len(weight.dims) < 3 or (rank is not None and len(weight.dims) != rank)):
            return "node %s (%s) has weights %r of rank %d for an input of rank %s; they must match, 3 or more" % (
                _node_name(node, index), node.op, _short(weight.name), len(weight.dims), rank or "unknown")
    return None


def _node_name(node: NodeView, index: int) -> str:
    return _short(node.name) if node.name else "#%d" % index


def _short(text: str, keep: int = 60) -> str:
    """A name from the file, cut to ``keep`` characters (a 100,000-character name is not worth printing)."""
    return text if len(text) <= keep else text[:keep] + "...(%d characters)" % len(text)


def _dims(dims: Sequence[int]) -> str:
    shown = ", ".join(str(d) for d in list(dims)[:8])
    return "[%s%s]" % (shown, ", ..." if len(dims) > 8 else "")


def product(dims: Iterable[int]) -> int:
    count = 1
    for d in dims:
        count *= int(d)
    return count


__all__ = ["ELEMENT_BITS", "KNOWN_ONNX_RELEASE", "MAX_IR_VERSION", "MAX_OPSET", "MIN_IR_VERSION", "MIN_OPSET",
           "ModelView", "NodeView", "ONNX_OPERATORS", "REEXPORT_HINT", "TensorView", "ValueView", "model_error",
           "model_problem", "product",
           "tensor_data_problem"]
