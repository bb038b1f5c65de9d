"""Every video output behind one URI factory, :func:`open_video_sink`, and their registry :data:`SINKS`.

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

Adding a kind of output: a class with ``write(image)``, ``close()`` and ``abort(exc)`` in its own module and
one ``SINKS.add(scheme, SinkKind(...))`` line below.
"""

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Tuple, Union
from urllib.parse import urlparse

from jetforge.apps.video.sinks.file import Mp4Sink
from jetforge.apps.video.sinks.stream import GstStreamSink
from jetforge.apps.video.sinks.window import WindowSink
from jetforge.apps.video.sources.uri import uri_to_path
from jetforge.errors import ConfigError
from jetforge.registry import Registry


@dataclass(frozen=True)
class SinkKind:
    """One kind of video output: ``open(uri, fps, size, title)`` returns the sink; ``example`` is for --help."""

    open: Callable[[str, float, Optional[Tuple[int, int]], str], Any]
    example: str


# URI scheme -> SinkKind; "file" also serves plain paths.
SINKS: Registry[SinkKind] = Registry("video output scheme")


def _mp4(uri: str, fps: float, size: Optional[Tuple[int, int]], title: str) -> Any:
    path = uri_to_path(uri)
    if path is None or Path(path).suffix.lower() not in (".mp4", ".m4v", ".mov"):
        raise ConfigError("video output %s must end in .mp4" % (path or uri))
    return Mp4Sink(path, fps or 25.0, size)


def _stream(uri: str, fps: float, size: Optional[Tuple[int, int]], title: str) -> Any:
    if size is None:
        raise ConfigError("streaming to %s needs the frame size up front" % uri)
    return GstStreamSink(uri, fps, size)


SINKS.add("file", SinkKind(_mp4, "out.mp4"), summary="an annotated MP4 file")
SINKS.add("display", SinkKind(lambda uri, fps, size, title: WindowSink(title), "display://0"),
          summary="a window on the screen (needs a display)")
SINKS.add("rtsp", SinkKind(_stream, "rtsp://host:8554/live"),
          summary="RTSP to a server, through GStreamer (Jetson: NVENC)")
SINKS.add("rtsps", SinkKind(_stream, "rtsps://host:8322/live"), summary="RTSP over TLS, as rtsp://")
SINKS.add("rtp", SinkKind(_stream, "rtp://host:5000"), summary="RTP/UDP H.264, through GStreamer")


def sink_usage() -> str:
    """The help text of the video outputs, one line per registered scheme."""
    rows = [(SINKS.get(n).example, s) for n, s in SINKS.summaries()]
    width = max(len(e) for e, _ in rows)
    return "video outputs (--output URI, repeatable):\n" + "\n".join("  %-*s  %s" % (width, e, s) for e, s in rows)


def open_video_sink(uri: Union[str, "os.PathLike[str]"], fps: float, size: Optional[Tuple[int, int]] = None,
                    title: str = "jetforge") -> Any:
    """Open a video output by URI (see the module docstring)."""
    text = os.fspath(uri)
    scheme = urlparse(text).scheme.lower()
    if scheme in SINKS:
        return SINKS.get(scheme).open(text, fps, size, title)
    if uri_to_path(text) is None:
        raise ConfigError("video output %r: unknown scheme %s://" % (text, scheme),
                          hint="use a .mp4 path or one of %s" % ", ".join(s + "://" for s in SINKS))
    return SINKS.get("file").open(text, fps, size, title)


__all__ = ["SINKS", "SinkKind", "open_video_sink", "sink_usage"]
