"""N video streams through one batched session, frames on the GPU from decode to the model: :func:`run_streams`.

The threads, as in DeepStream (decode -> ``nvstreammux`` -> ``nvinfer`` -> sinks):

* one decode thread per source (NVDEC sessions run concurrently; their calls release the GIL), each putting
  its frames into a :class:`~jetforge.apps.pipeline.batching.StreamBatcher`;
* the *launch* thread (the caller's): takes a batch and calls ``ops.launch(frames)`` - preprocessing into the
  session's input buffer and the inference, both queued on the GPU without waiting;
* the *finish* thread: ``ops.finish(handle, frames)`` waits for that batch's results, postprocesses them into
  one event per frame, and hands each (stream, frame, event) to the sink in order (a sink with an
  ``end_batch()`` method gets it called after each batch's last frame: per-batch bookkeeping).  Up to ``in_flight``
  batches are between the two, so the host work of batch k+1 overlaps the GPU work of batch k.

Instead of one source per stream, ``sources`` may be a *stream group* (one object with ``streams``, ``feed(batcher)``
putting every stream's frames from one thread, ``release(frames)`` called when finished frames may be overwritten,
optionally ``depth`` and ``worker_cpu_s()``): :class:`~jetforge.apps.video.sources.gpu.ipc_decode.IpcDecodeGroup`, whose
decoding runs in worker processes, so that per-frame decode work does not share this process's GIL.

Every stream's frames keep their order: one frame per stream per batch, batches launched and finished in
order by one thread each.  What the GPU does is behind ``ops`` (:class:`BatchOps`): a backend supplies it
(the benchmark's CUDA ops; :class:`HostBatchOps` runs the same flow on the CPU for tests and CI).
"""

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from jetforge.apps.pipeline.batching import DEFAULT_BUCKETS, StreamBatcher, bucket_for
from jetforge.errors import ConfigError

try:  # process CPU time of every thread (user + system); absent on Windows
    import resource
except ImportError:  # pragma: no cover
    resource = None  # type: ignore[assignment]


@dataclass
class StreamRunOptions:
    """``max_batch``: frames per batch (default: streams x ``per_stream``, at most 32); ``per_stream``: frames of
    one stream a batch may take (more than 1 amortises the per-batch host work when there are few streams);
    ``batch_timeout_s``: the batched-push-timeout; ``depth``: frames a stream may have waiting (at least
    ``per_stream``); ``in_flight``: batches between launch and finish; ``time_limit_s``: stop after this long (0: run
    the sources to their end); ``buckets``: batch sizes."""

    max_batch: int = 0
    batch_timeout_s: float = 0.004
    depth: int = 2
    in_flight: int = 2
    time_limit_s: float = 0.0
    buckets: Tuple[int, ...] = DEFAULT_BUCKETS
    per_stream: int = 1

    def __post_init__(self) -> None:
        if self.in_flight < 1 or self.depth < 1 or self.per_stream < 1:
            raise ConfigError("in_flight, depth and per_stream must be at least 1")
        if self.depth < self.per_stream:
            raise ConfigError("depth %d is less than per_stream %d" % (self.depth, self.per_stream),
                              hint="let each stream hold at least per_stream frames")


class BatchOps:
    """What a backend does with one batch of frames (see the module docstring)."""

    def launch(self, frames: List[Any], padded: int) -> Any:
        """Queue preprocessing + inference of ``frames`` (padded to ``padded`` rows); return a handle."""
        raise NotImplementedError

    def finish(self, handle: Any, frames: List[Any]) -> List[Dict[str, Any]]:
        """Wait for ``handle``'s results; one event per frame, in the order of ``frames``."""
        raise NotImplementedError

    def host_frames(self, handle: Any, frames: List[Any]) -> List[np.ndarray]:
        """The frames as NV12 host arrays (for rendering: copied back once)."""
        return [f.host_nv12() for f in frames]

    def gpu_ms(self) -> Dict[str, float]:
        """Accumulated GPU milliseconds per stage (empty where not measured)."""
        return {}


