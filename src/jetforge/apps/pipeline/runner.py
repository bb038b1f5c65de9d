"""The streaming pipeline: decode -> preprocess -> infer (batched) -> postprocess -> sink.

Each stage runs on its own thread and hands frames on through a bounded queue, so
the stages overlap (OpenCV and ONNX Runtime release the GIL while they work) and a
slow stage holds the ones before it back (back-pressure): a file is never read
faster than it is processed, and memory stays bounded.  Several sources (one decode
thread each) feed one model: the infer stage takes up to ``batch_size`` frames from
whichever streams have one ready, waiting at most ``batch_timeout_s`` for a batch
to fill (DeepStream's batched multi-stream, in plain Python).

Failures are explicit.  A stage that raises on one frame is counted in the metrics,
written as an ``error`` event, and handled by the policy: ``skip`` drops that frame
and goes on, ``stop`` ends the run; either way more than ``max_consecutive_errors``
failures in a row of one stage end the run with a :class:`PipelineError` naming
the stage, the frame and the error.  A source that is lost (camera unplugged,
stream gone after its reconnects) ends its stream and is reported in
``result.stream_errors``; the end of a file is the normal end.  ``overlap=False``
runs the same stages one frame at a time on the calling thread (the baseline the
benchmark compares against); the threads of the overlapped mode are in
:mod:`jetforge.apps.pipeline.threads`.

``infer_workers=N`` runs N inference threads that take batches from the same queue
and call ``task.infer`` concurrently (ONNX Runtime runs one session on several
threads; :class:`~jetforge.apps.pipeline.stages.SessionModel` serialises backends that
cannot).  On a CPU, N workers of one ORT thread each keep the model busy while the
other stages run, where one worker of N ORT threads makes ORT's pool fight them.
Every frame gets a sequence number when it leaves preprocessing and the postprocess
stage puts frames back in that order (a reorder buffer, bounded by a limit on the
frames in flight between the two), so postprocess and the sink still see every
stream's frames in order, failed frames included.

A frame the source could not decode (an unreadable file in an image folder,
:class:`~jetforge.apps.video.sources.base.FrameDecodeError`) is *skipped*, whatever the
error policy: it is a bad input, not a failing stage.  It reaches the sink as a
``{"type": "skipped", ...}`` event naming the file, is counted in
``metrics.skipped``, logged as a warning, and never ends the run.
"""

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

from jetforge.errors import ConfigError, JetforgeError, StreamError
from jetforge.apps.pipeline.metrics import WARMUP_FRAMES, PipelineMetrics
from jetforge.apps.pipeline.stages import Item, Status, Task
from jetforge.apps.pipeline.threads import ThreadedRun
from jetforge.apps.video.sources.base import FrameDecodeError, VideoSource

log = logging.getLogger(__name__)

ERROR_POLICIES = ("skip", "stop")
NOT_PROCESSED = ("error", "skipped")  # event types of frames that reach the sink without a result
DROP_POLICIES = ("never", "oldest")


class PipelineError(JetforgeError):
    """A stage failed and the error policy ended the run."""


