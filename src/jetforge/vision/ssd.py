"""The SSD decoder on the host: anchors, box decoding, score conversion and NMS, in numpy.

An exported SSD body (``jetforge export --model ssdlite_mobilenet_v2_person``) outputs, per
anchor, raw box encodings ``(N, A, 4)`` and class logits ``(N, A, classes + 1)``; everything
after that runs here, on the device's CPU, without torch: TensorRT and the DLA get a plain
convolutional network (no NMS, no data-dependent shapes), and the same numpy code serves
ONNX Runtime, TensorRT and the tests.  The parameters travel in the model's sidecar
(``extra["ssd"]``, see docs/sidecar.md) so a deployed model is decoded exactly as exported.

The conventions are those of the TensorFlow Object Detection API, whose frozen graphs these
models come from (``anchor_generators/multiple_grid_anchor_generator.py``,
``box_coders/faster_rcnn_box_coder.py``, ``core/post_processing.py``):

* anchors: per feature map of ``(rows, cols)`` cells, centres at ``(i + 0.5) / rows``, one
  box per ``(scale, aspect ratio)`` with height ``scale / sqrt(ar)`` and width ``scale * sqrt(ar)``
  (times the base size), ordered row, column, anchor; ``[ymin, xmin, ymax, xmax]``, normalised,
  not clipped;
* decoding (faster-rcnn box coder): encodings ``[ty, tx, th, tw]`` divided by the scale factors
  (10, 10, 5, 5), ``yc = ty * ha + yca``, ``h = exp(th) * ha`` (same for x, w);
* scores: sigmoid of ``logits / logit_scale``; column 0 is the background and is dropped;
* NMS per class (greedy, highest score first, ties to the lower index; a box is dropped when
  its IoU with a kept one is *above* the threshold; only scores *above* the score threshold take
  part), then all classes sorted by score, boxes clipped to [0, 1] and zero-area ones removed,
  then at most ``max_total`` kept.

Every step is computed in float32 in the order TensorFlow's graph computes it, so anchors are
bit-identical to the graph's and decoded boxes agree to float32 rounding.  The NMS is
:func:`jetforge.vision.boxes.nms` (its ``"iou"`` rule is TensorFlow's).

The normalised ``[ymin, xmin, ymax, xmax]`` boxes are the decoder's own convention: :class:`SsdOutput` keeps them
(the Triton postprocess model and the DeepStream parity tests read them as TensorFlow and EfficientNMS write them),
and :meth:`SsdOutput.to_detections` maps them to the frame's pixels, the :class:`~jetforge.vision.detections.Detections`
every other part of jetforge takes.  Frames in, detections out: :class:`jetforge.vision.ssd_detector.SSDDetector`.
"""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from jetforge.errors import ModelError
from jetforge.jsonfile import ValueRefused, expect, expect_number, expect_text, expect_texts
from jetforge.runtime.inputs import ResizePlan
from jetforge.runtime.model_facts import model_facts
from jetforge.vision.boxes import nms
from jetforge.vision.detections import Detections

SSD_EXTRA_KEY = "ssd"


@dataclass(frozen=True)
class AnchorLayer:
    """The anchors of one feature map: a grid of ``rows x cols`` cells, one box per (scale, aspect ratio)."""

    rows: int
    cols: int
    scales: Tuple[float, ...]
    aspect_ratios: Tuple[float, ...]

    def __post_init__(self) -> None:
        if not (1 <= self.rows <= MAX_GRID and 1 <= self.cols <= MAX_GRID):  # 20000x20000 exhausted memory
            raise ModelError("anchor grid %dx%d must be from 1x1 to %dx%d" % (self.rows, self.cols, MAX_GRID, MAX_GRID))
        if not self.scales or len(self.scales) != len(self.aspect_ratios):
            raise ModelError("an anchor layer needs one aspect ratio per scale, got %d scales and %d ratios"
                             % (len(self.scales), len(self.aspect_ratios)))
        if any(not (0 < s <= 1e6) for s in self.scales) or any(not (0 < a <= 1e6) for a in self.aspect_ratios):
            raise ModelError("anchor scales and aspect ratios must be positive finite numbers")

    @property
    def count(self) -> int:
        return self.rows * self.cols * len(self.scales)


