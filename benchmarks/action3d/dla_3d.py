"""DLA for clip models: what `jetforge dla-check --fold-time` changes, measured with dla-check and estimate.

For each clip model (random weights: placement, transitions and the roofline do not depend on weight values;
the equality check holds for any weights):

1. export it to ONNX with a dynamic batch axis (TorchScript exporter, opset 17);
2. `jetforge dla-check MODEL --target orin-nx-16gb --json` (before) and the same with
   `--fold-time FOLDED.onnx` (after: the exact rewrite, as many folded regions as fit the 16 loadables a DLA
   core holds): layers on DLA / GPU, DLA share of FLOPs, DLA subgraphs, GPU<->DLA transitions (count, bytes);
3. `jetforge estimate` on orin-nx-16gb at batch 1 and 8 clips, FP16 and INT8: the model on the GPU alone, the
   model built for DLA core 0 (before), the folded model built for DLA core 0 (after): latency, GPU-busy time,
   DLA time, transition time;
4. ONNX Runtime (CPU, FP32): the folded model's output against the original's on one random clip.  Tolerance:
   the folded 2-D convolutions compute the same products and only the kernels' summation order can differ;
   float32 re-association moves a sum of K products by at most K * 2**-24 of the sum of their magnitudes
   (K <= 512*9 = 4608 here: 2.7e-4 per layer, a loose worst case; typical errors are sqrt(K) * 2**-24), so
   max |diff| <= 1e-3 * max |y| is the pass mark; any real change (a wrong weight slice, pad or layout) moves
   the outputs by O(max |y|).

Models: torchvision's r2plus1d_18 (a (2+1)D ResNet: 1x3x3 spatial + 3x1x1 temporal convolutions) at the
standard 16x112x112 RGB clip, and jetforge's 3-D MobileNetV2 (`jetforge.compress.models.mobilenet3d`; 3x3x3
depthwise, 1x1x1 pointwise) at 8x112x112 (its clip shape) and 16x112x112.

    python benchmarks/action3d/dla_3d.py [--models r2plus1d_18,mobilenet3d]   # -> results/<device>_<date>_dla-fold.*
    python benchmarks/action3d/dla_3d.py --models '' --onnx src/jetforge/assets/shipped/action-mobilenet3d/model.onnx \
        --out benchmarks/action3d/results/<device>_<date>_dla-fold-action-model.json     # the bundled model
    python benchmarks/action3d/dla_3d.py --dry-run      # tiny shapes, checks every step in about a minute

Everything here runs on the CPU: nothing needs the H200 or a Jetson (the DLA numbers are dla-check's
prediction and the estimator's roofline, not a board measurement).  About 10 minutes on 2 shared cores.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import result_path, use_checkout  # noqa: E402

use_checkout()

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
JETFORGE = [sys.executable, "-m", "jetforge.cli.main"]
TARGET = "orin-nx-16gb"
MODELS = {
    # name: (builder, clip shapes (T, H, W) to measure)
    "r2plus1d_18": ("torchvision r2plus1d_18 (random weights, 400 classes)", [(16, 112, 112)]),
    "mobilenet3d": ("jetforge MobileNet3D width 1.0 (random weights, 4 classes)", [(8, 112, 112), (16, 112, 112)]),
}


def build(name):
    """The model in eval mode with non-trivial BatchNorm statistics (a fresh net's are 0 / 1, which would let a
    wrong BatchNorm placement pass the equality check)."""
    import torch

    torch.manual_seed(0)
    if name == "r2plus1d_18":
        import torchvision

        model = torchvision.models.video.r2plus1d_18(weights=None)
    else:
        from jetforge.compress.models.mobilenet3d import MobileNet3D

        model = MobileNet3D(4)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm3d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    return model.eval()


def export(model, clip, path):
    import torch

    t, h, w = clip
    torch.onnx.export(model, (torch.randn(1, 3, t, h, w),), str(path), input_names=["clip"],
                      output_names=["logits"], dynamic_axes={"clip": {0: "n"}, "logits": {0: "n"}},
                      opset_version=17, dynamo=False)


def cli(*args):
    """One jetforge command with --json, as a user runs it; its parsed output."""
    proc = subprocess.run(JETFORGE + [str(a) for a in args] + ["--json"], capture_output=True, text=True,
                          cwd=str(ROOT))
    if proc.returncode != 0:
        raise RuntimeError("jetforge %s failed (%d): %s" % (" ".join(map(str, args)), proc.returncode,
                                                            proc.stderr.strip()[-2000:]))
    return json.loads(proc.stdout)


def placement(data):
    s = data["summary"]
    return {"dla_layers": s["dla_layers"], "gpu_layers": s["gpu_layers"], "dla_flops_share": s["dla_flops_share"],
            "flops_total": s["flops_total"], "dla_subgraphs": s["dla_subgraphs"],
            "loadables_per_core": s["loadables_per_core"], "transitions": s["transitions"],
            "uncertain_layers": s["uncertain_layers"]}


def estimates(path, clip, batches):
    out = {}
    t, h, w = clip
    for precision in ("fp16", "int8"):
        for label, extra in (("gpu_only", []), ("dla_core_0", ["--dla-core", "0"])):
            data = cli("estimate", path, "--target", TARGET, "--precision", precision, "--batch",
                       ",".join(str(b) for b in batches), "--shape", "clip=1x3x%dx%dx%d" % (t, h, w), *extra)
            out["%s/%s" % (precision, label)] = [
                {"batch": b["batch"], "latency_ms": round(b["latency_ms"], 3), "gpu_ms": round(b["gpu_ms"], 3),
                 "dla_ms": round(b["dla_ms"], 3), "transitions_ms": round(b["transitions_ms"], 3),
                 "dla_subgraphs": b["dla_subgraphs"], "transitions": len(b["transitions"])}
                for b in data["batches"]]
    return out


def ort_equality(original, folded, clip):
    import onnxruntime as ort

    t, h, w = clip
    x = np.random.default_rng(0).standard_normal((1, 3, t, h, w)).astype(np.float32)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    ref = ort.InferenceSession(str(original), opts, providers=["CPUExecutionProvider"]).run(None, {"clip": x})[0]
    got = ort.InferenceSession(str(folded), opts, providers=["CPUExecutionProvider"]).run(None, {"clip": x})[0]
    diff, scale = float(np.abs(got - ref).max()), float(np.abs(ref).max())
    return {"max_abs_diff": diff, "max_abs_output": scale, "tolerance": 1e-3 * scale,
            "equal_within_tolerance": diff <= 1e-3 * scale, "argmax_equal": bool((got.argmax(1) == ref.argmax(1)).all())}


def measure(name, clip, work, batches, given=None):
    """One model at one clip shape; ``given`` is an existing ONNX file (its input named clip) instead of an export."""
    tag = "%s_%dx%dx%d" % ((name,) + tuple(clip))
    original, folded = Path(given) if given else work / (tag + ".onnx"), work / (tag + ".folded.onnx")
    start = time.time()
    if not given:
        export(build(name), clip, original)
    shape = "clip=1x3x%dx%dx%d" % clip
    before = cli("dla-check", original, "--target", TARGET, "--shape", shape)
    after = cli("dla-check", original, "--target", TARGET, "--shape", shape, "--fold-time", folded)
    row = {"model": name, "description": MODELS[name][0] if name in MODELS else "given ONNX file %s" % original.name,
           "clip": list(clip), "onnx_bytes": original.stat().st_size,
           "fold": {k: after["fold_time"][k] for k in ("regions", "regions_dropped", "folds", "unfolds")},
           "folded_convs_pools": len(after["fold_time"]["seeds"]),
           "folded_per_frame_layers": len(after["fold_time"]["per_frame"]),
           "left_3d": len(after["fold_time"]["skipped"]),
           "dla_check": {"before": placement(before), "after": placement(after)},
           "estimate": {"before": estimates(original, clip, batches), "after": estimates(folded, clip, batches)},
           "onnxruntime_fp32": ort_equality(original, folded, clip)}
    if given:
        import hashlib

        row["sha256"] = hashlib.sha256(original.read_bytes()).hexdigest()   # which file was measured
    row["seconds"] = round(time.time() - start, 1)
    for path in ([folded] if given else [original, folded]):
        path.unlink()
    return row


def onnx_clip_shape(path):
    """(T, H, W) of a clip model's input named clip, from the ONNX file."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    dims = [d.dim_value for i in graph.input if i.name == "clip" for d in i.type.tensor_type.shape.dim]
    if len(dims) != 5 or not all(dims[1:]):
        raise SystemExit("%s: no input named clip with a static (N, 3, T, H, W) shape" % path)
    return tuple(dims[2:])


