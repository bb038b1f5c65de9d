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

It is the ``"tensorrt"`` session backend: ``runtime/session/__init__.py`` registers
``"jetforge.runtime.tensorrt.session:TrtSession"`` lazily, so this module is imported only when an
engine is opened.
"""

import logging
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
        self._bound: Dict[str, Tuple[int, ...]] = {}
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
        stream, ev = self._stream, self._events
        for t in self._inputs:
            np.copyto(self._host[t.name].array(shapes[t.name], t.dtype), feeds[t.name], casting="no")
        if timed:
            ev[0].record(stream)
        for t in self._inputs:
            self._device[t.name].copy_from_host(self._host[t.name], _nbytes(shapes[t.name], t.dtype), stream)
        if timed:
            ev[1].record(stream)
        self._execute(shape_key(shapes))
        if timed:
            ev[2].record(stream)
        for t in self._outputs:
            self._device[t.name].copy_to_host(self._host[t.name], _nbytes(self._out_shapes[t.name], t.dtype), stream)
        ev[3].record(stream)
        self._pending = _Pending(dict(self._out_shapes), timed)
        return self._pending

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
            if not self._context.set_tensor_address(name, self._device[name].ptr):
                raise BackendError("TensorRT refused the device address of tensor %r" % name)
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
            for ev in self._events:
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
