"""``jetforge app NAME --decode gpu``: an app on the GPU video path, from the command line.

The CPU apps (:func:`jetforge.apps.pipeline.app.run_app`) decode with OpenCV and preprocess each frame on the CPU.
Here the frames stay on the GPU from the decoder to the model, as in ``benchmarks/gpu_pipeline/pipeline_gpu.py``:

    NVDEC / jetson-utils source per stream (a decode thread each)  ->  StreamBatcher (one frame per stream per
    batch, batched-push-timeout)  ->  GPU preprocessing (one NVRTC launch per batch, into a device buffer)  ->  the
    task's session fed that buffer (TensorRT: bound in place)  ->  outputs to the host  ->  the task's own
    ``postprocess`` (tracking, counting: per stream, in frame order)  ->  events.jsonl, metrics.json, and the
    annotated video through CPU encoder processes (``stream_<s>.mpg``; ``--no-video``: events only, DeepStream's
    render-off mode)

The task is the one the CPU path builds (``App.build``); :func:`~jetforge.apps.pipeline.gpu_ops.gpu_model_for` takes
its session and input contract.  When the frames arrive in host memory (a decoder stand-in in tests) the same flow
runs with the contract's CPU preprocessing, so the CPU tests check everything but the CUDA launches.
"""

import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from jetforge.apps.pipeline.app import AppResult, machine_info
from jetforge.apps.pipeline.gpu_ops import AutoFrameOps, GpuModel, gpu_model_for
from jetforge.apps.pipeline.stages import Item
from jetforge.apps.pipeline.streams import BatchOps, StreamRunOptions, run_streams
from jetforge.apps.video.sinks.encode_pool import SUFFIX, EncoderPool
from jetforge.apps.video.sinks.file import JsonLinesSink
from jetforge.apps.video.sources.base import Frame
from jetforge.apps.video.sources.gpu import nvdec_files, open_gpu_source
from jetforge.errors import ConfigError
from jetforge.fileio import check_not_input, check_output_path, write_json_atomic

log = logging.getLogger(__name__)


@dataclass
class GpuAppOptions:
    """``max_batch``: frames per batch (0: ``per_stream`` per stream, at most 32); ``per_stream``: frames of one
    stream a batch may take; ``encoders``: CPU encoder processes for the annotated video (0: events only);
    ``batch_timeout_s``: the batched-push-timeout; ``gil_switch_ms``: Python's GIL switch interval during the run.

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


def decode_layout(streams: int, processes_from: int = DECODE_PROCESSES_FROM, feed_from: int = FEED_THREAD_FROM) -> str:
    """How `--decode gpu` decodes ``streams`` streams: ``"processes"`` (worker processes, CUDA IPC), ``"feed"`` (one
    feeder thread) or ``"threads"`` (a thread per stream).  ``benchmarks/gpu_pipeline/pipeline_gpu.py``'s ``auto`` is the same."""
    if processes_from and streams >= processes_from:
        return "processes"
    return "feed" if feed_from and streams >= feed_from else "threads"


