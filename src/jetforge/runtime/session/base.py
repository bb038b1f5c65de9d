"""The backend-agnostic half of a runtime session: the interface, input checking, backend choice.

A :class:`Session` runs one model on one backend.  Everything a caller sees is
plain data (``TensorSpec`` lists, numpy arrays, a sidecar), so apps, benchmarks,
calibration and evaluation never touch a backend's own API: :func:`open_session` is
the one way jetforge opens a model for inference, from a file or, for the backends
that take one (ONNX Runtime), from memory (``bytes`` or an ``onnx.ModelProto``: the
models calibration and the INT8 evaluator build by graph surgery).  Backends are
registered in :data:`BACKENDS` with :func:`register_backend` as lazy ``"module:Class"``
entries with their file suffixes, so choosing one by suffix imports no backend module.
Torch-free and Python 3.8.

Besides the blocking :meth:`Session.infer`, every session has an asynchronous pair
for pipelining: ``request = session.submit(feeds)`` queues the work and returns at
once, ``session.wait(request)`` returns its outputs.  Backends with CUDA streams
(TensorRT, PyTorch on CUDA) queue copies and compute on their stream; the others run
the model on one worker thread of the session.
"""

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Type

import numpy as np

from jetforge.config import Bound
from jetforge.errors import BackendError, ConfigError, ModelError, UnknownNameError
from jetforge.fileio import PathLike, require_file
from jetforge.registry import Registry
from jetforge.runtime.sidecar import ModelSidecar, TensorSpec, read_sidecar, sidecar_path

log = logging.getLogger(__name__)


