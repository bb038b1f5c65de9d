"""Every video output behind one URI factory, :func:`open_video_sink`, and their registry :data:`SINKS`; several
at once (``--output`` repeated) through :func:`~jetforge.apps.video.sinks.outputs.open_sinks`.

==================================  ===============================================================
URI                                 sink
==================================  ===============================================================
``out.mp4``, ``file://…``           an annotated MP4 file, H.264 where an encoder exists (:mod:`.h264`:
                                    nvv4l2h264enc on a Jetson, PyAV elsewhere, OpenCV mp4v as fallback)
``http://@:8080``                   a web page with the live video (MJPEG, a tile per stream) and numbers
                                    (:mod:`.http`)
``rtsp://@:8554/live``              an RTSP server in the app (GStreamer rtsp-server, :mod:`.rtsp_server`);
                                    ``/live`` for one stream, ``/live/<k>`` for stream k of several
``rtsp://host:8554/live``           RTSP pushed to a server such as mediamtx (GStreamer ``rtspclientsink``)
``rtp://host:5000``                 RTP/UDP H.264 output through GStreamer ``udpsink``
``mqtt://host[:1883]/topic``        the events as JSON messages to an MQTT broker (:mod:`.mqtt`)
``display://0``                     an on-screen window (OpenCV HighGUI); needs a display and a GUI build
==================================  ===============================================================

``@`` is every interface of this machine (as in jetson-inference).  A sink that cannot work here fails when it
is created, with one line that says why (no display, no GStreamer, no broker), never on the first frame.
Live outputs (http, rtsp, mqtt, display) drop what a slow client cannot take and count it; files never drop.
Events also always go to ``events.jsonl`` (:class:`~jetforge.apps.video.sinks.file.JsonLinesSink`).

Adding a kind of output: a class with ``write(image)`` (frames) and/or ``write_event(record)`` (events),
``close()``, ``abort(exc)`` and ``report()`` in its own module and one ``SINKS.add(scheme, SinkKind(...))``
line below.
"""

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Tuple, Union
from urllib.parse import urlparse

from jetforge.apps.video.sinks.h264 import open_mp4
from jetforge.apps.video.sinks.http import HttpSink
from jetforge.apps.video.sinks.mqtt import MqttSink
from jetforge.apps.video.sinks.rtsp_server import RtspServerSink
from jetforge.apps.video.sinks.stream import GstStreamSink
from jetforge.apps.video.sinks.window import WindowSink
from jetforge.apps.video.sources.uri import uri_to_path
from jetforge.errors import ConfigError
from jetforge.registry import Registry


@dataclass(frozen=True)
class SinkKind:
    """One kind of video output: ``open(uri, fps, size, title)`` returns the sink; ``example`` is for --help."""

    open: Callable[..., Any]  # (uri, fps, size, title[, sizes=[(w, h) of every stream]])
    example: str


# URI scheme -> SinkKind; "file" also serves plain paths.
SINKS: Registry[SinkKind] = Registry("video output scheme")


def _mp4(uri: str, fps: float, size: Optional[Tuple[int, int]], title: str) -> Any:
    path = uri_to_path(uri)
    if path is None or Path(path).suffix.lower() not in (".mp4", ".m4v", ".mov"):
        raise ConfigError("video output %s must end in .mp4" % (path or uri))
    return open_mp4(path, fps or 25.0, size)


def _stream(uri: str, fps: float, size: Optional[Tuple[int, int]], title: str,
            sizes: Optional[Sequence[Optional[Tuple[int, int]]]] = None) -> Any:
    if size is None:
        raise ConfigError("streaming to %s needs the frame size up front" % uri)
    if urlparse(uri).netloc.startswith("@"):  # rtsp://@:8554/NAME: serve it here, every stream
        return RtspServerSink(uri, fps, size, sizes=[s or size for s in sizes] if sizes else None)
    return GstStreamSink(uri, fps, size)


def _http(uri: str, fps: float, size: Optional[Tuple[int, int]], title: str,
          sizes: Optional[Sequence[Any]] = None) -> Any:
    return HttpSink(uri, title=title, streams=len(sizes) if sizes else 1)


def _mqtt(uri: str, fps: float, size: Optional[Tuple[int, int]], title: str) -> Any:
    return MqttSink(uri)


SINKS.add("file", SinkKind(_mp4, "out.mp4"), summary="an annotated MP4 file (H.264 where an encoder exists)")
SINKS.add("http", SinkKind(_http, "http://@:8080"),
          summary="a web page: the live video (MJPEG), FPS, latency and counters")
SINKS.add("rtsp", SinkKind(_stream, "rtsp://@:8554/live"),
          summary="an RTSP server here (@; GStreamer rtsp-server), or rtsp://HOST/... pushed to a server")
SINKS.add("rtsps", SinkKind(_stream, "rtsps://host:8322/live"), summary="RTSP over TLS to a server, as rtsp://")
SINKS.add("rtp", SinkKind(_stream, "rtp://host:5000"), summary="RTP/UDP H.264, through GStreamer")
SINKS.add("mqtt", SinkKind(_mqtt, "mqtt://127.0.0.1/jetforge/events"),
          summary="the events as JSON to an MQTT broker (paho-mqtt)")
SINKS.add("display", SinkKind(lambda uri, fps, size, title: WindowSink(title), "display://0"),
          summary="a window on the screen (needs a display)")


def sink_usage() -> str:
    """The help text of the video outputs, one line per registered scheme."""
    rows = [(SINKS.get(n).example, s) for n, s in SINKS.summaries()]
    width = max(len(e) for e, _ in rows)
    return "video outputs (--output URI, repeatable):\n" + "\n".join("  %-*s  %s" % (width, e, s) for e, s in rows)


def open_video_sink(uri: Union[str, "os.PathLike[str]"], fps: float, size: Optional[Tuple[int, int]] = None,
                    title: str = "jetforge", sizes: Optional[Sequence[Optional[Tuple[int, int]]]] = None) -> Any:
    """Open a video output by URI (see the module docstring); ``sizes``: every stream's frame size, for the outputs
    that serve every stream (http, rtsp://@)."""
    text = os.fspath(uri)
    scheme = urlparse(text).scheme.lower()
    if scheme in SINKS:
        if sizes is not None:
            return SINKS.get(scheme).open(text, fps, size, title, sizes=sizes)
        return SINKS.get(scheme).open(text, fps, size, title)
    if uri_to_path(text) is None:
        raise ConfigError("video output %r: unknown scheme %s://" % (text, scheme),
                          hint="use a .mp4 path or one of %s" % ", ".join(s + "://" for s in SINKS))
    return SINKS.get("file").open(text, fps, size, title)


__all__ = ["SINKS", "SinkKind", "open_video_sink", "sink_usage"]
