"""A TensorRT engine build as plain data, validated against the target and TensorRT version.

:func:`make_plan` turns an ONNX model, a target profile and :class:`BuildOptions` into a
:class:`BuildPlan` — builder flags, device and DLA core, INT8 source, memory pools,
optimization profiles, per-layer precisions — or raises :class:`EngineBuildError` with a
one-line message and the fix.  Every rule here comes from ``shared/reference/dla_trt_jetson.md``:

* DLA exists on AGX Orin, Orin NX, AGX Xavier and Xavier NX only (Orin Nano, Nano, TX2, Thor
  have none, §0); the core index must be below the target's count.
* DLA runs FP16 or INT8 only; its INT8 comes from a calibration cache served through
  IInt8EntropyCalibrator2; Q/DQ networks are not accepted on DLA through TensorRT 10.x (§1.1, §1.5);
  TensorRT 10.7 was the last 10.x with DLA (§0).
* TensorRT 11 removed implicit INT8 (calibration caches) and the FP16/INT8 builder flags:
  INT8 must come as a Q/DQ ONNX (§1.5, design "TensorRT versions that matter").
* DLA has no dynamic shapes: every profile needs min = opt = max; batch <= 4096 (§1.1).
* DLA memory pools must be powers of two and at least 4 KiB (§1.1).
* A cache's header ``TRT-<N>-<algo>`` must carry the building TensorRT's version number, else
  TensorRT ignores the cache (§4.1, §4.2).

The runtime never imports ``jetforge.calibrate``: the cache arrives as a path or bytes and is read
by the one cache reader, :mod:`jetforge.runtime.tensorrt.calib_cache`, with the rules every reader shares.
"""

import dataclasses
import datetime
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from jetforge.errors import EngineBuildError, InputFileError
from jetforge.fileio import PathLike, sha256_file, write_json_atomic
from jetforge.runtime.tensorrt.calib_cache import (CacheInfo, header_number, parse_calibration_cache,
                                                   read_calibration_cache_file)

PRECISIONS = ("fp32", "fp16", "int8", "best")
LAYER_PRECISIONS = ("fp32", "fp16", "int8")
MIN_TENSORRT = (8, 5, 0)          # named-tensor API (set_tensor_address, execute_async_v3) from 8.5
LAST_DLA_TENSORRT = (10, 7, 99)   # "TensorRT 10.7 was the last 10.x release that supported DLA" (§0)
DLA_MAX_BATCH = 4096
DLA_POOL_MIN = 4096
DLA_POOLS = ("dla_managed_sram", "dla_local_dram", "dla_global_dram")
PLAN_FORMAT = 1
JETPACK_HINT = ("build on the Jetson itself: JetPack ships TensorRT (sudo apt install python3-libnvinfer); "
                "`jetforge build --plan-only` writes the plan without it")


# ------------------------------------------------------------------------------------------------
# options
# ------------------------------------------------------------------------------------------------
@dataclass
class ShapeRange:
    """One input's optimization-profile shapes."""

    min: List[int]
    opt: List[int]
    max: List[int]

    @property
    def is_static(self) -> bool:
        return list(self.min) == list(self.opt) == list(self.max)

    def to_dict(self) -> Dict[str, List[int]]:
        return {"min": list(self.min), "opt": list(self.opt), "max": list(self.max)}


@dataclass
class BuildOptions:
    """What the user asks of ``jetforge build`` (YAML via ``jetforge.config.load_config``)."""

    precision: str = "fp16"
    dla_core: Optional[int] = None
    gpu_fallback: bool = True
    calibration_cache: Optional[str] = None
    tensorrt_version: Optional[str] = None
    input_shapes: Dict[str, List[int]] = field(default_factory=dict)
    profiles: List[Dict[str, ShapeRange]] = field(default_factory=list)
    layer_precisions: Dict[str, str] = field(default_factory=dict)
    workspace_mib: Optional[int] = None
    dla_sram_bytes: Optional[int] = None
    dla_local_dram_bytes: Optional[int] = None
    dla_global_dram_bytes: Optional[int] = None
    timing_cache: Optional[str] = None
    builder_optimization_level: Optional[int] = None
    sparsity: bool = False

    def __post_init__(self) -> None:
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


