"""OpenCV's HOG people detector (Dalal & Triggs 2005: histograms of oriented gradients + a linear SVM,
``cv2.HOGDescriptor_getDefaultPeopleDetector``): the one implementation that the people and action apps run
(``--detector hog``), that ``jetforge calibrate --clips per-track --detector hog`` tracks people with, and that
the labelled person set's pre-labels came from (``datasets/people/label_people.py``).

It is the classical alternative to the apps' CNN person detector (SSDLite-MobileNetV2,
:mod:`jetforge.vision.ssd_detector`), labelled as classical wherever it is used; it runs on the CPU only and
finds upright people about 100 px tall or more.  Its SVM margins serve as detection scores
(:func:`score_to_unit` squashes them into the tracker's confidences).  Overlapping windows are suppressed by
:func:`jetforge.vision.boxes.nms` (equal to OpenCV's ``cv2.dnn.NMSBoxes`` on HOG's integer windows).  Torch-free.
"""

from typing import Optional

import numpy as np

from jetforge.errors import ConfigError
from jetforge.optional import require
from jetforge.vision.boxes import nms
from jetforge.vision.detections import Detections

HOG_LABEL = "OpenCV HOG people detector (classical, CPU; not a CNN)"


def score_to_unit(scores: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """SVM margins (0 .. ~5) -> (0, 1) confidences for the tracker's thresholds: 1 - exp(-margin/scale)."""
    return 1.0 - np.exp(-np.maximum(scores, 0.0) / scale)


class HogPeopleDetector:
    """OpenCV's HOG + linear-SVM people detector (Dalal-Triggs), with NMS and box tightening.

    ``scale``: image-pyramid step; ``win_stride``: window step in pixels; ``upscale``:
    resize the frame by this factor first (>1 finds smaller people, at a quadratic
    cost); ``min_score``: SVM margin to keep a box; ``nms_iou``: overlap above which
    the weaker of two boxes is dropped (None: no suppression, every window HOG reports).  HOG's window has a margin around the person
    (64x128 for a ~40x96 figure): ``tighten`` shrinks boxes to the figure.
    """

    label = HOG_LABEL
    to_confidence = staticmethod(score_to_unit)  # the tracker's (0, 1) confidences from SVM margins

    def __init__(self, scale: float = 1.05, win_stride: int = 8, padding: int = 8, upscale: float = 1.0,
                 min_score: float = 0.2, nms_iou: Optional[float] = 0.45, tighten: bool = True) -> None:
        cv2 = require("cv2", "the HOG people detector")
        if not hasattr(cv2, "HOGDescriptor"):
            raise ConfigError("this OpenCV (%s) has no HOGDescriptor" % cv2.__version__,
                              hint="pip install 'opencv-python-headless<5' (5.x dropped the HOG detector)")
        if scale <= 1.0:
            raise ConfigError("HOG pyramid scale must be above 1.0, got %r" % scale)
        if upscale <= 0:
            raise ConfigError("upscale must be positive, got %r" % upscale)
        self._cv2 = cv2
        self.hog = cv2.HOGDescriptor()
        self.hog.setSVMDetector(cv2.HOGDescriptor_getDefaultPeopleDetector())
        self.scale = float(scale)
        self.win_stride = (int(win_stride), int(win_stride))
        self.padding = (int(padding), int(padding))
        self.upscale = float(upscale)
        self.min_score = float(min_score)
        self.nms_iou = None if nms_iou is None else float(nms_iou)
        self.tighten = tighten

    def __call__(self, image: np.ndarray) -> Detections:
        cv2 = self._cv2
        work = image
        if self.upscale != 1.0:
            work = cv2.resize(image, None, fx=self.upscale, fy=self.upscale, interpolation=cv2.INTER_LINEAR)
        rects, weights = self.hog.detectMultiScale(work, winStride=self.win_stride, padding=self.padding,
                                                   scale=self.scale)
        if len(rects) == 0:
            return Detections.empty()
        rects = np.asarray(rects, dtype=np.float32).reshape(-1, 4) / self.upscale
        scores = np.asarray(weights, dtype=np.float32).reshape(-1)
        keep = scores >= self.min_score
        rects, scores = rects[keep], scores[keep]
        # OpenCV collects windows from its worker threads in whatever order they finish, so the raw order
        # changes from run to run and machine to machine; one canonical order (score descending, then the
        # box) keeps NMS ties and everything downstream (tracks, labels) reproducible.
        order = np.lexsort((rects[:, 3], rects[:, 2], rects[:, 1], rects[:, 0], -scores))
        rects, scores = rects[order], scores[order]
        if len(rects) and self.nms_iou is not None:  # windows (x, y, w, h) as corners; scores above min_score
            corners = np.concatenate([rects[:, :2], rects[:, :2] + rects[:, 2:]], axis=1)
            idx = nms(corners, scores, self.nms_iou, score_threshold=self.min_score)
            rects, scores = rects[idx], scores[idx]
        x, y, w, h = rects[:, 0], rects[:, 1], rects[:, 2], rects[:, 3]
        if self.tighten:  # the person fills about the central 70% x 88% of HOG's window
            x, y, w, h = x + 0.15 * w, y + 0.06 * h, 0.70 * w, 0.88 * h
        boxes = np.stack([x, y, x + w, y + h], axis=1) if len(rects) else np.zeros((0, 4), np.float32)
        return Detections(boxes.astype(np.float32), scores.astype(np.float32))


__all__ = ["HOG_LABEL", "HogPeopleDetector", "score_to_unit"]
