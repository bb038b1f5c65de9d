"""``jetforge board-check BUNDLE``: the acceptance run on a Jetson (see :mod:`jetforge.deploy.boardcheck.check`)."""

import argparse

from jetforge.cli.arguments import add_json_flag, add_out_flag, add_target_flag, add_tensorrt_flag
from jetforge.cli.base import Command, print_json
from jetforge.config import COUNT


class BoardCheckCommand(Command):
    name = "board-check"
    description = ("The first thing to run on a new board, after `jetforge deploy`. On the Jetson it builds the\n"
                   "bundle's engines (GPU FP16, GPU INT8, one per DLA core) through the engine cache, runs them on\n"
                   "the bundle's samples and compares their outputs with jetforge's FP32 and simulated-INT8\n"
                   "outputs, compares TensorRT's layer placement with dla-check's prediction and the measured\n"
                   "latency with `jetforge estimate`'s, records tegrastats, and writes board-check.json (with\n"
                   "measured points for the estimator) and board-check.txt. Without TensorRT it reports what it\n"
                   "can (prediction, estimate) and exits 3. Exit 0: every engine passed; 4: an engine failed.")
    examples = """examples:
  jetforge board-check ~/jetforge/bundles/cam --out board-check/       # on the board
  jetforge deploy bundles/cam nvidia@orin --run board-check             # from the workstation: fetched back
  jetforge board-check bundles/cam --target orin-nx-16gb --json         # here: stops where TensorRT is needed"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("bundle", metavar="BUNDLE", help="bundle folder or tar (with --samples for output checks)")
        add_out_flag(parser, "DIR", "report folder (default board-check/)", default="board-check")
        add_target_flag(parser, default="auto", help="target profile (default: detect)")
        add_tensorrt_flag(parser, "TensorRT version when it is not installed")
        parser.add_argument("--power-mode", metavar="NAME", help="power mode to record (default: nvpmodel -q)")
        parser.add_argument("--iterations", type=COUNT.argtype, default=200, metavar="N", help="timed runs per engine")
        parser.add_argument("--no-tegrastats", action="store_true", help="do not record tegrastats")
        add_json_flag(parser)

    def run(self, args: argparse.Namespace) -> int:
        from jetforge.deploy.boardcheck.check import run_board_check
        from jetforge.deploy.onboard import EXIT_NO_TENSORRT
        from jetforge.errors import ConfigError

        if args.iterations < 1:
            raise ConfigError("--iterations must be at least 1", hint="--iterations 200")
        report = run_board_check(args.bundle, args.out, target=args.target, tensorrt=args.tensorrt,
                                 iterations=args.iterations, tegrastats=None if args.no_tegrastats else "tegrastats",
                                 mode=args.power_mode)
        if args.json:
            print_json(report)
        else:
            from pathlib import Path

            print(Path(report["files"][1]).read_text(encoding="utf-8"), end="")
            print("wrote %s" % ", ".join(report["files"]))
        return {"pass": 0, "tensorrt-missing": EXIT_NO_TENSORRT, "no-target": 1}.get(report["status"], 4)


__all__ = ["BoardCheckCommand"]
