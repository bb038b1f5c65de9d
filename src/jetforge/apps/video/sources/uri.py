"""Every kind of video source behind one URI factory, :func:`open_source`, and their registry :data:`SOURCES`.

==========================  =========================================================================
URI                         source
==========================  =========================================================================
``clip.mp4``, ``file://…``  a video file (OpenCV/FFmpeg), :class:`~jetforge.apps.video.sources.file.FileSource`
a folder, ``file://dir/``   the images in it, in name order (:class:`~.folder.ImageFolderSource`)
``v4l2:///dev/video0``,     a V4L2 camera (USB webcam) by device path or index
``0``, ``1``
``csi://0``                 a MIPI CSI camera on a Jetson through GStreamer's ``nvarguscamerasrc``
``rtsp://…``, ``rtsps://…`` an RTSP stream (GStreamer with NVDEC on a Jetson, FFmpeg elsewhere)
``http://…``, ``https://…`` an HTTP stream (MJPEG, HLS, a plain file over HTTP) through FFmpeg
==========================  =========================================================================

Files and folders are read frame by frame and never drop a frame; cameras and streams are live
(:mod:`.live`).  Adding a kind of source: a :class:`~.base.VideoSource` subclass in its own module and one
``SOURCES.add(...)`` with a :class:`~.base.SourceKind` (its URI schemes, how the location is read from the
URI, how it is opened); ``open_source`` and ``--help`` then know it.
"""

import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional, Union
from urllib.parse import ParseResult, unquote, urlparse
from urllib.request import url2pathname

from jetforge.apps.video.sources.base import SourceKind, SourceOptions, SourceSpec, VideoSource
from jetforge.apps.video.sources.capture import capture_factory
from jetforge.apps.video.sources.file import FileSource
from jetforge.apps.video.sources.folder import ImageFolderSource
from jetforge.apps.video.sources.live import LiveSource
from jetforge.errors import ConfigError, InputFileError, UnknownNameError
from jetforge.registry import Registry

# kind name -> SourceKind; "file" and "images" are named by paths (and file://), the others by their schemes.
SOURCES: Registry[SourceKind] = Registry("video source kind")


