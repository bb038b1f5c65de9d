"""Metrics of an INT8 candidate's raw outputs against FP32's, pluggable through one registry.

:class:`~jetforge.calibrate.evaluate.Evaluator` runs the FP32 model and every candidate over the same
inputs and keeps their *raw outputs* (one array per model output, samples along axis 0).  A metric
turns the two into numbers.  Metrics are classes registered in :data:`METRICS`
(a :class:`jetforge.registry.Registry`); the evaluator instantiates the ones it is asked for by name.

Adding one (detection AP, clip accuracy, ...) is one class::

    from jetforge.calibrate.metrics import METRICS, Metric

    @METRICS.register("detection_ap")
    class DetectionAP(Metric):
        \"\"\"mAP@0.5 of the candidate's boxes against the ground truth, and against FP32's boxes.\"\"\"

        def __init__(self, decode, iou: float = 0.5) -> None:   # options come from Evaluator(metric_options=)
            self.decode, self.iou = decode, iou

        def compute(self, reference, candidate, targets=None):
            ref_boxes = self.decode(reference)     # reference/candidate: List[np.ndarray], one per output
            cand_boxes = self.decode(candidate)
            return {"map_vs_fp32": ..., "map": ... if targets is not None else None}

The contract of :meth:`Metric.compute`:

* ``reference`` and ``candidate`` are lists with one array per model output, in the model's output
  order, each with the samples along axis 0 (the evaluator concatenates batches); they have the
  same shapes;
* ``targets`` is whatever ground truth the caller gave the evaluator (class indices for
  classification, -1 where unknown; per-sample box lists for detection; ...) or None;
* it returns a flat ``{name: number or None}`` dict (JSON-ready; round nothing), which lands in
  ``EvalResult.metrics[metric_name]`` and in reports;
* it must not depend on batch boundaries, and must be deterministic.

Registered here: ``classification`` (top-1/top-5 agreement with FP32 overall and on confident
samples, mean KL of the softmax outputs, output SQNR, labelled accuracy -- the fields of
:class:`EvalResult`), ``output_sqnr`` (SQNR of every output, for any task) and ``detection_ap``
(person AP of an SSD detector's decoded boxes against labelled boxes, :class:`DetectionTarget`) and
``clip_accuracy`` (a clip classifier's top-1 agreement with FP32 and labelled accuracy, with bootstrap
intervals over clips or groups of clips).
"""

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from jetforge.errors import CalibrationError
from jetforge.registry import Registry

CONFIDENCE = 0.5


class Metric:
    """Base of INT8 evaluation metrics (module doc); subclasses set nothing else but ``compute``."""

    def __init__(self, **options: Any) -> None:
        if options:
            raise CalibrationError("metric %s takes no options, got %s" % (type(self).__name__, sorted(options)))

    def compute(self, reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray],
                targets: Optional[Any] = None) -> Dict[str, Optional[float]]:
        raise NotImplementedError


METRICS: "Registry[type]" = Registry("INT8 evaluation metric")


def softmax(x: np.ndarray) -> np.ndarray:
    """Row softmax in float64; rows that already are probabilities (>= 0, sum 1) are kept."""
    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    if x.size and x.min() >= 0 and np.allclose(x.sum(axis=1), 1.0, atol=1e-3):
        return x
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def sqnr_db(reference: np.ndarray, candidate: np.ndarray) -> float:
    """10 log10(sum ref^2 / sum (ref - cand)^2), in float64; inf when they are equal."""
    return sqnr_from_sums(*sqnr_sums(reference, candidate))


def sqnr_sums(reference: np.ndarray, candidate: np.ndarray) -> Tuple[float, float]:
    """(sum ref^2, sum (ref - cand)^2) in float64: :func:`sqnr_db`'s two sums, which a streamed evaluation adds up
    batch by batch."""
    ref = np.asarray(reference, dtype=np.float64)
    return float(np.sum(ref ** 2)), float(np.sum((ref - np.asarray(candidate, dtype=np.float64)) ** 2))


def sqnr_from_sums(signal: float, err: float) -> float:
    """SQNR (dB) of a signal energy and an error energy; inf when the error is 0."""
    if err == 0:
        return float("inf")
    return 10.0 * math.log10(signal / err) if signal > 0 else float("-inf")


