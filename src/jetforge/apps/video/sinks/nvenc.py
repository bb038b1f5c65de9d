"""Hardware encoding of GPU-resident NV12 frames with NVENC through PyNvVideoCodec: :class:`NvencSink`.

WRITTEN AGAINST THE DOCUMENTED API, NOT EXECUTED HERE: the lent H200 has no NVENC (data-centre Hopper GPUs
decode but do not encode: ``nvEncOpenEncodeSessionEx`` fails with "no encode device"), and there is no Jetson.
Jetson AGX Orin and Orin NX have NVENC (through GStreamer's ``nvv4l2h264enc`` on JetPack; PyNvVideoCodec covers
desktop and server GPUs); Jetson Orin Nano has none.  Where there is no encoder, the annotated video is written
by :class:`~jetforge.apps.video.sinks.encode_pool.EncoderPool` (CPU workers off the critical path).

API used (PyNvVideoCodec 2.x, as NVIDIA's ``encode.py`` sample uses it with GPU buffers)::

    enc = nvc.CreateEncoder(width, height, "NV12", False, codec="h264", fps=30, gpu_id=0)   # False: GPU input
    pic = nvc.NV_ENC_PIC_PARAMS(); pic.inputTimeStamp = n
    packets = enc.Encode(frame, pic)       # frame.cuda() -> [Y plane, UV plane] CUDA-array-interface views
    packets += enc.EndEncode()             # flush; each packet["data"] is a chunk of the H.264 elementary stream

The output is the raw H.264 elementary stream (``.h264``; ``ffmpeg -i out.h264 -c copy out.mp4`` puts it in a
container), written to a temporary name and renamed on close.  Boxes are not drawn on the GPU frames (that
needs an overlay kernel this project does not have): with NVENC the events go to the JSON-lines sink.
"""

from pathlib import Path
from typing import Any, Dict, List, Optional

from jetforge.apps.video.sources.gpu.frame import GpuFrame
from jetforge.errors import StreamError


class _PlaneView:
    """One plane as a CUDA array interface (what the encoder reads)."""

    def __init__(self, ptr: int, rows: int, row_bytes: int, pitch: int, channels: int) -> None:
        self.__cuda_array_interface__ = {"shape": (rows, row_bytes // channels, channels),
                                         "strides": (pitch, channels, 1), "data": (int(ptr), False),
                                         "typestr": "|u1", "version": 3}


class Nv12Input:
    """A :class:`GpuFrame` shaped as the encoder's input frame: ``cuda()`` -> [Y view, UV view]."""

    def __init__(self, frame: GpuFrame) -> None:
        self._views = [_PlaneView(frame.y_ptr, frame.height, frame.width, frame.pitch, 1),
                       _PlaneView(frame.uv_ptr, frame.height // 2, frame.width, frame.pitch, 2)]

    def cuda(self) -> List[_PlaneView]:
        return self._views


class NvencSink:
    """NV12 device frames of one stream -> ``path`` (H.264 elementary stream) with NVENC (NOT EXECUTED HERE)."""

    def __init__(self, path: Any, width: int, height: int, fps: float = 30.0, codec: str = "h264",
                 gpu_id: int = 0, module: Optional[Any] = None, **encoder_options: Any) -> None:
        if module is None:
            from jetforge.apps.video.sources.gpu.nvdec import load_pynvvideocodec

            module = load_pynvvideocodec()
        self._nvc = module
        self.path = Path(path)
        self.tmp_path = self.path.with_name(self.path.name + ".partial")
        options: Dict[str, Any] = {"codec": codec, "fps": int(round(fps or 30)), "gpu_id": int(gpu_id)}
        options.update(encoder_options)
        try:
            self._enc = module.CreateEncoder(int(width), int(height), "NV12", False, **options)
        except Exception as err:  # PyNvVideoCodec raises its own exception types (e.g. no encode device)
            raise StreamError("NVENC cannot encode here: %s" % err,
                              hint="this GPU has no hardware encoder (data-centre GPUs, Jetson Orin Nano): "
                                   "use the CPU encoder pool (render with --encoders N)") from None
        self._file: Optional[Any] = open(str(self.tmp_path), "wb")
        self.frames = 0
        self.bytes = 0

    def write(self, frame: GpuFrame) -> None:
        if self._file is None:
            raise StreamError("NVENC sink %s is closed" % self.path.name)
        pic = self._nvc.NV_ENC_PIC_PARAMS()
        pic.inputTimeStamp = self.frames
        self._write_packets(self._enc.Encode(Nv12Input(frame), pic))
        self.frames += 1

    def _write_packets(self, packets: Any) -> None:
        for packet in packets:
            data = bytes(packet["data"])
            self._file.write(data)  # type: ignore[union-attr]
            self.bytes += len(data)

    def close(self) -> None:
        """Flush the encoder and publish the file (idempotent)."""
        if self._file is None:
            return
        try:
            self._write_packets(self._enc.EndEncode())
        finally:
            self._file.close()
            self._file = None
        self.tmp_path.replace(self.path)

    def __enter__(self) -> "NvencSink":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Nv12Input", "NvencSink"]
