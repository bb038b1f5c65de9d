"""Calibration time side by side: ``jetforge calibrate`` (plots on and off) vs ONNX Runtime's ``quantize_static`` MinMax.

Same model, same image files, same machine, one run: the pretrained MobileNetV2 exported by jetforge
(``int8_accuracy.export_model``) and the 256 real calibration images/frames of ``int8_accuracy.pools()``,
written once as JPEG (quality 95) to a folder that both tools read.

* ``jetforge``: :func:`jetforge.calibrate.calibrate_model.calibrate` on the folder (what ``jetforge calibrate`` runs):
  decoding, data checks, statistics of every tensor, the default algorithm, cache, Q/DQ ONNX, report and,
  with plots, the histogram plots;
* ``jetforge --no-plots``: the same without plots;
* ``ORT MinMax``: ``onnxruntime.quantization.quantize_static`` (QDQ, per-channel symmetric INT8 weights,
  symmetric INT8 activations, ``CalibrationMethod.MinMax``) with a reader that decodes the same files with
  OpenCV and preprocesses them with the model's own sidecar preprocessing, in batches of 8 (jetforge's batch);
* with ``--baseline REV``: jetforge at git revision REV (plots on and off), exported with ``git archive`` into
  a temporary folder -- the before/after comparison in the same run.

Every measurement is a fresh subprocess (imports excluded from the timed call, which is what the
numbers are); the variants run in rotated order in each of ``--repeats`` rounds, and the table gives
medians and the median of the per-round ratios to ORT (robust to a drifting shared machine).  CPU time
(user + system of all threads) is recorded beside wall time.  The machine's CPU, core count and load
average go into the JSON, with a note when the machine was shared.

Run:  python benchmarks/int8/calibration_time.py                  (~10 min on 2 cores)
      python benchmarks/int8/calibration_time.py --baseline REV   (adds the old code; ~16 min)
      python benchmarks/int8/calibration_time.py --quick          (a smoke run of the script itself)
-> benchmarks/int8/results/<device>_<date>_calibration-time.json
"""

import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import result_path, use_checkout  # noqa: E402

use_checkout()

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # int8_accuracy.py, this study's data pools
IMAGES = 256
BATCH = 8
GOAL = 3.0


# --------------------------------------------------------------------------- workers (fresh subprocesses)
def _cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def worker_jetforge(model: str, folder: str, out: str, plots: bool) -> Dict[str, object]:
    import jetforge.calibrate.calibrate_model as api  # imported before the clock starts

    t0, c0 = time.perf_counter(), _cpu_seconds()
    result = api.calibrate(model, folder, samples=IMAGES, batch_size=BATCH, out=out, plots=plots, progress=False)
    return {"seconds": time.perf_counter() - t0, "cpu_seconds": _cpu_seconds() - c0, "samples": result.samples,
            "plots": len(result.plots), "tensors": len(result.cache), "code": str(Path(api.__file__).parent)}


def worker_ort(model: str, folder: str, out: str) -> Dict[str, object]:
    import cv2
    import numpy as np
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)
    from jetforge.runtime.sidecar import read_sidecar

    pre = read_sidecar(model).preprocess
    files = sorted(str(p) for p in Path(folder).iterdir() if p.suffix == ".jpg")[:IMAGES]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.i = 0

        def get_next(self):
            if self.i >= len(files):
                return None
            batch = np.stack([pre.apply(cv2.imread(f, cv2.IMREAD_COLOR)) for f in files[self.i:self.i + BATCH]])
            self.i += BATCH
            return {"input": batch}

    t0, c0 = time.perf_counter(), _cpu_seconds()
    quantize_static(model, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    calibrate_method=CalibrationMethod.MinMax,
                    extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
    return {"seconds": time.perf_counter() - t0, "cpu_seconds": _cpu_seconds() - c0, "samples": len(files)}


def run_worker(argv: List[str]) -> None:
    kind, model, folder, out, result = argv
    import logging

    logging.basicConfig(level=logging.ERROR)
    if kind == "ort":
        data = worker_ort(model, folder, out)
    else:
        data = worker_jetforge(model, folder, out, plots=kind == "jetforge")
    Path(result).write_text(json.dumps(data))


# --------------------------------------------------------------------------- the driver
def prepare(work: Path, images: int) -> Dict[str, Path]:
    """The exported MobileNetV2 (with sidecar) and ``images`` calibration images as JPEG files."""
    import cv2
    import int8_accuracy

    calib, _, _ = int8_accuracy.pools()
    folder = work / "images"
    folder.mkdir()
    for i, (_, frame) in enumerate(calib[:images]):
        cv2.imwrite(str(folder / ("%03d.jpg" % i)), frame, [cv2.IMWRITE_JPEG_QUALITY, 95])
    model = int8_accuracy.export_model("mobilenet_v2", work)
    return {"model": model, "images": folder}


def baseline_tree(rev: str, work: Path) -> Path:
    """``rev``'s sources as an importable ``jetforge`` package: its ``src/`` (the package as installed), or for a
    revision before the src layout, its folders mapped as that revision's setup.py mapped them."""
    src = work / ("src-" + rev.replace("/", "_"))
    src.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev], check=True,
                             stdout=subprocess.PIPE).stdout
    tar_path = work / "rev.tar"
    tar_path.write_bytes(archive)
    with tarfile.open(str(tar_path)) as tar:
        tar.extractall(str(src), filter="data")
    if (src / "src" / "jetforge").is_dir():
        return src / "src"
    pkg = work / ("pkg-" + rev.replace("/", "_"))
    (pkg / "jetforge").mkdir(parents=True)
    for item in (src / "jetforge").iterdir():
        os.symlink(str(item), str(pkg / "jetforge" / item.name))
    for sub in ("targets", "runtime", "calibrate", "compress", "apps"):
        os.symlink(str(src / sub), str(pkg / "jetforge" / sub))
    return pkg