@dataclass
class EvalResult:
    """How a candidate model's outputs compare with FP32's on the same inputs (classification fields)."""

    samples: int
    agreement: float
    confident_samples: int
    agreement_confident: Optional[float]
    top5_agreement: float
    mean_kl: float
    output_sqnr_db: float
    fp32_mean_confidence: float
    confidence: float = CONFIDENCE
    labelled: int = 0
    accuracy_fp32: Optional[float] = None
    accuracy_int8: Optional[float] = None
    top5_fp32: Optional[float] = None
    top5_int8: Optional[float] = None
    seconds: float = 0.0
    arithmetic: str = ""                                             # which evaluator produced the numbers
    metrics: Dict[str, Dict[str, Any]] = field(default_factory=dict)  # every registered metric asked for

    @property
    def accuracy_drop(self) -> Optional[float]:
        if self.accuracy_fp32 is None or self.accuracy_int8 is None:
            return None
        return self.accuracy_fp32 - self.accuracy_int8

    def to_dict(self) -> Dict[str, object]:
        d: Dict[str, object] = {
            "samples": self.samples, "agreement": _r(self.agreement),
            "confident_samples": self.confident_samples, "agreement_confident": _r(self.agreement_confident),
            "confidence_threshold": self.confidence, "top5_agreement": _r(self.top5_agreement),
            "mean_kl": _r(self.mean_kl, 6), "output_sqnr_db": _r(self.output_sqnr_db, 2),
            "fp32_mean_confidence": _r(self.fp32_mean_confidence)}
        if self.labelled:
            d.update({"labelled": self.labelled, "accuracy_fp32": _r(self.accuracy_fp32),
                      "accuracy_int8": _r(self.accuracy_int8), "accuracy_drop": _r(self.accuracy_drop),
                      "top5_fp32": _r(self.top5_fp32), "top5_int8": _r(self.top5_int8)})
        if self.arithmetic:
            d["arithmetic"] = self.arithmetic
        others = {k: v for k, v in self.metrics.items() if k != "classification"}
        if others:
            d["metrics"] = {k: {n: (_r(x, 6) if isinstance(x, float) else x) for n, x in v.items()}
                            for k, v in others.items()}
        return d


def _r(v: Optional[float], digits: int = 4) -> Optional[float]:
    return None if v is None or (isinstance(v, float) and (math.isnan(v))) else round(float(v), digits)


def _in_topk(p: np.ndarray, classes: np.ndarray, k: int) -> np.ndarray:
    """Per row, whether ``classes[i]`` is among the ``k`` highest of ``p[i]``: fewer than ``k`` classes above it.

    Counted, not sorted: which of several equal values a partial sort returns depends on numpy's kernels for the
    CPU's instruction set (AVX2, AVX-512 and baseline order ties differently), and simulated INT8 outputs do tie.
    A class tied at the k-th place counts as in the top k.
    """
    own = p[np.arange(len(p)), classes]
    return (p > own[:, None]).sum(axis=1) < k


def compare_outputs(reference: np.ndarray, candidate: np.ndarray, labels: Optional[np.ndarray] = None,
                    confidence: float = CONFIDENCE) -> EvalResult:
    """Metrics of ``candidate`` outputs (N, classes) against FP32 ``reference``; ``labels`` (N,), -1 = none."""
    ref = np.asarray(reference, dtype=np.float64).reshape(len(reference), -1)
    cand = np.asarray(candidate, dtype=np.float64).reshape(len(candidate), -1)
    if ref.shape != cand.shape:
        raise CalibrationError("the INT8 model's output has shape %s but FP32's has %s" % (cand.shape, ref.shape))
    n = len(ref)
    if n == 0:
        raise CalibrationError("no evaluation samples", hint="give --eval a folder of images or a video")
    p, q = softmax(ref), softmax(cand)
    top_p, top_q = p.argmax(axis=1), q.argmax(axis=1)
    agree = top_p == top_q
    conf = p.max(axis=1)
    confident = conf > confidence
    top5_agree = _in_topk(q, top_p, 5)
    with np.errstate(divide="ignore", invalid="ignore"):
        kl = np.where(p > 0, p * (np.log(np.maximum(p, 1e-300)) - np.log(np.maximum(q, 1e-300))), 0.0).sum(axis=1)
    res = EvalResult(samples=n, agreement=float(agree.mean()), confident_samples=int(confident.sum()),
                     agreement_confident=float(agree[confident].mean()) if confident.any() else None,
                     top5_agreement=float(top5_agree.mean()), mean_kl=float(np.mean(kl)),
                     output_sqnr_db=sqnr_db(ref, cand), fp32_mean_confidence=float(conf.mean()),
                     confidence=confidence)
    if labels is not None:
        y = np.asarray(labels).reshape(-1)
        if len(y) != n:
            raise CalibrationError("%d labels for %d evaluation samples" % (len(y), n))
        known = y >= 0
        if known.any():
            yk = y[known]
            res.labelled = int(known.sum())
            res.accuracy_fp32 = float((top_p[known] == yk).mean())
            res.accuracy_int8 = float((top_q[known] == yk).mean())
            res.top5_fp32 = float(_in_topk(p[known], yk, 5).mean())
            res.top5_int8 = float(_in_topk(q[known], yk, 5).mean())
    return res


