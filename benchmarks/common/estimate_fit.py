"""Shared by the estimator's check scripts: fast re-timing with other efficiency factors, fitting, error statistics.

:func:`features` turns a placed model (``jetforge.runtime.estimate.model.place``) into numpy arrays,
one entry per kernel; :func:`predict` applies :func:`jetforge.runtime.estimate.model.kernel_time`'s
roofline to them for a parameter vector in microseconds, thousands of times faster than re-running
the estimator, so a fit can try many parameter sets.  A test checks that both give the same times.
Parameters are a flat dict: ``gpu.<type>.compute``, ``gpu.<type>.memory``, ``dla.<type>.compute``,
``dla.<type>.memory``, optionally ``gpu.<type>.launch_us`` (a type's own per-kernel cost; absent: ``gpu_kernel_us``)
and the overheads ``gpu_kernel_us``, ``dla_layer_us``, ``dla_subgraph_us``, ``transition_us``, ``inference_us``.
"""

import copy
import math
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from jetforge.runtime.estimate.efficiency import EfficiencySet, Factor
from jetforge.runtime.estimate.graph import CATEGORIES, TENSOR_CATEGORIES
from jetforge.runtime.estimate.model import DLA, Placed, kernel_time, transitions
from jetforge.runtime.estimate.rates import BYTES, TargetRates

OVERHEADS = ("gpu_kernel_us", "dla_layer_us", "dla_subgraph_us", "transition_us", "inference_us")


@dataclass
class Features:
    """One placed model at one batch size, as arrays over its kernels (µs-scale quantities)."""

    flops: np.ndarray           # FLOPs / (peak x shape factor): µs at 100 % compute efficiency
    mem: np.ndarray             # bytes / bandwidth: µs at 100 % memory efficiency
    cat: np.ndarray             # index into CATEGORIES
    dla: np.ndarray             # bool: kernel on the DLA
    live: np.ndarray            # bool: not an elided kernel
    names: List[str]            # kernel names (the head ONNX node)
    transition_us_ideal: float  # sum over transitions of 2 x bytes / bandwidth
    n_transitions: int
    dla_subgraphs: int


def features(placed: Placed, rates: TargetRates, eff: EfficiencySet) -> Features:
    """Arrays such that ``predict`` reproduces ``kernel_time`` for any factors (shape factor from ``eff``)."""
    ideal = EfficiencySet(eff.description, eff.obtained, {c: Factor(1.0, 1.0) for c in CATEGORIES},
                          {c: Factor(1.0, 1.0) for c in CATEGORIES}, copy.deepcopy(eff.overheads), 1.0,
                          eff.tile_m, eff.tile_n, eff.min_occupancy, pool_window_reads=eff.pool_window_reads)
    ideal.overheads.gpu_kernel_us = ideal.overheads.dla_layer_us = 0.0
    flops, mem, cat, dla, live, names = [], [], [], [], [], []
    for kernel in placed.kernels:
        t = kernel_time(kernel, placed.info, rates, ideal, placed.precision)
        flops.append(t.compute_s * 1e6)
        mem.append(t.memory_s * 1e6)
        cat.append(CATEGORIES.index(kernel.category) if kernel.category in CATEGORIES else 0)
        dla.append(kernel.device == DLA)
        live.append(kernel.category != "elided")
        names.append(kernel.name)
    ideal.overheads.transition_us = 0.0
    moves = transitions(placed, rates, ideal)
    return Features(np.array(flops), np.array(mem), np.array(cat, dtype=int), np.array(dla, dtype=bool),
                    np.array(live, dtype=bool), names, sum(m.time_s for m in moves) * 1e6, len(moves),
                    placed.dla_subgraphs)


def params_of(eff: EfficiencySet) -> Dict[str, float]:
    out: Dict[str, float] = {}
    for device, table in (("gpu", eff.gpu), ("dla", eff.dla)):
        for c in CATEGORIES:
            f = eff.factor("DLA" if device == "dla" else "GPU", c) if device == "dla" else table[c]
            out["%s.%s.compute" % (device, c)] = f.compute
            out["%s.%s.memory" % (device, c)] = f.memory
            if device == "gpu" and f.launch_us is not None:
                out["gpu.%s.launch_us" % c] = f.launch_us
    for name in OVERHEADS:
        out[name] = getattr(eff.overheads, name)
    out["transition_memory_efficiency"] = eff.transition_memory_efficiency
    return out


