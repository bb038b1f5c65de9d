"""Detection accuracy for one class (people): COCO-style AP with ignored `difficult` boxes, and a paired bootstrap.

**Matching** follows COCO's evaluation (``pycocotools.cocoeval.COCOeval.evaluateImg``) so that
pycocotools is an exact, independent reference: per frame, detections are ranked by score
(stable sort) and the first ``max_dets`` kept; each detection in turn takes the unmatched ground-truth
box of highest IoU >= the threshold, preferring ordinary boxes over `difficult` ones; a detection
matched to a `difficult` box is *ignored* - neither a true nor a false positive - as in PASCAL VOC,
and `difficult` boxes never count as positives to find.  (Like COCO's ignored boxes, a `difficult`
box is taken by one detection; a second detection on it is a false positive.)  IoU is on continuous
coordinates (x1, y1, x2, y2; no +1).

**AP** per IoU threshold is COCO's 101-point interpolated precision: detections of all frames
ranked by score, precision made monotone from the right, read at recall 0, 0.01, ..., 1 (0 where
the recall is never reached) and averaged.  ``ap50`` is AP at IoU 0.5; ``ap`` (AP@[.5:.95]) is
the mean over IoU 0.50, 0.55, ..., 0.95.  With no non-difficult box at all, AP is undefined (NaN).

**Paired bootstrap** (:func:`paired_bootstrap`): the resampling unit is the frame (or a group of
frames given by ``groups``: a cluster bootstrap for frames that are correlated in time); each
resample draws as many units as there are, with replacement, from a ``numpy.random.default_rng(seed)``
generator; both detectors are scored on the *same* resampled frames, and the confidence interval
of AP_a - AP_b (and of each AP) is the percentile interval of the resampled values
(``numpy.percentile``, linear interpolation).  A resampled set is scored exactly as that multiset
of frames would be (each detection weighted by how often its frame was drawn; the copies of one
detection are adjacent in the ranking), without matching anything again.

Pure numpy, no torch; boxes and scores as numpy arrays, one array per frame.
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from jetforge.errors import CalibrationError
from jetforge.progress import progress_bar
from jetforge.vision.boxes import iou_matrix

COCO_IOU_THRESHOLDS = np.round(np.linspace(0.5, 0.95, 10), 2)
RECALL_POINTS = np.linspace(0.0, 1.0, 101)
TP, FP, IGNORED = 1, 0, -1
PROGRESS_APS = 40_000  # AP evaluations (classes x detectors x resamples) from which a bootstrap shows progress


@dataclass
class RankedDetections:
    """Every detection of a set of frames, ranked by score, with its match status per IoU threshold.

    ``status[t, k]`` is 1 (true positive), 0 (false positive) or -1 (ignored: matched a difficult
    box) at ``iou_thresholds[t]``; ``frame[k]`` is the frame the k-th detection came from;
    ``positives[f]`` the number of non-difficult boxes of frame f.
    """

    scores: np.ndarray
    frame: np.ndarray
    status: np.ndarray
    positives: np.ndarray
    iou_thresholds: np.ndarray
    # for resampled_ap, one row per IoU threshold, padded on the right: the frame of each true positive in ranked
    # order (padding: frame len(positives), whose weight resampled_ap sets to 0), of each false positive, how many
    # false positives rank above each true positive, and which entries are true positives rather than padding
    hit_frames: np.ndarray = field(init=False, repr=False)
    miss_frames: np.ndarray = field(init=False, repr=False)
    misses_above: np.ndarray = field(init=False, repr=False)
    real_hits: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        hits = [np.flatnonzero(s == TP) for s in self.status]
        misses = [np.flatnonzero(s == FP) for s in self.status]
        nobody = len(self.positives)

        def padded(rows: List[np.ndarray], fill: int) -> np.ndarray:
            out = np.full((len(rows), max([len(r) for r in rows] + [0])), fill, np.int64)
            for t, r in enumerate(rows):
                out[t, :len(r)] = r
            return out

        self.hit_frames = padded([self.frame[h] for h in hits], nobody)
        self.miss_frames = padded([self.frame[m] for m in misses], nobody)
        self.misses_above = padded([np.searchsorted(m, h) for h, m in zip(hits, misses)], 0)
        self.real_hits = np.arange(self.hit_frames.shape[1])[None, :] < np.array([len(h) for h in hits])[:, None]


@dataclass
class APResult:
    """AP of one detector on a set of frames."""

    ap: float  # mean over the IoU thresholds (AP@[.5:.95] with the COCO thresholds)
    ap50: float  # at IoU 0.5 (NaN if 0.5 is not among the thresholds)
    per_threshold: Dict[float, float]
    positives: int  # non-difficult ground-truth boxes
    detections: int
    frames: int
    ignored: Dict[float, int] = field(default_factory=dict)  # detections matched to difficult boxes

    def to_dict(self) -> Dict[str, object]:
        per_threshold = {"%.2f" % k: v for k, v in self.per_threshold.items()}
        return {"ap": self.ap, "ap50": self.ap50, "per_threshold": per_threshold,
                "positives": self.positives, "detections": self.detections, "frames": self.frames,
                "ignored_at_0.50": self.ignored.get(0.5)}


def _boxes(value: object, what: str, frame: int) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.size == 0:
        return np.zeros((0, 4))
    if arr.ndim != 2 or arr.shape[1] != 4 or not np.all(np.isfinite(arr)):
        raise CalibrationError("%s of frame %d must be finite (N, 4) x1, y1, x2, y2 boxes, got shape %s"
                               % (what, frame, arr.shape), hint="one (N, 4) array per frame")
    if np.any(arr[:, 2] < arr[:, 0]) or np.any(arr[:, 3] < arr[:, 1]):
        raise CalibrationError("%s of frame %d has a box with x2 < x1 or y2 < y1" % (what, frame),
                               hint="boxes are x1, y1, x2, y2 (corners), not x, y, w, h")
    return arr


def _outside(boxes: np.ndarray, height_range: Optional[Tuple[float, float]]) -> np.ndarray:
    """Which boxes' heights (y2 - y1) lie outside ``[low, high)``; none without a range."""
    if height_range is None:
        return np.zeros(len(boxes), dtype=bool)
    h = boxes[:, 3] - boxes[:, 1]
    return (h < height_range[0]) | (h >= height_range[1])


