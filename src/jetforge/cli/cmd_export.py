"""``jetforge export``: a torch model to ONNX plus the sidecar every later stage reads.

A detector registered with task "detect" (:data:`jetforge.compress.models.PRETRAINED`, e.g.
``ssdlite_mobilenet_v2_person``) is exported without decoding and NMS: the ONNX ends at the per-anchor box
encodings and class logits, and the sidecar's ``extra.ssd`` block carries the anchors, the box coder and the
NMS settings that :func:`jetforge.vision.ssd.postprocess` applies on the host.  ``--efficient-nms``
also writes ``NAME.nms.onnx``, the body followed by TensorRT's EfficientNMS_TRT plugin (TensorRT only).
"""

import argparse
import logging
from pathlib import Path
from typing import Any, Dict, List, Optional

from jetforge.apps.labels import load_labels
from jetforge.assets import asset_path
from jetforge.cli.arguments import (add_json_flag, add_model_flags, add_out_flag, load_model_from_args,
                                    model_input_paths)
from jetforge.cli.base import Command, parse_input_shape, print_json
from jetforge.config import load_config
from jetforge.errors import ConfigError
from jetforge.fileio import check_not_input, require_file
from jetforge.jsonfile import read_text
from jetforge.runtime import inputs as pre
from jetforge.runtime.sidecar import TASKS as SIDECAR_TASKS
from jetforge.runtime.tensorrt.onnx_check import check_onnx_builds

log = logging.getLogger(__name__)

PRESETS = ("imagenet_torchvision", "imagenet_tflite")


class ExportCommand(Command):
    name = "export"
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
        add_out_flag(parser, "FILE.onnx", "the ONNX file to write", required=True)
        parser.add_argument("--input-shape", help="input shape with the batch axis, e.g. 1x3x224x224 "
                                                  "(default: the pretrained model's, else 1x3x224x224)")
        parser.add_argument("--preprocess", help="%s, or a YAML file with jetforge.runtime.inputs.Preprocess "
                                                 "fields (default: the pretrained model's, else imagenet_torchvision)"
                                                 % " or ".join(PRESETS))
        parser.add_argument("--labels", help="'imagenet' or a text file with one class name per line")
        parser.add_argument("--task", default=None, choices=SIDECAR_TASKS,
                            help="what the model does (default: classify for pretrained models, else other)")
        parser.add_argument("--opset", type=int, default=17, help="ONNX opset, 13 to 20 (default 17)")
        parser.add_argument("--static-batch", action="store_true", help="keep the batch axis fixed (DLA needs static shapes)")
        parser.add_argument("--check-trt", action="store_true",
                            help="also parse and build the ONNX with TensorRT, or TensorRT-RTX where that is all there is")
        parser.add_argument("--efficient-nms", action="store_true",
                            help="detectors (ssdlite_mobilenet_v2_person): also write NAME.nms.onnx, the body followed by "
                                 "TensorRT's EfficientNMS_TRT plugin (TensorRT only)")
        add_json_flag(parser)

    def run(self, args: argparse.Namespace) -> int:
        from jetforge.compress.export import check_opset, compare_with_torch, export_onnx
        from jetforge.compress.models import PRETRAINED, check_architecture_name
        from jetforge.workflow.model_refs import names_a_file

        out = Path(args.out)
        if out.suffix != ".onnx":
            raise ConfigError("--out must name an .onnx file, got %s" % out, hint="e.g. --out work/model.onnx")
        check_not_input(out, model_input_paths(args))
        check_opset(args.opset)  # both before torch is imported: a typo fails in a second, not after 8-13 s
        if not names_a_file(args.model):
            check_architecture_name(args.model)
        if args.model in PRETRAINED and PRETRAINED[args.model].task == "detect":  # body only; NMS in the sidecar
            return run_detector_export(args, out)
        given_shape = parse_input_shape(args.input_shape) if args.input_shape else None  # before the model loads
        model, meta = load_model_from_args(args)
        shape = given_shape or tuple(meta.get("input_shape") or (1, 3, 224, 224))
        preprocess = _preprocess(args.preprocess, meta)
        labels = _labels(args.labels, meta)
        task = args.task or meta.get("task") or "other"
        dynamic_batch = not args.static_batch
        if dynamic_batch and meta.get("dynamic_batch") is False:  # a .pt2: traced at one batch size
            log.warning("%s is a torch.export program: its ONNX has a fixed batch of %d", args.model, shape[0])
            dynamic_batch = False
        try:
            sidecar = export_onnx(model, out, shape, task=task, model_name=str(meta.get("name", out.stem)),
                                  labels=labels, preprocess=preprocess, dynamic_batch=dynamic_batch, opset=args.opset,
                                  provenance={"source_model": args.model})
            result: Dict[str, Any] = {"onnx": str(out), "sidecar": str(out) + ".json", "task": sidecar.task,
                                      "inputs": [t.to_dict() for t in sidecar.inputs],
                                      "outputs": [t.to_dict() for t in sidecar.outputs],
                                      "labels": len(sidecar.labels), "sha256": sidecar.content_sha256}
            result["onnxruntime_vs_torch"] = compare_with_torch(model, out, shape)
        except (MemoryError, RuntimeError) as err:  # the input fitted, the model's activations at that shape did not
            if not isinstance(err, MemoryError) and "allocate" not in str(err):
                raise
            raise ConfigError("tracing %s at input shape %s ran out of memory"
                              % (args.model, "x".join(map(str, shape))), hint="give a smaller --input-shape") from None
        if args.check_trt:
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
    if spec is None:
        if meta.get("preprocess") is not None:
            return meta["preprocess"]
        log.warning("no --preprocess given: recording torchvision's ImageNet convention in the sidecar; "
                    "calibration and the apps will feed the model that way")
        return pre.IMAGENET_TORCHVISION
    if spec in PRESETS:
        return pre.IMAGENET_TORCHVISION if spec == "imagenet_torchvision" else pre.IMAGENET_TFLITE
    return load_config(pre.Preprocess, spec)


