"""Frame rings shared between a decode process and the pipeline's process: :class:`ExportedRing`, :class:`ImportedRing`.

Why: with 16 decode threads in the pipeline's process, their per-frame Python (fetching, wrapping, the owned copy,
the batcher) and the launch thread share one GIL; the H200 runs showed the launch thread waiting for it (16 streams
at 0.68x of NVDEC's rate).  Decoding in worker processes gives each its own GIL; the frames must then cross the
process boundary without leaving the GPU.  CUDA IPC does that: the worker allocates one device buffer of ``slots``
NV12 frames per stream, exports it once (``cudaIpcGetMemHandle``: 64 bytes), and the pipeline's process maps it
(``cudaIpcOpenMemHandle``) and reads frames in place - only slot numbers travel per frame.

Ordering and reuse (no IPC events needed): the worker copies a decoded frame into its slot on its own stream and
waits for the copy (an event with blocking sync: the CPU sleeps, it does not spin) *before* it announces the
frame, so every announced frame is complete in device memory; the pipeline's process writes, per stream, how many
frames it has finished with (``released``), and the worker writes frame ``i`` into slot ``i % slots`` only when
``i < released + slots``: a slot is overwritten only after the frame in it has been through preprocessing.

A CPU stand-in (``FakeNvDecoder`` frames of tests/standins/fake_nvdec.py, in host memory) uses a ``multiprocessing``
shared-memory block instead - host memory standing in for device memory (``kind: "host"``), so that the process,
ring and credit logic run in CI on machines without a GPU.
"""

from multiprocessing import shared_memory
from typing import Any, Dict, Optional, Tuple

import numpy as np

from jetforge.apps.video.sources.gpu.nvdec import plane_pointers
from jetforge.errors import ConfigError


