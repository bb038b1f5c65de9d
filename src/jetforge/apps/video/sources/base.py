"""What every video source shares: the :class:`Frame` record, the :class:`VideoSource` interface, a parsed
URI (:class:`SourceSpec`), the options of the live sources (:class:`SourceOptions`) and :class:`SourceKind`,
the entry of the source registry.

A source is an iterator of :class:`Frame` and a context manager.  The end of the
stream is the normal end of iteration; a source that cannot be opened or decoded
at all is a :class:`~jetforge.errors.StreamError` (or ``InputFileError`` when the
file is simply not there), raised when the source is opened, not mid-loop.
"""

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, Optional, Tuple
from urllib.parse import ParseResult

import numpy as np

from jetforge.errors import ConfigError, StreamError


@dataclass(frozen=True)
class Frame:
    """One decoded frame: ``image`` is HxWx3 uint8 BGR (as OpenCV delivers it)."""

    index: int
    timestamp: float  # seconds since the start of the stream (presentation time)
    image: np.ndarray
    captured: float = 0.0  # time.perf_counter() when the frame was decoded/captured (0.0: not recorded)
    name: str = ""  # the file it came from, where each frame has one (an image folder); "" otherwise

    @property
    def size(self) -> "tuple[int, int]":
        """(width, height)."""
        return int(self.image.shape[1]), int(self.image.shape[0])


class VideoSource:
    """Base of every source: iterate for frames; close (or use ``with``) to release it."""

    uri = ""
    width = 0
    height = 0
    fps = 0.0
    frame_count: Optional[int] = None  # None: unknown or unbounded (a live stream)
    live = False  # a camera or network stream: frames arrive in real time and stale ones are dropped
    dropped = 0  # frames the source itself discarded (newest-frame policy of live sources)
    # Set when a file ended before the frame count its header announced (damaged or truncated).
    truncated: Optional[str] = None

    def read(self) -> Optional[Frame]:
        """The next frame, or None at the end of the stream."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the source (idempotent)."""

    def __iter__(self) -> Iterator[Frame]:
        return self

    def __next__(self) -> Frame:
        frame = self.read()
        if frame is None:
            raise StopIteration
        return frame

    def __enter__(self) -> "VideoSource":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def info(self) -> Dict[str, Any]:
        return {"uri": self.uri, "width": self.width, "height": self.height, "fps": self.fps,
                "frame_count": self.frame_count, "live": self.live}


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
    """A parsed source URI: ``kind`` (a name in :data:`jetforge.apps.video.sources.SOURCES`) and its ``location``."""

    kind: str
    location: str  # path, device path or index, CSI sensor id, or URL
    uri: str
    live: bool = field(default=False, compare=False)  # a camera or stream: newest-frame policy, reconnects


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


@dataclass(frozen=True)
class SourceKind:
    """One kind of video source in :data:`jetforge.apps.video.sources.SOURCES`: which URI schemes name it, how
    its location is read from such a URI, and how it is opened.

    ``locate(parsed, text)`` returns the location (path, device, sensor id or URL) or raises ConfigError when
    the URI names none; ``open(spec, options)`` returns the :class:`VideoSource`.  ``example`` is the URI form
    shown in ``--help``.
    """

    schemes: Tuple[str, ...]
    locate: Callable[[ParseResult, str], str]
    open: Callable[[SourceSpec, SourceOptions], VideoSource]
    example: str
    live: bool = False


__all__ = ["Frame", "FrameDecodeError", "SourceKind", "SourceOptions", "SourceSpec", "VideoSource"]
