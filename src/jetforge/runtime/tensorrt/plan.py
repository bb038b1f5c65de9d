"""A TensorRT engine build as plain data, validated against the target and TensorRT version.

:func:`make_plan` turns an ONNX model, a target profile and :class:`BuildOptions` into a
:class:`BuildPlan` — builder flags, device and DLA core, INT8 source, memory pools,
optimization profiles, per-layer precisions — or raises :class:`EngineBuildError` with a
one-line message and the fix.  Each decision is one function of :mod:`.plan_steps` (which lists
the TensorRT and DLA rules they enforce); shapes and profiles are :mod:`.profile`'s.

The runtime never imports ``jetforge.calibrate``: the cache arrives as a path or bytes and is read
by the one cache reader, :mod:`jetforge.runtime.tensorrt.calib_cache`, with the rules every reader shares.
"""

import dataclasses
import datetime
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from jetforge.config import Bound, check_bounds
from jetforge.errors import EngineBuildError, InputFileError
from jetforge.fileio import PathLike, sha256_file, write_json_atomic
from jetforge.runtime.tensorrt import plan_steps as steps
from jetforge.runtime.tensorrt.model_info import ModelInfo, read_model_info
from jetforge.runtime.tensorrt.profile import DIM, ShapeRange, check_inputs, parse_shape  # noqa: F401  (public here)
from jetforge.runtime.tensorrt.version import TensorRTVersion

PRECISIONS = ("fp32", "fp16", "int8", "best")
LAYER_PRECISIONS = ("fp32", "fp16", "int8")
PLAN_FORMAT = 1
#: ``workspace_mib``: TensorRT takes a memory pool's limit as a 64-bit byte count (MiB << 20 must fit); the plan
#: then holds it to the target's memory, the bound that matters (``workspace_mib: 10^30`` was written as given).
WORKSPACE_MIB = Bound(int, 1, (1 << 44) - 1, why="TensorRT takes the pool limit as a 64-bit byte count")
JETPACK_HINT = ("build on the Jetson itself: JetPack ships TensorRT (sudo apt install python3-libnvinfer); "
                "`jetforge build --plan-only` writes the plan without it")

__all__ = ["BuildOptions", "BuildPlan", "JETPACK_HINT", "ModelInfo", "ShapeRange", "check_inputs", "load_build_options",
           "make_plan", "parse_shape", "read_model_info"]


@dataclass
class BuildOptions:
    """What the user asks of ``jetforge build`` (YAML via ``jetforge.config.load_config``)."""

    precision: str = "fp16"
    dla_core: Optional[int] = None
    gpu_fallback: bool = True
    calibration_cache: Optional[str] = None
    tensorrt_version: Optional[str] = None
    input_shapes: Dict[str, List[int]] = DIM.field(default_factory=dict)
    profiles: List[Dict[str, ShapeRange]] = field(default_factory=list)
    layer_precisions: Dict[str, str] = field(default_factory=dict)
    workspace_mib: Optional[int] = WORKSPACE_MIB.field(None)  # at most the target's memory (make_plan checks)
    dla_sram_bytes: Optional[int] = None
    dla_local_dram_bytes: Optional[int] = None
    dla_global_dram_bytes: Optional[int] = None
    timing_cache: Optional[str] = None
    builder_optimization_level: Optional[int] = None
    sparsity: bool = False

    def __post_init__(self) -> None:
        check_bounds(self)
        if self.precision not in PRECISIONS:
            raise ValueError("precision must be one of %s, got %r" % (", ".join(PRECISIONS), self.precision))
        for name, value in self.layer_precisions.items():
            if value not in LAYER_PRECISIONS:
                raise ValueError("layer_precisions[%s] must be one of %s, got %r"
                                 % (name, ", ".join(LAYER_PRECISIONS), value))
        if self.builder_optimization_level is not None and not 0 <= self.builder_optimization_level <= 5:
            raise ValueError("builder_optimization_level must be in [0, 5]")


def load_build_options(path: Optional[PathLike] = None, overrides: Sequence[str] = (),
                       base: Optional[Mapping[str, Any]] = None) -> BuildOptions:
    """BuildOptions from defaults <- ``base`` <- YAML ``path`` <- ``--set`` overrides."""
    from jetforge.config import load_config

    return load_config(BuildOptions, path, overrides, base=base)