class HostBatchOps(BatchOps):
    """The same flow on the CPU: ``preprocess(frame) -> array`` per frame, ``infer(batch) -> outputs``,
    ``postprocess(outputs, i, frame) -> event``.  Used by tests, CI and the benchmark's dry run."""

    def __init__(self, preprocess: Callable[[Any], np.ndarray], infer: Callable[[np.ndarray], Any],
                 postprocess: Callable[[Any, int, Any], Dict[str, Any]]) -> None:
        self._pre, self._infer, self._post = preprocess, infer, postprocess

    def launch(self, frames: List[Any], padded: int) -> Any:
        x = np.stack([self._pre(f) for f in frames])
        if padded > len(frames):
            x = np.concatenate([x, np.repeat(x[-1:], padded - len(frames), axis=0)])
        return self._infer(x)

    def finish(self, handle: Any, frames: List[Any]) -> List[Dict[str, Any]]:
        return [self._post(handle, i, f) for i, f in enumerate(frames)]


StreamSink = Callable[[int, Any, Dict[str, Any], Optional[np.ndarray]], None]


@dataclass
class StreamRunResult:
    """What :func:`run_streams` measured (all times are seconds unless named ``_ms``)."""

    frames: int
    wall_s: float
    per_stream_frames: List[int]
    latency_ms: List[List[float]]  # per stream: capture -> event, in frame order
    stage_wall_ms: Dict[str, float]  # per frame
    stage_cpu_ms: Dict[str, float]  # per frame, the thread's CPU time
    process_cpu_s: float
    batches: int
    mean_batch: float
    timeouts: int
    gpu_ms: Dict[str, float] = field(default_factory=dict)  # per frame
    order_ok: bool = True
    worker_cpu_s: float = 0.0  # CPU seconds of decode worker processes (a stream group's), in process_cpu_s too

    @property
    def fps(self) -> float:
        return self.frames / self.wall_s if self.wall_s > 0 else 0.0

    def summary(self) -> Dict[str, Any]:
        lat = [np.asarray(v) for v in self.latency_ms if v]
        p50 = [float(np.percentile(v, 50)) for v in lat]
        p99 = [float(np.percentile(v, 99)) for v in lat]
        per_frame_cpu = self.process_cpu_s / max(1, self.frames)
        return {"frames": self.frames, "wall_s": self.wall_s, "fps": self.fps, "streams": len(self.per_stream_frames),
                "per_stream_frames": self.per_stream_frames, "batches": self.batches, "mean_batch": self.mean_batch,
                "batch_timeouts": self.timeouts, "order_ok": self.order_ok,
                "latency_p50_ms": {"median_stream": _median(p50), "worst_stream": max(p50) if p50 else None},
                "latency_p99_ms": {"median_stream": _median(p99), "worst_stream": max(p99) if p99 else None},
                "stage_wall_ms_per_frame": self.stage_wall_ms, "stage_cpu_ms_per_frame": self.stage_cpu_ms,
                "stage_gpu_ms_per_frame": self.gpu_ms, "process_cpu_ms_per_frame": 1000.0 * per_frame_cpu,
                "decode_workers_cpu_ms_per_frame": 1000.0 * self.worker_cpu_s / max(1, self.frames),
                "cores_per_30fps_stream": per_frame_cpu * 30.0}


def _median(values: Sequence[float]) -> Optional[float]:
    return float(np.median(values)) if len(values) else None


