"""Quantized layers: quantizers on the *inputs* of quantizable operations (TensorRT's Q/DQ placement rules).

``QuantConv2d`` / ``QuantConv3d`` / ``QuantLinear`` quantize their input per tensor and their weight per
output channel (axis 0 of the weight, whatever its rank: a 3D convolution's ``(M, C/g, kT, kH, kW)`` weight
is quantized per ``M`` like a 2D one); the bias stays float (TensorRT quantizes it to INT32 itself).
``QuantAdd`` replaces a residual ``a + b`` and quantizes both inputs, so TensorRT can fuse the add into the
preceding convolution in INT8.
"""

import torch
from torch import nn

from jetforge.compress.qat.quantizer import TensorQuantizer


class _QuantConv:
    """What every quantized convolution adds to its float class: the two quantizers and a forward using them."""

    @classmethod
    def from_float(cls, conv):
        q = cls(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding, conv.dilation,
                conv.groups, conv.bias is not None, conv.padding_mode, device=conv.weight.device)
        with torch.no_grad():
            q.weight.copy_(conv.weight)
            if conv.bias is not None:
                q.bias.copy_(conv.bias)
        q.train(conv.training)
        return q

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.input_quantizer = TensorQuantizer()
        self.weight_quantizer = TensorQuantizer(axis=0, channels=self.out_channels, dynamic=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._conv_forward(self.input_quantizer(x), self.weight_quantizer(self.weight), self.bias)


class QuantConv2d(_QuantConv, nn.Conv2d):
    """``nn.Conv2d`` with a per-tensor input quantizer and a per-output-channel weight quantizer."""


class QuantConv3d(_QuantConv, nn.Conv3d):
    """``nn.Conv3d`` (3D and the (2+1)D factors, depthwise/grouped included), quantized like ``QuantConv2d``."""


class QuantLinear(nn.Linear):
    @classmethod
    def from_float(cls, lin: nn.Linear) -> "QuantLinear":
        q = cls(lin.in_features, lin.out_features, lin.bias is not None, device=lin.weight.device)
        with torch.no_grad():
            q.weight.copy_(lin.weight)
            if lin.bias is not None:
                q.bias.copy_(lin.bias)
        q.train(lin.training)
        return q

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.input_quantizer = TensorQuantizer()
        self.weight_quantizer = TensorQuantizer(axis=0, channels=self.out_features, dynamic=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(self.input_quantizer(x), self.weight_quantizer(self.weight), self.bias)


class QuantAdd(nn.Module):
    """``a + b`` with both inputs fake-quantized per tensor (the residual add)."""

    def __init__(self) -> None:
        super().__init__()
        self.input_quantizer_a = TensorQuantizer()
        self.input_quantizer_b = TensorQuantizer()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.input_quantizer_a(a) + self.input_quantizer_b(b)


class FrozenBatchNorm(nn.Module):
    """A BatchNorm (2d or 3d) that no convolution precedes (so it cannot be folded): its statistics and affine
    parameters are frozen -- a fixed per-channel scale and shift on axis 1 in training and inference alike."""

    def __init__(self, bn: nn.Module) -> None:
        super().__init__()
        std = torch.sqrt(bn.running_var + bn.eps)
        w = bn.weight.detach() if bn.weight is not None else torch.ones_like(std)
        b = bn.bias.detach() if bn.bias is not None else torch.zeros_like(std)
        self.register_buffer("scale", (w / std).detach().clone())
        self.register_buffer("shift", (b - bn.running_mean * w / std).detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = (1, -1) + (1,) * (x.dim() - 2)  # the rank is static under tracing and export
        return x * self.scale.view(shape) + self.shift.view(shape)


FrozenBatchNorm2d = FrozenBatchNorm  # the name older code and checkpoints use

__all__ = ["FrozenBatchNorm", "FrozenBatchNorm2d", "QuantAdd", "QuantConv2d", "QuantConv3d", "QuantLinear"]