@dataclass
class PipelineOptions:
    """How the pipeline runs.

    ``queue_size``: frames each inter-stage queue holds (back-pressure beyond it).
    ``batch_size``/``batch_timeout_s``: frames per model call across streams, and how long
    the infer stage waits for a batch to fill.  ``on_error``: ``skip`` or ``stop``;
    ``max_consecutive_errors``: failures in a row of one stage that end the run even
    under ``skip``.  ``drop``: ``never`` (files: every frame is processed) or ``oldest``
    (drop the oldest waiting frame when the pipeline is behind, as a live source does).
    ``max_frames``: frames per stream (None: all).  ``overlap``: stages on threads (True)
    or one frame at a time.  ``infer_workers``: inference threads running ``task.infer``
    concurrently (results are put back in frame order before postprocess); only used
    with ``overlap``.  ``warmup_frames``: each stream's first frames (index below it) left out of the
    latency statistics and plots (reported on their own in metrics.json ``warmup``; still counted in ``fps``).
    """

    queue_size: int = 2
    batch_size: int = 1
    batch_timeout_s: float = 0.005
    on_error: str = "skip"
    max_consecutive_errors: int = 10
    drop: str = "never"
    max_frames: Optional[int] = None
    overlap: bool = True
    infer_workers: int = 1
    warmup_frames: int = WARMUP_FRAMES

    def __post_init__(self) -> None:
        if self.queue_size < 1:
            raise ConfigError("queue_size must be at least 1, got %d" % self.queue_size)
        if self.warmup_frames < 0:
            raise ConfigError("warmup_frames must be 0 or more, got %d" % self.warmup_frames)
        if self.batch_size < 1:
            raise ConfigError("batch_size must be at least 1, got %d" % self.batch_size)
        if self.on_error not in ERROR_POLICIES:
            raise ConfigError("error policy must be one of %s, got %r" % (", ".join(ERROR_POLICIES), self.on_error))
        if self.drop not in DROP_POLICIES:
            raise ConfigError("drop policy must be one of %s, got %r" % (", ".join(DROP_POLICIES), self.drop))
        if self.max_consecutive_errors < 0:
            raise ConfigError("max_consecutive_errors must be 0 or more, got %d" % self.max_consecutive_errors)
        if isinstance(self.infer_workers, bool) or not isinstance(self.infer_workers, int) \
                or self.infer_workers < 1:
            raise ConfigError("infer_workers must be a whole number of at least 1, got %r" % (self.infer_workers,),
                              hint="e.g. --infer-workers 2 with an ONNX Runtime session of 1 thread")
        if self.max_frames is not None and self.max_frames < 1:
            raise ConfigError("max_frames must be at least 1, got %d" % self.max_frames)


@dataclass
class PipelineResult:
    metrics: PipelineMetrics
    stream_errors: List[str] = field(default_factory=list)  # sources lost or truncated, one line each
    stopped: str = "end of stream"  # why the run ended: "end of stream", "max frames", "stop requested"


SinkFn = Callable[[Item, Status], None]


