"""Entry point of the ``jetforge`` command.

Subcommands are registered here (:data:`COMMANDS`, a :class:`~jetforge.registry.Registry` of lazy
``"module:Class"`` entries with their summaries) so that ``jetforge --help`` costs no heavy import; a
command's module (and whatever it needs: torch, onnxruntime, TensorRT) is imported only when that command
runs.  Errors the user
can fix (:class:`JetforgeError`, and a mistyped command line: :class:`~jetforge.entry.UsageError`)
print as one line and exit 1; anything else is a bug, exits 2 and says to rerun with ``--debug``
for the traceback.

Stopping: Ctrl-C (SIGINT) and SIGTERM (how ``systemctl stop``, ``docker stop`` and
``kill`` end a process) end every command the same way: a :class:`~jetforge.entry.Terminated`
(a ``KeyboardInterrupt``) is raised in the main thread, so whatever a command does on
Ctrl-C - close its outputs, write ``metrics.json`` with status "interrupted" - it also
does on SIGTERM.  Both exit with :data:`EXIT_INTERRUPTED` (130).  (:mod:`jetforge.entry` holds
these rules, shared with the ``python -m`` entry points of training.)
"""

import argparse
import logging
import os
import sys
import traceback
from typing import Any, List, Optional, Sequence

import jetforge
from jetforge.entry import (EXIT_BUG, EXIT_ERROR, EXIT_INTERRUPTED, ArgumentParser, Terminated, UsageError,
                            interrupted, stop_behind, stop_signals_as_interrupt)
from jetforge.errors import JetforgeError, user_os_error
from jetforge.registry import Registry

__all__ = ["main", "build_parser", "COMMANDS", "EXIT_ERROR", "EXIT_BUG", "EXIT_INTERRUPTED", "Terminated",
           "UsageError", "stop_signals_as_interrupt"]

# The commands, in the order of `jetforge --help`: name -> "module:Class" (imported only when that command
# runs) and its one-line summary.  Adding a command: a module cli/cmd_<name>.py with a Command subclass and
# one line here.
COMMANDS: Registry[Any] = Registry("command")
COMMANDS.add_lazy("demo", "jetforge.cli.cmd_demo:DemoCommand",
                  "run the bundled video-analytics demo on real data (the main job)")
COMMANDS.add_lazy("app", "jetforge.cli.cmd_app:AppCommand",
                  "run a video app (people counting, classification, ...) on a file, camera or stream")
COMMANDS.add_lazy("models", "jetforge.cli.cmd_models:ModelsCommand",
                  "the models jetforge ships (made by its recipes, measured): list them, show a card")
COMMANDS.add_lazy("targets", "jetforge.cli.cmd_targets:TargetsCommand", "list or show Jetson / GPU target profiles")
COMMANDS.add_lazy("assets", "jetforge.cli.cmd_assets:AssetsCommand",
                  "fetch and verify pretrained weights and sample media")
COMMANDS.add_lazy("export", "jetforge.cli.cmd_export:ExportCommand",
                  "export a torch model to ONNX with its sidecar (task, labels, preprocessing, tensors, hash)")
COMMANDS.add_lazy("export-sidecar", "jetforge.cli.cmd_export_sidecar:ExportSidecarCommand",
                  "write the sidecar of a detector ONNX made elsewhere: output decoder, class names, input contract")
COMMANDS.add_lazy("prune", "jetforge.cli.cmd_prune:PruneCommand",
                  "structured channel pruning: smaller tensors, replayable plan, report, ONNX export")
COMMANDS.add_lazy("distill", "jetforge.cli.cmd_distill:DistillCommand",
                  "knowledge distillation (logit + feature) from a frozen teacher, from a YAML recipe")
COMMANDS.add_lazy("qat", "jetforge.cli.cmd_qat:QatCommand",
                  "quantization-aware training -> Q/DQ ONNX + DLA calibration cache from the trained scales")
COMMANDS.add_lazy("calibrate", "jetforge.cli.cmd_calibrate:CalibrateCommand",
                  "INT8 calibration: TensorRT cache + Q/DQ ONNX + report from real images or video")
COMMANDS.add_lazy("bench", "jetforge.cli.cmd_bench:BenchCommand",
                  "measure latency, throughput, H2D/compute/D2H split, memory and energy of a model")
COMMANDS.add_lazy("info", "jetforge.cli.cmd_info:InfoCommand",
                  "describe an ONNX model, TensorRT engine or bundle: tensors, ops, parameters, MACs, contract, hashes")
COMMANDS.add_lazy("doctor", "jetforge.cli.cmd_doctor:DoctorCommand",
                  "report what this machine has (target, CUDA, TensorRT, ORT, OpenCV, DLA)")
COMMANDS.add_lazy("build", "jetforge.cli.cmd_build:BuildCommand",
                  "build a TensorRT engine (GPU or DLA) for a target, from a validated build plan")
COMMANDS.add_lazy("dla-check", "jetforge.cli.cmd_dla_check:DlaCheckCommand",
                  "predict DLA placement of an ONNX model (GPU fallbacks, subgraphs, FLOPs on DLA)")
COMMANDS.add_lazy("estimate", "jetforge.cli.cmd_estimate:EstimateCommand",
                  "estimate per-layer latency, throughput, GPU/DLA split and memory on a target")
COMMANDS.add_lazy("bundle", "jetforge.cli.cmd_bundle:BundleCommand",
                  "pack a model, its caches, sidecars and build options for the board into one folder; verify one")
COMMANDS.add_lazy("deploy", "jetforge.cli.cmd_deploy:DeployCommand",
                  "copy a bundle to a Jetson over SSH, run doctor/build/bench/an app there, fetch the results")