def ssd_anchor_layers(grid_sizes: Sequence[Tuple[int, int]], min_scale: float = 0.2, max_scale: float = 0.95,
                      aspect_ratios: Sequence[float] = (1.0, 2.0, 0.5, 3.0, 0.3333),
                      interpolated_scale_aspect_ratio: float = 1.0,
                      reduce_boxes_in_lowest_layer: bool = True) -> List[AnchorLayer]:
    """The per-layer (scale, aspect ratio) lists of TF's ``ssd_anchor_generator`` (``create_ssd_anchors``).

    The defaults are the ``ssdlite_mobilenet_v2_coco`` config's, which writes the last ratio as 0.3333
    (not 1/3): the frozen person detector holds exactly that value.

    Scales are spaced linearly from ``min_scale`` to ``max_scale`` over the layers; each layer
    adds one box of scale ``sqrt(s_i * s_{i+1})`` (1.0 after the last) at the interpolated aspect
    ratio; the lowest layer, when reduced, has only (0.1, 1), (s_0, 2), (s_0, 0.5).
    """
    n = len(grid_sizes)
    if n < 1:
        raise ModelError("an SSD anchor generator needs at least one feature map")
    scales = [min_scale + (max_scale - min_scale) * i / (n - 1) for i in range(n)] if n > 1 else [min_scale]
    scales = scales + [1.0]
    layers: List[AnchorLayer] = []
    for i, (rows, cols) in enumerate(grid_sizes):
        pairs: List[Tuple[float, float]] = []
        if i == 0 and reduce_boxes_in_lowest_layer:
            pairs = [(0.1, 1.0), (scales[0], 2.0), (scales[0], 0.5)]
        else:
            pairs = [(scales[i], float(ar)) for ar in aspect_ratios]
            if interpolated_scale_aspect_ratio > 0:
                pairs.append((float(np.sqrt(scales[i] * scales[i + 1])), float(interpolated_scale_aspect_ratio)))
        layers.append(AnchorLayer(int(rows), int(cols), tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)))
    return layers


