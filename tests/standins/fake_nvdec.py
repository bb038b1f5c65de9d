"""``FakeNvDecoder``: a CPU stand-in for the ``PyNvVideoCodec`` module, for machines without an NVIDIA GPU.

It is a fake (named so): it stands in only for hardware that does not exist here, so that the logic around
NVDEC (:class:`~jetforge.apps.video.sources.gpu.nvdec.NvDecSource`, the multi-stream pipeline, the benchmark's
``--dry-run``) runs in CI.  It offers the calls :mod:`jetforge.apps.video.sources.gpu.nvdec` uses, with the behaviour that matters to them:

* ``CreateDemuxer(filename=)`` -> an iterable of packets, ending with one empty packet that flushes the decoder,
  with ``Width() Height() FrameRate() ColorSpace() ColorRange() GetNvCodecId()``;
* ``CreateDecoder(gpuid=, codec=, usedevicememory=)`` -> ``Decode(packet)`` returning a list of frames, held back
  ``latency`` packets (NVDEC's native display latency is 4 frames) and all returned by the flush packet;
* frames are NV12 (H*3/2, W) uint8 arrays - in host memory (``on_host`` = True) - from OpenCV's decode and its
  BT.601 limited-range BGR->YUV conversion, with ``GetPtrToPlane(0)``, ``getPTS()``, ``shape``.
"""

from typing import Any, Iterator, List

import numpy as np

from jetforge.apps.video.sources.gpu.frame import nv12_from_bgr
from jetforge.errors import StreamError
from jetforge.optional import require


class _Flush:
    """The demuxer's last, empty packet."""


FLUSH = _Flush()