COMMANDS.add_lazy("export-config", "jetforge.cli.cmd_export_config:ExportConfigCommand",
                  "write a DeepStream (nvinfer + deepstream-app) or Triton configuration for a bundle")
COMMANDS.add_lazy("board-check", "jetforge.cli.cmd_board_check:BoardCheckCommand",
                  "acceptance run on a Jetson: build every engine, check outputs, placement, latency, power")

EPILOG = """examples:
  jetforge demo                      # people counting on a real clip: video, events, FPS and latency
  jetforge demo --app classify       # MobileNetV2 exported to ONNX, run with ONNX Runtime over a clip
  jetforge targets list              # every Jetson / GPU profile, with sources
  jetforge doctor --json             # what this machine can run
  jetforge prune --model mobilenet_v2 --flops-reduction 2 --latency-aware --out work/
  jetforge calibrate work/model.onnx --data frames/ --tensorrt 10.3
  jetforge dla-check work/model.onnx --target orin-nx-16gb
  jetforge bundle create work/model.onnx --target orin-nx-16gb --calib work/model.calib --out bundles/cam
  jetforge deploy bundles/cam nvidia@orin --run bench

exit status: 0 done; 1 an error you can fix, a mistyped command line included (one line on stderr, with
the fix); 2 an internal error (a bug: rerun with --debug); 130 stopped by Ctrl-C or SIGTERM (systemctl/docker stop), outputs closed
and what was finished kept.

Run `jetforge COMMAND --help` for a command's options."""


def _load_command(name: str) -> Any:
    return COMMANDS.get(name)()


def build_parser(command_name: Optional[str] = None) -> argparse.ArgumentParser:
    """The top-level parser; only ``command_name``'s module is imported to add its options."""
    parser = ArgumentParser(
        prog="jetforge", description="Deploy vision and action-recognition models to NVIDIA Jetson GPUs and DLA cores.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version="jetforge %s" % jetforge.__version__)
    _add_common(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, summary in COMMANDS.summaries():
        if name == command_name:
            command = _load_command(name)
            p = sub.add_parser(name, help=summary, description=command.description or summary,
                               epilog=command.examples or None, formatter_class=argparse.RawDescriptionHelpFormatter)
            _add_common(p, suppress=True)
            command.add_arguments(p)
            p.set_defaults(_command=command)
        else:
            sub.add_parser(name, help=summary, add_help=False)
    return parser


def _add_common(parser: argparse.ArgumentParser, suppress: bool = False) -> None:
    default = argparse.SUPPRESS if suppress else None
    parser.add_argument("--debug", action="store_true", default=default if suppress else False,
                        help="show tracebacks and debug logging")
    parser.add_argument("-v", "--verbose", action="count", default=default if suppress else 0,
                        help="more log output (-vv for debug)")
    parser.add_argument("-q", "--quiet", action="store_true", default=default if suppress else False,
                        help="only warnings and errors")


def _configure_logging(args: argparse.Namespace) -> None:
    level = logging.INFO
    if getattr(args, "quiet", False):
        level = logging.WARNING
    if getattr(args, "verbose", 0) >= 2 or getattr(args, "debug", False):
        level = logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname).1s %(name)s: %(message)s", stream=sys.stderr)


def _find_command(argv: Sequence[str]) -> Optional[str]:
    for token in argv:
        if not token.startswith("-"):
            return token if token in COMMANDS else None
    return None


def main(argv: Optional[List[str]] = None) -> int:
    """The ``jetforge`` program; ``argv`` None (the console script) means it is the whole process."""
    with stop_signals_as_interrupt(process_exit=argv is None):
        return _main(argv)


def _main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        command_name = _find_command(argv)
        parser = build_parser(command_name)
        try:
            args = parser.parse_args(argv)
        except UsageError as err:  # "unrecognized arguments" comes from the top parser: point to the command's help
            if command_name:
                err.hint = "see `jetforge %s --help`" % command_name
            raise
        if not getattr(args, "command", None):
            parser.print_help()
            return 0
        if args.command not in COMMANDS:  # pragma: no cover - argparse rejects it first
            return 2
        _configure_logging(args)
        _resolve_shipped_names(args)
        code = int(args._command.run(args) or 0)
        sys.stdout.flush()  # a reader that left (`| head`) shows up here, inside the handler below
        return code
    except JetforgeError as err:
        if debug:
            traceback.print_exc(file=sys.stderr)
        print("jetforge: error: %s" % err.one_line(), file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt as err:
        return interrupted("jetforge", err)
    except BrokenPipeError:  # `jetforge ... | head`: the reader left; not an error of ours
        _silence_stdout()
        return 141
    except SystemExit:
        raise
    except Exception as err:  # a bug: say so, and how to see it - unless the OS says the user's disk or path
        user = user_os_error(err)
        if user is not None:
            if debug:
                traceback.print_exc(file=sys.stderr)
            print("jetforge: error: %s" % user.one_line(), file=sys.stderr)
            return EXIT_ERROR
        stop = stop_behind(err)  # a stop Python wrapped (an interrupt inside __set_name__): still a stop
        if stop is not None:
            return interrupted("jetforge", stop)
        if debug:
            traceback.print_exc(file=sys.stderr)
            print("jetforge: internal error (a bug; please report it with the traceback above)", file=sys.stderr)
        else:
            print("jetforge: internal error: %s: %s (rerun with --debug for the traceback, and please report it)"
                  % (type(err).__name__, err), file=sys.stderr)
        return EXIT_BUG


def _resolve_shipped_names(args: argparse.Namespace) -> None:
    """A shipped model's name where a command takes a model file (``--detector-model ssdlite-person-192``)."""
    from jetforge.workflow.shipped_models import resolve_model_names

    for note in resolve_model_names(args.command, args):
        logging.getLogger("jetforge").info(note)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
