"""Check ``jetforge estimate`` against published Jetson results: error on every point, fitted and leave-one-board-out.

Reads ``benchmarks/estimator/data/published_jetson.yaml`` (MLPerf Inference results of AGX Orin, Orin NX,
Xavier NX and AGX Xavier; NVIDIA's DLA figures for AGX Orin at four power modes; torch2trt's published FP16
benchmarks on AGX Xavier and Jetson Nano and its ResNet-18 GPU/DLA figures on Xavier NX), builds each
network with random weights (``estimate_models.PUBLISHED_NETWORKS``), exports it to ONNX (cached in
``build/estimate_onnx/``) and estimates every point with the ``tensorrt`` efficiency set: the point's
precision (INT8 or FP16), board, power mode and batch, on the GPU, on the DLA cores, or both at once (MLPerf
Offline: throughput of the GPU engine plus that of one engine per DLA core, each timed as if alone).

Points marked ``fit: false`` are checks only: estimated, reported per group (device x precision), never fitted
on -- their "fitted" column is the shipped fit applied to data it never saw.

Three numbers per point:

* **a priori**: the efficiency set's starting factors (hand-set), without its ``fit`` block;
* **fitted**: eight parameters fitted on all used points that are not ``fit: false`` -- a scale on every GPU compute factor, one on
  every DLA compute factor, one more on the DLA's depthwise convolutions, one on the GPU's and one on
  the DLA's memory factors, and the per-GPU-kernel, per-DLA-loadable and per-inference overheads --
  minimising the squared log error plus a weak pull towards the starting values (``PRIOR_WEIGHT``);
* **held out**: the same fit on the other boards only, applied to this board (leave-one-board-out):
  the number that says how the estimator does on a board it was not fitted on.

    python benchmarks/estimator/estimate_published.py            # ~5-10 min on 2 busy cores (ONNX export, DLA analysis)
    python benchmarks/estimator/estimate_published.py --show-fitted-set    # also print the fit block for efficiency.yaml
"""

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import result_path, use_checkout  # noqa: E402

use_checkout()

from benchmarks.common.estimate_fit import features, fit, log_error, params_of, summary, total_us  # noqa: E402

from jetforge.runtime.estimate.efficiency import efficiency_set  # noqa: E402
from jetforge.runtime.estimate.graph import CATEGORIES, DEPTHWISE_CATEGORIES  # noqa: E402
from jetforge.runtime.estimate.model import place  # noqa: E402
from jetforge.runtime.estimate.rates import target_rates  # noqa: E402
from jetforge.targets import get_target  # noqa: E402

DATA = HERE / "data" / "published_jetson.yaml"
ONNX_DIR = ROOT / "build" / "estimate_onnx"
DEVICES = ("gpu", "dla", "gpu+dla")
PRECISIONS = ("int8", "fp16")
METRICS = ("latency_ms", "throughput_per_s")
REQUIRED = ("id", "source", "board", "power_mode", "jetpack", "tensorrt", "network", "precision", "devices", "batch",
            "metric", "value", "statistic")
SCALES = ("s_gpu", "s_dla", "s_dla_dw", "s_mem_gpu", "s_mem_dla")
OVERHEAD_PARAMS = ("gpu_kernel_us", "dla_subgraph_us", "inference_us")
FITTED = SCALES + OVERHEAD_PARAMS
BOUNDS = {"s_gpu": (0.05, 3.0), "s_dla": (0.05, 3.0), "s_dla_dw": (0.05, 3.0), "s_mem_gpu": (0.1, 3.0),
          "s_mem_dla": (0.1, 3.0),
          "gpu_kernel_us": (0.0, 30.0), "dla_subgraph_us": (0.0, 500.0), "inference_us": (0.0, 300.0)}
# A weak prior: each parameter's squared log distance from its starting value, times this weight, is added to
# the mean squared log error.  Without it, the 9 points left when AGX Orin is held out drive 6 parameters to
# their bounds; with it, a parameter moves only as far as the points agree it should.
PRIOR_WEIGHT = 0.05


