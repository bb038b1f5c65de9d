"""A TensorRT stand-in for tests: the subset of TensorRT's Python API jetforge calls, executing ONNX Runtime on the CPU.

It is not TensorRT.  Its "engine" (a stand-in plan) is a header saying so, the build facts (I/O tensors, the
optimisation profile, the builder flags) and the source ONNX; "executing" it runs that ONNX in ONNX Runtime on the
CPU, reading inputs from and writing outputs to the memory of :mod:`tests.standins.cuda_runtime_standin` at the
addresses ``set_tensor_address`` bound.  Its ``__version__`` is ``10.3.0+stand-in``, so every version jetforge
prints or records (build report, engine sidecar, ``board-check.json``, ``TrtSession.describe()``) names it.

Runtime side (:class:`StandInRuntime`, :class:`StandInEngine`, :class:`StandInExecutionContext`): it fails where
TensorRT does -- a plan of another kind or version does not deserialize (None, an error logged), an input shape
of the wrong rank, against a static dimension or outside optimisation profile 0 is refused by ``set_input_shape``
(False), ``execute_async_v3`` returns False when a dynamic input's shape or any tensor's address is unset, output
shapes stay -1 until the input shapes are known.  Activation ("device") memory as TensorRT 10.1+ hands it out: a
context made with ``ExecutionContextAllocationStrategy.USER_MANAGED`` (or ``create_execution_context_without_device
_memory``) executes only once ``set_device_memory(ptr, size)`` / ``device_memory = ptr`` gave it device memory of at
least ``device_memory_size_v2`` bytes, which must still be allocated whenever its work runs (a graph replay
included); the stand-in's engine computes nothing in that memory, so it shows that the memory is given and alive,
not what TensorRT keeps there.  Builder side: :mod:`tests.standins.tensorrt_standin_builder`.

What it cannot show, and does not pretend to: TensorRT's kernels, fusions and FP16 arithmetic (an FP16 "engine"
computes in FP32), INT8 (the builder refuses the INT8 flag: no INT8 engine exists here), DLA (0 DLA cores), and
any timing (the CUDA stand-in measures none).
"""

import enum
import json
import struct
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

__version__ = "10.3.0+stand-in"
STAND_IN = "TensorRT stand-in (ONNX Runtime on the CPU; not TensorRT)"
PLAN_MAGIC = b"JETFORGE-TENSORRT-STAND-IN-PLAN\n"  # a stand-in plan, not a TensorRT engine


class DataType(enum.Enum):
    FLOAT = 0
    HALF = 1
    INT8 = 2
    INT32 = 3
    BOOL = 4
    UINT8 = 5
    INT64 = 8


NUMPY = {DataType.FLOAT: "float32", DataType.HALF: "float16", DataType.INT8: "int8", DataType.INT32: "int32",
         DataType.BOOL: "bool", DataType.UINT8: "uint8", DataType.INT64: "int64"}
ONNX_ELEM = {1: DataType.FLOAT, 10: DataType.HALF, 3: DataType.INT8, 6: DataType.INT32, 9: DataType.BOOL,
             2: DataType.UINT8, 7: DataType.INT64}


class TensorIOMode(enum.Enum):
    NONE = 0
    INPUT = 1
    OUTPUT = 2


class ExecutionContextAllocationStrategy(enum.Enum):
    STATIC = 0
    ON_PROFILE_CHANGE = 1
    USER_MANAGED = 2


#: The activation memory a stand-in engine asks of a USER_MANAGED context (it uses none: a size to check against).
STAND_IN_DEVICE_MEMORY = 64 * 1024


class TensorFormat(enum.Enum):
    LINEAR = 0


class BuilderFlag(enum.Enum):
    FP16 = 0
    INT8 = 1
    DEBUG = 2
    GPU_FALLBACK = 3
    REFIT = 5
    PREFER_PRECISION_CONSTRAINTS = 11
    OBEY_PRECISION_CONSTRAINTS = 12
    SPARSE_WEIGHTS = 7


class MemoryPoolType(enum.Enum):
    WORKSPACE = 0
    DLA_MANAGED_SRAM = 1
    DLA_LOCAL_DRAM = 2
    DLA_GLOBAL_DRAM = 3
    TACTIC_DRAM = 4


class DeviceType(enum.Enum):
    GPU = 0
    DLA = 1


class ProfilingVerbosity(enum.Enum):
    LAYER_NAMES_ONLY = 0
    NONE = 1
    DETAILED = 2


class LayerInformationFormat(enum.Enum):
    ONELINE = 0
    JSON = 1