# ------------------------------------------------------------------------------------------------
# TensorRT versions and the calibration-cache header
# ------------------------------------------------------------------------------------------------
def trt_version_tuple(text: str) -> Tuple[int, int, int]:
    """``"10.3"`` / ``"8.6.2.3"`` -> ``(10, 3, 0)`` / ``(8, 6, 2)``."""
    parts = re.findall(r"\d+", str(text))
    if not parts:
        raise EngineBuildError("TensorRT version %r is not of the form MAJOR.MINOR[.PATCH]" % (text,),
                               hint="write e.g. 10.3.0")
    nums = [int(p) for p in parts[:3]] + [0] * (3 - min(3, len(parts)))
    return nums[0], nums[1], nums[2]


def cache_header_number(version: Union[str, Sequence[int]]) -> int:
    """``getInferLibVersion()``: 1000*major+100*minor+patch in 8.x, 10000*major+100*minor+patch from 10 (§4.1)."""
    return header_number(trt_version_tuple(version) if isinstance(version, str) else tuple(version)[:3])


def read_calibration_cache(data: Union[bytes, str], source: str = "calibration cache") -> CacheInfo:
    """Parse a TensorRT calibration cache with the one reader and its rules (``runtime/tensorrt/calib_cache.py``)."""
    return parse_calibration_cache(data, source)


# ------------------------------------------------------------------------------------------------
# model I/O
# ------------------------------------------------------------------------------------------------
@dataclass
class ModelInfo:
    """What the plan needs from the ONNX file: I/O tensors and whether it carries Q/DQ nodes."""

    inputs: List[Dict[str, Any]]
    outputs: List[Dict[str, Any]]
    has_qdq: bool
    opset: Optional[int] = None


_ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 6: "int32", 7: "int64", 9: "bool", 10: "float16",
                11: "float64", 16: "bfloat16"}


def read_model_info(onnx_path: PathLike) -> Optional[ModelInfo]:
    """I/O names/shapes/dtypes and Q/DQ presence, or None when the ``onnx`` package is absent."""
    try:
        import onnx  # noqa: F401  (optional on a Jetson: TensorRT's parser then checks the inputs)
    except ImportError:
        return None
    from jetforge.runtime.onnx_file import read_onnx

    model = read_onnx(onnx_path, load_external_data=False)  # refuses empty, damaged and hollow models
    inits = {i.name for i in model.graph.initializer}

    def spec(vi: Any) -> Dict[str, Any]:
        tt = vi.type.tensor_type
        shape: List[Union[int, str]] = []
        for d in tt.shape.dim:
            if d.HasField("dim_value") and d.dim_value > 0:
                shape.append(int(d.dim_value))
            else:
                shape.append(d.dim_param or -1)
        return {"name": vi.name, "shape": shape, "dtype": _ONNX_DTYPES.get(tt.elem_type, str(tt.elem_type))}

    has_qdq = any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node)
    opset = next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    return ModelInfo([spec(vi) for vi in model.graph.input if vi.name not in inits],
                     [spec(vi) for vi in model.graph.output], has_qdq, opset)


def _is_dynamic(shape: Sequence[Any]) -> bool:
    return any(not isinstance(d, int) or d < 0 for d in shape)


# ------------------------------------------------------------------------------------------------
# the plan
# ------------------------------------------------------------------------------------------------
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
        return trt_version_tuple(self.tensorrt_version)[0]

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


def _fail(message: str, hint: str) -> None:
    raise EngineBuildError(message, hint=hint)


def _power_of_two(n: int) -> bool:
    return n > 0 and (n & (n - 1)) == 0


