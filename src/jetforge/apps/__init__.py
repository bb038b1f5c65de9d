"""Applications: the video-analytics tasks, the pipeline that runs them, video sources and sinks.

Imports ``jetforge.runtime`` and ``jetforge.targets`` only (plus numpy and OpenCV).  The command line
is :mod:`jetforge.cli`; deployment to a board is :mod:`jetforge.deploy`.
"""
