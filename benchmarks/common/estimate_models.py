"""The models the estimator is checked on, built with random weights (latency does not depend on them).

Shared by ``benchmarks/estimator/``: ``estimate_h200.py`` (measures them on a GPU), ``estimate_h200_fit.py`` (exports
the same architectures to ONNX here and runs the estimator on them) and ``estimate_published.py`` (the
networks of published Jetson results).  Detection models are timed as their convolutional body
(backbone + feature pyramid + head): the pre/post-processing (resize, anchor decoding, NMS) is
not part of the ONNX an engine is built from.  Only torch and torchvision are needed, plus
jetforge's own model definitions for the ``jetforge_*`` entries.
"""

from dataclasses import dataclass
from typing import Callable, Dict, List, Sequence, Tuple

import torch
from torch import nn


@dataclass(frozen=True)
class ModelSpec:
    name: str
    group: str                       # classification / detection / segmentation / video / jetforge
    build: Callable[[], nn.Module]
    input_shape: Tuple[int, ...]     # without the batch dim
    image: bool = True               # channels-last makes sense (image or video tensor)


class DetectionBody(nn.Module):
    """A torchvision detector's backbone + head: image tensor in, raw head outputs (a tuple) out."""

    def __init__(self, detector: nn.Module) -> None:
        super().__init__()
        self.backbone = detector.backbone
        self.head = detector.head

    def forward(self, x: torch.Tensor):  # noqa: ANN201 - a tuple of tensors
        features = self.backbone(x)
        maps = list(features.values()) if isinstance(features, dict) else [features]
        out = self.head(maps)
        return tuple(out.values()) if isinstance(out, dict) else tuple(out)


