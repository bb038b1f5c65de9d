"""Fold time into the batch: the exact ONNX rewrite that lets a DLA run the per-frame parts of a 3-D network.

DLA runs 2-D layers only (4-D NCHW tensors).  A clip network's tensors are 5-D (N, C, T, H, W), yet much of
its work is per frame: a (2+1)D block's spatial 1 x kh x kw convolution (time stride 1, no time padding), its
BatchNorm and activation, a 3-D MobileNet's pointwise 1 x 1 x 1 convolutions, 1 x k x k pooling.  Each of
those is *exactly* the 2-D layer applied to the N*T frames of ``(N, C, T, H, W) -> (N*T, C, H, W)`` (the
transposition puts each frame's C x H x W block together; the same weights, the same sums in the same order
per output element).  This module rewrites the ONNX graph so:

* a **seed** (Conv with a constant 1 x kh x kw weight, or Max/AveragePool with a 1 x kh x kw window, time
  stride 1, no time padding) becomes its 2-D form on folded data;
* a **per-frame** node (BatchNormalization, a unary activation, an element-wise op whose data inputs all have
  the output's 5-D shape and whose constants are scalars) whose input is already folded stays folded, so a
  conv-BN-ReLU chain is one folded region (a per-frame node is never folded on its own: that would add
  transitions and move no convolution);
* the data enter a region through ``Transpose(0,2,1,3,4) + Reshape(-1, C, H, W)`` and leave it through
  ``Reshape(-1, T, C, H, W) + Transpose(0,2,1,3,4)`` only where a node outside the region (or the graph
  output) reads them.  The Reshapes use -1 for the batch, so the rewritten model keeps a dynamic batch.

Why an ONNX rewrite and not a model-definition option: it applies to any exporter's clip model (torchvision's
r2plus1d_18, jetforge's own 3-D MobileNet, a user's network) without touching its training code, the weights
are the trained ones (no retraining, no second model class to keep in step), and equality is checkable in
ONNX Runtime on the two files.  Tensor names inside folded regions change, so an INT8 calibration cache of the
original model does not cover them: calibrate the folded model.  Temporal (k x 1 x 1) and full 3-D windows mix
frames and are left as they are (see :data:`~.advice.TIME_FOLD_SUGGESTIONS`).
``onnx`` is imported inside functions; nothing here needs torch or TensorRT.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple, Union

from jetforge.errors import ModelError
from jetforge.fileio import atomic_output, check_not_input
from jetforge.runtime.sidecar import ModelSidecar, produced_by, read_sidecar, sidecar_path, write_sidecar
from jetforge.runtime.tensorrt.dla.facts import time_fold_kind
from jetforge.runtime.tensorrt.dla.graph import OnnxGraph, conv_pads, node_attrs

PER_FRAME_UNARY = frozenset(["Relu", "Clip", "Sigmoid", "Tanh", "LeakyRelu", "HardSwish", "HardSigmoid", "Elu",
                             "Selu", "Softplus", "Abs", "Neg", "Identity", "BatchNormalization"])
PER_FRAME_BINARY = frozenset(["Add", "Sub", "Mul", "Div", "Max", "Min"])
SUFFIX = "__timefold"
PathLike = Union[str, Path]


@dataclass
class FoldResult:
    """The rewritten model and what changed."""

    model: Any
    seeds: List[str] = field(default_factory=list)       # convolutions / pools now 2-D over N*T frames
    per_frame: List[str] = field(default_factory=list)   # BN / activations / element-wise kept folded
    folds: int = 0                                        # region entries (Transpose + Reshape)
    unfolds: int = 0                                      # region exits (Reshape + Transpose)
    skipped: Dict[str, str] = field(default_factory=dict)  # 5-D conv/pool left as is -> why
    regions: int = 0                                      # folded regions kept (one DLA loadable each)
    regions_dropped: int = 0                              # left unfolded by ``max_regions``

    def to_dict(self) -> Dict[str, Any]:
        return {"seeds": list(self.seeds), "per_frame": list(self.per_frame), "folds": self.folds,
                "unfolds": self.unfolds, "regions": self.regions, "regions_dropped": self.regions_dropped,
                "skipped": dict(self.skipped)}


def _static_tail(shape: Optional[Sequence[Optional[int]]]) -> bool:
    """5-D with every dim but the batch known (the Reshapes need C, T, H, W)."""
    return shape is not None and len(shape) == 5 and all(isinstance(d, int) and d > 0 for d in shape[1:])


def _seed_problem(node: Any, g: OnnxGraph) -> Optional[str]:
    """Why a Conv/MaxPool/AveragePool on 5-D data cannot be folded exactly (None: it can)."""
    attrs = node_attrs(node)
    xs = g.shape(node.input[0])
    if not _static_tail(xs) or not _static_tail(g.shape(node.output[0])):
        return "input or output is not 5-D with static C, T, H, W"
    if node.op_type == "Conv":
        if len(node.input) < 2 or g.value(node.input[1]) is None:
            return "the weight is not a constant initializer (a Q/DQ model? fold the plain one)"
        if len(node.input) > 2 and node.input[2] and g.value(node.input[2]) is None:
            return "the bias is not a constant"
        kernel = list(attrs.get("kernel_shape") or g.value(node.input[1]).shape[2:])
    else:
        if len([o for o in node.output if o]) > 1:
            return "MaxPool with an indices output"
        kernel = list(attrs.get("kernel_shape", []))
    strides = list(attrs.get("strides", [1] * len(kernel)))
    dilations = list(attrs.get("dilations", [1] * len(kernel)))
    pads = conv_pads(attrs, xs[2:], kernel, strides, dilations)
    kind = time_fold_kind(kernel, strides, pads)
    return None if kind == "spatial" else "%s window %s (time stride %s)" % (kind, kernel, strides[0] if strides
                                                                                else 1)


def _per_frame(node: Any, g: OnnxGraph, folded: Set[str]) -> bool:
    """A per-element node whose data input is already folded and whose data inputs share the output's shape."""
    if node.op_type not in PER_FRAME_UNARY and node.op_type not in PER_FRAME_BINARY:
        return False
    if node.op_type == "BatchNormalization" and len([o for o in node.output if o]) > 1:
        return False                              # training-mode BatchNorm
    out_shape = g.shape(node.output[0]) if node.output else None
    if not _static_tail(out_shape):
        return False
    data = [i for i in node.input if i and i not in g.constant]
    if not data or not any(i in folded for i in data):
        return False
    if node.op_type in PER_FRAME_BINARY:
        consts = [i for i in node.input if i and i in g.constant]
        if any(g.value(c) is None or g.value(c).size != 1 for c in consts):
            return False
        return all(g.shape(i) == out_shape for i in data)
    return g.shape(data[0]) == out_shape


