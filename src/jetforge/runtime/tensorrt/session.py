"""The TensorRT backend: a serialized engine (``.engine``/``.plan``) run through the named-tensor API.

Written against the documented TensorRT Python API common to 8.5, 8.6 (JetPack 5/6.0)
and 10.x (JetPack 6.1+): ``runtime.DLA_core`` set before ``deserialize_cuda_engine``,
``engine.num_io_tensors`` / ``get_tensor_name`` / ``get_tensor_mode`` /
``get_tensor_shape`` / ``get_tensor_dtype`` / ``get_tensor_profile_shape``,
``context.set_input_shape`` / ``set_tensor_address`` / ``execute_async_v3(stream)``.
Device buffers, pinned host buffers, the stream, events and CUDA graphs come from
:mod:`jetforge.runtime.cuda` (cuda-python).

One call: inputs are copied into pinned buffers, then host-to-device copies, the
engine (a replayed CUDA graph once one is captured for these input shapes) and
device-to-host copies are queued on the session's own stream.  A graph is captured
after a warm-up enqueue (trtexec's pattern), re-captured when input shapes change,
and a capture TensorRT or CUDA refuses falls back to plain enqueue with a warning and
``info()["cuda_graph"] == "fallback: <reason>"``.

Every decision -- dtype mapping, I/O discovery, shape binding, profile checks,
buffer sizing -- is a plain function of :mod:`.session_logic`, tested on the CPU with
``FakeTrtContext`` (tests/runtime/trt/test_trt_session_logic.py); the class only wires them to
TensorRT and CUDA.  Nothing here imports tensorrt or cuda-python at module import time.

Device input (the GPU video path, issue 15): :meth:`TrtSession.infer_device` /
:meth:`TrtSession.submit_device` take inputs that are already in GPU memory (:class:`DeviceTensor`: a device
pointer, shape and dtype; e.g. the preprocessing kernel's output buffer) and bind them to the engine with
``context.set_tensor_address`` -- no host copy, no device-to-device copy.  The work waits for the producer's
stream through an event (``cudaStreamWaitEvent``), runs on the session's stream, and only the outputs come back
to pinned host memory.  What it decides (names, shapes against the profile, dtype, 256-byte alignment, which
addresses changed, the graph key that includes the addresses a graph bakes in) is :class:`DeviceInputBinder`,
tested on the CPU with ``FakeTrtContext``; the CUDA half is **written against TensorRT's documented API and not
executed here** (no TensorRT GPU in CI or on the lent H200's image).

It is the ``"tensorrt"`` session backend: ``runtime/session/__init__.py`` registers
``"jetforge.runtime.tensorrt.session:TrtSession"`` lazily, so this module is imported only when an
engine is opened.
"""

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from jetforge.errors import BackendError, InputFileError, ModelError
from jetforge.optional import require
from jetforge.runtime.cuda.policy import CAPTURE, LAUNCH, GraphPolicy, shape_key
from jetforge.runtime.session.base import InferRequest, Session
from jetforge.runtime.tensorrt.library import load_tensorrt, version_string
from jetforge.runtime.tensorrt.logger import make_logger
from jetforge.runtime.tensorrt.session_logic import (EngineIO, bind_input_shapes, buffers_to_grow, check_input_shape,
                                                     engine_io, initial_buffer_sizes, initial_graph_state,
                                                     load_engine_sidecar, required_bytes, resolve_dla_core,
                                                     resolve_output_shapes)

log = logging.getLogger(__name__)


# TensorRT's setTensorAddress: "The pointer must have at least 256-byte alignment" (cudaMalloc gives 256).
TENSOR_ALIGNMENT = 256


@dataclass(frozen=True)
class DeviceTensor:
    """An input already in GPU memory: a device pointer to a dense row-major array of ``shape`` and ``dtype``
    (a numpy dtype name), valid until the work of the call that takes it has finished."""

    ptr: int
    shape: Tuple[int, ...]
    dtype: str


