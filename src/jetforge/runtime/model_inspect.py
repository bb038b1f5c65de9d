"""What a model file is, for ``jetforge info``: an ONNX model or a TensorRT engine, as plain JSON-ready data.

Like ``polygraphy inspect model``, but with jetforge's facts beside the graph's: the tensors, operator counts,
parameters and MACs of the graph; the sidecar's input contract (kind, preprocessing, layout), precision and
provenance; and the SHA-256 of every file read, checked against what the sidecar recorded.

* **ONNX**: read by the ``onnx``-free wire reader (:mod:`jetforge.runtime.onnx_wire`), so a board without the
  ``onnx`` package inspects what the workstation inspects, and a truncated or foreign file is the reader's one
  ModelError.  MACs need ONNX shape inference (:func:`jetforge.runtime.estimate.macs.model_macs`): without
  ``onnx``, or with dynamic axes besides the batch, the result says why instead of guessing.
* **engine**: the engine sidecar (it embeds the source model's sidecar) needs no TensorRT; the plan's own facts
  come from :func:`jetforge.runtime.tensorrt.engine_facts.engine_plan_facts` where TensorRT is installed.

A sidecar that is stale or malformed does not stop the inspection (inspecting is how one finds that out): its
problem is reported in place of its facts.  Torch-free, Python 3.8.
"""

import collections
from pathlib import Path
from typing import Any, Dict, List, Optional

from jetforge.errors import JetforgeError
from jetforge.fileio import PathLike, require_file, sha256_file
from jetforge.optional import is_available
from jetforge.runtime.inputs.base import contract_to_dict
from jetforge.runtime.model_facts import ENGINE_SUFFIXES
from jetforge.runtime.onnx_checks import product
from jetforge.runtime.onnx_wire import OnnxGraphFacts, read_graph_facts
from jetforge.runtime.sidecar import ModelSidecar, read_sidecar, sidecar_path

ONNX_SUFFIXES = (".onnx",)
_FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")


def file_entry(path: PathLike, role: str) -> Dict[str, Any]:
    """``{"role", "path", "bytes", "sha256"}`` of one file read."""
    p = Path(path)
    return {"role": role, "path": str(p), "bytes": p.stat().st_size, "sha256": sha256_file(p)}


def onnx_info(path: PathLike, *, macs: bool = True, batch: int = 1) -> Dict[str, Any]:
    """The facts of an ONNX file (see the module docstring); a damaged file is a ModelError naming it."""
    p = require_file(path, "ONNX model", hint="check the path")
    facts = read_graph_facts(p)
    files = [file_entry(p, "onnx")]
    sidecar = _sidecar_block(p, files)
    info: Dict[str, Any] = {"kind": "onnx", "path": str(p), "opset": facts.opset,
                            "inputs": facts.inputs, "outputs": facts.outputs,
                            "nodes": len(facts.nodes), "ops": op_counts(facts), "parameters": parameters(facts),
                            "precision": onnx_precision(facts), "macs": _macs(p, facts, macs, batch),
                            "sidecar": sidecar, "files": files}
    return info


def op_counts(facts: OnnxGraphFacts) -> Dict[str, int]:
    """Operator type -> node count, most frequent first (ties by name)."""
    counts = collections.Counter(op for _, op in facts.nodes)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def parameters(facts: OnnxGraphFacts) -> Dict[str, Any]:
    """Elements stored in initializers: in total, by dtype, and how many tensors hold them."""
    by_dtype: Dict[str, int] = {}
    for _, dims, dtype in facts.initializers:
        by_dtype[dtype] = by_dtype.get(dtype, 0) + product(dims)
    return {"total": sum(by_dtype.values()), "tensors": len(facts.initializers), "by_dtype": by_dtype}


def onnx_precision(facts: OnnxGraphFacts) -> str:
    """The graph's numeric precision as its tensors give it: "int8 (Q/DQ)", or the float type(s) of its weights."""
    floats = sorted({dtype for _, _, dtype in facts.initializers if dtype in _FLOAT_DTYPES}
                    | {t["dtype"] for t in facts.inputs if t["dtype"] in _FLOAT_DTYPES})
    text = "+".join(floats) if floats else "no floating-point tensors"
    return "int8 (Q/DQ nodes), %s elsewhere" % text if facts.has_qdq else text


def _macs(path: Path, facts: OnnxGraphFacts, wanted: bool, batch: int) -> Dict[str, Any]:
    if not wanted:
        return {"available": False, "reason": "not asked for (--no-macs)"}
    if not is_available("onnx"):
        return {"available": False, "reason": "counting MACs needs ONNX shape inference: the onnx package is not "
                                              "installed here (pip install onnx)"}
    from jetforge.runtime.estimate.macs import model_macs

    try:
        count = model_macs(path, batch=batch)
    except JetforgeError as err:  # a dynamic axis besides the batch, an op shape inference cannot follow
        return {"available": False, "reason": err.one_line()}
    data = count.to_dict()
    data["available"] = True
    return data