class NetworkDefinitionCreationFlag(enum.Enum):
    EXPLICIT_BATCH = 0


class ILogger:
    """TensorRT's logger base class (jetforge subclasses it and overrides ``log``)."""

    class Severity(enum.Enum):
        INTERNAL_ERROR = 0
        ERROR = 1
        WARNING = 2
        INFO = 3
        VERBOSE = 4

    def __init__(self) -> None:
        pass

    def log(self, severity: Any, msg: str) -> None:  # noqa: A003
        pass


class IInt8EntropyCalibrator2:
    """Exists so that jetforge's cache-serving calibrator can subclass it; the stand-in builds no INT8 engine."""

    def __init__(self) -> None:
        pass


def _error(logger: Any, message: str) -> None:
    logger.log(ILogger.Severity.ERROR, "[%s] %s" % (STAND_IN, message))


# ---------------------------------------------------------------------------------------------------------- plan
def serialize_plan(meta: Dict[str, Any], onnx_bytes: bytes) -> bytes:
    """The stand-in plan: magic line, 4-byte header length, JSON header (I/O, profile, flags), source ONNX."""
    header = json.dumps(dict(meta, stand_in=STAND_IN, version=__version__), sort_keys=True).encode()
    return PLAN_MAGIC + struct.pack("<I", len(header)) + header + onnx_bytes


def parse_plan(data: bytes) -> Tuple[Dict[str, Any], bytes]:
    """``(header, onnx bytes)``; ValueError naming why for anything that is not a stand-in plan."""
    data = bytes(data)
    if not data.startswith(PLAN_MAGIC):
        raise ValueError("not a stand-in plan (no %r header): a real TensorRT engine cannot run here" % PLAN_MAGIC)
    at = len(PLAN_MAGIC)
    (size,) = struct.unpack("<I", data[at:at + 4])
    header = json.loads(data[at + 4:at + 4 + size].decode())
    return header, data[at + 4 + size:]


# ------------------------------------------------------------------------------------------------------- runtime
class StandInRuntime:
    """``trt.Runtime(logger)``: deserializes stand-in plans of this version only (like TensorRT)."""

    num_DLA_cores = 0

    def __init__(self, logger: Any) -> None:
        self.logger = logger
        self._dla_core = -1

    @property
    def DLA_core(self) -> int:  # noqa: N802 - TensorRT's name
        return self._dla_core

    @DLA_core.setter
    def DLA_core(self, core: int) -> None:  # noqa: N802
        raise RuntimeError("%s: no DLA core %d (the stand-in has 0 DLA cores)" % (STAND_IN, core))

    def deserialize_cuda_engine(self, data: Any) -> Optional["StandInEngine"]:
        try:
            header, onnx_bytes = parse_plan(bytes(memoryview(data)))
        except (ValueError, struct.error, UnicodeDecodeError) as err:
            _error(self.logger, "deserialize_cuda_engine: %s" % err)
            return None
        if header.get("version") != __version__:
            _error(self.logger, "the plan was built by version %s; this is %s (plans do not load across versions)"
                   % (header.get("version"), __version__))
            return None
        return StandInEngine(header, onnx_bytes, self.logger)


Runtime = StandInRuntime


