"""What ``calibrate()`` writes, and how: every file of one run is one output set (:mod:`jetforge.output_set`).

A run writes the cache, the Q/DQ ONNX and its sidecar, the report, the plots and (mixed precision) the layer
list, its curve and the mixed Q/DQ ONNX.  They are written into the set's hidden staging folder under their
final names and moved into place together when the run finished, so a run stopped half-way (Ctrl-C, SIGTERM,
an error) leaves the previous run's files exactly as they were, and a run that writes fewer files (``--no-qdq``,
no plots) removes the previous run's others instead of leaving them beside its own (issue 25).
"""

import logging
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from jetforge.calibrate.cache.format import version_string
from jetforge.calibrate.stats import ActivationStats
from jetforge.errors import CalibrationError
from jetforge.fileio import PathLike
from jetforge.output_set import OutputSet, check_outputs

log = logging.getLogger(__name__)

# CalibrationResult fields that hold one path each (the plots are a list).
_PATH_FIELDS = ("cache_path", "qdq_path", "report_path", "mixed_qdq_path", "precisions_path")


def names_a_folder(path: PathLike) -> bool:
    """Whether an output path names a folder to write into: one that exists, or text ending in a slash (``w/``)."""
    text = os.fspath(path)
    return text.endswith(("/", os.sep)) or Path(text).is_dir()


def output_paths(model_path: PathLike, out: Optional[PathLike] = None) -> Dict[str, Path]:
    """``model.onnx`` -> model.calib, model.qdq.onnx, model.calib.json, model.calib.plots/ (all in one folder).

    ``out`` is the cache's path (``build/model.calib``; the other files go beside it), or a folder to write into:
    an existing folder or a path ending in a slash (``w/`` -> ``w/model.calib``, never ``./w.calib``).
    """
    if out is not None and names_a_folder(out):
        m = Path(model_path)
        out = Path(out) / ((m.name[:-len(m.suffix)] if m.suffix.lower() == ".onnx" else m.name) + ".calib")
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
            "report": cache.with_name(cache.name + ".json"), "plots": cache.with_name(cache.name + ".plots"),
            "mixed_qdq": stem.with_name(stem.name + ".mixed.qdq.onnx"),
            "precisions": stem.with_name(stem.name + ".precisions.json"),
            "precisions_txt": stem.with_name(stem.name + ".precisions.txt"),
            "precisions_plot": stem.with_name(stem.name + ".precisions.png")}


def output_set(paths: Dict[str, Path], inputs: List[Path]) -> OutputSet:
    """The output set of one run, named after its cache (``.model.calib.set.json`` records it).

    ``inputs`` are never removed as the previous run's left-overs.
    """
    return OutputSet(paths["cache"].parent, paths["cache"].name, keep=inputs)


def input_problems(inputs: List[Path]) -> List[str]:
    """Warnings for inputs that are outputs of a run whose files do not belong together (a pruned model from a set
    that a killed run left mixed, ...): said once, in one line each, not used silently."""
    problems = [p for p in (check_outputs(i) for i in inputs) if p]
    for line in problems:
        log.warning("%s", line)
    return problems


def staged_paths(outputs: OutputSet, paths: Dict[str, Path]) -> Dict[str, Path]:
    """Where each output is written while the run lasts: the same names, in the set's staging folder."""
    return {key: outputs.path(p.name, folder=key == "plots") for key, p in paths.items()}


def relocate_result(result: Any, outputs: OutputSet) -> None:
    """Point a CalibrationResult's paths (and the messages and evaluation block that name them) at the final
    places, before the report that records them is written."""
    for name in _PATH_FIELDS:
        value = getattr(result, name)
        if value is not None:
            setattr(result, name, outputs.final(value))
    result.plots = [outputs.final(p) for p in result.plots]
    result.warnings = outputs.relocate(result.warnings)
    result.evaluation = outputs.relocate(result.evaluation)
    result.cache.source = str(result.cache_path)


def write_qdq_and_plots(result: Any, stats: ActivationStats, model: Any, paths: Dict[str, Path],
                        model_file: Path, sidecar: Any, version: Any, qdq: bool, check_build: bool,
                        plots: Union[bool, str]) -> Dict[str, object]:
    """The Q/DQ model (+ optional TensorRT parse/build check) and the plots; returns the report's qdq block."""
    qdq_info: Dict[str, object] = {}
    if qdq:
        qdq_info = write_qdq(model, result.amax, paths["qdq"], model_file, sidecar, result.algorithm, version)
        result.qdq_path = paths["qdq"]
        if check_build:
            from jetforge.runtime.tensorrt import check_onnx_builds

            qdq_info["build_check"] = check_onnx_builds(paths["qdq"]).to_dict()
    if plots:
        try:
            result.plots = write_plots(stats, result.amax, paths["plots"], result.algorithm, every=plots == "all")
        except Exception as err:  # plots are a convenience: never lose the calibration for them
            if isinstance(err, CalibrationError):
                raise
            result.warnings.append("histogram plots were not written: %s" % err)
            log.warning("%s", result.warnings[-1])
    return qdq_info


def write_mixed_sidecar(path: Path, sidecar: Any, model_file: Path, mp: Any) -> None:
    from jetforge.runtime.sidecar import ModelSidecar, produced_by, write_sidecar

    data = sidecar.to_dict()
    data["produced_by"] = produced_by("calibrate", source=model_file.name, quantization="int8-qdq-mixed",
                                      fp16_layers=len(mp.fp16_layers))
    extra = dict(data.get("extra") or {})
    extra["precision"] = "int8-qdq-mixed"
    extra["fp16_layers"] = list(mp.fp16_layers)
    data["extra"] = extra
    write_sidecar(path, ModelSidecar.from_dict(data))


def write_qdq(model: Any, amax: Dict[str, float], path: Path, model_file: Path, sidecar: Any, algorithm: str,
              version: Any) -> Dict[str, object]:
    from jetforge.calibrate.qdq.export import QdqSummary, describe_qdq, insert_qdq, save_model
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


def write_plots(stats: ActivationStats, amax: Dict[str, float], folder: Path, algorithm: str,
                every: bool = False) -> List[Path]:
    from jetforge.calibrate.report import most_clipped, plot_histograms, plot_overview

    hists = stats.histograms
    overview = plot_overview(hists, amax, folder / "overview.png",
                             title="%s calibration: %d tensors, |x| distribution and chosen range" % (algorithm,
                                                                                                    len(hists)))
    names = list(hists) if every else most_clipped(hists, amax)
    what = "" if every else ", the %d whose range cuts the most" % len(names)
    return [overview] + plot_histograms(hists, amax, folder, names=names,
                                        title="%s calibration%s (red: chosen amax, grey: observed max)" % (algorithm,
                                                                                                           what))


__all__ = ["input_problems", "output_paths", "output_set", "relocate_result", "staged_paths", "write_mixed_sidecar",
           "write_plots", "write_qdq", "write_qdq_and_plots"]
