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

Sizes read from shapes (``B, C, H, W = x.shape``) are tracked too: a channel count used to shape another
tensor ties the two (:mod:`.widths`).  Train mode is analysed as well as eval mode, on a copy, when it runs
other code (an auxiliary classifier): fine-tuning, the normal next step, runs it.

Where the parts live: :mod:`.tracing` (fx tracing, whole model or submodules, both modes), :mod:`.interpreter`
and :mod:`.module_rules` (the label rules of functions and modules), :mod:`.widths` (ties carried by sizes),
:mod:`.label_tensors` (helpers over label tensors), :mod:`.records` (slots, layers, groups, the union-find);
this module builds the graph and turns the merged labels into groups.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Tuple

import torch
from torch import nn

from jetforge.compress.prune.label_tensors import varying_dims
from jetforge.compress.prune.records import FROZEN, Group, GraphBuilder, LayerRecord, Slot, SlotKey, Unsupported
from jetforge.compress.prune.tracing import trace_train_mode, trace_units
from jetforge.errors import UnknownNameError


class DependencyGraph:
    """Channel classes of a model, grouped for selection, with the reasons anything is protected.

    Build it with :meth:`build`; ``groups`` are what importance criteria score and
    what pruning removes from; ``unsupported`` and ``untraced`` say what is protected
    and why.  The graph holds no reference to the model's tensors' values.
    """

    def __init__(self, builder: GraphBuilder) -> None:
        self.slots = builder.slots
        self.layers = builder.layers
        self.convs = builder.convs
        self.unsupported = builder.unsupported
        self.untraced = builder.untraced
        self.traced_units = builder.traced_units
        self.groups: List[Group] = []
        self.num_classes = 0
        self.frozen_channels = 0
        self.modes: Dict[str, str] = {"eval": "traced"}  # mode -> "traced", "same graph as eval", "not traced: ..."

    # ------------------------------------------------------------------------------------------------------------
    @classmethod
    def build(cls, model: nn.Module, example_inputs: Any, protect: Iterable[str] = (),
              protect_stem: bool = True, train_mode: bool = True) -> "DependencyGraph":
        """Trace ``model`` on ``example_inputs`` (a tensor or tuple of tensors) and find its channel classes.

        ``protect`` names modules (or module prefixes) whose output channels are kept;
        ``protect_stem`` also keeps the first convolution's outputs (the stem is cheap and
        its channels feed everything).  Model outputs are always kept.  ``train_mode``: analyse train mode too
        (on a copy; see :func:`~jetforge.compress.prune.tracing.trace_train_mode`); ``modes`` says what was done.
        A name in ``protect`` that matches no module is refused, with the closest real names.
        """
        inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
        check_module_names(model, protect, "module to protect")
        builder = GraphBuilder(model)
        modes = {m: m.training for m in model.modules()}
        model.eval()  # no BatchNorm statistics are updated while tracing
        try:
            trace_units(builder, model, inputs)
        finally:
            for m, mode in modes.items():
                m.training = mode
        train = trace_train_mode(builder, model, inputs) if train_mode else "not traced: train_mode=False"
        graph = cls(builder)
        graph.modes = {"eval": "traced", "train": train}
        graph._finalize(builder, list(protect), protect_stem)
        return graph

    def _finalize(self, b: GraphBuilder, protect: List[str], protect_stem: bool) -> None:
        _freeze_protected(b, protect, protect_stem)
        _add_element_slots(b)
        self.num_classes, signature = _number_classes(b)
        self.groups = _make_groups(b, signature)
        self.frozen_channels = sum(int((s.labels < 0).sum()) for s in b.slots.values() if s.role == "weight"
                                   and s.dim == 0)

    # ------------------------------------------------------------------------------------------------------------
    def protected_report(self) -> List[Dict[str, str]]:
        """Everything that blocks pruning, with the reason: untraceable submodules first, then ops."""
        return [u.to_dict() for u in self.untraced] + [u.to_dict() for u in self.unsupported]

    def summary(self) -> Dict[str, Any]:
        return {"groups": len(self.groups), "prunable_classes": self.num_classes,
                "slots": len(self.slots), "layers": len(self.layers), "traced_units": list(self.traced_units),
                "modes": dict(self.modes),
                "protected": self.protected_report()}


