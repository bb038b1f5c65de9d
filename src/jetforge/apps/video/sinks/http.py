"""``http://@:8080``: a small web server (stdlib, a thread per client) with the live annotated video and numbers.

Routes: ``/`` the page (:mod:`.http_page`), ``/stream.mjpg`` the video as MJPEG (``multipart/x-mixed-replace``,
which every browser shows in an ``<img>``), ``/frame.jpg`` the newest frame, ``/stats.json`` the live numbers
(:class:`~jetforge.apps.video.sinks.live.LiveStats` plus this sink's own counters).  ``@`` binds every interface,
as in jetson-inference; a host binds that address only; port 0 picks a free port (``port`` says which).

Never stalls the pipeline: :meth:`HttpSink.write` hands the frame to the JPEG thread through a
:class:`~jetforge.apps.video.sinks.live.DropSlot` and returns (a frame replaced before it was encoded counts in
``dropped``); no frame is encoded while no one watches.  Each client has its own thread that sends the newest
JPEG when it can: a slow client skips frames (counted in ``client_skipped``), a client that stops reading is
dropped after ``send_timeout_s``, and neither slows the pipeline or the other clients.
"""

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Optional, Tuple
from urllib.parse import urlparse

import numpy as np

from jetforge.apps.video.sinks.http_page import PAGE
from jetforge.apps.video.sinks.live import DropSlot, LiveStats
from jetforge.errors import ConfigError, StreamError
from jetforge.optional import require

BOUNDARY = "jetforgeframe"


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
                 send_timeout_s: float = 5.0) -> None:
        self._cv2 = require("cv2", "serving the video as JPEG")
        self.uri = uri
        self.stats = stats or LiveStats()
        self.title, self.quality, self.send_timeout_s = title, int(quality), float(send_timeout_s)
        self.frames = 0
        self.encoded = 0
        self.client_skipped = 0
        self.clients_served = 0
        self.watching = 0  # MJPEG clients connected now
        self.running = True
        self._slot: DropSlot[np.ndarray] = DropSlot()
        self._frames = _Frames()
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

    def write(self, image: np.ndarray) -> None:
        """Hand a frame to the JPEG thread and return at once (nothing is encoded while no one watches)."""
        self.frames += 1
        if self.watching > 0 or self._frames.jpeg is None:
            self._slot.put(image.copy())

    def _encode_loop(self) -> None:
        params = [int(self._cv2.IMWRITE_JPEG_QUALITY), self.quality]
        while not self._slot.closed:
            image = self._slot.take()
            if image is None:
                continue
            ok, buf = self._cv2.imencode(".jpg", image, params)
            if ok:
                self._frames.publish(buf.tobytes())
                self.encoded += 1

    def stats_json(self) -> bytes:
        data = self.stats.snapshot()
        data["running"] = self.running
        data["sink"] = self.report()
        return json.dumps(data).encode("utf-8")

    def serve_mjpeg(self, handler: BaseHTTPRequestHandler) -> None:
        """Send the newest JPEG whenever there is a newer one, until the client goes or the sink closes."""
        handler.connection.settimeout(self.send_timeout_s)  # a client that stops reading is let go
        with self._lock:
            self.watching += 1
            self.clients_served += 1
        seq = 0
        try:
            while not self._frames.closed:
                newest, jpeg = self._frames.wait_newer(seq, 0.5)
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
                self.client_skipped += max(0, self._frames.seq - seq) if seq else 0

    def report(self) -> Dict[str, Any]:
        """This sink's part of ``metrics.json``."""
        return {"uri": self.uri, "kind": self.kind, "url": self.url, "frames": self.frames, "encoded": self.encoded,
                "dropped": self.dropped, "client_skipped": self.client_skipped,
                "clients_served": self.clients_served}

    def close(self) -> None:
        """Stop serving: clients see the stream end; the page's numbers stay as they were."""
        if not self.running:
            return
        self.running = False
        self._slot.close()
        with self._frames.cond:
            self._frames.closed = True
            self._frames.cond.notify_all()
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
            if path == "/":
                self._send(200, "text/html; charset=utf-8", (PAGE % {"title": sink.title}).encode("utf-8"))
            elif path == "/stats.json":
                self._send(200, "application/json", sink.stats_json())
            elif path == "/frame.jpg" and sink._frames.jpeg is not None:
                self._send(200, "image/jpeg", sink._frames.jpeg)
            elif path == "/stream.mjpg":
                self.send_response(200)
                self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=%s" % BOUNDARY)
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                sink.serve_mjpeg(self)
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


__all__ = ["HttpSink", "parse_bind"]
