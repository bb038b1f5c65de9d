"""``jetforge calibrate``: INT8 calibration cache, Q/DQ ONNX and report from real images or video."""

import argparse
import contextlib
import logging
from typing import Any, Callable, Iterator, List, Sequence, Tuple

from jetforge.apps.tasks.action import ACTION_TRACKER_OPTIONS
from jetforge.apps.tasks.people import add_detector_arguments, make_person_detector, score_to_unit
from jetforge.apps.tasks.tracking import Tracker
from jetforge.cli.base import Command, add_json_flag, print_json
from jetforge.cli.model_refs import ensure_person_detector
from jetforge.errors import ConfigError

log = logging.getLogger(__name__)


class CalibrateCommand(Command):
    name = "calibrate"
    description = (
        "Run MODEL (ONNX with its .onnx.json sidecar, whose preprocessing is used) over calibration samples in "
        "ONNX Runtime, choose per-tensor ranges (percentile 99.99 by default; see --algorithm) "
        "and write MODEL.calib (a TensorRT calibration cache for --trt, used by DLA and TensorRT <= 10), "
        "MODEL.qdq.onnx (explicit Q/DQ for TensorRT >= 10 GPU and 11) and MODEL.calib.json (report, with "
        "histogram plots in MODEL.calib.plots/).  With --check-cache, validate an existing cache instead.")
    examples = """examples:
  jetforge calibrate model.onnx --data calib_images/ --trt 10.3
  jetforge calibrate model.onnx --data street.mp4 --data extra/ --samples 800 --algorithm entropy
  jetforge calibrate model.onnx --data clip.mp4 --video-sampling scene --trt 8.6.2 --out build/model.calib
  jetforge calibrate --check-cache model.calib --model model.onnx --trt 10.3
  jetforge calibrate model.onnx --data calib/ --eval heldout/ --labels heldout/labels.txt
  jetforge calibrate model.onnx --data calib.mp4 --eval other.mp4 --mixed-precision 0.98
  jetforge calibrate det.onnx --data train_frames/ --labels benchmarks/labels/people_boxes.json
  jetforge calibrate --check-cache old.calib --model model.onnx --trt 10.3 --retarget --out new.calib
  jetforge calibrate --check-cache old.calib --trt 8.6.2 --retarget     (writes old.trt8.6.2.calib)
  jetforge calibrate action.onnx --data vtest.avi --eval vtest.avi      (a clip model: sliding clips, first half /
                                                                        second half of the video)
  jetforge calibrate action.onnx --data street.mp4@0:600 --clips per-track --eval street.mp4@700: --labels l.txt"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("model", nargs="?", metavar="MODEL.onnx", help="the ONNX model (with its sidecar)")
        parser.add_argument("--model", dest="model_opt", metavar="ONNX", help="the ONNX model (same as MODEL)")
        parser.add_argument("--data", action="append", default=[], metavar="DIR_OR_VIDEO",
                            help="images folder, video file, image file or .txt list of paths (repeatable)")
        parser.add_argument("--trt", default=None, metavar="VERSION",
                            help="TensorRT version the cache is for: 10.3 (JetPack 6.1/6.2, default), 8.6.2 "
                                 "(JetPack 6.0), 8.5.2 (JetPack 5.1)")
        from jetforge.calibrate.algorithms import ALGORITHMS, DEFAULT_ALGORITHM
        from jetforge.calibrate.mixed import METRICS as MIXED_METRICS
        from jetforge.calibrate.sensitivity import SENSITIVITY_METHODS

        parser.add_argument("--algorithm", default=DEFAULT_ALGORITHM, choices=ALGORITHMS.names(),
                            help="range selection (default: %s): %s" % (DEFAULT_ALGORITHM, "; ".join(
                                "%s = %s" % item for item in ALGORITHMS.summaries())))
        parser.add_argument("--percentile", type=float, default=99.99,
                            help="for --algorithm percentile (default 99.99)")
        parser.add_argument("--samples", type=int, default=500, help="number of samples to use (default 500)")
        parser.add_argument("--min-samples", type=int, default=16,
                            help="refuse to calibrate on fewer samples than this (default 16)")
        parser.add_argument("--batch-size", type=int, default=8, help="ONNX Runtime batch size (default 8)")
        parser.add_argument("--video-sampling", default="uniform", choices=["uniform", "scene"],
                            help="how frames are picked from videos (default uniform)")
        _add_clip_arguments(parser)
        parser.add_argument("--out", metavar="PATH.calib",
                            help="cache path (the Q/DQ ONNX and report go next to it); with --check-cache "
                                 "--retarget, where the retargeted cache goes")
        parser.add_argument("--no-qdq", action="store_true", help="do not write the Q/DQ ONNX")
        parser.add_argument("--no-plots", action="store_true", help="do not write histogram plots")
        parser.add_argument("--all-plots", action="store_true",
                            help="a histogram page for every tensor (default: an overview of all tensors and one "
                                 "page of the 16 whose chosen range cuts the most)")
        parser.add_argument("--check-build", action="store_true",
                            help="parse and build the Q/DQ ONNX with TensorRT (or TensorRT-RTX on any machine)")
        parser.add_argument("--eval", action="append", default=[], metavar="DIR_OR_VIDEO",
                            help="held-out images/video: run the Q/DQ ONNX in simulated TensorRT INT8 arithmetic "
                                 "(the same numbers on any CPU; TensorRT not run) against FP32 and report top-1/top-5 "
                                 "agreement (all and confident samples), mean KL and, with --labels, accuracy "
                                 "(repeatable)")
        parser.add_argument("--int8-kernels", action="store_true",
                            help="with --eval: also measure with ONNX Runtime's INT8 kernels on this CPU, a second "
                                 "number labelled with the CPU's flags (x86 without VNNI saturates 16-bit sums)")
        parser.add_argument("--labels", metavar="FILE",
                            help="labels of the --eval images: one `image_path<TAB>class` per line (class index or "
                                 "sidecar label name; paths relative to FILE or bare file names); for a detector "
                                 "(sidecar task detect), a person-box .json file (benchmarks/labels/people_boxes.json): "
                                 "its held-out frames are the evaluation set (no --eval) and the report gives person "
                                 "AP of FP32 and INT8 with bootstrap intervals")
        parser.add_argument("--eval-samples", type=int, default=None, metavar="N",
                            help="evaluate on N evenly spread samples (default: every image and frame of --eval, "
                                 "as many as fit in 2 GiB of preprocessed input; the output says how many of how "
                                 "many)")
        parser.add_argument("--mixed-precision", type=float, metavar="BOUND",
                            help="keep the fewest most INT8-sensitive layers in FP16 for which --mixed-metric meets "
                                 "BOUND on the selection half of the --eval data (else of the calibration data), and "
                                 "report the result on the other, disjoint half (never used to choose); writes "
                                 "MODEL.precisions.json/.txt (TensorRT --layerPrecisions), MODEL.precisions.png (the "
                                 "metric against FP16 layers on both halves) and MODEL.mixed.qdq.onnx")
        parser.add_argument("--mixed-metric", default="agreement_confident",
                            choices=MIXED_METRICS,
                            help="what BOUND bounds: top-1 agreement with FP32 on confident samples (default), on "
                                 "all samples (both minima), or the labelled accuracy drop (a maximum, 0.002 = 0.2 "
                                 "points)")
        parser.add_argument("--sensitivity", choices=SENSITIVITY_METHODS,
                            help="per-layer sensitivity in the report: sqnr (each layer quantized alone from FP32 "
                                 "inputs, one pass; the default ranking for --mixed-precision) or kl (quantize one "
                                 "layer at a time, output KL)")
        parser.add_argument("--check-cache", metavar="FILE", help="validate an existing calibration cache")
        parser.add_argument("--retarget", action="store_true",
                            help="with --check-cache: rewrite a cache made for another TensorRT version for --trt "
                                 "(the scales are kept; TensorRT would otherwise ignore the cache) into --out, by "
                                 "default FILE's stem + .trt<VERSION>.calib (the input is never overwritten)")
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
                              hint="jetforge calibrate --check-cache FILE --model ONNX --trt VERSION --retarget")
        if not model:
            raise ConfigError("no model given", hint="jetforge calibrate MODEL.onnx --data DIR_OR_VIDEO")
        if not args.data:
            raise ConfigError("no calibration data given", hint="add --data DIR_OR_VIDEO (repeatable)")
        if args.labels and not args.eval and not args.labels.lower().endswith(".json"):
            raise ConfigError("--labels needs --eval (the labelled images to evaluate on)",
                              hint="add --eval DIR_OR_VIDEO")
        if args.int8_kernels and not args.eval:
            raise ConfigError("--int8-kernels needs --eval (the images to measure on)", hint="add --eval DIR_OR_VIDEO")
        if args.eval_samples is not None and args.eval_samples < 1:
            raise ConfigError("--eval-samples must be at least 1, got %d" % args.eval_samples)
        from jetforge.calibrate.calibrate_model import calibrate, evaluation_summary

        with _clip_options(args) as clips:
            result = calibrate(model, args.data, trt_version=args.trt or "10.3", algorithm=args.algorithm,
                               samples=args.samples, batch_size=args.batch_size, out=args.out, qdq=not args.no_qdq,
                               plots=False if args.no_plots else ("all" if args.all_plots else True),
                               video_sampling=args.video_sampling, percentile=args.percentile,
                               min_samples=args.min_samples, progress=not args.json, check_build=args.check_build,
                               eval_data=args.eval or None, labels=args.labels, eval_samples=args.eval_samples,
                               mixed_precision=args.mixed_precision, mixed_metric=args.mixed_metric,
                               sensitivity=args.sensitivity, int8_kernels=args.int8_kernels, clips=clips)
        if args.json:
            data = result.to_dict()
            if args.check_build:
                data["build_check"] = (result.report.get("qdq") or {}).get("build_check")
            print_json(data)
            return 0
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
        print("\n".join(lines))
        return 0

    def _check_cache(self, args: argparse.Namespace, model) -> int:
        from jetforge.calibrate.calibrate_model import check_cache

        check = check_cache(args.check_cache, model, trt_version=args.trt, retarget=args.retarget, out=args.out)
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


def _add_clip_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of clip models: how clips are cut, and the person detector of per-track clips."""
    g = parser.add_argument_group("clip models (sidecar input kind clip)", "--data/--eval take videos, or "
                                  "VIDEO@START:STOP frame ranges; a video given to both is split: calibration on "
                                  "its first half, evaluation after a guard of one clip")
    from jetforge.calibrate.clip_sources import CLIP_MODES

    g.add_argument("--clips", choices=CLIP_MODES, default=None,
                   help="how clips are cut (default sliding): sliding = windows over the whole frame every "
                        "--clip-stride sampled frames; per-track = windows along each tracked person, cropped "
                        "as the action app crops them (people found by --detector)")
    g.add_argument("--clip-stride", type=int, default=None, metavar="N",
                   help="sampled frames between two clips of a video or track (default: the sidecar's "
                        "stride_trained, else one clip length)")
    g.add_argument("--clips-per-track", type=int, default=None, metavar="N",
                   help="--clips per-track: at most N clips of one track, evenly spread (default: no cap)")
    add_detector_arguments(g, default="ssd")


