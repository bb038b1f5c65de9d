"""Every kind of video source behind one URI factory, :func:`open_source`.

==========================  =========================================================================
URI                         source
==========================  =========================================================================
``clip.mp4``, ``file://…``  a video file (OpenCV/FFmpeg), :class:`~jetforge.apps.video.sources.base.FileSource`
a folder, ``file://dir/``   the images in it, in name order (:class:`ImageFolderSource`)
``v4l2:///dev/video0``,     a V4L2 camera (USB webcam) by device path or index
``0``, ``1``
``csi://0``                 a MIPI CSI camera on a Jetson through GStreamer's ``nvarguscamerasrc``
``rtsp://…``, ``rtsps://…`` an RTSP stream (GStreamer with NVDEC on a Jetson, FFmpeg elsewhere)
``http://…``, ``https://…`` an HTTP stream (MJPEG, HLS, a plain file over HTTP) through FFmpeg
==========================  =========================================================================

Files and folders are read frame by frame and never drop a frame.  Cameras and
streams are *live* (:class:`LiveSource`): a reader thread keeps only the newest
frame(s) (``buffer`` frames, default 1), so a slow pipeline processes the latest
picture instead of falling further behind; each discarded frame is counted in
``dropped``.  A live source that stops delivering reconnects with exponential
back-off and gives up with a :class:`~jetforge.errors.StreamError` naming the
source and the attempts; that error is distinct from the end of a file, which is
the normal end of iteration.

The GStreamer pipeline strings are built by plain functions
(:func:`gst_csi_pipeline`, :func:`gst_rtsp_pipeline`) so that they can be read,
tested and pasted into ``gst-launch-1.0`` by hand.
"""

import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Deque, Dict, List, Optional, Set, Tuple, Union
from urllib.parse import urlparse

import numpy as np

from jetforge.errors import ConfigError, InputFileError, StreamError
from jetforge.optional import require
from jetforge.apps.video.sources.base import FileSource, Frame, VideoSource, uri_to_path

log = logging.getLogger(__name__)

SOURCE_KINDS = ("file", "images", "v4l2", "csi", "rtsp", "http")
LIVE_KINDS = ("v4l2", "csi", "rtsp", "http")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm")

SOURCE_USAGE = """video sources (--source URI):
  clip.mp4 | file:///data/clip.mp4     a video file
  frames/                              a folder of images, in name order (any sizes; unreadable ones skipped)
  v4l2:///dev/video0 | 0               a V4L2 (USB) camera, by device or index
  csi://0                              a Jetson CSI camera (GStreamer nvarguscamerasrc)
  rtsp://host:8554/stream              an RTSP stream (reconnects with back-off)
  http://host:8080/video.mjpg          an HTTP stream (MJPEG, HLS, ...)"""


class FrameDecodeError(StreamError):
    """One frame could not be decoded; the source can go on with the next one.

    ``index`` is the frame number it would have had and ``name`` the file it came from (an image
    folder), so the pipeline can report it where the user will look for it.
    """

    def __init__(self, message: str, *, hint: Optional[str] = None, index: Optional[int] = None,
                 name: str = "") -> None:
        super().__init__(message, hint=hint)
        self.index = index
        self.name = name


@dataclass(frozen=True)
class SourceSpec:
    """A parsed source URI: ``kind`` (one of :data:`SOURCE_KINDS`) and its ``location``."""

    kind: str
    location: str  # path, device path or index, CSI sensor id, or URL
    uri: str

    @property
    def live(self) -> bool:
        return self.kind in LIVE_KINDS


