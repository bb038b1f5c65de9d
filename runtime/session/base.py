"""The backend-agnostic half of a runtime session: the interface, input checking, backend choice.

A :class:`Session` runs one model file on one backend.  Everything a caller sees is
plain data (``TensorSpec`` lists, numpy arrays, a sidecar), so apps, benchmarks and
calibration never touch a backend's own API.  Backends register a ``Session``
subclass in :data:`BACKENDS` under their name; :func:`open_session` picks one from
the file's suffix when asked for ``backend="auto"``.  Torch-free and Python 3.8.
"""

import logging
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Type

import numpy as np

from jetforge.errors import BackendError, ConfigError, ModelError, UnknownNameError
from jetforge.fileio import PathLike, require_file
from jetforge.registry import Registry
from jetforge.runtime.sidecar import ModelSidecar, TensorSpec, read_sidecar, sidecar_path

log = logging.getLogger(__name__)

# Suffixes of model files whose backend is planned but may not be registered in this build,
# so that `auto` can say which backend a file needs instead of "unknown suffix".
PLANNED_SUFFIXES: Dict[str, str] = {".engine": "tensorrt", ".plan": "tensorrt", ".trt": "tensorrt",
                                    ".pt": "pytorch", ".pth": "pytorch", ".ts": "pytorch"}


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

    def __init__(self, path: Path, inputs: List[TensorSpec], outputs: List[TensorSpec],
                 sidecar: Optional[ModelSidecar]) -> None:
        self.path = Path(path)
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.sidecar = sidecar
        self._closed = False
        if sidecar is not None:
            _check_sidecar_agrees(self.path, sidecar, self.inputs, self.outputs)

    # -- what callers use -------------------------------------------------------------------
    @property
    def backend(self) -> str:
        return self.name

    @property
    def closed(self) -> bool:
        return self._closed

    def infer(self, feeds: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """Run the model on named inputs; returns every output by name, as numpy arrays."""
        if self._closed:
            raise BackendError("session for %s is closed" % self.path.name, hint="open a new session")
        return self._run(self.check_feeds(feeds))

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

    def _close(self) -> None:
        """Release backend resources (called once)."""


BACKENDS: Registry[Type[Session]] = Registry("runtime backend")
"""Backend name -> Session subclass.  ONNX Runtime registers here; TensorRT and PyTorch will."""


def check_tensor(spec: TensorSpec, array: np.ndarray, model_name: str = "the model") -> None:
    """Raise ModelError if ``array`` does not fit ``spec`` (dtype exactly; rank; every static axis)."""
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
        if suffix in BACKENDS.get(name).suffixes:
            return name
    planned = PLANNED_SUFFIXES.get(suffix)
    if planned:
        raise BackendError("%s needs the %s backend, which is not available in this jetforge build"
                           % (Path(path).name, planned),
                           hint="available backends: %s" % ", ".join(BACKENDS.names()))
    known = sorted("%s (%s)" % (s, n) for n in BACKENDS for s in BACKENDS.get(n).suffixes)
    raise ModelError("cannot tell which backend runs %s from its suffix %r" % (Path(path).name, suffix or ""),
                     hint="known model files: %s; or pass the backend explicitly" % ", ".join(known))


def open_session(path: PathLike, backend: str = "auto", **options: Any) -> Session:
    """Open ``path`` on ``backend`` ("auto": chosen by suffix) with backend-specific ``options``.

    Common options: ``verify_sidecar`` (default True: a sidecar whose content hash does
    not match the model file is refused).  A missing file is an InputFileError; a file
    the backend cannot parse is a ModelError naming the file.
    """
    model = require_file(path, "model file", hint="check the path, or export the model first")
    name = backend_for_path(model) if backend == "auto" else backend
    cls = BACKENDS.get(name)
    unknown = [k for k in options if k not in cls.option_names]
    if unknown:
        raise UnknownNameError("option of the %s backend" % name, unknown[0], cls.option_names)
    return cls.open(model, **options)


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


def check_positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError("%s must be a positive integer, got %r" % (name, value))
    return value


__all__ = ["Session", "BACKENDS", "open_session", "backend_for_path", "check_tensor", "default_threads",
           "load_sidecar_if_present"]
