"""``jetforge calibrate``: INT8 calibration cache, Q/DQ ONNX and report from real images or video."""

import argparse
import contextlib
import logging
from typing import Any, Dict, Iterator, List

from jetforge.apps.tasks.people import add_detector_arguments, make_person_detector
from jetforge.cli.arguments import add_config_flags, add_json_flag, add_out_flag, add_tensorrt_flag
from jetforge.cli.base import Command, print_config, print_json
from jetforge.errors import ConfigError
from jetforge.vision.person_tracks import person_tracker_factory
from jetforge.workflow.model_refs import ensure_person_detector

log = logging.getLogger(__name__)


class CalibrateCommand(Command):
    name = "calibrate"
    description = (
        "Run MODEL (ONNX with its .onnx.json sidecar, whose preprocessing is used) over calibration samples in "
        "ONNX Runtime, choose per-tensor ranges (percentile 99.99 by default; see --algorithm) "
        "and write MODEL.calib (a TensorRT calibration cache for --tensorrt, used by DLA and TensorRT <= 10), "
        "MODEL.qdq.onnx (explicit Q/DQ for TensorRT >= 10 GPU and 11) and MODEL.calib.json (report, with "
        "histogram plots in MODEL.calib.plots/).  With --check-cache, validate an existing cache instead.  "
        "Every option can come from --config FILE.yaml and --set KEY=VALUE (the keys of --print-config); a flag "
        "given on the command line wins over both, --set over the file.")
    examples = """examples:
  jetforge calibrate model.onnx --data calib_images/ --tensorrt 10.3
  jetforge calibrate model.onnx --data street.mp4 --data extra/ --samples 800 --algorithm mse
  jetforge calibrate model.onnx --data clip.mp4 --video-sampling scene --tensorrt 8.6.2 --out build/model.calib
  jetforge calibrate --check-cache model.calib --model model.onnx --tensorrt 10.3
  jetforge calibrate model.onnx --data calib/ --eval heldout/ --labels heldout/labels.txt
  jetforge calibrate model.onnx --data calib.mp4 --eval other.mp4 --mixed-precision 0.98
  jetforge calibrate det.onnx --data train_frames/ --labels src/jetforge/vision/data/people_boxes.json
  jetforge calibrate --check-cache old.calib --model model.onnx --tensorrt 10.3 --retarget --out new.calib
  jetforge calibrate --check-cache old.calib --tensorrt 8.6.2 --retarget     (writes old.trt8.6.2.calib)
  jetforge calibrate action.onnx --data vtest.avi --eval vtest.avi      (a clip model: sliding clips, first half /
                                                                        second half of the video)
  jetforge calibrate action.onnx --data street.mp4@0:600 --clips per-track --eval street.mp4@700: --labels l.txt
  jetforge calibrate model.onnx --data calib/ --config calib.yaml --set evaluation.samples=200 --percentile 99.9
  jetforge calibrate model.onnx --data calib/ --out build/     (writes build/model.calib, build/model.qdq.onnx, ...)"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("model", nargs="?", metavar="MODEL.onnx", help="the ONNX model (with its sidecar)")
        parser.add_argument("--model", dest="model_opt", metavar="ONNX", help="the ONNX model (same as MODEL)")
        parser.add_argument("--data", action="append", default=[], metavar="DIR_OR_VIDEO",
                            help="images folder, video file, image file or .txt list of paths (repeatable)")
        add_tensorrt_flag(parser, "TensorRT version the cache is for (key tensorrt_version): 10.3 (JetPack 6.1/6.2, "
                                  "default), 8.6.2 (JetPack 6.0), 8.5.2 (JetPack 5.1); a release of "
                                  "targets/jetpack.yaml")
        _add_range_arguments(parser)
        _add_clip_arguments(parser)
        add_out_flag(parser, "PATH.calib", "cache path (the Q/DQ ONNX and report go next to it), or a folder to write "
                                           "into (an existing folder, or a path ending in /: DIR/MODEL.calib); with "
                                           "--check-cache --retarget, where the retargeted cache goes")
        parser.add_argument("--no-qdq", action="store_true", default=None, help="do not write the Q/DQ ONNX")
        parser.add_argument("--no-plots", action="store_true", default=None, help="do not write histogram plots")
        parser.add_argument("--all-plots", action="store_true", default=None,
                            help="a histogram page for every tensor (default: an overview of all tensors and one "
                                 "page of the 16 whose chosen range cuts the most)")
        parser.add_argument("--check-build", action="store_true", default=None,
                            help="parse and build the Q/DQ ONNX with TensorRT (or TensorRT-RTX on any machine)")
        _add_evaluation_arguments(parser)
        parser.add_argument("--check-cache", metavar="FILE", help="validate an existing calibration cache")
        parser.add_argument("--retarget", action="store_true",
                            help="with --check-cache: rewrite a cache made for another TensorRT version for "
                                 "--tensorrt (the scales are kept; TensorRT would otherwise ignore the cache) into "
                                 "--out, by default FILE's stem + .trt<VERSION>.calib (the input is never overwritten)")
        add_config_flags(parser)
        add_json_flag(parser)

    def run(self, args: argparse.Namespace) -> int:
        model = args.model or args.model_opt
        if args.model and args.model_opt and args.model != args.model_opt:
            raise ConfigError("two different models given (%s and --model %s)" % (args.model, args.model_opt),
                              hint="give the model once")
        if args.check_cache:
            return self._check_cache(args, model)
        if args.retarget:
            raise ConfigError("--retarget only applies with --check-cache",
                              hint="jetforge calibrate --check-cache FILE --model ONNX --tensorrt VERSION --retarget")
        options = calibrate_options(args)  # checked: a bad value is one line before any file is read
        if args.print_config:
            print_config(options)
            return 0
        if not model:
            raise ConfigError("no model given", hint="jetforge calibrate MODEL.onnx --data DIR_OR_VIDEO")
        if not args.data:
            raise ConfigError("no calibration data given", hint="add --data DIR_OR_VIDEO (repeatable)")
        ev = options.evaluation
        if ev.labels and not ev.data and not ev.labels.lower().endswith(".json"):
            raise ConfigError("--labels needs --eval (the labelled images to evaluate on)",
                              hint="add --eval DIR_OR_VIDEO")
        if ev.int8_kernels and not ev.data:
            raise ConfigError("--int8-kernels needs --eval (the images to measure on)", hint="add --eval DIR_OR_VIDEO")
        from jetforge.calibrate.calibrate_model import calibrate

        with _clip_options(args, options.clips) as clips:
            result = calibrate(model, args.data, options, clips=clips)
        if args.json:
            data = result.to_dict()
            if options.check_build:
                data["build_check"] = (result.report.get("qdq") or {}).get("build_check")
            print_json(data)
            return 0
        print("\n".join(_summary_lines(model, result)))
        return 0

    def _check_cache(self, args: argparse.Namespace, model) -> int:
        from jetforge.calibrate.calibrate_model import check_cache

        from jetforge.calibrate.cache.format import stamp_version

        if args.tensorrt is not None:
            stamp_version(args.tensorrt)  # a release of the JetPack table, also to compare against
        check = check_cache(args.check_cache, model, trt_version=args.tensorrt, retarget=args.retarget, out=args.out)
        if args.json:
            print_json(check.to_dict())
            return 0
        c = check.cache
        print("%s: %s, TensorRT %d.%d.%d, %s, %d tensors" % (args.check_cache, c.header, c.trt_version[0],
                                                          c.trt_version[1], c.trt_version[2], c.algorithm, len(c)))
        if check.retargeted_to:
            print("warning: retargeted to TensorRT %s, written to %s (scales unchanged)"
                  % (check.retargeted_to, check.written))
        if check.validation is not None:
            v = check.validation
            print("model %s: %d tensors matched, %d not in the model, %d model tensors without a scale"
                  % (model, len(v.matched), len(v.not_in_model), len(v.missing)))
        return 0


def _summary_lines(model: str, result: Any) -> List[str]:
    """What a calibration run wrote and measured, as printed without --json."""
    from jetforge.calibrate.calibrate_model import evaluation_summary

    lines: List[str] = [
        "calibrated %s on %d samples (%s) -> %d tensor ranges" % (model, result.samples, result.algorithm,
                                                                  len(result.cache)),
        "  cache    %s  (%s)" % (result.cache_path, result.cache.header),
    ]
    if result.qdq_path:
        lines.append("  Q/DQ     %s" % result.qdq_path)
    if result.report_path:
        lines.append("  report   %s" % result.report_path)
    if result.plots:
        lines.append("  plots    %s (%d pages)" % (result.plots[0].parent, len(result.plots)))
    if result.mixed_qdq_path:
        lines.append("  mixed    %s" % result.mixed_qdq_path)
        lines.append("  layers   %s" % result.precisions_path)
    if result.evaluation:
        lines.extend("  " + line for line in evaluation_summary(result.evaluation))
    build = (result.report.get("qdq") or {}).get("build_check") if result.report else None
    if build:
        lines.append("  build    %s %s: %d layers, %d bytes" % (build["library"], build["version"],
                                                              build["layers"], build["serialized_bytes"]))
    for w in result.warnings:
        lines.append("  warning: %s" % w)
    return lines


# flag dest -> CalibrateOptions key (dotted into its section); only flags given on the command line are used, and
# they win over --config and --set.  --no-qdq, --no-plots, --all-plots and --json are mapped in _flag_options.
FLAG_KEYS = {"tensorrt": "tensorrt_version", "algorithm": "algorithm", "percentile": "percentile", "samples": "samples",
             "min_samples": "min_samples", "batch_size": "batch_size", "video_sampling": "video_sampling",
             "out": "out", "check_build": "check_build", "eval": "evaluation.data",
             "int8_kernels": "evaluation.int8_kernels", "labels": "evaluation.labels",
             "eval_samples": "evaluation.samples", "sensitivity": "evaluation.sensitivity",
             "mixed_precision": "mixed_precision.bound", "mixed_metric": "mixed_precision.metric",
             "clips": "clips.mode", "clip_stride": "clips.stride", "clips_per_track": "clips.max_per_track"}


def _flag_options(args: argparse.Namespace) -> Dict[str, Any]:
    """The options the command-line flags set, as a nested mapping (flags not given are absent)."""
    flat: Dict[str, Any] = {key: getattr(args, dest) for dest, key in FLAG_KEYS.items()
                            if getattr(args, dest) is not None}
    if args.no_qdq:
        flat["qdq"] = False
    if args.no_plots or args.all_plots:
        flat["plots"] = False if args.no_plots else "all"
    if args.json:
        flat["progress"] = False
    nested: Dict[str, Any] = {}
    for key, value in flat.items():
        section, _, name = key.rpartition(".")
        (nested.setdefault(section, {}) if section else nested)[name] = value
    return nested


def calibrate_options(args: argparse.Namespace) -> Any:
    """The run's :class:`~jetforge.calibrate.options.CalibrateOptions`: defaults <- ``--config`` <- ``--set`` <-
    the flags given on the command line."""
    from jetforge.calibrate.options import load_calibrate_options

    return load_calibrate_options(args.config, args.overrides, final=_flag_options(args))


def _add_range_arguments(parser: argparse.ArgumentParser) -> None:
    """How the ranges are chosen and from how many samples."""
    from jetforge.calibrate.algorithms import ALGORITHMS, DEFAULT_ALGORITHM

    parser.add_argument("--algorithm", choices=ALGORITHMS.names(),
                        help="range selection (default: %s): %s" % (DEFAULT_ALGORITHM, "; ".join(
                            "%s = %s" % item for item in ALGORITHMS.summaries())))
    parser.add_argument("--percentile", type=float,
                        help="for --algorithm percentile, in (0, 100] (default 99.99; 100 is the largest |x|)")
    parser.add_argument("--samples", type=int, help="number of samples to use (default 500)")
    parser.add_argument("--min-samples", type=int, help="refuse to calibrate on fewer samples than this (default 16)")
    parser.add_argument("--batch-size", type=int, help="ONNX Runtime batch size (default 8)")
    parser.add_argument("--video-sampling", choices=["uniform", "scene"],
                        help="how frames are picked from videos (default uniform)")


def _add_evaluation_arguments(parser: argparse.ArgumentParser) -> None:
    """The INT8 evaluation (CalibrateOptions.evaluation) and mixed precision (.mixed_precision)."""
    from jetforge.calibrate.mixed import METRICS as MIXED_METRICS
    from jetforge.calibrate.sensitivity import SENSITIVITY_METHODS

    parser.add_argument("--eval", action="append", default=None, metavar="DIR_OR_VIDEO",
                        help="held-out images/video: run the Q/DQ ONNX in simulated TensorRT INT8 arithmetic "
                             "(the same numbers on any CPU; TensorRT not run) against FP32 and report top-1/top-5 "
                             "agreement (all and confident samples), mean KL and, with --labels, accuracy "
                             "(repeatable; replaces evaluation.data of --config)")
    parser.add_argument("--int8-kernels", action="store_true", default=None,
                        help="with --eval: also measure with ONNX Runtime's INT8 kernels on this CPU, a second "
                             "number labelled with the CPU's flags (x86 without VNNI saturates 16-bit sums)")
    parser.add_argument("--labels", metavar="FILE",
                        help="labels of the --eval images: one `image_path<TAB>class` per line (class index or "
                             "sidecar label name; paths relative to FILE or bare file names); for a detector "
                             "(sidecar task detect), a person-box .json file (jetforge ships one: "
                             "jetforge/vision/data/people_boxes.json): "
                             "its held-out frames are the evaluation set (no --eval) and the report gives person "
                             "AP of FP32 and INT8 with bootstrap intervals")
    parser.add_argument("--eval-samples", type=int, default=None, metavar="N",
                        help="evaluate on N evenly spread samples (default: every image and frame of --eval, "
                             "as many as fit in 2 GiB of preprocessed input; the output says how many of how many)")
    parser.add_argument("--mixed-precision", type=float, metavar="BOUND",
                        help="keep the fewest most INT8-sensitive layers in FP16 for which --mixed-metric meets "
                             "BOUND on the selection half of the --eval data (else of the calibration data), and "
                             "report the result on the other, disjoint half (never used to choose); writes "
                             "MODEL.precisions.json/.txt (TensorRT --layerPrecisions), MODEL.precisions.png (the "
                             "metric against FP16 layers on both halves) and MODEL.mixed.qdq.onnx")
    parser.add_argument("--mixed-metric", choices=MIXED_METRICS,
                        help="what BOUND bounds: top-1 agreement with FP32 on confident samples (default), on "
                             "all samples (both minima), or the labelled accuracy drop (a maximum, 0.002 = 0.2 "
                             "points)")
    parser.add_argument("--sensitivity", choices=SENSITIVITY_METHODS,
                        help="per-layer sensitivity in the report: sqnr (each layer quantized alone from FP32 "
                             "inputs, one pass; the default ranking for --mixed-precision) or kl (quantize one "
                             "layer at a time, output KL)")


def _add_clip_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of clip models: how clips are cut, and the person detector of per-track clips."""
    g = parser.add_argument_group("clip models (sidecar input kind clip)", "--data/--eval take videos, or "
                                  "VIDEO@START:STOP frame ranges; a video given to both is split: calibration on "
                                  "its first half, evaluation after a guard of one clip")
    from jetforge.calibrate.clips.sources import CLIP_MODES

    g.add_argument("--clips", choices=CLIP_MODES, default=None,
                   help="how clips are cut (key clips.mode; default sliding): sliding = windows over the whole "
                        "frame every --clip-stride sampled frames; per-track = windows along each tracked person, cropped "
                        "as the action app crops them (people found by --detector)")
    g.add_argument("--clip-stride", type=int, default=None, metavar="N",
                   help="sampled frames between two clips of a video or track (default: the sidecar's "
                        "stride_trained, else one clip length)")
    g.add_argument("--clips-per-track", type=int, default=None, metavar="N",
                   help="--clips per-track: at most N clips of one track, evenly spread (default: no cap)")
    add_detector_arguments(g, default="ssd")


@contextlib.contextmanager
def _clip_options(args: argparse.Namespace, settings: Any) -> Iterator[Any]:
    """The clip options ``settings`` (CalibrateOptions.clips, from the flags, --config and --set) ask for (None:
    none given), with the person detector of per-track clips open for the run and closed after it."""
    per_track = settings.mode == "per-track"
    if not per_track and (args.detector_model or args.detector != "ssd"):
        raise ConfigError("--detector and --detector-model go with --clips per-track",
                          hint="add --clips per-track, or drop those flags")
    if not per_track:
        yield settings.runtime()
        return
    detector = _person_detector(args)
    try:
        yield settings.runtime(tracker=person_tracker_factory(detector))
    finally:
        if getattr(detector, "close", None) is not None:
            detector.close()


def _person_detector(args: argparse.Namespace) -> Any:
    """The people detector of the action app (the CNN by default, exported into the cache on first use)."""
    if args.detector == "ssd" and not args.detector_model:
        args.detector_model = str(ensure_person_detector()[0])
    return make_person_detector(args, hog_min_score=0.3, hog_tighten=False)[0]  # the action app's HOG settings

