"""Automatic mixed precision: keep the most INT8-sensitive layers in FP16 until an accuracy bound holds.

**Choose on one split, report on another.**  A bound checked on the very images whose numbers are
then reported is optimistic: the search stops at the first ``k`` that happens to pass on those
images.  :func:`split_samples` divides the evaluation samples deterministically into a *selection*
split (which ranks the layers and picks ``k``) and a disjoint *report* split (never used to choose):
sample ``i`` of ``n`` falls in block ``floor(10 i / n)``; even blocks select, odd blocks report.
Contiguous blocks keep consecutive video frames together (at most 9 block boundaries), and every
part of a clip or folder feeds both splits.

**The rule, honest about non-monotonicity.**  The layers are ranked by
:func:`~jetforge.calibrate.sensitivity.layer_sensitivity` on the selection split; ``k`` = the number of
most sensitive layers kept in FP16 (their Q/DQ pairs bypassed by
:func:`~jetforge.calibrate.evaluate.dequantize_layers`).  INT8 accuracy is *not* monotone in ``k``
(MobileNetV2 measured 0.972 with 22 FP16 layers and 0.986 with 24, below and above a 0.98 bound
around a 23 that met it), so no bisection: ``k`` = start, start + 1, ... is evaluated on the
selection split, in order, and the answer is the **smallest k whose selection-split value meets the
bound** -- every smaller ``k`` was measured and failed.  ``CURVE_BEYOND`` more points after it and
the all-FP16 point are evaluated for the curve only.  Every evaluated ``k`` is also measured on the
report split, and the curve (metric against ``k`` on both splits) goes into the JSON and a plot; the
report-split value at the chosen ``k`` is the number to quote.  Cost: about ``k + 6`` evaluations of
all the evaluation samples.  When no ``k`` meets the bound, the ``k`` with the best selection value
is returned and ``met`` is false.

The bound is on one metric of :class:`~jetforge.calibrate.evaluate.EvalResult`:

* ``agreement_confident`` (default) -- top-1 agreement with FP32 on samples where FP32 is confident.
  With fewer than ``min_confident`` confident samples on the selection split the bound is applied to
  ``agreement`` (over all samples) instead -- unless all INT8 already meets it on the confident samples
  there are, in which case no layer is kept in FP16 (the stricter metric must not add FP16 layers to a
  model that meets the goal asked for).  ``metric_used`` and ``metric_note`` of the result say which
  metric decided and why; every value reported (curve, splits) is of that metric;
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
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from jetforge.calibrate.evaluate import EvalResult, Evaluator, dequantize_layers, load, quantized_layers
from jetforge.calibrate.sensitivity import LayerSensitivity, layer_sensitivity
from jetforge.errors import CalibrationError, UnknownNameError
from jetforge.fileio import PathLike, write_json_atomic

log = logging.getLogger(__name__)

METRICS = ("agreement_confident", "agreement", "accuracy_drop")
MIN_CONFIDENT = 20
FORMAT = 2
SPLIT_BLOCKS = 10
CURVE_BEYOND = 4
SPLIT_RULE = ("sample i of n is in block floor(%d*i/n); even blocks choose the FP16 layers (selection split), "
              "odd blocks are only reported (report split)" % SPLIT_BLOCKS)


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


# --------------------------------------------------------------------------- the split
@dataclass
class Split:
    """Sample indices of the selection and report splits (see the module doc)."""

    selection: List[int]
    report: List[int]
    dropped: int = 0                       # samples a fixed batch size left out of either split
    near_duplicates: Optional[Dict[str, object]] = None  # report samples with a near-duplicate in selection

    def to_dict(self) -> Dict[str, object]:
        d: Dict[str, object] = {"rule": SPLIT_RULE, "selection_samples": len(self.selection),
                                "report_samples": len(self.report), "dropped_for_fixed_batch": self.dropped}
        if self.near_duplicates is not None:
            d["report_near_duplicates_of_selection"] = self.near_duplicates
        return d


def split_samples(n: int, blocks: int = SPLIT_BLOCKS) -> Split:
    """Deterministic disjoint split of ``n`` samples in collection order: even blocks select, odd blocks report."""
    if n < 2:
        raise CalibrationError("mixed precision needs at least 2 evaluation samples to choose on one part and "
                               "report on another, got %d" % n, hint="give --eval more images or frames")
    blocks = min(blocks, n)
    block = [(blocks * i) // n for i in range(n)]
    return Split(selection=[i for i in range(n) if block[i] % 2 == 0],
                 report=[i for i in range(n) if block[i] % 2 == 1])


def split_evaluator(evaluator: Evaluator, split: Split) -> Tuple[Evaluator, Evaluator]:
    """Two evaluators over the selection and the report samples of ``evaluator`` (same arithmetic, same model).

    The batches keep ``evaluator``'s batch size; for a model whose batch axis is fixed, each split drops
    the samples that do not fill a last batch (``split.dropped`` counts them).
    """
    from jetforge.calibrate.stats import fixed_batch

    x = np.concatenate([np.asarray(b) for b in evaluator.batches], axis=0)
    size = len(evaluator.batches[0])
    fixed = fixed_batch(evaluator.fp32_model)
    made = []
    for part in ("selection", "report"):
        idx = list(getattr(split, part))
        if fixed:
            keep = len(idx) - len(idx) % fixed
            split.dropped += len(idx) - keep
            idx = idx[:keep]
            setattr(split, part, idx)
        if not idx:
            raise CalibrationError("the %s split of the %d evaluation samples is empty" % (part, evaluator.samples),
                                   hint="give --eval more images or frames")
        sub = x[idx]
        labels = None if evaluator.labels is None else evaluator.labels[idx]
        made.append(Evaluator(evaluator.fp32_model, [sub[i:i + size] for i in range(0, len(sub), size)],
                              labels=labels, confidence=evaluator.confidence, threads=evaluator.threads,
                              arithmetic=evaluator.arithmetic))
    return made[0], made[1]


# --------------------------------------------------------------------------- the search
@dataclass
class MixedPrecisionResult:
    bound: float
    metric: str
    met: bool                              # on the selection split, the one that chose
    fp16_layers: List[str]
    int8_layers: List[str]
    result: EvalResult                     # selection split, chosen k
    int8_result: EvalResult                # selection split, no FP16 layer
    sensitivity: List[LayerSensitivity] = field(default_factory=list)
    method: str = "sqnr"
    curve: List[Dict[str, object]] = field(default_factory=list)
    model: object = None                   # the Q/DQ ModelProto with fp16_layers dequantized
    report_result: Optional[EvalResult] = None   # report split, chosen k (the number to quote)
    report_int8_result: Optional[EvalResult] = None
    split: Optional[Split] = None
    metric_used: str = ""                  # the metric the bound was applied to ("" = metric)
    metric_note: str = ""                  # why it differs from metric, or on how few samples it was measured
    min_confident: int = MIN_CONFIDENT     # the confident-sample threshold the values were computed with

    def __post_init__(self) -> None:
        self.metric_used = self.metric_used or self.metric

    def value(self, res: EvalResult) -> float:
        """``res``'s value of :attr:`metric_used`, as the search computed it."""
        return metric_value(res, self.metric_used, self.min_confident)

    @property
    def trials(self) -> List[Dict[str, object]]:
        """The evaluated points of the curve (kept for callers of format 1)."""
        return self.curve

    @property
    def report_met(self) -> Optional[bool]:
        """Whether the bound also holds on the report split (None without one)."""
        if self.report_result is None:
            return None
        return satisfied(self.report_result, self.metric_used, self.bound, self.min_confident)

    @property
    def layer_precisions(self) -> str:
        """``trtexec --layerPrecisions`` value: ``name:fp16,name:fp16``."""
        return ",".join("%s:fp16" % n for n in self.fp16_layers)

    def to_dict(self) -> Dict[str, object]:
        def block(res: Optional[EvalResult], int8: Optional[EvalResult], note: str) -> Optional[Dict[str, object]]:
            if res is None:
                return None
            return {"samples": res.samples, "note": note, "value": round(self.value(res), 4),
                    "meets_bound": satisfied(res, self.metric_used, self.bound, self.min_confident),
                    "chosen": res.to_dict(), "all_int8": int8.to_dict() if int8 is not None else None}

        return {"format": FORMAT, "bound": self.bound, "metric": self.metric, "metric_used": self.metric_used,
                "metric_note": self.metric_note, "met": self.met,
                "rule": "smallest k (most sensitive layers in FP16) whose selection-split value meets the bound; "
                        "k = 0, 1, 2, ... evaluated in order",
                "sensitivity_method": self.method, "fp16_layers": list(self.fp16_layers),
                "int8_layers": list(self.int8_layers),
                "trtexec": {"layerPrecisions": self.layer_precisions, "precisionConstraints": "obey",
                            "flags": "--int8 --fp16 --precisionConstraints=obey --layerPrecisions=%s"
                                     % self.layer_precisions if self.fp16_layers else "--int8 --fp16"},
                "split": self.split.to_dict() if self.split is not None else None,
                "selection": block(self.result, self.int8_result, "used to rank the layers and choose k"),
                "report": block(self.report_result, self.report_int8_result, "not used to choose: quote these"),
                "curve": list(self.curve), "sensitivity": [s.to_dict() for s in self.sensitivity]}


