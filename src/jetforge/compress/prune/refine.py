"""Landing a FLOPs or parameter goal within a stated tolerance, where one ratio for every group moves in big steps.

A uniform ratio is rounded per group: a group keeps a multiple of its class multiple, and a grouped
convolution's classes are whole convolution groups (RegNetX-8GF's last stage has 16 groups of 120
channels).  Moving the ratio a hair can then flip the rounding of many groups at once, and the cut jumps:
on RegNetX-8GF the MACs reduction went from 1.89x straight to 2.79x for a 2x goal.  The bisection ends
with two ratios, one that misses the goal and one that meets it; :func:`refine` starts from the first and
adds the second's extra cuts one aligned unit at a time (each group advancing in step with the others, least
important channels first) until the goal is met, then takes, for that last step, whichever group's next unit
meets the goal by the least; the result overshoots by at most one unit of one group.

What is still over the goal by more than :data:`GOAL_TOLERANCE` (a group too coarse to split further) is
reported (``goal.within_tolerance: false`` with the achieved number) and warned about, never silent.
"""

from __future__ import annotations

from typing import Callable, List, Tuple

import torch

from jetforge.compress.prune.graph import DependencyGraph

#: A FLOPs/params goal is met when the achieved factor is at least the goal; more than 5 % above it is an
#: overshoot worth a warning (the bisection alone lands within ~1 % on networks without grouped convolutions).
GOAL_TOLERANCE = 0.05


def _units(graph: DependencyGraph, scores: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor,
           round_to: int) -> List[Tuple[float, int, torch.Tensor]]:
    """The classes ``hi`` removes beyond ``lo``, as (progress in its group, group, classes) in aligned units."""
    units: List[Tuple[float, int, torch.Tensor]] = []
    for g in graph.groups:
        extra = g.classes[hi[g.classes] & ~lo[g.classes]]
        if not extra.numel():
            continue
        order = extra[torch.argsort(scores[extra], stable=True)]
        keep_lo = len(g) - int(lo[g.classes].sum())
        q = g.class_multiple(round_to)
        # cut so that every intermediate count kept is a multiple of q (as the rounding of select() keeps it)
        bounds = [r for r in range(1, order.numel()) if (keep_lo - r) % q == 0] + [order.numel()]
        start = 0
        for j, end in enumerate(bounds):
            units.append(((j + 1) / len(bounds), g.index, order[start:end]))
            start = end
    units.sort(key=lambda u: (u[0], u[1]))
    return units


def refine(graph: DependencyGraph, scores: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, round_to: int,
           gain: Callable[[torch.Tensor], float], goal: float) -> Tuple[torch.Tensor, int, int]:
    """The smallest step from ``lo`` (misses ``goal``) towards ``hi`` (meets it) whose ``gain`` meets ``goal``;
    (removed mask, units taken, units between the two)."""
    units = _units(graph, scores, lo, hi, round_to)

    def mask(k: int) -> torch.Tensor:
        m = lo.clone()
        for _, _, classes in units[:k]:
            m[classes] = True
        return m

    low, high = 0, len(units)  # mask(len(units)) is hi, which meets the goal
    while low < high:
        mid = (low + high) // 2
        if gain(mask(mid)) >= goal:
            high = mid
        else:
            low = mid + 1
    if high == 0:
        return lo.clone(), 0, len(units)
    # The last unit taken may be a big one: the next unit of another group may meet the goal by less.
    base = mask(high - 1)
    best, best_gain = mask(high), gain(mask(high))
    seen = set()
    for _, group, classes in units[high - 1:]:
        if group in seen:
            continue  # only a group's next unit: its channels go least important first, counts stay aligned
        seen.add(group)
        candidate = base.clone()
        candidate[classes] = True
        g = gain(candidate)
        if goal <= g < best_gain:
            best, best_gain = candidate, g
    return best, high, len(units)


__all__ = ["GOAL_TOLERANCE", "refine"]
