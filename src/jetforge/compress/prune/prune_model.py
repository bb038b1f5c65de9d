"""``prune()``: one call from a model and a goal to a smaller model, its plan and its report.

>>> result = prune(model, torch.randn(1, 3, 224, 224), PruneOptions(flops_reduction=2.0, importance="l1",
...                target="orin-nx-16gb"))                                   # doctest: +SKIP
>>> result = prune(model, torch.randn(1, 3, 224, 224), flops_reduction=2.0)  # the same path  # doctest: +SKIP
>>> result.plan.save("model.prune.json"); print(result.report.to_table())   # doctest: +SKIP

Goals: a channel ``ratio`` (fraction of coupled channel classes removed), a
``flops_reduction`` or ``params_reduction`` factor (found by bisection on the ratio
with counted-then-scaled MACs, so no model is copied during the search), or a
``latency_reduction`` factor measured on a backend session (CPU ONNX Runtime by
default; pass ``latency_fn`` for a CUDA session), iterating prune -> export ->
measure until the goal is met.

``latency_aware=True`` replaces the uniform (or global) ratio by a search that prunes where
time is spent (see :mod:`latency`): each group's cut is timed alone on the backend
(``latency_fn``), and channel cuts go to the groups with the most latency saved per
importance lost, on aligned channel counts, until the FLOPs/params goal is counted or the
latency goal is measured.

A latency goal is a measurement, and a search can end a hair short of it after minutes of
measuring: then the fastest model found is kept and returned with a warning, and the report
says ``goal.met: false`` with the speed-up achieved; ``strict=True`` raises instead.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

import torch
from torch import nn

from jetforge.errors import CompressError, ConfigError, JetforgeError
from jetforge.compress.prune import flops as _flops
from jetforge.compress.prune.graph import DependencyGraph, check_module_names
from jetforge.compress.prune.groups import removed_indices, select
from jetforge.compress.prune.importance import class_importance
from jetforge.compress.prune.latency import Allocator, LatencyTable, measure_table
from jetforge.compress.prune.options import PruneOptions, resolve_options
from jetforge.compress.prune.plan import PlanEntry, PrunePlan, apply_plan
from jetforge.compress.prune.refine import GOAL_TOLERANCE, refine
from jetforge.compress.prune.report import PruneReport, layer_snapshot, ort_latency
from jetforge.compress.prune.verify import check_pruned

log = logging.getLogger(__name__)

DEFAULT_ROUND_TO = 8
MAX_RATIO = 0.95


@dataclass
class PruneResult:
    """The pruned model (the input model, changed in place unless ``inplace=False``), its plan and report."""

    model: nn.Module
    plan: PrunePlan
    graph: DependencyGraph
    report: PruneReport
    ratio: float
    latency_table: Optional[LatencyTable] = None  # the measured per-group table (latency_aware), reusable
    goal_met: bool = True  # False only for a latency goal the search ended short of (see ``report.extra["goal"]``)


def default_round_to(target: Optional[str]) -> int:
    """The channel multiple of ``target``'s profile, or 8 (FP16 Tensor Cores) without a target."""
    if not target:
        return DEFAULT_ROUND_TO
    from jetforge.targets import get_target

    return int(get_target(target).channel_multiple)


def make_plan(graph: DependencyGraph, model: nn.Module, removed: torch.Tensor,
              meta: Optional[Dict[str, Any]] = None) -> PrunePlan:
    """The plan that removes the classes flagged in ``removed`` (see :func:`groups.select`)."""
    entries = [PlanEntry(k[0], k[1], k[2], int(graph.slots[k].labels.numel()), v)
               for k, v in sorted(removed_indices(graph, removed).items())]
    layers = {}
    for name, rec in graph.layers.items():
        layers[name] = {"in": [rec.in_channels], "out": [rec.out_channels]}
    return PrunePlan(type(model).__name__, entries, dict(meta or {}), layers)


