"""The overlapped mode of :class:`~jetforge.apps.pipeline.runner.Pipeline`: one thread per stage.

Decode (one thread per source) -> preprocess -> infer (``infer_workers`` threads taking batches from one
queue) -> postprocess -> sink, joined by bounded queues (back-pressure).  Preprocess numbers every frame;
postprocess puts frames back in that order through a reorder buffer whose size is bounded by a semaphore
on the frames in flight between the two, so a worker that is slow on one frame cannot make it grow without
bound.  The per-frame stage calls and the error policy live in the runner; this module only moves frames
between threads and ends them cleanly (end markers, abort on failure or Ctrl-C).
"""

import queue
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from jetforge.apps.pipeline.stages import Item

if TYPE_CHECKING:  # the runner imports this module
    from jetforge.apps.pipeline.runner import Pipeline


class End:
    """End of one stream (from its decode thread) or of all (``stream=None``)."""

    def __init__(self, stream: Optional[int]) -> None:
        self.stream = stream


class _Seq:
    """A frame with its place in the order frames left preprocessing (the key of the reorder buffer)."""

    __slots__ = ("seq", "item")

    def __init__(self, seq: int, item: Item) -> None:
        self.seq = seq
        self.item = item


_EMPTY = object()  # what a queue read returns when the pipeline was aborted or the wait timed out


