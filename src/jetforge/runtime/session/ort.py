"""The ONNX Runtime backend: ``.onnx`` files on the CPU (and CUDA / TensorRT execution providers if present).

``onnxruntime`` is imported when a session is opened, never at import time.  The
providers actually in use are read back from ONNX Runtime after loading, so
:meth:`OrtSession.describe` states what ran the model, not what was asked for.

This is the only place in jetforge that creates an ``onnxruntime.InferenceSession``
(a test checks it): from a file (:meth:`OrtSession.open`) or from memory
(:meth:`OrtSession.open_in_memory`: ``bytes`` or an ``onnx.ModelProto``, which is how
calibration and the INT8 evaluator run the models they build by graph surgery).

Options beyond the common ones: ``threads`` (intra-op threads; 0 = ONNX Runtime's own
default, one per physical core), ``optimization`` (graph optimisation level),
``providers``, ``spinning`` (whether idle intra-op workers spin-wait for work: ONNX
Runtime's default is to spin, which costs the other threads of a busy small CPU time;
``False`` turns it off, None keeps ONNX Runtime's default) and
``optimized_model_path`` (where ONNX Runtime saves the graph it optimised: what it runs) and ``profile_prefix``
(turn ONNX Runtime's profiler on, its JSON trace written under that prefix; :meth:`OrtSession.end_profiling` ends it
and returns the file: ``jetforge bench --profile``).
"""

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from jetforge.errors import BackendError, ConfigError, ModelError, UnknownNameError
from jetforge.optional import require
from jetforge.runtime.onnx_file import REEXPORT_HINT, check_onnx_file
from jetforge.runtime.session.base import Session, default_threads, load_sidecar_if_present, thread_bound
from jetforge.runtime.sidecar import TensorSpec

log = logging.getLogger(__name__)

# ONNX Runtime's element types -> numpy dtype names.
ORT_DTYPES = {
    "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
    "tensor(int8)": "int8", "tensor(uint8)": "uint8", "tensor(int16)": "int16", "tensor(uint16)": "uint16",
    "tensor(int32)": "int32", "tensor(uint32)": "uint32", "tensor(int64)": "int64", "tensor(uint64)": "uint64",
    "tensor(bool)": "bool",
}

# Preference order of `providers="auto"`.  The TensorRT EP is only used when asked for by name:
# it builds an engine on first load (minutes), and jetforge's own TensorRT backend is the real path.
AUTO_PROVIDERS = ("CUDAExecutionProvider", "CPUExecutionProvider")

PROVIDER_NAMES = {"CPUExecutionProvider": "CPU", "CUDAExecutionProvider": "CUDA",
                  "TensorrtExecutionProvider": "TensorRT"}

OPTIMIZATION_LEVELS = ("disable", "basic", "extended", "all")

ProviderSpec = Union[str, Tuple[str, Dict[str, Any]]]

# In-memory models at least this large are written to a temporary folder (with external data) and
# opened from there: ONNX Runtime parses a model given as bytes as one protobuf, which stops at 2 GB.
IN_MEMORY_LIMIT = 1_500_000_000


