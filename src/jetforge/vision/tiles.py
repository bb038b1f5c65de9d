"""Detection on zoomed, overlapping tiles of a frame as well as the whole frame (slicing-aided inference).

Why: a 300x300 SSD sees a 768x576 frame shrunk 2.6x across; people 40-90 px tall become 15-35 px and many are
missed.  Running the same model on a ``grid x grid`` set of overlapping tiles (each ``side`` of the frame's
side) shows them ``1 / side`` times larger; merged with the whole frame's detections, the SSDLite person
detector's AP@0.5 on the labelled held-out frames rises from 0.72 to about 0.84 (``benchmarks/
detector_ap_by_size.py``), at ``1 + grid^2`` times the inference work.  The distillation of small students
uses the same tiles (``jetforge.compress.distill.detection_tiles``, the torch side, batched on the GPU) to give
the student a sharper teacher; the people app uses :class:`TiledPeopleDetector` (``--detector-tiles``), which
merges with :func:`merge_tiled`.

Merging (both sides; the rule that drops a box is :func:`cut_by_inner_edge`, written with array operators only so
that the numpy merge here and the batched torch merge of the distillation run the same expression):

- a tile box touching one of the tile's **inner** edges (an edge that is not the frame's; within ``edge``
  of the tile's side) is dropped: it is a person cut by the tile, and since tiles overlap by more than a
  person is wide, the neighbouring tile or the whole frame sees that person whole;
- the rest, mapped into the frame, go through one greedy NMS at ``merge_iou`` with the frame's own boxes
  (:func:`jetforge.vision.boxes.nms`; the distillation's targets use a batched Fast NMS in torch instead).

Torch-free: numpy only (the device side).
"""

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from jetforge.errors import ConfigError
from jetforge.vision.boxes import nms
from jetforge.vision.detections import Detections

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


def cut_by_inner_edge(x1: Any, y1: Any, x2: Any, y2: Any, inner: Tuple[Any, Any, Any, Any], size: Tuple[Any, Any],
                      edge: float) -> Any:
    """Which tile boxes a tile cut: within ``edge`` of the tile's side from one of its **inner** edges.

    The boxes' corners ``x1, y1, x2, y2`` are in the tile's own units (pixels, or fractions of the tile with
    ``size`` 1); ``inner`` says which of the tile's left, top, right and bottom edges lie inside the frame (python
    bools, or arrays that broadcast with the corners); ``size`` is the tile's (width, height) in the boxes' units.
    Only array operators, so numpy arrays (:func:`merge_tiled`) and torch tensors
    (:func:`jetforge.compress.distill.detection_tiles.tile_boxes_in_view`) run the same rule.
    """
    mx, my = edge * size[0], edge * size[1]
    left, top, right, bottom = inner
    return ((left & (x1 < mx)) | (top & (y1 < my)) | (right & (x2 > size[0] - mx))
            | (bottom & (y2 > size[1] - my)))


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
        cut = cut_by_inner_edge(b[:, 0], b[:, 1], b[:, 2], b[:, 3], (x0 > 0, y0 > 0, x1 < w, y1 < h),
                                (x1 - x0, y1 - y0), edge)
        all_boxes.append(b[~cut] + np.array([x0, y0, x0, y0], dtype=np.float64))
        all_scores.append(s[~cut])
    merged_boxes, merged_scores = np.concatenate(all_boxes), np.concatenate(all_scores)
    keep = nms(merged_boxes, merged_scores, merge_iou, -np.inf, max_output)
    return merged_boxes[keep], merged_scores[keep]


TILE_SIDE = 0.6  # a 2x2 grid overlaps by 0.2 of the frame: more than a person is wide in the bundled clips


def tile_side_for(grid: int) -> float:
    """1.2 / grid of the frame's side: 0.6 for 2x2 (the measured setting), 0.4 for 3x3, 0.3 for 4x4 -- each tile
    zooms in by grid / 1.2 and neighbours overlap by 0.2, 0.1 and 0.07 of the frame."""
    return TILE_SIDE * 2.0 / float(grid)


