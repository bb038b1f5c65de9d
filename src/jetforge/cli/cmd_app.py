"""``jetforge app NAME``: run a video app on a file, folder, camera or stream; video, events, metrics, plots.

The apps are registered in :data:`jetforge.apps.tasks.TASKS` (one module per task, each with an
:class:`~jetforge.apps.tasks.base.App`: its own options and how it builds its
:class:`~jetforge.apps.pipeline.Task`); this command does the rest the same way for every app: the sources
(``--source``, repeatable: several sources are batched into one model), the models only the CLI can make
(:func:`~jetforge.workflow.model_refs.prepare_app_models`), the pipeline options, the outputs, the printed
summary and the exit status (1 when a source was lost or truncated or a stage error stopped the run; what
was finished is kept in ``--out`` either way).
"""

import argparse
import logging
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from jetforge.apps.pipeline import PipelineOptions, format_report, run_app
from jetforge.apps.pipeline.metrics import WARMUP_FRAMES
from jetforge.apps.tasks import TASKS, load_app
from jetforge.apps.tasks.base import App
from jetforge.apps.video import SourceOptions, open_source, sink_usage, source_usage
from jetforge.apps.video.sources.gpu.open import uri_for_decode
from jetforge.assets import asset_path
from jetforge.cli.arguments import add_classes_flag, add_decoder_flag, add_json_flag, add_out_flag
from jetforge.config import COUNT, NON_NEGATIVE, POSITIVE_NUMBER
from jetforge.runtime.session.base import threads_argtype
from jetforge.cli.base import Command, print_json
from jetforge.workflow.model_refs import prepare_app_models
from jetforge.errors import ConfigError, JetforgeError, StreamError

log = logging.getLogger(__name__)


RUN_POLICY = """frames and stopping:
  Every frame is processed and gets one record in events.jsonl (with "image", the file name, for a
  folder). Frames of another size than the first (a folder of photos) are letterboxed into the video;
  the model and the events see each at its own size. An image that cannot be decoded is skipped with a
  warning naming it (a "skipped" record, counted in metrics.json); a folder is refused only if none of
  its images can be read. Ctrl-C or SIGTERM (systemctl stop, docker stop) closes the video and events,
  writes metrics.json with status "interrupted" and exits 130; exit 1 when a source was lost or a
  stage error stopped the run."""


