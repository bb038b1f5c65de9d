"""What a bundle is prepared for: one calibration cache per TensorRT version (given, or re-stamped with the same
scales), the TensorRT versions of every target, and a real build plan for every (target, version) with the INT8
source the board will pick, so an impossible build is found on the workstation, not on the board."""

import dataclasses
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from jetforge.deploy.bundle.manifest import CALIB_DIR, PRECISIONS, BundleError, Prepared
from jetforge.deploy.bundle.staging import Staging
from jetforge.errors import EngineBuildError
from jetforge.fileio import PathLike, require_file
from jetforge.jsonfile import read_json
from jetforge.runtime.tensorrt import calib_cache
from jetforge.runtime.tensorrt.int8_source import choose_int8_source
from jetforge.runtime.tensorrt.plan import make_plan, read_model_info
from jetforge.runtime.tensorrt.version import TensorRTVersion, version_text

# the first cache given: its parsed content and its file name (the source of re-stamped caches)
FirstCache = Optional[Tuple[calib_cache.CacheInfo, str]]


def layer_precisions_from_file(path: PathLike) -> Dict[str, str]:
    """``{layer: "fp16"}`` from the per-layer precision list ``jetforge calibrate --mixed-precision`` writes.

    Applied only to builds whose INT8 comes from a calibration cache: a mixed Q/DQ model already
    carries its FP16 layers as plain (dequantized) operators.
    """
    try:
        data = read_json(path, "per-layer precision list", BundleError)
        layers = data["fp16_layers"]
        if not isinstance(layers, list):
            raise TypeError("fp16_layers is not a list")
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise BundleError("per-layer precision list %s is unreadable: %s" % (path, err),
                          hint="give the MODEL.precisions.json written by `jetforge calibrate --mixed-precision`"
                          ) from err
    return {str(name): "fp16" for name in layers}


def _read_cache(path: Path) -> Tuple[calib_cache.CacheInfo, bytes]:
    data = require_file(path, "calibration cache", hint="give the .calib written by `jetforge calibrate`").read_bytes()
    return calib_cache.parse_calibration_cache(data, "calibration cache %s" % path), data


def stage_caches(stage: Staging, calib: Sequence[PathLike]) -> Tuple[List[Dict[str, Any]], FirstCache]:
    """Write the calibration caches, one per TensorRT version (the header decides which); (manifest entries, first)."""
    calibration: List[Dict[str, Any]] = []
    first: FirstCache = None
    for cache in calib:
        parsed, data = _read_cache(Path(cache))
        version, header = str(parsed.version), parsed.header
        if any(c["tensorrt"] == version for c in calibration):
            raise BundleError("two calibration caches are stamped for TensorRT %s (%s)" % (version, cache),
                              hint="give one cache per TensorRT version")
        rel = "%s/trt-%s.calib" % (CALIB_DIR, version)
        stage.write(data, rel, "calib")
        calibration.append({"file": rel, "tensorrt": version, "header": header, "source": Path(cache).name})
        if first is None:
            first = (parsed, Path(cache).name)
    return calibration, first


def versions_per_target(resolved: Sequence[Any], tensorrt_versions: Sequence[str]) -> Dict[str, List[str]]:
    """The TensorRT versions to prepare for each target: its JetPack releases', or those of ``--tensorrt``."""
    wanted = [version_text(v) for v in tensorrt_versions]
    per_target: Dict[str, List[str]] = {}
    for t in resolved:
        versions = [version_text(v) for v in t.tensorrt_versions]
        if wanted:
            versions = [v for v in wanted if (not t.tensorrt_versions) or v in versions]
        if not versions:
            raise BundleError("no TensorRT version to prepare for target %s%s" % (
                t.name, " (it accepts any TensorRT)" if not t.tensorrt_versions else ""),
                hint="pass --tensorrt VERSION (e.g. --tensorrt 10.3.0)")
        per_target[t.name] = versions
    return per_target


def retarget_caches(stage: Staging, calibration: List[Dict[str, Any]], first: FirstCache,
                    per_target: Dict[str, List[str]], notes: List[str]) -> None:
    """``--retarget-calib``: re-stamp the first cache's scales for every prepared version that has no cache."""
    if first is None:
        raise BundleError("--retarget-calib needs a calibration cache", hint="pass --calib model.calib")
    parsed, source = first
    header = parsed.header
    for version in sorted({v for vs in per_target.values() for v in vs}):
        if any(c["tensorrt"] == version for c in calibration):
            continue
        text = calib_cache.format_calibration_cache(TensorRTVersion.parse(version).cache_header_number(),
                                                    parsed.algorithm, parsed.scales)
        new_header = text.split("\n", 1)[0]
        rel = "%s/trt-%s.calib" % (CALIB_DIR, version)
        stage.write(text.encode("ascii"), rel, "calib")
        calibration.append({"file": rel, "tensorrt": version, "header": new_header, "source": source,
                            "retargeted_from": header})
        notes.append("calibration cache for TensorRT %s re-stamped from %s (same scales)" % (version, header))


def prepare_builds(resolved: Sequence[Any], per_target: Dict[str, List[str]], opts: Any, options_for_plan: Any,
                   staging: Path, calibration: List[Dict[str, Any]], onnx_dst: Path, qdq_dst: Optional[Path],
                   has_precisions: bool) -> List[Prepared]:
    """Plan every (target, version) with the INT8 source the board will pick; refuse a bundle that builds nowhere."""
    prepared: List[Prepared] = []
    device = "dla" if opts.dla_core is not None else "gpu"
    info = read_model_info(onnx_dst)
    qdq_info = read_model_info(qdq_dst) if qdq_dst is not None else None
    for t in resolved:
        for version in per_target[t.name]:
            source, why = choose_int8_source(version, device, opts.precision,
                                             [c["tensorrt"] for c in calibration], qdq_dst is not None)
            if source is None and why and opts.precision == "int8":
                prepared.append(Prepared(t.name, version, False, device, None, why))
                continue
            cache_rel = next((c["file"] for c in calibration if c["tensorrt"] == version), None)
            plan_opts = dataclasses.replace(
                options_for_plan, tensorrt_version=version,
                calibration_cache=str(staging / cache_rel) if source == "cache" and cache_rel else None)
            if source == "cache" and has_precisions and not plan_opts.layer_precisions:
                plan_opts.layer_precisions = layer_precisions_from_file(staging / PRECISIONS)
            onnx_for = qdq_dst if source == "qdq" else onnx_dst
            try:
                make_plan(onnx_for, t, plan_opts, model_info=qdq_info if source == "qdq" else info)
            except EngineBuildError as err:
                prepared.append(Prepared(t.name, version, False, device, source, err.one_line()))
                continue
            prepared.append(Prepared(t.name, version, True, device, source, why))
    if not any(p.ok for p in prepared):
        raise BundleError("the bundle builds on none of its targets: %s"
                          % "; ".join("%s/TensorRT %s: %s" % (p.target, p.tensorrt, p.reason) for p in prepared),
                          hint="change the build options or targets (see `jetforge build --plan-only`)")
    return prepared
