"""Widths read from tensor shapes: the ties a channel count carries when code reads it and uses it elsewhere.

Code often reads a size from a tensor and uses the number later: ``B, G, P, D = x.shape`` ...
``out.reshape(B, G, P, D)`` (torchvision's MaxViT attention), ``b, c, _, _ = x.size()`` ...
``y.view(b, c, 1, 1)`` (squeeze-and-excitation).  When ``D`` is the size of an axis along which channels
vary, pruning that axis changes the number, so whatever the number shapes must lose the same channels.
Labels alone do not show it (the number is a plain int), so the interpreter records, next to every int or
``torch.Size`` read from a labelled tensor, which labels it counts (:class:`Width`), carries that through
int arithmetic, and ties it where it is used:

- a ``reshape``/``view`` to a size read *as is* from a channel axis: the output axis it sizes and the axis it
  was read from are united position by position (so both lose the same channels; where the output axis
  cannot be pruned, the source axis is protected with it -- MaxViT's attention input keeps its width);
- a ``reshape``/``view`` to a size *computed* from a channel axis (``c // groups``): allowed only when it
  counts the very channels being reshaped (channel shuffle); otherwise both are protected;
- any other use (``torch.zeros(b, c)``, ``torch._assert(x.size(1) == 64)``, ...): the channels counted are
  protected, and the use is reported by name.

Sizes along axes where channels do not vary (batch, height, width) carry no width and are never tied.
"""

from __future__ import annotations

import builtins
import operator
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Set

import torch
import torch.fx as fx

from jetforge.compress.prune.label_tensors import varying_dims

_RESHAPES = {"view", "reshape"}
# where int arithmetic and comparisons live (operator's functions report "_operator"): results derive from the width
_INT_MODULES = {"_operator", "operator", "builtins", "math"}


@dataclass
class Width:
    """An int read from a labelled tensor's shape: ``vector`` holds the labels of the axis it is the size of
    (None when it was computed, or read from an axis mixed with another); ``labels`` every label it counts."""

    vector: Optional[torch.Tensor]
    labels: torch.Tensor


@dataclass
class Sizes:
    """A ``torch.Size`` (or a slice of one) read from a labelled tensor: one Width or None per axis."""

    axes: List[Optional[Width]]


def axis_width(labels: torch.Tensor, dim: int) -> Optional[Width]:
    """The Width of ``labels``'s axis ``dim``, or None when channels do not vary along it."""
    dim = dim % max(1, labels.dim())
    varying = varying_dims(labels)
    if dim not in varying:
        return None
    if varying == [dim]:
        index: List[Any] = [0] * labels.dim()
        index[dim] = slice(None)
        vector = labels[tuple(index)].clone()
        return Width(vector, torch.unique(vector))
    return Width(None, torch.unique(labels))


def _all_labels(info: Any) -> List[torch.Tensor]:
    if isinstance(info, Width):
        return [info.labels]
    if isinstance(info, Sizes):
        return [w.labels for w in info.axes if w is not None]
    return []


def _all_labels_cat(info: Any) -> torch.Tensor:
    labels = _all_labels(info)
    return torch.cat(labels) if labels else torch.zeros(1, dtype=torch.long)


def _derived(infos: Sequence[Any]) -> Optional[Width]:
    labels = [t for i in infos for t in _all_labels(i)]
    if not labels:
        return None
    return Width(None, torch.unique(torch.cat(labels)))


