"""``jetforge export-config deepstream|triton BUNDLE --out DIR``: DeepStream and Triton configurations from a bundle."""

import argparse
from pathlib import Path
from typing import Any, Dict, List

from jetforge.cli.arguments import (add_dla_core_flag, add_json_flag, add_out_flag, add_precision_flag,
                                    add_tensorrt_flag)
from jetforge.cli.base import Command, print_json
from jetforge.runtime.image_files import read_image

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")
MAX_CHECK_IMAGES = 32


class ExportConfigCommand(Command):
    name = "export-config"
    description = ("Write the serving configuration of a bundle's model, checked before it is written:\n"
                   "  deepstream  nvinfer config (model, engine, precision, batch, DLA, INT8 cache, preprocessing\n"
                   "              mapped to net-scale-factor/offsets/model-color-format, labels, output parsing:\n"
                   "              C++ parsers for the SSD detector and for classifiers ending in logits) and a\n"
                   "              deepstream-app config for N sources; read back as GLib key files and checked\n"
                   "              against the documented nvinfer keys. --normalize-in-model writes a model that\n"
                   "              takes raw 0-255 pixels (per-channel std such as ImageNet's cannot be expressed\n"
                   "              with nvinfer's single scale factor), checked in ONNX Runtime on real images.\n"
                   "  triton      model repository: config.pbtxt (tensorrt_plan or onnxruntime_onnx, max batch,\n"
                   "              dynamic batching, instance groups, tensors from the sidecar); for the SSD detector\n"
                   "              an ensemble with a Python-backend postprocess (decode + NMS).\n"
                   "Nothing is run under DeepStream or Triton here: run the printed commands on the board.")
    examples = """examples:
  jetforge export-config deepstream bundles/cam --out ds/ --sources 4 --batch-size 4
  jetforge export-config deepstream bundles/cls --out ds/ --normalize-in-model --check-images photos/
  jetforge export-config triton bundles/person --out models/ --max-batch 8 --platform onnxruntime_onnx
  # on the board (not executed by jetforge):
  deepstream-app -c ds/deepstream_app_config.txt
  sh models/build_engines.sh && tritonserver --model-repository models/"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="kind", metavar="KIND")
        sub.required = True
        d = sub.add_parser("deepstream", help="nvinfer + deepstream-app configuration",
                           description="DeepStream nvinfer and deepstream-app configuration for a bundle.")
        self._common(d)
        d.add_argument("--batch-size", type=int, default=None, metavar="N",
                       help="nvinfer batch size (default: the number of sources)")
        d.add_argument("--sources", type=int, default=1, metavar="N", help="sources in deepstream-app (default 1)")
        d.add_argument("--source", action="append", default=[], metavar="URI",
                       help="a source URI (file:///..., rtsp://...), repeatable; default: DeepStream's sample stream")
        d.add_argument("--sink", choices=["fake", "file", "display"], default="fake",
                       help="deepstream-app sink (default fake: headless, for measurement)")
        d.add_argument("--threshold", type=float, metavar="P",
                       help="detector pre-cluster threshold / classifier threshold, in [0, 1] (default 0.5)")
        add_tensorrt_flag(d, "which calibration cache (default: the newest)")
        d.add_argument("--normalize-in-model", action="store_true",
                       help="write a model with the normalisation as explicit Sub/Mul input nodes (raw 0-255 in)")
        d.add_argument("--check-images", metavar="DIR",
                       help="real images to check --normalize-in-model on (default: the bundle's samples)")
        t = sub.add_parser("triton", help="Triton model repository",
                           description="Triton Inference Server model repository for a bundle.")
        self._common(t)
        t.add_argument("--platform", choices=["tensorrt_plan", "onnxruntime_onnx"], default="tensorrt_plan",
                       help="tensorrt_plan (built on the board by build_engines.sh) or onnxruntime_onnx")
        t.add_argument("--max-batch", type=int, default=8, metavar="N", help="max_batch_size, 1..4096 (default 8)")
        t.add_argument("--preferred-batch", type=int, action="append", default=[], metavar="N",
                       help="preferred batch size, repeatable (default: max and max/2)")
        t.add_argument("--max-queue-delay-us", type=int, default=100, metavar="US",
                       help="dynamic batching queue delay in microseconds (default 100)")
        t.add_argument("--instances", type=int, default=1, metavar="N", help="instances per GPU (default 1)")
        t.add_argument("--name", help="model (folder) name in the repository: letters, digits, _ . - (default: the "
                                       "model's, other characters replaced by _)")

    @staticmethod
    def _common(p: argparse.ArgumentParser) -> None:
        p.add_argument("bundle", metavar="BUNDLE", help="bundle folder or tar (from `jetforge bundle create`)")
        add_out_flag(p, "DIR", "folder to write (must not exist, or --force)", required=True)
        add_precision_flag(p, "default: the bundle's build precision; best becomes int8 where the bundle has a "
                              "calibration cache or Q/DQ model, else fp16 (nvinfer has no 'best' mode)")
        add_dla_core_flag(p, "run on DLA core N (default: the bundle's)")
        p.add_argument("--force", action="store_true", help="replace an existing --out folder")
        add_json_flag(p)

    def run(self, args: argparse.Namespace) -> int:
        from jetforge.deploy.export_config import export_deepstream, export_triton

        if args.kind == "deepstream":
            from jetforge.deploy.deepstream.config import DeepStreamOptions

            sources = len(args.source) or args.sources
            opts = DeepStreamOptions(precision=args.precision, dla_core=args.dla_core,
                                     batch_size=args.batch_size or sources, sources=args.sources,
                                     source_uris=list(args.source), tensorrt=args.tensorrt, sink=args.sink,
                                     threshold=args.threshold)
            _check_positive({"--batch-size": opts.batch_size, "--sources": sources})
            images = read_images(args.check_images) if args.check_images else []
            if args.check_images and not args.normalize_in_model:
                from jetforge.errors import ConfigError

                raise ConfigError("--check-images applies to --normalize-in-model", hint="add --normalize-in-model")
            result = export_deepstream(args.bundle, args.out, opts, normalize_in_model=args.normalize_in_model,
                                       check_images=images, force=args.force)
        else:
            from jetforge.deploy.triton.config import TritonOptions

            opts_t = TritonOptions(platform=args.platform, max_batch_size=args.max_batch,
                                   preferred_batch_sizes=args.preferred_batch, max_queue_delay_us=args.max_queue_delay_us,
                                   instances=args.instances, precision=args.precision, dla_core=args.dla_core,
                                   name=args.name)
            result = export_triton(args.bundle, args.out, opts_t, force=args.force)
        if args.json:
            print_json(result)
            return 0
        _print(result)
        return 0


def _check_positive(values: Dict[str, int]) -> None:
    from jetforge.errors import ConfigError

    for flag, value in values.items():
        if value < 1:
            raise ConfigError("%s must be at least 1, got %d" % (flag, value), hint="give %s 1 or more" % flag)


def read_images(folder: str) -> List[Any]:
    """Up to :data:`MAX_CHECK_IMAGES` readable images of ``folder`` (sorted), decoded by OpenCV as BGR uint8."""
    from jetforge.errors import InputFileError
    from jetforge.fileio import require_dir

    root = require_dir(folder, "--check-images folder")
    paths = sorted(p for p in root.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
    images = []
    for path in paths[:MAX_CHECK_IMAGES]:
        image = read_image(path, "--check-images image")  # one too large to decode is refused from its header
        if image is not None:
            images.append(image)
    if not images:
        raise InputFileError("%s holds no readable image (%s)" % (root, ", ".join(IMAGE_SUFFIXES)),
                             hint="give a folder of real photos or frames")
    return images


def _print(result: Dict[str, Any]) -> None:
    print("wrote %s configuration for %s (%s) -> %s" % (result["kind"], result["model"], result["task"], result["out"]))
    for name in result.get("files", []):
        print("  %s" % name)
    pre = result.get("preprocess")
    if pre:
        print("preprocess  net-scale-factor %.9g, offsets %s, model-color-format %d (%s)" % (
            pre["net_scale_factor"], ";".join("%.6g" % o for o in pre["offsets"]), pre["model_color_format"],
            "exact" if pre["exact_normalization"] else "approximate: up to %.2f%% off on a channel"
            % (100 * pre["max_relative_scale_error"])))
    norm = result.get("normalization")
    if norm:
        print("normalised  model checked in ONNX Runtime on %d real images (%s): max |diff| %.3g of output scale "
              "%.3g (relative %.2g, tolerance %.0e), top-1 agreement %.3f" % (
                  norm["images"], norm["images_from"], norm["max_abs_diff"], norm["output_scale"], norm["relative"],
                  norm["tolerance"], norm["top1_agreement"]))
    for note in result.get("notes", []):
        print("note: %s" % note)
    if result["kind"] == "deepstream":
        print("on the board (not executed here): make -C %s/parsers (if present); deepstream-app -c %s/%s"
              % (result["out"], result["out"], "deepstream_app_config.txt"))
    else:
        build = result.get("build")
        if build:
            print("on the board (not executed here): sh %s/%s" % (result["out"], build["script"]))
        print("then: tritonserver --model-repository %s" % result["out"])


__all__ = ["ExportConfigCommand", "read_images"]
