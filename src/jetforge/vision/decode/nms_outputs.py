"""Layouts whose NMS ran inside the model: TensorRT's EfficientNMS outputs and torchvision's detection outputs.

* **efficientnms** (the four outputs of TensorRT's ``EfficientNMS_TRT`` plugin, also what many YOLO and TF exports
  end with): ``num_detections`` ``[N, 1]`` int32, ``detection_boxes`` ``[N, M, 4]``, ``detection_scores`` ``[N, M]``,
  ``detection_classes`` ``[N, M]`` int32; only the first ``num_detections[i]`` entries of image ``i`` are
  detections, the rest is padding.  The box numbers follow the plugin's ``box_coding`` and the input's scale:
  parameters ``box_format`` (``xyxy``, ``yxyx`` as TensorFlow exports write corners, or ``cxcywh``, the plugin's
  BoxCenterSize) and ``normalized`` (boxes in [0, 1] of the model input instead of its pixels).
* **torchvision** (a torchvision detection model exported whole: SSD, SSDlite, RetinaNet, FCOS, Faster R-CNN):
  ``boxes`` ``[K, 4]`` x1, y1, x2, y2 in model-input pixels, ``labels`` ``[K]`` int64 (the class index: COCO
  category ids for torchvision's COCO models, so ``coco91`` names them), ``scores`` ``[K]``, for one image (a
  leading batch axis of 1 is accepted).  The outputs are found by kind (the 4-wide one is the boxes, the integer one
  the labels), so the export's output order does not matter.

Both already hold at most one box per object: only the score threshold and ``max_detections`` apply, then the
boxes go back to the frame (:mod:`jetforge.vision.decode.base`).
"""

from dataclasses import dataclass
from typing import List, Optional, Sequence

import numpy as np

from jetforge.errors import ModelError
from jetforge.vision.decode.base import DECODERS, Candidates, OutputDecoder, cxcywh_to_xyxy, static_dim

BOX_FORMATS = ("xyxy", "yxyx", "cxcywh")
EFFICIENT_NMS_NAMES = ("num_detections", "detection_boxes", "detection_scores", "detection_classes")


@dataclass(frozen=True)
class EfficientNmsParams:
    """``extra.decoder.params`` of the efficientnms decoder."""

    box_format: str = "xyxy"
    normalized: bool = False

    def __post_init__(self) -> None:
        if self.box_format not in BOX_FORMATS:
            raise ValueError("box_format must be one of %s, got %r" % (", ".join(BOX_FORMATS), self.box_format))


@DECODERS.register("efficientnms", summary="num_detections, detection_boxes, detection_scores, detection_classes "
                                           "(TensorRT EfficientNMS_TRT)")
class EfficientNmsDecoder(OutputDecoder):
    """TensorRT EfficientNMS outputs (module docstring)."""

    name = "efficientnms"
    layout = ("four outputs num_detections [N, 1], detection_boxes [N, M, 4], detection_scores [N, M], "
              "detection_classes [N, M]")
    applies_nms = False
    Params = EfficientNmsParams

    @classmethod
    def check_shapes(cls, shapes, num_labels):
        if len(shapes) != 4:
            return "needs four outputs, the model has %d" % len(shapes)
        ranks = sorted(len(s) for s in shapes)
        if ranks != [2, 2, 2, 3]:
            return "needs ranks 2, 3, 2, 2 (count, boxes, scores, classes), got %s" % [len(s) for s in shapes]
        boxes = [s for s in shapes if len(s) == 3][0]
        if static_dim(boxes[2]) != 4:
            return "the boxes output's last axis must be 4, got %s" % (boxes[2],)
        if not any(static_dim(s[1]) == 1 for s in shapes if len(s) == 2):
            return "no [N, 1] num_detections output"
        return None

    def _pick(self, outputs: Sequence[np.ndarray]):
        if all(n in self.output_names for n in EFFICIENT_NMS_NAMES) and len(self.output_names) == len(outputs):
            return [outputs[self.output_names.index(n)] for n in EFFICIENT_NMS_NAMES]
        if len(outputs) != 4:
            raise ModelError("efficientnms needs %s; the model has %d outputs" % (self.layout, len(outputs)),
                             hint="choose the decoder of the model's layout (--decoder)")
        boxes = [o for o in outputs if o.ndim == 3]
        count = [o for o in outputs if o.ndim == 2 and o.shape[1] == 1]
        flat = [o for o in outputs if o.ndim == 2 and o.shape[1] != 1]
        ints = [o for o in flat if np.issubdtype(o.dtype, np.integer)]
        floats = [o for o in flat if not np.issubdtype(o.dtype, np.integer)]
        if len(boxes) != 1 or len(count) != 1 or len(ints) != 1 or len(floats) != 1:
            return list(outputs)  # the plugin's own order
        return [count[0], boxes[0], floats[0], ints[0]]

    def candidates(self, outputs: Sequence[np.ndarray]) -> List[Candidates]:
        count, boxes, scores, classes = self._pick(outputs)
        if boxes.ndim != 3 or boxes.shape[2] != 4 or scores.shape != boxes.shape[:2] or classes.shape != scores.shape:
            raise ModelError("efficientnms needs %s, got shapes %s" % (self.layout, [o.shape for o in outputs]),
                             hint="choose the decoder of the model's layout (--decoder)")
        found = []
        for i in range(len(boxes)):
            n = int(np.asarray(count).reshape(len(boxes), -1)[i, 0])
            if not 0 <= n <= boxes.shape[1]:
                raise ModelError("efficientnms: num_detections of image %d is %d, outside 0..%d"
                                 % (i, n, boxes.shape[1]), hint="the outputs are not EfficientNMS's (--decoder)")
            b, s, c = boxes[i, :n].astype(np.float32), scores[i, :n].astype(np.float32), classes[i, :n]
            self.check_finite(b, "detection_boxes")
            self.check_scores(s, "detection_scores")
            if self.labels and c.size and (c.min() < 0 or c.max() >= len(self.labels)):
                raise ModelError("efficientnms: a detection has class %d but the label list names %d classes"
                                 % (int(c.max() if c.max() >= len(self.labels) else c.min()), len(self.labels)),
                                 hint="give the model's own class list (--classes)")
            b = _corners(b, self.params.box_format)
            if self.params.normalized:
                h, w = self.need_input_hw()
                b = b * np.array([w, h, w, h], np.float32)
            found.append((b, s, c.astype(np.int64)))
        return found