class WidthRules:
    """The width half of the label interpreter (see the module docstring); the interpreter provides ``uf``,
    ``qual``, ``b`` and ``widths`` (fx node -> Width or Sizes)."""

    widths: Dict[fx.Node, Any]

    def _width_args(self, node: fx.Node) -> List[fx.Node]:
        found: List[fx.Node] = []
        fx.node.map_arg((node.args, node.kwargs), lambda n: found.append(n) if n in self.widths else None)
        return found

    def track_width(self, node: fx.Node, la: Any, out: Any) -> None:
        """Record the Width of a non-tensor result: a shape read, an index into one, or int arithmetic on them;
        any other op that receives a width (``torch._assert``) is a use the pruner cannot follow."""
        name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
        src = la[0] if la else None
        if node.op == "call_function" and node.target is builtins.getattr and isinstance(src, torch.Tensor):
            if node.args[1] == "shape":
                self.widths[node] = Sizes([axis_width(src, d) for d in range(src.dim())])
            return
        if node.op == "call_method" and name == "size" and isinstance(src, torch.Tensor):
            if len(node.args) > 1 or "dim" in node.kwargs:
                dim = node.args[1] if len(node.args) > 1 else node.kwargs["dim"]
                if isinstance(dim, int):
                    info = axis_width(src, dim)
                    if info is not None:
                        self.widths[node] = info
            else:
                self.widths[node] = Sizes([axis_width(src, d) for d in range(src.dim())])
            return
        if node.op == "call_method" and name == "numel" and isinstance(src, torch.Tensor):
            if varying_dims(src):
                self.widths[node] = Width(None, torch.unique(src))
            return
        carried = self._width_args(node)
        if not carried:
            return
        infos = [self.widths[n] for n in carried]
        if node.op == "call_function" and node.target is operator.getitem and node.args[0] in self.widths:
            container, index = self.widths[node.args[0]], node.args[1]
            if isinstance(container, Sizes) and isinstance(index, int):
                if -len(container.axes) <= index < len(container.axes) and container.axes[index] is not None:
                    self.widths[node] = container.axes[index]
                return
            if isinstance(container, Sizes) and isinstance(index, slice):
                self.widths[node] = Sizes(container.axes[index])
                return
        if node.op == "call_function" and getattr(node.target, "__module__", None) in _INT_MODULES:
            info = _derived(infos)
            if info is not None:
                self.widths[node] = info
            return
        self.freeze_widths(node, str(name or node.target), carried)

    def tie_widths(self, node: fx.Node, name: str, src: Any, result: Any) -> None:
        """Tie the widths a tensor-valued op received (see the module docstring)."""
        carried = self._width_args(node)
        if not carried:
            return
        if name in _RESHAPES and isinstance(src, torch.Tensor) and isinstance(result, torch.Tensor):
            entries = self._reshape_entries(node)
            if entries is not None:
                for d, entry in enumerate(entries):
                    info = self.widths.get(entry) if isinstance(entry, fx.Node) else entry
                    if isinstance(info, Width) and d < result.dim():
                        self._tie_axis(node, name, info, src, result, d)
                    elif isinstance(info, Sizes):
                        self.freeze_widths(node, name, [entry])
                return
        for n in carried:  # split/chunk/expand by a size counted from the very channels they cut: follows
            if not (isinstance(src, torch.Tensor) and self._roots(_all_labels_cat(self.widths[n])) == self._roots(src)):
                self.freeze_widths(node, name, [n])

    def _reshape_entries(self, node: fx.Node) -> Optional[List[Any]]:
        """The size arguments of a reshape, one per output axis (a Size node expanded to its axes)."""
        sizes = list(node.args[1:])
        if node.op == "call_function":  # torch.reshape(input, shape)
            sizes = [node.args[1]] if len(node.args) > 1 else [node.kwargs.get("shape")]
        if len(sizes) == 1 and isinstance(sizes[0], (tuple, list, torch.Size)):
            sizes = list(sizes[0])
        if len(sizes) == 1 and isinstance(sizes[0], fx.Node) and isinstance(self.widths.get(sizes[0]), Sizes):
            return list(self.widths[sizes[0]].axes)
        if any(isinstance(s, fx.Node) and isinstance(self.widths.get(s), Sizes) for s in sizes):
            return None  # a whole Size among other entries: not a layout to reason about
        return sizes

    def _tie_axis(self, node: fx.Node, name: str, info: Width, src: torch.Tensor, result: torch.Tensor,
                  d: int) -> None:
        varying = varying_dims(result)
        if info.vector is not None and set(varying) <= {d} and result.size(d) == info.vector.numel():
            index: List[Any] = [0] * result.dim()
            index[d] = slice(None)
            frozen_before = self._frozen_count(info.vector)
            self.uf.union_tensors(info.vector, result[tuple(index)])  # the read axis and this one: together
            if self._frozen_count(info.vector) > frozen_before:
                self.b.unsupported.append(self._unsupported(node, name, "reshape to a width read from a channel axis, "
                                                                        "into an axis that cannot be pruned; the "
                                                                        "channels it counts are protected"))
            return
        if self._roots(info.labels) == self._roots(src):
            return  # computed from the very channels being reshaped (channel shuffle's c // groups)
        self._freeze(node, name, [info.labels, src], "reshape to a size read from the channel axis of another "
                                                     "tensor")

    def _frozen_count(self, labels: torch.Tensor) -> int:
        return sum(1 for x in labels.tolist() if self.uf.frozen[self.uf.find(int(x))])

    def _unsupported(self, node: fx.Node, name: str, reason: str) -> Any:
        from jetforge.compress.prune.records import Unsupported

        return Unsupported(self.qual(node.name), name, reason)

    def _roots(self, labels: torch.Tensor) -> Set[int]:
        roots = {self.uf.find(int(x)) for x in torch.unique(labels).tolist()}
        return {r for r in roots if not self.uf.frozen[r]}

    def freeze_widths(self, node: fx.Node, name: str, carried: Sequence[fx.Node]) -> None:
        labels = [t for n in carried for t in _all_labels(self.widths[n])]
        self._freeze(node, name, labels, "uses the number of channels of a pruned axis")

    def _freeze(self, node: fx.Node, name: str, labels: Sequence[torch.Tensor], reason: str) -> None:
        newly = sum(self.uf.freeze(t) for t in labels)
        if newly:
            self.b.unsupported.append(self._unsupported(node, name, "%s; the channels it counts are protected"
                                                        % reason))


__all__ = ["Sizes", "Width", "WidthRules", "axis_width"]