def plan_fold(model: Any) -> Dict[int, str]:
    """Node index -> "seed" or "per-frame" for every node the rewrite folds (graph order)."""
    g = OnnxGraph(model)
    chosen: Dict[int, str] = {}
    folded: Set[str] = set()
    for i, node in enumerate(model.graph.node):
        if node.op_type in ("Conv", "MaxPool", "AveragePool") and node.input and \
                len(g.shape(node.input[0]) or []) == 5 and _seed_problem(node, g) is None:
            chosen[i] = "seed"
        elif _per_frame(node, g, folded):
            chosen[i] = "per-frame"
        else:
            continue
        folded.update(o for o in node.output if o)
    return chosen


def fold_regions(model: Any, chosen: Dict[int, str]) -> List[List[int]]:
    """The folded regions (connected groups of chosen nodes), largest convolution/pool work first."""
    g = OnnxGraph(model)
    nodes = list(model.graph.node)
    producer = {o: i for i in chosen for o in nodes[i].output if o}
    parent = {i: i for i in chosen}

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for i in chosen:
        for t in nodes[i].input:
            if t in producer:
                parent[find(producer[t])] = find(i)
    groups: Dict[int, List[int]] = {}
    for i in sorted(chosen):
        groups.setdefault(find(i), []).append(i)
    return sorted(groups.values(), key=lambda members: (-sum(_work(nodes[i], g) for i in members), members[0]))


def _work(node: Any, g: OnnxGraph) -> int:
    """Multiply-adds of a seed (window volume x outputs x input channels per group); 0 for per-frame nodes."""
    ys = g.shape(node.output[0]) if node.output else None
    if node.op_type not in ("Conv", "MaxPool", "AveragePool") or not ys or not all(ys):
        return 0
    outputs = 1
    for d in ys:
        outputs *= int(d)
    if node.op_type == "Conv":
        w = g.value(node.input[1])
        return outputs * int(w[0].size) if w is not None else outputs
    kernel = node_attrs(node).get("kernel_shape", [1])
    volume = 1
    for k in kernel:
        volume *= int(k)
    return outputs * volume


