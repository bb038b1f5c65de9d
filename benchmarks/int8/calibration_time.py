"""Calibration time side by side: ``jetforge calibrate`` (plots on and off), ONNX Runtime's ``quantize_static``
MinMax and NVIDIA ModelOpt's ONNX PTQ, with the accuracy of what each one wrote.

Same model, same image files, same machine, one run: the pretrained MobileNetV2 exported by jetforge
(``int8_accuracy.export_model``) and the 256 real calibration images/frames of ``int8_accuracy.pools()``,
written once as JPEG (quality 95) to a folder that every tool reads.

* ``jetforge``: :func:`jetforge.calibrate.calibrate_model.calibrate` on the folder (what ``jetforge calibrate`` runs):
  decoding, data checks, statistics of every tensor, the default algorithm, cache, Q/DQ ONNX, report and,
  with plots, the histogram plots;
* ``jetforge --no-plots``: the same without plots;
* ``ORT MinMax``: ``onnxruntime.quantization.quantize_static`` (QDQ, per-channel symmetric INT8 weights,
  symmetric INT8 activations, ``CalibrationMethod.MinMax``) with a reader that decodes the same files with
  OpenCV and preprocesses them with the model's own sidecar preprocessing, in batches of 8 (jetforge's batch);
* ``ModelOpt max``: ``modelopt.onnx.quantization.quantize`` (``nvidia-modelopt[onnx]`` pinned to
  :data:`MODELOPT_VERSION`, INT8, ``calibration_method="max"``) on the same files decoded the same way, fed as one
  array in calibration steps of 8 (``calibration_shapes``), ``calibration_eps=["cpu"]`` (on a machine without
  a GPU its TensorRT and CUDA providers fail and it falls back to the CPU: asked for directly, no time goes to
  the failing tries) and ``high_precision_dtype="fp32"`` (its default converts the rest of the graph to FP16,
  which the FP32 evaluation below would not be comparable with).  ModelOpt is installed by this script into a
  throwaway virtual environment under /tmp (never the project's), with OpenCV at this environment's version
  and jetforge's reader (this checkout's ``src/``); it rewrites its input ONNX in place, so each run gets a
  copy, made before the clock starts;
* with ``--baseline REV``: jetforge at git revision REV (plots on and off), exported with ``git archive`` into
  a temporary folder -- the before/after comparison in the same run.

Every measurement is a fresh subprocess.  Imports of the libraries each tool is built on (numpy, OpenCV, onnx,
ONNX Runtime; for ModelOpt its package) happen before the clock; what a tool imports itself while it works
(jetforge's own modules, matplotlib for the plots) is timed.  The variants run in rotated order in each of
``--repeats`` rounds; the table gives the median, the spread (min-max) and the median of the per-round ratios
to ORT (robust to a drifting shared machine).  CPU time (user + system of all threads) is recorded beside wall
time, with the machine's CPU, core count and load average.

Accuracy in the same run: the files each variant wrote in round 0 (jetforge's Q/DQ ONNX, ORT's and ModelOpt's
quantized ONNX) are evaluated in simulated TensorRT INT8 arithmetic (``jetforge.calibrate.evaluate.Evaluator``,
the same on any CPU) against FP32 on the 288 held-out images of ``int8_accuracy.pools()``: top-1 agreement
over all and over confident images.  jetforge's calibration caches of every round (and the baseline's) are
compared byte for byte.

Run:  python benchmarks/int8/calibration_time.py                  (~25 min on the shared 2-core VM)
      python benchmarks/int8/calibration_time.py --baseline REV   (adds the old code)
      python benchmarks/int8/calibration_time.py --quick          (a smoke run of the script itself; no ModelOpt
                                                                   unless --modelopt-venv names one)
-> benchmarks/int8/results/<device>_<date>_calibration-time.{json,txt}
"""

import argparse
import datetime
import hashlib
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
GOAL = 1.5  # jetforge with plots at most 1.5x ORT's MinMax (wall) and no slower than ModelOpt (issue 25)
MODELOPT_VERSION = "0.47.0"
MODELOPT_VENV = Path(tempfile.gettempdir()) / ("jetforge-bench-modelopt-%s" % MODELOPT_VERSION)


