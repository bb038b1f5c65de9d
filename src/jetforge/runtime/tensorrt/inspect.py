"""Reading a built engine back: per-layer placement and precision from TensorRT's engine inspector.

``engine.create_engine_inspector().get_engine_information(LayerInformationFormat.JSON)`` (TensorRT 8.2+,
and TensorRT-RTX) describes every layer; the build report keeps it, and ``jetforge board-check``
compares it with ``dla-check``'s prediction.  Inspection needs a CUDA device the engine runs on: where
there is none, the report says why instead of failing a finished build.
"""

import json
from types import ModuleType
from typing import Any, Dict, List, Optional, Tuple

from jetforge.errors import EngineBuildError
from jetforge.runtime.tensorrt import compat
from jetforge.runtime.tensorrt.compat import engine_io

IO = Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]


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


def inspect_engine(trt: ModuleType, logger: Any, data: bytes, plan: Any) -> Tuple[Dict[str, Any], Optional[IO]]:
    """Deserialize the plan and read the engine inspector; say why when that is impossible here."""
    runtime = trt.Runtime(logger)
    if plan.uses_dla and compat.supports_dla(trt):
        runtime.DLA_core = int(plan.dla_core)  # the core must be selected before deserializing
    before = len(logger.messages)
    engine = runtime.deserialize_cuda_engine(data)
    if engine is None:
        errors = logger.errors(since=before)
        return {"available": False,
                "reason": "the engine could not be deserialized on this machine (inspection needs a CUDA device "
                          "the engine runs on): %s" % ("; ".join(errors[-1:]) or "no message")}, None
    inspector = engine.create_engine_inspector()
    text = inspector.get_engine_information(trt.LayerInformationFormat.JSON)
    try:
        parsed = parse_inspector_json(text)
    except EngineBuildError as err:  # the engine is built: a report without placement, not a failed build
        return {"available": False, "reason": err.message}, engine_io(trt, engine)
    parsed["available"] = True
    return parsed, engine_io(trt, engine)
