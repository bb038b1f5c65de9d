"""``jetforge export --model ssdlite_mobilenet_v2_person``: a detector's body as ONNX, its postprocess in the sidecar.

A detector registered with task "detect" (:data:`jetforge.compress.models.PRETRAINED`) is exported
without decoding and NMS: the ONNX ends at the per-anchor box encodings and class logits, and the
sidecar's ``extra.ssd`` block carries the anchors, the box coder and the NMS settings that
:func:`jetforge.runtime.detection.postprocess` applies on the host.  ``--efficient-nms`` also writes
``NAME.nms.onnx``, the body followed by TensorRT's EfficientNMS_TRT plugin (TensorRT only).
"""

import argparse
from pathlib import Path
from typing import Any, Dict

from jetforge.cli.base import print_json
from jetforge.errors import ConfigError

NOT_FOR_DETECTORS = ("weights", "prune_plan", "input_shape", "preprocess", "labels")


def run_detector_export(args: argparse.Namespace, out: Path) -> int:
    """The detector branch of ``jetforge export`` (called by ``cmd_export`` for task "detect" models)."""
    given = ["--" + name.replace("_", "-") for name in NOT_FOR_DETECTORS if getattr(args, name, None)]
    if args.task not in (None, "detect"):
        given.append("--task %s" % args.task)
    if given:
        raise ConfigError("%s cannot be used with %s: its weights, input size, preprocessing and labels come from its "
                          "frozen graph" % (", ".join(given), args.model), hint="drop %s" % " ".join(given))
    from jetforge.assets import asset_path
    from jetforge.cli.cmd_export import _compare_with_torch
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
    result["onnxruntime_vs_torch"] = _compare_with_torch(made["model"], out, tuple(spec.input_shape))
    if args.check_trt:
        from jetforge.runtime.tensorrt.onnx_check import check_onnx_builds

        result["tensorrt_check"] = check_onnx_builds(out).to_dict()
    if args.json:
        print_json(result)
        return 0
    _print(args.model, out, result, ssd)
    return 0


def _print(model: str, out: Path, result: Dict[str, Any], ssd: Any) -> None:
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
    from jetforge.cli.cmd_export import print_checks

    print_checks(result)


__all__ = ["run_detector_export"]
