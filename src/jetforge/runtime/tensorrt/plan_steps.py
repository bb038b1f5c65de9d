"""The decisions of a build plan, one function each, in the order :func:`.plan.make_plan` takes them.

Every rule is documented TensorRT/DLA behaviour (docs/architecture.md, "The TensorRT package", lists them):

* DLA exists on AGX Orin, Orin NX, AGX Xavier and Xavier NX only; the core index must be below the
  target's count.  DLA runs FP16 or INT8 only; TensorRT 10.7 was the last 10.x release with DLA, and
  jetforge builds DLA engines with TensorRT 8.5 to 10.7.
* DLA takes INT8 only from a calibration cache served through IInt8EntropyCalibrator2: no Q/DQ
  (explicitly quantized) networks on DLA through TensorRT 10.x.
* TensorRT 11 removed implicit INT8 (calibration caches) and the FP16/INT8 builder flags: INT8 must
  come as a Q/DQ ONNX there, and networks are strongly typed.
* A cache's header ``TRT-<N>-<algorithm>`` must carry the building TensorRT's number, else TensorRT
  ignores the cache.
* DLA memory pools must be powers of two and at least 4 KiB.

Each function raises :class:`~jetforge.errors.EngineBuildError` with the fix, or returns its decision and
appends what the user should know to ``notes``.
"""

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from jetforge.runtime.tensorrt.calib_cache import parse_calibration_cache, read_calibration_cache_file
from jetforge.runtime.tensorrt.model_info import ModelInfo, is_dynamic
from jetforge.runtime.tensorrt.profile import ShapeRange, check_inputs, fail
from jetforge.runtime.tensorrt.version import TensorRTVersion

MIN_TENSORRT = (8, 5, 0)          # named-tensor API (set_tensor_address, execute_async_v3) from 8.5
LAST_DLA_TENSORRT = (10, 7, 99)   # "TensorRT 10.7 was the last 10.x release that supported DLA"
DLA_POOL_MIN = 4096
DLA_POOLS = ("dla_managed_sram", "dla_local_dram", "dla_global_dram")


def resolve_version(target: Any, requested: Optional[str], installed: Optional[str],
                    notes: List[str]) -> Tuple[str, TensorRTVersion]:
    """The TensorRT version to plan for: the one asked for (if the target ships it), else the target's."""
    version = requested
    if version is None:
        default = getattr(target, "default_tensorrt", "any")
        version = default if default != "any" else installed
        if version is None:
            fail("target %s accepts any TensorRT and none was named" % target.name,
                 "give tensorrt_version (e.g. --tensorrt 10.3.0), the version you build with")
        notes.append("TensorRT %s chosen from the target's JetPack table" % version
                     if default != "any" else "TensorRT %s: the installed version" % version)
    elif not target.accepts_tensorrt(version):
        fail("TensorRT %s does not ship for target %s (its JetPack releases ship %s)"
             % (version, target.name, ", ".join(target.tensorrt_versions) or "none recorded"),
             "choose one of %s, or omit --tensorrt to use %s" % (", ".join(target.tensorrt_versions),
                                                                  target.default_tensorrt))
    assert version is not None
    trt = TensorRTVersion.parse(version)
    if trt < MIN_TENSORRT:
        fail("TensorRT %s is older than 8.5, the first with the named-tensor API jetforge uses" % version,
             "upgrade the board to JetPack 5.1 or newer (TensorRT 8.5.2)")
    return version, trt


