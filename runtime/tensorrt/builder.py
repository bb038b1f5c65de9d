"""The thin layer that applies a :class:`~jetforge.runtime.tensorrt.plan.BuildPlan` to TensorRT's builder.

Every decision was made (and validated) in the plan; this module only translates it into
TensorRT calls (names from ``NVIDIA/TensorRT python/src/infer/pyCore.cpp``, reference §1.6):

1. network from ONNX (``OnnxParser.parse_from_file``), then the plan's input checks on the
   parsed network when the plan could not read the ONNX itself;
2. builder config: ``set_flag(BuilderFlag.FP16/INT8/GPU_FALLBACK/...)``, ``default_device_type =
   DeviceType.DLA`` and ``DLA_core``, ``set_memory_pool_limit`` for the workspace and DLA pools,
   ``int8_calibrator`` = an ``IInt8EntropyCalibrator2`` that serves the cache bytes, per-layer
   ``precision``, optimization profiles, a timing cache, ``profiling_verbosity = DETAILED``;
3. ``build_serialized_network``; the plan file is written atomically (loadable with
   ``trtexec --loadEngine``), then the sidecar and a build report whose per-layer placement
   and precision come from ``engine.create_engine_inspector().get_engine_information(JSON)``.

The same path runs on ``tensorrt_rtx`` for the shared parts (network from ONNX, profiles,
serialization, inspection); the JetPack-only calls (precision flags, calibrator, DLA) are skipped
there with a note recorded in the report.  Version differences live in :mod:`.compat`.
"""

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Dict, List, Optional, Tuple

from jetforge.errors import EngineBuildError
from jetforge.fileio import PathLike, check_not_input, write_bytes_atomic, write_json_atomic
from jetforge.runtime.tensorrt.plan import (JETPACK_HINT, BuildPlan, ShapeRange, cache_header_number, check_inputs,
                                            read_calibration_cache, trt_version_tuple)
from jetforge.runtime.tensorrt.engine_sidecar import engine_sidecar_from_plan, write_engine_sidecar
from jetforge.runtime.sidecar import TensorSpec, sidecar_path
from jetforge.runtime.tensorrt import compat

log = logging.getLogger(__name__)


@dataclass
class BuildResult:
    """What a build produced."""

    engine_path: Optional[Path]
    sidecar_path: Optional[Path]
    report_path: Optional[Path]
    engine_bytes: int
    seconds: float
    report: Dict[str, Any]
    notes: List[str] = field(default_factory=list)


def make_cache_calibrator(trt: ModuleType, cache: bytes, batch_size: int = 1) -> Any:
    """An ``IInt8EntropyCalibrator2`` that serves a finished cache and never asks for data.

    TensorRT calls ``read_calibration_cache`` first; a cache whose header matches its version
    is used as is, so ``get_batch`` (which would feed calibration batches) is never needed and
    returns None ("no more batches").
    """
    class CacheCalibrator(trt.IInt8EntropyCalibrator2):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            trt.IInt8EntropyCalibrator2.__init__(self)
            self.cache = cache
            self.batches_requested = 0

        def get_batch_size(self) -> int:
            return batch_size

        def get_batch(self, names: Any, *args: Any) -> None:
            self.batches_requested += 1
            return None

        def read_calibration_cache(self) -> bytes:
            return self.cache

        def write_calibration_cache(self, data: Any) -> None:
            return None

    return CacheCalibrator()