# --------------------------------------------------------------------------- workers (fresh subprocesses)
def _cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def worker_jetforge(model: str, folder: str, out: str, plots: bool) -> Dict[str, object]:
    import cv2  # noqa: F401  (the libraries every variant is built on: imported before the clock, as ORT's are)
    import onnx  # noqa: F401
    import onnxruntime  # noqa: F401
    import jetforge.calibrate.calibrate_model as api

    t0, c0 = time.perf_counter(), _cpu_seconds()
    result = api.calibrate(model, folder, samples=IMAGES, batch_size=BATCH, out=out, plots=plots, progress=False)
    return {"seconds": time.perf_counter() - t0, "cpu_seconds": _cpu_seconds() - c0, "samples": result.samples,
            "plots": len(result.plots), "tensors": len(result.cache), "code": str(Path(api.__file__).parent),
            "quantized": str(result.qdq_path), "cache_sha256": hashlib.sha256(
                Path(result.cache_path).read_bytes()).hexdigest()}


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
    return {"seconds": time.perf_counter() - t0, "cpu_seconds": _cpu_seconds() - c0, "samples": len(files),
            "quantized": out}


def worker_modelopt(model: str, folder: str, out: str, method: str) -> Dict[str, object]:
    """ModelOpt's ONNX PTQ (runs in the throwaway environment, jetforge's reader from this checkout's src/)."""
    import cv2
    import numpy as np
    import modelopt
    from modelopt.onnx.quantization import quantize
    from jetforge.runtime.sidecar import read_sidecar

    private = Path(out).parent / "modelopt-input"  # ModelOpt rewrites the ONNX it is given: a copy, not the model
    private.mkdir()
    copy = private / Path(model).name
    shutil.copy2(model, str(copy))
    pre = read_sidecar(model).preprocess
    files = sorted(str(p) for p in Path(folder).iterdir() if p.suffix == ".jpg")[:IMAGES]
    t0, c0 = time.perf_counter(), _cpu_seconds()
    data = np.stack([pre.apply(cv2.imread(f, cv2.IMREAD_COLOR)) for f in files])
    quantize(str(copy), quantize_mode="int8", calibration_data=data, calibration_method=method,
             calibration_shapes="input:%dx%s" % (BATCH, "x".join(str(d) for d in data.shape[1:])),
             calibration_eps=["cpu"], high_precision_dtype="fp32", output_path=out, log_level="ERROR")
    return {"seconds": time.perf_counter() - t0, "cpu_seconds": _cpu_seconds() - c0, "samples": len(files),
            "quantized": out, "modelopt": modelopt.__version__}


def run_worker(argv: List[str]) -> None:
    kind, model, folder, out, result = argv
    import logging

    logging.basicConfig(level=logging.ERROR)
    if kind == "ort":
        data = worker_ort(model, folder, out)
    elif kind.startswith("modelopt-"):
        data = worker_modelopt(model, folder, out, kind.split("-", 1)[1])
    else:
        data = worker_jetforge(model, folder, out, plots=kind == "jetforge")
    Path(result).write_text(json.dumps(data))


# --------------------------------------------------------------------------- the driver
def prepare(work: Path, images: int) -> Dict[str, object]:
    """The exported MobileNetV2 (with sidecar), ``images`` calibration images as JPEG files, and the held-out
    images (decoded frames and photos, disjoint from the calibration ones) the outputs are evaluated on."""
    import cv2
    import int8_accuracy

    calib, held, _ = int8_accuracy.pools()
    folder = work / "images"
    folder.mkdir()
    for i, (_, frame) in enumerate(calib[:images]):
        cv2.imwrite(str(folder / ("%03d.jpg" % i)), frame, [cv2.IMWRITE_JPEG_QUALITY, 95])
    model = int8_accuracy.export_model("mobilenet_v2", work)
    return {"model": model, "images": folder, "held_out": [f for _, f in held]}


