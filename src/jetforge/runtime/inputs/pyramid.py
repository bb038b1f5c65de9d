"""The ``image_pyramid`` input kind: one frame -> one input per pyramid level (a cascade's first network).

A cascade detector such as MTCNN runs its first, fully convolutional network (PNet) over the frame
at several scales: level ``k`` is the frame resampled by ``s_k = (window / min_size) * factor**k``
(sides ``int(h * s_k + 1) x int(w * s_k + 1)``), for every ``s_k`` whose short side still holds one
``window``; each level is normalised like an image, ``(x * scale - mean) / std`` per channel in
``color`` order.  For MTCNN (facenet-pytorch's ``detect_face``) that is window 12, min face 20 px,
factor 0.709, RGB, ``(x - 127.5) * 0.0078125``, written by the MTCNN export into PNet's sidecar.

Resampling (``resample``):

* ``"area"`` -- the numpy path: adaptive average pooling (torch's ``interpolate(mode="area")``,
  which facenet-pytorch uses) computed exactly from one summed-area table per frame
  (:class:`AreaSampler`); the cascade's later stages cut their box crops from the same table;
* the fused OpenCV path (:meth:`ImagePyramid.fused`): ``cv2.resize(INTER_AREA)`` + one
  ``cv2.dnn.blobFromImageWithParams`` per level.  It equals the numpy path where a level is an
  integer downscale of the frame; elsewhere OpenCV weights partial pixels by their area where torch
  counts them whole, so values differ at the pooling-cell edges (faster; not the default).

Torch-free, Python 3.8.
"""

from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

import numpy as np

from jetforge.runtime.inputs.base import INPUT_KINDS, InputContract
from jetforge.jsonfile import expect_number
from jetforge.runtime.inputs.image import COLORS, LAYOUTS, MAX_INPUT_SIDE, check_pixel_arithmetic, normalize_pixels

RESAMPLERS = ("area",)


