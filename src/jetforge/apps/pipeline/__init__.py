"""The streaming pipeline of the apps: overlapped stages, bounded queues, batching, error policy, metrics.

>>> from jetforge.apps.pipeline import Pipeline, PipelineOptions, run_app      # doctest: +SKIP
>>> result = run_app(task, [open_source("vtest.avi")], "out/", PipelineOptions(max_frames=100))

A *task* (:class:`Task`) supplies the per-frame stages (``preprocess``, batched
``infer``, ``postprocess``, ``annotate``); :class:`Pipeline` runs them on threads
with back-pressure; :func:`run_app` runs it as an :class:`AppRun` (the one app shell of both run paths:
outputs, the one metrics.json schema, plots, the printed report) with :class:`CpuRunner` as its strategy
(``gpu_app.GpuRunner`` is the GPU path's).
"""

from jetforge.apps.pipeline.metrics import PipelineMetrics, format_metrics, plot_metrics
from jetforge.apps.pipeline.runner import Pipeline, PipelineError, PipelineOptions, PipelineResult
from jetforge.apps.pipeline.stages import FusedPreprocess, Item, SessionModel, Status, Task, draw_status
from jetforge.apps.pipeline.app_run import AppResult, AppRun, AppRunner, format_report, machine_info
from jetforge.apps.pipeline.app import CpuRunner, run_app

__all__ = ["AppResult", "AppRun", "AppRunner", "CpuRunner", "FusedPreprocess", "Item", "Pipeline", "PipelineError",
           "PipelineMetrics", "PipelineOptions", "PipelineResult", "SessionModel", "Status", "Task", "draw_status",
           "format_metrics", "format_report", "machine_info", "plot_metrics", "run_app"]