def table(rows):
    """One line per model, clip, before/after and precision; DLA columns are the model built for DLA core 0."""
    head = ("model @ clip", "file", "prec", "DLA FLOPs", "DLA/GPU layers", "subgraphs", "transitions",
            "moved MiB", "GPU-only b1", "GPU-only b8", "DLA b1", "DLA b8", "GPU busy b8")
    out = [" | ".join(head), " | ".join("---" for _ in head)]
    for r in rows:
        name = "%s @ %dx%dx%d" % ((r["model"],) + tuple(r["clip"]))
        for when in ("before", "after"):
            p = r["dla_check"][when]
            for precision in ("fp16", "int8"):
                e = r["estimate"][when]
                gpu, dla = e["%s/gpu_only" % precision], e["%s/dla_core_0" % precision]
                moved = p["transitions"]["bytes_total"] / 1048576.0 / (2 if precision == "int8" else 1)
                out.append(" | ".join([
                    name, "original" if when == "before" else "folded", precision,
                    "%.1f %%" % (100 * p["dla_flops_share"]), "%d/%d" % (p["dla_layers"], p["gpu_layers"]),
                    "%d/%d" % (p["dla_subgraphs"], p["loadables_per_core"]), str(p["transitions"]["count"]),
                    "%.1f" % moved, "%.2f ms" % gpu[0]["latency_ms"], "%.2f ms" % gpu[-1]["latency_ms"],
                    "%.2f ms" % dla[0]["latency_ms"], "%.2f ms" % dla[-1]["latency_ms"],
                    "%.2f ms" % dla[-1]["gpu_ms"]]))
        q = r["onnxruntime_fp32"]
        out.append("%s: ONNX Runtime FP32, folded vs original: max |diff| %.2e at max |y| %.3g (tolerance %.2e), "
                   "argmax equal: %s" % (name, q["max_abs_diff"], q["max_abs_output"], q["tolerance"],
                                         q["argmax_equal"]))
    return "\n".join(out)