class SegmentationOut(nn.Module):
    """A torchvision segmentation model returning its ``out`` map only."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)["out"]


def _tv(name: str, **kwargs) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import torchvision

        torch.manual_seed(0)
        return torchvision.models.get_model(name, weights=None, **kwargs).eval()
    return build


def _det(name: str, **kwargs) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import torchvision

        torch.manual_seed(0)
        model = torchvision.models.get_model(name, weights=None, weights_backbone=None, **kwargs)
        return DetectionBody(model).eval()
    return build


def _seg(name: str) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import torchvision

        torch.manual_seed(0)
        model = torchvision.models.get_model(name, weights=None, weights_backbone=None, aux_loss=False)
        return SegmentationOut(model).eval()
    return build


def _conv_block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


class WalkingDirectionNet(nn.Module):
    """The retired walking-direction action model's architecture, kept here because the estimator's H200 data set
    measured it (``jetforge_action_walking_direction``): (N, 8, 64, 32) grey clip -> a 2-D CNN shared over the 8
    frames -> two 1-D temporal convolutions -> mean over time -> logits.  Identical layer for layer to
    ``jetforge.compress.models.action.ActionNet`` as it was at commit 79d7598."""

    def __init__(self, classes: int, window: int = 8, height: int = 64, width: int = 32) -> None:
        super().__init__()
        self.window, self.height, self.width = window, height, width
        self.frame = nn.Sequential(_conv_block(1, 16), _conv_block(16, 24), _conv_block(24, 32), nn.Conv2d(32, 8, 1))
        self.frame_features = 8 * (height // 8) * (width // 8)
        self.temporal = nn.Sequential(
            nn.Conv1d(self.frame_features, 64, 3, padding=1), nn.BatchNorm1d(64), nn.ReLU(inplace=True),
            nn.Conv1d(64, 64, 3, padding=1), nn.BatchNorm1d(64), nn.ReLU(inplace=True))
        self.drop = nn.Dropout(0.2)
        self.fc = nn.Linear(64, classes)

    def forward(self, clip: torch.Tensor) -> torch.Tensor:
        n = clip.shape[0]
        x = self.frame(clip.reshape(n * self.window, 1, self.height, self.width))
        x = self.temporal(x.reshape(n, self.window, self.frame_features).transpose(1, 2))
        return self.fc(self.drop(x.mean(dim=2)))


def _jetforge(name: str) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        torch.manual_seed(0)
        if name == "efficientnet_lite0":
            from jetforge.compress.models.efficientnet_lite import efficientnet_lite0
            return efficientnet_lite0().eval()
        if name == "ssdlite_mobilenet_v2":
            from jetforge.compress.models.ssdlite_mobilenet_v2 import ssdlite_mobilenet_v2
            return ssdlite_mobilenet_v2().eval()
        if name == "action_walking_direction":
            return WalkingDirectionNet(classes=3).eval()
        if name == "mtcnn_onet":
            from jetforge.compress.models.mtcnn import ONet
            return ONet().eval()
        raise KeyError(name)
    return build


# In measurement order: the device run stops cleanly when its time budget ends, so the most
# informative models come first (one of each kind before the second of any).
H200_MODELS: List[ModelSpec] = [
    ModelSpec("resnet50", "classification", _tv("resnet50"), (3, 224, 224)),
    ModelSpec("mobilenet_v2", "classification", _tv("mobilenet_v2"), (3, 224, 224)),
    ModelSpec("retinanet_resnet50_fpn", "detection", _det("retinanet_resnet50_fpn"), (3, 640, 640)),
    ModelSpec("r2plus1d_18", "video", _tv("r2plus1d_18"), (3, 16, 112, 112)),
    ModelSpec("jetforge_efficientnet_lite0", "jetforge", _jetforge("efficientnet_lite0"), (3, 224, 224)),
    ModelSpec("deeplabv3_mobilenet_v3_large", "segmentation", _seg("deeplabv3_mobilenet_v3_large"), (3, 512, 512)),
    ModelSpec("resnet18", "classification", _tv("resnet18"), (3, 224, 224)),
    ModelSpec("mobilenet_v3_large", "classification", _tv("mobilenet_v3_large"), (3, 224, 224)),
    ModelSpec("efficientnet_b0", "classification", _tv("efficientnet_b0"), (3, 224, 224)),
    ModelSpec("resnext50_32x4d", "classification", _tv("resnext50_32x4d"), (3, 224, 224)),
    ModelSpec("ssd300_vgg16", "detection", _det("ssd300_vgg16"), (3, 300, 300)),
    ModelSpec("r3d_18", "video", _tv("r3d_18"), (3, 16, 112, 112)),
    ModelSpec("jetforge_ssdlite_mobilenet_v2", "jetforge", _jetforge("ssdlite_mobilenet_v2"), (3, 300, 300)),
    ModelSpec("regnet_y_800mf", "classification", _tv("regnet_y_800mf"), (3, 224, 224)),
    ModelSpec("shufflenet_v2_x1_0", "classification", _tv("shufflenet_v2_x1_0"), (3, 224, 224)),
    ModelSpec("densenet121", "classification", _tv("densenet121"), (3, 224, 224)),
    ModelSpec("fcos_resnet50_fpn", "detection", _det("fcos_resnet50_fpn"), (3, 512, 512)),
    ModelSpec("ssdlite320_mobilenet_v3_large", "detection", _det("ssdlite320_mobilenet_v3_large"), (3, 320, 320)),
    ModelSpec("mc3_18", "video", _tv("mc3_18"), (3, 16, 112, 112)),
    ModelSpec("lraspp_mobilenet_v3_large", "segmentation", _seg("lraspp_mobilenet_v3_large"), (3, 512, 512)),
    ModelSpec("jetforge_action_walking_direction", "jetforge", _jetforge("action_walking_direction"), (8, 64, 32),
              image=False),
    ModelSpec("vgg16", "classification", _tv("vgg16"), (3, 224, 224)),
    ModelSpec("convnext_tiny", "classification", _tv("convnext_tiny"), (3, 224, 224)),
    ModelSpec("squeezenet1_1", "classification", _tv("squeezenet1_1"), (3, 224, 224)),
    ModelSpec("jetforge_mtcnn_onet", "jetforge", _jetforge("mtcnn_onet"), (3, 48, 48)),
    ModelSpec("s3d", "video", _tv("s3d"), (3, 16, 224, 224)),
    ModelSpec("vit_b_16", "classification", _tv("vit_b_16"), (3, 224, 224)),
]


# Never in any fit: the twelve torchvision models of issue 26, tried by a user on the H200 against the command.
# ``estimate_h200.py --models unseen`` measures exactly these; ``estimate_h200_fit.py`` estimates them with the
# shipped ``pytorch_eager`` set (fitted on H200_MODELS only) and reports them apart, once their measurement exists.
# A test checks that no name here is in H200_MODELS.
UNSEEN_MODELS: List[ModelSpec] = [
    ModelSpec("efficientnet_b3", "classification", _tv("efficientnet_b3"), (3, 224, 224)),
    ModelSpec("efficientnet_v2_s", "classification", _tv("efficientnet_v2_s"), (3, 224, 224)),
    ModelSpec("regnet_x_3_2gf", "classification", _tv("regnet_x_3_2gf"), (3, 224, 224)),
    ModelSpec("mnasnet1_3", "classification", _tv("mnasnet1_3"), (3, 224, 224)),
    ModelSpec("resnet34", "classification", _tv("resnet34"), (3, 224, 224)),
    ModelSpec("resnet152", "classification", _tv("resnet152"), (3, 224, 224)),
    ModelSpec("wide_resnet50_2", "classification", _tv("wide_resnet50_2"), (3, 224, 224)),
    ModelSpec("googlenet", "classification", _tv("googlenet", aux_logits=False, init_weights=True), (3, 224, 224)),
    ModelSpec("mobilenet_v3_small", "classification", _tv("mobilenet_v3_small"), (3, 224, 224)),
    ModelSpec("shufflenet_v2_x2_0", "classification", _tv("shufflenet_v2_x2_0"), (3, 224, 224)),
    ModelSpec("convnext_small", "classification", _tv("convnext_small"), (3, 224, 224)),
    ModelSpec("densenet169", "classification", _tv("densenet169"), (3, 224, 224)),
]
UNSEEN = "unseen"      # the --models value that selects UNSEEN_MODELS


class TinyCNN(nn.Module):
    """Dry-run model: conv-bn-relu, depthwise, residual add, pool, linear."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU(inplace=True))
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.pw = nn.Conv2d(16, 16, 1)
        self.relu = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = self.relu(self.pw(self.dw(x)) + x)
        return self.fc(torch.flatten(self.pool(x), 1))