def _table(params: Dict[str, float], device: str, kind: str) -> np.ndarray:
    return np.array([params["%s.%s.%s" % (device, c, kind)] for c in CATEGORIES])


def predict(f: Features, params: Dict[str, float]) -> np.ndarray:
    """Per-kernel times in µs for ``params``."""
    gc, gm = _table(params, "gpu", "compute"), _table(params, "gpu", "memory")
    dc, dm = _table(params, "dla", "compute"), _table(params, "dla", "memory")
    ce = np.where(f.dla, dc[f.cat], gc[f.cat])
    me = np.where(f.dla, dm[f.cat], gm[f.cat])
    launch = np.array([params.get("gpu.%s.launch_us" % c, params["gpu_kernel_us"]) for c in CATEGORIES])
    over = np.where(f.dla, params["dla_layer_us"], launch[f.cat])
    t = np.maximum(f.flops / ce, f.mem / me) + over
    return np.where(f.live, t, 0.0)


def total_us(f: Features, params: Dict[str, float], kernel_times: Optional[np.ndarray] = None) -> float:
    times = predict(f, params) if kernel_times is None else kernel_times
    return float(times.sum() + f.transition_us_ideal / params["transition_memory_efficiency"]
                 + f.n_transitions * params["transition_us"] + f.dla_subgraphs * params["dla_subgraph_us"]
                 + params["inference_us"])


def to_efficiency(base: EfficiencySet, params: Dict[str, float], obtained: str) -> EfficiencySet:
    """``base`` with the factors of ``params`` (for writing a fitted set)."""
    out = copy.deepcopy(base)
    out.obtained = obtained
    for c in CATEGORIES:
        out.gpu[c] = Factor(params["gpu.%s.compute" % c], params["gpu.%s.memory" % c], base.gpu[c].calibrated,
                            base.gpu[c].note, params.get("gpu.%s.launch_us" % c))
    for c in list(base.dla):
        out.dla[c] = Factor(params["dla.%s.compute" % c], params["dla.%s.memory" % c], base.dla[c].calibrated,
                            base.dla[c].note)
    for name in OVERHEADS:
        setattr(out.overheads, name, params[name])
    out.transition_memory_efficiency = params["transition_memory_efficiency"]
    return out


# ------------------------------------------------------------------------------------------------
# fitting: a pattern search on log-parameters (few parameters, a cheap objective, no scipy)
# ------------------------------------------------------------------------------------------------
def fit(objective: Callable[[Dict[str, float]], float], start: Dict[str, float], names: Sequence[str],
        bounds: Dict[str, Sequence[float]], rounds: int = 6) -> Dict[str, float]:
    """Minimise ``objective`` over the parameters ``names`` (others fixed), each within its ``bounds``."""
    params = dict(start)
    best = objective(params)
    step = 2.0
    for _ in range(rounds):
        improved = False
        for name in names:
            lo, hi = bounds[name]
            for factor in (step, 1.0 / step, math.sqrt(step), 1.0 / math.sqrt(step)):
                trial = dict(params)
                value = params[name] * factor if params[name] > 0 else (lo + hi) / 2
                trial[name] = min(hi, max(lo, value))
                score = objective(trial)
                if score < best - 1e-12:
                    params, best, improved = trial, score, True
        step = math.sqrt(step) if not improved else step
        if step < 1.01:
            break
    return params


def log_error(pred: float, meas: float) -> float:
    return math.log(max(pred, 1e-9) / max(meas, 1e-9))


def summary(pairs: Sequence[Sequence[float]]) -> Dict[str, float]:
    """Error statistics of (predicted, measured) pairs: median / mean absolute %, share within 2x, worst ratio."""
    if not pairs:
        return {"n": 0}
    errs = [abs(p - m) / m for p, m in pairs if m > 0]
    ratios = [max(p / m, m / p) for p, m in pairs if m > 0 and p > 0]
    return {"n": len(errs), "median_abs_pct": 100.0 * float(np.median(errs)),
            "mean_abs_pct": 100.0 * float(np.mean(errs)),
            "within_2x_pct": 100.0 * sum(1 for r in ratios if r <= 2.0) / max(1, len(ratios)),
            "worst_ratio": float(max(ratios)) if ratios else float("nan")}


__all__ = ["Features", "OVERHEADS", "TENSOR_CATEGORIES", "BYTES", "features", "fit", "log_error", "params_of",
           "predict", "summary", "to_efficiency", "total_us"]
