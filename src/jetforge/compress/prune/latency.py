"""Latency-aware allocation: prune where time is spent, not where FLOPs are counted.

A FLOPs cut does not become a speed-up by itself: on a GPU much of a CNN's time goes to
memory-bound layers (high-resolution early stages, depthwise convolutions, norms and
activations) and to kernels whose channel counts miss the tensor-core tiles.  So the
search measures, on the backend the model will run on, what each channel group costs:

1. **Latency table.**  For every prunable group and a few kept fractions (default 3/4,
   1/2, 1/4 of its channel classes, each rounded to the alignment multiple), the model
   is pruned in *that group alone* (least important classes first) and its whole
   latency measured with ``latency_fn`` (CPU ONNX Runtime, a CUDA-graph replay in FP16,
   ...).  ``base - latency`` is the time that group's cut saves, with every effect the
   backend has (memory traffic, kernel choice, alignment) and none that it lacks.
2. **Allocation.**  Greedy: starting from the full model, take the step (one group to one
   of its lower measured levels) with the most latency saved per importance lost, until
   the goal is met.  A FLOPs/params goal stops on the counted MACs/parameters; a latency
   goal stops on the predicted latency (base minus the summed savings), then the pruned
   model is *measured*; if it misses, the predicted target is corrected by the observed
   ratio of real to predicted savings and the greedy goes on, until the measurement
   meets the goal.

Alignment-aware: the candidate kept counts are multiples of the group's class multiple for
``round_to`` (8/16/32 channels), so every step lands on aligned channel counts.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from jetforge.errors import CompressError
from jetforge.compress.prune.graph import DependencyGraph, Group
from jetforge.compress.prune.groups import _round_keep

log = logging.getLogger(__name__)

DEFAULT_LEVELS = (0.75, 0.5, 0.25)


@dataclass
class GroupCost:
    """Measured latency of the model with only this group pruned, at each candidate kept count."""

    group: int
    name: str
    size: int
    keeps: List[int]  # kept classes, descending; keeps[0] == size (unpruned)
    latency_ms: List[float]  # latency_ms[0] is the base latency
    importance_lost: List[float]  # cumulative importance of the removed classes; [0] == 0
    multiple: int = 1  # kept classes move in steps of this (alignment)

    def to_dict(self) -> Dict[str, Any]:
        return {"group": self.name, "index": self.group, "multiple": self.multiple, "classes": self.size,
                "keeps": self.keeps,
                "latency_ms": [round(v, 4) for v in self.latency_ms],
                "importance_lost": [round(v, 4) for v in self.importance_lost]}


@dataclass
class LatencyTable:
    base_ms: float
    costs: List[GroupCost]
    seconds: float
    measurements: int

    def to_dict(self) -> Dict[str, Any]:
        return {"base_ms": round(self.base_ms, 4), "seconds": round(self.seconds, 2),
                "measurements": self.measurements, "groups": [c.to_dict() for c in self.costs]}

    @classmethod
    def from_dict(cls, data: Any, where: str = "latency table") -> "LatencyTable":
        """The table :meth:`to_dict` wrote (a prune report's ``latency_table``); group indices are their order in
        the model's dependency graph, which :func:`prune` checks against the group names."""
        try:
            costs = [GroupCost(int(g.get("index", i)), str(g["group"]), int(g["classes"]), [int(k) for k in g["keeps"]],
                               [float(v) for v in g["latency_ms"]], [float(v) for v in g["importance_lost"]],
                               int(g.get("multiple", 1)))
                     for i, g in enumerate(data["groups"])]
            return cls(float(data["base_ms"]), costs, float(data.get("seconds", 0.0)),
                       int(data.get("measurements", 0)))
        except (KeyError, TypeError, ValueError) as err:
            from jetforge.errors import ConfigError

            raise ConfigError("%s is not a latency table: %s" % (where, err),
                              hint="pass the prune_report.json of a --latency-aware run") from None


def candidate_keeps(group: Group, levels: Sequence[float], round_to: int, min_keep: float) -> List[int]:
    """Aligned kept-class counts for ``group`` at the kept fractions ``levels`` (distinct, descending)."""
    n = len(group)
    q = group.class_multiple(round_to)
    out = [n]
    for f in sorted(levels, reverse=True):
        k = _round_keep(n, f * n, q, min_keep)
        if k < out[-1]:
            out.append(k)
    return out


def _order(group: Group, scores: torch.Tensor) -> torch.Tensor:
    """The group's classes, least important first."""
    return group.classes[torch.argsort(scores[group.classes], stable=True)]


def measure_table(graph: DependencyGraph, scores: torch.Tensor, latency_of: Callable[[torch.Tensor], float], *,
                  levels: Sequence[float] = DEFAULT_LEVELS, round_to: int = 8, min_keep: float = 0.1,
                  base_ms: Optional[float] = None, progress: Optional[Callable[[str], None]] = None,
                  show_progress: bool = False) -> LatencyTable:
    """Measure each group's latency at each candidate level (``latency_of(removed_mask) -> ms``)."""
    t0 = time.perf_counter()
    empty = torch.zeros(graph.num_classes, dtype=torch.bool)
    base = float(base_ms) if base_ms is not None else float(latency_of(empty))
    costs = []
    n = 0
    from jetforge.progress import progress_bar

    for g in progress_bar(graph.groups, desc="latency table", unit="group", enabled=show_progress):
        keeps = candidate_keeps(g, levels, round_to, min_keep)
        if len(keeps) < 2:
            continue
        order = _order(g, scores)
        lat, lost = [base], [0.0]
        for k in keeps[1:]:
            removed = empty.clone()
            removed[order[:len(g) - k]] = True
            lat.append(float(latency_of(removed)))
            lost.append(float(scores[order[:len(g) - k]].sum()))
            n += 1
        costs.append(GroupCost(g.index, g.name, len(g), keeps, lat, lost, g.class_multiple(round_to)))
        if progress is not None:
            progress("%s: %s ms" % (g.name, ", ".join("%.3f" % v for v in lat)))
    return LatencyTable(base, costs, time.perf_counter() - t0, n)


@dataclass
class Allocation:
    removed: torch.Tensor
    predicted_ms: float
    steps: List[Tuple[str, int, int]] = field(default_factory=list)  # (group, kept before, kept after)
    state: Dict[int, int] = field(default_factory=dict)  # cost index -> level index


class Allocator:
    """Greedy allocation over a :class:`LatencyTable`; call :meth:`run` with growing goals to extend it."""

    def __init__(self, graph: DependencyGraph, table: LatencyTable, scores: torch.Tensor) -> None:
        self.graph = graph
        self.table = table
        self.orders = {c.group: _order(graph.groups[c.group], scores) for c in table.costs}
        self.alloc = Allocation(torch.zeros(graph.num_classes, dtype=torch.bool), table.base_ms,
                                state={i: 0 for i in range(len(table.costs))})

    def _best_step(self) -> Optional[Tuple[int, int, float]]:
        best: Optional[Tuple[int, int, float]] = None
        best_value = float("-inf")
        scale = max(1e-12, sum(c.importance_lost[-1] for c in self.table.costs) /
                    max(1, sum(c.size - c.keeps[-1] for c in self.table.costs)))
        for ci, c in enumerate(self.table.costs):
            i = self.alloc.state[ci]
            for j in range(i + 1, len(c.keeps)):
                saved = c.latency_ms[i] - c.latency_ms[j]
                lost = c.importance_lost[j] - c.importance_lost[i]
                # importance lost, in units of "an average class"; a small floor keeps free steps finite
                # (a step that measured no saving still ranks, last: a FLOPs goal may need it)
                value = saved / (lost / scale + 0.05 * (c.keeps[i] - c.keeps[j]))
                if value > best_value:
                    best, best_value = (ci, j, saved), value
        return best

    def run(self, done: Callable[[torch.Tensor, float], bool]) -> Allocation:
        """Take greedy steps until ``done(removed, predicted_ms)``; raises if no step is left first."""
        a = self.alloc
        while not done(a.removed, a.predicted_ms):
            step = self._best_step()
            if step is None:
                raise CompressError("the latency-aware search ran out of steps before meeting the goal "
                                    "(every measured group cut is taken)",
                                    hint="ask for less, add lower latency_levels (e.g. 0.125), or protect fewer "
                                         "layers")
            ci, j, saved = step
            c = self.table.costs[ci]
            i = a.state[ci]
            order = self.orders[c.group]
            removed = a.removed.clone()
            removed[order[:c.size - c.keeps[j]]] = True
            if done(removed, a.predicted_ms - saved):
                # The last step may overshoot the goal: cut only as many aligned classes as it needs
                # (latency interpolated between the measured levels), so the result lands near the goal.
                for k in range(c.keeps[i] - c.multiple, c.keeps[j], -c.multiple):
                    part = a.removed.clone()
                    part[order[:c.size - k]] = True
                    frac = (c.keeps[i] - k) / float(c.keeps[i] - c.keeps[j])
                    if done(part, a.predicted_ms - saved * frac):
                        a.removed, a.predicted_ms = part, a.predicted_ms - saved * frac
                        a.steps.append((c.name, c.keeps[i], k))
                        return a  # the group stays at level i: a later run may still take its full step
            a.removed = removed
            a.predicted_ms -= saved
            a.state[ci] = j
            a.steps.append((c.name, c.keeps[i], c.keeps[j]))
        return a
