"""``jetforge build``: ONNX + target + options -> a validated build plan -> a TensorRT engine and its sidecar."""

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

from jetforge.cli.arguments import (add_config_flags, add_dla_core_flag, add_json_flag, add_out_flag,
                                    add_precision_flag, add_shape_flag, add_target_flag, add_tensorrt_flag,
                                    shape_values)
from jetforge.cli.base import Command, print_json
from jetforge.config import to_dict
from jetforge.deploy.bundle import is_bundle_path
from jetforge.deploy.onboard import EXIT_NO_TENSORRT, NO_TENSORRT, build_bundle
from jetforge.errors import ConfigError, DependencyError
from jetforge.fileio import check_not_input
from jetforge.runtime.tensorrt.builder import build_engine
from jetforge.runtime.tensorrt.library import installed_version
from jetforge.runtime.tensorrt.trtexec import build_command
from jetforge.runtime.tensorrt.plan import JETPACK_HINT, WORKSPACE_MIB, load_build_options, make_plan, parse_shape
from jetforge.targets import get_target


class BuildCommand(Command):
    name = "build"
    description = ("Computes the build plan (flags, DLA core, INT8 source, memory pools, profiles) and checks it\n"
                   "against the target and TensorRT version before TensorRT is touched. If TensorRT is installed\n"
                   "(on the Jetson: JetPack's python3-libnvinfer) the plan is built into model.engine with its\n"
                   "sidecar model.engine.json and a build report with per-layer placement; otherwise the plan is\n"
                   "written as JSON and the command says what is missing.")
    examples = """examples:
  jetforge build model.onnx --target orin-nx-16gb --precision fp16
  jetforge build model.onnx --target agx-orin-64gb --dla-core 0 --precision int8 --calib model.calib
  jetforge build model.onnx --target agx-orin-64gb --shape input=1x3x224x224 --plan-only --json
  jetforge build model.onnx --target agx-orin-64gb --config build.yaml --set workspace_mib=2048
  jetforge build bundles/cam --target auto    # on the board: a bundle, through the engine cache (exit 3: no TensorRT)"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("model", help="ONNX model (plain, or Q/DQ for TensorRT >= 10 GPU / 11), or a bundle "
                                          "folder/tar from `jetforge bundle create` (see docs/deploy.md)")
        add_target_flag(parser, required=False)
        add_precision_flag(parser, "default fp16")
        add_dla_core_flag(parser, "build for DLA core N (with GPU fallback)")
        parser.add_argument("--no-gpu-fallback", action="store_true", help="fail if a layer cannot run on DLA")
        parser.add_argument("--calib", metavar="CACHE", help="INT8 calibration cache (from `jetforge calibrate`)")
        add_tensorrt_flag(parser, "TensorRT version (default: the target's newest)")
        add_shape_flag(parser, "static input shape, e.g. input=1x3x224x224 (repeatable, or comma-separated)")
        parser.add_argument("--workspace-mib", type=WORKSPACE_MIB.argtype, metavar="MIB",
                            help="workspace memory pool limit (at most the target's memory)")
        parser.add_argument("--timing-cache", metavar="FILE", help="read and update a TensorRT timing cache")
        add_out_flag(parser, "ENGINE", "engine path (default: MODEL.engine)", aliases=("--output",))
        parser.add_argument("--plan-only", action="store_true", help="write the plan JSON, do not build")
        add_config_flags(parser)
        add_json_flag(parser)

    def run(self, args: argparse.Namespace) -> int:
        if is_bundle_path(args.model):  # a bundle: board detection, cache/Q-DQ choice, engine cache
            return run_bundle_build(args)
        base = build_flag_options(args)
        if args.calib:
            base["calibration_cache"] = args.calib
        if args.tensorrt:
            base["tensorrt_version"] = args.tensorrt
        if args.timing_cache:
            base["timing_cache"] = args.timing_cache
        # command-line flags win over the YAML file and --set
        options = load_build_options(args.config, args.overrides)
        if base:
            options = dataclasses.replace(options, **base)
        if args.print_config:
            print_json(to_dict(options))
            return 0

        model = Path(args.model)
        engine = Path(args.out) if args.out else model.with_suffix(".engine")
        plan_json = Path(str(engine) + ".plan.json")
        check_not_input(engine, [model, args.calib])
        if not args.target:
            raise ConfigError("--target is required to build an ONNX model",
                              hint="pass --target NAME (see `jetforge targets list`)")
        target = get_target(args.target)
        installed: Optional[str] = installed_version()
        have_trt = installed is not None
        plan = make_plan(model, target, options, installed_tensorrt=installed)

        trtexec = build_command(plan, engine)  # the same build with NVIDIA's trtexec, to repeat or compare
        if args.plan_only or not have_trt:
            plan.write(plan_json)
            self._show(dict(plan.to_dict(), trtexec=trtexec), args.json, [("plan", str(plan_json))])
            if not args.plan_only:
                raise DependencyError("TensorRT is not installed here: wrote the plan %s but built no engine"
                                      % plan_json, hint=JETPACK_HINT)
            return 0

        result = build_engine(plan, engine)
        plan.write(plan_json)
        summary = {"engine": str(result.engine_path), "sidecar": str(result.sidecar_path),
                   "report": str(result.report_path), "engine_bytes": result.engine_bytes,
                   "build_seconds": round(result.seconds, 3), "notes": result.notes,
                   "placement": result.report.get("inspector", {}).get("summary"), "trtexec": trtexec}
        self._show(summary if args.json else dict(plan.to_dict(), trtexec=trtexec), args.json,
                   [("engine", str(result.engine_path)), ("sidecar", str(result.sidecar_path)),
                    ("report", str(result.report_path))])
        return 0

    @staticmethod
    def _show(data: Dict[str, Any], as_json: bool, files: List[Any]) -> None:
        if as_json:
            print_json(dict(data, files=dict(files)))
            return
        for key in ("target", "tensorrt_version", "precision", "device", "dla_core", "gpu_fallback", "flags",
                    "int8_source", "calibration_header", "memory_pools", "profiles"):
            if key in data:
                print("%-20s %s" % (key, data[key]))
        for note in data.get("notes", []):
            print("note: %s" % note)
        if data.get("trtexec"):
            print("%-20s %s" % ("trtexec", data["trtexec"]))
        for name, path in files:
            print("wrote %-14s %s" % (name, path))


def build_flag_options(args: argparse.Namespace) -> Dict[str, Any]:
    """BuildOptions fields set by the flags `build`, `bundle create` and a bundle build share.

    Only flags the user gave appear, so they can override a YAML file or a bundle's manifest.
    """
    options: Dict[str, Any] = {}
    if getattr(args, "precision", None):
        options["precision"] = args.precision
    if getattr(args, "dla_core", None) is not None:
        options["dla_core"] = args.dla_core
    if getattr(args, "no_gpu_fallback", False):
        options["gpu_fallback"] = False
    if getattr(args, "shape", None):
        options["input_shapes"] = dict(parse_shape(s) for s in shape_values(args))
    if getattr(args, "workspace_mib", None) is not None:
        options["workspace_mib"] = args.workspace_mib
    return options


def run_bundle_build(args: argparse.Namespace) -> int:
    """``jetforge build BUNDLE``: the bundle half of ``jetforge build`` (see :mod:`jetforge.deploy.onboard`).

    Exit 0 with an engine (built, or loaded from the engine cache); exit
    :data:`~jetforge.deploy.onboard.EXIT_NO_TENSORRT` (3) where TensorRT is not installed, after saying
    so and naming the ONNX Runtime fallback; exit 1 with one line for any other problem.
    """
    for flag, value in (("--calib", args.calib), ("--timing-cache", args.timing_cache), ("--config", args.config),
                        ("--set", args.overrides), ("--print-config", args.print_config)):
        if value:
            raise ConfigError("%s does not apply to a bundle: its build options and caches travel in its manifest"
                              % flag, hint="re-create the bundle with `jetforge bundle create` (--calib, "
                                           "--build-config), or override with --precision/--dla-core/--shape")
    overrides = build_flag_options(args)
    result = build_bundle(args.model, target=args.target or "auto", tensorrt=args.tensorrt, overrides=overrides,
                          plan_only=args.plan_only, output=args.out)
    board = result["board"]
    if args.json:
        print_json(result)
    else:
        print("bundle     %s (hash %s)" % (result["bundle"], result["bundle_hash"][:12]))
        print("board      %s (%s); TensorRT %s" % (board["target"] or "not detected", board["how"],
                                                   board["tensorrt_installed"] or "not installed"))
        plan = result.get("plan") or {}
        for key in ("tensorrt_version", "precision", "device", "dla_core", "int8_source", "flags"):
            if key in plan:
                print("%-10s %s" % (key, plan[key]))
        for note in result.get("notes", []):
            print("note: %s" % note)
        if result.get("engine"):
            print("engine     %s (%s)" % (result["engine"], "loaded from the engine cache, no rebuild"
                                          if result.get("cache") == "hit" else "built and cached"))
    if result.get("fallback") and not args.plan_only:
        print("jetforge: %s: no engine built for bundle %s. `jetforge bench %s` runs it on ONNX Runtime instead "
              "(ONNX Runtime speed, not TensorRT) (fix: %s)"
              % (NO_TENSORRT, result["bundle_name"], result["fallback"]["model"], JETPACK_HINT), file=sys.stderr)
        return EXIT_NO_TENSORRT
    return 0
