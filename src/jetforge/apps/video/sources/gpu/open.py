"""Choosing and opening a GPU-frame source (``--decode gpu|cpu|auto``), and the ``nvdec://`` / ``jetson://`` kinds.

* :func:`open_gpu_source` - for the GPU pipeline (:func:`jetforge.apps.pipeline.streams.run_streams`): a file or
  URI decoded by NVDEC (PyNvVideoCodec), by jetson-utils on a Jetson, or - ``cpu``, or ``auto`` without a GPU
  decoder - by OpenCV, whose BGR frames are handed out as host :class:`GpuFrame` (``layout="bgr"``) for the
  preprocessing kernel's packed-BGR input (uploaded once).
* ``nvdec:///path/clip.mp4`` and ``jetson://...`` in :data:`~.uri.SOURCES`: the same decoders for the CPU apps
  (``jetforge app ... --source nvdec://clip.mp4``): each frame is copied back once and converted to BGR
  (:class:`HostFrames`), which still saves the CPU's decode work.
"""

import time
from typing import Any, List, Optional, Sequence
from urllib.parse import ParseResult

from jetforge.apps.video.sources.base import Frame, SourceKind, SourceOptions, SourceSpec, VideoSource
from jetforge.apps.video.sources.file import FileSource
from jetforge.apps.video.sources.gpu.frame import GpuFrame, GpuFrameReader, bgr_from_nv12
from jetforge.apps.video.sources.gpu.nvdec import NvDecSource
from jetforge.apps.video.sources.uri import SOURCES, parse_source_uri
from jetforge.errors import ConfigError
from jetforge.optional import require
from jetforge.runtime.decoders import choose_decoder


class CpuGpuFrames(GpuFrameReader):
    """OpenCV decode handed out as host BGR :class:`GpuFrame` (the ``--decode cpu`` fallback of the GPU path)."""

    def __init__(self, path: str, stream: int = 0, loop: bool = False, max_frames: int = 0) -> None:
        self._src = FileSource(path, loop=loop)
        self.width, self.height, self.fps = self._src.width, self._src.height, self._src.fps
        self.stream, self.max_frames, self.uri = int(stream), int(max_frames), self._src.uri

    def read(self) -> Optional[GpuFrame]:
        frame = self._src.read()
        if frame is None or (self.max_frames and frame.index >= self.max_frames):
            return None
        return GpuFrame(index=frame.index, timestamp=frame.timestamp, width=self.width, height=self.height,
                        data=frame.image, pitch=self.width * 3, captured=frame.captured or time.perf_counter(),
                        stream=self.stream, on_host=True, layout="bgr")


    def close(self) -> None:
        self._src.close()


def open_gpu_source(uri: Any, decode: str = "auto", stream: int = 0, loop: bool = False, max_frames: int = 0,
                    codec_module: Optional[Any] = None, ring_slots: int = 16, defer_sync: bool = False,
                    copy_ahead: bool = False) -> Any:
    """A source of :class:`GpuFrame` for ``uri`` (a file path, ``nvdec://`` or ``jetson://`` URI); an NVDEC source
    keeps owned copies in a ring of ``ring_slots`` frames (enough for the frames a pipeline holds), waiting for them
    once per fetch with ``defer_sync``, a fetch later with ``copy_ahead`` (NvThreadedSource; the ring is given one
    fetch more)."""
    spec = parse_source_uri(uri)
    if spec.kind == "jetson":
        decoder = "jetson-utils"
    elif spec.kind == "nvdec":
        decoder = "nvdec"
    elif spec.kind == "file":
        decoder = choose_decoder(decode) if codec_module is None else "nvdec"
    else:
        raise ConfigError("the GPU pipeline reads video files and nvdec:// or jetson:// URIs, not %s sources"
                          % spec.kind, hint="use the CPU pipeline (jetforge app ...) for cameras and streams")
    if decoder == "nvdec":
        from jetforge.apps.video.sources.gpu.device_ring import DeviceFrameRing
        from jetforge.apps.video.sources.gpu.nvdec_threaded import (NvThreadedSource, ThreadedDecodeOptions,
                                                                      ring_slots_for)

        # demux + decode in PyNvVideoCodec's native thread (on the H200, 16 streams 0.68x of NVDEC's rate against 0.47x
        # with a Python call per packet); frames are held in the batcher and in batches in flight: owned copies
        return NvThreadedSource(spec.location, stream=stream, loop=loop, max_frames=max_frames,
                                codec_module=codec_module,
                                keep=DeviceFrameRing(ring_slots_for(ring_slots, copy_ahead), defer_sync),
                                options=ThreadedDecodeOptions(copy_ahead=copy_ahead))
    if decoder == "jetson-utils":
        from jetforge.apps.video.sources.gpu.jetson import JetsonVideoSource

        location = spec.location if "://" in spec.location else "file://" + spec.location
        return JetsonVideoSource(location, stream=stream, max_frames=max_frames)
    return CpuGpuFrames(spec.location, stream=stream, loop=loop, max_frames=max_frames)