class StandInEngine:
    """``ICudaEngine`` over a stand-in plan: the named-tensor API, profile 0, an inspector."""

    def __init__(self, header: Dict[str, Any], onnx_bytes: bytes, logger: Any) -> None:
        self.header = header
        self.onnx_bytes = onnx_bytes
        self.logger = logger
        self.io: List[Dict[str, Any]] = header["io"]
        self._by_name = {t["name"]: t for t in self.io}
        self.num_optimization_profiles = max(1, len(header.get("profiles", [])))
        self._session: Any = None

    @property
    def num_io_tensors(self) -> int:
        return len(self.io)

    def get_tensor_name(self, index: int) -> str:
        return str(self.io[index]["name"])

    def get_tensor_mode(self, name: str) -> TensorIOMode:
        t = self._by_name.get(name)
        return TensorIOMode.NONE if t is None else TensorIOMode[t["mode"]]

    def get_tensor_shape(self, name: str) -> Tuple[int, ...]:
        return tuple(self._by_name[name]["shape"])

    def get_tensor_dtype(self, name: str) -> DataType:
        return DataType[self._by_name[name]["dtype"]]

    def get_tensor_format(self, name: str) -> TensorFormat:
        return TensorFormat.LINEAR

    def get_tensor_profile_shape(self, name: str, profile_index: int) -> List[Tuple[int, ...]]:
        profiles = self.header.get("profiles", [])
        if profile_index >= len(profiles) or name not in profiles[profile_index]:
            raise RuntimeError("%s: tensor %r has no shapes in optimization profile %d" % (STAND_IN, name,
                                                                                             profile_index))
        rng = profiles[profile_index][name]
        return [tuple(rng["min"]), tuple(rng["opt"]), tuple(rng["max"])]

    def create_execution_context(self, strategy: Any = ExecutionContextAllocationStrategy.STATIC
                                 ) -> "StandInExecutionContext":
        return StandInExecutionContext(self, user_managed=strategy == ExecutionContextAllocationStrategy.USER_MANAGED)

    def create_execution_context_without_device_memory(self) -> "StandInExecutionContext":
        """Deprecated in TensorRT 10.0 (kept there, as here); the 8.x way to a context without memory."""
        return StandInExecutionContext(self, user_managed=True)

    @property
    def device_memory_size_v2(self) -> int:
        return STAND_IN_DEVICE_MEMORY

    @property
    def device_memory_size(self) -> int:  # deprecated in TensorRT 10.1 for device_memory_size_v2
        return STAND_IN_DEVICE_MEMORY

    def create_engine_inspector(self) -> "StandInEngineInspector":
        return StandInEngineInspector(self)

    def session(self) -> Any:
        """The ONNX Runtime session that stands in for the engine's kernels (CPU, one thread)."""
        if self._session is None:
            import onnxruntime as ort

            opts = ort.SessionOptions()
            opts.intra_op_num_threads = 1
            self._session = ort.InferenceSession(self.onnx_bytes, opts, providers=["CPUExecutionProvider"])
        return self._session


class StandInEngineInspector:
    """``IEngineInspector``: one "layer" per ONNX node, each saying it ran in the stand-in, not in TensorRT."""

    def __init__(self, engine: StandInEngine) -> None:
        self.engine = engine

    def get_engine_information(self, fmt: Any) -> str:
        layers = [{"Name": n["name"], "LayerType": n["op"], "TacticName": "stand-in: ONNX Runtime CPU, not TensorRT",
                   "Inputs": [], "Outputs": []} for n in self.engine.header.get("layers", [])]
        return json.dumps({"Layers": layers, "Bindings": [t["name"] for t in self.engine.io]})


