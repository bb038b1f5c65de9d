"""Owned copies of hardware-decoded frames, without torch: :class:`DeviceFrameRing`, a ``keep`` hook for NVDEC sources.

Why: a decoder hands out frames in its own surfaces, which it may reuse once later frames are decoded; a
pipeline holds a frame longer than that (waiting in the batcher, then in a batch on the GPU).  So each frame
is copied once, device to device, into one of ``slots`` buffers of its stream, and the ring is large enough that a
slot is reused only after the frame in it has gone through inference (the batcher's depth plus the batches in
flight, a few frames per stream; 16 by default).  The copy is two ``cudaMemcpy2DAsync`` calls (luma and chroma
planes, pitched -> contiguous) on the source's own non-blocking stream and one stream synchronize, which releases
the GIL: a few microseconds of Python per frame, where a torch ``clone`` costs several tens at 16 streams.
With ``defer_sync`` (one wait per fetch) the copies are by default queued and made by ONE kernel launch per fetch
(:class:`jetforge.runtime.cuda.kernels.copy.Nv12Copier`) instead of two copy calls a frame: ``batch_copy``.

A frame in host memory (a CPU stand-in such as the tests' ``FakeNvDecoder``) is copied on the host instead.
"""

from typing import Any, List, Optional

import numpy as np

from jetforge.apps.video.sources.gpu.frame import OwnedNv12
from jetforge.apps.video.sources.gpu.nvdec import plane_pointers
from jetforge.errors import ConfigError
from jetforge.runtime.cuda.stream import check_priority


class DeviceFrameRing:
    """``keep(decoded, width, height)`` for one source: the frame copied into the next of ``slots`` device buffers."""

    def __init__(self, slots: int = 16, defer_sync: bool = False, batch_copy: Optional[bool] = None,
                 copy_priority: str = "default") -> None:
        if slots < 2:
            raise ConfigError("a frame ring needs at least 2 slots, got %d" % slots)
        # copy_priority "high": the copies run on a stream of the device's greatest priority, so that with a model's
        # long kernels on the GPU the copy (which the feeder waits for once a fetch) does not queue behind them
        self.copy_priority = check_priority(copy_priority, "frame ring copy priority")
        self.slots = int(slots)
        # defer_sync: one wait per fetch (the source calls flush() before anyone sees the fetched frames) instead of
        # one per frame; each wait gives the GIL away and takes it back, which costs most where threads contend
        self.defer_sync = bool(defer_sync)
        # batch_copy: the fetch's frames copied by one kernel launch in flush(); only where flush() comes before
        # anyone sees the frames, i.e. with defer_sync (its default)
        self.batch_copy = self.defer_sync if batch_copy is None else bool(batch_copy)
        if self.batch_copy and not self.defer_sync:
            raise ConfigError("a frame ring copies a fetch's frames in one launch only when it waits once per fetch",
                              hint="give DeviceFrameRing defer_sync=True with batch_copy=True")
        self._copier: Optional[Any] = None
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
        if self._copier is not None:
            self._copier.add(y_ptr, uv_ptr, pitch, slot.ptr, self._stream)  # copied in flush(), with the fetch
            return OwnedNv12(slot.ptr, width, height)
        copy_2d(slot.ptr, width, y_ptr, pitch, width, height, self._stream)
        copy_2d(slot.ptr + width * height, width, uv_ptr, pitch, width, height // 2, self._stream)
        if not self.defer_sync:
            self._stream.synchronize()  # the frame is complete before anyone sees it (GIL released while waiting)
        return OwnedNv12(slot.ptr, width, height)

    def flush(self) -> None:
        """Make the queued copies (``batch_copy``) and wait for every copy so far (``defer_sync``: the source calls
        this once per fetch, before handing the frames out)."""
        self.launch()
        self.wait()

    def launch(self) -> None:
        """Make the queued copies (``batch_copy``) without waiting for them: a source that copies a fetch ahead
        (NvThreadedSource ``copy_ahead``) calls :meth:`wait` only when it hands those frames out, a fetch later."""
        if self._copier is not None:
            self._copier.launch(self._stream)

    def wait(self) -> None:
        """Wait for every copy launched so far (the GIL is released while waiting)."""
        if self._stream is not None:
            self._stream.synchronize()

    def _slot(self, width: int, height: int) -> Any:
        if (width, height) != self._size:
            from jetforge.runtime import cuda

            self.flush()  # copies queued at the old size land before their buffers go
            self.close()
            self._stream = cuda.Stream(priority=self.copy_priority)
            self._buffers = [cuda.DeviceBuffer(width * height * 3 // 2) for _ in range(self.slots)]
            if self.batch_copy:
                from jetforge.runtime.cuda.kernels.copy import Nv12Copier

                self._copier = Nv12Copier(width, height)
            self._size, self._next = (width, height), 0
        slot = self._buffers[self._next]
        self._next = (self._next + 1) % self.slots
        return slot

    def close(self) -> None:
        if self._stream is not None:
            self._stream.synchronize()  # no copy still writing a buffer that is about to be freed
        self._copier = None
        for buf in self._buffers:
            buf.close()
        self._buffers = []
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        self._size = (0, 0)


__all__ = ["DeviceFrameRing", "OwnedNv12"]