def check_device(target: Any, options: Any, version: str, trt: TensorRTVersion, notes: List[str]) -> str:
    """``"dla"`` or ``"gpu"``; refuses a DLA core the target or TensorRT version cannot use."""
    if options.dla_core is None:
        if not options.gpu_fallback:
            notes.append("gpu_fallback=false has no effect without a DLA core")
        return "gpu"
    if not target.has_dla:
        fail("target %s has no DLA core" % target.name,
             "drop --dla-core to build for the GPU, or choose a DLA target (AGX Orin, Orin NX, AGX Xavier, Xavier NX)")
    if options.dla_core < 0 or options.dla_core >= target.dla_cores:
        fail("DLA core %d does not exist on %s, which has %d DLA core%s"
             % (options.dla_core, target.name, target.dla_cores, "" if target.dla_cores == 1 else "s"),
             "use --dla-core %s" % " or ".join(str(i) for i in range(target.dla_cores)))
    if trt.major >= 11:
        fail("jetforge builds DLA engines with TensorRT 8.5 to 10.7 only (TensorRT %s: DLA needs strongly typed "
             "networks there, and only on AGX Orin with JetPack 7.2.2+)" % version,
             "build with the TensorRT of JetPack 6 (10.3.0) or JetPack 5 (8.5.2), or drop --dla-core")
    if trt > LAST_DLA_TENSORRT:
        fail("TensorRT %s has no DLA support (10.7 was the last 10.x release with DLA)" % version,
             "use the TensorRT your JetPack ships (10.3.0 on JetPack 6.1/6.2)")
    if options.precision == "fp32":
        fail("DLA runs FP16 or INT8 only, not fp32",
             "use --precision fp16 (or int8 with --calib), or drop --dla-core to build fp32 for the GPU")
    return "dla"


def check_precision_support(target: Any, precision: str, device: str) -> None:
    """The device must run the precisions the build enables (``best`` enables FP16)."""
    wanted = {"fp32": [], "fp16": ["fp16"], "int8": ["int8"], "best": ["fp16"]}[precision]
    for p in wanted:
        if not target.supports_precision(p, device):
            fail("%s's %s does not support %s" % (target.name, device.upper(), p),
                 "choose a precision the target supports (see `jetforge targets show %s`)" % target.name)


@dataclass
class Int8Choice:
    """Where INT8 scales come from: ``source`` "cache", "qdq" or None, and the precision it leaves."""

    source: Optional[str]
    precision: str
    cache_path: Optional[str] = None
    header: Optional[str] = None


def choose_int8(info: Optional[ModelInfo], cache_path: Optional[str], precision: str, use_dla: bool,
                version: str, trt: TensorRTVersion, cache_bytes: Optional[bytes], notes: List[str]) -> Int8Choice:
    """Q/DQ nodes in the model, a calibration cache, or no INT8; refuses what TensorRT would not take."""
    has_qdq = bool(info and info.has_qdq)
    want_int8 = precision in ("int8", "best")
    if has_qdq and use_dla:
        fail("DLA does not accept Q/DQ (explicitly quantized) networks through TensorRT %s" % version,
             "build the plain ONNX with its calibration cache: --calib model.calib")
    if has_qdq and cache_path:
        fail("the model carries Q/DQ scales and a calibration cache was given too",
             "drop --calib for the Q/DQ model, or build the plain ONNX with the cache")
    if has_qdq:
        if precision in ("fp32", "fp16"):
            notes.append("the Q/DQ nodes make the network INT8 where they sit, whatever --precision says")
        return Int8Choice("qdq", precision)
    if not (want_int8 or cache_path):
        return Int8Choice(None, precision)
    if cache_path and not want_int8:
        notes.append("calibration cache ignored: precision is %s" % precision)
        return Int8Choice(None, precision)
    if trt.major >= 11:
        fail("TensorRT %s removed implicit INT8: a calibration cache cannot be used" % version,
             "build the Q/DQ ONNX from `jetforge calibrate` (model.qdq.onnx) for TensorRT 11")
    if not cache_path:
        if precision == "best":
            notes.append("precision best without INT8 scales: INT8 disabled, building FP16")
            return Int8Choice(None, "fp16")
        if use_dla:
            fail("INT8 on DLA needs a calibration cache (DLA does not take Q/DQ through TensorRT %s)" % version,
                 "run `jetforge calibrate` and pass --calib model.calib, or use --precision fp16")
        fail("INT8 needs scales: neither a calibration cache nor Q/DQ nodes were given",
             "pass --calib model.calib, build the Q/DQ ONNX, or use --precision fp16")
    header = check_cache(cache_path, cache_bytes, version, trt)
    return Int8Choice("cache", precision, cache_path, header)


