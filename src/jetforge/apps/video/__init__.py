"""Video in and out.

Sources (:func:`open_source`, by URI: files, image folders, V4L2/CSI cameras, RTSP/HTTP
streams; registry :data:`SOURCES`) yield :class:`Frame` objects; sinks write MP4 files, show a
window, stream RTSP/RTP (:func:`open_video_sink`; registry :data:`SINKS`) and log JSON-lines
events (:class:`JsonLinesSink`).
"""

from jetforge.apps.video.sinks import (SINKS, GstStreamSink, JsonLinesSink, Mp4Sink, WindowSink, open_video_sink,
                                       sink_usage)
from jetforge.apps.video.sources import (SOURCES, FileSource, Frame, FrameDecodeError, ImageFolderSource, LiveSource,
                                         SourceOptions, SourceSpec, VideoSource, open_source, parse_source_uri,
                                         source_usage)

__all__ = ["FileSource", "Frame", "FrameDecodeError", "GstStreamSink", "ImageFolderSource", "JsonLinesSink",
           "LiveSource", "Mp4Sink", "SINKS", "SOURCES", "SourceOptions", "SourceSpec", "VideoSource", "WindowSink",
           "open_source", "open_video_sink", "parse_source_uri", "sink_usage", "source_usage"]
