"""``jetforge distill``: knowledge distillation (or plain fine-tuning) from a YAML recipe."""

import argparse
from typing import Any, Callable, Dict, Optional, Tuple

from jetforge.cli.base import Command, add_config_flags, add_json_flag, print_json


def load_recipe(args: argparse.Namespace, cfg_cls: Any) -> Optional[Any]:
    """The recipe ``--config`` + ``--set`` describe, with the data folder resolved; None after ``--print-config``.

    The data folder is ``--data DIR``, else the recipe's ``data.root``, else the Fashion-MNIST asset cache.
    Shared by ``distill`` and ``qat``.
    """
    from jetforge.config import load_config

    overrides = list(args.overrides)
    if args.print_config:
        print_config(load_config(cfg_cls, args.config, overrides))
        return None
    if args.data:
        return load_config(cfg_cls, args.config, overrides + ["data.root=%s" % args.data])
    cfg = load_config(cfg_cls, args.config, overrides)
    if cfg.data.root is not None:
        return cfg
    from jetforge.assets import asset_path

    root = asset_path("fashion_mnist", "train-images-idx3-ubyte.gz").parent
    return load_config(cfg_cls, args.config, overrides + ["data.root=%s" % root])


def recipe_kind(args: argparse.Namespace, kinds: Optional[Dict[str, Tuple[str, Any]]] = None,
                command: str = "jetforge distill") -> str:
    """Which runner a recipe is for: its ``kind`` key (or ``--set kind=...``); no kind is a classifier recipe.

    ``kind: detector`` is the SSDLite person detector's recipe (``recipes/distill_ssdlite_person.yaml``),
    ``kind: action3d`` the 3D MobileNetV2 action recipe (``recipes/action_mobilenet3d.yaml``).  ``kinds``: the
    command's table of kinds (default: this command's :data:`RECIPE_KINDS`; ``jetforge qat`` passes its own).
    """
    from jetforge.config import parse_override, read_yaml
    from jetforge.errors import ConfigError

    kinds = RECIPE_KINDS if kinds is None else kinds
    kind = read_yaml(args.config).get("kind") if args.config else None
    for text in args.overrides:
        keys, value = parse_override(text)
        if keys == ["kind"]:
            kind = value
    if kind is not None and kind not in kinds:
        raise ConfigError("recipe kind %r is not one %s knows" % (kind, command),
                          hint="use %s or leave kind out (a classifier recipe)"
                               % ", ".join("kind: %s (%s)" % (k, what) for k, (what, _) in kinds.items()))
    return kind or "classifier"


def run_detector_recipe(args: argparse.Namespace) -> int:
    """``kind: detector``: prune + distil + export the person detector; ``--data`` is the clips' asset folder."""
    from jetforge.compress.distill.detection_recipe import DetectorDistillConfig, run_recipe
    from jetforge.config import load_config

    overrides = list(args.overrides) + (["data.assets_root=%s" % args.data] if args.data else [])
    cfg = load_config(DetectorDistillConfig, args.config, overrides)
    if args.print_config:
        print_config(cfg)
        return 0
    result = run_recipe(cfg)
    summary = {k: result[k] for k in ("name", "device", "frames", "macs", "seconds", "files")}
    summary["steps_done"] = result["train"]["steps_done"]
    if args.json:
        print_json(summary)
        return 0
    macs = summary["macs"]
    lines = ["%s: student distilled on %s, %d step(s) on %d training frames, %.1f M MACs (teacher %.1f M, "
             "%.2fx fewer)" % (cfg.name, summary["device"], summary["steps_done"], summary["frames"],
                               macs["student"] / 1e6, macs["teacher"] / 1e6, macs["teacher"] / macs["student"])]
    lines += ["  %-11s%s" % (k, v) for k, v in summary["files"].items()]
    print("\n".join(lines))
    return 0


