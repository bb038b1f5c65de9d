"""``jetforge export-sidecar MODEL.onnx --decoder NAME --classes LIST``: the sidecar of a detector made elsewhere."""

import argparse
from typing import Any, Optional, Tuple

from jetforge.cli.arguments import add_classes_flag, add_decoder_flag, add_json_flag
from jetforge.cli.base import Command, print_json
from jetforge.config import COUNT, PROBABILITY
from jetforge.errors import ConfigError


def _size(text: str) -> Tuple[int, int]:
    """``640x640`` or ``480x640`` (height x width)."""
    try:
        h, w = (int(p) for p in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError("--size is HEIGHTxWIDTH, like 640x640; got %r" % text) from None
    if not (1 <= h <= 8192 and 1 <= w <= 8192):
        raise argparse.ArgumentTypeError("--size sides must be 1 to 8192 pixels; got %r" % text)
    return h, w


def _numbers(text: str) -> Tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("expected one number or three like 0.485,0.456,0.406; got %r" % text) \
            from None


class ExportSidecarCommand(Command):
    name = "export-sidecar"
    description = ("Write the sidecar (MODEL.onnx.json) of a detector ONNX made elsewhere, once: its output decoder\n"
                   "(the layout of its outputs), its class names and how frames become its input (letterbox or\n"
                   "stretch to the model's input size, colour order, (x * scale - mean) / std). The outputs are\n"
                   "checked against the decoder's layout and the class count before anything is written; every\n"
                   "command then reads the model through this sidecar (calibrate --labels, the apps).\n"
                   "Defaults are YOLO's export conventions: RGB, pixels / 255, letterbox.")
    examples = """examples:
  jetforge export-sidecar yolov8n.onnx --decoder yolov8 --classes coco80
  jetforge export-sidecar det.onnx --decoder efficientnms --classes my_classes.txt --resize stretch
  jetforge export-sidecar model.onnx --decoder yolov5 --classes person,car --size 640x640 --score-threshold 0.3"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("model", metavar="MODEL.onnx", help="the detector's ONNX file")
        add_decoder_flag(parser, "the layout of the model's outputs")
        add_classes_flag(parser, "class names in the model's index order")
        parser.add_argument("--resize", choices=("letterbox", "stretch"), default="letterbox",
                            help="how a frame becomes the input: letterbox (aspect kept, grey 114 pad; default) or "
                                 "stretch")
        parser.add_argument("--size", type=_size, default=None, metavar="HxW",
                            help="the input size, for a model whose input size is dynamic")
        parser.add_argument("--color", choices=("rgb", "bgr"), default="rgb", help="channel order (default rgb)")
        parser.add_argument("--scale", type=PROBABILITY.argtype, default=1.0 / 255.0,
                            help="pixel scale before mean/std (default 1/255)")
        parser.add_argument("--mean", type=_numbers, default=(0.0,), help="mean after scaling (default 0)")
        parser.add_argument("--std", type=_numbers, default=(1.0,), help="std after scaling (default 1)")
        parser.add_argument("--score-threshold", type=PROBABILITY.argtype, default=0.25,
                            help="drop detections scoring at or below this (default 0.25)")
        parser.add_argument("--iou-threshold", type=PROBABILITY.argtype, default=0.45,
                            help="NMS IoU threshold (default 0.45)")
        parser.add_argument("--max-detections", type=COUNT.argtype, default=300, help="per image (default 300)")
        parser.add_argument("--class-agnostic", action="store_true", help="NMS across classes (default: per class)")
        parser.add_argument("--decoder-params", metavar="FILE.json", default=None,
                            help="the decoder's own parameters as a JSON object (ssd-torchvision: its anchors; "
                                 "efficientnms: box_format, normalized)")
        parser.add_argument("--force", action="store_true", help="replace an existing sidecar")
        add_json_flag(parser)

    def run(self, args: argparse.Namespace) -> int:
        from jetforge.vision.classes import class_names
        from jetforge.vision.decode import DecoderOptions
        from jetforge.vision.decode.sidecar_write import write_detector_sidecar

        if args.decoder is None or args.classes is None:
            raise ConfigError("export-sidecar needs --decoder and --classes",
                              hint="e.g. --decoder yolov8 --classes coco80")
        options = DecoderOptions(score_threshold=args.score_threshold, iou_threshold=args.iou_threshold,
                                 max_detections=args.max_detections, class_agnostic=args.class_agnostic)
        path, sidecar = write_detector_sidecar(
            args.model, args.decoder, class_names(args.classes), force=args.force, resize=args.resize,
            size=args.size, color=args.color, scale=args.scale, mean=args.mean, std=args.std, options=options,
            params=_params(args.decoder_params))
        if args.json:
            print_json({"sidecar": str(path), "decoder": args.decoder, "classes": len(sidecar.labels),
                        "input": sidecar.input.to_dict() if sidecar.input is not None else None})
        else:
            print("wrote %s: decoder %s, %d classes, %s" % (path, args.decoder, len(sidecar.labels),
                                                             sidecar.input.describe() if sidecar.input else "-"))
        return 0


def _params(path: Optional[str]) -> Any:
    if path is None:
        return None
    from jetforge.errors import InputFileError
    from jetforge.jsonfile import read_json

    data = read_json(path, "decoder parameters", InputFileError, hint="a JSON object of the decoder's parameters")
    if not isinstance(data, dict):
        raise InputFileError("decoder parameters %s must be a JSON object" % path)
    return data
