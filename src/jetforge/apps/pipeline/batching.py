"""Dynamic batching of N streams into one session: :class:`StreamBatcher` and the batch-size buckets.

Why: one inference of batch N costs far less than N inferences of batch 1 on a GPU, and a CUDA graph (or a
TensorRT optimisation profile) exists per batch *size*.  So frames of N streams are gathered into one batch,
as DeepStream's ``nvstreammux`` does:

* at most ``per_stream`` frames of a stream per batch (default one), taken oldest first, so every stream's
  frames go through inference in their order and no stream starves the others; with few streams, more than
  one frame of a stream per batch halves the per-batch host work per frame (one stream at 1400 FPS leaves
  0.7 ms a frame for everything);
* a batch is pushed as soon as every open stream has a frame waiting (or ``max_batch`` are waiting), and
  otherwise when ``timeout_s`` has passed since the oldest waiting frame arrived - DeepStream's
  ``batched-push-timeout`` - so a slow or stalled stream delays the others by at most that long;
* each stream may have ``depth`` frames waiting; its producer blocks beyond that (back-pressure instead of
  unbounded memory or silently dropped frames: these are files; a live source drops at its own end);
* :func:`bucket_for` pads a batch of n to the next size in ``buckets`` so that only a few CUDA graphs are ever
  captured (6 by default) instead of one per n.  Powers of two: finer sizes (every 4 from 8 to 32) were measured
  side by side on an H100 (2026-12-07, benchmarks/gpu_pipeline/results/nvidia-h100_2026-12-07_gpu-path-buckets.txt)
  and did not pay: MobileNetV2 at 16 streams 0.893x of NVDEC's rate against 0.891x, 32 streams 0.921x against
  0.912x, the SSD detector level, because a padded row at batch 28 cost no less than at 32 (0.096 ms a frame
  either way).  And every size is one more CUDA graph a session captures and keeps (the TensorRT session: one
  execution context each, up to 8), so more sizes mean more captures and memory on a board.
"""

import threading
import time
from collections import deque
from typing import Any, Deque, List, Optional, Sequence

from jetforge.errors import ConfigError

DEFAULT_BUCKETS = (1, 2, 4, 8, 16, 32)


def bucket_for(n: int, buckets: Sequence[int] = DEFAULT_BUCKETS) -> int:
    """The smallest bucket that holds ``n`` frames (``n`` itself when it is larger than every bucket)."""
    if n < 1:
        raise ConfigError("a batch holds at least one frame, got %d" % n)
    for b in sorted(buckets):
        if b >= n:
            return int(b)
    return int(n)