class Session:
    """One model loaded on one backend.

    Subclasses set ``name`` (the registry key, also ``.backend``), ``display_name``,
    ``suffixes`` (model files they open), ``option_names`` (the keyword options
    their constructor accepts) and implement :meth:`_run` and :meth:`_close`.
    """

    name = ""
    display_name = ""
    suffixes: Tuple[str, ...] = ()
    option_names: Tuple[str, ...] = ()
    # True for backends with ``open_in_memory(model, name=..., **options)`` (models given as bytes / ModelProto)
    in_memory = False
    # How :meth:`last_timing` is measured: "host clock" (around the backend call) or "cuda events"
    # (the backend records h2d/compute/d2h itself).
    timing_source = "host clock"

    def __init__(self, path: Path, inputs: List[TensorSpec], outputs: List[TensorSpec],
                 sidecar: Optional[Any]) -> None:
        self.path = Path(path)
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.sidecar = sidecar
        self._closed = False
        self._timing = False
        self._last_timing: Optional[Dict[str, float]] = None
        self._worker: Optional[Any] = None
        self._worker_lock = threading.Lock()
        if sidecar is not None:
            _check_sidecar_agrees(self.path, sidecar, self.inputs, self.outputs)

    # -- what callers use -------------------------------------------------------------------
    @property
    def backend(self) -> str:
        return self.name

    @property
    def closed(self) -> bool:
        return self._closed

    def infer(self, feeds: Mapping[str, np.ndarray],
              outputs: Optional[Sequence[str]] = None) -> Dict[str, np.ndarray]:
        """Run the model on named inputs; returns every output (or only ``outputs``) by name, as numpy arrays."""
        self._check_open()
        checked = self.check_feeds(feeds)
        if outputs is not None:
            known = [t.name for t in self.outputs]
            for name in outputs:
                if name not in known:
                    raise UnknownNameError("output of %s" % self.path.name, str(name), known)
            return self._run_outputs(checked, list(outputs))
        if self._timing and self.timing_source == "host clock":
            t0 = time.perf_counter()
            out = self._run(checked)
            self._last_timing = {"compute_ms": (time.perf_counter() - t0) * 1000.0}
            return out
        return self._run(checked)

    def submit(self, feeds: Mapping[str, np.ndarray]) -> "InferRequest":
        """Queue an inference and return at once; :meth:`wait` (or ``request.wait()``) gives its outputs.

        Inputs are checked here, so a wrong name, shape or dtype raises at submit time.  The
        arrays in ``feeds`` may be reused as soon as ``submit`` returns.
        """
        self._check_open()
        return self._submit(self.check_feeds(feeds))

    def wait(self, request: "InferRequest", timeout: Optional[float] = None) -> Dict[str, np.ndarray]:
        """Block until ``request`` (from :meth:`submit`) has finished; returns its outputs by name."""
        if not isinstance(request, InferRequest) or request.session is not self:
            raise BackendError("wait() needs a request returned by submit() of this session",
                               hint="call session.wait(session.submit(feeds))")
        return request.wait(timeout)

    def set_timing(self, enabled: bool) -> bool:
        """Record the time of each call's stages for :meth:`last_timing`; returns whether it is recorded."""
        self._timing = bool(enabled)
        self._last_timing = None
        return self._timing

    def last_timing(self) -> Optional[Dict[str, float]]:
        """Stage times of the last finished call in ms (``h2d_ms``/``compute_ms``/``d2h_ms``), if recorded.

        ``timing_source`` says how: "cuda events" (GPU time of each stage) or "host clock"
        (only ``compute_ms``, wall time of the backend call).
        """
        return None if self._last_timing is None else dict(self._last_timing)

    def _check_open(self) -> None:
        if self._closed:
            raise BackendError("session for %s is closed" % self.path.name, hint="open a new session")

    def check_feeds(self, feeds: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """Check names, dtypes and shapes of ``feeds`` against :attr:`inputs`; returns them as arrays."""
        if not isinstance(feeds, Mapping):
            raise ModelError("inputs of %s must be given as a dict name -> array, got %s"
                             % (self.path.name, type(feeds).__name__),
                             hint="call infer({%r: x})" % (self.inputs[0].name if self.inputs else "input"))
        known = [t.name for t in self.inputs]
        for name in feeds:
            if name not in known:
                raise UnknownNameError("input of %s" % self.path.name, str(name), known)
        missing = [n for n in known if n not in feeds]
        if missing:
            raise ModelError("%s needs input%s %s, which %s not given" % (
                self.path.name, "s" if len(missing) > 1 else "", ", ".join(repr(m) for m in missing),
                "were" if len(missing) > 1 else "was"), hint="pass every input: " + ", ".join(known))
        out = {}
        for spec in self.inputs:
            value = feeds[spec.name]
            array = value if isinstance(value, np.ndarray) else np.asarray(value)
            check_tensor(spec, array, self.path.name)
            out[spec.name] = array
        return out

    def describe(self) -> str:
        """One honest line: which backend, version and device actually run the model."""
        return self.display_name or self.name

    def info(self) -> Dict[str, Any]:
        """Machine-readable details of the backend (for metrics files)."""
        return {"backend": self.name, "description": self.describe()}

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            worker, self._worker = self._worker, None
            if worker is not None:
                worker.shutdown(wait=True)  # requests already submitted finish first
            self._close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return "<%s %s: %s%s>" % (type(self).__name__, self.path.name, self.describe(),
                                   " (closed)" if self._closed else "")

    # -- what backends implement ------------------------------------------------------------
    @classmethod
    def open(cls, path: Path, **options: Any) -> "Session":
        """Load ``path`` (an existing file) with the options named in ``option_names``."""
        raise NotImplementedError

    def _run(self, feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        raise NotImplementedError

    def _run_outputs(self, feeds: Dict[str, np.ndarray], names: List[str]) -> Dict[str, np.ndarray]:
        """Only the outputs ``names``; backends that can skip the others (ONNX Runtime) override this."""
        out = self._run(feeds)
        return {n: out[n] for n in names}

    def _submit(self, feeds: Dict[str, np.ndarray]) -> "InferRequest":
        """Default: run :meth:`_run` on the session's one worker thread (requests run in submit order)."""
        with self._worker_lock:
            if self._worker is None:
                from concurrent.futures import ThreadPoolExecutor

                self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jetforge-%s" % self.name)
            copies = {k: np.array(v, copy=True) for k, v in feeds.items()}  # the caller may reuse its arrays
            future = self._worker.submit(self._run_timed, copies)
        return InferRequest(self, lambda timeout: future.result(timeout), future.done)

    def _run_timed(self, feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        if self._timing and self.timing_source == "host clock":
            t0 = time.perf_counter()
            out = self._run(feeds)
            self._last_timing = {"compute_ms": (time.perf_counter() - t0) * 1000.0}
            return out
        return self._run(feeds)

    def _close(self) -> None:
        """Release backend resources (called once)."""


class InferRequest:
    """An inference queued by :meth:`Session.submit`; :meth:`wait` returns its outputs (once computed, cached)."""

    def __init__(self, session: Session, wait_fn: Callable[[Optional[float]], Dict[str, np.ndarray]],
                 done_fn: Optional[Callable[[], bool]] = None) -> None:
        self.session = session
        self._wait_fn = wait_fn
        self._done_fn = done_fn
        self._result: Optional[Dict[str, np.ndarray]] = None
        self._error: Optional[BaseException] = None
        self._finished = False

    def done(self) -> bool:
        """Whether the outputs are ready (``wait`` would not block)."""
        if self._finished:
            return True
        return bool(self._done_fn()) if self._done_fn is not None else False

    def wait(self, timeout: Optional[float] = None) -> Dict[str, np.ndarray]:
        if not self._finished:
            try:
                self._result = self._wait_fn(timeout)
            except BaseException as err:
                if type(err).__name__ == "TimeoutError":  # concurrent.futures' own: the request is still running
                    raise BackendError("inference on %s did not finish within %s s"
                                       % (self.session.path.name, timeout)) from err
                self._error = err
            self._finished = True
            self._wait_fn = None  # type: ignore[assignment]  (drop references to buffers)
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def __repr__(self) -> str:
        return "<InferRequest %s %s>" % (self.session.path.name, "done" if self.done() else "pending")


BACKENDS: Registry[Type[Session]] = Registry("runtime backend")
"""Backend name -> Session subclass (lazy ``"module:Class"`` entries until first used); see :func:`register_backend`."""

_SUFFIXES: Dict[str, Tuple[str, ...]] = {}


def register_backend(name: str, target: str, suffixes: Sequence[str], summary: str = "") -> None:
    """Register the Session subclass ``target`` (``"package.module:Class"``) as backend ``name``.

    ``suffixes`` are the model files it opens (the class's own ``suffixes``, repeated here so that
    choosing a backend by suffix imports nothing; a test checks they agree).  The module is imported
    the first time the backend is used, so registering TensorRT costs no import of it.
    """
    BACKENDS.add_lazy(name, target, summary=summary)
    _SUFFIXES[name] = tuple(s.lower() for s in suffixes)


def backend_suffixes(name: str) -> Tuple[str, ...]:
    """The model-file suffixes of backend ``name`` (without importing a lazily registered one)."""
    if name in _SUFFIXES:
        return _SUFFIXES[name]
    return tuple(BACKENDS.get(name).suffixes)


def check_tensor(spec: TensorSpec, array: np.ndarray, model_name: str = "the model") -> None:
    """Raise ModelError if ``array`` does not fit ``spec`` (dtype exactly; rank; every static axis)."""
    if array.dtype == spec.dtype and array.ndim == len(spec.shape) and all(
            not isinstance(w, int) or w < 0 or w == g for w, g in zip(spec.shape, array.shape)):
        return  # the common case, checked without formatting any message
    want = "%s %s" % (format_shape(spec.shape), spec.dtype)
    if array.dtype != np.dtype(spec.dtype):
        raise ModelError("input %r of %s expects %s, got dtype %s" % (spec.name, model_name, want, array.dtype),
                         hint="convert with x.astype(np.%s)" % spec.dtype)
    if array.ndim != len(spec.shape):
        raise ModelError("input %r of %s expects %d dimensions (%s), got shape %s"
                         % (spec.name, model_name, len(spec.shape), want, tuple(array.shape)),
                         hint="add the batch axis with x[None]" if array.ndim + 1 == len(spec.shape) else None)
    for axis, (want_dim, got) in enumerate(zip(spec.shape, array.shape)):
        if isinstance(want_dim, int) and want_dim >= 0 and want_dim != got:
            raise ModelError("input %r of %s expects %s, got shape %s (axis %d is %d, must be %d)"
                             % (spec.name, model_name, want, tuple(array.shape), axis, got, want_dim))


def format_shape(shape: Sequence[Any]) -> str:
    return "[" + ", ".join("?" if (isinstance(d, int) and d < 0) else str(d) for d in shape) + "]"


def _check_sidecar_agrees(path: Path, sidecar: ModelSidecar, inputs: List[TensorSpec],
                          outputs: List[TensorSpec]) -> None:
    for kind, described, actual in (("inputs", sidecar.inputs, inputs), ("outputs", sidecar.outputs, outputs)):
        if described and [t.name for t in described] != [t.name for t in actual]:
            raise ModelError("sidecar %s describes %s %s but %s has %s" % (
                sidecar_path(path).name, kind, [t.name for t in described], path.name, [t.name for t in actual]),
                hint="re-export the model so that its sidecar is regenerated")


def backend_for_path(path: PathLike) -> str:
    """The registered backend that opens files like ``path`` (by suffix)."""
    suffix = Path(path).suffix.lower()
    for name in BACKENDS:
        if suffix in backend_suffixes(name):
            return name
    known = sorted("%s (%s)" % (s, n) for n in BACKENDS for s in backend_suffixes(n))
    raise ModelError("cannot tell which backend runs %s from its suffix %r" % (Path(path).name, suffix or ""),
                     hint="known model files: %s; or pass the backend explicitly" % ", ".join(known))


def is_in_memory_model(model: Any) -> bool:
    """``bytes`` of a serialised model, or a protobuf model object (``onnx.ModelProto``)."""
    return isinstance(model, (bytes, bytearray, memoryview)) or (
        hasattr(model, "SerializeToString") and hasattr(model, "graph"))


def open_session(path: Any, backend: str = "auto", dla_core: Optional[int] = None,
                 cuda_graph: Optional[bool] = None, optimization: Optional[str] = None, **options: Any) -> Session:
    """Open a model on ``backend`` ("auto": chosen by the file suffix) with backend-specific ``options``.

    ``path`` is a model file, or an in-memory model (``bytes`` or an ``onnx.ModelProto``; backend
    "auto" = "onnxruntime"; ``name=`` names it in messages), or a ``torch.nn.Module`` (backend
    "pytorch", development and comparison only).  ``dla_core`` selects a DLA core (TensorRT only);
    ``cuda_graph`` (default: the backend's default, True where graphs exist) turns CUDA-graph
    capture on or off; ``optimization`` is the backend's graph-optimisation level (ONNX Runtime:
    "disable", "basic", "extended", "all"; default "all"); asking for any of them from a backend
    without it is a ConfigError.  Common options: ``verify_sidecar`` (default True: a sidecar whose
    content hash does not match the model file is refused); ONNX Runtime also takes ``threads``
    (0: its own default), ``providers`` and ``spinning`` (see :mod:`jetforge.runtime.session.ort`).
    A missing file is an InputFileError; a model the backend cannot parse is a ModelError naming it.
    """
    if optimization is not None:
        options["optimization"] = optimization
    if is_in_memory_model(path):
        name = "onnxruntime" if backend == "auto" else backend
        cls = BACKENDS.get(name)
        if not cls.in_memory:
            raise ConfigError("the %s backend opens model files, not in-memory models" % name,
                              hint="save the model to a file, or use backend='onnxruntime'")
        options = _common_options(name, cls, dla_core, cuda_graph, options, extra=("name",))
        return cls.open_in_memory(path, **options)  # type: ignore[attr-defined]
    if not isinstance(path, (str, os.PathLike)):
        name = "pytorch" if backend == "auto" else backend
        cls = BACKENDS.get(name)
        if not hasattr(cls, "from_module"):
            raise ConfigError("the %s backend opens model files, not %s objects" % (name, type(path).__name__),
                              hint="pass a file path, or use backend='pytorch' for a torch.nn.Module")
        options = _common_options(name, cls, dla_core, cuda_graph, options)
        return cls.from_module(path, **options)  # type: ignore[attr-defined]
    model = require_file(path, "model file", hint="check the path, or export the model first")
    name = backend_for_path(model) if backend == "auto" else backend
    cls = BACKENDS.get(name)
    options = _common_options(name, cls, dla_core, cuda_graph, options)
    return cls.open(model, **options)


def _common_options(name: str, cls: Type[Session], dla_core: Optional[int], cuda_graph: Optional[bool],
                    options: Dict[str, Any], extra: Sequence[str] = ()) -> Dict[str, Any]:
    options = dict(options)
    if "optimization" in options and "optimization" not in cls.option_names:
        raise ConfigError("the %s backend has no graph-optimisation level (optimization=%r)"
                          % (name, options["optimization"]),
                          hint="optimisation levels are ONNX Runtime's; TensorRT optimises when it builds the engine")
    if dla_core is not None:
        if "dla_core" not in cls.option_names:
            raise ConfigError("the %s backend does not run on DLA cores (dla_core=%r)" % (name, dla_core),
                              hint="DLA cores are used through TensorRT engines: open a .engine file")
        options["dla_core"] = dla_core
    if cuda_graph is not None:
        if "cuda_graph" in cls.option_names:
            options["cuda_graph"] = bool(cuda_graph)
        elif cuda_graph:
            raise ConfigError("the %s backend has no CUDA-graph mode" % name,
                              hint="CUDA graphs are used by the tensorrt and pytorch (CUDA) backends")
    unknown = [k for k in options if k not in cls.option_names and k not in extra]
    if unknown:
        raise UnknownNameError("option of the %s backend" % name, unknown[0], tuple(cls.option_names) + tuple(extra))
    return options


def load_sidecar_if_present(path: Path, verify: bool = True) -> Optional[ModelSidecar]:
    """The model's sidecar, or None when it has none; a stale or malformed one is an error."""
    if not sidecar_path(path).is_file():
        log.debug("%s has no sidecar", path)
        return None
    return read_sidecar(path, verify_hash=verify)


def default_threads() -> int:
    """CPU cores this process may run on (the affinity mask, not the machine's total)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def thread_bound(minimum: int = 0) -> Bound:
    """The intra-op thread counts a session takes (``--threads``): ``minimum`` (0: ONNX Runtime's own choice) up to
    the CPUs this process may run on.  More threads than CPUs cannot run at once, they only take turns, and each
    costs a stack and scratch memory: ``--threads 100000`` exhausted the memory and ignored SIGTERM while ONNX
    Runtime made them."""
    cpus = default_threads()
    return Bound(int, minimum, cpus, why="%sat most the %d CPU%s this process may run on"
                 % ("0 = the runtime's own choice; " if minimum == 0 else "", cpus, "" if cpus == 1 else "s"))


def threads_argtype(minimum: int = 0) -> Callable[[str], Any]:
    """argparse's ``type=`` for ``--threads``: :func:`thread_bound`, evaluated when the command line is read."""
    def threads(text: str) -> Any:
        return thread_bound(minimum).parse(text)
    return threads


def check_positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError("%s must be a positive integer, got %r" % (name, value))
    return value


__all__ = ["Session", "InferRequest", "BACKENDS", "open_session", "backend_for_path", "backend_suffixes",
           "check_tensor", "default_threads", "is_in_memory_model", "load_sidecar_if_present", "register_backend",
           "thread_bound", "threads_argtype"]