def measure(kind: str, model: Path, images: Path, work: Path, round_: int, pythonpath: Optional[Path] = None,
            label: Optional[str] = None) -> Dict[str, object]:
    out_dir = work / ("out-%s-%d" % ((label or kind).replace(" ", "_").replace("@", "_"), round_))
    out_dir.mkdir()
    out = out_dir / ("model.onnx" if kind == "ort" else "model.calib")
    result = out_dir / "result.json"
    env = dict(os.environ)
    if pythonpath is not None:  # found by the path finder before the editable install's finder
        env["PYTHONPATH"] = str(pythonpath) + os.pathsep + env.get("PYTHONPATH", "")
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    subprocess.run([sys.executable, __file__, "--worker", kind, str(model), str(images), str(out), str(result)],
                   check=True, env=env, timeout=1800)
    data = json.loads(result.read_text())
    data.update({"variant": label or kind, "round": round_, "process_seconds": round(time.perf_counter() - t0, 2),
                 "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)})
    shutil.rmtree(str(out_dir))
    return data


def machine() -> Dict[str, object]:
    import numpy
    import onnxruntime

    cpu: Dict[str, object] = {}
    try:
        from jetforge.runtime.cpu_features import cpu_features

        cpu = cpu_features().to_dict()
    except Exception as err:  # the report still has platform.processor()
        cpu = {"error": str(err)}
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count()
    return {"cpu": cpu, "processor": platform.processor(), "cores": cores, "python": platform.python_version(),
            "onnxruntime": onnxruntime.__version__, "numpy": numpy.__version__, "platform": platform.platform(),
            "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30, 1)}


def summarise(runs: List[Dict[str, object]], variants: List[str]) -> Dict[str, Dict[str, object]]:
    out: Dict[str, Dict[str, object]] = {}
    ort = {r["round"]: r for r in runs if r["variant"] == "ORT MinMax"}
    for v in variants:
        mine = [r for r in runs if r["variant"] == v]
        secs = [r["seconds"] for r in mine]
        cpu = [r["cpu_seconds"] for r in mine]
        ratios = [r["seconds"] / ort[r["round"]]["seconds"] for r in mine if r["round"] in ort]
        cpu_ratios = [r["cpu_seconds"] / ort[r["round"]]["cpu_seconds"] for r in mine if r["round"] in ort]
        out[v] = {"median_seconds": round(statistics.median(secs), 2), "min_seconds": round(min(secs), 2),
                  "max_seconds": round(max(secs), 2), "median_cpu_seconds": round(statistics.median(cpu), 2),
                  "median_ratio_to_ort": round(statistics.median(ratios), 2) if ratios else None,
                  "median_cpu_ratio_to_ort": round(statistics.median(cpu_ratios), 2) if cpu_ratios else None,
                  "runs": len(mine)}
    return out


def table(summary: Dict[str, Dict[str, object]]) -> str:
    lines = ["%-34s %9s %7s %7s %8s %10s %10s" % ("variant", "median s", "min", "max", "CPU s", "x ORT wall",
                                                  "x ORT CPU")]
    for v, s in summary.items():
        lines.append("%-34s %9.2f %7.2f %7.2f %8.2f %10s %10s" % (
            v, s["median_seconds"], s["min_seconds"], s["max_seconds"], s["median_cpu_seconds"],
            "-" if v == "ORT MinMax" else "%.2fx" % s["median_ratio_to_ort"],
            "-" if v == "ORT MinMax" else "%.2fx" % s["median_cpu_ratio_to_ort"]))
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--baseline", metavar="REV", help="also time jetforge at this git revision (before/after)")
    ap.add_argument("--quick", action="store_true", help="32 images, 1 round: a smoke run of the script (not results)")
    ap.add_argument("--out", default=None, help="result JSON (default results/<device>_<date>_calibration-time.json;"
                                                " --quick: a temporary folder)")
    args = ap.parse_args()
    global IMAGES
    if args.worker:
        IMAGES = int(os.environ.get("JF_CALIBRATION_TIME_IMAGES", IMAGES))
        run_worker(args.worker)
        return 0
    if args.quick:
        IMAGES, args.repeats = 32, 1
        args.out = args.out or str(Path(tempfile.mkdtemp(prefix="jetforge-calib-time-quick-")) /
                                   "calibration_time.quick.json")
    args.out = args.out or str(result_path(__file__, "calibration-time"))
    os.environ["JF_CALIBRATION_TIME_IMAGES"] = str(IMAGES)
    started = datetime.datetime.now().isoformat(timespec="seconds")
    with tempfile.TemporaryDirectory(prefix="jf-calib-time-") as tmp:
        work = Path(tmp)
        data = prepare(work, IMAGES)
        variants = [("ORT MinMax", "ort", None), ("jetforge", "jetforge", None),
                    ("jetforge --no-plots", "jetforge-no-plots", None)]
        if args.baseline:
            rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.baseline], check=True,
                                 stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()
            pkg = baseline_tree(rev, work)
            variants += [("jetforge@%s" % rev, "jetforge", pkg), ("jetforge@%s --no-plots" % rev, "jetforge-no-plots",
                                                                   pkg)]
        runs: List[Dict[str, object]] = []
        for round_ in range(args.repeats):
            shift = round_ % len(variants)
            for label, kind, pkg in variants[shift:] + variants[:shift]:  # rotated order, round by round
                r = measure(kind, data["model"], data["images"], work, round_, pkg, label)
                runs.append(r)
                print("round %d  %-32s %7.2f s  (CPU %.1f s, load %.1f)" % (round_, label, r["seconds"],
                                                                           r["cpu_seconds"], r["load_before"]),
                      flush=True)
    names = [v[0] for v in variants]
    summary = summarise(runs, names)
    info = machine()
    loads = [r["load_before"] for r in runs] + [r["load_after"] for r in runs]
    shared = max(loads) > 0.5 * float(info["cores"] or 1) + 1.0
    ratio = summary["jetforge"]["median_ratio_to_ort"]
    results = {
        "benchmark": "calibration_time", "date": started, "machine": info, "images": IMAGES, "batch": BATCH,
        "model": "mobilenet_v2 (torchvision ImageNet weights, exported by jetforge)",
        "data": "int8_accuracy.pools() calibration pool (real frames and photos), JPEG quality 95",
        "repeats": args.repeats, "summary": summary, "runs": runs,
        "goal": "jetforge with plots within %.1fx of ORT quantize_static MinMax (wall, median of per-round ratios)"
                % GOAL,
        "goal_met": bool(ratio is not None and ratio <= GOAL),
        "load_average": {"min": min(loads), "median": statistics.median(loads), "max": max(loads)},
        "note": ("the machine was shared with other work during this run (1-minute load average up to %.1f on %s "
                 "cores): absolute seconds are inflated and noisy, the side-by-side ratios are what counts"
                 % (max(loads), info["cores"])) if shared else
                "the machine was quiet during this run (1-minute load average at most %.1f on %s cores)"
                % (max(loads), info["cores"]),
    }
    if args.quick:
        results["note"] += "; --quick smoke run (32 images, 1 round): not a result"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1))
    print("\n" + table(summary))
    print("\n%s\ngoal: %s -> %s\nwritten %s" % (results["note"], results["goal"],
                                                "met" if results["goal_met"] else "NOT met", args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
