"""``jetforge qat``: quantization-aware training -> Q/DQ ONNX -> DLA calibration cache; or translation only."""

import argparse
from pathlib import Path

from jetforge.cli.base import Command, add_config_flags, add_json_flag, print_json
from jetforge.cli.cmd_distill import load_recipe


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
        "pickled objects runs code when loaded and needs model.trust_pickle: true, for files you made yourself.")
    examples = """examples:
  jetforge qat --config recipes/qat_fashion_mnist.yaml
  jetforge qat --config recipes/qat_fashion_mnist.yaml --set qat.calibration=percentile --set export.trt_version=8.6.2
  jetforge qat --translate runs/qat/model.qdq.onnx --trt 10.3 --out dla/
  trtexec --onnx=dla/model.plain.onnx --useDLACore=0 --allowGPUFallback --int8 --fp16 --calib=dla/model.calib"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_config_flags(parser)
        parser.add_argument("--data", metavar="DIR", help="folder with the Fashion-MNIST .gz files")
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
