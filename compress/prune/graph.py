"""The channel dependency graph: which channels of which tensors must be removed together.

How it works (and why it is not an op-by-op table of index mappings)
--------------------------------------------------------------------
The model is traced with ``torch.fx`` and then *executed* once on the example input by
a small interpreter that carries, next to every real tensor, a **label tensor** of the
same shape whose integers name the channel each element belongs to.  Movement ops
(view, reshape, flatten, permute, transpose, cat, chunk, channel shuffle, ...) are
applied to the label tensor exactly as to the real one, so the labels follow every
channel wherever it goes: a ``flatten`` before a ``Linear`` maps each channel to its
H*W input features, a ``cat`` offsets the channels of each piece, a channel shuffle
permutes them, without a special rule for any of these.

Labels are merged (union-find) where an operation couples channels: an elementwise
add/mul unites the two operands position by position (residuals, SE gating), a
depthwise or grouped convolution unites each group's input and output channels (so a
group is removed whole), a GroupNorm unites the channels of each of its groups, a
``chunk`` or a ``view`` that splits the channel axis by a constant factor unites the
matching positions of the pieces (so every piece keeps the same size).  A *class* is
one merged label; removing a class removes every tensor slice labelled with it.

What the interpreter does not know is never guessed: an unknown op, a split with
constant sizes, an index that selects some channels, an untraceable submodule --
every label reaching it is **frozen** (never removed), and the op is reported by name
with the reason.  Model inputs and outputs are frozen, so output shapes never change.
"""

from __future__ import annotations

import logging
import math
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

import torch
import torch.fx as fx
from torch import nn

from jetforge.errors import CompressError

log = logging.getLogger(__name__)

FROZEN = 0  # label of channels that must never be removed (model inputs, outputs of unknown ops)

SlotKey = Tuple[str, str, int]  # (module path, tensor name, dim)

# --- op vocabularies (names of torch functions, Tensor methods and operator functions) --------------------------
_UNARY = {
    "relu", "relu_", "relu6", "sigmoid", "sigmoid_", "tanh", "tanh_", "hardswish", "hardsigmoid", "silu", "gelu",
    "elu", "selu", "celu", "leaky_relu", "mish", "softplus", "hardtanh", "hardtanh_", "dropout", "dropout1d",
    "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout", "contiguous", "clone", "detach", "float",
    "half", "to", "abs", "neg", "exp", "sqrt", "rsqrt", "clamp", "clamp_", "clamp_min", "clamp_max", "sign",
    "square", "reciprocal", "log", "erf", "softmax", "log_softmax", "sigmoid", "logsigmoid", "hardshrink",
    "softsign", "tanhshrink", "type_as", "silu_", "gelu_", "mish_", "hardswish_", "hardsigmoid_", "bfloat16",
    "double", "requires_grad_", "stochastic_depth",
}
_BINARY = {"add", "sub", "mul", "truediv", "div", "iadd", "isub", "imul", "itruediv", "add_", "sub_", "mul_", "div_",
           "maximum", "minimum", "pow", "radd", "rmul", "rsub", "floordiv", "mod"}
_RESHAPE = {"view", "reshape"}
_MOVEMENT = {"flatten", "permute", "transpose", "squeeze", "unsqueeze", "expand", "repeat", "t", "movedim",
             "swapaxes", "swapdims"}
_CAT = {"cat", "concat", "concatenate"}
_PER_CHANNEL = {
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d",
    "adaptive_max_pool2d", "adaptive_max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d", "max_pool1d",
    "max_pool2d", "max_pool3d", "interpolate", "upsample", "upsample_nearest", "upsample_bilinear", "pad",
}
_REDUCE = {"mean", "sum", "amax", "amin", "std", "var", "norm", "logsumexp"}
_FOLLOWED = _UNARY | _BINARY | _RESHAPE | _MOVEMENT | _CAT | _PER_CHANNEL | _REDUCE | {
    "expand_as", "stack", "chunk", "split"}  # every op name _labels has a rule for (plus getitem and modules)


@dataclass
class Slot:
    """One axis of one parameter or buffer whose indices are channels: ``tensor[dim][i]`` is labelled ``labels[i]``."""

    module: str
    tensor: str
    dim: int
    labels: torch.Tensor  # raw labels (1-D) until finalize(), then class ordinals (-1 = frozen)
    module_type: str
    role: str  # "weight", "bias" or "buffer"

    @property
    def key(self) -> SlotKey:
        return (self.module, self.tensor, self.dim)


@dataclass
class LayerRecord:
    """A compute layer seen in the trace, for counting MACs under any pruning (see flops.py)."""

    name: str
    kind: str  # "conv", "convT", "linear"
    groups: int
    in_channels: int
    out_channels: int
    kernel: int  # product of kernel dims (1 for linear)
    positions: int  # output positions per sample (conv: spatial size; convT: input spatial; linear: leading dims)
    in_key: Optional[SlotKey]  # slot holding the input channels (None: grouped, follows out_key)
    out_key: Optional[SlotKey]


@dataclass
class Unsupported:
    """An operation or submodule that blocks pruning of the channels reaching it."""

    where: str  # node or module name
    op: str
    reason: str

    def to_dict(self) -> Dict[str, str]:
        return {"where": self.where, "op": self.op, "reason": self.reason}


