"""Turn a float model into a QAT model, and give its activation quantizers ranges from real data.

:func:`prepare_qat` works on a copy traced with ``torch.fx``:

1. **Checks** that every layer is one QAT handles: ``Conv2d``, ``Conv3d`` (3D, (2+1)D, depthwise and
   grouped) and ``Linear`` are quantized; BatchNorm, activations, 2D and 3D pooling, flatten, dropout
   and parameter-free modules stay float (as TensorRT runs them or fuses them).  Any other layer with
   weights (Conv1d, ConvTranspose, RNNs, attention, embeddings, a convolution subclass with its own
   ``forward``, ...) and functional convolutions / matmuls are refused with the list of offending
   layers -- they would silently stay float and untrained for INT8.
2. **Folds BatchNorm** (2d into ``Conv2d``, 3d into ``Conv3d``) into the convolution before it (weights
   and bias rewritten with the running statistics), so the weight that is fake-quantized is the folded
   weight TensorRT executes; the BN statistics are thereby frozen for QAT.  A BatchNorm with no
   convolution before it becomes a frozen per-channel affine (:class:`FrozenBatchNorm`).
3. **Swaps** ``Conv2d``/``Conv3d``/``Linear`` for :class:`QuantConv2d`/:class:`QuantConv3d`/:class:`QuantLinear`
   and every residual ``a + b`` of two tensors for a :class:`QuantAdd` module.

Convolution subclasses that only change the constructor (torchvision's video ``Conv3DSimple``,
``Conv2Plus1D``'s factors, ``Conv3DNoTemporal``) are traced as the convolution they are and quantized.
"""

import copy
import logging
import operator
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Tuple

import torch
from torch import fx, nn

from jetforge.compress.qat.modules import FrozenBatchNorm, QuantAdd, QuantConv2d, QuantConv3d, QuantLinear
from jetforge.compress.qat.quantizer import TensorQuantizer
from jetforge.errors import CompressError

log = logging.getLogger(__name__)

QUANTIZED = (nn.Conv2d, nn.Conv3d, nn.Linear)
QUANT_CLASSES = {nn.Conv2d: QuantConv2d, nn.Conv3d: QuantConv3d, nn.Linear: QuantLinear}
BATCHNORM_OF = {nn.BatchNorm2d: nn.Conv2d, nn.BatchNorm3d: nn.Conv3d}  # which convolution each BN folds into
FLOAT_OK = (nn.BatchNorm2d, nn.BatchNorm1d, nn.BatchNorm3d, nn.ReLU, nn.ReLU6, nn.Hardtanh, nn.Sigmoid,
            nn.Hardsigmoid, nn.Hardswish, nn.SiLU, nn.GELU, nn.Tanh, nn.LeakyReLU, nn.MaxPool2d, nn.AvgPool2d,
            nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d, nn.MaxPool3d, nn.AvgPool3d, nn.AdaptiveAvgPool3d,
            nn.AdaptiveMaxPool3d, nn.Flatten, nn.Dropout, nn.Dropout2d, nn.Dropout3d, nn.Identity,
            nn.Softmax, nn.Upsample, nn.ZeroPad2d, nn.ConstantPad3d)
UNSUPPORTED_FUNCTIONS = {torch.nn.functional.conv1d: "F.conv1d", torch.nn.functional.conv2d: "F.conv2d",
                         torch.nn.functional.conv3d: "F.conv3d", torch.nn.functional.linear: "F.linear",
                         torch.matmul: "torch.matmul", torch.bmm: "torch.bmm", torch.einsum: "torch.einsum",
                         operator.matmul: "@"}
ADD_TARGETS = (operator.add, operator.iadd, torch.add)
SUPPORTED_TEXT = ("Conv2d, Conv3d (grouped/depthwise too), Linear and residual adds (BatchNorm, activations, "
                  "2D/3D pooling and reshapes stay float)")


@dataclass
class QatSummary:
    """What :func:`prepare_qat` changed."""

    quantized_convs: List[str] = field(default_factory=list)
    quantized_linears: List[str] = field(default_factory=list)
    quantized_adds: List[str] = field(default_factory=list)
    folded_batchnorms: List[Tuple[str, str]] = field(default_factory=list)  # (bn, into conv)
    frozen_batchnorms: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return {"conv": len(self.quantized_convs), "linear": len(self.quantized_linears),
                "add": len(self.quantized_adds), "batchnorm_folded": len(self.folded_batchnorms),
                "batchnorm_frozen": list(self.frozen_batchnorms),
                "batchnorm": "folded into the preceding convolution before QAT (statistics frozen)"}