def parse_inspector_json(text: str) -> Dict[str, Any]:
    """Per-layer placement and precision from ``get_engine_information(LayerInformationFormat.JSON)``.

    The JSON is ``{"Layers": [...], "Bindings": [...]}``; with DETAILED verbosity each layer is an
    object with ``Name``, ``LayerType``, ``Inputs``/``Outputs`` (each with ``Format/Datatype``)
    and ``TacticName``; with LAYER_NAMES_ONLY it is a string.  A layer is counted on DLA when its
    type, name or tactic mentions DLA (TensorRT names DLA subgraphs that way; verify on a board).
    Text of another shape is an :class:`EngineBuildError` (the build report then says why the
    placement is missing), never a stray exception after a finished build.
    """
    try:
        data = json.loads(text)
    except (TypeError, ValueError, RecursionError) as err:
        raise EngineBuildError("the engine inspector's output is not JSON (%s)" % type(err).__name__,
                               hint="report the TensorRT version; the engine itself was built") from None
    raw_layers = data.get("Layers", []) if isinstance(data, dict) else data
    bindings = data.get("Bindings", []) if isinstance(data, dict) else []
    if not isinstance(raw_layers, list) or not isinstance(bindings, list):
        raise EngineBuildError("the engine inspector's JSON has no list of layers and bindings",
                               hint="report the TensorRT version; the engine itself was built")
    layers: List[Dict[str, Any]] = []
    for item in raw_layers:
        if isinstance(item, str):
            layers.append({"name": item, "type": None, "device": "DLA" if "dla" in item.lower() else "GPU",
                           "precisions": []})
            continue
        if not isinstance(item, dict):
            raise EngineBuildError("the engine inspector's JSON lists a layer that is neither a name nor an object",
                                   hint="report the TensorRT version; the engine itself was built")
        name = str(item.get("Name", ""))
        ltype = item.get("LayerType")
        tactic = str(item.get("TacticName", "") or "")
        marker = " ".join([name, str(ltype or ""), tactic]).lower()
        precisions: List[str] = []
        for key in ("Outputs", "Inputs"):
            tensors = item.get(key, [])
            for t in tensors if isinstance(tensors, list) else []:
                fmt = t.get("Format/Datatype") if isinstance(t, dict) else None
                if isinstance(fmt, str) and fmt and fmt not in precisions:
                    precisions.append(fmt)
        layers.append({"name": name, "type": ltype, "device": "DLA" if "dla" in marker else "GPU",
                       "precisions": precisions, "tactic": tactic or None})
    summary = {"layers": len(layers), "dla": sum(1 for l in layers if l["device"] == "DLA"),
               "gpu": sum(1 for l in layers if l["device"] == "GPU")}
    return {"layers": layers, "summary": summary, "bindings": bindings}


def _network_from_onnx(trt: ModuleType, logger: Any, onnx_path: str) -> Tuple[Any, Any, Any]:
    builder = trt.Builder(logger)
    network = builder.create_network(compat.network_flags(trt))
    parser = trt.OnnxParser(network, logger)
    ok = parser.parse_from_file(str(onnx_path))
    if not ok:
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise EngineBuildError("TensorRT %s could not parse %s: %s" % (compat.version(trt), onnx_path,
                                                                       "; ".join(errors) or "unknown error"),
                               hint="check the export (opset, unsupported ops) with `jetforge check-onnx`")
    return builder, network, parser