@dataclass
class Group:
    """Channel classes that are coupled to the same layers in the same way; the unit of selection and rounding.

    ``classes`` are class ordinals; removing one removes, in every slot of ``slots``,
    ``widths[slot]`` indices (1 for a plain conv/BN channel, H*W for a Linear after a
    flatten, the group width for a grouped convolution).
    """

    index: int
    name: str
    classes: torch.Tensor
    widths: Dict[SlotKey, int]

    def __len__(self) -> int:
        return int(self.classes.numel())

    def class_multiple(self, round_to: int) -> int:
        """How many classes to keep at a time so that every slot keeps a multiple of ``round_to`` indices."""
        q = 1
        for w in self.widths.values():
            need = round_to // math.gcd(round_to, w)
            q = q * need // math.gcd(q, need)
        return q


class _UnionFind:
    """Union-find over integer labels with a frozen flag on roots; label 0 is frozen from the start."""

    def __init__(self) -> None:
        self.parent: List[int] = [0]
        self.frozen: List[bool] = [True]

    def new(self, n: int) -> torch.Tensor:
        start = len(self.parent)
        self.parent.extend(range(start, start + n))
        self.frozen.extend([False] * n)
        return torch.arange(start, start + n, dtype=torch.long)

    def find(self, x: int) -> int:
        parent = self.parent
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        if rb < ra:
            ra, rb = rb, ra
        self.parent[rb] = ra  # the smaller id wins, so FROZEN (0) stays a root
        self.frozen[ra] = self.frozen[ra] or self.frozen[rb]

    def union_tensors(self, a: torch.Tensor, b: torch.Tensor) -> None:
        a, b = torch.broadcast_tensors(a, b)
        a, b = a.reshape(-1), b.reshape(-1)
        diff = a != b
        if not bool(diff.any()):
            return
        pairs = torch.unique(a[diff] * (1 << 32) + b[diff])
        for p in pairs.tolist():
            self.union(p >> 32, p & 0xFFFFFFFF)

    def freeze(self, labels: torch.Tensor) -> int:
        """Freeze every class in ``labels``; returns how many were not frozen before."""
        newly = 0
        if not bool(labels.any()):  # all FROZEN already (outputs of unknown ops): skip the costly unique
            return 0
        for x in torch.unique(labels).tolist():
            r = self.find(x)
            if not self.frozen[r]:
                self.frozen[r] = True
                newly += 1
        return newly

    def root_table(self) -> torch.Tensor:
        return torch.tensor([self.find(i) for i in range(len(self.parent))], dtype=torch.long)


def _varying_dims(labels: torch.Tensor) -> List[int]:
    """Dims along which ``labels`` is not constant (so channels are laid out along them)."""
    out = []
    for d in range(labels.dim()):
        if labels.size(d) > 1 and not bool((labels == labels.narrow(d, 0, 1)).all()):
            out.append(d)
    return out


def _tree_tensors(value: Any) -> List[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tree_tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tree_tensors(v)]
    return []


def _tree_map(fn: Callable[[torch.Tensor], Any], value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*[_tree_map(fn, v) for v in value])
    if isinstance(value, (list, tuple)):
        return type(value)(_tree_map(fn, v) for v in value)
    if isinstance(value, dict):
        return type(value)((k, _tree_map(fn, v)) for k, v in value.items())
    return value


def _mutable_copy(value: Any) -> Any:
    """``value`` with every list and dict (fx's immutable ones included) copied into a plain, editable one."""
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*[_mutable_copy(v) for v in value])
    if isinstance(value, tuple):
        return tuple(_mutable_copy(v) for v in value)
    if isinstance(value, list):
        return [_mutable_copy(v) for v in value]
    if isinstance(value, dict):
        return {key: _mutable_copy(v) for key, v in value.items()}
    return value


def _frozen_like(value: Any) -> Any:
    return _tree_map(lambda t: torch.zeros(t.shape, dtype=torch.long), value)


def _followed(node: fx.Node) -> bool:
    """Whether the interpreter has a rule for ``node`` (else it protects whatever reaches it)."""
    if node.op == "call_module":
        return True
    if node.op == "call_function" and node.target is operator.getitem:
        return True
    return node.op in ("call_function", "call_method") and _op_name(node) in _FOLLOWED


def _op_name(node: fx.Node) -> str:
    if node.op == "call_method":
        return str(node.target)
    if node.op == "call_module":
        return str(node.target)
    name = getattr(node.target, "__name__", str(node.target))
    return name


def _expand_channel_vector(vec: torch.Tensor, shape: Sequence[int], dim: int = 1) -> torch.Tensor:
    view = [1] * len(shape)
    view[dim] = vec.numel()
    return vec.reshape(view).expand(*shape)