@dataclass(frozen=True)
class SSDSpec:
    """Everything needed to turn an SSD body's outputs into detections (and what the sidecar carries)."""

    layers: Tuple[AnchorLayer, ...]
    image_size: Tuple[int, int] = (300, 300)  # (height, width) the anchors were laid out for
    base_anchor_size: Tuple[float, float] = (1.0, 1.0)
    scale_factors: Tuple[float, float, float, float] = (10.0, 10.0, 5.0, 5.0)
    score_converter: str = "sigmoid"
    logit_scale: float = 1.0
    iou_threshold: float = 0.6
    score_threshold: float = 1e-8
    max_per_class: int = 100
    max_total: int = 100
    labels: Tuple[str, ...] = ("person",)
    source: Dict[str, str] = field(default_factory=dict, compare=False)  # where each value was read from

    def __post_init__(self) -> None:
        if self.score_converter not in ("sigmoid", "softmax", "identity"):
            raise ModelError("score_converter must be sigmoid, softmax or identity, got %r" % self.score_converter)
        if len(self.scale_factors) != 4 or any(not (s > 0) for s in self.scale_factors):
            raise ModelError("scale_factors must be four positive numbers, got %s" % (self.scale_factors,))
        if not 0.0 <= self.iou_threshold <= 1.0:
            raise ModelError("iou_threshold must be in [0, 1], got %r" % self.iou_threshold)
        if self.max_per_class < 1 or self.max_total < 1:
            raise ModelError("max_per_class and max_total must be at least 1")
        if not self.labels:
            raise ModelError("an SSD detector needs at least one label")
        if self.num_anchors > MAX_ANCHORS:  # checked before anchors() allocates them
            raise ModelError("the SSD block lays out %d anchors; at most %d are read" % (self.num_anchors, MAX_ANCHORS))

    @property
    def num_anchors(self) -> int:
        return sum(layer.count for layer in self.layers)

    @property
    def num_classes(self) -> int:
        """Classes the network scores, background included."""
        return len(self.labels) + 1

    def anchors(self) -> np.ndarray:
        """``(A, 4)`` float32 ``[ymin, xmin, ymax, xmax]``, as TF's MultipleGridAnchorGenerator computes them."""
        return generate_anchors(self.layers, self.image_size, self.base_anchor_size)

    def to_dict(self) -> Dict[str, Any]:
        anchors = self.anchors()
        return {
            "format": 1,
            "layers": [{"grid": [l.rows, l.cols], "scales": list(l.scales), "aspect_ratios": list(l.aspect_ratios)}
                       for l in self.layers],
            "image_size": list(self.image_size), "base_anchor_size": list(self.base_anchor_size),
            "num_anchors": int(len(anchors)),
            # a recomputation check: reading code regenerates the anchors and compares these
            "anchors_check": _anchor_check(anchors),
            "box_coder": "faster_rcnn", "scale_factors": list(self.scale_factors),
            "score_converter": self.score_converter, "logit_scale": self.logit_scale, "background_class": 0,
            "iou_threshold": self.iou_threshold, "score_threshold": self.score_threshold,
            "max_per_class": self.max_per_class, "max_total": self.max_total, "clip_window": [0.0, 0.0, 1.0, 1.0],
            "labels": list(self.labels), "source": dict(self.source),
        }

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "SSDSpec":
        """Read ``extra["ssd"]`` of a sidecar; a malformed block or anchors that do not regenerate is an error.

        Read with jetforge's shared value checks (:mod:`jetforge.jsonfile`): nothing is coerced (a grid of
        ``"19"`` or ``19.5`` is refused), numbers are in range, labels are strings."""
        try:
            spec = cls(
                layers=tuple(_layer(expect(l, dict, "layers[%d]" % i), i)
                             for i, l in enumerate(expect(data["layers"], list, "layers"))),
                image_size=_pair(data["image_size"], "image_size", 1, 8192, integer=True),
                base_anchor_size=_pair(data["base_anchor_size"], "base_anchor_size", 0.0, 1e6),
                scale_factors=tuple(expect_number(v, "scale_factors", 0.0, 1e6)
                                    for v in expect(data["scale_factors"], list, "scale_factors")),  # type: ignore
                score_converter=expect_text(data["score_converter"], "score_converter", 20),
                logit_scale=expect_number(data["logit_scale"], "logit_scale", 0.0, 1e6, low_open=True),
                iou_threshold=expect_number(data["iou_threshold"], "iou_threshold", 0.0, 1.0),
                score_threshold=expect_number(data["score_threshold"], "score_threshold", 0.0, 1.0),
                max_per_class=expect_number(data["max_per_class"], "max_per_class", 1, MAX_ANCHORS, integer=True),
                max_total=expect_number(data["max_total"], "max_total", 1, MAX_ANCHORS, integer=True),
                labels=tuple(expect_texts(data["labels"], "labels", 1000)),
                source=expect(data.get("source", {}), dict, "source"))
            _check_anchors(spec, data)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
            detail = str(err) if isinstance(err, ValueRefused) else repr(err)
            raise ModelError("the sidecar's SSD block is malformed: %s" % detail,
                             hint="re-export the detector with `jetforge export`") from None
        return spec


MAX_GRID = 1024  # cells along one side of an anchor grid (SSD300's largest is 19x19)
MAX_ANCHORS = 2_000_000  # anchors over all layers (SSD300 has 1,917; 2 million float32 boxes are 32 MB)


def _pair(value: Any, what: str, low: float, high: float, integer: bool = False) -> Tuple[Any, Any]:
    values = expect(value, list, what)
    if len(values) != 2:
        raise ValueRefused("%s must be 2 numbers, not %d" % (what, len(values)))
    return (expect_number(values[0], what, low, high, integer=integer),
            expect_number(values[1], what, low, high, integer=integer))


def _layer(layer: Dict[str, Any], i: int) -> AnchorLayer:
    rows, cols = _pair(layer["grid"], "layers[%d].grid" % i, 1, MAX_GRID, integer=True)
    scales = expect(layer["scales"], list, "layers[%d].scales" % i)
    ratios = expect(layer["aspect_ratios"], list, "layers[%d].aspect_ratios" % i)
    return AnchorLayer(rows, cols, tuple(expect_number(v, "an anchor scale", 0.0, 1e6, low_open=True) for v in scales),
                       tuple(expect_number(v, "an aspect ratio", 0.0, 1e6, low_open=True) for v in ratios))


