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
after a warm-up enqueue (trtexec's pattern), and a capture TensorRT or CUDA refuses
falls back to plain enqueue with a warning and ``info()["cuda_graph"] == "fallback: <reason>"``.

Several graphs, one execution context each (:mod:`.context_pool`): a graph bakes in the context it was captured
from (input shapes, tensor addresses, activation memory), so each graph key -- the input shapes, plus the caller's
addresses on the device-input path -- gets a context of its own, up to ``max_graphs`` (8 by default: the apps' six
batch buckets and slack), the least recently used key giving its context (and graph) up.  A context's shapes and
addresses are set before its graph is captured and not changed while it lives; every buffer of the session is
allocated at the profile's max shape when it opens, so graphs are invalidated only if an output outgrows that.
The contexts share one activation-memory allocation (all work is on one stream, so they never run at once) where
the installed TensorRT can (``info()["context_memory"]`` says how, or why each context has its own); after
``4 x max_graphs`` captures, or a refused one, the session keeps one context and runs without graphs.  A DLA engine
keeps one context with its own memory, as before.  This is **written against TensorRT's documented API and tested on
the CPU with fakes and the TensorRT stand-in, not executed on TensorRT or a Jetson**.

Every decision -- dtype mapping, I/O discovery, shape binding, profile checks,
buffer sizing -- is a plain function of :mod:`.session_logic`, and which context serves a call, when one is made
or re-bound, and how their memory is shared are :mod:`.context_pool`'s, tested on the CPU with fakes
(tests/runtime/trt/test_trt_session_logic.py, test_context_pool.py, test_trt_session_contexts.py); the class only
wires them to TensorRT and CUDA.  Nothing here imports tensorrt or cuda-python at module import time.

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
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from jetforge.errors import BackendError, InputFileError, ModelError
from jetforge.optional import require
from jetforge.runtime.cuda.policy import CAPTURE, ENQUEUE, LAUNCH, GraphPolicy, shape_key
from jetforge.runtime.session.base import InferRequest, Session
from jetforge.runtime.tensorrt.device_input import (  # noqa: F401 - re-exported: the session's API
    TENSOR_ALIGNMENT, DeviceInputBinder, DeviceTensor, check_device_input, check_device_inputs, device_graph_key)
from jetforge.runtime.tensorrt.context_pool import (DEFAULT_MAX_GRAPHS, ContextPool, ScratchApi, Slot,
                                                    choose_scratch_api, create_context, give_scratch, own_memory,
                                                    plan_contexts, scratch_bytes)
from jetforge.runtime.tensorrt.library import load_tensorrt, version_string
from jetforge.runtime.tensorrt.logger import make_logger
from jetforge.runtime.tensorrt.session_logic import (EngineIO, bind_input_shapes, buffers_to_grow, check_input_shape,
                                                     engine_io, initial_buffer_sizes, initial_graph_state,
                                                     initial_output_sizes, load_engine_sidecar, required_bytes,
                                                     resolve_dla_core, resolve_output_shapes)

log = logging.getLogger(__name__)

# ``on_device_outputs(outputs, session stream) -> result()``: see TrtSession.submit_device
DeviceOutputsConsumer = Callable[[Dict[str, DeviceTensor], Any], Callable[[], Any]]


class _Pending:
    """What a submitted call left on the stream: output shapes and its completion event."""

    def __init__(self, shapes: Dict[str, Tuple[int, ...]], timed: bool) -> None:
        self.shapes = shapes
        self.timed = timed
        self.outputs: Optional[Dict[str, np.ndarray]] = None


class TrtSession(Session):
    """A TensorRT engine with its own stream, pinned/device buffers and (by default) CUDA graphs, one execution
    context per graph (see the module docstring)."""

    name = "tensorrt"
    display_name = "TensorRT"
    suffixes = (".engine", ".plan", ".trt")
    option_names = ("dla_core", "cuda_graph", "verify_sidecar", "max_graphs")
    timing_source = "cuda events"

    def __init__(self, path: Path, trt: Any, runtime: Any, engine: Any, context: Any, io: List[EngineIO],
                 sidecar: Any, dla_core: Optional[int], policy: GraphPolicy,
                 scratch: Optional[ScratchApi] = None, max_contexts: int = 1) -> None:
        from jetforge.runtime import cuda

        self._trt = trt
        self._runtime = runtime
        self._engine = engine
        self._context = context  # the primary context: the first key's, and the one plain enqueue keeps
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
        self._input_ready = cuda.Event(timing=False)  # the producer's stream -> this session's stream
        # recorded after each call's engine work: its inputs have been read (this session's stream -> a producer's)
        self._inputs_read = cuda.Event(timing=False)
        self._inputs_read_recorded = False
        self._graphs: Dict[Any, Any] = {}
        self._pending: Optional[_Pending] = None
        self._scratch_api = scratch or own_memory("one context")
        self._scratch: Any = None  # the activation memory every context shares (allocated once: never moves)
        if self._scratch_api.shared:
            self._scratch = cuda.DeviceBuffer(scratch_bytes(engine, self._scratch_api))
            give_scratch(context, self._scratch_api, self._scratch.ptr, self._scratch.nbytes)
        primary = Slot(context, DeviceInputBinder())
        self._pool = ContextPool(primary, self._new_slot, max_contexts)
        super().__init__(path, [t.spec for t in self._inputs], [t.spec for t in self._outputs], sidecar)
        sizes = initial_buffer_sizes(io)
        sizes.update(initial_output_sizes(context, io, primary.binder.shapes))
        self._allocate(sizes)

    @classmethod
    def open(cls, path: Path, dla_core: Optional[int] = None, cuda_graph: bool = True,
             verify_sidecar: bool = True, max_graphs: int = DEFAULT_MAX_GRAPHS) -> "TrtSession":
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
        enabled, reason = initial_graph_state(cuda_graph, core, version)
        plan = plan_contexts(enabled, core, max_graphs)
        scratch = choose_scratch_api(trt, engine) if plan.share_memory else own_memory(plan.why)
        context = create_context(trt, engine, scratch)
        if context is None:
            raise BackendError("TensorRT could not create an execution context for %s" % path.name,
                               hint="free GPU memory (the context allocates the engine's activations)")
        policy = GraphPolicy(enabled=cuda_graph, max_graphs=plan.max_contexts, max_captures=plan.max_captures)
        if cuda_graph and not enabled:
            policy.fall_back(reason)
            log.info("%s: %s", path.name, reason)
        session = cls(path, trt, runtime, engine, context, engine_io(engine), sidecar, core, policy, scratch,
                      plan.max_contexts)
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
        key = shape_key(shapes)
        slot = self._slot(key)
        changed = bool(bind_input_shapes(slot.context, shapes, slot.binder.shapes))
        self._prepare(slot, key, changed, shapes)
        if slot.binder.rebind_own(slot.context, {t.name: self._device[t.name].ptr for t in self._inputs}):
            self._forget([key])  # this context last bound a caller's device buffers, or its own moved
        stream, ev = self._stream, self._events
        for t in self._inputs:
            np.copyto(self._host[t.name].array(shapes[t.name], t.dtype), feeds[t.name], casting="no")
        if timed:
            ev[0].record(stream)
        for t in self._inputs:
            self._device[t.name].copy_from_host(self._host[t.name], _nbytes(shapes[t.name], t.dtype), stream)
        if timed:
            ev[1].record(stream)
        return self._execute_and_copy_out(slot, key, timed)

    def _slot(self, key: Any) -> Slot:
        """The context serving ``key``; the graph of a key that gave its context up is destroyed first."""
        slot, evicted = self._pool.acquire(key)
        self._forget(evicted)
        return slot

    def _new_slot(self) -> Optional[Slot]:
        context = create_context(self._trt, self._engine, self._scratch_api)
        if context is None:  # TensorRT could not (memory): the pool re-uses the contexts it has
            log.warning("%s: TensorRT could not create another execution context; keeping %d",
                        self.path.name, len(self._pool))
            return None
        if self._scratch is not None:
            give_scratch(context, self._scratch_api, self._scratch.ptr, self._scratch.nbytes)
        return Slot(context, DeviceInputBinder())

    def _prepare(self, slot: Slot, key: Any, changed: bool, own_inputs: Mapping[str, Tuple[int, ...]]) -> None:
        """Once the input shapes are set on ``slot``: its output shapes, buffers large enough (``own_inputs``: the
        shapes of the inputs that live in the session's buffers), the outputs pointed at; a change forgets the
        graph of ``key`` (never one that lives, as a context serves one key: a safeguard)."""
        if changed or not slot.out_shapes:
            slot.out_shapes = resolve_output_shapes(slot.context, self._outputs)
        grow = buffers_to_grow(required_bytes(dict(own_inputs, **slot.out_shapes), self._dtypes), self._capacity)
        if grow:
            self._allocate(grow)
        moved = slot.binder.point(slot.context, {t.name: self._device[t.name].ptr for t in self._outputs})
        if changed or moved:
            self._forget([key])

    def _execute_and_copy_out(self, slot: Slot, key: Any, timed: bool) -> _Pending:
        """The engine (or its graph) and the outputs' copies to pinned host memory, on the session's stream."""
        self._execute_engine(slot, key)
        return self._copy_out(slot, timed)

    def _execute_engine(self, slot: Slot, key: Any) -> None:
        """The engine (or its graph) on the session's stream, then the event that says its inputs were read."""
        self._execute(slot, key)
        self._inputs_read.record(self._stream)
        self._inputs_read_recorded = True

    def _copy_out(self, slot: Slot, timed: bool) -> _Pending:
        """The outputs' copies to pinned host memory after the engine, on the session's stream."""
        stream, ev = self._stream, self._events
        if timed:
            ev[2].record(stream)
        for t in self._outputs:
            self._device[t.name].copy_to_host(self._host[t.name], _nbytes(slot.out_shapes[t.name], t.dtype), stream)
        ev[3].record(stream)
        self._pending = _Pending(dict(slot.out_shapes), timed)
        return self._pending

    # -- device input (not executed in CI: see the module docstring) -----------------------------
    def infer_device(self, inputs: Mapping[str, DeviceTensor], stream: Any = None) -> Dict[str, np.ndarray]:
        """Run on inputs already in GPU memory (bound with ``set_tensor_address``); outputs come back to the host.

        ``stream``: the stream that produced the inputs (a jetforge ``Stream``, a raw handle or None for work
        already finished); the session's stream waits for it through an event, without blocking the host."""
        return self.submit_device(inputs, stream).wait()

    def submit_device(self, inputs: Mapping[str, DeviceTensor], stream: Any = None,
                      on_device_outputs: Optional[DeviceOutputsConsumer] = None) -> InferRequest:
        """:meth:`infer_device` queued: returns at once.  The inputs must stay untouched until the engine has read
        them: wait on the request, or (not blocking the host) call :meth:`wait_for_inputs_read` with the stream that
        will write them next, before queuing that write.

        ``on_device_outputs(outputs, stream)``: the outputs stay on the GPU and go to this consumer instead of back
        to the host.  It is called once the engine's work is queued, with a :class:`DeviceTensor` per output (the
        session's own buffers, at this call's shapes) and the session's stream; it queues its work on that stream
        (the next call's engine rewrites the buffers after it, in stream order) and returns a function the request's
        ``wait`` calls for the result.  Why: a detector's raw outputs (1917 anchors x 6 floats a frame for the SSD)
        need not come back to be decoded on the host when a kernel decodes them where they are and only the few
        candidates come back.  Such a call neither touches nor waits for the session's pinned output buffers, so the
        caller may queue the next batch before an earlier one's outputs were collected."""
        self._check_open()
        if on_device_outputs is None:
            pending = self._enqueue_device(inputs, stream, self._timing)
            return InferRequest(self, lambda timeout: self._collect(pending), self._events[3].query)
        slot = self._run_on_device_inputs(inputs, stream, False)
        outputs = {t.name: DeviceTensor(self._device[t.name].ptr, slot.out_shapes[t.name], t.dtype)
                   for t in self._outputs}
        result = on_device_outputs(outputs, self._stream)
        return InferRequest(self, lambda timeout: result())

    def wait_for_inputs_read(self, stream: Any) -> None:
        """Make ``stream`` (a producer's: a jetforge ``Stream`` or a raw handle) wait on the GPU until the engine has
        read the inputs of every call queued so far, so that work queued on it next may overwrite them.

        Why: the GPU path preprocesses batch k+1 into the buffer batch k was bound from while batch k may still be
        running on this session's stream; without this wait the two streams may overlap and batch k would read
        batch k+1's pixels.  Queues one event wait; the host does not block."""
        self._check_open()
        if self._inputs_read_recorded:
            cuda = self._cuda
            cuda.check(cuda.runtime_api().cudaStreamWaitEvent(getattr(stream, "handle", stream),
                                                              self._inputs_read.handle, 0),
                       "cudaStreamWaitEvent(inputs read)")

    def _enqueue_device(self, inputs: Mapping[str, DeviceTensor], producer: Any, timed: bool) -> _Pending:
        if self._pending is not None:  # the host output buffers are shared: the previous call's outputs first
            self._collect(self._pending)
        slot = self._run_on_device_inputs(inputs, producer, timed)
        return self._copy_out(slot, timed)

    def _run_on_device_inputs(self, inputs: Mapping[str, DeviceTensor], producer: Any, timed: bool) -> Slot:
        """Bind the caller's device inputs, make the session's stream wait for ``producer``, queue the engine (or its
        graph) and record that its inputs have been read; the slot that served the call (its output shapes)."""
        key = device_graph_key(check_device_inputs(inputs, self._inputs), inputs)
        slot = self._slot(key)
        _, moved, _ = slot.binder.bind(slot.context, inputs, self._inputs)
        self._prepare(slot, key, moved, {})  # outputs only: the inputs are the caller's
        stream, ev = self._stream, self._events
        if producer is not None:
            handle = getattr(producer, "handle", producer)
            self._input_ready.record(handle)
            stream.wait_event(self._input_ready)
        if timed:
            ev[0].record(stream)
            ev[1].record(stream)  # no host-to-device copy
        self._execute_engine(slot, key)
        return slot

    def _execute(self, slot: Slot, key: Any) -> None:
        action = self.policy.decide(key)
        if action == LAUNCH:
            self._graphs[key].launch(self._stream)
            return
        self._enqueue_engine(slot.context)
        if action == CAPTURE:
            # The enqueue above was the warm-up (and this call's real run); record the next one.
            self._stream.synchronize()
            graph, reason = self._cuda.try_capture(
                self._stream, lambda: bool(slot.context.execute_async_v3(int(self._stream))))
            if graph is None:
                log.warning("%s: CUDA graph capture failed (%s); running with plain enqueue", self.path.name, reason)
                self.policy.fall_back(reason)
                self._give_up_graphs()
            else:
                self._graphs[key] = graph
                self._destroy_graphs(self.policy.captured(key))
        elif action == ENQUEUE and self._pool.max_contexts > 1:  # graphs given up (too many captures): one context
            self._give_up_graphs()

    def _enqueue_engine(self, context: Any) -> None:
        if not context.execute_async_v3(int(self._stream)):
            raise BackendError("TensorRT failed to run %s (execute_async_v3 returned False; see the TensorRT "
                               "error above)" % self.path.name)

    def _give_up_graphs(self) -> None:
        """Graphs are off for good: destroy them and every context but the primary, once their work is done."""
        self._destroy_graphs(list(self._graphs))
        self._stream.synchronize()
        dropped = self._pool.collapse()
        log.info("%s: CUDA graphs off; %d execution context(s) released", self.path.name, len(dropped))

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
        """(Re)allocate buffers; every graph baked in the old addresses, so all are destroyed (each context is
        pointed at the new buffers by the next call it serves)."""
        if not sizes:
            return
        self._stream.synchronize()
        self._destroy_graphs(self.policy.invalidate())
        for name, nbytes in sizes.items():
            for store in (self._device, self._host):
                old = store.pop(name, None)
                if old is not None:
                    old.close()
            self._device[name] = self._cuda.DeviceBuffer(nbytes)
            self._host[name] = self._cuda.PinnedBuffer(nbytes)
            self._capacity[name] = nbytes
        log.debug("%s: allocated %s", self.path.name, {k: v for k, v in sizes.items()})

    def _forget(self, keys: Sequence[Any]) -> None:
        """The graphs of ``keys`` are stale (their context was re-bound): destroy them."""
        self.policy.discard(keys)
        self._destroy_graphs(keys)

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
            self._pool.clear()  # the contexts go before the memory they use
            self._context = None
            for store in (self._device, self._host):
                for buf in store.values():
                    buf.close()
                store.clear()
            if self._scratch is not None:
                self._scratch.close()
                self._scratch = None
            for ev in self._events + [self._input_ready, self._inputs_read]:
                ev.close()
            self._stream.close()
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
        scratch = self._scratch.nbytes if self._scratch is not None else None
        return {"backend": self.name, "description": self.describe(), "version": self.version,
                "device": "dla" if self.dla_core is not None else "gpu", "dla_core": self.dla_core,
                "cuda_graph": self.policy.status, "cuda_graph_captures": self.policy.captures,
                "cuda_graph_live": len(self._graphs), "cuda_graph_contexts": len(self._pool),
                "cuda_graph_max_contexts": self._pool.max_contexts,
                "context_memory": self._scratch_api.describe(scratch)}


def _nbytes(shape: Tuple[int, ...], dtype: str) -> int:
    return required_bytes({"t": shape}, {"t": dtype})["t"]
