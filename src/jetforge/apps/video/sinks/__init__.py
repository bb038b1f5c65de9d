"""Video outputs, one module per kind, behind one URI factory (:func:`open_video_sink`) and a registry of
schemes (:data:`SINKS`): :mod:`.file` (MP4 and JSON-lines files, written atomically), :mod:`.window`,
:mod:`.stream` (RTSP/RTP through GStreamer) and :mod:`.uri`.
"""

from jetforge.apps.video.sinks.file import JsonLinesSink, Mp4Sink, fit_frame
from jetforge.apps.video.sinks.stream import GstStreamSink, gst_output_pipeline
from jetforge.apps.video.sinks.uri import SINKS, SinkKind, open_video_sink, sink_usage
from jetforge.apps.video.sinks.window import WindowSink, has_display, opencv_has_gui

__all__ = ["GstStreamSink", "JsonLinesSink", "Mp4Sink", "SINKS", "SinkKind", "WindowSink", "fit_frame",
           "gst_output_pipeline", "has_display", "open_video_sink", "opencv_has_gui", "sink_usage"]
