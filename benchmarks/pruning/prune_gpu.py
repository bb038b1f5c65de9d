"""GPU speed of pruned ResNet-50 and MobileNetV2 at 2x fewer MACs: jetforge vs Torch-Pruning, side by side.

One run on one CUDA GPU, everything measured the same way: FP16, channels-last, the
forward pass in jetforge's ``TorchSession``, captured once in a CUDA graph and replayed
(cuDNN autotuning on; ``benchmarks/common/gpu_timing.py``), median of several timed
bursts after warm-up, at batch 1, 32 and 256.  Variants per model:

- ``original``
- ``tp_magnitude_round8`` / ``tp_magnitude_noround``: Torch-Pruning (``torch-pruning``),
  magnitude (L2) importance, uniform ratio, ``round_to=8`` / no rounding, the ratio found
  by bisection so that the MACs fall 2x, counted by the same counter as every variant
  (jetforge's; Torch-Pruning's own ``count_ops_and_params`` is recorded next to it)
- ``jetforge_magnitude``: ``prune(flops_reduction=2, importance="l2", round_to=8)`` (uniform)
- ``jetforge_latency``: ``prune(flops_reduction=2, latency_aware=True)``: the per-group
  latency table is measured *on this GPU* at batch 32 (CUDA-graph replay), cuts go where
  the most time is saved per importance lost, on multiples of 8 channels
- ``jetforge_latency_1.5x``: ``prune(latency_reduction=1.5, latency_aware=True)`` at batch
  32 on this GPU, reusing the table, iterating prune -> measure until met
- ``tp_round8_at_jetforge_speed``: Torch-Pruning's ratio bisected on this GPU until its
  measured batch-32 speed-up matches ``jetforge_latency_1.5x`` (how many MACs it needs)

Weights are random (torchvision architectures, no downloads): speed does not depend on
them.  Accuracy is measured on real data by ``benchmarks/pruning/prune_accuracy.py``.

    python benchmarks/pruning/prune_gpu.py --json $OUT/prune_gpu.json [--budget-s 420]   # the GPU (~7 min)
    python benchmarks/pruning/prune_gpu.py --dry-run     # CPU: small inputs, every step, JSON in /tmp (~2 min)

Default ``--json``: ``benchmarks/pruning/results/<device>_<date>_speed.json``.
"""

import argparse
import json
import os
import platform
import sys
import time

import tempfile
from pathlib import Path

import torch
import torchvision

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import result_path, use_checkout  # noqa: E402

use_checkout()

from benchmarks.common.gpu_timing import median_ms  # noqa: E402
from jetforge.compress.prune import METHOD, count_ops, prune  # noqa: E402

SIZE = 224
LEVELS = (0.75, 0.5, 0.25, 0.125)  # kept fractions timed per group


def log(*a):
    print(*a, flush=True)


def build(name):
    torch.manual_seed(0)
    return getattr(torchvision.models, name)().eval()


def final_layer(model):
    return model.fc if hasattr(model, "fc") else model.classifier[-1]


# --- timing -------------------------------------------------------------------------------------------------------
def gpu_ms(model, batch, target_ms=25.0, reps=5, copy_model=True):
    """Median ms per forward of ``model`` (FP16, channels-last) in jetforge's TorchSession, its CUDA graph replayed
    in ``reps`` bursts of about ``target_ms`` (5 to 500 calls); FP32 on the CPU for --dry-run."""
    return median_ms(model, (batch, 3, SIZE, SIZE), reps=reps, target_ms=target_ms, min_calls=5, max_calls=500,
                     copy_model=copy_model, dtype="fp16", channels_last=True)


def search_latency_fn(batch):
    def fn(model):
        return gpu_ms(model, batch, target_ms=12.0, reps=3)[1]  # min of bursts: the least noisy estimator
    return fn


