"""The pruning MACs claims, re-counted with the contraction counter (CPU only: MACs need no GPU).

Until issue 11 jetforge counted MACs with forward hooks on ``Conv*``/``Linear`` modules only,
so attention computed through functional calls and matmuls was missed and a transformer's
``--flops-reduction 2`` ended with a 2x cut of the *counted* part only.  The counter now counts
every contraction the forward pass dispatches (see ``jetforge.compress.prune.flops``).  This
script says which published numbers change, and by how much:

1. **CNN benchmarks** (``prune_gpu.py``, ``prune_speed.py``: ResNet-50 and MobileNetV2 at 224;
   ``prune_accuracy.py``: its small CNN at 28x28): every variant that can be rebuilt on the CPU
   (the originals, jetforge's uniform magnitude pruning, Torch-Pruning at the ratios recorded in
   ``results/nvidia-h200_2026-11-30_speed.json`` when ``torch_pruning`` is importable) is counted the old way (the
   Conv/Linear modules only) and the new way, next to ``torch.utils.flop_counter`` and the MACs
   recorded in the JSON.  The latency-aware variants were shaped by GPU timings and cannot be
   rebuilt here; their networks hold only Conv/Linear contractions too (see the equality below).
2. **Transformers** (``swin_t``, ``vit_b_16`` at 224, ``mvit_v2_s`` at 16x224x224, random
   weights): the old ``--flops-reduction 2`` (bisection on the old count, as the old code did)
   and what it really cut; then the new ``--flops-reduction 2`` and what it cuts.  The old count
   is emulated as the Conv/Linear modules' share of the new one; the old hooks also divided a
   convolution's MACs by its input's axis 0, which MViT's pooling convolutions fold the attention
   heads into, so they under-counted those by the head count (mvit_v2_s: 49.15 G there, 49.50 G in
   the emulation); swin_t and vit_b_16 are emulated exactly (2.963 G and 11.271 G, as the old code
   reported).

    python benchmarks/pruning/prune_macs_recount.py   # -> benchmarks/pruning/results/<device>_<date>_macs-recount.json

Run Torch-Pruning's rows with ``torch-pruning==1.6.0`` importable (the version of results/nvidia-h200_2026-11-30_speed.json).
About 5 minutes on 2 shared cores, most of it mvit_v2_s.
"""

import argparse
import copy
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import committed, result_path, use_checkout  # noqa: E402

use_checkout()

import torch  # noqa: E402
import torchvision  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from jetforge.compress.export import unfused_attention  # noqa: E402
from jetforge.compress.prune import DependencyGraph, OpCount, class_importance, count_ops, prune, select  # noqa: E402
from jetforge.compress.prune.flops import estimate  # noqa: E402
from jetforge.errors import CompressError  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PRUNE_GPU_RESULT = "nvidia-h200_2026-11-30_speed.json"  # prune_gpu.py's committed H200 run


def log(*a):
    print(*a, flush=True)


def module_only_macs(model, count):
    """What the old counter reported: the MACs of Conv/Linear modules called as modules."""
    layers = (nn.modules.conv._ConvNd, nn.Linear)
    return sum(v for k, v in count.per_layer.items() if isinstance(model.get_submodule(k), layers))