def prune(model: nn.Module, example_inputs: Any, options: Optional[PruneOptions] = None, *,
          data: Optional[Iterable[Any]] = None, loss_fn: Optional[Callable[..., torch.Tensor]] = None,
          latency_fn: Optional[Callable[[nn.Module], float]] = None, latency_table: Optional[LatencyTable] = None,
          **keywords: Any) -> PruneResult:
    """Prune ``model``'s channels to meet one goal; returns the model, its replayable plan and its report.

    ``options`` (a :class:`~jetforge.compress.prune.options.PruneOptions`; its module lists every key) says
    what to do; the keyword form ``prune(model, x, flops_reduction=2.0, round_to=8)`` builds the same options
    and runs the same path.
    ``example_inputs``: a tensor (or tuple) the model accepts, batch axis first; keep it
    small, it only serves the trace and the MAC count.  ``protect``: module names (or
    prefixes) whose output channels stay; the stem (``protect_stem``) and every model
    output always stay.  ``round_to`` defaults to the target profile's channel multiple.
    ``latency_fn(model) -> ms`` measures a candidate (default: CPU ONNX Runtime at the
    example input's shape); with ``latency_aware`` it also fills the per-group latency
    table at the kept fractions ``latency_levels``; pass ``latency_table`` (from an earlier
    result with the same model, importance and rounding) to reuse it instead of measuring.
    ``data`` and ``loss_fn``: the batches and loss of a criterion that needs gradients (``taylor``).
    A ``latency_reduction`` the search ends short of keeps the fastest model found, with a
    warning and ``goal_met=False``; ``strict=True`` raises :class:`CompressError` instead.  A FLOPs or
    parameter goal is landed within ``GOAL_TOLERANCE`` where the channel groups allow it (see :mod:`.refine`);
    an overshoot beyond it is warned about and recorded (``report.extra["goal"]``).

    Both eval and train mode are analysed (see :mod:`.tracing`), and the pruned model must run in both (see
    :mod:`.verify`); when it does not, the plan is undone -- the model given is left exactly as it was, the
    same tensor objects included -- and a :class:`CompressError` names the module that failed.
    """
    o = resolve_options(options, keywords)
    goal = o.goal()
    round_to = int(o.round_to) if o.round_to else default_round_to(o.target)
    inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    check_module_names(model, (o.overrides or {}).keys(), "module in overrides")
    if not o.inplace:
        model = copy.deepcopy(model)

    graph = DependencyGraph.build(model, inputs, protect=o.protect, protect_stem=o.protect_stem)
    if not graph.groups:
        log.warning("nothing in %s can be pruned: %s", type(model).__name__, graph.protected_report())
    scores = class_importance(graph, model, o.importance, data=data, loss_fn=loss_fn, seed=o.seed)
    before = _flops.count_ops(model, inputs)

    def choose(r: float) -> torch.Tensor:
        return select(graph, scores, r, global_ranking=o.global_ranking, round_to=round_to, min_keep=o.min_keep,
                      overrides=o.overrides)

    backend = "custom latency_fn" if latency_fn is not None else "onnxruntime CPU, 1 thread, median of 20"
    if latency_fn is None and (o.latency_aware or o.latency_reduction is not None or o.latency_source is not None):
        from jetforge.compress.prune.latency_sources import resolve

        latency_fn, latency_table, backend = resolve(o, model, tuple(inputs[0].shape), latency_table, backend)
    latency_fn = latency_fn or (lambda m: ort_latency(m, tuple(inputs[0].shape)))
    extra: Dict[str, Any] = {}
    if o.latency_aware:
        removed, chosen, extra = _latency_aware(model, graph, scores, before, latency_fn, o, round_to, latency_table)
        latency_before = extra["latency_table"]["base_ms"]
    else:
        chosen, latency_before, removed = _uniform_ratio(model, graph, scores, before, choose, o, round_to,
                                                         latency_fn, extra)
    table_obj = extra.pop("_table", None)
    settings = {"goal": goal, "goal_value": getattr(o, goal), "ratio": chosen, "importance": o.importance,
                "global_ranking": o.global_ranking, "round_to": round_to, "target": o.target,
                "protect": list(o.protect), "protect_stem": o.protect_stem, "min_keep": o.min_keep,
                "overrides": dict(o.overrides or {}), "seed": o.seed, "latency_aware": o.latency_aware,
                "latency_levels": list(o.latency_levels) if o.latency_aware else None,
                "example_input_shape": [list(t.shape) for t in inputs if isinstance(t, torch.Tensor)]}
    plan = make_plan(graph, model, removed, settings)
    report = _apply_and_report(model, plan, graph, inputs, before, settings, extra, latency_fn, backend,
                               latency_before, o)
    goal_met = extra["goal"]["met"] if o.latency_reduction is not None else True
    return PruneResult(model, plan, graph, report, chosen, table_obj, goal_met)