# --- Torch-Pruning ------------------------------------------------------------------------------------------------
def tp_prune(name, ratio, round_to):
    import torch_pruning as tp

    model = build(name)
    example = torch.randn(1, 3, SIZE, SIZE)
    cls = getattr(tp.pruner, "BasePruner", None) or tp.pruner.MetaPruner
    pruner = cls(model, example, importance=tp.importance.MagnitudeImportance(p=2), pruning_ratio=ratio,
                 ignored_layers=[final_layer(model)], round_to=round_to)
    pruner.step()
    macs, params = tp.utils.count_ops_and_params(model, example)
    return model.eval(), macs, params


def tp_ratio_for(name, round_to, goal, base_macs, steps=9):
    """Smallest ratio whose MACs, counted by jetforge's counter like every other variant, fall ``goal`` x."""
    lo, hi = 0.0, 0.8
    for _ in range(steps):
        mid = (lo + hi) / 2
        m, _, _ = tp_prune(name, mid, round_to)
        if base_macs / count_ops(m, torch.randn(1, 3, SIZE, SIZE)).macs >= goal:
            hi = mid
        else:
            lo = mid
    return hi


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", default=None, help="result JSON (default: results/<device>_<date>_speed.json)")
    p.add_argument("--dry-run", action="store_true",
                   help="check every step on the CPU: 64 px inputs, batches 1 and 2, resnet18 and mobilenet_v2, "
                        "JSON with dry_run: true in a temporary folder unless --json is given")
    p.add_argument("--models", default="resnet50,mobilenet_v2")
    p.add_argument("--batches", default="1,32,256")
    p.add_argument("--search-batch", type=int, default=32)
    p.add_argument("--flops-reduction", type=float, default=2.0)
    p.add_argument("--latency-goal", type=float, default=1.5)
    p.add_argument("--budget-s", type=float, default=420.0, help="stop optional phases past this wall time")
    p.add_argument("--cpu-threads", type=int, default=0, help="also time every variant in CPU ONNX Runtime")
    p.add_argument("--tp-ratios", default="", help="json {model: {round_to: ratio}} to skip the MACs bisection")
    args = p.parse_args(argv)
    global SIZE, LEVELS
    if args.dry_run:
        SIZE, LEVELS = 64, (0.5,)
        args.models, args.batches, args.search_batch, args.budget_s = "resnet18,mobilenet_v2", "1,2", 2, 60.0
        args.json = args.json or str(Path(tempfile.mkdtemp(prefix="jetforge-prune-gpu-dry-")) / "prune_gpu.json")
    elif args.json is None:
        args.json = str(result_path(__file__, "speed", gpu=True))
    log("prune_gpu: models %s, batches %s, %d px, latency table at batch %d -> %s"
        % (args.models, args.batches, SIZE, args.search_batch, args.json))
    t_start = time.perf_counter()
    torch.backends.cudnn.benchmark = True
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    batches = [int(b) for b in args.batches.split(",")]
    tp_ratios = json.loads(args.tp_ratios) if args.tp_ratios else {}
    try:
        import torch_pruning as tp
    except ImportError:
        if not args.dry_run:
            raise
        tp = None  # the dry run records the Torch-Pruning variants as errors

    out = {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu (dry run)",
           "torch": torch.__version__, "torchvision": torchvision.__version__,
           "torch_pruning": getattr(tp, "__version__", "?"), "python": platform.python_version(),
           "setup": "FP16, channels_last, jetforge TorchSession with its CUDA graph replayed (benchmarks/common/"
                    "gpu_timing.py), cudnn.benchmark, input %dx%d, random weights; ms = median of 5 bursts of "
                    "calls after warm-up" % (SIZE, SIZE),
           "macs_method": "jetforge count_ops for every variant: " + METHOD, "dry_run": bool(args.dry_run),
           "models": {}}

    def save():
        out["wall_s"] = round(time.perf_counter() - t_start, 1)
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)

    kept_variants = {}
    for name in args.models.split(","):
        log("=== %s" % name)
        res = out["models"][name] = {"variants": {}}
        example = torch.randn(1, 3, SIZE, SIZE)
        original = build(name)
        base = count_ops(original, example)
        variants = {"original": original}
        info = {"original": {}}
        # Torch-Pruning at 2x MACs, with and without rounding
        for label, rt in (("tp_magnitude_round8", 8), ("tp_magnitude_noround", None)):
            try:
                t0 = time.perf_counter()
                r = tp_ratios.get(name, {}).get(str(rt))
                if r is None:
                    r = tp_ratio_for(name, rt, args.flops_reduction, base.macs)
                search_s = time.perf_counter() - t0
                t0 = time.perf_counter()
                m, macs, _ = tp_prune(name, r, rt)
                variants[label] = m
                info[label] = {"ratio": r, "prune_seconds": round(time.perf_counter() - t0, 2),
                               "ratio_search_seconds": round(search_s, 2), "tp_macs": int(macs)}
            except Exception as err:  # keep going: a failed baseline is reported, not fatal
                info[label] = {"error": "%s: %s" % (type(err).__name__, err)}
        # jetforge, uniform magnitude, aligned
        t0 = time.perf_counter()
        r = prune(build(name), example, flops_reduction=args.flops_reduction, importance="l2", round_to=8,
                  protect_stem=False)
        variants["jetforge_magnitude"] = r.model
        info["jetforge_magnitude"] = {"ratio": round(r.ratio, 4), "prune_seconds": round(time.perf_counter() - t0, 2)}
        # jetforge, latency-aware at 2x MACs (table measured on this GPU at the search batch)
        lat_fn = search_latency_fn(args.search_batch)
        t0 = time.perf_counter()
        r = prune(build(name), example, flops_reduction=args.flops_reduction, importance="l2", round_to=8,
                  latency_aware=True, latency_fn=lat_fn, latency_levels=LEVELS, protect_stem=False)
        table = r.latency_table
        variants["jetforge_latency"] = r.model
        info["jetforge_latency"] = {"prune_seconds": round(time.perf_counter() - t0, 2),
                                    "table_seconds": round(table.seconds, 2), "table_measurements": table.measurements,
                                    "steps": r.report.extra["latency_search"]["steps"]}
        res["latency_table_b%d" % args.search_batch] = table.to_dict()
        log("table: %d measurements in %.1f s" % (table.measurements, table.seconds))
        save()
        # jetforge, latency target (measured on this GPU), reusing the table
        label15 = "jetforge_latency_%gx" % args.latency_goal
        try:
            t0 = time.perf_counter()
            r = prune(build(name), example, latency_reduction=args.latency_goal, importance="l2", round_to=8,
                      latency_aware=True, latency_fn=lat_fn, latency_table=table, latency_levels=LEVELS,
                      protect_stem=False)
            variants[label15] = r.model
            info[label15] = {"prune_seconds_with_table_reused": round(time.perf_counter() - t0, 2),
                             "iterations": r.report.extra["latency_search"]["iterations"],
                             "steps": r.report.extra["latency_search"]["steps"],
                             "goal": r.report.extra["goal"]}  # met, or missed: the fastest model found is kept
        except Exception as err:
            info[label15] = {"error": "%s: %s" % (type(err).__name__, err)}
        # measure everything side by side
        for label, m in variants.items():
            ops = count_ops(m, example)
            row = dict(info.get(label, {}))
            row.update({"macs": ops.macs, "params": ops.params, "macs_reduction": round(base.macs / ops.macs, 3)})
            for b in batches:
                try:
                    med, mn, iters = gpu_ms(m, b)
                    row["ms_b%d" % b] = round(med, 4)
                    row["ms_min_b%d" % b] = round(mn, 4)
                except Exception as err:
                    row["error_b%d" % b] = "%s: %s" % (type(err).__name__, err)
            res["variants"][label] = row
        for label, row in info.items():
            if label not in res["variants"]:
                res["variants"][label] = row  # a variant that failed: its error, reported
        ref = res["variants"]["original"]
        for label, row in res["variants"].items():
            for b in batches:
                if ("ms_b%d" % b) in row and ("ms_b%d" % b) in ref:
                    row["speedup_b%d" % b] = round(ref["ms_b%d" % b] / row["ms_b%d" % b], 3)
            if "macs_reduction" not in row:
                log("%-28s %s" % (label, row.get("error")))
                continue
            log("%-28s MACs %.2fx  %s" % (label, row["macs_reduction"], "  ".join(
                "b%d %.3fms (%.2fx)" % (b, row.get("ms_b%d" % b, float("nan")), row.get("speedup_b%d" % b, float("nan")))
                for b in batches)))
        save()
        kept_variants[name] = variants
        torch.cuda.empty_cache()
    # optional: Torch-Pruning's ratio (round_to=8) bisected on this GPU to the jetforge latency-target speed-up
    for name in args.models.split(","):
        res = out["models"][name]
        jf = res["variants"].get("jetforge_latency_%gx" % args.latency_goal, {})
        key = "speedup_b%d" % args.search_batch
        if key not in jf or tp is None or time.perf_counter() - t_start > args.budget_s:
            continue
        goal = jf[key]
        ref_ms = gpu_ms(build(name), args.search_batch)[0]
        lo, hi, best = 0.0, 0.9, None
        for _ in range(6):
            if time.perf_counter() - t_start > args.budget_s:
                break
            mid = (lo + hi) / 2
            m, macs, _ = tp_prune(name, mid, 8)
            sp = ref_ms / gpu_ms(m, args.search_batch)[0]
            if sp >= goal:
                hi, best = mid, (mid, sp, m)
            else:
                lo = mid
        if best is not None:
            ops = count_ops(best[2], torch.randn(1, 3, SIZE, SIZE))
            res["variants"]["tp_round8_at_jetforge_speed"] = {
                "ratio": best[0], "speedup_b%d" % args.search_batch: round(best[1], 3),
                "macs": ops.macs, "params": ops.params,
                "macs_reduction": round(res["variants"]["original"]["macs"] / ops.macs, 3)}
            log("%s TP ratio %.3f reaches %.2fx at b%d with %.2fx fewer MACs" % (
                name, best[0], best[1], args.search_batch, res["variants"]["original"]["macs"] / ops.macs))
        save()
    # optional: the same models on the CPU in ONNX Runtime (this machine's cores), batch 1, 32, 256
    if args.cpu_threads:
        from jetforge.compress.prune import ort_latency

        out["cpu"] = {"backend": "onnxruntime CPU, %d threads, median of a few runs, same models" % args.cpu_threads,
                      "models": {}}
        for b in batches:
            for name, variants in kept_variants.items():
                for label in ("original", "tp_magnitude_round8", "tp_magnitude_noround", "jetforge_magnitude",
                              "jetforge_latency", "jetforge_latency_%gx" % args.latency_goal):
                    if label not in variants or time.perf_counter() - t_start > args.budget_s:
                        continue
                    runs = 3 if b >= 256 else 5
                    try:
                        ms = ort_latency(variants[label].float(), (b, 3, SIZE, SIZE), threads=args.cpu_threads,
                                         runs=runs, warmup=1)
                    except Exception as err:
                        ms = None
                        log("cpu %s %s b%d: %s" % (name, label, b, err))
                    row = out["cpu"]["models"].setdefault(name, {}).setdefault(label, {})
                    row["ms_b%d" % b] = None if ms is None else round(ms, 3)
                    ref = out["cpu"]["models"][name].get("original", {}).get("ms_b%d" % b)
                    if ms and ref:
                        row["speedup_b%d" % b] = round(ref / ms, 3)
                    log("cpu %-14s %-28s b%-3d %s ms (%sx)" % (name, label, b, row["ms_b%d" % b],
                                                                row.get("speedup_b%d" % b)))
                save()
    save()
    log("wall %.1f s" % (time.perf_counter() - t_start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
