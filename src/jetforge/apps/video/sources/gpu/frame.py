"""A decoded frame that stays in GPU memory: :class:`GpuFrame`, and the colour facts the preprocessing needs.

Hardware decoders (NVDEC on desktop and server GPUs, the Jetson's NVDEC behind NvBufSurface) deliver NV12:
a full-resolution luma plane followed by a half-resolution plane of interleaved Cb/Cr samples, pitch-linear.
Converting that to the model's input on the GPU (one fused kernel per batch) is what removes the per-frame CPU
work the OpenCV path pays (decode, colour conversion, resize, normalisation); so a GPU source hands out this
record, not a BGR ``numpy`` image.

``data`` is whatever keeps the pixels alive and reachable: the decoder's frame object (it exposes
``__dlpack__``/``__cuda_array_interface__``), a copy made by the source's ``keep`` hook, or a host ``numpy``
NV12 array (a CPU stand-in: tests/standins/fake_nvdec.py).  ``y_ptr``/``uv_ptr``/``pitch`` describe the planes
for a kernel that takes raw device pointers.
"""

from dataclasses import dataclass
from typing import Any, Dict

import numpy as np

# Colour matrices a decoder reports (H.264/HEVC VUI matrix_coefficients): 1 = BT.709, 5/6 = BT.601.
BT601 = "bt601"
BT709 = "bt709"


def matrix_from_code(code: Any, height: int) -> str:
    """The colour matrix of a stream from its VUI ``matrix_coefficients`` code (int or enum name).

    Unspecified (2) or unknown: BT.601, what FFmpeg's swscale (and so OpenCV's decode, and an x264 file made
    from RGB by ffmpeg) assumes; the GPU path then agrees with the CPU path.  ``height`` is kept for callers
    that prefer the HD convention of players (BT.709 above 576 lines) where they know the encoder used it.
    """
    text = str(code).lower()
    number = getattr(code, "value", code)
    if "709" in text or number == 1:
        return BT709
    if "601" in text or "470" in text or "170" in text or number in (5, 6):
        return BT601
    return BT601


def full_range_from_code(code: Any) -> bool:
    """True when a stream's VUI says full range (``video_full_range_flag``/``ColorRange`` JPEG/full = 1)."""
    text = str(code).lower()
    number = getattr(code, "value", code)
    return "jpeg" in text or "full" in text or number == 2 and "mpeg" not in text


class OwnedNv12:
    """An NV12 frame in a ring slot (:class:`~.device_ring.DeviceFrameRing`): ``(H*3/2, W)`` uint8, contiguous, in
    device memory (CUDA array interface)."""

    __slots__ = ("ptr", "width", "height")

    def __init__(self, ptr: int, width: int, height: int) -> None:
        self.ptr, self.width, self.height = int(ptr), int(width), int(height)

    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        return {"shape": (self.height * 3 // 2, self.width), "typestr": "|u1", "data": (self.ptr, False),
                "strides": (self.width, 1), "version": 3}


@dataclass(frozen=True)
class GpuFrame:
    """One decoded NV12 frame of stream ``stream`` (0-based), in device memory unless ``on_host``."""

    index: int
    timestamp: float  # seconds since the start of the stream (presentation time)
    width: int
    height: int
    data: Any  # the object that owns the pixels (see the module docstring)
    y_ptr: int = 0  # device pointers of the two planes (0: not known; use ``data``)
    uv_ptr: int = 0
    pitch: int = 0  # bytes per row of both planes
    matrix: str = BT601
    full_range: bool = False
    captured: float = 0.0  # time.perf_counter() when the decoder delivered it
    stream: int = 0
    on_host: bool = False  # ``data`` is an (H*3/2, W) uint8 numpy array in host memory
    layout: str = "nv12"  # "nv12" (decoders), or "rgb"/"bgr" interleaved uint8 (jetson-utils' CUDA images)

    @property
    def size(self) -> "tuple[int, int]":
        """(width, height)."""
        return self.width, self.height

    def host_nv12(self) -> np.ndarray:
        """The frame as an (H*3/2, W) uint8 host array (a copy back for a device frame, through DLPack)."""
        if self.on_host:
            return np.asarray(self.data)
        raise TypeError("GpuFrame.host_nv12: a device frame is copied back by the pipeline's device ops")


def nv12_from_bgr(cv2: Any, image: np.ndarray) -> np.ndarray:
    """BGR (even width and height) -> NV12 (H*3/2, W) uint8 with OpenCV's BT.601 limited-range conversion.

    OpenCV converts to planar I420 (Y, then U plane, then V plane); NV12 keeps Y and interleaves U and V.
    """
    h, w = image.shape[:2]
    i420 = cv2.cvtColor(image, cv2.COLOR_BGR2YUV_I420)
    y = i420[:h]
    u = i420[h:h + h // 4].reshape(h // 2, w // 2)
    v = i420[h + h // 4:].reshape(h // 2, w // 2)
    uv = np.empty((h // 2, w), dtype=np.uint8)
    uv[:, 0::2], uv[:, 1::2] = u, v
    return np.concatenate([y, uv], axis=0)


def bgr_from_nv12(cv2: Any, nv12: np.ndarray) -> np.ndarray:
    """NV12 (H*3/2, W) uint8 -> BGR with OpenCV (BT.601 limited range, as OpenCV defines it)."""
    return cv2.cvtColor(np.ascontiguousarray(nv12), cv2.COLOR_YUV2BGR_NV12)


__all__ = ["BT601", "BT709", "GpuFrame", "OwnedNv12", "bgr_from_nv12", "full_range_from_code", "matrix_from_code",
           "nv12_from_bgr"]


class GpuFrameReader:
    """Iteration and ``with`` support for every GPU-frame source: subclasses give ``read()`` (a
    :class:`GpuFrame`, or None at the end) and ``close()``, and get ``for frame in source`` and context
    management the same way, so the three decoders (NVDEC, jetson-utils, CPU upload) cannot drift apart."""

    def read(self) -> "Any":  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def close(self) -> None:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def __iter__(self) -> "GpuFrameReader":
        return self

    def __next__(self) -> GpuFrame:
        frame = self.read()
        if frame is None:
            raise StopIteration
        return frame

    def __enter__(self) -> "GpuFrameReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