class OrtSession(Session):
    """An ONNX model in an ``onnxruntime.InferenceSession``."""

    name = "onnxruntime"
    display_name = "ONNX Runtime"
    suffixes = (".onnx",)
    option_names = ("threads", "providers", "optimization", "verify_sidecar", "spinning", "optimized_model_path",
                    "profile_prefix")
    in_memory = True

    def __init__(self, path: Path, ort_session: Any, threads: int, sidecar: Any) -> None:
        self._sess = ort_session
        self.threads = threads
        self.providers: List[str] = list(ort_session.get_providers())
        self._output_names = [o.name for o in ort_session.get_outputs()]
        self._spill: Optional[str] = None  # temporary folder of a large in-memory model, removed on close
        super().__init__(path, [_spec(t) for t in ort_session.get_inputs()],
                         [_spec(t) for t in ort_session.get_outputs()], sidecar)

    @classmethod
    def open(cls, path: Path, threads: Optional[int] = None, providers: Union[str, Sequence[ProviderSpec]] = "auto",
             optimization: str = "all", verify_sidecar: bool = True, spinning: Optional[bool] = None,
             optimized_model_path: Optional[str] = None, profile_prefix: Optional[str] = None) -> "OrtSession":
        ort = require("onnxruntime", "running ONNX models")
        opts, threads = session_options(ort, threads, optimization, spinning, optimized_model_path)
        if profile_prefix is not None:  # the profiler starts with the session; end_profiling() writes the trace
            opts.enable_profiling = True
            opts.profile_file_prefix = str(profile_prefix)
        chosen = resolve_providers(providers, ort.get_available_providers())
        sidecar = load_sidecar_if_present(path, verify=verify_sidecar)
        check_onnx_file(path, parse=False)  # empty or text files; ORT's own parser reports damaged ones
        try:
            sess = ort.InferenceSession(str(path), sess_options=opts, providers=chosen)
        except Exception as err:  # ORT raises its own pybind exception types
            raise _load_error(path, err) from err
        return cls._opened(path, sess, threads, sidecar)

    @classmethod
    def open_in_memory(cls, model: Any, name: str = "in-memory model", threads: Optional[int] = None,
                       providers: Union[str, Sequence[ProviderSpec]] = "auto", optimization: str = "all",
                       spinning: Optional[bool] = None, optimized_model_path: Optional[str] = None,
                       verify_sidecar: bool = True) -> "OrtSession":
        """A session over ``model`` (``bytes`` or an ``onnx.ModelProto``), named ``name`` in messages; no sidecar."""
        del verify_sidecar  # an in-memory model has no sidecar
        ort = require("onnxruntime", "running ONNX models")
        opts, threads = session_options(ort, threads, optimization, spinning, optimized_model_path)
        chosen = resolve_providers(providers, ort.get_available_providers())
        label = Path(name)
        spill = None
        try:
            if isinstance(model, (bytes, bytearray, memoryview)):
                source: Any = bytes(model)
            elif model.ByteSize() < IN_MEMORY_LIMIT:
                source = model.SerializeToString()
            else:
                spill = tempfile.mkdtemp(prefix="jetforge-model-")
                source = _spill(model, spill)
            sess = ort.InferenceSession(source, sess_options=opts, providers=chosen)
        except Exception as err:  # ORT raises its own pybind exception types
            if spill is not None:
                shutil.rmtree(spill, ignore_errors=True)
            if isinstance(err, ModelError):
                raise
            raise _load_error(label, err) from err
        session = cls._opened(label, sess, threads, None)
        session._spill = spill
        return session

    @classmethod
    def _opened(cls, path: Path, sess: Any, threads: int, sidecar: Any) -> "OrtSession":
        if not sess.get_inputs() or not sess.get_outputs():
            raise ModelError("%s is not a complete ONNX model: it has no %s" % (
                path, "inputs" if not sess.get_inputs() else "outputs"), hint=REEXPORT_HINT)
        session = cls(path, sess, threads, sidecar)
        log.debug("opened %r", session)
        return session

    def _run(self, feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        return self._run_outputs(feeds, self._output_names)

    def _run_outputs(self, feeds: Dict[str, np.ndarray], names: List[str]) -> Dict[str, np.ndarray]:
        try:
            values = self._sess.run(names, feeds)
        except Exception as err:
            raise BackendError("ONNX Runtime failed to run %s: %s" % (self.path.name, _first_line(err)),
                               hint="check the inputs against session.inputs; rerun with --debug") from err
        return dict(zip(names, values))

    def end_profiling(self) -> Path:
        """End ONNX Runtime's profiler (a session opened with ``profile_prefix``) and return its JSON trace."""
        self._check_open()
        return Path(self._sess.end_profiling())

    def _close(self) -> None:
        self._sess = None
        if self._spill is not None:
            shutil.rmtree(self._spill, ignore_errors=True)
            self._spill = None

    @property
    def version(self) -> str:
        return str(require("onnxruntime").__version__)

    def describe(self) -> str:
        """E.g. ``ONNX Runtime 1.32.0 CPUExecutionProvider, 2 threads``."""
        main = self.providers[0] if self.providers else "no provider"
        text = "%s %s %s" % (self.display_name, self.version, main)
        if main == "CPUExecutionProvider" and self.threads:
            text += ", %d thread%s" % (self.threads, "" if self.threads == 1 else "s")
        elif main == "CPUExecutionProvider":
            text += ", ONNX Runtime's default threads"
        elif len(self.providers) > 1:
            text += " (fallback: %s)" % ", ".join(self.providers[1:])
        return text

    def info(self) -> Dict[str, Any]:
        main = self.providers[0] if self.providers else ""
        return {"backend": self.name, "description": self.describe(), "version": self.version,
                "providers": list(self.providers), "device": "cpu" if main == "CPUExecutionProvider" else "gpu",
                "intra_op_threads": self.threads}


def session_options(ort: Any, threads: Optional[int], optimization: str, spinning: Optional[bool],
                    optimized_model_path: Optional[str]) -> Tuple[Any, int]:
    """``onnxruntime.SessionOptions`` for the backend's options, and the intra-op thread count (0: ORT's default)."""
    if threads is None:
        threads = default_threads()
    else:
        threads = thread_bound().check(threads, "threads")
    if optimization not in OPTIMIZATION_LEVELS:
        raise UnknownNameError("ONNX Runtime optimization level", str(optimization), OPTIMIZATION_LEVELS)
    if spinning not in (None, True, False):
        raise ConfigError("spinning must be true, false or unset, got %r" % (spinning,))
    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}[optimization]
    opts.log_severity_level = 3  # errors only: ORT's warnings would interleave with progress bars
    if spinning is not None:
        opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    if optimized_model_path is not None:
        opts.optimized_model_filepath = str(optimized_model_path)
    return opts, threads


