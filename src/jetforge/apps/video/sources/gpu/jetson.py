"""The Jetson's hardware-decoded frames kept on the GPU: jetson-utils' ``videoSource`` -> :class:`GpuFrame`.

WRITTEN AGAINST THE DOCUMENTED API, NOT EXECUTED HERE (no Jetson): PyNvVideoCodec does not cover Jetson
Orin/Xavier, and OpenCV's GStreamer ``appsink`` copies every decoded NVMM buffer into CPU memory - the copy this
path exists to remove.  NVIDIA's jetson-utils (dusty-nv/jetson-utils, built on the board) runs the same GStreamer
hardware decoder (``nvv4l2decoder``) and hands out each frame as a ``cudaImage`` in CUDA memory (on a Jetson,
CPU and GPU share DRAM: the buffer is mapped, not copied), which the GPU preprocessing kernel reads directly:

    src = jetson_utils.videoSource("file:///data/clip.mp4", argv=["--input-codec=h264"])   # also csi://0, rtsp://
    img = src.Capture(format="rgb8", timeout=1000)     # cudaImage: .ptr .width .height .format, CUDA array iface
    src.IsStreaming(); src.GetWidth(); src.GetHeight(); src.GetFrameRate(); src.Close()

``Capture`` returns None on a time-out; the stream has ended when ``IsStreaming()`` turns False.  The frames
are packed RGB (jetson-utils converts NV12 -> RGB on the GPU with its own CUDA kernel), so the preprocessing
kernel's packed-RGB input is used (``GpuFrame.layout == "rgb"``).

The lower-level alternative (DeepStream's way, for a pipeline without jetson-utils) is the NvBufSurface API:
map the NVMM buffer of an ``appsink`` sample with ``NvBufSurfaceMapEglImage`` and register the EGLImage with
``cuGraphicsEGLRegisterImage`` to get NV12 plane pointers.  It needs C bindings this project does not ship;
the OpenCV appsink path (:mod:`.capture`, ``gstreamer=yes``) stays the fallback, and OpenCV's CPU decode the
fallback everywhere.
"""

import time
from typing import Any, Dict, Optional

from jetforge.apps.video.sources.gpu.frame import GpuFrame, GpuFrameReader
from jetforge.errors import StreamError
from jetforge.optional import require

CAPTURE_TIMEOUT_MS = 1000


def load_jetson_utils() -> Any:
    """jetson_utils (newer builds) or jetson.utils (older); a DependencyError names the project to build."""
    try:
        return require("jetson_utils", "GPU-resident hardware decode on Jetson (build dusty-nv/jetson-utils)")
    except Exception:  # older installs name the module jetson.utils
        return require("jetson.utils", "GPU-resident hardware decode on Jetson (build dusty-nv/jetson-utils)")


class JetsonVideoSource(GpuFrameReader):
    """A file, CSI camera or RTSP stream decoded by the Jetson's NVDEC through jetson-utils (NOT EXECUTED HERE)."""

    live = False

    def __init__(self, uri: str, stream: int = 0, codec: str = "h264", module: Optional[Any] = None,
                 max_frames: int = 0) -> None:
        ju = module if module is not None else load_jetson_utils()
        argv = ["--input-codec=%s" % codec] if codec else []
        try:
            self._src = ju.videoSource(uri, argv=argv)
        except Exception as err:  # jetson-utils raises plain Exceptions with the GStreamer error text
            raise StreamError("jetson-utils cannot open %s: %s" % (uri, err),
                              hint="check the URI (file:///..., csi://0, rtsp://...) and `gst-inspect-1.0 "
                                   "nvv4l2decoder`") from None
        self.uri, self.stream, self.max_frames = uri, int(stream), int(max_frames)
        self.width, self.height = int(self._src.GetWidth()), int(self._src.GetHeight())
        self.fps = float(self._src.GetFrameRate() or 0.0)
        self._index = 0

    def read(self) -> Optional[GpuFrame]:
        if self.max_frames and self._index >= self.max_frames:
            return None
        while True:
            img = self._src.Capture(format="rgb8", timeout=CAPTURE_TIMEOUT_MS)
            if img is not None:
                break
            if not self._src.IsStreaming():
                return None
        cai = img.__cuda_array_interface__
        pitch = int((cai.get("strides") or (int(img.width) * 3,))[0])
        index = self._index
        self._index += 1
        return GpuFrame(index=index, timestamp=index / self.fps if self.fps else 0.0, width=int(img.width),
                        height=int(img.height), data=img, y_ptr=int(img.ptr), uv_ptr=0, pitch=pitch,
                        captured=time.perf_counter(), stream=self.stream, layout="rgb")


    def close(self) -> None:
        if getattr(self, "_src", None) is not None:
            self._src.Close()
            self._src = None


    def info(self) -> Dict[str, Any]:
        return {"uri": self.uri, "width": self.width, "height": self.height, "fps": self.fps,
                "decoder": "jetson-utils (not executed in this project's CI)"}


__all__ = ["JetsonVideoSource", "load_jetson_utils"]
