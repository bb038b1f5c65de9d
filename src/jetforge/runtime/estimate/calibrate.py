"""Boards report back: fold a user's measured board points into a local efficiency set (``--calibrate-from``).

``jetforge board-check`` writes ``board-check.json`` with ``estimate_points``: the latency it measured for each
engine of a bundle on the board (board, power mode, precision, GPU or DLA, batch, mean ms).  Here those points
are estimated with the model the user names (the bundle's ``model.onnx``) and a starting set (``tensorrt`` by
default), then one scale per device -- the GPU's compute and memory factors together, the same for the DLA --
and the GPU per-kernel cost are fitted to them (a pattern search on log errors, pulled weakly towards the
starting set: one or two points cannot determine more).  The result is written as a set of its own to a user
file, never to the packaged ``efficiency.yaml``; ``jetforge estimate --efficiency FILE.yaml`` uses it.

The errors printed after the fit are on the points it was fitted on: they say the set now describes this board
and model, not how it does on another model (the file's validation entry says so too).
"""

import datetime
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from jetforge.errors import ConfigError
from jetforge.runtime.estimate.efficiency import EFFICIENCY_FILE, EfficiencySet, Fit, Validation, efficiency_set

PRIOR_WEIGHT = 0.05          # as the published-points fit: weak, so that the points decide where they can
SCALE_BOUNDS = (0.05, 10.0)
KERNEL_US_BOUNDS = (0.0, 50.0)


@dataclass
class Point:
    """One measured board point (board-check's ``estimate_points`` entry) and the estimates of it."""

    id: str
    precision: str
    dla: bool
    batch: int
    power_mode: Optional[str]
    measured_ms: float
    before_ms: float = 0.0
    after_ms: float = 0.0


@dataclass
class Calibration:
    set_name: str
    path: Path
    points: List[Point]
    fit: Dict[str, float]
    notes: List[str] = field(default_factory=list)

    def error(self, which: str) -> Tuple[float, float]:
        """(median |error| %, worst ratio) of the ``before`` or ``after`` estimates."""
        errs, ratios = [], []
        for p in self.points:
            est = getattr(p, which + "_ms")
            errs.append(abs(est - p.measured_ms) / p.measured_ms * 100.0)
            ratios.append(max(est / p.measured_ms, p.measured_ms / est))
        errs.sort()
        mid = len(errs) // 2
        median = errs[mid] if len(errs) % 2 else 0.5 * (errs[mid - 1] + errs[mid])
        return median, max(ratios)


def read_points(path: str, target: str) -> Tuple[List[Point], Dict[str, Any]]:
    """The usable measured points of a board-check report for ``target`` (others are refused by name)."""
    from jetforge.fileio import require_file

    file = require_file(path, "board-check report", hint="run jetforge board-check on the board; it writes "
                                                          "board-check.json into its --out folder")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise ConfigError("%s is not a JSON file: %s" % (path, err), hint="pass board-check.json as written") from None
    if not isinstance(data, dict) or data.get("kind") != "jetforge-board-check":
        raise ConfigError("%s is not a jetforge board-check report (no kind: jetforge-board-check)" % path,
                          hint="pass the board-check.json that jetforge board-check wrote")
    points: List[Point] = []
    for raw in data.get("estimate_points") or []:
        if not isinstance(raw, dict) or not isinstance(raw.get("value"), (int, float)) or raw["value"] <= 0:
            continue
        if raw.get("board") != target:
            raise ConfigError("%s measured board %s, not --target %s" % (path, raw.get("board"), target),
                              hint="use --target %s" % raw.get("board"))
        if raw.get("metric", "latency_ms") != "latency_ms":
            continue
        points.append(Point(str(raw.get("id")), str(raw.get("precision")), raw.get("devices") == "dla",
                            int(raw.get("batch", 1)), raw.get("power_mode"), float(raw["value"])))
    if not points:
        raise ConfigError("%s has no measured latency point (estimate_points is empty)" % path,
                          hint="board-check records a point for every engine it could build and time")
    return points, data


def _fit_of(base: EfficiencySet, x: Dict[str, float]) -> Fit:
    old = base.fit or Fit()
    return Fit(gpu_compute_scale=min(10.0, old.gpu_compute_scale * x["gpu"]),
               gpu_memory_scale=min(10.0, old.gpu_memory_scale * x["gpu"]),
               dla_compute_scale=min(10.0, old.dla_compute_scale * x["dla"]),
               dla_memory_scale=min(10.0, old.dla_memory_scale * x["dla"]),
               dla_depthwise_scale=old.dla_depthwise_scale, gpu_kernel_us=x["gpu_kernel_us"],
               dla_subgraph_us=old.dla_subgraph_us, inference_us=old.inference_us,
               how="jetforge estimate --calibrate-from: one scale per device and the GPU per-kernel cost fitted "
                   "on a board's measured points, on top of set %r's own fit" % base.name)


