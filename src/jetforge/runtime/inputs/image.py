"""The ``image`` input kind: one frame -> one tensor (the one preprocessing implementation).

A model's sidecar records how frames must be turned into input tensors (size,
resize policy, colour order, scale, mean/std, layout).  Calibration, evaluation,
benchmarks and the video apps all use the same :class:`Preprocess` built from it
(:func:`jetforge.runtime.inputs.input_contract`), so the statistics INT8 scales are
computed from can never drift from what the deployed model sees.  Images come in as
OpenCV delivers them: HxWx3 uint8 BGR (or HxW grey).

Two paths give the same tensor: :meth:`Preprocess.apply` (numpy after one OpenCV resize:
the reference) and :meth:`Preprocess.fused` (:class:`FusedImage`: one ``cv2.resize`` and
one ``cv2.dnn.blobFromImageWithParams``, the apps' fast path).  Both cut the frame with
:meth:`Preprocess.resize_crop`, so what part of the frame the model sees is decided once.
"""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from jetforge.errors import ConfigError, InputFileError
from jetforge.jsonfile import expect_number
from jetforge.runtime.inputs.base import INPUT_KINDS, InputContract

RESIZE_MODES = ("short_side_crop", "stretch", "letterbox")
COLORS = ("rgb", "bgr", "gray")
LAYOUTS = ("nchw", "nhwc")


