"""The CPU path of an app run: sources -> :class:`Pipeline` (with a task) -> video, events, live outputs.

:func:`run_app` is what ``jetforge app NAME`` calls after building its task: an
:class:`~jetforge.apps.pipeline.app_run.AppRun` (outputs, the one metrics.json schema, plots, the printed
report; shared with the GPU path) with :class:`CpuRunner` as its strategy.  It writes into ``out_dir``:

- ``annotated.mp4`` (``annotated_<stream>.mp4`` with several sources): the task's
  overlay and the status bar (FPS, latency, drops, errors, what runs the model);
- ``events.jsonl``: one ``{"type": <task>, "stream", "frame", "t", "latency_ms", ...}``
  record per frame, the task's discrete events (``line_cross``, ...) and ``error`` records;
- ``metrics.json``: FPS, latency percentiles per stage, frame-to-result latency,
  drops, errors, CPU and memory, the task's own summary, and what ran where;
- ``fps.png`` and ``latency.png`` (when matplotlib is installed).

Outputs are kept when the run ends early (a lost camera, a truncated file, a stage
error, Ctrl-C or SIGTERM): the video and events hold every frame finished so far and
``metrics.json`` says why the run ended (``status``: "finished", "interrupted", ...).

Frames, stated once: every frame the source delivers is processed and gets one
per-frame record in ``events.jsonl`` (with ``"image"``, the file name, for an image
folder).  Frames of another size than the video's first are letterboxed into the
video (``metrics.json`` ``video[].letterboxed``); the model and the events see them
at their own size.  An input frame that cannot be decoded (an unreadable image in a
folder) is skipped: a warning naming the file, a ``{"type": "skipped"}`` record, and
``metrics.json`` ``skipped``; it never ends the run, and a folder is refused only
when none of its images can be read.
"""

import logging
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from jetforge.errors import StreamError
from jetforge.apps.pipeline.app_run import AppResult, AppRun, AppRunner, RunEnd, format_report, machine_info
from jetforge.apps.pipeline.metrics import PipelineMetrics
from jetforge.apps.pipeline.runner import NOT_PROCESSED, Pipeline, PipelineOptions
from jetforge.apps.pipeline.stages import Item, Status, Task
from jetforge.apps.video.sinks.file import JsonLinesSink
from jetforge.apps.video.sinks.h264 import open_mp4
from jetforge.apps.video.sinks.outputs import Outputs, open_sinks
from jetforge.apps.video.sources.base import FrameDecodeError, VideoSource
from jetforge.apps.video.sources.folder import ImageFolderSource

log = logging.getLogger(__name__)


def _video_name(stream: int, streams: int) -> str:
    return "annotated.mp4" if streams == 1 else "annotated_%d.mp4" % stream


def _warm_up(task: Task, sources: Sequence[VideoSource]) -> List[VideoSource]:
    """Warm the task up on the first frame and return the sources to run, with that frame put back.

    The model's lazy initialisation stays out of the numbers; frames skipped before the first one are
    put back too, so that the pipeline reports them in order like any other.
    """
    replay: List[Any] = []
    first = None
    while first is None:
        try:
            first = sources[0].read()
        except FrameDecodeError as err:
            replay.append(err)
            continue
        if first is None:
            raise StreamError("source %s delivered no frame" % sources[0].uri)
    task.warmup(first)
    return [_Pushback(sources[0], replay + [first])] + list(sources[1:])


