"""``rtsp://@:8554/NAME``: an RTSP server in the app (GStreamer's rtsp-server, as jetson-inference serves), so a
headless board's video is watched with VLC, ffplay or OpenCV at ``rtsp://BOARD:8554/NAME``.

Needs PyGObject and the rtsp-server typelib (JetPack's system Python has them; elsewhere ``sudo apt install
python3-gi gir1.2-gst-rtsp-server-1.0 gstreamer1.0-plugins-ugly``; a virtualenv sees them only when made with
``--system-site-packages``).  Without them the sink refuses when it is created, naming the packages.

The media is :func:`rtsp_launch` (``appsrc`` -> H.264 -> ``rtph264pay``): ``nvv4l2h264enc`` on a Jetson
(NOT EXECUTED HERE: no Jetson), ``x264enc`` elsewhere.  Every stream of the run is served: one stream at
``/NAME``, stream ``k`` of several at ``/NAME/<k>`` (:func:`mount_paths`), each its own shared media on the one
server.  The pipeline pushes into a stream's ``appsrc`` only while a client watches it and never waits: when
``appsrc`` already holds ``max_buffers`` frames the new one is dropped and counted in ``dropped``.
"""

import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple
from urllib.parse import urlparse

import numpy as np

from jetforge.apps.video.sinks.file import fit_frame
from jetforge.apps.video.sources.capture import is_jetson
from jetforge.errors import ConfigError, DependencyError, StreamError
from jetforge.optional import require

NEEDS = ("rtsp sink needs GStreamer's rtsp-server (gir1.2-gst-rtsp-server-1.0) and PyGObject (python3-gi); "
         "install them or use http://@:8080")


def parse_rtsp_bind(uri: str) -> Tuple[str, int, str]:
    """``rtsp://@:8554/live`` -> ("0.0.0.0", 8554, "/live"); ``rtsp://@127.0.0.1:8554/x`` binds that address."""
    parsed = urlparse(uri)
    netloc = parsed.netloc
    if not netloc.startswith("@"):
        raise ConfigError("%r is not an RTSP server address (rtsp://@:PORT/NAME)" % uri)
    host, _, port_text = netloc[1:].rpartition(":")
    if not _ and not port_text:
        host, port_text = netloc[1:], ""
    try:
        port = int(port_text) if port_text else 8554
    except ValueError:
        raise ConfigError("RTSP output %r: the port must be a number" % uri, hint="e.g. rtsp://@:8554/live") from None
    name = parsed.path.rstrip("/")
    if not name or name == "/":
        raise ConfigError("RTSP output %r names no stream" % uri, hint="e.g. rtsp://@:8554/live")
    return host or "0.0.0.0", port, name


def mount_paths(name: str, streams: int) -> List[str]:
    """Where each stream is served: ``/live`` for one stream, ``/live/0``, ``/live/1``, ... for several."""
    return [name] if streams == 1 else ["%s/%d" % (name, k) for k in range(streams)]


def rtsp_launch(width: int, height: int, fps: float, jetson: bool, bitrate_kbps: int = 4000) -> str:
    """The media factory's launch line: BGR frames from ``appsrc name=src`` -> H.264 -> ``rtph264pay name=pay0``."""
    rate = max(1, int(round(fps or 30.0)))
    caps = "video/x-raw,format=BGR,width=%d,height=%d,framerate=%d/1" % (width, height, rate)
    if jetson:
        encode = ("videoconvert ! video/x-raw,format=BGRx ! nvvidconv ! video/x-raw(memory:NVMM),format=I420 ! "
                  "nvv4l2h264enc bitrate=%d insert-sps-pps=true idrinterval=30 ! h264parse" % (bitrate_kbps * 1000))
    else:
        encode = ("videoconvert ! video/x-raw,format=I420 ! x264enc tune=zerolatency speed-preset=superfast "
                  "bitrate=%d key-int-max=30 ! video/x-h264,profile=constrained-baseline ! h264parse" % bitrate_kbps)
    return ("( appsrc name=src is-live=true format=time do-timestamp=true caps=%s ! queue max-size-buffers=2 "
            "leaky=downstream ! %s ! rtph264pay name=pay0 pt=96 config-interval=1 )" % (caps, encode))


def load_gst_rtsp() -> Tuple[Any, Any, Any]:
    """(Gst, GstRtspServer, GLib) from PyGObject, or the one-line refusal :data:`NEEDS`."""
    try:
        gi = require("gi", "the RTSP server output")
        gi.require_version("Gst", "1.0")
        gi.require_version("GstRtspServer", "1.0")
        from gi.repository import GLib, Gst, GstRtspServer  # type: ignore[import-not-found]
    except (DependencyError, ImportError, ValueError):
        raise DependencyError(NEEDS, hint="sudo apt install python3-gi gir1.2-gst-rtsp-server-1.0 "
                                          "gstreamer1.0-plugins-ugly") from None
    Gst.init(None)
    return Gst, GstRtspServer, GLib