def nvdec_files(uris: Sequence[Any]) -> Optional[List[str]]:
    """The files of ``uris`` when NVDEC through PyNvVideoCodec decodes every one of them on the GPU path (files or
    ``nvdec://`` URIs, PyNvVideoCodec chosen), else None: only those can be decoded in worker processes."""
    out = []
    for uri in uris:
        spec = parse_source_uri(uri)
        if spec.kind == "nvdec" or (spec.kind == "file" and choose_decoder("gpu") == "nvdec"):
            out.append(spec.location)
        else:
            return None
    return out


def uri_for_decode(uri: Any, decode: str = "cpu") -> Any:
    """The ``--source`` URI the CPU apps open for ``--decode``: a video file becomes ``nvdec://`` or ``jetson://``
    when that decoder is chosen (``auto``: when one exists); other URIs and ``cpu`` are left as they are."""
    if decode == "cpu" or isinstance(uri, int):
        choose_decoder(decode, {})  # still rejects an unknown value
        return uri
    spec = parse_source_uri(uri)
    if spec.kind != "file":
        return uri
    decoder = choose_decoder(decode)
    if decoder == "nvdec":
        return "nvdec://" + spec.location
    if decoder == "jetson-utils":
        return "jetson://file://" + spec.location
    return uri


class HostFrames(VideoSource):
    """A GPU-frame source seen as an ordinary :class:`VideoSource` of BGR frames (one copy back per frame)."""

    def __init__(self, source: Any) -> None:
        self._gpu = source
        self.uri, self.width, self.height, self.fps = source.uri, source.width, source.height, source.fps
        self._cv2 = require("cv2", "converting decoded frames")

    def read(self) -> Optional[Frame]:
        g = self._gpu.read()
        if g is None:
            return None
        if g.layout == "nv12":
            image = bgr_from_nv12(self._cv2, g.host_nv12() if g.on_host else download_nv12(g))
        else:
            image = g.data if g.on_host else self._cv2.cvtColor(download_packed(g), self._cv2.COLOR_RGB2BGR)
        return Frame(g.index, g.timestamp, image, captured=g.captured)

    def close(self) -> None:
        self._gpu.close()


def download_nv12(frame: GpuFrame) -> Any:
    """A device NV12 frame -> (H*3/2, W) uint8 host array: two pitched copies (cudaMemcpy2D), not executed in CI."""
    import numpy as np

    from jetforge.runtime.cuda.bindings import check, runtime_api

    rt = runtime_api()
    w, h = frame.width, frame.height
    out = np.empty((h * 3 // 2, w), np.uint8)
    kind = rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
    check(rt.cudaMemcpy2D(out.ctypes.data, w, frame.y_ptr, frame.pitch, w, h, kind), "cudaMemcpy2D")
    check(rt.cudaMemcpy2D(out.ctypes.data + w * h, w, frame.uv_ptr, frame.pitch, w, h // 2, kind), "cudaMemcpy2D")
    return out


def download_packed(frame: GpuFrame) -> Any:
    """A device packed RGB frame (jetson-utils) -> (H, W, 3) uint8 host array (cudaMemcpy2D)."""
    import numpy as np

    from jetforge.runtime.cuda.bindings import check, runtime_api

    rt = runtime_api()
    out = np.empty((frame.height, frame.width, 3), np.uint8)
    check(rt.cudaMemcpy2D(out.ctypes.data, frame.width * 3, frame.y_ptr, frame.pitch, frame.width * 3, frame.height,
                          rt.cudaMemcpyKind.cudaMemcpyDeviceToHost), "cudaMemcpy2D")
    return out


def _after_scheme(parsed: ParseResult, text: str) -> str:
    location = parsed.netloc + parsed.path
    if not location:
        raise ConfigError("%s names no file" % text, hint="e.g. nvdec:///data/clip.mp4")
    return location


def _open_nvdec(spec: SourceSpec, options: SourceOptions) -> VideoSource:
    return HostFrames(NvDecSource(spec.location, loop=options.loop))


def _open_jetson(spec: SourceSpec, options: SourceOptions) -> VideoSource:
    from jetforge.apps.video.sources.gpu.jetson import JetsonVideoSource

    return HostFrames(JetsonVideoSource(spec.location))


if "nvdec" not in SOURCES:
    SOURCES.add("nvdec", SourceKind(("nvdec",), _after_scheme, _open_nvdec, "nvdec:///data/clip.mp4"),
                summary="a video file decoded by NVDEC (PyNvVideoCodec; desktop/server NVIDIA GPUs)")
if "jetson" not in SOURCES:
    SOURCES.add("jetson", SourceKind(("jetson",), lambda p, t: t[len("jetson://"):], _open_jetson,
                                     "jetson://file:///data/clip.mp4 | jetson://csi://0"),
                summary="any jetson-utils videoSource URI, hardware-decoded on a Jetson (not executed in CI)")

__all__ = ["CpuGpuFrames", "HostFrames", "download_nv12", "download_packed", "open_gpu_source", "uri_for_decode"]