class TinyMLP(nn.Module):
    """Dry-run model: two linear layers and a softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(128, 10)
        self.softmax = nn.Softmax(dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.softmax(self.fc2(self.act(self.fc1(x))))


DRY_RUN_MODELS: List[ModelSpec] = [
    ModelSpec("tiny_cnn", "dry-run", lambda: TinyCNN().eval(), (3, 32, 32)),
    ModelSpec("tiny_mlp", "dry-run", lambda: TinyMLP().eval(), (64,), image=False),
]


def by_name(specs: Sequence[ModelSpec]) -> Dict[str, ModelSpec]:
    return {s.name: s for s in specs}


def all_specs() -> Dict[str, ModelSpec]:
    return by_name(list(H200_MODELS) + list(UNSEEN_MODELS) + list(DRY_RUN_MODELS))


def select(names: str, dry_run: bool = False) -> List[ModelSpec]:
    """``--models``: ``unseen`` (UNSEEN_MODELS), a comma-separated list of names, or empty (H200_MODELS; the dry
    run's two tiny models with ``dry_run``); an unknown name is a SystemExit naming the known ones."""
    if not names:
        return list(DRY_RUN_MODELS if dry_run else H200_MODELS)
    if names == UNSEEN:
        return list(UNSEEN_MODELS)
    table = all_specs()
    unknown = [n for n in names.split(",") if n not in table]
    if unknown:
        raise SystemExit("unknown model(s) %s; known: %s, or 'unseen'" % (", ".join(unknown), ", ".join(table)))
    return [table[n] for n in names.split(",")]


def export_onnx(spec: ModelSpec, path: str, opset: int = 20, fold_batchnorm: bool = True) -> None:
    """``spec`` to ONNX at batch 1 with a dynamic batch axis (TorchScript exporter), as a user exports it.

    Eval mode folds every BatchNorm that follows a convolution into it (the folded weights are named
    ``onnx::Conv_*``, which is how the estimator's ``unfolded_batchnorm`` finds them again: eager PyTorch runs those
    BatchNorms as kernels of their own).  ``fold_batchnorm=False`` keeps BatchNormalization nodes
    (``training=PRESERVE``).  Opset 20 (the TorchScript exporter's newest) keeps GELU one node, as PyTorch runs it.
    """
    model = spec.build()
    x = torch.randn(1, *spec.input_shape)
    with torch.no_grad():
        out = model(x)
    n_out = len(out) if isinstance(out, (tuple, list)) else 1
    names = ["out%d" % i for i in range(n_out)]
    axes = {"input": {0: "batch"}}
    axes.update({n: {0: "batch"} for n in names})
    torch.onnx.export(model, (x,), path, input_names=["input"], output_names=names, dynamic_axes=axes,
                      opset_version=opset, do_constant_folding=True, dynamo=False,
                      training=torch.onnx.TrainingMode.EVAL if fold_batchnorm else torch.onnx.TrainingMode.PRESERVE)


# ------------------------------------------------------------------------------------------------
# networks of the published Jetson results (benchmarks/estimator/data/published_jetson.yaml)
# ------------------------------------------------------------------------------------------------
def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU6(inplace=True))


