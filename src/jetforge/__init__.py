"""jetforge: compress, calibrate, build and run vision models on NVIDIA Jetson GPUs and DLA cores.

The import namespace is assembled from the repository's top-level folders:
``jetforge.targets`` (device profiles), ``jetforge.runtime`` (sessions, preprocessing,
engine building), ``jetforge.calibrate`` (INT8), ``jetforge.compress`` (pruning,
distillation, QAT, export), ``jetforge.apps`` (tasks, video pipeline, video I/O),
``jetforge.deploy`` (bundles, remote deployment) and ``jetforge.cli`` (the command line).
This root package holds only what all of them share: the version, the error
hierarchy, the YAML configuration loader, the lazy import of optional packages, the
registry type, atomic file writing, progress bars, text tables and the asset store.
It imports nothing heavy so that ``import jetforge`` works on a bare Jetson.
"""

__version__ = "0.1.0"

from jetforge.errors import JetforgeError  # noqa: E402  (re-export for convenience)

__all__ = ["__version__", "JetforgeError"]
