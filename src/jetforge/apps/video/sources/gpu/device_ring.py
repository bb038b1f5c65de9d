"""Owned copies of hardware-decoded frames, without torch: :class:`DeviceFrameRing`, a ``keep`` hook for NVDEC sources.

Why: a decoder hands out frames in its own surfaces, which it may reuse once later frames are decoded; a
pipeline holds a frame longer than that (waiting in the batcher, then in a batch on the GPU).  So each frame
is copied once, device to device, into one of ``slots`` buffers of its stream, and the ring is large enough that a
slot is reused only after the frame in it has gone through inference (the batcher's depth plus the batches in
flight, a few frames per stream; 16 by default).  The copy is two ``cudaMemcpy2DAsync`` calls (luma and chroma
planes, pitched -> contiguous) on the source's own non-blocking stream and one stream synchronize, which releases
the GIL: a few microseconds of Python per frame, where a torch ``clone`` costs several tens at 16 streams.

A frame in host memory (a CPU stand-in such as the tests' ``FakeNvDecoder``) is copied on the host instead.
"""

from typing import Any, Dict, List, Optional

import numpy as np

from jetforge.apps.video.sources.gpu.nvdec import plane_pointers
from jetforge.errors import ConfigError


class OwnedNv12:
    """An NV12 frame in a ring slot: ``(H*3/2, W)`` uint8, contiguous, in device memory (CUDA array interface)."""

    __slots__ = ("ptr", "width", "height")

    def __init__(self, ptr: int, width: int, height: int) -> None:
        self.ptr, self.width, self.height = int(ptr), int(width), int(height)

    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        return {"shape": (self.height * 3 // 2, self.width), "typestr": "|u1", "data": (self.ptr, False),
                "strides": (self.width, 1), "version": 3}


class DeviceFrameRing:
    """``keep(decoded, width, height)`` for one source: the frame copied into the next of ``slots`` device buffers."""

    def __init__(self, slots: int = 16, defer_sync: bool = False) -> None:
        if slots < 2:
            raise ConfigError("a frame ring needs at least 2 slots, got %d" % slots)
        self.slots = int(slots)
        # defer_sync: one wait per fetch (the source calls flush() before anyone sees the fetched frames) instead of
        # one per frame; each wait gives the GIL away and takes it back, which costs most where threads contend
        self.defer_sync = bool(defer_sync)
        self._buffers: List[Any] = []
        self._stream: Optional[Any] = None
        self._next = 0
        self._size = (0, 0)

    def __call__(self, decoded: Any, width: int, height: int) -> Any:
        if getattr(decoded, "on_host", False):
            return np.asarray(decoded).copy()  # a CPU stand-in's host frame
        from jetforge.runtime.cuda.memory import copy_2d

        slot = self._slot(width, height)
        y_ptr, uv_ptr, pitch = plane_pointers(decoded, width, height)
        copy_2d(slot.ptr, width, y_ptr, pitch, width, height, self._stream)
        copy_2d(slot.ptr + width * height, width, uv_ptr, pitch, width, height // 2, self._stream)
        if not self.defer_sync:
            self._stream.synchronize()  # the frame is complete before anyone sees it (GIL released while waiting)
        return OwnedNv12(slot.ptr, width, height)

    def flush(self) -> None:
        """Wait for every copy so far (``defer_sync``: the source calls this once per fetch, before handing out)."""
        if self._stream is not None:
            self._stream.synchronize()

    def _slot(self, width: int, height: int) -> Any:
        if (width, height) != self._size:
            from jetforge.runtime import cuda

            self.close()
            self._stream = cuda.Stream()
            self._buffers = [cuda.DeviceBuffer(width * height * 3 // 2) for _ in range(self.slots)]
            self._size, self._next = (width, height), 0
        slot = self._buffers[self._next]
        self._next = (self._next + 1) % self.slots
        return slot

    def close(self) -> None:
        for buf in self._buffers:
            buf.close()
        self._buffers = []
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        self._size = (0, 0)


__all__ = ["DeviceFrameRing", "OwnedNv12"]