def check_cache(cache_path: str, cache_bytes: Optional[bytes], version: str, trt: TensorRTVersion) -> str:
    """Read the cache with the one reader; its header must name this TensorRT and the entropy-2 calibrator."""
    if cache_bytes is None:
        cache = read_calibration_cache_file(cache_path)
    else:
        cache = parse_calibration_cache(cache_bytes, "calibration cache %s" % cache_path)
    expected = trt.cache_header_number()
    if cache.version_number != expected:
        fail("calibration cache %s is stamped for TensorRT %d (%s) but the plan builds with TensorRT %s "
             "(header number %d): TensorRT would ignore it"
             % (cache_path, cache.version_number, cache.header, version, expected),
             "recalibrate for TensorRT %s, or retarget the cache header to TRT-%d-EntropyCalibration2"
             % (version, expected))
    if cache.algorithm != "EntropyCalibration2":
        fail("calibration cache %s was written by the %s algorithm; jetforge serves caches through "
             "IInt8EntropyCalibrator2 (the calibrator DLA requires)" % (cache_path, cache.algorithm),
             "recalibrate with the entropy-2 algorithm, or retarget the header to EntropyCalibration2")
    return cache.header


def builder_flags(options: Any, precision: str, int8_source: Optional[str], version: str, strongly_typed: bool,
                  use_dla: bool, notes: List[str]) -> List[str]:
    """TensorRT ``BuilderFlag`` names: precision flags (8.x/10.x only), sparsity, GPU fallback."""
    flags: List[str] = []
    if strongly_typed:
        if precision in ("fp16", "best"):
            notes.append("TensorRT %s has no FP16/INT8 builder flags: precision comes from the ONNX tensor types "
                         "(export the model in FP16) and Q/DQ nodes" % version)
        if options.layer_precisions:
            fail("per-layer precisions do not apply to TensorRT %s's strongly typed networks" % version,
                 "set the types in the ONNX (Cast nodes) instead of layer_precisions")
    else:
        if precision in ("fp16", "best", "int8"):
            flags.append("FP16")
        if precision in ("int8", "best") or int8_source == "qdq":
            flags.append("INT8")
        if precision == "int8":
            notes.append("FP16 is enabled with INT8 so that layers without INT8 scales run in FP16, not FP32")
        if options.layer_precisions:
            flags.append("PREFER_PRECISION_CONSTRAINTS")
    if options.sparsity:
        flags.append("SPARSE_WEIGHTS")
    if use_dla and options.gpu_fallback:
        flags.append("GPU_FALLBACK")
    if use_dla and not options.gpu_fallback:
        notes.append("GPU fallback is off: any layer DLA cannot run fails the build (check with `jetforge dla-check`)")
    if use_dla:
        for name, p in options.layer_precisions.items():
            if p == "fp32":
                if not options.gpu_fallback:
                    fail("layer %s is pinned to fp32, which DLA cannot run, and GPU fallback is off" % name,
                         "enable gpu_fallback or pin the layer to fp16")
                notes.append("layer %s pinned to fp32 runs on the GPU (DLA is FP16/INT8 only)" % name)
    return flags


def _power_of_two(n: int) -> bool:
    return n > 0 and (n & (n - 1)) == 0


def memory_pools(options: Any, target: Any, use_dla: bool, notes: List[str]) -> Dict[str, int]:
    """Memory-pool limits in bytes: the workspace, and DLA pools (powers of two, >= 4 KiB) on DLA builds."""
    pools: Dict[str, int] = {}
    if options.workspace_mib is not None:
        if options.workspace_mib <= 0:
            fail("workspace_mib must be positive, got %d" % options.workspace_mib, "use e.g. --workspace-mib 1024")
        memory = target_memory_bytes(target)
        if memory is not None and options.workspace_mib << 20 > memory:
            fail("workspace_mib %d is more than the %d MiB of memory %s has" % (options.workspace_mib, memory >> 20,
                                                                               target.name),
                 "use --workspace-mib %d or less (the engine, its inputs and the OS share that memory)"
                 % (memory >> 20))
        pools["workspace"] = int(options.workspace_mib) << 20
    values = (options.dla_sram_bytes, options.dla_local_dram_bytes, options.dla_global_dram_bytes)
    for pool, value in zip(DLA_POOLS, values):
        if value is None:
            continue
        if not use_dla:
            notes.append("%s ignored: the plan does not use DLA" % pool)
            continue
        if value < DLA_POOL_MIN or not _power_of_two(value):
            lower = 1 << max(12, int(value).bit_length() - 1) if value > 0 else DLA_POOL_MIN
            fail("DLA memory pool %s = %d bytes must be a power of two and at least 4 KiB" % (pool, value),
                 "use %d (or another power of two >= 4096)" % lower)
        pools[pool] = int(value)
    sram = getattr(target, "dla_sram_bytes_per_core", None)
    if use_dla and sram and pools.get("dla_managed_sram", 0) > sram:
        notes.append("dla_managed_sram %d exceeds the %d bytes of SRAM per core of %s"
                     % (pools["dla_managed_sram"], sram, target.name))
    return pools