class DeviceInputBinder:
    """The decisions of a device-input call, as plain logic over the execution context (tested on the CPU).

    ``bind(context, inputs, engine_inputs)`` checks every input (names, shape against the engine and its profile,
    dtype, pointer), sets the input shapes that changed, points the context at the caller's buffers with
    ``set_tensor_address`` (only those that moved) and returns ``(shapes, moved, key)``: ``moved`` says a captured
    graph (which bakes in the old addresses) is stale; ``key`` is the graph key (shapes and addresses).
    ``rebind_own(context, own)`` points the inputs back at the session's own buffers before a host-input call.
    """

    def __init__(self) -> None:
        self.shapes: Dict[str, Tuple[int, ...]] = {}  # what set_input_shape was last given
        self.addresses: Dict[str, int] = {}  # what set_tensor_address was last given

    def bind(self, context: Any, inputs: Mapping[str, DeviceTensor],
             engine_inputs: Sequence[EngineIO]) -> Tuple[Dict[str, Tuple[int, ...]], bool, Any]:
        names = sorted(t.name for t in engine_inputs)
        if sorted(inputs) != names:
            raise ModelError("device inputs %s do not match the engine's inputs %s" % (sorted(inputs), names),
                             hint="pass one DeviceTensor per engine input, by name")
        shapes = {t.name: check_device_input(t, inputs[t.name]) for t in engine_inputs}
        changed = bind_input_shapes(context, shapes, self.shapes)
        moved = self.point(context, {name: int(inputs[name].ptr) for name in names})
        return shapes, bool(changed) or moved, (shape_key(shapes), tuple(sorted(self.addresses.items())))

    def point(self, context: Any, addresses: Mapping[str, int]) -> bool:
        """``set_tensor_address`` for each tensor whose address differs from the bound one; True if any moved."""
        moved = False
        for name, ptr in sorted(addresses.items()):
            if self.addresses.get(name) == ptr:
                continue
            if not context.set_tensor_address(name, int(ptr)):
                raise BackendError("TensorRT refused the device address 0x%x of tensor %r" % (ptr, name),
                                   hint="the pointer must be device memory of this GPU, %d-byte aligned"
                                        % TENSOR_ALIGNMENT)
            self.addresses[name] = int(ptr)
            moved = True
        return moved

    def rebind_own(self, context: Any, own: Mapping[str, int]) -> bool:
        return self.point(context, own)


def check_device_input(tensor: EngineIO, value: DeviceTensor) -> Tuple[int, ...]:
    """The shape of a device input after the checks a host feed gets (and those only a pointer needs)."""
    if not isinstance(value, DeviceTensor):
        raise ModelError("device input %r must be a DeviceTensor(ptr, shape, dtype), got %s"
                         % (tensor.name, type(value).__name__))
    shape = tuple(int(d) for d in value.shape)
    check_input_shape(tensor, shape)
    if np.dtype(value.dtype) != np.dtype(tensor.dtype):
        raise ModelError("device input %r is %s but the engine takes %s (nothing converts it on the device)"
                         % (tensor.name, np.dtype(value.dtype).name, tensor.dtype),
                         hint="make the preprocessing kernel write %s (out_dtype)" % tensor.dtype)
    ptr = int(value.ptr)
    if ptr <= 0:
        raise ModelError("device input %r has no device pointer (0)" % tensor.name)
    if ptr % TENSOR_ALIGNMENT:
        raise ModelError("device input %r at 0x%x is not %d-byte aligned, as TensorRT requires"
                         % (tensor.name, ptr, TENSOR_ALIGNMENT),
                         hint="pass the start of a cudaMalloc'ed buffer, or an offset that is a multiple of %d"
                              % TENSOR_ALIGNMENT)
    return shape


class _Pending:
    """What a submitted call left on the stream: output shapes and its completion event."""

    def __init__(self, shapes: Dict[str, Tuple[int, ...]], timed: bool) -> None:
        self.shapes = shapes
        self.timed = timed
        self.outputs: Optional[Dict[str, np.ndarray]] = None


