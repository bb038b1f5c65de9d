"""Sidecar JSON files that travel next to every model artifact.

``model.onnx`` is accompanied by ``model.onnx.json`` recording what the next
stage needs and must agree with: the task, labels, input/output tensors, the
input contract (:mod:`jetforge.runtime.inputs`: how frames become input tensors),
what produced the file and the file's content hash.  A stage reading a model reads
its sidecar through :func:`read_sidecar`, which refuses a missing, malformed or stale
sidecar with a message that names the fix.

Format 2 records the input contract as one ``input`` block ``{"kind": ..., ...}``.
Format 1 (still read, and still what older writers pass in) kept it in three places:
``preprocess`` (the image kind), ``extra.clip`` (the action model's clip) and, for
MTCNN's PNet, a nominal 12x12 ``preprocess`` plus ``extra.family/stage``, which stood
for the image pyramid; :func:`contract_from_format1` turns those into the one contract.
"""

import datetime
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from jetforge.errors import InputFileError, ModelError
from jetforge.fileio import PathLike, sha256_file, write_json_atomic
from jetforge.jsonfile import expect, expect_text, expect_texts, read_json
from jetforge.runtime.inputs.base import InputContract, contract_from_dict, contract_to_dict
from jetforge.runtime.inputs.image import Preprocess

SIDECAR_FORMAT = 2
READABLE_FORMATS = (1, 2)
TASKS = ("classify", "detect", "action", "embed", "other")
MAX_DIM = 2 ** 31 - 1  # an axis TensorRT and ONNX Runtime can hold (int32 volumes in TensorRT 8)


@dataclass(frozen=True)
class TensorSpec:
    """A named tensor: ``shape`` uses -1 (or a name string) for a dynamic axis."""

    name: str
    shape: List[Union[int, str]]
    dtype: str = "float32"

    @property
    def is_dynamic(self) -> bool:
        return any(not isinstance(d, int) or d < 0 for d in self.shape)

    def to_dict(self) -> Dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "TensorSpec":
        name = expect_text(expect(data, dict, "a tensor")["name"], "a tensor's name", 1000)
        shape = data["shape"]
        # each axis is a size (-1: dynamic) or a name; anything else (a list, a float, true, 10^12) would reach the
        # builder or an allocation as a shape
        if not isinstance(shape, list) or len(shape) > 16 or not all(
                (type(d) is int and -1 <= d <= MAX_DIM) or (isinstance(d, str) and 0 < len(d) <= 100) for d in shape):
            raise ValueError("tensor %r has shape %s: each axis must be an integer from -1 to %d or a name (at most "
                             "16 axes)" % (name[:80], str(shape)[:80], MAX_DIM))
        return cls(name=name, shape=list(shape), dtype=expect_text(data.get("dtype", "float32"), "a tensor's dtype", 32))


@dataclass
class ModelSidecar:
    """What a model file is and how to feed it; serialised as ``<model>.json``.

    ``input`` is the model's one input contract (any kind); ``preprocess`` is the same object when
    it is of the ``image`` kind, else None (the name every image consumer has always read).  Either
    may be given when constructing; format-1 conventions in ``preprocess``/``extra`` are upgraded
    (:func:`contract_from_format1`).
    """

    task: str
    model_name: str
    inputs: List[TensorSpec]
    outputs: List[TensorSpec]
    preprocess: Optional[Preprocess] = None
    labels: List[str] = field(default_factory=list)
    content_sha256: str = ""
    produced_by: Dict[str, Any] = field(default_factory=dict)
    extra: Dict[str, Any] = field(default_factory=dict)
    format: int = SIDECAR_FORMAT
    input: Optional[InputContract] = None

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ModelError("sidecar task %r is not one of %s" % (self.task[:60], ", ".join(TASKS)))
        if self.input is None:
            self.extra = dict(self.extra)  # the upgrade takes extra.clip out; the caller's dict stays as it was
            self.input = contract_from_format1(self.preprocess, self.extra)
        elif self.preprocess is not None and self.preprocess != self.input:
            raise ModelError("sidecar of %s gives two different input contracts (input and preprocess)"
                             % (self.model_name or "a model"), hint="give the contract once, as input")
        self.preprocess = self.input if isinstance(self.input, Preprocess) else None
        self.format = SIDECAR_FORMAT

    def to_dict(self) -> Dict[str, Any]:
        return {
            "format": self.format,
            "task": self.task,
            "model_name": self.model_name,
            "inputs": [t.to_dict() for t in self.inputs],
            "outputs": [t.to_dict() for t in self.outputs],
            "input": contract_to_dict(self.input) if self.input is not None else None,
            "labels": list(self.labels),
            "content_sha256": self.content_sha256,
            "produced_by": dict(self.produced_by),
            "extra": dict(self.extra),
        }

    @classmethod
    def from_dict(cls, data: Dict[str, Any], where: str = "sidecar") -> "ModelSidecar":
        try:
            fmt = expect(data.get("format", 0), int, "format")  # `true` is no format 1
            if fmt not in READABLE_FORMATS:
                raise ModelError("%s has format %s; this jetforge reads formats %s"
                                 % (where, fmt, ", ".join(str(f) for f in READABLE_FORMATS)),
                                 hint="re-export the model with this jetforge version")
            pre = data.get("preprocess")  # format 1 (format 2 writes "input"; a hand-written preprocess still reads)
            block = data.get("input")
            return cls(  # nothing coerced: a list is no label (it became "['a']"), a number no task
                task=expect_text(data["task"], "task", 60),
                model_name=expect_text(data.get("model_name", ""), "model_name", 1000),
                inputs=[TensorSpec.from_dict(t) for t in expect(data["inputs"], list, "inputs")],
                outputs=[TensorSpec.from_dict(t) for t in expect(data["outputs"], list, "outputs")],
                preprocess=Preprocess.from_dict(pre) if pre else None,
                labels=expect_texts(list_field(data, "labels"), "labels", 1000),
                content_sha256=expect_text(data.get("content_sha256", ""), "content_sha256", 128),
                produced_by=mapping_field(data, "produced_by"),
                extra=mapping_field(data, "extra"),
                input=contract_from_dict(block) if block is not None else None,
            )
        except (KeyError, TypeError, ValueError, OverflowError) as err:  # OverflowError: "format": Infinity
            raise ModelError("%s is malformed: %s" % (where, err), hint="re-export the model to regenerate it") from err


