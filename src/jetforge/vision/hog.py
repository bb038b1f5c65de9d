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

from jetforge.config import Bound
from jetforge.errors import ConfigError
from jetforge.optional import require
from jetforge.runtime.measure import memory_shortfall
from jetforge.vision.boxes import nms
from jetforge.vision.detections import Detections

HOG_LABEL = "OpenCV HOG people detector (classical, CPU; not a CNN)"

#: HOG's detection window (width, height) in pixels: a frame smaller than it (after ``upscale``) has no window.
WINDOW = (64, 128)
#: ``--upscale``: HOG describes 8x8-pixel cells, so at 8x one source pixel fills a whole cell; a larger factor adds
#: only interpolated pixels (no detail a cell could use) while memory grows with its square (``--upscale 50`` asked
#: 26 GB for one 768x576 frame and ignored SIGTERM inside OpenCV).
UPSCALE = Bound(float, 0.0, 8.0, low_open=True,
                why="HOG's cells are 8 px: past 8x a source pixel covers a whole cell and a larger factor adds "
                    "no detail, only memory")
#: ``--hog-scale``: two pyramid levels closer than 1 + 1/128 put the 128-px window less than one pixel apart on the
#: person (no new size found) while the level count, and time, grows as 1/log(scale); NaN turned detection off.
#: No upper limit: a larger step only has fewer levels (the frame at its own size is always one).
PYRAMID_SCALE = Bound(float, 1.0 + 1.0 / 128, why="levels closer than 1 + 1/128 move HOG's 128-px window by "
                                                  "less than a pixel")
#: Bytes a HOG run needs per pixel of the (upscaled) frame: OpenCV's gradients, histograms and pyramid measured at
#: 17.4-20.4 B/px peak (2, 12 and 36 megapixel frames, scale 1.05, OpenCV 4.x), plus 3 B/px for the upscaled BGR
#: frame itself; rounded up to 24.
BYTES_PER_PIXEL = 24


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
        PYRAMID_SCALE.check(scale, "HOG pyramid scale (--hog-scale)")
        UPSCALE.check(upscale, "HOG upscale (--upscale)")
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

    def frame_problem(self, width: int, height: int) -> str:
        """Why a ``width`` x ``height`` frame cannot be searched at this ``upscale`` ("" when it can): smaller than
        HOG's window once scaled (nothing could be found), or larger than the memory free for HOG's work on it."""
        w, h = int(round(width * self.upscale)), int(round(height * self.upscale))
        if w < WINDOW[0] or h < WINDOW[1]:
            return ("a %dx%d frame at --upscale %g is %dx%d, smaller than HOG's %dx%d window: no person can be found"
                    % (width, height, self.upscale, w, h, WINDOW[0], WINDOW[1]))
        short = memory_shortfall(w * h * BYTES_PER_PIXEL)
        if short:
            return ("a %dx%d frame at --upscale %g is %dx%d; HOG's work on it (%d B a pixel) takes %s"
                    % (width, height, self.upscale, w, h, BYTES_PER_PIXEL, short))
        return ""

    def check_frame(self, width: int, height: int) -> None:
        """:meth:`frame_problem` as a ConfigError (the apps call it once per source before the run)."""
        problem = self.frame_problem(width, height)
        if problem:
            raise ConfigError(problem, hint="choose an --upscale that fits (1 = the frame as it is)")

    def __call__(self, image: np.ndarray) -> Detections:
        cv2 = self._cv2
        if self.upscale != 1.0:  # a frame of another size than the source's first (an image folder)
            self.check_frame(image.shape[1], image.shape[0])
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


__all__ = ["BYTES_PER_PIXEL", "HOG_LABEL", "HogPeopleDetector", "PYRAMID_SCALE", "UPSCALE", "WINDOW", "score_to_unit"]
