"""``jetforge app NAME --decode gpu``: an app on the GPU video path, from the command line.

The CPU apps (:func:`jetforge.apps.pipeline.app.run_app`) decode with OpenCV and preprocess each frame on the CPU.
Here the frames stay on the GPU from the decoder to the model, as in ``benchmarks/gpu_pipeline/pipeline_gpu.py``:

    NVDEC / jetson-utils source per stream (a decode thread each)  ->  StreamBatcher (one frame per stream per
    batch, batched-push-timeout)  ->  GPU preprocessing (one NVRTC launch per batch, into a device buffer)  ->  the
    task's session fed that buffer (TensorRT: bound in place)  ->  outputs to the host  ->  the task's own
    ``postprocess`` (tracking, counting: per stream, in frame order)  ->  events.jsonl, metrics.json, the
    annotated video through CPU encoder processes (``stream_<s>.mpg``; ``--no-video``: events only, DeepStream's
    render-off mode), and the ``--output`` URIs (:func:`~jetforge.apps.video.sinks.outputs.open_sinks`, as on the
    CPU path: every event to ``mqtt://``; annotated frames, copied back to the host and drawn as the encoders draw
    them, to files (never dropped: the run waits for them) and to live outputs (dropped and counted when a
    client is slow); a frame is copied back only when an output or the encoders take it)

The task is the one the CPU path builds (``App.build``); its ``gpu_model()`` hook
(:meth:`jetforge.apps.pipeline.stages.Task.gpu_model`) gives the session, the input contract and the output splitter.
The run is an :class:`~jetforge.apps.pipeline.app_run.AppRun` with :class:`GpuRunner` as its strategy: the same
output checks, metrics.json schema, and printed report as the CPU path.  When the frames arrive in host memory (a decoder stand-in in tests) the same flow
runs with the contract's CPU preprocessing, so the CPU tests check everything but the CUDA launches.
"""

import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from jetforge.apps.pipeline.app import open_app_outputs
from jetforge.apps.pipeline.app_run import AppResult, AppRun, AppRunner, RunEnd
from jetforge.apps.pipeline.batching import DEFAULT_BUCKETS
from jetforge.apps.pipeline.gpu_ops import AutoFrameOps, gpu_model_for
from jetforge.apps.pipeline.metrics import WARMUP_FRAMES, PipelineMetrics
from jetforge.apps.pipeline.stages import GpuModel, Item
from jetforge.apps.pipeline.streams import BatchOps, StreamRunOptions, run_streams
from jetforge.apps.video.sinks.encode_pool import SUFFIX, EncoderPool, draw_event
from jetforge.apps.video.sinks.file import JsonLinesSink
from jetforge.apps.video.sinks.outputs import Outputs as LiveOutputs
from jetforge.apps.video.sources.gpu.frame import bgr_from_nv12
from jetforge.apps.video.sources.base import Frame
from jetforge.apps.video.sources.gpu.open import nvdec_files, open_gpu_source
from jetforge.errors import ConfigError

log = logging.getLogger(__name__)


@dataclass
class GpuAppOptions:
    """``max_batch``: frames per batch (0: ``per_stream`` per stream, at most 32); ``per_stream``: frames of one
    stream a batch may take; ``encoders``: CPU encoder processes for the annotated video (0: events only);
    ``batch_timeout_s``: the batched-push-timeout; ``gil_switch_ms``: Python's GIL switch interval during the run;
    ``warmup_frames``: each stream's first frames left out of the latency statistics (as on the CPU path).

    The defaults are what measured best on the H200 (benchmarks/gpu_pipeline/pipeline_gpu.py variants): the launch thread waits
    for the GIL, not for the GPU; a 0.5 ms switch interval (Python's default is 5 ms), two frames of a stream per
    batch (half the per-batch host work per frame), owned frame copies without torch and the decoder's own thread
    (the sources of :func:`open_gpu_sources`) took one stream from 0.88x to 1.00x of NVDEC's rate, 4 streams to
    0.98x and 16 streams from 0.25x to 0.68x."""

    max_batch: int = 0
    per_stream: int = 2
    encoders: int = 0
    batch_timeout_s: float = 0.004
    gil_switch_ms: float = 0.5
    warmup_frames: int = WARMUP_FRAMES

    def __post_init__(self) -> None:
        if self.max_batch < 0 or self.max_batch > 32 or self.encoders < 0 or self.per_stream < 1:
            raise ConfigError("--batch on the GPU path is 1..32, encoders 0 or more and frames per stream 1 or more, "
                              "got %d, %d and %d" % (self.max_batch, self.encoders, self.per_stream))


