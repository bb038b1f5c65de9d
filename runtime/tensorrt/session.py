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
buffer sizing -- is a plain function below, tested on the CPU with ``FakeTrtContext``
(tests/runtime/trt/test_trt_session_logic.py); the class only wires them to TensorRT and
CUDA.  Nothing here imports tensorrt or cuda-python at module import time.
"""

import logging
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from jetforge.errors import BackendError, ConfigError, InputFileError, ModelError
from jetforge.optional import require
from jetforge.runtime.cuda.policy import CAPTURE, LAUNCH, GraphPolicy, initial_graph_state, shape_key
from jetforge.runtime.session.base import BACKENDS, InferRequest, Session
from jetforge.runtime.sidecar import TensorSpec, sidecar_path

log = logging.getLogger(__name__)

# TensorRT DataType names -> numpy dtype names.  BF16/FP8/INT4/FP4 have no numpy type.
TRT_DTYPES = {"FLOAT": "float32", "HALF": "float16", "INT8": "int8", "INT32": "int32", "INT64": "int64",
              "BOOL": "bool", "UINT8": "uint8"}


def enum_name(value: Any) -> str:
    """``trt.DataType.HALF`` -> ``"HALF"`` (pybind11 enums have ``.name``; str() gives ``DataType.HALF``)."""
    name = getattr(value, "name", None)
    return str(name) if name else str(value).split(".")[-1]


def numpy_dtype(trt_dtype: Any, tensor: str = "") -> str:
    """The numpy dtype name of a TensorRT data type; a type numpy cannot hold is a ModelError."""
    name = enum_name(trt_dtype)
    if name not in TRT_DTYPES:
        raise ModelError("engine tensor %r has TensorRT type %s, which numpy cannot hold" % (tensor, name),
                         hint="rebuild the engine with FP32, FP16, INT8, INT32 or BOOL inputs and outputs")
    return TRT_DTYPES[name]


def dims(shape: Any) -> Tuple[int, ...]:
    """A TensorRT ``Dims`` (or any sequence) as a tuple of ints."""
    return tuple(int(d) for d in shape)


class EngineIO:
    """One I/O tensor of an engine: name, input or output, shape (-1 = dynamic), dtype, profile range."""

    def __init__(self, name: str, is_input: bool, shape: Tuple[int, ...], dtype: str,
                 profile: Optional[Tuple[Tuple[int, ...], Tuple[int, ...], Tuple[int, ...]]] = None) -> None:
        self.name = name
        self.is_input = is_input
        self.shape = shape
        self.dtype = dtype
        self.profile = profile  # (min, opt, max) of optimization profile 0, for dynamic inputs

    @property
    def spec(self) -> TensorSpec:
        return TensorSpec(name=self.name, shape=list(self.shape), dtype=self.dtype)

    @property
    def max_shape(self) -> Tuple[int, ...]:
        """The largest shape this tensor can take (profile max for a dynamic input, else the shape)."""
        if self.profile is not None:
            return self.profile[2]
        return self.shape

    def __repr__(self) -> str:
        return "EngineIO(%r, %s, %s, %s)" % (self.name, "input" if self.is_input else "output", self.shape, self.dtype)


def engine_io(engine: Any) -> List[EngineIO]:
    """The engine's I/O tensors in engine order (named-tensor API; TensorRT >= 8.5)."""
    tensors = []
    for i in range(int(engine.num_io_tensors)):
        name = str(engine.get_tensor_name(i))
        mode = enum_name(engine.get_tensor_mode(name))
        if mode not in ("INPUT", "OUTPUT"):
            continue
        is_input = mode == "INPUT"
        shape = dims(engine.get_tensor_shape(name))
        check_linear_format(engine, name)
        profile = None
        if is_input and any(d < 0 for d in shape):
            # get_tensor_profile_shape(name, profile_index) -> [min, opt, max]
            lo, opt, hi = engine.get_tensor_profile_shape(name, 0)
            profile = (dims(lo), dims(opt), dims(hi))
        tensors.append(EngineIO(name, is_input, shape, numpy_dtype(engine.get_tensor_dtype(name), name), profile))
    if not any(t.is_input for t in tensors) or not any(not t.is_input for t in tensors):
        raise ModelError("engine has %d inputs and %d outputs; a session needs at least one of each"
                         % (sum(t.is_input for t in tensors), sum(not t.is_input for t in tensors)))
    return tensors


def check_linear_format(engine: Any, name: str) -> None:
    """Refuse vectorized I/O formats (CHW32, DLA HWC4...): jetforge feeds dense row-major (linear) arrays."""
    getter = getattr(engine, "get_tensor_format", None)
    if getter is None:
        return
    fmt = enum_name(getter(name))
    if fmt != "LINEAR":
        raise ModelError("engine tensor %r uses the %s I/O format; jetforge sessions feed dense (LINEAR) arrays"
                         % (name, fmt),
                         hint="rebuild the engine without --inputIOFormats/--outputIOFormats (TensorRT then "
                              "reformats on the device)")


