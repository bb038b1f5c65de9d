"""cuda-python's runtime API, loaded lazily, and the error check every CUDA call goes through.

cuda-python >= 12.6 (and 13.x) names the runtime bindings ``cuda.bindings.runtime``;
older releases call them ``cuda.cudart``.  :func:`runtime_api` returns whichever is
installed.  Every binding returns a tuple ``(cudaError_t, *values)``; :func:`check`
turns a non-success code into :class:`jetforge.errors.BackendError` naming the call
(``cudaMalloc failed: cudaErrorMemoryAllocation (2)``) and returns the values.
"""

import importlib
from typing import Any, Optional

from jetforge.errors import BackendError, DependencyError
from jetforge.optional import require

_RUNTIME: Optional[Any] = None

# cudaError_t codes that get a specific fix in the message.
ERROR_HINTS = {
    2: "free GPU memory (other processes, a smaller batch) and retry",  # cudaErrorMemoryAllocation
    35: "the NVIDIA driver is older than this CUDA runtime, or missing: update the driver "
        "(on Jetson: the cuda-python release matching JetPack's CUDA)",  # cudaErrorInsufficientDriver
    100: "no CUDA device is visible: check `nvidia-smi` and CUDA_VISIBLE_DEVICES",  # cudaErrorNoDevice
    101: "no CUDA device with that index: check CUDA_VISIBLE_DEVICES",  # cudaErrorInvalidDevice
}
CAPTURE_HINT = ("an operation that is not permitted while a CUDA graph is captured ran on the stream; "
                "run without CUDA graphs (cuda_graph=False)")
CAPTURE_ERRORS = range(900, 910)  # cudaErrorStreamCaptureUnsupported .. cudaErrorStreamCaptureWrongThread etc.


def load_binding(name: str, legacy: str, purpose: str) -> Any:
    """cuda-python's ``cuda.bindings.<name>`` (>= 12.6), else the older ``cuda.<legacy>``; else one DependencyError."""
    try:
        return require("cuda.bindings." + name, purpose)
    except DependencyError:
        try:
            return importlib.import_module("cuda." + legacy)  # cuda-python < 12.6
        except ImportError:
            raise DependencyError("cuda-python is not installed; it is needed for %s" % purpose,
                                  hint="pip install 'jetforge[cuda]' (cuda-python matching your CUDA; on "
                                       "Jetson the release for JetPack's CUDA)") from None


def runtime_api() -> Any:
    """The cuda-python runtime module (``cuda.bindings.runtime``, else ``cuda.cudart``), imported once."""
    global _RUNTIME
    if _RUNTIME is None:
        _RUNTIME = load_binding("runtime", "cudart", "CUDA buffers, streams and graphs (the TensorRT backend)")
    return _RUNTIME


def use_runtime_api(module: Optional[Any]) -> Optional[Any]:
    """Make ``module`` the runtime bindings every CUDA call goes through (None: import cuda-python's again on the
    next call); returns the one it replaces.  The seam for tests' host-memory stand-in
    (tests/standins/cuda_runtime_standin.py); jetforge itself never calls it."""
    global _RUNTIME
    previous, _RUNTIME = _RUNTIME, module
    return previous


def error_code(err: Any) -> int:
    return int(err)


def error_name(err: Any) -> str:
    """``cudaErrorMemoryAllocation`` for an error value, without raising."""
    name = getattr(err, "name", None)
    if name:
        return str(name)
    try:
        status, text = runtime_api().cudaGetErrorName(err)
        if int(status) == 0 and text:
            return text.decode() if isinstance(text, bytes) else str(text)
    except Exception:  # the name is decoration: never fail while reporting another failure
        pass
    return "cudaError %d" % error_code(err)


def check(result: Any, call: str) -> Any:
    """Raise BackendError if ``result`` (a binding's return) is not cudaSuccess; else return its values.

    ``(err,)`` -> None, ``(err, x)`` -> x, ``(err, x, y)`` -> (x, y).
    """
    if isinstance(result, tuple):
        err, values = result[0], result[1:]
    else:
        err, values = result, ()
    code = error_code(err)
    if code != 0:
        hint = CAPTURE_HINT if code in CAPTURE_ERRORS else ERROR_HINTS.get(code)
        raise BackendError("%s failed: %s (%d)" % (call, error_name(err), code), hint=hint)
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def clear_last_error() -> int:
    """Reset CUDA's sticky last-error slot (after a failed capture); returns the code that was there."""
    rt = runtime_api()
    result = rt.cudaGetLastError()
    err = result[0] if isinstance(result, tuple) else result
    return error_code(err)


def device_count() -> int:
    """CUDA devices visible to this process; 0 without a driver or device (never raises for that)."""
    rt = runtime_api()
    err, count = rt.cudaGetDeviceCount()
    return int(count) if error_code(err) == 0 and count else 0


def synchronize_device() -> None:
    check(runtime_api().cudaDeviceSynchronize(), "cudaDeviceSynchronize")
