"""Counting MACs and parameters, before and after pruning.

What a MAC is here
------------------
One multiply-accumulate of a **contraction**: an op that multiplies pairs of values and
sums the products over a reduction axis.  Every such op executed on the example input
is counted, wherever it comes from (a ``Conv*``/``Linear`` module, ``F.conv*``,
``F.linear``, ``@``/``matmul``, ``bmm``, ``baddbmm``, ``einsum``, ``scaled_dot_product_attention``,
``MultiheadAttention``, torchvision's windowed attention), because the count is taken
on the ATen operations the forward pass dispatches, not on module types:

=====================================  ===============================================================
ATen op                                MACs
=====================================  ===============================================================
``mm``/``addmm`` (``[m,k] @ [k,n]``)   m * k * n
``bmm``/``baddbmm``/``addbmm``         batch * m * k * n
``mv``/``addmv``, ``dot``/``vdot``     m * k, n
``convolution`` (and its backends)     output elements * (in_channels / groups) * kernel volume;
                                       transposed: input elements * (out_channels / groups) * kernel volume
fused ``scaled_dot_product_*``         (query elements / head dim) * key length * (head dim + value dim)
                                       (``Q K^T`` and ``softmax(.) V``)
``_native_multi_head_attention``       the four projections plus both attention products
=====================================  ===============================================================

``matmul``, ``linear``, ``einsum``, ``tensordot`` and the unfused attention decompose into
the ops above before they are counted.  Not counted: element-wise ops, activations,
normalisations, softmax, pooling, resizing and data movement.  They cost memory traffic
rather than arithmetic, TensorRT fuses most of them into the neighbouring contraction,
and leaving them out is the convention of ``torch.utils.flop_counter`` (whose FLOPs are
2 x these MACs on every op both count; the tests check that, and hand-computed values).
PyTorch's fused ``MultiheadAttention``/``TransformerEncoderLayer`` fast path is switched
off while counting, so their work is seen as the contractions above.  Counts are per
sample: the run's total divided by the example input's batch size.  FLOPs = 2 x MACs.
Parameters are counted exactly (numel of every parameter).

``per_layer`` attributes each op to the innermost ``Conv*``/``Linear`` module running it,
else to the innermost module of any type (``""`` is the model's own forward); the search's
:func:`estimate` scales a traced layer's MACs with its kept channels and keeps the rest:
contractions outside those layers only ever see channels the pruner protects (it
protects whatever reaches an op it does not follow), so pruning does not change them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Sequence, Tuple

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from jetforge.compress.export import unfused_attention
from jetforge.compress.prune.graph import DependencyGraph
from jetforge.compress.prune.groups import kept_counts

METHOD = ("MACs per sample of every contraction executed on the example input (convolutions, linear layers, "
          "matmul/bmm/einsum, attention's QK^T and AV, functional or module), counted on the ATen ops "
          "dispatched with PyTorch's fused attention fast path off; FLOPs = 2 x MACs; element-wise ops, "
          "activations, norms, softmax and pooling not counted; parameters counted exactly")

_ATEN = torch.ops.aten


@dataclass
class OpCount:
    macs: int
    params: int
    per_layer: Dict[str, int] = field(default_factory=dict)  # module name -> MACs per sample (see module doc)
    per_op: Dict[str, int] = field(default_factory=dict)  # ATen op name -> MACs per sample (counted only)

    @property
    def flops(self) -> int:
        return 2 * self.macs


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# --- MACs of one ATen call, from its argument and output shapes ----------------------------------------------------
def _mm(a: torch.Tensor, b: torch.Tensor) -> int:
    return a.size(0) * a.size(1) * b.size(1)


def _bmm(a: torch.Tensor, b: torch.Tensor) -> int:
    return a.size(0) * a.size(1) * a.size(2) * b.size(2)


def _conv(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, transposed: bool) -> int:
    # weight [out, in / groups, *k] (transposed: [in, out / groups, *k]): every output element of a
    # convolution (every input element of a transposed one) takes weight[0].numel() products.
    per_element = weight.numel() // max(1, weight.size(0))
    return (x.numel() if transposed else out.numel()) * per_element


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> int:
    # q [..., L, E], k [..., S, E], v [..., S, Ev]: Q K^T takes L*S*E per head, softmax(.) V takes L*S*Ev.
    return q.numel() // q.size(-1) * k.size(-2) * (q.size(-1) + v.size(-1))


def _native_mha(args: Sequence[Any]) -> int:
    query, key, embed_dim = args[0], args[1], int(args[3])
    tokens_q = query.numel() // query.size(-1)
    tokens_k = key.numel() // key.size(-1)
    batch = query.size(0) if query.dim() == 3 else 1
    length_q, length_k = tokens_q // batch, tokens_k // batch
    projections = tokens_q * embed_dim * embed_dim * 2 + tokens_k * embed_dim * embed_dim * 2  # q, out; k, v
    return projections + batch * length_q * length_k * embed_dim * 2


def _first(out: Any) -> torch.Tensor:
    return out[0] if isinstance(out, (tuple, list)) else out


_Rule = Callable[[Sequence[Any], Any], int]
_RULES: Dict[Any, _Rule] = {
    _ATEN.mm: lambda a, out: _mm(a[0], a[1]),
    _ATEN.addmm: lambda a, out: _mm(a[1], a[2]),
    _ATEN.bmm: lambda a, out: _bmm(a[0], a[1]),
    _ATEN.baddbmm: lambda a, out: _bmm(a[1], a[2]),
    _ATEN.addbmm: lambda a, out: _bmm(a[1], a[2]),
    _ATEN.mv: lambda a, out: a[0].numel(),
    _ATEN.addmv: lambda a, out: a[1].numel(),
    _ATEN.dot: lambda a, out: a[0].numel(),
    _ATEN.vdot: lambda a, out: a[0].numel(),
    _ATEN.convolution: lambda a, out: _conv(a[0], a[1], _first(out), bool(a[6])),
    _ATEN._convolution: lambda a, out: _conv(a[0], a[1], _first(out), bool(a[6])),
    _ATEN.convolution_overrideable: lambda a, out: _conv(a[0], a[1], _first(out), bool(a[6])),
    _ATEN.cudnn_convolution: lambda a, out: _conv(a[0], a[1], _first(out), False),
    _ATEN.cudnn_convolution_transpose: lambda a, out: _conv(a[0], a[1], _first(out), True),
    _ATEN.mkldnn_convolution: lambda a, out: _conv(a[0], a[1], _first(out), False),
    _ATEN._native_multi_head_attention: lambda a, out: _native_mha(a),
}
for _name in ("_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
              "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
              "_scaled_dot_product_fused_attention_overrideable"):
    if hasattr(_ATEN, _name):
        _RULES[getattr(_ATEN, _name)] = lambda a, out: _sdpa(a[0], a[1], a[2])
for _name in ("_int_mm", "_scaled_mm"):
    if hasattr(_ATEN, _name):
        _RULES[getattr(_ATEN, _name)] = lambda a, out: _mm(a[0], a[1])


class _ContractionCounter(TorchDispatchMode):
    """Adds up the MACs of every contraction dispatched while active, per attributed module and per op."""

    def __init__(self, where: Callable[[], str]) -> None:
        super().__init__()
        self.where = where
        self.per_module: Dict[str, int] = {}
        self.per_op: Dict[str, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        rule = _RULES.get(func.overloadpacket)
        if rule is not None:
            macs = int(rule(args, out))
            key = self.where()
            self.per_module[key] = self.per_module.get(key, 0) + macs
            name = func.overloadpacket.__name__
            self.per_op[name] = self.per_op.get(name, 0) + macs
        return out


def _batch_size(inputs: Tuple[Any, ...]) -> int:
    """Samples in the example input: axis 0 of its first tensor, or the length of a list of images."""
    first = inputs[0] if inputs else None
    if isinstance(first, torch.Tensor):
        return int(first.size(0)) if first.dim() > 0 else 1
    if isinstance(first, (list, tuple)) and first and all(isinstance(t, torch.Tensor) for t in first):
        return len(first)
    return 1


def count_ops(model: nn.Module, example_inputs: Any) -> OpCount:
    """MACs per sample (see the module docstring for what is counted) and parameters of ``model``."""
    inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    layer_types = (nn.modules.conv._ConvNd, nn.Linear)
    stack: List[Tuple[str, bool]] = []  # (module name, is a conv/linear layer), innermost last

    def where() -> str:
        for name, is_layer in reversed(stack):
            if is_layer:
                return name
        return stack[-1][0] if stack else ""

    def enter(name: str, is_layer: bool) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any) -> None:
            stack.append((name, is_layer))
        return hook

    def leave(module: nn.Module, args: Any, out: Any) -> None:
        if stack:
            stack.pop()

    handles = []
    for name, m in model.named_modules():
        handles.append(m.register_forward_pre_hook(enter(name, isinstance(m, layer_types))))
        handles.append(m.register_forward_hook(leave, always_call=True))
    modes = {m: m.training for m in model.modules()}
    model.eval()
    counter = _ContractionCounter(where)
    try:
        with torch.no_grad(), unfused_attention(), counter:
            model(*inputs)
    finally:
        for h in handles:
            h.remove()
        for m, mode in modes.items():
            m.training = mode
    batch = max(1, _batch_size(inputs))
    per_layer = {k: v // batch for k, v in counter.per_module.items()}
    per_op = {k: v // batch for k, v in sorted(counter.per_op.items())}
    return OpCount(sum(per_layer.values()), count_params(model), per_layer, per_op)


def layer_macs_outside(count: OpCount, layers: Sequence[str]) -> Dict[str, int]:
    """The counted MACs of modules that are not among ``layers`` (attention, functional ops, untraced layers)."""
    names = set(layers)
    return {k: v for k, v in count.per_layer.items() if k not in names and v}


def estimate(graph: DependencyGraph, model: nn.Module, before: OpCount, removed: torch.Tensor) -> OpCount:
    """MACs and parameters after removing ``removed``, without touching the model (used by the search).

    Each traced layer's counted MACs scale with its kept (out x in / groups) fraction;
    every other counted contraction stays (see the module docstring for why that is exact);
    each parameter's numel scales with the kept fraction of each of its pruned axes.
    """
    kept = kept_counts(graph, removed)
    per_layer = dict(before.per_layer)
    for name, rec in graph.layers.items():
        if name not in per_layer:
            continue
        out_k = kept[rec.out_key] if rec.out_key else None
        in_k = kept[rec.in_key] if rec.in_key else None
        g = rec.groups
        if rec.kind == "convT":
            in_new = in_k if in_k is not None else rec.in_channels
            g_new = g * in_new // rec.in_channels if g > 1 else 1
            out_new = out_k if out_k is not None else rec.out_channels * g_new // g
            factor = (in_new / rec.in_channels) * ((out_new / g_new) / (rec.out_channels / g))
        else:
            out_new = out_k if out_k is not None else rec.out_channels
            g_new = g * out_new // rec.out_channels if g > 1 else 1
            in_new = in_k if in_k is not None else rec.in_channels * g_new // g
            factor = (out_new / rec.out_channels) * ((in_new / g_new) / (rec.in_channels / g))
        per_layer[name] = int(round(per_layer[name] * factor))
    sizes: Dict[Tuple[str, str], float] = {}
    for (module, tensor, dim), slot in graph.slots.items():
        sizes[(module, tensor)] = sizes.get((module, tensor), 1.0) * kept[(module, tensor, dim)] / slot.labels.numel()
    params = 0
    for name, p in model.named_parameters():
        module, _, tensor = name.rpartition(".")
        params += int(round(p.numel() * sizes.get((module, tensor), 1.0)))
    return OpCount(sum(per_layer.values()), params, per_layer)