@METRICS.register("classification")
class ClassificationMetric(Metric):
    """Top-1/top-5 agreement, confident agreement, mean KL, SQNR and labelled accuracy of output ``output``."""

    def __init__(self, confidence: float = CONFIDENCE, output: int = 0) -> None:
        self.confidence = float(confidence)
        self.output = int(output)

    def result(self, reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray],
               targets: Optional[Any] = None) -> EvalResult:
        labels = None if targets is None else np.asarray(targets, dtype=np.int64).reshape(-1)
        return compare_outputs(reference[self.output], candidate[self.output], labels, self.confidence)

    def compute(self, reference, candidate, targets=None):
        d = self.result(reference, candidate, targets).to_dict()
        return {k: v for k, v in d.items() if k not in ("arithmetic", "metrics")}


@METRICS.register("output_sqnr")
class OutputSqnrMetric(Metric):
    """SQNR (dB) of every model output against FP32, and the worst of them: meaningful for any task."""

    def compute(self, reference, candidate, targets=None):
        return self.block([sqnr_db(r, c) for r, c in zip(reference, candidate)])

    @staticmethod
    def block(values: Sequence[float]) -> Dict[str, Optional[float]]:
        """The metric's fields from each output's SQNR."""
        out: Dict[str, Optional[float]] = {"output_%d_sqnr_db" % i: v for i, v in enumerate(values)}
        out["min_sqnr_db"] = min(values) if values else None
        return out


@dataclass
class DetectionTarget:
    """Ground truth of one evaluation frame for :class:`DetectionAPMetric`.

    ``boxes`` ``(N, 4)`` x1, y1, x2, y2 in pixels of the original frame of size ``image_hw``;
    ``difficult`` ``(N,)`` marks boxes that are neither required nor counted; ``group`` names the block
    of correlated frames the frame belongs to (for the block bootstrap; None = its own block); ``classes`` ``(N,)``
    the model's class index of each box (None: all class 0, a one-class detector).
    """

    boxes: np.ndarray
    difficult: np.ndarray
    image_hw: Sequence[int]
    group: Optional[str] = None
    classes: Optional[np.ndarray] = None


