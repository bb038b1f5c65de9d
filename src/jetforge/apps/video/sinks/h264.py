"""Browser-playable MP4: H.264 (yuv420p, ``moov`` before the media data) from the best encoder on this machine.

Why: OpenCV's pip wheels write MPEG-4 Part 2 (``mp4v``), which no browser plays.  :func:`open_mp4` picks, in order:

* ``gstreamer-nvv4l2h264enc`` on a Jetson whose OpenCV has GStreamer (JetPack's): the board's hardware encoder
  through :func:`gst_file_pipeline`.  WRITTEN AGAINST JETPACK'S DOCUMENTED ELEMENTS, NOT EXECUTED HERE (no
  Jetson): the pipeline string is built and tested, the encoding itself is not;
* ``pyav-libx264``: PyAV's bundled FFmpeg with libx264 (``pip install av==12.3.0``), CPU encoding;
* ``opencv-mp4v``: OpenCV's writer, a labelled fallback (MPEG-4 Part 2: plays in VLC and ffplay, not in browsers);
  a warning says so and the sink's ``encoder`` names it, which ``metrics.json`` reports.

Every sink writes to a temporary name next to the target and renames it on ``close()`` (an exception or Ctrl-C
leaves the previous file or nothing), and letterboxes frames of another size into the video's (``letterboxed``).
"""

import logging
from fractions import Fraction
from typing import Any, Optional, Tuple

import numpy as np

from jetforge.apps.video.sinks.file import Mp4Sink, _AtomicSink, fit_frame
from jetforge.apps.video.sources.capture import is_jetson, opencv_has_gstreamer
from jetforge.errors import ConfigError, StreamError
from jetforge.fileio import PathLike
from jetforge.optional import is_available, require

log = logging.getLogger(__name__)

ENCODERS = ("auto", "gstreamer-nvv4l2h264enc", "pyav-libx264", "opencv-mp4v")
FALLBACK_NOTE = ("written by OpenCV's mp4v fallback (MPEG-4 Part 2, not browser-playable): "
                 "pip install av==12.3.0 for H.264")


def even_size(size: Tuple[int, int]) -> Tuple[int, int]:
    """yuv420p halves the chroma planes, so H.264 needs even sides: odd sides grow by one (padding, no crop)."""
    return int(size[0]) + int(size[0]) % 2, int(size[1]) + int(size[1]) % 2


def pad_even(image: np.ndarray) -> np.ndarray:
    """``image`` with one edge-replicated column/row added where its width/height is odd."""
    h, w = image.shape[:2]
    if not (h % 2 or w % 2):
        return image
    return np.pad(image, ((0, h % 2), (0, w % 2), (0, 0)), mode="edge")


def check_frame(image: Any, what: str) -> None:
    """Refuse anything but an HxWx3 uint8 BGR frame, naming what arrived."""
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise StreamError("%s expects HxWx3 uint8 BGR frames, got %s"
                          % (what, getattr(image, "shape", type(image).__name__)))


def gst_file_pipeline(path: str, bitrate_kbps: int = 8000) -> str:
    """The Jetson writer pipeline (appsrc first, for OpenCV's GStreamer VideoWriter): BGR -> NVMM I420 ->
    ``nvv4l2h264enc`` -> ``qtmux faststart=true`` (moov first) -> ``filesink``.  NOT EXECUTED HERE (no Jetson)."""
    if "!" in path or '"' in path:
        raise ConfigError("MP4 path %r cannot go into a GStreamer pipeline ('!' or '\"' in it)" % path,
                          hint="choose a path without those characters")
    return ("appsrc ! videoconvert ! video/x-raw, format=(string)BGRx ! nvvidconv ! "
            "video/x-raw(memory:NVMM), format=(string)I420 ! nvv4l2h264enc bitrate=%d insert-sps-pps=true "
            "idrinterval=30 profile=2 ! h264parse ! qtmux faststart=true ! filesink location=\"%s\""
            % (int(bitrate_kbps) * 1000, path))