def _check_bound(bound: float, metric: str) -> None:
    if metric not in METRICS:
        raise UnknownNameError("mixed-precision metric", metric, METRICS)
    if metric != "accuracy_drop" and not 0.0 < bound <= 1.0:
        raise CalibrationError("an agreement bound must be in (0, 1], got %r" % bound,
                               hint="e.g. --mixed-precision 0.98")
    if metric == "accuracy_drop" and not 0.0 <= bound < 1.0:
        raise CalibrationError("an accuracy-drop bound must be in [0, 1), got %r" % bound,
                               hint="e.g. 0.002 for 0.2 points")


def search(fp32_model, qdq_model, evaluator: Evaluator, bound: float, metric: str = "agreement_confident",
           method: str = "sqnr", sensitivity: Optional[Sequence[LayerSensitivity]] = None,
           always_fp16: Sequence[str] = (), max_fp16: Optional[int] = None, sensitivity_samples: int = 64,
           min_confident: int = MIN_CONFIDENT, progress: Optional[Callable[[str], None]] = None,
           report_evaluator: Optional[Evaluator] = None, beyond: int = CURVE_BEYOND) -> MixedPrecisionResult:
    """The smallest ``k`` most-sensitive layers in FP16 for which ``metric`` meets ``bound`` on ``evaluator``.

    ``evaluator`` is the selection split: it ranks the layers and decides.  ``k`` runs from the number
    of ``always_fp16`` layers upwards, one at a time, until the bound holds (no monotonicity assumed: the
    first ``k`` that meets the bound is the smallest).  ``beyond`` more ``k`` and the all-FP16 point are
    evaluated for the curve only.  ``report_evaluator`` (the report split) measures every evaluated ``k``
    too; it never influences the choice.
    """
    _check_bound(bound, metric)
    fp32_model, qdq_model = load(fp32_model), load(qdq_model)
    layers = [q.name for q in quantized_layers(qdq_model)]
    if not layers:
        raise CalibrationError("the model has no Q/DQ layers to keep in FP16", hint="calibrate it first")
    sens = list(sensitivity) if sensitivity is not None else layer_sensitivity(
        fp32_model, qdq_model, evaluator.batches, method, evaluator=evaluator, max_samples=sensitivity_samples)
    forced = list(always_fp16)
    unknown = [n for n in forced if n not in layers]
    if unknown:
        raise CalibrationError("%r is not a quantized layer of the model" % unknown[0],
                               hint="use names from the sensitivity table")
    order = forced + [s.name for s in sens if s.name not in forced]
    order += [n for n in layers if n not in order]  # layers the ranking could not measure go last
    limit = len(order) if max_fp16 is None else min(len(order), len(forced) + int(max_fp16))
    start = len(forced)
    int8 = evaluator.evaluate(qdq_model)
    used, note, min_confident = _metric_used(int8, metric, bound, min_confident, forced=bool(forced))
    if note:
        log.info("mixed precision: %s", note)
    curve = _Curve(qdq_model, order, evaluator, report_evaluator, used, bound, min_confident, progress)
    curve.selection[0] = int8
    best: Optional[int] = None
    for k in range(start, limit + 1):
        if curve.point(k, chooses=True):
            best = k
            break
    met = best is not None
    if best is None:
        # the bound cannot be met within the limit: the best selection value measured, fewest layers on ties
        sign = -1.0 if metric == "accuracy_drop" else 1.0
        best = max(curve.selection, key=lambda k: (sign * curve.value(curve.selection[k]), -k))
        log.warning("mixed precision: %s bound %.4g not met on the selection split with up to %d FP16 layers; best "
                    "%s = %.4f with %d", used, bound, limit, used, curve.value(curve.selection[best]), best)
    for k in list(range(best + 1, min(limit, best + beyond) + 1)) + [len(order)]:
        curve.point(k, chooses=False)
    all_int8 = curve.evaluate(0, evaluator, curve.selection)  # measured already unless layers were forced
    report_all_int8 = curve.evaluate(0, report_evaluator, curve.report)
    fp16 = order[:best]
    return MixedPrecisionResult(
        bound=bound, metric=metric, met=met, fp16_layers=fp16, int8_layers=[n for n in layers if n not in fp16],
        result=curve.selection[best], int8_result=all_int8, sensitivity=sens, method=method, curve=curve.rows(),
        model=dequantize_layers(qdq_model, fp16) if fp16 else qdq_model, report_result=curve.report.get(best),
        report_int8_result=report_all_int8, metric_used=used, metric_note=note, min_confident=min_confident)