def check_module_names(model: nn.Module, names: Iterable[str], kind: str) -> None:
    """Refuse a name (``protect``, ``overrides``) that is neither a module of ``model`` nor a prefix of one: it
    would silently protect nothing.  The error names the closest real module names."""
    known = [n for n, _ in model.named_modules() if n]
    prefixes = set(known)
    for n in known:
        parts = n.split(".")
        prefixes.update(".".join(parts[:i]) for i in range(1, len(parts)))
    for name in names:
        if name not in prefixes:
            raise UnknownNameError(kind, str(name), known,
                                   hint="give a module name of %s as print(model) or prune_report.txt's layer "
                                        "column shows it (a prefix covers the modules under it)"
                                        % type(model).__name__)


# --- finalising: from merged labels to groups of channel classes ----------------------------------------------------
def _freeze_protected(b: GraphBuilder, protect: List[str], protect_stem: bool) -> None:
    """Freeze the output channels of the modules in ``protect`` (and of the stem, with ``protect_stem``)."""
    uf = b.uf
    first_conv = next(iter(b.layers.values()), None)
    for key, slot in list(b.slots.items()):
        out_dim = 1 if b.convs.get(slot.module, (0, 0, 0, False))[3] else 0
        is_out = slot.tensor == "bias" or (slot.tensor == "weight" and slot.dim == out_dim)
        if is_out and any(slot.module == p or slot.module.startswith(p + ".") for p in protect):
            uf.freeze(slot.labels)
        if protect_stem and first_conv is not None and slot.module == first_conv.name and is_out:
            uf.freeze(slot.labels)


def _add_element_slots(b: GraphBuilder) -> None:
    """Tensors used directly in forward and LayerNorm parameters: labelled per element, they must be separable
    (channels along one axis) to become slots; otherwise they are frozen."""
    uf = b.uf
    for key, labels in b.attr_labels.items():
        module, _, name = key.rpartition(".")
        mtype, role = b.attr_types[key]
        b.element_slots.append((module, name, labels, mtype, role))
    for module, name, labels, mtype, role in b.element_slots:
        roots = torch.tensor([uf.find(x) for x in labels.reshape(-1).tolist()], dtype=torch.long).reshape(
            labels.shape)
        varying = varying_dims(roots)
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


Signature = Dict[int, List[Tuple[SlotKey, int]]]  # class ordinal -> [(slot, indices of that class in it)]


def _number_classes(b: GraphBuilder) -> Tuple[int, Signature]:
    """Relabel every slot with class ordinals (-1 = frozen); (number of classes, where each class appears)."""
    uf = b.uf
    table = torch.tensor([uf.find(i) for i in range(len(uf.parent))], dtype=torch.long)
    frozen = torch.tensor(uf.frozen, dtype=torch.bool)[table]
    # Class ordinals for the unfrozen roots that some slot uses.
    if b.slots:
        used = torch.unique(torch.cat([table[s.labels] for s in b.slots.values()]))
    else:
        used = torch.empty(0, dtype=torch.long)
    used = used[~torch.tensor([uf.frozen[int(r)] for r in used.tolist()], dtype=torch.bool)] if used.numel() else used
    ordinal = torch.full((len(uf.parent),), -1, dtype=torch.long)
    ordinal[used] = torch.arange(used.numel())
    num_classes = int(used.numel())
    signature: Signature = {i: [] for i in range(num_classes)}
    for key in sorted(b.slots):
        slot = b.slots[key]
        cls_ = ordinal[table[slot.labels]]
        cls_[frozen[slot.labels]] = -1
        slot.labels = cls_
        valid = cls_[cls_ >= 0]
        if valid.numel():
            counts = torch.bincount(valid, minlength=num_classes)
            for c in torch.nonzero(counts).reshape(-1).tolist():
                signature[c].append((key, int(counts[c])))
    return num_classes, signature


def _make_groups(b: GraphBuilder, signature: Signature) -> List[Group]:
    """Classes that appear in the same slots the same way form one group, in layer order."""
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
    return groups


__all__ = ["FROZEN", "DependencyGraph", "Group", "LayerRecord", "Slot", "SlotKey", "Unsupported"]
