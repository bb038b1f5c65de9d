"""The YOLO output layouts: v5-style ``[N, A, 5 + C]`` (with objectness) and v8/v11-style ``[N, 4 + C, A]``.

Both are one output tensor with a row of numbers per candidate box, the box as centre x, centre y, width, height
in model-input pixels (the letterboxed image the model saw), the scores already through their sigmoid:

* **v5** (YOLOv5's ONNX export, ``(1, 25200, 85)`` for 640x640 COCO): per candidate ``cx, cy, w, h, objectness,
  C class probabilities``; a class's score is ``objectness * class probability``;
* **v8/v11** (``(1, 84, 8400)`` for 640x640 COCO): per *column* ``cx, cy, w, h, C class probabilities``, no
  objectness; a class's score is its probability.

Each candidate keeps its best class (single-label, as the detectors' own ``predict`` does by default), then the
shared thresholds and class-aware NMS of :mod:`jetforge.vision.decode.base` apply.  The layouts are read from their
published description only; no code of the projects that define them is used.
"""

from typing import Any, List, Optional, Sequence

import numpy as np

from jetforge.errors import ModelError
from jetforge.vision.decode.base import DECODERS, Candidates, OutputDecoder, cxcywh_to_xyxy, static_dim


def _one_rank3(shapes: Sequence[Sequence[Any]]) -> Optional[str]:
    if len(shapes) != 1:
        return "needs one output, the model has %d" % len(shapes)
    if len(shapes[0]) != 3:
        return "needs a rank-3 output, got rank %d" % len(shapes[0])
    return None


def _best_class(scores: np.ndarray) -> Candidates:
    classes = np.argmax(scores, axis=1).astype(np.int64)
    return np.zeros((0, 4), np.float32), scores[np.arange(len(scores)), classes].astype(np.float32), classes


def _check_candidate_axes(width: Optional[int], count: Optional[int], fixed: int, num_labels: Optional[int],
                          axis: str, other_layout: str) -> Optional[str]:
    """Why a YOLO output's static axes do not fit: ``width`` numbers per candidate (``fixed`` + C), ``count``
    candidates (None: dynamic, checked when outputs come). More numbers per candidate than candidates means the
    other YOLO layout (rows and columns swapped)."""
    if width is not None and width < fixed + 1:
        return "%s must be %d + C (at least %d), got %d" % (axis, fixed, fixed + 1, width)
    if width is None:
        return None
    if num_labels is not None and width != fixed + num_labels:
        return "%s is %d, not %d + %d classes" % (axis, width, fixed, num_labels)
    if count is not None and count < width:
        return "fewer candidates (%d) than numbers per candidate (%d): %s" % (count, width, other_layout)
    return None


class _YoloRows(OutputDecoder):
    """What both YOLO layouts share once the candidates are rows: ``cx, cy, w, h`` in input pixels, then
    (YOLOv5) an objectness that multiplies the class probabilities, then the C class probabilities."""

    def decode_rows(self, out: np.ndarray, objectness: bool) -> List[Candidates]:
        """``out`` [N, A, 4 + (1) + C] -> per image (boxes, best class score, class)."""
        first = 5 if objectness else 4
        self.check_classes(out.shape[2] - first)
        self.check_finite(out[..., :4], "box numbers")
        self.check_scores(out[..., 4:], "scores")
        found = []
        for rows in out.astype(np.float32, copy=False):
            scores = rows[:, 5:] * rows[:, 4:5] if objectness else rows[:, 4:]
            _, score, classes = _best_class(scores)
            found.append((cxcywh_to_xyxy(rows[:, :4]), score, classes))
        return found


@DECODERS.register("yolov5", summary="[N, A, 5+C]: cx, cy, w, h (input pixels), objectness, class probabilities")
class YoloV5Decoder(_YoloRows):
    """YOLOv5-style rows ``cx, cy, w, h, objectness, C probabilities`` (module docstring)."""

    name = "yolov5"
    layout = "one output [N, A, 5 + C] (cx, cy, w, h, objectness, C class probabilities per row)"

    @classmethod
    def check_shapes(cls, shapes, num_labels):
        why = _one_rank3(shapes)
        if why:
            return why
        return _check_candidate_axes(static_dim(shapes[0][2]), static_dim(shapes[0][1]), 5, num_labels,
                                     "the last axis", "a [N, 4 + C, A] layout?")

    def candidates(self, outputs: Sequence[np.ndarray]) -> List[Candidates]:
        out = outputs[0]
        if out.ndim != 3 or out.shape[2] < 6:
            raise ModelError("yolov5 needs %s, got shape %s" % (self.layout, out.shape),
                             hint="choose the decoder of the model's layout (--decoder)")
        return self.decode_rows(out, objectness=True)


@DECODERS.register("yolov8", summary="[N, 4+C, A]: cx, cy, w, h (input pixels), class probabilities; YOLOv8/v11")
class YoloV8Decoder(_YoloRows):
    """YOLOv8/v11-style columns ``cx, cy, w, h, C probabilities``, no objectness (module docstring)."""

    name = "yolov8"
    layout = "one output [N, 4 + C, A] (cx, cy, w, h, C class probabilities per column)"

    @classmethod
    def check_shapes(cls, shapes, num_labels):
        why = _one_rank3(shapes)
        if why:
            return why
        return _check_candidate_axes(static_dim(shapes[0][1]), static_dim(shapes[0][2]), 4, num_labels,
                                     "axis 1", "a [N, A, 5 + C] layout?")

    def candidates(self, outputs: Sequence[np.ndarray]) -> List[Candidates]:
        out = outputs[0]
        if out.ndim != 3 or out.shape[1] < 5:
            raise ModelError("yolov8 needs %s, got shape %s" % (self.layout, out.shape),
                             hint="choose the decoder of the model's layout (--decoder)")
        return self.decode_rows(out.transpose(0, 2, 1), objectness=False)


__all__ = ["YoloV5Decoder", "YoloV8Decoder"]
