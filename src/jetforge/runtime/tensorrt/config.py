"""The builder config: a :class:`~jetforge.runtime.tensorrt.plan.BuildPlan` translated into TensorRT calls.

Every decision was made (and validated) in the plan; each function here applies one part of it to an
``IBuilderConfig`` (names from TensorRT's Python API): ``set_flag(BuilderFlag.FP16/INT8/GPU_FALLBACK/...)``,
``int8_calibrator`` = an ``IInt8EntropyCalibrator2`` serving the cache, ``default_device_type =
DeviceType.DLA`` and ``DLA_core``, ``set_memory_pool_limit``, per-layer ``precision``, optimization
profiles, a timing cache, ``profiling_verbosity = DETAILED`` (for the engine inspector).

On TensorRT-RTX (and TensorRT 11) the JetPack-only parts (precision flags, calibrator, DLA) are skipped
and :class:`ConfigRecord` notes say so; what was applied is recorded for the build report.
"""

from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from jetforge.errors import EngineBuildError
from jetforge.runtime.tensorrt import compat
from jetforge.runtime.tensorrt.calib_cache import parse_calibration_cache
from jetforge.runtime.tensorrt.calibrator import make_cache_calibrator
from jetforge.runtime.tensorrt.library import display_name, is_rtx, version_string
from jetforge.runtime.tensorrt.network import set_layer_precisions
from jetforge.runtime.tensorrt.profile import ShapeRange
from jetforge.runtime.tensorrt.version import TensorRTVersion

JETPACK_ONLY_FLAGS = ("FP16", "INT8", "GPU_FALLBACK", "PREFER_PRECISION_CONSTRAINTS", "OBEY_PRECISION_CONSTRAINTS")


@dataclass
class ConfigRecord:
    """What was applied to the config, what was skipped and why, and the objects TensorRT keeps using."""

    applied: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    calibrator: Any = None
    timing_cache: Any = None
    dla_audit: Optional[Dict[str, Any]] = None


def _library(trt: ModuleType) -> str:
    """``"TensorRT-RTX"`` or ``"TensorRT 10.3.0"`` for notes."""
    return display_name(trt) if is_rtx(trt) else "TensorRT " + version_string(trt)


def apply_flags(trt: ModuleType, config: Any, flags: Sequence[str], record: ConfigRecord) -> None:
    skipped = []
    for name in flags:
        flag = compat.builder_flag(trt, name)
        if flag is None or (name in JETPACK_ONLY_FLAGS and is_rtx(trt)):
            skipped.append(name)
            continue
        config.set_flag(flag)
        record.applied.append(name)
    if skipped:
        record.notes.append("builder flags skipped (not in %s %s): %s" % (display_name(trt), version_string(trt),
                                                                         ", ".join(skipped)))


def apply_calibration_cache(trt: ModuleType, config: Any, plan: Any, cache_bytes: Optional[bytes],
                            record: ConfigRecord) -> None:
    """Serve the plan's cache through the calibrator; its header must be the installed TensorRT's."""
    if plan.int8_source != "cache":
        return
    if not compat.has_calibrator(trt):
        record.notes.append("INT8 calibrator skipped: %s has no implicit INT8 (IInt8EntropyCalibrator2)"
                            % ("TensorRT-RTX" if is_rtx(trt) else "this TensorRT"))
        return
    installed = version_string(trt)
    data = cache_bytes if cache_bytes is not None else Path(str(plan.calibration_cache)).read_bytes()
    cache = parse_calibration_cache(data, "calibration cache %s" % plan.calibration_cache)
    expected = TensorRTVersion.of_module(trt).cache_header_number()
    if cache.version_number != expected:
        raise EngineBuildError("calibration cache header %s does not match the installed TensorRT %s "
                               "(expects TRT-%d-...): TensorRT would ignore it" % (cache.header, installed, expected),
                               hint="recalibrate for TensorRT %s or retarget the cache header" % installed)
    record.calibrator = make_cache_calibrator(trt, data)
    config.int8_calibrator = record.calibrator
    record.applied.append("int8_calibrator(cache)")


def apply_dla(trt: ModuleType, builder: Any, config: Any, plan: Any, record: ConfigRecord) -> None:
    if not plan.uses_dla:
        return
    if not compat.supports_dla(trt):
        record.notes.append("DLA settings skipped (default_device_type, DLA_core, GPU fallback, DLA pools): %s %s "
                            "cannot target DLA" % (display_name(trt), version_string(trt)))
        return
    cores = int(getattr(builder, "num_DLA_cores", 0))
    if plan.dla_core is None or plan.dla_core >= cores:
        raise EngineBuildError("this machine has %d DLA core%s; the plan uses DLA core %s"
                               % (cores, "" if cores == 1 else "s", plan.dla_core),
                               hint="build DLA engines on the Jetson itself (AGX Orin, Orin NX, Xavier)")
    config.default_device_type = trt.DeviceType.DLA
    config.DLA_core = int(plan.dla_core)
    record.applied.append("DLA_core=%d" % plan.dla_core)


