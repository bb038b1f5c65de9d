"""``jetforge qat``: quantization-aware training -> Q/DQ ONNX -> DLA calibration cache; or translation only."""

import argparse
from pathlib import Path
from typing import Callable, Dict, Tuple

from jetforge.cli.base import Command, add_config_flags, add_json_flag, print_json
from jetforge.cli.cmd_distill import load_recipe, print_config, recipe_kind


def run_action3d_int8(args: argparse.Namespace) -> int:
    """``kind: action3d``: the recipe's int8 stage (PTQ from clips and/or QAT steps) on the models that ``jetforge
    distill --config`` of the same recipe left in its out_dir; ``--data`` is the video.  Prints the recipe's summary
    with the simulated-INT8 held-out accuracies, or with ``--json`` the report's int8 block and files."""
    from jetforge.compress.action.action3d import Action3DRecipe
    from jetforge.compress.action.mobilenet3d_recipe import recipe_video, run_int8_stage, summary_lines
    from jetforge.config import load_config

    cfg = load_config(Action3DRecipe, args.config, list(args.overrides))
    if args.print_config:
        print_config(cfg)
        return 0
    report = run_int8_stage(cfg, recipe_video(args.data), progress=not args.json)
    if args.json:
        print_json({k: report[k] for k in ("what_it_recognizes", "student", "int8", "files")})
        return 0
    print("\n".join(summary_lines(report, cfg)))
    return 0


# The recipe kinds besides the classifier recipe (jetforge distill's table names the trainers of each kind).
QAT_KINDS: Dict[str, Tuple[str, Callable[[argparse.Namespace], int]]] = {
    "action3d": ("the 3D action recipe's int8 stage, on the models its distill run trained", run_action3d_int8),
}


class QatCommand(Command):
    name = "qat"
    description = (
        "Fine-tune a trained model with INT8 fake quantization along TensorRT's rules (symmetric, per-channel "
        "weights, per-tensor activations on the inputs of Conv/Linear/residual Add, BatchNorm folded), starting "
        "from ranges calibrated with jetforge's algorithms. Exports model.qdq.onnx and translates it for DLA "
        "(TensorRT <= 10 takes INT8 on DLA only from a cache): model.plain.onnx + model.calib holding the trained "
        "scales + model.fp16_layers.txt + model.dla.json (with the trtexec arguments). With --translate, only "
        "translate an existing Q/DQ ONNX (from jetforge, ModelOpt or pytorch-quantization). model.checkpoint (with "
        "model.prune_plan for a model pruned by jetforge prune) is read weights-only; a checkpoint holding other "
        "pickled objects runs code when loaded and needs model.trust_pickle: true, for files you made yourself. A "
        "recipe with kind: action3d (the 3D action model's clip recipe) runs its int8 stage on the teacher.pt and "
        "student.pt that `jetforge distill --config` of the same recipe left in out_dir: calibration from per-track "
        "clips of the training frames (student.calib, student.qdq.onnx) and int8.qat_steps QAT steps "
        "(student.qat.qdq.onnx), both evaluated on the held-out clips in simulated INT8 arithmetic (report.json's "
        "int8 block); --data is then the video.")
    examples = """examples:
  jetforge qat --config recipes/qat_fashion_mnist.yaml
  jetforge qat --config recipes/qat_fashion_mnist.yaml --set qat.calibration=percentile --set export.trt_version=8.6.2
  jetforge qat --config recipes/action_mobilenet3d.yaml --set int8.qat_steps=16   # after jetforge distill --config
  jetforge qat --translate runs/qat/model.qdq.onnx --trt 10.3 --out dla/
  trtexec --onnx=dla/model.plain.onnx --useDLACore=0 --allowGPUFallback --int8 --fp16 --calib=dla/model.calib"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_config_flags(parser)
        parser.add_argument("--data", metavar="DIR", help="folder with the Fashion-MNIST .gz files; for kind: "
                                                          "action3d the video (default: the vtest.avi asset)")
        parser.add_argument("--translate", metavar="QDQ.onnx", help="only translate this Q/DQ ONNX for DLA")
        parser.add_argument("--trt", default="10.3", help="TensorRT version of the cache header with --translate "
                                                          "(10.3: JetPack 6.1/6.2, 8.6.2: 6.0, 8.5.2: 5.1)")
        parser.add_argument("--out", metavar="DIR", help="output folder with --translate (default: next to it)")
        add_json_flag(parser)

    def run(self, args: argparse.Namespace) -> int:
        if args.translate:
            from jetforge.calibrate.qdq_translate import translate_file

            res, paths = translate_file(args.translate, args.out, trt_version=args.trt)
            data = res.to_dict()
            data["files"] = {k: str(v) for k, v in paths.items()}
            if args.json:
                print_json(data)
                return 0
            print("translated %s: %d trained scales (+%d inferred), %d INT8 / %d FP16 layers, cache %s"
                  % (args.translate, len(res.trained), len(res.inferred), len(res.int8_layers),
                     len(res.fp16_layers), res.cache.header))
            for k, v in paths.items():
                print("  %-12s%s" % (k, v))
            print("  trtexec --onnx=%s --useDLACore=0 --allowGPUFallback %s"
                  % (paths["plain_onnx"], " ".join(a.replace("calib.cache", str(paths["cache"]))
                                                   for a in res.trtexec_args())[:400]))
            return 0
        kind = recipe_kind(args, QAT_KINDS, "jetforge qat")
        if kind in QAT_KINDS:
            return QAT_KINDS[kind][1](args)
        from jetforge.compress.qat import QatConfig, qat

        cfg = load_recipe(args, QatConfig)
        if cfg is None:
            return 0
        res = qat(cfg)
        data = res.to_dict()
        if args.json:
            print_json(data)
            return 0
        f = lambda v: "-" if v is None else "%.4f" % v  # noqa: E731
        print("%s: FP32 %s, PTQ (calibrated, before QAT) %s, QAT %s, Q/DQ ONNX %s [%s]"
              % (cfg.name, f(res.fp32_accuracy), f(res.ptq_accuracy), f(res.qat_accuracy),
                 f(res.onnx_int8_accuracy), data["onnx_int8_arithmetic"]))
        if res.ort_kernels_accuracy is not None:
            print("  %s: %s (kernels: %s)" % (res.ort_kernels_label, f(res.ort_kernels_accuracy),
                                           ", ".join("%s x%d" % kv for kv in data["ort_int8_kernels"].items())))
        for k, v in data["files"].items():
            print("  %-11s%s" % (k, Path(v)))
        return 0
