"""``jetforge export``: a torch model to ONNX plus the sidecar every later stage reads."""

import argparse
import logging
from pathlib import Path
from typing import Any, Dict, List, Optional

from jetforge.cli.app_models import add_model_flags, load_model_from_args, model_input_paths
from jetforge.cli.base import Command, add_json_flag, print_json
from jetforge.cli.cmd_prune import parse_shape
from jetforge.errors import ConfigError

log = logging.getLogger(__name__)

PRESETS = ("imagenet_torchvision", "imagenet_tflite")


class ExportCommand(Command):
    name = "export"
    summary = "export a torch model to ONNX with its sidecar (task, labels, preprocessing, tensors, hash)"
    description = (
        "Export a pretrained model or a torchvision architecture, with your weights (--weights, a state dict read\n"
        "weights-only; --prune-plan for a model pruned by jetforge prune), to ONNX (opset 17,\n"
        "dynamic batch axis by default), written atomically, and write MODEL.onnx.json: the sidecar that\n"
        "calibrate, build, bench and the apps read (task, labels, preprocessing, input/output tensors, what\n"
        "produced the file and its content hash). The ONNX output is checked against PyTorch with ONNX Runtime\n"
        "when it is installed, and --check-trt parses and builds it with TensorRT (or TensorRT-RTX).\n"
        "A whole pickled module (.pt) or a torch.export archive (.pt2) can run code when loaded: jetforge opens\n"
        "those only with --trust-pickle, for files you made yourself.")
    examples = """examples:
  jetforge export --model mobilenet_v2 --out work/model.onnx
  jetforge export --model efficientnet_lite0 --out lite0.onnx --check-trt
  jetforge export --model resnet50 --weights my_state_dict.pt --preprocess preprocess.yaml --labels classes.txt --out my.onnx
  jetforge export --model resnet50 --prune-plan pruned/model.prune.json --weights pruned/pruned.pt --out small.onnx
  jetforge export --model my_net.pt2 --trust-pickle --out my.onnx      # a torch.export archive you made yourself
  jetforge export --model resnet18 --static-batch --out r18.onnx     # torchvision architecture, random weights
  jetforge export --model ssdlite_mobilenet_v2_person --out det.onnx --efficient-nms   # detector body (+ NMS plugin)"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--model", required=True,
                            help="mobilenet_v2 or efficientnet_lite0 (pretrained, from the asset cache), a torchvision "
                                 "architecture name (random weights unless --weights), or, with --trust-pickle, a .pt "
                                 "file holding a whole torch module or a torch.export .pt2 archive")
        add_model_flags(parser)
        parser.add_argument("--out", required=True, metavar="FILE.onnx", help="the ONNX file to write")
        parser.add_argument("--input-shape", help="input shape with the batch axis, e.g. 1x3x224x224 "
                                                  "(default: the pretrained model's, else 1x3x224x224)")
        parser.add_argument("--preprocess", help="%s, or a YAML file with jetforge.runtime.preprocess.Preprocess "
                                                 "fields (default: the pretrained model's, else imagenet_torchvision)"
                                                 % " or ".join(PRESETS))
        parser.add_argument("--labels", help="'imagenet' or a text file with one class name per line")
        parser.add_argument("--task", default=None, choices=("classify", "detect", "action", "embed", "other"),
                            help="what the model does (default: classify for pretrained models, else other)")
        parser.add_argument("--opset", type=int, default=17, help="ONNX opset (default 17; at least 13)")
        parser.add_argument("--static-batch", action="store_true", help="keep the batch axis fixed (DLA needs static shapes)")
        parser.add_argument("--check-trt", action="store_true",
                            help="also parse and build the ONNX with TensorRT, or TensorRT-RTX where that is all there is")
        parser.add_argument("--efficient-nms", action="store_true",
                            help="detectors (ssdlite_mobilenet_v2_person): also write NAME.nms.onnx, the body followed by "
                                 "TensorRT's EfficientNMS_TRT plugin (TensorRT only)")
        add_json_flag(parser)

    def run(self, args: argparse.Namespace) -> int:
        from jetforge.compress.export import export_onnx
        from jetforge.fileio import check_not_input

        out = Path(args.out)
        if out.suffix != ".onnx":
            raise ConfigError("--out must name an .onnx file, got %s" % out, hint="e.g. --out work/model.onnx")
        check_not_input(out, model_input_paths(args))
        from jetforge.compress.models import PRETRAINED

        if args.model in PRETRAINED and PRETRAINED[args.model].task == "detect":  # body only; NMS in the sidecar
            from jetforge.cli.export_detector import run_detector_export

            return run_detector_export(args, out)
        model, meta = load_model_from_args(args)
        shape = parse_shape(args.input_shape) if args.input_shape else tuple(meta.get("input_shape") or (1, 3, 224, 224))
        preprocess = _preprocess(args.preprocess, meta)
        labels = _labels(args.labels, meta)
        task = args.task or meta.get("task") or "other"
        dynamic_batch = not args.static_batch
        if dynamic_batch and meta.get("dynamic_batch") is False:  # a .pt2: traced at one batch size
            log.warning("%s is a torch.export program: its ONNX has a fixed batch of %d", args.model, shape[0])
            dynamic_batch = False
        sidecar = export_onnx(model, out, shape, task=task, model_name=str(meta.get("name", out.stem)), labels=labels,
                              preprocess=preprocess, dynamic_batch=dynamic_batch, opset=args.opset,
                              provenance={"source_model": args.model})
        result: Dict[str, Any] = {"onnx": str(out), "sidecar": str(out) + ".json", "task": sidecar.task,
                                  "inputs": [t.to_dict() for t in sidecar.inputs],
                                  "outputs": [t.to_dict() for t in sidecar.outputs],
                                  "labels": len(sidecar.labels), "sha256": sidecar.content_sha256}
        result["onnxruntime_vs_torch"] = _compare_with_torch(model, out, shape)
        if args.check_trt:
            from jetforge.runtime.tensorrt.onnx_check import check_onnx_builds

            check = check_onnx_builds(out)
            result["tensorrt_check"] = {"library": check.library, "version": check.version, "layers": check.num_layers}
        if args.json:
            print_json(result)
            return 0
        print("exported %s -> %s (+ %s)" % (args.model, out, Path(result["sidecar"]).name))
        for t in sidecar.inputs:
            print("  input   %s %s %s" % (t.name, t.shape, t.dtype))
        for t in sidecar.outputs:
            print("  output  %s %s %s" % (t.name, t.shape, t.dtype))
        print("  task    %s, %d labels, preprocessing %s" % (sidecar.task, len(sidecar.labels),
                                                            "recorded" if sidecar.preprocess else "none"))
        print_checks(result)
        return 0


def print_checks(result: Dict[str, Any]) -> None:
    """The ONNX Runtime vs PyTorch and TensorRT lines of an export's result (shared with the detector route)."""
    cmp = result["onnxruntime_vs_torch"]
    if cmp is not None:
        print("  check   ONNX Runtime vs PyTorch on a random input: max |diff| %.2e (output scale %.2e)"
              % (cmp["max_abs_diff"], cmp["output_scale"]))
    if "tensorrt_check" in result:
        c = result["tensorrt_check"]
        print("  TensorRT %s %s parsed and built it (%s layers)" % (c["library"], c["version"], c["layers"]))


