"""What the GPU path's per-frame bookkeeping costs the process, measured on a CPU: a model that costs nothing.

Why: on the H100 (``results/nvidia-h100_2026-12-07_gpu-path-run2.txt``) the app's default path reached 0.62x of the
bound for MobileNetV2 at 16 streams and the same layout without recording its stage times 0.86x: every microsecond of
Python on the finishing thread is a microsecond the launch thread may wait for the GIL.  This runs
:func:`~jetforge.apps.pipeline.streams.run_streams` with in-memory frames, one feeder thread (the app's layout from 2
streams on), a no-op model and no output, three ways, side by side and interleaved, each repeated:

* ``none`` - no recording at all (the floor: batcher, threads, the runner's own clocks);
* ``per-frame`` - the app's TaskOps and sink recording as they were until 2026-12-07: every frame's stage times
  recorded one call each (``PipelineMetrics.add_stage``, a CPU-clock read per frame and stage, ``add_done`` per
  frame), kept here as the reference;
* ``batched`` - the app's recording now: :class:`~jetforge.apps.pipeline.gpu_app.TaskOps` and
  :class:`~jetforge.apps.pipeline.gpu_app.SinkTiming` (a batch's frames in one call per step).

Reported: the process's CPU microseconds per frame (getrusage; every thread), FPS, median [min-max] over ``--reps``.
Absolute numbers belong to this machine and its load; the ratios are the point.  The statistics series themselves
are today's for both recording variants (the per-call ``Samples`` built by ``setdefault`` before 2026-12-07 cost
another ~25 us per call and is not reproduced).

    .venv/bin/python benchmarks/gpu_pipeline/recording_cost.py               # ~1 min on 2 cores
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import result_path, use_checkout  # noqa: E402

use_checkout()

from benchmarks.common.pipeline_gpu_measure import app_timed_sink  # noqa: E402
from jetforge.apps.pipeline.gpu_app import GPU_STAGES, TaskOps  # noqa: E402
from jetforge.apps.pipeline.metrics import PipelineMetrics  # noqa: E402
from jetforge.apps.pipeline.streams import BatchOps, StreamRunOptions, process_cpu_s, run_streams  # noqa: E402
from jetforge.apps.video.sources.gpu.feed_group import SourceFeedGroup  # noqa: E402

VARIANTS = ("none", "per-frame", "batched")


class _Frame:
    __slots__ = ("stream", "index", "timestamp", "captured")

    def __init__(self, stream: int, index: int) -> None:
        self.stream, self.index, self.timestamp, self.captured = stream, index, index / 30.0, time.perf_counter()


class _Source:
    """A stream of in-memory frames read a fetch at a time, as the app's NVDEC sources are by the feeder."""

    fetch = 4

    def __init__(self, stream: int, frames: int) -> None:
        self.stream, self.frames, self.next = stream, frames, 0

    def read(self) -> Optional[_Frame]:
        if self.next >= self.frames:
            return None
        self.next += 1
        return _Frame(self.stream, self.next - 1)

    def close(self) -> None:
        pass


class _NoModel(BatchOps):
    def launch(self, frames: List[Any], padded: int) -> Any:
        return None

    def finish(self, handle: Any, frames: List[Any]) -> List[Dict[str, Any]]:
        return [{"frame": f.index} for f in frames]


class _Task:
    name = "bench"

    def postprocess(self, item: Any) -> Any:
        return item.output


class PerFrameTaskOps(TaskOps):
    """The reference: TaskOps' recording as it was until 2026-12-07 (one ``add_stage`` per frame and step)."""

    def _timed(self, stage: str, frames: List[Any], fn: Any, *args: Any) -> Any:
        t0, c0 = time.perf_counter(), time.thread_time()
        value = fn(*args)
        wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
        for f in frames:
            self.metrics.add_stage(stage, wall, cpu / len(frames), frame=f.index, batch=len(frames))
        return value

    def finish(self, handle: Any, frames: List[Any]) -> List[Dict[str, Any]]:
        from jetforge.apps.pipeline.stages import Item
        from jetforge.apps.video.sources.base import Frame

        outputs = self._timed("results", frames, self.inner.finish, handle, frames)
        events = []
        for frame, output in zip(frames, outputs):
            item = Item(frame=Frame(frame.index, frame.timestamp, None, captured=frame.captured), stream=frame.stream,
                        t_start=frame.captured, t_decoded=frame.captured, output=output)
            events.append(self._timed("postprocess", [frame], self.task.postprocess, item))
            self.t_result[(frame.stream, frame.index)] = time.perf_counter()
        return events


def _per_frame_sink(ops: TaskOps) -> Any:
    def sink(stream: int, frame: Any, event: Any, host: Any) -> None:
        t0, c0 = time.perf_counter(), time.thread_time()
        done = time.perf_counter()
        ops.metrics.add_stage("sink", done - t0, time.thread_time() - c0, frame=frame.index)
        ops.metrics.add_done(stream, frame.captured, frame.captured, ops.t_result.pop((stream, frame.index), done),
                             done, frame=frame.index)
    return sink


