"""The distilled person detectors on the CPU: ONNX Runtime latency, person AP (FP32 and simulated INT8).

Reads what ``benchmarks/detector_students/detector_student_gpu.py`` returned from the GPU machine (``--gpu-dir``: the
students' state dicts and ``detector_student_gpu.json``), rebuilds the students without Torch-Pruning
(``detector_from_state``), and for the teacher (the port of the frozen graph) and both students:

1. exports the ONNX body + sidecar (``export_detector``: the teacher's SSD spec, same anchors);
2. **latency**: ONNX Runtime, batch 1, 2 intra-op threads, the three models alternating run by run
   in ``--rounds`` rounds on the same input (median ms; ratios are what counts: the 2-core machine
   is shared with other engineers' jobs, stated in the JSON);
3. **person AP** on the held-out labelled frames (``src/jetforge/vision/data/people_boxes.json``: 94 frames,
   decoded and hash-checked) with the ``detection_ap`` metric's decoding (score >= 0.01, the model's
   NMS), AP@0.5 and AP@[.5:.95], and the paired bootstrap of each student minus the teacher (10000
   resamples over frames, and over 10-frame blocks of one clip) -- a goal about a difference holds
   only if the interval's bound does; HOG's row is C2's ``people_ap.json`` (same frames, its stored
   detections, paired with the teacher too);
4. **simulated INT8**: ``jetforge.calibrate.calibrate`` on training-segment frames only, evaluated on
   the held-out frames by the INT8 evaluator with the ``detection_ap`` metric (FP32 vs simulated
   TensorRT INT8 arithmetic, paired bootstrap of the difference).

Writes ``benchmarks/detector_students/results/<device>_<date>_students.json``, ``.txt`` (the table) and ``.png`` (AP against CPU
latency, with the H200 speed-ups of the GPU run).  ``--students`` names other ``student_<name>.pt`` files
of ``--gpu-dir`` (e.g. a student trained further); ``--gpu-timing`` takes the H200 columns from a separate
``detector_student_gpu.py --time-only`` run (also with ``--report-only``, which rewrites goals, table and
plot from the JSON without measuring again).

    .venv/bin/python benchmarks/detector_students/detector_student.py --gpu-dir <files_at>/detector_student
    .venv/bin/python benchmarks/detector_students/detector_student.py --gpu-dir - --report-only \
        --gpu-timing benchmarks/detector_students/results/nvidia-h200_2026-12-01_timing.json \
        --out benchmarks/detector_students/results/epyc-2core_2026-12-02_students
"""

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import committed, result_path, use_checkout  # noqa: E402

use_checkout()

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
WORK = ROOT / "build" / "detector_student_cpu"  # not inside the device carry folder (build/detector_student)
RESOLUTION = committed("detector_students", "epyc-2core_2026-12-01_resolution-estimate.json")
PEOPLE_AP = committed("people_app", "epyc-2core_2026-12-01_ap.json")  # HOG's row: people_ap.py's detections
MODELS = ("teacher", "jetforge", "torch_pruning")
TITLES = {"teacher": "SSDLite-MobileNetV2 port (FP32)", "jetforge": "jetforge-pruned student",
          "torch_pruning": "Torch-Pruning student", "hog": "OpenCV HOG (people app)"}
BLOCK = 10


def log(*parts: Any) -> None:
    print(*parts, flush=True)


def title(name: str) -> str:
    return TITLES.get(name, "jetforge student %s" % name)


def model_names(result: Dict[str, Any]) -> List[str]:
    """The teacher, then the students of a result (older results name none: the first run's two)."""
    return list(result.get("models", MODELS))


def student_sizes(gpu_dir: Path, students: List[str], given: List[str], train_jsons: List[str]) -> Dict[str, int]:
    """Each student's input size: ``--student-size NAME=PIXELS``, else what its training run recorded (the GPU
    run's JSON or a ``--train-json``), else 300."""
    sizes = {name: int(px) for name, _, px in (g.partition("=") for g in given)}
    recorded: Dict[str, Any] = {}
    for run in [gpu_dir / "detector_student_gpu.json"] + [Path(p) for p in train_jsons]:
        if run.is_file():
            recorded.update(json.loads(run.read_text()).get("students", {}))
    return {n: sizes.get(n, int(recorded.get(n, {}).get("image_size", 300))) for n in students}