class FakeDecodedFrame:
    """One NV12 frame in host memory, shaped like PyNvVideoCodec's DecodedFrame for :mod:`.nvdec`."""

    on_host = True

    def __init__(self, nv12: np.ndarray, pts: int) -> None:
        self.nv12 = np.ascontiguousarray(nv12)
        self.pts = pts
        self.shape = self.nv12.shape

    def GetPtrToPlane(self, plane: int) -> int:  # noqa: N802 (the real API's name)
        return int(self.nv12.ctypes.data) + (0 if plane == 0 else self.nv12.shape[1] * (self.nv12.shape[0] * 2 // 3))

    def getPTS(self) -> int:  # noqa: N802
        return self.pts

    def framesize(self) -> int:
        return int(self.nv12.nbytes)

    def __array__(self, dtype: Any = None) -> np.ndarray:
        return self.nv12 if dtype is None else self.nv12.astype(dtype)


class FakeDemuxer:
    """Reads a video file with OpenCV; each packet carries one decoded BGR frame (the "bitstream")."""

    def __init__(self, filename: str) -> None:
        cv2 = require("cv2", "the fake NVDEC decoder")
        self._cap = cv2.VideoCapture(str(filename))
        if not self._cap.isOpened():
            raise RuntimeError("FakeDemuxer: cannot open %s" % filename)
        self._w = int(self._cap.get(cv2.CAP_PROP_FRAME_WIDTH))
        self._h = int(self._cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
        self._fps = float(self._cap.get(cv2.CAP_PROP_FPS) or 0.0)
        self._cv2 = cv2
        if self._w % 2 or self._h % 2:
            raise RuntimeError("FakeDemuxer: NV12 needs an even frame size, %s is %dx%d" % (filename, self._w, self._h))

    def Width(self) -> int:  # noqa: N802
        return self._w

    def Height(self) -> int:  # noqa: N802
        return self._h

    def FrameRate(self) -> float:  # noqa: N802
        return self._fps

    def ColorSpace(self) -> str:  # noqa: N802 (what OpenCV's conversion implies)
        return "bt601"

    def ColorRange(self) -> str:  # noqa: N802
        return "mpeg"

    def GetNvCodecId(self) -> str:  # noqa: N802
        return "fake"

    def __iter__(self) -> Iterator[Any]:
        while True:
            ok, image = self._cap.read()
            if not ok:
                self._cap.release()
                yield FLUSH  # the empty end-of-stream packet that flushes the decoder
                return
            yield image


class FakeDecoder:
    """Converts each packet's frame to NV12; output lags input by ``latency`` packets, as NVDEC's does."""

    def __init__(self, latency: int = 4) -> None:
        self._cv2 = require("cv2", "the fake NVDEC decoder")
        self._held: List[FakeDecodedFrame] = []
        self._latency = int(latency)
        self._count = 0

    def Decode(self, packet: Any) -> List[FakeDecodedFrame]:  # noqa: N802
        if packet is FLUSH:
            out, self._held = self._held, []
            return out
        self._held.append(FakeDecodedFrame(nv12_from_bgr(self._cv2, packet), self._count))
        self._count += 1
        if len(self._held) > self._latency:
            return [self._held.pop(0)]
        return []


class FakeThreadedDecoder:
    """``ThreadedDecoder(path, buffer_size, gpu_id=, use_device_memory=)``: ``get_batch_frames(n)`` gives up to n
    frames, an empty list at the end; ``reconfigure_decoder(path)`` starts again; ``end()``."""

    def __init__(self, enc_file_path: str, buffer_size: int, gpu_id: int = 0, use_device_memory: bool = True,
                 **_: Any) -> None:
        self.buffer_size = int(buffer_size)
        self.reconfigure_decoder(enc_file_path)

    def reconfigure_decoder(self, new_source: str, start_frame: int = 0) -> None:
        self._packets = iter(FakeDemuxer(new_source))
        self._decoder = FakeDecoder(latency=0)
        self._count = 0

    def get_batch_frames(self, batch_size: int) -> List[FakeDecodedFrame]:
        if batch_size > self.buffer_size:
            raise Exception("batch_size cannot be greater than buffer_size")
        out: List[FakeDecodedFrame] = []
        for packet in self._packets:
            out += self._decoder.Decode(packet)
            if len(out) >= batch_size:
                break
        return out

    def end(self) -> None:
        self._packets = iter(())


class FakeReplayThreadedDecoder(FakeThreadedDecoder):
    """A ThreadedDecoder stand-in whose per-frame decoding costs next to no CPU time, as NVDEC's does (the decoding
    runs in hardware): the clip's first ``replay`` frames are decoded once with OpenCV and handed out in turn, as
    many frames as the clip has, then the end.  For measuring the Python work around the decoder on a CPU
    (``benchmarks/gpu_pipeline/pipeline_gpu_host.py``); the pixels repeat, so it is no use where frame content matters."""

    replay = 8

    def reconfigure_decoder(self, new_source: str, start_frame: int = 0) -> None:
        if getattr(self, "_source", None) != new_source:
            demuxer = FakeDemuxer(new_source)
            self._total = int(demuxer._cap.get(demuxer._cv2.CAP_PROP_FRAME_COUNT) or 0)
            decoder, self._frames = FakeDecoder(latency=0), []
            for packet in demuxer:
                self._frames += decoder.Decode(packet)
                if len(self._frames) >= self.replay:
                    break
            demuxer._cap.release()
            self._total, self._source = max(self._total, len(self._frames)), new_source
        self._served = 0

    def get_batch_frames(self, batch_size: int) -> List[FakeDecodedFrame]:
        if batch_size > self.buffer_size:
            raise Exception("batch_size cannot be greater than buffer_size")
        k = max(0, min(batch_size, self._total - self._served))
        out = [self._frames[(self._served + i) % len(self._frames)] for i in range(k)]
        self._served += k
        return out


class FakeNvDecoder:
    """Module-like stand-in for ``PyNvVideoCodec`` (pass the class itself, or an instance, as ``codec_module``)."""

    ThreadedDecoder = FakeThreadedDecoder

    __version__ = "fake"
    latency = 4

    @staticmethod
    def CreateDemuxer(filename: str) -> FakeDemuxer:  # noqa: N802
        try:
            return FakeDemuxer(filename)
        except RuntimeError as err:
            raise StreamError(str(err)) from None

    @classmethod
    def CreateDecoder(cls, gpuid: int = 0, codec: Any = None, usedevicememory: bool = True,  # noqa: N802
                      **_: Any) -> FakeDecoder:
        return FakeDecoder(cls.latency)


class FakeReplayNvDecoder(FakeNvDecoder):
    """:class:`FakeNvDecoder` whose ThreadedDecoder is :class:`FakeReplayThreadedDecoder` (decoding at ~no CPU cost)."""

    ThreadedDecoder = FakeReplayThreadedDecoder


__all__ = ["FakeDecodedFrame", "FakeDecoder", "FakeDemuxer", "FakeNvDecoder", "FakeReplayNvDecoder",
           "FakeReplayThreadedDecoder", "FakeThreadedDecoder"]
