"""Source URIs, GStreamer pipeline strings, image folders, live sources (reconnect, back-off, newest frame),
a real HTTP MJPEG stream served on 127.0.0.1, and sinks that cannot work here failing clearly."""

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from jetforge.apps.video import open_source, open_video_sink, parse_source_uri
from jetforge.apps.video.sinks import GstStreamSink, WindowSink, gst_output_pipeline
from jetforge.apps.video.sources import (FrameDecodeError, ImageFolderSource, LiveSource, SourceOptions,
                                         gst_csi_pipeline, gst_rtsp_pipeline, opencv_has_gstreamer)
from jetforge.errors import ConfigError, InputFileError, StreamError

FAST = SourceOptions(backoff_s=0.02, backoff_max_s=0.05, max_reconnects=2, stall_timeout_s=3.0)


def test_uri_kinds(tmp_path):
    clip = tmp_path / "a.mp4"
    cases = {
        str(clip): ("file", str(clip)), clip.as_uri(): ("file", str(clip)), str(tmp_path): ("images", str(tmp_path)),
        "v4l2:///dev/video0": ("v4l2", "/dev/video0"), "v4l2://1": ("v4l2", "1"), "0": ("v4l2", "0"),
        "csi://0": ("csi", "0"), "csi://": ("csi", "0"),
        "rtsp://cam.local:8554/live": ("rtsp", "rtsp://cam.local:8554/live"),
        "https://x.org/v.m3u8": ("http", "https://x.org/v.m3u8"),
    }
    for uri, (kind, location) in cases.items():
        spec = parse_source_uri(uri)
        assert (spec.kind, spec.location) == (kind, location), uri
    assert parse_source_uri(2).kind == "v4l2" and parse_source_uri("rtsp://h/x").live
    assert not parse_source_uri(str(clip)).live
    for bad, message in (("ftp://x/y", "unknown scheme ftp://"), ("csi://left", "sensor id must be a number"),
                         ("rtsp:///x", "names no host"), ("", "empty video source")):
        with pytest.raises(ConfigError, match=message):
            parse_source_uri(bad)


def test_gstreamer_pipeline_strings():
    assert gst_csi_pipeline(1, 1920, 1080, 30, flip=2) == (
        "nvarguscamerasrc sensor-id=1 ! video/x-raw(memory:NVMM), width=(int)1920, height=(int)1080, "
        "framerate=(fraction)30/1, format=(string)NV12 ! nvvidconv flip-method=2 ! video/x-raw, format=(string)BGRx ! "
        "videoconvert ! video/x-raw, format=(string)BGR ! appsink drop=true max-buffers=1 sync=false")
    assert "framerate=(fraction)29970/1000" in gst_csi_pipeline(fps=29.97)
    assert gst_rtsp_pipeline("rtsp://cam/live", 100, "h265", jetson=True) == (
        "rtspsrc location=rtsp://cam/live latency=100 ! rtph265depay ! h265parse ! nvv4l2decoder ! nvvidconv ! "
        "video/x-raw, format=(string)BGRx ! videoconvert ! video/x-raw, format=(string)BGR ! "
        "appsink drop=true max-buffers=1 sync=false")
    assert " avdec_h264 ! videoconvert ! " in gst_rtsp_pipeline("rtsp://cam/live", jetson=False)
    out = gst_output_pipeline("rtsp://127.0.0.1:8554/live", 2000, jetson=True)
    assert out.startswith("appsrc is-live=true") and "nvv4l2h264enc bitrate=2000000" in out
    assert out.endswith("rtspclientsink location=rtsp://127.0.0.1:8554/live protocols=tcp")
    rtp = gst_output_pipeline("rtp://10.0.0.2:5000", jetson=False)
    assert "x264enc tune=zerolatency" in rtp and rtp.endswith("udpsink host=10.0.0.2 port=5000 sync=false")
    with pytest.raises(ConfigError):
        gst_rtsp_pipeline("rtsp://x", codec="vp9")
    with pytest.raises(ConfigError):
        gst_csi_pipeline(flip=9)


