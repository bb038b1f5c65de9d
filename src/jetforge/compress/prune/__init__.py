"""Structured channel pruning: a dependency graph over torch.fx, importance criteria, hardware-aligned
rounding, goals in ratio/FLOPs/parameters/latency, a replayable JSON plan and a report.

>>> from jetforge.compress.prune import prune, PruneOptions, load_pruned, PrunePlan   # doctest: +SKIP
>>> result = prune(model, example, PruneOptions(flops_reduction=2.0, round_to=8))   # doctest: +SKIP
"""

from jetforge.compress.prune.prune_model import (PruneResult, default_round_to, load_pruned, make_plan, prune,
                                                 recalibrate_batchnorm)
from jetforge.compress.prune.flops import METHOD, OpCount, count_ops, count_params
from jetforge.compress.prune.graph import DependencyGraph, Group, Unsupported
from jetforge.compress.prune.importance import CRITERIA, class_importance
from jetforge.compress.prune.options import PruneOptions, load_prune_options
from jetforge.compress.prune.groups import select
from jetforge.compress.prune.plan import PlanEntry, PrunePlan, apply_plan
from jetforge.compress.prune.report import PruneReport, ort_latency

__all__ = ["CRITERIA", "DependencyGraph", "Group", "METHOD", "OpCount", "PlanEntry", "PruneOptions", "PrunePlan",
           "PruneReport", "PruneResult", "Unsupported", "apply_plan", "class_importance", "count_ops", "count_params",
           "default_round_to", "load_prune_options", "load_pruned", "make_plan", "ort_latency", "prune",
           "recalibrate_batchnorm", "select"]