def _labels(spec: Optional[str], meta: Dict[str, Any]) -> List[str]:
    if spec is None:
        return list(meta.get("labels") or [])
    if spec == "imagenet":
        return list(load_labels("imagenet"))
    lines = read_text(require_file(spec, "labels file"), "labels file", ConfigError,  # a binary file: one line
                      hint="write one class name per line").splitlines()
    labels = [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]
    if not labels:
        raise ConfigError("labels file %s has no class names" % spec, hint="write one class name per line")
    return labels


NOT_FOR_DETECTORS = ("weights", "prune_plan", "input_shape", "preprocess", "labels")


def run_detector_export(args: argparse.Namespace, out: Path) -> int:
    """The detector branch of ``jetforge export`` (task "detect" models): the body as ONNX, NMS in the sidecar."""
    given = ["--" + name.replace("_", "-") for name in NOT_FOR_DETECTORS if getattr(args, name, None)]
    if args.task not in (None, "detect"):
        given.append("--task %s" % args.task)
    if given:
        raise ConfigError("%s cannot be used with %s: its weights, input size, preprocessing and labels come from its "
                          "frozen graph" % (", ".join(given), args.model), hint="drop %s" % " ".join(given))
    from jetforge.compress.export import compare_with_torch
    from jetforge.compress.models import PRETRAINED
    from jetforge.compress.models.ssdlite_export import export_person_detector

    spec = PRETRAINED[args.model]
    weights = asset_path(spec.asset, spec.filename)
    made = export_person_detector(weights, out, dynamic_batch=not args.static_batch, opset=args.opset,
                                  efficient_nms=bool(getattr(args, "efficient_nms", False)),
                                  provenance={"source_model": args.model})
    sidecar, ssd = made["sidecar"], made["spec"]
    result: Dict[str, Any] = {"onnx": str(out), "sidecar": str(out) + ".json", "task": sidecar.task,
                              "inputs": [t.to_dict() for t in sidecar.inputs],
                              "outputs": [t.to_dict() for t in sidecar.outputs], "labels": list(sidecar.labels),
                              "anchors": ssd.num_anchors, "sha256": sidecar.content_sha256,
                              "pads_folded_into_convs": sidecar.extra.get("pads_folded_into_convs", 0)}
    if "efficient_nms_onnx" in made:
        result["efficient_nms_onnx"] = str(made["efficient_nms_onnx"])
    result["onnxruntime_vs_torch"] = compare_with_torch(made["model"], out, tuple(spec.input_shape))
    if args.check_trt:
        result["tensorrt_check"] = check_onnx_builds(out).to_dict()
    if args.json:
        print_json(result)
        return 0
    _print_detector(args.model, out, result, ssd)
    return 0


def _print_detector(model: str, out: Path, result: Dict[str, Any], ssd: Any) -> None:
    print("exported %s -> %s (+ %s): the convolutional body; decode + NMS run on the host"
          % (model, out, Path(result["sidecar"]).name))
    for t in result["inputs"]:
        print("  input   %s %s %s" % (t["name"], t["shape"], t["dtype"]))
    for t in result["outputs"]:
        print("  output  %s %s %s" % (t["name"], t["shape"], t["dtype"]))
    print("  task    detect, labels %s, %d anchors; sidecar extra.ssd: box coder %s, %s scores, NMS IoU %.2f, "
          "at most %d boxes" % (", ".join(result["labels"]), result["anchors"],
                                "/".join("%g" % f for f in ssd.scale_factors), ssd.score_converter,
                                ssd.iou_threshold, ssd.max_total))
    print("  graph   %d Pad node(s) folded into the convolutions' padding (DLA has no Pad layer)"
          % result["pads_folded_into_convs"])
    if "efficient_nms_onnx" in result:
        print("  also    %s: the body + TensorRT's EfficientNMS_TRT plugin (TensorRT only; not runnable in ONNX "
              "Runtime)" % result["efficient_nms_onnx"])
    print_checks(result)
