"""Where the distilled person detectors lose AP: person AP@0.5 by the person's height in the frame.

Why: the students that run at a smaller input (192 / 224 px instead of 300) lose about 0.06 AP on the held-out
labelled frames.  If the loss sits in the smallest people (vtest.avi's people are ~40-120 px tall in a 576-px frame:
~13-40 px at 192 px), more training cannot bring it back and the input size is the limit; if it is spread over all
sizes, the students are still training-limited.  This script measures it, without any GPU.

AP per height bin follows COCO's area ranges (``height_range`` of ``jetforge.calibrate.detection_metrics``):
ground-truth people outside the bin are *ignored* (a detection on one is neither a true nor a false positive), and
an unmatched detection whose own height is outside the bin is ignored too; AP@0.5 is COCO's 101-point AP, with a
frame bootstrap interval and, for a student, the paired interval of its difference from the teacher.  The models are the ONNX bodies that
``benchmarks/detector_students/detector_student.py`` exported (teacher and students, each with its sidecar: input size and anchors),
decoded exactly as that benchmark decodes them (score >= 0.01, the model's NMS).

    .venv/bin/python benchmarks/detector_students/detector_ap_by_size.py --onnx-dir build/detector_student_cpu/onnx \\
        --models teacher teacher_tiled teacher_tiled_app jetforge jf192 jf224        # ~4 min on 2 cores

``teacher_tiled`` is not a model file but the **targets the tiled students learned from**: the teacher's ONNX
body on each whole frame and on a 2x2 grid of zoomed tiles (0.6 of the frame's side), merged by exactly the
training code (:meth:`jetforge.compress.distill.detection_crossgrid.CrossGridTargets.tiled_teacher_boxes`:
each input's NMS, tile boxes cut by an inner tile edge dropped, NMS over the union) -- five teacher passes a
frame.  It shows what a student distilled from it can at most learn.  ``teacher_tiled_app`` is the same idea as the
people app runs it (``--detector-tiles 2``: :class:`jetforge.apps.tasks.detectors.tiled.TiledPeopleDetector`, the
host merge of :func:`jetforge.runtime.tiles.merge_tiled`: greedy NMS, margins in tile pixels) at this benchmark's
score floor (0.01).

Writes ``benchmarks/detector_students/results/<device>_<date>_ap-by-size.{json,txt}``.
"""

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import result_path, use_checkout  # noqa: E402

use_checkout()

HERE = Path(__file__).resolve().parent

# person height in frame pixels (vtest.avi and the other clips are 576 / 288 / 144 px high: bins by fraction of the
# frame height would mix clips; pixels are what the network sees after the same resize)
BINS = ((0.0, 1e9), (0.0, 60.0), (60.0, 90.0), (90.0, 130.0), (130.0, 1e9))  # the first: all heights
TILES = (2, 0.6)  # teacher_tiled: grid, side (what detector_student_gpu.py --teacher-tiles 2 trained with)
RESAMPLES = 2000
# AP at looser IoU too (no interval): a detector that finds a person but boxes it loosely gains there, one that
# misses the person does not -- it tells a localisation loss from a recall loss
LOOSE_IOU = (0.3, 0.4)


def heights(boxes: np.ndarray) -> np.ndarray:
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    return b[:, 3] - b[:, 1]


def model_file(name: str) -> str:
    """The ONNX file a row reads (``teacher_tiled`` is the teacher run on tiles)."""
    return "teacher" if name in ("teacher_tiled", "teacher_tiled_app") else name


def tiled_teacher_detections(sess: Any, metric: Any, frames: List[Any]) -> Tuple[List[np.ndarray], List[np.ndarray]]:
    """The teacher on each frame and its tiles, merged by the training code (module docstring), in frame pixels."""
    import torch

    from jetforge.compress.distill.detection_crossgrid import CrossGridConfig, CrossGridTargets
    from jetforge.vision.tiles import cut_tile

    merge = CrossGridTargets(metric.spec, metric.spec, CrossGridConfig(tile_grid=TILES[0], tile_side=TILES[1]))
    name = sess.get_inputs()[0].name
    boxes, scores = [], []
    for frame in frames:
        crops = [frame.image] + [cut_tile(frame.image, rect) for rect in merge.tiles]
        outs = [sess.run(None, {name: metric.preprocess.apply(crop)[None]}) for crop in crops]
        enc, logits = (torch.from_numpy(np.concatenate([o[metric.order[i]] for o in outs])) for i in range(2))
        b, s, valid = merge.tiled_teacher_boxes(enc[:1], logits[:1], enc[1:], logits[1:], torch.tensor([False]))
        h, w = frame.image.shape[:2]
        yx = b[0, valid[0]].numpy().astype(np.float64)
        boxes.append(yx[:, [1, 0, 3, 2]] * np.array([w, h, w, h], dtype=np.float64))
        scores.append(s[0, valid[0]].numpy().astype(np.float64))
    return boxes, scores


def app_tiled_detections(path: Path, metric: Any, frames: List[Any]) -> Tuple[List[np.ndarray], List[np.ndarray]]:
    """The people app's ``--detector-tiles`` detector on every frame (boxes in frame pixels)."""
    from jetforge.vision.ssd_detector import SsdPeopleDetector
    from jetforge.vision.tiles import TiledPeopleDetector

    with TiledPeopleDetector(SsdPeopleDetector(path, threads=2, score_threshold=metric.score_threshold),
                             grid=TILES[0], side=TILES[1]) as detector:
        found = [detector(frame.image) for frame in frames]
    return [d.boxes.astype(np.float64) for d in found], [d.scores.astype(np.float64) for d in found]