def spec_from_sidecar(sidecar: Any) -> SSDSpec:
    """The :class:`SSDSpec` recorded in a model's sidecar (``extra["ssd"]``), checked."""
    facts = model_facts(sidecar)  # an ONNX model's, an engine's (embedded) or a bundle's model facts
    block = facts.extra.get(SSD_EXTRA_KEY) if facts is not None else None
    if not isinstance(block, dict):
        raise ModelError("model %s has no SSD postprocessing block in its sidecar"
                         % (facts.model_name if facts is not None and facts.model_name else "?"),
                         hint="export the detector with `jetforge export --model ssdlite_mobilenet_v2_person`")
    return SSDSpec.from_dict(block)


def _anchor_check(anchors: np.ndarray) -> Dict[str, Any]:
    """Values that change when any anchor coordinate moves: first, last, and a position-weighted sum.

    The weights (1..13 by position) make the sum sensitive to every coordinate, where a plain sum is
    not (a box that grows around its centre keeps its coordinates' sum).
    """
    a = anchors.astype(np.float64)
    weights = (np.arange(a.size) % 13 + 1).reshape(a.shape)
    return {"first": [float(v) for v in a[0]], "last": [float(v) for v in a[-1]],
            "weighted_sum": float((a * weights).sum())}


def _check_anchors(spec: SSDSpec, data: Dict[str, Any]) -> None:
    check = data.get("anchors_check")
    anchors = spec.anchors()
    if expect_number(data.get("num_anchors", len(anchors)), "num_anchors", 0, MAX_ANCHORS, integer=True) != len(anchors):
        raise ModelError("the sidecar says %s anchors but its generator parameters give %d"
                         % (data.get("num_anchors"), len(anchors)), hint="re-export the detector")
    if check:
        want = _anchor_check(anchors)
        got = np.array(check["first"] + check["last"], dtype=np.float64)
        # float32 anchors are exact IEEE arithmetic (the same bits on any CPU); the tolerances only absorb
        # JSON's decimal round trip and would still catch any anchor moving by 1e-3
        if (not np.allclose(got, want["first"] + want["last"], atol=1e-6)
                or abs(float(check["weighted_sum"]) - want["weighted_sum"]) > 1e-3):
            raise ModelError("the sidecar's anchors do not match what its generator parameters produce",
                             hint="the sidecar was edited or written by another version; re-export the detector")


def generate_anchors(layers: Sequence[AnchorLayer], image_size: Tuple[int, int] = (300, 300),
                     base_anchor_size: Tuple[float, float] = (1.0, 1.0)) -> np.ndarray:
    """``(A, 4)`` float32 anchors, in TF's operation order (``tile_anchors`` of grid_anchor_generator.py)."""
    f32 = np.float32
    im_h, im_w = f32(image_size[0]), f32(image_size[1])
    min_side = min(im_h, im_w)
    base_h = (min_side / im_h) * f32(base_anchor_size[0])
    base_w = (min_side / im_w) * f32(base_anchor_size[1])
    out = []
    for layer in layers:
        stride_y, stride_x = f32(1.0) / f32(layer.rows), f32(1.0) / f32(layer.cols)
        offset_y, offset_x = f32(0.5) * stride_y, f32(0.5) * stride_x
        scales = np.asarray(layer.scales, dtype=f32)
        ratio_sqrts = np.sqrt(np.asarray(layer.aspect_ratios, dtype=f32))
        heights = scales / ratio_sqrts * base_h
        widths = scales * ratio_sqrts * base_w
        y_centers = np.arange(layer.rows, dtype=f32) * stride_y + offset_y
        x_centers = np.arange(layer.cols, dtype=f32) * stride_x + offset_x
        k = len(scales)
        cy = np.broadcast_to(y_centers[:, None, None], (layer.rows, layer.cols, k)).reshape(-1)
        cx = np.broadcast_to(x_centers[None, :, None], (layer.rows, layer.cols, k)).reshape(-1)
        h = np.broadcast_to(heights[None, None, :], (layer.rows, layer.cols, k)).reshape(-1)
        w = np.broadcast_to(widths[None, None, :], (layer.rows, layer.cols, k)).reshape(-1)
        half_h, half_w = f32(0.5) * h, f32(0.5) * w
        out.append(np.stack([cy - half_h, cx - half_w, cy + half_h, cx + half_w], axis=1))
    return np.concatenate(out).astype(f32)


