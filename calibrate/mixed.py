"""Automatic mixed precision: keep the most INT8-sensitive layers in FP16 until an accuracy bound holds.

The layers of a Q/DQ model are ranked by :func:`~jetforge.calibrate.evaluate.layer_sensitivity`; the
``k`` most sensitive ones have their Q/DQ pairs bypassed (:func:`~jetforge.calibrate.evaluate.dequantize_layers`)
and the result is evaluated against FP32.  ``k`` grows 1, 2, 4, ... until the bound holds, then a binary
search finds the smallest such ``k`` (INT8 accuracy is close to monotone in ``k``; the search only
ever returns a ``k`` it has measured to satisfy the bound).

The bound is on one metric of :class:`~jetforge.calibrate.evaluate.EvalResult`:

* ``agreement_confident`` (default) -- top-1 agreement with FP32 on samples where FP32 is confident
  (falls back to ``agreement`` when fewer than ``min_confident`` are);
* ``agreement`` -- top-1 agreement with FP32 over all samples;
* ``accuracy_drop`` -- labelled top-1 accuracy drop (FP32 - INT8) at most the bound (a fraction:
  0.002 is 0.2 points).

Outputs, for TensorRT: the names of the layers to keep in FP16 -- ONNX node names, which are the
layer names TensorRT's ONNX parser gives -- as JSON and as the ``--layerPrecisions`` list of
``trtexec`` (with ``--precisionConstraints=obey``), for an implicit-INT8 build from the calibration
cache (DLA, TensorRT <= 10); and the Q/DQ ONNX without those layers' Q/DQ pairs, which explicit-INT8
TensorRT builds run in FP16 where no Q/DQ says otherwise.
"""

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from jetforge.calibrate.evaluate import (EvalResult, Evaluator, LayerSensitivity, dequantize_layers, layer_sensitivity,
                                         load, quantized_layers)
from jetforge.errors import CalibrationError, UnknownNameError
from jetforge.fileio import PathLike, write_json_atomic

log = logging.getLogger(__name__)

METRICS = ("agreement_confident", "agreement", "accuracy_drop")
MIN_CONFIDENT = 20
FORMAT = 1


def metric_value(res: EvalResult, metric: str, min_confident: int = MIN_CONFIDENT) -> float:
    if metric == "agreement_confident":
        if res.agreement_confident is None or res.confident_samples < min_confident:
            return res.agreement
        return res.agreement_confident
    if metric == "agreement":
        return res.agreement
    if metric == "accuracy_drop":
        if res.accuracy_drop is None:
            raise CalibrationError("the accuracy-drop bound needs labelled evaluation samples",
                                   hint="give --labels FILE, or bound the agreement instead")
        return res.accuracy_drop
    raise UnknownNameError("mixed-precision metric", metric, METRICS)


def satisfied(res: EvalResult, metric: str, bound: float, min_confident: int = MIN_CONFIDENT) -> bool:
    v = metric_value(res, metric, min_confident)
    return v <= bound + 1e-12 if metric == "accuracy_drop" else v >= bound - 1e-12


@dataclass
class MixedPrecisionResult:
    bound: float
    metric: str
    met: bool
    fp16_layers: List[str]
    int8_layers: List[str]
    result: EvalResult
    int8_result: EvalResult
    sensitivity: List[LayerSensitivity] = field(default_factory=list)
    method: str = "sqnr"
    trials: List[Dict[str, object]] = field(default_factory=list)
    model: object = None  # the Q/DQ ModelProto with fp16_layers dequantized

    @property
    def layer_precisions(self) -> str:
        """``trtexec --layerPrecisions`` value: ``name:fp16,name:fp16``."""
        return ",".join("%s:fp16" % n for n in self.fp16_layers)

    def to_dict(self) -> Dict[str, object]:
        return {"format": FORMAT, "bound": self.bound, "metric": self.metric, "met": self.met,
                "sensitivity_method": self.method, "fp16_layers": list(self.fp16_layers),
                "int8_layers": list(self.int8_layers),
                "trtexec": {"layerPrecisions": self.layer_precisions, "precisionConstraints": "obey",
                            "flags": "--int8 --fp16 --precisionConstraints=obey --layerPrecisions=%s"
                                     % self.layer_precisions if self.fp16_layers else "--int8 --fp16"},
                "achieved": self.result.to_dict(), "all_int8": self.int8_result.to_dict(),
                "trials": list(self.trials), "sensitivity": [s.to_dict() for s in self.sensitivity]}


