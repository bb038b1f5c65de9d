"""The sidecar of a built engine: ``model.engine`` -> ``model.engine.json``.

It records what produced the plan (jetforge and TensorRT versions, target, precision, DLA
core, INT8 source, build time), the I/O tensors as TensorRT built them, the preprocessing
and task copied from the ONNX sidecar, and the source ONNX's hash, so that a session can
refuse an engine built for another TensorRT, board or model with a message naming the fix.
The tensor and preprocessing pieces are those of :mod:`jetforge.runtime.sidecar`.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from jetforge.errors import InputFileError, ModelError
from jetforge.fileio import PathLike, sha256_file, write_json_atomic
from jetforge.jsonfile import read_json
from jetforge.runtime.inputs import Preprocess
from jetforge.runtime.tensorrt.version import TensorRTVersion
from jetforge.runtime.sidecar import (ModelSidecar, TensorSpec, list_field, mapping_field, produced_by,
                                      read_sidecar, sidecar_path)

ENGINE_SIDECAR_FORMAT = 1


@dataclass
class EngineSidecar:
    """What an engine file is, how it was built and how to feed it."""

    tensorrt_version: str
    target: str
    precision: str
    device: str
    dla_core: Optional[int]
    inputs: List[TensorSpec]
    outputs: List[TensorSpec]
    source_onnx: Dict[str, str]                 # {"path": ..., "sha256": ...}
    gpu_fallback: bool = False
    int8_source: Optional[str] = None
    task: str = "other"
    labels: List[str] = field(default_factory=list)
    preprocess: Optional[Preprocess] = None
    build_seconds: Optional[float] = None
    backend: str = "tensorrt"                   # "tensorrt" or "tensorrt_rtx"
    plan: Dict[str, Any] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)
    content_sha256: str = ""
    produced_by: Dict[str, Any] = field(default_factory=dict)
    format: int = ENGINE_SIDECAR_FORMAT

    def to_dict(self) -> Dict[str, Any]:
        return {
            "format": self.format, "kind": "tensorrt-engine", "backend": self.backend,
            "tensorrt_version": self.tensorrt_version, "target": self.target, "precision": self.precision,
            "device": self.device, "dla_core": self.dla_core, "gpu_fallback": self.gpu_fallback,
            "int8_source": self.int8_source, "task": self.task, "labels": list(self.labels),
            "inputs": [t.to_dict() for t in self.inputs], "outputs": [t.to_dict() for t in self.outputs],
            "preprocess": self.preprocess.to_dict() if self.preprocess else None,
            "source_onnx": dict(self.source_onnx), "build_seconds": self.build_seconds,
            "plan": dict(self.plan), "notes": list(self.notes), "content_sha256": self.content_sha256,
            "produced_by": dict(self.produced_by),
        }

    @classmethod
    def from_dict(cls, data: Dict[str, Any], where: str = "engine sidecar") -> "EngineSidecar":
        try:
            fmt = int(data.get("format", 0))
            if fmt != ENGINE_SIDECAR_FORMAT or data.get("kind") != "tensorrt-engine":
                raise ModelError("%s is not an engine sidecar of format %d" % (where, ENGINE_SIDECAR_FORMAT),
                                 hint="rebuild the engine with `jetforge build`")
            pre = data.get("preprocess")
            return cls(
                tensorrt_version=str(data["tensorrt_version"]), target=str(data["target"]),
                precision=str(data["precision"]), device=str(data["device"]),
                dla_core=None if data.get("dla_core") is None else int(data["dla_core"]),
                inputs=[TensorSpec.from_dict(t) for t in data["inputs"]],
                outputs=[TensorSpec.from_dict(t) for t in data["outputs"]],
                source_onnx=_strings(mapping_field(data, "source_onnx"), "source_onnx"),
                gpu_fallback=bool(data.get("gpu_fallback", False)),
                int8_source=_optional(data, "int8_source", str), task=str(data.get("task", "other")),
                labels=[str(x) for x in list_field(data, "labels")],
                preprocess=Preprocess.from_dict(pre) if pre else None,
                build_seconds=_optional(data, "build_seconds", (int, float)),
                backend=str(data.get("backend", "tensorrt")),
                plan=mapping_field(data, "plan"), notes=[str(n) for n in list_field(data, "notes")],
                content_sha256=str(data.get("content_sha256", "")), produced_by=mapping_field(data, "produced_by"),
            )
        except (KeyError, TypeError, ValueError, OverflowError) as err:  # OverflowError: "format": Infinity
            raise ModelError("%s is malformed: %s" % (where, err), hint="rebuild the engine") from err


def _optional(data: Dict[str, Any], key: str, types: Any) -> Any:
    """``data[key]`` when it is None or of ``types`` (never a bool standing in for a number); else TypeError."""
    value = data.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, types)):
        raise TypeError("%s has the wrong type" % key)
    return value


def _strings(mapping: Dict[str, Any], key: str) -> Dict[str, str]:
    if not all(isinstance(v, str) for v in mapping.values()):
        raise TypeError("%s must map names to strings" % key)
    return mapping


def engine_sidecar_from_plan(plan: Any, inputs: List[TensorSpec], outputs: List[TensorSpec],
                             tensorrt_version: str, build_seconds: Optional[float] = None,
                             backend: str = "tensorrt", notes: Optional[List[str]] = None) -> EngineSidecar:
    """An engine sidecar for ``plan`` (a BuildPlan), copying task/labels/preprocessing from the ONNX sidecar."""
    task, labels, pre = "other", [], None
    extra_notes = list(notes or [])
    onnx_sidecar = sidecar_path(plan.onnx_path)
    if onnx_sidecar.is_file():
        model: ModelSidecar = read_sidecar(plan.onnx_path, verify_hash=False)
        task, labels, pre = model.task, list(model.labels), model.preprocess
    else:
        extra_notes.append("no ONNX sidecar %s: task, labels and preprocessing not recorded" % onnx_sidecar.name)
    return EngineSidecar(
        tensorrt_version=tensorrt_version, target=plan.target, precision=plan.precision, device=plan.device,
        dla_core=plan.dla_core, inputs=inputs, outputs=outputs,
        source_onnx={"path": plan.onnx_path, "sha256": plan.onnx_sha256}, gpu_fallback=plan.gpu_fallback,
        int8_source=plan.int8_source, task=task, labels=labels, preprocess=pre, build_seconds=build_seconds,
        backend=backend, plan=plan.to_dict(), notes=list(plan.notes) + extra_notes,
        produced_by=produced_by("build", tensorrt=tensorrt_version, backend=backend))


def write_engine_sidecar(engine_path: PathLike, sidecar: EngineSidecar) -> Path:
    """Stamp the engine's hash into ``sidecar`` and write ``<engine>.json`` atomically."""
    sidecar.content_sha256 = sha256_file(engine_path)
    return write_json_atomic(sidecar_path(engine_path), sidecar.to_dict())