def load_points(path: Path = DATA) -> Dict[str, Any]:
    """The data file, validated: every point has a source and the fields the estimate needs."""
    import yaml

    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    problems = []
    seen = set()
    for i, p in enumerate(data.get("points") or []):
        where = p.get("id", "#%d" % i)
        missing = [k for k in REQUIRED if k not in p]
        if missing:
            problems.append("%s: missing %s" % (where, ", ".join(missing)))
        if not str(p.get("source") or "").strip():
            problems.append("%s: no source" % where)
        if p.get("devices") not in DEVICES or p.get("metric") not in METRICS:
            problems.append("%s: devices must be one of %s and metric one of %s" % (where, DEVICES, METRICS))
        if p.get("precision") not in PRECISIONS:
            problems.append("%s: precision must be one of %s" % (where, PRECISIONS))
        if not isinstance(p.get("fit", True), bool):
            problems.append("%s: fit must be true or false" % where)
        if p.get("network") not in (data.get("networks") or {}):
            problems.append("%s: network %r is not described under networks:" % (where, p.get("network")))
        if p.get("use", True):
            if not isinstance(p.get("batch"), int) or p["batch"] < 1:
                problems.append("%s: a used point needs an integer batch" % where)
            if p.get("devices") in ("dla", "gpu+dla") and not p.get("dla_engines"):
                problems.append("%s: DLA points need dla_engines" % where)
        elif not p.get("exclude_reason"):
            problems.append("%s: an unused point needs exclude_reason" % where)
        if where in seen:
            problems.append("%s: duplicate id" % where)
        seen.add(where)
    if problems:
        raise ValueError("published points file %s: %s" % (path, "; ".join(problems)))
    return data


def onnx_path(network: str, data: Dict[str, Any]) -> Path:
    from benchmarks.common.estimate_models import PUBLISHED_NETWORKS, ModelSpec, export_onnx

    path = ONNX_DIR / ("published_%s.onnx" % network)
    if not path.is_file():
        ONNX_DIR.mkdir(parents=True, exist_ok=True)
        print("exporting", network, flush=True)
        spec = ModelSpec(network, "published", PUBLISHED_NETWORKS[network], tuple(data["networks"][network]["input"]))
        export_onnx(spec, str(path), opset=17)
    return path


def engines(point: Dict[str, Any], data: Dict[str, Any], cache: Dict[Tuple, Any]) -> List[Dict[str, Any]]:
    """The engines a point ran, each with its features: [{"kind", "batch", "count", "features"}]."""
    target = get_target(point["board"])
    eff = efficiency_set("tensorrt", fitted=False)
    out = []
    wanted = []
    if point["devices"] in ("gpu", "gpu+dla"):
        wanted.append(("gpu", point["batch"], 1))
    if point["devices"] in ("dla", "gpu+dla"):
        wanted.append(("dla", point.get("dla_batch") or point["batch"], int(point["dla_engines"])))
    for kind, batch, count in wanted:
        key = (point["network"], batch, point["board"], kind)
        if key not in cache:
            cache[key] = place(str(onnx_path(point["network"], data)), batch, point["precision"], target=target,
                               dla_core=0 if kind == "dla" else None)
            print("placed %-28s b=%-3d %-14s %s: %d kernels" % (point["network"], batch, point["board"], kind,
                                                               len(cache[key].kernels)), flush=True)
        rates = target_rates(target, point["precision"], point.get("power_mode"), dla=kind == "dla")
        out.append({"kind": kind, "batch": batch, "count": count, "features": features(cache[key], rates, eff)})
    return out


def scaled(base: Dict[str, float], p: Dict[str, float]) -> Dict[str, float]:
    out = dict(base)
    for c in CATEGORIES:
        out["gpu.%s.compute" % c] = base["gpu.%s.compute" % c] * p["s_gpu"]
        depthwise = p["s_dla_dw"] if c in DEPTHWISE_CATEGORIES else 1.0
        out["dla.%s.compute" % c] = base["dla.%s.compute" % c] * p["s_dla"] * depthwise
        for d in ("gpu", "dla"):
            out["%s.%s.memory" % (d, c)] = base["%s.%s.memory" % (d, c)] * p["s_mem_" + d]
    for name in ("gpu_kernel_us", "dla_subgraph_us", "inference_us"):
        out[name] = p[name]
    return out


def predict_point(point: Dict[str, Any], engs: List[Dict[str, Any]], params: Dict[str, float]) -> float:
    if point["metric"] == "latency_ms":
        return sum(total_us(e["features"], params) for e in engs) / 1e3
    return sum(e["count"] * e["batch"] / (total_us(e["features"], params) * 1e-6) for e in engs)


def objective(items: List[Tuple[Dict[str, Any], List[Dict[str, Any]]]], base: Dict[str, float],
              start: Dict[str, float]):
    def score(p: Dict[str, float]) -> float:
        params = scaled(base, p)
        error = sum(log_error(predict_point(pt, e, params), pt["value"]) ** 2 for pt, e in items) / max(1, len(items))
        prior = sum(math.log(p[k] / start[k]) ** 2 for k in SCALES) + \
            sum(math.log((p[k] + 1.0) / (start[k] + 1.0)) ** 2 for k in OVERHEAD_PARAMS)
        return error + PRIOR_WEIGHT * prior
    return score


def prepare(data: Dict[str, Any]) -> List[Tuple[Dict[str, Any], List[Dict[str, Any]]]]:
    """Every used point with its engines' features (the slow part: ONNX export, shape inference, DLA analysis)."""
    cache: Dict[Tuple, Any] = {}
    return [(p, engines(p, data, cache)) for p in data["points"] if p.get("use", True)]


