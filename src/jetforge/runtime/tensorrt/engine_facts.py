"""What a built plan says about itself, read by the TensorRT installed here (``jetforge info MODEL.engine``).

The engine sidecar (:mod:`.engine_sidecar`) answers most questions without TensorRT; this is the thin rest:
deserialize the plan with this machine's TensorRT and report its I/O tensors as the engine has them, its layer
count, optimisation profiles and the engine inspector's per-layer placement (:func:`.inspect.parse_inspector_json`).
Without TensorRT, or where the plan does not load (another TensorRT release, no CUDA device), the result says
why and the caller shows the sidecar alone.
"""

from pathlib import Path
from typing import Any, Dict, Optional

from jetforge.errors import EngineBuildError
from jetforge.fileio import PathLike
from jetforge.runtime.tensorrt import compat
from jetforge.runtime.tensorrt.inspect import parse_inspector_json
from jetforge.runtime.tensorrt.library import installed_version


def engine_plan_facts(path: PathLike, dla_core: Optional[int] = None) -> Dict[str, Any]:
    """``{"available": True, "tensorrt": ..., "inputs", "outputs", "layers", "profiles", "inspector"}``, or
    ``{"available": False, "reason": ...}`` where this machine cannot read the plan."""
    version = installed_version()
    if version is None:
        return {"available": False, "reason": "TensorRT is not installed here (the engine sidecar says what the "
                                              "plan is; install JetPack's python3-libnvinfer to read the plan)"}
    from jetforge.runtime.tensorrt.library import load_tensorrt
    from jetforge.runtime.tensorrt.logger import make_logger

    trt = load_tensorrt()
    logger = make_logger(trt, keep=True, forward=None)
    runtime = trt.Runtime(logger)
    if dla_core is not None and compat.supports_dla(trt):
        runtime.DLA_core = int(dla_core)
    engine = runtime.deserialize_cuda_engine(Path(path).read_bytes())
    if engine is None:
        errors = logger.errors()
        return {"available": False, "tensorrt": version,
                "reason": "TensorRT %s could not deserialize the plan (built with another TensorRT release, or no "
                          "CUDA device it runs on): %s" % (version, "; ".join(errors[-1:]) or "no message")}
    inputs, outputs = compat.engine_io(trt, engine)
    facts: Dict[str, Any] = {"available": True, "tensorrt": version, "inputs": inputs, "outputs": outputs,
                             "layers": int(getattr(engine, "num_layers", -1)),
                             "profiles": int(getattr(engine, "num_optimization_profiles", 1))}
    try:
        text = engine.create_engine_inspector().get_engine_information(trt.LayerInformationFormat.JSON)
        facts["inspector"] = parse_inspector_json(text)["summary"]
    except EngineBuildError as err:
        facts["inspector"] = {"available": False, "reason": err.message}
    return facts


__all__ = ["engine_plan_facts"]