class _AppSink:
    """The pipeline's sink in an app run: the per-frame record and events, the annotated video, the live outputs."""

    def __init__(self, task: Task, events: JsonLinesSink, videos: List[Any], outputs: Outputs) -> None:
        self.task = task
        self.events = events
        self.videos = videos
        self.outputs = outputs  # --output URIs, --display, --stream-to, per-image JPEGs (open_sinks)
        self.pipeline: Optional[Pipeline] = None  # set once built: closing the window stops it

    def __call__(self, item: Item, status: Status) -> None:
        event = self._write_events(item)
        image = item.frame.image
        if image is None:
            return
        video = self.videos[item.stream] if self.videos else None
        name = getattr(item.frame, "name", "")
        if video is None and not name and not self.outputs.wants_frames(item.stream):
            return  # no file, window or watched page takes this frame: drawing it would be wasted work
        if event.get("type") not in NOT_PROCESSED:
            self.task.annotate(image, item, status)
        if video is not None:
            video.write(image)
        self.outputs.frame(item.stream, image, name)
        if self.outputs.stop_requested and self.pipeline is not None:
            self.pipeline.request_stop()

    def _write_events(self, item: Item) -> Dict[str, Any]:
        """The frame's record and the task's discrete events; returns the frame's event (without them)."""
        frame = item.frame
        record = {"type": self.task.name, "stream": item.stream, "frame": frame.index, "t": round(frame.timestamp, 4)}
        name = getattr(frame, "name", "")
        if name:
            record["image"] = name
        event = dict(item.event or {})
        extra = event.pop("events", [])
        if event.get("type") in NOT_PROCESSED:
            record.update(event)
        else:
            record["latency_ms"] = round((time.perf_counter() - item.t_start) * 1000.0, 3)
            record.update(event)
        self.events.write(record)
        self.outputs.event(record)
        for e in extra:
            extra_record = dict({"stream": item.stream, "frame": frame.index, "t": round(frame.timestamp, 4)}, **e)
            self.events.write(extra_record)
            self.outputs.event(extra_record)
        return event

    def close(self, bar: Any) -> None:
        """Close every output, keeping what was written (a video with no frame is removed)."""
        if bar is not None:
            bar.close()
        for v in self.videos:
            if v is not None:
                if v.frames:
                    v.close()
                else:
                    v.abort()
        self.events.close()
        self.outputs.close()


class CpuRunner(AppRunner):
    """The CPU path of :class:`~jetforge.apps.pipeline.app_run.AppRun`: the :class:`Pipeline` (OpenCV decode,
    overlapped stages, bounded queues) with the annotated MP4 per stream, the live outputs (``--output`` URIs,
    ``--display``, ``--stream-to``) and a progress bar."""

    path = "cpu"

    def __init__(self, options: Optional[PipelineOptions] = None, write_video: bool = True, display: bool = False,
                 stream_to: Optional[str] = None, plots: bool = True, progress: bool = True,
                 outputs: Sequence[str] = ()) -> None:
        self.options = options or PipelineOptions()
        self.write_video, self.display, self.stream_to, self.plots = write_video, display, stream_to, plots
        self.progress, self.outputs = progress, list(outputs)
        self.live: Optional[Outputs] = None
        self.run_sources: List[VideoSource] = []
        self.videos: List[Any] = []
        self.sink: Optional[_AppSink] = None
        self.bar: Any = None
        self.pipeline: Optional[Pipeline] = None
        self._unmeasured = PipelineMetrics(warmup_frames=self.options.warmup_frames)  # until the pipeline exists

    def video_files(self, out: Path, streams: int) -> List[Path]:
        return [out / _video_name(i, streams) for i in range(streams)] if self.write_video else []

    def prepare(self, task: Task, sources: Sequence[VideoSource], out: Path, inputs: Sequence[Any]) -> None:
        # Outputs first: a --display without a display or an unreachable broker fails before any frame is read.
        self.live = open_app_outputs(task, sources, out, self.outputs, self.display, self.stream_to, inputs)
        try:
            self.run_sources = _warm_up(task, sources)
        except BaseException as err:
            self.live.abort(err)
            raise

    def metrics(self) -> PipelineMetrics:
        return self.pipeline.metrics if self.pipeline is not None else self._unmeasured

    def run(self, task: Task, sources: Sequence[VideoSource], events: JsonLinesSink, files: Dict[str, Any]) -> RunEnd:
        self.videos = [open_mp4(p, s.fps or 25.0) for p, s in zip(files["video"], sources)]
        self.sink = _AppSink(task, events, self.videos, self.live)  # type: ignore[arg-type]
        bar = self.bar = _progress(self.progress, task.name, self.options.max_frames, sources)
        self.pipeline = Pipeline(self.run_sources, task, self.sink, self.options,
                                 on_done=lambda item: bar.update(1) if bar else None,
                                 status_label=task.status_label or task.model_label)
        self.sink.pipeline = self.pipeline
        result = self.pipeline.run()
        return RunEnd(result.stopped, list(result.stream_errors))

    def stream_errors(self) -> List[str]:
        return list(self.pipeline._stream_errors) if self.pipeline is not None else []

    def close(self) -> None:
        if self.sink is not None:
            self.sink.close(self.bar)
        elif self.live is not None:
            self.live.close()

    def add_to_report(self, report: Dict[str, Any], files: Dict[str, Any]) -> None:
        o = self.options
        report["pipeline"] = {"path": self.path, "overlap": o.overlap, "queue_size": o.queue_size,
                              "batch_size": o.batch_size, "infer_workers": o.infer_workers, "on_error": o.on_error,
                              "max_consecutive_errors": o.max_consecutive_errors, "drop": o.drop,
                              "max_frames_per_stream": o.max_frames, "warmup_frames": o.warmup_frames}
        report["video"] = [{"path": str(p), "frames": v.frames, "letterboxed": v.letterboxed,
                            "size": list(v.size or ()), "encoder": v.encoder}
                           for p, v in zip(files["video"], self.videos) if v is not None and p.exists()]
        if self.live is not None:
            report["sinks"] = self.live.report()
            report["outputs"]["files"] = [str(p) for p in self.live.files]


