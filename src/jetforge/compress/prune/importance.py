"""Importance criteria: one score per channel class, comparable across layers.

A class is scored from every weight it owns (conv/linear filters on both sides,
norm scales): per slot, each index gets a raw score, the slot's scores are divided
by their mean so that a layer with large weights does not dominate a global ranking,
and a class's score is the mean over all its indices.  Criteria:

- ``l1`` / ``l2``: mean absolute value / root mean square of the weights (Li et al. 2017).
- ``bn_scale``: |gamma| of the BatchNorm (or FrozenBatchNorm) after the channel (Liu et al.
  2017, network slimming); classes that reach no norm layer fall back to ``l1``.
- ``taylor``: first-order Taylor (Molchanov et al. 2019): per batch, the signed sum of
  ``w * dL/dw`` over the input-channel weights of every layer that reads the class (equal to
  ``a * dL/da`` summed over samples and positions where it is read: the first-order loss change
  when the channel is removed), squared, averaged over a few batches, then divided by the mean
  over classes (not per layer: the ratios between layers are loss information).  Needs data.
  Not per-sample ``|a * dL/da|`` (Molchanov 2017's variant, used here before): that measures how
  much single samples depend on a channel, not the expected loss change, and on a Fashion-MNIST
  CNN it ranked channels below random (and its hook on a layer's input took the input's whole
  gradient, so a residual stream read by a conv and carried on by the add was counted twice;
  the weight-side sum sees the gradient through each reader only).  Not the producer conv and
  BatchNorm terms either: the BatchNorm's ``gamma * dL/dgamma + beta * dL/dbeta`` repeats the
  consumer term exactly (through ReLU and pooling) and the conv's adds the BatchNorm offset,
  which measured worse (``tests/compress/test_prune_taylor.py`` checks the ranking against the
  true loss change of removing each channel).
- ``random``: the baseline every criterion should beat.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import torch
from torch import nn

from jetforge.compress.prune.graph import DependencyGraph, Slot
from jetforge.errors import CompressError
from jetforge.registry import Registry

log = logging.getLogger(__name__)

# name -> criterion(graph, model, *, data, loss_fn, seed) -> one score per channel class.  Adding one: a
# function with that signature and `@CRITERIA.register("name", summary=...)` above it; a criterion that
# needs (inputs, targets) batches sets `needs_data = True` (the CLI, which has no data, leaves it out).
CRITERIA: Registry[Callable[..., torch.Tensor]] = Registry("importance criterion")
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
    """First-order Taylor scores (Molchanov et al. 2019) from up to ``max_batches`` (inputs, targets) batches.

    Per batch and class, ``S = sum of w * dL/dw`` over the input-channel weights of every
    conv/linear that reads the class; that is exactly ``sum over samples and positions of
    a * dL/da`` at those reads, i.e. ``-dL/dgate`` for a gate that zeroes the channel wherever
    it is read, which is what removing the class does.  The score is ``S**2`` averaged over
    batches.  Classes no layer reads are scored from their own weights (``sum of w * dL/dw``
    over the group, squared).  Scores are divided by their mean over the classes, so they
    average 1 like the magnitude criteria while keeping the ratios between layers.

    The model runs in eval mode (BatchNorm statistics are not changed) with gradients on;
    without ``loss_fn``, cross-entropy (mean over the batch) on the targets is used.
    """
    if data is None:
        raise CompressError("importance 'taylor' needs data: a few (inputs, targets) batches",
                            hint="pass data=[(x, y), ...] or choose importance='l1'")
    loss_fn = loss_fn or nn.functional.cross_entropy
    read_keys = {rec.in_key for rec in graph.layers.values() if rec.in_key is not None and rec.in_key in graph.slots}
    read = torch.zeros(graph.num_classes, dtype=torch.bool)
    for k in read_keys:
        labels = graph.slots[k].labels
        read[labels[labels >= 0]] = True
    own_keys = [k for k, s in graph.slots.items() if s.role in ("weight", "bias") and k not in read_keys]
    squares = torch.zeros(graph.num_classes, dtype=torch.float64)
    was_training = model.training
    model.eval()
    grads_before = {n: p.requires_grad for n, p in model.named_parameters()}
    for p in model.parameters():
        p.requires_grad_(True)
    batches = 0
    try:
        for batch in data:
            if batches >= max_batches:
                break
            x, y = batch[0], batch[1]
            model.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            consumed = torch.zeros(graph.num_classes, dtype=torch.float64)
            own = torch.zeros(graph.num_classes, dtype=torch.float64)
            for keys, acc in ((read_keys, consumed), (own_keys, own)):
                for k in keys:
                    s = graph.slots[k]
                    t = _tensor(model, s)
                    mask = s.labels >= 0
                    if not isinstance(t, nn.Parameter) or t.grad is None or not bool(mask.any()):
                        continue
                    acc.index_add_(0, s.labels[mask], _per_index(t.detach() * t.grad, s.dim, "sum").double()[mask])
            squares += torch.where(read, consumed, own).pow(2)
            batches += 1
    finally:
        model.zero_grad(set_to_none=True)
        for n_, p in model.named_parameters():
            p.requires_grad_(grads_before[n_])
        model.train(was_training)
    if not batches:
        raise CompressError("importance 'taylor' got no batches from the data", hint="pass at least one batch")
    scores = squares / batches
    return scores / (scores.mean() + 1e-30) if scores.numel() else scores


def class_importance(graph: DependencyGraph, model: nn.Module, criterion: str = "l1", *, data: Any = None,
                     loss_fn: Optional[Callable[[Any, Any], torch.Tensor]] = None, seed: int = 0) -> torch.Tensor:
    """One score per class of ``graph`` (higher = more important, kept first)."""
    return CRITERIA.get(criterion)(graph, model, data=data, loss_fn=loss_fn, seed=seed)


@CRITERIA.register("l1", summary="mean |w| of each channel's weights")
def _l1(graph: DependencyGraph, model: nn.Module, **_: Any) -> torch.Tensor:
    return magnitude(graph, model, "l1")


@CRITERIA.register("l2", summary="root mean square of each channel's weights")
def _l2(graph: DependencyGraph, model: nn.Module, **_: Any) -> torch.Tensor:
    return magnitude(graph, model, "l2")


@CRITERIA.register("bn_scale", summary="|gamma| of the BatchNorm after the channel (network slimming)")
def _bn_scale(graph: DependencyGraph, model: nn.Module, **_: Any) -> torch.Tensor:
    return bn_scale(graph, model)


@CRITERIA.register("taylor", summary="first-order Taylor loss change (needs data batches)")
def _taylor(graph: DependencyGraph, model: nn.Module, *, data: Any = None,
            loss_fn: Optional[Callable[[Any, Any], torch.Tensor]] = None, **_: Any) -> torch.Tensor:
    return taylor(graph, model, data, loss_fn)


_taylor.needs_data = True  # type: ignore[attr-defined]


@CRITERIA.register("random", summary="uniform random scores: the baseline every criterion should beat")
def _random(graph: DependencyGraph, model: nn.Module, *, seed: int = 0, **_: Any) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(graph.num_classes, generator=gen, dtype=torch.float64)


def criteria_without_data() -> List[str]:
    """The criteria that need no data batches (what the command line can offer)."""
    return [n for n in CRITERIA if not getattr(CRITERIA.get(n), "needs_data", False)]