def _uniform_ratio(model: nn.Module, graph: DependencyGraph, scores: torch.Tensor, before: _flops.OpCount,
                   choose: Callable[[float], torch.Tensor], o: PruneOptions, round_to: int,
                   latency_fn: Callable[[nn.Module], float],
                   extra: Dict[str, Any]) -> Tuple[float, Optional[float], torch.Tensor]:
    """The ratio that meets the goal with one ratio for every group; (ratio, latency before in ms or None,
    the removed mask).

    A FLOPs/params goal is bisected on counted-then-scaled MACs, then refined between the last ratio that
    missed and the one that met it (:mod:`.refine`); a latency goal is measured on pruned copies (the search
    is recorded in ``extra["latency_search"]``).
    """
    ratio, latency_reduction = o.ratio, o.latency_reduction
    if ratio is not None:
        return float(ratio), None, choose(float(ratio))
    if latency_reduction is not None:
        latency_before = latency_fn(model)
        measured: Dict[float, float] = {}

        def speedup(r: float) -> float:
            measured[r] = latency_before / latency_fn(_pruned_copy(model, graph, choose(r)))
            return measured[r]

        chosen = _search(speedup, float(latency_reduction), steps=5, what="latency", best_effort=not o.strict)
        if chosen in measured:
            extra["latency_search"] = {"speedup": round(measured[chosen], 4), "measured": {
                "%.4f" % r: round(v, 4) for r, v in sorted(measured.items())}}
        return chosen, latency_before, choose(chosen)
    metric = "macs" if o.flops_reduction is not None else "params"
    goal = float((o.flops_reduction if metric == "macs" else o.params_reduction) or 0.0)  # one is given
    base = getattr(before, metric)

    def gain_of(removed: torch.Tensor) -> float:
        return base / max(1, getattr(_flops.estimate(graph, model, before, removed), metric))

    lo, hi = _search_bounds(lambda r: gain_of(choose(r)), goal, steps=14, what=metric)
    if hi == 0.0:
        return 0.0, None, choose(0.0)
    removed, taken, between = refine(graph, scores, choose(lo), choose(hi), round_to, gain_of, goal)
    extra["search"] = {"ratio_missing": round(lo, 6), "ratio_meeting": round(hi, 6), "units_between": between,
                       "units_taken": taken}
    return hi, None, removed


