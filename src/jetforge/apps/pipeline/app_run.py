"""One app shell for both run paths: :class:`AppRun` (outputs, metrics, report) around a runner strategy.

``jetforge app NAME`` runs a task either on the CPU pipeline (:class:`~jetforge.apps.pipeline.app.CpuRunner`:
OpenCV decode, overlapped stages, the annotated MP4 and live outputs) or on the GPU video path
(:class:`~jetforge.apps.pipeline.gpu_app.GpuRunner`: NVDEC, GPU preprocessing, a batched session, CPU encoder
processes).  What differs is only how frames become events; everything around it is here, once:

* the output files, checked before any frame is read (never over an input);
* ``events.jsonl`` (the runner writes the records, this opens and closes the file);
* the one :class:`~jetforge.apps.pipeline.metrics.PipelineMetrics` collector both runners feed, and the one
  ``metrics.json`` schema written by :func:`build_report` (the same keys on both paths; what only one path has
  sits in ``pipeline``, whose ``path`` says which ran);
* ``fps.png`` and ``latency.png``, and the one printed summary, :func:`format_report`.

Outputs are kept when the run ends early (a lost camera, a stage error, Ctrl-C or SIGTERM): the runner closes
what it wrote, and ``metrics.json`` says why the run ended (``status``).
"""

import datetime
import logging
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import jetforge
from jetforge.apps.pipeline.metrics import PipelineMetrics, format_metrics, plot_metrics
from jetforge.apps.video.sinks.file import JsonLinesSink
from jetforge.fileio import check_not_input, check_output_path, write_json_atomic
from jetforge.runtime.nvml import gpu_memory_mib

log = logging.getLogger(__name__)