def decode_boxes(encodings: np.ndarray, anchors: np.ndarray,
                 scale_factors: Sequence[float] = (10.0, 10.0, 5.0, 5.0)) -> np.ndarray:
    """Faster-RCNN box decoding: ``(..., A, 4)`` encodings ``[ty, tx, th, tw]`` -> ``[ymin, xmin, ymax, xmax]``."""
    f32 = np.float32
    enc = np.asarray(encodings, dtype=f32)
    ymin, xmin, ymax, xmax = (anchors[:, i].astype(f32) for i in range(4))
    ha, wa = ymax - ymin, xmax - xmin
    yca, xca = ymin + ha / f32(2), xmin + wa / f32(2)
    ty = enc[..., 0] / f32(scale_factors[0])
    tx = enc[..., 1] / f32(scale_factors[1])
    th = enc[..., 2] / f32(scale_factors[2])
    tw = enc[..., 3] / f32(scale_factors[3])
    with np.errstate(over="ignore"):  # an absurd encoding gives an infinite box, removed by clipping/NMS
        w = np.exp(tw) * wa
        h = np.exp(th) * ha
    yc = ty * ha + yca
    xc = tx * wa + xca
    return np.stack([yc - h / f32(2), xc - w / f32(2), yc + h / f32(2), xc + w / f32(2)], axis=-1)


def convert_scores(logits: np.ndarray, converter: str = "sigmoid", logit_scale: float = 1.0) -> np.ndarray:
    """Per-class scores from logits ``(..., classes + 1)``, background column included."""
    x = np.asarray(logits, dtype=np.float32) / np.float32(logit_scale)
    if converter == "sigmoid":
        with np.errstate(over="ignore"):
            return (np.float32(1) / (np.float32(1) + np.exp(-x))).astype(np.float32)
    if converter == "softmax":
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)
    return x


@dataclass
class SsdOutput:
    """One image's output of the SSD decoder, in the decoder's own convention: ``boxes`` ``(K, 4)`` normalised
    ``[ymin, xmin, ymax, xmax]`` of the model input (TensorFlow's, and EfficientNMS's), best first.

    ``classes`` index ``labels`` (the background is not counted).  Everything outside the decoder takes
    :meth:`to_detections`: a :class:`~jetforge.vision.detections.Detections` in the frame's pixels.
    """

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray
    labels: Tuple[str, ...] = ()

    def __len__(self) -> int:
        return int(len(self.scores))

    def xyxy(self, plan: ResizePlan, input_hw: Tuple[int, int]) -> np.ndarray:
        """Boxes as float64 ``x1, y1, x2, y2`` pixels of the original image, through the preprocessing's ``plan``."""
        h, w = input_hw
        px = self.boxes[:, [1, 0, 3, 2]].astype(np.float64) * np.array([w, h, w, h], dtype=np.float64)
        x1, y1 = plan.to_image(px[:, 0], px[:, 1])
        x2, y2 = plan.to_image(px[:, 2], px[:, 3])
        return np.stack([x1, y1, x2, y2], axis=1) if len(px) else np.zeros((0, 4))

    def to_detections(self, plan: ResizePlan, input_hw: Tuple[int, int]) -> Detections:
        """The detections in the original image's pixels (float32 boxes and scores)."""
        boxes = np.asarray(self.xyxy(plan, input_hw), np.float32).reshape(-1, 4)
        return Detections(boxes, self.scores.astype(np.float32), self.classes, self.labels)

    def above(self, threshold: float) -> "SsdOutput":
        keep = self.scores >= threshold
        return SsdOutput(self.boxes[keep], self.scores[keep], self.classes[keep], self.labels)