class TiledPeopleDetector:
    """The CNN person detector run on zoomed tiles of each frame as well as the whole frame (``--detector-tiles``).

    Why: far-away people (under ~90 px tall in a 576-px frame) are 15-35 px at the SSD's 300x300 input and many are
    missed; a 2x2 grid of overlapping tiles shows them 1.67x larger.  On the labelled held-out frames the SSDLite
    person detector's AP@0.5 goes from 0.72 to about 0.84 with a 2x2 grid (``benchmarks/detector_students/detector_ap_by_size.py``,
    row ``teacher_tiled_app``), for five inferences a frame instead of one -- a choice for scenes of small people
    where accuracy matters more than frames per second.  All tiles of all frames of a step go to ``inner`` in one
    batch (one session call), as the frames of several streams already do.

    Wraps any person detector with ``detect_batch(images) -> [Detections]`` (boxes in each image's pixels): the SSD
    (:class:`~jetforge.vision.ssd_detector.SsdPeopleDetector`) or the person class of another output layout
    (:class:`~jetforge.vision.person_detectors.DecodedPersonDetector`); the tiles and the merge do not depend on it.
    """

    def __init__(self, inner: Any, grid: int = 2, side: Optional[float] = None, edge: float = 0.01,
                 merge_iou: float = 0.5) -> None:
        side = tile_side_for(grid) if side is None else side
        self.rects = tile_rects(grid, side)  # refuses a grid or side that cannot work, before any model runs
        self.inner = inner
        self.tile_grid, self.side, self.edge, self.merge_iou = int(grid), float(side), float(edge), float(merge_iou)
        self.label = "%s + %dx%d tiles" % (getattr(inner, "label", type(inner).__name__), grid, grid)

    @property
    def session(self) -> Any:
        return self.inner.session

    @property
    def model_path(self) -> Any:
        return getattr(self.inner, "model_path", None)

    @property
    def score_threshold(self) -> Any:
        return getattr(self.inner, "score_threshold", None)

    @property
    def spinning(self) -> Any:
        return getattr(self.inner, "spinning", None)

    def __call__(self, image: np.ndarray) -> Detections:
        return self.detect_batch([image])[0]

    def detect_batch(self, images: Sequence[np.ndarray]) -> List[Detections]:
        per_frame = 1 + len(self.rects)
        crops = [crop for image in images for crop in [image] + [cut_tile(image, r) for r in self.rects]]
        found = self.inner.detect_batch(crops)
        return [self.merge(image.shape[:2], found[n * per_frame:(n + 1) * per_frame])
                for n, image in enumerate(images)]

    def merge(self, frame_hw: Sequence[int], found: Sequence[Detections]) -> Detections:
        """One frame's own detections (its pixels) and each tile's (that tile's pixels), in ``rects`` order, merged
        by :func:`merge_tiled` with this detector's ``edge`` and ``merge_iou``: the one merge of the CPU path and of
        the people app's GPU path, whatever the inner detector's output layout."""
        boxes, scores = merge_tiled(frame_hw, self.rects, [d.boxes for d in found], [d.scores for d in found],
                                    self.edge, self.merge_iou)
        return Detections(boxes.astype(np.float32), scores.astype(np.float32))

    def to_confidence(self, scores: np.ndarray) -> np.ndarray:
        return self.inner.to_confidence(scores)

    def describe(self) -> str:
        return "%s; the frame and %dx%d tiles of %.2f of its side, merged by NMS at IoU %.2f" % (
            self.inner.describe(), self.tile_grid, self.tile_grid, self.side, self.merge_iou)

    def close(self) -> None:
        self.inner.close()

    def __enter__(self) -> "TiledPeopleDetector":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["MAX_TILE_GRID", "TILE_SIDE", "TiledPeopleDetector", "cut_by_inner_edge", "cut_tile", "merge_tiled",
           "tile_pixels", "tile_rects", "tile_side_for"]