def match_frame(det_boxes: np.ndarray, det_scores: np.ndarray, gt_boxes: np.ndarray, gt_difficult: np.ndarray,
                iou_thresholds: Sequence[float] = COCO_IOU_THRESHOLDS, max_dets: int = 100,
                height_range: Optional[Tuple[float, float]] = None) -> Dict[str, np.ndarray]:
    """One frame: the kept detections' scores (ranked) and their status (T, D) per IoU threshold.

    ``height_range`` ``(low, high)``: AP for people of those heights only, by COCO's area-range rule applied to
    the height: ground-truth boxes outside it are ignored like `difficult` ones, and so is a detection outside it
    that matches nothing (neither a hit nor a false alarm)."""
    gt_difficult = np.asarray(gt_difficult, dtype=bool) | _outside(gt_boxes, height_range)
    order = np.argsort(-det_scores, kind="mergesort")[:max_dets]
    det_boxes, det_scores = det_boxes[order], det_scores[order]
    thresholds = np.asarray(iou_thresholds, dtype=np.float64)
    status = np.full((len(thresholds), len(det_boxes)), FP, dtype=np.int8)
    if len(det_boxes) and len(gt_boxes):  # else nothing to match (a class absent from a frame of a many-class set)
        gt_order = np.argsort(gt_difficult.astype(np.int8), kind="mergesort")  # ordinary boxes first
        gt_boxes, gt_ignore = gt_boxes[gt_order], gt_difficult[gt_order].astype(bool)
        iou = iou_matrix(det_boxes, gt_boxes)
        for t, threshold in enumerate(thresholds):
            taken = np.zeros(len(gt_boxes), dtype=bool)
            for d in range(len(det_boxes)):
                best, match = min(threshold, 1 - 1e-10), -1
                for g in range(len(gt_boxes)):
                    if taken[g]:
                        continue
                    if match > -1 and not gt_ignore[match] and gt_ignore[g]:
                        break  # matched an ordinary box; difficult ones come after and are not preferred
                    if iou[d, g] < best:
                        continue
                    best, match = iou[d, g], g
                if match > -1:
                    taken[match] = True
                    status[t, d] = IGNORED if gt_ignore[match] else TP
    status[(status == FP) & _outside(det_boxes, height_range)[None, :]] = IGNORED
    return {"scores": det_scores, "status": status, "positives": np.int64(np.count_nonzero(~gt_difficult))}