def _apply_and_report(model: nn.Module, plan: PrunePlan, graph: DependencyGraph, inputs: Tuple[Any, ...],
                      before: _flops.OpCount, settings: Dict[str, Any], extra: Dict[str, Any],
                      latency_fn: Callable[[nn.Module], float], backend: str, latency_before: Optional[float],
                      o: PruneOptions) -> PruneReport:
    """Apply ``plan`` to ``model`` and report MACs, parameters, layer widths and (if asked) latency before/after."""
    latency_reduction = o.latency_reduction
    measure_after = o.measure_latency or latency_reduction is not None or o.latency_aware
    names = list(graph.layers)
    layers_before = layer_snapshot(model, names)
    if o.measure_latency and latency_before is None:
        latency_before = latency_fn(model)
    undo: List[Callable[[], None]] = []
    apply_plan(model, plan, undo_to=undo)
    try:
        check_pruned(model, inputs, train_checked=graph.modes.get("train", "").startswith(("traced", "same")))
        after = _flops.count_ops(model, inputs)
        layers_after = layer_snapshot(model, names)
        latency_after = latency_fn(model) if measure_after else None
    except BaseException as err:
        undo[0]()  # the model given is left exactly as it was
        if isinstance(err, JetforgeError) or not isinstance(err, Exception):
            raise
        first = (str(err).strip().splitlines() or [""])[0][:200]
        raise CompressError("the pruned %s failed after pruning (%s: %s); the model was left as it was"
                            % (type(model).__name__, type(err).__name__, first),
                            hint="please report the architecture; protect layers to work around it") from err
    for name, entry in plan.layers.items():
        entry["in"].append(layers_after[name]["in"])
        entry["out"].append(layers_after[name]["out"])
    extra["traced_modes"] = dict(graph.modes)
    if latency_reduction is not None:
        extra["goal"] = _latency_goal(float(latency_reduction), extra.get("latency_search", {}),
                                      latency_before, latency_after)
    elif o.flops_reduction is not None or o.params_reduction is not None:
        extra["goal"] = _reduction_goal(o, before, after)
    report = PruneReport(type(model).__name__, settings, before, after, layers_before, layers_after,
                         graph.protected_report(), latency_before, latency_after,
                         backend if latency_after is not None else "", extra)
    log.info("pruned %s: MACs %d -> %d, params %d -> %d", type(model).__name__, before.macs, after.macs,
             before.params, after.params)
    return report


def _reduction_goal(o: PruneOptions, before: _flops.OpCount, after: _flops.OpCount) -> Dict[str, Any]:
    """A FLOPs/params goal, what was achieved, and whether it is within GOAL_TOLERANCE above it (warned if not)."""
    name = "flops_reduction" if o.flops_reduction is not None else "params_reduction"
    metric = "macs" if name == "flops_reduction" else "params"
    value = float(getattr(o, name))
    achieved = getattr(before, metric) / max(1, getattr(after, metric))
    within = achieved <= value * (1.0 + GOAL_TOLERANCE)
    if not within:
        log.warning("the %s goal of %.2fx is overshot: %.2fx achieved, more than %d%% over (channels go in whole "
                    "groups here: grouped convolutions lose whole groups, counts stay multiples of round_to)",
                    name, value, achieved, round(GOAL_TOLERANCE * 100))
    return {"name": name, "value": value, "met": bool(achieved >= value * (1.0 - 1e-9)),
            "achieved": round(achieved, 4), "tolerance": GOAL_TOLERANCE, "within_tolerance": bool(within)}


def _latency_goal(goal: float, search: Dict[str, Any], before_ms: Optional[float],
                  after_ms: Optional[float]) -> Dict[str, Any]:
    """Whether the search met a latency goal, what it achieved, and the final model's own measurement.

    The search's measurement of the chosen model decides (the final one is another sample of the
    same noisy quantity, reported next to it); a miss was already warned about by the search.
    """
    final = before_ms / after_ms if before_ms and after_ms else None
    achieved = search.get("speedup", final)
    met = achieved is None or achieved >= goal
    return {"name": "latency_reduction", "value": goal, "met": bool(met),
            "achieved": None if achieved is None else round(float(achieved), 4),
            "final_measurement": None if final is None else round(final, 4)}


