"""From a shape-inferred ONNX graph to the kernels an engine runs: FLOPs, tensors read and written, weights.

Two steps.  :func:`layers_of` gives every ONNX node that does work a :class:`Layer` (its cost
category, FLOPs, activation tensors in and out, constant inputs); nodes TensorRT folds at build
time (constants, shape arithmetic) and pure views (Reshape, Flatten, Squeeze, Q/DQ) cost nothing
and only pass their input's buffer on.  :func:`fuse` groups layers into :class:`Kernel`s the way
the runtime does:

* ``"tensorrt"``: a convolution or matrix multiply takes the chain behind it that only it feeds
  (BatchNormalization, activations, element-wise ops with a constant, one residual Add) into its
  epilogue, as TensorRT's conv/GEMM fusions do; runs of point-wise layers merge into one
  point-wise kernel; Concat is elided (producers write into its output).  Fusion never crosses a
  GPU/DLA boundary.
* ``"none"``: one kernel per layer, as eager PyTorch launches them (BatchNorm apart from the
  convolution, Concat a copy; Transpose/Slice/Split/Gather are views, as ``permute`` and slicing are
  in PyTorch; the bias ``Add`` ONNX splits off a 3-D ``nn.Linear`` stays in its GEMM; scaled
  dot-product attention, which ONNX spells MatMul -> Softmax -> MatMul, is one fused kernel as in
  PyTorch's ``scaled_dot_product_attention``): what the H200 validation measures.

Kernels keep the names of the ONNX nodes they contain, so a report can be read against Netron.
"""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

FUSIONS = ("tensorrt", "none")

# cost categories; "tensor" ones run on Tensor Cores (GPU) or the DLA's MAC array
TENSOR_CATEGORIES = ("conv", "conv_grouped", "deconv", "gemm")
CATEGORIES = TENSOR_CATEGORIES + ("conv_depthwise", "pool", "reduce", "pointwise", "batchnorm", "softmax", "norm",
                                  "resize", "copy", "other", "batchnorm_3d", "conv_depthwise_dilated")
# BatchNormalization layers, whichever tensor rank (batchnorm_3d: on a 5-D N,C,D,H,W video tensor, a type of its
# own because eager PyTorch runs it at well under the bandwidth of the 2-D one: see efficiency.yaml)
BATCHNORM_CATEGORIES = ("batchnorm", "batchnorm_3d")
# Depthwise convolutions, undilated or dilated (conv_depthwise_dilated: a type of its own because eager PyTorch
# ran the dilated ones at ~86x their ideal time, ~40x slower than the undilated ones of the same networks: see
# efficiency.yaml); every other rule (FLOPs, fusion, the DLA's depthwise scale) treats them alike
DEPTHWISE_CATEGORIES = ("conv_depthwise", "conv_depthwise_dilated")

_VIEWS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "QuantizeLinear", "DequantizeLinear"}
_POINTWISE = {"Relu", "Sigmoid", "Tanh", "Clip", "LeakyRelu", "HardSigmoid", "HardSwish", "Elu", "Selu", "Softplus",
              "Softsign", "ThresholdedRelu", "Gelu", "Mish", "Celu", "PRelu", "Add", "Sub", "Mul", "Div", "Max", "Min",
              "Pow", "Sum", "Mean", "Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Erf", "Sin", "Cos", "Floor",
              "Ceil", "Round", "Sign", "Not", "And", "Or", "Xor", "Equal", "Greater", "Less", "GreaterOrEqual",
              "LessOrEqual", "Where", "Cast", "Mod", "IsNaN", "IsInf"}
_COPY = {"Transpose", "Slice", "Split", "Pad", "Gather", "GatherElements", "GatherND", "Tile", "Expand",
         "DepthToSpace", "SpaceToDepth", "ScatterND", "ScatterElements", "Concat", "ConstantOfShape", "Range",
         "NonZero", "TopK"}
# Eager PyTorch returns views for these (permute, slicing, select): no kernel, unless a later .contiguous()
_EAGER_VIEWS = {"Transpose", "Slice", "Split", "Gather"}
_FLOAT_TYPES = {1, 10, 11, 16}          # float, float16, double, bfloat16 (onnx.TensorProto codes)
_DATA_TYPES = _FLOAT_TYPES | {2, 3}     # + uint8, int8 (Q/DQ models)
_WEIGHT_SLOT = {"Conv": 1, "ConvTranspose": 1, "Gemm": 1, "MatMul": 1}


