"""Every video output behind one URI factory, :func:`open_video_sink`.

==============================  ===================================================================
URI                             sink
==============================  ===================================================================
``out.mp4``, ``file://…``       an annotated MP4 file (OpenCV VideoWriter, written atomically)
``display://0``                 an on-screen window (OpenCV HighGUI); needs a display and a GUI build
``rtsp://host:8554/live``       RTSP output through GStreamer ``rtspclientsink`` (to an RTSP server
                                such as mediamtx); NVENC on a Jetson, x264 elsewhere
``rtp://host:5000``             RTP/UDP H.264 output through GStreamer ``udpsink``
==============================  ===================================================================

A sink that cannot work here fails when it is created, with one line that says
why (no display, an OpenCV without GUI or GStreamer), never on the first frame.
Events go to :class:`~jetforge.apps.video.sinks.file.JsonLinesSink`.
"""

import logging
import os
from pathlib import Path
from typing import Any, Optional, Tuple, Union
from urllib.parse import urlparse

import numpy as np

from jetforge.errors import ConfigError, StreamError
from jetforge.optional import require
from jetforge.apps.video.sinks.file import JsonLinesSink, Mp4Sink, fit_frame
from jetforge.apps.video.sources.base import uri_to_path
from jetforge.apps.video.sources.factory import is_jetson, opencv_has_gstreamer

log = logging.getLogger(__name__)

SINK_USAGE = """video outputs (--output URI, repeatable):
  out.mp4                  an annotated MP4 file
  display://0              a window on the screen (needs a display)
  rtsp://host:8554/live    RTSP to a server, through GStreamer (Jetson: NVENC)
  rtp://host:5000          RTP/UDP H.264, through GStreamer"""


def has_display() -> bool:
    """Whether a window can be shown: a display server to talk to (X11 or Wayland on Linux)."""
    if os.name == "nt" or os.uname().sysname == "Darwin":  # type: ignore[attr-defined]
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def opencv_has_gui() -> bool:
    """Whether this OpenCV build has a HighGUI backend (headless wheels have none)."""
    cv2 = require("cv2", "showing video")
    for line in cv2.getBuildInformation().splitlines():
        text = line.strip()
        if text.startswith("GUI:"):
            return "NONE" not in text.upper()
    return False


class WindowSink:
    """Frames shown in an OpenCV window; closing the window or pressing q/Esc sets :attr:`closed_by_user`."""

    def __init__(self, title: str = "jetforge") -> None:
        self._cv2 = require("cv2", "showing video")
        if not has_display():
            raise StreamError("cannot open a window: no display (DISPLAY/WAYLAND_DISPLAY are not set)",
                              hint="drop --display on a headless machine; the MP4 and events are still written")
        if not opencv_has_gui():
            raise StreamError("cannot open a window: this OpenCV (%s) is built without a GUI (a headless wheel)"
                              % self._cv2.__version__,
                              hint="pip install opencv-python instead of opencv-python-headless, or drop --display")
        self.title = title
        self.closed_by_user = False
        self.frames = 0
        self._cv2.namedWindow(title, self._cv2.WINDOW_NORMAL)

    def write(self, image: np.ndarray) -> None:
        self._cv2.imshow(self.title, image)
        self.frames += 1
        key = self._cv2.waitKey(1) & 0xFF
        if key in (ord("q"), 27):
            self.closed_by_user = True

    def close(self) -> None:
        try:
            self._cv2.destroyWindow(self.title)
        except Exception:  # the user already closed it
            pass

    def abort(self, exc: Optional[BaseException] = None) -> None:
        self.close()

    def __enter__(self) -> "WindowSink":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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


VideoSink = Union[Mp4Sink, WindowSink, GstStreamSink]


def open_video_sink(uri: Union[str, "os.PathLike[str]"], fps: float, size: Optional[Tuple[int, int]] = None,
                    title: str = "jetforge") -> Any:
    """Open a video output by URI (see the module docstring)."""
    text = os.fspath(uri)
    scheme = urlparse(text).scheme.lower()
    if scheme == "display":
        return WindowSink(title)
    if scheme in ("rtsp", "rtsps", "rtp"):
        if size is None:
            raise ConfigError("streaming to %s needs the frame size up front" % text)
        return GstStreamSink(text, fps, size)
    path = uri_to_path(text)
    if path is None:
        raise ConfigError("video output %r: unknown scheme %s://" % (text, scheme),
                          hint="use a .mp4 path, display://0, rtsp:// or rtp://")
    if Path(path).suffix.lower() not in (".mp4", ".m4v", ".mov"):
        raise ConfigError("video output %s must end in .mp4" % path)
    return Mp4Sink(path, fps or 25.0, size)


__all__ = ["GstStreamSink", "JsonLinesSink", "Mp4Sink", "SINK_USAGE", "WindowSink", "gst_output_pipeline",
           "has_display", "open_video_sink", "opencv_has_gui"]