class PyAvMp4Sink(_AtomicSink):
    """Frames (HxWx3 uint8 BGR) -> H.264 (libx264, yuv420p, High profile) in MP4 with ``+faststart``."""

    encoder = "pyav-libx264"

    def __init__(self, path: PathLike, fps: float, size: Optional[Tuple[int, int]] = None, crf: int = 23,
                 preset: str = "veryfast") -> None:
        self._av = require("av", "writing H.264 MP4 video")
        if not fps or fps <= 0:
            raise StreamError("cannot write %s: frame rate must be positive, got %r" % (path, fps))
        self.fps = float(fps)
        self.crf, self.preset = int(crf), preset
        self.size: Optional[Tuple[int, int]] = None  # the frames' size; the coded size is even_size() of it
        self.frames = 0
        self.letterboxed = 0
        self._container: Any = None
        self._stream: Any = None
        super().__init__(path, suffix=".mp4")
        if size is not None:
            self._open((int(size[0]), int(size[1])))

    def _open(self, size: Tuple[int, int]) -> None:
        av = self._av
        width, height = even_size(size)
        try:
            container = av.open(str(self.tmp_path), mode="w", format="mp4", options={"movflags": "+faststart"})
            stream = container.add_stream("libx264", rate=Fraction(self.fps).limit_denominator(1001))
            stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
            stream.options = {"crf": str(self.crf), "preset": self.preset, "profile": "high"}
        except Exception as err:  # av.FFmpegError and friends: the encoder cannot start here
            exc = StreamError("PyAV cannot write %s with libx264 at %dx%d: %s" % (self.path.name, width, height, err),
                              hint="check the PyAV install (pip install av==12.3.0), or use --no-video")
            self.abort(exc)
            raise exc from None
        self._container, self._stream, self.size = container, stream, (int(size[0]), int(size[1]))

    def write(self, image: np.ndarray) -> None:
        if self._done:
            raise StreamError("MP4 sink %s is already closed" % self.path.name)
        check_frame(image, "MP4 sink")
        wh = (int(image.shape[1]), int(image.shape[0]))
        if self._stream is None:
            self._open(wh)
        elif wh != self.size:
            image = fit_frame(image, self.size)  # type: ignore[arg-type]
            self.letterboxed += 1
        frame = self._av.VideoFrame.from_ndarray(np.ascontiguousarray(pad_even(image)), format="bgr24")
        frame.pts = self.frames
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        self.frames += 1

    def _release(self) -> None:
        if self._container is not None:
            try:
                for packet in self._stream.encode(None):  # flush the encoder's delayed frames
                    self._container.mux(packet)
            finally:
                self._container.close()
                self._container = None
        if self.frames == 0:
            raise StreamError("no frames were written to %s" % self.path.name)


class GstMp4Sink(Mp4Sink):
    """Jetson: H.264 by ``nvv4l2h264enc`` through OpenCV's GStreamer writer (NOT EXECUTED HERE: no Jetson)."""

    encoder = "gstreamer-nvv4l2h264enc"

    def _open(self, size: Tuple[int, int]) -> None:
        cv2 = self._cv2
        pipeline = gst_file_pipeline(str(self.tmp_path))
        writer = cv2.VideoWriter(pipeline, cv2.CAP_GSTREAMER, 0, self.fps, (int(size[0]), int(size[1])), True)
        if not writer.isOpened():
            writer.release()
            err = StreamError("GStreamer could not start the H.264 writer for %s" % self.path.name,
                              hint="check the elements: gst-launch-1.0 " + pipeline.replace("appsrc", "videotestsrc"))
            self.abort(err)
            raise err
        self._writer = writer
        self.size = (int(size[0]), int(size[1]))


class OpenCvMp4Sink(Mp4Sink):
    """OpenCV's ``mp4v`` writer: the labelled fallback (MPEG-4 Part 2; browsers do not play it)."""

    encoder = "opencv-mp4v"


def choose_encoder(requested: str = "auto") -> str:
    """The encoder :func:`open_mp4` uses here for ``requested`` (one of :data:`ENCODERS`)."""
    if requested not in ENCODERS:
        raise ConfigError("unknown MP4 encoder %r" % requested, hint="one of " + ", ".join(ENCODERS))
    if requested != "auto":
        return requested
    if is_jetson() and opencv_has_gstreamer():
        return "gstreamer-nvv4l2h264enc"
    if is_available("av"):
        return "pyav-libx264"
    return "opencv-mp4v"


def open_mp4(path: PathLike, fps: float, size: Optional[Tuple[int, int]] = None, encoder: str = "auto") -> Any:
    """An MP4 sink for ``path`` written by :func:`choose_encoder`'s pick; its ``encoder`` attribute names it."""
    chosen = choose_encoder(encoder)
    if chosen == "pyav-libx264":
        return PyAvMp4Sink(path, fps, size)
    if chosen == "gstreamer-nvv4l2h264enc":
        return GstMp4Sink(path, fps, size)
    log.warning("%s: %s", path, FALLBACK_NOTE)
    return OpenCvMp4Sink(path, fps, size)


__all__ = ["ENCODERS", "FALLBACK_NOTE", "GstMp4Sink", "OpenCvMp4Sink", "PyAvMp4Sink", "choose_encoder",
           "even_size", "gst_file_pipeline", "open_mp4", "pad_even"]