@dataclass
class Layer:
    """One ONNX node that does work (or is a view), with what it costs independent of the target."""

    index: int
    name: str
    op: str
    category: str                      # one of CATEGORIES, or "view" for a pure view
    flops: float
    inputs: List[str]                  # activation tensors read (data, not constants)
    outputs: List[str]
    weight_elems: int = 0              # elements of the main weight (conv/GEMM kernel)
    const_elems: int = 0               # elements of other float constants (bias, scales)
    gemm: Optional[Tuple[int, int, int, int]] = None   # (M, N, K, groups) for tensor categories
    channels: Optional[Tuple[int, int]] = None         # (C_in, C_out) for the channel-alignment model
    folded_norm: bool = False          # a Conv whose weight the exporter rewrote (a BatchNorm folded into it)


@dataclass
class Kernel:
    """Layers an engine runs as one kernel (or one DLA operation)."""

    name: str
    category: str
    device: str
    layers: List[Layer]
    inputs: List[str] = field(default_factory=list)      # tensors read from memory
    outputs: List[str] = field(default_factory=list)     # tensors written to memory

    @property
    def head(self) -> Layer:
        return self.layers[0]

    @property
    def flops(self) -> float:
        return float(sum(l.flops for l in self.layers))

    @property
    def weight_elems(self) -> int:
        return sum(l.weight_elems for l in self.layers)

    @property
    def const_elems(self) -> int:
        return sum(l.const_elems for l in self.layers)

    @property
    def ops(self) -> List[str]:
        return [l.op for l in self.layers]


@dataclass
class GraphInfo:
    """Tensor sizes and types of a shape-inferred graph, and its inputs/outputs."""

    elems: Dict[str, Optional[int]]
    dtypes: Dict[str, int]
    shapes: Dict[str, Optional[List[Optional[int]]]]
    inputs: List[str]
    outputs: List[str]
    constants: Set[str]

    def size(self, name: str) -> int:
        return int(self.elems.get(name) or 0)

    def is_data(self, name: str) -> bool:
        """A tensor that holds activations (not shape arithmetic, not a constant)."""
        return bool(name) and name not in self.constants and self.dtypes.get(name, 1) in _DATA_TYPES


def graph_info(proto: Any, g: Any) -> GraphInfo:
    """Sizes and element types of every tensor (``g`` is the DLA analysis' view of the same graph)."""
    dtypes: Dict[str, int] = {}
    graph = proto.graph
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        if vi.type.HasField("tensor_type"):
            dtypes[vi.name] = int(vi.type.tensor_type.elem_type)
    for init in graph.initializer:
        dtypes[init.name] = int(init.data_type)
    elems: Dict[str, Optional[int]] = {}
    for name, shape in g.shapes.items():
        elems[name] = _prod(shape) if shape is not None and all(isinstance(d, int) and d > 0 for d in shape) else None
    return GraphInfo(elems=elems, dtypes=dtypes, shapes=dict(g.shapes), inputs=list(g.inputs),
                     outputs=list(g.outputs), constants=set(g.constant))


def _prod(values: Sequence[Any]) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


def layers_of(proto: Any, g: Any, info: GraphInfo, folded: Set[int]) -> List[Layer]:
    """A :class:`Layer` per ONNX node, skipping the ``folded`` node indices (build-time constants)."""
    from onnx import helper

    out: List[Layer] = []
    for index, node in enumerate(proto.graph.node):
        if index in folded:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        name = node.name or "%s_%d" % (node.op_type, index)
        data_in = [t for t in node.input if info.is_data(t)]
        outputs = [t for t in node.output if t]
        if not any(info.is_data(t) for t in outputs):
            continue                      # shape arithmetic on int64 tensors: no kernel on the device
        layer = Layer(index, name, node.op_type, _category(node.op_type, attrs, info, node), 0.0, data_in, outputs)
        _costs(layer, node, attrs, info)
        out.append(layer)
    return out


