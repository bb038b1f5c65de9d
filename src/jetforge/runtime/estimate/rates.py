"""A target's peak rates, memory bandwidth and power-mode clocks, read from its profile with their sources.

The estimator needs, per precision: the GPU's Tensor Core rate (convolutions, GEMMs), its CUDA-core
rate (depthwise convolutions, point-wise work), the DLA's rate, and the memory bandwidth.  Each
comes from a profile field that carries a source (``targets/profiles/*.yaml``); a power mode scales
them by its clock caps: GPU rates by ``gpu_max_mhz / max_gpu_clock_mhz`` and the share of TPCs it
enables, DLA rates by ``dla_core_mhz / dla_max_clock_mhz``, bandwidth by ``emc_max_mhz`` over the
memory clock the bandwidth implies (bus width x 2 transfers per clock).  A rate that is missing is
an error; one marked uncertain is used and reported so.

FP32 uses the TF32 Tensor Core rate where the GPU has one: TensorRT allows TF32 for FP32 layers by
default (``BuilderFlag.TF32``, on unless cleared).
"""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from jetforge.errors import TargetError

PRECISIONS = ("int8", "fp16", "fp32")
BYTES = {"int8": 1, "fp16": 2, "fp32": 4}

_GPU_TENSOR_KEYS = {"int8": ("gpu_int8_tops_dense",), "fp16": ("gpu_fp16_tflops_dense",),
                    "fp32": ("gpu_tf32_tflops_dense", "gpu_fp32_tflops")}
_GPU_VECTOR_KEYS = {"int8": ("gpu_fp16_tflops_cuda_cores", "gpu_fp32_tflops"),
                    "fp16": ("gpu_fp16_tflops_cuda_cores", "gpu_fp32_tflops"),
                    "fp32": ("gpu_fp32_tflops",)}
_DLA_KEYS = {"int8": "dla_int8_tops_dense", "fp16": "dla_fp16_tflops_dense"}


@dataclass(frozen=True)
class RateUse:
    """One profile number the estimate rests on."""

    key: str
    value: float
    unit: str
    source: Optional[str]
    uncertain: bool
    scale: float = 1.0            # power-mode factor applied to it

    def to_dict(self) -> Dict[str, Any]:
        return {"key": self.key, "value": self.value, "unit": self.unit, "source": self.source,
                "uncertain": self.uncertain, "power_mode_scale": round(self.scale, 4)}


@dataclass
class TargetRates:
    """Peak rates in operations per second and bytes per second, after the power mode."""

    target: str
    precision: str
    power_mode: Optional[str]
    gpu_tensor: float
    gpu_vector: float
    bandwidth: float
    sm_count: int
    dla_per_core: Optional[float] = None
    dla_cores: int = 0
    channel_align_gpu: int = 8
    used: List[RateUse] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    @property
    def uncertain(self) -> List[str]:
        return [u.key for u in self.used if u.uncertain]

    def to_dict(self) -> Dict[str, Any]:
        return {"target": self.target, "precision": self.precision, "power_mode": self.power_mode,
                "gpu_tensor_ops_per_s": self.gpu_tensor, "gpu_cuda_core_ops_per_s": self.gpu_vector,
                "memory_bytes_per_s": self.bandwidth, "sm_count": self.sm_count,
                "dla_ops_per_s_per_core": self.dla_per_core, "dla_cores": self.dla_cores,
                "used": [u.to_dict() for u in self.used], "notes": list(self.notes)}


def default_power_mode(target: Any) -> Optional[Any]:
    """MAXN (the stock conf's) where the board has it, else the profile's default mode, else none."""
    modes = list(target.power_modes)
    for mode in modes:
        if mode.name.upper() == "MAXN" and not mode.super_mode:
            return mode
    return target.default_power_mode


