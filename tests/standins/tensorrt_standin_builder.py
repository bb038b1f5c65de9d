"""The builder half of the TensorRT stand-in (tests only): ONNX parser, network, builder config, profiles, build.

``build_serialized_network`` checks what TensorRT checks before it builds -- every dynamic input covered by an
optimisation profile whose min <= opt <= max fit the input's rank and static dimensions -- and refuses what the
stand-in cannot make: an INT8 engine (``BuilderFlag.INT8`` or an INT8 calibrator: INT8 is not executed here) and
DLA (``default_device_type = DLA``; the stand-in has 0 DLA cores).  A refusal logs an ERROR and returns None, as
TensorRT does.  What it returns is a stand-in plan (:func:`tests.standins.tensorrt_standin.serialize_plan`): the
source ONNX with a header naming the stand-in.
"""

from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from tests.standins import tensorrt_standin as trt


class StandInTensor:
    """``ITensor`` of a parsed network: name, shape (-1 = dynamic) and dtype."""

    def __init__(self, name: str, shape: Tuple[int, ...], dtype: Any) -> None:
        self.name = name
        self.shape = shape
        self.dtype = dtype


class StandInLayer:
    """``ILayer``: one per ONNX node; ``precision`` is recorded (and ignored: no TensorRT kernels run here)."""

    def __init__(self, name: str, op: str) -> None:
        self.name = name
        self.type = op
        self.precision = trt.DataType.FLOAT


class StandInNetwork:
    """``INetworkDefinition`` as the ONNX parser fills it."""

    def __init__(self, flags: int) -> None:
        self.flags = flags
        self.inputs: List[StandInTensor] = []
        self.outputs: List[StandInTensor] = []
        self.layers: List[StandInLayer] = []
        self.onnx_bytes = b""

    num_inputs = property(lambda self: len(self.inputs))
    num_outputs = property(lambda self: len(self.outputs))
    num_layers = property(lambda self: len(self.layers))

    def get_input(self, i: int) -> StandInTensor:
        return self.inputs[i]

    def get_output(self, i: int) -> StandInTensor:
        return self.outputs[i]

    def get_layer(self, i: int) -> StandInLayer:
        return self.layers[i]


class StandInOnnxParser:
    """``OnnxParser(network, logger)``: fills the network from an ONNX file (with the onnx package)."""

    def __init__(self, network: StandInNetwork, logger: Any) -> None:
        self.network = network
        self.logger = logger
        self.errors: List[str] = []

    @property
    def num_errors(self) -> int:
        return len(self.errors)

    def get_error(self, i: int) -> str:
        return self.errors[i]

    def parse_from_file(self, path: str) -> bool:
        try:
            data = Path(path).read_bytes()
        except OSError as err:
            self.errors.append("cannot read %s: %s" % (path, err))
            return False
        return self.parse(data, path=path)

    def parse(self, data: bytes, path: Optional[str] = None) -> bool:
        import onnx

        try:
            model = onnx.load_from_string(bytes(data)) if path is None else onnx.load(path)
        except Exception as err:  # a file that is not ONNX: the parser's error, not a crash
            self.errors.append("%s: %s" % (type(err).__name__, err))
            return False
        weights = {i.name for i in model.graph.initializer}

        def tensor(value: Any) -> Optional[StandInTensor]:
            t = value.type.tensor_type
            if t.elem_type not in trt.ONNX_ELEM:
                self.errors.append("tensor %r has ONNX type %d, which the stand-in does not map" % (value.name,
                                                                                                   t.elem_type))
                return None
            dims = tuple(int(d.dim_value) if d.HasField("dim_value") else -1 for d in t.shape.dim)
            return StandInTensor(value.name, dims, trt.ONNX_ELEM[t.elem_type])

        net = self.network
        net.inputs = [tensor(v) for v in model.graph.input if v.name not in weights]
        net.outputs = [tensor(v) for v in model.graph.output]
        if self.errors:
            return False
        net.layers = [StandInLayer(n.name or "%s_%d" % (n.op_type, i), n.op_type) for i, n in
                      enumerate(model.graph.node)]
        net.onnx_bytes = model.SerializeToString()
        return True


OnnxParser = StandInOnnxParser


class StandInOptimizationProfile:
    """``IOptimizationProfile``: ``set_shape(name, min, opt, max)``."""

    def __init__(self) -> None:
        self.shapes: Dict[str, Dict[str, List[int]]] = {}

    def set_shape(self, name: str, min: Any, opt: Any, max: Any) -> None:  # noqa: A002 - TensorRT's names
        self.shapes[name] = {"min": [int(d) for d in min], "opt": [int(d) for d in opt],
                             "max": [int(d) for d in max]}

    def get_shape(self, name: str) -> List[Tuple[int, ...]]:
        s = self.shapes[name]
        return [tuple(s["min"]), tuple(s["opt"]), tuple(s["max"])]


