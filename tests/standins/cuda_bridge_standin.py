"""The TensorRT stand-in on a real GPU (tests only): the engine's work queued on a real CUDA stream.

With :func:`tests.standins.standin_tensorrt` ``(real_cuda=True)`` jetforge's CUDA layer is cuda-python itself --
real ``cudaMalloc`` device buffers, pinned host memory, streams, events and CUDA graphs -- and only TensorRT is the
stand-in.  Its ``execute_async_v3`` then queues, on the session's stream: device-to-pinned copies of the inputs from
the addresses the session bound, a host function (``cudaLaunchHostFunc``) that runs the source ONNX in ONNX Runtime,
and pinned-to-device copies of the outputs to their bound addresses.  All three are stream work, so a CUDA graph
captures them and replays them, reading and writing the addresses it captured, as it would TensorRT's kernels.  The
arithmetic is still ONNX Runtime's on the CPU, and nothing here is timed for a report.
"""

import ctypes
from typing import Any, Callable, Dict, List, Tuple

import numpy as np

from jetforge.runtime.cuda import PinnedBuffer, check, runtime_api

HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_DRIVER: List[Any] = []


def launch_host_func(stream: int, callback: Any) -> None:
    """``cuLaunchHostFunc`` called in the driver library itself (libcuda), not through cuda-python.

    Why: cuda-python's ``cudaLaunchHostFunc`` passes CUDA its own wrapper with a small heap block holding the
    Python-side function, and frees that block when the wrapper has run once.  A host node captured into a CUDA
    graph runs at every replay, so from the second replay on it reads freed memory (seen on an H100: a segmentation
    fault in the first test that replays a graph twice).  Called directly, CUDA stores our ctypes callback's own
    address, which lives as long as ``RealCudaBridge._callbacks`` holds it."""
    if not _DRIVER:
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuLaunchHostFunc.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        lib.cuLaunchHostFunc.restype = ctypes.c_int
        _DRIVER.append(lib)
    code = _DRIVER[0].cuLaunchHostFunc(ctypes.c_void_p(stream), ctypes.cast(callback, ctypes.c_void_p), None)
    if code:
        raise RuntimeError("cuLaunchHostFunc(stand-in engine) failed with CUresult %d" % code)


class RealCudaBridge:
    """The TensorRT stand-in's ``device`` on a real GPU (see the module docstring)."""

    def __init__(self) -> None:
        self._staging: Dict[Tuple[str, str, int, int], PinnedBuffer] = {}
        self._callbacks: List[Any] = []  # ctypes callbacks a captured graph may still call
        self.host_calls = 0
        self.errors: List[str] = []

    def _stage(self, key: Tuple[str, str, int], nbytes: int) -> PinnedBuffer:
        """A pinned buffer per tensor, address and size, kept until :meth:`close`: a session keeps several graphs
        (one per shape) and each replays the copies it captured, into the staging buffer it captured them with; a
        buffer replaced when a larger shape came would leave the other graphs copying into freed memory (seen on an
        H100: cudaErrorLaunchFailure).  Allocated at the warm-up enqueue, before any capture."""
        full = key + (nbytes,)
        buf = self._staging.get(full)
        if buf is None:
            buf = self._staging[full] = PinnedBuffer(max(256, nbytes))
        return buf

    def execute(self, stream: Any, inputs: List[Tuple[str, int, Tuple[int, ...], str]],
                outputs: List[Tuple[str, int, Tuple[int, ...], str]],
                compute: Callable[[Dict[str, Any]], Dict[str, Any]]) -> None:
        rt = runtime_api()
        handle = int(stream)

        def nbytes(shape: Tuple[int, ...], dtype: str) -> int:
            return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize

        ins = [(n, self._stage(("in", n, p), nbytes(s, d)), p, s, d) for n, p, s, d in inputs]
        outs = [(n, self._stage(("out", n, p), nbytes(s, d)), p, s, d) for n, p, s, d in outputs]
        for _, stage, ptr, shape, dtype in ins:
            check(rt.cudaMemcpyAsync(stage.ptr, ptr, nbytes(shape, dtype), rt.cudaMemcpyKind.cudaMemcpyDeviceToHost,
                                     handle), "cudaMemcpyAsync(stand-in engine input)")

        def host(_: Any) -> None:  # runs on CUDA's callback thread: no CUDA calls in here
            try:
                results = compute({n: stage.array(s, d).copy() for n, stage, _p, s, d in ins})
                for name, stage, _p, shape, dtype in outs:
                    np.copyto(stage.array(shape, dtype), results[name].reshape(shape), casting="no")
                self.host_calls += 1
            except Exception as err:  # an exception cannot cross into CUDA: kept for the test to see
                self.errors.append("%s: %s" % (type(err).__name__, err))

        callback = HOST_FN(host)
        self._callbacks.append(callback)
        launch_host_func(handle, callback)
        for _, stage, ptr, shape, dtype in outs:
            check(rt.cudaMemcpyAsync(ptr, stage.ptr, nbytes(shape, dtype), rt.cudaMemcpyKind.cudaMemcpyHostToDevice,
                                     handle), "cudaMemcpyAsync(stand-in engine output)")

    def close(self) -> None:
        for buf in self._staging.values():
            buf.close()
        self._staging.clear()