def rank_detections(gt_boxes: Sequence[object], gt_difficult: Optional[Sequence[object]], det_boxes: Sequence[object],
                    det_scores: Sequence[object], iou_thresholds: Sequence[float] = COCO_IOU_THRESHOLDS,
                    max_dets: int = 100, height_range: Optional[Tuple[float, float]] = None) -> RankedDetections:
    """Match every frame's detections to its ground truth and rank all detections by score (``height_range``:
    see :func:`match_frame`)."""
    n = len(gt_boxes)
    if len(det_boxes) != n or len(det_scores) != n or (gt_difficult is not None and len(gt_difficult) != n):
        raise CalibrationError("ground truth for %d frames but detections for %d (scores for %d)"
                               % (n, len(det_boxes), len(det_scores)),
                               hint="give one entry per frame, in the same order")
    scores, frames, statuses, positives = [], [], [], []
    for f in range(n):
        gb = _boxes(gt_boxes[f], "ground-truth boxes", f)
        gd = np.zeros(len(gb), bool) if gt_difficult is None else np.asarray(gt_difficult[f], dtype=bool).reshape(-1)
        db = _boxes(det_boxes[f], "detection boxes", f)
        ds = np.asarray(det_scores[f], dtype=np.float64).reshape(-1)
        if len(gd) != len(gb) or len(ds) != len(db) or not np.all(np.isfinite(ds)):
            raise CalibrationError("frame %d: %d boxes with %d difficult flags, %d detections with %d finite scores"
                                   % (f, len(gb), len(gd), len(db), int(np.isfinite(ds).sum())))
        m = match_frame(db, ds, gb, gd, iou_thresholds, max_dets, height_range)
        scores.append(m["scores"])
        frames.append(np.full(len(m["scores"]), f, dtype=np.int64))
        statuses.append(m["status"])
        positives.append(m["positives"])
    thresholds = np.asarray(iou_thresholds, dtype=np.float64)
    all_scores = np.concatenate(scores) if scores else np.zeros(0)
    order = np.argsort(-all_scores, kind="mergesort")
    status = np.concatenate(statuses, axis=1) if statuses else np.zeros((len(thresholds), 0), np.int8)
    return RankedDetections(scores=all_scores[order], frame=(np.concatenate(frames) if frames else
                                                             np.zeros(0, np.int64))[order],
                            status=status[:, order], positives=np.asarray(positives, dtype=np.int64).reshape(-1),
                            iou_thresholds=thresholds)


def interpolated_ap(tp: np.ndarray, fp: np.ndarray, positives: float) -> float:
    """COCO's 101-point AP from per-detection TP/FP weights in ranked order (ignored ones have 0 and 0)."""
    if positives <= 0:
        return float("nan")
    tp_sum = np.cumsum(tp, dtype=np.float64)
    fp_sum = np.cumsum(fp, dtype=np.float64)
    if len(tp_sum) == 0:
        return 0.0
    recall = tp_sum / positives
    precision = tp_sum / (tp_sum + fp_sum + np.spacing(1))
    precision = np.maximum.accumulate(precision[::-1])[::-1]  # monotone envelope, from the right
    idx = np.searchsorted(recall, RECALL_POINTS, side="left")
    q = np.zeros(len(RECALL_POINTS))
    reached = idx < len(recall)
    q[reached] = precision[idx[reached]]
    return float(q.mean())


