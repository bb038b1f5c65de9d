"""The ``clip`` input kind: a window of frames of one tracked person -> the input of a clip-based action model.

Shared by training (``jetforge.compress.action.track_clips``, ``jetforge.compress.action.action3d``)
and the app (``jetforge.apps.tasks.action``) so that the crops a model was trained on and
the crops it sees on the device cannot drift apart; the numbers travel in the model's
sidecar (the ``input`` block, kind ``clip``; format-1 sidecars kept them in ``extra.clip``).

The window is cut at one fixed region (the union of the track's boxes over the window, scaled by
``margin``, at the crop's aspect ratio), each frame's crop is area-resized to ``crop_height x
crop_width`` grey, and values become ``(g / 255 - gray_mean) / gray_std``: a ``(T, H, W)`` clip.
With ``color: rgb`` the frames are the decoded BGR frames, each crop is converted to RGB and
normalised per channel, ``(v / 255 - channel_mean[c]) / channel_std[c]``, and the clip is
``(3, T, H, W)`` -- channels first, the layout of a 3D CNN's ``(N, C, T, H, W)`` input.  :meth:`ClipContract.clip`
is the numpy path; :meth:`ClipContract.fused` normalises every crop in one
``cv2.dnn.blobFromImages`` call (same values to float rounding).  numpy + OpenCV only.
"""

from dataclasses import dataclass
from typing import Any, Dict, Sequence, Tuple

import numpy as np

from jetforge.errors import ModelError
from jetforge.jsonfile import expect_number
from jetforge.runtime.inputs.base import INPUT_KINDS, InputContract
from jetforge.runtime.inputs.image import MAX_INPUT_SIDE, check_pixel_arithmetic

CLIP_FIELDS = ("window", "crop_height", "crop_width", "margin", "gray_mean", "gray_std", "fps_trained",
               "stride_trained", "color", "channel_mean", "channel_std")
COLORS = ("gray", "rgb")
#: an rgb clip's default per-channel normalisation: ImageNet's, which the inflated 2D weights were trained with
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
_RGB_ONLY = ("channel_mean", "channel_std")
MAX_WINDOW = 1024  # frames in one clip (the shipped model takes 8; 1024 crops of 8192^2 would already be 200 GB)


@INPUT_KINDS.register("clip", summary="a window of T frames of one track -> (T, H, W) grey or (3, T, H, W) RGB "
                                      "crops of one region")