def default_encoders() -> int:
    """Encoder processes for the annotated video: half the cores, 1..8 (the decode and launch threads need some)."""
    return max(1, min(8, (os.cpu_count() or 2) // 2))


def open_gpu_sources(uris: Sequence[Any], max_frames: Optional[int] = None, loop: bool = False,
                     processes_from: int = DECODE_PROCESSES_FROM, streams_per_process: int = 4,
                     feed_from: int = FEED_THREAD_FROM, codec_module: Optional[Any] = None) -> Sequence[Any]:
    """One GPU-frame source per URI (NVDEC or jetson-utils; a clear error when neither exists), streams 0..N-1.

    From ``processes_from`` streams on (0: never), video files that NVDEC decodes are decoded in worker processes
    (``streams_per_process`` streams each) and handed over through CUDA IPC: an
    :class:`~jetforge.apps.video.sources.ipc_decode.IpcDecodeGroup`.  Else, from ``feed_from`` streams on, one
    thread reads all the sources: a :class:`~jetforge.apps.video.sources.feed_group.SourceFeedGroup`.  Both are
    also sequences of the streams.  ``codec_module`` replaces the PyNvVideoCodec module (tests inject the CPU
    stand-in of ``tests/standins/fake_nvdec.py``; worker processes import it by its module and name)."""
    layout = decode_layout(len(uris), processes_from, feed_from)
    locations = nvdec_files(uris) if layout == "processes" else None
    if locations:
        from jetforge.apps.video.sources.ipc_decode import NVDEC, IpcDecodeGroup

        return IpcDecodeGroup(locations, streams_per_worker=streams_per_process, slots=16, fetch=4, loop=loop,
                              max_frames=max_frames or 0, codec=NVDEC if codec_module is None else codec_module)
    feed = decode_layout(len(uris), 0, feed_from) == "feed"  # also when the worker processes cannot decode a source
    sources: List[Any] = []
    try:
        for s, uri in enumerate(uris):
            sources.append(open_gpu_source(uri, decode="gpu", stream=s, loop=loop, max_frames=max_frames or 0,
                                           codec_module=codec_module, ring_slots=FEED_RING_SLOTS if feed else 16,
                                           defer_sync=feed))
    except BaseException:
        for src in sources:
            src.close()
        raise
    if feed:
        from jetforge.apps.video.sources.feed_group import SourceFeedGroup

        return SourceFeedGroup(sources, depth=FEED_DEPTH)
    return sources


class TaskOps(BatchOps):
    """The frame ops of :mod:`.gpu_ops` with the task's ``postprocess`` after them: events, per stream in order
    (``run_streams`` finishes batches in order on one thread)."""

    def __init__(self, task: Any, model: GpuModel, inner: BatchOps) -> None:
        self.task, self.model, self.inner = task, model, inner

    def launch(self, frames: List[Any], padded: int) -> Any:
        return self.inner.launch(frames, padded)

    def finish(self, handle: Any, frames: List[Any]) -> List[Dict[str, Any]]:
        outputs = self.inner.finish(handle, frames)
        events = []
        for frame, output in zip(frames, outputs):
            item = Item(frame=Frame(frame.index, frame.timestamp, None, captured=frame.captured), stream=frame.stream,
                        t_start=frame.captured, t_decoded=frame.captured, output=output)
            events.append(self.task.postprocess(item))
        return events

    def host_frames(self, handle: Any, frames: List[Any]) -> List[Any]:
        return self.inner.host_frames(handle, frames)


class _Outputs:
    """events.jsonl (one record per frame, the task's events after it, as the CPU apps write them) and the
    annotated video through the encoder pool."""

    def __init__(self, task: Any, events: JsonLinesSink, pool: Optional[EncoderPool]) -> None:
        self.task, self.events, self.pool = task, events, pool
        self.frames = 0

    def __call__(self, stream: int, frame: Any, event: Dict[str, Any], host: Any) -> None:
        event = dict(event or {})
        extra = event.pop("events", [])
        record = {"type": self.task.name, "stream": stream, "frame": frame.index, "t": round(frame.timestamp, 4),
                  "latency_ms": round((time.perf_counter() - frame.captured) * 1000.0, 3)}
        record.update(event)
        self.events.write(record)
        for e in extra:
            self.events.write(dict({"stream": stream, "frame": frame.index, "t": round(frame.timestamp, 4)}, **e))
        if self.pool is not None and host is not None:
            self.pool.submit(stream, host, drawable(event))
        self.frames += 1


def drawable(event: Dict[str, Any]) -> Dict[str, Any]:
    """What the encoder workers draw: the top-1 label (classify) or the tracked people's boxes (people)."""
    out: Dict[str, Any] = {}
    top = event.get("top")
    if top:
        out["label"] = "%s %.2f" % (top[0].get("label", "?"), float(top[0].get("p", 0.0)))
    tracks = event.get("tracks")
    if tracks:
        out["boxes_xyxy"] = [t["box"] for t in tracks]
        out["label"] = "%d people" % len(tracks)
    return out


def run_gpu_app(task: Any, sources: Sequence[Any], out_dir: Any, options: Optional[GpuAppOptions] = None,
                inputs: Sequence[Any] = (), notes: Sequence[str] = ()) -> AppResult:
    """Run ``task`` over GPU-frame ``sources`` on the GPU path; writes events.jsonl, metrics.json and (with encoders)
    ``stream_<s>.mpg`` into ``out_dir``.  Outputs are kept when the run ends early (an error, Ctrl-C)."""
    opts = options or GpuAppOptions()
    model = gpu_model_for(task)  # a task the GPU path cannot run fails before any output is opened
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files: Dict[str, Any] = {"events": out / "events.jsonl", "metrics": out / "metrics.json",
                             "video": [out / ("stream_%d%s" % (s, SUFFIX)) for s in range(len(sources))]
                             if opts.encoders else []}
    for target in [files["events"], files["metrics"]] + files["video"]:
        check_not_input(target, [p for p in list(inputs) + [getattr(s, "path", None) for s in sources] if p])
        check_output_path(target)
    max_batch = opts.max_batch or min(len(sources) * opts.per_stream, 32)
    frame_ops = AutoFrameOps(model, max_batch)
    ops = TaskOps(task, model, frame_ops)
    first = sources[0]
    pool = EncoderPool(out, first.width, first.height, first.fps or 30.0, workers=opts.encoders) \
        if opts.encoders else None
    sink = _Outputs(task, JsonLinesSink(files["events"]), pool)
    error: Optional[BaseException] = None
    result = None
    t0 = time.perf_counter()
    switch = sys.getswitchinterval()
    run_options = StreamRunOptions(max_batch=max_batch, batch_timeout_s=opts.batch_timeout_s,
                                   per_stream=opts.per_stream, depth=max(2, opts.per_stream))
    try:
        sys.setswitchinterval(opts.gil_switch_ms / 1000.0)
        result = run_streams(sources, ops, run_options, sink=sink, render=pool is not None)
    except BaseException as err:  # keep what was written, record why it ended, then re-raise
        error = err
    finally:
        sys.setswitchinterval(switch)
        sink.events.close()
        encoded = pool.close() if pool is not None else []
        frame_ops.close()
    metrics = _metrics(task, sources, result, error, time.perf_counter() - t0, frame_ops.kind, encoded, files, notes)
    write_json_atomic(files["metrics"], metrics)
    if error is not None:
        raise error
    return AppResult(metrics, out, files, [])


def _metrics(task: Any, sources: Sequence[Any], result: Any, error: Optional[BaseException], wall: float,
             kind: str, encoded: List[Dict[str, Any]], files: Dict[str, Any], notes: Sequence[str]) -> Dict[str, Any]:
    """metrics.json of a GPU-path run: how it ended, the run's numbers (run_streams' summary), what ran where."""
    summary = result.summary() if result is not None else {"frames": 0, "wall_s": wall, "fps": 0.0}
    status = "finished"
    if error is not None:
        status = "interrupted" if isinstance(error, KeyboardInterrupt) else "stopped by an error"
    metrics: Dict[str, Any] = {
        "task": task.name, "path": "gpu", "status": status,
        "error": (error.one_line() if hasattr(error, "one_line") else repr(error)) if error is not None else None,
        "frames": summary["frames"], "fps": summary["fps"], "run": summary, "preprocess": kind,
        "model": task.info(), "results": task.summary(),
        "sources": [_source_info(s) for s in sources], "machine": machine_info(),
        "outputs": {"events": str(files["events"]), "metrics": str(files["metrics"]),
                    "video": [str(p) for p in files["video"] if p.exists()]},
        "notes": list(notes)}
    if encoded:
        frames = sum(r["frames"] for r in encoded)
        metrics["encoders"] = {"workers": len(encoded), "frames": frames,
                               "cpu_ms_per_encoded_frame": 1000.0 * sum(r["cpu_s"] for r in encoded) / max(1, frames)}
    return metrics


def _source_info(source: Any) -> Dict[str, Any]:
    info = source.info() if hasattr(source, "info") else {
        "uri": str(source.uri), "width": source.width, "height": source.height, "fps": source.fps, "decoder": "opencv"}
    return dict(info, name=Path(str(source.uri)).name)


def format_gpu_report(m: Dict[str, Any], task_lines: Sequence[str] = ()) -> str:
    """The printed summary of a GPU-path run."""
    run = m["run"]
    lines = ["task      %s  (%s), GPU path" % (m["task"], m["model"].get("model", "")),
             "backend   %s" % m["model"].get("backend", "?"), "preprocess %s" % m["preprocess"]]
    for s in m["sources"]:
        lines.append("source    %s  %dx%d @ %.2f fps, %s" % (s["name"], s["width"], s["height"], s["fps"] or 0.0,
                                                              s.get("decoder", "?")))
    lines.append("")
    lines.append("frames    %d in %.2f s: %.1f FPS (all streams), batch %.1f on average"
                 % (m["frames"], run.get("wall_s", 0.0), m["fps"], run.get("mean_batch", 0.0)))
    p50, p99 = run.get("latency_p50_ms", {}), run.get("latency_p99_ms", {})
    if p50.get("median_stream") is not None:
        lines.append("latency   decode -> event p50 %.1f ms, p99 %.1f ms (worst stream)"
                     % (p50["median_stream"], p99["worst_stream"]))
    if "cores_per_30fps_stream" in run:
        lines.append("CPU       %.3f cores per 30-FPS stream (process CPU time per frame x 30)"
                     % run["cores_per_30fps_stream"])
    lines += list(task_lines)
    outs = m["outputs"]
    lines += ["", "wrote     " + ", ".join(outs["video"] + [outs["events"], outs["metrics"]])]
    lines += ["note      " + n for n in m.get("notes", [])]
    return "\n".join(lines)


__all__ = ["GpuAppOptions", "TaskOps", "default_encoders", "drawable", "format_gpu_report", "open_gpu_sources",
           "run_gpu_app"]