def uri_to_path(uri: str) -> Optional[Path]:
    """``file:///x/y.mp4`` or a plain path -> Path; None for other schemes (camera, rtsp, ...)."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ConfigError("file URI %r names host %r; only local files are supported" % (uri, parsed.netloc))
        return Path(url2pathname(unquote(parsed.path)))
    if parsed.scheme and len(parsed.scheme) > 1:  # a one-letter scheme is a Windows drive letter
        return None
    return Path(uri)


def _path(parsed: ParseResult, text: str) -> str:
    path = uri_to_path(text)
    return str(path)


def _v4l2_location(parsed: ParseResult, text: str) -> str:
    location = parsed.netloc + parsed.path  # v4l2:///dev/video0 -> /dev/video0, v4l2://0 -> 0
    if not location:
        raise ConfigError("camera URI %r names no device" % text, hint="e.g. v4l2:///dev/video0")
    if location.isdigit() and not location.isascii():  # "v4l2:²": isdigit() but int() fails when opening
        raise ConfigError("camera URI %r: a camera index is written in the digits 0-9" % text, hint="e.g. v4l2://0")
    return location


def _csi_sensor(parsed: ParseResult, text: str) -> str:
    sensor = (parsed.netloc + parsed.path).strip("/") or "0"
    if not (sensor.isascii() and sensor.isdigit()):
        raise ConfigError("CSI camera URI %r: the sensor id must be a number" % text, hint="e.g. csi://0")
    return sensor


def _rtsp_url(parsed: ParseResult, text: str) -> str:
    if not parsed.netloc:
        raise ConfigError("RTSP URI %r names no host" % text, hint="e.g. rtsp://192.168.1.10:8554/stream")
    return text


def _http_url(parsed: ParseResult, text: str) -> str:
    if not parsed.netloc:
        raise ConfigError("HTTP URI %r names no host" % text)
    return text


def _open_live(spec: SourceSpec, options: SourceOptions) -> VideoSource:
    factory, what = capture_factory(spec, options)
    return LiveSource(spec.uri, factory, options, what=what)


SOURCES.add("file", SourceKind((), _path, lambda spec, o: FileSource(spec.location, loop=o.loop),
                               "clip.mp4 | file:///data/clip.mp4"), summary="a video file")
SOURCES.add("images", SourceKind((), _path, lambda spec, o: ImageFolderSource(spec.location, fps=o.fps), "frames/"),
            summary="a folder of images, in name order (any sizes; unreadable ones skipped)")
SOURCES.add("v4l2", SourceKind(("v4l2",), _v4l2_location, _open_live, "v4l2:///dev/video0 | 0", live=True),
            summary="a V4L2 (USB) camera, by device or index")
SOURCES.add("csi", SourceKind(("csi",), _csi_sensor, _open_live, "csi://0", live=True),
            summary="a Jetson CSI camera (GStreamer nvarguscamerasrc)")
SOURCES.add("rtsp", SourceKind(("rtsp", "rtsps"), _rtsp_url, _open_live, "rtsp://host:8554/stream", live=True),
            summary="an RTSP stream (reconnects with back-off)")
SOURCES.add("http", SourceKind(("http", "https"), _http_url, _open_live, "http://host:8080/video.mjpg", live=True),
            summary="an HTTP stream (MJPEG, HLS, ...)")


def source_usage() -> str:
    """The ``--source`` help text, one line per registered kind."""
    rows = [(SOURCES.get(n).example, s) for n, s in SOURCES.summaries()]
    width = max(len(e) for e, _ in rows)
    return "video sources (--source URI):\n" + "\n".join("  %-*s  %s" % (width, e, s) for e, s in rows)


def parse_source_uri(uri: Union[str, "os.PathLike[str]", int]) -> SourceSpec:
    """Classify a source URI without opening it; an unknown scheme is a ConfigError listing the known ones."""
    if isinstance(uri, bool):
        raise ConfigError("video source must be a URI, path or camera index, got %r" % (uri,))
    if isinstance(uri, int):
        return SourceSpec("v4l2", str(uri), str(uri), live=True)
    text = os.fspath(uri)
    if not text.strip():
        raise ConfigError("empty video source", hint="give a file, folder, camera index or stream URL")
    if text.isascii() and text.isdigit():  # "²".isdigit() is True too, and int("²") fails
        return SourceSpec("v4l2", text, text, live=True)
    try:
        parsed = urlparse(text)
    except ValueError as err:  # "rtsp://[::1" (an unclosed IPv6 bracket)
        raise ConfigError("video source %r is not a valid URI: %s" % (text, err),
                          hint="check the brackets around an IPv6 host, e.g. rtsp://[::1]:8554/stream") from None
    scheme = parsed.scheme.lower()
    for name in SOURCES:
        kind = SOURCES.get(name)
        if scheme and scheme in kind.schemes:
            return SourceSpec(name, kind.locate(parsed, text), text, live=kind.live)
    path = uri_to_path(text)
    if path is None:
        schemes = sorted({s + "://" for n in SOURCES for s in SOURCES.get(n).schemes})
        raise ConfigError("video source %r: unknown scheme %s://" % (text, scheme),
                          hint="use a file path, file://, a folder, or one of %s" % ", ".join(schemes))
    try:
        is_folder = path.is_dir()
    except OSError as err:  # a name longer than the file system allows (ENAMETOOLONG), ...
        raise InputFileError("video source %r cannot be a file or folder: %s" % (text[:80], err.strerror),
                             hint="check the path given to --source") from None
    return SourceSpec("images" if is_folder else "file", str(path), text)


def open_source(uri: Union[str, "os.PathLike[str]", int], options: Optional[SourceOptions] = None,
                **overrides: Any) -> VideoSource:
    """Open a video source of any kind by URI (see the module docstring); keyword overrides set options.

    >>> with open_source("vtest.avi") as src:          # doctest: +SKIP
    ...     for frame in src: ...
    """
    options = options or SourceOptions()
    if overrides:
        unknown = [k for k in overrides if k not in SourceOptions.__dataclass_fields__]
        if unknown:
            raise UnknownNameError("source option", unknown[0], list(SourceOptions.__dataclass_fields__))
        options = replace(options, **overrides)
    spec = parse_source_uri(uri)
    if options.loop and spec.kind != "file":
        raise ConfigError("--loop plays video files again; %s is a %s source" % (spec.uri, spec.kind),
                          hint="drop --loop, or give a video file")
    return SOURCES.get(spec.kind).open(spec, options)


__all__ = ["SOURCES", "open_source", "parse_source_uri", "source_usage", "uri_to_path"]
