"""Check ``jetforge estimate`` against the H200 measurements: per-layer and total errors, fitted and held out.

Reads what ``estimate_h200.py`` measured (per-module kernel times from the profiler, CUDA-graph
totals), exports the same architectures to ONNX here (``estimate_models.export_onnx``, cached in
``build/estimate_onnx/``), places them with one kernel per layer (``fusion="none"``: eager PyTorch)
on the ``server-hopper-h200`` profile and compares, per model and batch:

* **a priori**: the ``pytorch_eager`` efficiency set as shipped (hand-set factors);
* **held out**: factors fitted on the other models (5 folds by model: leave-some-models-out), then
  applied to this model -- the number that says how well the estimator predicts a model it was not
  fitted on.  The fit's one free setting, how strongly factors are pulled towards their starting values,
  is chosen inside each fold by a cross-validation on that fold's training models (nested), so the
  held-out model influences neither the factors nor that choice; the held-out errors with the setting
  fixed at each candidate are reported beside it;
* **fitted**: factors fitted on every model (reported, and written as the fitted set).

Layers are compared per PyTorch module: ONNX node names carry the module path
(``/layer1/layer1.0/conv1/Conv`` -> ``layer1.0.conv1``), functional ops (a residual ``+``) belong to
the module whose ``forward`` runs them, as the profiler attributes their kernels.  Goal (issue 16):
median absolute error of the total latency <= 25 %, none above 2x.

    python benchmarks/estimator/estimate_h200_fit.py            # the committed H200 measurement; ~30 min, 2 busy cores
    python benchmarks/estimator/estimate_h200.py --dry-run --out /tmp/dry.json      # then, in seconds:
    python benchmarks/estimator/estimate_h200_fit.py /tmp/dry.json --out /tmp/dry_fit.json --plot /tmp/dry_fit.png

Default input: ``results/nvidia-h200_2026-12-01_measured.json``; output ``results/<device>_<date>_h200-fit.json``
and ``.png`` (the device is the machine that fits: the H200's numbers are in the input).
"""

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import committed, result_path, use_checkout  # noqa: E402

use_checkout()

from benchmarks.common.estimate_fit import (features, fit, log_error, params_of, predict, summary,  # noqa: E402
                                           total_us)

from jetforge.runtime.estimate.efficiency import efficiency_set  # noqa: E402
from jetforge.runtime.estimate.graph import CATEGORIES  # noqa: E402
from jetforge.runtime.estimate.model import place  # noqa: E402
from jetforge.runtime.estimate.rates import target_rates  # noqa: E402
from jetforge.targets import get_target  # noqa: E402

FOLDS = 5
# A weak pull towards the starting values: a layer type that only a few tiny, overhead-bound layers of the
# training models have (MTCNN's softmax) leaves its factors nearly free, and an unregularised search lets them
# drift far on noise; held out, a model that is mostly that type (ViT) was then off by 2x in a synthetic check.
# How weak is not known in advance: too strong, and a type that only a few training models have cannot move as
# far as their measurements say (the dilated depthwise convolutions: 3-6 configurations, 60-90x below their ideal
# time, held at 4x by 0.01).  So the weight is chosen per fold among these, by an inner cross-validation on that
# fold's training models only (INNER_FOLDS folds by model): the held-out model never influences it.
PRIOR_WEIGHTS = (0.001, 0.003, 0.01)
INNER_FOLDS = 3
# The search box of the efficiency factors.  The lower end must lie below the slowest type the data hold: eager
# PyTorch's dilated depthwise convolutions reach 0.5 % of the CUDA-core rate (H200, 2026-12-01 run), under the 2 %
# the box once stopped at; 0.1 % leaves a factor of 5 below that.  Upper ends: no kernel computes faster than the
# data sheet's peak (the shape factor can only lower it), so compute <= 1; memory may pass 1 (tensors that stay in
# the 50 MB L2 cache are read faster than HBM delivers), up to 1.5.  The box only bounds the search; the prior
# (above) is what keeps weakly determined factors near their starting values.
FACTOR_BOUNDS = {"compute": (0.001, 1.0), "memory": (0.001, 1.5)}
TARGET = "server-hopper-h200"
ONNX_DIR = ROOT / "build" / "estimate_onnx"
MEASURED = "nvidia-h200_2026-12-01_measured.json"  # estimate_h200.py's committed device run


