"""A batch's decoded NV12 frames back in host memory, for the CPU encoders (render on): :class:`BatchCopyBack`.

Why: the GPU path copied each frame back with two synchronous ``cudaMemcpy2D`` calls into pageable memory
(:func:`~jetforge.apps.video.sources.gpu.open.download_nv12`): two Python calls a frame that each wait, on the
legacy default stream, which also waits for every blocking stream's work.  Render on at 16 streams, the process
that feeds the encoders was the limit on a host whose encoders were fast (an H100 host, 2026-12-07: 0.62x of the
encoders alone, 1.48 ms of process CPU a frame against 0.39 render off).  Here a batch costs one launch of the
copy kernel (:class:`~jetforge.runtime.cuda.kernels.copy.Nv12Copier`) gathering the frames into one contiguous
device buffer, one ``cudaMemcpyAsync`` into page-locked memory on a stream of its own (the inference stream's
next batch is not waited for), and one wait.

Tested on the CPU (the kernel's source run by the host compiler, CUDA's memory and stream as host stand-ins).
Executed on an H100 by ``benchmarks/gpu_pipeline/pipeline_gpu.py --render-on`` (2026-12-07, the benchmark's render
on uses this class): render on at 16 streams went from 0.67x / 0.63x of the encoders alone with the old stacked copy
to 1.06x / 1.04x beside it in the same call, the copy back's GPU time from 0.46 to 0.001 ms a frame and the process
CPU from 1.30 to 0.87 ms a frame.  Its GPU test (byte-equal to the planes and to ``download_nv12``'s per-frame
copies, 720p and an odd 642-wide size) passed on the H100 in the next call.
"""

from typing import Any, List, Optional, Tuple

import numpy as np

from jetforge.errors import ConfigError


class BatchCopyBack:
    """NV12 frames of one size -> ``(H * 3 / 2, W)`` uint8 host arrays, a batch at a time.

    The buffers are sized for ``max_frames`` frames of the first batch's size and made again when a batch is
    larger or of another size.  The arrays handed out are copies: a sink may keep them past the next batch."""

    def __init__(self, max_frames: int) -> None:
        if max_frames < 1:
            raise ConfigError("a copy back holds at least one frame, got %d" % max_frames)
        self.max_frames = int(max_frames)
        self.launches = 0
        self._size: Optional[Tuple[int, int]] = None
        self._capacity = 0
        self._copier: Any = None
        self._device: Any = None
        self._pinned: Any = None
        self._stream: Any = None

    @staticmethod
    def takes(frames: List[Any]) -> bool:
        """Whether a batch is for this copy back: device NV12 frames with known plane pointers, all one size."""
        return (all(f.y_ptr and not f.on_host and f.layout == "nv12" for f in frames)
                and len({(f.width, f.height) for f in frames}) == 1)

    def __call__(self, frames: List[Any]) -> List[np.ndarray]:
        """The frames (``y_ptr``, ``uv_ptr``, ``pitch``, ``width``, ``height`` of device NV12, all one size)."""
        if not frames:
            return []
        sizes = {(int(f.width), int(f.height)) for f in frames}
        if len(sizes) != 1:
            raise ConfigError("one copy back takes frames of one size, got %s" % sorted(sizes),
                              hint="copy frames of other sizes one at a time")
        (width, height), n = sizes.pop(), len(frames)
        self._ensure(width, height, n)
        frame_bytes = width * height * 3 // 2
        for i, f in enumerate(frames):
            self._copier.add(int(f.y_ptr), int(f.uv_ptr), int(f.pitch), self._device.ptr + i * frame_bytes,
                             self._stream)
        self._copier.launch(self._stream)
        self._device.copy_to_host(self._pinned, n * frame_bytes, self._stream)
        self._stream.synchronize()
        self.launches += 1
        batch = self._pinned.array((n, height * 3 // 2, width), np.uint8).copy()  # one copy, out of the pinned buffer
        return list(batch)

    def _ensure(self, width: int, height: int, n: int) -> None:
        if self._size == (width, height) and n <= self._capacity:
            return
        from jetforge.runtime import cuda
        from jetforge.runtime.cuda.kernels.copy import Nv12Copier

        self._release_buffers()
        capacity = max(n, self.max_frames)
        nbytes = capacity * width * height * 3 // 2
        self._device, self._pinned = cuda.DeviceBuffer(nbytes), cuda.PinnedBuffer(nbytes)
        if self._stream is None:
            self._stream = cuda.Stream()
        if self._size != (width, height):
            self._copier = Nv12Copier(width, height)
        self._size, self._capacity = (width, height), capacity

    def _release_buffers(self) -> None:
        for buf in (self._device, self._pinned):
            if buf is not None:
                buf.close()
        self._device = self._pinned = None

    def close(self) -> None:
        if self._stream is not None:
            self._stream.synchronize()
        self._release_buffers()
        if self._stream is not None:
            self._stream.close()
            self._stream = None


__all__ = ["BatchCopyBack"]