def postprocess(box_encodings: np.ndarray, class_logits: np.ndarray, spec: SSDSpec,
                score_threshold: Optional[float] = None, anchors: Optional[np.ndarray] = None) -> List[SsdOutput]:
    """The decoder's output per image from the body's outputs ``(N, A, 4)`` and ``(N, A, classes + 1)``.

    ``score_threshold`` (default: the exported model's, 1e-8 for the TF person detector) may be
    raised for speed: greedy NMS never lets a lower score suppress a higher one, so the result is
    exactly the full result's detections above that threshold.  Frame by frame; for many frames at a
    high threshold :func:`jetforge.vision.ssd_batch.postprocess_batch` gives the same faster.
    """
    boxes_all, scores_all, threshold = decode_all(box_encodings, class_logits, spec, score_threshold, anchors)
    return [_select(boxes_all[i], scores_all[i], spec, threshold) for i in range(len(boxes_all))]


def decode_all(box_encodings: np.ndarray, class_logits: np.ndarray, spec: SSDSpec,
               score_threshold: Optional[float] = None,
               anchors: Optional[np.ndarray] = None) -> Tuple[np.ndarray, np.ndarray, float]:
    """The outputs checked against ``spec`` and decoded: boxes ``(N, A, 4)``, scores ``(N, A, classes)`` (no
    background) and the threshold NMS applies (the caller's, never below the exported model's)."""
    enc = np.asarray(box_encodings)
    logits = np.asarray(class_logits)
    a = spec.num_anchors
    if enc.ndim != 3 or enc.shape[1:] != (a, 4) or logits.shape != enc.shape[:2] + (spec.num_classes,):
        raise ModelError("SSD outputs have shapes %s and %s; this detector needs (N, %d, 4) and (N, %d, %d)"
                         % (enc.shape, logits.shape, a, a, spec.num_classes),
                         hint="the model and its sidecar do not belong together; re-export the detector")
    anchors = spec.anchors() if anchors is None else anchors
    threshold = spec.score_threshold if score_threshold is None else max(float(score_threshold),
                                                                          spec.score_threshold)
    boxes_all = decode_boxes(enc, anchors, spec.scale_factors)
    scores_all = convert_scores(logits, spec.score_converter, spec.logit_scale)[..., 1:]
    return boxes_all, scores_all, threshold


def select_detections(boxes: np.ndarray, scores: np.ndarray, spec: SSDSpec, threshold: float) -> SsdOutput:
    """One image's output from its decoded ``(K, 4)`` boxes and ``(K, classes)`` scores (no background).

    The host half of :func:`postprocess` (per-class NMS, sort, clip, ``max_total``), also run on the few
    candidates the GPU decoder (:mod:`jetforge.vision.ssd_gpu`) sends back, in anchor order.
    """
    return _select(boxes, scores, spec, threshold)


def _select(boxes: np.ndarray, scores: np.ndarray, spec: SSDSpec, threshold: float) -> SsdOutput:
    picked_boxes, picked_scores, picked_classes = [], [], []
    for c in range(scores.shape[1]):
        keep = nms(boxes, scores[:, c], spec.iou_threshold, threshold, spec.max_per_class)
        picked_boxes.append(boxes[keep])
        picked_scores.append(scores[keep, c])
        picked_classes.append(np.full(len(keep), c, dtype=np.int64))
    b = np.concatenate(picked_boxes) if picked_boxes else np.zeros((0, 4), np.float32)
    s = np.concatenate(picked_scores) if picked_scores else np.zeros(0, np.float32)
    k = np.concatenate(picked_classes) if picked_classes else np.zeros(0, np.int64)
    order = np.argsort(-s, kind="stable")
    b, s, k = b[order], s[order], k[order]
    b = np.clip(b, 0.0, 1.0).astype(np.float32)  # the clip window [0, 0, 1, 1]
    nonempty = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]) > 0
    b, s, k = b[nonempty], s[nonempty], k[nonempty]
    n = min(spec.max_total, len(s))
    return SsdOutput(b[:n], s[:n], k[:n], tuple(spec.labels))


__all__ = ["AnchorLayer", "SSDSpec", "SSD_EXTRA_KEY", "SsdOutput", "convert_scores", "decode_all", "decode_boxes",
           "generate_anchors", "postprocess", "select_detections", "spec_from_sidecar", "ssd_anchor_layers"]
