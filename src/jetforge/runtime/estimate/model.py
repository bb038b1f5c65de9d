"""The estimate: a roofline per kernel, the GPU/DLA split with its transitions, and memory.

Per kernel (:mod:`jetforge.runtime.estimate.graph`)::

    time = max(FLOPs / (peak x compute x shape), bytes / (bandwidth x memory)) + overhead

``peak`` is the Tensor Core rate for convolutions and GEMMs, the CUDA-core rate for the rest (the
DLA core's rate on the DLA); ``compute`` and ``memory`` are the layer type's efficiency factors
(:mod:`~jetforge.runtime.estimate.efficiency`); ``shape`` models what the layer's shape costs on
matrix hardware: channels padded to the alignment unit (8 FP16 / 16 INT8 channels on the GPU, the
DLA's 16 / 32-channel atoms) and, on the GPU, wave quantization of output tiles over the SMs.

Which layers run on the DLA is the placement that ``jetforge dla-check`` predicts
(:func:`jetforge.runtime.tensorrt.dla.analyze.analyze_onnx`).  Every tensor that crosses between the GPU and
the DLA (graph inputs and outputs count as GPU-side: TensorRT's I/O is in GPU-visible linear
memory) costs a reformat: a fixed overhead plus reading and writing the tensor once.  Each DLA
loadable costs a submission overhead.  GPU and DLA work of one inference is serial.

Memory: weights at the deployed precision (biases and other constants at FP16, FP32 for FP32
builds; BatchNorm folded into the convolution it follows); peak activations from a liveness pass
over the tensors kernels write, in topological order (a tensor lives from the kernel that writes
it to its last reader; I/O bindings are counted apart); workspace: a computed lower bound, the
largest reformat buffer the engine needs (input/output conversion to the precision, GPU<->DLA
transitions) -- TensorRT's tactics may ask for more, up to the workspace limit.
"""

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Union

from jetforge.errors import ConfigError, ModelError
from jetforge.runtime.estimate.efficiency import EfficiencySet, efficiency_set
from jetforge.runtime.estimate.fold import fold_constants
from jetforge.runtime.estimate.graph import (BATCHNORM_CATEGORIES, TENSOR_CATEGORIES, GraphInfo, Kernel, fuse,
                                             graph_info, layers_of)
from jetforge.runtime.estimate.rates import BYTES, TargetRates, target_rates

GPU, DLA = "GPU", "DLA"
_WIDE = ("softmax", "norm", "other")     # types TensorRT keeps in FP16 in an INT8 build
_DLA_ATOM = {"int8": 32, "fp16": 16}     # DLA channel atoms (kCHW32 INT8, kCHW16 FP16 native formats)


@dataclass
class Placed:
    """A model at one batch size: its kernels on their devices and what the timing needs to know."""

    model: str
    batch: int
    precision: str
    kernels: List[Kernel]
    info: GraphInfo
    dla_subgraphs: int = 0
    dla_loadable_limit: int = 0
    dla_uncertain_layers: int = 0
    dla_fallback: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)


@dataclass
class KernelTime:
    kernel: Kernel
    bytes: float
    compute_s: float
    memory_s: float
    overhead_s: float
    shape: float

    @property
    def time_s(self) -> float:
        return max(self.compute_s, self.memory_s) + self.overhead_s

    @property
    def bound(self) -> str:
        if self.kernel.category == "elided":
            return "elided"
        if self.overhead_s >= max(self.compute_s, self.memory_s):
            return "overhead"
        return "compute" if self.compute_s >= self.memory_s else "memory"

    def to_dict(self) -> Dict[str, Any]:
        k = self.kernel
        return {"name": k.name, "layers": [l.name for l in k.layers], "ops": k.ops, "category": k.category,
                "device": k.device, "flops": k.flops, "bytes": self.bytes, "shape_factor": round(self.shape, 4),
                "compute_us": self.compute_s * 1e6, "memory_us": self.memory_s * 1e6,
                "overhead_us": self.overhead_s * 1e6, "time_us": self.time_s * 1e6, "bound": self.bound}


@dataclass
class Transition:
    tensor: str
    source: str
    dest: str
    bytes: float
    time_s: float

    def to_dict(self) -> Dict[str, Any]:
        return {"tensor": self.tensor, "from": self.source, "to": self.dest, "bytes": self.bytes,
                "time_us": self.time_s * 1e6}


