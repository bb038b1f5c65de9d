"""The pruning plan: what was removed where, as JSON, and the tensor surgery that applies it.

A plan lists, for every parameter or buffer axis that lost indices, the module path,
the tensor name, the axis, its original size and the removed indices.  Applying it
slices those tensors for real (smaller tensors, not masks) and updates the module
attributes that forward reads (``in_channels``, ``groups``, ``num_features``,
``num_groups``, ``normalized_shape``, ...).  Because the plan needs no trace, it
replays on a fresh instance of the same architecture, so a pruned checkpoint loads as::

    model = build_the_architecture()
    apply_plan(model, PrunePlan.load("model.prune.json"))
    model.load_state_dict(torch.load("pruned.pt", weights_only=True))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch import nn

import jetforge
from jetforge.errors import CompressError, InputFileError
from jetforge.fileio import PathLike, require_file, write_json_atomic
from jetforge.jsonfile import ValueRefused, expect, expect_number, expect_text, read_json

FORMAT = "jetforge.prune-plan/1"


@dataclass
class PlanEntry:
    module: str
    tensor: str
    dim: int
    size: int
    removed: List[int]

    def to_dict(self) -> Dict[str, Any]:
        return {"module": self.module, "tensor": self.tensor, "dim": self.dim, "size": self.size,
                "removed": list(self.removed)}


@dataclass
class PrunePlan:
    """Removals per tensor axis plus the settings that chose them (``meta``) and a per-layer summary."""

    architecture: str
    entries: List[PlanEntry] = field(default_factory=list)
    meta: Dict[str, Any] = field(default_factory=dict)
    layers: Dict[str, Dict[str, List[int]]] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return {"format": FORMAT, "jetforge": jetforge.__version__, "architecture": self.architecture,
                "meta": self.meta, "layers": self.layers, "entries": [e.to_dict() for e in self.entries]}

    def save(self, path: PathLike) -> Path:
        return write_json_atomic(path, self.to_dict())

    @classmethod
    def from_dict(cls, data: Any) -> "PrunePlan":
        """A plan read from a file: its types and ranges checked with jetforge's shared value checks (issue 25: a
        top-level list, a string ``meta`` and an index of ``1e999`` were internal errors), nothing coerced."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise CompressError("not a jetforge pruning plan (its format field is not %r)" % FORMAT,
                                hint="pass the .prune.json written by jetforge prune")
        try:
            entries = [_entry(expect(e, dict, "entries[%d]" % i), i)
                       for i, e in enumerate(expect(data["entries"], list, "entries"))]
            architecture = expect_text(data.get("architecture", ""), "architecture", 1000)
            meta = expect(data.get("meta", {}), dict, "meta")
            layers = expect(data.get("layers", {}), dict, "layers")
            for name, layer in layers.items():
                for key, sizes in expect(layer, dict, "layers.%s" % name[:60]).items():
                    for k, size in enumerate(expect(sizes, list, "layers.%s.%s" % (name[:60], key[:20]))):
                        expect_number(size, "layers.%s.%s[%d]" % (name[:60], key[:20], k), 0, MAX_SIZE, integer=True)
        except KeyError as err:
            raise CompressError("malformed pruning plan: missing field %s" % err, hint="re-run the pruning") from None
        except ValueRefused as err:
            raise CompressError("malformed pruning plan: %s" % err, hint="re-run the pruning") from None
        return cls(architecture, entries, dict(meta), dict(layers))

    @classmethod
    def load(cls, path: PathLike) -> "PrunePlan":
        p = require_file(path, "pruning plan")
        data = read_json(p, "pruning plan", InputFileError, hint="re-run the pruning that wrote it")
        return cls.from_dict(data)

    @property
    def empty(self) -> bool:
        return not self.entries


MAX_SIZE = 2 ** 31 - 1  # an axis of a tensor torch can index
MAX_RANK = 8  # an axis number of a parameter (conv3d weights are rank 5)


def _entry(e: Dict[str, Any], i: int) -> PlanEntry:
    where = "entries[%d]" % i
    size = int(expect_number(e["size"], where + ".size", 1, MAX_SIZE, integer=True))
    return PlanEntry(expect_text(e["module"], where + ".module", 1000), expect_text(e["tensor"], where + ".tensor", 200),
                     int(expect_number(e["dim"], where + ".dim", 0, MAX_RANK, integer=True)), size,
                     [int(expect_number(r, where + ".removed", 0, size - 1, integer=True))
                      for r in expect(e["removed"], list, where + ".removed")])


def _module_attrs(m: nn.Module) -> Dict[str, Any]:
    return {k: getattr(m, k) for k in ("in_channels", "out_channels", "groups", "num_groups", "num_channels")
            if hasattr(m, k)}