def _metric_used(int8: EvalResult, metric: str, bound: float, min_confident: int,
                 forced: bool) -> Tuple[str, str, int]:
    """(metric the bound is applied to, why, confident-sample threshold for :func:`metric_value`).

    ``agreement_confident`` on fewer than ``min_confident`` confident samples of the selection split is too
    noisy to decide by, so plain ``agreement`` decides -- except when all INT8 (``int8``, the selection
    split's result with no FP16 layer) already meets the bound on the confident samples there are and no
    layer is forced into FP16: then the bound asked for holds as it is, and ``agreement_confident`` (on
    those samples) decides, which keeps every layer INT8.  (The confident samples are FP32's, the same for
    every ``k``.)
    """
    n = int8.confident_samples
    if metric != "agreement_confident" or n >= min_confident:
        return metric, "", min_confident
    if not forced and n > 0 and int8.agreement_confident is not None and int8.agreement_confident >= bound - 1e-12:
        return metric, ("all INT8 already meets agreement_confident >= %.4g on the %d confident samples of the "
                        "selection split (fewer than %d, so a noisy measure): no layer needs FP16"
                        % (bound, n, min_confident)), 1
    return "agreement", ("only %d confident samples on the selection split (fewer than %d): the bound is applied to "
                         "top-1 agreement over all its %d samples instead of agreement_confident"
                         % (n, min_confident, int8.samples)), min_confident