class _LabelInterpreter:
    """Runs one traced graph on real tensors and label tensors side by side (see the module docstring)."""

    def __init__(self, builder: "_Builder", gm: fx.GraphModule, prefix: str) -> None:
        self.b = builder
        self.uf = builder.uf
        self.gm = gm
        self.prefix = prefix
        self.modules = dict(gm.named_modules())

    def qual(self, name: str) -> str:
        return self.prefix + "." + name if self.prefix and name else (self.prefix or name)

    # --- entry point -------------------------------------------------------------------------------------------
    def run(self, args: Sequence[Any], kwargs: Dict[str, Any]) -> None:
        real: Dict[fx.Node, Any] = {}
        lab: Dict[fx.Node, Any] = {}
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        values = list(args)
        for i, node in enumerate(placeholders):
            if i < len(values):
                real[node] = values[i]
            elif node.target in kwargs:
                real[node] = kwargs[node.target]
            else:
                real[node] = node.args[0] if node.args else None
            lab[node] = _frozen_like(real[node])
        with torch.no_grad():
            for node in self.gm.graph.nodes:
                if node.op == "placeholder":
                    continue
                if node.op == "output":
                    out_labels = fx.node.map_arg(node.args[0], lambda n: lab[n])
                    for t in _tree_tensors(out_labels):
                        self.uf.freeze(t)
                    continue
                # fx hands read-only lists and dicts; the code being run may edit its arguments in place
                # (torchvision's swin3d edits its window-size list), as it may in eager mode on its own copy.
                a = _mutable_copy(fx.node.map_arg(node.args, lambda n: real[n]))
                k = _mutable_copy(fx.node.map_arg(node.kwargs, lambda n: real[n]))
                la = fx.node.map_arg(node.args, lambda n: lab[n])
                lk = fx.node.map_arg(node.kwargs, lambda n: lab[n])
                if node.op == "get_attr":
                    out = self._fetch_attr(str(node.target))
                    real[node] = out
                    if any(_followed(user) for user in node.users):
                        lab[node] = self._attr_labels(str(node.target), out)
                    else:
                        # Only ops the pruner does not follow use it (a weight handed to torchvision's windowed
                        # attention): it stays whole, so it needs no per-element labels, which for large
                        # weights would cost millions of union-find entries.
                        lab[node] = _frozen_like(out)
                    continue
                if node.op == "call_module":
                    out = self.modules[str(node.target)](*a, **k)
                elif node.op == "call_function":
                    out = node.target(*a, **k)
                else:  # call_method
                    out = getattr(a[0], str(node.target))(*a[1:], **k)
                real[node] = out
                if not _tree_tensors(out):
                    lab[node] = None
                    continue
                lab[node] = self._labels(node, a, k, la, lk, out)

    # --- get_attr: parameters and buffers used directly in forward (e.g. FrozenBatchNorm2d) ---------------------
    def _fetch_attr(self, target: str) -> Any:
        obj: Any = self.gm
        for part in target.split("."):
            obj = getattr(obj, part)
        return obj

    def _attr_labels(self, target: str, value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return _frozen_like(value)
        key = self.qual(target)
        if key not in self.b.attr_labels:
            owner, _, name = key.rpartition(".")
            module = self.b.root.get_submodule(owner) if owner else self.b.root
            if name not in module._parameters and name not in module._buffers:
                return _frozen_like(value)  # a plain tensor attribute: treat as a constant
            self.b.attr_labels[key] = self.uf.new(value.numel()).reshape(value.shape)
            self.b.attr_types[key] = (type(module).__name__, "weight" if name in module._parameters else "buffer")
        return self.b.attr_labels[key]

    # --- dispatch ---------------------------------------------------------------------------------------------------
    def _labels(self, node: fx.Node, a: Any, k: Dict[str, Any], la: Any, lk: Dict[str, Any], out: Any) -> Any:
        if node.op == "call_module":
            return self._module_labels(node, self.modules[str(node.target)], a, la, out)
        name = _op_name(node)
        if node.op == "call_function" and node.target is operator.getitem:
            return self._getitem(node, a, la, out)
        if name in _UNARY:
            if isinstance(la[0], torch.Tensor) and isinstance(out, torch.Tensor) and out.shape == la[0].shape:
                return la[0]
            return self.unsupported(node, name, "unary op that changes the shape", la, lk, out)
        if name in _BINARY:
            return self._elementwise(node, name, a, la, out)
        if name in _RESHAPE:
            return self._reshape(node, name, a, la, out)
        if name in _MOVEMENT or name == "expand_as":
            return self._movement(node, name, a, k, la, out)
        if name in _CAT:
            return self._cat(node, name, a, k, la, out)
        if name == "stack":
            return self._stack(node, a, k, la, out)
        if name in ("chunk", "split"):
            return self._split(node, name, a, k, la, out)
        if name in _PER_CHANNEL:
            return self._per_channel(node, name, la[0], out)
        if name in _REDUCE:
            return self._reduce(node, name, a, k, la, out)
        return self.unsupported(node, name, "operation unknown to the pruner", la, lk, out)

    def unsupported(self, node: Any, op: str, reason: str, la: Any, lk: Any, out: Any) -> Any:
        newly = 0
        for t in _tree_tensors(la) + _tree_tensors(lk):
            newly += self.uf.freeze(t)
        if newly:
            where = self.qual(node.name) if isinstance(node, fx.Node) else str(node)
            self.b.unsupported.append(Unsupported(where, op, "%s; the channels reaching it are protected" % reason))
        return _frozen_like(out)

    # --- elementwise --------------------------------------------------------------------------------------------
    def _elementwise(self, node: fx.Node, name: str, a: Any, la: Any, out: Any) -> Any:
        if not isinstance(out, torch.Tensor):
            return self.unsupported(node, name, "elementwise op with a non-tensor result", la, {}, out)
        shape = out.shape
        ops = [l for l, v in zip(la, a) if isinstance(v, torch.Tensor) and isinstance(l, torch.Tensor)]
        if len(ops) == 1:
            l0 = ops[0]
            return l0 if tuple(l0.shape) == tuple(shape) else l0.expand(shape)
        try:
            expanded = [l.expand(shape) for l in ops]
        except RuntimeError:
            return self.unsupported(node, name, "in-place broadcast the pruner cannot follow", la, {}, out)
        varying = [set(_varying_dims(e)) for e in expanded]
        broadcast = []
        for l in ops:
            pad = [1] * (len(shape) - l.dim()) + list(l.shape)
            broadcast.append({d for d in range(len(shape)) if pad[d] == 1 and shape[d] > 1})
        # An operand broadcast along a dim on which another operand's channels vary only modulates it
        # (spatial attention, a per-sample scalar): it does not couple those channels to each other.
        primary = [i for i in range(len(ops))
                   if not any(broadcast[i] & varying[j] for j in range(len(ops)) if j != i)]
        if not primary:
            return self.unsupported(node, name, "both operands broadcast across each other's channels", la, {}, out)
        for i in primary[1:]:
            self.uf.union_tensors(expanded[primary[0]], expanded[i])
        for i in range(len(ops)):
            if i not in primary and not (broadcast[i] & varying[primary[0]]):
                self.uf.union_tensors(expanded[primary[0]], expanded[i])
        return expanded[primary[0]]

    # --- movement ---------------------------------------------------------------------------------------------
    def _reshape(self, node: fx.Node, name: str, a: Any, la: Any, out: Any) -> Any:
        src = la[0]
        if len(node.args) == 2 and isinstance(node.args[1], (tuple, list, torch.Size)):
            sizes_nodes = list(node.args[1])
        else:
            sizes_nodes = list(node.args[1:])
        result = src.reshape(out.shape)
        # A constant factor that splits the channel axis (channel shuffle's view(b, groups, c // groups, h, w))
        # only stays valid if every slice along it loses the same positions: unite them.
        for d, s in enumerate(sizes_nodes):
            if isinstance(s, int) and s > 1 and d < result.dim() and d in _varying_dims(result):
                if len(_varying_dims(src)) == 0:
                    continue
                first = result.select(d, 0)
                for i in range(1, result.size(d)):
                    self.uf.union_tensors(first, result.select(d, i))
        return result

    def _movement(self, node: fx.Node, name: str, a: Any, k: Dict[str, Any], la: Any, out: Any) -> Any:
        args = [la[0]] + [x.shape if isinstance(x, torch.Tensor) and name == "expand_as" else x for x in a[1:]]
        if name == "expand_as":
            return la[0].expand(a[1].shape)
        if node.op == "call_method":
            return getattr(la[0], name)(*args[1:], **k)
        return node.target(*args, **k)

    def _cat(self, node: fx.Node, name: str, a: Any, k: Dict[str, Any], la: Any, out: Any) -> Any:
        pieces = la[0]
        dim = k.get("dim", a[1] if len(a) > 1 else 0)
        if any(not isinstance(p, torch.Tensor) for p in pieces):
            return self.unsupported(node, name, "concatenation of non-tensors", la, {}, out)
        return torch.cat(list(pieces), dim)

    def _stack(self, node: fx.Node, a: Any, k: Dict[str, Any], la: Any, out: Any) -> Any:
        pieces = list(la[0])
        dim = k.get("dim", a[1] if len(a) > 1 else 0)
        for p in pieces[1:]:
            self.uf.union_tensors(pieces[0], p)  # stacked tensors must keep equal shapes
        return torch.stack(pieces, dim)

    def _split(self, node: fx.Node, name: str, a: Any, k: Dict[str, Any], la: Any, out: Any) -> Any:
        src = la[0]
        if name == "chunk":
            dim = k.get("dim", a[2] if len(a) > 2 else 0)
            pieces = torch.chunk(src, a[1], dim)
        else:
            dim = k.get("dim", a[2] if len(a) > 2 else 0)
            size_arg = node.args[1] if len(node.args) > 1 else node.kwargs.get("split_size_or_sections")
            pieces = torch.split(src, a[1], dim)
            dim_n = dim % src.dim()
            if dim_n in _varying_dims(src) and (not isinstance(size_arg, fx.Node)):
                return self.unsupported(node, name, "split with constant sizes along the channel axis (the sizes "
                                        "would be wrong after pruning)", la, {}, out)
        dim_n = dim % src.dim()
        if dim_n in _varying_dims(src):
            if len({p.size(dim_n) for p in pieces}) != 1:
                return self.unsupported(node, name, "uneven %s along the channel axis" % name, la, {}, out)
            # Pieces keep equal sizes and their split point moves with pruning only if position i of every
            # piece is removed together.
            for p in pieces[1:]:
                self.uf.union_tensors(pieces[0], p)
        return tuple(pieces)

    def _getitem(self, node: fx.Node, a: Any, la: Any, out: Any) -> Any:
        container, index = a[0], a[1]
        if not isinstance(container, torch.Tensor):
            return la[0][index] if la[0] is not None else _frozen_like(out)
        src = la[0]
        idx = index if isinstance(index, tuple) else (index,)
        if any(isinstance(i, torch.Tensor) for i in idx):
            return self.unsupported(node, "getitem", "tensor indexing with an index tensor", la, {}, out)
        # Map index entries to source dims: a full slice keeps the dim, None adds one, an int/slice selects.
        n_real = sum(1 for i in idx if i is not None and i is not Ellipsis)
        dims: List[Tuple[int, Any]] = []
        d = 0
        for i in idx:
            if i is Ellipsis:
                d += src.dim() - n_real
            elif i is None:
                continue
            else:
                dims.append((d, i))
                d += 1
        varying = set(_varying_dims(src))
        for d, i in dims:
            if d in varying and not (isinstance(i, slice) and i == slice(None, None, None)):
                return self.unsupported(node, "getitem", "indexing selects fixed channel positions (they would "
                                        "move after pruning)", la, {}, out)
        return src[index]

    def _per_channel(self, node: fx.Node, name: str, src: Any, out: Any) -> Any:
        if not isinstance(src, torch.Tensor) or not isinstance(out, torch.Tensor):
            return self.unsupported(node, name, "per-channel op on a non-tensor", [src], {}, out)
        varying = _varying_dims(src)
        if any(d != 1 for d in varying) or out.dim() < 2:
            return self.unsupported(node, name, "spatial op on a tensor whose channels are not on axis 1",
                                    [src], {}, out)
        if out.size(1) != src.size(1):
            return self.unsupported(node, name, "op changes the number of channels", [src], {}, out)
        vec = src.select(0, 0).reshape(src.size(1), -1)[:, 0]
        return _expand_channel_vector(vec, out.shape)

    def _reduce(self, node: fx.Node, name: str, a: Any, k: Dict[str, Any], la: Any, out: Any) -> Any:
        src = la[0]
        if not isinstance(out, torch.Tensor) or out.dim() == 0:
            return _frozen_like(out)
        dims_arg = k.get("dim", a[1] if len(a) > 1 else None)
        if dims_arg is None:
            return _frozen_like(out)
        dims = [dims_arg] if isinstance(dims_arg, int) else list(dims_arg)
        dims = [d % src.dim() for d in dims]
        varying = _varying_dims(src)
        if any(d in varying for d in dims):
            # A sum/mean/max over channels stays well defined after pruning (it runs over the kept ones);
            # its result carries no channel axis.
            return _frozen_like(out)
        if varying == [1] and 1 not in dims:
            vec = src.select(0, 0).reshape(src.size(1), -1)[:, 0]
            return _expand_channel_vector(vec, out.shape)
        if not varying:
            return src.reshape(-1)[:1].expand(out.shape) if src.numel() else _frozen_like(out)
        return self.unsupported(node, name, "reduction over a layout the pruner cannot follow", la, {}, out)

    # --- modules ------------------------------------------------------------------------------------------------
    def _channel_vector(self, node: fx.Node, name: str, src: torch.Tensor, dim: int) -> Optional[torch.Tensor]:
        """Labels of axis ``dim`` if every other axis carries the same labels, else None (frozen, reported)."""
        dim = dim % src.dim()
        if any(d != dim for d in _varying_dims(src)):
            self.unsupported(node, name, "input channels are mixed with another axis", [src], {}, src)
            return None
        index = [0] * src.dim()
        index[dim] = slice(None)
        return src[tuple(index)].clone()

    def _module_labels(self, node: fx.Node, m: nn.Module, a: Any, la: Any, out: Any) -> Any:
        qual = self.qual(str(node.target))
        tname = type(m).__name__
        src = la[0] if la else None
        x = a[0] if a else None
        if isinstance(m, nn.modules.conv._ConvNd) and isinstance(x, torch.Tensor):
            return self._conv(node, qual, m, x, src, out)
        if isinstance(m, nn.Linear):
            in_vec = self._channel_vector(node, qual, src, -1)
            out_vec = self.uf.new(m.out_features)
            if in_vec is not None:
                self.b.add_slot(qual, "weight", 1, in_vec, tname, "weight")
            self.b.add_slot(qual, "weight", 0, out_vec, tname, "weight")
            if m.bias is not None:
                self.b.add_slot(qual, "bias", 0, out_vec, tname, "bias")
            positions = out.numel() // max(1, out.size(0) if out.dim() > 1 else 1) // m.out_features
            self.b.add_layer(LayerRecord(qual, "linear", 1, m.in_features, m.out_features, 1, positions,
                                         (qual, "weight", 1) if in_vec is not None else None, (qual, "weight", 0)))
            return _expand_channel_vector(out_vec, out.shape, -1 % out.dim())
        if isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm, nn.GroupNorm,
                          nn.PReLU)):
            if isinstance(m, nn.PReLU) and m.num_parameters == 1:
                return src
            vec = self._channel_vector(node, qual, src, 1)
            if vec is None:
                return src
            if isinstance(m, nn.GroupNorm):
                per = m.num_channels // m.num_groups
                for g in range(m.num_groups):
                    chunk = vec[g * per:(g + 1) * per]
                    self.uf.union_tensors(chunk[:1], chunk)  # a GroupNorm group is kept or removed whole
            for pname in ("weight", "bias"):
                if getattr(m, pname, None) is not None and isinstance(getattr(m, pname), torch.Tensor):
                    self.b.add_slot(qual, pname, 0, vec, tname, "weight" if pname == "weight" else "bias")
            for bname in ("running_mean", "running_var"):
                if getattr(m, bname, None) is not None:
                    self.b.add_slot(qual, bname, 0, vec, tname, "buffer")
            return src
        if isinstance(m, nn.LayerNorm):
            n = len(m.normalized_shape)
            lead = src.dim() - n
            sub = src[(0,) * lead]
            if any(d < lead for d in _varying_dims(src)):
                return self.unsupported(node, tname, "LayerNorm input varies across its leading axes", la, {}, out)
            if m.elementwise_affine:
                for pname in ("weight", "bias"):
                    if getattr(m, pname, None) is not None:
                        self.b.add_element_slot(qual, pname, sub.clone(), tname,
                                                "weight" if pname == "weight" else "bias")
            self.b.layernorms.add(qual)
            return src
        if isinstance(m, (nn.Identity,)) or type(m).__module__ in ("torch.nn.modules.activation",
                                                                      "torch.nn.modules.dropout"):
            if isinstance(m, nn.MultiheadAttention):
                return self.unsupported(node, tname, "attention heads are not pruned", la, {}, out)
            if isinstance(m, (nn.Softmax, nn.LogSoftmax, nn.Softmin)) and isinstance(src, torch.Tensor):
                return src
            if isinstance(out, torch.Tensor) and isinstance(src, torch.Tensor) and out.shape == src.shape:
                return src
            return self.unsupported(node, tname, "activation that changes the shape", la, {}, out)
        if type(m).__module__ == "torch.nn.modules.pooling" or isinstance(m, nn.Upsample):
            return self._per_channel(node, tname, src, out)
        if isinstance(m, (nn.Flatten, nn.Unflatten)) and isinstance(src, torch.Tensor):
            if isinstance(m, nn.Unflatten) and m.dim % src.dim() in _varying_dims(src):
                return self.unsupported(node, tname, "unflatten of the channel axis", la, {}, out)
            return m(src)
        return self.unsupported(node, tname, "module type unknown to the pruner", la, {}, out)

    def _conv(self, node: fx.Node, qual: str, m: nn.Module, x: torch.Tensor, src: Any, out: Any) -> Any:
        tname = type(m).__name__
        transposed = bool(m.transposed)
        in_vec = self._channel_vector(node, qual, src, 1)
        out_vec = self.uf.new(m.out_channels)
        g = m.groups
        if in_vec is not None and g > 1:
            gi, go = m.in_channels // g, m.out_channels // g
            for j in range(g):
                block = torch.cat([in_vec[j * gi:(j + 1) * gi], out_vec[j * go:(j + 1) * go]])
                self.uf.union_tensors(block[:1], block)  # a group is kept or removed whole
        elif in_vec is None and g > 1:
            self.uf.freeze(out_vec)
        if transposed:  # weight [in, out / groups, *k]
            if in_vec is not None:
                self.b.add_slot(qual, "weight", 0, in_vec, tname, "weight")
            if g == 1:
                self.b.add_slot(qual, "weight", 1, out_vec, tname, "weight")
        else:  # weight [out, in / groups, *k]; a grouped conv keeps in / groups, it loses whole groups
            self.b.add_slot(qual, "weight", 0, out_vec, tname, "weight")
            if g == 1 and in_vec is not None:
                self.b.add_slot(qual, "weight", 1, in_vec, tname, "weight")
        if m.bias is not None:
            self.b.add_slot(qual, "bias", 0, out_vec, tname, "bias")
        kernel = int(math.prod(m.kernel_size))
        batch = x.size(0) if x.dim() == len(m.kernel_size) + 2 else 1
        ref = x if transposed else out
        positions = ref.numel() // batch // ref.size(-len(m.kernel_size) - 1)
        if transposed:
            in_key = (qual, "weight", 0) if in_vec is not None else None
            out_key = (qual, "weight", 1) if g == 1 else None  # grouped: out follows the kept input groups
        else:
            in_key = (qual, "weight", 1) if (g == 1 and in_vec is not None) else None
            out_key = (qual, "weight", 0)
        self.b.add_layer(LayerRecord(qual, "convT" if transposed else "conv", g, m.in_channels, m.out_channels,
                                     kernel, positions, in_key, out_key))
        self.b.convs[qual] = (m.in_channels, m.out_channels, g, transposed)
        return _expand_channel_vector(out_vec, out.shape)