def _preprocess(spec: Optional[str], meta: Dict[str, Any]) -> Any:
    from jetforge.runtime import preprocess as pre

    if spec is None:
        if meta.get("preprocess") is not None:
            return meta["preprocess"]
        log.warning("no --preprocess given: recording torchvision's ImageNet convention in the sidecar; "
                    "calibration and the apps will feed the model that way")
        return pre.IMAGENET_TORCHVISION
    if spec in PRESETS:
        return pre.IMAGENET_TORCHVISION if spec == "imagenet_torchvision" else pre.IMAGENET_TFLITE
    from jetforge.config import load_config

    return load_config(pre.Preprocess, spec)


def _labels(spec: Optional[str], meta: Dict[str, Any]) -> List[str]:
    if spec is None:
        return list(meta.get("labels") or [])
    if spec == "imagenet":
        from jetforge.apps.labels import load_labels

        return list(load_labels("imagenet"))
    from jetforge.fileio import require_file

    lines = require_file(spec, "labels file").read_text(encoding="utf-8").splitlines()
    labels = [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]
    if not labels:
        raise ConfigError("labels file %s has no class names" % spec, hint="write one class name per line")
    return labels


def _compare_with_torch(model: Any, onnx_path: Path, shape: Any) -> Optional[Dict[str, float]]:
    """ONNX Runtime's output vs PyTorch's on one seeded random input; a mismatch is an error, not a warning."""
    from jetforge.errors import ModelError
    from jetforge.optional import is_available

    if not is_available("onnxruntime"):
        log.info("onnxruntime is not installed: the exported model was not compared with PyTorch")
        return None
    import numpy as np
    import torch

    from jetforge.runtime.session import open_session

    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    with torch.no_grad():
        ref = model(torch.from_numpy(x))
    refs = [ref] if isinstance(ref, torch.Tensor) else list(ref)
    with open_session(onnx_path, backend="onnxruntime") as session:
        outs = session.infer({session.inputs[0].name: x})
    diffs, scales = [], []
    for r, o in zip(refs, outs.values()):
        r = r.numpy()
        diffs.append(float(np.max(np.abs(r - o))) if r.size else 0.0)
        scales.append(float(np.max(np.abs(r))) if r.size else 0.0)
    diff, scale = max(diffs), max(scales)
    if diff > 1e-3 * max(1.0, scale):
        raise ModelError("the exported %s disagrees with PyTorch: max |diff| %.3g at output scale %.3g"
                         % (onnx_path.name, diff, scale),
                         hint="check for ops the exporter handles differently (rerun with --debug); try another --opset")
    return {"max_abs_diff": diff, "output_scale": scale}