def target_memory_bytes(target: Any) -> Optional[int]:
    """The target's memory in bytes (its profile's ``memory_gb``, decimal GB), None where the profile has none."""
    gb = getattr(target, "memory_gb", None)
    return int(gb * 1e9) if gb else None


def check_tensor_memory(profiles: List[Dict[str, ShapeRange]], info: Optional[ModelInfo], target: Any) -> None:
    """Each input at its largest profile shape must fit in the target's memory: a tensor larger than the board's
    memory can never be bound (``--shape`` with a batch of 2^40 was accepted and planned)."""
    memory = target_memory_bytes(target)
    if memory is None:
        return
    dtypes = {i["name"]: i.get("dtype") for i in (info.inputs if info else [])}
    for profile in profiles:
        for name, rng in profile.items():
            try:
                itemsize = np.dtype(dtypes.get(name) or "float32").itemsize
            except TypeError:
                itemsize = 4
            nbytes = itemsize
            for d in rng.max:
                nbytes *= int(d)
            if nbytes > memory:
                fail("input %s at %s takes %.3g GB, more than the %.3g GB of memory %s has"
                     % (name, "x".join(str(d) for d in rng.max), nbytes / 1e9, memory / 1e9, target.name),
                     "give a smaller --shape (batch)")


def shape_profiles(options: Any, info: Optional[ModelInfo], use_dla: bool,
                   notes: List[str], target: Any = None) -> List[Dict[str, ShapeRange]]:
    """Optimization profiles from static ``input_shapes`` or ``profiles``, checked against the model (and, with
    ``target``, against its memory)."""
    if options.input_shapes and options.profiles:
        fail("both input_shapes and profiles were given", "give static input_shapes or profiles, not both")
    inputs = info.inputs if info else None
    if options.input_shapes:
        profiles = [{n: ShapeRange(list(s), list(s), list(s)) for n, s in options.input_shapes.items()}]
    elif options.profiles:
        profiles = [dict(p) for p in options.profiles]
    else:
        profiles = _batch_one_profile(inputs, notes)
    check_inputs(inputs, profiles, use_dla)
    if target is not None:
        check_tensor_memory(profiles, info, target)
    if inputs is not None and not any(is_dynamic(i["shape"]) for i in inputs) and not profiles:
        notes.append("all inputs are static: no optimization profile needed")
    return profiles


def _batch_one_profile(inputs: Optional[List[Dict[str, Any]]], notes: List[str]) -> List[Dict[str, ShapeRange]]:
    """No shapes given: inputs whose only dynamic axis is the batch (axis 0) are planned at batch 1.

    Exported models keep a dynamic batch axis, and ``dla-check`` and ``bundle create`` already assume batch 1
    for them; refusing the build until ``--shape`` repeats the model's own dims was a step with no choice in it.
    Any other dynamic axis is a real choice: such an input is left out, and :func:`check_inputs` asks for it.
    """
    assumed: Dict[str, ShapeRange] = {}
    for spec in inputs or []:
        shape = list(spec["shape"])
        if shape and is_dynamic(shape[:1]) and not is_dynamic(shape[1:]) and all(d > 0 for d in shape[1:]):
            dims = [1] + [int(d) for d in shape[1:]]
            assumed[spec["name"]] = ShapeRange(list(dims), list(dims), list(dims))
            notes.append("assumed %s=%s (the dynamic batch axis set to 1, as dla-check and bundle create do; "
                         "pass --shape or a profile to choose)" % (spec["name"], "x".join(map(str, dims))))
    return [assumed] if assumed else []