class _Builder:
    """Shared state of one graph build: union-find, slots, records, findings."""

    def __init__(self, root: nn.Module) -> None:
        self.root = root
        self.uf = _UnionFind()
        self.slots: Dict[SlotKey, Slot] = {}
        self.attr_labels: Dict[str, torch.Tensor] = {}
        self.attr_types: Dict[str, Tuple[str, str]] = {}
        self.element_slots: List[Tuple[str, str, torch.Tensor, str, str]] = []
        self.layers: Dict[str, LayerRecord] = {}
        self.convs: Dict[str, Tuple[int, int, int, bool]] = {}
        self.layernorms: Set[str] = set()
        self.unsupported: List[Unsupported] = []
        self.untraced: List[Unsupported] = []
        self.traced_units: List[str] = []

    def add_slot(self, module: str, tensor: str, dim: int, labels: torch.Tensor, module_type: str, role: str) -> None:
        key = (module, tensor, dim)
        if key in self.slots:  # a module called twice (shared weights): both uses must agree
            self.uf.union_tensors(self.slots[key].labels, labels)
            return
        self.slots[key] = Slot(module, tensor, dim, labels, module_type, role)

    def add_element_slot(self, module: str, tensor: str, labels: torch.Tensor, module_type: str, role: str) -> None:
        self.element_slots.append((module, tensor, labels, module_type, role))

    def add_layer(self, record: LayerRecord) -> None:
        if record.name in self.layers:
            self.layers[record.name].positions += record.positions
        else:
            self.layers[record.name] = record