def test_image_folder_in_name_order_with_a_bad_image(tmp_path, bikes_frames):
    import cv2

    for i, index in enumerate((5, 30, 75)):
        cv2.imwrite(str(tmp_path / ("img_%02d.png" % (i * 2))), bikes_frames[index])
    (tmp_path / "img_01.png").write_bytes(b"not a png")
    (tmp_path / "notes.txt").write_text("ignored")
    with open_source(tmp_path, fps=5) as source:
        assert isinstance(source, ImageFolderSource) and source.frame_count == 4
        assert (source.width, source.height) == (640, 272)
        first = source.read()
        with pytest.raises(FrameDecodeError, match="img_01.png .frame 1. cannot be decoded"):
            source.read()
        rest = [source.read(), source.read()]
        assert source.read() is None
    assert [f.index for f in [first] + rest] == [0, 2, 3] and rest[0].timestamp == pytest.approx(0.4)
    assert np.array_equal(first.image, bikes_frames[5])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputFileError, match="holds no images"):
        open_source(empty)


def test_image_folder_whose_first_image_is_unreadable_is_read_like_any_other(tmp_path, bikes_frames):
    """Unreadable images are skipped wherever they are: the first one no longer refuses the whole folder."""
    import cv2

    (tmp_path / "a_broken.jpg").write_bytes(b"\xff\xd8 truncated jpeg")
    cv2.imwrite(str(tmp_path / "b.png"), cv2.resize(bikes_frames[5], (320, 136)))
    (tmp_path / "c_broken.png").write_bytes(b"")
    cv2.imwrite(str(tmp_path / "d.png"), bikes_frames[30])
    with open_source(tmp_path) as source:
        assert (source.frame_count, source.width, source.height) == (4, 320, 136)  # the first readable image
        outcomes = []
        while True:
            try:
                frame = source.read()
            except FrameDecodeError as err:
                outcomes.append(("skipped", err.index, err.name))
                continue
            if frame is None:
                break
            outcomes.append(("frame", frame.index, frame.name, frame.size))
        info = source.info()
    assert outcomes == [("skipped", 0, "a_broken.jpg"), ("frame", 1, "b.png", (320, 136)),
                        ("skipped", 2, "c_broken.png"), ("frame", 3, "d.png", (640, 272))]
    assert info["skipped"] == ["a_broken.jpg", "c_broken.png"] and info["images"] == 4


def test_image_folder_with_no_readable_image_is_refused_at_open(tmp_path):
    (tmp_path / "a.jpg").write_bytes(b"not a jpeg")
    (tmp_path / "b.png").write_text("not a png either")
    with pytest.raises(StreamError, match=r"none of the 2 images in .* can be decoded \(a.jpg, b.png") as err:
        open_source(tmp_path)
    assert "\n" not in err.value.one_line()


def test_a_file_given_as_image_folder_is_named_as_a_file(tmp_path):
    image = tmp_path / "one.png"
    image.write_bytes(b"x")
    with pytest.raises(InputFileError, match="image folder .*one.png is a file, not a folder"):
        ImageFolderSource(image)


class FakeCamera:
    """Stands in for a camera driver: delivers ``frames`` frames every ``period`` s, then vanishes."""

    def __init__(self, frames, period=0.005, start=0):
        self.left, self.period, self.n = frames, period, start

    def read(self):
        time.sleep(self.period)
        if self.left <= 0:
            return False, None
        self.left -= 1
        self.n += 1
        return True, np.full((24, 32, 3), self.n % 256, np.uint8)

    def release(self):
        pass


def test_live_source_drops_stale_frames_and_reports_a_lost_camera():
    opened = []

    def factory():
        if opened:
            raise StreamError("no such device")  # unplugged: every reconnect fails
        opened.append(FakeCamera(frames=60))
        return opened[-1]

    source = LiveSource("fake://cam", factory, FAST, what="camera")
    got = []
    with pytest.raises(StreamError) as err:
        while True:
            frame = source.read()
            got.append(frame)
            time.sleep(0.03)  # a consumer six times slower than the camera
    source.close()
    message = err.value.one_line()
    assert message.startswith("lost camera fake://cam: no such device; 2 attempts over")
    assert "--max-reconnects" in message
    indices = [f.index for f in got]
    assert indices == sorted(indices) and len(set(indices)) == len(indices)
    assert source.dropped > 20 and len(got) + source.dropped == 60  # each frame either delivered or counted
    assert max(np.diff(indices)) > 1  # newest-frame policy: stale frames were skipped


