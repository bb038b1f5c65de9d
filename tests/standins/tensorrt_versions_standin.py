"""A stand-in for the parts of TensorRT's Python API that differ by version around execution contexts, for tests.

It is not TensorRT.  :func:`make_trt` gives a module-like object exposing only what TensorRT ``version`` has for
making a context and handing it activation ("device") memory -- nothing newer, so that code choosing by what exists
is tested against each version as it is documented:

* ``"8.5"`` / ``"8.6"``: ``engine.create_execution_context()``, ``create_execution_context_without_device_memory()``,
  ``engine.device_memory_size``, ``context.device_memory = ptr`` (a write-only property);
* ``"10.0"``: + ``trt.ExecutionContextAllocationStrategy`` and ``create_execution_context(strategy)``;
* ``"10.1"`` (and later): + ``engine.device_memory_size_v2`` and ``context.set_device_memory(ptr, size)``
  (``device_memory_size`` is deprecated there: reading it is recorded, as TensorRT warns);
* ``"none"``: a build with none of the shared-memory calls (only ``create_execution_context()``).

The engine: one input ``x`` of shape ``(-1, 4)`` float32 (optimisation profile batch 1..32) and one output ``y``
``(-1, 1)`` = twice the sum of each row.  A context executes on the host-memory CUDA stand-in
(:mod:`tests.standins.cuda_runtime_standin`): ``execute_async_v3`` queues work that reads ``x`` and writes ``y`` at
the addresses bound *when it was queued*, with the shapes set then -- so a CUDA graph captured from it replays what
it baked in, as TensorRT's would -- and fails (``cudaErrorIllegalAddress``, naming why) when it runs after its context
was given another shape or address since it was queued: TensorRT's rule is to re-capture then, and what a stale
graph would compute on a GPU is not defined.  Every context records its calls (``calls``) and every run of the work its bound
state (``engine.runs``).  What it cannot show: TensorRT's kernels, its memory use, timing.
"""

import enum
from types import SimpleNamespace
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from tests.standins.cuda_runtime_standin import StandInCudaError, cudaError_t
from tests.standins.tensorrt_standin import ILogger

MAX_BATCH = 32
FEATURES = 4
DEVICE_MEMORY = 4096  # the activation memory the stand-in engine asks for (it computes nothing there)


class _Strategy(enum.Enum):
    STATIC = 0
    ON_PROFILE_CHANGE = 1
    USER_MANAGED = 2


class StandInContextOwn:
    """``IExecutionContext`` without any way to be handed memory (the ``"none"`` build); records every call."""

    def __init__(self, engine: "StandInEngine", user_managed: bool) -> None:
        self.engine = engine
        self.user_managed = user_managed
        self.memory: Optional[Tuple[int, int]] = None
        self.shapes: Dict[str, Tuple[int, ...]] = {}
        self.addresses: Dict[str, int] = {}
        self.calls: List[Tuple[Any, ...]] = []
        self.fail_capture = False  # the context refuses to execute while its stream is captured
        self.generation = 0  # counts set_input_shape / set_tensor_address calls

    def set_input_shape(self, name: str, shape: Any) -> bool:
        shape = tuple(int(d) for d in shape)
        self.calls.append(("set_input_shape", name, shape))
        self.generation += 1
        if name != "x" or len(shape) != 2 or shape[1] != FEATURES or not 1 <= shape[0] <= MAX_BATCH:
            return False
        self.shapes[name] = shape
        return True

    def get_tensor_shape(self, name: str) -> Tuple[int, ...]:
        if name == "x":
            return self.shapes.get("x", (-1, FEATURES))
        return (self.shapes["x"][0], 1) if "x" in self.shapes else (-1, 1)

    def set_tensor_address(self, name: str, ptr: int) -> bool:
        self.calls.append(("set_tensor_address", name, int(ptr)))
        self.generation += 1
        self.addresses[name] = int(ptr)
        return int(ptr) % 256 == 0

    def _give(self, ptr: int, size: int) -> None:
        self.calls.append(("device_memory", int(ptr), int(size)))
        self.memory = (int(ptr), int(size))

    def execute_async_v3(self, stream: int) -> bool:
        device = self.engine.device
        capturing = device.capturing(stream)
        self.calls.append(("execute_async_v3", "capturing" if capturing else "now"))
        if capturing and (self.fail_capture or self.engine.fail_capture):
            return False
        if "x" not in self.shapes or set(self.addresses) != {"x", "y"}:
            return False
        if self.user_managed and (self.memory is None or self.memory[1] < self.engine.memory_need):
            return False
        state = (self.shapes["x"][0], self.addresses["x"], self.addresses["y"], self.memory, id(self))
        batch, x_ptr, y_ptr, memory = state[:4]
        generation = self.generation

        def work() -> None:  # what the engine's kernels do, with the state bound when it was queued
            if self.generation != generation:  # TensorRT: re-capture once shapes (or addresses) changed
                raise StandInCudaError(cudaError_t.cudaErrorIllegalAddress, "a graph replayed after its context was "
                                       "changed (set_input_shape / set_tensor_address since its capture)")
            if memory is not None:
                device.region(memory[0], memory[1], "device")  # the activation memory still exists
            x = np.frombuffer(device.view(x_ptr, batch * FEATURES * 4), np.float32).reshape(batch, FEATURES)
            y = np.frombuffer(device.view(y_ptr, batch * 4), np.float32)
            y[:] = 2.0 * x.sum(axis=1)
            self.engine.runs.append(state)
        device.enqueue(stream, work)
        return True