@dataclass
class SourceOptions:
    """Options of the live sources (files and folders use only ``fps``).

    ``width``/``height``/``fps``: the capture mode asked of a camera (0: its default;
    for an image folder ``fps`` sets the timestamps).  ``buffer``: frames kept by a
    live source (older ones are dropped, newest-frame policy).  ``reconnect``: retry a
    lost live source; ``max_reconnects`` consecutive failed attempts, waiting
    ``backoff_s`` doubling up to ``backoff_max_s`` between them, before giving up.
    ``stall_timeout_s``: a live source that delivers nothing for this long is lost.
    ``gstreamer``: "auto" (use it for RTSP where OpenCV has it and on Jetson), "yes" or "no".
    ``loop``: play a video file again from the start when it ends (files only).
    """

    width: int = 0
    height: int = 0
    fps: float = 0.0
    flip: int = 0  # nvvidconv flip-method for csi:// (0: none, 2: rotate 180)
    latency_ms: int = 200  # rtspsrc jitter buffer
    buffer: int = 1
    reconnect: bool = True
    max_reconnects: int = 5
    backoff_s: float = 0.5
    backoff_max_s: float = 8.0
    open_timeout_s: float = 10.0
    stall_timeout_s: float = 30.0
    gstreamer: str = "auto"
    loop: bool = False

    def __post_init__(self) -> None:
        if self.buffer < 1:
            raise ConfigError("source buffer must hold at least 1 frame, got %d" % self.buffer)
        if self.max_reconnects < 0:
            raise ConfigError("max_reconnects must be 0 or more, got %d" % self.max_reconnects)
        if self.backoff_s <= 0 or self.backoff_max_s < self.backoff_s:
            raise ConfigError("back-off must be positive and backoff_max_s >= backoff_s, got %r and %r"
                              % (self.backoff_s, self.backoff_max_s))
        if self.gstreamer not in ("auto", "yes", "no"):
            raise ConfigError("gstreamer must be auto, yes or no, got %r" % self.gstreamer)

    def backoff(self, attempt: int) -> float:
        """Seconds to wait before reconnect attempt ``attempt`` (1-based): 0.5, 1, 2, 4, 8, 8, ..."""
        return min(self.backoff_max_s, self.backoff_s * (2.0 ** (attempt - 1)))


# -- URIs ----------------------------------------------------------------------------------------

def parse_source_uri(uri: Union[str, "os.PathLike[str]", int]) -> SourceSpec:
    """Classify a source URI without opening it; an unknown scheme is a ConfigError listing the known ones."""
    if isinstance(uri, bool):
        raise ConfigError("video source must be a URI, path or camera index, got %r" % (uri,))
    if isinstance(uri, int):
        return SourceSpec("v4l2", str(uri), str(uri))
    text = os.fspath(uri)
    if not text.strip():
        raise ConfigError("empty video source", hint="give a file, folder, camera index or stream URL")
    if text.isascii() and text.isdigit():  # "²".isdigit() is True too, and int("²") fails
        return SourceSpec("v4l2", text, text)
    try:
        parsed = urlparse(text)
    except ValueError as err:  # "rtsp://[::1" (an unclosed IPv6 bracket)
        raise ConfigError("video source %r is not a valid URI: %s" % (text, err),
                          hint="check the brackets around an IPv6 host, e.g. rtsp://[::1]:8554/stream") from None
    scheme = parsed.scheme.lower()
    if scheme == "v4l2":
        location = parsed.netloc + parsed.path  # v4l2:///dev/video0 -> /dev/video0, v4l2://0 -> 0
        if not location:
            raise ConfigError("camera URI %r names no device" % text, hint="e.g. v4l2:///dev/video0")
        return SourceSpec("v4l2", location, text)
    if scheme == "csi":
        sensor = (parsed.netloc + parsed.path).strip("/") or "0"
        if not (sensor.isascii() and sensor.isdigit()):
            raise ConfigError("CSI camera URI %r: the sensor id must be a number" % text, hint="e.g. csi://0")
        return SourceSpec("csi", sensor, text)
    if scheme in ("rtsp", "rtsps"):
        if not parsed.netloc:
            raise ConfigError("RTSP URI %r names no host" % text, hint="e.g. rtsp://192.168.1.10:8554/stream")
        return SourceSpec("rtsp", text, text)
    if scheme in ("http", "https"):
        if not parsed.netloc:
            raise ConfigError("HTTP URI %r names no host" % text)
        return SourceSpec("http", text, text)
    path = uri_to_path(text)
    if path is None:
        raise ConfigError("video source %r: unknown scheme %s://" % (text, scheme),
                          hint="use a file path, file://, a folder, v4l2://, csi://, rtsp:// or http(s)://")
    return SourceSpec("images" if path.is_dir() else "file", str(path), text)


def is_jetson() -> bool:
    """Whether this machine is a Jetson (L4T release file or device-tree model)."""
    if Path("/etc/nv_tegra_release").exists():
        return True
    try:
        with open("/proc/device-tree/model", "rb") as f:
            return b"jetson" in f.read().lower()
    except OSError:
        return False


def opencv_has_gstreamer() -> bool:
    """Whether this OpenCV build can open GStreamer pipelines (JetPack's OpenCV can; PyPI wheels cannot)."""
    cv2 = require("cv2", "video capture")
    for line in cv2.getBuildInformation().splitlines():
        if line.strip().startswith("GStreamer:"):
            return "YES" in line.split(":", 1)[1]
    return False


