"""``calibrate()``: samples -> activation statistics -> scales -> cache + Q/DQ ONNX + report.

Outputs for ``model.onnx`` (or next to ``options.out``, a named cache path ``X.calib``, or inside it when it is a
folder: ``w/`` -> ``w/model.calib``):

* ``model.calib`` -- TensorRT calibration cache stamped for ``options.tensorrt_version`` (DLA, TensorRT <= 10);
* ``model.qdq.onnx`` (+ ``model.qdq.onnx.json`` sidecar) -- explicit Q/DQ (TensorRT >= 10 GPU, 11);
* ``model.calib.json`` -- the report; ``model.calib.plots/`` -- an overview of every tensor's range and
  histogram pages of the most clipped tensors (every tensor with ``plots="all"``);
* with ``options.evaluation.data``: the report's ``evaluation`` block (INT8 vs FP32 in simulated TensorRT INT8
  arithmetic, the same on any CPU; with ``int8_kernels`` also in ONNX Runtime's INT8 kernels on this CPU, labelled), on
  every evaluation sample by default (:mod:`jetforge.calibrate.eval_data`), with a near-duplicate check
  against the calibration samples;
* with ``options.mixed_precision.bound``: ``model.precisions.json`` / ``model.precisions.txt`` (the layers kept in
  FP16, for TensorRT's ``--layerPrecisions``), ``model.precisions.png`` (the metric against the number of
  FP16 layers on the selection and report splits) and ``model.mixed.qdq.onnx`` (+ sidecar).

The files of one run are one output set (:mod:`jetforge.calibrate.outputs`, recorded in ``.model.calib.set.json``):
written beside the previous run's in a hidden staging folder and moved into place together once all are written,
so a run stopped half-way leaves the previous run's files as they were, never a mix of the two.

:func:`check_cache` (:mod:`jetforge.calibrate.cache.check`, re-exported here) reads an existing cache and
checks its TensorRT version and tensor names.
"""

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

from jetforge.calibrate import algorithms
from jetforge.calibrate.cache.format import CalibrationCache, parse_trt_version, version_string
from jetforge.calibrate.cache.check import CacheCheck, check_cache, retarget_path  # noqa: F401  (re-exported)
from jetforge.calibrate import detection_eval as det_eval
from jetforge.calibrate import outputs as outputs_mod
from jetforge.calibrate.outputs import output_paths
from jetforge.calibrate.clips.calibration import ClipOptions, calibration_inputs, clip_evaluator, clip_lines
from jetforge.calibrate.clips.sources import TrackerFactory
from jetforge.calibrate.options import CalibrateOptions, resolve_options  # noqa: F401  (CalibrateOptions: public here)
from jetforge.calibrate.eval_data import evaluation_batches  # noqa: F401  (re-exported: tests, benchmarks)
from jetforge.calibrate.quality import QualityReport
from jetforge.calibrate.stats import ActivationStats, collect_statistics, load_model
from jetforge.errors import CalibrationError
from jetforge.fileio import PathLike, check_not_input, require_file
from jetforge.optional import require

log = logging.getLogger(__name__)

DataArg = Union[str, Path, Sequence[Union[str, Path]]]
EVAL_SAMPLES: Optional[int] = None  # every evaluation sample (memory permitting; see calibrate.eval_data)


@dataclass
class CalibrationResult:
    cache_path: Path
    cache: CalibrationCache
    amax: Dict[str, float]
    algorithm: str
    samples: int
    qdq_path: Optional[Path] = None
    report_path: Optional[Path] = None
    plots: List[Path] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    seconds: float = 0.0
    report: Dict[str, object] = field(default_factory=dict)
    evaluation: Dict[str, object] = field(default_factory=dict)
    mixed_qdq_path: Optional[Path] = None
    precisions_path: Optional[Path] = None
    tensor_algorithms: Dict[str, str] = field(default_factory=dict)  # where each amax came from (auto's choice)

    def to_dict(self) -> Dict[str, object]:
        return {"cache": str(self.cache_path), "qdq_onnx": str(self.qdq_path) if self.qdq_path else None,
                "mixed_qdq_onnx": str(self.mixed_qdq_path) if self.mixed_qdq_path else None,
                "layer_precisions": str(self.precisions_path) if self.precisions_path else None,
                "evaluation": dict(self.evaluation) if self.evaluation else None,
                "report": str(self.report_path) if self.report_path else None,
                "plots": [str(p) for p in self.plots], "header": self.cache.header,
                "trt_version": version_string(self.cache.trt_version), "algorithm": self.algorithm,
                "samples": self.samples, "tensors": len(self.cache), "warnings": list(self.warnings),
                "seconds": round(self.seconds, 2)}


