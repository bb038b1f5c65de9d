"""Owned copies of decoded NV12 frames, many in one launch: :class:`Nv12Copier`.

Why: a decoder reuses its surfaces, so the GPU path copies every frame it keeps (:mod:`jetforge.apps.video.sources.gpu
.device_ring`).  Two ``cudaMemcpy2DAsync`` calls a frame (luma, chroma) are two Python calls into CUDA, each giving
the GIL away and taking it back; at 16 streams the feeder thread that makes them shares the GIL with the thread that
launches the batches, and its per-frame work is what separates the pipeline from its bound.  Here the frames of one
fetch are queued (:meth:`Nv12Copier.add`: a few attribute stores) and copied by ONE kernel launch
(:meth:`Nv12Copier.launch`): the frame table travels as the kernel's by-value argument, as the preprocessing kernel's
does, so nothing is uploaded first.

One thread at a time (the source that owns the ring), one frame size per launch.
"""

import ctypes
from typing import Any, Tuple

from jetforge.errors import ConfigError
from jetforge.runtime.cuda.kernels.sources import COPY_KERNEL, MAX_COPIES, copy_source

BLOCK = (32, 8, 1)  # 32 units of a row x 8 rows per block


class CopyRef(ctypes.Structure):
    _fields_ = [("y", ctypes.c_uint64), ("uv", ctypes.c_uint64), ("dst", ctypes.c_uint64), ("pitch", ctypes.c_int32),
                ("reserved", ctypes.c_int32)]


class CopyArgs(ctypes.Structure):
    """Mirror of the kernel's ``struct CopyArgs`` (:data:`.sources.COPY_SOURCE`), field for field."""

    _fields_ = [("frames", CopyRef * MAX_COPIES), ("count", ctypes.c_int32), ("width", ctypes.c_int32),
                ("height", ctypes.c_int32), ("unit", ctypes.c_int32)]


def copy_grid(width: int, height: int, unit: int, count: int) -> Tuple[int, int, int]:
    """The launch grid that covers ``count`` frames of ``height * 3 / 2`` rows of ``width / unit`` units."""
    units = (width + unit - 1) // unit
    return (units + BLOCK[0] - 1) // BLOCK[0], (height + height // 2 + BLOCK[1] - 1) // BLOCK[1], count


class Nv12Copier:
    """Queues (Y plane, UV plane, pitch) -> contiguous buffer copies of ``width`` x ``height`` NV12 frames; one launch
    copies all of them.  The kernel is compiled for the current GPU on construction (once per process)."""

    def __init__(self, width: int, height: int) -> None:
        from jetforge.runtime.cuda.kernels.launch import Kernel

        if width <= 0 or height <= 0 or width % 2 or height % 2:
            raise ConfigError("an NV12 frame has a positive, even size, got %dx%d" % (width, height))
        self.width, self.height = int(width), int(height)
        self.kernel = Kernel(copy_source(), COPY_KERNEL)
        self._args = CopyArgs()
        self._args.width, self._args.height = self.width, self.height
        self._aligned = self.width % 8 == 0  # every queued address and pitch also a multiple of 8: 8-byte units
        self.launches = 0

    @property
    def pending(self) -> int:
        """Frames queued and not launched yet."""
        return int(self._args.count)

    def add(self, y_ptr: int, uv_ptr: int, pitch: int, dst_ptr: int, stream: Any = None) -> None:
        """Queue one frame; a full table (:data:`MAX_COPIES`) is launched on ``stream`` first."""
        if pitch < self.width:
            raise ConfigError("an NV12 row pitch of %d bytes is shorter than the %d-pixel rows" % (pitch, self.width))
        if self._args.count == MAX_COPIES:
            self.launch(stream)
        ref = self._args.frames[self._args.count]
        ref.y, ref.uv, ref.dst, ref.pitch = y_ptr, uv_ptr, dst_ptr, pitch
        self._aligned = self._aligned and not ((y_ptr | uv_ptr | dst_ptr | pitch) & 7)
        self._args.count += 1

    def launch(self, stream: Any = None) -> None:
        """Queue the copies of every pending frame on ``stream`` (asynchronous; nothing when none is pending)."""
        count = int(self._args.count)
        if not count:
            return
        unit = 8 if self._aligned else 1
        self._args.unit = unit
        self.kernel.launch(copy_grid(self.width, self.height, unit, count), BLOCK, self._args, stream)
        self.launches += 1
        self._args.count = 0  # the launch copied the table: it may be refilled at once
        self._aligned = self.width % 8 == 0


__all__ = ["BLOCK", "CopyArgs", "CopyRef", "Nv12Copier", "copy_grid"]