def process_cpu_s() -> float:
    """User + system CPU seconds of this process, every thread included (getrusage)."""
    if resource is None:  # pragma: no cover
        return time.process_time()
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class _Clock:
    """Wall and thread-CPU seconds of one stage, summed over calls (one thread per stage)."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return fn(*args)
        finally:
            self.wall += time.perf_counter() - t0
            self.cpu += time.thread_time() - c0


def run_streams(sources: Any, ops: BatchOps, options: Optional[StreamRunOptions] = None,
                sink: Optional[StreamSink] = None,
                render: Union[bool, Callable[[int], bool]] = False) -> StreamRunResult:
    """Run ``sources`` (iterables of frames with ``.stream`` = their index, or one stream group) through ``ops``;
    see the module."""
    opts = options or StreamRunOptions()
    group = sources if hasattr(sources, "feed") else None
    n = int(group.streams) if group is not None else len(sources)
    if n < 1:
        raise ConfigError("run_streams needs at least one source")
    depth = max(opts.depth, int(getattr(group, "depth", 0)))
    batcher = StreamBatcher(n, opts.max_batch or min(n * opts.per_stream, max(opts.buckets)), opts.batch_timeout_s,
                            depth, opts.per_stream)
    run = _Run(n, ops, sink, render, opts.in_flight, getattr(group, "release", None))
    if group is not None:
        producers = [threading.Thread(target=run.feed, args=(group, batcher), name="decode-feed", daemon=True)]
    else:
        producers = [threading.Thread(target=run.produce, args=(s, src, batcher), name="decode-%d" % s, daemon=True)
                     for s, src in enumerate(sources)]
    finisher = threading.Thread(target=run.finish_loop, name="finish", daemon=True)
    workers_cpu = getattr(group, "worker_cpu_s", lambda: 0.0)
    wcpu0 = workers_cpu()
    cpu0, t0 = process_cpu_s() + wcpu0, time.perf_counter()
    deadline = t0 + opts.time_limit_s if opts.time_limit_s > 0 else None
    for t in producers:
        t.start()
    finisher.start()
    try:
        run.launch_loop(batcher, opts.buckets, deadline)
    finally:
        batcher.stop()
        run.handles.put(None)
        finisher.join()
        for t in producers:
            t.join(timeout=10.0)
    wcpu = workers_cpu()
    wall, cpu = time.perf_counter() - t0, process_cpu_s() + wcpu - cpu0
    run.raise_error()
    result = run.result(wall, cpu, batcher)
    result.worker_cpu_s = wcpu - wcpu0
    return result


class _Run:
    """The state shared by the threads of one :func:`run_streams` call."""

    def __init__(self, streams: int, ops: BatchOps, sink: Optional[StreamSink], render: Any, in_flight: int,
                 release: Optional[Callable[[List[Any]], None]] = None) -> None:
        self.ops, self.sink, self.render, self.release = ops, sink, render, release
        end_batch = getattr(sink, "end_batch", None)
        self.end_batch: Optional[Callable[[], None]] = end_batch if callable(end_batch) else None
        self.handles: "queue.Queue[Any]" = queue.Queue(maxsize=in_flight)
        self.clocks = {name: _Clock() for name in ("decode", "launch", "finish", "sink")}
        self.decode_clocks = [_Clock() for _ in range(streams)]
        self.latency: List[List[float]] = [[] for _ in range(streams)]
        self.last_index = [-1] * streams
        self.counts = [0] * streams
        self.order_ok = True
        self.frames = 0
        self.padded_rows = 0
        self.errors: List[BaseException] = []

    def produce(self, s: int, source: Any, batcher: StreamBatcher) -> None:
        clock = self.decode_clocks[s]
        it = iter(source)
        try:
            while True:
                frame = clock.run(next, it, None)
                if frame is None or not batcher.put(s, frame):
                    break
        except BaseException as err:  # a decode error ends the run with that error
            self.errors.append(err)
            batcher.stop()
        finally:
            batcher.close(s)

    def feed(self, group: Any, batcher: StreamBatcher) -> None:
        """A stream group's one feeder thread (its clock is the decode stage's, counted on stream 0)."""
        try:
            self.decode_clocks[0].run(group.feed, batcher)
        except BaseException as err:  # a decode error ends the run with that error
            self.errors.append(err)
            batcher.stop()

    def launch_loop(self, batcher: StreamBatcher, buckets: Sequence[int], deadline: Optional[float]) -> None:
        clock = self.clocks["launch"]
        while not self.errors:
            if deadline is not None and time.perf_counter() > deadline:
                break
            frames = batcher.take()
            if frames is None:
                break
            padded = bucket_for(len(frames), buckets)
            self.padded_rows += padded
            handle = clock.run(self.ops.launch, frames, padded)
            self.handles.put((handle, frames))

    def finish_loop(self) -> None:
        finish, sink_clock = self.clocks["finish"], self.clocks["sink"]
        while True:
            item = self.handles.get()
            if item is None:
                return
            if self.errors:
                continue
            handle, frames = item
            try:
                events = finish.run(self.ops.finish, handle, frames)
                hosts = self._host_frames(handle, frames)
                done = time.perf_counter()
                for frame in frames:
                    self._record(frame, done)
                if self.sink is not None:  # one clock reading per batch (its totals are what the result reports)
                    sink_clock.run(self._sink_batch, frames, events, hosts)
                if self.release is not None:  # their pixels are no longer needed: the group may reuse the slots
                    self.release(frames)
            except BaseException as err:
                self.errors.append(err)

    def _sink_batch(self, frames: List[Any], events: List[Any], hosts: List[Any]) -> None:
        sink = self.sink
        for frame, event, host in zip(frames, events, hosts):
            sink(frame.stream, frame, event, host)  # type: ignore[misc]
        if self.end_batch is not None:  # a sink that records its frames once per batch
            self.end_batch()

    def _host_frames(self, handle: Any, frames: List[Any]) -> List[Any]:
        """Host copies of the frames ``render`` asks for (all, none, or per stream when it is a callable), None for
        the rest: a copy back costs PCIe time and host work per frame, so only frames an output uses are copied."""
        if self.render is True:
            return self.ops.host_frames(handle, frames)
        if not self.render:
            return [None] * len(frames)
        wanted = [bool(self.render(f.stream)) for f in frames]
        picked = [f for f, w in zip(frames, wanted) if w]
        copies = iter(self.ops.host_frames(handle, picked) if picked else [])
        return [next(copies) if w else None for w in wanted]

    def _record(self, frame: Any, done: float) -> None:
        s = frame.stream
        if frame.index <= self.last_index[s]:
            self.order_ok = False
        self.last_index[s] = frame.index
        self.counts[s] += 1
        if frame.captured:
            self.latency[s].append(1000.0 * (done - frame.captured))
        self.frames += 1

    def raise_error(self) -> None:
        if self.errors:
            raise self.errors[0]

    def result(self, wall: float, cpu: float, batcher: StreamBatcher) -> StreamRunResult:
        frames = max(1, self.frames)
        decode_wall = sum(c.wall for c in self.decode_clocks)
        decode_cpu = sum(c.cpu for c in self.decode_clocks)
        stage_wall = {"decode": 1000.0 * decode_wall / frames}
        stage_cpu = {"decode": 1000.0 * decode_cpu / frames}
        for name in ("launch", "finish", "sink"):
            stage_wall[name] = 1000.0 * self.clocks[name].wall / frames
            stage_cpu[name] = 1000.0 * self.clocks[name].cpu / frames
        gpu = {k: v / frames for k, v in self.ops.gpu_ms().items()}
        return StreamRunResult(frames=self.frames, wall_s=wall, per_stream_frames=list(self.counts),
                               latency_ms=self.latency, stage_wall_ms=stage_wall, stage_cpu_ms=stage_cpu,
                               process_cpu_s=cpu, batches=batcher.batches,
                               mean_batch=self.frames / max(1, batcher.batches), timeouts=batcher.timeouts,
                               gpu_ms=gpu, order_ok=self.order_ok)


__all__ = ["BatchOps", "HostBatchOps", "StreamRunOptions", "StreamRunResult", "StreamSink", "process_cpu_s",
           "run_streams"]