def one_run(variant: str, streams: int, frames: int, max_batch: int) -> Dict[str, float]:
    """``frames`` frames over ``streams`` streams through the ``variant``'s recording; CPU us a frame and FPS."""
    metrics = PipelineMetrics(GPU_STAGES, warmup_frames=5, model_stages=("launch", "results"))
    if variant == "none":
        ops: BatchOps = _NoModel()
        sink: Any = lambda s, f, e, h: None  # noqa: E731
    elif variant == "per-frame":
        ops = PerFrameTaskOps(_Task(), None, _NoModel(), metrics)  # type: ignore[arg-type]
        sink = _per_frame_sink(ops)  # type: ignore[arg-type]
    else:
        ops = TaskOps(_Task(), None, _NoModel(), metrics)  # type: ignore[arg-type]
        sink = app_timed_sink(lambda s, f, e, h: None, ops)  # the benchmark's timed sink: SinkTiming
    group = SourceFeedGroup([_Source(s, frames // streams) for s in range(streams)], depth=8)
    metrics.start()
    cpu0 = process_cpu_s()
    result = run_streams(group, ops, StreamRunOptions(max_batch=max_batch, depth=8), sink=sink)
    cpu = process_cpu_s() - cpu0
    metrics.stop()
    if variant != "none" and metrics.frames != result.frames:
        raise RuntimeError("%s recorded %d of %d frames" % (variant, metrics.frames, result.frames))
    return {"cpu_us_per_frame": 1e6 * cpu / max(1, result.frames), "fps": result.fps, "frames": result.frames,
            "mean_batch": result.mean_batch}


def summarise(values: List[float]) -> Dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--frames", type=int, default=32000, help="frames per run, over all streams")
    ap.add_argument("--max-batch", type=int, default=32, help="the app's batch at 16 streams, 2 frames each")
    ap.add_argument("--reps", type=int, default=5, help="runs per variant, interleaved (median reported)")
    ap.add_argument("--out", default=None, help="results stem (default results/<device>_<date>_recording-cost)")
    args = ap.parse_args(argv)
    runs: Dict[str, List[Dict[str, float]]] = {v: [] for v in VARIANTS}
    one_run("batched", args.streams, min(args.frames, 2000), args.max_batch)  # warm-up: imports, first allocations
    for rep in range(args.reps):
        for v in VARIANTS:  # interleaved, so a change in the machine's load touches every variant alike
            runs[v].append(one_run(v, args.streams, args.frames, args.max_batch))
            print("rep %d %-9s %6.1f us/frame %8.0f FPS" % (rep + 1, v, runs[v][-1]["cpu_us_per_frame"],
                                                           runs[v][-1]["fps"]), file=sys.stderr)
    rows = []
    for v in VARIANTS:
        cpu = summarise([r["cpu_us_per_frame"] for r in runs[v]])
        rows.append({"variant": v, "cpu_us_per_frame": cpu, "fps": summarise([r["fps"] for r in runs[v]]),
                     "mean_batch": summarise([r["mean_batch"] for r in runs[v]])})
    floor = rows[0]["cpu_us_per_frame"]["median"]
    for row in rows:
        row["recording_us_per_frame"] = row["cpu_us_per_frame"]["median"] - floor
    per_frame, batched = rows[1]["recording_us_per_frame"], rows[2]["recording_us_per_frame"]
    lines = ["streams %d, %d frames a run, batch <= %d, %d interleaved runs each; median [min-max]"
             % (args.streams, args.frames, args.max_batch, args.reps),
             "%-10s %-28s %-26s %s" % ("variant", "process CPU us/frame", "FPS", "recording us/frame (- none)")]
    for row in rows:
        c, f = row["cpu_us_per_frame"], row["fps"]
        lines.append("%-10s %6.1f [%6.1f-%6.1f]         %8.0f [%8.0f-%8.0f]  %6.1f" % (
            row["variant"], c["median"], c["min"], c["max"], f["median"], f["min"], f["max"],
            row["recording_us_per_frame"]))
    lines.append("batched recording costs %.2fx the per-frame recording's CPU a frame"
                 % (batched / per_frame if per_frame > 0 else float("nan")))
    table = "\n".join(lines)
    print(table)
    out = Path(args.out or result_path(__file__, "recording-cost", suffix=""))
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"benchmark": "recording_cost", "settings": vars(args), "rows": rows,
           "batched_over_per_frame": batched / per_frame if per_frame > 0 else None, "runs": runs}
    Path(str(out) + ".json").write_text(json.dumps(doc, indent=1))
    Path(str(out) + ".txt").write_text(table + "\n")
    print("wrote %s.{json,txt}" % out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