class StandInExecutionContext:
    """``IExecutionContext``: input shapes, tensor addresses, ``execute_async_v3`` on a stand-in CUDA stream."""

    def __init__(self, engine: StandInEngine, user_managed: bool = False) -> None:
        self.engine = engine
        self.user_managed = user_managed
        self.device_memory_at: Optional[Tuple[int, int]] = None  # (pointer, size) a USER_MANAGED context was given
        self.shapes: Dict[str, Tuple[int, ...]] = {t["name"]: tuple(t["shape"]) for t in engine.io
                                                   if t["mode"] == "INPUT"}
        self.addresses: Dict[str, int] = {}
        self._out_shapes: Dict[Tuple[Tuple[int, ...], ...], Dict[str, Tuple[int, ...]]] = {}
        self.executions = 0

    def _fail(self, message: str) -> bool:
        _error(self.engine.logger, message)
        return False

    def set_input_shape(self, name: str, shape: Sequence[int]) -> bool:
        t = self.engine._by_name.get(name)
        if t is None or t["mode"] != "INPUT":
            return self._fail("set_input_shape: %r is not an input tensor" % name)
        shape = tuple(int(d) for d in shape)
        static = tuple(t["shape"])
        if len(shape) != len(static) or any(s >= 0 and s != g for s, g in zip(static, shape)):
            return self._fail("set_input_shape: %s does not fit %r's dimensions %s" % (shape, name, static))
        if any(s < 0 for s in static):
            lo, _, hi = self.engine.get_tensor_profile_shape(name, 0)
            if any(g < a or g > b for g, a, b in zip(shape, lo, hi)):
                return self._fail("set_input_shape: %s is outside optimization profile 0 (%s..%s) of %r"
                                  % (shape, lo, hi, name))
        self.shapes[name] = shape
        return True

    def _inputs_known(self) -> bool:
        return all(d >= 0 for s in self.shapes.values() for d in s)

    def get_tensor_shape(self, name: str) -> Tuple[int, ...]:
        t = self.engine._by_name[name]
        if t["mode"] == "INPUT":
            return self.shapes[name]
        if not self._inputs_known():
            return tuple(t["shape"])
        return self._output_shapes()[name]

    def _output_shapes(self) -> Dict[str, Tuple[int, ...]]:
        """Each output's shape for the bound input shapes: static ones from the build, else from one run on zeros."""
        key = tuple(self.shapes[n] for n in sorted(self.shapes))
        if key not in self._out_shapes:
            outs = [t for t in self.engine.io if t["mode"] == "OUTPUT"]
            shapes = {t["name"]: tuple(t["shape"]) for t in outs}
            if any(d < 0 for s in shapes.values() for d in s):
                feeds = {n: np.zeros(s, self._dtype(n)) for n, s in self.shapes.items()}
                ran = self.engine.session().run([t["name"] for t in outs], feeds)
                shapes = {t["name"]: tuple(int(d) for d in r.shape) for t, r in zip(outs, ran)}
            self._out_shapes[key] = shapes
        return self._out_shapes[key]

    def _dtype(self, name: str) -> str:
        return NUMPY[DataType[self.engine._by_name[name]["dtype"]]]

    def set_tensor_address(self, name: str, ptr: int) -> bool:
        if name not in self.engine._by_name:
            return self._fail("set_tensor_address: no tensor %r" % name)
        if int(ptr) % 256:
            return self._fail("set_tensor_address: 0x%x of %r is not 256-byte aligned" % (ptr, name))
        self.addresses[name] = int(ptr)
        return True

    def get_tensor_address(self, name: str) -> int:
        return self.addresses.get(name, 0)

    def set_device_memory(self, memory: int, size: int) -> None:
        """TensorRT 10.1+: the context's activation memory (256-byte aligned, at least device_memory_size_v2)."""
        if int(memory) % 256 or int(size) < self.engine.device_memory_size_v2:
            _error(self.engine.logger, "set_device_memory: 0x%x (%d bytes) is not 256-byte aligned memory of at least "
                   "%d bytes" % (int(memory), int(size), self.engine.device_memory_size_v2))
            return
        self.device_memory_at = (int(memory), int(size))

    def _set_device_memory_v1(self, memory: int) -> None:
        self.device_memory_at = (int(memory), self.engine.device_memory_size_v2)

    #: TensorRT 8.x/10.0 (a write-only property: reading it raises, as pybind11's does)
    device_memory = property(None, _set_device_memory_v1)

    def execute_async_v3(self, stream_handle: int) -> bool:
        from tests.standins import active_cuda_device

        if not self._inputs_known():
            return self._fail("execute_async_v3: input shapes not set: %s" % self.shapes)
        unset = [t["name"] for t in self.engine.io if t["name"] not in self.addresses]
        if unset:
            return self._fail("execute_async_v3: no address set for %s" % ", ".join(unset))
        if self.user_managed and self.device_memory_at is None:
            return self._fail("execute_async_v3: a USER_MANAGED context has no device memory (set_device_memory)")
        device = active_cuda_device()
        shapes = dict(self.shapes)
        shapes.update(self._output_shapes())
        io = [(t["name"], self.addresses[t["name"]], shapes[t["name"]], self._dtype(t["name"])) for t in self.engine.io]
        inputs = [x for x, t in zip(io, self.engine.io) if t["mode"] == "INPUT"]
        outputs = [x for x, t in zip(io, self.engine.io) if t["mode"] == "OUTPUT"]
        memory = self.device_memory_at if hasattr(device, "region") else None  # host-memory CUDA: check it lives

        def compute(feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
            if memory is not None:  # when the work runs (a replayed graph included), not only when it is queued
                device.region(memory[0], memory[1], "device")
            return self._compute(feeds)
        try:  # the device runs _compute on the stream: at once, or when a captured graph is launched
            if memory is not None:
                device.region(memory[0], memory[1], "device")
            device.execute(stream_handle, inputs, outputs, compute)
        except Exception as err:  # a bad stream, a bad address: TensorRT reports and returns False
            return self._fail("execute_async_v3: %s" % err)
        return True

    def _compute(self, feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """The engine's arithmetic: the source ONNX in ONNX Runtime (inputs and outputs as host arrays)."""
        outs = [t["name"] for t in self.engine.io if t["mode"] == "OUTPUT"]
        results = {}
        for name, value in zip(outs, self.engine.session().run(outs, feeds)):
            results[name] = np.ascontiguousarray(value, dtype=self._dtype(name))
        self.executions += 1
        return results

IExecutionContext = StandInExecutionContext
ICudaEngine = StandInEngine

from tests.standins.tensorrt_standin_builder import (Builder, OnnxParser, StandInBuilder,  # noqa: E402,F401
                                                     StandInOnnxParser)
