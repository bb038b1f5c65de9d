"""Device memory and pinned (page-locked) host memory, through cuda-python.

A :class:`DeviceBuffer` is ``cudaMalloc`` memory; a :class:`PinnedBuffer` is
``cudaMallocHost`` memory viewed as numpy arrays, so that host<->device copies can
be asynchronous on a stream.  Both free their memory on :meth:`close` (or leaving a
``with`` block); a numpy view of a pinned buffer must not be used after that.
"""

import ctypes
from typing import Any, Optional, Sequence

import numpy as np

from jetforge.errors import BackendError
from jetforge.runtime.cuda.bindings import check, runtime_api


def nbytes_of(shape: Sequence[int], dtype: Any) -> int:
    """Bytes of a dense array of ``shape`` and ``dtype`` (an empty shape is one element)."""
    count = 1
    for d in shape:
        if int(d) < 0:
            raise ValueError("shape %s has an unresolved (negative) dimension" % (tuple(shape),))
        count *= int(d)
    return count * np.dtype(dtype).itemsize


def _stream_handle(stream: Any) -> Any:
    if stream is None:
        return 0
    return getattr(stream, "handle", stream)


def copy_device_to_host(dst: "PinnedBuffer", src_ptr: int, nbytes: int, stream: Any = None) -> None:
    """Asynchronous copy of ``nbytes`` from a device address (a buffer of ours, or one a TensorRT session hands out)
    into the pinned buffer ``dst``."""
    if int(nbytes) > dst.nbytes:
        raise BackendError("a %d-byte copy into a %d-byte pinned buffer" % (nbytes, dst.nbytes))
    rt = runtime_api()
    check(rt.cudaMemcpyAsync(dst.ptr, int(src_ptr), int(nbytes), rt.cudaMemcpyKind.cudaMemcpyDeviceToHost,
                             _stream_handle(stream)), "cudaMemcpyAsync(device to host)")


def copy_2d(dst: int, dst_pitch: int, src: int, src_pitch: int, width_bytes: int, rows: int, stream: Any = None) -> None:
    """Asynchronous pitched device-to-device copy (``cudaMemcpy2DAsync``): ``rows`` rows of ``width_bytes``."""
    rt = runtime_api()
    check(rt.cudaMemcpy2DAsync(int(dst), int(dst_pitch), int(src), int(src_pitch), int(width_bytes), int(rows),
                               rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice, _stream_handle(stream)),
          "cudaMemcpy2DAsync(device to device)")


class DeviceBuffer:
    """``nbytes`` of device memory (``cudaMalloc``); ``ptr`` is its address as an int."""

    def __init__(self, nbytes: int) -> None:
        if nbytes < 0:
            raise ValueError("buffer size must not be negative, got %d" % nbytes)
        self.nbytes = int(nbytes)
        # cudaMalloc(0) returns a null pointer; keep at least one byte so that the address is valid for TensorRT.
        self._ptr: Optional[int] = int(check(runtime_api().cudaMalloc(max(1, self.nbytes)), "cudaMalloc"))

    @property
    def ptr(self) -> int:
        if self._ptr is None:
            raise BackendError("device buffer used after it was freed")
        return self._ptr

    def copy_from_host(self, src: "PinnedBuffer", nbytes: Optional[int] = None, stream: Any = None) -> None:
        """Asynchronous host-to-device copy of ``nbytes`` (default: all) from a pinned buffer."""
        n = self.nbytes if nbytes is None else int(nbytes)
        _check_size(n, self.nbytes, src.nbytes)
        rt = runtime_api()
        check(rt.cudaMemcpyAsync(self.ptr, src.ptr, n, rt.cudaMemcpyKind.cudaMemcpyHostToDevice,
                                 _stream_handle(stream)), "cudaMemcpyAsync(host to device)")

    def copy_to_host(self, dst: "PinnedBuffer", nbytes: Optional[int] = None, stream: Any = None) -> None:
        """Asynchronous device-to-host copy of ``nbytes`` (default: all) into a pinned buffer."""
        n = self.nbytes if nbytes is None else int(nbytes)
        _check_size(n, self.nbytes, dst.nbytes)
        copy_device_to_host(dst, self.ptr, n, stream)

    def copy_from_device(self, src: "DeviceBuffer", nbytes: Optional[int] = None, stream: Any = None) -> None:
        """Asynchronous device-to-device copy."""
        n = self.nbytes if nbytes is None else int(nbytes)
        _check_size(n, self.nbytes, src.nbytes)
        rt = runtime_api()
        check(rt.cudaMemcpyAsync(self.ptr, src.ptr, n, rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice,
                                 _stream_handle(stream)), "cudaMemcpyAsync(device to device)")

    def fill_bytes(self, value: int, nbytes: Optional[int] = None, stream: Any = None) -> None:
        """Asynchronous ``cudaMemsetAsync`` of every byte to ``value``."""
        n = self.nbytes if nbytes is None else int(nbytes)
        _check_size(n, self.nbytes, self.nbytes)
        check(runtime_api().cudaMemsetAsync(self.ptr, int(value), n, _stream_handle(stream)), "cudaMemsetAsync")

    def close(self) -> None:
        if self._ptr is not None:
            ptr, self._ptr = self._ptr, None
            check(runtime_api().cudaFree(ptr), "cudaFree")

    def __enter__(self) -> "DeviceBuffer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return "<DeviceBuffer %d bytes%s>" % (self.nbytes, " freed" if self._ptr is None else "")