@dataclass
class Memory:
    weights: float
    activations_peak: float
    workspace_lower_bound: float
    io_bindings: float

    @property
    def total(self) -> float:
        return self.weights + self.activations_peak + self.workspace_lower_bound + self.io_bindings

    def to_dict(self) -> Dict[str, Any]:
        return {"weights_bytes": self.weights, "activations_peak_bytes": self.activations_peak,
                "workspace_lower_bound_bytes": self.workspace_lower_bound, "io_bindings_bytes": self.io_bindings,
                "total_bytes": self.total,
                "labels": {"workspace_lower_bound_bytes": "computed lower bound: the largest reformat buffer; "
                                                          "TensorRT's tactics may use more"}}


@dataclass
class BatchEstimate:
    batch: int
    kernels: List[KernelTime]
    transitions: List[Transition]
    dla_subgraphs: int
    subgraph_s: float
    inference_s: float
    memory: Memory

    def device_s(self, device: str) -> float:
        return sum(k.time_s for k in self.kernels if k.kernel.device == device)

    @property
    def transitions_s(self) -> float:
        return sum(t.time_s for t in self.transitions)

    @property
    def latency_s(self) -> float:
        return self.device_s(GPU) + self.device_s(DLA) + self.transitions_s + self.subgraph_s + self.inference_s

    @property
    def throughput(self) -> float:
        return self.batch / self.latency_s if self.latency_s > 0 else 0.0

    def to_dict(self, layers: bool = True) -> Dict[str, Any]:
        out = {"batch": self.batch, "latency_ms": self.latency_s * 1e3, "throughput_per_s": self.throughput,
               "gpu_ms": self.device_s(GPU) * 1e3, "dla_ms": (self.device_s(DLA) + self.subgraph_s) * 1e3,
               "transitions_ms": self.transitions_s * 1e3, "dla_subgraphs": self.dla_subgraphs,
               "inference_overhead_ms": self.inference_s * 1e3, "kernels": len(self.kernels),
               "memory": self.memory.to_dict(), "transitions": [t.to_dict() for t in self.transitions]}
        if layers:
            out["layers"] = [k.to_dict() for k in self.kernels]
        return out


# ------------------------------------------------------------------------------------------------
# placing a model: graph, DLA placement, kernels
# ------------------------------------------------------------------------------------------------
def read_model(model: Union[str, Path, Any]) -> Any:
    """The ONNX ``ModelProto`` of a path (checked like every ONNX jetforge reads) or the proto itself."""
    if isinstance(model, (str, Path)):
        from jetforge.runtime.onnx_file import read_onnx

        return read_onnx(model, purpose="latency estimate (jetforge estimate)")
    return model