def apply_plan(model: nn.Module, plan: PrunePlan, undo_to: Optional[List[Callable[[], None]]] = None) -> nn.Module:
    """Slice ``model``'s tensors as ``plan`` says (in place) and fix module attributes; returns ``model``.

    Every entry is checked against the model first (module exists, tensor exists,
    axis has the recorded size), so a plan for another architecture or an already
    pruned model is refused before anything changes; a failure half-way puts everything back.
    ``undo_to``: a list that receives a function undoing this application (``prune()`` calls it when the
    pruned model fails its checks, so the caller's model is left exactly as it was).
    """
    resolved: List[Tuple[PlanEntry, nn.Module, torch.Tensor]] = []
    for e in plan.entries:
        try:
            m = model.get_submodule(e.module) if e.module else model
        except AttributeError:
            raise CompressError("the pruning plan names module %r, which this %s does not have"
                                % (e.module, type(model).__name__),
                                hint="replay the plan on the architecture it was made for (%s)"
                                % plan.architecture) from None
        t = getattr(m, e.tensor, None)
        if not isinstance(t, torch.Tensor) or e.dim >= t.dim() or t.size(e.dim) != e.size:
            raise CompressError("the pruning plan expects %s.%s axis %d of size %d, the model has %s"
                                % (e.module, e.tensor, e.dim, e.size,
                                   tuple(t.shape) if isinstance(t, torch.Tensor) else "no such tensor"),
                                hint="replay the plan on a fresh, unpruned %s" % plan.architecture)
        if any(i < 0 or i >= e.size for i in e.removed) or len(set(e.removed)) >= e.size:
            raise CompressError("the pruning plan removes invalid indices from %s.%s" % (e.module, e.tensor))
        resolved.append((e, m, t))
    before = {id(m): (m, _module_attrs(m)) for _, m, _ in resolved}
    undo = _Undo([m for m, _ in before.values()], [(m, e.tensor) for e, m, _ in resolved])
    try:
        for e, m, _ in resolved:
            t = getattr(m, e.tensor)
            gone = set(e.removed)
            keep = torch.tensor([i for i in range(e.size) if i not in gone], dtype=torch.long, device=t.device)
            new = t.detach().index_select(e.dim, keep).clone()
            if e.tensor in m._parameters:
                m._parameters[e.tensor] = nn.Parameter(new, requires_grad=t.requires_grad)
            else:
                m._buffers[e.tensor] = new
        for m, attrs in before.values():
            _update_attributes(m, attrs)
    except BaseException:
        undo()  # a plan half applied leaves a model that runs nowhere: give it back whole
        raise
    if undo_to is not None:
        undo_to.append(undo)
    return model


# every attribute _update_attributes may change
_ATTRS = ("in_channels", "out_channels", "groups", "in_features", "out_features", "num_features", "num_groups",
          "num_channels", "normalized_shape", "num_parameters")


class _Undo:
    """Puts back the very tensor objects and attributes a plan replaced (a Parameter the caller or an optimizer
    holds is the one restored), so a model whose pruning failed is exactly the model it was."""

    def __init__(self, modules: List[nn.Module], tensors: List[Tuple[nn.Module, str]]) -> None:
        self.attrs = [(m, {k: m.__dict__[k] for k in _ATTRS if k in m.__dict__}) for m in modules]
        self.tensors = [(m, name, m._parameters.get(name), m._buffers.get(name), name in m._parameters)
                        for m, name in tensors]

    def __call__(self) -> None:
        for m, name, param, buffer, is_param in self.tensors:
            if is_param:
                m._parameters[name] = param
            else:
                m._buffers[name] = buffer
        for m, attrs in self.attrs:
            m.__dict__.update(attrs)


def _update_attributes(m: nn.Module, old: Dict[str, Any]) -> None:
    """Make the attributes forward reads agree with the sliced tensors."""
    if isinstance(m, nn.modules.conv._ConvNd):
        w = m.weight
        g = old["groups"]
        if m.transposed:
            in_new = w.size(0)
            g_new = g * in_new // old["in_channels"] if g > 1 else 1
            out_new = w.size(1) * g_new
        else:
            out_new = w.size(0)
            g_new = g * out_new // old["out_channels"] if g > 1 else 1
            in_new = w.size(1) * g_new
        if g > 1 and (g_new < 1 or (in_new % g_new) or (out_new % g_new)):
            raise CompressError("pruning %s would leave partial convolution groups" % type(m).__name__)
        m.in_channels, m.out_channels, m.groups = in_new, out_new, g_new
    elif isinstance(m, nn.Linear):
        m.out_features, m.in_features = m.weight.shape
    elif isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm)):
        ref = m.weight if m.weight is not None else m.running_mean
        m.num_features = ref.size(0)
    elif isinstance(m, nn.GroupNorm):
        c = m.weight.size(0)
        m.num_groups = old["num_groups"] * c // old["num_channels"]
        m.num_channels = c
    elif isinstance(m, nn.LayerNorm):
        m.normalized_shape = tuple(m.weight.shape)
    elif isinstance(m, nn.PReLU):
        m.num_parameters = m.weight.numel()
