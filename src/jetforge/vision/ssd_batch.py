"""The SSD host selection (per-class NMS, sort, clip, ``max_total``) for a whole batch of frames at once.

:func:`jetforge.vision.ssd.select_detections` does one frame with about thirty small numpy calls; in
the GPU video path, where the GPU decoder sends back only the few candidates above the threshold, those calls
*are* the host's cost per frame (about 0.2 ms at 16 streams, on the thread that also feeds the GPU).  Here the
same rules run over every frame of a batch together: candidates are sorted once (frame, score descending, lower
anchor first), padded to ``(frames, K)``, the IoU table of each frame is one broadcast ``(frames, K, K)``, and the
greedy pass walks the K columns for all frames at once.  The result is equal, frame by frame, to
``select_detections`` on that frame's candidates (the tests compare them on random and real outputs); frames with
more than ``NMS_TABLE_MAX`` candidates of a class (a very low threshold), or batches whose tables would be too
large, go through the per-frame code instead.
"""

from typing import List, Optional, Tuple

import numpy as np

from jetforge.vision.boxes import NMS_TABLE_MAX, box_corners, suppresses
from jetforge.vision.ssd import SSDSpec, SsdOutput, decode_all, select_detections


# Above this many (frame, box, box) cells the tables' temporaries (~20 bytes a cell) are not worth it: per frame.
TABLE_CELLS_MAX = 1 << 21


def select_detections_batch(boxes: np.ndarray, scores: np.ndarray, frame_of: np.ndarray, frames: int,
                            spec: SSDSpec, threshold: float) -> List[SsdOutput]:
    """One :class:`~jetforge.vision.ssd.SsdOutput` per frame ``0..frames-1`` from candidates of many frames.

    ``boxes`` ``(R, 4)`` and ``scores`` ``(R, classes)`` (no background) are the candidates, ``frame_of`` ``(R,)``
    the frame of each; within a frame, rows must be in anchor order (NMS breaks score ties by the earlier row).
    ``frames`` is the batch's frame count (a frame without candidates gets empty detections).
    """
    boxes = np.asarray(boxes, dtype=np.float32)
    scores = np.asarray(scores, dtype=np.float32)
    frame_of = np.asarray(frame_of, dtype=np.int64)
    if frames == 1:  # nothing to batch: the per-frame code has less set-up
        return [select_detections(boxes, scores, spec, threshold)]
    by_frame = np.argsort(frame_of, kind="stable")  # frame major, the rows' own order kept within a frame
    boxes, scores, frame_of = boxes[by_frame], scores[by_frame], frame_of[by_frame]
    bounds = np.searchsorted(frame_of, np.arange(frames + 1))
    picks = []
    for c in range(scores.shape[1]):
        picked = _class_nms(boxes, scores[:, c], frame_of, frames, spec, threshold)
        if picked is None:  # too many candidates for one table: the per-frame code, frame by frame
            return [select_detections(boxes[a:b], scores[a:b], spec, threshold)
                    for a, b in zip(bounds[:-1], bounds[1:])]
        picks.append(picked + (np.full(len(picked[0]), c, np.int64),))
    return _merge(picks, boxes, scores, frame_of, frames, spec)


def _class_nms(boxes: np.ndarray, scores: np.ndarray, frame_of: np.ndarray, frames: int, spec: SSDSpec,
               threshold: float) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """Rows kept by greedy NMS of one class, per frame: (rows, rank in the frame's keep order), or None when a
    frame has more than ``NMS_TABLE_MAX`` candidates."""
    rows = np.flatnonzero(scores > threshold)
    if not len(rows):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    # frame, then score descending, then the earlier row: TensorFlow's candidate order within each frame
    rows = rows[np.lexsort((rows, -scores[rows], frame_of[rows]))]
    frame = frame_of[rows]
    start = np.searchsorted(frame, np.arange(frames))
    rank = np.arange(len(rows)) - start[frame]
    k = int(rank.max()) + 1
    if k > NMS_TABLE_MAX or frames * k * k > TABLE_CELLS_MAX:
        return None
    slot = np.full((frames, k), -1, np.int64)
    slot[frame, rank] = rows
    valid = slot >= 0
    b = boxes[np.where(valid, slot, 0)]  # (frames, k, 4); padding reads row 0 and is masked below
    corners = box_corners(b)
    table = suppresses(tuple(c[:, :, None] for c in corners), tuple(c[:, None, :] for c in corners),  # type: ignore
                       spec.iou_threshold)  # (frames, k, k): box i suppresses box j
    removed = ~valid
    kept = np.zeros((frames, k), bool)
    count = np.zeros(frames, np.int64)
    for i in range(k):
        take = ~removed[:, i] & (count < spec.max_per_class)
        kept[:, i] = take
        count += take
        removed |= take[:, None] & table[:, i, :]
    f, r = np.nonzero(kept)
    return slot[f, r], r


def _merge(picks: list, boxes: np.ndarray, scores: np.ndarray, frame_of: np.ndarray, frames: int,
           spec: SSDSpec) -> List[SsdOutput]:
    """The kept rows of every class -> per frame: score descending (ties: class, then keep order), clipped,
    empty boxes dropped, at most ``max_total``."""
    rows = np.concatenate([p[0] for p in picks])
    rank = np.concatenate([p[1] for p in picks])
    cls = np.concatenate([p[2] for p in picks])
    s = scores[rows, cls]
    frame = frame_of[rows]
    order = np.lexsort((rank, cls, -s, frame))
    rows, cls, s, frame = rows[order], cls[order], s[order], frame[order]
    b = np.clip(boxes[rows], 0.0, 1.0).astype(np.float32)  # the clip window [0, 0, 1, 1]
    nonempty = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]) > 0
    b, s, cls, frame = b[nonempty], s[nonempty], cls[nonempty], frame[nonempty]
    bounds = np.searchsorted(frame, np.arange(frames + 1))
    labels = tuple(spec.labels)
    out = []
    for a, e in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        e = min(e, a + spec.max_total)
        out.append(SsdOutput(b[a:e], s[a:e], cls[a:e], labels))
    return out


def postprocess_batch(box_encodings: np.ndarray, class_logits: np.ndarray, spec: SSDSpec,
                      score_threshold: Optional[float] = None, anchors: Optional[np.ndarray] = None) -> List[SsdOutput]:
    """:func:`jetforge.vision.ssd.postprocess` with the selection done for all frames at once: equal
    results.  Worth it for batches at a threshold that leaves few candidates (the GPU video path)."""
    boxes_all, scores_all, threshold = decode_all(box_encodings, class_logits, spec, score_threshold, anchors)
    # only anchors above the threshold for some class can be kept; (frame, anchor) order as NMS needs it
    frame, anchor = np.nonzero(np.any(scores_all > threshold, axis=-1))
    return select_detections_batch(boxes_all[frame, anchor], scores_all[frame, anchor], frame, len(boxes_all), spec,
                                   threshold)


__all__ = ["postprocess_batch", "select_detections_batch"]
