"""``calibrate()``: samples -> activation statistics -> scales -> cache + Q/DQ ONNX + report.

Outputs for ``model.onnx`` (or next to ``out``, a named cache path ``X.calib``):

* ``model.calib`` -- TensorRT calibration cache stamped for ``trt_version`` (DLA, TensorRT <= 10);
* ``model.qdq.onnx`` (+ ``model.qdq.onnx.json`` sidecar) -- explicit Q/DQ (TensorRT >= 10 GPU, 11);
* ``model.calib.json`` -- the report; ``model.calib.plots/`` -- histogram plots.

:func:`check_cache` reads an existing cache (one of ours or TensorRT's), refuses one for another
TensorRT version unless ``retarget`` is set, and checks its tensor names against the model.
"""

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

from jetforge.calibrate import algorithms
from jetforge.calibrate.cache import (ALGORITHM_TOKENS, DEFAULT_TOKEN, CacheValidation, CalibrationCache,
                                      parse_trt_version, version_string)
from jetforge.calibrate.quality import RECOMMENDED_SAMPLES, QualityReport, QualityTracker
from jetforge.calibrate.sources import SAMPLINGS, collect_sources
from jetforge.calibrate.stats import ActivationStats, activation_tensors, collect_statistics, load_model
from jetforge.errors import CalibrationError, UnknownNameError
from jetforge.fileio import PathLike, check_not_input, require_file

log = logging.getLogger(__name__)

DataArg = Union[str, Path, Sequence[Union[str, Path]]]


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

    def to_dict(self) -> Dict[str, object]:
        return {"cache": str(self.cache_path), "qdq_onnx": str(self.qdq_path) if self.qdq_path else None,
                "report": str(self.report_path) if self.report_path else None,
                "plots": [str(p) for p in self.plots], "header": self.cache.header,
                "trt_version": version_string(self.cache.trt_version), "algorithm": self.algorithm,
                "samples": self.samples, "tensors": len(self.cache), "warnings": list(self.warnings),
                "seconds": round(self.seconds, 2)}


def output_paths(model_path: PathLike, out: Optional[PathLike] = None) -> Dict[str, Path]:
    """``model.onnx`` -> model.calib, model.qdq.onnx, model.calib.json, model.calib.plots/."""
    if out is not None:
        cache = Path(out)
        stem = cache.with_suffix("") if cache.suffix == ".calib" else cache
        if cache.suffix != ".calib":
            cache = stem.with_name(stem.name + ".calib") if not cache.suffix else cache
    else:
        m = Path(model_path)
        stem = m.with_suffix("") if m.suffix.lower() == ".onnx" else m
        cache = stem.with_name(stem.name + ".calib")
    return {"cache": cache, "qdq": stem.with_name(stem.name + ".qdq.onnx"),
            "report": cache.with_name(cache.name + ".json"), "plots": cache.with_name(cache.name + ".plots")}


def calibrate(model_path: PathLike, data: DataArg, trt_version: str = "10.3", algorithm: str = "entropy",
              samples: int = RECOMMENDED_SAMPLES, batch_size: int = 8, out: Optional[PathLike] = None,
              qdq: bool = True, report: bool = True, plots: bool = True, video_sampling: str = "uniform",
              percentile: float = 99.99, cache_algorithm: str = DEFAULT_TOKEN, min_samples: int = 16,
              providers: Optional[Sequence[str]] = None, progress: bool = True,
              check_build: bool = False) -> CalibrationResult:
    """Calibrate ``model_path`` (ONNX with a sidecar) on ``data`` and write the outputs (see module doc)."""
    t0 = time.perf_counter()
    if algorithm not in algorithms.ALGORITHMS:
        raise UnknownNameError("calibration algorithm", algorithm, algorithms.ALGORITHMS)
    if video_sampling not in SAMPLINGS:
        raise UnknownNameError("video sampling", video_sampling, SAMPLINGS)
    if cache_algorithm not in ALGORITHM_TOKENS:
        raise UnknownNameError("cache algorithm token", cache_algorithm, ALGORITHM_TOKENS)
    version = parse_trt_version(trt_version)
    model_file = require_file(model_path, "ONNX model", hint="give the path of an exported .onnx file")
    from jetforge.runtime.sidecar import read_sidecar

    sidecar = read_sidecar(model_file)
    if sidecar.preprocess is None:
        raise CalibrationError("the sidecar of %s has no preprocess block, so calibration cannot prepare images the "
                               "way deployment will" % model_file.name,
                               hint="add a \"preprocess\" block (size, colour, mean/std) to %s.json" % model_file.name)
    paths = output_paths(model_file, out)
    data_items = [data] if isinstance(data, (str, Path)) else list(data)
    for key in ("cache", "qdq", "report"):
        check_not_input(paths[key], [model_file] + [Path(d) for d in data_items])

    source = collect_sources(data_items, max_samples=samples, sampling=video_sampling)
    model = load_model(model_file)
    tracker = QualityTracker()
    stats = collect_statistics(model, source, sidecar.preprocess, batch_size=batch_size, tensors="all",
                               providers=providers, total=source.total, progress=progress, quality=tracker)
    quality = tracker.check(min_samples=min_samples)
    for w in quality.warnings:
        log.warning("%s", w)
    amax = algorithms.compute_all(stats.histograms, algorithm, percentile=percentile)
    warnings = list(quality.warnings)
    nonfinite = [n for n, h in stats.histograms.items() if h.nonfinite]
    if nonfinite:
        warnings.append("%d tensors had inf/NaN values (ignored), e.g. %s" % (len(nonfinite), nonfinite[0]))
        log.warning("%s", warnings[-1])

    cache = CalibrationCache.from_amax(amax, version, cache_algorithm)
    cache.source = str(paths["cache"])
    cache.write(paths["cache"])
    result = CalibrationResult(cache_path=paths["cache"], cache=cache, amax=amax, algorithm=algorithm,
                               samples=stats.samples, warnings=warnings)

    qdq_info: Dict[str, object] = {}
    if qdq:
        qdq_info = _write_qdq(model, amax, paths["qdq"], model_file, sidecar, algorithm, version)
        result.qdq_path = paths["qdq"]
        if check_build:
            from jetforge.runtime.tensorrt import check_onnx_builds

            qdq_info["build_check"] = check_onnx_builds(paths["qdq"]).to_dict()
    if plots:
        try:
            result.plots = _plots(stats, amax, paths["plots"], algorithm)
        except Exception as err:  # plots are a convenience: never lose the calibration for them
            if isinstance(err, CalibrationError):
                raise
            warnings.append("histogram plots were not written: %s" % err)
            log.warning("%s", warnings[-1])
    result.seconds = time.perf_counter() - t0
    if report:
        result.report = _report(result, stats, quality, source, model_file, qdq_info, batch_size, percentile)
        from jetforge.calibrate.report import write_report

        result.report_path = write_report(paths["report"], result.report)
    return result