def gst_csi_pipeline(sensor_id: int = 0, width: int = 1280, height: int = 720, fps: float = 30.0,
                     flip: int = 0, buffers: int = 1) -> str:
    """GStreamer capture pipeline for a Jetson CSI camera: Argus -> NVMM NV12 -> nvvidconv -> BGR appsink."""
    if flip not in range(8):
        raise ConfigError("flip-method must be 0..7, got %r" % flip)
    return ("nvarguscamerasrc sensor-id=%d ! "
            "video/x-raw(memory:NVMM), width=(int)%d, height=(int)%d, framerate=(fraction)%s, format=(string)NV12 ! "
            "nvvidconv flip-method=%d ! video/x-raw, format=(string)BGRx ! "
            "videoconvert ! video/x-raw, format=(string)BGR ! "
            "appsink drop=true max-buffers=%d sync=false"
            % (int(sensor_id), int(width), int(height), _fraction(fps), flip, buffers))


def gst_rtsp_pipeline(url: str, latency_ms: int = 200, codec: str = "h264", jetson: bool = True,
                      buffers: int = 1) -> str:
    """GStreamer pipeline for an RTSP stream: NVDEC (``nvv4l2decoder``) on a Jetson, libav elsewhere."""
    codec = codec.lower()
    if codec not in ("h264", "h265"):
        raise ConfigError("RTSP codec must be h264 or h265, got %r" % codec)
    depay = "rtp%sdepay ! %sparse" % (codec, codec)
    if jetson:
        decode = "nvv4l2decoder ! nvvidconv ! video/x-raw, format=(string)BGRx ! videoconvert"
    else:
        decode = "avdec_%s ! videoconvert" % codec
    return ("rtspsrc location=%s latency=%d ! %s ! %s ! video/x-raw, format=(string)BGR ! "
            "appsink drop=true max-buffers=%d sync=false" % (url, int(latency_ms), depay, decode, buffers))


def _fraction(fps: float) -> str:
    if float(fps).is_integer():
        return "%d/1" % int(fps)
    return "%d/1000" % int(round(fps * 1000))


# -- image folders ---------------------------------------------------------------------------------

