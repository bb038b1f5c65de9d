"""Detection on zoomed, overlapping tiles of a frame as well as the whole frame (slicing-aided inference).

Why: a 300x300 SSD sees a 768x576 frame shrunk 2.6x across; people 40-90 px tall become 15-35 px and many are
missed.  Running the same model on a ``grid x grid`` set of overlapping tiles (each ``side`` of the frame's
side) shows them ``1 / side`` times larger; merged with the whole frame's detections, the SSDLite person
detector's AP@0.5 on the labelled held-out frames rises from 0.72 to about 0.84 (``benchmarks/
detector_ap_by_size.py``), at ``1 + grid^2`` times the inference work.  The distillation of small students
uses the same tiles (``jetforge.compress.distill.detection_tiles``, the torch side, batched on the GPU) to give
the student a sharper teacher; the people app uses :func:`merge_tiled` (``--detector-tiles``).

Merging (both sides):

- a tile box touching one of the tile's **inner** edges (an edge that is not the frame's; within ``edge``
  of the tile's side) is dropped: it is a person cut by the tile, and since tiles overlap by more than a
  person is wide, the neighbouring tile or the whole frame sees that person whole;
- the rest, mapped into the frame, go through one greedy NMS at ``merge_iou`` with the frame's own boxes.

Torch-free: numpy only (the device side).
"""

from typing import Any, List, Sequence, Tuple

import numpy as np

from jetforge.errors import ConfigError
from jetforge.runtime.detection import nms

MAX_TILE_GRID = 4  # 1 + 16 inferences a frame; beyond that a larger input is the better tool


def tile_rects(grid: int, side: float) -> np.ndarray:
    """``(grid * grid, 4)`` tiles ``[y0, x0, y1, x1]`` (fractions of the frame), row by row, spread evenly.

    Neighbouring tiles overlap by ``side - (1 - side) / (grid - 1)`` of the frame (``2 * side - 1`` for a
    2x2 grid); ``side`` must leave an overlap (``side > 1 / grid``) and be a real zoom (``side < 1``).
    """
    if int(grid) != grid or grid < 2:
        raise ConfigError("tiles need a grid of at least 2x2, got %r" % (grid,), hint="e.g. 2 (a 2x2 grid)")
    if not 1.0 / grid < side < 1.0:
        raise ConfigError("a tile's side must be between 1/%d of the frame (no overlap) and 1 (no zoom), got %r"
                          % (grid, side), hint="e.g. 0.6 for a 2x2 grid")
    starts = np.linspace(0.0, 1.0 - side, int(grid))
    return np.array([[y, x, y + side, x + side] for y in starts for x in starts], dtype=np.float64)


def tile_pixels(shape: Sequence[int], rect: Sequence[float]) -> Tuple[int, int, int, int]:
    """``(y0, x0, y1, x1)`` pixel bounds of the ``rect`` fraction of an image of ``shape`` (at least 1 px each way).

    Tile edges are rounded to whole pixels, as the training views, the apps and the benchmarks cut them.
    """
    h, w = int(shape[0]), int(shape[1])
    y0, y1 = int(round(rect[0] * h)), int(round(rect[2] * h))
    x0, x1 = int(round(rect[1] * w)), int(round(rect[3] * w))
    return y0, x0, max(y1, y0 + 1), max(x1, x0 + 1)


def cut_tile(image: Any, rect: Sequence[float]) -> Any:
    """The ``rect`` fraction of an ``(H, W, ...)`` image (numpy or torch), a view, not a copy."""
    y0, x0, y1, x1 = tile_pixels(image.shape, rect)
    return image[y0:y1, x0:x1]


def merge_tiled(frame_shape: Sequence[int], rects: np.ndarray, boxes: Sequence[np.ndarray],
                scores: Sequence[np.ndarray], edge: float = 0.01, merge_iou: float = 0.5,
                max_output: int = 100) -> Tuple[np.ndarray, np.ndarray]:
    """One frame's detections from its own and its tiles': ``boxes[0]`` / ``scores[0]`` are the whole frame's
    (``x1, y1, x2, y2`` frame pixels), ``boxes[1 + k]`` tile ``k``'s in that tile's pixels.  Returns the merged
    ``(K, 4)`` boxes in frame pixels and ``(K,)`` scores, best first (module docstring)."""
    if len(boxes) != 1 + len(rects) or len(scores) != len(boxes):
        raise ValueError("merge_tiled needs the frame's detections and one set per tile (%d tiles), got %d / %d"
                         % (len(rects), len(boxes), len(scores)))
    h, w = int(frame_shape[0]), int(frame_shape[1])
    all_boxes: List[np.ndarray] = [np.asarray(boxes[0], np.float64).reshape(-1, 4)]
    all_scores: List[np.ndarray] = [np.asarray(scores[0], np.float64).reshape(-1)]
    for rect, b, s in zip(rects, boxes[1:], scores[1:]):
        y0, x0, y1, x1 = tile_pixels((h, w), rect)
        b = np.asarray(b, np.float64).reshape(-1, 4)
        s = np.asarray(s, np.float64).reshape(-1)
        mx, my = edge * (x1 - x0), edge * (y1 - y0)
        cut = np.zeros(len(b), dtype=bool)
        if x0 > 0:
            cut |= b[:, 0] < mx
        if y0 > 0:
            cut |= b[:, 1] < my
        if x1 < w:
            cut |= b[:, 2] > (x1 - x0) - mx
        if y1 < h:
            cut |= b[:, 3] > (y1 - y0) - my
        all_boxes.append(b[~cut] + np.array([x0, y0, x0, y0], dtype=np.float64))
        all_scores.append(s[~cut])
    merged_boxes, merged_scores = np.concatenate(all_boxes), np.concatenate(all_scores)
    keep = nms(merged_boxes, merged_scores, merge_iou, -np.inf, max_output)
    return merged_boxes[keep], merged_scores[keep]


__all__ = ["MAX_TILE_GRID", "cut_tile", "merge_tiled", "tile_pixels", "tile_rects"]