def test_live_source_reconnects_with_back_off():
    cams = [FakeCamera(frames=5), None, FakeCamera(frames=5, start=100)]

    def factory():
        cam = cams.pop(0)
        if cam is None:
            raise StreamError("busy")
        return cam

    opts = SourceOptions(backoff_s=0.02, backoff_max_s=0.05, max_reconnects=3, buffer=16, stall_timeout_s=3.0)
    source = LiveSource("fake://cam", factory, opts, what="camera")
    values = []
    with pytest.raises(StreamError, match="lost camera"):
        while True:
            values.append(int(source.read().image[0, 0, 0]))
    source.close()
    assert values == [1, 2, 3, 4, 5, 101, 102, 103, 104, 105]  # buffer=16: nothing dropped
    assert source.reconnects == 1 and source.disconnects == 2 and source.dropped == 0
    assert [opts.backoff(i) for i in (1, 2, 3)] == [0.02, 0.04, 0.05]


def test_unreachable_stream_fails_at_open_with_one_line():
    t0 = time.perf_counter()
    with pytest.raises(StreamError) as err:
        open_source("rtsp://127.0.0.1:9/none", max_reconnects=1, backoff_s=0.05, open_timeout_s=2.0)
    assert time.perf_counter() - t0 < 20
    text = err.value.one_line()
    assert text.startswith("cannot open RTSP stream rtsp://127.0.0.1:9/none: OpenCV could not open") and "\n" not in text
    assert "2 attempts" in text


class _Mjpeg(BaseHTTPRequestHandler):
    frames = 12

    def log_message(self, *args):
        pass

    def do_GET(self):
        import cv2

        self.send_response(200)
        self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
        self.end_headers()
        try:
            for i in range(self.frames):
                ok, buf = cv2.imencode(".jpg", np.full((48, 64, 3), 20 * i, np.uint8))
                self.wfile.write(b"--frame\r\nContent-Type: image/jpeg\r\nContent-Length: %d\r\n\r\n" % len(buf)
                                 + buf.tobytes() + b"\r\n")
                self.wfile.flush()
                time.sleep(0.02)
        except OSError:
            pass


def test_http_mjpeg_stream_then_the_server_goes_away():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Mjpeg)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = "http://127.0.0.1:%d/video.mjpg" % server.server_address[1]
    try:
        source = open_source(url, buffer=64, max_reconnects=1, backoff_s=0.3, open_timeout_s=3.0,
                             stall_timeout_s=5.0)
    except BaseException:
        server.shutdown()
        raise
    assert source.live and (source.width, source.height) == (64, 48)
    server.shutdown()  # the camera disappears mid-stream: its connection ends, reconnecting is refused
    server.server_close()
    frames = []
    with pytest.raises(StreamError, match="lost HTTP stream %s" % url):
        while True:
            frames.append(source.read())
    source.close()
    assert 3 <= len(frames) <= 12
    assert [f.index for f in frames] == list(range(len(frames)))


def test_truncated_file_is_reported(tmp_path):
    from jetforge.assets import asset_path

    clip = tmp_path / "vtest_cut.avi"
    data = asset_path("opencv_samples", "vtest.avi").read_bytes()
    clip.write_bytes(data[: len(data) // 12])
    with open_source(clip) as source:
        n = sum(1 for _ in source)
    assert 20 < n < 795
    assert source.truncated == ("video vtest_cut.avi ended after %d of the 795 frames its header announces (the file "
                                "is truncated or damaged)" % n)


def test_cameras_that_cannot_exist_here(tmp_path):
    with pytest.raises(StreamError, match="camera /dev/video97 does not exist"):
        open_source("v4l2:///dev/video97")
    if not opencv_has_gstreamer():
        with pytest.raises(StreamError, match="csi://0 needs OpenCV built with GStreamer"):
            open_source("csi://0")


def test_sinks_that_cannot_work_here_fail_when_created(tmp_path, monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    with pytest.raises(StreamError, match="no display"):
        WindowSink()
    with pytest.raises(StreamError, match="no display"):
        open_video_sink("display://0", 10)
    monkeypatch.setenv("DISPLAY", ":99")
    from jetforge.apps.video.sinks import opencv_has_gui

    if not opencv_has_gui():
        with pytest.raises(StreamError, match="built without a GUI"):
            WindowSink()
    if not opencv_has_gstreamer():
        with pytest.raises(StreamError, match="has no GStreamer"):
            GstStreamSink("rtsp://127.0.0.1:8554/live", 10, (64, 48))
    with pytest.raises(ConfigError, match="unknown scheme"):
        open_video_sink("ftp://x/y.mp4", 10)
    with pytest.raises(ConfigError, match="must end in .mp4"):
        open_video_sink(tmp_path / "x.avi", 10)
    assert not list(tmp_path.iterdir())