def _spill(model: Any, folder: str) -> str:
    """Write a large ``onnx.ModelProto`` into ``folder`` with its weights as external data; returns the path."""
    onnx = require("onnx", "opening a large in-memory ONNX model")
    path = os.path.join(folder, "model.onnx")
    onnx.save(model, path, save_as_external_data=True, location="model.onnx.data")
    return path


def resolve_providers(requested: Union[str, Sequence[ProviderSpec]], available: Sequence[str]) -> List[ProviderSpec]:
    """``"auto"`` -> CUDA (if present) then CPU; a name or list -> checked against ``available``.

    Short names are accepted: ``"cpu"``, ``"cuda"``, ``"tensorrt"``.
    """
    if isinstance(requested, str) and requested == "auto":
        return [p for p in AUTO_PROVIDERS if p in available]
    items = [requested] if isinstance(requested, (str, tuple)) else list(requested)
    if not items:
        raise ConfigError("providers must name at least one ONNX Runtime execution provider")
    short = {v.lower(): k for k, v in PROVIDER_NAMES.items()}
    out: List[ProviderSpec] = []
    for item in items:
        name, options = (item if isinstance(item, tuple) else (item, None))
        name = short.get(str(name).lower(), name)
        if name not in available:
            raise BackendError("ONNX Runtime execution provider %s is not available in this installation" % name,
                               hint="available: %s (the CUDA/TensorRT providers need the onnxruntime-gpu build)"
                                    % ", ".join(available))
        out.append((name, options) if options else name)
    return out


def _spec(node: Any) -> TensorSpec:
    shape = [d if isinstance(d, (int, str)) else -1 for d in (node.shape or [])]
    dtype = ORT_DTYPES.get(node.type)
    if dtype is None:
        raise ModelError("tensor %r has type %s, which jetforge sessions do not handle" % (node.name, node.type))
    return TensorSpec(name=node.name, shape=shape, dtype=dtype)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    line = text[0] if text else type(err).__name__
    # "[ONNXRuntimeError] : 7 : INVALID_PROTOBUF : Load model from x failed:Protobuf parsing failed."
    if line.startswith("[ONNXRuntimeError]"):
        line = line.split(" : ")[-1]
    return line


def _load_error(path: Path, err: BaseException) -> Exception:
    kind = type(err).__name__
    detail = _first_line(err)
    # Drop ORT's "Load model from <path> failed:" prefix: the path is already in our message.
    if " failed:" in detail and detail.startswith("Load model from"):
        detail = detail.split(" failed:", 1)[1].strip()
    if kind in ("InvalidProtobuf", "InvalidArgument", "InvalidGraph", "NoModel") or "protobuf" in detail.lower():
        return ModelError("ONNX model %s is not a readable ONNX model: %s" % (path, detail), hint=REEXPORT_HINT)
    return ModelError("ONNX Runtime cannot load %s: %s" % (path, detail),
                      hint="check the model's opset and operators against ONNX Runtime %s"
                           % require("onnxruntime").__version__)