def modelopt_python(venv: Path) -> Dict[str, object]:
    """The throwaway environment's python with ModelOpt :data:`MODELOPT_VERSION` (made or reused), and its packages.

    Never the project's environment: ``python -m venv`` under /tmp, ``pip install`` of the pinned ModelOpt with
    its ``onnx`` extra, OpenCV at this environment's version and what jetforge's reader imports (the reader is
    this checkout's ``src/``, on ``PYTHONPATH`` in the worker)."""
    import cv2

    python = venv / "bin" / "python"
    check = [str(python), "-c", "import modelopt, cv2; print(modelopt.__version__, cv2.__version__)"]
    have = subprocess.run(check, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True) \
        if python.exists() else None
    if have is None or have.returncode or have.stdout.split() != [MODELOPT_VERSION, cv2.__version__]:
        print("installing nvidia-modelopt[onnx]==%s into %s (a few minutes) ..." % (MODELOPT_VERSION, venv), flush=True)
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "nvidia-modelopt[onnx]==%s" % MODELOPT_VERSION,
                        "opencv-python-headless==%s" % cv2.__version__, "pyyaml", "psutil", "tqdm"], check=True)
    freeze = subprocess.run([str(python), "-m", "pip", "freeze"], check=True, stdout=subprocess.PIPE,
                            universal_newlines=True).stdout.split()
    keep = ("nvidia-modelopt", "onnx", "onnxruntime", "onnxruntime-gpu", "torch", "numpy", "opencv-python-headless")
    return {"python": str(python), "venv": str(venv),
            "packages": sorted(p for p in freeze if p.split("==")[0].lower() in keep)}


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


class Variant:
    """One row of the table: a worker kind, the python that runs it, what goes first on its PYTHONPATH."""

    def __init__(self, label: str, kind: str, pythonpath: Optional[Path] = None,
                 python: Optional[str] = None) -> None:
        self.label, self.kind, self.pythonpath, self.python = label, kind, pythonpath, python or sys.executable