def fold_time(model: Any, max_regions: Optional[int] = None) -> FoldResult:
    """The rewritten copy of ``model`` (an ONNX ``ModelProto``); see the module docstring.

    ``max_regions`` keeps only that many folded regions, those with the most convolution work: each region is
    one DLA loadable, and a core loads 16 at most, so a deep (2+1)D net may have to leave some on the GPU.
    """
    from jetforge.optional import require

    onnx = require("onnx", "folding time into the batch (jetforge dla-check --fold-time)")
    proto = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    g = OnnxGraph(proto)
    chosen = plan_fold(proto)
    regions = fold_regions(proto, chosen)
    result = FoldResult(model=None, regions=len(regions))
    if max_regions is not None and len(regions) > max_regions:
        dropped = [i for members in regions[max(0, max_regions):] for i in members]
        chosen = {i: how for i, how in chosen.items() if i not in set(dropped)}
        result.regions, result.regions_dropped = max(0, max_regions), len(regions) - max(0, max_regions)
    for node in proto.graph.node:
        if node.op_type in ("Conv", "MaxPool", "AveragePool") and len(g.shape(node.input[0]) or []) == 5:
            problem = _seed_problem(node, g)
            if problem:
                result.skipped[node.name or node.output[0]] = problem
    if not chosen:
        result.model = proto
        return result
    result.model = _rewrite(proto, g, chosen, result)
    onnx.checker.check_model(result.model)
    return result


def _rewrite(proto: Any, g: OnnxGraph, chosen: Dict[int, str], result: FoldResult) -> Any:
    """Emit the new node list: folds before, 2-D nodes, unfolds where an outside reader needs the 5-D tensor."""
    from onnx import helper

    nodes = list(proto.graph.node)
    folded_outputs = {o for i in chosen for o in nodes[i].output if o}
    outside_readers: Set[str] = {o.name for o in proto.graph.output}
    for i, node in enumerate(nodes):
        if i not in chosen:
            outside_readers.update(t for t in node.input if t)
    builder = _Builder(proto, g)
    new_nodes: List[Any] = []
    for i, node in enumerate(nodes):
        if i not in chosen:
            new_nodes.append(node)
            continue
        inputs = []
        for t in node.input:
            if t and t not in g.constant:
                if t not in folded_outputs and t not in builder.folded:
                    new_nodes.extend(builder.fold(t))
                    result.folds += 1
                inputs.append(builder.folded_name(t))
            else:
                inputs.append(t)
        new_nodes.append(builder.two_d(node, inputs))
        (result.seeds if chosen[i] == "seed" else result.per_frame).append(node.name or node.output[0])
        for o in node.output:
            if o and o in outside_readers:
                new_nodes.extend(builder.unfold(o))
                result.unfolds += 1
    used = {t for n in new_nodes for t in n.input}
    kept = [i for i in list(proto.graph.initializer) + builder.initializers if i.name in used]  # 3-D weights go
    graph = helper.make_graph(new_nodes, proto.graph.name, list(proto.graph.input), list(proto.graph.output), kept)
    out = helper.make_model(graph, opset_imports=list(proto.opset_import), producer_name=proto.producer_name)
    out.ir_version = proto.ir_version
    return out


