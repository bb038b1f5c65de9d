"""An app run: sources -> :class:`Pipeline` (with a task) -> video, events, metrics and plots in a folder.

:func:`run_app` is what every ``jetforge app NAME`` command calls after building its
task.  It writes into ``out_dir``:

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

import datetime
import logging
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import jetforge
from jetforge.errors import StreamError
from jetforge.fileio import check_not_input, check_output_path, write_json_atomic
from jetforge.apps.pipeline.metrics import format_metrics, plot_metrics
from jetforge.apps.pipeline.runner import NOT_PROCESSED, Pipeline, PipelineOptions, PipelineResult
from jetforge.apps.pipeline.stages import Item, Status, Task
from jetforge.apps.video.sinks.file import JsonLinesSink
from jetforge.apps.video.sinks.h264 import open_mp4
from jetforge.apps.video.sinks.outputs import Outputs, open_sinks
from jetforge.apps.video.sources.base import FrameDecodeError, VideoSource
from jetforge.apps.video.sources.folder import ImageFolderSource
from jetforge.runtime.nvml import gpu_memory_mib

log = logging.getLogger(__name__)


@dataclass
class AppResult:
    metrics: Dict[str, Any]
    out_dir: Path
    files: Dict[str, Any]
    stream_errors: List[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.stream_errors


def machine_info() -> Dict[str, Any]:
    """Where the numbers were measured."""
    from jetforge.runtime.session import default_threads

    info: Dict[str, Any] = {"platform": platform.platform(), "machine": platform.machine(),
                            "python": platform.python_version(), "cpu_cores_usable": default_threads()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/device-tree/model", "rb") as f:
            info["board"] = f.read().rstrip(b"\x00").decode("ascii", "replace")
    except OSError:
        pass
    try:
        import cv2

        info["opencv"] = cv2.__version__
    except ImportError:  # pragma: no cover - a core dependency
        pass
    import numpy as np

    info["numpy"] = np.__version__
    return info


def _video_name(stream: int, streams: int) -> str:
    return "annotated.mp4" if streams == 1 else "annotated_%d.mp4" % stream


def _output_files(out: Path, streams: int, write_video: bool, plots: bool,
                  inputs: Sequence[Any]) -> Dict[str, Any]:
    """The files a run writes, each checked before any frame is read (never over an input)."""
    files: Dict[str, Any] = {"events": out / "events.jsonl", "metrics": out / "metrics.json",
                             "video": [out / _video_name(i, streams) for i in range(streams)] if write_video else [],
                             "plots": [out / "fps.png", out / "latency.png"] if plots else []}
    for target in [files["events"], files["metrics"]] + files["video"] + files["plots"]:
        check_not_input(target, [p for p in inputs if p is not None])
        check_output_path(target)
    return files


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
        if event.get("type") not in NOT_PROCESSED:
            self.task.annotate(image, item, status)
        if self.videos and self.videos[item.stream] is not None:
            self.videos[item.stream].write(image)  # type: ignore[union-attr]
        self.outputs.frame(item.stream, image, getattr(item.frame, "name", ""))
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


def run_app(task: Task, sources: Sequence[VideoSource], out_dir: Any, options: Optional[PipelineOptions] = None,
            write_video: bool = True, display: bool = False, stream_to: Optional[str] = None,
            plots: bool = True, progress: bool = True, inputs: Sequence[Any] = (),
            notes: Sequence[str] = (), outputs: Sequence[str] = ()) -> AppResult:
    """Run ``task`` over ``sources`` and write video, events, metrics and plots into ``out_dir``; ``outputs``:
    more output URIs (``--output``: files, http://@:8080, rtsp://@:8554/NAME, mqtt://HOST/TOPIC)."""
    options = options or PipelineOptions()
    out = Path(out_dir)
    files = _output_files(out, len(sources), write_video, plots,
                          [getattr(s, "path", None) for s in sources] + list(inputs))

    # Outputs first: a --display without a display or an unreachable broker fails before any frame is read.
    live = open_app_outputs(task, sources, out, outputs, display, stream_to, inputs)
    try:
        run_sources = _warm_up(task, sources)
    except BaseException as err:
        live.abort(err)
        raise

    videos: List[Any] = [open_mp4(p, s.fps or 25.0) for p, s in zip(files["video"], sources)]
    sink = _AppSink(task, JsonLinesSink(files["events"]), videos, live)
    bar = _progress(progress, task.name, options.max_frames, sources)
    pipeline = Pipeline(run_sources, task, sink, options, on_done=lambda item: bar.update(1) if bar else None,
                        status_label=task.status_label or task.model_label)
    sink.pipeline = pipeline
    error: Optional[BaseException] = None
    result = None
    try:
        result = pipeline.run()
    except BaseException as err:  # keep what was written, record why it ended, then re-raise
        error = err
    finally:
        sink.close(bar)
    report = _report(task, sources, options, pipeline, result, error, files, videos, notes)
    report["sinks"] = live.report()
    report["outputs"]["files"] = [str(p) for p in live.files]
    if plots and report["frames"] > 0:
        _plot(report, pipeline, files, task.name)
    write_json_atomic(files["metrics"], report)
    if error is not None:
        raise error
    return AppResult(report, out, files, report["stream_errors"])


def open_app_outputs(task: Task, sources: Sequence[VideoSource], out: Path, outputs: Sequence[str], display: bool,
                     stream_to: Optional[str], inputs: Sequence[Any]) -> Outputs:
    """The run's outputs beside annotated.mp4 and events.jsonl: ``--output`` URIs, ``--display``, ``--stream-to``,
    and ``images/`` (one annotated JPEG per photo) when a source is a folder of images."""
    uris = list(outputs) + (["display://0"] if display else []) + ([stream_to] if stream_to else [])
    photos = any(isinstance(s, ImageFolderSource) for s in sources)
    return open_sinks(uris, [(s.fps or 25.0, (s.width, s.height)) for s in sources], title="jetforge %s" % task.name,
                      images_dir=out / "images" if photos else None,
                      inputs=[getattr(s, "path", None) for s in sources] + list(inputs))


def _report(task: Task, sources: Sequence[VideoSource], options: PipelineOptions, pipeline: Pipeline,
            result: Optional[PipelineResult], error: Optional[BaseException], files: Dict[str, Any],
            videos: List[Any], notes: Sequence[str]) -> Dict[str, Any]:
    """``metrics.json``: how the run ended, the pipeline's metrics, the model, the sources, the machine, the outputs."""
    metrics = pipeline.metrics.to_dict()
    gpu = gpu_memory_mib()
    if gpu is not None:
        metrics["memory"]["gpu_mib"] = gpu
    stream_errors = result.stream_errors if result is not None else list(pipeline._stream_errors)
    if error is not None:
        ended = "interrupted" if isinstance(error, KeyboardInterrupt) else "stopped by an error"
    else:
        ended = "finished with stream errors" if stream_errors else "finished"
    report: Dict[str, Any] = {
        "jetforge_version": jetforge.__version__,
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "task": task.name,
        "status": ended,
        "ended_by": (result.stopped if result is not None else (error.__class__.__name__ if error else "")),
        "error": (error.one_line() if hasattr(error, "one_line") else repr(error)) if error is not None else None,
        "stream_errors": stream_errors,
    }
    report.update(metrics)
    report["pipeline"] = {"overlap": options.overlap, "queue_size": options.queue_size,
                          "batch_size": options.batch_size, "on_error": options.on_error,
                          "max_consecutive_errors": options.max_consecutive_errors, "drop": options.drop,
                          "max_frames_per_stream": options.max_frames, "warmup_frames": 1}
    report["model"] = task.info()
    report["results"] = task.summary()
    report["sources"] = [dict(s.info(), name=Path(str(s.uri)).name) for s in sources]
    report["machine"] = machine_info()
    report["outputs"] = {"video": [str(p) for p in files["video"] if p.exists()], "events": str(files["events"]),
                         "metrics": str(files["metrics"]), "plots": []}
    report["video"] = [{"path": str(p), "frames": v.frames, "letterboxed": v.letterboxed, "size": list(v.size or ()),
                        "encoder": v.encoder}
                       for p, v in zip(files["video"], videos) if v is not None and p.exists()]
    report["notes"] = list(notes)
    return report


def _plot(report: Dict[str, Any], pipeline: Pipeline, files: Dict[str, Any], title: str) -> None:
    """``fps.png`` and ``latency.png``; without matplotlib (or if it fails) a note instead, the numbers stay."""
    try:
        plot_metrics(report, [x * 1000.0 for x in pipeline.metrics.end_to_end], files["plots"][0],
                     files["plots"][1], title=title)
        report["outputs"]["plots"] = [str(p) for p in files["plots"]]
    except Exception as err:  # matplotlib missing or broken: the run's numbers are still written
        log.warning("plots skipped: %s", err)
        report["notes"].append("plots skipped: %s" % err)


def format_report(m: Dict[str, Any], task_lines: Sequence[str] = ()) -> str:
    """The printed summary of an app run."""
    machine = m["machine"]
    lines = ["task      %s  (%s)" % (m["task"], m["model"].get("model", "")),
             ]
    if m["model"].get("backend"):
        lines.append("backend   %s" % m["model"]["backend"])
    for s in m["sources"]:
        lines.append("source    %s  %dx%d @ %.2f fps%s" % (s["name"], s["width"], s["height"], s["fps"] or 0.0,
                                                           "  (live)" if s.get("live") else ""))
    lines.append("machine   %s, %d usable cores" % (machine.get("cpu", machine["machine"]), machine["cpu_cores_usable"]))
    lines += ["", format_metrics(m)]
    if task_lines:
        lines += [""] + list(task_lines)
    outs = m["outputs"]
    lines.append("")
    lines.append("wrote     " + ", ".join(outs["video"] + outs.get("files", []) + [outs["events"], outs["metrics"]]
                                          + outs["plots"]))
    for entry in m.get("sinks", []):
        if entry["kind"] != "file":
            lines.append("output    %s: %s, %d dropped" % (entry.get("url", entry["uri"]), ", ".join(
                "%d %s" % (entry[k], k) for k in ("frames", "events") if k in entry), entry.get("dropped", 0)))
    lines += ["note      " + n for n in m.get("notes", [])]
    return "\n".join(lines)


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


__all__ = ["AppResult", "format_report", "gpu_memory_mib", "machine_info", "run_app"]
