"""What every output decoder shares: the registry, the options, the checks of raw outputs, NMS and the way back to
the frame.

An *output decoder* turns a detector's raw outputs (one array per model output, images along axis 0) into one
:class:`~jetforge.vision.detections.Detections` per image: pixel ``x1, y1, x2, y2`` boxes of the original frame,
scores, class indices into the model's label list.  A decoder subclass only knows its layout: it returns, per image,
candidate boxes in *model-input pixels* (``x1, y1, x2, y2``), their scores and classes (:meth:`OutputDecoder.candidates`).
The rest is here, once, for every layout:

1. the raw scores and boxes are checked: NaN or infinite numbers, and (for layouts whose scores are probabilities)
   negative scores, are a :class:`~jetforge.errors.ModelError` naming the output and the fix, never detections;
2. scores at or below ``score_threshold`` are dropped, then the one greedy NMS (:func:`jetforge.vision.boxes.nms`),
   class-aware unless ``class_agnostic``, keeps at most ``max_detections`` (layouts whose NMS ran inside the model,
   EfficientNMS and torchvision's full models, skip it);
3. boxes go back to the frame through the input contract's geometry (:meth:`Preprocess.geometry`: stretch,
   letterbox or centre crop, the inverse of exactly what was fed), are clipped to the frame (``[0, w] x [0, h]``,
   as torchvision's ``clip_boxes_to_image`` and every YOLO postprocess do: a box reaching past the edge covers the
   visible part of the object) and boxes left with no area are dropped.

Torch-free, numpy only, Python 3.8.
"""

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from jetforge.errors import ModelError
from jetforge.registry import Registry
from jetforge.runtime.inputs.image import Preprocess, ResizePlan
from jetforge.vision.boxes import nms
from jetforge.vision.detections import Detections

DECODER_EXTRA_KEY = "decoder"  # the sidecar's extra block naming the decoder, its options and parameters

Candidates = Tuple[np.ndarray, np.ndarray, np.ndarray]  # (K, 4) input-pixel xyxy float32, (K,) scores, (K,) int64


@dataclass(frozen=True)
class DecoderOptions:
    """Thresholds every decoder applies (the sidecar's ``extra.decoder.options``; unknown keys are refused)."""

    score_threshold: float = 0.25
    iou_threshold: float = 0.45
    max_detections: int = 300
    class_agnostic: bool = False

    def __post_init__(self) -> None:
        if not 0.0 <= float(self.score_threshold) < 1.0:
            raise ValueError("score_threshold must be in [0, 1), got %r" % (self.score_threshold,))
        if not 0.0 <= float(self.iou_threshold) <= 1.0:
            raise ValueError("iou_threshold must be in [0, 1], got %r" % (self.iou_threshold,))
        if not 1 <= int(self.max_detections) <= 100000:
            raise ValueError("max_detections must be from 1 to 100000, got %r" % (self.max_detections,))


