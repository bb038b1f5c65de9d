"""``jetforge estimate``: what will this model do on that board? Latency, throughput, GPU/DLA split, memory."""

import argparse

from jetforge.cli.arguments import (add_dla_core_flag, add_json_flag, add_precision_flag, add_shape_flag, add_target_flag,
                                    shape_values)
from jetforge.cli.base import Command, print_json


class EstimateCommand(Command):
    name = "estimate"
    description = ("Before buying or flashing a board: a per-layer roofline of the model on the target's GPU (and,\n"
                   "with --dla-core, its DLA as `jetforge dla-check` predicts the placement, with a reformat cost for\n"
                   "every GPU<->DLA transition), from the rates in the target profile (each with its source) and\n"
                   "efficiency factors kept as data with how they were obtained. Prints per-layer and total\n"
                   "latency, throughput per batch size and memory (weights at the precision, peak activations,\n"
                   "a workspace lower bound). It is an estimate: warnings say where it is on weak ground.")
    examples = """examples:
  jetforge estimate model.onnx --target orin-nx-16gb --precision int8
  jetforge estimate model.onnx --target orin-nx-16gb --precision int8 --dla-core 0 --batch 1,8
  jetforge estimate model.onnx --target agx-orin-64gb --precision fp16 --power-mode 30W --plot est.png
  jetforge estimate model.onnx --target xavier-nx --shape input=1x3x320x320 --json"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("model", help="ONNX model")
        add_target_flag(parser, required=True)
        add_precision_flag(parser, "deployed precision (default fp16; best is estimated at the fastest precision the "
                                   "device runs: INT8 where it has INT8, else FP16)", default="fp16")
        add_dla_core_flag(parser, "run on DLA core N (GPU fallback for the rest)")
        parser.add_argument("--batch", default="1", metavar="B[,B...]", help="batch sizes, e.g. 1,8 (default 1)")
        parser.add_argument("--power-mode", metavar="NAME", help="nvpmodel mode (default: MAXN where the board has it)")
        add_shape_flag(parser, "fix an input's dynamic dims, e.g. input=1x3x224x224 (the batch comes from --batch)")
        parser.add_argument("--efficiency", default="tensorrt", metavar="SET",
                            help="efficiency factor set (default tensorrt; pytorch_eager for eager PyTorch kernels)")
        parser.add_argument("--fusion", choices=["tensorrt", "none"], default="tensorrt",
                            help="kernel fusion to assume (default tensorrt; none = one kernel per layer)")
        parser.add_argument("--all-layers", action="store_true", help="list every kernel, not the slowest 25")
        parser.add_argument("--plot", metavar="PNG", help="write per-layer time and throughput per batch as a plot")
        add_json_flag(parser)

    def run(self, args: argparse.Namespace) -> int:
        from jetforge.fileio import check_not_input, check_output_path
        from jetforge.runtime.tensorrt.plan import parse_shape
        from jetforge.runtime.estimate.report import format_table, to_json, write_plot
        from jetforge.runtime.estimate.result import estimate, parse_batches
        from jetforge.runtime.onnx_file import check_onnx_file
        from jetforge.targets import get_target

        target = get_target(args.target)
        batches = parse_batches(args.batch)
        shapes = dict(parse_shape(s) for s in shape_values(args))
        if args.plot:
            check_not_input(args.plot, [args.model])
            check_output_path(args.plot)      # before the work, not after
        check_onnx_file(args.model, parse=False)
        result = estimate(args.model, target, args.precision, batches, dla_core=args.dla_core,
                          power_mode=args.power_mode, efficiency=args.efficiency, fusion=args.fusion,
                          input_shapes=shapes or None)
        if args.plot:
            write_plot(result, args.plot)
        if args.json:
            data = to_json(result)
            data["plot"] = args.plot
            print_json(data)
        else:
            print(format_table(result, all_layers=args.all_layers))
            if args.plot:
                print("plot: %s" % args.plot)
        return 0