def batch_shapes(proto: Any, batch: int, overrides: Optional[Mapping[str, Sequence[int]]] = None
                 ) -> Dict[str, List[int]]:
    """Static shapes of every graph input at ``batch``: dim 0 set to it, other dims from ``overrides`` or the file."""
    overrides = dict(overrides or {})
    inits = {i.name for i in proto.graph.initializer}
    names = [vi.name for vi in proto.graph.input if vi.name not in inits]
    unknown = [n for n in overrides if n not in names]
    if unknown:
        from jetforge.errors import UnknownNameError

        raise UnknownNameError("model input", unknown[0], names)
    out: Dict[str, List[int]] = {}
    for vi in proto.graph.input:
        if vi.name in inits:
            continue
        if vi.name in overrides:
            dims = [int(d) for d in overrides[vi.name]]
        else:
            dims = [int(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else -1
                    for d in vi.type.tensor_type.shape.dim]
        if dims:
            dims[0] = batch
        if any(d < 1 for d in dims[1:]):
            raise ConfigError("input %s has dynamic dimensions %s besides the batch"
                              % (vi.name, ["?" if d < 1 else d for d in dims]),
                              hint="fix them with --shape %s=%s" % (vi.name, "x".join("1" if d < 1 else str(d)
                                                                                      for d in dims)))
        out[vi.name] = dims
    return out


def place(model: Union[str, Path, Any], batch: int, precision: str, *, target: Any = None,
          dla_core: Optional[int] = None, fusion: str = "tensorrt",
          input_shapes: Optional[Mapping[str, Sequence[int]]] = None, unfold_batchnorm: bool = False) -> Placed:
    """Shape-infer ``model`` at ``batch``, predict DLA placement (with ``dla_core``) and build the kernels
    (``unfold_batchnorm``: the efficiency set's ``unfolded_batchnorm``, see :func:`graph.fuse`)."""
    from jetforge.runtime.tensorrt.dla.analyze import FOLDED, analyze_onnx
    from jetforge.runtime.tensorrt.dla.graph import OnnxGraph, load_model

    base = read_model(model)
    name = str(model) if isinstance(model, (str, Path)) else (base.graph.name or "model")
    proto, _ = load_model(base, batch_shapes(base, batch, input_shapes))
    proto = fold_constants(proto)
    g = OnnxGraph(proto)
    info = graph_info(proto, g)
    devices: Dict[int, str] = {}
    folded: Set[int] = set()
    placed = Placed(model=name, batch=batch, precision=precision, kernels=[], info=info)
    if dla_core is not None:
        if precision not in ("fp16", "int8"):
            raise ConfigError("the DLA runs FP16 or INT8 only, not %s" % precision,
                              hint="use --precision fp16 or int8 with --dla-core")
        analysis = analyze_onnx(proto, target, precision=precision)
        for layer in analysis.layers:
            if layer.device == FOLDED:
                folded.add(layer.index)
            else:
                devices[layer.index] = layer.device
        placed.dla_subgraphs = analysis.num_subgraphs
        placed.dla_loadable_limit = analysis.loadables_per_core
        placed.dla_uncertain_layers = sum(1 for l in analysis.real_layers if l.uncertain)
        placed.dla_fallback = ["%s (%s)" % (l.name, l.onnx_op) for l in analysis.gpu_layers]
        placed.notes.extend(analysis.notes)
    else:
        for index, node in enumerate(proto.graph.node):
            if node.op_type in ("Constant", "Identity", "Dropout") or \
                    (node.output and all(o in g.constant for o in node.output if o)):
                folded.add(index)
    placed.kernels = fuse(layers_of(proto, g, info, folded), devices, info, fusion, unfold_batchnorm)
    if not placed.kernels:
        raise ModelError("model %s has no layer that does work after constant folding" % name,
                         hint="check that the graph is the model (not a constant-only export)")
    return placed


# ------------------------------------------------------------------------------------------------
# timing
# ------------------------------------------------------------------------------------------------
def _act_bytes(category: str, precision: str) -> int:
    bpe = BYTES[precision]
    return max(2, bpe) if category in _WIDE else bpe


def shape_factor(kernel: Kernel, rates: TargetRates, eff: EfficiencySet, precision: str) -> float:
    """Channel-padding utilization x wave quantization of a tensor kernel (1 for other kernels)."""
    head = kernel.head
    if kernel.category not in TENSOR_CATEGORIES or head.gemm is None or head.channels is None:
        return 1.0
    m, n, k, groups = head.gemm
    align = _DLA_ATOM.get(precision, 16) if kernel.device == DLA else rates.channel_align_gpu
    c_in = max(1, head.channels[0] // max(1, groups))
    align_in = 4 if c_in <= 4 else align   # image inputs: TensorRT's kCHW4 / the DLA's kDLA_HWC4 pack 3-4 channels
    c_out = max(1, n)
    util = (c_in / float(_ceil_to(c_in, align_in))) * (c_out / float(_ceil_to(c_out, align)))
    if kernel.device == DLA:
        return util
    tiles = int(math.ceil(m / float(eff.tile_m)) * math.ceil(n / float(eff.tile_n)) * groups)
    waves = int(math.ceil(tiles / float(max(1, rates.sm_count))))
    occupancy = tiles / float(max(1, waves * rates.sm_count))
    return util * max(eff.min_occupancy, occupancy)


def _ceil_to(value: int, unit: int) -> int:
    return int(math.ceil(value / float(unit)) * unit) if unit > 1 else value


def kernel_time(kernel: Kernel, info: GraphInfo, rates: TargetRates, eff: EfficiencySet,
                precision: str) -> KernelTime:
    """The roofline time of one kernel (module docstring)."""
    if kernel.category == "elided":
        return KernelTime(kernel, 0.0, 0.0, 0.0, 0.0, 1.0)
    bpe = _act_bytes(kernel.category, precision)
    act = sum(info.size(t) for t in kernel.inputs + kernel.outputs) * bpe
    if kernel.category == "pool" and eff.pool_window_reads:
        # every output fetches its whole window (a pool layer's FLOPs are outputs x window volume): a 3x3x3
        # stride-1 pool reads 27 elements per output, not the 1 that input + output bytes assume
        reads = max(sum(info.size(t) for t in kernel.inputs), kernel.flops)
        act = (reads + sum(info.size(t) for t in kernel.outputs)) * bpe
    moved = act + kernel.weight_elems * BYTES[precision] + kernel.const_elems * (4 if precision == "fp32" else 2)
    factor = eff.factor(kernel.device, kernel.category)
    overhead = eff.launch_us(kernel.device, kernel.category)
    if kernel.device == DLA:
        peak = rates.dla_per_core or 0.0
    else:
        peak = rates.gpu_tensor if kernel.category in TENSOR_CATEGORIES else rates.gpu_vector
    shape = shape_factor(kernel, rates, eff, precision)
    compute = kernel.flops / (peak * factor.compute * shape) if kernel.flops and peak > 0 else 0.0
    memory = moved / (rates.bandwidth * factor.memory) if moved else 0.0
    return KernelTime(kernel, float(moved), compute, memory, overhead * 1e-6, shape)


def transitions(placed: Placed, rates: TargetRates, eff: EfficiencySet) -> List[Transition]:
    """Every tensor that changes side between GPU and DLA, with its reformat cost."""
    producer: Dict[str, str] = {t: GPU for t in placed.info.inputs}
    out: List[Transition] = []
    seen: Set[Tuple[str, str]] = set()
    bpe = BYTES[placed.precision]
    speed = rates.bandwidth * eff.transition_memory_efficiency

    def add(tensor: str, source: str, dest: str) -> None:
        if source == dest or (tensor, dest) in seen:
            return
        seen.add((tensor, dest))
        size = placed.info.size(tensor) * bpe
        out.append(Transition(tensor, source, dest, size, eff.overheads.transition_us * 1e-6 + 2.0 * size / speed))

    for kernel in placed.kernels:
        for t in kernel.inputs:
            if t in producer:
                add(t, producer[t], kernel.device)
        for t in kernel.outputs:
            producer[t] = kernel.device
    for t in placed.info.outputs:
        if t in producer:
            add(t, producer[t], GPU)
    return out


def memory(placed: Placed, moves: Sequence[Transition]) -> Memory:
    """Weights, peak activations (liveness), workspace lower bound and I/O bindings, in bytes."""
    info, precision = placed.info, placed.precision
    bpe = BYTES[precision]
    weights = 0.0
    for kernel in placed.kernels:
        weights += kernel.weight_elems * bpe
        for layer in kernel.layers:
            folded_bn = layer.category in BATCHNORM_CATEGORIES and kernel.category in TENSOR_CATEGORIES
            if not folded_bn:
                weights += layer.const_elems * (4 if precision == "fp32" else 2)
    io_names = set(info.inputs) | set(info.outputs)
    last_use: Dict[str, int] = {}
    for i, kernel in enumerate(placed.kernels):
        for t in kernel.inputs:
            last_use[t] = i
    live, peak = 0.0, 0.0
    alive: Dict[str, float] = {}
    for i, kernel in enumerate(placed.kernels):
        for t in kernel.outputs:
            if t not in io_names and t not in alive:
                alive[t] = info.size(t) * _act_bytes(kernel.category, precision)
                live += alive[t]
        peak = max(peak, live)
        for t in [t for t in alive if last_use.get(t, i) <= i]:
            live -= alive.pop(t)
    io = sum(info.size(t) * 4 for t in io_names)
    buffers = [m.bytes for m in moves]
    if precision != "fp32":
        buffers += [info.size(t) * bpe for t in io_names]
    return Memory(weights, peak, max(buffers) if buffers else 0.0, float(io))


def time_placed(placed: Placed, rates: TargetRates, eff: EfficiencySet) -> BatchEstimate:
    """Time every kernel of ``placed``: the cheap step the fitting scripts repeat with other factors."""
    kernels = [kernel_time(k, placed.info, rates, eff, placed.precision) for k in placed.kernels]
    moves = transitions(placed, rates, eff)
    return BatchEstimate(batch=placed.batch, kernels=kernels, transitions=moves, dla_subgraphs=placed.dla_subgraphs,
                         subgraph_s=placed.dla_subgraphs * eff.overheads.dla_subgraph_us * 1e-6,
                         inference_s=eff.overheads.inference_us * 1e-6, memory=memory(placed, moves))


__all__ = ["BatchEstimate", "KernelTime", "Memory", "Placed", "Transition", "batch_shapes", "kernel_time", "memory",
           "place", "read_model", "shape_factor", "time_placed", "transitions", "target_rates", "efficiency_set"]
