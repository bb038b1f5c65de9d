"""Box geometry: jetforge's one IoU, its one greedy NMS, and the greedy IoU matching of the tracker.

A box is four corners ``c0, c1, c2, c3``: ``x1, y1, x2, y2`` in pixels everywhere in jetforge, except inside the SSD
decoder, whose boxes stay in its own normalised ``[ymin, xmin, ymax, xmax]`` (:mod:`jetforge.vision.ssd`).  The
formulas below only ever pair ``c0`` with ``c2`` and ``c1`` with ``c3``, and every product they form is of one
``c0/c2`` factor and one ``c1/c3`` factor (a commutative float product), so both layouts give the same overlap bit
for bit.

**IoU** (:func:`iou_matrix`, and the ``"iou"`` overlap of :func:`nms`): ``inter = max(min(c2) - max(c0), 0) *
max(min(c3) - max(c1), 0)``, ``area = (c2 - c0) * (c3 - c1)``, ``IoU = inter / (area_a + area_b - inter)``.
:func:`iou_matrix` computes it for every pair in float64, 0 where the union is empty (the tracker, the faces app,
the AP metrics).

**Greedy NMS** (:func:`nms`): candidates are taken from the highest score down; each kept box removes the later
ones it overlaps by more than the threshold.  Two overlaps:

* ``overlap="iou"`` -- TensorFlow's ``non_max_suppression`` rules, which the SSD decoder reproduces exactly: float32,
  each box's corners sorted, a pair suppresses only when its IoU is above the threshold and both boxes have a
  positive area (a NaN IoU never suppresses), equal scores in index order, only scores above ``score_threshold``
  take part.  For boxes with ``c2 >= c0`` and ``c3 >= c1`` this is also ``torchvision.ops.nms`` (MTCNN's PNet and
  RNet stages) and OpenCV's ``cv2.dnn.NMSBoxes`` on HOG's integer windows (``tests/vision/test_boxes.py``);
* ``overlap="min"`` -- facenet-pytorch's ``nms_numpy(..., "Min")``, MTCNN's last stage: inclusive pixel corners
  (+1 on every width and height), overlap = intersection over the *smaller* area, a box is kept only when its
  overlap is at most the threshold (so a NaN overlap suppresses), and equal scores the *later* box first (facenet
  walks a stable ascending sort from its end).

Up to ``NMS_TABLE_MAX`` candidates every pair's overlap is computed at once and the greedy pass runs in plain
Python over that table; above it each kept box's row is computed in its round.  Both give the same indices.
Pure numpy, Python 3.8.
"""

from typing import List, Optional, Tuple

import numpy as np

from jetforge.errors import ConfigError

# Up to this many candidates NMS computes every pair's overlap at once and then runs the greedy pass in plain
# Python over that table (a handful of numpy calls in all: the people app's frames have ~6 candidates, and
# per-kept-box numpy rounds were most of the host postprocess at 16 GPU streams); above it, the table would
# cost n^2 memory and time, so each kept box's row is computed in its round instead.
NMS_TABLE_MAX = 256
OVERLAPS = ("iou", "min")

Corners = Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def box_corners(boxes: np.ndarray, dtype: type = np.float32, sort: bool = True, pixel: int = 0) -> Corners:
    """``(c0, c1, c2, c3, area)`` of ``(..., 4)`` boxes in ``dtype``: corners sorted (``c0 <= c2``, ``c1 <= c3``) unless
    ``sort=False``; ``pixel=1`` takes them as inclusive pixel indices (a box from 3 to 5 is 3 wide)."""
    b = np.asarray(boxes, dtype=dtype)
    if b.size == 0:
        b = b.reshape(b.shape[:-1] + (4,) if b.ndim > 1 else (0, 4))
    if sort:
        c0, c1 = np.minimum(b[..., 0], b[..., 2]), np.minimum(b[..., 1], b[..., 3])
        c2, c3 = np.maximum(b[..., 0], b[..., 2]), np.maximum(b[..., 1], b[..., 3])
    else:
        c0, c1, c2, c3 = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    if pixel:
        return c0, c1, c2, c3, (c2 - c0 + pixel) * (c3 - c1 + pixel)
    return c0, c1, c2, c3, (c2 - c0) * (c3 - c1)


