"""Video in and out.

Sources (:func:`open_source`, by URI: files, image folders, V4L2/CSI cameras, RTSP/HTTP
streams) yield :class:`Frame` objects; sinks write MP4 files, show a window, stream
RTSP/RTP (:func:`open_video_sink`) and log JSON-lines events (:class:`JsonLinesSink`).
"""

from jetforge.apps.video.sinks.file import JsonLinesSink, Mp4Sink
from jetforge.apps.video.sources.base import FileSource, Frame, VideoSource
from jetforge.apps.video.sources.factory import (FrameDecodeError, ImageFolderSource, LiveSource, SourceOptions,
                                                 SourceSpec, open_source, parse_source_uri)
from jetforge.apps.video.sinks.factory import GstStreamSink, WindowSink, open_video_sink

__all__ = ["FileSource", "Frame", "FrameDecodeError", "GstStreamSink", "ImageFolderSource", "JsonLinesSink",
           "LiveSource", "Mp4Sink", "SourceOptions", "SourceSpec", "VideoSource", "WindowSink", "open_source",
           "open_video_sink", "parse_source_uri"]
