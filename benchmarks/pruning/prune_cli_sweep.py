"""``jetforge prune`` through the CLI on every torchvision architecture the tests list, plus the transformers.

Each architecture is pruned once as a user would (a separate ``jetforge prune ... --json`` process,
random weights, ONNX export included), and the exit code, wall time, MACs/parameter cuts and the
protected operations are recorded.  Exit 0 is success, 1 a clear refusal (one line, with a fix);
2 would be a bug.  The MACs cut is re-counted independently with ``torch.utils.flop_counter``
on the replayed model (fused attention paths off, SDPA math backend: see tests/compress/test_prune_flops.py).

    python benchmarks/pruning/prune_cli_sweep.py [--goal "--flops-reduction 2"] [--only swin3d_t,vit_b_16]
        [--json benchmarks/pruning/results/<device>_<date>_cli-sweep.json]   (the default)

About 25 minutes on 2 shared cores (S3D and mvit_v2_s at 16x224x224 dominate).
"""

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import result_path, use_checkout  # noqa: E402

use_checkout()
HERE = os.path.dirname(os.path.abspath(__file__))
IMAGE = "1,3,224,224"
CLIP_112 = "1,3,16,112,112"
CLIP_224 = "1,3,16,224,224"

# the classifiers and video models of tests/compress/test_prune_architectures.py, then the transformers
ARCHITECTURES = [
    ("resnet18", IMAGE), ("resnet50", IMAGE), ("mobilenet_v2", IMAGE), ("mobilenet_v3_small", IMAGE),
    ("mobilenet_v3_large", IMAGE), ("efficientnet_b0", IMAGE), ("regnet_y_400mf", IMAGE), ("regnet_x_400mf", IMAGE),
    ("shufflenet_v2_x0_5", IMAGE), ("densenet121", IMAGE), ("r3d_18", CLIP_112), ("mc3_18", CLIP_112),
    ("r2plus1d_18", CLIP_112), ("s3d", CLIP_224),
    ("swin_t", IMAGE), ("vit_b_16", IMAGE), ("mvit_v2_s", CLIP_224), ("swin3d_t", CLIP_112),
]


def true_cut(arch, shape, folder):
    """MACs before / after by torch.utils.flop_counter, on a fresh model with the saved plan and weights replayed."""
    import torch
    import torchvision
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from jetforge.compress.export import unfused_attention
    from jetforge.compress.prune import PrunePlan, load_pruned

    def macs(model, x):
        with torch.no_grad(), unfused_attention(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as c:
            model(x)
        return c.get_total_flops() // 2

    x = torch.randn(shape)
    if arch == "mobilenet_v2":  # the CLI loads the project's pretrained MobileNetV2
        from jetforge.compress.models import build
        fresh = lambda: build("mobilenet_v2").eval()  # noqa: E731
    else:
        fresh = lambda: torchvision.models.get_model(arch, weights=None).eval()  # noqa: E731
    before = macs(fresh(), x)
    pruned = load_pruned(fresh(), PrunePlan.load(os.path.join(folder, "model.prune.json")),
                         torch.load(os.path.join(folder, "pruned.pt"), weights_only=True))
    return before / macs(pruned.eval(), x)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--goal", default="--flops-reduction 2", help="the goal flags passed to every run")
    p.add_argument("--only", default="", help="comma-separated architectures (default: all)")
    p.add_argument("--timeout-s", type=int, default=1800)
    p.add_argument("--json", default=str(result_path(__file__, "cli-sweep")),
                   help="result JSON (default results/<device>_<date>_cli-sweep.json)")
    args = p.parse_args(argv)
    only = set(filter(None, args.only.split(",")))
    rows = []
    t_all = time.perf_counter()
    for arch, shape in ARCHITECTURES:
        if only and arch not in only:
            continue
        with tempfile.TemporaryDirectory(prefix="jetforge-sweep-") as out:
            cmd = ([sys.executable, "-m", "jetforge", "-q", "prune", "--model", arch, "--input-shape", shape]
                   + shlex.split(args.goal) + ["--no-plot", "--json", "--out", out])
            t0 = time.perf_counter()
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s)
                code, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
            except subprocess.TimeoutExpired:
                code, stdout, stderr = None, "", "timed out after %d s" % args.timeout_s
            row = {"model": arch, "input": shape, "exit_code": code, "seconds": round(time.perf_counter() - t0, 1)}
            errors = [ln for ln in stderr.splitlines() if ln.startswith("jetforge: error:")]
            if errors:
                row["error"] = errors[-1]
            if code == 0:
                data = json.loads(stdout)
                t = data["totals"]
                row.update({"macs_reduction": round(t["flops_reduction"], 3),
                            "params_reduction": round(t["params_reduction"], 3),
                            "macs_outside_pruned_layers": t["macs_outside_layers_after"],
                            "onnx": "onnx" in data["files"],
                            "protected_ops": sorted({q["op"] for q in data["protected"]})})
                shape_t = tuple(int(v) for v in shape.split(","))
                row["macs_reduction_flop_counter"] = round(true_cut(arch, shape_t, out), 3)
            elif code != 1:
                row["stderr_tail"] = stderr[-2000:]
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n%-20s %5s %8s %10s %12s %8s  %s" % ("model", "exit", "seconds", "MACs cut", "flop_counter", "params",
                                                 "protected ops / error"))
    for r in rows:
        print("%-20s %5s %8s %10s %12s %8s  %s" % (
            r["model"], r["exit_code"], r["seconds"], r.get("macs_reduction", "-"),
            r.get("macs_reduction_flop_counter", "-"), r.get("params_reduction", "-"),
            r.get("error") or ", ".join(r.get("protected_ops", []))))
    out = {"command": "jetforge prune --model ARCH --input-shape SHAPE %s --no-plot --json --out DIR" % args.goal,
           "host": "%s, %d cores (shared with other jobs)" % (platform.machine(), os.cpu_count() or 0),
           "python": platform.python_version(), "runs": rows, "wall_s": round(time.perf_counter() - t_all, 1)}
    with open(args.json, "w") as f:
        json.dump(out, f, indent=2)
    print("wrote %s" % args.json)
    return 0 if all(r["exit_code"] in (0, 1) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
