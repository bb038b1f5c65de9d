"""The float64 numpy reference of the GPU kernels: NV12 -> RGB -> bilinear resize/crop/letterbox -> normalise.

It computes exactly the maths the preprocessing kernel computes (same colour coefficients from
:mod:`.color`, same sampling positions from :class:`.plan.KernelPlan`), in float64 and without any
intermediate rounding, so the kernel's float32 output can be held to 1e-3 of it.  The tests also
hold this reference to OpenCV's own ``cvtColor(COLOR_YUV2RGB_NV12)`` and ``cv2.resize`` (which round
to uint8 in between), which ties the kernel to the contract's CPU path.

Also here: :func:`bgr_to_nv12`, which makes NV12 test frames from decoded BGR frames with OpenCV's
BT.601 limited-range encoder (the layout NVDEC writes: a Y plane, then interleaved UV at half
resolution in both directions).  Torch-free, Python 3.8, no CUDA.
"""

from typing import Any, Sequence, Tuple

import numpy as np

from jetforge.errors import InputFileError
from jetforge.runtime.cuda.kernels.color import ColorSpec
from jetforge.runtime.cuda.kernels.plan import GRAY_WEIGHTS, KernelPlan, plan_for


def bgr_to_nv12(image: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """An HxWx3 uint8 BGR frame (even H and W) -> (Y ``(H, W)``, UV ``(H/2, W)`` interleaved U, V) uint8.

    OpenCV's ``COLOR_BGR2YUV_I420`` (BT.601, limited range) gives planar U and V; NV12 interleaves them.
    """
    import cv2

    h, w = image.shape[:2]
    if h % 2 or w % 2:
        raise InputFileError("NV12 needs an even frame size, got %dx%d" % (w, h), hint="crop one row/column")
    i420 = cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_BGR2YUV_I420)
    y = i420[:h]
    u = i420[h:h + h // 4].reshape(h // 2, w // 2)
    v = i420[h + h // 4:].reshape(h // 2, w // 2)
    uv = np.empty((h // 2, w), dtype=np.uint8)
    uv[:, 0::2], uv[:, 1::2] = u, v
    return np.ascontiguousarray(y), uv


def nv12_to_rgb(y: np.ndarray, uv: np.ndarray, color: ColorSpec) -> np.ndarray:
    """(Y ``(H, W)``, UV ``(H/2, W)``) uint8 -> ``(H, W, 3)`` float64 RGB in [0, 255] (not rounded).

    Each pixel takes the chroma sample of its 2x2 block (nearest, as OpenCV and NVIDIA's converters do).
    """
    k = color.coefficients()
    h, w = y.shape
    u = uv[:, 0::2].astype(np.float64).repeat(2, axis=0).repeat(2, axis=1)[:h, :w] - 128.0
    v = uv[:, 1::2].astype(np.float64).repeat(2, axis=0).repeat(2, axis=1)[:h, :w] - 128.0
    yy = k.cy * (y.astype(np.float64) - k.y_offset)
    rgb = np.stack([yy + k.crv * v, yy + k.cgu * u + k.cgv * v, yy + k.cbu * u], axis=-1)
    return np.clip(rgb, 0.0, 255.0)


def packed_to_rgb(image: np.ndarray, order: str) -> np.ndarray:
    """An HxWx3 uint8 frame in ``order`` (rgb | bgr) -> float64 RGB."""
    rgb = image[:, :, ::-1] if order == "bgr" else image
    return rgb.astype(np.float64)


def resize_reference(rgb: np.ndarray, plan: KernelPlan) -> np.ndarray:
    """Float64 ``(out_h, out_w, 3)`` RGB: bilinear samples at the plan's positions, the letterbox pad outside."""
    inside_x, cx = plan.sample_positions("x")
    inside_y, cy = plan.sample_positions("y")
    x0 = np.floor(cx).astype(np.int64)
    y0 = np.floor(cy).astype(np.int64)
    ax, ay = (cx - x0)[None, :, None], (cy - y0)[:, None, None]
    x1 = np.minimum(x0 + 1, plan.src_w - 1)
    y1 = np.minimum(y0 + 1, plan.src_h - 1)
    top = rgb[y0][:, x0] * (1.0 - ax) + rgb[y0][:, x1] * ax
    bottom = rgb[y1][:, x0] * (1.0 - ax) + rgb[y1][:, x1] * ax
    out = top * (1.0 - ay) + bottom * ay
    out[~(inside_y[:, None] & inside_x[None, :])] = plan.pad_value
    return out


def normalise_reference(rgb: np.ndarray, plan: KernelPlan) -> np.ndarray:
    """Float64 ``(out_h, out_w, 3)`` RGB -> the model tensor of one frame (channel order, a/b, layout)."""
    if plan.out_order == "gray":
        pixels = (rgb @ np.asarray(GRAY_WEIGHTS, np.float64))[:, :, None]
    elif plan.out_order == "bgr":
        pixels = rgb[:, :, ::-1]
    else:
        pixels = rgb
    a = np.asarray(plan.a[:plan.channels], np.float64)
    b = np.asarray(plan.b[:plan.channels], np.float64)
    out = pixels * a + b
    return out if plan.nhwc else np.moveaxis(out, -1, 0)


def reference_nv12(frames: Sequence[Tuple[np.ndarray, np.ndarray]], contract: Any, color: ColorSpec) -> np.ndarray:
    """The float64 batch the NV12 kernel must produce for ``frames`` [(Y, UV), ...] of one size."""
    plan = plan_for(contract, frames[0][0].shape)
    return np.stack([normalise_reference(resize_reference(nv12_to_rgb(y, uv, color), plan), plan)
                     for y, uv in frames])


def reference_packed(frames: Sequence[np.ndarray], contract: Any, order: str) -> np.ndarray:
    """The float64 batch the packed-RGB/BGR kernel must produce for HxWx3 uint8 ``frames`` in ``order``."""
    plan = plan_for(contract, frames[0].shape[:2])
    return np.stack([normalise_reference(resize_reference(packed_to_rgb(f, order), plan), plan) for f in frames])


__all__ = ["bgr_to_nv12", "normalise_reference", "nv12_to_rgb", "packed_to_rgb", "reference_nv12",
           "reference_packed", "resize_reference"]