def _latency_aware(model: nn.Module, graph: DependencyGraph, scores: torch.Tensor, before: _flops.OpCount,
                   latency_fn: Callable[[nn.Module], float], o: PruneOptions, round_to: int,
                   table: Optional[LatencyTable] = None):
    """Measure the per-group latency table (or reuse ``table``), then allocate greedily to the goal (see
    :mod:`latency`)."""
    flops_reduction, params_reduction, latency_reduction = o.flops_reduction, o.params_reduction, o.latency_reduction

    def latency_of(removed: torch.Tensor) -> float:
        return float(latency_fn(_pruned_copy(model, graph, removed)) if bool(removed.any()) else latency_fn(model))

    if table is not None:
        names = [g.name for g in graph.groups]
        if any(c.group >= len(names) or names[c.group] != c.name for c in table.costs):
            raise ConfigError("the latency_table given was measured on another model",
                              hint="reuse a table only with the same model, importance and round_to")
    else:
        table = measure_table(graph, scores, latency_of, levels=o.latency_levels, round_to=round_to,
                              min_keep=o.min_keep, progress=log.debug, show_progress=True)
    log.info("latency table: %d measurements in %.1f s, base %.3f ms", table.measurements, table.seconds,
             table.base_ms)
    alloc = Allocator(graph, table, scores)
    trace: List[Dict[str, Any]] = []
    if latency_reduction is None:
        metric = "macs" if flops_reduction is not None else "params"
        goal = float(flops_reduction if flops_reduction is not None else params_reduction)
        base = getattr(before, metric)

        def reached(removed: torch.Tensor, predicted: float) -> bool:
            return base / max(1, getattr(_flops.estimate(graph, model, before, removed), metric)) >= goal

        a = alloc.run(reached)
        removed, steps, predicted_ms, speedup = a.removed.clone(), list(a.steps), a.predicted_ms, None
    else:
        removed, steps, predicted_ms, speedup = _iterate_to_latency(alloc, table, latency_of, float(latency_reduction),
                                                                    o.max_latency_iterations, trace, o.strict)
    chosen = float(removed.sum()) / max(1, graph.num_classes)
    extra = {"latency_table": table.to_dict(),
             "latency_search": {"steps": [list(s) for s in steps], "predicted_ms": round(predicted_ms, 4),
                                "iterations": trace}}
    if speedup is not None:
        extra["latency_search"]["speedup"] = round(speedup, 4)
    extra["_table"] = table
    return removed, chosen, extra


def _iterate_to_latency(alloc: Allocator, table: LatencyTable, latency_of: Callable[[torch.Tensor], float],
                        goal: float, max_iterations: int, trace: List[Dict[str, Any]], strict: bool):
    """Greedy -> measure -> correct the predicted target, until the measured speed-up meets ``goal``.

    Returns the removed mask, the steps taken, the predicted and the measured speed-up of the model
    chosen: the first that meets the goal, else (``strict=False``) the fastest measured, with a warning.
    """
    target = table.base_ms / goal
    predicted_target = target
    best: Optional[Tuple[float, torch.Tensor, List[Any], float]] = None
    exhausted = ""
    for it in range(max_iterations):
        try:
            a = alloc.run(lambda removed, predicted: predicted <= predicted_target)
        except CompressError:  # every measured cut taken: what is left is the fastest it can offer
            a, exhausted = alloc.alloc, " (every measured group cut taken)"
        measured = latency_of(a.removed)
        speedup = table.base_ms / measured
        trace.append({"predicted_ms": round(a.predicted_ms, 4), "measured_ms": round(measured, 4),
                      "speedup": round(speedup, 4), "steps": len(a.steps)})
        log.info("latency-aware iteration %d: predicted %.3f ms, measured %.3f ms (goal %.3f ms)", it,
                 a.predicted_ms, measured, target)
        if best is None or speedup > best[0]:
            best = (speedup, a.removed.clone(), list(a.steps), a.predicted_ms)
        if measured <= target:
            return a.removed.clone(), list(a.steps), a.predicted_ms, speedup
        if exhausted:
            break
        real_saved = max(1e-9, table.base_ms - measured)
        predicted_saved = max(1e-9, table.base_ms - a.predicted_ms)
        # Cuts do not add up exactly: ask the prediction for as much more as the measurement lacks.
        predicted_target = a.predicted_ms - (measured - target) * predicted_saved / real_saved
    if best is None:
        raise ConfigError("max_latency_iterations must be at least 1, got %d" % max_iterations)
    message = ("the latency-aware search did not reach a %.2fx measured speed-up in %d iteration(s)%s: best %.2fx"
               % (goal, len(trace), exhausted, best[0]))
    if strict:
        raise CompressError(message, hint="ask for less, raise max_latency_iterations, or drop strict to keep "
                                          "the best model found")
    log.warning("%s; keeping that model", message)
    return best[1], best[2], best[3], best[0]