def calibrate(model_path: PathLike, data: DataArg, options: Optional[CalibrateOptions] = None, *,
              clips: Optional[ClipOptions] = None, tracker: Optional[TrackerFactory] = None,
              **keywords: Any) -> CalibrationResult:
    """Calibrate ``model_path`` (ONNX with a sidecar) on ``data`` as ``options`` say, and write the outputs (see
    module doc).  ``options`` is a :class:`~jetforge.calibrate.options.CalibrateOptions` (every key and default
    is listed in :mod:`jetforge.calibrate.options`); the keyword form, ``calibrate(model, data, samples=64,
    eval_data=..., mixed_precision=0.98)`` with the names of :data:`~jetforge.calibrate.options.KEYWORDS`, builds
    the same options and runs the same path.

    ``algorithm`` picks each tensor's range (:mod:`jetforge.calibrate.algorithms`): ``percentile``
    (default, ``percentile`` = 99.99 of ``|x|``), ``entropy`` (TensorRT's EntropyCalibration2 KL search),
    ``mse``, ``max`` or ``auto`` (per tensor, the entropy/percentile/mse/max threshold with the smallest
    quantization MSE); the report's ``calibration.per_tensor_algorithm`` says where each range came from.
    The cache header stays ``cache_algorithm`` (``EntropyCalibration2``) whatever the algorithm: it names
    the calibrator class that reads the cache.

    With ``evaluation.data`` the Q/DQ model is evaluated against FP32 in simulated TensorRT INT8 arithmetic
    (agreement, KL, accuracy with ``labels``; see :mod:`jetforge.calibrate.evaluate`) into the report's
    ``evaluation`` block; ``int8_kernels`` adds the same measured with ONNX Runtime's INT8 kernels.
    ``evaluation.samples`` (default: all) caps the evaluation samples.
    With ``mixed_precision.bound`` (a bound on ``mixed_precision.metric``) the most sensitive layers are kept in
    FP16 until the bound holds on the selection half of the evaluation data (the calibration data when none
    is given); the numbers to quote are on the disjoint report half, never used to choose; the
    layer-precision list, the curve and the mixed Q/DQ ONNX are written (see :mod:`jetforge.calibrate.mixed`).
    ``plots``: True (an overview and the most clipped tensors), ``"all"`` (every tensor) or False.
    A clip model (sidecar input kind ``clip``) is fed clips cut as ``options.clips`` says (:mod:`.clip_calibration`),
    per-track clips along the tracks of ``tracker``; ``clips`` (a ready :class:`ClipOptions`) replaces both.
    """
    t0 = time.perf_counter()
    o = resolve_options(options, keywords)  # checked: a bad name or value fails before any sample is read
    labels, mixed_precision, sensitivity = o.evaluation.labels, o.mixed_precision.bound, o.evaluation.sensitivity
    algorithm, samples, plots, progress = o.algorithm, o.samples, o.plots, o.progress
    clips = clips if clips is not None else o.clips.runtime(tracker)
    version = parse_trt_version(o.tensorrt_version)
    model_file = require_file(model_path, "ONNX model", hint="give the path of an exported .onnx file")
    from jetforge.runtime.inputs import input_contract
    from jetforge.runtime.sidecar import read_sidecar

    sidecar = read_sidecar(model_file)
    contract = input_contract(sidecar, ("image", "clip"), purpose="calibration from images, video frames or clips")
    paths = output_paths(model_file, o.out)
    data_items = [data] if isinstance(data, (str, Path)) else list(data)
    eval_items = _check_eval_args(o, data_items if contract.kind == "image" else [],  # clips: split, checked by frames
                                  sidecar.task)
    inputs = [model_file] + [Path(d) for d in data_items + eval_items] + ([Path(labels)] if labels else [])
    for key in ("cache", "qdq", "report") + (("mixed_qdq", "precisions", "precisions_txt", "precisions_plot")
                                             if mixed_precision is not None else ()):
        check_not_input(paths[key], inputs)

    feed = calibration_inputs(sidecar, contract, clips, data_items, eval_items, samples, o.video_sampling, progress)
    source, tracker, eval_items, model = feed.source, feed.quality, feed.eval_items, load_model(model_file)
    stats = collect_statistics(model, source, feed.preprocess, batch_size=o.batch_size, tensors="all",
                               providers=o.providers, total=source.total, progress=progress, quality=tracker)
    quality = tracker.check(min_samples=o.min_samples)
    for w in quality.warnings:
        log.warning("%s", w)
    amax, per_tensor = algorithms.compute_all_with_choices(stats.histograms, algorithm, percentile=o.percentile)
    warnings = list(quality.warnings)
    nonfinite = [n for n, h in stats.histograms.items() if h.nonfinite]
    if nonfinite:
        warnings.append("%d tensors had inf/NaN values (ignored), e.g. %s" % (len(nonfinite), nonfinite[0]))
        log.warning("%s", warnings[-1])

    warnings.extend(outputs_mod.input_problems([model_file]))
    cache = CalibrationCache.from_amax(amax, version, o.cache_algorithm)
    result = CalibrationResult(cache_path=paths["cache"], cache=cache, amax=amax, algorithm=algorithm,
                               samples=stats.samples, warnings=warnings, tensor_algorithms=per_tensor)
    with outputs_mod.output_set(paths, inputs) as outputs:  # all moved into place once all are written
        staged = outputs_mod.staged_paths(outputs, paths)
        result.cache_path = cache.write(staged["cache"])
        qdq_info = outputs_mod.write_qdq_and_plots(result, stats, model, staged, model_file, sidecar, version, o.qdq,
                                                   o.check_build, plots)
        if eval_items or labels is not None or mixed_precision is not None or sensitivity:
            result.evaluation = _evaluate(model, result, staged, sidecar, model_file, eval_items or data_items, o,
                                          _held_out(data_items, eval_items), tracker.hashes, feed.clips)
        outputs_mod.relocate_result(result, outputs)  # the report names the files where they will be
        result.seconds = time.perf_counter() - t0
        if o.report:
            result.report = _report(result, stats, quality, source, model_file, outputs.relocate(qdq_info),
                                    o.batch_size, o.percentile)
            if result.evaluation:
                result.report["evaluation"] = result.evaluation
            from jetforge.calibrate.report import write_report

            result.report_path = outputs.final(write_report(staged["report"], result.report))
    return result