def _corners(boxes: np.ndarray, box_format: str) -> np.ndarray:
    if box_format == "cxcywh":
        return cxcywh_to_xyxy(boxes)
    if box_format == "yxyx":
        return boxes[:, [1, 0, 3, 2]]
    return boxes


@DECODERS.register("torchvision", summary="boxes [K, 4] xyxy (input pixels), labels [K], scores [K]: a torchvision "
                                          "detection model exported whole")
class TorchvisionDecoder(OutputDecoder):
    """torchvision detection outputs of one image (module docstring)."""

    name = "torchvision"
    layout = "three outputs boxes [K, 4], labels [K] (integers), scores [K] for one image"
    applies_nms = False

    @classmethod
    def check_shapes(cls, shapes, num_labels):
        if len(shapes) != 3:
            return "needs three outputs, the model has %d" % len(shapes)
        squeezed = [list(s[1:]) if len(s) and static_dim(s[0]) == 1 and len(s) > 1 else list(s) for s in shapes]
        wide = [s for s in squeezed if len(s) == 2 and static_dim(s[1]) == 4]
        flat = [s for s in squeezed if len(s) == 1]
        if len(wide) != 1 or len(flat) != 2:
            return "needs one [K, 4] and two [K] outputs, got %s" % [list(s) for s in shapes]
        return None

    def candidates(self, outputs: Sequence[np.ndarray]) -> List[Candidates]:
        arrays = [o[0] if o.ndim >= 2 and o.shape[0] == 1 and not (o.ndim == 2 and o.shape[1] == 4) else o
                  for o in outputs]
        boxes = [a for a in arrays if a.ndim == 2 and a.shape[1] == 4]
        labels = [a for a in arrays if a.ndim == 1 and np.issubdtype(a.dtype, np.integer)]
        scores = [a for a in arrays if a.ndim == 1 and not np.issubdtype(a.dtype, np.integer)]
        if len(boxes) != 1 or len(labels) != 1 or len(scores) != 1 or not (
                len(boxes[0]) == len(labels[0]) == len(scores[0])):
            raise ModelError("torchvision needs %s, got %s" % (self.layout, [(a.shape, str(a.dtype)) for a in outputs]),
                             hint="choose the decoder of the model's layout (--decoder)")
        b, c, s = boxes[0].astype(np.float32), labels[0].astype(np.int64), scores[0].astype(np.float32)
        self.check_finite(b, "boxes")
        self.check_scores(s, "scores")
        if self.labels and c.size and (c.min() < 0 or c.max() >= len(self.labels)):
            raise ModelError("torchvision: a detection has label %d but the label list names %d classes"
                             % (int(c.max()), len(self.labels)),
                             hint="torchvision's COCO models label by COCO category id: use --classes coco91")
        return [(b, s, c)]


__all__ = ["BOX_FORMATS", "EfficientNmsDecoder", "EfficientNmsParams", "TorchvisionDecoder"]