@dataclass(frozen=True)
class ClipContract(InputContract):
    """How a window of one track becomes the model input (the ``clip`` input kind).

    ``stride_trained`` is the step (in sampled frames) between the windows the model was trained on
    (0: not recorded); ``fps_trained`` the frame rate it was trained at (the app samples frames to it).
    """

    window: int = 8
    crop_height: int = 64
    crop_width: int = 32
    margin: float = 1.25
    gray_mean: float = 0.5
    gray_std: float = 0.25
    fps_trained: float = 10.0
    stride_trained: int = 0
    color: str = "gray"
    channel_mean: Tuple[float, float, float] = IMAGENET_MEAN
    channel_std: Tuple[float, float, float] = IMAGENET_STD

    kind = "clip"

    def __post_init__(self) -> None:
        expect_number(self.window, "window", 1, MAX_WINDOW, integer=True)
        expect_number(self.crop_height, "crop_height", 1, MAX_INPUT_SIDE, integer=True)
        expect_number(self.crop_width, "crop_width", 1, MAX_INPUT_SIDE, integer=True)
        expect_number(self.margin, "margin", 0.0, 100.0, low_open=True)  # times the box: 100 is a frame 100x wider
        expect_number(self.stride_trained, "stride_trained", 0, MAX_WINDOW, integer=True)
        if self.color not in COLORS:
            raise ValueError("clip color must be one of %s, got %r" % (", ".join(COLORS), self.color))
        for name in _RGB_ONLY:  # JSON gives lists
            value = tuple(float(v) for v in getattr(self, name))
            if len(value) != 3:
                raise ValueError("%s must have 3 values (R, G, B), got %r" % (name, getattr(self, name)))
            object.__setattr__(self, name, value)
        # the same finite-float32 rule as the image kinds' (x * scale - mean) / std, for both normalisations
        check_pixel_arithmetic(1.0 / 255.0, (self.gray_mean,), (self.gray_std,), "scale gray_mean gray_std")
        check_pixel_arithmetic(1.0 / 255.0, self.channel_mean, self.channel_std, "scale channel_mean channel_std")
        if not self.fps_trained:  # 0 / None in old sidecars: the rate the first model was trained at
            object.__setattr__(self, "fps_trained", 10.0)
        expect_number(self.fps_trained, "fps_trained", 0.0, 1000.0, low_open=True)

    # the names the app and the training code have always used
    @property
    def crop_h(self) -> int:
        return int(self.crop_height)

    @property
    def crop_w(self) -> int:
        return int(self.crop_width)

    @property
    def mean(self) -> float:
        return float(self.gray_mean)

    @property
    def std(self) -> float:
        return float(self.gray_std)

    @property
    def rgb(self) -> bool:
        return self.color == "rgb"

    @property
    def input_shape(self) -> Tuple[int, ...]:
        """Shape of one clip (without the batch axis): (T, H, W) grey, (3, T, H, W) RGB."""
        if self.rgb:
            return (3, int(self.window), self.crop_h, self.crop_w)
        return (int(self.window), self.crop_h, self.crop_w)

    @classmethod
    def from_sidecar(cls, sidecar: Any) -> "ClipContract":
        """The clip contract of an action model's sidecar (see :func:`jetforge.runtime.inputs.input_contract`)."""
        from jetforge.runtime.inputs.base import input_contract

        if sidecar is None:
            raise ModelError("the action model has no sidecar, so its clip contract is unknown",
                             hint="train and export it with `jetforge distill --config recipes/action_mobilenet3d.yaml`")
        return input_contract(sidecar, "clip", purpose="the action app")  # type: ignore[return-value]

    @classmethod
    def from_legacy(cls, block: Dict[str, Any]) -> "ClipContract":
        """A format-1 ``extra.clip`` block: known fields taken, descriptions (``region``) left out."""
        return cls.from_dict({k: block[k] for k in CLIP_FIELDS if block.get(k) is not None})

    def to_dict(self) -> Dict[str, Any]:
        """The sidecar block; a grey clip's has no per-channel fields (as before they existed)."""
        return {k: (list(getattr(self, k)) if k in _RGB_ONLY else getattr(self, k)) for k in CLIP_FIELDS
                if self.rgb or k not in _RGB_ONLY}

    def describe(self) -> str:
        return "clip %d x %dx%d %s" % (self.window, self.crop_w, self.crop_h, "RGB" if self.rgb else "grey")

    def region(self, boxes: np.ndarray) -> Tuple[int, int, int, int]:
        """Union of the window's boxes, scaled by margin, at the crop aspect, around its centre (may leave the frame)."""
        b = np.asarray(boxes, dtype=np.float64)
        x0, y0 = b[:, 0].min(), b[:, 1].min()
        x1, y1 = b[:, 2].max(), b[:, 3].max()
        cx, cy = (x0 + x1) / 2.0, (y0 + y1) / 2.0
        w, h = (x1 - x0) * self.margin, (y1 - y0) * self.margin
        aspect = self.crop_w / float(self.crop_h)
        if w / h > aspect:
            h = w / aspect
        else:
            w = h * aspect
        return (int(round(cx - w / 2)), int(round(cy - h / 2)), int(round(cx + w / 2)), int(round(cy + h / 2)))

    def crop(self, gray: np.ndarray, region: Tuple[int, int, int, int]) -> np.ndarray:
        """One frame -> the crop_h x crop_w uint8 crop of ``region`` (grey 128 outside the frame).

        Grey clips take an HxW grey frame; RGB clips the HxWx3 BGR frame as decoded, and return the crop in RGB."""
        import cv2

        x0, y0, x1, y1 = region
        h, w = gray.shape[:2]
        pad = max(0, -x0, -y0, x1 - w, y1 - h)
        if pad:
            fill = (128, 128, 128) if gray.ndim == 3 else 128  # a plain 128 would fill only a colour image's blue
            gray = cv2.copyMakeBorder(gray, pad, pad, pad, pad, cv2.BORDER_CONSTANT, value=fill)
        patch = gray[y0 + pad:y1 + pad, x0 + pad:x1 + pad]
        out = cv2.resize(patch, (self.crop_w, self.crop_h), interpolation=cv2.INTER_AREA)
        if self.rgb:
            if out.ndim != 3 or out.shape[2] != 3:
                raise ModelError("an RGB clip model needs the decoded BGR frames, got frames of shape %s"
                                 % (gray.shape,), hint="pass the frames as OpenCV decodes them, not grey")
            out = cv2.cvtColor(out, cv2.COLOR_BGR2RGB)
        return out

    def normalize(self, crops: np.ndarray) -> np.ndarray:
        """uint8 crops -> float32 model values.

        Grey: any leading axes, ``(g / 255 - gray_mean) / gray_std``.  RGB: ``(..., T, H, W, 3)`` ->
        ``(..., 3, T, H, W)``, ``(v / 255 - channel_mean[c]) / channel_std[c]``."""
        if not self.rgb:
            return ((crops.astype(np.float32) / np.float32(255.0)) - np.float32(self.mean)) / np.float32(self.std)
        mean = np.asarray(self.channel_mean, np.float32)
        std = np.asarray(self.channel_std, np.float32)
        x = ((crops.astype(np.float32) / np.float32(255.0)) - mean) / std
        return np.ascontiguousarray(np.moveaxis(x, -1, -4))

    def clip(self, grays: Sequence[np.ndarray], boxes: np.ndarray) -> np.ndarray:
        """T frames (grey, or BGR for an RGB clip) and T boxes of one track -> the model input of one clip
        ((T, crop_h, crop_w) or (3, T, crop_h, crop_w) float32)."""
        region = self.region(boxes)
        return self.normalize(np.stack([self.crop(g, region) for g in grays]))

    def fused(self) -> "FusedClip":
        return FusedClip(self)