def _check_eval_args(o: CalibrateOptions, data_items: List, task: str = "classify") -> List:
    """The evaluation data items of ``o``, after refusing combinations that cannot work (before any slow step).

    Each value was checked when ``o`` was made (names, ranges); here the combinations and the files."""
    items = list(o.evaluation.data)
    labels, sensitivity, qdq = o.evaluation.labels, o.evaluation.sensitivity, o.qdq
    mixed_precision, mixed_metric = o.mixed_precision.bound, o.mixed_precision.metric
    if task == "detect" and labels is not None and det_eval.is_detection_label_file(labels):  # its held-out frames
        det_eval.check_detection_args(labels, items, mixed_precision, sensitivity)
    elif labels is not None:
        if not items:
            raise CalibrationError("labels were given but no evaluation data",
                                   hint="add --eval DIR_OR_VIDEO with the labelled images")
        require_file(labels, "label file", hint="one `image_path<TAB>class` per line")
    if (items or mixed_precision is not None or sensitivity) and not qdq:
        raise CalibrationError("INT8 evaluation and mixed precision run the Q/DQ ONNX, which --no-qdq turns off",
                               hint="drop --no-qdq")
    if mixed_precision is not None:
        if mixed_metric == "accuracy_drop":
            if labels is None:
                raise CalibrationError("an accuracy-drop bound needs labelled evaluation data",
                                       hint="add --eval DIR --labels FILE, or bound the agreement")
            if not 0.0 <= mixed_precision < 1.0:
                raise CalibrationError("an accuracy-drop bound is a fraction in [0, 1), got %r" % mixed_precision,
                                       hint="e.g. 0.002 for 0.2 points")
        elif not 0.0 < mixed_precision <= 1.0:
            raise CalibrationError("the mixed-precision bound is an agreement in (0, 1], got %r" % mixed_precision,
                                   hint="e.g. --mixed-precision 0.98")
    same = {str(Path(d).resolve()) for d in data_items} & {str(Path(d).resolve()) for d in items}
    if same:
        log.warning("the evaluation data %s is also calibration data: the numbers are not held-out", sorted(same)[0])
    return items


