"""``jetforge prune``: structured channel pruning of a torch model, with its plan, report and ONNX export."""

import argparse
import dataclasses
import logging
from pathlib import Path
from typing import Any, Dict, List

from jetforge.cli.arguments import (add_config_flags, add_json_flag, add_latency_source_flag, add_latency_table_flag,
                                    add_model_flags, add_out_flag, add_precision_flag, add_target_flag,
                                    load_model_from_args, model_input_paths)
from jetforge.cli.base import Command, parse_input_shape, print_config, print_json
from jetforge.errors import CompressError, ConfigError

log = logging.getLogger(__name__)


class PruneCommand(Command):
    name = "prune"
    description = (
        "Remove whole channels from a torch model (for real: smaller weight tensors), keeping every coupled layer "
        "consistent (residuals, concat, split, depthwise/grouped conv, SE, flatten->Linear). Kept channel counts "
        "are rounded to the target's channel multiple. Writes into --out: pruned.pt (state dict), "
        "model.prune.json (the plan: replay it on a fresh model to load pruned.pt), prune_report.{json,txt,png} "
        "and model.onnx with its sidecar. Operations the pruner cannot follow are protected and listed. Your own "
        "weights load onto the named architecture with --weights (a state dict, read weights-only); to load "
        "pruned.pt later: --model ARCH --prune-plan model.prune.json --weights pruned.pt (export, prune). A whole "
        "pickled module (.pt) runs code when loaded: jetforge opens it only with --trust-pickle. The pruning options "
        "can come from --config FILE.yaml and --set KEY=VALUE (the keys of --print-config); a flag given on the "
        "command line wins over both (a goal flag replaces the file's goal), --set over the file. The pruned model "
        "must run in eval and in train mode (both are analysed; a prune that fails changes nothing and names the "
        "module); a FLOPs/parameter goal overshot by more than 5% is warned about; a classifier's top-1 agreement "
        "with the original is measured on 48 real images from the asset cache and a WARNING printed below 50% or "
        "when it answers one class for most of them: fine-tune (or distil) before calibrate, bundle or app.")
    examples = """examples:
  jetforge prune --model mobilenet_v2 --flops-reduction 2.0 --target orin-nx-16gb --out pruned/
  jetforge prune --model resnet50 --ratio 0.5 --importance l2 --round-to 16 --out r50/
  jetforge prune --model r3d_18 --weights my_r3d.pt --input-shape 1,3,8,112,112 --ratio 0.3 --global --out out/
  jetforge export --model resnet50 --prune-plan r50/model.prune.json --weights r50/pruned.pt --out r50.onnx
  jetforge prune --model mobilenet_v2 --latency-reduction 1.5 --measure-latency --out fast/
  jetforge prune --model resnet50 --flops-reduction 2.0 --latency-aware --input-shape 1,3,224,224 --out la/
  jetforge prune --model mobilenet_v2 --flops-reduction 2.0 --latency-aware --target orin-nx-16gb --out la/
  jetforge prune --model mobilenet_v2 --flops-reduction 2.0 --latency-aware --latency-source cpu --out la/
  jetforge prune --model resnet50 --config prune.yaml --set min_keep=0.2 --ratio 0.4 --out r50/   (flags win)"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--model", metavar="NAME|PATH.pt",
                            help="mobilenet_v2 (pretrained, from the asset cache), a torchvision architecture name "
                                 "(random weights unless --weights), or, with --trust-pickle, a file saved with "
                                 "torch.save(model) (required)")
        add_model_flags(parser)
        goal = parser.add_mutually_exclusive_group()
        goal.add_argument("--ratio", type=float, help="fraction of coupled channels to remove, in [0, 1)")
        goal.add_argument("--flops-reduction", type=float, metavar="FACTOR", help="e.g. 2.0 = half the MACs")
        goal.add_argument("--params-reduction", type=float, metavar="FACTOR", help="e.g. 2.0 = half the parameters")
        goal.add_argument("--latency-reduction", type=float, metavar="FACTOR",
                          help="e.g. 1.5 = 1.5x faster, timed by --latency-source (CPU ONNX Runtime unless "
                               "--target names a board: then the estimate on it)")
        from jetforge.compress.prune.importance import CRITERIA, criteria_without_data

        offered = criteria_without_data()
        parser.add_argument("--importance", choices=offered,
                            help="channel importance criterion (default l1): %s; criteria that need data (%s) are "
                                 "for the Python API" % ("; ".join("%s = %s" % (n, CRITERIA.summary(n))
                                                                   for n in offered),
                                                         ", ".join(n for n in CRITERIA if n not in offered)))
        parser.add_argument("--global", dest="global_ranking", action="store_true", default=None,
                            help="rank channels across the whole model instead of a uniform ratio per layer")
        parser.add_argument("--min-keep", type=float, help="per-layer floor with --global (default 0.1)")
        parser.add_argument("--round-to", type=int, choices=[1, 4, 8, 16, 32],
                            help="keep channel counts a multiple of this (default: the target's, else 8)")
        add_target_flag(parser)
        parser.add_argument("--protect", action="append", default=None, metavar="MODULE",
                            help="keep this module's output channels (repeatable; prefixes match; replaces protect "
                                 "of --config)")
        parser.add_argument("--no-protect-stem", action="store_true", default=None,
                            help="allow pruning the first convolution")
        parser.add_argument("--input-shape", default="1,3,224,224", help="example input, batch first")
        parser.add_argument("--latency-aware", action="store_true", default=None,
                            help="time each channel group's cut (--latency-source) at --input-shape and prune where "
                                 "the most time is saved per importance lost (needs a reduction goal, not --ratio)")
        add_latency_source_flag(parser, "what times the cuts and the latency goal: estimate = jetforge estimate on "
                                        "--target's board at --precision (the default when --target is a Jetson "
                                        "board), measured = this machine's CUDA GPU or --latency-table, cpu = ONNX "
                                        "Runtime on this CPU (the default otherwise)")
        add_latency_table_flag(parser, "with --latency-source measured: the prune_report.json of a run measured on "
                                       "the board or GPU (its latency table is reused, nothing is timed here)")
        add_precision_flag(parser, "precision of --latency-source estimate (default int8 where the board's GPU "
                                   "runs it, else fp16)")
        parser.add_argument("--measure-latency", action="store_true", default=None,
                            help="measure latency before/after in CPU ONNX Runtime for the report")
        parser.add_argument("--strict", action="store_true",
                            help="exit 1 when a --latency-reduction goal is not reached (the fastest model found is "
                                 "saved either way; without --strict it is saved with a warning and exit 0)")
        parser.add_argument("--no-onnx", action="store_true", help="do not export the pruned model to ONNX")
        parser.add_argument("--no-plot", action="store_true", help="do not draw the report plot")
        add_out_flag(parser, "DIR", "output folder (required)")
        add_config_flags(parser)
        add_json_flag(parser)

    def run(self, args: argparse.Namespace) -> int:
        options = prune_options(args)  # checked, the goal included, before the model is loaded
        if args.print_config:
            print_config(options)
            return 0
        options.goal()
        for flag, value in (("--model", args.model), ("--out", args.out)):
            if not value:
                raise ConfigError("%s is required" % flag,
                                  hint="jetforge prune --model mobilenet_v2 --flops-reduction 2 --out DIR")
        shape = parse_input_shape(args.input_shape)
        if options.target == "auto":
            from jetforge.targets import detect_target

            found = detect_target()
            options = dataclasses.replace(options, target=found.name if found is not None else None)
        import torch

        from jetforge.compress.prune import prune
        from jetforge.compress.prune.outputs import OUTPUT_FILES, save_pruned

        if args.prune_plan:
            raise ConfigError("jetforge prune does not prune an already pruned model yet: its new plan would only "
                              "replay on the pruned model, not on %s" % args.model,
                              hint="prune the unpruned weights to the combined goal: --model %s --weights FILE"
                                   % args.model)
        if Path(args.model).suffix.lower() == ".pt2":
            raise ConfigError("%s is a torch.export program, whose graph is fixed: it cannot be pruned" % args.model,
                              hint="prune the model it was exported from: --model ARCH --weights STATE_DICT.pt")
        model, meta = load_model_from_args(args)
        out = Path(args.out)
        from jetforge.fileio import check_not_input

        for written in OUTPUT_FILES:
            check_not_input(out / written, model_input_paths(args))
        out.mkdir(parents=True, exist_ok=True)
        x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
        from jetforge.compress.models import PRETRAINED
        from jetforge.compress.prune.agreement import AgreementCheck, warning_line

        # pruned on a copy: the original answers the agreement check's images afterwards
        result = prune(model, x, dataclasses.replace(options, inplace=False))
        random_weights = not args.weights and not Path(args.model).is_file() and args.model not in PRETRAINED
        check = AgreementCheck.prepare(model, shape, meta.get("preprocess"), meta.get("labels") or (),
                                       random_weights=random_weights)
        result.report.extra["agreement"] = check.measure(result.model)
        warning = warning_line(result.report.extra["agreement"])
        # one set: the files are moved into place together once all are written (a stopped rerun mixes nothing)
        files = {k: str(v) for k, v in save_pruned(result, out, args.model, meta, shape, onnx=not args.no_onnx,
                                                   plot=not args.no_plot, keep=model_input_paths(args)).items()}
        if args.json:
            data = result.report.to_dict()
            data["files"] = files
            print_json(data)
            if warning:
                log.warning("%s", warning.replace("WARNING  ", "", 1))
            return _goal_exit(result, args)
        print("\n".join(_summary(result, args, files, warning)))
        return _goal_exit(result, args)


def _summary(result: Any, args: argparse.Namespace, files: Dict[str, str], warning: Any) -> List[str]:
    """What the run printed: totals, files, warnings (latency goal missed, FLOPs goal overshot, agreement with the
    original), then what was protected."""
    totals = result.report.to_dict()["totals"]
    lines = ["pruned %s: MACs %.1fM -> %.1fM (%.2fx), parameters %.2fM -> %.2fM (%.2fx), round to %d"
             % (args.model, totals["macs_before"] / 1e6, totals["macs_after"] / 1e6, totals["flops_reduction"],
                totals["params_before"] / 1e6, totals["params_after"] / 1e6, totals["params_reduction"],
                result.plan.meta["round_to"])]
    lat = result.report.to_dict()["latency"]
    if lat["speedup"]:
        lines.append("  latency  %.2f ms -> %.2f ms (%.2fx, %s)" % (lat["ms_before"], lat["ms_after"],
                                                                 lat["speedup"], lat["backend"]))
    for key in ("plan", "state_dict", "json", "table", "plot", "onnx"):
        if key in files:
            lines.append("  %-11s %s" % (key, files[key]))
    goal = result.report.extra.get("goal")
    if goal and not goal["met"]:
        lines.append("  WARNING  latency goal %.2fx not reached: the search's best measured %.2fx; that model is "
                     "saved above" % (goal["value"], goal["achieved"]))
    if goal and goal.get("within_tolerance") is False:
        lines.append("  WARNING  %s goal %.2fx overshot: %.2fx achieved, more than %d%% over (channels go in "
                     "whole groups here: grouped convolutions lose whole groups, counts stay multiples of "
                     "--round-to)" % (goal["name"], goal["value"], goal["achieved"],
                                      round(100 * goal["tolerance"])))
    agreement = result.report.extra["agreement"]
    if agreement.get("measured"):
        lines.append("  agreement top-1 %.2f with the original on %d real images; most common answer %r on %.0f%%"
                     % (agreement["top1_agreement"], agreement["samples"], agreement["most_common"],
                        100 * agreement["most_common_share"]))
    if warning:
        lines.append("  " + warning)
    for p in result.report.protected:
        lines.append("  protected %s (%s): %s" % (p["where"], p["op"], p["reason"]))
    return lines


# flag dest -> PruneOptions key; only flags given on the command line are used, and they win over --config and
# --set.  A goal flag replaces the file's goal (the four are one choice); --no-protect-stem is mapped below.
# --strict is the command's exit status, not the option strict (which makes prune() raise before anything is saved).
FLAG_KEYS = {"ratio": "ratio", "flops_reduction": "flops_reduction", "params_reduction": "params_reduction",
             "latency_reduction": "latency_reduction", "importance": "importance", "global_ranking": "global_ranking",
             "min_keep": "min_keep", "round_to": "round_to", "target": "target", "protect": "protect",
             "latency_aware": "latency_aware", "measure_latency": "measure_latency",
             "latency_source": "latency_source", "latency_table": "latency_table_file",
             "precision": "latency_precision"}


def prune_options(args: argparse.Namespace) -> Any:
    """The run's :class:`~jetforge.compress.prune.options.PruneOptions`: defaults <- ``--config`` <- ``--set`` <-
    the flags given on the command line."""
    from jetforge.compress.prune.options import GOALS, load_prune_options

    final: Dict[str, Any] = {key: getattr(args, dest) for dest, key in FLAG_KEYS.items()
                             if getattr(args, dest) is not None}
    if any(goal in final for goal in GOALS):
        final = dict({goal: None for goal in GOALS}, **final)
    if args.no_protect_stem:
        final["protect_stem"] = False
    return load_prune_options(args.config, args.overrides, final=final)


def _goal_exit(result: Any, args: argparse.Namespace) -> int:
    """0, or (``--strict`` and a latency goal missed) a one-line error after everything was saved."""
    goal = result.report.extra.get("goal")
    if goal and not goal["met"] and args.strict:
        raise CompressError("latency goal %.2fx not reached (--strict): best measured %.2fx; the fastest model found "
                            "is saved in %s" % (goal["value"], goal["achieved"], args.out),
                            hint="ask for less%s; the saved model is usable as it is"
                                 % ("" if result.plan.meta.get("latency_aware") else ", or add --latency-aware"))
    return 0
