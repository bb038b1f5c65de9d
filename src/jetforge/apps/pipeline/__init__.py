"""The streaming pipeline of the apps: overlapped stages, bounded queues, batching, error policy, metrics.

>>> from jetforge.apps.pipeline import Pipeline, PipelineOptions, run_app      # doctest: +SKIP
>>> result = run_app(task, [open_source("vtest.avi")], "out/", PipelineOptions(max_frames=100))

A *task* (:class:`Task`) supplies the per-frame stages (``preprocess``, batched
``infer``, ``postprocess``, ``annotate``); :class:`Pipeline` runs them on threads
with back-pressure; :func:`run_app` adds the sinks (MP4, window, RTSP, JSON-lines
events) and writes metrics.json and the plots.
"""

from jetforge.apps.pipeline.metrics import PipelineMetrics, format_metrics, plot_metrics
from jetforge.apps.pipeline.runner import Pipeline, PipelineError, PipelineOptions, PipelineResult
from jetforge.apps.pipeline.stages import FusedPreprocess, Item, SessionModel, Status, Task, draw_status
from jetforge.apps.pipeline.app import AppResult, format_report, machine_info, run_app

__all__ = ["AppResult", "FusedPreprocess", "Item", "Pipeline", "PipelineError", "PipelineMetrics", "PipelineOptions",
           "PipelineResult", "SessionModel", "Status", "Task", "draw_status", "format_metrics", "format_report",
           "machine_info", "plot_metrics", "run_app"]
