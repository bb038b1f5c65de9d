"""YUV -> RGB colour matrices (BT.601 / BT.709, limited or full range) as the numbers a kernel needs.

A decoded video frame is YUV; which matrix and range turned RGB into it is a property of the
stream (its VUI colour description: H.264 ``matrix_coefficients`` and ``video_full_range_flag``),
not of the model.  SD content and OpenCV's ``COLOR_YUV2RGB_NV12`` use BT.601 limited range; HD
streams are usually BT.709 limited.  The matrix is derived here from the two luma weights
``Kr`` and ``Kb`` of each standard instead of copying rounded constants, so the GPU kernel and the
float64 reference use the same exact coefficients:

    limited: Y' = (Y - 16) * 255/219,  U' = (U - 128) * 255/224  (likewise V')
    full:    Y' = Y,                   U' = U - 128
    R = Y' + 2(1 - Kr) V'
    G = Y' - 2(1 - Kb) Kb / Kg U' - 2(1 - Kr) Kr / Kg V'      (Kg = 1 - Kr - Kb)
    B = Y' + 2(1 - Kb) U'

Torch-free, Python 3.8, no CUDA import (CPU-testable).
"""

from dataclasses import dataclass
from typing import Dict, Tuple

from jetforge.errors import ConfigError

LUMA_WEIGHTS: Dict[str, Tuple[float, float]] = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722)}
RANGES = ("limited", "full")


@dataclass(frozen=True)
class YuvToRgb:
    """``R = cy (Y - y_offset) + crv V'``, ``G = cy (Y - y_offset) + cgu U' + cgv V'``, ``B = ... + cbu U'``.

    ``U' = U - 128`` and ``V' = V - 128``; results are clamped to [0, 255] (as every decoder's RGB output is).
    """

    y_offset: float
    cy: float
    crv: float
    cgu: float
    cgv: float
    cbu: float


@dataclass(frozen=True)
class ColorSpec:
    """The YUV colour description of a stream: ``matrix`` (bt601 | bt709) and ``range`` (limited | full)."""

    matrix: str = "bt601"
    range: str = "limited"

    def __post_init__(self) -> None:
        if self.matrix not in LUMA_WEIGHTS:
            raise ConfigError("unknown YUV colour matrix %r" % (self.matrix,),
                              hint="use one of %s (the stream's matrix_coefficients)" % ", ".join(LUMA_WEIGHTS))
        if self.range not in RANGES:
            raise ConfigError("unknown YUV range %r" % (self.range,),
                              hint="use limited (16-235, most video) or full (0-255, JPEG-style)")

    def coefficients(self) -> YuvToRgb:
        """The conversion's coefficients, derived from the standard's luma weights (see the module doc)."""
        kr, kb = LUMA_WEIGHTS[self.matrix]
        kg = 1.0 - kr - kb
        if self.range == "limited":
            y_offset, cy, cc = 16.0, 255.0 / 219.0, 255.0 / 224.0
        else:
            y_offset, cy, cc = 0.0, 1.0, 1.0
        return YuvToRgb(y_offset=y_offset, cy=cy, crv=cc * 2.0 * (1.0 - kr),
                        cgu=-cc * 2.0 * (1.0 - kb) * kb / kg, cgv=-cc * 2.0 * (1.0 - kr) * kr / kg,
                        cbu=cc * 2.0 * (1.0 - kb))

    def describe(self) -> str:
        return "%s %s" % (self.matrix.upper().replace("BT", "BT."), self.range)


BT601_LIMITED = ColorSpec("bt601", "limited")
"""What OpenCV's COLOR_YUV2RGB_NV12 assumes, and SD video."""

BT709_LIMITED = ColorSpec("bt709", "limited")
"""HD video (720p and up), the usual H.264/HEVC stream."""

__all__ = ["BT601_LIMITED", "BT709_LIMITED", "ColorSpec", "LUMA_WEIGHTS", "RANGES", "YuvToRgb"]