def _sidecar_block(model: Path, files: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The model sidecar's facts, or why there are none; its file joins ``files``."""
    path = sidecar_path(model)
    if not path.is_file():
        return {"present": False, "reason": "no sidecar %s (export with `jetforge export` to record the input "
                                            "contract, labels and provenance)" % path.name}
    files.append(file_entry(path, "sidecar"))
    try:
        sidecar = read_sidecar(model, verify_hash=False)
    except JetforgeError as err:
        return {"present": True, "error": err.one_line()}
    block = sidecar_facts(sidecar)
    block["hash_matches"] = (sidecar.content_sha256 == files[0]["sha256"]) if sidecar.content_sha256 else None
    return block


def sidecar_facts(sidecar: ModelSidecar) -> Dict[str, Any]:
    """What ``info`` shows of a model sidecar: task, labels, the input contract, provenance, recorded hash."""
    contract = contract_to_dict(sidecar.input) if sidecar.input is not None else None
    return {"present": True, "task": sidecar.task, "model_name": sidecar.model_name,
            "labels": len(sidecar.labels), "label_examples": list(sidecar.labels[:5]),
            "input_contract": contract, "layout": (contract or {}).get("layout"),
            "produced_by": dict(sidecar.produced_by), "content_sha256": sidecar.content_sha256,
            "extra_keys": sorted(sidecar.extra)}


def engine_info(path: PathLike, *, plan: bool = True) -> Dict[str, Any]:
    """The facts of a TensorRT engine: its sidecar (no TensorRT needed) and, where TensorRT is here, the plan's."""
    from jetforge.runtime.tensorrt.engine_facts import engine_plan_facts
    from jetforge.runtime.tensorrt.engine_sidecar import read_engine_sidecar

    p = require_file(path, "engine", hint="check the path")
    files = [file_entry(p, "engine")]
    info: Dict[str, Any] = {"kind": "engine", "path": str(p), "files": files}
    dla_core: Optional[int] = None
    if not sidecar_path(p).is_file():
        info["sidecar"] = {"present": False, "reason": "no engine sidecar %s (engines built by `jetforge build` "
                                                        "have one)" % sidecar_path(p).name}
    else:
        files.append(file_entry(sidecar_path(p), "engine sidecar"))
        try:
            engine = read_engine_sidecar(p, verify_hash=False)
        except JetforgeError as err:
            info["sidecar"] = {"present": True, "error": err.one_line()}
        else:
            dla_core = engine.dla_core
            info.update(engine_sidecar_facts(engine.to_dict(), files[0]["sha256"]))
            assert engine.model is not None
            info["sidecar"] = sidecar_facts(engine.model)
    info["plan"] = engine_plan_facts(p, dla_core) if plan else {"available": False, "reason": "not asked for"}
    return info


def engine_sidecar_facts(data: Dict[str, Any], engine_sha256: str) -> Dict[str, Any]:
    """The build facts an engine sidecar records (``data``: its JSON), with the recorded hash checked."""
    keys = ("tensorrt_version", "backend", "target", "precision", "device", "dla_core", "gpu_fallback",
            "int8_source", "inputs", "outputs", "source_onnx", "build_seconds", "produced_by")
    out = {k: data.get(k) for k in keys}
    out["builder_flags"] = list((data.get("plan") or {}).get("flags") or [])
    recorded = data.get("content_sha256") or ""
    out["engine_hash_matches"] = (recorded == engine_sha256) if recorded else None
    return out


def model_kind(path: PathLike) -> str:
    """"onnx" or "engine" by the file's suffix; anything else is an InputFileError naming what ``info`` reads."""
    suffix = Path(path).suffix.lower()
    if suffix in ONNX_SUFFIXES:
        return "onnx"
    if suffix in ENGINE_SUFFIXES:
        return "engine"
    from jetforge.errors import InputFileError

    raise InputFileError("%s is neither an ONNX model (.onnx), a TensorRT engine (%s) nor a bundle folder"
                         % (path, "/".join(ENGINE_SUFFIXES)),
                         hint="give a .onnx, .engine/.plan/.trt file, a bundle folder or tar, or a shipped model "
                              "name (`jetforge models list`)")


def inspect_model_file(path: PathLike, *, macs: bool = True, batch: int = 1) -> Dict[str, Any]:
    """:func:`onnx_info` or :func:`engine_info`, by suffix."""
    return onnx_info(path, macs=macs, batch=batch) if model_kind(path) == "onnx" else engine_info(path)


__all__ = ["ONNX_SUFFIXES", "engine_info", "engine_sidecar_facts", "file_entry", "inspect_model_file", "model_kind",
           "onnx_info", "onnx_precision", "op_counts", "parameters", "sidecar_facts"]
