"""The numbers of one preprocessing launch, computed from the model's input contract (CPU, no CUDA).

The GPU kernel and the float64 reference both read a :class:`KernelPlan`, so what part of the frame
the model sees is decided once, by the contract's own :meth:`Preprocess.geometry` (the same
``ResizePlan`` the CPU path cuts frames with).  The CPU path resizes the whole frame to
``resized_wh`` with ``cv2.resize(INTER_LINEAR)`` and then crops the centre (``short_side_crop``) or
pastes it on a grey canvas (``letterbox``, pad value 114); the kernel computes each output pixel
directly from the frame with OpenCV's sampling positions (half-pixel centres:
``src = (dst + 0.5) * src_size / resized_size - 0.5``, clamped to the frame), so no intermediate
image exists and the result is that of resize -> crop/pad -> normalise.

Output pixel ``(x, y)`` lies on the resized image when ``region_x0 <= x < region_x1`` (and likewise
for y); its resized coordinate is ``x + shift_x``.  Outside the region is the letterbox pad.
Normalisation is ``value * a[c] + b[c]`` per output channel with ``a = scale / std`` and
``b = -mean / std`` (the contract's ``(x * scale - mean) / std``).
"""

from dataclasses import dataclass
from typing import Any, Tuple

import numpy as np

from jetforge.errors import ConfigError

INPUT_FORMATS = ("nv12", "rgb", "bgr")
OUT_DTYPES = ("float32", "float16")
LETTERBOX_PAD = 114  # the contract's canvas value (Preprocess.resize_crop)
GRAY_WEIGHTS = (0.299, 0.587, 0.114)  # R, G, B: ITU-R BT.601 luma, as cv2.COLOR_BGR2GRAY


@dataclass(frozen=True)
class KernelPlan:
    """Geometry, channel order and normalisation of one (contract, frame size) pair."""

    src_w: int
    src_h: int
    out_w: int
    out_h: int
    region: Tuple[int, int, int, int]  # x0, y0, x1, y1 of the resized image inside the output
    shift: Tuple[int, int]             # resized coordinate = output coordinate + shift
    scale: Tuple[float, float]         # frame pixels per resized pixel (x, y)
    channels: int                      # 3 (rgb/bgr) or 1 (gray)
    out_order: str                     # rgb | bgr | gray
    nhwc: bool
    a: Tuple[float, float, float]      # per output channel: value * a + b
    b: Tuple[float, float, float]

    @property
    def pad_value(self) -> float:
        return float(LETTERBOX_PAD)

    def output_shape(self, batch: int) -> Tuple[int, ...]:
        if self.nhwc:
            return (batch, self.out_h, self.out_w, self.channels)
        return (batch, self.channels, self.out_h, self.out_w)

    def sample_positions(self, axis: str) -> Tuple[np.ndarray, np.ndarray]:
        """For every output column (``axis="x"``) or row: (inside the resized region?, frame coordinate).

        The frame coordinate follows cv2.resize INTER_LINEAR: ``(r + 0.5) * scale - 0.5``, clamped to
        ``[0, size - 1]`` (OpenCV replicates the border pixel).
        """
        if axis == "x":
            n, lo, hi, shift, scale, size = self.out_w, self.region[0], self.region[2], self.shift[0], self.scale[0], self.src_w
        else:
            n, lo, hi, shift, scale, size = self.out_h, self.region[1], self.region[3], self.shift[1], self.scale[1], self.src_h
        out = np.arange(n, dtype=np.float64)
        inside = (out >= lo) & (out < hi)
        coord = np.clip((out + shift + 0.5) * scale - 0.5, 0.0, size - 1.0)
        return inside, coord


def plan_for(contract: Any, frame_hw: Tuple[int, int]) -> KernelPlan:
    """The :class:`KernelPlan` of an image input contract (``runtime.inputs.Preprocess``) for ``frame_hw`` frames."""
    if getattr(contract, "kind", None) != "image":
        raise ConfigError("GPU preprocessing needs an image input contract, got %s"
                          % getattr(contract, "kind", type(contract).__name__),
                          hint="clips and image pyramids are prepared on the CPU (runtime.inputs)")
    if contract.interpolation != "linear":
        raise ConfigError("GPU preprocessing resizes bilinearly; this model's contract asks for %r interpolation"
                          % contract.interpolation,
                          hint="use the CPU path (--decode cpu) for this model, or export it with "
                               "interpolation linear")
    h, w = int(frame_hw[0]), int(frame_hw[1])
    if h < 1 or w < 1:
        raise ConfigError("frame size %dx%d is empty" % (w, h))
    geo = contract.geometry((h, w))
    nw, nh = geo.resized_wh
    if contract.resize == "letterbox":
        x0, y0 = int(geo.offset_x), int(geo.offset_y)  # as Preprocess.resize_crop pastes it
        region, shift = (x0, y0, x0 + nw, y0 + nh), (-x0, -y0)
    elif contract.resize == "short_side_crop":
        region, shift = (0, 0, contract.width, contract.height), (int(-geo.offset_x), int(-geo.offset_y))
    else:
        region, shift = (0, 0, contract.width, contract.height), (0, 0)
    channels = contract.channels
    std = np.broadcast_to(np.asarray(contract.std, np.float64), (channels,))
    mean = np.broadcast_to(np.asarray(contract.mean, np.float64), (channels,))
    a = tuple(float(contract.scale / s) for s in std) + (0.0,) * (3 - channels)
    b = tuple(float(-m / s) for m, s in zip(mean, std)) + (0.0,) * (3 - channels)
    return KernelPlan(src_w=w, src_h=h, out_w=contract.width, out_h=contract.height, region=region, shift=shift,
                      scale=(w / float(nw), h / float(nh)), channels=channels, out_order=contract.color,
                      nhwc=contract.layout == "nhwc", a=a, b=b)  # type: ignore[arg-type]


def check_input_format(input_format: str) -> str:
    if input_format not in INPUT_FORMATS:
        raise ConfigError("unknown GPU frame format %r" % (input_format,),
                          hint="use one of %s" % ", ".join(INPUT_FORMATS))
    return input_format


def check_out_dtype(dtype: str) -> str:
    if dtype not in OUT_DTYPES:
        raise ConfigError("GPU preprocessing writes float32 or float16, not %r" % (dtype,),
                          hint="use out_dtype float32 or float16")
    return dtype


__all__ = ["GRAY_WEIGHTS", "INPUT_FORMATS", "KernelPlan", "LETTERBOX_PAD", "OUT_DTYPES", "check_input_format",
           "check_out_dtype", "plan_for"]