@METRICS.register("detection_ap")
class DetectionAPMetric(Metric):
    """AP@0.5 and AP@[.5:.95] per class and their mean, of FP32 and the candidate against labelled boxes, with paired
    bootstrap CIs.

    Both models' raw outputs are decoded by the detector's registered output decoder
    (:func:`jetforge.vision.decode.decoder_for`: the sidecar names it, e.g. the SSD's box coder and NMS), at
    ``score_threshold`` and COCO's 100 detections per image, mapped back to frame pixels through the input
    contract's geometry, and scored by :mod:`jetforge.vision.detection_metrics` (COCO's matching, difficult boxes
    ignored) per class present in the targets; the headline numbers are the mean over those classes (COCO's mAP;
    with one class, that class's AP).  The difference candidate - FP32 has a paired bootstrap interval over frames
    and, when the targets name groups, over groups of frames (neighbouring video frames are correlated, so the group
    interval is the honest one); a goal about the difference holds only if the interval's bound does.  Without
    targets only the frame count is reported.
    """

    def __init__(self, sidecar: Any = None, score_threshold: float = 0.01, n_resamples: int = 2000, seed: int = 0,
                 output_names: Sequence[str] = (), progress: bool = False) -> None:
        from jetforge.runtime.inputs import input_contract
        from jetforge.vision.decode import DecoderOptions, decoder_for

        if sidecar is None:
            raise CalibrationError("the detection_ap metric needs the detector's sidecar (its decoder)",
                                   hint="pass metric_options={'detection_ap': {'sidecar': sidecar}}")
        self.decoder = decoder_for(sidecar)
        self.decoder.options = DecoderOptions(score_threshold=float(score_threshold),
                                              iou_threshold=self.decoder.options.iou_threshold, max_detections=100,
                                              class_agnostic=self.decoder.options.class_agnostic)
        self.preprocess = input_contract(sidecar, "image", purpose="detection AP")
        self.n_resamples = int(n_resamples)
        self.seed = int(seed)
        self.progress = bool(progress)  # a bar for a long bootstrap (many classes)

    def detections(self, outputs: Sequence[np.ndarray], targets: Sequence[DetectionTarget]):
        """(boxes, scores, classes) per frame of one model's raw outputs, boxes in frame pixels x1, y1, x2, y2."""
        dets = self.decoder.decode_frames(list(outputs), self.preprocess, [tuple(t.image_hw)[:2] for t in targets])
        return [d.boxes for d in dets], [d.scores for d in dets], [d.classes for d in dets]

    def compute(self, reference, candidate, targets=None):
        n = len(reference[0])
        if targets is None:
            return {"frames": n}
        targets = list(targets)
        if len(targets) != n:
            raise CalibrationError("%d detection targets for %d evaluation frames" % (len(targets), n))
        return self.score(self.detections(reference, targets), self.detections(candidate, targets), targets)

    def score(self, reference: Tuple[List[np.ndarray], ...], candidate: Tuple[List[np.ndarray], ...],
              targets: Sequence[DetectionTarget]) -> Dict[str, Optional[float]]:
        """The metric's fields from both models' :meth:`detections` of every frame (a streamed evaluation decodes
        them batch by batch and keeps only these)."""
        from jetforge.vision.detection_metrics import class_bootstraps

        targets = list(targets)
        classes = [np.zeros(len(t.boxes), np.int64) if t.classes is None else np.asarray(t.classes, np.int64)
                   for t in targets]
        present = sorted({int(c) for d, k in zip((t.difficult for t in targets), classes)
                          for c in np.asarray(k)[~np.asarray(d, bool)]})
        gt = ([t.boxes for t in targets], [t.difficult for t in targets], classes)
        grouped = any(t.group is not None for t in targets)
        groupings = [None] + ([[t.group if t.group is not None else "frame%d" % i for i, t in enumerate(targets)]]
                              if grouped else [])
        boots = class_bootstraps(gt, candidate, reference, present or [0], groupings, n_resamples=self.n_resamples,
                                 seed=self.seed, progress=self.progress)
        by_frame = boots[0]
        out: Dict[str, Optional[float]] = {"frames": len(targets), "classes": len(present), "boxes": int(sum(
            int((~np.asarray(d, bool)).sum()) for d in gt[1]))}
        _ap_fields(out, "", by_frame["mean"])
        labels = self.decoder.labels
        for c, entry in by_frame["classes"].items():
            _ap_fields(out, "class/%s/" % (labels[c] if c < len(labels) else c), entry, short=True)
        if grouped:
            blocks = boots[1]["mean"]["difference"]
            out.update({"ap50_diff_block_ci_low": blocks["ap50_ci"][0],
                        "ap50_diff_block_ci_high": blocks["ap50_ci"][1],
                        "ap_diff_block_ci_low": blocks["ap_ci"][0], "ap_diff_block_ci_high": blocks["ap_ci"][1]})
        return out


def _ap_fields(out: Dict[str, Optional[float]], prefix: str, entry: Dict[str, Any], short: bool = False) -> None:
    """Flat metric keys of one :func:`~jetforge.vision.detection_metrics.class_bootstrap` block."""
    for key, side in (("int8", "a"), ("fp32", "b")):
        out[prefix + "ap50_" + key] = entry[side]["ap50"]
        out[prefix + "ap_" + key] = entry[side]["ap"]
    diff = entry["difference"]
    out.update({prefix + "ap50_diff": diff["ap50"], prefix + "ap_diff": diff["ap"],
                prefix + "ap50_diff_ci_low": diff["ap50_ci"][0], prefix + "ap50_diff_ci_high": diff["ap50_ci"][1]})
    if not short:
        out.update({prefix + "ap_diff_ci_low": diff["ap_ci"][0], prefix + "ap_diff_ci_high": diff["ap_ci"][1]})


