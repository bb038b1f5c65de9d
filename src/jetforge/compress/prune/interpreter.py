"""The label interpreter: runs one traced graph on real tensors and label tensors side by side, with a rule for
every function and Tensor method the pruner follows (elementwise, reshape, movement, cat/stack/split, indexing,
per-channel and reduction ops); modules have their rules in :mod:`jetforge.compress.prune.module_rules`.
Anything without a rule freezes the channels reaching it and is reported (see :mod:`jetforge.compress.prune.graph`).
"""

from __future__ import annotations

import operator
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx as fx

from jetforge.compress.prune.label_tensors import (expand_channel_vector, frozen_like, mutable_copy, tree_tensors,
                                                   varying_dims)
from jetforge.compress.prune.module_rules import ModuleRules
from jetforge.compress.prune.records import GraphBuilder, Unsupported
from jetforge.compress.prune.widths import WidthRules

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


def _followed(node: fx.Node) -> bool:
    """Whether the interpreter has a rule for ``node`` (else it protects whatever reaches it)."""
    if node.op == "call_module":
        return True
    if node.op == "call_function" and node.target in (operator.getitem, getattr):
        return True  # getattr: x.shape, whose sizes are tracked as widths (see widths.py)
    if node.op == "call_method" and node.target in ("size", "numel"):
        return True
    return node.op in ("call_function", "call_method") and _op_name(node) in _FOLLOWED


def _op_name(node: fx.Node) -> str:
    if node.op == "call_method":
        return str(node.target)
    if node.op == "call_module":
        return str(node.target)
    name = getattr(node.target, "__name__", str(node.target))
    return name


class LabelInterpreter(ModuleRules, WidthRules):
    """Runs one traced graph on real tensors and label tensors side by side (see the module docstring)."""

    def __init__(self, builder: "GraphBuilder", gm: fx.GraphModule, prefix: str) -> None:
        self.b = builder
        self.uf = builder.uf
        self.gm = gm
        self.prefix = prefix
        self.modules = dict(gm.named_modules())
        self.widths: Dict[fx.Node, Any] = {}  # ints and sizes read from labelled shapes (widths.py)
        self.current: Optional[fx.Node] = None  # the node being run, named when it fails

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
            lab[node] = frozen_like(real[node])
        with torch.no_grad():
            for node in self.gm.graph.nodes:
                if node.op == "placeholder":
                    continue
                self.current = node
                if node.op == "output":
                    out_labels = fx.node.map_arg(node.args[0], lambda n: lab[n])
                    for t in tree_tensors(out_labels):
                        self.uf.freeze(t)
                    continue
                # fx hands read-only lists and dicts; the code being run may edit its arguments in place
                # (torchvision's swin3d edits its window-size list), as it may in eager mode on its own copy.
                a = mutable_copy(fx.node.map_arg(node.args, lambda n: real[n]))
                k = mutable_copy(fx.node.map_arg(node.kwargs, lambda n: real[n]))
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
                        lab[node] = frozen_like(out)
                    continue
                if node.op == "call_module":
                    out = self.modules[str(node.target)](*a, **k)
                elif node.op == "call_function":
                    out = node.target(*a, **k)
                else:  # call_method
                    out = getattr(a[0], str(node.target))(*a[1:], **k)
                real[node] = out
                if not tree_tensors(out):
                    lab[node] = None
                    self.track_width(node, la, out)
                    continue
                lab[node] = self._labels(node, a, k, la, lk, out)
                self.tie_widths(node, _op_name(node), la[0] if la else None, lab[node])
            self.current = None

    # --- get_attr: parameters and buffers used directly in forward (e.g. FrozenBatchNorm2d) ---------------------
    def _fetch_attr(self, target: str) -> Any:
        obj: Any = self.gm
        for part in target.split("."):
            obj = getattr(obj, part)
        return obj

    def _attr_labels(self, target: str, value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return frozen_like(value)
        key = self.qual(target)
        if key not in self.b.attr_labels:
            owner, _, name = key.rpartition(".")
            module = self.b.root.get_submodule(owner) if owner else self.b.root
            if name not in module._parameters and name not in module._buffers:
                return frozen_like(value)  # a plain tensor attribute: treat as a constant
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
        for t in tree_tensors(la) + tree_tensors(lk):
            newly += self.uf.freeze(t)
        if newly:
            where = self.qual(node.name) if isinstance(node, fx.Node) else str(node)
            self.b.unsupported.append(Unsupported(where, op, "%s; the channels reaching it are protected" % reason))
        return frozen_like(out)

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
        varying = [set(varying_dims(e)) for e in expanded]
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
            if isinstance(s, int) and s > 1 and d < result.dim() and d in varying_dims(result):
                if len(varying_dims(src)) == 0:
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
            if dim_n in varying_dims(src) and (not isinstance(size_arg, fx.Node)):
                return self.unsupported(node, name, "split with constant sizes along the channel axis (the sizes "
                                        "would be wrong after pruning)", la, {}, out)
        dim_n = dim % src.dim()
        if dim_n in varying_dims(src):
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
            return la[0][index] if la[0] is not None else frozen_like(out)
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
        varying = set(varying_dims(src))
        for d, i in dims:
            if d in varying and not (isinstance(i, slice) and i == slice(None, None, None)):
                return self.unsupported(node, "getitem", "indexing selects fixed channel positions (they would "
                                        "move after pruning)", la, {}, out)
        return src[index]

    def _per_channel(self, node: fx.Node, name: str, src: Any, out: Any) -> Any:
        if not isinstance(src, torch.Tensor) or not isinstance(out, torch.Tensor):
            return self.unsupported(node, name, "per-channel op on a non-tensor", [src], {}, out)
        varying = varying_dims(src)
        if any(d != 1 for d in varying) or out.dim() < 2:
            return self.unsupported(node, name, "spatial op on a tensor whose channels are not on axis 1",
                                    [src], {}, out)
        if out.size(1) != src.size(1):
            return self.unsupported(node, name, "op changes the number of channels", [src], {}, out)
        vec = src.select(0, 0).reshape(src.size(1), -1)[:, 0]
        return expand_channel_vector(vec, out.shape)

    def _reduce(self, node: fx.Node, name: str, a: Any, k: Dict[str, Any], la: Any, out: Any) -> Any:
        src = la[0]
        if not isinstance(out, torch.Tensor) or out.dim() == 0:
            return frozen_like(out)
        dims_arg = k.get("dim", a[1] if len(a) > 1 else None)
        if dims_arg is None:
            return frozen_like(out)
        dims = [dims_arg] if isinstance(dims_arg, int) else list(dims_arg)
        dims = [d % src.dim() for d in dims]
        varying = varying_dims(src)
        if any(d in varying for d in dims):
            # A sum/mean/max over channels stays well defined after pruning (it runs over the kept ones);
            # its result carries no channel axis.
            return frozen_like(out)
        if varying == [1] and 1 not in dims:
            vec = src.select(0, 0).reshape(src.size(1), -1)[:, 0]
            return expand_channel_vector(vec, out.shape)
        if not varying:
            return src.reshape(-1)[:1].expand(out.shape) if src.numel() else frozen_like(out)
        return self.unsupported(node, name, "reduction over a layout the pruner cannot follow", la, {}, out)