def ap_per_threshold(ranked: RankedDetections, weights: Optional[np.ndarray] = None) -> np.ndarray:
    """AP at each IoU threshold; ``weights[f]`` counts frame f that many times (a bootstrap resample)."""
    w_frame = np.ones(len(ranked.positives)) if weights is None else np.asarray(weights, dtype=np.float64)
    w = w_frame[ranked.frame]
    positives = float(np.dot(w_frame, ranked.positives))
    return np.array([interpolated_ap(w * (s == TP), w * (s == FP), positives) for s in ranked.status])


def resampled_ap(ranked: RankedDetections, weights: np.ndarray) -> np.ndarray:
    """:func:`ap_per_threshold` for whole-number frame ``weights`` (a bootstrap resample), the same values from the
    true positives alone, every IoU threshold at once: the bootstrap's inner loop, thousands of times per class.

    Why the same floats: with whole-number weights every running sum is an exact integer in any order.  A recall
    point is first reached at a true positive of non-zero weight (recall 0: at the first detection, whose envelope is
    the largest precision of all).  There the envelope is the largest precision at or below it in the ranking, and a
    detection that is not a true positive never holds more than the last true positive above it (the same true sum,
    at least the same false one; 0 before any).  So the envelope over the true positives alone, from their running
    sums and the false-positive weight ranked above each, is read at the same places; and "recall >= r" is
    "running true sum >= the least whole k with k / positives >= r" (division is monotone), an exact integer search.
    """
    w = np.asarray(weights, dtype=np.float64)
    positives = float(np.dot(w, ranked.positives))
    rows, width = ranked.hit_frames.shape
    if positives <= 0:
        return np.full(rows, np.nan)
    if width == 0:  # no true positive at any threshold: precision 0 wherever a recall is read
        return np.zeros(rows)
    w = np.append(w, 0.0)  # the padding's frame
    tp_sum = np.cumsum(w[ranked.hit_frames], axis=1)
    fp_cum = np.zeros((rows, ranked.miss_frames.shape[1] + 1))
    np.cumsum(w[ranked.miss_frames], axis=1, out=fp_cum[:, 1:])
    fp_sum = np.take_along_axis(fp_cum, ranked.misses_above, axis=1)
    precision = tp_sum / (tp_sum + fp_sum + np.spacing(1))
    precision[~ranked.real_hits] = 0.0  # the padding never raises an envelope
    precision = np.maximum.accumulate(precision[:, ::-1], axis=1)[:, ::-1]
    need = _least_counts(positives)
    span = max(float(tp_sum[:, -1].max()), float(need.max())) + 1.0  # rows apart in one sorted key
    offset = np.arange(rows, dtype=np.float64)[:, None] * span
    idx = np.searchsorted((tp_sum + offset).ravel(), (need[None, :] + offset).ravel(), side="left")
    idx = idx.reshape(rows, len(RECALL_POINTS)) - np.arange(rows)[:, None] * width
    reached = idx < width
    q = np.where(reached, np.take_along_axis(precision, np.minimum(idx, width - 1), axis=1), 0.0)
    return q.mean(axis=1)


def _least_counts(positives: float) -> np.ndarray:
    """For each recall point r, the least whole k with ``k / positives >= r`` as float64 computes it (the recall of
    a running true sum k): within 2 of ceil(r * positives), whatever the rounding of that product."""
    near = np.ceil(RECALL_POINTS * positives)[:, None] + np.array([-2.0, -1.0, 0.0, 1.0])
    ok = near / positives >= RECALL_POINTS[:, None]
    return near[np.arange(len(RECALL_POINTS)), ok.argmax(axis=1)]


def evaluate_ap(gt_boxes: Sequence[object], gt_difficult: Optional[Sequence[object]], det_boxes: Sequence[object],
                det_scores: Sequence[object], iou_thresholds: Sequence[float] = COCO_IOU_THRESHOLDS,
                max_dets: int = 100, height_range: Optional[Tuple[float, float]] = None) -> APResult:
    """AP@[.5:.95] and AP@0.5 of one detector on frames with ground truth (see the module docstring;
    ``height_range``: of the people of those heights only, :func:`match_frame`)."""
    ranked = rank_detections(gt_boxes, gt_difficult, det_boxes, det_scores, iou_thresholds, max_dets, height_range)
    return _result(ranked, ap_per_threshold(ranked))