def _held_out(data_items: List, eval_items: List) -> bool:
    resolved = lambda items: {str(Path(d).resolve()) for d in items}  # noqa: E731
    return bool(eval_items) and not resolved(data_items) & resolved(eval_items)


def _evaluate(model, result: CalibrationResult, paths: Dict[str, Path], sidecar, model_file: Path, items: List,
              o: CalibrateOptions, held_out: bool, calibration_hashes: Sequence = (),
              clips: Optional[ClipOptions] = None) -> Dict[str, object]:
    """The report's ``evaluation`` block: INT8 against FP32 on ``items`` as ``o.evaluation`` asks, and the mixed
    precision search of ``o.mixed_precision``."""
    from jetforge.calibrate import eval_data
    from jetforge.calibrate import evaluate as ev
    from jetforge.calibrate.stats import fixed_batch
    from jetforge.runtime.inputs import input_contract

    labels, samples, sensitivity = o.evaluation.labels, o.evaluation.samples, o.evaluation.sensitivity
    contract = input_contract(sidecar, ("image", "clip"), purpose="INT8 evaluation")
    if contract.kind == "clip":  # clips cut as for calibration; held out by the clips' frames
        data, evaluator, held, held_out = clip_evaluator(model, sidecar, contract, items, labels, samples, clips)
    elif sidecar.task == "detect" and labels is not None and det_eval.is_detection_label_file(labels):
        data, evaluator, held = det_eval.detection_evaluator(model, sidecar, labels, fixed_batch(model), samples,
                                                             progress=o.progress)
        items, held_out = ["%s (held-out frames)" % labels], True  # by the file's split (no hash check)
    else:
        held = {"paths_disjoint": held_out}
        data = eval_data.gather(items, contract, fixed_batch(model), samples, o.video_sampling)
        y = ev.read_labels(labels, data.names, sidecar.labels) if labels is not None else None
        evaluator = ev.Evaluator(model, data.batches, labels=y)
    if held_out and "split" not in held:
        held["near_duplicates"] = eval_data.check_held_out(data, calibration_hashes)
        held_out = not held["near_duplicates"]["with_near_duplicate"]
    result.warnings.extend(data.warnings)
    qdq_model = ev.load(result.qdq_path)
    int8 = evaluator.evaluate(qdq_model)
    out: Dict[str, object] = {"data": [str(i) for i in items], "samples": data.describe(), "held_out": held_out,
                              "held_out_check": held, "int8": int8.to_dict(), "arithmetic": evaluator.label,
                              "runtime": "onnxruntime %s CPU, float kernels on exact integers (ORT_DISABLE_ALL)"
                              % require("onnxruntime").__version__}
    for line in _eval_lines("INT8", int8):
        log.info("%s", line)
    if o.evaluation.int8_kernels:
        out["int8_ort_kernels"] = _ort_kernel_evaluation(evaluator, qdq_model, result)
    if o.mixed_precision.bound is not None:
        out.update(_mixed_precision(model, qdq_model, evaluator, data, result, paths, sidecar, model_file, o))
    elif sensitivity:
        sens = ev.layer_sensitivity(model, qdq_model, evaluator.batches, sensitivity, evaluator=evaluator)
        out["sensitivity"] = [s.to_dict() for s in sens]
    return out


