"""Host frames to GPU frames and device tensors back to numpy: for CPU-decoded frames, tests and benchmarks.

A CPU-decoded frame (OpenCV's BGR) is uploaded once and then preprocessed by the same kernel as a
decoder's frame (:class:`.preprocess.PackedFrame`).  Rows may be padded to a ``pitch`` (as
decoders pad theirs), so tests see the kernel honour pitches.  These helpers copy through a
pinned staging buffer and wait for the copy; a pipeline that uploads every frame keeps its own
pinned buffers and copies asynchronously.
"""

from typing import Any, List, Optional, Tuple

import numpy as np

from jetforge.runtime.cuda.bindings import synchronize_device
from jetforge.runtime.cuda.kernels.preprocess import Nv12Frame, PackedFrame
from jetforge.runtime.cuda.memory import DeviceBuffer, PinnedBuffer


def upload_rows(rows: np.ndarray, pitch: Optional[int] = None) -> Tuple[DeviceBuffer, int]:
    """A 2-D (or HxWxC, flattened per row) uint8 array -> device memory with rows ``pitch`` bytes apart."""
    flat = np.ascontiguousarray(rows).reshape(rows.shape[0], -1)
    h, row_bytes = flat.shape
    pitch = row_bytes if pitch is None else int(pitch)
    if pitch < row_bytes:
        raise ValueError("pitch %d is shorter than a row (%d bytes)" % (pitch, row_bytes))
    buf = DeviceBuffer(h * pitch)
    with PinnedBuffer(h * pitch) as staging:
        staging.array((h, pitch), np.uint8)[:, :row_bytes] = flat
        buf.copy_from_host(staging)
        synchronize_device()
    return buf, pitch


def upload_nv12(y: np.ndarray, uv: np.ndarray, pitch: Optional[int] = None,
                contiguous: bool = False) -> Tuple[List[DeviceBuffer], Nv12Frame]:
    """(Y, UV) uint8 planes -> device memory (two allocations, or one as NVDEC writes it) and the frame's handle."""
    h, w = y.shape
    if contiguous:
        buf, p = upload_rows(np.concatenate([y, uv]), pitch)
        return [buf], Nv12Frame.contiguous(buf.ptr, w, h, p)
    ybuf, yp = upload_rows(y, pitch)
    uvbuf, uvp = upload_rows(uv, pitch)
    return [ybuf, uvbuf], Nv12Frame(ybuf.ptr, yp, uvbuf.ptr, uvp, w, h)


def upload_packed(image: np.ndarray, pitch: Optional[int] = None) -> Tuple[DeviceBuffer, PackedFrame]:
    """An HxWx3 uint8 frame -> device memory and its handle."""
    h, w = image.shape[:2]
    buf, p = upload_rows(image, pitch)
    return buf, PackedFrame(buf.ptr, p, w, h)


def upload_array(array: np.ndarray) -> DeviceBuffer:
    """Any dense numpy array -> a device buffer of its bytes."""
    data = np.ascontiguousarray(array)
    buf = DeviceBuffer(data.nbytes)
    with PinnedBuffer(data.nbytes) as staging:
        staging.array((data.nbytes,), np.uint8)[...] = data.reshape(-1).view(np.uint8)
        buf.copy_from_host(staging)
        synchronize_device()
    return buf


def download(ptr_or_buffer: Any, shape: Tuple[int, ...], dtype: Any, stream: Any = None) -> np.ndarray:
    """A copy of a device tensor as numpy (waits for ``stream``'s work first)."""
    from jetforge.runtime.cuda.bindings import check, runtime_api

    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    ptr = int(getattr(ptr_or_buffer, "ptr", ptr_or_buffer))
    rt = runtime_api()
    if stream is not None:
        check(rt.cudaStreamSynchronize(getattr(stream, "handle", stream)), "cudaStreamSynchronize")
    with PinnedBuffer(nbytes) as staging:
        check(rt.cudaMemcpy(staging.ptr, ptr, nbytes, rt.cudaMemcpyKind.cudaMemcpyDeviceToHost), "cudaMemcpy")
        return staging.array(shape, dtype).copy()


__all__ = ["download", "upload_array", "upload_nv12", "upload_packed", "upload_rows"]