class RtspServerSink:
    """Annotated frames served over RTSP at ``rtsp://HOST:PORT/NAME`` (see the module)."""

    kind = "rtsp"

    def __init__(self, uri: str, fps: float, size: Tuple[int, int], max_buffers: int = 2,
                 sizes: Optional[Sequence[Tuple[int, int]]] = None) -> None:
        self.uri = uri
        host, port, self.name = parse_rtsp_bind(uri)
        self._gst, server_mod, glib = load_gst_rtsp()
        self.sizes = [(int(w), int(h)) for w, h in (sizes or [size])]
        self.size = self.sizes[0]
        self.fps, self.max_buffers = float(fps or 30.0), int(max_buffers)
        self.frames = self.pushed = self.dropped = self.letterboxed = self.clients = 0
        jetson = is_jetson()
        self.launches = [rtsp_launch(w, h, self.fps, jetson=jetson) for w, h in self.sizes]
        self.launch = self.launches[0]
        self.mounts = mount_paths(self.name, len(self.sizes))
        self._appsrcs: List[Any] = [None] * len(self.sizes)
        self._lock = threading.Lock()
        self._context = glib.MainContext.new()
        self._loop = glib.MainLoop.new(self._context, False)
        self._server = server_mod.RTSPServer.new()
        self._server.set_address(host)
        self._server.set_service(str(port))
        for k, (mount, launch) in enumerate(zip(self.mounts, self.launches)):
            factory = server_mod.RTSPMediaFactory.new()
            factory.set_launch(launch)
            factory.set_shared(True)
            factory.connect("media-configure", self._on_media, k)
            self._server.get_mount_points().add_factory(mount, factory)
        self._server.connect("client-connected", self._on_client)
        self._source_id = self._server.attach(self._context)
        if not self._source_id:
            raise StreamError("cannot serve RTSP on %s:%d (%s)" % (host, port, uri),
                              hint="choose another port (rtsp://@:PORT/NAME) or stop what uses it")
        self.port = int(self._server.get_bound_port())
        self._thread = threading.Thread(target=self._loop.run, name="rtsp-sink", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """Stream 0's address on this machine."""
        return self.urls[0]

    @property
    def urls(self) -> List[str]:
        """Every stream's address on this machine, stream 0 first."""
        return ["rtsp://127.0.0.1:%d%s" % (self.port, m) for m in self.mounts]

    def _on_client(self, server: Any, client: Any) -> None:
        self.clients += 1

    def _on_media(self, factory: Any, media: Any, stream: int) -> None:
        appsrc = media.get_element().get_by_name_recurse_up("src")
        media.connect("unprepared", self._on_unprepared, stream)
        with self._lock:
            self._appsrcs[stream] = appsrc

    def _on_unprepared(self, media: Any, stream: int) -> None:
        with self._lock:
            self._appsrcs[stream] = None  # the last client left: stop pushing until the next one

    def write(self, image: np.ndarray, stream: int = 0) -> None:
        """Push stream ``stream``'s frame to its watching clients, or drop it (counted) when its ``appsrc`` is
        full; never waits.  A stream this server has no mount for is ignored."""
        if not 0 <= stream < len(self.sizes):
            return
        self.frames += 1
        with self._lock:
            appsrc = self._appsrcs[stream]
        if appsrc is None:
            return  # no one watches
        size = self.sizes[stream]
        if (int(image.shape[1]), int(image.shape[0])) != size:
            image = fit_frame(image, size)
            self.letterboxed += 1
        if appsrc.get_property("current-level-buffers") >= self.max_buffers:
            self.dropped += 1
            return
        buf = self._gst.Buffer.new_wrapped(np.ascontiguousarray(image).tobytes())
        appsrc.emit("push-buffer", buf)
        self.pushed += 1

    def report(self) -> Dict[str, Any]:
        """This sink's part of ``metrics.json``."""
        return {"uri": self.uri, "kind": self.kind, "url": self.url, "urls": self.urls, "frames": self.frames,
                "pushed": self.pushed,
                "dropped": self.dropped, "clients": self.clients, "launch": self.launch}

    def close(self) -> None:
        if self._loop is None:
            return
        with self._lock:
            appsrcs, self._appsrcs = self._appsrcs, [None] * len(self.sizes)
        for appsrc in appsrcs:
            if appsrc is not None:
                appsrc.emit("end-of-stream")
        loop, self._loop = self._loop, None
        loop.quit()
        self._thread.join(2.0)
        source = self._context.find_source_by_id(self._source_id)
        if source is not None:
            source.destroy()  # the listening socket: the port is free again

    def abort(self, exc: Optional[BaseException] = None) -> None:
        self.close()

    def __enter__(self) -> "RtspServerSink":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["NEEDS", "RtspServerSink", "load_gst_rtsp", "mount_paths", "parse_rtsp_bind", "rtsp_launch"]