def h200_estimates(pairs: List[str]) -> Dict[str, Any]:
    """``NAME=ROW`` -> the roofline estimate of ``detector_student_resolution.json``'s ROW (not a measurement)."""
    if not pairs:
        return {}
    rows = json.loads(RESOLUTION.read_text())["rows"]
    out = {}
    for name, _, row in (p.partition("=") for p in pairs):
        if row not in rows:
            raise SystemExit("no row %r in detector_student_resolution.json (%s)" % (row, ", ".join(rows)))
        out[name] = {"row": row, "speedup_b32": rows[row]["speedup_vs_teacher300"]["32"],
                     "speedup_b1": rows[row]["speedup_vs_teacher300"]["1"], "macs": rows[row]["macs"],
                     "kind": "roofline estimate (jetforge.runtime.estimate, TensorRT fusion, FP16, server-hopper-h200)"
                             " of the same channel counts at the same input size: NOT a measurement"}
    return out


def load_models(gpu_dir: Path, students: List[str], sizes: Dict[str, int]) -> Tuple[Dict[str, Any], Any, Any]:
    """Teacher (from the frozen graph) and the returned students (each at its input size); the graph's spec and
    preprocessing (the teacher's: a student of another size exports with its own, ``student_contract``)."""
    import torch

    from jetforge.assets import asset_path
    from jetforge.compress.distill.detection_student import detector_from_state
    from jetforge.compress.models.ssdlite_mobilenet_v2 import load_from_graphdef
    from jetforge.compress.models.tf_graphdef import load_graphdef
    from jetforge.compress.models.tf_ssd_graph import SSDGraph, read_preprocess, read_spec

    weights = asset_path("ssdlite_mobilenet_v2_person", "frozen_inference_graph.pb")
    graph = load_graphdef(weights)
    g = SSDGraph(graph)
    models = {"teacher": load_from_graphdef(weights, graph=graph)}
    for name in students:
        state = torch.load(str(gpu_dir / ("student_%s.pt" % name)), map_location="cpu", weights_only=True)
        models[name] = detector_from_state(state, sizes.get(name, models["teacher"].image_size))
    return models, read_spec(g), read_preprocess(g)


def export_all(models: Dict[str, Any], spec: Any, preprocess: Any, folder: Path) -> Dict[str, Path]:
    """Each model's ONNX body + sidecar, with its own input size and anchors (the sidecar is the contract)."""
    from jetforge.compress.distill.detection_crossgrid import student_contract
    from jetforge.compress.distill.detection_recipe import STUDENT_MODEL_NAME, name_student_export
    from jetforge.compress.models.ssdlite_export import export_detector

    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, model in models.items():
        paths[name] = folder / ("%s.onnx" % name)
        own_spec, own_preprocess = student_contract(spec, preprocess, model)
        sidecar = export_detector(model, own_spec, own_preprocess, paths[name], provenance={"student": name})
        if name != "teacher":
            name_student_export(sidecar, paths[name], "%s_%s" % (STUDENT_MODEL_NAME, name))
    return paths


def sessions(paths: Dict[str, Path]) -> Dict[str, Any]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    opts.inter_op_num_threads = 1
    return {n: ort.InferenceSession(str(p), opts, providers=["CPUExecutionProvider"]) for n, p in paths.items()}