class RingSlot:
    """The NV12 frame in one slot: ``(H*3/2, W)`` uint8, contiguous, device memory (CUDA array interface)."""

    __slots__ = ("ptr", "width", "height", "slot")

    def __init__(self, ptr: int, width: int, height: int, slot: int) -> None:
        self.ptr, self.width, self.height, self.slot = int(ptr), int(width), int(height), int(slot)

    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        return {"shape": (self.height * 3 // 2, self.width), "typestr": "|u1", "data": (self.ptr, False),
                "strides": (self.width, 1), "version": 3}


class ExportedRing:
    """The decode process's side: ``keep(decoded, width, height)`` copies each frame into the next slot (a
    :data:`~.nvdec.KeepHook`); :meth:`flush` waits for the copies; :meth:`describe` is what the other process needs
    to map the ring.  ``on_host``: the CPU stand-in (shared host memory)."""

    def __init__(self, width: int, height: int, slots: int, on_host: bool) -> None:
        if slots < 2 or width < 2 or height < 2 or width % 2 or height % 2:
            raise ConfigError("a frame ring needs >= 2 slots of an even frame size, got %d slots of %dx%d"
                              % (slots, width, height))
        self.width, self.height, self.slots, self.on_host = int(width), int(height), int(slots), bool(on_host)
        self.frame_bytes = self.width * self.height * 3 // 2
        self.copied = 0  # frames written so far; frame i is in slot i % slots
        self._shm: Optional[shared_memory.SharedMemory] = None
        self._buffer: Any = None
        if self.on_host:
            self._shm = shared_memory.SharedMemory(create=True, size=self.frame_bytes * self.slots)
            self._host = np.ndarray((self.slots, self.height * 3 // 2, self.width), np.uint8, buffer=self._shm.buf)
        else:
            from jetforge.runtime import cuda

            self._buffer = cuda.DeviceBuffer(self.frame_bytes * self.slots)
            self._stream = cuda.Stream()
            self._done = cuda.Event(timing=False, blocking_sync=True)

    def __call__(self, decoded: Any, width: int, height: int) -> RingSlot:
        if (width, height) != (self.width, self.height):
            raise ConfigError("the stream changed size to %dx%d; its ring holds %dx%d frames"
                              % (width, height, self.width, self.height))
        slot = self.copied % self.slots
        self.copied += 1
        if self.on_host:
            self._host[slot] = np.asarray(decoded).reshape(self._host.shape[1:])
            return RingSlot(self._host[slot].ctypes.data, width, height, slot)
        from jetforge.runtime.cuda.memory import copy_2d

        dst = self._buffer.ptr + slot * self.frame_bytes
        y_ptr, uv_ptr, pitch = plane_pointers(decoded, width, height)
        copy_2d(dst, width, y_ptr, pitch, width, height, self._stream)
        copy_2d(dst + width * height, width, uv_ptr, pitch, width, height // 2, self._stream)
        return RingSlot(dst, width, height, slot)

    def flush(self) -> None:
        """Wait until every copy so far is complete (before the frames are announced to the other process)."""
        if not self.on_host:
            self._done.record(self._stream)
            self._done.synchronize()

    def describe(self) -> Dict[str, Any]:
        """Picklable: what :class:`ImportedRing` needs (a shared-memory name, or the 64-byte CUDA IPC handle)."""
        desc: Dict[str, Any] = {"width": self.width, "height": self.height, "slots": self.slots,
                                "kind": "host" if self.on_host else "device"}
        if self.on_host:
            desc["name"] = self._shm.name  # type: ignore[union-attr]
        else:
            from jetforge.runtime.cuda.memory import ipc_handle_bytes

            desc["handle"] = ipc_handle_bytes(self._buffer.ptr)
        return desc

    def close(self) -> None:
        """Free the ring (after the other process has closed its mapping)."""
        if self._shm is not None:
            self._host = None
            self._shm.close()
            self._shm.unlink()
            self._shm = None
        if self._buffer is not None:
            self._stream.synchronize()
            self._done.close()
            self._stream.close()
            self._buffer.close()
            self._buffer = None


class ImportedRing:
    """The pipeline's side of one stream's ring: :meth:`frame_planes` gives a slot's pixels without a copy."""

    def __init__(self, desc: Dict[str, Any]) -> None:
        self.width, self.height, self.slots = int(desc["width"]), int(desc["height"]), int(desc["slots"])
        self.kind = desc["kind"]
        self.frame_bytes = self.width * self.height * 3 // 2
        self._shm: Optional[shared_memory.SharedMemory] = None
        self._mapping: Any = None
        if self.kind == "host":
            self._shm = _attach_shared_memory(desc["name"])
            self._host = np.ndarray((self.slots, self.height * 3 // 2, self.width), np.uint8, buffer=self._shm.buf)
        else:
            from jetforge.runtime.cuda.memory import IpcMapping

            self._mapping = IpcMapping(desc["handle"])
            self._base = self._mapping.ptr

    @property
    def on_host(self) -> bool:
        return self.kind == "host"

    def frame_planes(self, slot: int) -> Tuple[Any, int, int, int]:
        """(data, luma pointer, chroma pointer, pitch) of the frame in ``slot``: a host view (stand-in) or a
        :class:`RingSlot` of the mapped device memory."""
        if self._shm is not None:
            view = self._host[slot]
            ptr = int(view.ctypes.data)
            return view, ptr, ptr + self.width * self.height, self.width
        ptr = self._base + slot * self.frame_bytes
        return RingSlot(ptr, self.width, self.height, slot), ptr, ptr + self.width * self.height, self.width

    def close(self) -> None:
        if self._shm is not None:
            self._host = None
            self._shm.close()
            self._shm = None
        if self._mapping is not None:
            self._mapping.close()
            self._mapping = None


def _attach_shared_memory(name: str) -> shared_memory.SharedMemory:
    """Attach to the worker's block.  Spawned workers share the parent's resource tracker, which keeps one entry per
    name: attaching here adds nothing, and the worker's ``unlink`` removes the entry (a killed worker's block is
    unlinked by the tracker when the pipeline's process ends)."""
    return shared_memory.SharedMemory(name=name)


__all__ = ["ExportedRing", "ImportedRing", "RingSlot"]