def _category(op: str, attrs: Mapping[str, Any], info: GraphInfo, node: Any) -> str:
    if op in _VIEWS:
        return "view"
    if op == "Conv":
        groups = int(attrs.get("group", 1))
        if groups == 1:
            return "conv"
        x = info.shapes.get(node.input[0])
        c_in = x[1] if x and len(x) > 1 else None
        if c_in is None or groups != c_in:
            return "conv_grouped"
        dilated = any(int(d) > 1 for d in attrs.get("dilations", []))
        return "conv_depthwise_dilated" if dilated else "conv_depthwise"
    if op == "ConvTranspose":
        return "deconv"
    if op in ("Gemm", "MatMul"):
        return "gemm"
    if op in ("MaxPool", "AveragePool", "LpPool"):
        return "pool"
    if op.startswith("Global") or op.startswith("Reduce") or op in ("ArgMax", "ArgMin"):
        return "reduce"
    if op == "BatchNormalization":
        x = info.shapes.get(node.input[0])
        return "batchnorm_3d" if x is not None and len(x) == 5 else "batchnorm"
    if op in ("Softmax", "LogSoftmax"):
        return "softmax"
    if op in ("LayerNormalization", "InstanceNormalization", "GroupNormalization", "LRN",
              "MeanVarianceNormalization"):
        return "norm"
    if op in ("Resize", "Upsample"):
        return "resize"
    if op in _POINTWISE:
        return "pointwise"
    if op in _COPY:
        return "copy"
    return "other"