def read_engine_sidecar(engine_path: PathLike, verify_hash: bool = True,
                        tensorrt_version: Optional[str] = None) -> EngineSidecar:
    """Load ``<engine>.json``; refuse a missing one, a stale hash, or another TensorRT major.minor."""
    path = sidecar_path(engine_path)
    if not path.is_file():
        raise InputFileError("engine %s has no sidecar %s" % (engine_path, path.name),
                             hint="rebuild the engine with `jetforge build`, which writes it")
    data = read_json(path, "engine sidecar", ModelError, hint="rebuild the engine")
    if not isinstance(data, dict):
        raise ModelError("engine sidecar %s must hold a JSON object" % path, hint="rebuild the engine")
    sidecar = EngineSidecar.from_dict(data, where=str(path))
    if verify_hash and sidecar.content_sha256 and sha256_file(engine_path) != sidecar.content_sha256:
        raise ModelError("sidecar %s does not belong to %s (the engine changed after it was written)"
                         % (path.name, Path(engine_path).name), hint="rebuild the engine with `jetforge build`")
    if tensorrt_version is not None:
        if not TensorRTVersion.lenient(sidecar.tensorrt_version).same_release(str(tensorrt_version)):
            raise ModelError("engine %s was built with TensorRT %s; this machine has TensorRT %s (plans do not load "
                             "across versions)" % (Path(engine_path).name, sidecar.tensorrt_version, tensorrt_version),
                             hint="rebuild the engine on this machine with `jetforge build`")
    return sidecar
