"""How a window of one tracked person becomes the input of a clip-based action model.

Shared by training (``jetforge.compress.action.walking_direction``, ``jetforge.compress.models.action``)
and the app (``jetforge.apps.tasks.action``) so that the crops a model was trained on and
the crops it sees on the device cannot drift apart; the numbers travel in the model's
sidecar (``extra.clip``).  numpy + OpenCV only.
"""

from typing import Any, Sequence, Tuple

import numpy as np

from jetforge.errors import ModelError


class ClipContract:
    """How a window of one track becomes the model input, read from the model's sidecar (``extra.clip``)."""

    def __init__(self, window: int = 8, crop_height: int = 64, crop_width: int = 32, margin: float = 1.25,
                 gray_mean: float = 0.5, gray_std: float = 0.25, fps_trained: float = 10.0) -> None:
        self.window = int(window)
        self.crop_h = int(crop_height)
        self.crop_w = int(crop_width)
        self.margin = float(margin)
        self.mean = float(gray_mean)
        self.std = float(gray_std)
        self.fps_trained = float(fps_trained or 10.0)

    @classmethod
    def from_sidecar(cls, sidecar: Any) -> "ClipContract":
        clip = dict((sidecar.extra or {}).get("clip", {})) if sidecar is not None else {}
        if not clip:
            raise ModelError("the action model's sidecar has no clip contract (extra.clip)",
                             hint="train and export it with python -m jetforge.compress.action.walking_direction")
        keys = ("window", "crop_height", "crop_width", "margin", "gray_mean", "gray_std", "fps_trained")
        return cls(**{k: clip[k] for k in keys if k in clip})

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
        import cv2

        x0, y0, x1, y1 = region
        h, w = gray.shape[:2]
        pad = max(0, -x0, -y0, x1 - w, y1 - h)
        if pad:
            gray = cv2.copyMakeBorder(gray, pad, pad, pad, pad, cv2.BORDER_CONSTANT, value=128)
        patch = gray[y0 + pad:y1 + pad, x0 + pad:x1 + pad]
        return cv2.resize(patch, (self.crop_w, self.crop_h), interpolation=cv2.INTER_AREA)

    def clip(self, grays: Sequence[np.ndarray], boxes: np.ndarray) -> np.ndarray:
        """T grey frames and T boxes of one track -> (T, crop_h, crop_w) float32 model input."""
        region = self.region(boxes)
        crops = np.stack([self.crop(g, region) for g in grays]).astype(np.float32)
        return ((crops / np.float32(255.0)) - np.float32(self.mean)) / np.float32(self.std)
