"""The sidecar of a built engine: ``model.engine`` -> ``model.engine.json``.

It records what produced the plan (jetforge and TensorRT versions, target, precision, DLA
core, INT8 source, build time), the I/O tensors as TensorRT built them, the source ONNX's hash,
and -- format 2 -- the source model's whole sidecar (``model``: task, labels, the input contract
of every kind, ``extra`` such as the SSD anchors, the model's own tensors and hash), so that an
engine opens in every app its ONNX opens in, and a session can refuse an engine built for another
TensorRT, board or model with a message naming the fix.

Format 1 (read, upgraded in :meth:`EngineSidecar.from_dict`) copied only the task, labels and an
image ``preprocess``; its clip and pyramid contracts and ``extra`` were lost.  The upgrade builds
the model block from what format 1 kept and says so in ``model.produced_by``; a consumer that needs
more (the SSD block, a clip) then fails with its usual message, and rebuilding writes format 2.

Consumers read model facts through :func:`jetforge.runtime.model_facts.model_facts`, never from
these fields directly.  The tensor and contract pieces are those of :mod:`jetforge.runtime.sidecar`.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from jetforge.errors import ConfigError, InputFileError, ModelError
from jetforge.fileio import PathLike, sha256_file, write_json_atomic
from jetforge.jsonfile import expect, expect_number, expect_text, expect_texts, read_json
from jetforge.runtime.inputs import Preprocess
from jetforge.runtime.tensorrt.version import TensorRTVersion
from jetforge.runtime.sidecar import (TASKS, ModelSidecar, TensorSpec, list_field, mapping_field, produced_by,
                                      read_sidecar, sidecar_path)

ENGINE_SIDECAR_FORMAT = 2
READABLE_ENGINE_FORMATS = (1, 2)
UPGRADED_FROM_FORMAT1 = "engine sidecar format 1 (task, labels and image preprocessing only)"


@dataclass
class EngineSidecar:
    """What an engine file is, how it was built and how to feed it.

    ``model`` is the source model's sidecar (its facts: task, labels, input contract, ``extra``);
    ``task``, ``labels`` and ``preprocess`` mirror it (given without ``model``, they make one, as
    format 1 recorded them).  ``inputs``/``outputs`` are the engine's tensors as TensorRT built them.
    """

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
    model: Optional[ModelSidecar] = None

    def __post_init__(self) -> None:
        if self.model is None:
            if self.task not in TASKS:
                raise ModelError("engine sidecar task %r is not one of %s" % (self.task, ", ".join(TASKS)))
            self.model = ModelSidecar(
                task=self.task, model_name="", inputs=list(self.inputs), outputs=list(self.outputs),
                preprocess=self.preprocess, labels=list(self.labels),
                content_sha256=str(self.source_onnx.get("sha256", "")),
                produced_by={"note": "given as task, labels and preprocess only"})
        else:
            given = {"task": self.task != "other" and self.task != self.model.task,
                     "labels": bool(self.labels) and list(self.labels) != list(self.model.labels),
                     "preprocess": self.preprocess is not None and self.preprocess != self.model.input}
            clash = [k for k, v in given.items() if v]
            if clash:
                raise ModelError("engine sidecar gives %s twice (top level and model), differently" % clash[0],
                                 hint="give the model's facts once, in its model block")
        self.task, self.labels, self.preprocess = self.model.task, list(self.model.labels), self.model.preprocess
        self.format = ENGINE_SIDECAR_FORMAT

    @property
    def upgraded_from_format1(self) -> bool:
        """Whether the model facts are a format-1 file's (task, labels, image preprocessing only)."""
        return self.model is not None and self.model.produced_by.get("upgraded_from") == UPGRADED_FROM_FORMAT1

    def to_dict(self) -> Dict[str, Any]:
        assert self.model is not None  # __post_init__ made it
        return {
            "format": self.format, "kind": "tensorrt-engine", "backend": self.backend,
            "tensorrt_version": self.tensorrt_version, "target": self.target, "precision": self.precision,
            "device": self.device, "dla_core": self.dla_core, "gpu_fallback": self.gpu_fallback,
            "int8_source": self.int8_source,
            "inputs": [t.to_dict() for t in self.inputs], "outputs": [t.to_dict() for t in self.outputs],
            "model": self.model.to_dict(),
            "source_onnx": dict(self.source_onnx), "build_seconds": self.build_seconds,
            "plan": dict(self.plan), "notes": list(self.notes), "content_sha256": self.content_sha256,
            "produced_by": dict(self.produced_by),
        }

    @classmethod
    def from_dict(cls, data: Dict[str, Any], where: str = "engine sidecar") -> "EngineSidecar":
        try:
            fmt = expect(data.get("format", 0), int, "format")  # `true` is no format 1
            if fmt not in READABLE_ENGINE_FORMATS or data.get("kind") != "tensorrt-engine":
                raise ModelError("%s is not an engine sidecar of format %s" % (
                    where, " or ".join(str(f) for f in READABLE_ENGINE_FORMATS)),
                    hint="rebuild the engine with `jetforge build`")
            if fmt >= 2:
                block = data["model"]
                if not isinstance(block, dict):
                    raise TypeError("model must be a JSON object")
                stray = [k for k in ("task", "labels", "preprocess") if k in data]
                if stray:
                    raise TypeError("%s belongs in the model block in format 2" % stray[0])
                try:
                    model = ModelSidecar.from_dict(block, where="%s (its model block)" % where)
                except ConfigError as err:  # an unknown input kind or contract field: name the file it is in
                    raise ModelError("%s (its model block): %s" % (where, err.message), hint=err.hint) from err
            else:  # format 1: its task, labels and image preprocess become the model block, marked as upgraded
                pre = data.get("preprocess")
                model = ModelSidecar(
                    task=expect_text(data.get("task", "other"), "task", 60), model_name="",
                    inputs=[TensorSpec.from_dict(t) for t in expect(data["inputs"], list, "inputs")],
                    outputs=[TensorSpec.from_dict(t) for t in expect(data["outputs"], list, "outputs")],
                    preprocess=Preprocess.from_dict(pre) if pre else None,
                    labels=expect_texts(list_field(data, "labels"), "labels", 1000),
                    content_sha256=str(mapping_field(data, "source_onnx").get("sha256", "")),
                    produced_by={"upgraded_from": UPGRADED_FROM_FORMAT1})
            return cls(model=model,  # nothing coerced: a list is no version, 1 is no gpu_fallback
                tensorrt_version=expect_text(data["tensorrt_version"], "tensorrt_version", 40),
                target=expect_text(data["target"], "target", 100),
                precision=expect_text(data["precision"], "precision", 20),
                device=expect_text(data["device"], "device", 20),
                dla_core=None if data.get("dla_core") is None else int(expect_number(data["dla_core"], "dla_core",
                                                                                     0, 15, integer=True)),
                inputs=[TensorSpec.from_dict(t) for t in expect(data["inputs"], list, "inputs")],
                outputs=[TensorSpec.from_dict(t) for t in expect(data["outputs"], list, "outputs")],
                source_onnx=_strings(mapping_field(data, "source_onnx"), "source_onnx"),
                gpu_fallback=expect(data.get("gpu_fallback", False), bool, "gpu_fallback"),
                int8_source=_optional(data, "int8_source", str),
                build_seconds=None if data.get("build_seconds") is None else expect_number(
                    data["build_seconds"], "build_seconds", 0.0),
                backend=expect_text(data.get("backend", "tensorrt"), "backend", 40),
                plan=mapping_field(data, "plan"), notes=expect_texts(list_field(data, "notes"), "notes", 10000),
                content_sha256=expect_text(data.get("content_sha256", ""), "content_sha256", 128),
                produced_by=mapping_field(data, "produced_by"),
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
                             backend: str = "tensorrt", notes: Optional[List[str]] = None,
                             model: Optional[ModelSidecar] = None) -> EngineSidecar:
    """An engine sidecar for ``plan`` (a BuildPlan) that embeds the source model's whole sidecar.

    ``model`` defaults to :func:`source_model_sidecar` of the plan's ONNX.  Without any sidecar the
    engine records the task "other" and no input contract, and a note says why.
    """
    extra_notes = list(notes or [])
    if model is None:
        model, how = source_model_sidecar(plan.onnx_path, inputs, outputs)
        if how:
            extra_notes.append(how)
    if model is None:
        model = ModelSidecar(task="other", model_name=Path(plan.onnx_path).stem, inputs=list(inputs),
                             outputs=list(outputs), content_sha256=plan.onnx_sha256,
                             produced_by={"stage": "build", "note": "the source model had no usable sidecar"})
    return EngineSidecar(
        tensorrt_version=tensorrt_version, target=plan.target, precision=plan.precision, device=plan.device,
        dla_core=plan.dla_core, inputs=inputs, outputs=outputs,
        source_onnx={"path": plan.onnx_path, "sha256": plan.onnx_sha256}, gpu_fallback=plan.gpu_fallback,
        int8_source=plan.int8_source, build_seconds=build_seconds, model=model,
        backend=backend, plan=plan.to_dict(), notes=list(plan.notes) + extra_notes,
        produced_by=produced_by("build", tensorrt=tensorrt_version, backend=backend))


