"""Importance criteria: one score per channel class, comparable across layers.

A class is scored from every weight it owns (conv/linear filters on both sides,
norm scales): per slot, each index gets a raw score, the slot's scores are divided
by their mean so that a layer with large weights does not dominate a global ranking,
and a class's score is the mean over all its indices.  Criteria:

- ``l1`` / ``l2``: mean absolute value / root mean square of the weights (Li et al. 2017).
- ``bn_scale``: |gamma| of the BatchNorm (or FrozenBatchNorm) after the channel (Liu et al.
  2017, network slimming); classes that reach no norm layer fall back to ``l1``.
- ``taylor``: first-order Taylor on activations (Molchanov et al. 2017): per *sample*, the
  signed sum of ``a * dL/da`` over the positions of the channel where every consumer layer
  reads it (the first-order loss change when the channel is zeroed), then its absolute value,
  averaged over samples of a few batches.  Per sample, not per batch: at a trained minimum the
  batch gradient nearly cancels, the per-sample terms do not.  Classes no consumer reads get
  ``|sum over the group of w * dL/dw|`` per batch instead.  Values are loss changes, so they
  are not normalised per layer.  Needs data.
- ``random``: the baseline every criterion should beat.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Iterable, Optional, Tuple

import torch
from torch import nn

from jetforge.errors import CompressError, UnknownNameError
from jetforge.compress.prune.graph import DependencyGraph, Slot

log = logging.getLogger(__name__)

CRITERIA = ("l1", "l2", "bn_scale", "taylor", "random")
_NORM_TYPES = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "FrozenBatchNorm2d")


def _tensor(model: nn.Module, slot: Slot) -> torch.Tensor:
    module = model.get_submodule(slot.module) if slot.module else model
    return getattr(module, slot.tensor)


def _per_index(t: torch.Tensor, dim: int, how: str) -> torch.Tensor:
    x = t.detach().float().movedim(dim, 0).reshape(t.size(dim), -1)
    if how == "l1":
        return x.abs().mean(1)
    if how == "l2":
        return x.pow(2).mean(1).sqrt()
    if how == "sum":
        return x.sum(1)
    raise ValueError(how)


def _aggregate(graph: DependencyGraph, scores: Dict[Tuple[str, str, int], torch.Tensor]) -> torch.Tensor:
    """Mean over every (slot, index) of a class of the slot-normalised score."""
    total = torch.zeros(graph.num_classes, dtype=torch.float64)
    count = torch.zeros(graph.num_classes, dtype=torch.float64)
    for key, value in scores.items():
        labels = graph.slots[key].labels
        mask = labels >= 0
        if not bool(mask.any()):
            continue
        v = value.double()
        v = v / (v[mask].mean() + 1e-12)
        total.index_add_(0, labels[mask], v[mask])
        count.index_add_(0, labels[mask], torch.ones_like(v[mask]))
    return torch.where(count > 0, total / count.clamp(min=1), torch.zeros_like(total))


def magnitude(graph: DependencyGraph, model: nn.Module, p: str = "l1") -> torch.Tensor:
    scores = {k: _per_index(_tensor(model, s), s.dim, p) for k, s in graph.slots.items() if s.role == "weight"}
    return _aggregate(graph, scores)


def bn_scale(graph: DependencyGraph, model: nn.Module) -> torch.Tensor:
    scores = {k: _tensor(model, s).detach().abs().float() for k, s in graph.slots.items()
              if s.role == "weight" and s.tensor == "weight" and s.module_type in _NORM_TYPES}
    if not scores:
        raise CompressError("importance 'bn_scale' needs BatchNorm layers and this model has none in its "
                            "prunable part", hint="use importance='l1'")
    result = _aggregate(graph, scores)
    covered = torch.zeros(graph.num_classes, dtype=torch.bool)
    for k in scores:
        labels = graph.slots[k].labels
        covered[labels[labels >= 0]] = True
    if not bool(covered.all()):
        fallback = magnitude(graph, model, "l1")
        result = torch.where(covered, result, fallback)
        log.info("bn_scale: %d of %d channel classes reach no BatchNorm; they are scored by l1",
                 int((~covered).sum()), graph.num_classes)
    return result


def taylor(graph: DependencyGraph, model: nn.Module, data: Iterable[Any],
           loss_fn: Optional[Callable[[Any, Any], torch.Tensor]] = None, max_batches: int = 8) -> torch.Tensor:
    """First-order Taylor scores from up to ``max_batches`` batches of ``data`` ((inputs, targets) pairs).

    The model runs in eval mode (BatchNorm statistics are not changed) with gradients on;
    without ``loss_fn``, cross-entropy on the targets is used.  The loss must be a sum or
    mean over samples (its per-sample terms are recovered from the activation gradients).
    """
    if data is None:
        raise CompressError("importance 'taylor' needs data: a few (inputs, targets) batches",
                            hint="pass data=[(x, y), ...] or choose importance='l1'")
    loss_fn = loss_fn or nn.functional.cross_entropy
    weight_slots = {k: s for k, s in graph.slots.items() if s.role in ("weight", "bias")}
    consumers = []  # (module, slot labels of its input channels, channel axis of its input)
    for rec in graph.layers.values():
        if rec.in_key is None or rec.in_key not in graph.slots:
            continue
        labels = graph.slots[rec.in_key].labels
        if bool((labels >= 0).any()):
            consumers.append((model.get_submodule(rec.name) if rec.name else model, labels,
                              -1 if rec.kind == "linear" else 1))
    act = torch.zeros(graph.num_classes, dtype=torch.float64)
    covered = torch.zeros(graph.num_classes, dtype=torch.bool)
    for _, labels, _ in consumers:
        covered[labels[labels >= 0]] = True
    weight = torch.zeros(graph.num_classes, dtype=torch.float64)
    samples = 0
    was_training = model.training
    model.eval()
    grads_before = {n: p.requires_grad for n, p in model.named_parameters()}
    for p in model.parameters():
        p.requires_grad_(True)
    per_sample: list = []
    handles = []

    def hook_for(labels: torch.Tensor, axis: int):
        mask = labels >= 0
        idx = labels[mask]

        def on_grad(x: torch.Tensor, g: torch.Tensor) -> None:
            v = (x * g).detach().double().movedim(axis, -1)
            v = v.reshape(v.size(0), -1, v.size(-1)).sum(1)  # [samples, channels]
            acc = torch.zeros(v.size(0), graph.num_classes, dtype=torch.float64)
            acc.index_add_(1, idx, v[:, mask])
            per_sample.append(acc)

        def forward_hook(module: nn.Module, args: Any, out: Any) -> None:
            x = args[0] if args else None
            if isinstance(x, torch.Tensor) and x.requires_grad and x.dim() >= 2:
                xd = x.detach()
                handles.append(x.register_hook(lambda g: on_grad(xd, g)))
        return forward_hook

    module_handles = [m.register_forward_hook(hook_for(labels, axis)) for m, labels, axis in consumers]
    batches = 0
    try:
        for batch in data:
            if batches >= max_batches:
                break
            x, y = batch[0], batch[1]
            model.zero_grad(set_to_none=True)
            per_sample.clear()
            out = model(x)
            loss = loss_fn(out, y)
            n = int(out.size(0)) if isinstance(out, torch.Tensor) and out.dim() else 1
            loss.backward()
            for h in handles:
                h.remove()
            handles.clear()
            if per_sample:
                total = torch.stack(per_sample).sum(0) if len(per_sample) > 1 else per_sample[0]
                # a mean loss scales each sample's gradient by 1/n: undo it so scores do not depend on batch size
                act += total.abs().sum(0) * (n if total.size(0) == n else 1)
            samples += n
            per_batch = torch.zeros(graph.num_classes, dtype=torch.float64)
            for s in weight_slots.values():
                t = _tensor(model, s)
                if not isinstance(t, nn.Parameter) or t.grad is None:
                    continue
                mask = s.labels >= 0
                if bool(mask.any()):
                    per_batch.index_add_(0, s.labels[mask], _per_index(t.detach() * t.grad, s.dim, "sum").double()[mask])
            weight += per_batch.abs()
            batches += 1
    finally:
        for h in module_handles + handles:
            h.remove()
        model.zero_grad(set_to_none=True)
        for n_, p in model.named_parameters():
            p.requires_grad_(grads_before[n_])
        model.train(was_training)
    if not batches:
        raise CompressError("importance 'taylor' got no batches from the data", hint="pass at least one batch")
    return torch.where(covered, act / max(1, samples), weight / batches)


def class_importance(graph: DependencyGraph, model: nn.Module, criterion: str = "l1", *, data: Any = None,
                     loss_fn: Optional[Callable[[Any, Any], torch.Tensor]] = None, seed: int = 0) -> torch.Tensor:
    """One score per class of ``graph`` (higher = more important, kept first)."""
    if criterion in ("l1", "l2"):
        return magnitude(graph, model, criterion)
    if criterion == "bn_scale":
        return bn_scale(graph, model)
    if criterion == "taylor":
        return taylor(graph, model, data, loss_fn)
    if criterion == "random":
        gen = torch.Generator().manual_seed(seed)
        return torch.rand(graph.num_classes, generator=gen, dtype=torch.float64)
    raise UnknownNameError("importance criterion", criterion, CRITERIA)