class DependencyGraph:
    """Channel classes of a model, grouped for selection, with the reasons anything is protected.

    Build it with :meth:`build`; ``groups`` are what importance criteria score and
    what pruning removes from; ``unsupported`` and ``untraced`` say what is protected
    and why.  The graph holds no reference to the model's tensors' values.
    """

    def __init__(self, builder: _Builder) -> None:
        self.slots = builder.slots
        self.layers = builder.layers
        self.convs = builder.convs
        self.unsupported = builder.unsupported
        self.untraced = builder.untraced
        self.traced_units = builder.traced_units
        self.groups: List[Group] = []
        self.num_classes = 0
        self.frozen_channels = 0

    # ------------------------------------------------------------------------------------------------------------
    @classmethod
    def build(cls, model: nn.Module, example_inputs: Any, protect: Iterable[str] = (),
              protect_stem: bool = True) -> "DependencyGraph":
        """Trace ``model`` on ``example_inputs`` (a tensor or tuple of tensors) and find its channel classes.

        ``protect`` names modules (or module prefixes) whose output channels are kept;
        ``protect_stem`` also keeps the first convolution's outputs (the stem is cheap and
        its channels feed everything).  Model outputs are always kept.
        """
        inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
        builder = _Builder(model)
        modes = {m: m.training for m in model.modules()}
        model.eval()  # no BatchNorm statistics are updated while tracing
        try:
            _trace_units(builder, model, inputs)
        finally:
            for m, mode in modes.items():
                m.training = mode
        graph = cls(builder)
        graph._finalize(builder, list(protect), protect_stem)
        return graph

    def _finalize(self, b: _Builder, protect: List[str], protect_stem: bool) -> None:
        uf = b.uf
        first_conv = next(iter(b.layers.values()), None)
        for key, slot in list(b.slots.items()):
            out_dim = 1 if b.convs.get(slot.module, (0, 0, 0, False))[3] else 0
            is_out = slot.tensor == "bias" or (slot.tensor == "weight" and slot.dim == out_dim)
            if is_out and any(slot.module == p or slot.module.startswith(p + ".") for p in protect):
                uf.freeze(slot.labels)
            if protect_stem and first_conv is not None and slot.module == first_conv.name and is_out:
                uf.freeze(slot.labels)
        # Tensors used directly in forward and LayerNorm parameters: label per element, must be separable.
        for key, labels in b.attr_labels.items():
            module, _, name = key.rpartition(".")
            mtype, role = b.attr_types[key]
            b.element_slots.append((module, name, labels, mtype, role))
        for module, name, labels, mtype, role in b.element_slots:
            roots = torch.tensor([uf.find(x) for x in labels.reshape(-1).tolist()], dtype=torch.long).reshape(
                labels.shape)
            varying = _varying_dims(roots)
            if len(varying) > 1:
                uf.freeze(labels)
                b.unsupported.append(Unsupported(module + "." + name, mtype, "tensor whose channels vary along "
                                                 "more than one axis"))
                continue
            if not varying:
                if labels.numel() > 1 and not uf.frozen[uf.find(int(labels.reshape(-1)[0]))]:
                    # One class spans the whole tensor: removing it would empty the tensor.
                    uf.freeze(labels)
                continue
            d = varying[0]
            index = [0] * labels.dim()
            index[d] = slice(None)
            b.add_slot(module, name, d, labels[tuple(index)].clone(), mtype, role)
        table = torch.tensor([uf.find(i) for i in range(len(uf.parent))], dtype=torch.long)
        frozen = torch.tensor(uf.frozen, dtype=torch.bool)[table]
        # Class ordinals for the unfrozen roots that some slot uses.
        used = torch.unique(torch.cat([table[s.labels] for s in b.slots.values()])) if b.slots else torch.empty(0,
                                                                                                              dtype=torch.long)
        used = used[~torch.tensor([uf.frozen[int(r)] for r in used.tolist()], dtype=torch.bool)] if used.numel() else used
        ordinal = torch.full((len(uf.parent),), -1, dtype=torch.long)
        ordinal[used] = torch.arange(used.numel())
        self.num_classes = int(used.numel())
        signature: Dict[int, List[Tuple[SlotKey, int]]] = {i: [] for i in range(self.num_classes)}
        for key in sorted(b.slots):
            slot = b.slots[key]
            cls_ = ordinal[table[slot.labels]]
            cls_[frozen[slot.labels]] = -1
            slot.labels = cls_
            valid = cls_[cls_ >= 0]
            if valid.numel():
                counts = torch.bincount(valid, minlength=self.num_classes)
                for c in torch.nonzero(counts).reshape(-1).tolist():
                    signature[c].append((key, int(counts[c])))
        by_sig: Dict[Tuple[Tuple[SlotKey, int], ...], List[int]] = {}
        for c, sig in signature.items():
            by_sig.setdefault(tuple(sig), []).append(c)
        groups = []
        dropped: List[int] = []
        for sig, classes in by_sig.items():
            if not any(k[1] == "weight" and k[0] in b.layers for k, _ in sig):
                # Channels no conv/linear produces or consumes (a stray parameter): never touched.
                dropped.extend(classes)
                continue
            widths = dict(sig)
            name = next((k[0] for k, _ in sig if k[1] == "weight" and k[0] in b.layers), sig[0][0][0] if sig else "?")
            groups.append(Group(0, name, torch.tensor(classes, dtype=torch.long), widths))
        if dropped:
            drop = torch.tensor(dropped, dtype=torch.long)
            for slot in b.slots.values():
                slot.labels[torch.isin(slot.labels, drop)] = -1
        order = {name: i for i, name in enumerate(b.layers)}
        groups.sort(key=lambda g: (order.get(g.name, len(order)), int(g.classes[0])))
        for i, g in enumerate(groups):
            g.index = i
        self.groups = groups
        self.frozen_channels = sum(int((s.labels < 0).sum()) for s in b.slots.values() if s.role == "weight"
                                   and s.dim == 0)

    # ------------------------------------------------------------------------------------------------------------
    def protected_report(self) -> List[Dict[str, str]]:
        """Everything that blocks pruning, with the reason: untraceable submodules first, then ops."""
        return [u.to_dict() for u in self.untraced] + [u.to_dict() for u in self.unsupported]

    def summary(self) -> Dict[str, Any]:
        return {"groups": len(self.groups), "prunable_classes": self.num_classes,
                "slots": len(self.slots), "layers": len(self.layers), "traced_units": list(self.traced_units),
                "protected": self.protected_report()}


