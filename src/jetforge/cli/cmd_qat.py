"""``jetforge qat``: the INT8 stage of a recipe (QAT -> Q/DQ ONNX -> DLA calibration cache), or translation only.

The recipe's ``kind`` picks its INT8 stage from :data:`jetforge.compress.recipes.RECIPES` and the run is
:func:`jetforge.compress.recipes.base.run_recipe` (``python -m jetforge.compress.recipes --stage int8`` runs the
same); ``--translate`` translates an existing Q/DQ ONNX for DLA.  Without a recipe or ``--translate`` it prints
its usage and exits 1.
"""

import argparse

from jetforge.cli.arguments import add_out_flag, add_tensorrt_flag
from jetforge.cli.base import Command, print_json
from jetforge.cli.cmd_distill import add_recipe_arguments, no_recipe

QAT_RECIPE = "recipes/qat_fashion_mnist.yaml"


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
  jetforge qat --translate runs/qat/model.qdq.onnx --tensorrt 10.3 --out dla/
  trtexec --onnx=dla/model.plain.onnx --useDLACore=0 --allowGPUFallback --int8 --fp16 --calib=dla/model.calib"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        self.usage = add_recipe_arguments(parser, "the recipe's data: for a classifier the folder with the "
                                                  "Fashion-MNIST .gz files, for kind: action3d the video (default: "
                                                  "the vtest.avi asset)")
        parser.add_argument("--translate", metavar="QDQ.onnx", help="only translate this Q/DQ ONNX for DLA")
        add_tensorrt_flag(parser, "TensorRT version of the cache header with --translate (10.3: JetPack 6.1/6.2, "
                                  "the default; 8.6.2: 6.0; 8.5.2: 5.1)", default="10.3")
        add_out_flag(parser, "DIR", "output folder with --translate (default: next to it)")

    def run(self, args: argparse.Namespace) -> int:
        if args.translate:
            return _translate(args)
        if not args.config and not args.print_config:
            raise no_recipe(self.usage, "jetforge qat", QAT_RECIPE)
        from jetforge.compress.recipes.base import run_recipe

        return run_recipe(args.config, args.overrides, stage="int8", data=args.data, as_json=args.json,
                          print_config=args.print_config, progress=not args.json, command="jetforge qat")


def _translate(args: argparse.Namespace) -> int:
    """``--translate QDQ.onnx``: plain ONNX + cache with the trained scales + FP16 layer list for DLA."""
    from jetforge.calibrate.qdq.translate import translate_file

    res, paths = translate_file(args.translate, args.out, trt_version=args.tensorrt)
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