def target_rates(target: Any, precision: str, power_mode: Optional[str] = None, dla: bool = False) -> TargetRates:
    """The rates the estimator uses for ``target`` at ``precision`` in ``power_mode`` (name or id); DLA rates
    only with ``dla``."""
    if precision not in PRECISIONS:
        from jetforge.errors import UnknownNameError

        raise UnknownNameError("precision", precision, PRECISIONS)
    if not target.supports_precision(precision, "gpu"):
        raise TargetError("%s's GPU does not run %s" % (target.name, precision),
                          hint="choose one of: " + ", ".join(p for p in PRECISIONS if
                                                             target.supports_precision(p, "gpu")))
    mode = _mode(target, power_mode)
    gpu_scale, dla_scale, mem_scale, notes = _mode_scales(target, mode)
    used: List[RateUse] = []
    tensor = _first(target, _GPU_TENSOR_KEYS[precision], gpu_scale, used, required=True)
    vector = _first(target, _GPU_VECTOR_KEYS[precision], gpu_scale, used, required=False)
    if vector is None:
        vector = tensor
        notes.append("no CUDA-core rate in the profile: point-wise work is timed at the Tensor Core rate")
    if precision != "fp32" and used and used[-1].key == "gpu_fp32_tflops":
        vector *= 2.0
        notes.append("FP16 CUDA-core rate taken as 2 x the FP32 rate (no gpu_fp16_tflops_cuda_cores)")
    bandwidth = _first(target, ("memory_bandwidth_gbs",), mem_scale, used, required=True, unit_scale=1e9)
    rates = TargetRates(target=target.name, precision=precision, power_mode=mode.name if mode else None,
                        gpu_tensor=tensor, gpu_vector=vector, bandwidth=bandwidth,
                        sm_count=int(target.sm_count or 1), used=used, notes=notes,
                        channel_align_gpu=target.channel_multiple_for(precision))
    if target.sm_count is None:
        notes.append("no SM count in the profile: wave quantization assumes 1 SM")
    if dla and target.has_dla and precision in _DLA_KEYS:
        total = _first(target, (_DLA_KEYS[precision],), dla_scale, used, required=False)
        if total is not None:
            rates.dla_per_core = total / target.dla_cores
            rates.dla_cores = target.dla_cores
    return rates


def _mode(target: Any, power_mode: Optional[str]) -> Optional[Any]:
    if power_mode is None:
        return default_power_mode(target)
    text = str(power_mode)
    return target.power_mode(int(text) if text.isdigit() else text)


def _mode_scales(target: Any, mode: Optional[Any]) -> Tuple[float, float, float, List[str]]:
    """(GPU, DLA, memory) factors of ``mode``'s clock caps against the profile's maxima, and notes."""
    notes: List[str] = []
    if mode is None:
        return 1.0, 1.0, 1.0, notes
    clocks = dict(mode.clocks)
    gpu = 1.0
    max_gpu = target.value("max_gpu_clock_mhz").value
    if "gpu_max_mhz" in clocks:
        if max_gpu:
            gpu = clocks["gpu_max_mhz"] / float(max_gpu)
        else:
            notes.append("power mode %s caps the GPU at %g MHz but the profile has no max GPU clock: not scaled"
                         % (mode.name, clocks["gpu_max_mhz"]))
    if "gpu_tpcs" in clocks and target.sm_count:
        gpu *= min(1.0, clocks["gpu_tpcs"] * 2.0 / target.sm_count)   # 2 SMs per TPC (Ampere/Volta)
    dla = 1.0
    max_dla = target.value("dla_max_clock_mhz").value
    if "dla_core_mhz" in clocks and target.has_dla:
        if max_dla:
            dla = clocks["dla_core_mhz"] / float(max_dla)
        else:
            notes.append("power mode %s caps the DLA at %g MHz but the profile has no max DLA clock: not scaled"
                         % (mode.name, clocks["dla_core_mhz"]))
    mem = 1.0
    bw, bus = target.value("memory_bandwidth_gbs").value, target.value("memory_bus_width_bits").value
    if "emc_max_mhz" in clocks and bw and bus:
        mem = min(1.0, clocks["emc_max_mhz"] / (bw * 1e3 * 8 / (2.0 * bus)))
    return gpu, dla, mem, notes


def _first(target: Any, keys: Tuple[str, ...], scale: float, used: List[RateUse], required: bool,
           unit_scale: float = 1e12) -> Optional[float]:
    for key in keys:
        record = target.value(key)
        if record.value is not None:
            used.append(RateUse(key, float(record.value), record.unit or "", record.source, record.uncertain, scale))
            return float(record.value) * unit_scale * scale
    if required:
        raise TargetError("target %s has no %s in its profile: the estimate needs it"
                          % (target.name, " or ".join(keys)),
                          hint="add it with its source to %s, or estimate for another target" % (target.path or
                                                                                                 "the profile"))
    return None


__all__ = ["BYTES", "PRECISIONS", "RateUse", "TargetRates", "default_power_mode", "target_rates"]