def _pruned_copy(model: nn.Module, graph: DependencyGraph, removed: torch.Tensor) -> nn.Module:
    clone = copy.deepcopy(model)
    apply_plan(clone, make_plan(graph, clone, removed))
    return clone


def _search(gain: Callable[[float], float], goal: float, steps: int, what: str, best_effort: bool = False) -> float:
    """Smallest ratio in [0, MAX_RATIO] whose ``gain`` reaches ``goal`` (bisection; gain grows with the ratio).

    ``best_effort``: a goal out of reach returns MAX_RATIO (the largest gain) with a warning instead of raising.
    """
    return _search_bounds(gain, goal, steps, what, best_effort)[1]


def _search_bounds(gain: Callable[[float], float], goal: float, steps: int, what: str,
                   best_effort: bool = False) -> Tuple[float, float]:
    """:func:`_search`'s last ratio that misses ``goal`` and the ratio it returns (which meets it)."""
    if goal <= 1.0:
        return 0.0, 0.0
    hi_gain = gain(MAX_RATIO)
    if hi_gain < goal:
        message = ("a %.2fx %s reduction is out of reach: removing %d%% of the prunable channels gives %.2fx"
                   % (goal, what, int(MAX_RATIO * 100), hi_gain))
        if best_effort:
            log.warning("%s; keeping that model", message)
            return MAX_RATIO, MAX_RATIO
        raise CompressError(message, hint="ask for less, or protect fewer layers")
    lo, hi = 0.0, MAX_RATIO
    for _ in range(steps):
        mid = (lo + hi) / 2
        if gain(mid) >= goal:
            hi = mid
        else:
            lo = mid
    return lo, hi


def load_pruned(model: nn.Module, plan: PrunePlan, state_dict: Optional[Mapping[str, Any]] = None) -> nn.Module:
    """Replay ``plan`` on a fresh ``model`` of the same architecture, then load ``state_dict`` (strict)."""
    apply_plan(model, plan)
    if state_dict is not None:
        try:
            model.load_state_dict(state_dict, strict=True)
        except RuntimeError as err:
            raise CompressError("the pruned weights do not fit the plan: %s" % str(err).splitlines()[0],
                                hint="load the state dict saved together with this plan") from err
    return model


def recalibrate_batchnorm(model: nn.Module, batches: Iterable[Any], max_batches: int = 16) -> nn.Module:
    """Re-estimate BatchNorm running statistics on a few batches (inputs, or (inputs, targets) pairs).

    Removing input channels of a conv shifts the distribution its BatchNorm sees, so the
    stored statistics are stale; a forward pass over a few hundred samples fixes that
    without training (no gradients, no weight change).
    """
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    saved = {m: m.momentum for m in norms}
    modes = {m: m.training for m in model.modules()}
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # cumulative average over the batches
    model.eval()
    for m in norms:
        m.train()
    try:
        with torch.no_grad():
            for i, batch in enumerate(batches):
                if i >= max_batches:
                    break
                model(batch[0] if isinstance(batch, (tuple, list)) else batch)
    finally:
        for m, mom in saved.items():
            m.momentum = mom
        for m, mode in modes.items():
            m.training = mode
    return model
