"""Batches in flight on the GPU path: buffers a batch owns from its launch until its result is read.

Why: the apps' GPU path queues batch k+1 while the result thread still reads batch k.  A TensorRT session copies its
outputs back into one set of pinned buffers, so queuing k+1 first waited on the host for k's outputs (the launch
thread stalled once a batch).  Handed the outputs on the GPU instead (``TrtSession.submit_device(on_device_outputs=)``),
a consumer copies each batch into buffers of its own, and nothing waits until the result is read.

* :class:`SlotPool` - ``n`` slots; :meth:`~SlotPool.acquire` waits while all are taken (back-pressure: a slot is
  never reused before its result was read), :meth:`~SlotPool.release` frees one.
* :class:`EventSlots` - those slots with an event each: queue a batch's work into a slot, read its result after the
  event, wait for all before freeing; shared by :class:`PinnedOutputSlots` and
  :class:`jetforge.vision.ssd_gpu.QueuedSsdDecoder`.
* :class:`PinnedOutputSlots` - the consumer for outputs that come back whole: each batch's outputs copied on the
  engine's stream into the pinned buffers of its slot, an event after them; the result waits for the event and
  returns numpy copies (the slot is free again at once).

Written against cuda-python's runtime API through :mod:`jetforge.runtime.cuda`; tested on the CPU stand-in for CUDA
(tests/runtime/trt/test_trt_session_device_outputs.py).
"""

import threading
from typing import Any, Callable, Dict, List, Mapping, TypeVar

import numpy as np

from jetforge.errors import ConfigError
from jetforge.runtime.cuda.memory import PinnedBuffer, copy_device_to_host, nbytes_of

T = TypeVar("T")


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


class EventSlots:
    """``n`` slots, each with the event that marks when the work a batch queued into it is done: the protocol both
    consumers of batches in flight follow (:class:`PinnedOutputSlots`, :class:`jetforge.vision.ssd_gpu.
    QueuedSsdDecoder`).  :meth:`queue` takes a free slot (waiting for one), has ``work(slot)`` queue on ``stream``
    and records the slot's event after it; :meth:`read` waits for that event, returns ``read(slot)`` and frees the
    slot; :meth:`close` waits for every slot's work (one never read included) before the caller frees buffers."""

    def __init__(self, n: int) -> None:
        from jetforge.runtime import cuda  # looked up when made: the CPU tests stand in for cuda.Event

        self.pool = SlotPool(n)
        self._done = [cuda.Event(timing=False) for _ in range(self.pool.size)]

    def queue(self, work: Callable[[int], None], stream: Any) -> int:
        slot = self.pool.acquire()
        try:
            work(slot)
            self._done[slot].record(stream)
        except BaseException:
            self.pool.release(slot)
            raise
        return slot

    def read(self, slot: int, read: Callable[[int], T]) -> T:
        try:
            self._done[slot].synchronize()
            return read(slot)
        finally:
            self.pool.release(slot)

    def wait_all(self) -> None:
        for ev in self._done:
            ev.synchronize()  # an event never recorded returns at once

    def close(self) -> None:
        self.wait_all()
        for ev in self._done:
            ev.close()


class PinnedOutputSlots:
    """Outputs handed over on the GPU (``{name: DeviceTensor}``) copied back into the pinned buffers of one of
    ``slots`` slots; :meth:`launch` is the ``on_device_outputs`` consumer of ``TrtSession.submit_device``.  Buffers
    grow to the largest outputs seen (a slot is only resized while its batch holds it).  One thread launches, one
    reads results."""

    def __init__(self, slots: int = 4) -> None:
        self.slots = EventSlots(slots)
        self._buffers: List[Dict[str, PinnedBuffer]] = [{} for _ in range(slots)]

    def launch(self, outputs: Mapping[str, Any], stream: Any) -> Callable[[], Dict[str, np.ndarray]]:
        shapes = {name: (tuple(int(d) for d in t.shape), str(np.dtype(t.dtype))) for name, t in outputs.items()}

        def copy(slot: int) -> None:
            for name, tensor in outputs.items():
                nbytes = nbytes_of(tensor.shape, tensor.dtype)
                buf = self._buffers[slot].get(name)
                if buf is None or buf.nbytes < nbytes:
                    if buf is not None:
                        buf.close()
                    buf = self._buffers[slot][name] = PinnedBuffer(nbytes)
                copy_device_to_host(buf, tensor.ptr, nbytes, stream)

        slot = self.slots.queue(copy, stream)
        return lambda: self.slots.read(slot, lambda s: {name: self._buffers[s][name].array(shape, dtype).copy()
                                                        for name, (shape, dtype) in shapes.items()})

    def close(self) -> None:
        """Free the buffers once every copy queued into them is done (a batch never collected included)."""
        self.slots.wait_all()
        for bufs in self._buffers:
            for buf in bufs.values():
                buf.close()
            bufs.clear()
        self.slots.close()


__all__ = ["EventSlots", "PinnedOutputSlots", "SlotPool"]
