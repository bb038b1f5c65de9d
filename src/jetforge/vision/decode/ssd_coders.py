"""SSD bodies whose box decoding runs on the host: TensorFlow Object Detection API coding and torchvision's.

Both read two outputs, per-anchor box encodings ``[N, A, 4]`` and class logits ``[N, A, C]`` (column 0 the
background), and need the anchors, which travel in the sidecar:

* **ssd-tf**: the TensorFlow Object Detection API conventions of :mod:`jetforge.vision.ssd` (the shipped person
  detector): encodings ``[ty, tx, th, tw]`` over normalised ``[ymin, xmin, ymax, xmax]`` anchors regenerated from
  the sidecar's ``extra.ssd`` block, sigmoid scores, NMS per class.  This decoder is that module, called as it is.
* **ssd-torchvision**: torchvision's ``SSD``/``SSDlite`` (``torchvision.models.detection.ssd``): anchors
  ``x1, y1, x2, y2`` in model-input pixels (``DefaultBoxGenerator``'s boxes for the fixed input size, listed in
  ``extra.decoder.params.anchors``), encodings ``dx, dy, dw, dh`` divided by ``weights`` (10, 10, 5, 5) as
  ``BoxCoder.decode_single`` does (``dw``, ``dh`` clamped at ``bbox_xform_clip`` = log(1000/16)), softmax scores,
  boxes clipped to the input, then per class (background excluded) the scores above the threshold and the best
  ``topk_candidates`` of them, class-aware NMS, ``max_detections`` kept (``SSD.postprocess_detections``).
"""

import math
from dataclasses import dataclass
from typing import Any, List, Sequence, Tuple

import numpy as np

from jetforge.errors import ModelError
from jetforge.runtime.inputs.image import ResizePlan
from jetforge.vision import ssd
from jetforge.vision.decode.base import DECODERS, Candidates, OutputDecoder, static_dim, to_frame
from jetforge.vision.detections import Detections

SSD_OUTPUT_NAMES = ("box_encodings", "class_logits")
TORCHVISION_OUTPUT_NAMES = ("bbox_regression", "cls_logits")


def _two_rank3(shapes: Sequence[Sequence[Any]], num_labels: Any) -> Any:
    if len(shapes) != 2:
        return "needs two outputs (box encodings, class logits), the model has %d" % len(shapes)
    if len(shapes[0]) != 3 or len(shapes[1]) != 3 or static_dim(shapes[0][2]) not in (4, None):
        return "needs [N, A, 4] box encodings and [N, A, C] logits, got %s" % [list(s) for s in shapes]
    return None


@DECODERS.register("ssd-tf", summary="[N, A, 4] + [N, A, 1+C]: TF Object Detection API box coding, anchors from "
                                     "the sidecar's ssd block (the shipped person detector)")