def flop_counter_macs(model, x):
    """torch.utils.flop_counter's count / 2, with the fused paths it has no formula for switched off."""
    with torch.no_grad(), unfused_attention(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as c:
        model.eval()(x)
    return c.get_total_flops() // 2 // x.size(0)


def counts(model, x):
    c = count_ops(model, x)
    return {"macs_old_method": module_only_macs(model, c), "macs_new": c.macs,
            "macs_flop_counter": flop_counter_macs(model, x), "params": c.params}


# --- 1. the CNN benchmarks ----------------------------------------------------------------------------------------
def cnn_rows(with_tp):
    rows = []
    recorded = json.loads(committed("pruning", PRUNE_GPU_RESULT).read_text())["models"]
    example = torch.randn(1, 3, 224, 224)
    for name in ("resnet50", "mobilenet_v2"):
        def build():
            torch.manual_seed(0)
            return getattr(torchvision.models, name)().eval()
        variants = {"original": build()}
        variants["jetforge_magnitude"] = prune(build(), example, flops_reduction=2.0, importance="l2", round_to=8,
                                               protect_stem=False).model
        if with_tp:
            import torch_pruning as tp

            for label, rt in (("tp_magnitude_round8", 8), ("tp_magnitude_noround", None)):
                ratio = recorded[name]["variants"][label]["ratio"]
                m = build()
                final = m.fc if hasattr(m, "fc") else m.classifier[-1]
                cls = getattr(tp.pruner, "BasePruner", None) or tp.pruner.MetaPruner
                cls(m, example, importance=tp.importance.MagnitudeImportance(p=2), pruning_ratio=ratio,
                    ignored_layers=[final], round_to=rt).step()
                variants[label] = m.eval()
        base = None
        for label, m in variants.items():
            row = {"benchmark": "prune_gpu.py / prune_speed.py", "model": name, "variant": label, **counts(m, example)}
            base = base or row
            row["reduction_old_method"] = round(base["macs_old_method"] / row["macs_old_method"], 3)
            row["reduction_new"] = round(base["macs_new"] / row["macs_new"], 3)
            row["macs_in_prune_gpu_json"] = recorded[name]["variants"].get(label, {}).get("macs")
            rows.append(row)
    sys.path.insert(0, HERE)
    from prune_accuracy import small_cnn

    torch.manual_seed(0)
    cnn = small_cnn().eval()
    x = torch.randn(1, 1, 28, 28)
    rows.append({"benchmark": "prune_accuracy.py", "model": "small_cnn", "variant": "original (untrained)",
                 **counts(cnn, x)})
    pruned = prune(copy.deepcopy(cnn), x, flops_reduction=2.0, importance="l2", round_to=8, protect_stem=False).model
    rows.append({"benchmark": "prune_accuracy.py", "model": "small_cnn", "variant": "jetforge_magnitude (untrained)",
                 **counts(pruned, x)})
    return rows


# --- 2. transformers -----------------------------------------------------------------------------------------------
def old_flops_goal(model, x, goal=2.0, steps=14, max_ratio=0.95):
    """The old ``prune(flops_reduction=goal)``: bisection on the ratio with the Conv/Linear-only count."""
    graph = DependencyGraph.build(model, x)
    scores = class_importance(graph, model, "l1")
    full = count_ops(model, x)
    layers = {k: v for k, v in full.per_layer.items()
              if isinstance(model.get_submodule(k), (nn.modules.conv._ConvNd, nn.Linear))}
    old = OpCount(sum(layers.values()), full.params, layers)

    def gain(r):
        return old.macs / max(1, estimate(graph, model, old, select(graph, scores, r, round_to=8)).macs)

    if gain(max_ratio) < goal:
        return None
    lo, hi = 0.0, max_ratio
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if gain(mid) >= goal else (mid, hi)
    return hi, gain(hi)


def transformer_rows(names):
    from jetforge.compress.prune import apply_plan, make_plan

    rows = []
    shapes = {"swin_t": (1, 3, 224, 224), "vit_b_16": (1, 3, 224, 224), "mvit_v2_s": (1, 3, 16, 224, 224)}
    for name in names:
        shape = shapes[name]
        t0 = time.perf_counter()
        torch.manual_seed(0)
        model = torchvision.models.get_model(name, weights=None).eval()
        x = torch.randn(shape)
        before = counts(model, x)
        row = {"model": name, "input": list(shape), "before": before}
        old = old_flops_goal(copy.deepcopy(model), x)
        if old is not None:
            ratio, reported = old
            m = copy.deepcopy(model)
            graph = DependencyGraph.build(m, x)
            apply_plan(m, make_plan(graph, m, select(graph, class_importance(graph, m, "l1"), ratio, round_to=8)))
            after = counts(m, x)
            row["old_flops_reduction_2"] = {
                "ratio": round(ratio, 4), "reported_reduction": round(reported, 3),
                "true_reduction": round(before["macs_new"] / after["macs_new"], 3),
                "true_reduction_flop_counter": round(before["macs_flop_counter"] / after["macs_flop_counter"], 3)}
        try:
            r = prune(copy.deepcopy(model), x, flops_reduction=2.0)
        except CompressError as err:  # the attention it keeps whole may be more than half the MACs
            row["new_flops_reduction_2"] = {"error": err.one_line()}
        else:
            after = counts(r.model, x)
            totals = r.report.to_dict()["totals"]
            row["new_flops_reduction_2"] = {
                "ratio": round(r.ratio, 4), "reported_reduction": round(totals["flops_reduction"], 3),
                "true_reduction_flop_counter": round(before["macs_flop_counter"] / after["macs_flop_counter"], 3),
                "params_reduction": round(before["params"] / after["params"], 3),
                "macs_outside_pruned_layers": totals["macs_outside_layers_after"]}
        row["seconds"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
        log(json.dumps(row))
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", default=str(result_path(__file__, "macs-recount")),
                   help="result JSON (default results/<device>_<date>_macs-recount.json)")
    p.add_argument("--skip-transformers", action="store_true")
    p.add_argument("--transformers", default="swin_t,vit_b_16,mvit_v2_s")
    args = p.parse_args(argv)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    t0 = time.perf_counter()
    try:
        from importlib.metadata import version

        import torch_pruning  # noqa: F401
        tp_version = version("torch-pruning")
    except ImportError:
        log("torch_pruning is not importable: its rows are skipped")
        tp_version = None
    cnn = cnn_rows(tp_version is not None)
    log("\n%-30s %-14s %-30s %14s %14s %14s %14s" % ("benchmark", "model", "variant", "old method", "new",
                                                     "flop_counter", "in JSON"))
    for r in cnn:
        log("%-30s %-14s %-30s %14d %14d %14d %14s" % (r["benchmark"], r["model"], r["variant"], r["macs_old_method"],
                                                       r["macs_new"], r["macs_flop_counter"],
                                                       r.get("macs_in_prune_gpu_json")))
    tx = [] if args.skip_transformers else transformer_rows(args.transformers.split(","))
    if tx:
        log("\n%-10s %26s %26s %26s" % ("model", "old --flops-reduction 2", "its true cut", "new --flops-reduction 2"))
        for r in tx:
            o, n = r.get("old_flops_reduction_2", {}), r["new_flops_reduction_2"]
            log("%-10s %25sx %25sx %26s" % (r["model"], o.get("reported_reduction"), o.get("true_reduction"),
                                            n.get("true_reduction_flop_counter") or n.get("error", "")[:60]))
    out = {"host": "%s, %s, %d cores (shared with other jobs)" % (platform.machine(), platform.processor() or "?",
                                                                  os.cpu_count() or 0),
           "torch": torch.__version__, "torchvision": torchvision.__version__,
           "torch_pruning": tp_version,
           "cnn_benchmarks": cnn, "transformers": tx, "wall_s": round(time.perf_counter() - t0, 1)}
    with open(args.json, "w") as f:
        json.dump(out, f, indent=2)
    log("wrote %s (%.0f s)" % (args.json, out["wall_s"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
