"""Applications: the ``jetforge`` CLI, video sources and sinks, the pipeline and the bundled demos.

Imports ``jetforge.runtime`` and ``jetforge.targets`` only (plus numpy and OpenCV);
the CLI reaches ``compress`` and ``calibrate`` lazily, inside the commands that need them.
"""