def source_model_sidecar(onnx_path: PathLike, inputs: List[TensorSpec],
                         outputs: List[TensorSpec]) -> Tuple[Optional[ModelSidecar], str]:
    """(the sidecar whose facts an engine built from ``onnx_path`` carries, a note or "").

    The ONNX's own sidecar; for ``X.qdq.onnx`` without one, ``X.onnx.json`` (the Q/DQ model of
    ``jetforge calibrate`` and of a bundle is the same network with Q/DQ nodes: same tensors, same
    input contract).  A sidecar whose tensor names are not the engine's is not embedded (it describes
    another network).  None when no sidecar fits: the engine then records no model facts.
    """
    onnx = Path(onnx_path)
    candidates = [onnx]
    if onnx.name.endswith(".qdq.onnx"):
        candidates.append(onnx.with_name(onnx.name[:-len(".qdq.onnx")] + ".onnx"))
    for candidate in candidates:
        if not sidecar_path(candidate).is_file():
            continue
        # the hash is not checked against the built file: the Q/DQ variant's facts are its plain model's
        model = read_sidecar(candidate, verify_hash=False)
        names = ([t.name for t in model.inputs], [t.name for t in model.outputs])
        if names != ([t.name for t in inputs], [t.name for t in outputs]):
            return None, ("sidecar %s names tensors %s, the engine %s: not embedded, the engine carries no model "
                          "facts" % (sidecar_path(candidate).name, names,
                                     ([t.name for t in inputs], [t.name for t in outputs])))
        how = "" if candidate == onnx else "model facts from %s (the plain model of this Q/DQ model)" % (
            sidecar_path(candidate).name)
        return model, how
    return None, "no ONNX sidecar %s: task, labels and input contract not recorded" % sidecar_path(onnx).name


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