class OutputDecoder:
    """Base of the registered decoders (:data:`DECODERS`); module docstring for what the base does.

    A subclass sets ``name``, ``layout`` (the outputs it reads, for messages), ``applies_nms`` (True when the model's
    outputs still need NMS), ``probability_scores`` (True when its scores must lie in [0, 1]) and ``Params`` (a
    frozen dataclass of its own sidecar parameters, or None), and implements :meth:`check_shapes` and
    :meth:`candidates`.
    """

    name = ""
    layout = ""
    applies_nms = True
    probability_scores = True
    Params: Any = None

    def __init__(self, labels: Sequence[str], options: Optional[DecoderOptions] = None, params: Any = None,
                 output_names: Sequence[str] = (), input_hw: Optional[Tuple[int, int]] = None) -> None:
        """``labels``: class names in the model's index order (may be empty: unnamed classes); ``output_names``: the
        model's output names, in output order; ``input_hw``: the model input's (height, width) in pixels, for
        layouts whose boxes are normalised to it."""
        self.labels = tuple(labels)
        self.options = options or DecoderOptions()
        self.params = params if params is not None or self.Params is None else self.Params()
        self.output_names = tuple(output_names)
        self.input_hw = tuple(input_hw) if input_hw is not None else None

    def need_input_hw(self) -> Tuple[int, int]:
        if self.input_hw is None:
            raise ModelError("%s: these boxes are relative to the model input, whose size is not known" % self.name,
                             hint="give the model a sidecar with its input contract (jetforge export-sidecar)")
        return self.input_hw  # type: ignore[return-value]

    @classmethod
    def check_shapes(cls, shapes: Sequence[Sequence[Any]], num_labels: Optional[int]) -> Optional[str]:
        """None when outputs of these shapes (ints, or strings/-1 for dynamic axes) can be this layout, else why
        not (one phrase).  ``num_labels``: the label count when known."""
        raise NotImplementedError

    def candidates(self, outputs: Sequence[np.ndarray]) -> List[Candidates]:
        """Per image: boxes in model-input pixels ``x1, y1, x2, y2``, scores, classes (before thresholds)."""
        raise NotImplementedError

    def decode(self, outputs: Sequence[np.ndarray], plans: Sequence[ResizePlan],
               frames_hw: Sequence[Tuple[int, int]]) -> List[Detections]:
        """One :class:`Detections` per image, in frame pixels (module docstring)."""
        arrays = [np.asarray(o) for o in outputs]
        per_image = self.candidates(arrays)
        if len(per_image) != len(plans) or len(plans) != len(frames_hw):
            raise ModelError("%s: the outputs hold %d images but %d frames were given"
                             % (self.name, len(per_image), len(frames_hw)))
        return [self._finish(c, plan, hw) for c, plan, hw in zip(per_image, plans, frames_hw)]

    def decode_frames(self, outputs: Sequence[np.ndarray], contract: Preprocess,
                      frames_hw: Sequence[Tuple[int, int]]) -> List[Detections]:
        """:meth:`decode` with each frame's geometry taken from the input ``contract``."""
        return self.decode(outputs, [contract.geometry(tuple(hw)[:2]) for hw in frames_hw], frames_hw)

    def _finish(self, found: Candidates, plan: ResizePlan, frame_hw: Tuple[int, int]) -> Detections:
        boxes, scores, classes = found
        keep = scores > self.options.score_threshold
        boxes, scores, classes = boxes[keep], scores[keep], classes[keep]
        if self.applies_nms:
            order = nms(boxes, scores, self.options.iou_threshold, None, self.options.max_detections,
                        classes=None if self.options.class_agnostic else classes)
        else:
            order = np.argsort(-scores, kind="stable")[:self.options.max_detections]
        boxes, scores, classes = boxes[order], scores[order], classes[order]
        return to_frame(boxes, scores, classes, plan, frame_hw, self.labels)

    # helpers for subclasses

    def check_finite(self, array: np.ndarray, what: str) -> None:
        """Refuse NaN/infinite numbers in an output (an FP16/INT8 overflow or a broken export)."""
        bad = ~np.isfinite(array)
        if bad.any():
            raise ModelError("%s output %s holds %d NaN or infinite numbers: the model's arithmetic broke"
                             % (self.name, what, int(bad.sum())),
                             hint="run the FP32 model, or re-export it; an FP16/INT8 engine that overflows needs "
                                  "those layers in FP32")

    def check_scores(self, scores: np.ndarray, what: str) -> None:
        """Finite, and in [0, 1] when the layout's scores are probabilities (negative ones are logits)."""
        self.check_finite(scores, what)
        if self.probability_scores and scores.size and float(scores.min()) < 0.0:
            raise ModelError("%s output %s holds negative scores (lowest %.3g): the %s layout has probabilities in "
                             "[0, 1], so these are logits" % (self.name, what, float(scores.min()), self.name),
                             hint="export the model with its final sigmoid, or choose the decoder of its layout "
                                  "(jetforge export-sidecar MODEL --decoder NAME)")

    def check_classes(self, count: int) -> None:
        """The model's class count against its label list."""
        if self.labels and count != len(self.labels):
            raise ModelError("%s: the model outputs %d classes but its label list names %d"
                             % (self.name, count, len(self.labels)),
                             hint="give the model's own class list (--classes FILE with %d names, or coco80/coco91)"
                                  % count)

    def output(self, outputs: Sequence[np.ndarray], name: str, index: int) -> np.ndarray:
        """The output called ``name`` when the model names its outputs so, else the one at ``index``."""
        if name in self.output_names and len(self.output_names) == len(outputs):
            return outputs[self.output_names.index(name)]
        if index >= len(outputs):
            raise ModelError("%s needs %s; the model has %d outputs" % (self.name, self.layout, len(outputs)),
                             hint="choose the decoder of the model's layout (--decoder)")
        return outputs[index]


def to_frame(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, plan: ResizePlan,
             frame_hw: Tuple[int, int], labels: Sequence[str] = ()) -> Detections:
    """Model-input-pixel boxes -> frame pixels (the plan's inverse), clipped to the frame, empty boxes dropped."""
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    x1, y1 = plan.to_image(b[:, 0], b[:, 1])
    x2, y2 = plan.to_image(b[:, 2], b[:, 3])
    h, w = float(frame_hw[0]), float(frame_hw[1])
    out = np.stack([np.clip(x1, 0, w), np.clip(y1, 0, h), np.clip(x2, 0, w), np.clip(y2, 0, h)], axis=1)
    keep = (out[:, 2] > out[:, 0]) & (out[:, 3] > out[:, 1])
    return Detections(out[keep].astype(np.float32), np.asarray(scores, np.float32)[keep],
                      np.asarray(classes, np.int64)[keep], tuple(labels))


def cxcywh_to_xyxy(boxes: np.ndarray) -> np.ndarray:
    """``(..., 4)`` centre x, centre y, width, height -> corners (float32)."""
    b = np.asarray(boxes, np.float32)
    half_w, half_h = b[..., 2] / np.float32(2), b[..., 3] / np.float32(2)
    return np.stack([b[..., 0] - half_w, b[..., 1] - half_h, b[..., 0] + half_w, b[..., 1] + half_h], axis=-1)


DECODERS: "Registry[type]" = Registry("output decoder")


def static_dim(value: Any) -> Optional[int]:
    """An axis of a tensor spec as an int, None when dynamic (a name or -1)."""
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def options_block(options: DecoderOptions) -> Dict[str, Any]:
    return {"score_threshold": float(options.score_threshold), "iou_threshold": float(options.iou_threshold),
            "max_detections": int(options.max_detections), "class_agnostic": bool(options.class_agnostic)}


__all__ = ["Candidates", "DECODERS", "DECODER_EXTRA_KEY", "DecoderOptions", "OutputDecoder", "cxcywh_to_xyxy",
           "options_block", "static_dim", "to_frame"]
