"""Hardware decode on desktop and server GPUs: NVDEC through NVIDIA's PyNvVideoCodec, frames kept in GPU memory.

Why: on a GPU the OpenCV path is bound by the CPU (decode ~1.2 ms and preprocessing ~0.6 ms a frame on the
H200's host, far more on a Jetson's ARM cores).  NVDEC decodes H.264/HEVC/AV1 into device memory, so the only
per-frame CPU work left is demuxing and a few Python calls.

API used (PyNvVideoCodec 2.x, the "core decoder" path: one demuxer + one decoder per stream, one thread per
stream as NVIDIA's ``decode_perf`` sample does; decode calls release the GIL)::

    demuxer = nvc.CreateDemuxer(filename=path)            # Width() Height() FrameRate() ColorSpace() ColorRange()
    decoder = nvc.CreateDecoder(gpuid=0, codec=demuxer.GetNvCodecId(), usedevicememory=True)
    for packet in demuxer:                                # the last packet flushes the decoder
        for frame in decoder.Decode(packet):              # NV12 in device memory; frame.GetPtrToPlane(0),
            ...                                           # frame.cuda() (CUDA array interface per plane), DLPack

``codec_module`` replaces the ``PyNvVideoCodec`` module (tests and the benchmark's dry run pass
``FakeNvDecoder`` of tests/standins/fake_nvdec.py, which decodes with OpenCV on the CPU).
Executed on an H200 by ``benchmarks/gpu_pipeline/pipeline_gpu.py``; not available on Jetson (see :mod:`.jetson`).
"""

import logging
import os
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, Optional, Union

from jetforge.apps.video.sources.gpu.frame import (GpuFrame, GpuFrameReader, OwnedNv12, full_range_from_code,
                                                  matrix_from_code)
from jetforge.errors import StreamError
from jetforge.fileio import require_file
from jetforge.optional import require

log = logging.getLogger(__name__)

# keep(decoded_frame, width, height) -> the object the GpuFrame holds, e.g. an owned device copy (H*3/2, W) when
# the decoder may reuse its buffers; the frame's plane pointers are then those of the copy.
KeepHook = Callable[[Any, int, int], Any]


def load_pynvvideocodec() -> Any:
    """The PyNvVideoCodec module, or a DependencyError naming the wheel to install."""
    return require("PyNvVideoCodec", "NVDEC hardware decoding (pip install pynvvideocodec)")


class NvDecSource(GpuFrameReader):
    """A video file decoded by NVDEC on GPU ``gpu_id``; iterating yields :class:`GpuFrame` (NV12, device memory).

    ``stream`` numbers the frames' stream for a multi-stream pipeline.  ``loop`` plays the file again when it
    ends (a new demuxer; the decoder is kept).  ``max_frames`` stops after that many frames (0: no limit).
    """

    live = False

    def __init__(self, path: Union[str, "os.PathLike[str]"], gpu_id: int = 0, stream: int = 0,
                 codec_module: Optional[Any] = None, keep: Optional[KeepHook] = None, loop: bool = False,
                 max_frames: int = 0) -> None:
        self.path = require_file(path, "video file", hint="check the path of the video (--source)")
        self.uri = "nvdec://" + str(self.path)
        self._nvc = codec_module if codec_module is not None else load_pynvvideocodec()
        self.gpu_id, self.stream, self.loop, self.max_frames = int(gpu_id), int(stream), bool(loop), int(max_frames)
        self._keep = keep
        self._pending: Deque[Any] = deque()
        self._index = 0
        self.passes = 0
        self.decode_s = 0.0  # wall seconds inside demux + decode calls (this source's thread)
        try:
            self._open_demuxer()
            self._decoder = self._nvc.CreateDecoder(gpuid=self.gpu_id, codec=self._demuxer.GetNvCodecId(),
                                                    usedevicememory=True)
        except (RuntimeError, ValueError, OSError) as err:  # PyNvVideoCodec raises its own RuntimeError subclasses
            raise StreamError("NVDEC cannot decode %s: %s" % (self.path, err),
                              hint="NVDEC decodes H.264/HEVC/AV1/VP9; convert the file, or use --decode cpu") from None
        self.width = int(_call_first(self._demuxer, ("Width", "GetWidth")))
        self.height = int(_call_first(self._demuxer, ("Height", "GetHeight")))
        fps = float(self._demuxer.FrameRate() or 0.0)
        self.fps = fps if 0.0 < fps < 1000.0 else 0.0
        self.matrix = matrix_from_code(_call(self._demuxer, "ColorSpace"), self.height)
        self.full_range = full_range_from_code(_call(self._demuxer, "ColorRange"))
        self.frame_count: Optional[int] = None

    def _open_demuxer(self) -> None:
        self._demuxer = self._nvc.CreateDemuxer(filename=str(self.path))
        self._packets = iter(self._demuxer)
        self.passes += 1

    def prime(self) -> None:
        """Decode until one frame is ready, so that decoder start-up is not counted in a timed run."""
        t0 = time.perf_counter()
        while not self._pending:
            packet = next(self._packets, None)
            if packet is None:
                break
            self._pending.extend(self._decoder.Decode(packet))
        self.decode_s += time.perf_counter() - t0

    def read(self) -> Optional[GpuFrame]:
        """The next decoded frame, or None at the end (or after ``max_frames``)."""
        if self.max_frames and self._index >= self.max_frames:
            return None
        t0 = time.perf_counter()
        while not self._pending:
            packet = next(self._packets, None)
            if packet is None:
                if not self.loop:
                    self.decode_s += time.perf_counter() - t0
                    return None
                self._open_demuxer()
                continue
            self._pending.extend(self._decoder.Decode(packet))
        decoded = self._pending.popleft()
        self.decode_s += time.perf_counter() - t0
        return self._wrap(decoded)

    def _wrap(self, decoded: Any) -> GpuFrame:
        index = self._index
        self._index += 1
        return frame_from_decoded(self, decoded, index, time.perf_counter())


    def close(self) -> None:
        """Release the decoder before the demuxer (NVIDIA's samples free them in that order), then the keep hook's
        buffers (a :class:`~.device_ring.DeviceFrameRing`) when it has a ``close``."""
        self._pending.clear()
        release = getattr(self._keep, "close", None)
        if callable(release):
            release()
        self._decoder = None
        self._demuxer = None
        self._packets = iter(())


    def info(self) -> Dict[str, Any]:
        return {"uri": self.uri, "width": self.width, "height": self.height, "fps": self.fps, "decoder": "nvdec",
                "matrix": self.matrix, "full_range": self.full_range, "gpu_id": self.gpu_id}