def build_engine(plan: BuildPlan, engine_path: Optional[PathLike] = None, *, trt: Optional[ModuleType] = None,
                 cache_bytes: Optional[bytes] = None, report_path: Optional[PathLike] = None,
                 inspect: bool = True) -> BuildResult:
    """Apply ``plan`` to TensorRT and write the engine, its sidecar and the build report.

    ``trt`` defaults to ``import tensorrt``; pass the ``tensorrt_rtx`` module to run the shared
    path on TensorRT-RTX.  With ``engine_path`` None nothing is written (the report still returns).
    """
    trt = trt if trt is not None else compat.import_tensorrt("tensorrt")
    rtx = compat.is_rtx(trt)
    notes: List[str] = []
    installed = compat.version(trt)
    if rtx:
        notes.append("built with TensorRT-RTX %s: shared path only; the plan file is not loadable by JetPack's "
                     "TensorRT" % installed)
    else:
        want = trt_version_tuple(plan.tensorrt_version)[:2]
        have = compat.version_tuple(trt)[:2]
        if tuple(want) != tuple(have):
            raise EngineBuildError("the plan targets TensorRT %s but TensorRT %s is installed here (plans do not "
                                   "load across versions)" % (plan.tensorrt_version, installed),
                                   hint=JETPACK_HINT + "; or make the plan with --tensorrt %s" % installed)
    if engine_path is not None:
        check_not_input(engine_path, [plan.onnx_path, plan.calibration_cache, sidecar_path(plan.onnx_path)])

    started = time.perf_counter()
    logger = compat.make_logger(trt)
    builder, network, _parser = _network_from_onnx(trt, logger, plan.onnx_path)
    net_inputs, net_outputs = compat.network_io(network)
    profiles = [{n: ShapeRange(r["min"], r["opt"], r["max"]) for n, r in p.items()} for p in plan.profiles]
    check_inputs(net_inputs, profiles, plan.uses_dla and compat.supports_dla(trt))

    config = builder.create_builder_config()
    applied: List[str] = []
    skipped: List[str] = []

    # --- flags
    for name in plan.flags:
        jetpack_only = name in ("FP16", "INT8", "GPU_FALLBACK", "PREFER_PRECISION_CONSTRAINTS",
                                "OBEY_PRECISION_CONSTRAINTS")
        flag = compat.builder_flag(trt, name)
        if flag is None or (jetpack_only and rtx):
            skipped.append(name)
            continue
        config.set_flag(flag)
        applied.append(name)
    if skipped:
        notes.append("builder flags skipped (not in %s %s): %s" % ("TensorRT-RTX" if rtx else "TensorRT",
                                                                  installed, ", ".join(skipped)))

    # --- INT8 from a calibration cache
    calibrator = None
    if plan.int8_source == "cache":
        if not compat.has_calibrator(trt):
            notes.append("INT8 calibrator skipped: %s has no implicit INT8 (IInt8EntropyCalibrator2)"
                         % ("TensorRT-RTX" if rtx else "this TensorRT"))
        else:
            data = cache_bytes if cache_bytes is not None else Path(str(plan.calibration_cache)).read_bytes()
            cache = read_calibration_cache(data, "calibration cache %s" % plan.calibration_cache)
            expected = cache_header_number(compat.version_tuple(trt))
            if cache.version_number != expected:
                raise EngineBuildError("calibration cache header %s does not match the installed TensorRT %s "
                                       "(expects TRT-%d-...): TensorRT would ignore it"
                                       % (cache.header, installed, expected),
                                       hint="recalibrate for TensorRT %s or retarget the cache header" % installed)
            calibrator = make_cache_calibrator(trt, data)
            config.int8_calibrator = calibrator
            applied.append("int8_calibrator(cache)")

    # --- DLA
    if plan.uses_dla:
        if not compat.supports_dla(trt):
            notes.append("DLA settings skipped (default_device_type, DLA_core, GPU fallback, DLA pools): %s %s "
                         "cannot target DLA" % ("TensorRT-RTX" if rtx else "TensorRT", installed))
        else:
            cores = int(getattr(builder, "num_DLA_cores", 0))
            if plan.dla_core is None or plan.dla_core >= cores:
                raise EngineBuildError("this machine has %d DLA core%s; the plan uses DLA core %s"
                                       % (cores, "" if cores == 1 else "s", plan.dla_core),
                                       hint="build DLA engines on the Jetson itself (AGX Orin, Orin NX, Xavier)")
            config.default_device_type = trt.DeviceType.DLA
            config.DLA_core = int(plan.dla_core)
            applied.append("DLA_core=%d" % plan.dla_core)

    # --- memory pools
    for pool, size in plan.memory_pools.items():
        member = compat.memory_pool(trt, pool)
        if member is None or (pool.startswith("dla_") and not compat.supports_dla(trt)):
            notes.append("memory pool %s skipped on %s" % (pool, "TensorRT-RTX" if rtx else installed))
            continue
        config.set_memory_pool_limit(member, int(size))
        applied.append("%s=%d" % (pool, size))

    # --- per-layer precisions
    if plan.layer_precisions:
        if not compat.supports_layer_precision(trt):
            notes.append("per-layer precisions skipped: %s networks are strongly typed"
                         % ("TensorRT-RTX" if rtx else "TensorRT " + installed))
        else:
            names = {}
            for i in range(network.num_layers):
                layer = network.get_layer(i)
                names[layer.name] = layer
            missing = [n for n in plan.layer_precisions if n not in names]
            if missing:
                raise EngineBuildError("layer_precisions names layers TensorRT's network does not have: %s"
                                       % ", ".join(missing[:5]),
                                       hint="use layer names from the build report (e.g. %s)"
                                       % ", ".join(list(names)[:3]))
            for name, precision in plan.layer_precisions.items():
                names[name].precision = compat.layer_dtype(trt, precision)
            applied.append("layer_precisions(%d)" % len(plan.layer_precisions))

    # --- the DLA audit TensorRT itself offers (can_run_on_DLA), before building
    dla_audit: Optional[Dict[str, Any]] = None
    if plan.uses_dla and compat.supports_dla(trt):
        cannot = [network.get_layer(i).name for i in range(network.num_layers)
                  if not config.can_run_on_DLA(network.get_layer(i))]
        dla_audit = {"layers": network.num_layers, "cannot_run_on_dla": cannot}
        if cannot and not plan.gpu_fallback:
            raise EngineBuildError("%d layer(s) cannot run on DLA and GPU fallback is off: %s"
                                   % (len(cannot), ", ".join(cannot[:5])),
                                   hint="enable gpu_fallback, or fix them (see `jetforge dla-check`)")

    # --- profiles
    for profile in profiles:
        prof = builder.create_optimization_profile()
        for name, rng in profile.items():
            prof.set_shape(name, tuple(rng.min), tuple(rng.opt), tuple(rng.max))
        config.add_optimization_profile(prof)
    if profiles:
        applied.append("profiles(%d)" % len(profiles))

    # --- timing cache, optimisation level, verbosity for the inspector
    timing_cache = None
    if plan.timing_cache and rtx:
        notes.append("timing cache skipped: timing-cache operations are no-ops in TensorRT-RTX")
    elif plan.timing_cache:
        tc_path = Path(plan.timing_cache)
        timing_cache = config.create_timing_cache(tc_path.read_bytes() if tc_path.is_file() else b"")
        config.set_timing_cache(timing_cache, False)
        applied.append("timing_cache")
    if plan.builder_optimization_level is not None and hasattr(config, "builder_optimization_level"):
        config.builder_optimization_level = int(plan.builder_optimization_level)
    if hasattr(trt, "ProfilingVerbosity"):
        config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED

    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        errors = logger.errors()
        raise EngineBuildError("TensorRT %s refused to build the engine: %s"
                               % (installed, "; ".join(errors[-3:]) or "no error message"),
                               hint="rerun with --debug for TensorRT's log; check the plan with --plan-only")
    data = bytes(memoryview(serialized))
    seconds = time.perf_counter() - started
    if calibrator is not None and calibrator.batches_requested:
        notes.append("TensorRT asked the calibrator for %d batch(es): it did not accept the cache"
                     % calibrator.batches_requested)

    # --- inspection
    inspector: Dict[str, Any] = {"available": False}
    engine_inputs, engine_outputs = net_inputs, net_outputs
    if inspect:
        inspector, io = _inspect(trt, logger, data, plan)
        if io is not None:
            engine_inputs, engine_outputs = io

    report: Dict[str, Any] = {
        "tensorrt": installed, "backend": "tensorrt_rtx" if rtx else "tensorrt", "plan": plan.to_dict(),
        "applied": applied, "notes": list(plan.notes) + notes, "engine_bytes": len(data),
        "build_seconds": round(seconds, 3), "network": {"layers": network.num_layers, "inputs": net_inputs,
                                                        "outputs": net_outputs},
        "dla_audit": dla_audit, "inspector": inspector,
    }

    written_engine = written_sidecar = written_report = None
    if engine_path is not None:
        written_engine = write_bytes_atomic(engine_path, data)
        if timing_cache is not None:
            write_bytes_atomic(plan.timing_cache, bytes(memoryview(config.get_timing_cache().serialize())))
        sidecar = engine_sidecar_from_plan(
            plan, [TensorSpec(i["name"], i["shape"], i["dtype"]) for i in engine_inputs],
            [TensorSpec(o["name"], o["shape"], o["dtype"]) for o in engine_outputs], installed,
            build_seconds=round(seconds, 3), backend=report["backend"], notes=notes)
        written_sidecar = write_engine_sidecar(written_engine, sidecar)
        written_report = write_json_atomic(report_path or Path(str(engine_path) + ".report.json"), report)
    return BuildResult(written_engine, written_sidecar, written_report, len(data), seconds, report,
                       list(plan.notes) + notes)


