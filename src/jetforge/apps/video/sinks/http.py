"""``http://@:8080``: a small web server (stdlib, a thread per client) with the live annotated video and numbers.

Routes: ``/`` the page (:mod:`.http_page`: one tile per stream), ``/stream/<k>.mjpg`` stream ``k``'s video as MJPEG
(``multipart/x-mixed-replace``, which every browser shows in an ``<img>``; ``/stream.mjpg`` is stream 0),
``/frame/<k>.jpg`` its newest frame (``/frame.jpg``: stream 0), ``/stats.json`` the live numbers
(:class:`~jetforge.apps.video.sinks.live.LiveStats` plus this sink's own counters).  A browser keeps at most six
connections to one server and an MJPEG stream holds one, so with more than :data:`MJPEG_TILES` streams the page
pulls each tile's newest JPEG again as soon as the last one has loaded instead.  ``@`` binds every interface,
as in jetson-inference; a host binds that address only; port 0 picks a free port (``port`` says which).

Never stalls the pipeline: :meth:`HttpSink.write` hands the frame to the JPEG thread through a
:class:`~jetforge.apps.video.sinks.live.DropSlot` and returns (a frame replaced before it was encoded counts in
``dropped``; one pending frame per stream, so a busy stream never starves the others); no frame of a stream is
encoded while no one watches it.  Each client has its own thread that sends the newest
JPEG when it can: a slow client skips frames (counted in ``client_skipped``), a client that stops reading is
dropped after ``send_timeout_s``, and neither slows the pipeline or the other clients.
"""

import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Optional, Tuple
from urllib.parse import urlparse

import numpy as np

from jetforge.apps.video.sinks.http_page import MJPEG_TILES, page
from jetforge.apps.video.sinks.live import KeyedDropSlot, LiveStats
from jetforge.errors import ConfigError, StreamError
from jetforge.optional import require

BOUNDARY = "jetforgeframe"
PULL_WATCH_S = 2.0  # a stream whose frame.jpg was asked for this recently counts as watched
_ROUTE = re.compile(r"^/(stream|frame)(?:/(\d+))?\.(mjpg|jpg)$")


def parse_bind(uri: str, default_port: int = 8080) -> Tuple[str, int]:
    """``http://@:8080`` -> ("", 8080) (every interface); ``http://127.0.0.1:0`` -> ("127.0.0.1", 0)."""
    parsed = urlparse(uri)
    netloc = parsed.netloc
    if not netloc:
        raise ConfigError("HTTP output %r names no address to serve on" % uri, hint="e.g. http://@:8080")
    host, _, port_text = netloc.rpartition(":") if not netloc.endswith("]") else (netloc, "", "")
    if not host:
        host, port_text = netloc, ""
    if host == "@" or host == "0.0.0.0":
        host = ""
    host = host.strip("[]")
    try:
        port = int(port_text) if port_text else default_port
    except ValueError:
        raise ConfigError("HTTP output %r: the port must be a number" % uri, hint="e.g. http://@:8080") from None
    if not 0 <= port <= 65535:
        raise ConfigError("HTTP output %r: port %d is out of range 0-65535" % (uri, port))
    if parsed.path not in ("", "/"):
        raise ConfigError("HTTP output %r: a path is not served; the page is at /" % uri, hint="e.g. http://@:8080")
    return host, port


