"""Build an engine: apply a :class:`~jetforge.runtime.tensorrt.plan.BuildPlan` to TensorRT's builder.

Every decision was made (and validated) in the plan; the build only carries it out:

1. the network from ONNX (:mod:`.network`), then the plan's input checks on the parsed network
   (they also run in the planner when it could read the ONNX itself);
2. the builder config (:mod:`.config`: flags, the cache-serving calibrator, DLA, memory pools,
   per-layer precisions, profiles, timing cache, profiling verbosity);
3. ``build_serialized_network``; the engine file is written atomically (loadable with
   ``trtexec --loadEngine``), then the sidecar and a build report whose per-layer placement and
   precision come from the engine inspector (:mod:`.inspect`).

The same path runs on ``tensorrt_rtx`` for the shared parts (network from ONNX, profiles,
serialization, inspection); the JetPack-only calls (precision flags, calibrator, DLA) are skipped
there with a note recorded in the report.  Version differences live in :mod:`.compat`.
"""

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Dict, List, Optional

from jetforge.errors import EngineBuildError
from jetforge.fileio import PathLike, check_not_input, write_bytes_atomic, write_json_atomic
from jetforge.runtime.sidecar import TensorSpec, sidecar_path
from jetforge.runtime.tensorrt import compat
from jetforge.runtime.tensorrt.config import configure
from jetforge.runtime.tensorrt.engine_sidecar import engine_sidecar_from_plan, write_engine_sidecar
from jetforge.runtime.tensorrt.inspect import inspect_engine, parse_inspector_json  # noqa: F401  (public here)
from jetforge.runtime.tensorrt.library import is_rtx, load_tensorrt, version_string
from jetforge.runtime.tensorrt.logger import make_logger
from jetforge.runtime.tensorrt.network import network_from_onnx
from jetforge.runtime.tensorrt.plan import JETPACK_HINT, BuildPlan
from jetforge.runtime.tensorrt.profile import ShapeRange, check_inputs
from jetforge.runtime.tensorrt.version import TensorRTVersion

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


def check_library(trt: ModuleType, plan: BuildPlan) -> List[str]:
    """Notes for a TensorRT-RTX build; an EngineBuildError when JetPack TensorRT is not the plan's release."""
    installed = version_string(trt)
    if is_rtx(trt):
        return ["built with TensorRT-RTX %s: shared path only; the plan file is not loadable by JetPack's "
                "TensorRT" % installed]
    if not TensorRTVersion.of_module(trt).same_release(TensorRTVersion.parse(plan.tensorrt_version)):
        raise EngineBuildError("the plan targets TensorRT %s but TensorRT %s is installed here (plans do not "
                               "load across versions)" % (plan.tensorrt_version, installed),
                               hint=JETPACK_HINT + "; or make the plan with --tensorrt %s" % installed)
    return []


def build_engine(plan: BuildPlan, engine_path: Optional[PathLike] = None, *, trt: Optional[ModuleType] = None,
                 cache_bytes: Optional[bytes] = None, report_path: Optional[PathLike] = None,
                 inspect: bool = True) -> BuildResult:
    """Apply ``plan`` to TensorRT and write the engine, its sidecar and the build report.

    ``trt`` defaults to ``import tensorrt``; pass the ``tensorrt_rtx`` module to run the shared
    path on TensorRT-RTX.  With ``engine_path`` None nothing is written (the report still returns).
    """
    trt = trt if trt is not None else load_tensorrt()
    notes = check_library(trt, plan)
    if engine_path is not None:
        check_not_input(engine_path, [plan.onnx_path, plan.calibration_cache, sidecar_path(plan.onnx_path)])

    started = time.perf_counter()
    logger = make_logger(trt)
    builder, network, _parser = network_from_onnx(trt, logger, plan.onnx_path)
    net_inputs, net_outputs = compat.network_io(network)
    profiles = [{n: ShapeRange(r["min"], r["opt"], r["max"]) for n, r in p.items()} for p in plan.profiles]
    check_inputs(net_inputs, profiles, plan.uses_dla and compat.supports_dla(trt))
    config, record = configure(trt, builder, network, plan, profiles, cache_bytes)
    notes.extend(record.notes)

    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise EngineBuildError("TensorRT %s refused to build the engine: %s"
                               % (version_string(trt), "; ".join(logger.errors()[-3:]) or "no error message"),
                               hint="rerun with --debug for TensorRT's log; check the plan with --plan-only")
    data = bytes(memoryview(serialized))
    seconds = time.perf_counter() - started
    if record.calibrator is not None and record.calibrator.batches_requested:
        notes.append("TensorRT asked the calibrator for %d batch(es): it did not accept the cache"
                     % record.calibrator.batches_requested)

    inspector: Dict[str, Any] = {"available": False}
    engine_inputs, engine_outputs = net_inputs, net_outputs
    if inspect:
        inspector, io = inspect_engine(trt, logger, data, plan)
        if io is not None:
            engine_inputs, engine_outputs = io
    report: Dict[str, Any] = {
        "tensorrt": version_string(trt), "backend": "tensorrt_rtx" if is_rtx(trt) else "tensorrt",
        "plan": plan.to_dict(), "applied": record.applied, "notes": list(plan.notes) + notes, "engine_bytes": len(data),
        "build_seconds": round(seconds, 3), "network": {"layers": network.num_layers, "inputs": net_inputs,
                                                        "outputs": net_outputs},
        "dla_audit": record.dla_audit, "inspector": inspector,
    }
    written = (None, None, None)
    if engine_path is not None:
        timing = config.get_timing_cache() if record.timing_cache is not None else None
        written = _write_outputs(plan, engine_path, report_path, data, timing, engine_inputs, engine_outputs,
                                 report, notes)
    return BuildResult(written[0], written[1], written[2], len(data), seconds, report, list(plan.notes) + notes)


def _write_outputs(plan: BuildPlan, engine_path: PathLike, report_path: Optional[PathLike], data: bytes,
                   timing_cache: Any, inputs: List[Dict[str, Any]], outputs: List[Dict[str, Any]],
                   report: Dict[str, Any], notes: List[str]) -> tuple:
    """The engine (atomically), the updated timing cache, the engine sidecar and the build report."""
    written_engine = write_bytes_atomic(engine_path, data)
    if timing_cache is not None:
        write_bytes_atomic(plan.timing_cache, bytes(memoryview(timing_cache.serialize())))
    sidecar = engine_sidecar_from_plan(
        plan, [TensorSpec(i["name"], i["shape"], i["dtype"]) for i in inputs],
        [TensorSpec(o["name"], o["shape"], o["dtype"]) for o in outputs], report["tensorrt"],
        build_seconds=report["build_seconds"], backend=report["backend"], notes=notes)
    written_sidecar = write_engine_sidecar(written_engine, sidecar)
    written_report = write_json_atomic(report_path or Path(str(engine_path) + ".report.json"), report)
    return written_engine, written_sidecar, written_report