class SSDMobileNetV1(nn.Module):
    """The body of TF's ssd_mobilenet_v1_coco (MLPerf ssd-mobilenet): MobileNetV1 to conv13, 4 extra layers,
    6 feature maps (19, 10, 5, 3, 2, 1 at 300x300) with 3, 6, 6, 6, 6, 6 anchors and 1x1 box/class predictors."""

    def __init__(self, classes: int = 91) -> None:
        super().__init__()
        plan = [(32, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2), (256, 256, 1), (256, 512, 2)] + \
            [(512, 512, 1)] * 5 + [(512, 1024, 2), (1024, 1024, 1)]
        layers = [_conv_bn(3, 32, 3, 2)]
        for cin, cout, stride in plan:
            layers += [_conv_bn(cin, cin, 3, stride, groups=cin), _conv_bn(cin, cout, 1)]
        self.conv11 = nn.Sequential(*layers[:23])     # stem + 11 depthwise-separable pairs: 512 channels, stride 16
        self.conv13 = nn.Sequential(*layers[23:])     # pairs 12-13: 1024 channels, stride 32
        self.extras = nn.ModuleList([nn.Sequential(_conv_bn(cin, mid, 1), _conv_bn(mid, cout, 3, 2))
                                     for cin, mid, cout in ((1024, 256, 512), (512, 128, 256), (256, 128, 256),
                                                            (256, 64, 128))])
        channels, anchors = (512, 1024, 512, 256, 256, 128), (3, 6, 6, 6, 6, 6)
        self.box = nn.ModuleList([nn.Conv2d(c, a * 4, 1) for c, a in zip(channels, anchors)])
        self.cls = nn.ModuleList([nn.Conv2d(c, a * classes, 1) for c, a in zip(channels, anchors)])

    def forward(self, x: torch.Tensor):  # noqa: ANN201
        maps = [self.conv11(x)]
        maps.append(self.conv13(maps[-1]))
        for extra in self.extras:
            maps.append(extra(maps[-1]))
        boxes = torch.cat([b(m).flatten(1) for b, m in zip(self.box, maps)], 1)
        scores = torch.cat([c(m).flatten(1) for c, m in zip(self.cls, maps)], 1)
        return boxes, scores


class Backbone(nn.Module):
    """A torchvision ResNet without its pooling and classifier."""

    def __init__(self, resnet: nn.Module) -> None:
        super().__init__()
        self.body = nn.Sequential(*list(resnet.children())[:-2])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def _retinanet(backbone_name: str, classes: int) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        from torchvision.models.detection import RetinaNet
        from torchvision.models.detection.backbone_utils import resnet_fpn_backbone
        from torchvision.ops.feature_pyramid_network import LastLevelP6P7

        torch.manual_seed(0)
        backbone = resnet_fpn_backbone(backbone_name=backbone_name, weights=None, trainable_layers=5,
                                       returned_layers=[2, 3, 4], extra_blocks=LastLevelP6P7(256, 256))
        return DetectionBody(RetinaNet(backbone, num_classes=classes)).eval()
    return build


def _backbone(name: str) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import torchvision

        torch.manual_seed(0)
        return Backbone(torchvision.models.get_model(name, weights=None)).eval()
    return build


def _ssd_mobilenet() -> nn.Module:
    torch.manual_seed(0)
    return SSDMobileNetV1().eval()


PUBLISHED_NETWORKS: Dict[str, Callable[[], nn.Module]] = {
    "resnet50": _tv("resnet50"),
    "ssd_mobilenet_v1": _ssd_mobilenet,
    "retinanet_resnext50_800": _retinanet("resnext50_32x4d", 264),
    "resnet34_backbone_1280x768": _backbone("resnet34"),
    "retinanet_resnet34_1280x768": _retinanet("resnet34", 4),
}
# torchvision classifiers of torch2trt's published Jetson benchmarks (FP16 on AGX Xavier and Jetson Nano; ResNet-18 on
# Xavier NX's GPU and DLA): the same constructors its tests call, random weights (timing does not depend on them)
TORCH2TRT_NETWORKS = ("alexnet", "squeezenet1_0", "squeezenet1_1", "resnet18", "resnet34", "resnet50", "resnet101",
                      "resnet152", "densenet121", "densenet169", "densenet201", "densenet161", "vgg11", "vgg13", "vgg16",
                      "vgg19", "mobilenet_v2", "shufflenet_v2_x0_5", "shufflenet_v2_x1_0", "shufflenet_v2_x1_5",
                      "shufflenet_v2_x2_0", "mnasnet0_5", "mnasnet0_75", "mnasnet1_0", "mnasnet1_3")
PUBLISHED_NETWORKS.update({"tv_" + name: _tv(name) for name in TORCH2TRT_NETWORKS})