class _Frames:
    """The newest JPEG and its number; client threads wait on it."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.jpeg: Optional[bytes] = None
        self.seq = 0
        self.closed = False

    def publish(self, jpeg: bytes) -> None:
        with self.cond:
            self.jpeg, self.seq = jpeg, self.seq + 1
            self.cond.notify_all()

    def wait_newer(self, seq: int, timeout: float) -> Tuple[int, Optional[bytes]]:
        with self.cond:
            if self.seq <= seq and not self.closed:
                self.cond.wait(timeout)
            return self.seq, self.jpeg


class HttpSink:
    """The annotated video and live numbers on a web page (see the module)."""

    kind = "http"

    def __init__(self, uri: str, stats: Optional[LiveStats] = None, title: str = "jetforge", quality: int = 80,
                 send_timeout_s: float = 5.0, streams: int = 1) -> None:
        self._cv2 = require("cv2", "serving the video as JPEG")
        if streams < 1:
            raise ConfigError("the HTTP output needs at least one stream, got %d" % streams)
        self.uri, self.streams = uri, int(streams)
        self.stats = stats or LiveStats()
        self.title, self.quality, self.send_timeout_s = title, int(quality), float(send_timeout_s)
        self.frames = 0
        self.encoded = 0
        self.client_skipped = 0
        self.clients_served = 0
        self.watching = 0  # MJPEG clients connected now, all streams
        self.running = True
        self._slot: KeyedDropSlot[np.ndarray] = KeyedDropSlot()
        self._all = [_Frames() for _ in range(self.streams)]
        self._frames = self._all[0]
        self._watchers = [0] * self.streams  # MJPEG clients per stream
        self._pulled = [0.0] * self.streams  # when a frame.jpg of the stream was last asked for
        self._lock = threading.Lock()
        host, port = parse_bind(uri)
        try:
            self._server = ThreadingHTTPServer((host, port), _handler_for(self))
        except OSError as err:
            raise StreamError("cannot serve %s: %s" % (uri, err.strerror or err),
                              hint="choose another port (http://@:PORT) or stop what uses it") from None
        self._server.daemon_threads = True
        self.host, self.port = host or "0.0.0.0", int(self._server.server_address[1])
        self._threads = [threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                          name="http-sink", daemon=True),
                         threading.Thread(target=self._encode_loop, name="http-sink-jpeg", daemon=True)]
        for t in self._threads:
            t.start()

    @property
    def url(self) -> str:
        """Where a browser on this machine finds the page."""
        return "http://%s:%d/" % ("127.0.0.1" if self.host in ("0.0.0.0", "") else self.host, self.port)

    @property
    def dropped(self) -> int:
        return self._slot.dropped

    def write(self, image: np.ndarray, stream: int = 0) -> None:
        """Hand stream ``stream``'s frame to the JPEG thread and return at once (nothing is encoded while no one
        watches that stream); a stream number this page has no tile for is ignored."""
        if not 0 <= stream < self.streams:
            return
        self.frames += 1
        if self.wants(stream):
            self._slot.put(stream, image.copy())

    def wants(self, stream: int) -> bool:
        """Whether a frame of ``stream`` would be used now: someone watches it (an MJPEG client, or a page that
        pulled a still lately), or it has no JPEG yet (a page opening later shows a frame at once).  The GPU path
        asks before copying a frame back and drawing it, so an unwatched page costs no copies."""
        if not 0 <= stream < self.streams:
            return False
        watched = self._watchers[stream] > 0 or time.monotonic() - self._pulled[stream] < PULL_WATCH_S
        return watched or self._all[stream].jpeg is None

    def _encode_loop(self) -> None:
        params = [int(self._cv2.IMWRITE_JPEG_QUALITY), self.quality]
        while not self._slot.closed:
            taken = self._slot.take()
            if taken is None:
                continue
            stream, image = taken
            ok, buf = self._cv2.imencode(".jpg", image, params)
            if ok:
                self._all[stream].publish(buf.tobytes())
                self.encoded += 1

    def frames_of(self, stream: int) -> Optional[_Frames]:
        """Stream ``stream``'s newest JPEGs, or None for a stream this sink does not serve."""
        return self._all[stream] if 0 <= stream < self.streams else None

    def newest_jpeg(self, stream: int) -> Optional[bytes]:
        """The newest JPEG of ``stream`` for ``/frame/<k>.jpg``; asking marks the stream as watched a while."""
        self._pulled[stream] = time.monotonic()
        return self._all[stream].jpeg

    def stats_json(self) -> bytes:
        data = self.stats.snapshot()
        data["running"] = self.running
        data["sink"] = self.report()
        return json.dumps(data).encode("utf-8")

    def serve_mjpeg(self, handler: BaseHTTPRequestHandler, stream: int = 0) -> None:
        """Send ``stream``'s newest JPEG whenever there is a newer one, until the client goes or the sink closes."""
        handler.connection.settimeout(self.send_timeout_s)  # a client that stops reading is let go
        frames = self._all[stream]
        with self._lock:
            self.watching += 1
            self._watchers[stream] += 1
            self.clients_served += 1
        seq = 0
        try:
            while not frames.closed:
                newest, jpeg = frames.wait_newer(seq, 0.5)
                if jpeg is None or newest <= seq:
                    continue
                if seq:
                    with self._lock:
                        self.client_skipped += max(0, newest - seq - 1)
                seq = newest
                head = ("--%s\r\nContent-Type: image/jpeg\r\nContent-Length: %d\r\n\r\n" % (BOUNDARY, len(jpeg)))
                handler.wfile.write(head.encode("ascii") + jpeg + b"\r\n")
                handler.wfile.flush()
        except (OSError, socket.timeout):  # the client went away or stopped reading
            pass
        finally:
            with self._lock:
                self.watching -= 1
                self._watchers[stream] -= 1
                self.client_skipped += max(0, frames.seq - seq) if seq else 0

    def report(self) -> Dict[str, Any]:
        """This sink's part of ``metrics.json``."""
        return {"uri": self.uri, "kind": self.kind, "url": self.url, "streams": self.streams, "frames": self.frames,
                "encoded": self.encoded,
                "dropped": self.dropped, "client_skipped": self.client_skipped,
                "clients_served": self.clients_served}

    def close(self) -> None:
        """Stop serving: clients see the stream end; the page's numbers stay as they were."""
        if not self.running:
            return
        self.running = False
        self._slot.close()
        for frames in self._all:
            with frames.cond:
                frames.closed = True
                frames.cond.notify_all()
        self._server.shutdown()
        self._server.server_close()
        deadline = time.monotonic() + 2.0
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def abort(self, exc: Optional[BaseException] = None) -> None:
        self.close()

    def __enter__(self) -> "HttpSink":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _handler_for(sink: HttpSink) -> Any:
    class Handler(BaseHTTPRequestHandler):
        server_version = "jetforge"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
            return  # no access log on the app's terminal

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            path = self.path.split("?", 1)[0]
            route = _ROUTE.match(path)
            stream = int(route.group(2) or 0) if route else -1
            if route and (sink.frames_of(stream) is None or (route.group(1) == "stream") != (route.group(3) == "mjpg")):
                route = None  # no such stream, or /stream.jpg, /frame.mjpg
            if path == "/":
                self._send(200, "text/html; charset=utf-8", page(sink.title, sink.streams).encode("utf-8"))
            elif path == "/stats.json":
                self._send(200, "application/json", sink.stats_json())
            elif route and route.group(1) == "frame":
                jpeg = sink.newest_jpeg(stream)
                self._send(200 if jpeg is not None else 404, "image/jpeg" if jpeg is not None else "text/plain",
                           jpeg if jpeg is not None else b"no frame yet\n")
            elif route:
                self.send_response(200)
                self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=%s" % BOUNDARY)
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                sink.serve_mjpeg(self, stream)
            elif path == "/favicon.ico":
                self._send(204, "image/x-icon", b"")
            else:
                self._send(404, "text/plain", b"not found: the page is at /\n")

        def _send(self, code: int, ctype: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

    return Handler


__all__ = ["HttpSink", "MJPEG_TILES", "parse_bind"]