def float_layer_kind(m: nn.Module) -> Optional[type]:
    """The float class (Conv2d, Conv3d, Linear) that ``m`` is quantized as, or None.

    A subclass counts only when it keeps its base class's ``forward`` (torchvision's ``Conv3DSimple`` does);
    one with its own ``forward`` computes something else, which the quantized copy would not reproduce.
    """
    if isinstance(m, (QuantConv2d, QuantConv3d, QuantLinear)):
        return None
    for base in QUANT_CLASSES:
        if isinstance(m, base) and type(m).forward is base.forward:
            return base
    return None


def unsupported_layers(model: nn.Module) -> List[str]:
    """``name (Type)`` of every leaf module with parameters that QAT neither quantizes nor may keep float."""
    bad = []
    for name, m in model.named_modules():
        kind = float_layer_kind(m)
        if kind is not None and kind is not nn.Linear and m.padding_mode != "zeros":
            bad.append("%s (%s with padding_mode=%s)" % (name, kind.__name__, m.padding_mode))
            continue
        if kind is not None or isinstance(m, FLOAT_OK + (QuantConv2d, QuantConv3d, QuantLinear, QuantAdd,
                                                         TensorQuantizer, FrozenBatchNorm)):
            continue
        if isinstance(m, QUANTIZED):
            base = next(b for b in QUANTIZED if isinstance(m, b))
            bad.append("%s (%s: a %s subclass with its own forward)" % (name or "<model>", type(m).__name__,
                                                                       base.__name__))
            continue
        if any(True for _ in m.parameters(recurse=False)):
            bad.append("%s (%s)" % (name or "<model>", type(m).__name__))
    return bad


class _QatTracer(fx.Tracer):
    """torch.fx's tracer, with convolution subclasses that keep the base ``forward`` kept as one module call
    (the default tracer only keeps ``torch.nn`` modules whole and would trace into torchvision's
    ``Conv3DSimple`` down to a functional ``conv3d``)."""

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return float_layer_kind(m) is not None or super().is_leaf_module(m, qualname)


def _trace(model: nn.Module) -> fx.GraphModule:
    try:
        tracer = _QatTracer()
        graph = tracer.trace(model)
        return fx.GraphModule(tracer.root, graph, type(model).__name__)
    except Exception as err:
        raise CompressError("QAT needs a model torch.fx can trace; %s failed: %s: %s"
                            % (type(model).__name__, type(err).__name__, str(err).splitlines()[0] if str(err) else ""),
                            hint="remove data-dependent Python control flow from forward(), or prepare the "
                                 "traceable part") from err