def module_key(node_name: str, modules: Dict[str, Any]) -> Optional[str]:
    """The qualified module name an exported node belongs to (``None`` if no measured module matches)."""
    parts = [p for p in node_name.split("/")[:-1] if p]
    segs: List[str] = []
    for part in parts:
        if segs and part.startswith(segs[-1] + "."):
            segs[-1] = part
        else:
            segs.append(part)
    while segs:
        key = ".".join(segs)
        if key in modules:
            return key
        stripped = re.sub(r"_\d+$", "", segs[-1])      # a module called twice: relu, relu_1, relu_2
        if stripped != segs[-1] and ".".join(segs[:-1] + [stripped]) in modules:
            return ".".join(segs[:-1] + [stripped])
        segs.pop()
    return "<root>" if "<root>" in modules else None


def load_configs(measured: Dict[str, Any]) -> List[Dict[str, Any]]:
    """One config per measured (model, batch): features, measured totals and per-module times."""
    from benchmarks.common.estimate_models import all_specs, export_onnx

    specs = all_specs()
    target = get_target(TARGET)
    rates = target_rates(target, "fp16")
    eff = efficiency_set("pytorch_eager", fitted=False)
    ONNX_DIR.mkdir(parents=True, exist_ok=True)
    configs = []
    for entry in measured["models"]:
        if not entry["batches"] or entry["name"] not in specs:
            continue
        path = ONNX_DIR / (entry["name"] + ".onnx")
        if not path.is_file():
            print("exporting", entry["name"], flush=True)
            export_onnx(specs[entry["name"]], str(path))
        for b in entry["batches"]:
            placed = place(str(path), b["batch"], "fp16", target=target, fusion="none")
            feat = features(placed, rates, eff)
            keys = [module_key(k.name, b["modules"]) for k in placed.kernels]
            configs.append({"model": entry["name"], "group": entry["group"], "batch": b["batch"], "features": feat,
                            "keys": keys, "graph_us": b["graph_ms"] * 1e3, "kernel_us": b["eager_kernel_ms"] * 1e3,
                            "modules": {k: v.get("kernel_us", 0.0) for k, v in b["modules"].items()
                                        if v.get("kernel_us", 0.0) > 0}})
            print("placed %-34s b=%-3d %4d kernels, %4d modules measured" % (
                entry["name"], b["batch"], len(placed.kernels), len(configs[-1]["modules"])), flush=True)
    return configs


def per_module(config: Dict[str, Any], times: np.ndarray) -> List[Tuple[str, float, float, str]]:
    """(module, predicted us, measured us, category of its slowest kernel) for modules both sides have."""
    pred: Dict[str, float] = {}
    cat: Dict[str, Tuple[float, str]] = {}
    for key, t, c in zip(config["keys"], times, config["features"].cat):
        if key is None:
            continue
        pred[key] = pred.get(key, 0.0) + float(t)
        if t > cat.get(key, (-1.0, ""))[0]:
            cat[key] = (float(t), CATEGORIES[c])
    return [(k, pred[k], m, cat[k][1]) for k, m in config["modules"].items() if k in pred and pred[k] > 0]


