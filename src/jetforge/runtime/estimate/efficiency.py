"""Efficiency factors of the roofline, as data: what share of a peak rate each layer type reaches.

``efficiency.yaml`` (next to this module) holds named sets.  ``tensorrt`` is what ``jetforge
estimate`` uses for TensorRT engines on Jetson targets; ``pytorch_eager`` describes eager PyTorch
kernels on a server GPU (cuDNN/cuBLAS, one kernel per layer, BatchNorms the export folded run again
as kernels of their own, a per-kernel cost per layer type) and is the set the H200 fit writes, with
its provenance, from the starting values ``pytorch_eager_start``.  A set also names the kernel
grouping it describes (``fusion``), so ``--efficiency pytorch_eager`` needs no ``--fusion none``.
Every set says how its numbers were obtained (``obtained``), which layer types had calibration data
(``calibrated: true``) and what was checked with it (``validation``: device, precisions, kind of
target, error): the estimate reports layers whose type was never calibrated, and prints the checks
that cover the user's case -- or that none does -- next to its result.  A user's own sets
(``jetforge estimate --calibrate-from``) live in a file of theirs, given as ``--efficiency FILE.yaml``.

Loaded through :func:`jetforge.config.from_dict`: an unknown key is an error with a did-you-mean.
"""

import copy
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from jetforge.runtime.estimate.graph import CATEGORIES, DEPTHWISE_CATEGORIES, FUSIONS

EFFICIENCY_FILE = Path(__file__).resolve().parent / "efficiency.yaml"


@dataclass
class Factor:
    """Share of the peak compute rate and of the memory bandwidth one layer type reaches."""

    compute: float = 0.5
    memory: float = 0.7
    calibrated: bool = False
    note: str = ""
    # per-kernel fixed cost of this type in microseconds, where it differs from the set's gpu_kernel_us: eager
    # cuDNN convolutions launch more than one kernel per layer at small batch (layout transforms, split-K
    # reductions), which a CUDA-graph replay still pays as kernel tails and gaps
    launch_us: Optional[float] = None

    def __post_init__(self) -> None:
        for name in ("compute", "memory"):
            value = getattr(self, name)
            if not 0.0 < value <= 2.0:
                raise ValueError("%s efficiency %r is outside (0, 2]" % (name, value))
        if self.launch_us is not None and not 0.0 <= self.launch_us <= 1000.0:
            raise ValueError("launch_us %r is outside [0, 1000]" % self.launch_us)


@dataclass
class Validation:
    """One measured check of a set: what it covers (device, precisions, target kind) and the error found.

    ``jetforge estimate`` prints the entries that match the user's case next to its number, and says so when
    none does (item 2 of issue 26): a number for FP16 on a Jetson GPU is not backed by an INT8 check.
    """

    text: str
    device: str = "GPU"                      # GPU or DLA: where the checked layers ran
    precisions: List[str] = field(default_factory=lambda: ["fp16"])
    targets: str = "any"                      # "jetson", "server" or "any": the kind of target checked
    kind: str = "held_out"                    # a_priori / fitted / held_out / unseen / board_left_out
    points: int = 0
    median_abs_pct: Optional[float] = None
    worst_ratio: Optional[float] = None
    file: str = ""                            # the result file the numbers come from

    def applies(self, device: str, precision: str, target_kind: str) -> bool:
        kind_ok = self.targets == "any" or self.targets == target_kind
        return self.device == device and precision in self.precisions and kind_ok


@dataclass
class Provenance:
    """Where a fitted set came from: the measurement, the fit's result file, the script and the date."""

    measured: str                 # the measurement file the factors were fitted on
    fit_result: str               # the fit's own result file (held-out rows per model and batch)
    script: str
    date: str
    held_out: str                 # how the held-out error was obtained (folds, what was held out)
    never_in_fit: str = ""        # the models kept out of every fit, and where their check stands


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
    fusion: str = "tensorrt"                    # the kernel grouping the set describes (graph.FUSIONS)
    # eager PyTorch runs a BatchNorm that the ONNX export folded into its convolution as a kernel of its own:
    # with this on, every such convolution (TorchScript exporter: weights renamed onnx::Conv_*) gets that kernel
    unfolded_batchnorm: bool = False
    fit: Optional[Fit] = None
    fitted_on: List[str] = field(default_factory=list)
    validation: List[Validation] = field(default_factory=list)
    provenance: Optional[Provenance] = None
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
        if self.fusion not in FUSIONS:
            raise ValueError("fusion %r is not one of %s" % (self.fusion, ", ".join(FUSIONS)))

    def launch_us(self, device: str, category: str) -> float:
        """The fixed per-kernel cost of ``category`` on ``device`` in microseconds."""
        if device == "DLA":
            return self.overheads.dla_layer_us
        own = self.gpu[category].launch_us if category in self.gpu else None
        return self.overheads.gpu_kernel_us if own is None else own

    def checks_for(self, device: str, precision: str, target_kind: str) -> List[Validation]:
        """The validation entries that cover this case (see :class:`Validation`)."""
        return [v for v in self.validation if v.applies(device, precision, target_kind)]

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
                table[name] = Factor(f.compute * scale * extra, f.memory * memory, f.calibrated, f.note, f.launch_us)
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
    applied (``fitted=False``: the starting values alone, as the check scripts need them).

    ``name`` may also be a YAML file of sets (one written by ``jetforge estimate --calibrate-from``): its first set
    is used, or ``FILE.yaml:SET``."""
    if path is None and _is_file_name(name):
        from jetforge.fileio import require_file

        file, _, inner = name.rpartition(":") if not name.endswith((".yaml", ".yml")) else (name, "", "")
        found = str(require_file(file, "efficiency set file",
                                 hint="write one with jetforge estimate --calibrate-from board-check.json"))
        return efficiency_set(inner or set_names(found)[0], path=found, fitted=fitted)
    sets = _load(str(path or EFFICIENCY_FILE))
    if name not in sets:
        from jetforge.errors import UnknownNameError

        raise UnknownNameError("efficiency set", name, list(sets))
    return sets[name].applied() if fitted else copy.deepcopy(sets[name])


def _is_file_name(name: str) -> bool:
    """A set name that is a YAML file (``local.yaml``) or a set in one (``local.yaml:orin_measured``)."""
    return name.endswith((".yaml", ".yml")) or ".yaml:" in name or ".yml:" in name


def set_names(path: Optional[str] = None) -> List[str]:
    return list(_load(str(path or EFFICIENCY_FILE)))


__all__ = ["EFFICIENCY_FILE", "EfficiencySet", "Factor", "Fit", "Overheads", "Provenance", "Validation",
           "efficiency_set", "set_names"]
