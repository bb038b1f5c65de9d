"""Video in and out: sources yield :class:`Frame` objects; sinks write MP4 files and JSON-lines events."""

from jetforge.apps.video.sink import JsonLinesSink, Mp4Sink
from jetforge.apps.video.source import FileSource, Frame, VideoSource, open_source

__all__ = ["FileSource", "Frame", "JsonLinesSink", "Mp4Sink", "VideoSource", "open_source"]
