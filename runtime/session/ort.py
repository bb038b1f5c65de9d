"""The ONNX Runtime backend: ``.onnx`` files on the CPU (and CUDA / TensorRT execution providers if present).

``onnxruntime`` is imported when a session is opened, never at import time.  The
providers actually in use are read back from ONNX Runtime after loading, so
:meth:`OrtSession.describe` states what ran the model, not what was asked for.
"""

import logging
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from jetforge.errors import BackendError, ConfigError, ModelError, UnknownNameError
from jetforge.optional import require
from jetforge.runtime.onnx_file import REEXPORT_HINT, check_onnx_file
from jetforge.runtime.session.base import (BACKENDS, Session, check_positive_int, default_threads,
                                           load_sidecar_if_present)
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


@BACKENDS.register("onnxruntime")
class OrtSession(Session):
    """An ONNX model in an ``onnxruntime.InferenceSession``."""

    name = "onnxruntime"
    display_name = "ONNX Runtime"
    suffixes = (".onnx",)
    option_names = ("threads", "providers", "optimization", "verify_sidecar")

    def __init__(self, path: Path, ort_session: Any, threads: int, sidecar: Any) -> None:
        self._sess = ort_session
        self.threads = threads
        self.providers: List[str] = list(ort_session.get_providers())
        self._output_names = [o.name for o in ort_session.get_outputs()]
        super().__init__(path, [_spec(t) for t in ort_session.get_inputs()],
                         [_spec(t) for t in ort_session.get_outputs()], sidecar)

    @classmethod
    def open(cls, path: Path, threads: Optional[int] = None, providers: Union[str, Sequence[ProviderSpec]] = "auto",
             optimization: str = "all", verify_sidecar: bool = True) -> "OrtSession":
        ort = require("onnxruntime", "running ONNX models")
        threads = default_threads() if threads is None else check_positive_int("threads", threads)
        if optimization not in OPTIMIZATION_LEVELS:
            raise UnknownNameError("ONNX Runtime optimization level", str(optimization), OPTIMIZATION_LEVELS)
        chosen = resolve_providers(providers, ort.get_available_providers())
        sidecar = load_sidecar_if_present(path, verify=verify_sidecar)

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = {
            "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}[optimization]
        opts.log_severity_level = 3  # errors only: ORT's warnings would interleave with progress bars
        check_onnx_file(path, parse=False)  # empty or text files; ORT's own parser reports damaged ones
        try:
            sess = ort.InferenceSession(str(path), sess_options=opts, providers=chosen)
        except Exception as err:  # ORT raises its own pybind exception types
            raise _load_error(path, err) from err
        if not sess.get_inputs() or not sess.get_outputs():
            raise ModelError("%s is not a complete ONNX model: it has no %s" % (
                path, "inputs" if not sess.get_inputs() else "outputs"), hint=REEXPORT_HINT)
        session = cls(path, sess, threads, sidecar)
        log.debug("opened %r", session)
        return session

    def _run(self, feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        try:
            values = self._sess.run(self._output_names, feeds)
        except Exception as err:
            raise BackendError("ONNX Runtime failed to run %s: %s" % (self.path.name, _first_line(err)),
                               hint="check the inputs against session.inputs; rerun with --debug") from err
        return dict(zip(self._output_names, values))

    def _close(self) -> None:
        self._sess = None

    @property
    def version(self) -> str:
        return str(require("onnxruntime").__version__)

    def describe(self) -> str:
        """E.g. ``ONNX Runtime 1.32.0 CPUExecutionProvider, 2 threads``."""
        main = self.providers[0] if self.providers else "no provider"
        text = "%s %s %s" % (self.display_name, self.version, main)
        if main == "CPUExecutionProvider":
            text += ", %d thread%s" % (self.threads, "" if self.threads == 1 else "s")
        elif len(self.providers) > 1:
            text += " (fallback: %s)" % ", ".join(self.providers[1:])
        return text

    def info(self) -> Dict[str, Any]:
        main = self.providers[0] if self.providers else ""
        return {"backend": self.name, "description": self.describe(), "version": self.version,
                "providers": list(self.providers), "device": "cpu" if main == "CPUExecutionProvider" else "gpu",
                "intra_op_threads": self.threads}


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