class StreamBatcher:
    """Frames of ``streams`` producers -> batches for one consumer (see the module docstring).

    Producers call :meth:`put` (blocking while their stream has ``depth`` frames waiting) and :meth:`close`
    when their stream ends; the consumer calls :meth:`take` until it returns None (every stream closed and
    drained).  :meth:`stop` ends everything early (an error, a time limit): waiting producers return False.
    """

    def __init__(self, streams: int, max_batch: int, timeout_s: float = 0.004, depth: int = 2,
                 per_stream: int = 1) -> None:
        if streams < 1 or max_batch < 1 or depth < 1 or per_stream < 1:
            raise ConfigError("streams, max_batch, depth and per_stream must be at least 1, got %d, %d, %d, %d"
                              % (streams, max_batch, depth, per_stream))
        if depth < per_stream:
            raise ConfigError("a stream may have %d frames waiting but a batch takes %d of them" % (depth, per_stream),
                              hint="make depth at least per_stream")
        self.per_stream = int(per_stream)
        if timeout_s < 0:
            raise ConfigError("batch timeout must be 0 or more seconds, got %r" % timeout_s)
        self.streams, self.max_batch, self.timeout_s, self.depth = streams, max_batch, float(timeout_s), depth
        self._waiting: List[Deque[Any]] = [deque() for _ in range(streams)]
        self._arrived: List[Deque[float]] = [deque() for _ in range(streams)]
        self._open = [True] * streams
        self._stopped = False
        # One lock; a condition per stream for its producer and one for the consumer, so that a put or a take
        # wakes only the thread that can go on (with notify_all on one condition, every put woke all N producers:
        # N wake-ups, each taking the GIL, per frame - measurable at 16 streams and thousands of frames a second).
        self._lock = threading.Lock()
        self._space = [threading.Condition(self._lock) for _ in range(streams)]
        self._ready = threading.Condition(self._lock)
        self._next_stream = 0  # round-robin start, so that with max_batch < streams every stream gets its turn
        self.timeouts = 0  # batches pushed by the timeout with fewer frames than open streams
        self.batches = 0

    def put(self, stream: int, item: Any) -> bool:
        """Queue ``item`` for ``stream``; False when the batcher was stopped (the producer should end)."""
        with self._lock:
            while len(self._waiting[stream]) >= self.depth and not self._stopped:
                self._space[stream].wait()
            if self._stopped:
                return False
            self._waiting[stream].append(item)
            self._arrived[stream].append(time.perf_counter())
            self._ready.notify()
            return True

    def put_many(self, stream: int, items: Sequence[Any]) -> bool:
        """Queue ``items`` of ``stream`` in their order under one lock (a feeder serving many streams: one call
        per few frames instead of one per frame); blocks while the stream is full, False when stopped."""
        with self._lock:
            now = time.perf_counter()
            for item in items:
                while len(self._waiting[stream]) >= self.depth and not self._stopped:
                    self._ready.notify()
                    self._space[stream].wait()
                if self._stopped:
                    return False
                self._waiting[stream].append(item)
                self._arrived[stream].append(now)
            self._ready.notify()
            return True

    def waiting(self, stream: int) -> int:
        """Frames of ``stream`` waiting now (a feeder serving many streams reads only streams with room)."""
        return len(self._waiting[stream])

    @property
    def stopped(self) -> bool:
        """:meth:`stop` was called (an error or a time limit): producers should end."""
        return self._stopped

    def close(self, stream: int) -> None:
        """``stream`` has no more frames."""
        with self._lock:
            self._open[stream] = False
            self._ready.notify()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._ready.notify_all()
            for space in self._space:
                space.notify_all()

    def take(self) -> Optional[List[Any]]:
        """The next batch (1 .. max_batch items, at most ``per_stream`` per stream), or None at the end."""
        k = self.per_stream
        with self._lock:
            while True:
                if self._stopped:
                    return None
                ready = [s for s in range(self.streams) if self._waiting[s]]
                wanted = min(self.max_batch, sum(k if self._open[s] else min(k, len(self._waiting[s]))
                                                 for s in range(self.streams)))
                if not ready and wanted == 0:
                    return None
                if ready and sum(min(k, len(self._waiting[s])) for s in ready) >= wanted:
                    return self._pop(ready)
                if ready:
                    oldest = min(self._arrived[s][0] for s in ready)
                    left = oldest + self.timeout_s - time.perf_counter()
                    if left <= 0:
                        self.timeouts += 1
                        return self._pop(ready)
                    self._ready.wait(left)
                else:
                    self._ready.wait()

    def _pop(self, ready: List[int]) -> List[Any]:
        order = sorted(ready, key=lambda s: (s - self._next_stream) % self.streams)
        batch: List[Any] = []
        for s in order:
            if len(batch) >= self.max_batch:
                break
            self._next_stream = (s + 1) % self.streams
            for _ in range(min(self.per_stream, len(self._waiting[s]), self.max_batch - len(batch))):
                batch.append(self._waiting[s].popleft())  # a stream's frames stay together, in their order
                self._arrived[s].popleft()
            self._space[s].notify()
        self.batches += 1
        return batch


__all__ = ["DEFAULT_BUCKETS", "StreamBatcher", "bucket_for"]