# Streams from which `--decode gpu` decodes in worker processes (IpcDecodeGroup) instead of in this process; 0: never.
# Measured on the H200 (benchmarks/gpu_pipeline/results/nvidia-h200_2026-12-01_decode-layouts.txt, render off): the workers won only where
# the pipeline's own host work was heavy (the SSD detector's per-frame NMS, since batched): people 16 streams 0.66x
# vs 0.57x for one feeder thread, classify 16 streams 0.62x vs 0.83x.  So off; one feeder thread below.
DECODE_PROCESSES_FROM = 0
# Streams from which one feeder thread reads every stream's decoder (SourceFeedGroup) instead of a thread per stream;
# 0: never.  On the H200 (same run): classify 4 / 16 / 32 streams 0.95x / 0.83x / 0.77x of the bound against
# 0.86x / 0.40x / 0.48x with a thread per stream; 1 stream equal (one source either way).
FEED_THREAD_FROM = 2
FEED_DEPTH, FEED_RING_SLOTS = 8, 24  # batcher frames a stream; ring: those + the batches in flight + one fetch
# Whether the feeder's sources copy a fetch ahead (NvThreadedSource copy_ahead: each fetch's copies waited for a fetch
# later, not right after their launch).  Off: measured on an H100 (results/nvidia-h100_2026-12-07_gpu-path-ahead.txt,
# MobileNetV2 at 16 streams) it cut the feeder's copy wait from 0.024 to 0.009 ms a frame and left the FPS as it was
# (0.88x against 0.89x): NVDEC slowed by the model beside it is the limit there, not the feeder.
FEED_COPY_AHEAD = False


def decode_layout(streams: int, processes_from: int = DECODE_PROCESSES_FROM, feed_from: int = FEED_THREAD_FROM) -> str:
    """How `--decode gpu` decodes ``streams`` streams: ``"processes"`` (worker processes, CUDA IPC), ``"feed"`` (one
    feeder thread) or ``"threads"`` (a thread per stream).  ``benchmarks/gpu_pipeline/pipeline_gpu.py``'s ``auto`` is the same."""
    if processes_from and streams >= processes_from:
        return "processes"
    return "feed" if feed_from and streams >= feed_from else "threads"