def make_plan(onnx_path: PathLike, target: Any, options: Optional[BuildOptions] = None, *,
              model_info: Optional[ModelInfo] = None, cache_bytes: Optional[bytes] = None,
              installed_tensorrt: Optional[str] = None) -> BuildPlan:
    """Validate ``options`` for ``target`` and return the build plan, or raise EngineBuildError.

    ``model_info`` defaults to :func:`read_model_info` (None without ``onnx``: the input checks then
    run in the builder on TensorRT's parsed network, see :func:`check_inputs`).  ``cache_bytes``
    may replace reading ``options.calibration_cache``.  ``installed_tensorrt`` is used for targets
    that accept any TensorRT (desktop GPUs) when no version is given.
    """
    from jetforge.runtime.onnx_file import check_onnx_file

    opts = options or BuildOptions()
    onnx_file = Path(onnx_path)
    check_onnx_file(onnx_file, parse=False)  # a folder, an empty or a text file; read_model_info parses it
    notes: List[str] = []
    precision = opts.precision

    # --- TensorRT version
    version = opts.tensorrt_version
    if version is None:
        default = getattr(target, "default_tensorrt", "any")
        version = default if default != "any" else installed_tensorrt
        if version is None:
            _fail("target %s accepts any TensorRT and none was named" % target.name,
                  "give tensorrt_version (e.g. --tensorrt 10.3.0), the version you build with")
        notes.append("TensorRT %s chosen from the target's JetPack table" % version
                     if default != "any" else "TensorRT %s: the installed version" % version)
    elif not target.accepts_tensorrt(version):
        _fail("TensorRT %s does not ship for target %s (its JetPack releases ship %s)"
              % (version, target.name, ", ".join(target.tensorrt_versions) or "none recorded"),
              "choose one of %s, or omit --tensorrt to use %s" % (", ".join(target.tensorrt_versions),
                                                                   target.default_tensorrt))
    trt = trt_version_tuple(version)
    if trt < MIN_TENSORRT:
        _fail("TensorRT %s is older than 8.5, the first with the named-tensor API jetforge uses" % version,
              "upgrade the board to JetPack 5.1 or newer (TensorRT 8.5.2)")
    major = trt[0]
    strongly_typed = major >= 11

    # --- device
    use_dla = opts.dla_core is not None
    if use_dla:
        if not target.has_dla:
            _fail("target %s has no DLA core" % target.name,
                  "drop --dla-core to build for the GPU, or choose a DLA target (AGX Orin, Orin NX, AGX Xavier, "
                  "Xavier NX)")
        if opts.dla_core < 0 or opts.dla_core >= target.dla_cores:
            _fail("DLA core %d does not exist on %s, which has %d DLA core%s"
                  % (opts.dla_core, target.name, target.dla_cores, "" if target.dla_cores == 1 else "s"),
                  "use --dla-core %s" % " or ".join(str(i) for i in range(target.dla_cores)))
        if major >= 11:
            _fail("jetforge builds DLA engines with TensorRT 8.5 to 10.7 only (TensorRT %s: DLA needs strongly "
                  "typed networks there, and only on AGX Orin with JetPack 7.2.2+)" % version,
                  "build with the TensorRT of JetPack 6 (10.3.0) or JetPack 5 (8.5.2), or drop --dla-core")
        if trt > LAST_DLA_TENSORRT:
            _fail("TensorRT %s has no DLA support (10.7 was the last 10.x release with DLA)" % version,
                  "use the TensorRT your JetPack ships (10.3.0 on JetPack 6.1/6.2)")
        if precision == "fp32":
            _fail("DLA runs FP16 or INT8 only, not fp32",
                  "use --precision fp16 (or int8 with --calib), or drop --dla-core to build fp32 for the GPU")
    elif not opts.gpu_fallback:
        notes.append("gpu_fallback=false has no effect without a DLA core")

    # --- precision support on the device
    device = "dla" if use_dla else "gpu"
    wanted = {"fp32": [], "fp16": ["fp16"], "int8": ["int8"], "best": ["fp16"]}[precision]
    for p in wanted:
        if not target.supports_precision(p, device):
            _fail("%s's %s does not support %s" % (target.name, device.upper(), p),
                  "choose a precision the target supports (see `jetforge targets show %s`)" % target.name)

    # --- model I/O
    info = model_info if model_info is not None else read_model_info(onnx_file)
    if info is None:
        notes.append("the onnx package is not installed: input shapes are checked on TensorRT's parsed network")

    # --- INT8 source
    int8_source: Optional[str] = None
    header: Optional[str] = None
    cache_path = opts.calibration_cache
    has_qdq = bool(info and info.has_qdq)
    want_int8 = precision in ("int8", "best")
    if has_qdq and use_dla:
        _fail("DLA does not accept Q/DQ (explicitly quantized) networks through TensorRT %s" % version,
              "build the plain ONNX with its calibration cache: --calib model.calib")
    if has_qdq and cache_path:
        _fail("the model carries Q/DQ scales and a calibration cache was given too",
              "drop --calib for the Q/DQ model, or build the plain ONNX with the cache")
    if has_qdq:
        int8_source = "qdq"
        if precision in ("fp32", "fp16"):
            notes.append("the Q/DQ nodes make the network INT8 where they sit, whatever --precision says")
    elif want_int8 or cache_path:
        if cache_path and not want_int8:
            notes.append("calibration cache ignored: precision is %s" % precision)
            cache_path = None
        elif strongly_typed:
            _fail("TensorRT %s removed implicit INT8: a calibration cache cannot be used" % version,
                  "build the Q/DQ ONNX from `jetforge calibrate` (model.qdq.onnx) for TensorRT 11")
        elif not cache_path:
            if precision == "best":
                notes.append("precision best without INT8 scales: INT8 disabled, building FP16")
                precision = "fp16"
            elif use_dla:
                _fail("INT8 on DLA needs a calibration cache (DLA does not take Q/DQ through TensorRT %s)" % version,
                      "run `jetforge calibrate` and pass --calib model.calib, or use --precision fp16")
            else:
                _fail("INT8 needs scales: neither a calibration cache nor Q/DQ nodes were given",
                      "pass --calib model.calib, build the Q/DQ ONNX, or use --precision fp16")
        if cache_path:
            if cache_bytes is None:
                cache = read_calibration_cache_file(cache_path)
            else:
                cache = read_calibration_cache(cache_bytes, "calibration cache %s" % cache_path)
            expected = cache_header_number(trt)
            if cache.version_number != expected:
                _fail("calibration cache %s is stamped for TensorRT %d (%s) but the plan builds with TensorRT %s "
                      "(header number %d): TensorRT would ignore it"
                      % (cache_path, cache.version_number, cache.header, version, expected),
                      "recalibrate for TensorRT %s, or retarget the cache header to TRT-%d-EntropyCalibration2"
                      % (version, expected))
            if cache.algorithm != "EntropyCalibration2":
                _fail("calibration cache %s was written by the %s algorithm; jetforge serves caches through "
                      "IInt8EntropyCalibrator2 (the calibrator DLA requires)" % (cache_path, cache.algorithm),
                      "recalibrate with the entropy-2 algorithm, or retarget the header to EntropyCalibration2")
            int8_source = "cache"
            header = cache.header

    # --- builder flags
    flags: List[str] = []
    if strongly_typed:
        if precision in ("fp16", "best"):
            notes.append("TensorRT %s has no FP16/INT8 builder flags: precision comes from the ONNX tensor types "
                         "(export the model in FP16) and Q/DQ nodes" % version)
        if opts.layer_precisions:
            _fail("per-layer precisions do not apply to TensorRT %s's strongly typed networks" % version,
                  "set the types in the ONNX (Cast nodes) instead of layer_precisions")
    else:
        if precision in ("fp16", "best") or (precision == "int8"):
            flags.append("FP16")
        if precision in ("int8", "best") or int8_source == "qdq":
            flags.append("INT8")
        if precision == "int8":
            notes.append("FP16 is enabled with INT8 so that layers without INT8 scales run in FP16, not FP32")
        if opts.layer_precisions:
            flags.append("PREFER_PRECISION_CONSTRAINTS")
    if opts.sparsity:
        flags.append("SPARSE_WEIGHTS")
    if use_dla and opts.gpu_fallback:
        flags.append("GPU_FALLBACK")
    if use_dla and not opts.gpu_fallback:
        notes.append("GPU fallback is off: any layer DLA cannot run fails the build (check with `jetforge dla-check`)")
    if use_dla:
        for name, p in opts.layer_precisions.items():
            if p == "fp32":
                if not opts.gpu_fallback:
                    _fail("layer %s is pinned to fp32, which DLA cannot run, and GPU fallback is off" % name,
                          "enable gpu_fallback or pin the layer to fp16")
                notes.append("layer %s pinned to fp32 runs on the GPU (DLA is FP16/INT8 only)" % name)

    # --- memory pools
    pools: Dict[str, int] = {}
    if opts.workspace_mib is not None:
        if opts.workspace_mib <= 0:
            _fail("workspace_mib must be positive, got %d" % opts.workspace_mib, "use e.g. --workspace-mib 1024")
        pools["workspace"] = int(opts.workspace_mib) << 20
    for pool, value in zip(DLA_POOLS, (opts.dla_sram_bytes, opts.dla_local_dram_bytes, opts.dla_global_dram_bytes)):
        if value is None:
            continue
        if not use_dla:
            notes.append("%s ignored: the plan does not use DLA" % pool)
            continue
        if value < DLA_POOL_MIN or not _power_of_two(value):
            lower = 1 << max(12, int(value).bit_length() - 1) if value > 0 else DLA_POOL_MIN
            _fail("DLA memory pool %s = %d bytes must be a power of two and at least 4 KiB" % (pool, value),
                  "use %d (or another power of two >= 4096)" % lower)
        pools[pool] = int(value)
    sram = getattr(target, "dla_sram_bytes_per_core", None)
    if use_dla and sram and pools.get("dla_managed_sram", 0) > sram:
        notes.append("dla_managed_sram %d exceeds the %d bytes of SRAM per core of %s"
                     % (pools["dla_managed_sram"], sram, target.name))

    # --- shapes and profiles
    if opts.input_shapes and opts.profiles:
        _fail("both input_shapes and profiles were given", "give static input_shapes or profiles, not both")
    profiles: List[Dict[str, ShapeRange]] = []
    if opts.input_shapes:
        profiles = [{n: ShapeRange(list(s), list(s), list(s)) for n, s in opts.input_shapes.items()}]
    else:
        profiles = [dict(p) for p in opts.profiles]
    inputs = info.inputs if info else None
    check_inputs(inputs, profiles, use_dla)
    if inputs is not None and not any(_is_dynamic(i["shape"]) for i in inputs) and not profiles:
        notes.append("all inputs are static: no optimization profile needed")

    return BuildPlan(
        onnx_path=str(onnx_file), onnx_sha256=sha256_file(onnx_file), target=target.name,
        target_kind=getattr(target, "kind", ""), tensorrt_version=version, precision=precision, flags=flags,
        device=device, dla_core=opts.dla_core, gpu_fallback=bool(use_dla and opts.gpu_fallback),
        int8_source=int8_source, calibration_cache=str(cache_path) if cache_path else None,
        calibration_header=header, strongly_typed=strongly_typed, memory_pools=pools,
        layer_precisions=dict(opts.layer_precisions),
        profiles=[{n: r.to_dict() for n, r in p.items()} for p in profiles],
        timing_cache=opts.timing_cache, builder_optimization_level=opts.builder_optimization_level,
        inputs=inputs, outputs=info.outputs if info else None, notes=notes,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))