def contract_from_format1(preprocess: Optional[Preprocess], extra: Dict[str, Any]) -> Optional[InputContract]:
    """The input contract that format-1 fields stood for (``extra`` loses its ``clip`` block to it).

    ``extra.clip`` -> the clip kind; a ``preprocess`` block with ``extra.family == "mtcnn"`` and
    ``extra.stage == "pnet"`` -> the image pyramid it was the nominal size of; any other
    ``preprocess`` -> the image kind.
    """
    if "clip" in extra:
        from jetforge.runtime.inputs.clip import ClipContract

        block = extra.pop("clip")
        if not isinstance(block, dict):
            raise TypeError("extra.clip must be a JSON object")
        return ClipContract.from_legacy(block)
    if preprocess is not None and extra.get("family") == "mtcnn" and extra.get("stage") == "pnet":
        from jetforge.runtime.inputs.pyramid import pyramid_from_legacy

        return pyramid_from_legacy(preprocess)
    return preprocess


def mapping_field(data: Dict[str, Any], key: str) -> Dict[str, Any]:
    """``data[key]`` as a dict (absent: empty); a list or string there is an error, not ``dict()``'s guess."""
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise TypeError("%s must be a JSON object" % key)
    return dict(value)


def list_field(data: Dict[str, Any], key: str) -> List[Any]:
    """``data[key]`` as a list (absent: empty); a string there is an error, not a list of its characters."""
    value = data.get(key, [])
    if not isinstance(value, list):
        raise TypeError("%s must be a JSON list" % key)
    return list(value)


def static_shape(spec: TensorSpec, batch: int = 1, purpose: str = "this step") -> List[int]:
    """``spec``'s shape with a dynamic leading (batch) axis set to ``batch``.

    Exported models usually keep a dynamic batch axis; building for DLA, bundling and
    benchmarking all need static shapes, and batch 1 is the only choice that needs no
    user input.  Any other dynamic axis is a real choice, so it is an error naming it.
    """
    dims: List[int] = []
    for axis, d in enumerate(spec.shape):
        if isinstance(d, int) and d > 0:
            dims.append(int(d))
        elif axis == 0:
            dims.append(int(batch))
        else:
            raise ModelError("input %s has a dynamic axis %d (%r) that %s cannot choose" % (spec.name, axis, d, purpose),
                             hint="give --shape %s=%s" % (spec.name, "x".join(
                                 str(x) if isinstance(x, int) and x > 0 else "N" for x in spec.shape)))
    return dims


def sidecar_path(model_path: PathLike) -> Path:
    """``model.onnx`` -> ``model.onnx.json``."""
    p = Path(model_path)
    return p.with_name(p.name + ".json")


def produced_by(stage: str, **details: Any) -> Dict[str, Any]:
    """The provenance block every writer records: tool, version, stage, time."""
    import jetforge

    info: Dict[str, Any] = {"tool": "jetforge", "version": jetforge.__version__, "stage": stage,
                            "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    info.update(details)
    return info


def write_sidecar(model_path: PathLike, sidecar: ModelSidecar) -> Path:
    """Stamp the model's content hash into ``sidecar`` and write it atomically next to the model."""
    sidecar.content_sha256 = sha256_file(model_path)
    return write_json_atomic(sidecar_path(model_path), sidecar.to_dict())


def read_sidecar(model_path: PathLike, verify_hash: bool = True) -> ModelSidecar:
    """Load and check the sidecar of ``model_path``; a missing or stale one is a clear error."""
    path = sidecar_path(model_path)
    if not path.is_file():
        raise InputFileError(
            "model %s has no sidecar %s (it records preprocessing, labels and task)" % (model_path, path.name),
            hint="export the model with `jetforge export`, or write the sidecar by hand (docs/sidecar.md in the jetforge repository)")
    data = read_json(path, "sidecar", ModelError, hint="re-export the model")
    if not isinstance(data, dict):
        raise ModelError("sidecar %s must hold a JSON object" % path)
    sidecar = ModelSidecar.from_dict(data, where=str(path))
    if verify_hash and sidecar.content_sha256:
        actual = sha256_file(model_path)
        if actual != sidecar.content_sha256:
            raise ModelError("sidecar %s does not belong to %s (content hash differs: the model changed after "
                             "its sidecar was written)" % (path.name, Path(model_path).name),
                             hint="re-export the model, or regenerate the sidecar for the new file")
    return sidecar