class _Builder:
    """Makes the fold/unfold nodes, the 2-D nodes and their constants, with names that cannot collide."""

    def __init__(self, proto: Any, g: OnnxGraph) -> None:
        self.g = g
        self.initializers: List[Any] = []
        self.folded: Dict[str, str] = {}
        self.taken = {t for n in proto.graph.node for t in list(n.input) + list(n.output)}
        self.taken.update(i.name for i in proto.graph.initializer)

    def name(self, base: str) -> str:
        out, k = base + SUFFIX, 1
        while out in self.taken:
            out, k = "%s%s%d" % (base, SUFFIX, k), k + 1
        self.taken.add(out)
        return out

    def const(self, base: str, values: Any) -> str:
        import numpy as np
        from onnx import numpy_helper

        name = self.name(base)
        self.initializers.append(numpy_helper.from_array(np.asarray(values), name))
        return name

    def folded_name(self, tensor: str) -> str:
        if tensor not in self.folded:
            self.folded[tensor] = self.name(tensor)
        return self.folded[tensor]

    def fold(self, tensor: str) -> List[Any]:
        from onnx import helper

        _n, c, _t, h, w = self.g.shape(tensor)
        moved = self.name(tensor + "_ntchw")
        shape = self.const(tensor + "_frames_shape", [-1, c, h, w])
        return [helper.make_node("Transpose", [tensor], [moved], perm=[0, 2, 1, 3, 4], name=self.name(tensor + "_T")),
                helper.make_node("Reshape", [moved, shape], [self.folded_name(tensor)],
                                 name=self.name(tensor + "_to_frames"))]

    def unfold(self, tensor: str) -> List[Any]:
        from onnx import helper

        _n, c, t, h, w = self.g.shape(tensor)
        moved = self.name(tensor + "_ntchw")
        shape = self.const(tensor + "_clip_shape", [-1, t, c, h, w])
        return [helper.make_node("Reshape", [self.folded_name(tensor), shape], [moved],
                                 name=self.name(tensor + "_to_clip")),
                helper.make_node("Transpose", [moved], [tensor], perm=[0, 2, 1, 3, 4], name=self.name(tensor + "_T"))]

    def two_d(self, node: Any, inputs: List[str]) -> Any:
        """``node`` on folded data: same op; a seed's window (and a Conv's weight) lose the time axis."""
        from onnx import helper

        attrs = node_attrs(node)
        outputs = [self.folded_name(o) if o else "" for o in node.output]
        if node.op_type in ("Conv", "MaxPool", "AveragePool"):
            xs = self.g.shape(node.input[0])
            if node.op_type == "Conv":
                weight = self.g.value(node.input[1])
                inputs[1] = self.const(node.input[1] + "_2d", weight[:, :, 0])
                kernel = list(attrs.get("kernel_shape") or weight.shape[2:])
            else:
                kernel = list(attrs["kernel_shape"])
            strides = list(attrs.get("strides", [1, 1, 1]))
            dilations = list(attrs.get("dilations", [1, 1, 1]))
            pads = conv_pads(attrs, xs[2:], kernel, strides, dilations)
            attrs.update(kernel_shape=kernel[1:], strides=strides[1:], pads=pads[1:3] + pads[4:6])
            attrs.pop("auto_pad", None)
            if "dilations" in attrs:
                attrs["dilations"] = dilations[1:]
        return helper.make_node(node.op_type, inputs, outputs, name=self.name(node.name or node.op_type),
                                domain=node.domain or None, **attrs)


def check_foldable(model: Any, where: str) -> None:
    """Refuse a model without 5-D inputs: folding time needs a clip tensor (N, C, T, H, W)."""
    g = OnnxGraph(model)
    if not any(len(g.shape(i) or []) == 5 for i in g.inputs):
        raise ModelError("%s has no 5-D (N, C, T, H, W) input: there is no time axis to fold" % where,
                         hint="--fold-time is for clip models (3-D / (2+1)D convolutions); a 2-D model needs none")


def fold_for_dla(model: Any, max_regions: Optional[int] = None, **analysis_args: Any) -> Tuple[FoldResult, Any]:
    """Fold time and predict the placement of the result; without ``max_regions``, keep as many regions as fit
    the target's loadables per core (the biggest first).  ``analysis_args`` go to
    :func:`~.analyze.analyze_onnx` (target, precision, input_shapes, ...).  Returns (fold, analysis)."""
    from jetforge.runtime.tensorrt.dla.analyze import analyze_onnx

    check_foldable(model, "the model")
    result = fold_time(model, max_regions)
    analysis = analyze_onnx(result.model, **analysis_args)
    while max_regions is None and analysis.exceeds_loadables and result.regions > 0:
        keep = max(0, result.regions - (analysis.num_subgraphs - analysis.loadables_per_core))
        result = fold_time(model, keep)
        analysis = analyze_onnx(result.model, **analysis_args)
    return result, analysis


def write_folded(result: FoldResult, source: PathLike, output: PathLike) -> Path:
    """Write the folded model atomically, with a copy of the source's sidecar (same inputs, outputs, contract)
    that records the rewrite; ``output`` must not be the source."""
    from jetforge.optional import require

    onnx = require("onnx", "writing the time-folded model")
    check_not_input(output, [source])
    with atomic_output(output, suffix=".onnx") as tmp:
        onnx.save(result.model, str(tmp))
    if sidecar_path(source).is_file():
        old = read_sidecar(source)
        extra = dict(old.extra)
        extra["time_folded"] = {"source_model": Path(source).name, "source_sha256": old.content_sha256,
                                "seeds": len(result.seeds), "per_frame": len(result.per_frame),
                                "regions": result.regions, "regions_left_3d": result.regions_dropped,
                                "note": "tensor names inside folded regions changed: calibrate this model itself"}
        new = ModelSidecar(task=old.task, model_name=old.model_name, inputs=list(old.inputs),
                           outputs=list(old.outputs), input=old.input, labels=list(old.labels),
                           produced_by=produced_by("fold-time", source=Path(source).name), extra=extra)
        write_sidecar(output, new)
    return Path(output)