class FusedClip:
    """:meth:`ClipContract.clip` with the normalisation of all T crops in one ``cv2.dnn.blobFromImages`` call.

    OpenCV computes ``(g - 255 * gray_mean) * (1 / (255 * gray_std))``: the same values as the numpy
    path up to float32 rounding (a few units in the last place; checked in the tests).
    """

    def __init__(self, contract: ClipContract) -> None:
        self.contract = contract
        self._scalefactor = 1.0 / (255.0 * contract.std)
        self._mean = 255.0 * contract.mean
        # RGB: blobFromImages subtracts the per-channel mean (scalefactor is one number), then one multiply per channel
        self._rgb_mean = tuple(255.0 * m for m in contract.channel_mean) + (0.0,)
        self._rgb_scale = (1.0 / (255.0 * np.asarray(contract.channel_std, np.float32))).reshape(3, 1, 1, 1)

    def __call__(self, grays: Sequence[np.ndarray], boxes: np.ndarray) -> np.ndarray:
        import cv2

        c = self.contract
        region = c.region(boxes)
        crops = [c.crop(g, region) for g in grays]
        if c.rgb:
            blob = cv2.dnn.blobFromImages(crops, scalefactor=1.0, size=(c.crop_w, c.crop_h), mean=self._rgb_mean,
                                          swapRB=False, crop=False, ddepth=cv2.CV_32F)  # (T, 3, H, W)
            return np.ascontiguousarray(blob.transpose(1, 0, 2, 3)) * self._rgb_scale
        blob = cv2.dnn.blobFromImages(crops, scalefactor=self._scalefactor, size=(c.crop_w, c.crop_h),
                                      mean=(self._mean, 0.0, 0.0, 0.0), swapRB=False, crop=False, ddepth=cv2.CV_32F)
        return blob[:, 0]


ClipInput = ClipContract
"""The clip kind under its kind name."""

__all__ = ["CLIP_FIELDS", "COLORS", "ClipContract", "ClipInput", "FusedClip", "IMAGENET_MEAN", "IMAGENET_STD"]