def _write_qdq(model, amax, path: Path, model_file: Path, sidecar, algorithm: str, version) -> Dict[str, object]:
    from jetforge.calibrate.qdq import QdqSummary, describe_qdq, insert_qdq, save_model
    from jetforge.runtime.sidecar import ModelSidecar, produced_by, write_sidecar

    summary = QdqSummary()
    qmodel = insert_qdq(model, amax, summary=summary)
    save_model(qmodel, path)
    data = sidecar.to_dict()
    data["produced_by"] = produced_by("calibrate", source=model_file.name, algorithm=algorithm,
                                      quantization="int8-qdq", trt_version=version_string(version))
    extra = dict(data.get("extra") or {})
    extra["precision"] = "int8-qdq"
    data["extra"] = extra
    write_sidecar(path, ModelSidecar.from_dict(data))
    info = summary.to_dict()
    info.update(describe_qdq(qmodel))
    return info


def _plots(stats: ActivationStats, amax: Dict[str, float], folder: Path, algorithm: str) -> List[Path]:
    from jetforge.calibrate.report import plot_histograms

    return plot_histograms(stats.histograms, amax, folder, title="%s calibration (red: chosen amax)" % algorithm)


def _report(result: CalibrationResult, stats: ActivationStats, quality: QualityReport, source, model_file: Path,
            qdq_info: Dict[str, object], batch_size: int, percentile: float) -> Dict[str, object]:
    from jetforge.calibrate.report import build_report, tensor_rows

    return build_report(
        model=str(model_file), outputs=result.to_dict(),
        calibration={"algorithm": result.algorithm, "percentile": percentile if result.algorithm == "percentile"
                     else None, "cache_header": result.cache.header, "batch_size": batch_size,
                     "samples": stats.samples, "batches": stats.batches, "dropped": stats.dropped,
                     "histogram_bytes": stats.memory_bytes()},
        data={"sources": source.describe(), "quality": quality.to_dict()},
        qdq=qdq_info, tensors=tensor_rows(stats.histograms, result.amax))


@dataclass
class CacheCheck:
    cache: CalibrationCache
    validation: Optional[CacheValidation] = None
    retargeted_to: Optional[str] = None
    written: Optional[Path] = None

    def to_dict(self) -> Dict[str, object]:
        d: Dict[str, object] = dict(self.cache.to_dict())
        d["source"] = self.cache.source
        if self.validation is not None:
            d["validation"] = self.validation.to_dict()
        d["retargeted_to"] = self.retargeted_to
        d["written"] = str(self.written) if self.written else None
        return d


def check_cache(cache_path: PathLike, model_path: Optional[PathLike] = None, trt_version: Optional[str] = None,
                retarget: bool = False, out: Optional[PathLike] = None) -> CacheCheck:
    """Read a cache, check its version (refuse another one unless ``retarget``) and its tensor names.

    With ``retarget`` the header is rewritten for ``trt_version`` into ``out`` (default: in place).
    Names in the cache that are not tensors of the model are an error.
    """
    cache = CalibrationCache.read(cache_path)
    check = CacheCheck(cache)
    if trt_version is not None:
        try:
            cache.check_version(trt_version)
        except CalibrationError:
            if not retarget:
                raise
            new = cache.retarget(trt_version)
            target = Path(out) if out is not None else Path(cache_path)
            if model_path is not None:
                check_not_input(target, [model_path])
            new.write(target)
            new.source = str(target)
            check.cache, check.retargeted_to, check.written = new, version_string(new.trt_version), target
    elif retarget:
        raise CalibrationError("--retarget needs the TensorRT version to retarget to", hint="add --trt VERSION")
    if model_path is not None:
        model = load_model(require_file(model_path, "ONNX model"))
        names = activation_tensors(model)
        validation = check.cache.validate_against(names)
        check.validation = validation
        if validation.not_in_model:
            message = ("%d of %d tensors in %s are not in %s, e.g. %r"
                       % (len(validation.not_in_model), len(check.cache), Path(cache_path).name,
                          Path(model_path).name, validation.not_in_model[0]))
            if len(validation.not_in_model) * 2 > len(check.cache) - len(validation.internal):
                raise CalibrationError(message + ": the cache belongs to another model or export",
                                       hint="recalibrate this model with `jetforge calibrate %s --data DIR`"
                                            % model_path)
            log.warning("%s; TensorRT ignores those entries", message)
        if validation.missing:
            log.info("%d model tensors have no scale in the cache (TensorRT keeps them in higher precision)",
                     len(validation.missing))
    return check