def _result(ranked: RankedDetections, per_t: np.ndarray) -> APResult:
    thresholds = [round(float(t), 4) for t in ranked.iou_thresholds]
    ap50 = per_t[thresholds.index(0.5)] if 0.5 in thresholds else float("nan")
    return APResult(ap=float(np.mean(per_t)), ap50=float(ap50), per_threshold=dict(zip(thresholds, map(float, per_t))),
                    positives=int(ranked.positives.sum()), detections=int(len(ranked.scores)),
                    frames=int(len(ranked.positives)),
                    ignored={t: int(np.count_nonzero(s == IGNORED)) for t, s in zip(thresholds, ranked.status)})


def paired_bootstrap(gt_boxes: Sequence[object], gt_difficult: Optional[Sequence[object]],
                     detections_a: Sequence[Sequence[object]],
                     detections_b: Optional[Sequence[Sequence[object]]] = None,
                     n_resamples: int = 10000, seed: int = 0, confidence: float = 0.95,
                     groups: Optional[Sequence[object]] = None, iou_thresholds: Sequence[float] = COCO_IOU_THRESHOLDS,
                     max_dets: int = 100, height_range: Optional[Tuple[float, float]] = None) -> Dict[str, object]:
    """Percentile bootstrap CIs of AP@0.5 and AP@[.5:.95] for detector a, b and the paired difference a - b.

    ``detections_a`` / ``detections_b``: (boxes per frame, scores per frame).  Without b, only a's
    intervals are computed.  ``groups``: one label per frame; frames with the same label are drawn
    together (the resampling unit), e.g. blocks of consecutive video frames.  ``height_range``: AP of the people
    of those heights only (:func:`match_frame`).
    """
    if not 0 < confidence < 1 or n_resamples < 1:
        raise CalibrationError("bootstrap needs 0 < confidence < 1 and n_resamples >= 1, got %r and %r"
                               % (confidence, n_resamples))
    ranked = [rank_detections(gt_boxes, gt_difficult, d[0], d[1], iou_thresholds, max_dets, height_range)
              for d in ([detections_a] if detections_b is None else [detections_a, detections_b])]
    n = len(gt_boxes)
    labels = np.arange(n) if groups is None else np.unique(np.asarray(list(groups)), return_inverse=True)[1]
    if len(labels) != n:
        raise CalibrationError("%d group labels for %d frames" % (len(labels), n))
    n_units = int(labels.max()) + 1 if n else 0
    rng = np.random.default_rng(seed)
    thresholds = [round(float(t), 4) for t in ranked[0].iou_thresholds]
    t50 = thresholds.index(0.5) if 0.5 in thresholds else None
    samples = np.zeros((len(ranked), n_resamples, 2))  # detector, resample, (ap50, ap)
    for r in range(n_resamples):
        draws = np.bincount(rng.integers(0, n_units, size=n_units), minlength=n_units)
        weights = draws[labels].astype(np.float64)
        for k, rd in enumerate(ranked):
            per_t = resampled_ap(rd, weights)
            samples[k, r] = (per_t[t50] if t50 is not None else np.nan, np.mean(per_t))
    lo, hi = 100 * (1 - confidence) / 2, 100 * (1 + confidence) / 2

    def interval(values: np.ndarray) -> List[float]:
        return [float(v) for v in np.nanpercentile(values, [lo, hi])]

    full = [_result(rd, ap_per_threshold(rd)) for rd in ranked]
    out: Dict[str, object] = {
        "method": "paired percentile bootstrap", "unit": "frame" if groups is None else "group of frames",
        "units": n_units, "n_resamples": n_resamples, "seed": seed, "confidence": confidence,
        "percentile": "numpy.percentile, linear interpolation",
        "a": {"ap50": full[0].ap50, "ap": full[0].ap, "ap50_ci": interval(samples[0, :, 0]),
              "ap_ci": interval(samples[0, :, 1])},
    }
    if len(ranked) == 2:
        diff = samples[0] - samples[1]
        out["b"] = {"ap50": full[1].ap50, "ap": full[1].ap, "ap50_ci": interval(samples[1, :, 0]),
                    "ap_ci": interval(samples[1, :, 1])}
        out["difference"] = {"ap50": full[0].ap50 - full[1].ap50, "ap": full[0].ap - full[1].ap,
                             "ap50_ci": interval(diff[:, 0]), "ap_ci": interval(diff[:, 1])}
    return out