class PinnedBuffer:
    """``nbytes`` of page-locked host memory (``cudaMallocHost``), viewed as numpy arrays with :meth:`array`."""

    def __init__(self, nbytes: int) -> None:
        if nbytes < 0:
            raise ValueError("buffer size must not be negative, got %d" % nbytes)
        self.nbytes = int(nbytes)
        self._ptr: Optional[int] = int(check(runtime_api().cudaMallocHost(max(1, self.nbytes)), "cudaMallocHost"))
        self._raw = (ctypes.c_uint8 * max(1, self.nbytes)).from_address(self._ptr)

    @property
    def ptr(self) -> int:
        if self._ptr is None:
            raise BackendError("pinned buffer used after it was freed")
        return self._ptr

    def array(self, shape: Sequence[int], dtype: Any) -> np.ndarray:
        """A numpy view of the first bytes of the buffer as ``shape`` / ``dtype`` (no copy)."""
        need = nbytes_of(shape, dtype)
        if need > self.nbytes:
            raise BackendError("a %s %s array needs %d bytes; the pinned buffer holds %d"
                               % (tuple(shape), np.dtype(dtype).name, need, self.nbytes))
        self.ptr  # raises when freed
        flat = np.frombuffer(self._raw, dtype=np.uint8, count=need)
        return flat.view(np.dtype(dtype)).reshape(tuple(int(d) for d in shape))

    def close(self) -> None:
        if self._ptr is not None:
            ptr, self._ptr = self._ptr, None
            self._raw = None
            check(runtime_api().cudaFreeHost(ptr), "cudaFreeHost")

    def __enter__(self) -> "PinnedBuffer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return "<PinnedBuffer %d bytes%s>" % (self.nbytes, " freed" if self._ptr is None else "")


def _check_size(n: int, *capacities: int) -> None:
    if n < 0 or any(n > c for c in capacities):
        raise BackendError("a copy of %d bytes does not fit buffers of %s bytes"
                           % (n, " and ".join(map(str, capacities))))


# ------------------------------------------------------------------------------------ CUDA IPC (between processes)
IPC_HANDLE_BYTES = 64  # CUDA_IPC_HANDLE_SIZE: cudaIpcMemHandle_t is 64 opaque bytes


def ipc_handle_bytes(ptr: int) -> bytes:
    """The ``cudaIpcGetMemHandle`` of the allocation starting at ``ptr``, as 64 bytes another process can open.

    cuda-python's handle type exposes no byte field in every release (13.x has only ``getPtr``), so the bytes are
    read through its address: the struct is the C ``cudaIpcMemHandle_t`` itself."""
    handle = check(runtime_api().cudaIpcGetMemHandle(int(ptr)), "cudaIpcGetMemHandle")
    return ctypes.string_at(int(handle.getPtr()), IPC_HANDLE_BYTES)


class IpcMapping:
    """Device memory of another process, mapped into this one by ``cudaIpcOpenMemHandle``; ``ptr`` is valid here
    until :meth:`close` (``cudaIpcCloseMemHandle``), which must come before the exporting process frees it."""

    def __init__(self, handle: bytes) -> None:
        if len(handle) != IPC_HANDLE_BYTES:
            raise BackendError("a CUDA IPC memory handle is %d bytes, got %d" % (IPC_HANDLE_BYTES, len(handle)))
        rt = runtime_api()
        h = rt.cudaIpcMemHandle_t()
        ctypes.memmove(int(h.getPtr()), bytes(handle), IPC_HANDLE_BYTES)
        self._ptr: Optional[int] = int(check(rt.cudaIpcOpenMemHandle(h, rt.cudaIpcMemLazyEnablePeerAccess),
                                             "cudaIpcOpenMemHandle"))

    @property
    def ptr(self) -> int:
        if self._ptr is None:
            raise BackendError("IPC-mapped device memory used after it was closed")
        return self._ptr

    def close(self) -> None:
        if self._ptr is not None:
            ptr, self._ptr = self._ptr, None
            check(runtime_api().cudaIpcCloseMemHandle(ptr), "cudaIpcCloseMemHandle")