def _inspect(trt: ModuleType, logger: Any, data: bytes,
             plan: BuildPlan) -> Tuple[Dict[str, Any], Optional[Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]]]:
    """Deserialize the plan and read the engine inspector; say why when that is impossible here."""
    runtime = trt.Runtime(logger)
    if plan.uses_dla and compat.supports_dla(trt):
        runtime.DLA_core = int(plan.dla_core)  # the core must be selected before deserializing (§1.6)
    before = len(logger.messages)
    engine = runtime.deserialize_cuda_engine(data)
    if engine is None:
        errors = [m for s, m in logger.messages[before:] if s in ("ERROR", "INTERNAL_ERROR")]
        return {"available": False,
                "reason": "the engine could not be deserialized on this machine (inspection needs a CUDA device "
                          "the engine runs on): %s" % ("; ".join(errors[-1:]) or "no message")}, None
    inspector = engine.create_engine_inspector()
    text = inspector.get_engine_information(trt.LayerInformationFormat.JSON)
    try:
        parsed = parse_inspector_json(text)
    except EngineBuildError as err:  # the engine is built: a report without placement, not a failed build
        return {"available": False, "reason": err.message}, compat.engine_io(trt, engine)
    parsed["available"] = True
    return parsed, compat.engine_io(trt, engine)
