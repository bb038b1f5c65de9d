"""Does a FLOPs cut become a speed-up?  ResNet-50 and MobileNetV2 pruned to half their MACs, timed in ORT.

For each model: the time the pruning itself takes (trace, importance, search, surgery),
the counted MAC and parameter reductions, and the measured latency of the exported ONNX
before and after in CPU ONNX Runtime (1 thread, median of --runs), so the FLOPs ratio
and the real speed-up stand side by side.  MobileNetV2 uses the project's pretrained
ImageNet weights; ResNet-50 is torchvision's architecture with random weights (speed
does not depend on the values).

    python benchmarks/pruning/prune_speed.py [--size 224] [--runs 20] [--round-to 8] [--json out.json]

The side-by-side with Torch-Pruning 1.6.1 (uniform magnitude, round_to=8 and no rounding),
jetforge's latency-aware search, batch 1/32/256 on a CUDA GPU (FP16, channels-last, CUDA
graphs) and on CPU ONNX Runtime is ``benchmarks/pruning/prune_gpu.py``; its results are in
``benchmarks/pruning/results/nvidia-h200_2026-11-30_speed.json``.
"""

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import result_path, use_checkout  # noqa: E402

use_checkout()

import torch  # noqa: E402
import torchvision  # noqa: E402

from jetforge.compress.prune import ort_latency, prune  # noqa: E402


def _models():
    from jetforge.assets import asset_path
    from jetforge.compress.models import PRETRAINED, load_pretrained

    spec = PRETRAINED["mobilenet_v2"]
    yield "mobilenet_v2 (pretrained)", lambda: load_pretrained("mobilenet_v2", asset_path(spec.asset, spec.filename))
    yield "resnet50", lambda: torchvision.models.resnet50().eval()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--round-to", type=int, default=8)
    parser.add_argument("--flops-reduction", type=float, default=2.0)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    shape = (1, 3, args.size, args.size)
    rows = []
    for name, build in _models():
        model = build()
        before_ms = ort_latency(model, shape, threads=args.threads, runs=args.runs)
        t0 = time.perf_counter()
        result = prune(model, torch.randn(shape), flops_reduction=args.flops_reduction, round_to=args.round_to)
        prune_s = time.perf_counter() - t0
        after_ms = ort_latency(model, shape, threads=args.threads, runs=args.runs)
        totals = result.report.to_dict()["totals"]
        rows.append({"model": name, "input": list(shape), "prune_seconds": round(prune_s, 2),
                     "macs_reduction": round(totals["flops_reduction"], 3),
                     "params_reduction": round(totals["params_reduction"], 3),
                     "ort_ms_before": round(before_ms, 2), "ort_ms_after": round(after_ms, 2),
                     "speedup": round(before_ms / after_ms, 3), "ratio": round(result.ratio, 3)})
        r = rows[-1]
        print("%-26s prune %.1fs  MACs %.2fx fewer  params %.2fx fewer  ORT %.1f -> %.1f ms (%.2fx)"
              % (name, r["prune_seconds"], r["macs_reduction"], r["params_reduction"], r["ort_ms_before"],
                 r["ort_ms_after"], r["speedup"]))
    print("MACs: " + result.report.to_dict()["counting_method"])
    print("host: %s, torch %s, %d thread(s)" % (sys.platform, torch.__version__, args.threads))
    if args.json:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        out = {"host": "%s %s, %d cores" % (platform.machine(), sys.platform, os.cpu_count() or 0),
               "load_average_1min_at_end": load, "torch": torch.__version__, "threads": args.threads,
               "counting_method": result.report.to_dict()["counting_method"], "models": rows}
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