def class_bootstrap(gt: Tuple[Sequence[object], Optional[Sequence[object]], Sequence[object]],
                    detections_a: Tuple[Sequence[object], Sequence[object], Sequence[object]],
                    detections_b: Optional[Tuple[Sequence[object], Sequence[object], Sequence[object]]],
                    classes: Sequence[int], n_resamples: int = 2000, seed: int = 0, confidence: float = 0.95,
                    groups: Optional[Sequence[object]] = None, progress: bool = False) -> Dict[str, object]:
    """:func:`paired_bootstrap` per class and of the mean over classes (COCO's mAP), on the same resamples.

    ``gt`` is (boxes, difficult, classes) per frame, each detection set (boxes, scores, classes) per frame; AP of
    class ``c`` uses only the boxes of class ``c`` on both sides.  Every resample draws its units once, as
    :func:`paired_bootstrap` does with the same seed, and scores every class on them, so the mean's interval is
    that of the mean (a class with no positive in a resample is left out of that resample's mean, as COCO leaves out
    classes without ground truth).  With one class, the mean is exactly :func:`paired_bootstrap`'s result.
    ``detections_b`` None: one detector's intervals only (``bench --accuracy``), each block then has ``a`` alone,
    the same numbers side ``a`` gets with any ``b`` (the resamples do not depend on the detections).
    ``progress``: a progress bar on stderr when the bootstrap is long (see :func:`class_bootstraps`).
    """
    return class_bootstraps(gt, detections_a, detections_b, classes, [groups], n_resamples, seed, confidence,
                            progress)[0]


def class_bootstraps(gt: Tuple[Sequence[object], Optional[Sequence[object]], Sequence[object]],
                     detections_a: Tuple[Sequence[object], Sequence[object], Sequence[object]],
                     detections_b: Optional[Tuple[Sequence[object], Sequence[object], Sequence[object]]],
                     classes: Sequence[int], groupings: Sequence[Optional[Sequence[object]]],
                     n_resamples: int = 2000, seed: int = 0, confidence: float = 0.95,
                     progress: bool = False) -> List[Dict[str, object]]:
    """:func:`class_bootstrap` once per entry of ``groupings`` (None: frames are the unit; else one group label per
    frame), each with its own generator seeded ``seed``: the same results as separate calls.

    Why together: the matching of every frame's detections (the slow, per-box part on a many-class set) does not
    depend on the resampling unit, so it is done once and only the frame weights change.  ``progress`` shows a bar
    per grouping on stderr when the bootstrap is long (at least :data:`PROGRESS_APS` AP evaluations, classes x
    detectors x resamples, in all), as calibrate's and bench's other long steps do.
    """
    sides = [detections_a] if detections_b is None else [detections_a, detections_b]
    ranked = {c: [rank_detections(*_of_class(gt[0], gt[1], gt[2], c), *_of_class(d[0], d[1], d[2], c))
                  for d in sides] for c in classes}
    t50 = [round(float(t), 4) for t in COCO_IOU_THRESHOLDS].index(0.5)
    full = np.array([[[(lambda p: (p[t50], np.mean(p)))(ap_per_threshold(ranked[c][k]))][0]
                      for k in range(len(sides))] for c in classes])  # (classes, sides, 2)
    show = progress and len(classes) * len(sides) * n_resamples * len(groupings) >= PROGRESS_APS
    lo, hi = 100 * (1 - confidence) / 2, 100 * (1 + confidence) / 2
    results = []
    for groups in groupings:
        n = len(gt[0])
        labels = (np.arange(n) if groups is None else
                  np.unique(np.asarray([str(g) for g in groups]), return_inverse=True)[1])
        n_units = int(labels.max()) + 1 if n else 0
        rng = np.random.default_rng(seed)
        samples = np.full((len(classes), len(sides), n_resamples, 2), np.nan)
        unit = "images" if groups is None else "groups"
        for r in progress_bar(range(n_resamples), desc="bootstrap over " + unit, unit="resample", enabled=show):
            draws = np.bincount(rng.integers(0, n_units, size=n_units), minlength=n_units)
            weights = draws[labels].astype(np.float64)
            for i, c in enumerate(classes):
                for k in range(len(sides)):
                    per_t = resampled_ap(ranked[c][k], weights)
                    samples[i, k, r] = (per_t[t50], np.mean(per_t))
        result: Dict[str, object] = {"classes": {}, "units": n_units, "n_resamples": n_resamples, "seed": seed}
        for i, c in enumerate(classes):
            entry = _block(samples[i], lo, hi)
            _fill(entry, full[i])
            result["classes"][c] = entry  # type: ignore[index]
        with np.errstate(all="ignore"):
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = _block(np.nanmean(samples, axis=0), lo, hi) if len(classes) > 1 else _block(samples[0], lo, hi)
                _fill(mean, np.nanmean(full, axis=0) if len(classes) > 1 else full[0])
        result["mean"] = mean
        results.append(result)
    return results


