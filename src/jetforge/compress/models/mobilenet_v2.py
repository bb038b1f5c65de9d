"""MobileNetV2 in plain torch, parameter-for-parameter compatible with torchvision's.

The module tree reproduces torchvision's names (``features.N...``, ``classifier.1``) so
that torchvision's ImageNet checkpoint ``mobilenet_v2-b0353104.pth`` loads with
``strict=True`` and the forward pass is the same computation (Sandler et al. 2018,
"MobileNetV2: Inverted Residuals and Linear Bottlenecks").  torchvision itself is not
needed: it is an optional package and has to match the torch build exactly.
"""

from typing import List, Optional, Tuple, Union

import torch
from torch import nn

# t (expansion), c (output channels), n (repeats), s (stride of the first repeat)
INVERTED_RESIDUAL_SETTING = [
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
]


def make_divisible(value: float, divisor: int = 8, min_value: Optional[int] = None) -> int:
    """Round a channel count to a multiple of ``divisor`` without dropping more than 10 %."""
    min_value = divisor if min_value is None else min_value
    new = max(min_value, int(value + divisor / 2) // divisor * divisor)
    if new < 0.9 * value:
        new += divisor
    return new


class ConvBNReLU6(nn.Sequential):
    """Conv2d (no bias) -> BatchNorm2d -> ReLU6, children named 0, 1, 2 as in torchvision."""

    def __init__(self, in_ch: int, out_ch: int, kernel_size: int = 3, stride: int = 1, groups: int = 1) -> None:
        padding = (kernel_size - 1) // 2
        super().__init__(
            nn.Conv2d(in_ch, out_ch, kernel_size, stride, padding, groups=groups, bias=False),
            nn.BatchNorm2d(out_ch),
            nn.ReLU6(inplace=True),
        )
        self.out_channels = out_ch


class InvertedResidual(nn.Module):
    """Expand (1x1) -> depthwise (3x3) -> project (1x1, linear), with a skip when shapes allow."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        if stride not in (1, 2):
            raise ValueError("stride must be 1 or 2, got %r" % stride)
        self.stride = stride
        hidden = int(round(in_ch * expand_ratio))
        self.use_res_connect = stride == 1 and in_ch == out_ch
        layers: List[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNReLU6(in_ch, hidden, kernel_size=1))
        layers += [
            ConvBNReLU6(hidden, hidden, stride=stride, groups=hidden),
            nn.Conv2d(hidden, out_ch, 1, 1, 0, bias=False),
            nn.BatchNorm2d(out_ch),
        ]
        self.conv = nn.Sequential(*layers)
        self.out_channels = out_ch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.use_res_connect:
            return x + self.conv(x)
        return self.conv(x)


class MobileNetV2(nn.Module):
    """ImageNet MobileNetV2 (width 1.0: 3.50 M parameters, 1000 classes by default)."""

    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0, round_nearest: int = 8,
                 dropout: float = 0.2) -> None:
        super().__init__()
        in_ch = make_divisible(32 * width_mult, round_nearest)
        self.last_channel = make_divisible(1280 * max(1.0, width_mult), round_nearest)
        features: List[nn.Module] = [ConvBNReLU6(3, in_ch, stride=2)]
        for t, c, n, s in INVERTED_RESIDUAL_SETTING:
            out_ch = make_divisible(c * width_mult, round_nearest)
            for i in range(n):
                features.append(InvertedResidual(in_ch, out_ch, s if i == 0 else 1, expand_ratio=t))
                in_ch = out_ch
        features.append(ConvBNReLU6(in_ch, self.last_channel, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout), nn.Linear(self.last_channel, num_classes))
        self._init_weights()

    def _init_weights(self) -> None:
        init_mobilenet_weights(self, nn.Conv2d, (nn.BatchNorm2d, nn.GroupNorm))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, (1, 1))
        x = torch.flatten(x, 1)
        return self.classifier(x)


def mobilenet_v2(num_classes: int = 1000, **kwargs) -> MobileNetV2:
    return MobileNetV2(num_classes=num_classes, **kwargs)


def init_mobilenet_weights(model: nn.Module, conv_type: Union[type, Tuple[type, ...]],
                           norm_type: Union[type, Tuple[type, ...]]) -> None:
    """torchvision's MobileNetV2 initialisation, shared by the 2D net and its 3D inflation (MobileNet3D) so both
    start from the same rule: convs Kaiming-normal (fan out), norms 1/0, the classifier N(0, 0.01)."""
    for m in model.modules():
        if isinstance(m, conv_type):
            nn.init.kaiming_normal_(m.weight, mode="fan_out")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, norm_type):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0, 0.01)
            nn.init.zeros_(m.bias)