@contextlib.contextmanager
def _clip_options(args: argparse.Namespace) -> Iterator[Any]:
    """The clip options the flags ask for (None: the flags name none), with the person detector of per-track clips
    open for the run and closed after it."""
    per_track = args.clips == "per-track"
    if not per_track and (args.clips_per_track is not None or args.detector_model or args.detector != "ssd"):
        raise ConfigError("--clips-per-track, --detector and --detector-model go with --clips per-track",
                          hint="add --clips per-track, or drop those flags")
    if args.clips is None and args.clip_stride is None:
        yield None
        return
    from jetforge.calibrate.clip_calibration import ClipOptions

    if not per_track:
        yield ClipOptions(mode=args.clips or "sliding", stride=args.clip_stride)
        return
    detector = _person_detector(args)
    try:
        yield ClipOptions(mode="per-track", stride=args.clip_stride, max_per_track=args.clips_per_track,
                          tracker=lambda: person_tracks(detector))
    finally:
        if getattr(detector, "close", None) is not None:
            detector.close()


def _person_detector(args: argparse.Namespace) -> Any:
    """The people detector of the action app (the CNN by default, exported into the cache on first use)."""
    if args.detector == "ssd" and not args.detector_model:
        args.detector_model = str(ensure_person_detector()[0])
    return make_person_detector(args, hog_min_score=0.3, hog_tighten=False)[0]  # the action app's HOG settings


def person_tracks(detector: Any) -> Callable[[int, Any], Sequence[Tuple[int, Any]]]:
    """A new tracker over one video: each (frame index, BGR frame) -> [(track id, box)], the action app's tracks."""
    tracker = Tracker(ACTION_TRACKER_OPTIONS)
    to_confidence = getattr(detector, "to_confidence", score_to_unit)

    def track(index: int, frame: Any) -> List[Tuple[int, Any]]:
        found = detector(frame)
        return [(t.id, t.box) for t in tracker.update(found.boxes, to_confidence(found.scores))]
    return track