def run(data: Dict[str, Any], items: Optional[List[Tuple[Dict[str, Any], List[Dict[str, Any]]]]] = None
        ) -> Dict[str, Any]:
    base = params_of(efficiency_set("tensorrt", fitted=False))
    start = {"s_gpu": 1.0, "s_dla": 1.0, "s_dla_dw": 1.0, "s_mem_gpu": 1.0, "s_mem_dla": 1.0,
             "gpu_kernel_us": base["gpu_kernel_us"],
             "dla_subgraph_us": base["dla_subgraph_us"], "inference_us": base["inference_us"]}
    items = prepare(data) if items is None else items
    used = [p for p, _ in items]
    fit_items = [it for it in items if in_fit(it[0])]
    fitted = fit(objective(fit_items, base, start), start, FITTED, BOUNDS)
    held: Dict[str, float] = {}
    held_params: Dict[str, Dict[str, float]] = {}
    for board in sorted({p["board"] for p in used}):
        train = [it for it in fit_items if it[0]["board"] != board]
        if len(train) == len(fit_items):      # a board with check points only: its left-out fit is the full fit
            params = fitted
        else:
            params = fit(objective(train, base, start), start, FITTED, BOUNDS) if train else start
        held_params[board] = params
        for pt, e in items:
            if pt["board"] == board:
                held[pt["id"]] = predict_point(pt, e, scaled(base, params))
        print("held out %-14s (fitted on %d points of other boards)" % (board, len(train)), flush=True)
    rows = []
    for pt, e in items:
        row = {k: pt.get(k) for k in ("id", "board", "power_mode", "network", "precision", "devices", "batch", "metric",
                                      "value")}
        row["in_fit"] = in_fit(pt)
        for label, value in (("a_priori", predict_point(pt, e, scaled(base, start))),
                             ("fitted", predict_point(pt, e, scaled(base, fitted))), ("held_out", held[pt["id"]])):
            row[label] = value
            row[label + "_error_pct"] = 100.0 * (value - pt["value"]) / pt["value"]
        rows.append(row)
    fit_rows = [r for r in rows if r["in_fit"]]
    stats = {label: summary([(r[label], r["value"]) for r in fit_rows]) for label in ("a_priori", "fitted", "held_out")}
    per_board = {b: {label: summary([(r[label], r["value"]) for r in fit_rows if r["board"] == b])
                     for label in ("fitted", "held_out")} for b in sorted({r["board"] for r in fit_rows})}
    return {"schema": 2, "data_file": str(DATA.relative_to(ROOT)), "points_used": len(fit_rows),
            "points_checked": len(rows) - len(fit_rows), "groups": groups(rows),
            "points_excluded": [{"id": p["id"], "reason": p.get("exclude_reason")} for p in data["points"]
                                if not p.get("use", True)],
            "fitted_parameters": {k: round(v, 4) for k, v in fitted.items()},
            "held_out_parameters": {b: {k: round(v, 4) for k, v in p.items()} for b, p in held_params.items()},
            "summary": stats, "per_board": per_board, "rows": rows,
            "summary_scope": "summary and per_board: the points the fit uses; groups: every used point by device, "
                             "precision and whether it is in the fit (fit: false = checks only)",
            "model": "roofline per kernel, efficiency set 'tensorrt'; GPU+DLA offline = sum of engine throughputs"}


def in_fit(point: Dict[str, Any]) -> bool:
    """Whether a used point takes part in the fit (``fit: false`` marks a check-only point)."""
    return bool(point.get("fit", True))


def group_of(row: Dict[str, Any]) -> str:
    """The validation group of a row: where it ran (GPU, DLA, GPU+DLA), its precision, fitted on or check only."""
    return "%s %s %s" % (row["devices"].upper(), row["precision"].upper(), "fitted-on" if row["in_fit"] else "check")


