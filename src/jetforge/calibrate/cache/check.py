"""``jetforge calibrate --check-cache``: read a calibration cache, check its TensorRT version and tensor names.

:func:`check_cache` reads an existing cache (one of ours or TensorRT's), refuses one for another
TensorRT version unless ``retarget`` is set (the retargeted copy goes to ``model.trt<version>.calib``,
never over the input), and checks its tensor names against the model.
"""

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional

from jetforge.calibrate.cache.format import (CacheValidation, CalibrationCache, parse_trt_version, stamp_version,
                                      version_string)
from jetforge.calibrate.outputs import names_a_folder
from jetforge.calibrate.stats import activation_tensors, load_model
from jetforge.errors import CalibrationError
from jetforge.fileio import PathLike, check_not_input, require_file
from jetforge.output_set import check_outputs

log = logging.getLogger(__name__)


@dataclass
class CacheCheck:
    cache: CalibrationCache
    validation: Optional[CacheValidation] = None
    retargeted_to: Optional[str] = None
    written: Optional[Path] = None
    outputs_problem: Optional[str] = None  # the cache's run left its outputs mixed, or they changed since

    def to_dict(self) -> Dict[str, object]:
        d: Dict[str, object] = dict(self.cache.to_dict())
        d["source"] = self.cache.source
        if self.validation is not None:
            d["validation"] = self.validation.to_dict()
        d["retargeted_to"] = self.retargeted_to
        d["written"] = str(self.written) if self.written else None
        d["outputs_problem"] = self.outputs_problem
        return d


def retarget_path(cache_path: PathLike, version) -> Path:
    """``model.calib`` retargeted to 8.6.2 -> ``model.trt8.6.2.calib`` next to it."""
    p = Path(cache_path)
    stem = p.stem if p.suffix == ".calib" else p.name
    return p.with_name("%s.trt%s.calib" % (stem, version_string(parse_trt_version(version))))


def check_cache(cache_path: PathLike, model_path: Optional[PathLike] = None, trt_version: Optional[str] = None,
                retarget: bool = False, out: Optional[PathLike] = None) -> CacheCheck:
    """Read a cache, check its version (refuse another one unless ``retarget``) and its tensor names.

    With ``retarget`` the header is rewritten for ``trt_version`` into ``out`` (default:
    ``<stem>.trt<version>.calib`` next to the input, which is never overwritten).
    Names in the cache that are not tensors of the model are an error.  A cache whose output set is mixed
    (its run was killed while replacing the files) or changed since is warned about in one line.
    """
    if retarget and trt_version is not None:
        stamp_version(trt_version)  # a retargeted cache is a new one: for a release a JetPack ships
    cache = CalibrationCache.read(cache_path)
    check = CacheCheck(cache, outputs_problem=check_outputs(cache_path))
    if check.outputs_problem:  # e.g. a calibrate run killed while replacing the cache, the Q/DQ ONNX, ...
        log.warning("%s", check.outputs_problem)
    if trt_version is not None:
        try:
            cache.check_version(trt_version)
        except CalibrationError:
            if not retarget:
                raise
            new = cache.retarget(trt_version)
            target = retarget_path(cache_path, new.trt_version)
            if out is not None:  # a folder (existing, or "dir/") holds the default name; else out is the file
                target = Path(out) / target.name if names_a_folder(out) else Path(out)
            check_not_input(target, [cache_path] + ([model_path] if model_path is not None else []))
            new.write(target)
            new.source = str(target)
            check.cache, check.retargeted_to, check.written = new, version_string(new.trt_version), target
    elif retarget:
        raise CalibrationError("--retarget needs the TensorRT version to retarget to", hint="add --tensorrt VERSION")
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


__all__ = ["CacheCheck", "check_cache", "retarget_path"]