def check_input_shape(tensor: EngineIO, shape: Tuple[int, ...]) -> None:
    """A ModelError if ``shape`` does not fit the engine's static dims or its optimization profile."""
    if len(shape) != len(tensor.shape):
        raise ModelError("input %r of the engine has %d dimensions, got shape %s"
                         % (tensor.name, len(tensor.shape), shape))
    for axis, (want, got) in enumerate(zip(tensor.shape, shape)):
        if want >= 0 and want != got:
            raise ModelError("input %r of the engine expects %s, got %s (axis %d)" % (tensor.name, tensor.shape,
                                                                                        shape, axis))
    if tensor.profile is not None:
        lo, _, hi = tensor.profile
        if any(g < a or g > b for g, a, b in zip(shape, lo, hi)):
            raise ModelError("input %r shape %s is outside the engine's optimization profile %s..%s"
                             % (tensor.name, shape, lo, hi),
                             hint="rebuild the engine with a profile that covers this shape")


def bind_input_shapes(context: Any, shapes: Mapping[str, Tuple[int, ...]],
                      bound: Dict[str, Tuple[int, ...]]) -> List[str]:
    """``context.set_input_shape`` for each input whose shape differs from ``bound``; returns the changed names.

    ``bound`` (name -> shape last set) is updated in place.  A shape TensorRT refuses
    (``set_input_shape`` returns False) is a ModelError.
    """
    changed = []
    for name, shape in shapes.items():
        shape = tuple(int(d) for d in shape)
        if bound.get(name) == shape:
            continue
        if context.set_input_shape(name, shape) is False:
            raise ModelError("TensorRT refused input shape %s for %r" % (shape, name),
                             hint="check the shape against the engine's optimization profile")
        bound[name] = shape
        changed.append(name)
    return changed


def resolve_output_shapes(context: Any, outputs: Sequence[EngineIO]) -> Dict[str, Tuple[int, ...]]:
    """Output shapes once the input shapes are set; a data-dependent (-1) output is a ModelError."""
    shapes = {}
    for tensor in outputs:
        shape = dims(context.get_tensor_shape(tensor.name))
        if any(d < 0 for d in shape):
            raise ModelError("output %r has a data-dependent shape %s; jetforge sessions need outputs whose "
                             "shape follows from the input shapes" % (tensor.name, shape),
                             hint="make the output shape static (e.g. pad detections to a fixed count)")
        shapes[tensor.name] = shape
    return shapes


def required_bytes(shapes: Mapping[str, Tuple[int, ...]], dtypes: Mapping[str, str]) -> Dict[str, int]:
    """Bytes of each tensor at its current shape."""
    out = {}
    for name, shape in shapes.items():
        count = 1
        for d in shape:
            count *= int(d)
        out[name] = count * np.dtype(dtypes[name]).itemsize
    return out