def run(onnx_dir: Path, models: List[str]) -> Dict[str, Any]:
    import onnxruntime as ort

    from jetforge.vision.detection_metrics import evaluate_ap, paired_bootstrap
    from jetforge.calibrate.metrics import DetectionAPMetric
    from jetforge.runtime.sidecar import read_sidecar
    from detector_student import detections, heldout_frames

    frames, _ = heldout_frames()
    gt = [f.boxes for f in frames]
    difficult = [f.difficult for f in frames]
    all_h = np.concatenate([heights(g)[~np.asarray(d, bool)] for g, d in zip(gt, difficult)])
    result: Dict[str, Any] = {"frames": len(frames), "bins_px": [list(b) for b in BINS],
                              "people_per_bin": [int(((all_h >= lo) & (all_h < hi)).sum()) for lo, hi in BINS],
                              "models": {}, "input_size": {}}
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    dets = {}
    for name in models:
        path = onnx_dir / ("%s.onnx" % model_file(name))
        metric = DetectionAPMetric(sidecar=read_sidecar(path))
        sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        if name == "teacher_tiled":
            dets[name] = tiled_teacher_detections(sess, metric, frames)
        elif name == "teacher_tiled_app":
            dets[name] = app_tiled_detections(path, metric, frames)
        else:
            dets[name] = detections(sess, metric, frames, metric.preprocess)
        result["input_size"][name] = int(metric.preprocess.height)
    for name in models:
        rows = []
        for low, high in BINS:
            other = dets.get("teacher") if name != "teacher" else None  # paired with the single-pass teacher
            boot = paired_bootstrap(gt, difficult, dets[name], other, n_resamples=RESAMPLES,
                                    iou_thresholds=(0.5,), height_range=(low, high))
            loose = evaluate_ap(gt, difficult, *dets[name], iou_thresholds=LOOSE_IOU, height_range=(low, high))
            row = {"ap50": boot["a"]["ap50"], "ci": boot["a"]["ap50_ci"],
                   "ap_loose": {"%.1f" % t: v for t, v in loose.per_threshold.items()}}
            if other is not None:
                row["minus_teacher"], row["minus_teacher_ci"] = (boot["difference"]["ap50"],
                                                                 boot["difference"]["ap50_ci"])
            rows.append(row)
        result["models"][name] = rows
        print("%-10s %s" % (name, "  ".join("%.3f" % r["ap50"] for r in rows)), flush=True)
    return result


def table(result: Dict[str, Any]) -> str:
    bins = ["all (%d people)" % n if (lo, hi) == (0, 1e9) else "%d-%s px (%d people)" % (
        lo, "" if hi > 1e8 else "%d" % hi, n) for (lo, hi), n in zip(result["bins_px"], result["people_per_bin"])]
    lines = ["| model | input | " + " | ".join(bins) + " |", "|---|---|" + "---|" * len(bins)]
    for name, rows in result["models"].items():
        cells = []
        for r in rows:
            cell = "%.3f [%.3f, %.3f]" % (r["ap50"], r["ci"][0], r["ci"][1])
            if "minus_teacher" in r:
                cell += " (%+.3f [%+.3f, %+.3f])" % ((r["minus_teacher"],) + tuple(r["minus_teacher_ci"]))
            cells.append(cell)
        passes = " (+ %d tiles)" % (TILES[0] ** 2) if name.startswith("teacher_tiled") else ""
        lines.append("| %s | %d px%s | %s |" % (name, result["input_size"][name], passes, " | ".join(cells)))
    lines += ["", "AP at IoU 0.3 / 0.4 / 0.5 (no interval): a loss at 0.5 that is not there at 0.3 is loose boxes, "
              "not missed people", "", "| model | " + " | ".join(bins) + " |", "|---|" + "---|" * len(bins)]
    for name, rows in result["models"].items():
        cells = ["%.3f / %.3f / %.3f" % (r["ap_loose"]["0.3"], r["ap_loose"]["0.4"], r["ap50"]) for r in rows]
        lines.append("| %s | %s |" % (name, " | ".join(cells)))
    return "\n".join(lines)


def main(argv: Any = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--onnx-dir", default=str(HERE.parents[1] / "build" / "detector_student_cpu" / "onnx"))
    p.add_argument("--models", nargs="+",
                   default=["teacher", "teacher_tiled", "teacher_tiled_app", "jetforge", "jf192", "jf224"])
    p.add_argument("--out", default=str(result_path(__file__, "ap-by-size", suffix="")),
                   help="results stem: .json and .txt (default results/<device>_<date>_ap-by-size)")
    args = p.parse_args(argv)
    files = sorted({model_file(m) for m in args.models})
    missing = [m for m in files if not (Path(args.onnx_dir) / ("%s.onnx" % m)).is_file()]
    if missing:
        print("error: no %s in %s; run benchmarks/detector_students/detector_student.py first (it exports them)"
              % (", ".join("%s.onnx" % m for m in missing), args.onnx_dir), file=sys.stderr)
        return 1
    start = time.perf_counter()
    result = run(Path(args.onnx_dir), args.models)
    result["wall_s"] = time.perf_counter() - start
    result["method"] = ("COCO area-range rule on person height: ground truth outside the bin ignored, unmatched "
                        "detections outside the bin ignored; AP@0.5 101-point; 95 %% paired frame bootstrap, %d "
                        "resamples" % RESAMPLES)
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    text = table(result)
    out.with_suffix(".txt").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
