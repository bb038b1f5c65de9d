"""Efficiency factors of the roofline, as data: what share of a peak rate each layer type reaches.

``efficiency.yaml`` (next to this module) holds named sets.  ``tensorrt`` is what ``jetforge
estimate`` uses for TensorRT engines on Jetson targets; ``pytorch_eager`` describes eager PyTorch
kernels (cuDNN/cuBLAS, one kernel per layer) and is what the H200 validation fits.  Every set says
how its numbers were obtained (``obtained``), which layer types had calibration data
(``calibrated: true``) and what error was measured with it (``validation``): the estimate reports
layers whose type was never calibrated, and repeats the measured error next to its result.

Loaded through :func:`jetforge.config.from_dict`: an unknown key is an error with a did-you-mean.
"""

import copy
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from jetforge.runtime.estimate.graph import CATEGORIES, DEPTHWISE_CATEGORIES

EFFICIENCY_FILE = Path(__file__).resolve().parent / "efficiency.yaml"


@dataclass
class Factor:
    """Share of the peak compute rate and of the memory bandwidth one layer type reaches."""

    compute: float = 0.5
    memory: float = 0.7
    calibrated: bool = False
    note: str = ""

    def __post_init__(self) -> None:
        for name in ("compute", "memory"):
            value = getattr(self, name)
            if not 0.0 < value <= 2.0:
                raise ValueError("%s efficiency %r is outside (0, 2]" % (name, value))


@dataclass
class Overheads:
    """Fixed costs in microseconds."""

    gpu_kernel_us: float = 3.0         # per GPU kernel: launch, tail, prologue
    dla_layer_us: float = 2.0          # per DLA operation (hardware-scheduled, no host launch)
    dla_subgraph_us: float = 40.0      # per DLA loadable submitted (driver, synchronization with the GPU)
    transition_us: float = 10.0        # per tensor crossing GPU <-> DLA (reformat kernel + handoff)
    inference_us: float = 0.0          # per inference: enqueue and synchronization seen by the caller

    def __post_init__(self) -> None:
        for name in ("gpu_kernel_us", "dla_layer_us", "dla_subgraph_us", "transition_us", "inference_us"):
            if getattr(self, name) < 0:
                raise ValueError("overhead %s cannot be negative" % name)


@dataclass
class Fit:
    """Factors fitted on measurements, applied on top of a set's starting values (which stay as they were set).

    Keeping the fit apart lets the check scripts always start from the same prior, so a refit (or a
    held-out evaluation) never starts from numbers that were themselves fitted on the held-out data.
    """

    gpu_compute_scale: float = 1.0
    dla_compute_scale: float = 1.0
    dla_depthwise_scale: float = 1.0      # on top of dla_compute_scale, for depthwise convolutions on the DLA
    gpu_memory_scale: float = 1.0
    dla_memory_scale: float = 1.0
    gpu_kernel_us: Optional[float] = None
    dla_subgraph_us: Optional[float] = None
    inference_us: Optional[float] = None
    how: str = ""

    def __post_init__(self) -> None:
        for name in ("gpu_compute_scale", "dla_compute_scale", "dla_depthwise_scale", "gpu_memory_scale",
                     "dla_memory_scale"):
            if not 0.0 < getattr(self, name) <= 10.0:
                raise ValueError("%s must be in (0, 10]" % name)


@dataclass
class EfficiencySet:
    """One named set of factors (see the module docstring)."""

    description: str
    obtained: str
    gpu: Dict[str, Factor]
    dla: Dict[str, Factor] = field(default_factory=dict)
    overheads: Overheads = field(default_factory=Overheads)
    transition_memory_efficiency: float = 0.5   # reformat copies read and write the tensor once each
    tile_m: int = 128                           # GEMM tile used for the wave-quantization model
    tile_n: int = 128
    min_occupancy: float = 0.15                 # split-K and stream-K keep small GEMMs above this
    pool_window_reads: bool = False             # pooling traffic = every output's window (no shared-memory tiling)
    fit: Optional[Fit] = None
    fitted_on: List[str] = field(default_factory=list)
    validation: List[str] = field(default_factory=list)
    name: str = ""

    def __post_init__(self) -> None:
        missing = [c for c in CATEGORIES if c not in self.gpu]
        if missing:
            raise ValueError("gpu factors missing for %s" % ", ".join(missing))
        unknown = [c for c in list(self.gpu) + list(self.dla) if c not in CATEGORIES]
        if unknown:
            raise ValueError("unknown layer type(s) %s; known: %s" % (", ".join(unknown), ", ".join(CATEGORIES)))
        if not 0.0 < self.transition_memory_efficiency <= 1.0:
            raise ValueError("transition_memory_efficiency must be in (0, 1]")
        if not 0.0 < self.min_occupancy <= 1.0 or self.tile_m < 1 or self.tile_n < 1:
            raise ValueError("tile sizes must be >= 1 and min_occupancy in (0, 1]")

    def applied(self) -> "EfficiencySet":
        """This set with its ``fit`` multiplied into the factors and overheads (what the estimator uses)."""
        out = copy.deepcopy(self)
        fit, out.fit = out.fit, None
        if fit is None:
            return out
        for table, scale, memory in ((out.gpu, fit.gpu_compute_scale, fit.gpu_memory_scale),
                                     (out.dla, fit.dla_compute_scale, fit.dla_memory_scale)):
            for name, f in table.items():
                extra = fit.dla_depthwise_scale if table is out.dla and name in DEPTHWISE_CATEGORIES else 1.0
                table[name] = Factor(f.compute * scale * extra, f.memory * memory, f.calibrated, f.note)
        for name in ("gpu_kernel_us", "dla_subgraph_us", "inference_us"):
            if getattr(fit, name) is not None:
                setattr(out.overheads, name, getattr(fit, name))
        return out

    def factor(self, device: str, category: str) -> Factor:
        """The factor of ``category`` on ``device`` ("GPU" or "DLA"); the DLA falls back to its ``conv``."""
        if device == "DLA":
            return self.dla.get(category) or self.dla.get("conv") or self.gpu[category]
        return self.gpu[category]

    def uncalibrated(self, device: str, category: str) -> bool:
        table = self.dla if device == "DLA" else self.gpu
        return not (category in table and table[category].calibrated)


@dataclass
class _File:
    sets: Dict[str, EfficiencySet]


@functools.lru_cache(maxsize=8)
def _load(path: str) -> Dict[str, EfficiencySet]:
    from jetforge.config import from_dict, read_yaml

    data = from_dict(_File, read_yaml(path), where=Path(path).name)
    for name, value in data.sets.items():
        value.name = name
    return data.sets


def efficiency_set(name: str = "tensorrt", path: Optional[str] = None, fitted: bool = True) -> EfficiencySet:
    """The set called ``name`` from ``path`` (default: the packaged ``efficiency.yaml``), with its fit
    applied (``fitted=False``: the starting values alone, as the check scripts need them)."""
    sets = _load(str(path or EFFICIENCY_FILE))
    if name not in sets:
        from jetforge.errors import UnknownNameError

        raise UnknownNameError("efficiency set", name, list(sets))
    return sets[name].applied() if fitted else copy.deepcopy(sets[name])


def set_names(path: Optional[str] = None) -> List[str]:
    return list(_load(str(path or EFFICIENCY_FILE)))


__all__ = ["EFFICIENCY_FILE", "EfficiencySet", "Factor", "Fit", "Overheads", "efficiency_set", "set_names"]
