"""Video outputs: :mod:`.file` holds the sinks written atomically (an MP4 file, a JSON-lines event log);
:mod:`.factory` holds the window and GStreamer stream sinks and :func:`open_video_sink`, the one factory over
URIs.  ``jetforge.apps.video`` re-exports the public names."""
