"""A live source that keeps coming back only to stall again ends the run within its reconnect budget (issue 25).

Found with a real HTTP MJPEG server that stalls after a few frames: every reconnect opened, so the budget of
``max_reconnects`` attempts was refilled each time and the app ran on for 300 s and more, logging "reconnect
attempt 1/5" over and over.  Now a reconnect counts against the budget until its connection has lasted
``stall_timeout_s``; one that lasted starts a new budget.
"""

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from jetforge.apps.video import open_source
from jetforge.apps.video.sources import LiveSource, SourceOptions
from jetforge.errors import StreamError

from tests.apps.test_sources import FakeCamera


def drain(source):
    frames = []
    with pytest.raises(StreamError) as err:
        while True:
            frames.append(source.read())
    source.close()
    return frames, err.value.one_line()


def test_a_camera_that_flaps_spends_the_budget():
    opened = []

    def factory():
        opened.append(FakeCamera(frames=3))  # opens every time, delivers 3 frames, then stops
        return opened[-1]

    opts = SourceOptions(backoff_s=0.01, backoff_max_s=0.02, max_reconnects=3, buffer=64, stall_timeout_s=3.0)
    frames, message = drain(LiveSource("fake://cam", factory, opts, what="camera"))
    assert "stopped again within 3 s of each of its last 3 reconnects" in message and "--max-reconnects" in message
    assert len(opened) == 4 and len(frames) == 12  # the first connection and three reconnects, 3 frames each


def test_a_connection_that_lasted_starts_a_new_budget():
    calls = []

    def factory():
        calls.append(1)
        if len(calls) > 5:
            raise StreamError("gone")
        return FakeCamera(frames=40, period=0.01)  # lasts 0.4 s, longer than the stall timeout below

    opts = SourceOptions(backoff_s=0.01, backoff_max_s=0.02, max_reconnects=2, buffer=256, stall_timeout_s=0.25)
    source = LiveSource("fake://cam", factory, opts, what="camera")
    frames, message = drain(source)
    assert source.reconnects == 4  # more than max_reconnects: each lasting connection refilled the budget
    assert message.startswith("lost camera fake://cam: gone; 2 attempts") and len(frames) == 200


class _StallingMjpeg(BaseHTTPRequestHandler):
    """Five frames per connection, then silence with the connection held open (a hung camera server)."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        import cv2

        self.send_response(200)
        self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
        self.end_headers()
        try:
            for i in range(5):
                ok, buf = cv2.imencode(".jpg", np.full((48, 64, 3), 40 * i, np.uint8))
                self.wfile.write(b"--frame\r\nContent-Type: image/jpeg\r\nContent-Length: %d\r\n\r\n" % len(buf)
                                 + buf.tobytes() + b"\r\n")
                self.wfile.flush()
                time.sleep(0.02)
            time.sleep(60)
        except OSError:
            pass


@pytest.fixture
def stalling_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StallingMjpeg)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield "http://127.0.0.1:%d/video.mjpg" % server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.mark.slow
def test_a_stalling_http_stream_ends_within_its_budget(stalling_server):
    t0 = time.perf_counter()
    source = open_source(stalling_server, buffer=64, max_reconnects=2, backoff_s=0.1, open_timeout_s=3.0,
                         stall_timeout_s=3.0)
    frames, message = drain(source)
    assert "stopped again within 3 s of each of its last 2 reconnects" in message
    assert source.reconnects == 2 and 3 <= len(frames) <= 15
    assert time.perf_counter() - t0 < 30  # three stalls of about 1 s (the read timeout) and the back-off


@pytest.mark.slow
def test_the_app_on_a_stalling_stream_exits_1_with_its_outputs_closed(stalling_server, tmp_path):
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "jetforge.cli.main", "app", "classify", "--source", stalling_server, "--out",
            str(out), "--max-reconnects", "2", "--stall-timeout", "3", "--no-plots", "-q"]
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "stopped again within 3 s" in proc.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["frames"] > 0 and sorted(p.name for p in out.iterdir() if ".part" in p.name) == []
