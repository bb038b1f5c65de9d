"""The CNN person detector run on zoomed tiles of each frame as well as the whole frame (``--detector-tiles``).

Why: far-away people (under ~90 px tall in a 576-px frame) are 15-35 px at the SSD's 300x300 input and many are
missed; a 2x2 grid of overlapping tiles shows them 1.67x larger.  On the labelled held-out frames the SSDLite
person detector's AP@0.5 goes from 0.72 to about 0.84 with a 2x2 grid (``benchmarks/detector_ap_by_size.py``,
row ``teacher_tiled_app``), for five inferences a frame instead of one -- a choice for scenes of small people
where accuracy matters more than frames per second.  The merge is :func:`jetforge.runtime.tiles.merge_tiled`.

All tiles of all frames of a step go to the model in one batch (one session call), as the frames of several
streams already do.  Torch-free.
"""

from typing import Any, List, Optional, Sequence

import numpy as np

from jetforge.runtime.hog import Detections
from jetforge.runtime.tiles import cut_tile, merge_tiled, tile_rects

TILE_SIDE = 0.6  # a 2x2 grid overlaps by 0.2 of the frame: more than a person is wide in the bundled clips


def tile_side_for(grid: int) -> float:
    """1.2 / grid of the frame's side: 0.6 for 2x2 (the measured setting), 0.4 for 3x3, 0.3 for 4x4 -- each tile
    zooms in by grid / 1.2 and neighbours overlap by 0.2, 0.1 and 0.07 of the frame."""
    return TILE_SIDE * 2.0 / float(grid)


class TiledPeopleDetector:
    """Wraps a detector with ``detect_batch(images) -> [Detections]`` (boxes in each image's pixels)."""

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
        out = []
        for n, image in enumerate(images):
            mine = found[n * per_frame:(n + 1) * per_frame]
            boxes, scores = merge_tiled(image.shape[:2], self.rects, [d.boxes for d in mine],
                                        [d.scores for d in mine], self.edge, self.merge_iou)
            out.append(Detections(boxes.astype(np.float32), scores.astype(np.float32)))
        return out

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


__all__ = ["TILE_SIDE", "TiledPeopleDetector", "tile_side_for"]