def module_index(config: Dict[str, Any]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(kernels that belong to a measured module, that module's index, measured us per module): ``per_module``'s
    pairing as arrays, so the fit's objective sums kernel times per module with one ``bincount``."""
    if "_index" not in config:
        names = list(config["modules"])
        where = {k: i for i, k in enumerate(names)}
        idx = np.array([where.get(k, -1) if k is not None else -1 for k in config["keys"]], dtype=int)
        config["_index"] = (idx >= 0, idx[idx >= 0], np.array([config["modules"][k] for k in names], dtype=float))
    return config["_index"]


def layer_error(config: Dict[str, Any], times: np.ndarray) -> float:
    """Measured-time-weighted mean squared log error over the modules ``per_module`` pairs (0 if none)."""
    mask, idx, measured = module_index(config)
    pred = np.bincount(idx, weights=times[mask], minlength=len(measured))
    keep = pred > 0
    if not keep.any():
        return 0.0
    weights = measured[keep]
    errs = np.log(np.maximum(pred[keep], 1e-9) / np.maximum(weights, 1e-9)) ** 2
    return float((weights * errs).sum() / weights.sum())


def config_error(config: Dict[str, Any], params: Dict[str, float]) -> float:
    """Squared log error of the total plus half the time-weighted squared log error of its modules."""
    times = predict(config["features"], params)
    return log_error(total_us(config["features"], params, times), config["graph_us"]) ** 2 \
        + 0.5 * layer_error(config, times)


def objective(configs: List[Dict[str, Any]], start: Dict[str, float], names: List[str], prior_weight: float):
    def score(params: Dict[str, float]) -> float:
        total = sum(config_error(c, params) for c in configs)
        prior = sum(math.log((params[n] + 1e-3) / (start[n] + 1e-3)) ** 2 for n in names)
        return total / max(1, len(configs)) + prior_weight * prior
    return score


def fitted_params(configs: List[Dict[str, Any]], start: Dict[str, float], prior_weight: float) -> Dict[str, float]:
    used = sorted({CATEGORIES[i] for c in configs for i in np.unique(c["features"].cat)})
    names = ["gpu.%s.%s" % (cat, kind) for cat in used for kind in ("compute", "memory")] + ["gpu_kernel_us"]
    bounds = {n: FACTOR_BOUNDS[n.rsplit(".", 1)[-1]] for n in names if n.startswith("gpu.")}
    bounds["gpu_kernel_us"] = (0.0, 20.0)
    return fit(objective(configs, start, names, prior_weight), start, names, bounds)


def split(models: List[str], folds: int, fold: int) -> Tuple[set, set]:
    """(test models, train models) of one fold: every ``folds``-th model of the sorted list is held out."""
    test = {m for i, m in enumerate(models) if i % folds == fold}
    return test, set(models) - test


def cv_error(configs: List[Dict[str, Any]], start: Dict[str, float], prior_weight: float, folds: int) -> float:
    """The fit's data term (no prior) on held-out models, ``folds`` folds by model: what a prior weight is worth."""
    models = sorted({c["model"] for c in configs})
    folds = min(folds, len(models))
    errors = []
    for fold in range(folds):
        test, train = split(models, folds, fold)
        params = fitted_params([c for c in configs if c["model"] in train], start, prior_weight)
        errors += [config_error(c, params) for c in configs if c["model"] in test]
    return float(np.mean(errors))


def choose_prior_weight(configs: List[Dict[str, Any]], start: Dict[str, float]) -> Tuple[float, Dict[str, float]]:
    """The prior weight of ``PRIOR_WEIGHTS`` with the smallest inner cross-validated error on ``configs``."""
    scores = {w: cv_error(configs, start, w, INNER_FOLDS) for w in PRIOR_WEIGHTS}
    best = min(scores, key=lambda w: (scores[w], -w))
    return best, {str(w): round(v, 5) for w, v in scores.items()}


def evaluate(configs: List[Dict[str, Any]], params: Dict[str, float]) -> Dict[Tuple[str, int], Dict[str, Any]]:
    out = {}
    for c in configs:
        times = predict(c["features"], params)
        out[(c["model"], c["batch"])] = {"total_us": total_us(c["features"], params, times),
                                         "layers": per_module(c, times)}
    return out


def held_out(configs: List[Dict[str, Any]], start: Dict[str, float], models: List[str], folds: int,
             prior_weight: Optional[float]) -> Tuple[Dict[Tuple[str, int], Dict[str, Any]], List[Dict[str, Any]]]:
    """Each model's estimate from factors fitted without it (``folds`` folds by model), and what each fold used.

    ``prior_weight=None``: each fold chooses its own by inner cross-validation on its training models."""
    held: Dict[Tuple[str, int], Dict[str, Any]] = {}
    record = []
    for fold in range(folds):
        test, train_models = split(models, folds, fold)
        train = [c for c in configs if c["model"] in train_models]
        weight, inner = prior_weight, {}
        if weight is None:
            weight, inner = choose_prior_weight(train, start) if len(train_models) > 1 else (PRIOR_WEIGHTS[-1], {})
        params = fitted_params(train, start, weight) if train else start
        tested = [c for c in configs if c["model"] in test]
        held.update(evaluate(tested, params))
        for c in tested:
            held[(c["model"], c["batch"])]["error"] = config_error(c, params)
        record.append({"held_out": sorted(test), "prior_weight": weight, "inner_cv_error": inner,
                       "params": {k: round(v, 5) for k, v in params.items() if k.startswith("gpu")}})
        print("fold %d/%d (prior weight %s): held out %s" % (fold + 1, folds, weight if prior_weight is None
                                                             else "fixed %g" % weight, ", ".join(sorted(test))),
              flush=True)
    return held, record


def run(measured: Dict[str, Any]) -> Dict[str, Any]:
    configs = load_configs(measured)
    if not configs:
        raise SystemExit("no measured model to compare")
    start = params_of(efficiency_set("pytorch_eager", fitted=False))
    models = sorted({c["model"] for c in configs})
    prior = evaluate(configs, start)
    folds = min(FOLDS, len(models))
    held, record = held_out(configs, start, models, folds, None)
    # every candidate weight held out with the same folds: how much the choice matters, and (the smallest mean
    # held-out error over all models) the weight of the final fit on every model
    sensitivity = {}
    for weight in PRIOR_WEIGHTS:
        table = held_out(configs, start, models, folds, weight)[0]
        sensitivity[weight] = {"cv_error": float(np.mean([t["error"] for t in table.values()])),
                               "totals": summary([(table[(c["model"], c["batch"])]["total_us"], c["graph_us"])
                                                  for c in configs]),
                               "layers": summary([(p, m) for t in table.values() for _, p, m, _ in t["layers"]])}
    final_weight = min(sensitivity, key=lambda w: (sensitivity[w]["cv_error"], -w))
    final = fitted_params(configs, start, final_weight)
    fitted = evaluate(configs, final)
    result = report(measured, configs, prior, held, fitted, final, folds)
    result["prior_weight"] = {"candidates": list(PRIOR_WEIGHTS), "inner_folds": INNER_FOLDS, "final": final_weight,
                              "factor_bounds": FACTOR_BOUNDS, "how": "nested: each outer fold chooses its weight "
                              "by an inner cross-validation on its training models; the final fit on every model takes "
                              "the weight with the smallest mean held-out error of the outer folds"}
    result["folds_detail"] = record
    result["held_out_fixed_prior_weight"] = {str(w): v for w, v in sensitivity.items()}
    return result


def report(measured: Dict[str, Any], configs: List[Dict[str, Any]], prior: Dict, held: Dict, fitted: Dict,
           final: Dict[str, float], folds: int) -> Dict[str, Any]:
    rows = []
    for c in configs:
        key = (c["model"], c["batch"])
        row = {"model": c["model"], "group": c["group"], "batch": c["batch"], "measured_graph_ms": c["graph_us"] / 1e3,
               "measured_kernel_sum_ms": c["kernel_us"] / 1e3}
        for label, table in (("a_priori", prior), ("held_out", held), ("fitted", fitted)):
            pred = table[key]["total_us"]
            row[label + "_ms"] = pred / 1e3
            row[label + "_error_pct"] = 100.0 * (pred - c["graph_us"]) / c["graph_us"]
        row["layers_held_out"] = [{"module": k, "predicted_us": round(p, 3), "measured_us": round(m, 3), "type": t}
                                  for k, p, m, t in held[key]["layers"]]
        rows.append(row)
    totals = {label: summary([(table[(c["model"], c["batch"])]["total_us"], c["graph_us"]) for c in configs])
              for label, table in (("a_priori", prior), ("held_out", held), ("fitted", fitted))}
    layer_stats = {}
    for label, table in (("a_priori", prior), ("held_out", held), ("fitted", fitted)):
        pairs = [(p, m) for t in table.values() for _, p, m, _ in t["layers"]]
        by_type = {}
        for cat in CATEGORIES:
            sub = [(p, m) for t in table.values() for _, p, m, ty in t["layers"] if ty == cat]
            if sub:
                by_type[cat] = summary(sub)
        layer_stats[label] = {"all": summary(pairs), "by_type": by_type}
    held_t = totals["held_out"]
    goal = {"median_abs_pct_le_25": held_t.get("median_abs_pct", 1e9) <= 25.0,
            "none_above_2x": held_t.get("worst_ratio", 1e9) <= 2.0}
    return {"schema": 1, "measured_environment": measured.get("environment"), "dry_run": measured.get("dry_run"),
            "target_profile": TARGET, "efficiency_start": "pytorch_eager", "folds": folds,
            "models": len({c["model"] for c in configs}), "configs": len(configs),
            "skipped_in_measurement": measured.get("skipped", []),
            "failed_in_measurement": [{"name": m["name"], "error": m["error"]} for m in measured["models"]
                                      if m["error"]],
            "totals": totals, "layers": layer_stats, "goal_held_out": goal,
            "fitted_params": {k: round(v, 4) for k, v in final.items()}, "rows": rows}


def print_table(result: Dict[str, Any]) -> None:
    print("\n%-34s %5s %10s %10s %8s %10s %8s" % ("model", "batch", "measured", "a priori", "err %", "held out",
                                                 "err %"))
    for r in result["rows"]:
        print("%-34s %5d %10.3f %10.3f %8.1f %10.3f %8.1f" % (
            r["model"], r["batch"], r["measured_graph_ms"], r["a_priori_ms"], r["a_priori_error_pct"],
            r["held_out_ms"], r["held_out_error_pct"]))
    for label in ("a_priori", "held_out", "fitted"):
        t, l = result["totals"][label], result["layers"][label]["all"]
        print("%-9s totals: n=%d median |err| %.1f %%, within 2x %.0f %%, worst %.2fx | layers: n=%d "
              "median |err| %.1f %%, within 2x %.0f %%" % (
                  label, t["n"], t["median_abs_pct"], t["within_2x_pct"], t["worst_ratio"], l["n"],
                  l.get("median_abs_pct", float("nan")), l.get("within_2x_pct", float("nan"))))
    if "prior_weight" in result:
        print("prior weight per fold (inner cross-validation): %s; final fit: %g" % (
            [f["prior_weight"] for f in result["folds_detail"]], result["prior_weight"]["final"]))
        for weight, held in result["held_out_fixed_prior_weight"].items():
            t = held["totals"]
            print("  held out with the weight fixed at %s: median |err| %.1f %%, within 2x %.0f %%, worst %.2fx, "
                  "per layer median %.1f %%" % (weight, t["median_abs_pct"], t["within_2x_pct"], t["worst_ratio"],
                                                held["layers"]["median_abs_pct"]))
    print("goal (held out): %s" % result["goal_held_out"])


def plot(result: Dict[str, Any], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 5.5))
    meas = [r["measured_graph_ms"] for r in result["rows"]]
    for label, marker in (("a_priori", "x"), ("held_out", "o")):
        a.scatter(meas, [r[label + "_ms"] for r in result["rows"]], marker=marker, s=18, label=label.replace("_", " "))
    lo, hi = min(meas) / 2, max(meas) * 2
    a.plot([lo, hi], [lo, hi], "k-", lw=0.8)
    a.plot([lo, hi], [2 * lo, 2 * hi], "k:", lw=0.6)
    a.plot([lo, hi], [lo / 2, hi / 2], "k:", lw=0.6)
    a.set(xscale="log", yscale="log", xlabel="measured (CUDA graph) ms", ylabel="estimated ms",
          title="total latency per model x batch (dotted: 2x)")
    a.legend(fontsize=8)
    pairs = [(l["measured_us"], l["predicted_us"]) for r in result["rows"] for l in r["layers_held_out"]]
    if pairs:
        m, p = zip(*pairs)
        b.scatter(m, p, s=3, alpha=0.4)
        lo, hi = max(1e-2, min(m) / 2), max(m) * 2
        b.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        b.set(xscale="log", yscale="log", xlabel="measured kernel us (profiler)", ylabel="estimated us (held out)",
              title="per layer (module), held out")
    env = result.get("measured_environment") or {}
    fig.suptitle("jetforge estimate vs %s%s" % (env.get("gpu", "CPU"), " (DRY RUN: CPU timings)"
                                                 if result.get("dry_run") else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("measured", nargs="?", default=str(committed("estimator", MEASURED)))
    parser.add_argument("--out", default=None, help="JSON (default results/<device>_<date>_h200-fit.json)")
    parser.add_argument("--plot", default=None, help="PNG (default: --out's stem + .png)")
    args = parser.parse_args(argv)
    args.out = args.out or str(result_path(__file__, "h200-fit"))
    args.plot = args.plot or str(Path(args.out).with_suffix(".png"))
    measured = json.loads(Path(args.measured).read_text())
    result = run(measured)
    result["measured_file"] = args.measured
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    plot(result, args.plot)
    print_table(result)
    print("wrote %s and %s" % (args.out, args.plot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
