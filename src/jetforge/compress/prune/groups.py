"""Choosing which channel classes to remove: per-group uniform ratios or a global ranking, then rounding.

Rounding is hardware-aware: a group keeps a multiple of ``class_multiple(round_to)``
classes, so that every layer it touches keeps a multiple of ``round_to`` channels
(8 for FP16 Tensor Cores, 16/32 for INT8 and the DLA; the target profile's
``channel_multiple`` is the default).  Counts that are not aligned run in slower
kernels, which is one reason a FLOPs cut often does not become a speed-up.
"""

from __future__ import annotations

import math
from typing import Dict, List, Mapping, Optional

import torch

from jetforge.errors import ConfigError
from jetforge.compress.prune.graph import DependencyGraph, Group


def _ratio_for(group: Group, ratio: float, overrides: Mapping[str, float]) -> float:
    best, best_len = ratio, -1
    for prefix, value in overrides.items():
        if (group.name == prefix or group.name.startswith(prefix + ".")) and len(prefix) > best_len:
            best, best_len = value, len(prefix)
    return best


def _round_keep(n: int, keep: float, q: int, min_keep: float) -> int:
    """Kept classes: ``keep`` rounded to a multiple of ``q``, at least the floor, never more than ``n``."""
    if n <= q or keep >= n:
        return n
    k = max(q, int(round(keep / q)) * q)
    floor = max(q, int(math.ceil(min_keep * n / q)) * q)
    return min(n, max(k, floor))


def select(graph: DependencyGraph, importance: torch.Tensor, ratio: float, *, global_ranking: bool = False,
           round_to: int = 8, min_keep: float = 0.1, overrides: Optional[Mapping[str, float]] = None,
           ) -> torch.Tensor:
    """Boolean mask over classes: True = remove.

    ``ratio`` is the fraction of channel classes to remove (0 removes nothing).  Uniform:
    every group loses ``ratio`` of its classes.  Global: the ``ratio`` least important
    classes of the whole model go, wherever they are, but no group keeps less than
    ``min_keep`` of its classes.  ``overrides`` maps a layer name (prefix) to its own
    ratio (uniform mode).  A group too small to round is left whole.
    """
    if not 0.0 <= ratio < 1.0:
        raise ConfigError("pruning ratio must be in [0, 1), got %r" % ratio, hint="e.g. --ratio 0.5")
    if round_to < 1:
        raise ConfigError("round_to must be a positive channel count, got %r" % round_to)
    overrides = dict(overrides or {})
    removed = torch.zeros(graph.num_classes, dtype=torch.bool)
    if ratio == 0.0 and not any(overrides.values()):
        return removed
    want: Dict[int, int] = {}
    if global_ranking:
        pool = torch.cat([g.classes for g in graph.groups]) if graph.groups else torch.empty(0, dtype=torch.long)
        n_remove = int(ratio * pool.numel())
        order = pool[torch.argsort(importance[pool], stable=True)][:n_remove]
        hit = torch.zeros(graph.num_classes, dtype=torch.bool)
        hit[order] = True
        for g in graph.groups:
            want[g.index] = len(g) - int(hit[g.classes].sum())
    else:
        for g in graph.groups:
            want[g.index] = len(g) - int(_ratio_for(g, ratio, overrides) * len(g))
    for g in graph.groups:
        keep = _round_keep(len(g), want[g.index], g.class_multiple(round_to), min_keep)
        if keep < len(g):
            order = g.classes[torch.argsort(importance[g.classes], stable=True)]
            removed[order[:len(g) - keep]] = True
    return removed


def kept_counts(graph: DependencyGraph, removed: torch.Tensor) -> Dict[tuple, int]:
    """Indices each slot keeps under ``removed``."""
    out = {}
    for key, slot in graph.slots.items():
        labels = slot.labels
        frozen = int((labels < 0).sum())
        live = labels[labels >= 0]
        out[key] = frozen + int((~removed[live]).sum())
    return out


def removed_indices(graph: DependencyGraph, removed: torch.Tensor) -> Dict[tuple, List[int]]:
    """For each slot that loses something: the sorted indices it loses."""
    out = {}
    for key, slot in graph.slots.items():
        labels = slot.labels
        mask = labels >= 0
        gone = torch.zeros_like(mask)
        gone[mask] = removed[labels[mask]]
        if bool(gone.any()):
            out[key] = torch.nonzero(gone).reshape(-1).tolist()
    return out
