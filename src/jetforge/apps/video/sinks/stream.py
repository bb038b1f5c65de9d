"""Streaming output through GStreamer: RTSP to a server (``rtspclientsink``) or RTP/UDP H.264 (``udpsink``);
NVENC on a Jetson, x264 elsewhere."""

from typing import Optional, Tuple
from urllib.parse import urlparse

import numpy as np

from jetforge.apps.video.sinks.file import fit_frame
from jetforge.apps.video.sources.capture import is_jetson, opencv_has_gstreamer
from jetforge.errors import ConfigError, StreamError
from jetforge.optional import require


def gst_output_pipeline(uri: str, bitrate_kbps: int = 4000, jetson: bool = True) -> str:
    """GStreamer writer pipeline (appsrc first) streaming H.264 to ``rtsp://`` (rtspclientsink) or ``rtp://``."""
    parsed = urlparse(uri)
    if jetson:
        encode = ("videoconvert ! video/x-raw, format=(string)BGRx ! nvvidconv ! video/x-raw(memory:NVMM), "
                  "format=(string)I420 ! nvv4l2h264enc bitrate=%d insert-sps-pps=true idrinterval=30 ! h264parse"
                  % (int(bitrate_kbps) * 1000))
    else:
        encode = ("videoconvert ! video/x-raw, format=(string)I420 ! x264enc tune=zerolatency bitrate=%d "
                  "speed-preset=superfast key-int-max=30 ! h264parse" % int(bitrate_kbps))
    head = "appsrc is-live=true do-timestamp=true format=time ! " + encode
    if parsed.scheme in ("rtsp", "rtsps"):
        if not parsed.netloc:
            raise ConfigError("RTSP output %r names no server" % uri, hint="e.g. rtsp://127.0.0.1:8554/live")
        return "%s ! rtspclientsink location=%s protocols=tcp" % (head, uri)
    if parsed.scheme == "rtp":
        if not parsed.hostname or not parsed.port:
            raise ConfigError("RTP output %r needs host and port" % uri, hint="e.g. rtp://192.168.1.20:5000")
        return "%s ! rtph264pay config-interval=1 pt=96 ! udpsink host=%s port=%d sync=false" % (
            head, parsed.hostname, parsed.port)
    raise ConfigError("%r is not an RTSP or RTP output" % uri)


class GstStreamSink:
    """Frames encoded and streamed by a GStreamer pipeline (RTSP or RTP), through OpenCV's VideoWriter."""

    def __init__(self, uri: str, fps: float, size: Tuple[int, int], bitrate_kbps: int = 4000) -> None:
        cv2 = require("cv2", "streaming video")
        self.uri = uri
        self.pipeline = gst_output_pipeline(uri, bitrate_kbps, jetson=is_jetson())
        if not opencv_has_gstreamer():
            raise StreamError("cannot stream to %s: this OpenCV (%s) has no GStreamer" % (uri, cv2.__version__),
                              hint="on a Jetson use JetPack's OpenCV (python3-opencv); elsewhere write an MP4")
        self.frames = 0
        self.letterboxed = 0
        self.size = (int(size[0]), int(size[1]))
        self._writer = cv2.VideoWriter(self.pipeline, cv2.CAP_GSTREAMER, 0, float(fps or 30.0), self.size, True)
        if not self._writer.isOpened():
            raise StreamError("GStreamer could not start the output pipeline for %s" % uri,
                              hint="check that the server is up and the elements exist: gst-launch-1.0 " +
                                   self.pipeline.replace("appsrc is-live=true do-timestamp=true format=time",
                                                         "videotestsrc"))

    def write(self, image: np.ndarray) -> None:
        if (int(image.shape[1]), int(image.shape[0])) != self.size:
            image = fit_frame(image, self.size)  # the stream's size is fixed when it starts
            self.letterboxed += 1
        self._writer.write(image)
        self.frames += 1

    def close(self) -> None:
        if self._writer is not None:
            self._writer.release()
            self._writer = None

    def abort(self, exc: Optional[BaseException] = None) -> None:
        self.close()

    def __enter__(self) -> "GstStreamSink":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["GstStreamSink", "gst_output_pipeline"]