def check_inputs(inputs: Optional[Sequence[Mapping[str, Any]]], profiles: Sequence[Mapping[str, ShapeRange]],
                 use_dla: bool) -> None:
    """Validate profiles against the model inputs (``inputs`` None: only the profiles themselves)."""
    by_name = {i["name"]: i for i in inputs} if inputs is not None else {}
    for number, profile in enumerate(profiles):
        where = "profile %d" % number if len(profiles) > 1 else "the shape profile"
        for name, rng in profile.items():
            if inputs is not None and name not in by_name:
                _fail("%s names input %r, which the model does not have (inputs: %s)"
                      % (where, name, ", ".join(by_name) or "none"),
                      "use the model's input names")
            if not (len(rng.min) == len(rng.opt) == len(rng.max)):
                _fail("%s: input %s has min/opt/max of different ranks" % (where, name),
                      "give the same number of dims for min, opt and max")
            if any(a > b for a, b in zip(rng.min, rng.opt)) or any(a > b for a, b in zip(rng.opt, rng.max)):
                _fail("%s: input %s needs min <= opt <= max in every dim (got %s / %s / %s)"
                      % (where, name, rng.min, rng.opt, rng.max), "reorder the shapes")
            if any(d <= 0 for d in rng.min):
                _fail("%s: input %s has a non-positive dim %s" % (where, name, rng.min), "use positive dims")
            if inputs is not None:
                model_shape = by_name[name]["shape"]
                if len(model_shape) != len(rng.min):
                    _fail("%s: input %s has rank %d in the model but %d in the profile"
                          % (where, name, len(model_shape), len(rng.min)), "match the model's rank")
                for axis, d in enumerate(model_shape):
                    if isinstance(d, int) and d > 0 and not (rng.min[axis] == rng.opt[axis] == rng.max[axis] == d):
                        _fail("%s: input %s axis %d is fixed to %d in the model" % (where, name, axis, d),
                              "use %d there, or re-export the model with that axis dynamic" % d)
            if use_dla:
                if not rng.is_static:
                    _fail("DLA does not support dynamic shapes: input %s has min %s, opt %s, max %s"
                          % (name, rng.min, rng.opt, rng.max),
                          "give one static shape (min = opt = max), e.g. --shape %s=%s"
                          % (name, "x".join(str(d) for d in rng.opt)))
                dims = rng.opt
                batch = 1
                for d in dims[:-3]:
                    batch *= d
                if len(dims) > 3 and batch > DLA_MAX_BATCH:
                    _fail("DLA batch %d (input %s) exceeds the maximum of %d" % (batch, name, DLA_MAX_BATCH),
                          "use a batch of at most %d on DLA" % DLA_MAX_BATCH)
        if inputs is not None:
            for i in inputs:
                if _is_dynamic(i["shape"]) and i["name"] not in profile:
                    _fail("input %s has dynamic dims %s and %s gives it no shape" % (i["name"], i["shape"], where),
                          "give --shape %s=%s (or a profile with min/opt/max)"
                          % (i["name"], "x".join(str(d) if isinstance(d, int) and d > 0 else "1" for d in i["shape"])))
    if not profiles and inputs is not None:
        for i in inputs:
            if _is_dynamic(i["shape"]):
                _fail("input %s has dynamic dims %s and no shape was given" % (i["name"], i["shape"]),
                      "give --shape %s=%s%s" % (i["name"], "x".join(str(d) if isinstance(d, int) and d > 0 else "1"
                                                               for d in i["shape"]),
                                                 " (DLA needs a static shape)" if use_dla else " or a profile"))


def parse_shape(text: str) -> Tuple[str, List[int]]:
    """``"input=1x3x224x224"`` -> ``("input", [1, 3, 224, 224])`` (for ``--shape``)."""
    name, sep, dims = text.partition("=")
    if not sep or not name.strip():
        raise EngineBuildError("--shape %r is not NAME=DxDxD" % text, hint="write e.g. --shape input=1x3x224x224")
    try:
        values = [int(d) for d in re.split(r"[x,]", dims.strip()) if d]
    except ValueError:
        raise EngineBuildError("--shape %r has a non-integer dim" % text,
                               hint="write e.g. --shape input=1x3x224x224") from None
    if not values:
        raise EngineBuildError("--shape %r has no dims" % text, hint="write e.g. --shape input=1x3x224x224")
    return name.strip(), values