class TfSsdDecoder(OutputDecoder):
    """:mod:`jetforge.vision.ssd` as a registered decoder (module docstring)."""

    name = "ssd-tf"
    layout = "two outputs box_encodings [N, A, 4] and class_logits [N, A, 1 + C], with the sidecar's extra.ssd block"
    probability_scores = False

    def __init__(self, *args: Any, spec: "ssd.SSDSpec", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spec = spec
        self.labels = self.labels or tuple(spec.labels)
        self._anchors = spec.anchors()

    @classmethod
    def check_shapes(cls, shapes, num_labels):
        return _two_rank3(shapes, num_labels)

    def decode(self, outputs: Sequence[np.ndarray], plans: Sequence[ResizePlan],
               frames_hw: Sequence[Tuple[int, int]]) -> List[Detections]:
        enc = self.output(outputs, SSD_OUTPUT_NAMES[0], 0)
        logits = self.output(outputs, SSD_OUTPUT_NAMES[1], 1)
        self.check_finite(np.asarray(logits), "class_logits")
        decoded = ssd.postprocess(enc, logits, self.spec, score_threshold=self.options.score_threshold,
                                  anchors=self._anchors)
        h, w = self.need_input_hw()
        out = []
        for d, plan, hw in zip(decoded, plans, frames_hw):
            n = min(len(d), self.options.max_detections)
            px = d.boxes[:n, [1, 0, 3, 2]].astype(np.float64) * np.array([w, h, w, h], np.float64)
            out.append(to_frame(px, d.scores[:n], d.classes[:n], plan, hw, self.labels))
        return out


@dataclass(frozen=True)
class TorchvisionSsdParams:
    """``extra.decoder.params`` of the ssd-torchvision decoder."""

    anchors: Tuple[Tuple[float, float, float, float], ...] = ()
    weights: Tuple[float, float, float, float] = (10.0, 10.0, 5.0, 5.0)
    bbox_xform_clip: float = math.log(1000.0 / 16)
    topk_candidates: int = 300

    def __post_init__(self) -> None:
        a = np.asarray(self.anchors, dtype=np.float64)
        if not len(self.anchors):  # none given: the decoder says where they belong
            return
        if a.ndim != 2 or a.shape[1] != 4 or not len(a):
            raise ValueError("anchors must be a list of [x1, y1, x2, y2] boxes, got shape %s" % (a.shape,))
        if len(a) > ssd.MAX_ANCHORS or not np.all(np.isfinite(a)) or np.any(a[:, 2:] < a[:, :2]):
            raise ValueError("anchors must be at most %d finite boxes with x2 >= x1 and y2 >= y1" % ssd.MAX_ANCHORS)
        if len(self.weights) != 4 or any(not (0 < float(v) < 1e6) for v in self.weights):
            raise ValueError("weights must be four positive numbers, got %s" % (self.weights,))
        if not 0 < float(self.bbox_xform_clip) < 100 or not 1 <= int(self.topk_candidates) <= 100000:
            raise ValueError("bbox_xform_clip must be in (0, 100) and topk_candidates from 1 to 100000")


@DECODERS.register("ssd-torchvision", summary="[N, A, 4] + [N, A, C]: torchvision SSD/SSDlite box coding "
                                              "(weights 10, 10, 5, 5), anchors in the sidecar")
class TorchvisionSsdDecoder(OutputDecoder):
    """torchvision's SSD head outputs (module docstring)."""

    name = "ssd-torchvision"
    layout = "two outputs bbox_regression [N, A, 4] and cls_logits [N, A, C] (background first), anchors in the sidecar"
    probability_scores = False
    Params = TorchvisionSsdParams

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.params.anchors:
            raise ModelError("ssd-torchvision needs the anchors in the sidecar (extra.decoder.params.anchors)",
                             hint="write them with jetforge.vision.decode.write_decoder_sidecar(..., params=...)")
        self.anchors = np.asarray(self.params.anchors, np.float32)

    @classmethod
    def check_shapes(cls, shapes, num_labels):
        return _two_rank3(shapes, num_labels)

    def decode_boxes(self, rel_codes: np.ndarray) -> np.ndarray:
        """``(A, 4)`` encodings -> ``(A, 4)`` x1, y1, x2, y2 input pixels (``BoxCoder.decode_single``)."""
        f32 = np.float32
        a = self.anchors
        widths, heights = a[:, 2] - a[:, 0], a[:, 3] - a[:, 1]
        ctr_x, ctr_y = a[:, 0] + f32(0.5) * widths, a[:, 1] + f32(0.5) * heights
        wx, wy, ww, wh = (f32(v) for v in self.params.weights)
        clip = f32(self.params.bbox_xform_clip)
        dx, dy = rel_codes[:, 0] / wx, rel_codes[:, 1] / wy
        dw, dh = np.minimum(rel_codes[:, 2] / ww, clip), np.minimum(rel_codes[:, 3] / wh, clip)
        cx, cy = dx * widths + ctr_x, dy * heights + ctr_y
        half_w, half_h = f32(0.5) * (np.exp(dw) * widths), f32(0.5) * (np.exp(dh) * heights)
        return np.stack([cx - half_w, cy - half_h, cx + half_w, cy + half_h], axis=1).astype(f32)

    def candidates(self, outputs: Sequence[np.ndarray]) -> List[Candidates]:
        enc = np.asarray(self.output(outputs, TORCHVISION_OUTPUT_NAMES[0], 0), np.float32)
        logits = np.asarray(self.output(outputs, TORCHVISION_OUTPUT_NAMES[1], 1), np.float32)
        if enc.ndim != 3 or enc.shape[1:] != (len(self.anchors), 4) or logits.shape[:2] != enc.shape[:2]:
            raise ModelError("ssd-torchvision: outputs of shapes %s and %s do not fit %d anchors"
                             % (enc.shape, logits.shape, len(self.anchors)),
                             hint="the sidecar's anchors belong to another model or input size; write them again")
        self.check_classes(logits.shape[2])
        self.check_finite(enc, "bbox_regression")
        self.check_finite(logits, "cls_logits")
        h, w = self.need_input_hw()
        limit = np.array([w, h, w, h], np.float32)
        found = []
        for codes, image_logits in zip(enc, logits):
            boxes = np.clip(self.decode_boxes(codes), 0, limit)
            e = np.exp(image_logits - image_logits.max(axis=1, keepdims=True))
            scores = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
            found.append(self._topk_per_class(boxes, scores))
        return found

    def _topk_per_class(self, boxes: np.ndarray, scores: np.ndarray) -> Candidates:
        picked_b, picked_s, picked_c = [], [], []
        for c in range(1, scores.shape[1]):
            idx = np.flatnonzero(scores[:, c] > self.options.score_threshold)
            idx = idx[np.argsort(-scores[idx, c], kind="stable")[:int(self.params.topk_candidates)]]
            picked_b.append(boxes[idx])
            picked_s.append(scores[idx, c])
            picked_c.append(np.full(len(idx), c, np.int64))
        if not picked_b:
            return np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64)
        return np.concatenate(picked_b), np.concatenate(picked_s), np.concatenate(picked_c)


__all__ = ["SSD_OUTPUT_NAMES", "TORCHVISION_OUTPUT_NAMES", "TfSsdDecoder", "TorchvisionSsdDecoder",
           "TorchvisionSsdParams"]
