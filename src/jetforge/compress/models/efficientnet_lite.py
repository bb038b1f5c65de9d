"""EfficientNet-Lite0 in plain torch, parameter-for-parameter compatible with the lukemelas-style checkpoint.

The asset ``efficientnet_lite0_imagenet`` (``efficientnet-lite0-57934424.pth``, converted from Google's
official TensorFlow Lite0 weights) uses the key names of lukemelas' *EfficientNet-PyTorch*:
``_conv_stem``/``_bn0``, ``_blocks.N._expand_conv/_bn0/_depthwise_conv/_bn1/_project_conv/_bn2``,
``_conv_head``/``_bn1`` and ``_fc``; this module reproduces that tree so the file loads with
``strict=True`` (Tan & Le 2019, "EfficientNet"; the Lite variants, 2020).

What makes a Lite model (and why it quantizes well): no squeeze-and-excitation, ReLU6 instead of swish,
and a stem (32) and head (1280) that are not width-scaled.  Convolutions pad like TensorFlow's ``SAME``
(asymmetric for stride 2: more at the bottom/right), computed for the static input size the model is
built for, as the converted weights expect; a stride-1 conv pads symmetrically.  BatchNorm eps is 1e-3
(TensorFlow's default).  Preprocessing: RGB, ``(x - 127) / 128`` (``IMAGENET_TFLITE``).
"""

import math
from typing import List, Sequence, Tuple

import torch
from torch import nn

# (kernel, stride, expand ratio, in channels, out channels, repeats) of Lite0's seven stages
LITE0_STAGES: Sequence[Tuple[int, int, int, int, int, int]] = (
    (3, 1, 1, 32, 16, 1),
    (3, 2, 6, 16, 24, 2),
    (5, 2, 6, 24, 40, 2),
    (3, 2, 6, 40, 80, 3),
    (5, 1, 6, 80, 112, 3),
    (5, 2, 6, 112, 192, 4),
    (3, 1, 6, 192, 320, 1),
)
BN_EPS = 1e-3
BN_MOMENTUM = 0.01  # torch's momentum = 1 - TensorFlow's 0.99


def same_padding(size: int, kernel: int, stride: int) -> Tuple[int, int]:
    """TensorFlow ``SAME`` padding (before, after) along one axis of length ``size``."""
    out = int(math.ceil(size / stride))
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


class SameConv2d(nn.Conv2d):
    """Conv2d with TensorFlow ``SAME`` padding for a fixed input size (a ``ZeroPad2d`` when asymmetric).

    The pad module has no parameters, so the state-dict keys stay ``<name>.weight``.
    """

    def __init__(self, in_ch: int, out_ch: int, kernel_size: int, stride: int = 1, groups: int = 1,
                 image_size: Tuple[int, int] = (224, 224)) -> None:
        ph = same_padding(image_size[0], kernel_size, stride)
        pw = same_padding(image_size[1], kernel_size, stride)
        symmetric = ph[0] == ph[1] and pw[0] == pw[1]
        super().__init__(in_ch, out_ch, kernel_size, stride, padding=(ph[0], pw[0]) if symmetric else 0,
                         groups=groups, bias=False)
        self.static_padding = nn.Identity() if symmetric else nn.ZeroPad2d((pw[0], pw[1], ph[0], ph[1]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(self.static_padding(x))


def _out_size(size: Tuple[int, int], stride: int) -> Tuple[int, int]:
    return int(math.ceil(size[0] / stride)), int(math.ceil(size[1] / stride))


class MBConvBlock(nn.Module):
    """Inverted residual without SE: [1x1 expand, BN, ReLU6] -> depthwise, BN, ReLU6 -> 1x1 project, BN."""

    def __init__(self, in_ch: int, out_ch: int, kernel: int, stride: int, expand: int,
                 image_size: Tuple[int, int]) -> None:
        super().__init__()
        hidden = in_ch * expand
        self.expand = expand != 1
        if self.expand:
            self._expand_conv = SameConv2d(in_ch, hidden, 1, image_size=image_size)
            self._bn0 = nn.BatchNorm2d(hidden, eps=BN_EPS, momentum=BN_MOMENTUM)
        self._depthwise_conv = SameConv2d(hidden, hidden, kernel, stride, groups=hidden, image_size=image_size)
        self._bn1 = nn.BatchNorm2d(hidden, eps=BN_EPS, momentum=BN_MOMENTUM)
        self._project_conv = SameConv2d(hidden, out_ch, 1, image_size=_out_size(image_size, stride))
        self._bn2 = nn.BatchNorm2d(out_ch, eps=BN_EPS, momentum=BN_MOMENTUM)
        self._act = nn.ReLU6()
        self.use_skip = stride == 1 and in_ch == out_ch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x
        if self.expand:
            y = self._act(self._bn0(self._expand_conv(y)))
        y = self._act(self._bn1(self._depthwise_conv(y)))
        y = self._bn2(self._project_conv(y))
        return x + y if self.use_skip else y


class EfficientNetLite(nn.Module):
    """EfficientNet-Lite0 (4.65 M parameters, 1000 classes, 224x224 input by default)."""

    def __init__(self, num_classes: int = 1000, image_size: int = 224, dropout: float = 0.2,
                 stages: Sequence[Tuple[int, int, int, int, int, int]] = LITE0_STAGES,
                 stem: int = 32, head: int = 1280) -> None:
        super().__init__()
        size = (image_size, image_size)
        self.image_size = image_size
        self._conv_stem = SameConv2d(3, stem, 3, 2, image_size=size)
        self._bn0 = nn.BatchNorm2d(stem, eps=BN_EPS, momentum=BN_MOMENTUM)
        size = _out_size(size, 2)
        blocks: List[nn.Module] = []
        for kernel, stride, expand, in_ch, out_ch, repeats in stages:
            for i in range(repeats):
                s = stride if i == 0 else 1
                blocks.append(MBConvBlock(in_ch if i == 0 else out_ch, out_ch, kernel, s, expand, size))
                size = _out_size(size, s)
        self._blocks = nn.ModuleList(blocks)
        self._conv_head = SameConv2d(stages[-1][4], head, 1, image_size=size)
        self._bn1 = nn.BatchNorm2d(head, eps=BN_EPS, momentum=BN_MOMENTUM)
        self._dropout = nn.Dropout(dropout)
        self._fc = nn.Linear(head, num_classes)
        self._act = nn.ReLU6()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self._act(self._bn0(self._conv_stem(x)))
        for block in self._blocks:
            x = block(x)
        x = self._act(self._bn1(self._conv_head(x)))
        x = torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1)
        return self._fc(self._dropout(x))


def efficientnet_lite0(num_classes: int = 1000, **kwargs) -> EfficientNetLite:
    return EfficientNetLite(num_classes=num_classes, **kwargs)