def apply_memory_pools(trt: ModuleType, config: Any, pools: Mapping[str, int], record: ConfigRecord) -> None:
    for pool, size in pools.items():
        member = compat.memory_pool(trt, pool)
        if member is None or (pool.startswith("dla_") and not compat.supports_dla(trt)):
            record.notes.append("memory pool %s skipped on %s" % (pool, "TensorRT-RTX" if is_rtx(trt)
                                                                   else version_string(trt)))
            continue
        config.set_memory_pool_limit(member, int(size))
        record.applied.append("%s=%d" % (pool, size))


def apply_layer_precisions(trt: ModuleType, network: Any, precisions: Mapping[str, str],
                           record: ConfigRecord) -> None:
    if not precisions:
        return
    if not compat.supports_layer_precision(trt):
        record.notes.append("per-layer precisions skipped: %s networks are strongly typed" % _library(trt))
        return
    set_layer_precisions(trt, network, precisions)
    record.applied.append("layer_precisions(%d)" % len(precisions))


def audit_dla(trt: ModuleType, network: Any, config: Any, plan: Any, record: ConfigRecord) -> None:
    """TensorRT's own ``can_run_on_DLA`` per layer, before building; without GPU fallback any "no" fails."""
    if not (plan.uses_dla and compat.supports_dla(trt)):
        return
    cannot = [network.get_layer(i).name for i in range(network.num_layers)
              if not config.can_run_on_DLA(network.get_layer(i))]
    record.dla_audit = {"layers": network.num_layers, "cannot_run_on_dla": cannot}
    if cannot and not plan.gpu_fallback:
        raise EngineBuildError("%d layer(s) cannot run on DLA and GPU fallback is off: %s"
                               % (len(cannot), ", ".join(cannot[:5])),
                               hint="enable gpu_fallback, or fix them (see `jetforge dla-check`)")


def apply_profiles(builder: Any, config: Any, profiles: Sequence[Mapping[str, ShapeRange]],
                   record: ConfigRecord) -> None:
    for profile in profiles:
        prof = builder.create_optimization_profile()
        for name, rng in profile.items():
            prof.set_shape(name, tuple(rng.min), tuple(rng.opt), tuple(rng.max))
        config.add_optimization_profile(prof)
    if profiles:
        record.applied.append("profiles(%d)" % len(profiles))


def apply_build_settings(trt: ModuleType, config: Any, plan: Any, record: ConfigRecord) -> None:
    """Timing cache, builder optimisation level, and DETAILED profiling verbosity for the inspector."""
    if plan.timing_cache and is_rtx(trt):
        record.notes.append("timing cache skipped: timing-cache operations are no-ops in TensorRT-RTX")
    elif plan.timing_cache:
        tc_path = Path(plan.timing_cache)
        record.timing_cache = config.create_timing_cache(tc_path.read_bytes() if tc_path.is_file() else b"")
        config.set_timing_cache(record.timing_cache, False)
        record.applied.append("timing_cache")
    if plan.builder_optimization_level is not None and hasattr(config, "builder_optimization_level"):
        config.builder_optimization_level = int(plan.builder_optimization_level)
    if hasattr(trt, "ProfilingVerbosity"):
        config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED


def configure(trt: ModuleType, builder: Any, network: Any, plan: Any, profiles: Sequence[Mapping[str, ShapeRange]],
              cache_bytes: Optional[bytes]) -> Tuple[Any, ConfigRecord]:
    """``(config, ConfigRecord)``: the builder config with every part of the plan applied, in TensorRT's order."""
    config = builder.create_builder_config()
    record = ConfigRecord()
    apply_flags(trt, config, plan.flags, record)
    apply_calibration_cache(trt, config, plan, cache_bytes, record)
    apply_dla(trt, builder, config, plan, record)
    apply_memory_pools(trt, config, plan.memory_pools, record)
    apply_layer_precisions(trt, network, plan.layer_precisions, record)
    audit_dla(trt, network, config, plan, record)
    apply_profiles(builder, config, profiles, record)
    apply_build_settings(trt, config, plan, record)
    return config, record