@dataclass
class AppResult:
    metrics: Dict[str, Any]
    out_dir: Path
    files: Dict[str, Any]
    stream_errors: List[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.stream_errors


@dataclass
class RunEnd:
    """How a runner's run ended: ``ended_by`` ("end of stream", "max frames", "stop requested") and the streams
    that were lost or truncated."""

    ended_by: str = "end of stream"
    stream_errors: List[str] = field(default_factory=list)


class AppRunner:
    """A run path's strategy: how the task's frames become events, on which machinery.  :class:`AppRun` calls
    ``prepare`` (checks and live outputs, before any file is written), ``run`` (once), ``close`` (always) and then
    ``add_to_report`` (its ``pipeline`` block and its own top-level blocks, e.g. ``video``)."""

    path = "cpu"
    plots = False

    def video_files(self, out: Path, streams: int) -> List[Path]:
        return []

    def prepare(self, task: Any, sources: Sequence[Any], out: Path, inputs: Sequence[Any]) -> None:
        """Everything that may refuse the run before an output file is opened."""

    def metrics(self) -> PipelineMetrics:
        raise NotImplementedError

    def run(self, task: Any, sources: Sequence[Any], events: JsonLinesSink, files: Dict[str, Any]) -> RunEnd:
        raise NotImplementedError

    def close(self) -> None:
        """Close what the run wrote (kept as it is when the run failed)."""

    def stream_errors(self) -> List[str]:
        """The streams lost or truncated so far (asked when ``run`` raised)."""
        return []

    def add_to_report(self, report: Dict[str, Any], files: Dict[str, Any]) -> None:
        """metrics.json's ``pipeline`` block (this path's settings and numbers) and the path's own blocks."""
        report["pipeline"] = {"path": self.path}


class AppRun:
    """``task`` over ``sources`` on ``runner``, writing events, metrics and plots into ``out_dir`` (module doc)."""

    def __init__(self, task: Any, sources: Sequence[Any], out_dir: Any, runner: AppRunner,
                 inputs: Sequence[Any] = (), notes: Sequence[str] = ()) -> None:
        self.task, self.sources, self.runner = task, sources, runner  # a stream group stays one object
        self.out = Path(out_dir)
        self.inputs, self.notes = list(inputs), list(notes)

    def _files(self) -> Dict[str, Any]:
        out = self.out
        files: Dict[str, Any] = {"events": out / "events.jsonl", "metrics": out / "metrics.json",
                                 "video": self.runner.video_files(out, len(self.sources)),
                                 "plots": [out / "fps.png", out / "latency.png"] if self.runner.plots else []}
        inputs = [p for p in [getattr(s, "path", None) for s in self.sources] + self.inputs if p is not None]
        for target in [files["events"], files["metrics"]] + files["video"] + files["plots"]:
            check_not_input(target, inputs)
            check_output_path(target)
        return files

    def run(self) -> AppResult:
        """Run to the end (or the first error, re-raised after metrics.json is written)."""
        files = self._files()
        self.runner.prepare(self.task, self.sources, self.out, self.inputs)
        self.out.mkdir(parents=True, exist_ok=True)
        events = JsonLinesSink(files["events"])
        error: Optional[BaseException] = None
        end: Optional[RunEnd] = None
        try:
            end = self.runner.run(self.task, self.sources, events, files)
        except BaseException as err:  # keep what was written, record why it ended, then re-raise
            error = err
        finally:
            try:
                self.runner.close()
            finally:
                events.close()
        metrics = self.runner.metrics()
        if end is None:
            end = RunEnd(error.__class__.__name__ if error is not None else "", self.runner.stream_errors())
        report = build_report(self.task, self.sources, metrics, end, error, files, self.notes)
        self.runner.add_to_report(report, files)
        if files["plots"] and report["frames"] > 0:
            _plot(report, metrics, files, self.task.name)
        write_json_atomic(files["metrics"], report)
        if error is not None:
            raise error
        return AppResult(report, self.out, files, report["stream_errors"])


def build_report(task: Any, sources: Sequence[Any], metrics: PipelineMetrics, end: RunEnd,
                 error: Optional[BaseException], files: Dict[str, Any], notes: Sequence[str]) -> Dict[str, Any]:
    """``metrics.json``, both paths: how the run ended, the metrics, the model, the sources, the machine, the outputs
    (the runner adds ``pipeline`` and its own blocks)."""
    stream_errors = list(end.stream_errors)
    if error is not None:
        status = "interrupted" if isinstance(error, KeyboardInterrupt) else "stopped by an error"
    else:
        status = "finished with stream errors" if stream_errors else "finished"
    report: Dict[str, Any] = {
        "jetforge_version": jetforge.__version__,
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "task": task.name,
        "status": status,
        "ended_by": end.ended_by,
        "error": (error.one_line() if hasattr(error, "one_line") else repr(error)) if error is not None else None,
        "stream_errors": stream_errors,
    }
    report.update(metrics.to_dict())
    gpu = gpu_memory_mib()
    if gpu is not None:
        report["memory"]["gpu_mib"] = gpu
    report["model"] = task.info()
    report["results"] = task.summary()
    report["sources"] = [source_info(s) for s in sources]
    report["machine"] = machine_info()
    report["outputs"] = {"video": [str(p) for p in files["video"] if p.exists()], "events": str(files["events"]),
                         "metrics": str(files["metrics"]), "plots": []}
    report["notes"] = list(notes)
    return report


def source_info(source: Any) -> Dict[str, Any]:
    """A source's facts for metrics.json, with its file name."""
    info = source.info() if hasattr(source, "info") else {
        "uri": str(source.uri), "width": source.width, "height": source.height, "fps": source.fps}
    return dict(info, name=Path(str(source.uri)).name)


def machine_info() -> Dict[str, Any]:
    """Where the numbers were measured."""
    from jetforge.runtime.session import default_threads

    info: Dict[str, Any] = {"platform": platform.platform(), "machine": platform.machine(),
                            "python": platform.python_version(), "cpu_cores_usable": default_threads()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/device-tree/model", "rb") as f:
            info["board"] = f.read().rstrip(b"\x00").decode("ascii", "replace")
    except OSError:
        pass
    try:
        import cv2

        info["opencv"] = cv2.__version__
    except ImportError:  # pragma: no cover - a core dependency
        pass
    import numpy as np

    info["numpy"] = np.__version__
    return info


def _plot(report: Dict[str, Any], metrics: PipelineMetrics, files: Dict[str, Any], title: str) -> None:
    """``fps.png`` and ``latency.png`` (warm-up frames left out of the histogram); without matplotlib (or if it
    fails) a note instead, the numbers stay."""
    try:
        plot_metrics(report, [x * 1000.0 for x in metrics.end_to_end], files["plots"][0], files["plots"][1],
                     title=title)
        report["outputs"]["plots"] = [str(p) for p in files["plots"]]
    except Exception as err:  # matplotlib missing or broken: the run's numbers are still written
        log.warning("plots skipped: %s", err)
        report["notes"].append("plots skipped: %s" % err)


def format_report(m: Dict[str, Any], task_lines: Sequence[str] = ()) -> str:
    """The printed summary of an app run, either path."""
    machine, pipeline = m["machine"], m.get("pipeline", {})
    gpu = pipeline.get("path") == "gpu"
    lines = ["task      %s  (%s)%s" % (m["task"], m["model"].get("model", ""), ", GPU path" if gpu else "")]
    if m["model"].get("backend"):
        lines.append("backend   %s" % m["model"]["backend"])
    if pipeline.get("preprocess"):
        lines.append("preprocess %s" % pipeline["preprocess"])
    for s in m["sources"]:
        lines.append("source    %s  %dx%d @ %.2f fps%s%s" % (
            s["name"], s["width"], s["height"], s["fps"] or 0.0, "  (live)" if s.get("live") else "",
            ", %s" % s["decoder"] if gpu and s.get("decoder") else ""))
    lines.append("machine   %s, %d usable cores" % (machine.get("cpu", machine["machine"]), machine["cpu_cores_usable"]))
    lines += ["", format_metrics(m)]
    if "cores_per_30fps_stream" in pipeline:
        lines.append("CPU       %.3f cores per 30-FPS stream (process CPU time per frame x 30)"
                     % pipeline["cores_per_30fps_stream"])
    if task_lines:
        lines += [""] + list(task_lines)
    outs = m["outputs"]
    lines.append("")
    lines.append("wrote     " + ", ".join(outs["video"] + [outs["events"], outs["metrics"]] + outs["plots"]
                                          + outs.get("files", [])))
    lines += ["note      " + n for n in m.get("notes", [])]
    return "\n".join(lines)


__all__ = ["AppResult", "AppRun", "AppRunner", "RunEnd", "build_report", "format_report", "machine_info",
           "source_info"]
