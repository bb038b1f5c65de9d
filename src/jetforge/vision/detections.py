"""The one detection type: what every detector in jetforge hands on, boxes in the pixels of the frame it looked at.

:class:`Detections` holds one image's boxes ``(K, 4)`` float32 ``x1, y1, x2, y2`` in that image's pixels, their
scores ``(K,)`` float32 and class indices ``(K,)`` int64 (0 for a one-class detector), best first when the detector
ranks them.  HOG (:mod:`jetforge.vision.hog`), the SSD detectors (:mod:`jetforge.vision.ssd_detector`, their tiled
form in :mod:`jetforge.vision.tiles`) and the GPU video path all return it, so the tracker, the line counters, the
zones and the AP metrics never ask which detector ran.  (The SSD decoder keeps its own normalised
``[ymin, xmin, ymax, xmax]`` inside :mod:`jetforge.vision.ssd`; it maps them to pixels on the way out.)

Pure numpy, Python 3.8.
"""

from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np


@dataclass
class Detections:
    """Boxes ``(K, 4)`` x1, y1, x2, y2 in frame pixels, scores ``(K,)``, classes ``(K,)`` (index into ``labels``)."""

    boxes: np.ndarray
    scores: np.ndarray
    classes: Optional[np.ndarray] = None  # None: all class 0
    labels: Tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.classes is None:
            self.classes = np.zeros(len(self.scores), dtype=np.int64)

    def __len__(self) -> int:
        return int(self.boxes.shape[0])

    @classmethod
    def empty(cls, labels: Tuple[str, ...] = ()) -> "Detections":
        return cls(np.zeros((0, 4), np.float32), np.zeros((0,), np.float32), np.zeros((0,), np.int64), labels)

    def above(self, threshold: float) -> "Detections":
        """The detections whose score is at least ``threshold``."""
        return self._kept(self.scores >= threshold)

    def of_class(self, index: int) -> "Detections":
        """The detections of class ``index``."""
        return self._kept(self.classes == index)

    def _kept(self, keep: np.ndarray) -> "Detections":
        return Detections(self.boxes[keep], self.scores[keep], self.classes[keep], self.labels)  # type: ignore[index]

    def to_list(self) -> List[List[float]]:
        """``[x1, y1, x2, y2, score]`` per box, rounded (0.1 px, 3 decimals): the people app's events."""
        return [[round(float(v), 1) for v in b] + [round(float(s), 3)] for b, s in zip(self.boxes, self.scores)]


__all__ = ["Detections"]
