"""Batches in flight on the GPU path: buffers a batch owns from its launch until its result is read.

Why: the apps' GPU path queues batch k+1 while the result thread still reads batch k.  A TensorRT session copies its
outputs back into one set of pinned buffers, so queuing k+1 first waited on the host for k's outputs (the launch
thread stalled once a batch).  Handed the outputs on the GPU instead (``TrtSession.submit_device(on_device_outputs=)``),
a consumer copies each batch into buffers of its own, and nothing waits until the result is read.

* :class:`SlotPool` - ``n`` slots; :meth:`~SlotPool.acquire` waits while all are taken (back-pressure: a slot is
  never reused before its result was read), :meth:`~SlotPool.release` frees one.  Shared by the consumers below and
  by :class:`jetforge.vision.ssd_gpu.QueuedSsdDecoder`.
* :class:`PinnedOutputSlots` - the consumer for outputs that come back whole: each batch's outputs copied on the
  engine's stream into the pinned buffers of its slot, an event after them; the result waits for the event and
  returns numpy copies (the slot is free again at once).

Written against cuda-python's runtime API through :mod:`jetforge.runtime.cuda`; tested on the CPU stand-in for CUDA
(tests/runtime/trt/test_trt_session_device_outputs.py).
"""

import threading
from typing import Any, Callable, Dict, List, Mapping

import numpy as np

from jetforge.errors import ConfigError
from jetforge.runtime.cuda.bindings import check, runtime_api
from jetforge.runtime.cuda.memory import PinnedBuffer, nbytes_of
from jetforge.runtime.cuda.stream import Event


class SlotPool:
    """``n`` slot numbers, each held by one batch from its launch until its result is read."""

    def __init__(self, n: int) -> None:
        if int(n) < 1:
            raise ConfigError("a pool of batches in flight needs at least 1 slot, got %s" % n)
        self.size = int(n)
        self._free: List[int] = list(range(self.size))[::-1]
        self._cond = threading.Condition()

    def acquire(self) -> int:
        """A free slot; waits until one is released when all are held."""
        with self._cond:
            while not self._free:
                self._cond.wait()
            return self._free.pop()

    def release(self, slot: int) -> None:
        with self._cond:
            self._free.append(slot)
            self._cond.notify()


def copy_device_to_host(dst: PinnedBuffer, src_ptr: int, nbytes: int, stream: Any) -> None:
    """Asynchronous copy of ``nbytes`` from a device address (a session's output buffer) into ``dst``."""
    if nbytes > dst.nbytes:
        raise ConfigError("a %d-byte copy into a %d-byte pinned buffer" % (nbytes, dst.nbytes))
    rt = runtime_api()
    check(rt.cudaMemcpyAsync(dst.ptr, int(src_ptr), int(nbytes), rt.cudaMemcpyKind.cudaMemcpyDeviceToHost,
                             getattr(stream, "handle", stream) if stream is not None else 0),
          "cudaMemcpyAsync(device to host)")


class PinnedOutputSlots:
    """Outputs handed over on the GPU (``{name: DeviceTensor}``) copied back into the pinned buffers of one of
    ``slots`` slots; :meth:`launch` is the ``on_device_outputs`` consumer of ``TrtSession.submit_device``.  Buffers
    grow to the largest outputs seen (a slot is only resized while its batch holds it).  One thread launches, one
    reads results."""

    def __init__(self, slots: int = 4) -> None:
        self.pool = SlotPool(slots)
        self._buffers: List[Dict[str, PinnedBuffer]] = [{} for _ in range(slots)]
        self._done = [Event(timing=False) for _ in range(slots)]

    def launch(self, outputs: Mapping[str, Any], stream: Any) -> Callable[[], Dict[str, np.ndarray]]:
        slot = self.pool.acquire()
        try:
            shapes = {}
            for name, tensor in outputs.items():
                nbytes = nbytes_of(tensor.shape, tensor.dtype)
                buf = self._buffers[slot].get(name)
                if buf is None or buf.nbytes < nbytes:
                    if buf is not None:
                        buf.close()
                    buf = self._buffers[slot][name] = PinnedBuffer(nbytes)
                copy_device_to_host(buf, tensor.ptr, nbytes, stream)
                shapes[name] = (tuple(int(d) for d in tensor.shape), str(np.dtype(tensor.dtype)))
            self._done[slot].record(stream)
        except BaseException:
            self.pool.release(slot)
            raise
        return lambda: self._collect(slot, shapes)

    def _collect(self, slot: int, shapes: Dict[str, Any]) -> Dict[str, np.ndarray]:
        try:
            self._done[slot].synchronize()
            return {name: self._buffers[slot][name].array(shape, dtype).copy()
                    for name, (shape, dtype) in shapes.items()}
        finally:
            self.pool.release(slot)

    def close(self) -> None:
        """Free the buffers once every copy queued into them is done (a batch never collected included)."""
        for ev in self._done:
            ev.synchronize()
        for bufs in self._buffers:
            for buf in bufs.values():
                buf.close()
            bufs.clear()
        for ev in self._done:
            ev.close()


__all__ = ["PinnedOutputSlots", "SlotPool", "copy_device_to_host"]
