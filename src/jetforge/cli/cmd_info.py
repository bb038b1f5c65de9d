"""``jetforge info``: what an ONNX model, a TensorRT engine or a bundle is (``polygraphy inspect model``'s job)."""

import argparse

from jetforge.cli.arguments import add_json_flag
from jetforge.cli.base import Command, print_json
from jetforge.config import COUNT


class InfoCommand(Command):
    name = "info"
    description = ("Describe MODEL: an ONNX model (inputs and outputs, operator counts, parameters, MACs, precision), "
                   "a TensorRT engine (its sidecar without TensorRT: what built it, for which target and precision; "
                   "the plan's own layers where TensorRT is installed) or a bundle folder/tar (manifest, targets, "
                   "files, every hash checked). Also the sidecar's input contract (kind, preprocessing, layout), "
                   "what made the file, and the SHA-256 of every file read.")
    examples = """examples:
  jetforge info model.onnx                   # tensors, ops, parameters, MACs, input contract, hashes
  jetforge info ssdlite-person-192 --json    # a shipped model, by name
  jetforge info model.engine                 # the engine sidecar (no TensorRT needed) and the plan where it loads
  jetforge info bundles/cam                  # manifest, targets, files (verified) and the bundle's model"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("model", metavar="MODEL",
                            help="a .onnx file, a .engine/.plan/.trt file, a bundle folder or tar, or a shipped model "
                                 "name (`jetforge models list`)")
        parser.add_argument("--batch", type=COUNT.argtype, default=1,
                            help="batch at which MACs are counted where the batch axis is dynamic (default 1)")
        parser.add_argument("--no-macs", dest="macs", action="store_false",
                            help="skip counting MACs (it runs ONNX shape inference, seconds on large models)")
        add_json_flag(parser)

    def run(self, args: argparse.Namespace) -> int:
        from jetforge.workflow.inspect import format_info, inspect_path

        info = inspect_path(args.model, macs=args.macs, batch=args.batch)
        if args.json:
            print_json(info)
        else:
            print(format_info(info))
        return 0