def latency(sess: Dict[str, Any], inputs: Dict[str, np.ndarray], rounds: int, per_round: int) -> Dict[str, Any]:
    """Batch-1 ms per run (each model on the same frame at its input size), models alternating run by run
    (order reversed every other round); median."""
    samples: Dict[str, List[float]] = {n: [] for n in sess}
    for n, s in sess.items():
        s.run(None, {s.get_inputs()[0].name: inputs[n]})
    for r in range(rounds):
        order = list(sess) if r % 2 == 0 else list(reversed(list(sess)))
        for _ in range(per_round):
            for name in order:
                s, x = sess[name], inputs[name]
                start = time.perf_counter()
                s.run(None, {s.get_inputs()[0].name: x})
                samples[name].append(1000.0 * (time.perf_counter() - start))
    out = {n: {"median_ms": statistics.median(v), "p10_ms": float(np.percentile(v, 10)),
               "p90_ms": float(np.percentile(v, 90)), "runs": len(v)} for n, v in samples.items()}
    for n in out:
        out[n]["speedup_vs_teacher"] = out["teacher"]["median_ms"] / out[n]["median_ms"]
    return out


def heldout_frames():
    from jetforge.assets import asset_dir
    from jetforge.calibrate.detection_eval import BLOCK_FRAMES
    from jetforge.vision.person_labels import load_person_labels

    frames = load_person_labels("heldout", assets_root=asset_dir("opencv_samples").parent)
    groups = ["%s:%d" % (f.clip, f.index // BLOCK_FRAMES) for f in frames]
    return frames, groups


def detections(sess: Any, metric: Any, frames, preprocess) -> Tuple[List[np.ndarray], List[np.ndarray]]:
    """FP32 detections of one ONNX body on every frame, in frame pixels (the metric's decoding)."""
    from jetforge.calibrate.metrics import DetectionTarget

    name = sess.get_inputs()[0].name
    outs = [sess.run(None, {name: preprocess.apply(f.image)[None]}) for f in frames]
    raw = [np.concatenate([o[i] for o in outs]) for i in range(len(outs[0]))]  # every output, any layout
    targets = [DetectionTarget(f.boxes, f.difficult, f.image.shape[:2]) for f in frames]
    return metric.detections(raw, targets)


def ap_rows(dets: Dict[str, Tuple], frames, groups, resamples: int) -> Dict[str, Any]:
    """AP of each detector, and the paired bootstrap (frames, blocks) of each minus the teacher."""
    from jetforge.vision.detection_metrics import paired_bootstrap

    gt = [f.boxes for f in frames]
    diff = [f.difficult for f in frames]
    rows: Dict[str, Any] = {}
    for name, d in dets.items():
        if name == "teacher":
            alone = paired_bootstrap(gt, diff, d, n_resamples=resamples)["a"]
            rows[name] = {k: alone[k] for k in ("ap50", "ap", "ap50_ci", "ap_ci")}
            continue
        by_frame = paired_bootstrap(gt, diff, d, dets["teacher"], n_resamples=resamples)
        by_block = paired_bootstrap(gt, diff, d, dets["teacher"], n_resamples=resamples, groups=groups)
        rows[name] = {"ap50": by_frame["a"]["ap50"], "ap": by_frame["a"]["ap"], "ap50_ci": by_frame["a"]["ap50_ci"],
                      "ap_ci": by_frame["a"]["ap_ci"], "minus_teacher": by_frame["difference"],
                      "minus_teacher_blocks": by_block["difference"]}
        log("%s AP@0.5 %.3f (teacher %.3f), difference CI frames %s blocks %s" % (
            name, rows[name]["ap50"], by_frame["b"]["ap50"], np.round(by_frame["difference"]["ap50_ci"], 3),
            np.round(by_block["difference"]["ap50_ci"], 3)))
    return rows


def hog_detections(frames) -> Tuple[List[np.ndarray], List[np.ndarray]]:
    """HOG's detections on the same held-out frames, from C2's committed people_ap.json (checked frame by frame)."""
    data = json.loads(PEOPLE_AP.read_text())
    hog = data["detectors"]["hog"]["detections"]
    if len(hog) != len(frames):
        raise SystemExit("people_ap.json has %d frames, the held-out set %d" % (len(hog), len(frames)))
    boxes = [np.asarray(d, dtype=np.float64).reshape(-1, 5)[:, :4] for d in hog]
    scores = [np.asarray(d, dtype=np.float64).reshape(-1, 5)[:, 4] for d in hog]
    return boxes, scores


def calibration_frames(folder: Path, step: int) -> Path:
    """Training-segment frames only (every ``step``-th) as PNG files: the calibration data."""
    import cv2

    from jetforge.assets import asset_dir
    from jetforge.vision.person_labels import training_frames

    folder.mkdir(parents=True, exist_ok=True)
    if not any(folder.glob("*.png")):
        for clip, index, image in training_frames(asset_dir("opencv_samples").parent, step=step):
            cv2.imwrite(str(folder / ("%s_%04d.png" % (clip, index))), image)
    return folder


def int8_rows(paths: Dict[str, Path], calib: Path, samples: int, eval_samples: Any) -> Dict[str, Any]:
    from jetforge.calibrate.calibrate_model import calibrate

    labels = ROOT / "benchmarks" / "labels" / "people_boxes.json"
    out = {}
    for name, path in paths.items():
        t0 = time.perf_counter()
        res = calibrate(path, [calib], samples=samples, plots=False, labels=labels, eval_samples=eval_samples,
                        progress=False)
        det = res.evaluation["int8"]["metrics"]["detection_ap"]
        out[name] = dict(det, seconds=time.perf_counter() - t0, arithmetic=res.evaluation["arithmetic"],
                         calibration_samples=res.samples, algorithm=res.algorithm)
        log("%s INT8 (simulated) AP@0.5 %.3f vs FP32 %.3f, difference CI [%.3f, %.3f] (%.0f s)" % (
            name, det["ap50_int8"], det["ap50_fp32"], det["ap50_diff_ci_low"], det["ap50_diff_ci_high"],
            out[name]["seconds"]))
    return out


def goals(result: Dict[str, Any]) -> Dict[str, Any]:
    """Each goal of the issue, per student: met only if the interval's bound (frames and blocks) is."""
    out: Dict[str, Any] = {}
    gpu = (result.get("gpu") or {}).get("timing", {})
    for name in model_names(result)[1:]:
        ap = result["ap"][name]
        int8 = (result.get("int8") or {}).get(name)
        g = {"h200_batch32_speedup>=1.8": None, "cpu_batch1_speedup>=1.5":
             result["cpu_latency"][name]["speedup_vs_teacher"] >= 1.5,
             "ap50_minus_teacher_ci_low>=-0.03 (frames)": ap["minus_teacher"]["ap50_ci"][0] >= -0.03,
             "ap50_minus_teacher_ci_low>=-0.03 (10-frame blocks)": ap["minus_teacher_blocks"]["ap50_ci"][0] >= -0.03,
             "int8_minus_fp32_ci_low>=-0.02": None if int8 is None else int8["ap50_diff_ci_low"] >= -0.02,
             "int8_minus_fp32_block_ci_low>=-0.02": None if int8 is None or "ap50_diff_block_ci_low" not in int8
             else int8["ap50_diff_block_ci_low"] >= -0.02}
        if "batch32" in gpu and gpu.get("method", "").startswith("CUDA graph") and name in gpu["batch32"] \
                and graphs_sound(gpu["batch32"]):  # the goal's method, and graphs that computed the right thing
            g["h200_batch32_speedup>=1.8"] = gpu["batch32"][name]["speedup_vs_teacher"] >= 1.8
        estimate = (result.get("h200_estimate") or {}).get(name)
        if estimate is not None:  # never the goal itself: a goal needs a measurement
            g["h200_batch32_speedup>=1.8 (ESTIMATE only, not measured)"] = estimate["speedup_b32"] >= 1.8
        out[name] = g
    return out


def graphs_sound(batch: Dict[str, Any]) -> bool:
    """Every replayed graph's output equals the eager forward's (FP16 rounding: 1 % of the output scale)."""
    return all(v.get("graph_vs_eager_max_abs", float("nan")) <= 0.01 * v.get("eager_max_abs", 0.0)
               for k, v in batch.items() if isinstance(v, dict))


def cut_lines(gpu: Dict[str, Any], names: List[str]) -> List[str]:
    """H200 speed of the timing-only cuts (random weights: speed, not accuracy) beside the teacher."""
    b32, b1 = gpu.get("batch32", {}), gpu.get("batch1", {})
    cuts = [n for n in b32 if n not in names and isinstance(b32[n], dict)]
    if not cuts:
        return []
    about = gpu.get("models", {})
    lines = ["H200 timing-only cuts (jetforge L1 prunes, random weights; same run): " + "; ".join(
        "%s %.0fM MACs: b32 %.2fx, b1 %.2fx" % (n, about.get(n, {}).get("macs", float("nan")) / 1e6,
                                               b32[n]["speedup_vs_teacher"], b1.get(n, {}).get("speedup_vs_teacher",
                                                                                             float("nan")))
        for n in sorted(cuts, key=lambda n: -about.get(n, {}).get("macs", 0)))]
    return lines


def table(result: Dict[str, Any]) -> str:
    gpu = (result.get("gpu") or {}).get("timing", {})
    macs = result.get("macs") or ((result.get("gpu") or {}).get("prepare") or {}).get("macs", {})
    sizes = result.get("input_size", {})
    estimates = result.get("h200_estimate") or {}
    lines = ["| detector | input | MACs | H200 b32 FP16 ms/img (x) | H200 b1 ms (x) | CPU ORT b1 ms (x) "
             "| AP@0.5 [95% CI] | minus teacher [CI frames] [CI blocks] | AP@[.5:.95] [CI] | INT8 sim. AP@0.5 (minus FP32 [CI frames] "
             "[CI blocks]) |", "|---" * 10 + "|"]
    for name in ["hog"] + model_names(result):
        ap = result["ap"][name]
        g32, g1 = gpu.get("batch32", {}).get(name), gpu.get("batch1", {}).get(name)
        cpu = result["cpu_latency"].get(name)
        int8 = (result.get("int8") or {}).get(name)
        diff = ap.get("minus_teacher")
        cells = [title(name), "-" if name == "hog" else "%d px" % sizes.get(name, 300),
                 "%.0fM" % (macs[name] / 1e6) if name in macs else "-",
                 "%.4f (%.2fx)" % (g32["ms_per_image"], g32["speedup_vs_teacher"]) if g32 else
                 "est. %.2fx (not measured)" % estimates[name]["speedup_b32"] if name in estimates else "-",
                 "%.3f (%.2fx)" % (g1["ms_per_batch"], g1["speedup_vs_teacher"]) if g1 else "-",
                 "%.1f (%.2fx)" % (cpu["median_ms"], cpu["speedup_vs_teacher"]) if cpu else "-",
                 "%.3f [%.3f, %.3f]" % (ap["ap50"], ap["ap50_ci"][0], ap["ap50_ci"][1]),
                 "%+.3f [%+.3f, %+.3f] [%+.3f, %+.3f]" % (diff["ap50"], diff["ap50_ci"][0], diff["ap50_ci"][1],
                                                           ap["minus_teacher_blocks"]["ap50_ci"][0],
                                                           ap["minus_teacher_blocks"]["ap50_ci"][1]) if diff else "-",
                 "%.3f [%.3f, %.3f]" % (ap["ap"], ap["ap_ci"][0], ap["ap_ci"][1]),
                 "%.3f (%+.3f [%+.3f, %+.3f] [%+.3f, %+.3f])" % (
                     int8["ap50_int8"], int8["ap50_diff"], int8["ap50_diff_ci_low"], int8["ap50_diff_ci_high"],
                     int8.get("ap50_diff_block_ci_low", float("nan")), int8.get("ap50_diff_block_ci_high",
                                                                                 float("nan"))) if int8 else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("H200 timing: %s%s" % (gpu.get("method", "not run"), "" if gpu.get("method", "").startswith(
        "CUDA graph") else " -- NOT the goal's method (CUDA graph); launch-bound, says nothing about the kernels"))
    if gpu.get("method", "").startswith("CUDA graph") and not graphs_sound(gpu.get("batch32", {})):
        lines.append("WARNING: a CUDA graph's output differs from the eager forward's: these timings are not trusted")
    if estimates:
        lines.append("H200 'est.': jetforge's roofline estimate (TensorRT fusion, FP16, H200 profile) of the same "
                     "channel counts at the same input size, benchmarks/detector_students/results/epyc-2core_2026-12-01_resolution-estimate.json; "
                     "it reproduced the measured 1.35x at 300 px, but it is NOT a measurement and no goal is "
                     "claimed from it")
    return "\n".join(lines + cut_lines(gpu, model_names(result)))


def plot(result: Dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gpu = (result.get("gpu") or {}).get("timing", {}).get("batch32", {})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, (what, getter) in zip(axes, (
            ("CPU ONNX Runtime, batch 1, ms (shared 2-core machine)", lambda n: result["cpu_latency"][n]["median_ms"]),
            ("H200 batch 32 FP16, ms per image (%s)" % ("CUDA graph" if result["gpu"]["timing"].get(
                "method", "").startswith("CUDA graph") else "eager, launch-bound"),
             lambda n: gpu[n]["ms_per_image"] if n in gpu else float("nan")))):
        for name, marker in zip(model_names(result), "osD^vP"):
            ap = result["ap"][name]
            x = getter(name)
            ax.errorbar([x], [ap["ap50"]], yerr=[[ap["ap50"] - ap["ap50_ci"][0]], [ap["ap50_ci"][1] - ap["ap50"]]],
                        fmt=marker, capsize=4, label=title(name))
            int8 = (result.get("int8") or {}).get(name)
            if int8:
                ax.plot([x], [int8["ap50_int8"]], marker, mfc="none", color="grey")
        ax.axhline(result["ap"]["hog"]["ap50"], ls=":", color="grey", label="HOG AP@0.5")
        if ax is axes[1] and "teacher" in gpu:  # students no GPU timed: the estimate, drawn as one (hollow, dashed)
            for name, est in (result.get("h200_estimate") or {}).items():
                if name not in gpu and name in result["ap"]:
                    x = gpu["teacher"]["ms_per_image"] / est["speedup_b32"]
                    ax.plot([x], [result["ap"][name]["ap50"]], "^", mfc="none", color="red", ms=9)
                    ax.annotate("%s: ESTIMATE %.2fx,\nnot measured" % (name, est["speedup_b32"]),
                                (x, result["ap"][name]["ap50"]), textcoords="offset points", xytext=(8, -4), fontsize=7)
        ax.set_xlabel(what)
        ax.set_ylabel("person AP@0.5, held-out frames (95% CI)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="lower right")
    fig.suptitle("Distilled SSDLite person detectors: AP against latency (hollow: simulated INT8)")
    fig.tight_layout()
    fig.savefig(str(path), dpi=110)
    plt.close(fig)


def main(argv: Any = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu-dir", required=True, help="folder with student_*.pt and detector_student_gpu.json")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--per-round", type=int, default=4)
    p.add_argument("--resamples", type=int, default=10000)
    p.add_argument("--calib-samples", type=int, default=140, help="all training frames at step 4")
    p.add_argument("--int8-eval-samples", type=int, default=None, help="default: all 94 held-out frames")
    p.add_argument("--no-int8", action="store_true")
    p.add_argument("--out", default=str(result_path(__file__, "students", suffix="")),
                   help="results stem: .json, .txt, .png (default results/<device>_<date>_students)")
    p.add_argument("--report-only", action="store_true", help="rewrite goals, table and plot from the --out JSON")
    p.add_argument("--students", nargs="+", default=list(MODELS[1:]), help="student_<name>.pt files of --gpu-dir")
    p.add_argument("--student-size", action="append", default=[], metavar="NAME=PIXELS",
                   help="a student's input size (default: what detector_student_gpu.json recorded, else 300)")
    p.add_argument("--train-json", action="append", default=[],
                   help="another training run's JSON (e.g. detector_student_lowres_cpu.py's): students' sizes, record")
    p.add_argument("--h200-estimate", action="append", default=[], metavar="NAME=ROW",
                   help="show detector_student_resolution.json's ROW (e.g. jetforge_2.5x@192) as NAME's H200 column, "
                        "labelled an estimate (for a student no GPU has timed)")
    p.add_argument("--int8-models", nargs="+", default=None, help="default: the teacher and every student")
    p.add_argument("--gpu-timing", help="a detector_student_timing.json (e.g. a --time-only run) to use for the "
                                        "H200 columns instead of the one in --gpu-dir's detector_student_gpu.json")
    args = p.parse_args(argv)
    if args.report_only:
        result = json.loads(Path(args.out).with_suffix(".json").read_text())
        if args.gpu_timing:
            result["gpu"]["timing"] = gpu_timing(Path(args.gpu_timing))
        return write_outputs(result, Path(args.out))
    import onnxruntime

    from jetforge.calibrate.metrics import DetectionAPMetric
    from jetforge.compress.distill.detection_student import model_macs

    gpu_dir = Path(args.gpu_dir)
    wall = time.perf_counter()
    sizes = student_sizes(gpu_dir, args.students, args.student_size, args.train_json)
    models, spec, preprocess = load_models(gpu_dir, args.students, sizes)
    paths = export_all(models, spec, preprocess, WORK / "onnx")
    sess = sessions(paths)
    frames, groups = heldout_frames()
    from jetforge.runtime.sidecar import read_sidecar

    # each model decodes with its own sidecar (input size, anchors): what an app does with it
    metrics = {n: DetectionAPMetric(sidecar=read_sidecar(p)) for n, p in paths.items()}
    metric = metrics["teacher"]
    result: Dict[str, Any] = {"machine": {"host": platform.node(), "cpu": platform.processor() or platform.machine(),
                                          "note": "2-core CPU shared with other engineers' jobs; ratios measured "
                                                  "side by side in one run are what counts",
                                          "onnxruntime": onnxruntime.__version__},
                              "gpu": json.loads((gpu_dir / "detector_student_gpu.json").read_text()),
                              "frames": len(frames), "score_threshold": metric.score_threshold,
                              "models": list(models), "input_size": {n: int(m.image_size) for n, m in models.items()},
                              "macs": {n: model_macs(m, m.image_size) for n, m in models.items()}}
    if args.gpu_timing:
        result["gpu"]["timing"] = gpu_timing(Path(args.gpu_timing))
    result["h200_estimate"] = h200_estimates(args.h200_estimate)
    result["training"] = {Path(p).name: json.loads(Path(p).read_text()) for p in args.train_json}
    inputs = {n: metrics[n].preprocess.apply(frames[0].image)[None] for n in sess}
    result["cpu_latency"] = latency(sess, inputs, args.rounds, args.per_round)
    log("CPU latency:", {n: round(v["median_ms"], 1) for n, v in result["cpu_latency"].items()})
    dets = {name: detections(s, metrics[name], frames, metrics[name].preprocess) for name, s in sess.items()}
    result["ap"] = ap_rows(dets, frames, groups, args.resamples)
    hog = ap_rows({"teacher": dets["teacher"], "hog": hog_detections(frames)}, frames, groups, args.resamples)["hog"]
    result["ap"]["hog"] = hog
    if not args.no_int8:
        calib = calibration_frames(WORK / "calibration_frames", step=4)
        chosen = {n: p for n, p in paths.items() if args.int8_models is None or n in args.int8_models}
        result["int8"] = int8_rows(chosen, calib, args.calib_samples, args.int8_eval_samples)
    result["wall_s"] = time.perf_counter() - wall
    return write_outputs(result, Path(args.out))


def gpu_timing(path: Path) -> Dict[str, Any]:
    """The H200 timing of a separate ``--time-only`` run, with where it came from."""
    timing = json.loads(path.read_text())
    timing["source"] = path.name
    return timing


def write_outputs(result: Dict[str, Any], out: Path) -> int:
    """Goals, JSON, table and plot of a finished run."""
    result["goals"] = goals(result)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1, sort_keys=True, default=float))
    text = table(result)
    out.with_suffix(".txt").write_text(text + "\n")
    plot(result, out.with_suffix(".png"))
    log(text)
    log(json.dumps(result["goals"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
