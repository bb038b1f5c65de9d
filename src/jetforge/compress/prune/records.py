"""What the channel analysis records: the channel slots of parameters and buffers, the compute layers, what
blocks pruning, the groups of coupled channel classes, and the union-find over channel labels that merges them.

See :mod:`jetforge.compress.prune.graph` for how the analysis works.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Set, Tuple

import torch
from torch import nn

FROZEN = 0  # label of channels that must never be removed (model inputs, outputs of unknown ops)

SlotKey = Tuple[str, str, int]  # (module path, tensor name, dim)


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


class UnionFind:
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


class GraphBuilder:
    """Shared state of one graph build: union-find, slots, records, findings."""

    def __init__(self, root: nn.Module) -> None:
        self.root = root
        self.uf = UnionFind()
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
        self.signature: Optional[list] = None  # the whole-model eval graph's ops (tracing.graph_signature)
        self.second_pass = False  # analysing train mode after eval: layers are known, their positions counted

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
            if not self.second_pass:
                self.layers[record.name].positions += record.positions
        else:
            self.layers[record.name] = record
