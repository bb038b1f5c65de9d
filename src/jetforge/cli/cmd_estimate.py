"""``jetforge estimate``: what will this model do on that board? Latency, throughput, GPU/DLA split, memory."""

import argparse

from jetforge.cli.arguments import (add_calibrate_from_flag, add_dla_core_flag, add_json_flag, add_out_flag,
                                    add_precision_flag, add_shape_flag, add_target_flag, shape_values)
from jetforge.cli.base import Command, print_json


class EstimateCommand(Command):
    name = "estimate"
    description = ("Before buying or flashing a board: a per-layer roofline of the model on the target's GPU (and,\n"
                   "with --dla-core, its DLA as `jetforge dla-check` predicts the placement, with a reformat cost for\n"
                   "every GPU<->DLA transition), from the rates in the target profile (each with its source) and\n"
                   "efficiency factors kept as data with how they were obtained. Prints per-layer and total\n"
                   "latency, throughput per batch size and memory (weights at the precision, peak activations,\n"
                   "a workspace lower bound). It is an estimate: warnings say where it is on weak ground, and the\n"
                   "validation that covers the case (GPU or DLA, precision, kind of target) is printed next to it.\n"
                   "--calibrate-from board-check.json fits the set to a board's measured points and writes a local\n"
                   "set file (-o, default efficiency.local.yaml), printing the error before and after.")
    examples = """examples:
  jetforge estimate model.onnx --target orin-nx-16gb --precision int8
  jetforge estimate model.onnx --target orin-nx-16gb --precision int8 --dla-core 0 --batch 1,8
  jetforge estimate model.onnx --target agx-orin-64gb --precision fp16 --power-mode 30W --plot est.png
  jetforge estimate model.onnx --target xavier-nx --shape input=1x3x320x320 --json
  jetforge estimate model.onnx --target server-hopper-h200 --efficiency pytorch_eager --batch 1,8,32
  jetforge estimate model.onnx --target orin-nx-16gb --precision int8 --calibrate-from board-check.json
  jetforge estimate model.onnx --target orin-nx-16gb --precision int8 --efficiency efficiency.local.yaml"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("model", help="ONNX model")
        add_target_flag(parser, required=True)
        add_precision_flag(parser, "deployed precision (default fp16; best is estimated at the fastest precision the "
                                   "device runs: INT8 where it has INT8, else FP16)", default="fp16")
        add_dla_core_flag(parser, "run on DLA core N (GPU fallback for the rest)")
        parser.add_argument("--batch", default="1", metavar="B[,B...]", help="batch sizes, e.g. 1,8 (default 1)")
        parser.add_argument("--power-mode", metavar="NAME", help="nvpmodel mode (default: MAXN where the board has it)")
        add_shape_flag(parser, "fix an input's dynamic dims, e.g. input=1x3x224x224 (the batch comes from --batch)")
        parser.add_argument("--efficiency", default="tensorrt", metavar="SET|FILE.yaml",
                            help="efficiency factor set (default tensorrt; pytorch_eager for eager PyTorch on a "
                                 "server GPU, fitted on an H200), or a local set file from --calibrate-from")
        parser.add_argument("--fusion", choices=["tensorrt", "none"], default=None,
                            help="kernel fusion to assume (default: the set's own; tensorrt's is tensorrt, "
                                 "pytorch_eager's none = one kernel per layer)")
        add_calibrate_from_flag(parser, "fit the efficiency set to the latencies a board measured (board-check.json "
                                        "of this model's bundle) and write it to a local file (-o)")
        add_out_flag(parser, "FILE.yaml", "with --calibrate-from: the local set file to write or add to (default "
                                          "efficiency.local.yaml; never jetforge's own efficiency.yaml)")
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
        if args.calibrate_from:
            return _calibrate(args, target, shapes or None)
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


def _calibrate(args: argparse.Namespace, target: object, shapes: object) -> int:
    """``--calibrate-from``: fit, write the local set, print each point's error before and after."""
    from jetforge.fileio import check_not_input
    from jetforge.runtime.estimate.calibrate import calibrate

    out = args.out or "efficiency.local.yaml"
    check_not_input(out, [args.model, args.calibrate_from])
    cal = calibrate(args.model, target, args.calibrate_from, out, base_name=args.efficiency, input_shapes=shapes)
    rows = [{"point": p.id, "precision": p.precision, "device": "DLA" if p.dla else "GPU", "batch": p.batch,
             "measured_ms": p.measured_ms, "before_ms": p.before_ms, "after_ms": p.after_ms} for p in cal.points]
    before, after = cal.error("before"), cal.error("after")
    if args.json:
        print_json({"set": cal.set_name, "file": str(cal.path), "points": rows, "fit": cal.fit,
                    "before": {"median_abs_pct": before[0], "worst_ratio": before[1]},
                    "after": {"median_abs_pct": after[0], "worst_ratio": after[1]}})
        return 0
    from jetforge.table import format_table

    print(format_table(["point", "prec", "device", "batch", "measured ms", "before ms", "err %", "after ms", "err %"],
                       [[r["point"][-40:], r["precision"], r["device"], r["batch"], "%.3f" % r["measured_ms"],
                         "%.3f" % r["before_ms"], "%+.1f" % (100 * (r["before_ms"] / r["measured_ms"] - 1)),
                         "%.3f" % r["after_ms"], "%+.1f" % (100 * (r["after_ms"] / r["measured_ms"] - 1))]
                        for r in rows]))
    print("error on this board: median |error| %.1f %% (worst %.2fx) before, %.1f %% (worst %.2fx) after -- "
          "fitted on these same points" % (before[0], before[1], after[0], after[1]))
    print("wrote set %r to %s; use it: jetforge estimate %s --target %s --efficiency %s"
          % (cal.set_name, cal.path, args.model, target.name, cal.path))  # type: ignore[attr-defined]
    return 0