def plot(rows, path):
    """Per model and precision at batch 8: latency and GPU-busy time, GPU alone vs the folded model on DLA core 0."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sys.path.insert(0, str(ROOT))
    from jetforge.fileio import write_png_atomic

    fig, axes = plt.subplots(1, len(rows), figsize=(4.2 * len(rows), 4.2), squeeze=False)
    for ax, r in zip(axes[0], rows):
        labels, latency, gpu_busy = [], [], []
        for precision in ("fp16", "int8"):
            for when, key, name in (("before", "gpu_only", "GPU only"), ("after", "dla_core_0", "folded, DLA 0")):
                b8 = r["estimate"][when]["%s/%s" % (precision, key)][-1]
                labels.append("%s\n%s" % (name, precision))
                latency.append(b8["latency_ms"])
                gpu_busy.append(b8["gpu_ms"])
        xs = np.arange(len(labels))
        ax.bar(xs - 0.2, latency, 0.4, label="latency")
        ax.bar(xs + 0.2, gpu_busy, 0.4, label="GPU busy")
        ax.set_xticks(xs)
        ax.set_xticklabels(labels, fontsize=7)
        ax.set_ylabel("ms per batch of 8 clips (estimate)")
        ax.set_title("%s @ %s" % (r["model"], "x".join(map(str, r["clip"]))), fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle("%s: time folded into the batch for DLA (jetforge estimate, batch 8)" % TARGET, fontsize=10)
    write_png_atomic(fig, path)
    plt.close(fig)


def code_state():
    """The commit and whether the estimator or the DLA analysis had uncommitted changes when this ran."""
    def git(*args):
        proc = subprocess.run(["git"] + list(args), capture_output=True, text=True, cwd=str(ROOT))
        return proc.stdout.strip() if proc.returncode == 0 else None

    dirty = git("status", "--porcelain", "--", "runtime/estimate", "runtime/tensorrt/dla", "targets")
    return {"commit": git("rev-parse", "HEAD"),
            "uncommitted_in_estimate_dla_targets": dirty.splitlines() if dirty else []}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--out", default=None, help="result JSON (+ .txt, .png beside it; default "
                                                    "results/<device>_<date>_dla-fold.json, a dry run: /tmp)")
    parser.add_argument("--work", default=str(ROOT / "build" / "dla_3d"))
    parser.add_argument("--dry-run", action="store_true",
                        help="tiny clips (2x32x32), batch 1 and 2; JSON with dry_run: true in a temporary folder")
    parser.add_argument("--plot-only", action="store_true", help="redraw the plot from --out's JSON")
    parser.add_argument("--onnx", action="append", default=[], metavar="MODEL.onnx",
                        help="also measure this clip model (input named clip, static T, H, W), e.g. "
                             "assets/shipped/action-mobilenet3d/model.onnx; --models '' measures only these")
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = str(Path(tempfile.mkdtemp(prefix="jetforge-dla-3d-dry-")) / "dla_3d.json") if args.dry_run \
            else str(result_path(__file__, "dla-fold"))
    if args.plot_only:
        plot(json.loads(Path(args.out).read_text())["rows"], str(Path(args.out).with_suffix(".png")))
        return 0
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for given in args.onnx:
        print("measuring %s ..." % given, flush=True)
        rows.append(measure(Path(given).stem, onnx_clip_shape(given), work, [1, 2] if args.dry_run else [1, 8],
                            given=given))
    for name in [n for n in args.models.split(",") if n]:
        if name not in MODELS:
            parser.error("unknown model %s (choose from %s)" % (name, ", ".join(MODELS)))
        clips = [(2, 32, 32)] if args.dry_run else MODELS[name][1]
        for clip in clips:
            print("measuring %s at %s ..." % (name, "x".join(map(str, clip))), flush=True)
            rows.append(measure(name, clip, work, [1, 2] if args.dry_run else [1, 8]))
    print(table(rows))
    bad = [r["model"] for r in rows if not r["onnxruntime_fp32"]["equal_within_tolerance"]]
    # a dry run writes its JSON too (dry_run: true), into a temporary folder unless --out is given
    result = {"what": __doc__.split("\n\n")[0], "target": TARGET, "dry_run": bool(args.dry_run),
              "hardware": {"machine": platform.machine(), "cpu_count": os.cpu_count(), "python": sys.version.split()[0],
                           "note": "CPU only (dla-check and estimate are predictions; no Jetson, no DLA); "
                                   "shared 2-core VM"},
              "code": code_state(),
              "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": rows, "table": table(rows)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(args.out + ".part")
    tmp.write_text(json.dumps(result, indent=2))
    os.replace(str(tmp), args.out)
    Path(args.out).with_suffix(".txt").write_text(table(rows) + "\n")
    plot(rows, str(Path(args.out).with_suffix(".png")))
    print("wrote %s" % args.out)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