def _costs(layer: Layer, node: Any, attrs: Mapping[str, Any], info: GraphInfo) -> None:
    """FLOPs, weights and GEMM dimensions of one layer (FLOPs count a multiply-add as 2)."""
    out_elems = sum(info.size(t) for t in layer.outputs)
    in_elems = sum(info.size(t) for t in layer.inputs)
    slot = _WEIGHT_SLOT.get(layer.op)
    if layer.op == "Conv" and len(node.input) > 1:
        # the TorchScript exporter names a parameter after its module (conv.weight) unless it computed the tensor:
        # folding a BatchNorm into the convolution writes new weights called onnx::Conv_<n>
        layer.folded_norm = node.input[1].startswith("onnx::")
    for i, t in enumerate(node.input):
        if t and t in info.constants and info.dtypes.get(t, 0) in _FLOAT_TYPES and info.elems.get(t):
            if i == slot:
                layer.weight_elems += info.size(t)
            elif layer.op not in ("Reshape", "Resize", "Upsample", "Slice", "Pad", "Expand", "Tile"):
                layer.const_elems += info.size(t)
    cat = layer.category
    y = info.shapes.get(layer.outputs[0]) if layer.outputs else None
    if cat in ("conv", "conv_grouped") + DEPTHWISE_CATEGORIES and y and layer.weight_elems:
        w = info.shapes.get(node.input[1]) or []
        groups = int(attrs.get("group", 1))
        k_per_out = _prod(w[1:]) if len(w) > 1 else 1
        layer.flops = 2.0 * info.size(layer.outputs[0]) * k_per_out
        m = info.size(layer.outputs[0]) // max(1, int(y[1] or 1))
        layer.gemm = (m, int(w[0]) // groups, k_per_out, groups)
        x = info.shapes.get(node.input[0])
        layer.channels = (int(x[1]) if x and x[1] else int(w[1]) * groups, int(w[0]))
    elif cat == "deconv" and layer.weight_elems:
        w = info.shapes.get(node.input[1]) or []
        groups = int(attrs.get("group", 1))
        layer.flops = 2.0 * in_elems * (_prod(w[1:]) if len(w) > 1 else 1)
        x = info.shapes.get(node.input[0]) or []
        if len(w) > 1 and len(x) > 1 and x[1]:
            m = in_elems // int(x[1])
            layer.gemm = (m, int(w[1]) * _prod(w[2:]), int(w[0]) // groups, groups)
            layer.channels = (int(x[1]), int(w[1]) * groups)
    elif cat == "gemm" and y:
        a = info.shapes.get(node.input[0]) or []
        k = int(a[-1] or 0) if a else 0
        if layer.op == "Gemm" and int(attrs.get("transA", 0)) and len(a) == 2:
            k = int(a[0] or 0)
        n = int(y[-1] or 0)
        m = info.size(layer.outputs[0]) // max(1, n)
        layer.flops = 2.0 * info.size(layer.outputs[0]) * k
        layer.gemm = (m, n, k, 1)
        layer.channels = (k, n)
    elif cat == "pool":
        kernel = list(attrs.get("kernel_shape", [1]))
        layer.flops = float(out_elems * _prod(kernel))
    elif cat in ("reduce",):
        layer.flops = float(in_elems)
    elif cat in ("softmax", "norm"):
        layer.flops = 5.0 * out_elems
    elif cat == "resize":
        mode = attrs.get("mode", b"nearest")
        mode = mode.decode() if isinstance(mode, bytes) else str(mode)
        layer.flops = float(out_elems * (4 if "linear" in mode else 1))
    elif cat in ("pointwise", "other") + BATCHNORM_CATEGORIES:
        layer.flops = float(out_elems * (2 if cat in BATCHNORM_CATEGORIES else 1))


def fuse(layers: Sequence[Layer], devices: Mapping[int, str], info: GraphInfo, fusion: str,
         unfold_batchnorm: bool = False) -> List[Kernel]:
    """Group ``layers`` into kernels (see the module docstring); ``devices`` maps node index -> "GPU"/"DLA".

    ``unfold_batchnorm`` (with ``fusion="none"``): a convolution whose BatchNorm the export folded gets that
    BatchNorm back as a kernel of its own, as eager PyTorch runs it."""
    alias: Dict[str, str] = {}
    real: List[Layer] = []
    for layer in layers:
        eager_view = fusion == "none" and layer.op in _EAGER_VIEWS and len(layer.inputs) == 1
        if layer.category == "view" or eager_view:
            for out in layer.outputs[:1] if not eager_view else layer.outputs:
                if layer.inputs:
                    alias[out] = _resolve(alias, layer.inputs[0])
            continue
        real.append(layer)
    for layer in real:
        layer.inputs = [_resolve(alias, t) for t in layer.inputs]
    consumers: Dict[str, List[int]] = {}
    for layer in real:
        for t in set(layer.inputs):
            consumers.setdefault(t, []).append(layer.index)
    outputs = {_resolve(alias, t) for t in info.outputs}
    kernels: List[Kernel] = []
    owner: Dict[str, Kernel] = {}   # tensor -> kernel that produced it (only while that kernel may grow)
    attention = _eager_attention(real, consumers, outputs) if fusion == "none" else {}
    fused: Dict[int, Kernel] = {}   # attention group -> its kernel
    for layer in real:
        device = devices.get(layer.index, "GPU")
        group = attention.get(layer.index)
        if fusion == "tensorrt":
            target = _fusable_into(layer, owner, consumers, outputs, device)
        else:
            target = fused.get(group) if group is not None else _bias_of(layer, owner, consumers, outputs)
        if target is None:
            elided = fusion == "tensorrt" and layer.op == "Concat"   # producers write into its buffer
            category = "gemm" if group is not None else "elided" if elided else layer.category
            target = Kernel(layer.name, category, device, [])
            kernels.append(target)
            if group is not None:
                fused[group] = target
        target.layers.append(layer)
        for t in layer.outputs:
            owner[t] = target
        if unfold_batchnorm and fusion == "none" and layer.folded_norm and layer.outputs:
            kernels.append(_unfolded_norm(layer, info, device))
    for kernel in kernels:
        _io(kernel, consumers, outputs)
    return kernels


def _unfolded_norm(conv: Layer, info: GraphInfo, device: str) -> Kernel:
    """The BatchNorm kernel eager PyTorch runs after ``conv`` (folded away in the ONNX): reads and writes its output."""
    out = conv.outputs[0]
    shape = info.shapes.get(out)
    channels = int(shape[1]) if shape and len(shape) > 1 and shape[1] else 0
    category = "batchnorm_3d" if shape is not None and len(shape) == 5 else "batchnorm"
    bn = Layer(conv.index, conv.name + "#unfolded_batchnorm", "BatchNormalization", category,
               2.0 * info.size(out), [out], [out], const_elems=2 * channels)
    return Kernel(bn.name, category, device, [bn])


def _resolve(alias: Mapping[str, str], name: str) -> str:
    seen = 0
    while name in alias and seen < 10000:
        name = alias[name]
        seen += 1
    return name


_EPILOGUE_HEADS = TENSOR_CATEGORIES + DEPTHWISE_CATEGORIES + ("pointwise",)


def _fusable_into(layer: Layer, owner: Mapping[str, Kernel], consumers: Mapping[str, List[int]],
                  outputs: Set[str], device: str) -> Optional[Kernel]:
    """The open kernel ``layer`` joins as an epilogue, or None (TensorRT-style fusion)."""
    if layer.category not in ("pointwise",) + BATCHNORM_CATEGORIES:
        return None
    candidates = []
    for t in layer.inputs:
        kernel = owner.get(t)
        if kernel is None or kernel.device != device or kernel.category not in _EPILOGUE_HEADS:
            continue
        last = kernel.layers[-1]
        if t not in last.outputs or t in outputs or len(consumers.get(t, [])) != 1:
            continue                      # the tensor is needed elsewhere: it must be written out
        residual_adds = sum(1 for l in kernel.layers[1:] if len(l.inputs) > 1)
        if len(layer.inputs) > 1 and residual_adds and kernel.category != "pointwise":
            continue                      # one residual input per convolution/GEMM epilogue
        candidates.append(kernel)
    return candidates[0] if candidates else None


def _bias_of(layer: Layer, owner: Mapping[str, Kernel], consumers: Mapping[str, List[int]],
             outputs: Set[str]) -> Optional[Kernel]:
    """Eager PyTorch: the bias Add that ONNX splits off ``nn.Linear`` on 3-D inputs (MatMul + Add) is one GEMM."""
    if layer.op != "Add" or len(layer.inputs) != 1 or not layer.const_elems:
        return None
    kernel = owner.get(layer.inputs[0])
    if kernel is None or kernel.category != "gemm" or len(kernel.layers) != 1:
        return None
    t = layer.inputs[0]
    if t in outputs or len(consumers.get(t, [])) != 1:
        return None
    return kernel


def _eager_attention(real: Sequence[Layer], consumers: Mapping[str, List[int]], outputs: Set[str]) -> Dict[int, int]:
    """Layers of scaled dot-product attention, each mapped to its Softmax's index (one group per attention).

    ONNX spells attention MatMul(q x s, k^T x s) -> [scale] -> Softmax -> MatMul(., v); eager PyTorch runs it as one
    fused kernel (``scaled_dot_product_attention``, which ``nn.MultiheadAttention`` calls in inference) that reads
    q, k and v and writes the output: the batch x heads x tokens^2 score matrix never goes to memory.  (The H200 run
    timed ViT-B/16's attention module at 5 kernels and 77 us per block at batch 32, where its 7 ONNX layers as
    separate kernels were estimated at 139 us.)
    A chain joins only where each of its tensors has no reader outside it.
    """
    producer = {t: layer for layer in real for t in layer.outputs}
    by_index = {layer.index: layer for layer in real}

    def inside(tensor: str, reader: int) -> bool:
        return tensor not in outputs and list(consumers.get(tensor, [])) == [reader]

    def scale_of(tensor: str, reader: int) -> Optional[Layer]:
        """The point-wise layer with one data input (a scale) that writes ``tensor`` for ``reader`` alone."""
        layer = producer.get(tensor)
        ok = layer is not None and layer.category == "pointwise" and len(layer.inputs) == 1 and inside(tensor, reader)
        return layer if ok else None

    groups: Dict[int, int] = {}
    for softmax in real:
        if softmax.op != "Softmax" or len(softmax.inputs) != 1 or len(softmax.outputs) != 1:
            continue
        readers = consumers.get(softmax.outputs[0], [])
        if len(readers) != 1 or by_index[readers[0]].op != "MatMul" or softmax.outputs[0] in outputs:
            continue
        chain = [softmax, by_index[readers[0]]]
        scores_tensor, reader = softmax.inputs[0], softmax.index
        scale = scale_of(scores_tensor, reader)
        if scale is not None:
            chain.append(scale)
            scores_tensor, reader = scale.inputs[0], scale.index
        scores = producer.get(scores_tensor)
        if scores is None or scores.op != "MatMul" or len(scores.inputs) != 2 or not inside(scores_tensor, reader):
            continue
        chain.append(scores)
        chain += [s for s in (scale_of(t, scores.index) for t in scores.inputs) if s is not None]
        for layer in chain:
            groups[layer.index] = softmax.index
    return groups


def _io(kernel: Kernel, consumers: Mapping[str, List[int]], outputs: Set[str]) -> None:
    produced: Set[str] = set()
    members = {l.index for l in kernel.layers}
    for layer in kernel.layers:
        for t in layer.inputs:
            if t not in produced and t not in kernel.inputs:
                kernel.inputs.append(t)
        produced.update(layer.outputs)
    for layer in kernel.layers:
        for t in layer.outputs:
            readers = consumers.get(t, [])
            if t in outputs or any(r not in members for r in readers):
                kernel.outputs.append(t)


__all__ = ["BATCHNORM_CATEGORIES", "CATEGORIES", "DEPTHWISE_CATEGORIES", "FUSIONS", "GraphInfo", "Kernel", "Layer",
           "TENSOR_CATEGORIES", "fuse", "graph_info", "layers_of"]