def run_action3d_recipe(args: argparse.Namespace) -> int:
    """``kind: action3d``: tracks -> labelled clips -> teacher -> pruned, distilled student; ``--data`` is the video.

    The same runner, outputs and printed summary as ``python -m jetforge.compress.action.mobilenet3d_recipe``;
    the recipe and the video are checked before the tracks are made or anything is trained.
    """
    from jetforge.compress.action.action3d import Action3DRecipe
    from jetforge.compress.action.mobilenet3d_recipe import recipe_video, run_recipe, summary_lines
    from jetforge.config import load_config

    cfg = load_config(Action3DRecipe, args.config, list(args.overrides))
    if args.print_config:
        print_config(cfg)
        return 0
    report = run_recipe(cfg, recipe_video(args.data), progress=not args.json)
    if args.json:  # with the int8 stage on, its simulated-INT8 held-out accuracies too
        print_json({k: report[k] for k in ("what_it_recognizes", "teacher", "student", "prune", "int8", "seconds",
                                           "files") if k in report})
        return 0
    print("\n".join(summary_lines(report, cfg)))
    return 0


# The recipe kinds besides the classifier recipe: one table for the check, its hint and the dispatch.
RECIPE_KINDS: Dict[str, Tuple[str, Callable[[argparse.Namespace], int]]] = {
    "detector": ("the SSDLite person detector's recipe", run_detector_recipe),
    "action3d": ("the 3D action recipe", run_action3d_recipe),
}


def print_config(cfg: Any) -> None:
    import yaml

    from jetforge.config import to_dict

    print(yaml.safe_dump(to_dict(cfg), sort_keys=False), end="")


class DistillCommand(Command):
    name = "distill"
    description = (
        "Train a student (e.g. a pruned model) from a frozen teacher with logit distillation (KL at temperature T, "
        "mixed with the task loss) and optional feature distillation (student/teacher layer pairs, learned 1x1 "
        "adapters). Without a teacher it is plain fine-tuning. AMP on CUDA, gradient clipping, cosine schedule with "
        "warm-up, atomic checkpoints with resume, validation every epoch. The run folder (out_dir) receives "
        "config.yaml, metrics.jsonl, last.pt/best.pt, student.pt, model.onnx and result.json. For several GPUs "
        "launch `torchrun --nproc_per_node=N -m jetforge.compress.distill RECIPE`. Checkpoints (model.checkpoint, "
        "teacher.checkpoint: a state dict or a jetforge last.pt/best.pt; model.prune_plan for one pruned by jetforge "
        "prune) are read weights-only; one holding other pickled objects runs code when loaded and needs "
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
  torchrun --nproc_per_node=2 -m jetforge.compress.distill recipes/distill_fashion_mnist.yaml --data DIR
  jetforge distill --config recipes/distill_ssdlite_person.yaml          # the person detector (CUDA: minutes)
  jetforge distill --config recipes/distill_ssdlite_person.yaml --set student.macs_factor=2 --print-config
  jetforge distill --config recipes/action_mobilenet3d.yaml             # the 3D action model (CPU: hours)
  jetforge distill --config recipes/action_mobilenet3d.yaml --set teacher.epochs=2 --set student.epochs=2 \\
      --set max_clips=40"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_config_flags(parser)
        parser.add_argument("--data", metavar="DIR", help="folder with the Fashion-MNIST .gz files (default: "
                                                          "data.root of the recipe, else the asset cache); for "
                                                          "kind: detector the folder holding the clips' assets; for "
                                                          "kind: action3d the video")
        add_json_flag(parser)

    def run(self, args: argparse.Namespace) -> int:
        from jetforge.compress.distill import DistillConfig, distill

        kind = recipe_kind(args)
        if kind in RECIPE_KINDS:
            return RECIPE_KINDS[kind][1](args)
        cfg = load_recipe(args, DistillConfig)
        if cfg is None:
            return 0
        res = distill(cfg)
        data = res.to_dict()
        if args.json:
            print_json(data)
            return 0
        lines = ["%s: %s accuracy %.4f (best %.4f at epoch %d), started at %.4f%s"
                 % (cfg.name, "distilled" if cfg.teacher else "fine-tuned", data["final_accuracy"],
                    data["best_accuracy"], data["best_epoch"], data["initial_accuracy"],
                    ", teacher %.4f" % data["teacher_accuracy"] if data["teacher_accuracy"] is not None else "")]
        lines += ["  %-11s%s" % (k, v) for k, v in data["files"].items()]
        print("\n".join(lines))
        return 0