def default_encoders() -> int:
    """Encoder processes for the annotated video: half the cores, 1..8 (the decode and launch threads need some)."""
    return max(1, min(8, (os.cpu_count() or 2) // 2))


def default_max_batch(frames: int, rows_per_frame: int = 1, rows: int = 32) -> int:
    """Frames a batch takes by default: ``frames`` (every stream's share), at most ``rows`` input rows once padded
    to its bucket; with tiles (``rows_per_frame`` = 1 + N^2) a frame is that many rows, so 2x2 tiles take 4 frames
    (20 rows: 8 frames would pad to 40), which keeps a batch within the 32-row profile engines are built with."""
    fit = [b for b in DEFAULT_BUCKETS if b * rows_per_frame <= rows]
    return max(1, min(frames, max(fit) if fit else 1))


def open_gpu_sources(uris: Sequence[Any], max_frames: Optional[int] = None, loop: bool = False,
                     processes_from: int = DECODE_PROCESSES_FROM, streams_per_process: int = 4,
                     feed_from: int = FEED_THREAD_FROM, codec_module: Optional[Any] = None) -> Sequence[Any]:
    """One GPU-frame source per URI (NVDEC or jetson-utils; a clear error when neither exists), streams 0..N-1.

    From ``processes_from`` streams on (0: never), video files that NVDEC decodes are decoded in worker processes
    (``streams_per_process`` streams each) and handed over through CUDA IPC: an
    :class:`~jetforge.apps.video.sources.gpu.ipc_decode.IpcDecodeGroup`.  Else, from ``feed_from`` streams on, one
    thread reads all the sources: a :class:`~jetforge.apps.video.sources.gpu.feed_group.SourceFeedGroup`.  Both are
    also sequences of the streams.  ``codec_module`` replaces the PyNvVideoCodec module (tests inject the CPU
    stand-in of ``tests/standins/fake_nvdec.py``; worker processes import it by its module and name)."""
    layout = decode_layout(len(uris), processes_from, feed_from)
    locations = nvdec_files(uris) if layout == "processes" else None
    if locations:
        from jetforge.apps.video.sources.gpu.ipc_decode import NVDEC, IpcDecodeGroup

        return IpcDecodeGroup(locations, streams_per_worker=streams_per_process, slots=16, fetch=4, loop=loop,
                              max_frames=max_frames or 0, codec=NVDEC if codec_module is None else codec_module)
    feed = decode_layout(len(uris), 0, feed_from) == "feed"  # also when the worker processes cannot decode a source
    sources: List[Any] = []
    try:
        for s, uri in enumerate(uris):
            sources.append(open_gpu_source(uri, decode="gpu", stream=s, loop=loop, max_frames=max_frames or 0,
                                           codec_module=codec_module, ring_slots=FEED_RING_SLOTS if feed else 16,
                                           defer_sync=feed, copy_ahead=feed and FEED_COPY_AHEAD))
    except BaseException:
        for src in sources:
            src.close()
        raise
    if feed:
        from jetforge.apps.video.sources.gpu.feed_group import SourceFeedGroup

        return SourceFeedGroup(sources, depth=FEED_DEPTH)
    return sources


class TaskOps(BatchOps):
    """The frame ops of :mod:`.gpu_ops` with the task's ``postprocess`` after them (events, per stream in order:
    ``run_streams`` finishes batches in order on one thread), each step timed into the run's metrics: ``launch``
    (preprocessing + inference queued), ``results`` (waiting for them, split per frame), ``postprocess``.

    Recorded once per batch, not per frame (:meth:`PipelineMetrics.add_stage_frames`): every frame keeps its own
    wall time, the CPU clock is read once per step and shared.  Why: at 16 streams the per-frame recording cost
    the H100 run of 2026-12-07 a quarter of its frames (0.62x against 0.86x of the bound without it), on threads
    that share one GIL with the launch thread."""

    def __init__(self, task: Any, model: GpuModel, inner: BatchOps, metrics: PipelineMetrics) -> None:
        self.task, self.model, self.inner, self.metrics = task, model, inner, metrics
        self.t_result: Dict[Any, float] = {}  # (stream, frame index) -> when its event was made

    def _timed(self, stage: str, frames: List[Any], fn: Any, *args: Any) -> Any:
        t0, c0 = time.perf_counter(), time.thread_time()
        value = fn(*args)
        wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
        self.metrics.add_stage_frames(stage, [f.index for f in frames], wall, cpu)
        return value

    def launch(self, frames: List[Any], padded: int) -> Any:
        self.metrics.add_batch(len(frames))
        return self._timed("launch", frames, self.inner.launch, frames, padded)

    def finish(self, handle: Any, frames: List[Any]) -> List[Dict[str, Any]]:
        outputs = self._timed("results", frames, self.inner.finish, handle, frames)
        events, walls = [], []
        c0 = time.thread_time()
        for frame, output in zip(frames, outputs):
            item = Item(frame=Frame(frame.index, frame.timestamp, None, captured=frame.captured), stream=frame.stream,
                        t_start=frame.captured, t_decoded=frame.captured, output=output)
            t0 = time.perf_counter()
            events.append(self.task.postprocess(item))
            t1 = time.perf_counter()
            walls.append(t1 - t0)
            self.t_result[(frame.stream, frame.index)] = t1
        self.metrics.add_stage_frames("postprocess", [f.index for f in frames], 0.0, time.thread_time() - c0,
                                      walls=walls)
        return events

    def host_frames(self, handle: Any, frames: List[Any]) -> List[Any]:
        return self.inner.host_frames(handle, frames)


class SinkTiming:
    """The ``sink`` stage and each finished frame, recorded once per batch: a sink calls :meth:`begin` and
    :meth:`frame_done` around each frame's outputs, and ``run_streams`` calls the sink's ``end_batch`` after a
    batch's last frame (which calls :meth:`end_batch` here).  Each frame keeps its own wall time and end-to-end
    latency; the CPU clock is read once per batch (from the first frame's begin to the end of the batch: the
    finish thread's bookkeeping between frames is in it) and shared.  The benchmark's timed sink uses this too."""

    def __init__(self, ops: TaskOps) -> None:
        self.ops = ops
        self._pending: List[Any] = []
        self._c0: Optional[float] = None

    def begin(self) -> float:
        if self._c0 is None:
            self._c0 = time.thread_time()
        return time.perf_counter()

    def frame_done(self, stream: int, frame: Any, t0: float) -> None:
        self._pending.append((stream, frame, t0, time.perf_counter()))

    def end_batch(self) -> None:
        pending, self._pending = self._pending, []
        if not pending:
            return
        c0, self._c0 = self._c0, None  # set by the batch's first begin()
        cpu = time.thread_time() - c0 if c0 is not None else 0.0
        metrics, t_result = self.ops.metrics, self.ops.t_result
        metrics.add_stage_frames("sink", [f.index for _, f, _, _ in pending], 0.0, cpu,
                                 walls=[done - t0 for _, _, t0, done in pending])
        metrics.add_done_frames([(s, f.captured, f.captured, t_result.pop((s, f.index), done), done, f.index)
                                 for s, f, _, done in pending])


class _Outputs:
    """events.jsonl (one record per frame, the task's events after it, as the CPU apps write them), the annotated
    video through the encoder pool and the ``--output`` URIs (``live``); each frame recorded as done in the run's
    metrics (:class:`SinkTiming`, once per batch)."""

    def __init__(self, task: Any, events: JsonLinesSink, pool: Optional[EncoderPool], ops: TaskOps,
                 live: Optional[LiveOutputs] = None) -> None:
        self.task, self.events, self.pool, self.ops, self.live = task, events, pool, ops, live
        self.frames = 0
        self._cv2: Any = None
        self.timing = SinkTiming(ops)

    def __call__(self, stream: int, frame: Any, event: Dict[str, Any], host: Any) -> None:
        t0 = self.timing.begin()
        event = dict(event or {})
        extra = event.pop("events", [])
        record = {"type": self.task.name, "stream": stream, "frame": frame.index, "t": round(frame.timestamp, 4),
                  "latency_ms": round((t0 - frame.captured) * 1000.0, 3)}
        record.update(event)
        self.events.write(record)
        if self.live is not None:
            self.live.event(record)
        for e in extra:
            extra_record = dict({"stream": stream, "frame": frame.index, "t": round(frame.timestamp, 4)}, **e)
            self.events.write(extra_record)
            if self.live is not None:
                self.live.event(extra_record)
        if self.pool is not None and host is not None:
            self.pool.submit(stream, host, drawable(event))
        if self.live is not None and host is not None and self.live.wants_frames(stream):
            self.live.frame(stream, self._annotated(host, event))
        self.frames += 1
        self.timing.frame_done(stream, frame, t0)

    def end_batch(self) -> None:
        """After a batch's last frame (``run_streams``): its frames recorded in the run's metrics."""
        self.timing.end_batch()

    def _annotated(self, host: Any, event: Dict[str, Any]) -> Any:
        """The frame as BGR with the encoders' overlay (an NV12 host copy is converted, BT.601 as OpenCV's own)."""
        if self._cv2 is None:
            import cv2

            self._cv2 = cv2
        image = bgr_from_nv12(self._cv2, host) if host.ndim == 2 else host.copy()
        draw_event(image, drawable(event))
        return image


def drawable(event: Dict[str, Any]) -> Dict[str, Any]:
    """What the encoder workers draw: the top-1 label (an event with ``top``) or the tracked boxes (``tracks``)."""
    out: Dict[str, Any] = {}
    top = event.get("top")
    if top:
        out["label"] = "%s %.2f" % (top[0].get("label", "?"), float(top[0].get("p", 0.0)))
    tracks = event.get("tracks")
    if tracks:
        out["boxes_xyxy"] = [t["box"] for t in tracks]
        out["label"] = "%d people" % len(tracks)
    return out


GPU_STAGES = ("launch", "results", "postprocess", "sink")  # the GPU path's timed steps (metrics.json stages)


class GpuRunner(AppRunner):
    """The GPU path of :class:`~jetforge.apps.pipeline.app_run.AppRun`: GPU-frame sources -> batches ->
    the task's :class:`~jetforge.apps.pipeline.stages.GpuModel` (its ``gpu_model()`` hook) -> the task's
    ``postprocess`` -> events, (with encoders) ``stream_<s>.mpg`` and the ``outputs`` URIs (with ``display`` and
    ``stream_to``, as on the CPU path)."""

    path = "gpu"

    def __init__(self, options: Optional[GpuAppOptions] = None, outputs: Sequence[str] = (), display: bool = False,
                 stream_to: Optional[str] = None) -> None:
        self.opts = options or GpuAppOptions()
        self.outputs, self.display, self.stream_to = list(outputs), display, stream_to
        self.live: Optional[LiveOutputs] = None
        self._metrics = PipelineMetrics(GPU_STAGES, warmup_frames=self.opts.warmup_frames,
                                        model_stages=("launch", "results"))
        self.model: Optional[GpuModel] = None
        self.frame_ops: Optional[AutoFrameOps] = None
        self.pool: Optional[EncoderPool] = None
        self.result: Any = None
        self.encoded: List[Dict[str, Any]] = []
        self.max_batch = 0

    def video_files(self, out: Path, streams: int) -> List[Path]:
        return [out / ("stream_%d%s" % (s, SUFFIX)) for s in range(streams)] if self.opts.encoders else []

    def prepare(self, task: Any, sources: Sequence[Any], out: Path, inputs: Sequence[Any]) -> None:
        self.model = gpu_model_for(task)  # a task the GPU path cannot run fails before any output is opened
        streams = [sources[k] for k in range(len(sources))]  # a stream group is a sequence of its streams
        self.live = open_app_outputs(task, streams, out, self.outputs, self.display, self.stream_to, inputs)

    def metrics(self) -> PipelineMetrics:
        return self._metrics

    def run(self, task: Any, sources: Sequence[Any], events: JsonLinesSink, files: Dict[str, Any]) -> RunEnd:
        opts = self.opts
        self.max_batch = opts.max_batch or default_max_batch(len(sources) * opts.per_stream,
                                                             self.model.rows_per_frame)  # type: ignore[union-attr]
        self.frame_ops = AutoFrameOps(self.model, self.max_batch)  # type: ignore[arg-type]
        ops = TaskOps(task, self.model, self.frame_ops, self._metrics)  # type: ignore[arg-type]
        first = sources[0]
        if opts.encoders:
            self.pool = EncoderPool(files["events"].parent, first.width, first.height, first.fps or 30.0,
                                    workers=opts.encoders)
        sink = _Outputs(task, events, self.pool, ops, self.live)
        live = self.live
        render: Any = False
        if self.pool is not None:
            render = True
        elif live is not None and any(live.takes_frames(s) for s in range(len(sources))):
            render = live.wants_frames  # per frame: an unwatched page costs no copy back
        run_options = StreamRunOptions(max_batch=self.max_batch, batch_timeout_s=opts.batch_timeout_s,
                                       per_stream=opts.per_stream, depth=max(2, opts.per_stream))
        switch = sys.getswitchinterval()
        self._metrics.start()
        try:
            sys.setswitchinterval(opts.gil_switch_ms / 1000.0)
            self.result = run_streams(sources, ops, run_options, sink=sink, render=render)
        finally:
            sys.setswitchinterval(switch)
            self._metrics.stop()
        return RunEnd("end of stream", [])

    def close(self) -> None:
        try:
            self.encoded = self.pool.close() if self.pool is not None else []
            if self.frame_ops is not None:
                self.frame_ops.close()
        finally:
            if self.live is not None:
                self.live.close()

    def add_to_report(self, report: Dict[str, Any], files: Dict[str, Any]) -> None:
        o = self.opts
        block: Dict[str, Any] = {"path": self.path, "preprocess": self.frame_ops.kind if self.frame_ops else "",
                                 "max_batch": self.max_batch, "per_stream": o.per_stream,
                                 "batch_timeout_s": o.batch_timeout_s, "gil_switch_ms": o.gil_switch_ms,
                                 "encoders": o.encoders, "warmup_frames": o.warmup_frames}
        if self.result is not None:
            run = self.result.summary()
            block.update({k: run[k] for k in ("order_ok", "batch_timeouts", "stage_gpu_ms_per_frame",
                                              "process_cpu_ms_per_frame", "decode_workers_cpu_ms_per_frame",
                                              "cores_per_30fps_stream")})
            block["decode_ms_per_frame"] = run["stage_wall_ms_per_frame"].get("decode")
        report["pipeline"] = block
        if self.live is not None:
            report["sinks"] = self.live.report()
            report["outputs"]["files"] = [str(p) for p in self.live.files]
        if self.encoded:
            frames = sum(r["frames"] for r in self.encoded)
            report["encoders"] = {"workers": len(self.encoded), "frames": frames, "cpu_ms_per_encoded_frame":
                                  1000.0 * sum(r["cpu_s"] for r in self.encoded) / max(1, frames)}


def run_gpu_app(task: Any, sources: Sequence[Any], out_dir: Any, options: Optional[GpuAppOptions] = None,
                inputs: Sequence[Any] = (), notes: Sequence[str] = (), outputs: Sequence[str] = (),
                display: bool = False, stream_to: Optional[str] = None) -> AppResult:
    """Run ``task`` over GPU-frame ``sources`` on the GPU path; writes events.jsonl, metrics.json (the CPU path's
    schema) and (with encoders) ``stream_<s>.mpg`` into ``out_dir``, and feeds the ``outputs`` URIs (``--output``:
    files, http://@:8080, rtsp://@:8554/NAME, mqtt://HOST/TOPIC).  Outputs are kept when the run ends early."""
    runner = GpuRunner(options, outputs=outputs, display=display, stream_to=stream_to)
    return AppRun(task, sources, out_dir, runner, inputs=inputs, notes=notes).run()


__all__ = ["GPU_STAGES", "GpuAppOptions", "GpuRunner", "SinkTiming", "TaskOps", "default_encoders", "default_max_batch", "drawable", "open_gpu_sources",
           "run_gpu_app"]