class StandInContext(StandInContextOwn):
    """``IExecutionContext`` of TensorRT 8.5/8.6/10.0: the write-only ``device_memory`` property."""

    device_memory = property(None, lambda self, ptr: self._give(ptr, self.engine.memory_need))


class StandInContextV2(StandInContext):
    """``IExecutionContext`` of TensorRT 10.1+: ``set_device_memory(ptr, size)`` as well."""

    def set_device_memory(self, memory: int, size: int) -> None:
        self._give(memory, size)


class StandInEngine:
    """``ICudaEngine`` of TensorRT 8.5/8.6: the named-tensor API and a context without device memory."""

    context_class: Any = StandInContext

    def __init__(self, device: Any) -> None:
        self.device = device
        self.memory_need = DEVICE_MEMORY
        self.contexts: List[StandInContextOwn] = []
        self.created: List[str] = []  # how each context was made
        self.runs: List[Tuple[Any, ...]] = []
        self.deprecated_reads = 0
        self.fail_capture = False  # its contexts refuse to execute while their stream is captured
        self.context_limit = 99  # TensorRT returns None for a context beyond this many (out of memory)

    num_io_tensors = 2

    def get_tensor_name(self, i: int) -> str:
        return ("x", "y")[i]

    def get_tensor_mode(self, name: str) -> Any:
        return SimpleNamespace(name="INPUT" if name == "x" else "OUTPUT")

    def get_tensor_shape(self, name: str) -> Tuple[int, ...]:
        return (-1, FEATURES) if name == "x" else (-1, 1)

    def get_tensor_dtype(self, name: str) -> Any:
        return SimpleNamespace(name="FLOAT")

    def get_tensor_profile_shape(self, name: str, profile: int) -> List[Tuple[int, ...]]:
        return [(1, FEATURES), (8, FEATURES), (MAX_BATCH, FEATURES)]

    def _context(self, how: str, user_managed: bool) -> Optional[StandInContextOwn]:
        if len(self.contexts) >= self.context_limit:
            return None
        ctx = self.context_class(self, user_managed)
        self.contexts.append(ctx)
        self.created.append(how)
        return ctx

    def create_execution_context(self) -> Optional[StandInContextOwn]:
        return self._context("default", False)

    def create_execution_context_without_device_memory(self) -> Optional[StandInContextOwn]:
        return self._context("without_device_memory", True)

    @property
    def device_memory_size(self) -> int:
        return self.memory_need


class StandInEngine10(StandInEngine):
    """TensorRT 10.0: ``create_execution_context(strategy)``."""

    def create_execution_context(self, strategy: Any = _Strategy.STATIC  # type: ignore[override]
                                 ) -> Optional[StandInContextOwn]:
        managed = strategy == _Strategy.USER_MANAGED
        return self._context("USER_MANAGED" if managed else "default", managed)


class StandInEngine101(StandInEngine10):
    """TensorRT 10.1+: ``device_memory_size_v2``; ``device_memory_size`` deprecated."""

    context_class = StandInContextV2

    @property
    def device_memory_size_v2(self) -> int:
        return self.memory_need

    @property
    def device_memory_size(self) -> int:
        self.deprecated_reads += 1
        return self.memory_need


class StandInEngineOwn(StandInEngine):
    """A build without shared-memory calls: contexts only with their own memory."""

    context_class = StandInContextOwn
    create_execution_context_without_device_memory = None  # type: ignore[assignment]


_ENGINES = {"8.5": StandInEngine, "8.6": StandInEngine, "10.0": StandInEngine10, "10.1": StandInEngine101,
            "none": StandInEngineOwn}


def make_trt(version: str, device: Any = None, num_dla_cores: int = 0) -> Any:
    """A module-like stand-in for ``import tensorrt`` of ``version`` (see the module docstring)."""
    engine_class = _ENGINES[version]
    numbers = {"8.5": "8.5.2.2", "8.6": "8.6.2.3", "10.0": "10.0.1.6", "10.1": "10.3.0.30", "none": "10.3.0.30"}
    trt = SimpleNamespace(__version__=numbers[version] + "+stand-in", ILogger=ILogger,
                          IExecutionContext=engine_class.context_class)
    if version not in ("8.5", "8.6", "none"):
        trt.ExecutionContextAllocationStrategy = _Strategy
    trt.engines = []

    class Runtime:
        num_DLA_cores = num_dla_cores

        def __init__(self, logger: Any) -> None:
            self.DLA_core = -1

        def deserialize_cuda_engine(self, data: Any) -> StandInEngine:
            engine = engine_class(device)
            trt.engines.append(engine)
            return engine

    trt.Runtime = Runtime
    return trt