def add_pipeline_arguments(parser: argparse.ArgumentParser, default_out: str) -> None:
    """The options every app shares: sources, outputs, pipeline and error policy."""
    g = parser.add_argument_group("source and outputs")
    g.add_argument("--source", metavar="URI", action="append", default=None,
                   help="video file, image folder, v4l2:///dev/video0 or camera index, csi://0, rtsp://..., "
                        "http(s)://...; repeat for several streams batched into one model (default: the app's clip)")
    add_out_flag(g, "DIR", "output folder (default: ./%s/)" % default_out, default=default_out)
    g.add_argument("--max-frames", metavar="N", type=COUNT.argtype, default=None, help="stop after N frames per stream")
    g.add_argument("--loop", action="store_true",
                   help="play a video file again from the start when it ends (soak tests, demos; stop with "
                        "--max-frames, Ctrl-C or SIGTERM)")
    g.add_argument("--decode", choices=("auto", "gpu", "cpu"), default="cpu",
                   help="video files: gpu = the GPU path (NVDEC or jetson-utils decode, GPU preprocessing, batched "
                        "session; classify, detect and people --detector ssd; annotated video as stream_N.mpg); cpu = "
                        "OpenCV (the default); auto = a GPU decoder when there is one, frames copied to the CPU "
                        "pipeline; see `jetforge doctor`")
    g.add_argument("--no-video", action="store_true", help="do not write the annotated MP4")
    g.add_argument("--no-plots", action="store_true", help="do not draw fps.png and latency.png")
    g.add_argument("--display", action="store_true", help="show the annotated video in a window (needs a display)")
    g.add_argument("--stream-to", metavar="URI", default=None,
                   help="also stream the annotated video: rtsp://server:8554/live or rtp://host:5000 (GStreamer)")
    g.add_argument("--output", metavar="URI", action="append", default=None,
                   help="another output, repeatable: out.mp4 (H.264), http://@:8080 (a live page), "
                        "rtsp://@:8554/live (an RTSP server), mqtt://HOST/TOPIC (events); see 'video outputs' below")
    p = parser.add_argument_group("pipeline")
    p.add_argument("--batch", metavar="N", type=COUNT.argtype, default=None,
                   help="frames per model call across streams (default: the number of sources)")
    p.add_argument("--queue-size", metavar="N", type=COUNT.argtype, default=2,
                   help="frames between two stages (default: 2)")
    p.add_argument("--sequential", action="store_true", help="one frame at a time, stages not overlapped")
    p.add_argument("--infer-workers", metavar="N", type=threads_argtype(1), default=1,
                   help="inference threads sharing the model, results kept in frame order (default: 1); "
                        "on a CPU try 2 with --threads 1")
    p.add_argument("--on-error", choices=("skip", "stop"), default="skip",
                   help="a stage failing on one frame: skip the frame (default) or stop the run")
    p.add_argument("--max-consecutive-errors", metavar="N", type=NON_NEGATIVE.argtype, default=10,
                   help="stop after N failures in a row of one stage (default: 10)")
    p.add_argument("--drop", choices=("never", "oldest"), default="never",
                   help="files: never drop frames (default) or drop the oldest when behind, as live sources do")
    p.add_argument("--max-reconnects", metavar="N", type=NON_NEGATIVE.argtype, default=5,
                   help="live sources: reconnect attempts with back-off before giving up (default: 5)")
    p.add_argument("--stall-timeout", metavar="S", type=POSITIVE_NUMBER.argtype, default=30.0,
                   help="live sources: seconds without a frame before the source counts as lost (default: 30)")
    p.add_argument("--warmup-frames", metavar="N", type=NON_NEGATIVE.argtype, default=WARMUP_FRAMES,
                   help="each stream's first N frames are left out of the latency statistics and plots and reported "
                        "apart in metrics.json 'warmup' (they still count in fps; default: %d)" % WARMUP_FRAMES)
    add_json_flag(parser)


#: the shared options an app may take (App.shared_flags), by name
APP_SHARED_FLAGS = {"decoder": add_decoder_flag, "classes": add_classes_flag}


def add_app_shared_flags(parser: argparse.ArgumentParser, app: App) -> None:
    """The shared options ``app`` names in ``shared_flags``, from their one builder, in an argument group of its own."""
    wanted = getattr(app, "shared_flags", None) or {}
    if not wanted:
        return
    group = parser.add_argument_group(app.name + " (model)")
    for name, help in wanted.items():
        if name not in APP_SHARED_FLAGS:
            raise ConfigError("app %s asks for shared option %s, which apps cannot take" % (app.name, name),
                              hint="known: %s" % ", ".join(APP_SHARED_FLAGS))
        APP_SHARED_FLAGS[name](group, help)


def run_app_command(app: App, args: argparse.Namespace, out_default: Optional[str] = None) -> int:
    """Open the sources, build the task, run it, print the summary; the exit status of the command."""
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
        uris = [str(asset_path(*app.default_source))]
    if getattr(args, "decode", "cpu") == "gpu":
        return run_gpu_path(app, args, uris)
    source_options = SourceOptions(max_reconnects=args.max_reconnects, stall_timeout_s=args.stall_timeout,
                                   loop=getattr(args, "loop", False))
    options = PipelineOptions(queue_size=args.queue_size, batch_size=args.batch or len(uris),
                              on_error=args.on_error, max_consecutive_errors=args.max_consecutive_errors,
                              drop=args.drop, max_frames=args.max_frames, overlap=not args.sequential,
                              infer_workers=args.infer_workers, warmup_frames=args.warmup_frames)
    sources: List[Any] = []
    try:
        for uri in uris:  # open every source first: a bad path or URL fails before any model is loaded
            sources.append(open_source(uri_for_decode(uri, getattr(args, "decode", "cpu")), source_options))
        prepared = prepare_app_models(app.name, args)
        task, inputs, notes = app.build(args, sources)
        notes = prepared + notes
        try:
            result = run_app(task, sources, out_dir, options, write_video=not args.no_video, display=args.display,
                             stream_to=args.stream_to, plots=not args.no_plots,
                             progress=not getattr(args, "quiet", False), inputs=inputs, notes=notes,
                             outputs=args.output or ())
        except JetforgeError as err:
            if (out_dir / "metrics.json").exists():
                raise type(err)(err.message + "; what was finished before is kept in %s" % out_dir,
                                hint=err.hint) from err
            raise
    finally:
        close_app_and_sources(app, sources)
    print_app_result(args, result.metrics, lambda: format_report(result.metrics, app.report_lines(task)))
    if result.stream_errors:
        raise StreamError("; ".join(result.stream_errors) + "; the %d frames finished before are kept in %s"
                          % (result.metrics["frames"], out_dir))
    return 0