def run_app(task: Task, sources: Sequence[VideoSource], out_dir: Any, options: Optional[PipelineOptions] = None,
            write_video: bool = True, display: bool = False, stream_to: Optional[str] = None,
            plots: bool = True, progress: bool = True, inputs: Sequence[Any] = (),
            notes: Sequence[str] = (), outputs: Sequence[str] = ()) -> AppResult:
    """Run ``task`` over ``sources`` on the CPU path and write video, events, metrics and plots into ``out_dir``;
    ``outputs``: more output URIs (``--output``: files, http://@:8080, rtsp://@:8554/NAME, mqtt://HOST/TOPIC)."""
    runner = CpuRunner(options, write_video=write_video, display=display, stream_to=stream_to, plots=plots,
                       progress=progress, outputs=outputs)
    return AppRun(task, sources, out_dir, runner, inputs=inputs, notes=notes).run()


def open_app_outputs(task: Task, sources: Sequence[VideoSource], out: Path, outputs: Sequence[str], display: bool,
                     stream_to: Optional[str], inputs: Sequence[Any]) -> Outputs:
    """The run's outputs beside annotated.mp4 and events.jsonl: ``--output`` URIs, ``--display``, ``--stream-to``,
    and ``images/`` (one annotated JPEG per photo) when a source is a folder of images."""
    uris = list(outputs) + (["display://0"] if display else []) + ([stream_to] if stream_to else [])
    photos = any(isinstance(s, ImageFolderSource) for s in sources)
    return open_sinks(uris, [(s.fps or 25.0, (s.width, s.height)) for s in sources], title="jetforge %s" % task.name,
                      images_dir=out / "images" if photos else None,
                      inputs=[getattr(s, "path", None) for s in sources] + list(inputs))


class _Pushback(VideoSource):
    """A source with what was already read from it (frames, and decode errors to raise again) put back in front."""

    def __init__(self, source: VideoSource, replay: List[Any]) -> None:
        self._source = source
        self._replay = list(replay)
        self.uri = source.uri
        self.width, self.height, self.fps = source.width, source.height, source.fps
        self.frame_count = source.frame_count
        self.live = source.live

    @property
    def dropped(self) -> int:  # type: ignore[override]
        return int(getattr(self._source, "dropped", 0) or 0)

    @property
    def truncated(self) -> Optional[str]:  # type: ignore[override]
        return getattr(self._source, "truncated", None)

    def read(self) -> Any:
        if self._replay:
            head = self._replay.pop(0)
            if isinstance(head, BaseException):
                raise head
            return head
        return self._source.read()

    def close(self) -> None:
        self._source.close()

    def info(self) -> Dict[str, Any]:
        return self._source.info()


class _Bar:
    def __init__(self, bar: Any) -> None:
        self._bar = bar

    def update(self, n: int) -> None:
        self._bar.update(n)

    def close(self) -> None:
        self._bar.close()


def _progress(enabled: bool, desc: str, max_frames: Optional[int], sources: Sequence[VideoSource]) -> Any:
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - a declared dependency
        return None
    import sys

    totals = [s.frame_count for s in sources]
    total: Optional[int] = None
    if all(t is not None for t in totals):
        total = sum(min(t, max_frames) if max_frames else t for t in totals)  # type: ignore[type-var]
    elif max_frames:
        total = max_frames * len(sources)
    return _Bar(tqdm(total=total, desc=desc, unit="frame", file=sys.stderr, dynamic_ncols=True, leave=False))


__all__ = ["AppResult", "CpuRunner", "format_report", "machine_info", "run_app"]