class ImageFolderSource(VideoSource):
    """The images of a folder in name order, one frame each.

    Frame ``i`` is the ``i``-th image file in name order (``Frame.name`` is its file name), so
    events, errors and a directory listing agree.  Images may differ in size: the folder's
    ``width``/``height`` are its first readable image's, and video sinks letterbox the others.
    An image that cannot be decoded raises :class:`FrameDecodeError` naming it (the pipeline
    skips that frame and goes on) and is listed in ``skipped``, wherever it is in the folder;
    the folder is refused when it is opened only if none of its images can be decoded.
    """

    def __init__(self, folder: Union[str, "os.PathLike[str]"], fps: float = 0.0) -> None:
        from jetforge.fileio import require_dir

        self._cv2 = require("cv2", "reading images")
        self.path = require_dir(folder, "image folder")
        self.files = sorted(p for p in self.path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
        if not self.files:
            raise InputFileError("image folder %s holds no images (%s)" % (self.path, ", ".join(IMAGE_SUFFIXES)))
        self.uri = str(self.path)
        self.fps = float(fps) if fps and fps > 0 else 0.0
        self.frame_count = len(self.files)
        self.skipped: List[str] = []  # names of the images that could not be decoded, in frame order
        self._index = 0
        # Find the first readable image (its size is the folder's); the unreadable ones before it are
        # remembered, not decoded again, and reported in frame order by read() like any other.
        self._unreadable: Set[int] = set()
        self._first: Optional[Tuple[int, np.ndarray]] = None
        for index, path in enumerate(self.files):
            image = self._decode(path)
            if image is not None:
                self._first = (index, image)
                break
            self._unreadable.add(index)
        if self._first is None:
            raise StreamError("none of the %d images in %s can be decoded (%s, ...)"
                              % (len(self.files), self.path, ", ".join(p.name for p in self.files[:3])),
                              hint="check the files (e.g. open one in an image viewer); give a folder of "
                                   "JPEG/PNG/BMP/TIFF/WebP images")
        self.height, self.width = self._first[1].shape[:2]

    def _decode(self, path: Path) -> Optional[np.ndarray]:
        try:
            return self._cv2.imread(str(path), self._cv2.IMREAD_COLOR)
        except Exception as err:  # cv2.error on some malformed headers instead of None
            log.debug("cannot decode %s: %s", path, err)
            return None

    def read(self) -> Optional[Frame]:
        if self._index >= len(self.files):
            return None
        index, path = self._index, self.files[self._index]
        self._index += 1
        if self._first is not None and self._first[0] == index:
            image: Optional[np.ndarray] = self._first[1]
            self._first = None
        elif index in self._unreadable:
            image = None
        else:
            image = self._decode(path)
        if image is None:
            self.skipped.append(path.name)
            raise FrameDecodeError("image %s (frame %d) cannot be decoded" % (path.name, index),
                                   hint="the file is damaged or not an image; it is skipped", index=index,
                                   name=path.name)
        timestamp = index / self.fps if self.fps else float(index)
        return Frame(index=index, timestamp=timestamp, image=image, captured=time.perf_counter(), name=path.name)

    def info(self) -> Dict[str, Any]:
        data = super().info()
        data.update(images=len(self.files), skipped=list(self.skipped))
        return data


# -- live sources -------------------------------------------------------------------------------------

Capture = Any  # an object with read() -> (ok, image), release(), and optionally isOpened()
CaptureFactory = Callable[[], Capture]


class LiveSource(VideoSource):
    """A camera or network stream read by a background thread, newest frames first.

    ``open_capture`` returns a connected capture (``cv2.VideoCapture`` or anything
    with ``read() -> (ok, image)`` and ``release()``) or raises/returns an unopened
    one when the source cannot be reached.  Opening retries like a reconnect; when
    every attempt fails the constructor raises a StreamError, so an unreachable URL
    fails at once with one clear line.  :meth:`read` returns the newest frame not yet
    returned; it raises StreamError once the source is lost for good.  Counters:
    ``dropped`` (frames overwritten before anyone read them), ``reconnects``
    (successful reconnections), ``timeouts`` (waits of ``stall_timeout_s / 10``
    without a frame, logged as they happen).
    """

    live = True

    def __init__(self, uri: str, open_capture: CaptureFactory, options: Optional[SourceOptions] = None,
                 what: str = "stream") -> None:
        self.uri = uri
        self.what = what
        self.options = options or SourceOptions()
        self._open_capture = open_capture
        self._cond = threading.Condition()
        self._frames: Deque[Frame] = deque()
        self._error: Optional[StreamError] = None
        self._stopping = False
        self._t0 = time.perf_counter()
        self._next_index = 0
        self.dropped = 0
        self.reconnects = 0
        self.disconnects = 0
        self.timeouts = 0
        self.frame_count = None
        cap = self._connect(initial=True)
        ok, image = _read(cap)
        if not ok:
            _release(cap)
            raise StreamError("%s %s opened but delivered no frame" % (self.what, uri),
                              hint="check that the %s is streaming (e.g. with ffplay or gst-launch-1.0)" % what)
        self.height, self.width = image.shape[:2]
        fps = 0.0
        get = getattr(cap, "get", None)
        if callable(get):
            cv2 = require("cv2", "video capture")
            with _suppress():
                fps = float(get(cv2.CAP_PROP_FPS) or 0.0)
        self.fps = fps if 0.0 < fps < 1000.0 else (self.options.fps or 0.0)
        self._push(image)
        self._thread = threading.Thread(target=self._reader, args=(cap,), name="jetforge-source", daemon=True)
        self._thread.start()

    # -- the reader thread --------------------------------------------------------------
    def _connect(self, initial: bool) -> Capture:
        """Open the capture, retrying with back-off; StreamError after the last attempt.

        The first connection tries ``1 + max_reconnects`` times (once without ``reconnect``);
        a reconnection ``max_reconnects`` times, each after its back-off delay.
        """
        retries = self.options.max_reconnects if self.options.reconnect else 0
        attempts = 1 + retries if initial else max(1, retries)
        last = "no reason given"
        waited = 0.0
        for attempt in range(1, attempts + 1):
            delay = 0.0 if (initial and attempt == 1) else self.options.backoff(attempt - 1 if initial else attempt)
            if delay:
                log.warning("%s %s: %s attempt %d/%d in %.1f s", self.what, self.uri,
                            "connection" if initial else "reconnect", attempt, attempts, delay)
                waited += delay
                if self._sleep(delay):
                    break
            try:
                cap = self._open_capture()
            except Exception as err:  # the factory's own failure: keep the reason for the message
                last = str(err).splitlines()[0] if str(err) else type(err).__name__
                continue
            opened = getattr(cap, "isOpened", None)
            if cap is not None and (opened is None or opened()):
                if not initial:
                    self.reconnects += 1
                return cap
            _release(cap)
            last = "the capture did not open"
        verb = "cannot open" if initial else "lost"
        raise StreamError("%s %s %s: %s; %d attempt%s%s" % (
            verb, self.what, self.uri, last, attempts, "" if attempts == 1 else "s",
            (" over %.2f s" % waited) if waited else ""),
            hint="check that the %s is reachable and streaming (attempts: --max-reconnects)" % self.what)

    def _sleep(self, seconds: float) -> bool:
        """Wait, waking early when the source is closed; True if closed."""
        with self._cond:
            self._cond.wait_for(lambda: self._stopping, timeout=seconds)
            return self._stopping

    def _push(self, image: np.ndarray) -> None:
        now = time.perf_counter()
        frame = Frame(index=self._next_index, timestamp=now - self._t0, image=image, captured=now)
        self._next_index += 1
        with self._cond:
            if len(self._frames) >= self.options.buffer:
                self._frames.popleft()
                self.dropped += 1
            self._frames.append(frame)
            self._cond.notify_all()

    def _reader(self, cap: Capture) -> None:
        try:
            while not self._stopping:
                ok, image = _read(cap)
                if self._stopping:
                    break
                if ok:
                    self._push(image)
                    continue
                self.disconnects += 1
                _release(cap)
                cap = None
                if not self.options.reconnect:
                    raise StreamError("%s %s stopped delivering frames" % (self.what, self.uri),
                                      hint="reconnecting is off")
                log.warning("%s %s stopped delivering frames; reconnecting", self.what, self.uri)
                cap = self._connect(initial=False)
        except StreamError as err:
            with self._cond:
                self._error = err
                self._cond.notify_all()
        except Exception as err:  # a capture backend's own exception type
            with self._cond:
                self._error = StreamError("%s %s failed: %s" % (self.what, self.uri, err))
                self._cond.notify_all()
        finally:
            _release(cap)

    # -- what the consumer calls ---------------------------------------------------------
    def read(self) -> Optional[Frame]:
        """The newest frame not yet returned; None after :meth:`close`; StreamError once the source is lost."""
        step = max(0.05, self.options.stall_timeout_s / 10.0)
        waited = 0.0
        with self._cond:
            while True:
                if self._frames:
                    return self._frames.popleft()
                if self._error is not None:
                    raise self._error
                if self._stopping:
                    return None
                t0 = time.perf_counter()
                self._cond.wait(timeout=step)
                if self._frames or self._error is not None or self._stopping:
                    continue
                waited += time.perf_counter() - t0
                self.timeouts += 1
                log.warning("%s %s: no frame for %.1f s", self.what, self.uri, waited)
                if waited >= self.options.stall_timeout_s:
                    raise StreamError("%s %s delivered no frame for %.0f s" % (self.what, self.uri, waited),
                                      hint="the camera or stream stalled; check it, or raise --stall-timeout")

    def close(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        thread = getattr(self, "_thread", None)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)

    def info(self) -> Dict[str, Any]:
        data = super().info()
        data.update(dropped=self.dropped, reconnects=self.reconnects, disconnects=self.disconnects,
                    timeouts=self.timeouts)
        return data


def _read(cap: Capture) -> Tuple[bool, Optional[np.ndarray]]:
    try:
        ok, image = cap.read()
    except Exception as err:  # cv2.error from a backend whose device vanished
        log.debug("capture read failed: %s", err)
        return False, None
    if not ok or image is None or getattr(image, "size", 0) == 0:
        return False, None
    return True, image


def _release(cap: Optional[Capture]) -> None:
    if cap is not None:
        with _suppress():
            cap.release()


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        return exc_type is not None and issubclass(exc_type, Exception)


# -- OpenCV capture factories -------------------------------------------------------------------------

def _opencv_factory(target: Union[str, int], api: int, params: List[int], what: str, uri: str) -> CaptureFactory:
    def open_capture() -> Capture:
        cv2 = require("cv2", "video capture")
        cap = cv2.VideoCapture(target, api, params) if params else cv2.VideoCapture(target, api)
        if not cap.isOpened():
            cap.release()
            raise StreamError("OpenCV could not open %s %s" % (what, uri))
        return cap
    return open_capture


def capture_factory(spec: SourceSpec, options: SourceOptions) -> Tuple[CaptureFactory, str]:
    """(capture factory, description) for a live source spec, choosing the OpenCV backend."""
    cv2 = require("cv2", "video capture")
    timeouts = [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, int(options.open_timeout_s * 1000),
                cv2.CAP_PROP_READ_TIMEOUT_MSEC, int(max(1.0, options.stall_timeout_s / 3.0) * 1000)]
    if spec.kind == "csi":
        if not opencv_has_gstreamer():
            raise StreamError("csi://%s needs OpenCV built with GStreamer (JetPack's OpenCV); this OpenCV (%s) "
                              "has no GStreamer" % (spec.location, cv2.__version__),
                              hint="run on a Jetson with JetPack's python3-opencv, or use v4l2:// for USB cameras")
        pipeline = gst_csi_pipeline(int(spec.location), options.width or 1280, options.height or 720,
                                    options.fps or 30.0, options.flip, options.buffer)
        return _opencv_factory(pipeline, cv2.CAP_GSTREAMER, [], "CSI camera", spec.uri), "CSI camera"
    if spec.kind == "v4l2":
        target: Union[str, int] = int(spec.location) if spec.location.isdigit() else spec.location
        if isinstance(target, str) and not Path(target).exists():
            raise StreamError("camera %s does not exist" % target,
                              hint="list cameras with `v4l2-ctl --list-devices` or `ls /dev/video*`")
        params: List[int] = []
        if options.width:
            params += [cv2.CAP_PROP_FRAME_WIDTH, int(options.width)]
        if options.height:
            params += [cv2.CAP_PROP_FRAME_HEIGHT, int(options.height)]
        if options.fps:
            params += [cv2.CAP_PROP_FPS, int(options.fps)]
        return _opencv_factory(target, cv2.CAP_V4L2, params, "camera", spec.uri), "camera"
    if spec.kind == "rtsp":
        use_gst = options.gstreamer == "yes" or (options.gstreamer == "auto" and is_jetson()
                                                  and opencv_has_gstreamer())
        if options.gstreamer == "yes" and not opencv_has_gstreamer():
            raise StreamError("gstreamer=yes but this OpenCV (%s) has no GStreamer" % cv2.__version__,
                              hint="use gstreamer=auto (FFmpeg) or JetPack's OpenCV")
        if use_gst:
            pipeline = gst_rtsp_pipeline(spec.location, options.latency_ms, jetson=is_jetson(),
                                         buffers=options.buffer)
            return _opencv_factory(pipeline, cv2.CAP_GSTREAMER, [], "RTSP stream", spec.uri), "RTSP stream"
        return _opencv_factory(spec.location, cv2.CAP_FFMPEG, timeouts, "RTSP stream", spec.uri), "RTSP stream"
    if spec.kind == "http":
        return _opencv_factory(spec.location, cv2.CAP_FFMPEG, timeouts, "HTTP stream", spec.uri), "HTTP stream"
    raise ConfigError("%s is not a live source kind" % spec.kind)  # pragma: no cover - callers check


def open_source(uri: Union[str, "os.PathLike[str]", int], options: Optional[SourceOptions] = None,
                **overrides: Any) -> VideoSource:
    """Open a video source of any kind by URI (see the module docstring); keyword overrides set options.

    >>> with open_source("vtest.avi") as src:          # doctest: +SKIP
    ...     for frame in src: ...
    """
    options = options or SourceOptions()
    if overrides:
        from dataclasses import replace

        unknown = [k for k in overrides if k not in SourceOptions.__dataclass_fields__]
        if unknown:
            from jetforge.errors import UnknownNameError

            raise UnknownNameError("source option", unknown[0], list(SourceOptions.__dataclass_fields__))
        options = replace(options, **overrides)
    spec = parse_source_uri(uri)
    if options.loop and spec.kind != "file":
        raise ConfigError("--loop plays video files again; %s is a %s source" % (spec.uri, spec.kind),
                          hint="drop --loop, or give a video file")
    if spec.kind == "file":
        return FileSource(spec.location, loop=options.loop)
    if spec.kind == "images":
        return ImageFolderSource(spec.location, fps=options.fps)
    factory, what = capture_factory(spec, options)
    return LiveSource(spec.uri, factory, options, what=what)


__all__ = ["FrameDecodeError", "ImageFolderSource", "LiveSource", "SOURCE_KINDS", "SOURCE_USAGE", "SourceOptions",
           "SourceSpec", "capture_factory", "gst_csi_pipeline", "gst_rtsp_pipeline", "is_jetson",
           "open_source", "opencv_has_gstreamer", "parse_source_uri"]