def calibrate(model: Any, target: Any, report: str, out: str, base_name: str = "tensorrt",
              input_shapes: Any = None) -> Calibration:
    """Estimate every point of ``report`` before and after fitting, and write the fitted set to ``out``."""
    from jetforge.runtime.estimate.model import place, read_model, time_placed
    from jetforge.runtime.estimate.rates import target_rates

    if Path(out).resolve() == EFFICIENCY_FILE.resolve():
        raise ConfigError("refusing to write the packaged efficiency.yaml", hint="write a file of your own: -o "
                                                                                  "efficiency.local.yaml")
    points, data = read_points(report, target.name)
    base = efficiency_set(base_name, fitted=False)
    proto = read_model(model)
    placed = []
    for p in points:
        rates = target_rates(target, p.precision, p.power_mode, dla=p.dla)
        placed.append((place(proto, p.batch, p.precision, target=target, dla_core=0 if p.dla else None,
                             fusion=base.fusion, input_shapes=input_shapes), rates))

    def times(x: Dict[str, float]) -> List[float]:
        trial = _with_fit(base, _fit_of(base, x)).applied()
        return [time_placed(pl, rates, trial).latency_s * 1e3 for pl, rates in placed]

    start = {"gpu": 1.0, "dla": 1.0, "gpu_kernel_us": base.applied().overheads.gpu_kernel_us}

    def score(x: Dict[str, float]) -> float:
        data_term = sum(math.log(t / p.measured_ms) ** 2 for t, p in zip(times(x), points)) / len(points)
        prior = math.log(x["gpu"]) ** 2 + math.log(x["dla"]) ** 2 + \
            math.log((x["gpu_kernel_us"] + 1.0) / (start["gpu_kernel_us"] + 1.0)) ** 2
        return data_term + PRIOR_WEIGHT * prior

    names = ["gpu", "gpu_kernel_us"] + (["dla"] if any(p.dla for p in points) else [])
    bounds = {"gpu": SCALE_BOUNDS, "dla": SCALE_BOUNDS, "gpu_kernel_us": KERNEL_US_BOUNDS}
    best = _pattern_search(score, start, names, bounds)
    for p, before, after in zip(points, times(start), times(best)):
        p.before_ms, p.after_ms = before, after
    name = "%s_%s_measured" % (base.name, target.name)
    result = Calibration(name, Path(out), points, best)
    fitted = _with_fit(base, _fit_of(base, best))
    fitted.name = name
    fitted.description = "%s, calibrated on %d point(s) measured by jetforge board-check on %s" % (
        base.description, len(points), target.name)
    fitted.obtained = "jetforge estimate --calibrate-from %s (%s): %s" % (
        Path(report).name, datetime.date.today().isoformat(), fitted.fit.how if fitted.fit else "")
    before, after = result.error("before"), result.error("after")
    fitted.validation = [Validation(
        text="calibrated on %d board-check point(s) of bundle %s on %s: median |error| %.1f %% before, %.1f %% after "
             "(fitted on these same points: not held out, and only for this model)" % (
                 len(points), (data.get("bundle") or {}).get("name", "?"), target.name, before[0], after[0]),
        device="DLA" if all(p.dla for p in points) else "GPU", precisions=sorted({p.precision for p in points}),
        targets=target.kind, kind="fitted", points=len(points), median_abs_pct=round(after[0], 1),
        worst_ratio=round(after[1], 3), file=str(Path(report)))]
    _write_set(fitted, Path(out))
    return result


def _with_fit(base: EfficiencySet, fit: Fit) -> EfficiencySet:
    import copy

    out = copy.deepcopy(base)
    out.fit = fit
    return out


def _pattern_search(score: Any, start: Dict[str, float], names: List[str],
                    bounds: Dict[str, Tuple[float, float]], rounds: int = 30) -> Dict[str, float]:
    """Coordinate pattern search on multiplicative steps (the benchmarks' fit, kept torch- and numpy-free)."""
    x, best, step = dict(start), score(start), 2.0
    for _ in range(rounds):
        improved = False
        for n in names:
            for f in (step, 1.0 / step):
                trial = dict(x)
                lo, hi = bounds[n]
                trial[n] = min(hi, max(lo, x[n] * f if x[n] > 0 else 1.0))
                s = score(trial)
                if s < best - 1e-12:
                    x, best, improved = trial, s, True
        if not improved:
            step = math.sqrt(step)
            if step < 1.005:
                break
    return x


def _write_set(eff: EfficiencySet, path: Path) -> None:
    """Add (or replace) ``eff`` in the user's YAML file of sets, atomically; other sets in it are kept."""
    import yaml

    from jetforge.config import to_dict
    from jetforge.fileio import write_text_atomic

    sets: Dict[str, Any] = {}
    if path.is_file():
        old = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if not isinstance(old, dict) or not isinstance(old.get("sets", {}), dict):
            raise ConfigError("%s is not an efficiency set file (no sets: mapping)" % path,
                              hint="write to a new file with -o")
        sets = dict(old.get("sets") or {})
    body = to_dict(eff)
    body.pop("name", None)
    sets[eff.name] = body
    header = "# Efficiency sets written by jetforge estimate --calibrate-from (a local file, not jetforge's own).\n"
    write_text_atomic(path, header + yaml.safe_dump({"sets": sets}, sort_keys=False, width=120))


__all__ = ["Calibration", "Point", "calibrate", "read_points"]