def _pool_bounds(n_in: int, n_out: int) -> Tuple[np.ndarray, np.ndarray]:
    i = np.arange(n_out, dtype=np.int64)
    start = (i * n_in) // n_out
    end = -((-(i + 1) * n_in) // n_out)  # ceil((i + 1) * n_in / n_out)
    return start, end


class AreaSampler:
    """An integral image (summed-area table, float64) of one frame, for every area resample of it.

    The pyramid levels and every later-stage crop are averages of pixel rectangles of the
    same frame, so one table serves them all: each output pixel costs four look-ups,
    and the sums of uint8 pixels are exact in float64.
    """

    def __init__(self, image: np.ndarray) -> None:
        h, w = image.shape[:2]
        table = np.zeros((h + 1, w + 1) + image.shape[2:], np.float64)
        np.cumsum(image, axis=0, dtype=np.float64, out=table[1:, 1:])
        np.cumsum(table[1:, 1:], axis=1, out=table[1:, 1:])
        self.table = table

    def resize(self, y0: int, y1: int, x0: int, x1: int, out_h: int, out_w: int) -> np.ndarray:
        """Rows y0..y1-1 and columns x0..x1-1, area-resampled to out_h x out_w (float32)."""
        ys, ye = _pool_bounds(y1 - y0, out_h)
        xs, xe = _pool_bounds(x1 - x0, out_w)
        ys, ye, xs, xe = ys + y0, ye + y0, xs + x0, xe + x0
        t = self.table
        total = t[ye][:, xe] - t[ys][:, xe] - t[ye][:, xs] + t[ys][:, xs]
        area = ((ye - ys)[:, None] * (xe - xs)[None, :]).astype(np.float64)
        if total.ndim == 3:
            area = area[:, :, None]
        return (total / area).astype(np.float32)


def area_resize(image: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """HxWxC image -> out_h x out_w x C float32, exactly torch's ``interpolate(mode="area")``.

    That is adaptive average pooling: output cell i averages input rows
    floor(i*H/out_h) .. ceil((i+1)*H/out_h) - 1 (and the same for columns) with equal
    weights; unlike cv2.INTER_AREA, partial pixels count whole, and enlarging repeats pixels.
    """
    return AreaSampler(image).resize(0, image.shape[0], 0, image.shape[1], out_h, out_w)


@INPUT_KINDS.register("image_pyramid", summary="one frame -> one tensor per scale (a cascade's first network)")
@dataclass(frozen=True)
class ImagePyramid(InputContract):
    """The levels a cascade's first network sees (module doc); defaults are facenet-pytorch's MTCNN."""

    window: int = 12
    min_size: float = 20.0
    factor: float = 0.709
    color: str = "rgb"
    scale: float = 1.0
    mean: Tuple[float, ...] = (127.5,)
    std: Tuple[float, ...] = (128.0,)
    layout: str = "nchw"
    resample: str = "area"

    kind = "image_pyramid"

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError("window must be a positive number of pixels, got %r" % self.window)
        if self.min_size < self.window:
            raise ValueError("min_size must be at least the window (%d pixels), got %r" % (self.window, self.min_size))
        # MTCNN's 0.709 halves the area per level; 0.95 is ~90 levels for a 1080p frame, 0.999999 was millions
        expect_number(self.factor, "the pyramid factor", 0.05, 0.95)
        if self.color not in COLORS or self.layout not in LAYOUTS or self.resample not in RESAMPLERS:
            raise ValueError("color must be one of %s, layout one of %s, resample one of %s"
                             % (", ".join(COLORS), ", ".join(LAYOUTS), ", ".join(RESAMPLERS)))
        for name, values in (("mean", self.mean), ("std", self.std)):
            if len(values) not in (1, self.channels):
                raise ValueError("%s needs 1 or %d values, got %d" % (name, self.channels, len(values)))
        check_pixel_arithmetic(self.scale, self.mean, self.std)
        expect_number(self.window, "window", 1, MAX_INPUT_SIDE, integer=True)
        expect_number(self.min_size, "min_size", self.window, MAX_INPUT_SIDE)

    @property
    def channels(self) -> int:
        return 1 if self.color == "gray" else 3

    def to_dict(self) -> Dict[str, Any]:
        return {"window": self.window, "min_size": self.min_size, "factor": self.factor, "color": self.color,
                "scale": self.scale, "mean": list(self.mean), "std": list(self.std), "layout": self.layout,
                "resample": self.resample}

    def describe(self) -> str:
        return "image pyramid (window %d, min size %g px, factor %g, %s)" % (self.window, self.min_size,
                                                                          self.factor, self.color)

    def with_min_size(self, min_size: float) -> "ImagePyramid":
        """The same pyramid searching down to ``min_size`` pixels (the app's ``--min-face``)."""
        import dataclasses

        return dataclasses.replace(self, min_size=float(min_size))

    def scales(self, height: int, width: int) -> List[float]:
        """Scale of every level for an ``height x width`` frame, largest first."""
        m = float(self.window) / self.min_size
        minl = min(height, width) * m
        out = []
        s = m
        while minl >= self.window:
            out.append(s)
            s = s * self.factor
            minl = minl * self.factor
        return out

    @staticmethod
    def level_size(height: int, width: int, scale: float) -> Tuple[int, int]:
        return int(height * scale + 1), int(width * scale + 1)

    def sampler(self, image: np.ndarray, rgb: bool = False) -> AreaSampler:
        """The summed-area table of a frame in the contract's colour order (``image`` BGR unless ``rgb``)."""
        return AreaSampler(self.pixels(image, rgb))

    def pixels(self, image: np.ndarray, rgb: bool = False) -> np.ndarray:
        """An HxWx3 uint8 frame (BGR, or RGB with ``rgb``) in the contract's colour order."""
        if self.color == "gray":
            import cv2

            return cv2.cvtColor(image, cv2.COLOR_RGB2GRAY if rgb else cv2.COLOR_BGR2GRAY)[:, :, None]
        return image if rgb == (self.color == "rgb") else image[:, :, ::-1]

    def normalize(self, pixels: np.ndarray) -> np.ndarray:
        """``(..., H, W, C)`` pixels in colour order -> float32 network input in ``layout``."""
        return normalize_pixels(pixels, self.scale, self.mean, self.std, self.channels, self.layout)

    def levels(self, image: np.ndarray, rgb: bool = False, sampler: "AreaSampler" = None
               ) -> List[Tuple[float, np.ndarray]]:
        """The numpy path: ``(scale, 1 x C x h x w input)`` per level of an HxWx3 uint8 frame."""
        h, w = image.shape[:2]
        sampler = sampler or self.sampler(image, rgb)
        return [(s, self.normalize(sampler.resize(0, h, 0, w, *self.level_size(h, w, s)))[None])
                for s in self.scales(h, w)]

    def fused(self) -> "FusedPyramid":
        return FusedPyramid(self)


class FusedPyramid:
    """The OpenCV path of :meth:`ImagePyramid.levels`: ``cv2.resize(INTER_AREA)`` + one blob call per level.

    Equal to the numpy path where a level is an integer downscale of the frame; elsewhere OpenCV's
    area weights differ from adaptive pooling at cell edges (module doc).
    """

    def __init__(self, pyramid: ImagePyramid) -> None:
        self.pyramid = pyramid
        std = np.broadcast_to(np.asarray(pyramid.std, np.float64), (pyramid.channels,))
        mean = np.broadcast_to(np.asarray(pyramid.mean, np.float64), (pyramid.channels,))
        pad = (0.0,) * (4 - pyramid.channels)
        self._scalefactor = tuple(float(pyramid.scale / s) for s in std) + pad
        self._mean = tuple(float(m / pyramid.scale) for m in mean) + pad

    def __call__(self, image: np.ndarray, rgb: bool = False) -> List[Tuple[float, np.ndarray]]:
        import cv2

        p = self.pyramid
        h, w = image.shape[:2]
        pixels = p.pixels(image, rgb)
        out = []
        for s in p.scales(h, w):
            lh, lw = p.level_size(h, w, s)
            level = cv2.resize(pixels, (lw, lh), interpolation=cv2.INTER_AREA)
            params = cv2.dnn.Image2BlobParams(scalefactor=self._scalefactor, size=(lw, lh), mean=self._mean,
                                              swapRB=False, ddepth=cv2.CV_32F,
                                              datalayout=cv2.dnn.DNN_LAYOUT_NCHW if p.layout == "nchw"
                                              else cv2.dnn.DNN_LAYOUT_NHWC)
            out.append((s, cv2.dnn.blobFromImageWithParams(level, params)))
        return out


def pyramid_from_legacy(pre: Any) -> ImagePyramid:
    """PNet's format-1 sidecar recorded a nominal 12x12 ``preprocess`` block; the pyramid it stood for.

    The window is that nominal size, colour and normalisation are the block's; ``min_size`` and
    ``factor`` are facenet-pytorch's defaults, which the format-1 faces app applied.
    """
    return ImagePyramid(window=int(pre.height), color=pre.color, scale=float(pre.scale), mean=tuple(pre.mean),
                        std=tuple(pre.std), layout=pre.layout)


__all__ = ["AreaSampler", "FusedPyramid", "ImagePyramid", "RESAMPLERS", "area_resize", "pyramid_from_legacy"]