def frame_from_decoded(source: Any, decoded: Any, index: int, captured: float) -> GpuFrame:
    """A decoded frame of ``source`` (an NVDEC source: its ``_keep`` hook, size, rate, colour, stream number) as a
    :class:`GpuFrame`: kept through the hook when there is one, with the planes' pointers."""
    data = decoded
    if source._keep is not None:
        data = source._keep(decoded, source.width, source.height)
        y_ptr, uv_ptr, pitch = array_plane_pointers(data, source.height)
    else:
        y_ptr, uv_ptr, pitch = plane_pointers(decoded, source.width, source.height)
    return GpuFrame(index=index, timestamp=index / source.fps if source.fps else 0.0, width=source.width,
                    height=source.height, data=data, y_ptr=y_ptr, uv_ptr=uv_ptr, pitch=pitch, matrix=source.matrix,
                    full_range=source.full_range, captured=captured, stream=source.stream,
                    on_host=bool(getattr(decoded, "on_host", False)))


def plane_pointers(decoded: Any, width: int, height: int) -> "tuple[int, int, int]":
    """(luma pointer, chroma pointer, pitch) of a decoded NV12 frame.

    PyNvVideoCodec's ``frame.cuda()`` gives one CUDA-array-interface view per plane (pointer, shape, strides);
    without it (older releases) the planes are contiguous from ``GetPtrToPlane(0)`` with pitch = width.
    """
    try:
        views = _call(decoded, "cuda")
        if views:
            y = views[0].__cuda_array_interface__
            y_ptr = int(y["data"][0])
            strides = y.get("strides")
            pitch = int(strides[0]) if strides else int(y["shape"][1]) * _channels(y["shape"])
            if len(views) > 1:
                return y_ptr, int(views[1].__cuda_array_interface__["data"][0]), pitch
            return y_ptr, y_ptr + pitch * height, pitch
    except (AttributeError, IndexError, KeyError, TypeError):  # no per-plane views: the contiguous layout below
        pass
    y_ptr = int(decoded.GetPtrToPlane(0))
    return y_ptr, y_ptr + width * height, width


def array_plane_pointers(data: Any, height: int) -> "tuple[int, int, int]":
    """(luma, chroma, pitch) of an owned (H*3/2, W) NV12 array: a CUDA-array-interface object (a device copy) or
    a host array (the fake decoder)."""
    if type(data) is OwnedNv12:  # a ring slot (every frame of the GPU path): no interface dict built
        ptr = data.ptr
        return ptr, ptr + data.width * height, data.width
    cai = getattr(data, "__cuda_array_interface__", None)
    if cai is not None:
        ptr, pitch = int(cai["data"][0]), int((cai.get("strides") or (cai["shape"][1],))[0])
    else:
        arr = data if hasattr(data, "ctypes") else None
        if arr is None:
            return 0, 0, 0
        ptr, pitch = int(arr.ctypes.data), int(arr.strides[0])
    return ptr, ptr + pitch * height, pitch


def _call_first(obj: Any, names: "tuple[str, ...]") -> Any:
    for name in names:
        if callable(getattr(obj, name, None)):
            return getattr(obj, name)()
    raise StreamError("the decoder's demuxer has none of %s" % ", ".join(names))


def _channels(shape: Any) -> int:
    return int(shape[2]) if len(shape) > 2 else 1


def _call(obj: Any, name: str) -> Any:
    fn = getattr(obj, name, None)
    return fn() if callable(fn) else None


def nvdec_available(codec_module: Optional[Any] = None) -> "tuple[bool, str]":
    """(usable, why): PyNvVideoCodec importable and a CUDA device with a decoder seen by it."""
    try:
        nvc = codec_module if codec_module is not None else load_pynvvideocodec()
    except Exception as err:  # DependencyError, or the extension failing to load its CUDA libraries
        return False, str(err).split("\n")[0]
    try:
        gpus = int(nvc.GetNumGPUs()) if hasattr(nvc, "GetNumGPUs") else 1
    except Exception as err:  # no driver / no device
        return False, "PyNvVideoCodec %s: %s" % (getattr(nvc, "__version__", "?"), err)
    if gpus < 1:
        return False, "PyNvVideoCodec sees no GPU"
    return True, "PyNvVideoCodec %s, %d GPU(s)" % (getattr(nvc, "__version__", "?"), gpus)


__all__ = ["KeepHook", "NvDecSource", "array_plane_pointers", "frame_from_decoded", "load_pynvvideocodec",
           "nvdec_available", "plane_pointers"]
