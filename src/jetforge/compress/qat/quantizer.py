"""Fake quantization along TensorRT's INT8 rules (its developer guide's explicit-quantization chapter).

* symmetric INT8, zero point 0, scale ``amax / 127``, values rounded half-to-even and clamped to
  [-128, 127] -- exactly what ONNX ``QuantizeLinear``/``DequantizeLinear`` compute, so the exported
  Q/DQ model reproduces the PyTorch model (``torch.fake_quantize_per_*_affine`` export as those
  nodes);
* weights per output channel (axis 0 of Conv2d and Linear weights), ``amax = max|w|`` of the
  channel, recomputed from the current weight at every step (what TensorRT and NVIDIA's
  qdq-translator assume);
* activations per tensor, ``amax`` from a calibration run (:func:`jetforge.calibrate.algorithms`
  over :class:`jetforge.calibrate.histogram.StreamingHistogram`), then kept fixed during training;
* gradients: straight-through inside the range, zero outside (the clipped STE of
  ``fake_quantize_per_*_affine``, as in pytorch-quantization).
"""

from typing import Optional

import numpy as np
import torch
from torch import nn

from jetforge.errors import CompressError

INT8_BOUND = 127.0
QUANT_MIN, QUANT_MAX = -128, 127


def fake_quantize(x: torch.Tensor, amax: torch.Tensor, axis: Optional[int] = None) -> torch.Tensor:
    """``clamp(round_half_even(x / s), -128, 127) * s`` with ``s = amax / 127`` (per tensor or per ``axis``)."""
    amax = amax.detach().float()
    amax = torch.where(amax > 0, amax, torch.ones_like(amax))  # an always-zero tensor: any scale is exact
    scale = amax / INT8_BOUND
    if torch.onnx.is_in_onnx_export():  # a literal, so the ONNX scale is a constant initializer
        scale = torch.tensor(np.asarray(scale.cpu().numpy(), dtype=np.float32), device=x.device)
    xf = x if x.dtype == torch.float32 else x.float()  # no Cast node in the export
    if axis is None:
        out = torch.fake_quantize_per_tensor_affine(xf, scale.reshape(()), torch.zeros((), dtype=torch.int32,
                                                                                         device=x.device),
                                                    QUANT_MIN, QUANT_MAX)
    else:
        out = torch.fake_quantize_per_channel_affine(xf, scale, torch.zeros(scale.shape, dtype=torch.int32,
                                                                            device=x.device),
                                                     axis, QUANT_MIN, QUANT_MAX)
    return out if out.dtype == x.dtype else out.to(x.dtype)


class TensorQuantizer(nn.Module):
    """One fake-quantization point.  ``axis=None``: per tensor (activations); ``axis=0``: per channel (weights).

    A *weight* quantizer (``dynamic=True``) takes ``amax = max|w|`` per channel at every call; ``freeze()``
    stores the current one in the ``amax`` buffer (done before export, so the ONNX scales are constants).
    An *activation* quantizer needs a range: ``start_calibration()`` makes it pass values through while a
    histogram of ``|x|`` is collected; ``set_amax()`` ends that.
    """

    def __init__(self, axis: Optional[int] = None, channels: int = 0, dynamic: bool = False) -> None:
        super().__init__()
        self.axis = axis
        self.dynamic = bool(dynamic)
        self.enabled = True
        self.calibrating = False
        self.histogram = None
        shape = (channels,) if axis is not None else ()
        self.register_buffer("amax", torch.zeros(shape))
        self.register_buffer("calibrated", torch.tensor(bool(dynamic)))

    def extra_repr(self) -> str:
        kind = "per-channel axis=%d" % self.axis if self.axis is not None else "per-tensor"
        if self.dynamic:
            return "%s, amax=max|w|" % kind
        return "%s, amax=%s" % (kind, "%.5g" % float(self.amax) if bool(self.calibrated) else "uncalibrated")

    def weight_amax(self, w: torch.Tensor) -> torch.Tensor:
        a = w.detach().abs()
        if self.axis is None:
            return a.amax()
        dims = [d for d in range(a.dim()) if d != self.axis]
        return a.amax(dim=dims)

    def freeze(self, w: torch.Tensor) -> None:
        """Store ``max|w|`` in ``amax`` and stop recomputing it (export; the weights no longer change)."""
        self.amax = self.weight_amax(w).to(self.amax.device)
        self.dynamic = False
        self.calibrated.fill_(True)

    def unfreeze(self) -> None:
        self.dynamic = True

    def start_calibration(self, num_bins: int = 2048) -> None:
        from jetforge.calibrate.histogram import StreamingHistogram

        self.calibrating = True
        self.histogram = StreamingHistogram(num_bins=num_bins)

    def set_amax(self, amax: float) -> None:
        if not np.isfinite(amax) or amax < 0:
            raise CompressError("calibrated range %r is not a finite non-negative number" % amax,
                                hint="check the calibration data for inf/NaN")
        self.amax = torch.tensor(float(amax), device=self.amax.device)
        self.calibrated.fill_(True)
        self.calibrating = False
        self.histogram = None

    @property
    def scale(self) -> torch.Tensor:
        a = self.amax.detach().float()
        return torch.where(a > 0, a, torch.ones_like(a)) / INT8_BOUND

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.calibrating:
            if self.histogram is not None:
                self.histogram.update(x.detach().float().cpu().numpy())
            return x
        if not self.enabled:
            return x
        if self.dynamic:
            return fake_quantize(x, self.weight_amax(x), self.axis)
        if not torch.onnx.is_in_onnx_export() and not bool(self.calibrated):
            raise CompressError("an activation quantizer has no range yet",
                                hint="run jetforge.compress.qat.calibrate_qat(model, batches) before training or "
                                     "inference")
        return fake_quantize(x, self.amax, self.axis)


__all__ = ["INT8_BOUND", "QUANT_MAX", "QUANT_MIN", "TensorQuantizer", "fake_quantize"]