# --- tracing: the whole model, or the largest submodules that trace -----------------------------------------------
_LEAF_TYPES = (nn.modules.conv._ConvNd, nn.Linear, nn.modules.batchnorm._BatchNorm,
               nn.modules.instancenorm._InstanceNorm, nn.GroupNorm, nn.LayerNorm, nn.PReLU)


class _Tracer(fx.Tracer):
    """fx's tracer, except that subclasses of the layers the pruner knows (torchvision's ``Conv3DSimple``
    is an ``nn.Conv3d``) stay whole modules instead of being traced into a functional ``conv3d``."""

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return isinstance(m, _LEAF_TYPES) or super().is_leaf_module(m, qualname)


def _trace(module: nn.Module) -> fx.GraphModule:
    tracer = _Tracer()
    graph = tracer.trace(module)
    return fx.GraphModule(tracer.root, graph, type(module).__name__)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return (text[0] if text else type(err).__name__)[:200]


def _trace_units(b: _Builder, model: nn.Module, inputs: Tuple[Any, ...]) -> None:
    try:
        gm = _trace(model)
    except Exception as err:  # fx raises TraceError, TypeError, AttributeError, ... on dynamic code
        reason = "%s: %s" % (type(err).__name__, _first_line(err))
        log.info("the model does not trace as a whole (%s); tracing its submodules", reason)
        b.untraced.append(Unsupported("<model>", type(model).__name__, "torch.fx cannot trace it (%s); its "
                                      "traceable submodules are pruned with their inputs and outputs kept" % reason))
        _trace_submodules(b, model, inputs)
        return
    b.traced_units.append("")
    _LabelInterpreter(b, gm, "").run(inputs, {})