class TrtSession(Session):
    """A TensorRT engine with its own stream, pinned/device buffers and (by default) CUDA graphs."""

    name = "tensorrt"
    display_name = "TensorRT"
    suffixes = (".engine", ".plan", ".trt")
    option_names = ("dla_core", "cuda_graph", "verify_sidecar")
    timing_source = "cuda events"

    def __init__(self, path: Path, trt: Any, runtime: Any, engine: Any, context: Any, io: List[EngineIO],
                 sidecar: Any, dla_core: Optional[int], policy: GraphPolicy) -> None:
        from jetforge.runtime import cuda

        self._trt = trt
        self._runtime = runtime
        self._engine = engine
        self._context = context
        self._io = io
        self._inputs = [t for t in io if t.is_input]
        self._outputs = [t for t in io if not t.is_input]
        self._dtypes = {t.name: t.dtype for t in io}
        self.dla_core = dla_core
        self.policy = policy
        self._cuda = cuda
        self._stream = cuda.Stream()
        self._events = [cuda.Event() for _ in range(4)]  # before h2d, after h2d, after compute, after d2h
        self._device: Dict[str, Any] = {}
        self._host: Dict[str, Any] = {}
        self._capacity: Dict[str, int] = {}
        self._binder = DeviceInputBinder()  # input shapes and tensor addresses bound on the context
        self._bound = self._binder.shapes
        self._input_ready = cuda.Event(timing=False)  # the producer's stream -> this session's stream
        self._out_shapes: Dict[str, Tuple[int, ...]] = {}
        self._graphs: Dict[Any, Any] = {}
        self._pending: Optional[_Pending] = None
        super().__init__(path, [t.spec for t in self._inputs], [t.spec for t in self._outputs], sidecar)
        self._allocate(initial_buffer_sizes(io))

    @classmethod
    def open(cls, path: Path, dla_core: Optional[int] = None, cuda_graph: bool = True,
             verify_sidecar: bool = True) -> "TrtSession":
        trt = load_tensorrt(purpose="running TensorRT engines")
        require("cuda", "TensorRT sessions (device buffers, streams, CUDA graphs through cuda-python)")
        version = version_string(trt)
        sidecar = load_engine_sidecar(path, verify_sidecar, version)
        runtime = trt.Runtime(make_logger(trt, keep=False, forward="VERBOSE", log=log))
        core = resolve_dla_core(dla_core, getattr(sidecar, "dla_core", None), getattr(sidecar, "device", None),
                                int(getattr(runtime, "num_DLA_cores", 0)))
        if core is not None:
            runtime.DLA_core = core  # must be set before deserializing (IRuntime::setDLACore)
        try:
            data = path.read_bytes()
        except OSError as err:
            raise InputFileError("cannot read engine %s: %s" % (path, err)) from err
        engine = runtime.deserialize_cuda_engine(data)
        if engine is None:
            raise ModelError("TensorRT %s cannot load %s (see the TensorRT error above)" % (version, path.name),
                             hint="engines load only with the TensorRT version and GPU/DLA they were built for: "
                                  "rebuild with `jetforge build` on this machine")
        context = engine.create_execution_context()
        if context is None:
            raise BackendError("TensorRT could not create an execution context for %s" % path.name,
                               hint="free GPU memory (the context allocates the engine's activations)")
        enabled, reason = initial_graph_state(cuda_graph, core, version)
        policy = GraphPolicy(enabled=cuda_graph, max_graphs=1)
        if cuda_graph and not enabled:
            policy.fall_back(reason)
            log.info("%s: %s", path.name, reason)
        session = cls(path, trt, runtime, engine, context, engine_io(engine), sidecar, core, policy)
        log.debug("opened %r", session)
        return session

    # -- execution ------------------------------------------------------------------------
    def _run(self, feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        return self._collect(self._enqueue(feeds, self._timing))

    def _submit(self, feeds: Dict[str, np.ndarray]) -> InferRequest:
        pending = self._enqueue(feeds, self._timing)
        return InferRequest(self, lambda timeout: self._collect(pending), self._events[3].query)

    def _enqueue(self, feeds: Dict[str, np.ndarray], timed: bool) -> _Pending:
        if self._pending is not None:  # a submitted call not yet waited on: its outputs leave the buffers first
            self._collect(self._pending)
        shapes = {t.name: tuple(int(d) for d in feeds[t.name].shape) for t in self._inputs}
        for t in self._inputs:
            check_input_shape(t, shapes[t.name])
        if bind_input_shapes(self._context, shapes, self._bound) or not self._out_shapes:
            self._out_shapes = resolve_output_shapes(self._context, self._outputs)
        all_shapes = dict(shapes)
        all_shapes.update(self._out_shapes)
        grow = buffers_to_grow(required_bytes(all_shapes, self._dtypes), self._capacity)
        if grow:
            self._allocate(grow)
        if self._binder.rebind_own(self._context, {t.name: self._device[t.name].ptr for t in self._inputs}):
            self._destroy_graphs(self.policy.invalidate())  # the last call bound a caller's device buffers
        stream, ev = self._stream, self._events
        for t in self._inputs:
            np.copyto(self._host[t.name].array(shapes[t.name], t.dtype), feeds[t.name], casting="no")
        if timed:
            ev[0].record(stream)
        for t in self._inputs:
            self._device[t.name].copy_from_host(self._host[t.name], _nbytes(shapes[t.name], t.dtype), stream)
        if timed:
            ev[1].record(stream)
        return self._execute_and_copy_out(shape_key(shapes), timed)

    def _execute_and_copy_out(self, key: Any, timed: bool) -> _Pending:
        """The engine (or its graph) and the outputs' copies to pinned host memory, on the session's stream."""
        stream, ev = self._stream, self._events
        self._execute(key)
        if timed:
            ev[2].record(stream)
        for t in self._outputs:
            self._device[t.name].copy_to_host(self._host[t.name], _nbytes(self._out_shapes[t.name], t.dtype), stream)
        ev[3].record(stream)
        self._pending = _Pending(dict(self._out_shapes), timed)
        return self._pending

    # -- device input (not executed in CI: see the module docstring) -----------------------------
    def infer_device(self, inputs: Mapping[str, DeviceTensor], stream: Any = None) -> Dict[str, np.ndarray]:
        """Run on inputs already in GPU memory (bound with ``set_tensor_address``); outputs come back to the host.

        ``stream``: the stream that produced the inputs (a jetforge ``Stream``, a raw handle or None for work
        already finished); the session's stream waits for it through an event, without blocking the host."""
        return self.submit_device(inputs, stream).wait()

    def submit_device(self, inputs: Mapping[str, DeviceTensor], stream: Any = None) -> InferRequest:
        """:meth:`infer_device` queued: returns at once; the inputs must stay untouched until it is waited on."""
        self._check_open()
        pending = self._enqueue_device(inputs, stream, self._timing)
        return InferRequest(self, lambda timeout: self._collect(pending), self._events[3].query)

    def _enqueue_device(self, inputs: Mapping[str, DeviceTensor], producer: Any, timed: bool) -> _Pending:
        if self._pending is not None:  # the host output buffers are shared: the previous call's outputs first
            self._collect(self._pending)
        shapes, moved, key = self._binder.bind(self._context, inputs, self._inputs)
        if moved or not self._out_shapes:
            self._out_shapes = resolve_output_shapes(self._context, self._outputs)
        grow = buffers_to_grow(required_bytes(self._out_shapes, self._dtypes), self._capacity)
        if grow:
            self._allocate(grow)  # outputs only: the inputs are the caller's
        if moved:
            self._destroy_graphs(self.policy.invalidate())  # graphs bake in the old addresses and shapes
        stream, ev = self._stream, self._events
        if producer is not None:
            handle = getattr(producer, "handle", producer)
            self._input_ready.record(handle)
            stream.wait_event(self._input_ready)
        if timed:
            ev[0].record(stream)
            ev[1].record(stream)  # no host-to-device copy
        return self._execute_and_copy_out(key, timed)

    def _execute(self, key: Any) -> None:
        action = self.policy.decide(key)
        if action == LAUNCH:
            self._graphs[key].launch(self._stream)
            return
        self._enqueue_engine()
        if action == CAPTURE:
            # The enqueue above was the warm-up (and this call's real run); record the next one.
            self._stream.synchronize()
            graph, reason = self._cuda.try_capture(self._stream, self._enqueue_engine_for_capture)
            if graph is None:
                log.warning("%s: CUDA graph capture failed (%s); running with plain enqueue", self.path.name, reason)
                self._destroy_graphs(self.policy.fall_back(reason))
            else:
                self._graphs[key] = graph
                self._destroy_graphs(self.policy.captured(key))

    def _enqueue_engine(self) -> None:
        if not self._context.execute_async_v3(int(self._stream)):
            raise BackendError("TensorRT failed to run %s (execute_async_v3 returned False; see the TensorRT "
                               "error above)" % self.path.name)

    def _enqueue_engine_for_capture(self) -> bool:
        return bool(self._context.execute_async_v3(int(self._stream)))

    def _collect(self, pending: _Pending) -> Dict[str, np.ndarray]:
        if pending.outputs is None:
            self._events[3].synchronize()
            pending.outputs = {t.name: self._host[t.name].array(pending.shapes[t.name], t.dtype).copy()
                               for t in self._outputs}
            if pending.timed:
                ev = self._events
                self._last_timing = {"h2d_ms": ev[1].elapsed_ms(ev[0]), "compute_ms": ev[2].elapsed_ms(ev[1]),
                                     "d2h_ms": ev[3].elapsed_ms(ev[2])}
            if self._pending is pending:
                self._pending = None
        return pending.outputs

    # -- buffers and graphs ---------------------------------------------------------------
    def _allocate(self, sizes: Mapping[str, int]) -> None:
        if not sizes:
            return
        self._stream.synchronize()
        self._destroy_graphs(self.policy.invalidate())  # graphs bake in the old addresses
        for name, nbytes in sizes.items():
            for store in (self._device, self._host):
                old = store.pop(name, None)
                if old is not None:
                    old.close()
            self._device[name] = self._cuda.DeviceBuffer(nbytes)
            self._host[name] = self._cuda.PinnedBuffer(nbytes)
            self._capacity[name] = nbytes
            self._binder.point(self._context, {name: self._device[name].ptr})
        log.debug("%s: allocated %s", self.path.name, {k: v for k, v in sizes.items()})

    def _destroy_graphs(self, keys: Sequence[Any]) -> None:
        for key in keys:
            graph = self._graphs.pop(key, None)
            if graph is not None:
                graph.close()

    def _close(self) -> None:
        try:
            self._stream.synchronize()
        finally:
            self._destroy_graphs(list(self._graphs))
            for store in (self._device, self._host):
                for buf in store.values():
                    buf.close()
                store.clear()
            for ev in self._events + [self._input_ready]:
                ev.close()
            self._stream.close()
            self._context = None
            self._engine = None
            self._runtime = None

    # -- description ----------------------------------------------------------------------
    @property
    def version(self) -> str:
        return version_string(self._trt)

    def describe(self) -> str:
        where = "DLA core %d" % self.dla_core if self.dla_core is not None else "GPU"
        return "%s %s on %s, CUDA graph %s" % (self.display_name, self.version, where, self.policy.status)

    def info(self) -> Dict[str, Any]:
        return {"backend": self.name, "description": self.describe(), "version": self.version,
                "device": "dla" if self.dla_core is not None else "gpu", "dla_core": self.dla_core,
                "cuda_graph": self.policy.status, "cuda_graph_captures": self.policy.captures}


def _nbytes(shape: Tuple[int, ...], dtype: str) -> int:
    return required_bytes({"t": shape}, {"t": dtype})["t"]