def search(fp32_model, qdq_model, evaluator: Evaluator, bound: float, metric: str = "agreement_confident",
           method: str = "sqnr", sensitivity: Optional[Sequence[LayerSensitivity]] = None,
           always_fp16: Sequence[str] = (), max_fp16: Optional[int] = None, sensitivity_samples: int = 64,
           min_confident: int = MIN_CONFIDENT,
           progress: Optional[Callable[[str], None]] = None) -> MixedPrecisionResult:
    """The fewest most-sensitive layers to keep in FP16 for ``metric`` to meet ``bound`` on ``evaluator``."""
    if metric not in METRICS:
        raise UnknownNameError("mixed-precision metric", metric, METRICS)
    if metric != "accuracy_drop" and not 0.0 < bound <= 1.0:
        raise CalibrationError("an agreement bound must be in (0, 1], got %r" % bound,
                               hint="e.g. --mixed-precision 0.98")
    if metric == "accuracy_drop" and not 0.0 <= bound < 1.0:
        raise CalibrationError("an accuracy-drop bound must be in [0, 1), got %r" % bound,
                               hint="e.g. 0.002 for 0.2 points")
    fp32_model, qdq_model = load(fp32_model), load(qdq_model)
    layers = [q.name for q in quantized_layers(qdq_model)]
    if not layers:
        raise CalibrationError("the model has no Q/DQ layers to keep in FP16", hint="calibrate it first")
    sens = list(sensitivity) if sensitivity is not None else layer_sensitivity(
        fp32_model, qdq_model, evaluator.batches, method, evaluator=evaluator, max_samples=sensitivity_samples)
    forced = [n for n in always_fp16]
    unknown = [n for n in forced if n not in layers]
    if unknown:
        raise CalibrationError("%r is not a quantized layer of the model" % unknown[0],
                               hint="use names from the sensitivity table")
    order = forced + [s.name for s in sens if s.name not in forced]
    order += [n for n in layers if n not in order]  # layers the ranking could not measure go last
    limit = len(order) if max_fp16 is None else min(len(order), len(forced) + int(max_fp16))
    cache: Dict[int, EvalResult] = {}
    trials: List[Dict[str, object]] = []

    def trial(k: int) -> EvalResult:
        if k not in cache:
            model = dequantize_layers(qdq_model, order[:k]) if k else qdq_model
            cache[k] = evaluator.evaluate(model)
            ok = satisfied(cache[k], metric, bound, min_confident)
            trials.append({"fp16_layers": k, "value": round(metric_value(cache[k], metric, min_confident), 4),
                           "met": ok})
            if progress is not None:
                progress("%d FP16 layers: %s = %.4f%s" % (k, metric, metric_value(cache[k], metric, min_confident),
                                                          " (bound met)" if ok else ""))
        return cache[k]

    def ok(k: int) -> bool:
        return satisfied(trial(k), metric, bound, min_confident)

    start = len(forced)
    best: Optional[int] = None
    if ok(start):
        best = start
    else:
        lo, step = start, 1
        hi = None
        while True:
            k = min(start + step, limit)
            if ok(k):
                hi = k
                break
            lo = k
            if k >= limit:
                break
            step *= 2
        if hi is not None:
            while hi - lo > 1:  # lo fails, hi holds
                mid = (lo + hi) // 2
                if ok(mid):
                    hi = mid
                else:
                    lo = mid
            best = hi
    met = best is not None
    if best is None:
        # the bound cannot be met within the limit: return the best measured trial
        best = max(cache, key=lambda k: (-metric_value(cache[k], metric, min_confident)
                                         if metric == "accuracy_drop" else metric_value(cache[k], metric,
                                                                                        min_confident), -k))
        log.warning("mixed precision: %s bound %.4g not met with up to %d FP16 layers; best %s = %.4f with %d",
                    metric, bound, limit, metric, metric_value(cache[best], metric, min_confident), best)
    fp16 = order[:best]
    return MixedPrecisionResult(bound=bound, metric=metric, met=met, fp16_layers=fp16,
                                int8_layers=[n for n in layers if n not in fp16], result=cache[best],
                                int8_result=trial(0), sensitivity=sens, method=method, trials=trials,
                                model=dequantize_layers(qdq_model, fp16) if fp16 else qdq_model)


def write_outputs(result: MixedPrecisionResult, json_path: PathLike, qdq_path: Optional[PathLike] = None,
                  layers_path: Optional[PathLike] = None) -> Dict[str, Path]:
    """The layer-precision JSON, the mixed Q/DQ ONNX and a text list (``name:fp16`` per line)."""
    from jetforge.fileio import write_text_atomic

    written = {"json": write_json_atomic(json_path, result.to_dict())}
    if qdq_path is not None and result.model is not None:
        from jetforge.calibrate.qdq import save_model

        written["qdq"] = save_model(result.model, qdq_path)
    if layers_path is not None:
        written["layers"] = write_text_atomic(layers_path, "".join("%s:fp16\n" % n for n in result.fp16_layers))
    return written
