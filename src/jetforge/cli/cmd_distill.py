"""``jetforge distill``: the train stage of a recipe (distillation, fine-tuning, the detector and action recipes).

The recipe's ``kind`` picks its runner from :data:`jetforge.compress.recipes.RECIPES`; the run is
:func:`jetforge.compress.recipes.base.run_recipe`, the function ``python -m jetforge.compress.recipes`` (and
``torchrun``) call too.  Without a recipe (``--config``) it prints its usage and exits 1: it never trains a default.
"""

import argparse
import sys

from jetforge.cli.arguments import add_config_flags, add_json_flag
from jetforge.cli.base import Command
from jetforge.errors import ConfigError

DISTILL_RECIPE = "recipes/distill_fashion_mnist.yaml"


def add_recipe_arguments(parser: argparse.ArgumentParser, data_help: str) -> str:
    """``--config``/``--set``/``--print-config``, ``--data`` and ``--json`` of distill and qat; returns the usage line
    printed when no recipe is given."""
    from jetforge.compress.recipes import RECIPES

    add_config_flags(parser)
    parser.add_argument("--data", metavar="DIR", help="%s (recipe kinds: %s)" % (data_help, ", ".join(RECIPES.names())))
    add_json_flag(parser)
    return parser.format_usage()


def no_recipe(usage: str, command: str, example: str) -> ConfigError:
    """The refusal of a training command without a recipe: its usage on stderr, then this one-line error."""
    sys.stderr.write(usage)
    return ConfigError("%s trains from a recipe, and none was given (--config)" % command,
                       hint="%s --config %s (see `%s --help`)" % (command, example, command))


class DistillCommand(Command):
    name = "distill"
    description = (
        "Train a student (e.g. a pruned model) from a frozen teacher with logit distillation (KL at temperature T, "
        "mixed with the task loss) and optional feature distillation (student/teacher layer pairs, learned 1x1 "
        "adapters). Without a teacher it is plain fine-tuning. AMP on CUDA, gradient clipping, cosine schedule with "
        "warm-up, atomic checkpoints with resume, validation every epoch. The run folder (out_dir) receives "
        "config.yaml, metrics.jsonl, last.pt/best.pt, student.pt, model.onnx and result.json. For several GPUs "
        "launch `torchrun --nproc_per_node=N -m jetforge.compress.recipes RECIPE` (the same run on every rank). "
        "Checkpoints (model.checkpoint, teacher.checkpoint: a state dict or a jetforge last.pt/best.pt; "
        "model.prune_plan for one pruned by jetforge prune) are read weights-only; one holding other pickled objects runs code when loaded and needs "
        "model.trust_pickle: true (teacher.trust_pickle), for files you made yourself. A recipe with kind: detector "
        "prunes the SSDLite-MobileNetV2 person detector and distils it from the original on the training segments "
        "of the labelled clips (student.pt, student.onnx + sidecar, result.json in out_dir; --data is then the "
        "folder holding the clips' assets). A recipe with kind: action3d trains the 3D MobileNetV2 action teacher on "
        "clips labelled from person tracks, prunes and distils the student (teacher.onnx, student.onnx + clip "
        "sidecars, teacher.pt, student.pt, report.json in out_dir; --data is then the video, default the vtest.avi "
        "asset), then runs the recipe's int8 stage (`jetforge qat --config` runs that stage again on those models).")
    examples = """examples:
  jetforge distill --config recipes/distill_fashion_mnist.yaml
  jetforge distill --config recipes/distill_fashion_mnist.yaml --set model.checkpoint=pruned/pruned.pt \\
      --set model.prune_plan=pruned/model.prune.json --set model.prune_ratio=null
  jetforge distill --config recipes/distill_fashion_mnist.yaml --set train.epochs=10 --set loss.temperature=2
  jetforge distill --config recipes/distill_fashion_mnist.yaml --set teacher=null --set out_dir=runs/finetune
  jetforge distill --config recipes/distill_fashion_mnist.yaml --print-config
  torchrun --nproc_per_node=2 -m jetforge.compress.recipes recipes/distill_fashion_mnist.yaml --data DIR
  jetforge distill --config recipes/distill_ssdlite_person.yaml          # the person detector (CUDA: minutes)
  jetforge distill --config recipes/distill_ssdlite_person.yaml --set student.macs_factor=2 --print-config
  jetforge distill --config recipes/action_mobilenet3d.yaml             # the 3D action model (CPU: hours)
  jetforge distill --config recipes/action_mobilenet3d.yaml --set teacher.epochs=2 --set student.epochs=2 \\
      --set max_clips=40"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        self.usage = add_recipe_arguments(parser, "the recipe's data: for a classifier the folder with the "
                                                  "Fashion-MNIST .gz files (default: data.root of the recipe, else "
                                                  "the asset cache), for kind: detector the folder holding the "
                                                  "clips' assets, for kind: action3d the video")

    def run(self, args: argparse.Namespace) -> int:
        if not args.config and not args.print_config:
            raise no_recipe(self.usage, "jetforge distill", DISTILL_RECIPE)
        from jetforge.compress.recipes.base import run_recipe

        return run_recipe(args.config, args.overrides, stage="train", data=args.data, as_json=args.json,
                          print_config=args.print_config, progress=not args.json, command="jetforge distill")