class StandInTimingCache:
    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)

    def serialize(self) -> bytes:
        return self.data


class StandInBuilderConfig:
    """``IBuilderConfig``: records what jetforge sets; the build reads flags, device and profiles from it."""

    def __init__(self) -> None:
        self.flags: List[Any] = []
        self.profiles: List[StandInOptimizationProfile] = []
        self.pools: Dict[Any, int] = {}
        self.int8_calibrator: Any = None
        self.default_device_type = trt.DeviceType.GPU
        self.DLA_core = -1
        self.builder_optimization_level = 3
        self.profiling_verbosity = trt.ProfilingVerbosity.LAYER_NAMES_ONLY
        self._timing: Optional[StandInTimingCache] = None

    def set_flag(self, flag: Any) -> None:
        self.flags.append(flag)

    def get_flag(self, flag: Any) -> bool:
        return flag in self.flags

    def set_memory_pool_limit(self, pool: Any, size: int) -> None:
        self.pools[pool] = int(size)

    def add_optimization_profile(self, profile: StandInOptimizationProfile) -> int:
        self.profiles.append(profile)
        return len(self.profiles) - 1

    def can_run_on_DLA(self, layer: Any) -> bool:  # noqa: N802
        return False

    def create_timing_cache(self, data: bytes) -> StandInTimingCache:
        return StandInTimingCache(data)

    def set_timing_cache(self, cache: StandInTimingCache, ignore_mismatch: bool) -> bool:
        self._timing = cache
        return True

    def get_timing_cache(self) -> Optional[StandInTimingCache]:
        return self._timing


class StandInBuilder:
    """``trt.Builder(logger)``: network, config and profiles, and ``build_serialized_network``."""

    num_DLA_cores = 0
    platform_has_fast_fp16 = False
    platform_has_fast_int8 = False

    def __init__(self, logger: Any) -> None:
        self.logger = logger

    def create_network(self, flags: int = 0) -> StandInNetwork:
        return StandInNetwork(flags)

    def create_builder_config(self) -> StandInBuilderConfig:
        return StandInBuilderConfig()

    def create_optimization_profile(self) -> StandInOptimizationProfile:
        return StandInOptimizationProfile()

    def build_serialized_network(self, network: StandInNetwork, config: StandInBuilderConfig) -> Optional[bytes]:
        reason = self._refusal(network, config)
        if reason:
            trt._error(self.logger, "build_serialized_network: %s" % reason)
            return None
        io = [{"name": t.name, "mode": "INPUT", "shape": list(t.shape), "dtype": t.dtype.name} for t in network.inputs]
        io += [{"name": t.name, "mode": "OUTPUT", "shape": list(t.shape), "dtype": t.dtype.name}
               for t in network.outputs]
        meta = {"io": io, "profiles": [p.shapes for p in config.profiles],
                "flags": sorted(f.name for f in config.flags),
                "layers": [{"name": l.name, "op": l.type} for l in network.layers]}
        self.logger.log(trt.ILogger.Severity.WARNING, "[%s] built a stand-in plan: the source ONNX, run by ONNX "
                                                      "Runtime in FP32 on the CPU (flags %s not applied)"
                        % (trt.STAND_IN, ", ".join(meta["flags"]) or "none"))
        return trt.serialize_plan(meta, network.onnx_bytes)

    @staticmethod
    def _refusal(network: StandInNetwork, config: StandInBuilderConfig) -> str:
        if trt.BuilderFlag.INT8 in config.flags or config.int8_calibrator is not None:
            return "INT8 is not executed by the stand-in: no INT8 engine can be built here"
        if config.default_device_type == trt.DeviceType.DLA:
            return "DLA is not available (the stand-in has 0 DLA cores)"
        if not network.outputs:
            return "the network has no outputs"
        for t in network.inputs:
            covered = [p.shapes[t.name] for p in config.profiles if t.name in p.shapes]
            if any(d < 0 for d in t.shape) and len(covered) < max(1, len(config.profiles)):
                return ("input %r has dynamic dimensions %s but no optimization profile defines its shapes"
                        % (t.name, t.shape))
            for rng in covered:
                lo, opt, hi = rng["min"], rng["opt"], rng["max"]
                if not len(lo) == len(opt) == len(hi) == len(t.shape):
                    return "profile shapes of %r have the wrong rank for %s" % (t.name, t.shape)
                if any(not a <= b <= c for a, b, c in zip(lo, opt, hi)):
                    return "profile of %r needs min <= opt <= max, got %s %s %s" % (t.name, lo, opt, hi)
                if any(s >= 0 and not a == b == c == s for s, a, b, c in zip(t.shape, lo, opt, hi)):
                    return "profile of %r disagrees with its static dimensions %s" % (t.name, t.shape)
        return ""


Builder = StandInBuilder