def bootstrap_ci(values: np.ndarray, groups: Optional[Sequence[Any]] = None, n_resamples: int = 2000, seed: int = 0,
                 level: float = 0.95) -> Tuple[Optional[float], Optional[float]]:
    """Percentile bootstrap interval of the mean of ``values`` (per sample), resampling samples or, with ``groups``,
    whole groups of samples (clips of one track are correlated: the group interval is the honest one)."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if v.size == 0:
        return None, None
    rng = np.random.default_rng(seed)
    if groups is None:
        means = v[rng.integers(0, v.size, size=(n_resamples, v.size))].mean(axis=1)
    else:
        _, index = np.unique(np.asarray([str(g) for g in groups]), return_inverse=True)
        sums, counts = np.bincount(index, weights=v), np.bincount(index).astype(np.float64)
        pick = rng.integers(0, len(sums), size=(n_resamples, len(sums)))
        means = sums[pick].sum(axis=1) / counts[pick].sum(axis=1)
    tail = 100.0 * (1.0 - level) / 2.0
    return float(np.percentile(means, tail)), float(np.percentile(means, 100.0 - tail))


@METRICS.register("clip_accuracy", summary="clip classifier: top-1 agreement with FP32 and, with labels, accuracy of "
                                           "both, with bootstrap intervals")
class ClipAccuracyMetric(Metric):
    """Top-1 agreement of the candidate with FP32 over clips and, where clips are labelled, the accuracy of both and
    the paired difference (candidate - FP32), each with a percentile bootstrap interval.

    ``groups`` (one name per clip, e.g. its video and track) makes the intervals resample whole groups: the clips of
    one track overlap in time and are not independent.  ``Evaluator.subset`` keeps a prefix of the samples, so the
    first ``n`` groups are used for ``n`` clips.  Targets are class indices (-1: unlabelled), as for
    ``classification``.
    """

    def __init__(self, output: int = 0, groups: Optional[Sequence[Any]] = None, n_resamples: int = 2000,
                 seed: int = 0, level: float = 0.95) -> None:
        self.output, self.groups = int(output), None if groups is None else list(groups)
        self.n_resamples, self.seed, self.level = int(n_resamples), int(seed), float(level)

    def _ci(self, values: np.ndarray, groups: Optional[List[Any]], prefix: str) -> Dict[str, Optional[float]]:
        low, high = bootstrap_ci(values, groups, self.n_resamples, self.seed, self.level)
        return {prefix + "_ci_low": low, prefix + "_ci_high": high}

    def compute(self, reference, candidate, targets=None):
        ref = np.asarray(reference[self.output]).reshape(len(reference[self.output]), -1)
        cand = np.asarray(candidate[self.output]).reshape(len(candidate[self.output]), -1)
        if ref.shape != cand.shape:
            raise CalibrationError("the INT8 model's output has shape %s but FP32's has %s" % (cand.shape, ref.shape))
        n = len(ref)
        if n == 0:
            raise CalibrationError("no evaluation clips", hint="give --eval a video long enough for one clip")
        groups = None
        if self.groups is not None:
            if len(self.groups) < n:
                raise CalibrationError("%d clip groups for %d clips" % (len(self.groups), n))
            groups = self.groups[:n]
        top_ref, top_cand = ref.argmax(axis=1), cand.argmax(axis=1)
        agree = (top_ref == top_cand).astype(np.float64)
        out: Dict[str, Optional[float]] = {"clips": n, "groups": len(set(map(str, groups))) if groups else n,
                                           "agreement": float(agree.mean())}
        out.update(self._ci(agree, groups, "agreement"))
        y = None if targets is None else np.asarray(targets, dtype=np.int64).reshape(-1)
        if y is not None and len(y) != n:
            raise CalibrationError("%d labels for %d evaluation clips" % (len(y), n))
        known = np.zeros(n, bool) if y is None else y >= 0
        out["labelled"] = int(known.sum())
        if not known.any():
            out.update({k: None for k in ("accuracy_fp32", "accuracy_int8", "accuracy_diff", "accuracy_diff_ci_low",
                                          "accuracy_diff_ci_high")})
            return out
        right_ref = (top_ref[known] == y[known]).astype(np.float64)
        right_cand = (top_cand[known] == y[known]).astype(np.float64)
        kept = None if groups is None else [g for g, k in zip(groups, known) if k]
        out.update({"accuracy_fp32": float(right_ref.mean()), "accuracy_int8": float(right_cand.mean()),
                    "accuracy_diff": float(right_cand.mean() - right_ref.mean())})
        out.update(self._ci(right_ref, kept, "accuracy_fp32"))
        out.update(self._ci(right_cand, kept, "accuracy_int8"))
        out.update(self._ci(right_cand - right_ref, kept, "accuracy_diff"))
        return out


def make_metric(name: str, **options: Any) -> Metric:
    """An instance of the metric registered as ``name`` (UnknownNameError with close matches otherwise)."""
    return METRICS.get(name)(**options)


__all__ = ["CONFIDENCE", "ClassificationMetric", "ClipAccuracyMetric", "DetectionAPMetric", "DetectionTarget",
           "EvalResult", "METRICS", "Metric", "OutputSqnrMetric", "bootstrap_ci", "compare_outputs", "make_metric",
           "softmax", "sqnr_db", "sqnr_from_sums", "sqnr_sums"]
