"""Loading a compiled cubin into the current CUDA context and launching its kernel (cuda-python driver API).

The runtime API (:mod:`jetforge.runtime.cuda`: buffers, streams) and the driver API share the
device's primary context: :func:`current_arch` and :class:`Kernel` make it current in the calling
thread first (``cudaSetDevice`` does that since CUDA 12; ``cudaFree(0)`` before), so a kernel
loaded in one pipeline thread launches from another.  A kernel takes one struct argument (a ctypes
structure, see :mod:`.sources`): ``cuLaunchKernel`` copies it at launch, so the caller may reuse
the structure at once, and a launch captured into a CUDA graph keeps the values it had.
"""

import ctypes
from typing import Any, Dict, Optional, Tuple

from jetforge.errors import BackendError
from jetforge.runtime.cuda.bindings import check, load_binding, runtime_api
from jetforge.runtime.cuda.kernels.compiler import compile_cubin

_DRIVER: Optional[Any] = None
_MODULES: Dict[Tuple[int, int, bytes], Any] = {}  # (device, context, cubin) -> CUmodule


def driver_api() -> Any:
    """cuda-python's driver module (``cuda.bindings.driver``, else ``cuda.cuda``), imported and initialised once."""
    global _DRIVER
    if _DRIVER is None:
        drv = load_binding("driver", "cuda", "launching the GPU kernels")
        try:
            result = drv.cuInit(0)
        except Exception as err:  # cuda-python raises (not returns) when libcuda itself is missing
            raise BackendError("the NVIDIA driver library (libcuda) cannot be loaded: %s" % err,
                               hint="run on a machine with an NVIDIA GPU and driver, or use the CPU path "
                                    "(--decode cpu)") from None
        _driver_check(result, "cuInit")
        _DRIVER = drv
    return _DRIVER


def _driver_check(result: Any, call: str) -> Any:
    err, values = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    if int(err) != 0:
        raise BackendError("%s failed: %s (%d)" % (call, getattr(err, "name", "CUresult"), int(err)),
                           hint="a CUDA driver call failed: check `nvidia-smi`, and that the kernel was compiled "
                                "for this GPU")
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def bind_primary_context() -> int:
    """Make the current device's primary context current in this thread; return the device index."""
    rt = runtime_api()
    device = int(check(rt.cudaGetDevice(), "cudaGetDevice"))
    check(rt.cudaSetDevice(device), "cudaSetDevice")
    check(rt.cudaFree(0), "cudaFree(0)")  # older runtimes create/bind the context lazily on the first call
    return device


def current_arch() -> int:
    """The SM version of the current device (90 for an H200, 87 for Orin, 72 for Xavier)."""
    rt = runtime_api()
    device = bind_primary_context()
    major = check(rt.cudaDeviceGetAttribute(rt.cudaDeviceAttr.cudaDevAttrComputeCapabilityMajor, device),
                  "cudaDeviceGetAttribute(major)")
    minor = check(rt.cudaDeviceGetAttribute(rt.cudaDeviceAttr.cudaDevAttrComputeCapabilityMinor, device),
                  "cudaDeviceGetAttribute(minor)")
    return int(major) * 10 + int(minor)


def _stream_int(stream: Any) -> int:
    if stream is None:
        return 0
    return int(getattr(stream, "handle", stream))


class Kernel:
    """One ``extern "C"`` kernel of a source, compiled for the current GPU and loaded once per process."""

    def __init__(self, source: str, name: str, options: Tuple[str, ...] = ()) -> None:
        self.name = name
        self.arch = current_arch()
        self.cubin = compile_cubin(source, self.arch, options, name="%s.cu" % name)
        drv = driver_api()
        device = bind_primary_context()
        ctx = _driver_check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
        key = (device, int(ctx), self.cubin)
        module = _MODULES.get(key)
        if module is None:
            module = _MODULES[key] = _driver_check(drv.cuModuleLoadData(self.cubin), "cuModuleLoadData")
        self._function = _driver_check(drv.cuModuleGetFunction(module, name.encode()), "cuModuleGetFunction")

    def launch(self, grid: Tuple[int, int, int], block: Tuple[int, int, int], args: ctypes.Structure,
               stream: Any = None) -> None:
        """Queue the kernel on ``stream`` with the one struct argument ``args`` (asynchronous)."""
        drv = driver_api()
        if int(_driver_check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")) == 0:
            bind_primary_context()
        params = (ctypes.c_void_p * 1)(ctypes.addressof(args))
        _driver_check(drv.cuLaunchKernel(self._function, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                                         0, drv.CUstream(_stream_int(stream)), ctypes.addressof(params), 0),
                      "cuLaunchKernel(%s)" % self.name)


__all__ = ["Kernel", "bind_primary_context", "current_arch", "driver_api"]
