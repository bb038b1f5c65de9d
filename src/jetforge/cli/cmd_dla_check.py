"""``jetforge dla-check``: predict which layers of an ONNX model a target's DLA runs, and why not."""

import argparse
from typing import List, Tuple

from jetforge.cli.arguments import (add_json_flag, add_precision_flag, add_shape_flag, add_target_flag, add_tensorrt_flag,
                                    shape_values)
from jetforge.cli.base import Command, print_json
from jetforge.config import COUNT, NON_NEGATIVE
from jetforge.errors import ConfigError, JetforgeError


class DlaCheckError(JetforgeError):
    """``--strict`` found layers that would fall back to the GPU."""


class DlaCheckCommand(Command):
    name = "dla-check"
    description = ("Before any board is involved: for each layer, whether the target's DLA can run it under its\n"
                   "DLA generation and TensorRT version, and if not, which documented restriction it breaks.\n"
                   "Prints the predicted GPU-fallback layers, the number of DLA subgraphs against the per-core\n"
                   "loadable limit, the share of FLOPs on DLA and suggestions. Each rule cites its source (the\n"
                   "TensorRT developer guide's DLA chapters); '?' marks verdicts that rest on uncertain rules.")
    examples = """examples:
  jetforge dla-check model.onnx --target agx-orin-64gb
  jetforge dla-check model.onnx --target agx-xavier --precision int8 --calib model.calib
  jetforge dla-check model.onnx --target orin-nx-16gb --shape input=1x3x224x224 --strict
  jetforge dla-check model.onnx --target agx-orin-64gb --loadables-per-core 4 --json
  jetforge dla-check clip_model.onnx --target orin-nx-16gb --fold-time clip_model.folded.onnx"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("model", help="ONNX model")
        add_target_flag(parser, required=True)
        add_precision_flag(parser, "build precision to check for (default fp16; the DLA runs FP16 or INT8, so fp32 is "
                                   "analysed as FP16 with a note: an fp32 build puts every layer on the GPU)",
                           default="fp16")
        add_tensorrt_flag(parser, "TensorRT version (default: the target's newest)")
        add_shape_flag(parser, "fix a dynamic input, e.g. input=1x3x224x224 (repeatable, or comma-separated)")
        parser.add_argument("--calib", metavar="CACHE", help="calibration cache: enables INT8 range-equality checks")
        parser.add_argument("--loadables-per-core", type=COUNT.argtype, metavar="N",
                            help="DLA loadables per core (default: the target's setting; 16 in recent docs, 4 in 8.4)")
        parser.add_argument("--strict", action="store_true",
                            help="exit 1 if any layer would fall back to the GPU or the loadable limit is exceeded")
        parser.add_argument("--all-layers", action="store_true", help="also list layers folded at build time")
        parser.add_argument("--fold-time", metavar="OUT.onnx",
                            help="clip models: write the exact rewrite that folds time into the batch around every "
                                 "1xkxk convolution/pool ((N,C,T,H,W) -> (N*T,C,H,W)), keeping as many folded "
                                 "regions as fit the loadables per core, and check that model instead")
        parser.add_argument("--fold-regions", type=NON_NEGATIVE.argtype, metavar="N",
                            help="with --fold-time: fold at most N regions (the biggest; default: as many as fit)")
        add_json_flag(parser)

    def run(self, args: argparse.Namespace) -> int:
        from jetforge.runtime.tensorrt.calib_cache import parse_calibration_cache
        from jetforge.runtime.tensorrt.plan import parse_shape
        from jetforge.runtime.tensorrt.dla.analyze import analyze_onnx
        from jetforge.runtime.tensorrt.dla.report import format_table
        from jetforge.targets import get_target

        target = get_target(args.target)
        if args.loadables_per_core is not None and args.loadables_per_core < 1:
            raise ConfigError("--loadables-per-core must be at least 1", hint="e.g. --loadables-per-core 16")
        shapes = dict(parse_shape(s) for s in shape_values(args))
        assumed = [] if shapes else _batch_one_shapes(args.model)
        if assumed:
            shapes = dict(assumed)
        scales = None
        if args.calib:
            from jetforge.fileio import require_file

            scales = parse_calibration_cache(require_file(args.calib, "calibration cache").read_bytes(),
                                             args.calib).scales
        options = dict(target=target, tensorrt_version=args.tensorrt, precision=args.precision,
                       loadables_per_core=args.loadables_per_core, input_shapes=shapes or None, cache_scales=scales)
        fold = None
        if args.fold_time:
            fold, analysis = _fold_time(args, options)
        else:
            analysis = analyze_onnx(args.model, **options)
        failures = analysis.strict_failures() if args.strict else []
        if args.json:
            data = analysis.to_dict()
            data["strict"] = {"enabled": bool(args.strict), "failures": failures}
            if fold is not None:
                data["fold_time"] = dict(fold.to_dict(), output=args.fold_time)
            print_json(data)
        else:
            print(format_table(analysis, all_layers=args.all_layers))
            if fold is not None:
                print("time folded: %d convolution/pool layers as 2-D over N*T frames, %d per-frame layers with them, "
                      "%d region(s)%s; wrote %s" % (len(fold.seeds), len(fold.per_frame), fold.regions,
                                                    " (%d more left 3-D to fit the loadables per core)"
                                                    % fold.regions_dropped if fold.regions_dropped else "",
                                                    args.fold_time))
                print("note: DLA time, transitions and the GPU shuffles they need can outweigh what folding frees on "
                      "the GPU; compare `jetforge estimate MODEL --dla-core 0` on both files before deploying")
            for name, dims in assumed:
                print("note: assumed %s=%s (the dynamic batch axis set to 1: DLA needs static shapes; "
                      "pass --shape to choose)" % (name, "x".join(str(d) for d in dims)))
        if failures:
            raise DlaCheckError("--strict: %d problem(s), first: %s" % (len(failures), failures[0]),
                                hint="apply the suggestions above, or drop --strict to allow GPU fallback")
        return 0


def _fold_time(args: argparse.Namespace, options: dict) -> Tuple[object, object]:
    """--fold-time: rewrite, analyse the rewritten model, write it (with the sidecar) next to the user's choice."""
    from jetforge.fileio import check_not_input, check_output_path
    from jetforge.runtime.onnx_file import read_onnx
    from jetforge.runtime.tensorrt.dla.fold_time import fold_for_dla, write_folded

    if args.fold_regions is not None and args.fold_regions < 0:
        raise ConfigError("--fold-regions must be at least 0", hint="e.g. --fold-regions 8")
    check_not_input(args.fold_time, [args.model])
    check_output_path(args.fold_time)
    proto = read_onnx(args.model, purpose="folding time into the batch (dla-check --fold-time)")
    fold, analysis = fold_for_dla(proto, args.fold_regions, **options)
    write_folded(fold, args.model, args.fold_time)
    analysis.model = args.fold_time
    if args.calib:
        analysis.notes.append("the calibration cache names the original model's tensors; folded regions have new "
                              "names, so calibrate %s itself for its INT8 checks and its DLA build" % args.fold_time)
    return fold, analysis


def _batch_one_shapes(model: str) -> List[Tuple[str, List[int]]]:
    """Inputs whose only dynamic axis is the batch: their shapes with batch 1 (from the sidecar, else the ONNX)."""
    from jetforge.runtime.sidecar import TensorSpec, read_sidecar, sidecar_path, static_shape

    try:
        if sidecar_path(model).is_file():
            specs = read_sidecar(model, verify_hash=False).inputs
        else:
            from jetforge.runtime.onnx_file import read_onnx

            graph = read_onnx(model, load_external_data=False, purpose="reading ONNX input shapes").graph
            inits = {i.name for i in graph.initializer}
            specs = [TensorSpec(i.name, [d.dim_value if d.HasField("dim_value") else -1
                                         for d in i.type.tensor_type.shape.dim])
                     for i in graph.input if i.name not in inits]
        return [(s.name, static_shape(s, 1, "dla-check")) for s in specs if s.is_dynamic]
    except (JetforgeError, OSError, ValueError):
        return []  # other dynamic axes or an unreadable file: the analysis itself reports them (read_onnx)