@INPUT_KINDS.register("image", summary="one frame -> one tensor: resize/crop/letterbox, colour, scale/mean/std")
@dataclass(frozen=True)
class Preprocess(InputContract):
    """How an image becomes one network input tensor (the ``image`` input kind).

    ``short_side_crop`` resizes the short side to ``size / crop_fraction`` and cuts
    the centre ``size`` (the ImageNet evaluation convention: 256 -> 224 is
    crop_fraction 0.875).  Pixel values are computed as ``(pixel * scale - mean) / std``
    per channel, in the channel order given by ``color``.
    """

    height: int = 224
    width: int = 224
    resize: str = "short_side_crop"
    crop_fraction: float = 0.875
    color: str = "rgb"
    scale: float = 1.0 / 255.0
    mean: Tuple[float, ...] = (0.485, 0.456, 0.406)
    std: Tuple[float, ...] = (0.229, 0.224, 0.225)
    layout: str = "nchw"
    dtype: str = "float32"
    interpolation: str = "linear"

    kind = "image"

    def __post_init__(self) -> None:
        expect_number(self.height, "height", 1, MAX_INPUT_SIDE, integer=True)  # 10^9 allocated until OpenCV failed
        expect_number(self.width, "width", 1, MAX_INPUT_SIDE, integer=True)
        if self.resize not in RESIZE_MODES:
            raise ValueError("resize must be one of %s, got %r" % (", ".join(RESIZE_MODES), self.resize))
        if self.color not in COLORS:
            raise ValueError("color must be one of %s, got %r" % (", ".join(COLORS), self.color))
        if self.layout not in LAYOUTS:
            raise ValueError("layout must be one of %s, got %r" % (", ".join(LAYOUTS), self.layout))
        expect_number(self.crop_fraction, "crop_fraction", 0.0, 1.0, low_open=True)
        if min(self.height, self.width) / self.crop_fraction > MAX_RESIZE_SIDE:  # 1e-300 resized to 2e302 pixels
            raise ValueError("crop_fraction %g resizes the short side to %.3g pixels for a %dx%d input; at most %d"
                             % (self.crop_fraction, min(self.height, self.width) / self.crop_fraction, self.width,
                                self.height, MAX_RESIZE_SIDE))
        if self.dtype not in ("float32", "float16"):
            raise ValueError("dtype must be float32 or float16, got %r" % self.dtype)
        if self.interpolation not in ("linear", "area", "nearest", "cubic"):
            raise ValueError("interpolation must be linear, area, nearest or cubic, got %r" % self.interpolation)
        channels = self.channels
        for name, values in (("mean", self.mean), ("std", self.std)):
            if len(values) not in (1, channels):
                raise ValueError("%s needs 1 or %d values for color=%s, got %d" % (name, channels, self.color, len(values)))
        check_pixel_arithmetic(self.scale, self.mean, self.std)

    @property
    def channels(self) -> int:
        return 1 if self.color == "gray" else 3

    @property
    def input_shape(self) -> Tuple[int, int, int]:
        """Shape of one preprocessed image (without the batch axis)."""
        if self.layout == "nchw":
            return (self.channels, self.height, self.width)
        return (self.height, self.width, self.channels)


    def geometry(self, image_hw: Tuple[int, int]) -> "ResizePlan":
        """Where the network input comes from in an ``(h, w)`` image: used to map boxes back."""
        h, w = image_hw
        if self.resize == "stretch":
            return ResizePlan(self.width / w, self.height / h, 0.0, 0.0, (self.width, self.height))
        if self.resize == "letterbox":  # the inverse is of what resize_crop does: the frame resized to (nw, nh) and
            # pasted at whole pixels (an odd padding puts the extra pixel right/below, as YOLO's letterbox does)
            s = min(self.width / w, self.height / h)
            nw, nh = max(1, int(round(w * s))), max(1, int(round(h * s)))
            return ResizePlan(nw / w, nh / h, float((self.width - nw) // 2), float((self.height - nh) // 2), (nw, nh))
        target_short = min(self.height, self.width) / self.crop_fraction
        s = target_short / min(h, w)
        nw, nh = max(self.width, int(round(w * s))), max(self.height, int(round(h * s)))
        return ResizePlan(nw / w, nh / h, -((nw - self.width) // 2), -((nh - self.height) // 2), (nw, nh))

    def resize_crop(self, image: np.ndarray, plan: "Optional[ResizePlan]" = None) -> np.ndarray:
        """The geometric half of preprocessing: resize, then centre-crop or letterbox (still uint8, input colours).

        Every preprocessing path (``apply`` and the apps' fused OpenCV path) goes through here, so
        what part of the frame the model sees is decided in one place.  ``plan`` lets a caller that
        sees many frames of one size pass :meth:`geometry`'s result instead of recomputing it.
        """
        import cv2

        plan = plan or self.geometry(image.shape[:2])
        interp = {"linear": cv2.INTER_LINEAR, "area": cv2.INTER_AREA, "nearest": cv2.INTER_NEAREST,
                  "cubic": cv2.INTER_CUBIC}[self.interpolation]
        resized = cv2.resize(image, plan.resized_wh, interpolation=interp)
        if self.resize == "short_side_crop":
            y0, x0 = int(-plan.offset_y), int(-plan.offset_x)
            return resized[y0:y0 + self.height, x0:x0 + self.width]
        if self.resize == "letterbox":
            canvas = np.full((self.height, self.width) + resized.shape[2:], 114, dtype=resized.dtype)
            y0, x0 = int(plan.offset_y), int(plan.offset_x)
            canvas[y0:y0 + resized.shape[0], x0:x0 + resized.shape[1]] = resized
            return canvas
        return resized

    def apply(self, image: np.ndarray) -> np.ndarray:
        """One image (HxWx3 uint8 BGR, or HxW grey) -> one input tensor of ``input_shape``."""
        import cv2

        image = _check_image(image)
        if image.ndim == 2 and self.color != "gray":
            image = cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
        elif image.ndim == 3 and image.shape[2] == 4:
            image = cv2.cvtColor(image, cv2.COLOR_BGRA2BGR)
        resized = self.resize_crop(image)
        if self.color == "rgb":
            resized = cv2.cvtColor(resized, cv2.COLOR_BGR2RGB)
        elif self.color == "gray" and resized.ndim == 3:
            resized = cv2.cvtColor(resized, cv2.COLOR_BGR2GRAY)
        if resized.ndim == 2:
            resized = resized[:, :, None]
        return self.normalize(resized)

    def normalize(self, pixels: np.ndarray) -> np.ndarray:
        """``(..., H, W, C)`` pixels already in ``color`` order -> ``(x * scale - mean) / std`` in ``layout``.

        The arithmetic half of preprocessing, for callers that cut the pixels themselves (MTCNN's
        box crops); computed as one multiply-add per value in float32 (``x * a + b``).
        """
        return normalize_pixels(pixels, self.scale, self.mean, self.std, self.channels, self.layout, self.dtype)

    def fused(self) -> "FusedImage":
        """The OpenCV fast path: same tensors as :meth:`apply` (to float rounding), two OpenCV calls."""
        return FusedImage(self)

    def batch(self, images: Sequence[np.ndarray]) -> np.ndarray:
        """Several images -> one ``(N, ...)`` batch tensor."""
        if len(images) == 0:
            raise InputFileError("no images to preprocess", hint="give at least one image")
        return np.stack([self.apply(im) for im in images])

    def to_dict(self) -> dict:
        return {"height": self.height, "width": self.width, "resize": self.resize,
                "crop_fraction": self.crop_fraction, "color": self.color, "scale": self.scale,
                "mean": list(self.mean), "std": list(self.std), "layout": self.layout, "dtype": self.dtype,
                "interpolation": self.interpolation}

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "Preprocess":
        from jetforge.config import from_dict

        try:
            return from_dict(cls, data, where="preprocess")
        except ValueError as err:  # pragma: no cover - from_dict converts these
            raise ConfigError(str(err)) from err

    def describe(self) -> str:
        return "image %dx%d %s %s %s" % (self.width, self.height, self.resize, self.color, self.layout)


@dataclass(frozen=True)
class ResizePlan:
    """Input-pixel = image-pixel * scale + offset (per axis), plus the resized size before crop/pad."""

    scale_x: float
    scale_y: float
    offset_x: float
    offset_y: float
    resized_wh: Tuple[int, int] = field(default=(0, 0))

    def to_image(self, x: float, y: float) -> Tuple[float, float]:
        """Map a point from network-input pixels back to original-image pixels."""
        return (x - self.offset_x) / self.scale_x, (y - self.offset_y) / self.scale_y


MAX_INPUT_SIDE = 8192  # pixels along a model input's side: the largest image jetforge decodes (runtime/image_files.py)
MAX_RESIZE_SIDE = 2 * MAX_INPUT_SIDE  # the short side a frame is resized to before a centre crop
_F32 = np.finfo(np.float32)


def check_pixel_arithmetic(scale: float, mean: Sequence[float], std: Sequence[float], names: str = "scale mean std"
                           ) -> None:
    """Refuse (ValueError naming the field) numbers that make ``(x * scale - mean) / std`` no finite float32 for a
    uint8 ``x``: a scale or std that is not a positive normal float32 (zero, negative, denormal, infinite: a
    sidecar's ``scale: 1e999`` gave events ``"p": NaN``), or a mean past float32 (a NaN mean made calibrate write
    an empty cache).  The image and image_pyramid kinds and the clip kind's channel statistics share it."""
    scale_name, mean_name, std_name = names.split()
    expect_number(scale, scale_name, float(_F32.tiny), float(_F32.max))
    for value in mean:
        expect_number(value, mean_name, -float(_F32.max), float(_F32.max))
    for value in std:
        expect_number(value, std_name, float(_F32.tiny), float(_F32.max))
    if 255.0 * scale / min(std) > _F32.max or max(abs(m) for m in mean) / min(std) > _F32.max:
        raise ValueError("%s / %s or %s / %s is beyond float32" % (scale_name, std_name, mean_name, std_name))


def normalize_pixels(pixels: np.ndarray, scale: float, mean: Sequence[float], std: Sequence[float], channels: int,
                     layout: str = "nchw", dtype: str = "float32") -> np.ndarray:
    """``(..., H, W, C)`` pixels -> ``(x * scale - mean) / std`` per channel, in ``layout``, as ``dtype``.

    Computed as ``x * a + b`` with ``a = scale / std`` and ``b = -mean / std`` in float32: one
    multiply-add per value (the image and image_pyramid kinds share it).
    """
    std_ = np.asarray(std, dtype=np.float32)
    mean_ = np.asarray(mean, dtype=np.float32)
    a = np.broadcast_to(np.float32(scale) / std_, (channels,)).astype(np.float32)
    b = np.broadcast_to(-mean_ / std_, (channels,)).astype(np.float32)
    out = np.asarray(pixels).astype(np.float32)
    out *= a
    out += b
    if layout == "nchw":
        out = np.moveaxis(out, -1, -3)
    return np.ascontiguousarray(out, dtype=np.dtype(dtype))


def _check_image(image: np.ndarray) -> np.ndarray:
    if not isinstance(image, np.ndarray):
        raise InputFileError("expected an image as a numpy array, got %s" % type(image).__name__)
    if image.ndim not in (2, 3) or (image.ndim == 3 and image.shape[2] not in (1, 3, 4)):
        raise InputFileError("expected an HxW or HxWx{1,3,4} image, got shape %s" % (image.shape,))
    if image.size == 0:
        raise InputFileError("image is empty")
    if image.dtype != np.uint8:
        raise InputFileError("expected a uint8 image (as OpenCV decodes it), got %s" % image.dtype,
                             hint="convert with np.clip(x, 0, 255).astype(np.uint8)")
    if image.ndim == 3 and image.shape[2] == 1:
        image = image[:, :, 0]
    return image


class FusedImage:
    """:class:`Preprocess` in two OpenCV calls instead of five (the image kind's fused path).

    One ``cv2.resize`` (through :meth:`Preprocess.resize_crop`) and one
    ``cv2.dnn.blobFromImageWithParams`` (crop view, BGR->RGB, ``(x*scale - mean)/std`` per channel,
    HWC->CHW, float32) give the same tensor as ``Preprocess.apply`` (checked to 1e-5 in the tests)
    at a third less CPU.  Modes the fused call cannot express (letterbox, grey, NHWC, float16) fall
    back to ``apply``.  Geometry is cached per frame size.
    """

    def __init__(self, preprocess: Preprocess) -> None:
        self.preprocess = preprocess
        self.fused = (preprocess.resize in ("short_side_crop", "stretch") and preprocess.color in ("rgb", "bgr")
                      and preprocess.layout == "nchw" and preprocess.dtype == "float32")
        std = np.broadcast_to(np.asarray(preprocess.std, np.float64), (3,))
        mean = np.broadcast_to(np.asarray(preprocess.mean, np.float64), (3,))
        # (x*scale - mean)/std == (x - mean/scale) * (scale/std); OpenCV applies (x - mean) * scalefactor.
        self._scalefactor = tuple(float(preprocess.scale / s) for s in std) + (0.0,)
        self._mean = tuple(float(m / preprocess.scale) for m in mean) + (0.0,)
        self._plans: Dict[Any, Any] = {}
        self._params: Any = None

    def __call__(self, image: np.ndarray) -> np.ndarray:
        if not self.fused or image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
            return self.preprocess.apply(image)
        import cv2

        p = self.preprocess
        hw = image.shape[:2]
        plan = self._plans.get(hw)
        if plan is None:
            plan = self._plans[hw] = p.geometry(hw)
        resized = p.resize_crop(image, plan)
        if self._params is None:
            self._params = cv2.dnn.Image2BlobParams(scalefactor=self._scalefactor, size=(p.width, p.height),
                                                    mean=self._mean, swapRB=p.color == "rgb", ddepth=cv2.CV_32F)
        return cv2.dnn.blobFromImageWithParams(resized, self._params)[0]


IMAGENET_TORCHVISION = Preprocess()
"""torchvision's ImageNet convention: RGB, 256 -> 224 centre crop, mean/std normalisation."""

IMAGENET_TFLITE = Preprocess(scale=1.0, mean=(127.0,), std=(128.0,), crop_fraction=0.875)
"""TF-Lite convention used by EfficientNet-Lite: RGB, (x - 127) / 128."""


def known_presets() -> List[str]:
    return ["imagenet_torchvision", "imagenet_tflite"]


ImageInput = Preprocess
"""The image kind under its kind name (``Preprocess`` is the name the rest of jetforge has always used)."""

__all__ = ["FusedImage", "IMAGENET_TFLITE", "IMAGENET_TORCHVISION", "ImageInput", "Preprocess", "ResizePlan",
           "known_presets", "normalize_pixels"]