def intersection(first: Corners, others: Corners, pixel: int = 0) -> np.ndarray:
    """The intersection area of boxes given as :func:`box_corners` tuples (shapes broadcast)."""
    c0, c1, c2, c3, _ = first
    o0, o1, o2, o3, _ = others
    side0 = np.minimum(c2, o2) - np.maximum(c0, o0)
    side1 = np.minimum(c3, o3) - np.maximum(c1, o1)
    if pixel:
        side0, side1 = side0 + pixel, side1 + pixel
    return np.maximum(side0, 0) * np.maximum(side1, 0)


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box in ``a`` (N, 4) with every box in ``b`` (M, 4), float64; 0 where the union is empty."""
    first = tuple(c[:, None] for c in box_corners(np.asarray(a).reshape(-1, 4), np.float64, sort=False))
    others = tuple(c[None, :] for c in box_corners(np.asarray(b).reshape(-1, 4), np.float64, sort=False))
    if first[0].shape[0] == 0 or others[0].shape[1] == 0:
        return np.zeros((first[0].shape[0], others[0].shape[1]))
    inter = intersection(first, others)  # type: ignore[arg-type]
    union = first[4] + others[4] - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


def suppresses(first: Corners, others: Corners, threshold: float, overlap: str = "iou") -> np.ndarray:
    """Whether each box of ``first`` suppresses each of ``others`` (:func:`box_corners` tuples, shapes broadcast),
    by the ``overlap`` rule of :func:`nms` (module docstring)."""
    if overlap == "min":
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = intersection(first, others, pixel=1) / np.minimum(first[4], others[4])
        return ~(ratio <= threshold)
    area, oarea = first[4], others[4]
    inter = intersection(first, others)
    with np.errstate(invalid="ignore", divide="ignore"):
        iou = inter / (area + oarea - inter)
    return (iou > threshold) & (area > 0) & (oarea > 0)


def nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float, score_threshold: Optional[float] = None,
        max_output: Optional[int] = None, overlap: str = "iou", classes: Optional[np.ndarray] = None) -> np.ndarray:
    """Indices kept by greedy NMS, best first (module docstring for the two ``overlap`` rules).

    ``score_threshold``: only scores above it take part (None: every box); ``max_output``: at most this many kept
    (None: no limit).  Computed in float32, as TensorFlow's kernel does.  ``classes`` (one integer per box): class-aware
    NMS, a box suppresses only boxes of its own class (``torchvision.ops.batched_nms``); the classes' kept boxes are
    merged by score (equal scores: lower index first) before ``max_output`` applies.
    """
    if overlap not in OVERLAPS:
        raise ConfigError("unknown NMS overlap %r" % (overlap,), hint="use %s" % " or ".join(OVERLAPS))
    if classes is not None:
        return _nms_per_class(boxes, scores, iou_threshold, score_threshold, max_output, overlap, classes)
    scores = np.asarray(scores)
    candidates = (np.arange(len(scores)) if score_threshold is None
                  else np.flatnonzero(scores > score_threshold))
    if overlap == "min":  # facenet: a stable ascending sort walked from its end (equal scores: the later first)
        order = candidates[np.argsort(scores[candidates], kind="stable")[::-1]]
    else:
        order = candidates[np.argsort(-scores[candidates], kind="stable")]
    limit = len(order) if max_output is None else int(max_output)
    if not len(order) or limit <= 0:
        return np.zeros(0, dtype=np.int64)
    corners = box_corners(np.asarray(boxes, dtype=np.float32).reshape(-1, 4)[order],
                          pixel=1 if overlap == "min" else 0)
    if len(order) <= NMS_TABLE_MAX:
        return _nms_table(order, corners, iou_threshold, limit, overlap)
    return _nms_rounds(order, corners, iou_threshold, limit, overlap)


def _nms_per_class(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float, score_threshold: Optional[float],
                   max_output: Optional[int], overlap: str, classes: np.ndarray) -> np.ndarray:
    """Greedy NMS within each class, the survivors merged by score (the ``classes`` option of :func:`nms`)."""
    labels = np.asarray(classes).reshape(-1)
    scores = np.asarray(scores)
    if len(labels) != len(scores):
        raise ConfigError("class-aware NMS got %d classes for %d boxes" % (len(labels), len(scores)))
    boxes = np.asarray(boxes).reshape(-1, 4)
    kept = [np.flatnonzero(labels == c)[nms(boxes[labels == c], scores[labels == c], iou_threshold, score_threshold,
                                             max_output, overlap)] for c in np.unique(labels)]
    keep = np.concatenate(kept) if kept else np.zeros(0, np.int64)
    keep = keep[np.lexsort((keep, -scores[keep].astype(np.float64)))]
    return keep[:max_output].astype(np.int64) if max_output is not None else keep.astype(np.int64)


def _nms_table(order: np.ndarray, corners: Corners, threshold: float, max_output: int, overlap: str) -> np.ndarray:
    table = suppresses(tuple(c[:, None] for c in corners), corners, threshold,  # type: ignore[arg-type]
                       overlap).tolist()
    ids = order.tolist()
    keep: List[int] = []
    removed = [False] * len(ids)
    for i, row in enumerate(table):
        if removed[i]:
            continue
        keep.append(ids[i])
        if len(keep) == max_output:
            break
        removed = [r or s for r, s in zip(removed, row)]
    return np.asarray(keep, dtype=np.int64)


def _nms_rounds(order: np.ndarray, corners: Corners, threshold: float, max_output: int, overlap: str) -> np.ndarray:
    keep: List[int] = []
    while len(order) and len(keep) < max_output:
        keep.append(int(order[0]))
        survive = ~suppresses(tuple(c[:1] for c in corners), tuple(c[1:] for c in corners),  # type: ignore[arg-type]
                              threshold, overlap)
        order = order[1:][survive]
        corners = tuple(c[1:][survive] for c in corners)  # type: ignore[assignment]
    return np.asarray(keep, dtype=np.int64)


def greedy_match(iou: np.ndarray, threshold: float) -> Tuple[List[Tuple[int, int]], List[int], List[int]]:
    """Pairs (row, col) by decreasing IoU, each at least ``threshold``; then unmatched rows and cols."""
    rows, cols = iou.shape
    pairs: List[Tuple[int, int]] = []
    if rows and cols:
        order = np.argsort(-iou, axis=None, kind="stable")
        used_r, used_c = set(), set()
        for flat in order:
            r, c = divmod(int(flat), cols)
            if iou[r, c] < threshold:
                break
            if r in used_r or c in used_c:
                continue
            used_r.add(r)
            used_c.add(c)
            pairs.append((r, c))
    matched_r = {r for r, _ in pairs}
    matched_c = {c for _, c in pairs}
    return pairs, [r for r in range(rows) if r not in matched_r], [c for c in range(cols) if c not in matched_c]


__all__ = ["NMS_TABLE_MAX", "OVERLAPS", "box_corners", "greedy_match", "intersection", "iou_matrix", "nms",
           "suppresses"]