def _mixed_precision(model, qdq_model, evaluator, data, result: CalibrationResult, paths: Dict[str, Path], sidecar,
                     model_file: Path, o: CalibrateOptions) -> Dict[str, object]:
    """Choose the FP16 layers on the selection split, measure on the report split, write the outputs."""
    from jetforge.calibrate import mixed, phash

    bound, metric, sensitivity = o.mixed_precision.bound, o.mixed_precision.metric, o.evaluation.sensitivity

    split = mixed.split_samples(evaluator.samples)
    selection, report_split = mixed.split_evaluator(evaluator, split)
    split.near_duplicates = phash.near_duplicates([data.hashes[i] for i in split.report],
                                                  [data.hashes[i] for i in split.selection],
                                                  query_set="report", reference_set="selection")
    say = (lambda m: log.info("mixed precision: %s", m)) if o.progress else None
    mp = mixed.search(model, qdq_model, selection, bound, metric, method=sensitivity or "sqnr", progress=say,
                      report_evaluator=report_split)
    mp.split = split
    written = mixed.write_outputs(mp, paths["precisions"], paths["mixed_qdq"], paths["precisions_txt"],
                                  paths["precisions_plot"] if o.plots else None)
    outputs_mod.write_mixed_sidecar(paths["mixed_qdq"], sidecar, model_file, mp)
    result.mixed_qdq_path, result.precisions_path = written["qdq"], written["json"]
    block = {k: v for k, v in mp.to_dict().items() if k not in ("sensitivity", "format")}
    block["outputs"] = {k: str(v) for k, v in written.items()}
    line = phash.describe(split.near_duplicates, "report-split", "selection-split")
    if line:
        log.info("mixed precision: %s", line)
    used = mp.metric_used  # the metric the bound was applied to (agreement when too few samples were confident)
    if mp.metric_note:
        result.warnings.append("mixed precision: " + mp.metric_note)
    if not mp.met:
        result.warnings.append("mixed precision: the %s bound %.4g was not met on the selection split (best %.4f "
                               "with %d FP16 layers)" % (used, bound, mp.value(mp.result), len(mp.fp16_layers)))
    elif mp.report_met is False:
        result.warnings.append("mixed precision: %d FP16 layers meet %s >= %.4g on the selection split but give "
                               "%.4f on the report split (not used to choose)"
                               % (len(mp.fp16_layers), used, bound, mp.value(mp.report_result)))
    return {"mixed_precision": block, "sensitivity": [s.to_dict() for s in mp.sensitivity]}


def _ort_kernel_evaluation(evaluator, qdq_model, result: CalibrationResult) -> Dict[str, object]:
    """The second, labelled measurement: ONNX Runtime's INT8 kernels on this CPU (warned where they saturate)."""
    from jetforge.runtime.cpu_features import SATURATION_WARNING, cpu_features, int8_kernels_can_saturate

    kernels = evaluator.with_arithmetic("ort-int8")
    res = kernels.evaluate(qdq_model)
    block: Dict[str, object] = dict(res.to_dict())
    block["label"] = kernels.label
    block["cpu"] = cpu_features().to_dict()
    if int8_kernels_can_saturate():
        block["warning"] = SATURATION_WARNING
        result.warnings.append(SATURATION_WARNING)
        log.warning("%s", SATURATION_WARNING)
    return block


def _eval_lines(label: str, res) -> List[str]:
    if ((res.metrics or {}).get("detection_ap") or {}).get("ap50_fp32") is not None:
        return det_eval.detection_eval_lines(label, res.metrics["detection_ap"])
    d = res.to_dict()
    line = ("%s vs FP32 on %d samples: top-1 agreement %.3f, on %d confident %s, top-5 %.3f, mean KL %.4f"
            % (label, d["samples"], d["agreement"], d["confident_samples"],
               "%.3f" % d["agreement_confident"] if d["agreement_confident"] is not None else "-",
               d["top5_agreement"], d["mean_kl"]))
    lines = [line]
    if d.get("labelled"):
        lines.append("accuracy on %d labelled: FP32 %.4f, %s %.4f (drop %.2f points)"
                     % (d["labelled"], d["accuracy_fp32"], label, d["accuracy_int8"], 100 * d["accuracy_drop"]))
    return lines + clip_lines((res.metrics or {}).get("clip_accuracy"))


def evaluation_summary(evaluation: Dict[str, object]) -> List[str]:
    """Printable lines for a report's ``evaluation`` block."""
    lines: List[str] = []
    used = evaluation.get("samples")
    if used:
        lines.append("evaluation samples: %d of %d available (%s)" % (used["used"], used["available"], used["limit"]))
    dup = (evaluation.get("held_out_check") or {}).get("near_duplicates")
    if dup and dup.get("with_near_duplicate"):
        lines.append("NOT held out: %d of %d evaluation samples have a near-duplicate among the calibration samples "
                     "(perceptual hash within %d bits)" % (dup["with_near_duplicate"], dup["compared"],
                                                            dup["threshold_bits"]))
    if evaluation.get("int8"):
        lines.append("INT8 numbers: %s" % evaluation.get("arithmetic", "ONNX Runtime"))
        lines.extend(_eval_lines("INT8", _from_dict(evaluation["int8"])))
    kernels = evaluation.get("int8_ort_kernels")
    if kernels:
        lines.append("%s (second measurement; CPU-dependent):" % kernels["label"])
        lines.extend("  " + line for line in _eval_lines("ORT INT8", _from_dict(kernels)))
    mp = evaluation.get("mixed_precision")
    if mp:
        lines.extend(_mixed_lines(mp))
    return lines