def buffers_to_grow(required: Mapping[str, int], capacity: Mapping[str, int]) -> Dict[str, int]:
    """Tensors whose buffers must be (re)allocated, with their new size: missing or too small.

    Buffers only grow (a smaller shape reuses the buffer), so that tensor addresses -- which a
    captured CUDA graph bakes in -- stay fixed as long as possible.  Sizes are rounded up to
    256 bytes (CUDA's allocation granularity for alignment).
    """
    grow = {}
    for name, need in required.items():
        if capacity.get(name, -1) < need:
            grow[name] = max(256, (int(need) + 255) // 256 * 256)
    return grow


def initial_buffer_sizes(tensors: Sequence[EngineIO]) -> Dict[str, int]:
    """Input buffers sized at the profile's max shape up front (outputs are sized at the first call)."""
    return {t.name: required_bytes({t.name: t.max_shape}, {t.name: t.dtype})[t.name] for t in tensors if t.is_input}


def resolve_dla_core(requested: Optional[int], sidecar_core: Optional[int], sidecar_device: Optional[str],
                     num_dla_cores: int) -> Optional[int]:
    """The DLA core to set on ``runtime.DLA_core`` before deserializing, or None for a GPU engine.

    ``requested`` overrides the core recorded at build time (an engine built for DLA runs on
    either core of the same board).  Errors name the fix: no DLA on this machine, a core
    number that does not exist, a GPU engine asked to run on DLA.
    """
    if requested is not None:
        if isinstance(requested, bool) or not isinstance(requested, int) or requested < 0:
            raise ConfigError("dla_core must be a DLA core number (0 or 1), got %r" % (requested,))
        if sidecar_device == "gpu":
            raise ConfigError("this engine was built for the GPU; dla_core=%d does not apply" % requested,
                              hint="build a DLA engine (`jetforge build --dla-core %d`), or drop dla_core" % requested)
    core = requested if requested is not None else sidecar_core
    if core is None:
        return None
    if num_dla_cores <= 0:
        raise BackendError("the engine runs on DLA core %d but this machine has no DLA" % core,
                           hint="DLA exists on Jetson AGX Orin, Orin NX and Xavier; rebuild for the GPU elsewhere")
    if core >= num_dla_cores:
        raise ConfigError("DLA core %d does not exist; this machine has %d (0..%d)" % (core, num_dla_cores,
                                                                                       num_dla_cores - 1))
    return core


def load_engine_sidecar(path: Path, verify: bool, tensorrt_version: Optional[str]) -> Any:
    """The engine's sidecar (``model.engine.json``) or None when it has none (e.g. an engine from trtexec).

    Uses :mod:`jetforge.runtime.tensorrt.engine_sidecar` (which checks the content hash and the
    TensorRT version); a sidecar that is not in its format but holds ``inputs``/``outputs``
    is read as a plain description.
    """
    if not sidecar_path(path).is_file():
        log.warning("%s has no sidecar %s: tensor specs come from the engine, preprocessing is unknown",
                    path.name, sidecar_path(path).name)
        return None
    try:
        from jetforge.runtime.tensorrt.engine_sidecar import read_engine_sidecar
    except ImportError:  # the build package is optional for a deployment that only runs engines
        read_engine_sidecar = None
    if read_engine_sidecar is not None:
        try:
            return read_engine_sidecar(path, verify_hash=verify, tensorrt_version=tensorrt_version)
        except ModelError as err:
            if "is not an engine sidecar" not in err.message:
                raise
    import json

    try:
        data = json.loads(sidecar_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ModelError("engine sidecar %s is not valid JSON: %s" % (sidecar_path(path).name, err)) from err
    return PlainEngineSidecar(data)


class PlainEngineSidecar:
    """A sidecar given as a plain dict (``inputs``, ``outputs``, optional ``preprocess``/``dla_core``)."""

    def __init__(self, data: Dict[str, Any]) -> None:
        try:
            self.inputs = [TensorSpec.from_dict(t) for t in data.get("inputs", [])]
            self.outputs = [TensorSpec.from_dict(t) for t in data.get("outputs", [])]
        except (KeyError, TypeError) as err:
            raise ModelError("engine sidecar is malformed: %s" % err, hint="rebuild the engine") from err
        self.preprocess = data.get("preprocess")
        self.dla_core = data.get("dla_core")
        self.device = data.get("device")
        self.labels = list(data.get("labels", []))
        self.task = data.get("task", "other")


class _Pending:
    """What a submitted call left on the stream: output shapes and its completion event."""

    def __init__(self, shapes: Dict[str, Tuple[int, ...]], timed: bool) -> None:
        self.shapes = shapes
        self.timed = timed
        self.outputs: Optional[Dict[str, np.ndarray]] = None


@BACKENDS.register("tensorrt")
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
        trt = require("tensorrt", "running TensorRT engines")
        require("cuda", "TensorRT sessions (device buffers, streams, CUDA graphs through cuda-python)")
        version = str(trt.__version__)
        sidecar = load_engine_sidecar(path, verify_sidecar, version)
        runtime = trt.Runtime(_trt_logger(trt))
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
        return str(self._trt.__version__)

    def describe(self) -> str:
        where = "DLA core %d" % self.dla_core if self.dla_core is not None else "GPU"
        return "%s %s on %s, CUDA graph %s" % (self.display_name, self.version, where, self.policy.status)

    def info(self) -> Dict[str, Any]:
        return {"backend": self.name, "description": self.describe(), "version": self.version,
                "device": "dla" if self.dla_core is not None else "gpu", "dla_core": self.dla_core,
                "cuda_graph": self.policy.status, "cuda_graph_captures": self.policy.captures}


def _nbytes(shape: Tuple[int, ...], dtype: str) -> int:
    return required_bytes({"t": shape}, {"t": dtype})["t"]


def _trt_logger(trt: Any) -> Any:
    """A ``trt.ILogger`` that routes TensorRT's messages into this module's logger."""
    levels = {"INTERNAL_ERROR": logging.ERROR, "ERROR": logging.ERROR, "WARNING": logging.WARNING,
              "INFO": logging.DEBUG, "VERBOSE": logging.DEBUG}

    class _Logger(trt.ILogger):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            trt.ILogger.__init__(self)

        def log(self, severity: Any, msg: str) -> None:
            log.log(levels.get(enum_name(severity), logging.INFO), "TensorRT: %s", msg)

    return _Logger()