def measure(v: Variant, model: Path, images: Path, work: Path, round_: int, keep: bool) -> Dict[str, object]:
    """One fresh-subprocess run of ``v``; with ``keep`` its output stays (for the evaluation) in ``work/keep-*``."""
    slug = v.label.replace(" ", "_").replace("@", "_").replace("-", "")
    out_dir = work / ("out-%s-%d" % (slug, round_))
    out_dir.mkdir()
    out = out_dir / ("model.calib" if v.kind.startswith("jetforge") else "model.onnx")
    result = out_dir / "result.json"
    env = dict(os.environ)
    if v.pythonpath is not None:  # found by the path finder before the editable install's finder
        env["PYTHONPATH"] = str(v.pythonpath) + os.pathsep + env.get("PYTHONPATH", "")
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    subprocess.run([v.python, __file__, "--worker", v.kind, str(model), str(images), str(out), str(result)],
                   check=True, env=env, timeout=1800)
    data = json.loads(result.read_text())
    data.update({"variant": v.label, "round": round_, "process_seconds": round(time.perf_counter() - t0, 2),
                 "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)})
    if keep:
        kept = work / ("keep-" + slug)
        shutil.move(str(out_dir), str(kept))
        data["quantized"] = str(kept / Path(str(data["quantized"])).relative_to(out_dir))
    else:
        shutil.rmtree(str(out_dir))
    return data


def evaluate_outputs(model: Path, held_out: List, runs: List[Dict[str, object]]) -> Dict[str, Dict[str, object]]:
    """Simulated-INT8 agreement with FP32 of each variant's round-0 output on the held-out images."""
    import numpy as np
    from jetforge.calibrate.evaluate import Evaluator
    from jetforge.runtime.sidecar import read_sidecar

    pre = read_sidecar(model).preprocess
    x = np.stack([pre.apply(f) for f in held_out])
    evaluator = Evaluator(model, [x[i:i + 16] for i in range(0, len(x), 16)])
    out: Dict[str, Dict[str, object]] = {}
    for r in runs:
        if r["round"] != 0 or r["variant"] in out:
            continue
        res = evaluator.evaluate(str(r["quantized"]))
        out[str(r["variant"])] = {"agreement": round(res.agreement, 4), "confident": res.confident_samples,
                                  "agreement_confident": None if res.agreement_confident is None
                                  else round(res.agreement_confident, 4), "samples": res.samples,
                                  "mean_kl": round(res.mean_kl, 5)}
    return out


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
                  "ratio_to_ort_range": [round(min(ratios), 2), round(max(ratios), 2)] if ratios else None,
                  "median_cpu_ratio_to_ort": round(statistics.median(cpu_ratios), 2) if cpu_ratios else None,
                  "runs": len(mine)}
    return out


def paired_ratio(runs: List[Dict[str, object]], a: str, b: str) -> Optional[Dict[str, object]]:
    """Median (and range) over rounds of ``a``'s seconds over ``b``'s in the same round."""
    bs = {r["round"]: r["seconds"] for r in runs if r["variant"] == b}
    ratios = [r["seconds"] / bs[r["round"]] for r in runs if r["variant"] == a and r["round"] in bs]
    if not ratios:
        return None
    return {"median": round(statistics.median(ratios), 2), "min": round(min(ratios), 2), "max": round(max(ratios), 2)}


def table(summary: Dict[str, Dict[str, object]], accuracy: Dict[str, Dict[str, object]]) -> str:
    lines = ["%-30s %8s %15s %7s %10s %13s %9s %7s" % (
        "variant", "median s", "spread s", "CPU s", "x ORT wall", "(range)", "agreement", "conf.")]
    for v, s in summary.items():
        acc = accuracy.get(v) or {}
        rng = s["ratio_to_ort_range"]
        lines.append("%-30s %8.2f %15s %7.2f %10s %13s %9s %7s" % (
            v, s["median_seconds"], "%.2f-%.2f" % (s["min_seconds"], s["max_seconds"]), s["median_cpu_seconds"],
            "-" if v == "ORT MinMax" else "%.2fx" % s["median_ratio_to_ort"],
            "-" if v == "ORT MinMax" or not rng else "%.2f-%.2fx" % tuple(rng),
            "%.3f" % acc["agreement"] if acc else "-",
            "%.3f" % acc["agreement_confident"] if acc.get("agreement_confident") is not None else "-"))
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--baseline", metavar="REV", help="also time jetforge at this git revision (before/after)")
    ap.add_argument("--modelopt-venv", metavar="DIR", default=None,
                    help="the throwaway environment for ModelOpt (default %s; made when missing)" % MODELOPT_VENV)
    ap.add_argument("--skip-modelopt", action="store_true", help="leave ModelOpt out")
    ap.add_argument("--quick", action="store_true", help="32 images, 1 round: a smoke run of the script (not results)")
    ap.add_argument("--out", default=None, help="result JSON, the table beside it as .txt (default "
                                                "results/<device>_<date>_calibration-time.json; --quick: a temporary"
                                                " folder)")
    args = ap.parse_args()
    global IMAGES
    if args.worker:
        IMAGES = int(os.environ.get("JF_CALIBRATION_TIME_IMAGES", IMAGES))
        run_worker(args.worker)
        return 0
    if args.quick:
        IMAGES, args.repeats = 32, 1
        args.skip_modelopt = args.skip_modelopt or args.modelopt_venv is None
        args.out = args.out or str(Path(tempfile.mkdtemp(prefix="jetforge-calib-time-quick-")) /
                                   "calibration_time.quick.json")
    args.out = args.out or str(result_path(__file__, "calibration-time"))
    os.environ["JF_CALIBRATION_TIME_IMAGES"] = str(IMAGES)
    started = datetime.datetime.now().isoformat(timespec="seconds")
    variants = [Variant("ORT MinMax", "ort"), Variant("jetforge", "jetforge"),
                Variant("jetforge --no-plots", "jetforge-no-plots")]
    modelopt: Optional[Dict[str, object]] = None
    if not args.skip_modelopt:
        modelopt = modelopt_python(Path(args.modelopt_venv) if args.modelopt_venv else MODELOPT_VENV)
        variants.append(Variant("ModelOpt max", "modelopt-max", ROOT / "src", str(modelopt["python"])))
    with tempfile.TemporaryDirectory(prefix="jf-calib-time-") as tmp:
        work = Path(tmp)
        data = prepare(work, IMAGES)
        if args.baseline:
            rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.baseline], check=True,
                                 stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()
            pkg = baseline_tree(rev, work)
            variants += [Variant("jetforge@%s" % rev, "jetforge", pkg),
                         Variant("jetforge@%s --no-plots" % rev, "jetforge-no-plots", pkg)]
        runs: List[Dict[str, object]] = []
        for round_ in range(args.repeats):
            shift = round_ % len(variants)
            for v in variants[shift:] + variants[:shift]:  # rotated order, round by round
                r = measure(v, data["model"], data["images"], work, round_, keep=round_ == 0)
                runs.append(r)
                print("round %d  %-30s %7.2f s  (CPU %.1f s, load %.1f)" % (round_, v.label, r["seconds"],
                                                                           r["cpu_seconds"], r["load_before"]),
                      flush=True)
        accuracy = evaluate_outputs(data["model"], data["held_out"], runs)
    names = [v.label for v in variants]
    summary = summarise(runs, names)
    info = machine()
    loads = [r["load_before"] for r in runs] + [r["load_after"] for r in runs]
    shared = max(loads) > 0.5 * float(info["cores"] or 1) + 1.0
    ratio = summary["jetforge"]["median_ratio_to_ort"]
    versus_modelopt = paired_ratio(runs, "jetforge", "ModelOpt max") if modelopt else None
    caches = sorted({str(r["cache_sha256"]) for r in runs if r.get("cache_sha256")})
    jf_acc, ort_acc = accuracy.get("jetforge", {}), accuracy.get("ORT MinMax", {})
    results = {
        "benchmark": "calibration_time", "date": started, "machine": info, "images": IMAGES, "batch": BATCH,
        "model": "mobilenet_v2 (torchvision ImageNet weights, exported by jetforge)",
        "data": "int8_accuracy.pools() calibration pool (real frames and photos), JPEG quality 95",
        "held_out": "int8_accuracy.pools() held-out pool, %d images, disjoint" % len(data["held_out"]),
        "modelopt": modelopt, "repeats": args.repeats, "summary": summary, "accuracy": accuracy,
        "accuracy_arithmetic": "simulated TensorRT INT8 (jetforge.calibrate.evaluate.Evaluator), top-1 agreement "
                               "with FP32; confident: FP32 top-1 probability > 0.5",
        "jetforge_vs_modelopt": versus_modelopt,
        "jetforge_caches": {"distinct_sha256": caches, "identical_across_variants_and_rounds": len(caches) == 1},
        "runs": runs,
        "goal": "jetforge with plots at most %.1fx ORT quantize_static MinMax and no slower than ModelOpt (wall, "
                "medians of per-round ratios), at equal or better accuracy" % GOAL,
        "goal_met": bool(ratio is not None and ratio <= GOAL
                         and (versus_modelopt is None or versus_modelopt["median"] <= 1.0)
                         and jf_acc.get("agreement", 0) >= ort_acc.get("agreement", 1)),
        "load_average": {"min": min(loads), "median": statistics.median(loads), "max": max(loads)},
        "note": ("the machine was shared with other work during this run (1-minute load average up to %.1f on %s "
                 "cores): absolute seconds are inflated and noisy, the side-by-side ratios are what counts"
                 % (max(loads), info["cores"])) if shared else
                "the machine was quiet during this run (1-minute load average at most %.1f on %s cores)"
                % (max(loads), info["cores"]),
    }
    if modelopt is None:
        results["goal"] += " (ModelOpt left out of this run)"
    if args.quick:
        results["note"] += "; --quick smoke run (32 images, 1 round): not a result"
    text = table(summary, accuracy)
    if versus_modelopt:
        text += "\njetforge / ModelOpt max, per round: median %.2fx (%.2f-%.2fx)" % (
            versus_modelopt["median"], versus_modelopt["min"], versus_modelopt["max"])
    text += "\njetforge caches: %s" % ("identical in every round and variant" if len(caches) == 1
                                       else "%d different ones" % len(caches))
    text += "\n%s\ngoal: %s -> %s" % (results["note"], results["goal"], "met" if results["goal_met"] else "NOT met")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1))
    Path(args.out).with_suffix(".txt").write_text(text + "\n")
    print("\n" + text + "\nwritten %s (+ .txt)" % args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