def _mixed_lines(mp: Dict[str, object]) -> List[str]:
    """Mixed-precision lines that say which split every number is on."""
    sel, rep_ = mp.get("selection") or {}, mp.get("report")
    fp16 = mp["fp16_layers"]
    metric = mp.get("metric_used") or mp["metric"]  # the one the bound was applied to (format 2 files: metric)
    verb = "<=" if metric == "accuracy_drop" else ">="
    lines = ["mixed precision: %d FP16 layers (%s %s %s %s on the selection split)%s"
             % (len(fp16), metric, verb, mp["bound"], "met" if mp["met"] else "NOT met",
                (": " + ", ".join(fp16[:6]) + (" ..." if len(fp16) > 6 else "")) if fp16 else "")]
    if mp.get("metric_note"):
        lines.append("  " + mp["metric_note"])
    # agreement_confident on the few confident samples there are when it decided with fewer than usual
    few = 1 if metric == "agreement_confident" and mp.get("metric_note") else None
    if sel:
        lines.append("  selection split (%d samples, chose the layers): %s %.4f (all INT8 %.4f)"
                     % (sel["samples"], metric, sel["value"], _metric_of(sel["all_int8"], metric, few)))
    if rep_:
        lines.append("  report split (%d other samples, not used to choose): %s %.4f (all INT8 %.4f)%s"
                     % (rep_["samples"], metric, rep_["value"], _metric_of(rep_["all_int8"], metric, few),
                        "" if rep_["meets_bound"] else ", below the bound"))
        lines.extend("  " + line for line in _eval_lines("mixed, report split", _from_dict(rep_["chosen"])))
    plot = (mp.get("outputs") or {}).get("plot")
    if plot:
        lines.append("  curve (%s against FP16 layers, both splits): %s" % (mp["metric"], plot))
    return lines


def _metric_of(d: Dict[str, object], metric: str, min_confident: Optional[int] = None) -> float:
    from jetforge.calibrate.mixed import MIN_CONFIDENT, metric_value

    return metric_value(_from_dict(d), metric, MIN_CONFIDENT if min_confident is None else min_confident)


def _from_dict(d: Dict[str, object]):
    from jetforge.calibrate.evaluate import EvalResult

    res = EvalResult(samples=d["samples"], agreement=d["agreement"], confident_samples=d["confident_samples"],
                     agreement_confident=d["agreement_confident"], top5_agreement=d["top5_agreement"],
                     mean_kl=d["mean_kl"], output_sqnr_db=d["output_sqnr_db"] or 0.0,
                     fp32_mean_confidence=d["fp32_mean_confidence"], metrics=dict(d.get("metrics") or {}))
    if d.get("labelled"):
        res.labelled, res.accuracy_fp32, res.accuracy_int8 = d["labelled"], d["accuracy_fp32"], d["accuracy_int8"]
    return res


def _report(result: CalibrationResult, stats: ActivationStats, quality: QualityReport, source, model_file: Path,
            qdq_info: Dict[str, object], batch_size: int, percentile: float) -> Dict[str, object]:
    from jetforge.calibrate.report import build_report, tensor_rows

    return build_report(
        model=str(model_file), outputs=result.to_dict(),
        calibration={"algorithm": result.algorithm, "percentile": percentile if result.algorithm == "percentile"
                     else None, "cache_header": result.cache.header, "batch_size": batch_size,
                     "samples": stats.samples, "batches": stats.batches, "dropped": stats.dropped,
                     "histogram_bytes": stats.memory_bytes(),
                     "per_tensor_algorithm": dict(result.tensor_algorithms)},
        data={"sources": source.describe(), "quality": quality.to_dict()},
        qdq=qdq_info, tensors=tensor_rows(stats.histograms, result.amax))