def groups(rows: List[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """Error statistics per group (``group_of``), with the boards the group covers: what efficiency.yaml's
    validation entries quote for each case the command can be asked about (GPU or DLA, INT8 or FP16)."""
    out: Dict[str, Dict[str, Any]] = {}
    for name in sorted({group_of(r) for r in rows}):
        sub = [r for r in rows if group_of(r) == name]
        entry: Dict[str, Any] = {label: summary([(r[label], r["value"]) for r in sub])
                                 for label in ("a_priori", "fitted", "held_out")}
        entry["boards"] = sorted({r["board"] for r in sub})
        out[name] = entry
    return out


def print_table(result: Dict[str, Any]) -> None:
    print("\n%-44s %-16s %9s %10s %8s %10s %8s %10s %8s" % ("point", "metric", "published", "a priori", "err %",
                                                          "fitted", "err %", "held out", "err %"))
    for r in result["rows"]:
        print("%-44s %-16s %9.3f %10.3f %8.1f %10.3f %8.1f %10.3f %8.1f" % (
            r["id"], r["metric"], r["value"], r["a_priori"], r["a_priori_error_pct"], r["fitted"],
            r["fitted_error_pct"], r["held_out"], r["held_out_error_pct"]))
    for label, s in result["summary"].items():
        print("%-9s n=%d median |err| %.1f %%, mean %.1f %%, within 2x %.0f %%, worst %.2fx" % (
            label, s["n"], s["median_abs_pct"], s["mean_abs_pct"], s["within_2x_pct"], s["worst_ratio"]))
    for name, g in result["groups"].items():
        print("  %-22s n=%-3d a priori %.1f %% | fitted %.1f %%, worst %.2fx | board left out %.1f %%, worst %.2fx (%s)" % (
            name, g["fitted"]["n"], g["a_priori"]["median_abs_pct"], g["fitted"]["median_abs_pct"],
            g["fitted"]["worst_ratio"], g["held_out"]["median_abs_pct"], g["held_out"]["worst_ratio"],
            ", ".join(g["boards"])))
    for board, s in result["per_board"].items():
        print("  %-14s n=%d fitted median %.1f %% | held out median %.1f %%, worst %.2fx" % (
            board, s["fitted"]["n"], s["fitted"]["median_abs_pct"], s["held_out"]["median_abs_pct"],
            s["held_out"]["worst_ratio"]))
    print("fitted parameters:", result["fitted_parameters"])


def plot(result: Dict[str, Any], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    boards = sorted({r["board"] for r in result["rows"]})
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.5))
    for ax, metric, unit in zip(axes, METRICS, ("ms", "inferences/s")):
        rows = [r for r in result["rows"] if r["metric"] == metric]
        if not rows:
            continue
        for board in boards:
            sub = [r for r in rows if r["board"] == board]
            if sub:
                ax.scatter([r["value"] for r in sub], [r["held_out"] for r in sub], s=22, label=board + " held out")
                ax.scatter([r["value"] for r in sub], [r["fitted"] for r in sub], s=10, marker="x", color="gray")
        vals = [r["value"] for r in rows]
        lo, hi = min(vals) / 2.5, max(vals) * 2.5
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        ax.plot([lo, hi], [2 * lo, 2 * hi], "k:", lw=0.6)
        ax.plot([lo, hi], [lo / 2, hi / 2], "k:", lw=0.6)
        ax.set(xscale="log", yscale="log", xlabel="published %s" % unit, ylabel="estimated %s" % unit,
               title="%s (x: fitted on all points; dotted: 2x)" % metric)
        ax.legend(fontsize=7)
    fig.suptitle("jetforge estimate vs published Jetson results (MLPerf, NVIDIA DLA-SW, torch2trt): %d points in the "
                 "fit, %d checks" % (result["points_used"], result["points_checked"]), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_efficiency(result: Dict[str, Any]) -> None:
    """Print the ``fit`` block for the tensorrt set in efficiency.yaml (pasted by hand, reviewed)."""
    p = result["fitted_parameters"]
    s = result["summary"]
    print("\n    fit: {gpu_compute_scale: %.3f, dla_compute_scale: %.3f, dla_depthwise_scale: %.3f, "
          "gpu_memory_scale: %.3f, dla_memory_scale: %.3f, gpu_kernel_us: %.2f, dla_subgraph_us: %.1f, "
          "inference_us: %.1f,\n          how: \"benchmarks/estimator/estimate_published.py: %d published Jetson points, "
          "median |error| %.0f %% fitted, %.0f %% leave-one-board-out\"}" % (
              p["s_gpu"], p["s_dla"], p["s_dla_dw"], p["s_mem_gpu"], p["s_mem_dla"], p["gpu_kernel_us"],
              p["dla_subgraph_us"], p["inference_us"],
              result["points_used"], s["fitted"]["median_abs_pct"], s["held_out"]["median_abs_pct"]))


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=None, help="JSON (default results/<device>_<date>_published-jetson.json)")
    parser.add_argument("--plot", default=None, help="PNG (default: --out's stem + .png)")
    parser.add_argument("--show-fitted-set", action="store_true", help="print the fit block for efficiency.yaml")
    args = parser.parse_args(argv)
    args.out = args.out or str(result_path(__file__, "published-jetson"))
    args.plot = args.plot or str(Path(args.out).with_suffix(".png"))
    result = run(load_points())
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    plot(result, args.plot)
    print_table(result)
    if args.show_fitted_set:
        write_efficiency(result)
    print("wrote %s and %s" % (args.out, args.plot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