class ThreadedRun:
    """One run of a pipeline's stages on their own threads (``Pipeline.run`` with ``overlap=True``)."""

    def __init__(self, pipeline: "Pipeline") -> None:
        self.p = pipeline
        options = pipeline.options
        size = options.queue_size
        self.q_pre: "queue.Queue[Any]" = queue.Queue(size)
        self.q_inf: "queue.Queue[Any]" = queue.Queue(max(size, options.batch_size * 2))
        self.q_post: "queue.Queue[Any]" = queue.Queue(size)
        self.q_sink: "queue.Queue[Any]" = queue.Queue(size)
        self.n_streams = len(pipeline.sources)
        self.n_infer = options.infer_workers
        # Frames between preprocess (which numbers them) and the end of the reorder buffer: what the
        # queues and the infer workers hold when they are full.  Preprocess waits for a free slot, so a
        # worker that is slow on one frame cannot make the reorder buffer grow without bound.
        self.in_flight = threading.BoundedSemaphore(
            self.q_inf.maxsize + self.n_infer * options.batch_size + self.q_post.maxsize + 1)

    # -- queue access that gives up when the pipeline is aborted -------------------------------------
    def put(self, q: "queue.Queue[Any]", value: Any, droppable: bool = False) -> bool:
        p = self.p
        while not p._abort.is_set():
            if droppable and p.options.drop == "oldest" and q.full():
                try:
                    old = q.get_nowait()
                    if isinstance(old, End):
                        q.put(old)  # never drop an end marker
                    else:
                        with p._lock:
                            p.metrics.dropped_pipeline += 1
                except queue.Empty:
                    pass
            try:
                q.put(value, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def get(self, q: "queue.Queue[Any]", timeout: Optional[float] = None) -> Any:
        deadline = None if timeout is None else time.perf_counter() + timeout
        while not self.p._abort.is_set():
            wait = 0.05 if deadline is None else min(0.05, deadline - time.perf_counter())
            if deadline is not None and wait <= 0:
                return _EMPTY
            try:
                return q.get(timeout=max(wait, 0.0))
            except queue.Empty:
                continue
        return _EMPTY

    def acquire(self, slots: threading.BoundedSemaphore) -> bool:
        """Take one slot, waiting while the pipeline runs; False when it was aborted."""
        while not self.p._abort.is_set():
            if slots.acquire(timeout=0.05):
                return True
        return False

    # -- the stages --------------------------------------------------------------------------------
    def decode(self, stream: int) -> None:
        count = 0
        while True:
            item = self.p._read(stream, self.p.sources[stream], count)
            if item is None:
                break
            count += 1
            if not self.put(self.q_pre, item, droppable=True):
                return
        self.put(self.q_pre, End(stream))

    def preprocess(self) -> None:
        ended = 0
        seq = 0
        while True:
            item = self.get(self.q_pre)
            if item is _EMPTY:
                return
            if isinstance(item, End):
                ended += 1
                if ended == self.n_streams:
                    for _ in range(self.n_infer):  # one end marker for each infer worker
                        if not self.put(self.q_inf, End(None)):
                            return
                    return
                continue
            if self.p._ok(item):
                self.p._preprocess(item)
            if not self.acquire(self.in_flight):
                return
            if not self.put(self.q_inf if self.p._ok(item) else self.q_post, _Seq(seq, item)):
                return
            seq += 1

    def _next_batch(self, first: _Seq) -> Tuple[List[_Seq], bool]:
        """(up to ``batch_size`` frames starting with ``first``, whether the end marker was met)."""
        batch = [first]
        deadline = time.perf_counter() + self.p.options.batch_timeout_s
        while len(batch) < self.p.options.batch_size:
            nxt = self.get(self.q_inf, timeout=max(0.0, deadline - time.perf_counter()))
            if nxt is _EMPTY:
                break
            if isinstance(nxt, End):
                return batch, True
            batch.append(nxt)
        return batch, False

    def infer(self, worker: int) -> None:
        done = False
        while not done:
            first = self.get(self.q_inf)
            if first is _EMPTY:
                return
            if isinstance(first, End):
                break
            batch, done = self._next_batch(first)
            if self.p._abort.is_set():
                return
            self.p._infer([s.item for s in batch])
            for s in batch:
                if not self.put(self.q_post, s):
                    return
        self.put(self.q_post, End(None))

    def postprocess(self) -> None:
        pending: Dict[int, Item] = {}  # the reorder buffer: sequence number -> frame back from infer
        expected = 0
        ended = 0
        while True:
            got = self.get(self.q_post)
            if got is _EMPTY:
                return
            if isinstance(got, End):
                ended += 1
                if ended < self.n_infer:
                    continue
                # Every worker has finished, so every frame has arrived; whatever is left goes out in order.
                ready = [pending.pop(k) for k in sorted(pending)]
            else:
                pending[got.seq] = got.item
                ready = []
                while expected in pending:
                    ready.append(pending.pop(expected))
                    expected += 1
            for item in ready:
                self.in_flight.release()
                if self.p._ok(item):
                    self.p._postprocess(item)
                if not self.put(self.q_sink, item):
                    return
            if isinstance(got, End):
                self.put(self.q_sink, got)
                return

    def sink(self) -> None:
        while True:
            item = self.get(self.q_sink)
            if item is _EMPTY or isinstance(item, End):
                return
            self.p._finish(item)

    # -- the threads -------------------------------------------------------------------------------
    def _threads(self) -> List[threading.Thread]:
        guard: Callable[[Callable[..., None]], Callable[..., None]] = self.p._guard
        n, n_infer = self.n_streams, self.n_infer
        workers = [threading.Thread(target=guard(self.decode), args=(i,), name="jetforge-decode-%d" % i,
                                    daemon=True) for i in range(n)]
        for name, fn in (("preprocess", self.preprocess), ("postprocess", self.postprocess), ("sink", self.sink)):
            workers.append(threading.Thread(target=guard(fn), name="jetforge-" + name, daemon=True))
        workers += [threading.Thread(target=guard(self.infer), args=(i,), daemon=True,
                                     name="jetforge-infer" + ("-%d" % i if n_infer > 1 else ""))
                    for i in range(n_infer)]
        return workers

    def run(self) -> None:
        workers = self._threads()
        for w in workers:
            w.start()
        try:
            for w in workers:
                while w.is_alive():
                    w.join(timeout=0.2)
        except BaseException:  # Ctrl-C: stop every stage, then let the caller see the interrupt
            self.p._abort.set()
            for w in workers:
                w.join(timeout=5.0)
            raise
