"""Video sources, one module per kind, behind one URI factory (:func:`open_source`) and a registry of kinds
(:data:`SOURCES`): :mod:`.base` (the frame record, the source interface, options, the registry entry),
:mod:`.file`, :mod:`.folder`, :mod:`.live` (cameras and streams), :mod:`.capture` (their OpenCV/GStreamer
captures) and :mod:`.uri` (URIs -> kinds, the registry).
"""

from jetforge.apps.video.sources.base import (Frame, FrameDecodeError, SourceKind, SourceOptions, SourceSpec,
                                              VideoSource)
from jetforge.apps.video.sources.capture import (capture_factory, gst_csi_pipeline, gst_rtsp_pipeline, is_jetson,
                                                 opencv_has_gstreamer)
from jetforge.apps.video.sources.file import FileSource
from jetforge.apps.video.sources.folder import IMAGE_SUFFIXES, ImageFolderSource
from jetforge.apps.video.sources.live import LiveSource
from jetforge.apps.video.sources.uri import SOURCES, open_source, parse_source_uri, source_usage, uri_to_path
from jetforge.apps.video.sources.gpu.open import open_gpu_source  # registers the nvdec:// and jetson:// kinds

__all__ = ["FileSource", "Frame", "FrameDecodeError", "IMAGE_SUFFIXES", "ImageFolderSource", "LiveSource", "SOURCES",
           "SourceKind", "SourceOptions", "SourceSpec", "VideoSource", "capture_factory", "gst_csi_pipeline",
           "gst_rtsp_pipeline", "is_jetson", "open_gpu_source", "open_source", "opencv_has_gstreamer", "parse_source_uri",
           "source_usage", "uri_to_path"]
