"""A small clip-based action model: a per-frame CNN shared over time, then 1-D temporal convolutions.

Input ``clip``: (N, T, H, W) float32, T grey frames of one tracked person, cropped at a
*fixed* region for the whole window (the union of the person's boxes over the window,
see :func:`window_region`) so that the motion of the person inside the crop is visible
to the model.  Each frame goes through the same 2-D CNN (Conv-BN-ReLU x3, stride 2),
the feature map is flattened with its spatial layout kept (position matters: the
direction of motion is the change of position over time), then two 1-D convolutions
over time, a mean over time and a linear layer give the class logits.

The window contract (region, crop size, normalisation) is ``jetforge.runtime.inputs.ClipContract``,
shared with the app; the exported sidecar records its numbers.
"""

from typing import Sequence, Tuple

import numpy as np
import torch
from torch import nn

from jetforge.runtime.inputs import ClipContract

WINDOW = 8          # frames per clip (0.8 s at vtest's 10 fps)
CROP_H, CROP_W = 64, 32
MARGIN = 1.25       # the window region is the union box scaled by this, at aspect CROP_W:CROP_H
MEAN, STD = 0.5, 0.25  # grey / 255 -> (g - MEAN) / STD


_CONTRACT = ClipContract(window=WINDOW, crop_height=CROP_H, crop_width=CROP_W, margin=MARGIN, gray_mean=MEAN,
                         gray_std=STD)


def window_region(boxes: np.ndarray, frame_wh: Tuple[int, int]) -> Tuple[int, int, int, int]:
    """The fixed crop region (x0, y0, x1, y1) for a window (see ``ClipContract.region``); may leave the frame."""
    return _CONTRACT.region(boxes)


def crop_gray(gray: np.ndarray, region: Tuple[int, int, int, int]) -> np.ndarray:
    """One HxW uint8 grey frame -> the CROP_H x CROP_W uint8 crop of ``region`` (grey 128 outside the frame)."""
    return _CONTRACT.crop(gray, region)


def normalize_clip(crops: np.ndarray) -> np.ndarray:
    """(..., T, CROP_H, CROP_W) uint8 -> float32 (g/255 - MEAN) / STD."""
    return ((crops.astype(np.float32) / np.float32(255.0)) - np.float32(MEAN)) / np.float32(STD)


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


class ActionNet(nn.Module):
    """(N, T, H, W) clip -> (N, classes) logits."""

    def __init__(self, classes: int, window: int = WINDOW, height: int = CROP_H, width: int = CROP_W,
                 channels: Sequence[int] = (16, 24, 32), temporal: int = 64, dropout: float = 0.2) -> None:
        super().__init__()
        self.window, self.height, self.width = window, height, width
        c1, c2, c3 = channels
        self.frame = nn.Sequential(_block(1, c1), _block(c1, c2), _block(c2, c3), nn.Conv2d(c3, 8, 1))
        fh, fw = height // 8, width // 8
        self.frame_features = 8 * fh * fw
        self.temporal = nn.Sequential(
            nn.Conv1d(self.frame_features, temporal, 3, padding=1), nn.BatchNorm1d(temporal), nn.ReLU(inplace=True),
            nn.Conv1d(temporal, temporal, 3, padding=1), nn.BatchNorm1d(temporal), nn.ReLU(inplace=True))
        self.drop = nn.Dropout(dropout)
        self.fc = nn.Linear(temporal, classes)

    def forward(self, clip: torch.Tensor) -> torch.Tensor:
        n = clip.shape[0]
        x = clip.reshape(n * self.window, 1, self.height, self.width)
        x = self.frame(x)                                    # (N*T, 8, H/8, W/8)
        x = x.reshape(n, self.window, self.frame_features)   # (N, T, F)
        x = self.temporal(x.transpose(1, 2))                 # (N, C, T)
        x = x.mean(dim=2)
        return self.fc(self.drop(x))


__all__ = ["ActionNet", "CROP_H", "CROP_W", "MARGIN", "MEAN", "STD", "WINDOW", "crop_gray", "normalize_clip",
           "window_region"]