class _Curve:
    """Metric against the number of FP16 layers, on the selection split and (if given) the report split."""

    def __init__(self, qdq_model, order: List[str], selection: Evaluator, report: Optional[Evaluator], metric: str,
                 bound: float, min_confident: int, progress: Optional[Callable[[str], None]]) -> None:
        self.qdq_model, self.order, self.metric, self.bound = qdq_model, order, metric, bound
        self.min_confident, self.progress = min_confident, progress
        self.selection_ev, self.report_ev = selection, report
        self.selection: Dict[int, EvalResult] = {}
        self.report: Dict[int, EvalResult] = {}
        self.chooses: Dict[int, bool] = {}
        self._models: Dict[int, object] = {}

    def _model(self, k: int):
        if k not in self._models:
            self._models = {k: dequantize_layers(self.qdq_model, self.order[:k]) if k else self.qdq_model}
        return self._models[k]

    def evaluate(self, k: int, evaluator: Optional[Evaluator], cache: Dict[int, EvalResult]) -> Optional[EvalResult]:
        if evaluator is None:
            return None
        if k not in cache:
            cache[k] = evaluator.evaluate(self._model(k))
        return cache[k]

    def value(self, res: Optional[EvalResult]) -> Optional[float]:
        return None if res is None else metric_value(res, self.metric, self.min_confident)

    def point(self, k: int, chooses: bool) -> bool:
        """Evaluate ``k`` on both splits; True when the selection value meets the bound."""
        if k in self.chooses:
            self.chooses[k] = self.chooses[k] or chooses
        else:
            self.chooses[k] = chooses
        sel = self.evaluate(k, self.selection_ev, self.selection)
        rep = self.evaluate(k, self.report_ev, self.report)
        ok = satisfied(sel, self.metric, self.bound, self.min_confident)
        if self.progress is not None:
            self.progress("%d FP16 layers: selection %s = %.4f%s%s%s"
                          % (k, self.metric, self.value(sel), " (bound met)" if ok else "",
                             "; report split %.4f" % self.value(rep) if rep is not None else "",
                             "" if chooses else " (for the curve only)"))
        return ok

    def rows(self) -> List[Dict[str, object]]:
        out = []
        for k in sorted(self.selection):
            sel, rep = self.selection[k], self.report.get(k)
            row: Dict[str, object] = {"fp16_layers": k, "selection": round(self.value(sel), 4),
                                      "selection_met": satisfied(sel, self.metric, self.bound, self.min_confident),
                                      "used_to_choose": bool(self.chooses.get(k))}
            if rep is not None:
                row["report"] = round(self.value(rep), 4)
                row["report_met"] = satisfied(rep, self.metric, self.bound, self.min_confident)
            out.append(row)
        return out


