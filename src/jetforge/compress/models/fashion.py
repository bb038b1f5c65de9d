"""Small models for Fashion-MNIST (1x28x28 grey images, 10 classes) used by the recipes and benchmarks.

* ``fashion_cnn`` -- a ResNet-style CNN: stem, a strided conv, one residual block (so QAT meets a
  residual Add), a second strided conv, global average pooling, a linear head.  ``width`` scales
  every layer's channels (``width=0.5`` is the "50 % width" student).
* ``fashion_mobilenet_v2`` -- jetforge's MobileNetV2 (:mod:`jetforge.compress.models.mobilenet_v2`)
  adapted to 1-channel 28x28 input: a stride-1 stem taking one channel, 10 classes; ``width`` is
  MobileNetV2's ``width_mult``.  The harder, depthwise model.
"""

from typing import Any, Callable, Dict

import torch
from torch import nn

from jetforge.errors import UnknownNameError


def _ch(base: int, width: float) -> int:
    return max(4, int(round(base * width / 4.0)) * 4)


def conv_bn_relu(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class BasicBlock(nn.Module):
    """conv-BN-ReLU-conv-BN plus the identity, then ReLU (ResNet's basic block, no downsampling)."""

    def __init__(self, ch: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(ch, ch, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(ch)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(ch, ch, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(ch)
        self.relu2 = nn.ReLU(inplace=True)

    def forward(self, x):
        y = self.relu1(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu2(y + x)


class FashionCNN(nn.Module):
    """28x28 -> stem(32) -> s2(64) -> residual(64) -> s2(128) -> GAP -> linear(10), channels times ``width``."""

    def __init__(self, width: float = 1.0, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        c1, c2, c3 = _ch(32, width), _ch(64, width), _ch(128, width)
        self.stem = conv_bn_relu(in_channels, c1)
        self.down1 = conv_bn_relu(c1, c2, stride=2)
        self.block = BasicBlock(c2)
        self.down2 = conv_bn_relu(c2, c3, stride=2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten(1)
        self.fc = nn.Linear(c3, num_classes)

    def forward(self, x):
        x = self.down2(self.block(self.down1(self.stem(x))))
        return self.fc(self.flatten(self.pool(x)))


def fashion_cnn(width: float = 1.0, num_classes: int = 10) -> FashionCNN:
    return FashionCNN(width=width, num_classes=num_classes)


def fashion_mobilenet_v2(width: float = 0.5, num_classes: int = 10) -> nn.Module:
    from jetforge.compress.models.mobilenet_v2 import mobilenet_v2

    model = mobilenet_v2(num_classes=num_classes, width_mult=width, dropout=0.1)
    stem = model.features[0][0]
    model.features[0][0] = nn.Conv2d(1, stem.out_channels, 3, 1, 1, bias=False)  # 1 channel, keep 28x28
    return model


ARCHS: Dict[str, Callable[..., Any]] = {"fashion_cnn": fashion_cnn, "fashion_mobilenet_v2": fashion_mobilenet_v2}


def build_model(arch: str, width: float = 1.0, num_classes: int = 10) -> nn.Module:
    if arch not in ARCHS:
        raise UnknownNameError("model architecture", arch, ARCHS)
    return ARCHS[arch](width=width, num_classes=num_classes)


__all__ = ["ARCHS", "BasicBlock", "FashionCNN", "build_model", "fashion_cnn", "fashion_mobilenet_v2"]