class Pipeline:
    """Run ``task`` over ``sources``; ``sink(item, status)`` receives each finished frame in order per stream.

    A frame whose stage failed reaches the sink too, with ``item.event`` set to an
    ``{"type": "error", ...}`` event and ``item.output`` None, so that the event log
    and the video stay complete.
    """

    def __init__(self, sources: Sequence[VideoSource], task: Task, sink: Optional[SinkFn] = None,
                 options: Optional[PipelineOptions] = None, on_done: Optional[Callable[[Item], None]] = None,
                 status_label: str = "") -> None:
        if not sources:
            raise ConfigError("a pipeline needs at least one source")
        self.sources = list(sources)
        self.task = task
        self.sink = sink
        self.options = options or PipelineOptions()
        self.on_done = on_done
        self.status_label = status_label
        self.metrics = PipelineMetrics(warmup_frames=self.options.warmup_frames)
        self._abort = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._consecutive: Dict[str, int] = {}
        self._failure: Optional[BaseException] = None
        self._stream_errors: List[str] = []
        self._limited = False

    # -- control ---------------------------------------------------------------------------
    def request_stop(self) -> None:
        """Stop reading new frames; frames already in the pipeline are finished (e.g. the window was closed)."""
        self._stop.set()

    def status(self) -> Status:
        m = self.metrics
        return Status(fps=m.running_fps(), latency_ms=m.last_latency_ms(), frames=m.frames,
                      dropped=m.dropped_pipeline + sum(getattr(s, "dropped", 0) for s in self.sources),
                      errors=m.error_count, label=self.status_label)

    # -- stage calls with the error policy ---------------------------------------------------
    def _call(self, stage: str, item: Item, fn: Callable[[], Any]) -> Any:
        """Run one stage on one item, timed; on failure count it, apply the policy, return _FAILED."""
        t0 = time.perf_counter()
        c0 = time.thread_time()
        try:
            value = fn()
        except Exception as err:
            self._failed(stage, [item], err)
            return _FAILED
        wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
        item.times[stage] = wall
        item.cpu[stage] = cpu
        self.metrics.add_stage(stage, wall, cpu, frame=item.frame.index)
        with self._lock:
            self._consecutive[stage] = 0
        return value

    def _failed(self, stage: str, items: Sequence[Item], err: BaseException) -> None:
        message = err.one_line() if isinstance(err, JetforgeError) else "%s: %s" % (type(err).__name__, err)
        for item in items:
            self.metrics.add_error(stage, item.stream, item.frame.index, message, name=_name(item))
            item.event = {"type": "error", "stage": stage, "error": message}
            item.output = None
        first = items[0]
        log.warning("stage %s failed on %s: %s", stage, _where(first), message)
        with self._lock:
            n = self._consecutive.get(stage, 0) + len(items)
            self._consecutive[stage] = n
            policy = self.options.on_error
            limit = self.options.max_consecutive_errors
            if self._failure is None and (policy == "stop" or n > limit):
                why = ("the error policy is 'stop'" if policy == "stop"
                       else "%d failures in a row (more than --max-consecutive-errors %d)" % (n, limit))
                self._failure = PipelineError(
                    "stage %s failed on %s: %s; stopping: %s" % (stage, _where(first), message, why),
                    hint="rerun with --debug for the traceback; --on-error skip keeps going past bad frames")
                self._failure.__cause__ = err
                self._abort.set()

    # -- running ---------------------------------------------------------------------------
    def run(self) -> PipelineResult:
        """Process every frame (up to ``max_frames`` per stream); raises PipelineError if the policy stopped it."""
        self.metrics.start()
        try:
            if self.options.overlap:
                ThreadedRun(self).run()
            else:
                self._run_sequential()
        finally:
            self.metrics.stop()
            for i, source in enumerate(self.sources):
                self.metrics.dropped_sources[i] = int(getattr(source, "dropped", 0) or 0)
        if self._failure is not None:
            raise self._failure
        stopped = "stop requested" if self._stop.is_set() else ("max frames" if self._limited else "end of stream")
        return PipelineResult(self.metrics, list(self._stream_errors), stopped)

    def _read(self, stream: int, source: VideoSource, count: int) -> Any:
        """The next Item of a stream, or None at its end; an undecodable frame is an Item with an error event."""
        if self._stop.is_set() or self._abort.is_set():
            return None
        if self.options.max_frames is not None and count >= self.options.max_frames:
            self._limited = True
            return None
        t0 = time.perf_counter()
        c0 = time.thread_time()
        try:
            frame = source.read()
        except FrameDecodeError as err:
            index = err.index if err.index is not None else count
            placeholder = Item(frame=_NoFrame(index, err.name), stream=stream, t_start=t0)  # type: ignore[arg-type]
            self._skipped(placeholder, err)
            return placeholder
        except StreamError as err:
            self._stream_error(stream, err.one_line())
            return None
        if frame is None:
            truncated = getattr(source, "truncated", None)
            if truncated:
                self._stream_error(stream, truncated)
            return None
        wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
        item = Item(frame=frame, stream=stream, t_start=t0 if not frame.captured or frame.captured >= t0
                    else frame.captured, t_decoded=frame.captured or (t0 + wall))
        item.times["decode"] = wall
        item.cpu["decode"] = cpu
        self.metrics.add_stage("decode", wall, cpu, frame=frame.index)
        return item

    def _skipped(self, item: Item, err: FrameDecodeError) -> None:
        """An undecodable input frame: recorded and reported, never counted against the error policy."""
        self.metrics.add_skipped(item.stream, item.frame.index, err.message, name=_name(item))
        item.event = {"type": "skipped", "reason": err.message}
        log.warning("skipped %s: %s", _where(item), err.message)

    def _stream_error(self, stream: int, message: str) -> None:
        text = "stream %d (%s): %s" % (stream, self.sources[stream].uri, message) if len(self.sources) > 1 else message
        log.error("%s", text)
        with self._lock:
            self._stream_errors.append(text)

    def _finish(self, item: Item) -> None:
        """The sink stage: hand the item to the sink, then record it as done."""
        if self.sink is not None:
            status = self.status()
            if self._call("sink", item, lambda: self.sink(item, status)) is _FAILED:  # type: ignore[misc]
                return
        if not self._ok(item):
            return
        self.metrics.add_done(item.stream, item.t_start, item.t_decoded, item.t_result or time.perf_counter(),
                              time.perf_counter(), frame=item.frame.index)
        if self.on_done is not None:
            self.on_done(item)

    def _preprocess(self, item: Item) -> None:
        value = self._call("preprocess", item, lambda: self.task.preprocess(item.frame))
        if value is not _FAILED:
            item.input = value

    def _infer(self, items: List[Item]) -> None:
        t0 = time.perf_counter()
        c0 = time.thread_time()
        try:
            outputs = self.task.infer([it.input for it in items])
            if len(outputs) != len(items):
                raise PipelineError("the infer stage returned %d outputs for %d frames" % (len(outputs), len(items)))
        except Exception as err:
            self._failed("infer", items, err)
            return
        wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
        self.metrics.add_batch(len(items))
        for item, out in zip(items, outputs):
            item.output = out
            item.times["infer"] = wall
            item.cpu["infer"] = cpu / len(items)
            self.metrics.add_stage("infer", wall, cpu / len(items), frame=item.frame.index, batch=len(items))
        with self._lock:
            self._consecutive["infer"] = 0

    def _postprocess(self, item: Item) -> None:
        value = self._call("postprocess", item, lambda: self.task.postprocess(item))
        if value is not _FAILED:
            item.event = value
        item.t_result = time.perf_counter()

    @staticmethod
    def _ok(item: Item) -> bool:
        """Whether the frame is still being processed (not failed in a stage, not skipped by its source)."""
        return item.event is None or item.event.get("type") not in NOT_PROCESSED

    def _run_sequential(self) -> None:
        counts = [0] * len(self.sources)
        live = list(range(len(self.sources)))
        while live and not self._abort.is_set():
            for stream in list(live):
                item = self._read(stream, self.sources[stream], counts[stream])
                if item is None:
                    live.remove(stream)
                    continue
                counts[stream] += 1
                if self._ok(item):
                    self._preprocess(item)
                if self._ok(item):
                    self._infer([item])
                if self._ok(item):
                    self._postprocess(item)
                if self._abort.is_set():
                    break
                self._finish(item)

    def _guard(self, fn: Callable[..., None]) -> Callable[..., None]:
        """A worker that dies of a bug takes the pipeline down with the bug, not silently."""
        def run(*args: Any) -> None:
            try:
                fn(*args)
            except BaseException as err:
                with self._lock:
                    if self._failure is None:
                        self._failure = err
                self._abort.set()
        return run


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


_FAILED = _Marker("FAILED")


class _NoFrame:
    """Stands in for a frame that could not be decoded (only its index and file name are known)."""

    def __init__(self, index: int, name: str = "") -> None:
        self.index = index
        self.name = name
        self.timestamp = 0.0
        self.image = None
        self.captured = 0.0


def _name(item: Item) -> str:
    return str(getattr(item.frame, "name", "") or "")


def _where(item: Item) -> str:
    """``frame 3 (IMG_0004.jpg) of stream 0``: the frame as the user can find it."""
    name = _name(item)
    return "frame %d%s of stream %d" % (item.frame.index, " (%s)" % name if name else "", item.stream)


__all__ = ["ERROR_POLICIES", "NOT_PROCESSED", "Pipeline", "PipelineError", "PipelineOptions", "PipelineResult"]