def _of_class(boxes: Sequence[object], scores_or_flags: Optional[Sequence[object]], labels: Sequence[object],
              c: int) -> Tuple[List[np.ndarray], List[np.ndarray]]:
    """The boxes of class ``c`` in every frame, with their scores (or difficult flags; None: none difficult)."""
    picked_b, picked_s = [], []
    for f, b in enumerate(boxes):
        mask = np.asarray(labels[f]).reshape(-1) == c
        picked_b.append(np.asarray(b, np.float64).reshape(-1, 4)[mask])
        picked_s.append(np.asarray(scores_or_flags[f] if scores_or_flags is not None else
                                   np.zeros(len(mask), bool)).reshape(-1)[mask])
    return picked_b, picked_s


def _block(values: np.ndarray, lo: float, hi: float) -> Dict[str, object]:
    """Intervals of one :func:`class_bootstrap` block; ``values``: (sides, resamples, (ap50, ap)), one side or two."""
    out: Dict[str, object] = {}
    for k, side in enumerate(("a", "b")[:len(values)]):
        out[side] = {"ap50_ci": _interval(values[k, :, 0], lo, hi), "ap_ci": _interval(values[k, :, 1], lo, hi)}
    if len(values) == 2:
        diff = values[0] - values[1]
        out["difference"] = {"ap50_ci": _interval(diff[:, 0], lo, hi), "ap_ci": _interval(diff[:, 1], lo, hi)}
    return out


def _interval(values: np.ndarray, lo: float, hi: float) -> List[float]:
    return [float(v) for v in np.nanpercentile(values, [lo, hi])]


def _fill(entry: Dict[str, object], full: np.ndarray) -> None:
    """Point values into a :func:`class_bootstrap` block: ``full`` is (sides, (ap50, ap)), one side or two."""
    for k, side in enumerate(("a", "b")[:len(full)]):
        entry[side].update({"ap50": float(full[k, 0]), "ap": float(full[k, 1])})  # type: ignore[union-attr]
    if len(full) == 2:
        entry["difference"].update({"ap50": float(full[0, 0] - full[1, 0]),  # type: ignore[union-attr]
                                    "ap": float(full[0, 1] - full[1, 1])})


__all__ = ["APResult", "COCO_IOU_THRESHOLDS", "FP", "IGNORED", "RECALL_POINTS", "RankedDetections", "TP",
           "ap_per_threshold", "class_bootstrap", "class_bootstraps", "evaluate_ap", "interpolated_ap", "match_frame",
           "paired_bootstrap", "rank_detections", "resampled_ap"]