# --------------------------------------------------------------------------- outputs
def plot_curve(result: MixedPrecisionResult, target: PathLike) -> Path:
    """Metric against FP16 layers on both splits, the bound and the chosen ``k`` (PNG)."""
    from jetforge.calibrate.report import new_figure, save_png

    from matplotlib.ticker import MaxNLocator

    rows = result.curve
    fig = new_figure(7.0, 4.0)
    ax = fig.add_axes((0.1, 0.13, 0.86, 0.75))
    sel = result.split.to_dict() if result.split is not None else {}
    for key, style, colour, label in (
            ("selection", "o-", "tab:blue",
             "selection split (%s samples, chooses k)" % sel.get("selection_samples", result.result.samples)),
            ("report", "s--", "tab:orange",
             "report split (%s samples, not used to choose)" % sel.get("report_samples", "?"))):
        xs, ys = _gapped([(r["fp16_layers"], r[key]) for r in rows if key in r])
        if xs:
            ax.plot(xs, ys, style, color=colour, ms=3, label=label)
    ax.axhline(result.bound, color="tab:red", lw=1, label="bound %.4g" % result.bound)
    ax.axvline(len(result.fp16_layers), color="tab:gray", lw=1, ls=":",
               label="chosen k = %d%s" % (len(result.fp16_layers), "" if result.met else " (bound not met)"))
    ax.set_xlabel("FP16 layers k (most sensitive first, the rest INT8); lines join neighbouring k only", fontsize=9)
    ax.set_ylabel(result.metric_used)
    ax.set_title("mixed precision: %s against FP16 layers" % result.metric_used, fontsize=10)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return save_png(fig, Path(target), dpi=100)


def _gapped(points: List[Tuple[int, float]]) -> Tuple[List[float], List[float]]:
    """x, y with a NaN between points whose k are not neighbours, so that no line suggests unmeasured values."""
    xs: List[float] = []
    ys: List[float] = []
    for i, (k, v) in enumerate(points):
        if i and k != points[i - 1][0] + 1:
            xs.append(float("nan"))
            ys.append(float("nan"))
        xs.append(float(k))
        ys.append(float(v))
    return xs, ys


def write_outputs(result: MixedPrecisionResult, json_path: PathLike, qdq_path: Optional[PathLike] = None,
                  layers_path: Optional[PathLike] = None, plot_path: Optional[PathLike] = None) -> Dict[str, Path]:
    """The layer-precision JSON, the mixed Q/DQ ONNX, a text list (``name:fp16`` per line) and the curve plot."""
    from jetforge.fileio import write_text_atomic

    written = {"json": write_json_atomic(json_path, result.to_dict())}
    if qdq_path is not None and result.model is not None:
        from jetforge.calibrate.qdq.export import save_model

        written["qdq"] = save_model(result.model, qdq_path)
    if layers_path is not None:
        written["layers"] = write_text_atomic(layers_path, "".join("%s:fp16\n" % n for n in result.fp16_layers))
    if plot_path is not None:
        try:
            written["plot"] = plot_curve(result, plot_path)
        except Exception as err:  # a plot is a convenience: never lose the layer list for it
            if isinstance(err, CalibrationError):
                raise
            log.warning("the mixed-precision curve plot was not written: %s", err)
    return written
