"""OpenCV captures for the live sources: V4L2 cameras, Jetson CSI cameras and RTSP through GStreamer, RTSP and
HTTP through FFmpeg.

The GStreamer pipeline strings are built by plain functions (:func:`gst_csi_pipeline`,
:func:`gst_rtsp_pipeline`) so that they can be read, tested and pasted into ``gst-launch-1.0`` by hand.
"""

from pathlib import Path
from typing import List, Tuple, Union

from jetforge.apps.video.sources.base import SourceOptions, SourceSpec
from jetforge.apps.video.sources.live import Capture, CaptureFactory
from jetforge.errors import ConfigError, StreamError
from jetforge.fileio import opencv_path
from jetforge.optional import require


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


def _opencv_factory(target: Union[str, int], api: int, params: List[int], what: str, uri: str) -> CaptureFactory:
    def open_capture() -> Capture:
        cv2 = require("cv2", "video capture")
        if isinstance(target, str):
            opencv_path(target, what)  # OpenCV crashes on text that is not UTF-8: refuse it in one line
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


__all__ = ["capture_factory", "gst_csi_pipeline", "gst_rtsp_pipeline", "is_jetson", "opencv_has_gstreamer"]