def _trace_submodules(b: _Builder, model: nn.Module, inputs: Tuple[Any, ...]) -> None:
    captured: Dict[str, Tuple[Any, Any]] = {}
    handles = []

    def hook_for(name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, kwargs: Any) -> None:
            if name not in captured:
                clone = lambda t: t.detach().clone()  # noqa: E731 (in-place ops later must not change it)
                captured[name] = (_tree_map(clone, args), _tree_map(clone, kwargs))
        return hook

    for name, module in model.named_modules():
        if name:
            handles.append(module.register_forward_pre_hook(hook_for(name), with_kwargs=True))
    try:
        with torch.no_grad():
            model(*inputs)
    except Exception as err:
        raise CompressError("the model does not run on the example input: %s" % _first_line(err),
                            hint="pass example_inputs the model accepts (batch axis first)") from err
    finally:
        for h in handles:
            h.remove()

    def prunable_layers(module: nn.Module) -> int:
        return sum(1 for m in module.modules() if isinstance(m, (nn.modules.conv._ConvNd, nn.Linear)))

    def visit(prefix: str, module: nn.Module) -> None:
        for name, child in module.named_children():
            qual = prefix + "." + name if prefix else name
            if prunable_layers(child) < 2:
                continue  # a lone layer between untraced code has its inputs and outputs fixed anyway
            if qual not in captured:
                b.untraced.append(Unsupported(qual, type(child).__name__, "not called on the example input"))
                continue
            try:
                gm = _trace(child)
            except Exception as err:
                b.untraced.append(Unsupported(qual, type(child).__name__, "torch.fx cannot trace it (%s: %s)"
                                              % (type(err).__name__, _first_line(err))))
                visit(qual, child)
                continue
            args, kwargs = captured[qual]
            try:
                _LabelInterpreter(b, gm, qual).run(args, kwargs)
            except Exception as err:
                raise CompressError("analysing %s (%s) failed: %s" % (qual, type(child).__name__, _first_line(err)),
                                    hint="protect it with protect=[%r]" % qual) from err
            b.traced_units.append(qual)

    visit("", model)