def run_gpu_path(app: App, args: argparse.Namespace, uris: List[Any]) -> int:
    """``--decode gpu``: NVDEC/jetson-utils -> GPU preprocessing -> batched session (jetforge.apps.pipeline.gpu_app)."""
    from jetforge.apps.pipeline.gpu_app import GpuAppOptions, default_encoders, open_gpu_sources, run_gpu_app

    options = GpuAppOptions(max_batch=min(args.batch, 32) if args.batch else 0, encoders=0 if args.no_video else
                            default_encoders(), warmup_frames=args.warmup_frames)
    sources = open_gpu_sources(uris, max_frames=args.max_frames, loop=getattr(args, "loop", False))
    try:
        prepared = prepare_app_models(app.name, args)
        task, inputs, notes = app.build(args, sources)
        result = run_gpu_app(task, sources, Path(args.out), options, inputs=inputs, notes=prepared + notes,
                             outputs=args.output or (), display=args.display, stream_to=args.stream_to)
    finally:
        close_app_and_sources(app, sources)
    print_app_result(args, result.metrics, lambda: format_report(result.metrics, app.report_lines(task)))
    return 0


def close_app_and_sources(app: App, sources: List[Any]) -> None:
    """Close the app's models and every opened source (both run paths, also when the run failed)."""
    app.close()
    for s in sources:
        s.close()


def print_app_result(args: argparse.Namespace, metrics: Dict[str, Any], report: Callable[[], str]) -> None:
    """``--json``: the metrics as JSON; otherwise the path's report table (built only then: ``report`` is called)."""
    if args.json:
        print_json(metrics)
    else:
        print(report())


class AppCommand(Command):
    name = "app"
    description = (
        "Run a video app: source -> preprocess -> model -> postprocess -> sinks, as overlapped stages with\n"
        "bounded queues. Writes annotated.mp4, events.jsonl (per-frame results and events with frame numbers\n"
        "and timestamps), metrics.json (FPS, per-stage latency p50/p95/p99, frame-to-result latency, drops,\n"
        "errors, CPU and memory), fps.png and latency.png into --out, and prints the summary table.\n\n"
        + RUN_POLICY + "\n\napps:\n" + TASKS.describe())
    examples = """examples:
  jetforge app people                                    # OpenCV's vtest.avi: tracks, line counts, zone
  jetforge app people --source v4l2:///dev/video0 --line 0,300,640,300 --display
  jetforge app people --source rtsp://cam.local:8554/live --zone door=100,200,300,200,300,400,100,400
  jetforge app classify --source clip.mp4 --max-frames 100
  jetforge app classify --source a.mp4 --source b.mp4 --source c.mp4 --source d.mp4   # 4 streams, batch 4
  jetforge app classify --threads 1 --infer-workers 2    # CPU: two model calls at once, events in order
  jetforge app people --help                             # an app's own options"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="app", metavar="APP")
        sub.required = True
        for name, summary in TASKS.summaries():
            app = load_app(name)
            p = sub.add_parser(name, help=summary, description=app.description or summary,
                               epilog=(app.examples + "\n\n" if app.examples else "") + source_usage() + "\n\n"
                               + sink_usage() + "\n\n" + RUN_POLICY, formatter_class=argparse.RawDescriptionHelpFormatter)
            p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
            p.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
            app.add_arguments(p)
            add_app_shared_flags(p, app)
            add_pipeline_arguments(p, app.default_out)
            p.set_defaults(_app=app)

    def run(self, args: argparse.Namespace) -> int:
        return run_app_command(args._app, args)


__all__ = ["AppCommand", "RUN_POLICY", "add_pipeline_arguments", "run_app_command"]