@dataclass
class BuildPlan:
    """Everything the builder layer does, decided up front; JSON-serialisable."""

    onnx_path: str
    onnx_sha256: str
    target: str
    target_kind: str
    tensorrt_version: str
    precision: str
    flags: List[str]
    device: str                                 # "gpu" or "dla"
    dla_core: Optional[int]
    gpu_fallback: bool
    int8_source: Optional[str]                  # "cache", "qdq" or None
    calibration_cache: Optional[str]
    calibration_header: Optional[str]
    strongly_typed: bool
    memory_pools: Dict[str, int]
    layer_precisions: Dict[str, str]
    profiles: List[Dict[str, Dict[str, List[int]]]]
    timing_cache: Optional[str]
    builder_optimization_level: Optional[int]
    inputs: Optional[List[Dict[str, Any]]]
    outputs: Optional[List[Dict[str, Any]]]
    notes: List[str] = field(default_factory=list)
    format: int = PLAN_FORMAT
    created: str = ""

    @property
    def uses_dla(self) -> bool:
        return self.device == "dla"

    @property
    def tensorrt_major(self) -> int:
        return TensorRTVersion.parse(self.tensorrt_version).major

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "BuildPlan":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise EngineBuildError("build plan has unknown keys: %s" % ", ".join(sorted(unknown)),
                                   hint="regenerate the plan with this jetforge version")
        return cls(**dict(data))

    def write(self, path: PathLike) -> Path:
        return write_json_atomic(path, self.to_dict())

    @classmethod
    def read(cls, path: PathLike) -> "BuildPlan":
        try:
            return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError) as err:
            raise InputFileError("build plan %s is unreadable: %s" % (path, err),
                                 hint="regenerate it with `jetforge build --plan-only`") from err


def make_plan(onnx_path: PathLike, target: Any, options: Optional[BuildOptions] = None, *,
              model_info: Optional[ModelInfo] = None, cache_bytes: Optional[bytes] = None,
              installed_tensorrt: Optional[str] = None) -> BuildPlan:
    """Validate ``options`` for ``target`` and return the build plan, or raise EngineBuildError.

    ``model_info`` defaults to :func:`read_model_info` (the protobuf read by :mod:`jetforge.runtime.onnx_wire`,
    with or without the ``onnx`` package, so a board plans as the workstation did).  ``cache_bytes``
    may replace reading ``options.calibration_cache``.  ``installed_tensorrt`` is used for targets
    that accept any TensorRT (desktop GPUs) when no version is given.
    """
    from jetforge.runtime.onnx_file import check_onnx_file

    opts = options or BuildOptions()
    onnx_file = Path(onnx_path)
    check_onnx_file(onnx_file, parse=False)  # a folder, an empty or a text file; read_model_info parses it
    notes: List[str] = []
    version, trt = steps.resolve_version(target, opts.tensorrt_version, installed_tensorrt, notes)
    strongly_typed = trt.major >= 11
    device = steps.check_device(target, opts, version, trt, notes)
    use_dla = device == "dla"
    steps.check_precision_support(target, opts.precision, device)
    info = model_info if model_info is not None else read_model_info(onnx_file)  # needs no onnx package
    int8 = steps.choose_int8(info, opts.calibration_cache, opts.precision, use_dla, version, trt, cache_bytes, notes)
    flags = steps.builder_flags(opts, int8.precision, int8.source, version, strongly_typed, use_dla, notes)
    pools = steps.memory_pools(opts, target, use_dla, notes)
    profiles = steps.shape_profiles(opts, info, use_dla, notes, target)
    return BuildPlan(
        onnx_path=str(onnx_file), onnx_sha256=sha256_file(onnx_file), target=target.name,
        target_kind=getattr(target, "kind", ""), tensorrt_version=version, precision=int8.precision, flags=flags,
        device=device, dla_core=opts.dla_core, gpu_fallback=bool(use_dla and opts.gpu_fallback),
        int8_source=int8.source, calibration_cache=str(int8.cache_path) if int8.cache_path else None,
        calibration_header=int8.header, strongly_typed=strongly_typed, memory_pools=pools,
        layer_precisions=dict(opts.layer_precisions),
        profiles=[{n: r.to_dict() for n, r in p.items()} for p in profiles],
        timing_cache=opts.timing_cache, builder_optimization_level=opts.builder_optimization_level,
        inputs=info.inputs if info else None, outputs=info.outputs if info else None, notes=notes,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