def _set_module(root: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, attr = name.rpartition(".")
    parent = root.get_submodule(parent_name) if parent_name else root
    setattr(parent, attr, new)


def _fold(conv: nn.Module, bn: nn.Module) -> None:
    with torch.no_grad():
        std = torch.sqrt(bn.running_var + bn.eps)
        gamma = bn.weight if bn.weight is not None else torch.ones_like(std)
        beta = bn.bias if bn.bias is not None else torch.zeros_like(std)
        g = gamma / std
        conv.weight.mul_(g.reshape(-1, *([1] * (conv.weight.dim() - 1))))
        bias = conv.bias if conv.bias is not None else torch.zeros_like(std)
        new_bias = (bias - bn.running_mean) * g + beta
        conv.bias = nn.Parameter(new_bias.detach().clone())


def fold_batchnorm(gm: fx.GraphModule, summary: Optional[QatSummary] = None) -> fx.GraphModule:
    """Fold every Conv2d -> BatchNorm2d and Conv3d -> BatchNorm3d pair (the conv's only user) of a traced model,
    in place."""
    summary = summary if summary is not None else QatSummary()
    modules = dict(gm.named_modules())
    for node in list(gm.graph.nodes):
        bn = modules.get(node.target) if node.op == "call_module" else None
        conv_kind = next((c for b, c in BATCHNORM_OF.items() if type(bn) is b), None)
        if conv_kind is None:
            continue
        src = node.args[0] if node.args else None
        if (isinstance(src, fx.Node) and src.op == "call_module"
                and float_layer_kind(modules.get(src.target)) is conv_kind
                and len(src.users) == 1 and bn.track_running_stats and bn.running_var is not None):
            _fold(modules[src.target], bn)
            node.replace_all_uses_with(src)
            gm.graph.erase_node(node)
            summary.folded_batchnorms.append((node.target, src.target))
        else:
            _set_module(gm, node.target, FrozenBatchNorm(bn))
            summary.frozen_batchnorms.append(node.target)
    gm.graph.eliminate_dead_code()
    gm.delete_all_unused_submodules()
    gm.recompile()
    return gm


def prepare_qat(model: nn.Module, fold_bn: bool = True, quantize_add: bool = True,
                summary: Optional[QatSummary] = None) -> fx.GraphModule:
    """A QAT copy of ``model`` (a ``torch.fx.GraphModule``, same inputs and outputs); ``model`` is untouched.

    The activation quantizers have no range yet: run :func:`calibrate_qat` next.
    """
    summary = summary if summary is not None else QatSummary()
    bad = unsupported_layers(model)
    layer_error = CompressError(
        "QAT cannot handle %d layer%s of %s: %s" % (len(bad), "s" if len(bad) > 1 else "", type(model).__name__,
                                                    ", ".join(bad[:8]) + (", ..." if len(bad) > 8 else "")),
        hint="QAT quantizes %s; replace these layers, or deploy the model with PTQ (`jetforge calibrate`)"
             % SUPPORTED_TEXT)
    was_training = model.training
    work = copy.deepcopy(model).eval()
    try:
        gm = _trace(work)
    except CompressError:
        if bad:
            raise layer_error from None
        raise
    functional = ["%s (%s)" % (n.name, UNSUPPORTED_FUNCTIONS[n.target]) for n in gm.graph.nodes
                  if n.op == "call_function" and n.target in UNSUPPORTED_FUNCTIONS]
    if functional:
        raise CompressError("QAT cannot quantize functional calls in forward(): %s" % ", ".join(functional[:8]),
                            hint="use nn.Conv2d / nn.Linear modules instead of functional calls; QAT quantizes %s"
                                 % SUPPORTED_TEXT)
    if bad:
        raise layer_error
    if fold_bn:
        fold_batchnorm(gm, summary)
    for name, m in list(gm.named_modules()):
        kind = float_layer_kind(m)
        if kind is None:
            continue
        _set_module(gm, name, QUANT_CLASSES[kind].from_float(m))
        (summary.quantized_linears if kind is nn.Linear else summary.quantized_convs).append(name)
    if quantize_add:
        k = 0
        for node in list(gm.graph.nodes):
            if node.op == "call_function" and node.target in ADD_TARGETS and len(node.args) == 2 \
                    and all(isinstance(a, fx.Node) for a in node.args) and not node.kwargs:
                name = "residual_add_%d" % k
                k += 1
                gm.add_submodule(name, QuantAdd())
                with gm.graph.inserting_after(node):
                    new = gm.graph.call_module(name, args=tuple(node.args))
                node.replace_all_uses_with(new)
                gm.graph.erase_node(node)
                summary.quantized_adds.append(name)
    share_input_quantizers(gm)
    gm.graph.lint()
    gm.recompile()
    gm.train(was_training)
    log.info("QAT model: %d conv, %d linear, %d residual adds quantized; %d BatchNorm folded",
             len(summary.quantized_convs), len(summary.quantized_linears), len(summary.quantized_adds),
             len(summary.folded_batchnorms))
    return gm


def _input_quantizer_slots(gm: fx.GraphModule) -> Dict[fx.Node, List[Tuple[nn.Module, str]]]:
    """For every tensor (fx node): the (module, attribute) of each quantizer that quantizes it."""
    modules = dict(gm.named_modules())
    slots: Dict[fx.Node, List[Tuple[nn.Module, str]]] = {}
    for node in gm.graph.nodes:
        if node.op != "call_module":
            continue
        m = modules.get(node.target)
        if isinstance(m, (QuantConv2d, QuantConv3d, QuantLinear)):
            pairs = [(0, "input_quantizer")]
        elif isinstance(m, QuantAdd):
            pairs = [(0, "input_quantizer_a"), (1, "input_quantizer_b")]
        else:
            continue
        for index, attr in pairs:
            if index < len(node.args) and isinstance(node.args[index], fx.Node):
                slots.setdefault(node.args[index], []).append((m, attr))
    return slots


def share_input_quantizers(gm: fx.GraphModule) -> int:
    """One quantizer per tensor: consumers of the same tensor (a block input feeding a conv and the residual
    add) share one quantizer, hence one scale -- a tensor has one dynamic range in a TensorRT cache."""
    shared = 0
    for node, slots in _input_quantizer_slots(gm).items():
        first = getattr(slots[0][0], slots[0][1])
        for m, attr in slots[1:]:
            if getattr(m, attr) is not first:
                setattr(m, attr, first)
                shared += 1
    return shared


def quantizers(model: nn.Module, weights: bool = False) -> Dict[str, TensorQuantizer]:
    """Activation quantizers by qualified name (weight quantizers too with ``weights=True``)."""
    out = {}
    for name, m in model.named_modules():
        if isinstance(m, TensorQuantizer) and (weights or not m.dynamic and not name.endswith("weight_quantizer")):
            out[name] = m
    return out


def calibrate_qat(model: nn.Module, batches: Iterable[Any], method: str = "entropy", percentile: float = 99.99,
                  device: str = "cpu", max_batches: Optional[int] = None) -> Dict[str, float]:
    """Set every activation quantizer's amax from ``batches`` (tensors, or (x, y) pairs) with ``method``.

    The histograms and algorithms are those of ``jetforge calibrate`` (entropy = TensorRT's
    EntropyCalibration2, percentile, mse, max).  Returns ``{quantizer name: amax}``.
    """
    from jetforge.calibrate.algorithms import ALGORITHMS, compute_amax

    ALGORITHMS.get(method)  # an unknown name fails here, before any batch runs
    qs = quantizers(model)
    if not qs:
        raise CompressError("the model has no activation quantizers", hint="call prepare_qat(model) first")
    was_training = model.training
    model.eval()
    for q in qs.values():
        q.start_calibration()
    seen = 0
    try:
        with torch.no_grad():
            for i, batch in enumerate(batches):
                if max_batches is not None and i >= max_batches:
                    break
                x = batch[0] if isinstance(batch, (tuple, list)) else batch
                model(x.to(device))
                seen += 1
        if seen == 0:
            raise CompressError("no calibration batches were given", hint="pass a non-empty data loader")
        amax = {}
        for name, q in qs.items():
            a = compute_amax(q.histogram, method, percentile=percentile)
            if a is None:
                raise CompressError("quantizer %s saw no data during calibration" % name,
                                    hint="every quantized layer must run on the calibration batches")
            q.set_amax(a)
            amax[name] = a
    finally:
        for q in qs.values():
            q.calibrating = False
            q.histogram = None
        model.train(was_training)
    log.info("calibrated %d activation quantizers (%s) on %d batches", len(amax), method, seen)
    return amax


def freeze_weight_ranges(model: nn.Module) -> int:
    """Store every weight quantizer's current ``max|w|`` (before export); returns how many."""
    n = 0
    for m in model.modules():
        if isinstance(m, (QuantConv2d, QuantConv3d, QuantLinear)):
            m.weight_quantizer.freeze(m.weight)
            n += 1
    return n


def unfreeze_weight_ranges(model: nn.Module) -> None:
    for m in model.modules():
        if isinstance(m, (QuantConv2d, QuantConv3d, QuantLinear)):
            m.weight_quantizer.unfreeze()


def set_quantization(model: nn.Module, enabled: bool) -> None:
    """Turn every quantizer on or off (off: the float model, for comparisons)."""
    for m in model.modules():
        if isinstance(m, TensorQuantizer):
            m.enabled = bool(enabled)


__all__ = ["QatSummary", "calibrate_qat", "float_layer_kind", "fold_batchnorm", "freeze_weight_ranges", "prepare_qat",
           "quantizers", "set_quantization", "unfreeze_weight_ranges", "unsupported_layers"]
