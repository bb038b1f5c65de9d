"""``rtsp://@:8554/NAME``: GStreamer's rtsp-server in the app, watched by PyAV (FFmpeg's RTSP client) on 127.0.0.1.

PyGObject comes from Debian (``python3-gi``, for the system Python); this project's virtualenv sees it when the
system's ``dist-packages`` is appended to ``sys.path`` (appended: the venv's own packages stay first), which this
test does only where Debian's ``gi`` was built for this very Python version.  Elsewhere the test skips and says
which packages to install; the refusal without them is tested everywhere."""

import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from jetforge.apps.video.sinks import rtsp_server
from jetforge.apps.video.sinks.rtsp_server import RtspServerSink, mount_paths, parse_rtsp_bind, rtsp_launch
from jetforge.errors import ConfigError, DependencyError

SYSTEM_GI = Path("/usr/lib/python3/dist-packages")


def system_gi_for_this_python() -> bool:
    tag = "cpython-%d%d" % sys.version_info[:2]
    return any(SYSTEM_GI.glob("gi/_gi.%s-*.so" % tag))


@pytest.fixture
def gst(monkeypatch):
    try:
        return rtsp_server.load_gst_rtsp()
    except DependencyError:
        pass
    if not system_gi_for_this_python():
        pytest.skip("no PyGObject with GstRtspServer for this Python: apt-get install python3-gi "
                    "gir1.2-gst-rtsp-server-1.0 gstreamer1.0-plugins-ugly (./dev test installs them)")
    monkeypatch.setattr(sys, "path", sys.path + [str(SYSTEM_GI)])
    try:
        return rtsp_server.load_gst_rtsp()
    except DependencyError as err:
        pytest.skip(str(err))


def test_an_rtsp_client_receives_the_h264_stream(gst):
    av = pytest.importorskip("av")
    sink = RtspServerSink("rtsp://@127.0.0.1:0/live", 25.0, (160, 120))
    stop = threading.Event()

    def feed() -> None:
        i = 0
        while not stop.is_set() and i < 2000:
            sink.write(np.full((120, 160, 3), 40 + (i % 2) * 160, np.uint8))  # dark and bright frames alternate
            i += 1
            time.sleep(0.04)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        with av.open(sink.url, options={"rtsp_transport": "tcp"}, timeout=10) as client:
            stream = client.streams.video[0]
            greys = []
            for frame in client.decode(video=0):
                greys.append(float(frame.to_ndarray(format="gray").mean()))
                if len(greys) >= 20:
                    break
            codec, size = stream.codec_context.name, (frame.width, frame.height)
    finally:
        stop.set()
        feeder.join()
        sink.close()
    assert codec == "h264" and size == (160, 120)
    assert min(greys) < 80 and max(greys) > 160  # the frames pushed are the frames seen (x264 keeps flat greys)
    report = sink.report()
    assert report["clients"] >= 1 and report["pushed"] >= 20 and report["dropped"] <= report["frames"]


def test_every_stream_has_its_own_mount(gst):
    """Two streams: /live/0 dark, /live/1 bright; a client of each mount sees its own stream's frames."""
    av = pytest.importorskip("av")
    sink = RtspServerSink("rtsp://@127.0.0.1:0/live", 25.0, (160, 120), sizes=[(160, 120), (96, 64)])
    stop = threading.Event()

    def feed() -> None:
        i = 0
        while not stop.is_set() and i < 2000:
            sink.write(np.full((120, 160, 3), 30, np.uint8), 0)
            sink.write(np.full((64, 96, 3), 220, np.uint8), 1)
            i += 1
            time.sleep(0.04)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    seen = {}
    try:
        for k, url in enumerate(sink.urls):
            with av.open(url, options={"rtsp_transport": "tcp"}, timeout=10) as client:
                greys = []
                for frame in client.decode(video=0):
                    greys.append(float(frame.to_ndarray(format="gray").mean()))
                    if len(greys) >= 5:
                        break
                seen[k] = (sum(greys) / len(greys), (frame.width, frame.height))
    finally:
        stop.set()
        feeder.join()
        sink.close()
    assert sink.urls[0].endswith("/live/0") and sink.urls[1].endswith("/live/1")
    assert seen[0][1] == (160, 120) and seen[1][1] == (96, 64)  # each mount has its stream's own size
    assert seen[0][0] < 80 and seen[1][0] > 160, seen  # x264 keeps flat greys within a few levels


def test_without_gstreamer_the_refusal_names_the_packages(monkeypatch):
    def missing(name, purpose=""):
        raise DependencyError("gi is not installed")

    monkeypatch.setattr(rtsp_server, "require", missing)
    with pytest.raises(DependencyError, match="rtsp-server .gir1.2-gst-rtsp-server-1.0.*use http://@:8080"):
        RtspServerSink("rtsp://@:8554/live", 25.0, (160, 120))


def test_addresses_and_the_jetson_pipeline():
    assert parse_rtsp_bind("rtsp://@:8554/live") == ("0.0.0.0", 8554, "/live")
    assert parse_rtsp_bind("rtsp://@127.0.0.1:9000/cam/1") == ("127.0.0.1", 9000, "/cam/1")
    with pytest.raises(ConfigError, match="names no stream"):
        parse_rtsp_bind("rtsp://@:8554/")
    assert mount_paths("/live", 1) == ["/live"] and mount_paths("/live", 2) == ["/live/0", "/live/1"]
    launch = rtsp_launch(1280, 720, 30.0, jetson=True)  # NOT EXECUTED HERE: no Jetson
    assert "nvv4l2h264enc" in launch and "rtph264pay name=pay0" in launch and "appsrc name=src" in launch
    assert "width=1280,height=720,framerate=30/1" in launch
