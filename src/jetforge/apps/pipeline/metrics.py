"""What a pipeline run measured: FPS (overall and over time), per-stage latency and CPU time,
frame-to-result and end-to-end latency, dropped frames, stage errors, CPU load and memory.

One set of names for both run paths (docs/architecture.md, "metrics.json"):

* ``fps`` - frames finished / wall seconds of the whole run, every stream, warm-up included: what the app
  delivered end to end.  The only field named plain ``fps``.
* ``model_fps`` - frames / seconds the model stage(s) were busy (a batch's time shared among its frames): what
  the model alone sustained, one call after another.  Each stage has the same as ``throughput_fps``.
* latency percentiles leave out the warm-up frames (each stream's first ``warmup_frames``: allocators, lazy
  initialisation, caches), which are reported on their own under ``warmup``; plots leave them out too.

Statistics come from :mod:`jetforge.runtime.measure` (the same p50/p95/p99 as every
other jetforge report).  :func:`format_metrics` prints the summary table;
:func:`plot_metrics` draws FPS over time and the latency histogram (matplotlib,
imported only there, with the Agg backend).
"""

import threading
import time
from collections import deque
from typing import Any, Deque, Dict, List, Optional, Sequence, Tuple

from jetforge.apps.pipeline.series import MAX_SAMPLES, Samples, Tally, made
from jetforge.runtime.measure import current_rss, fps as frames_per_second, memory_info

STAGES = ("decode", "preprocess", "infer", "postprocess", "sink")
#: Each stream's first frames left out of the latency statistics and plots by default (reported apart under
#: ``warmup``): the first calls of a model pay for allocators, lazy initialisation and caches (3.3 s for the first
#: frame of a CPU app measured here), which would otherwise stretch every percentile and histogram.
WARMUP_FRAMES = 5
#: FPS-over-time bins and RSS samples kept: past this many, neighbours are merged and the interval
#: doubles (1 s, 2 s, 4 s, ...), so a run of any length keeps a bounded, evenly spaced history.
MAX_BINS = 2048


def _no_time() -> List[float]:
    """A stage's busy record: [frames, seconds busy (a call's time shared by its frames)]."""
    return [0, 0.0]


class PipelineMetrics:
    """Thread-safe collector fed by the pipeline's stages."""

    def __init__(self, stages: Sequence[str] = STAGES, warmup_frames: int = 0,
                 model_stages: Sequence[str] = ("infer",)) -> None:
        self.stages = tuple(stages)
        self.warmup_frames = int(warmup_frames)  # each stream's first N frames: out of the latency statistics
        self.model_stages = tuple(model_stages)  # the stages whose busy time is the model's (model_fps)
        self._lock = threading.Lock()
        self.wall: Dict[str, Samples] = {s: Samples() for s in self.stages}
        self.cpu: Dict[str, Tally] = {s: Tally() for s in self.stages}  # only their means are reported
        self.busy: Dict[str, List[float]] = {}  # stage -> [frames, seconds busy (a call's time shared by its frames)]
        self.warmup_wall: Dict[str, Samples] = {}
        self.batch_sizes = Samples()
        self.end_to_end = Samples()
        self.frame_to_result = Samples()
        self.warmup_end_to_end = Samples()
        self._done = 0  # frames finished
        self._recent: Deque[float] = deque(maxlen=4096)  # perf_counter of the newest finished frames
        self._bins: List[int] = []  # frames finished per bin of _bin_s seconds since start
        self._bin_s = 1
        self._rss_every_s = 1.0
        self.frames_per_stream: Dict[int, int] = {}
        self.errors: Dict[str, int] = {}
        self.error_samples: List[Dict[str, Any]] = []
        self.skipped = 0  # input frames the source could not decode (unreadable images), skipped by policy
        self.skipped_samples: List[Dict[str, Any]] = []
        self.dropped_pipeline = 0  # frames discarded by the pipeline's own drop policy
        self.dropped_sources: Dict[int, int] = {}
        self.rss_samples: List[Tuple[float, int]] = []
        self.t_start = 0.0
        self.t_end = 0.0
        self._cpu0 = 0.0
        self._cpu1 = 0.0
        self._last_rss = 0.0

    # -- recording ---------------------------------------------------------------------
    def start(self) -> None:
        self.t_start = time.perf_counter()
        self._cpu0 = time.process_time()
        self.rss_samples.append((0.0, current_rss()))

    def stop(self) -> None:
        self.t_end = time.perf_counter()
        self._cpu1 = time.process_time()
        self.rss_samples.append((self.t_end - self.t_start, current_rss()))

    def is_warmup(self, frame: Optional[int]) -> bool:
        """Whether a stream's frame ``frame`` (its index) is one of its warm-up frames."""
        return frame is not None and 0 <= frame < self.warmup_frames

    def add_stage(self, stage: str, wall: float, cpu: float, frame: Optional[int] = None, batch: int = 1) -> None:
        """One frame's time in ``stage`` (``wall``: what the frame waited; ``cpu``: its share); ``frame``: its
        index in its stream (a warm-up frame's time is kept apart); ``batch``: frames that shared the call."""
        with self._lock:
            self._add_stage(stage, wall, cpu, frame, wall / max(1, batch))

    def add_stage_frames(self, stage: str, frames: Sequence[Optional[int]], wall: float, cpu: float,
                         walls: Optional[Sequence[float]] = None) -> None:
        """``frames`` (their indices) through ``stage`` at once, under one lock: one call every frame waited
        ``wall`` for, or (``walls``) a call per frame, each its own wall; ``cpu``: the CPU of them all, shared
        equally (a per-frame CPU clock is a system call per frame and stage).  Why: the GPU path records a batch
        of up to 32 frames per step, on threads that share one GIL with the thread that launches the batches."""
        n = len(frames)
        if not n:
            return
        share = cpu / n
        warm = self.warmup_frames
        with self._lock:
            if any(f is not None and 0 <= f < warm for f in frames):  # a stream's first frames: one by one
                if walls is None:
                    for frame in frames:
                        self._add_stage(stage, wall, share, frame, wall / n)
                else:
                    for frame, own in zip(frames, walls):
                        self._add_stage(stage, own, share, frame, own)
                return
            busy = made(self.busy, stage, _no_time)
            busy[0] += n
            busy[1] += wall if walls is None else sum(walls)
            made(self.wall, stage, Samples).extend([wall] * n if walls is None else walls)
            made(self.cpu, stage, Tally).add(cpu, n)

    def _add_stage(self, stage: str, wall: float, cpu: float, frame: Optional[int], busy_s: float) -> None:
        busy = made(self.busy, stage, _no_time)
        busy[0] += 1
        busy[1] += busy_s
        if self.is_warmup(frame):
            made(self.warmup_wall, stage, Samples).append(wall)
            return
        made(self.wall, stage, Samples).append(wall)
        made(self.cpu, stage, Tally).add(cpu)

    def add_batch(self, size: int) -> None:
        with self._lock:
            self.batch_sizes.append(size)

    def add_error(self, stage: str, stream: int, frame: int, message: str, name: str = "") -> None:
        with self._lock:
            self.errors[stage] = self.errors.get(stage, 0) + 1
            if len(self.error_samples) < 20:
                sample = {"stage": stage, "stream": stream, "frame": frame, "error": message}
                if name:
                    sample["image"] = name
                self.error_samples.append(sample)

    def add_skipped(self, stream: int, frame: int, reason: str, name: str = "") -> None:
        with self._lock:
            self.skipped += 1
            if len(self.skipped_samples) < 20:
                sample: Dict[str, Any] = {"stream": stream, "frame": frame, "reason": reason}
                if name:
                    sample["image"] = name
                self.skipped_samples.append(sample)

    def add_done(self, stream: int, t_start: float, t_decoded: float, t_result: float, t_done: float,
                 frame: Optional[int] = None) -> None:
        """A finished frame (``frame``: its index in its stream; a warm-up frame counts in FPS, not in latency)."""
        with self._lock:
            self._add_done(stream, t_start, t_decoded, t_result, t_done, frame)

    def add_done_frames(self, done: Sequence[Tuple[int, float, float, float, float, Optional[int]]]) -> None:
        """Finished frames at once, under one lock: each ``(stream, t_start, t_decoded, t_result, t_done,
        frame)`` as :meth:`add_done` takes them, in the order they finished."""
        if not done:
            return
        warm = self.warmup_frames
        with self._lock:
            if any(d[5] is not None and 0 <= d[5] < warm for d in done):  # a stream's first frames: one by one
                for record in done:
                    self._add_done(*record)
                return
            self.end_to_end.extend([d[4] - d[1] for d in done])
            self.frame_to_result.extend([d[3] - (d[2] or d[1]) for d in done])
            self._done += len(done)
            self._recent.extend([d[4] for d in done])
            per_stream = self.frames_per_stream
            for d in done:
                per_stream[d[0]] = per_stream.get(d[0], 0) + 1
            for d in done:
                self._count_in_bin(d[4])
            self._sample_rss(done[-1][4])

    def _add_done(self, stream: int, t_start: float, t_decoded: float, t_result: float, t_done: float,
                  frame: Optional[int]) -> None:
        if self.is_warmup(frame):
            self.warmup_end_to_end.append(t_done - t_start)
        else:
            self.end_to_end.append(t_done - t_start)
            self.frame_to_result.append(t_result - (t_decoded or t_start))
        self._done += 1
        self._recent.append(t_done)
        self._count_in_bin(t_done)
        self.frames_per_stream[stream] = self.frames_per_stream.get(stream, 0) + 1
        self._sample_rss(t_done)

    def _count_in_bin(self, t_done: float) -> None:
        index = max(0, int((t_done - self.t_start) / self._bin_s))
        if index < len(self._bins):  # the usual case: the current bin
            self._bins[index] += 1
            return
        while index >= MAX_BINS:  # merge neighbouring bins: the history keeps its span, not its detail
            self._bins = [sum(self._bins[i:i + 2]) for i in range(0, len(self._bins), 2)]
            self._bin_s *= 2
            index = max(0, int((t_done - self.t_start) / self._bin_s))
        self._bins.extend([0] * (index + 1 - len(self._bins)))
        self._bins[index] += 1

    def _sample_rss(self, t_done: float) -> None:
        if t_done - self._last_rss >= self._rss_every_s:
            self._last_rss = t_done
            self.rss_samples.append((t_done - self.t_start, current_rss()))
            if len(self.rss_samples) > MAX_BINS:
                self.rss_samples = self.rss_samples[::2]
                self._rss_every_s *= 2

    # -- reading -------------------------------------------------------------------------
    @property
    def frames(self) -> int:
        return self._done

    @property
    def dropped(self) -> int:
        return self.dropped_pipeline + sum(self.dropped_sources.values())

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    def running_fps(self, window_s: float = 1.0) -> float:
        """Frames finished per second over the last ``window_s`` (for the overlay)."""
        with self._lock:
            if len(self._recent) < 2:
                return 0.0
            now = self._recent[-1]
            n = 0
            first = now
            for t in reversed(self._recent):
                if now - t > window_s:
                    break
                n += 1
                first = t
        return (n - 1) / (now - first) if n > 1 and now > first else 0.0

    def last_latency_ms(self) -> float:
        with self._lock:
            return self.end_to_end.last * 1000.0 if self.end_to_end.count else 0.0

    @property
    def fps_bin_s(self) -> int:
        """Width of the FPS-over-time bins: 1 s, doubled each time a long run fills MAX_BINS."""
        return self._bin_s

    def fps_over_time(self) -> List[Tuple[float, float]]:
        """(seconds since start, FPS in that bin) for each full bin of the run."""
        if not self._done:
            return []
        end = (self.t_end or self._recent[-1]) - self.t_start
        full = max(1, int(end / self._bin_s))
        counts = (self._bins + [0] * full)[:full]
        return [((i + 0.5) * self._bin_s, c / float(self._bin_s)) for i, c in enumerate(counts)]

    def throughput_fps(self, stages: Sequence[str]) -> Optional[float]:
        """Frames per second of ``stages`` alone: frames / seconds they were busy (None: never ran)."""
        runs = [self.busy[s] for s in stages if s in self.busy]
        seconds = sum(b[1] for b in runs)
        return runs[0][0] / seconds if runs and seconds > 0 else None

    def warmup_dict(self) -> Dict[str, Any]:
        """The warm-up frames on their own: how many, and their latencies (end to end, per stage)."""
        return {"frames_per_stream": self.warmup_frames, "frames": self.warmup_end_to_end.count,
                "latency_ms": {"end_to_end": _latency(self.warmup_end_to_end),
                               "stages": {s: _latency(v) for s, v in self.warmup_wall.items() if v}}}

    def to_dict(self) -> Dict[str, Any]:
        wall = (self.t_end or time.perf_counter()) - self.t_start
        stages: Dict[str, Any] = {}
        cpu_per_frame = 0.0
        for s in self.stages:
            if self.wall.get(s):
                d = _latency(self.wall[s])
                d["cpu_mean_ms"] = 1000.0 * self.cpu[s].total / self.cpu[s].count
                d["throughput_fps"] = self.throughput_fps([s])
                stages[s] = d
        frames = self.frames
        for s in self.stages:
            if self.cpu.get(s) and self.cpu[s].count:
                cpu_per_frame += self.cpu[s].total / self.cpu[s].count
        cpu_s = self._cpu1 - self._cpu0 if self._cpu1 else time.process_time() - self._cpu0
        memory = memory_info().to_dict()
        memory["rss_samples_mib"] = [[round(t, 2), round(r / float(1 << 20), 1)] for t, r in self.rss_samples]
        out: Dict[str, Any] = {
            "frames": frames,
            "frames_per_stream": {str(k): v for k, v in sorted(self.frames_per_stream.items())},
            "wall_s": wall,
            "fps": frames_per_second(frames, wall),
            "model_fps": self.throughput_fps(self.model_stages),
            "latency_ms": {
                "end_to_end": _latency(self.end_to_end),
                "frame_to_result": _latency(self.frame_to_result),
                "stages": stages,
            },
            "warmup": self.warmup_dict(),
            "batch": {"batches": len(self.batch_sizes),
                      "mean_size": (self.batch_sizes.total / self.batch_sizes.count) if self.batch_sizes else 0.0,
                      "max_size": int(self.batch_sizes.max) if self.batch_sizes else 0},
            "dropped": {"total": self.dropped, "pipeline": self.dropped_pipeline,
                        "sources": {str(k): v for k, v in sorted(self.dropped_sources.items())}},
            "errors": {"total": self.error_count, "by_stage": dict(self.errors), "samples": list(self.error_samples)},
            "skipped": {"total": self.skipped, "samples": list(self.skipped_samples)},
            "cpu": {"process_cpu_s": cpu_s, "load_cores": cpu_s / wall if wall > 0 else 0.0,
                    "stage_cpu_ms_per_frame": 1000.0 * cpu_per_frame},
            "memory": memory,
            "fps_over_time": [[round(t, 2), round(f, 2)] for t, f in self.fps_over_time()],
            "fps_bin_s": self.fps_bin_s,
        }
        return out


def _latency(samples: Samples) -> Optional[Dict[str, Any]]:
    """A series' latency statistics in ms (None when empty), without LatencyStats' ``fps`` (1 / mean latency), which
    is no frame rate of a pipelined run: throughput is ``fps``, ``model_fps`` and each stage's ``throughput_fps``."""
    if not samples:
        return None
    d = samples.stats().to_dict()
    d.pop("fps", None)
    return d


def format_metrics(m: Dict[str, Any]) -> str:
    """The printed summary table of a run (FPS, latency percentiles per stage, drops, errors, memory)."""
    from jetforge.table import format_table

    lat = m["latency_ms"]
    rows = []
    named = [("end to end", lat["end_to_end"]), ("frame to result", lat["frame_to_result"])]
    named += [(s, v) for s, v in lat["stages"].items()]
    for name, s in named:
        if s:
            rows.append([name] + ["%.2f" % s[k] for k in ("mean_ms", "p50_ms", "p95_ms", "p99_ms", "max_ms")]
                        + ["%.2f" % s["cpu_mean_ms"] if "cpu_mean_ms" in s else ""])
    mem = m["memory"]
    lines = [
        "frames    %d in %.2f s  ->  %.1f FPS end to end%s%s" % (
            m["frames"], m["wall_s"], m["fps"],
            "" if len(m["frames_per_stream"]) < 2 else " (%d streams)" % len(m["frames_per_stream"]),
            ", model alone %.1f FPS" % m["model_fps"] if m.get("model_fps") else ""),
        "dropped   %d (pipeline %d, sources %d)   errors %d%s" % (
            m["dropped"]["total"], m["dropped"]["pipeline"], sum(m["dropped"]["sources"].values()),
            m["errors"]["total"], (" " + str(m["errors"]["by_stage"])) if m["errors"]["total"] else ""),
        "cpu       %.2f cores busy on average, %.1f ms of stage CPU per frame" % (
            m["cpu"]["load_cores"], m["cpu"]["stage_cpu_ms_per_frame"]),
        "memory    peak RSS %.0f MiB, RSS now %.0f MiB%s" % (
            mem["peak_rss_mib"], mem["rss_mib"],
            (", GPU %.0f MiB" % mem["gpu_mib"]) if mem.get("gpu_mib") is not None else ""),
    ]
    skipped = m.get("skipped") or {}
    if skipped.get("total"):
        names = [s.get("image") or "frame %d" % s["frame"] for s in skipped["samples"]]
        lines.append("skipped   %d unreadable input frame(s): %s%s" % (
            skipped["total"], ", ".join(names[:5]), ", ..." if skipped["total"] > 5 else ""))
    warm = m.get("warmup") or {}
    if warm.get("frames"):
        e2e = warm["latency_ms"]["end_to_end"]
        lines.append("warm-up   first %d frame(s) of each stream (%d in all) left out of the latency below: "
                     "mean %.1f ms, max %.1f ms" % (warm["frames_per_stream"], warm["frames"], e2e["mean_ms"],
                                                   e2e["max_ms"]))
    if m["batch"]["batches"] and m["batch"]["max_size"] > 1:
        lines.append("batches   %d, mean size %.2f, max %d" % (m["batch"]["batches"], m["batch"]["mean_size"],
                                                               m["batch"]["max_size"]))
    lines += ["", format_table(["latency (ms)", "mean", "p50", "p95", "p99", "max", "cpu"], rows)]
    return "\n".join(lines)


def plot_metrics(m: Dict[str, Any], end_to_end_ms: Sequence[float], fps_path: Any, hist_path: Any,
                 title: str = "") -> None:
    """FPS over time and the end-to-end latency histogram, as two PNG files (written atomically)."""
    from jetforge.fileio import write_png_atomic
    from jetforge.optional import require

    matplotlib = require("matplotlib", "plotting pipeline metrics")
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    series = m.get("fps_over_time") or []
    fig, ax = plt.subplots(figsize=(7, 3.2), dpi=100)
    if series:
        ax.plot([t for t, _ in series], [f for _, f in series], marker=".", lw=1.2)
    ax.axhline(m["fps"], color="tab:red", lw=0.8, ls="--", label="mean %.1f FPS" % m["fps"])
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("frames per second")
    ax.set_ylim(bottom=0)
    ax.set_title(("%s: " % title if title else "") + "FPS over time (%d s bins)" % m.get("fps_bin_s", 1))
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    write_png_atomic(fig, fps_path)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 3.2), dpi=100)
    values = list(end_to_end_ms)
    if values:
        ax.hist(values, bins=min(50, max(5, len(values) // 4)), color="tab:blue", alpha=0.8)
        e2e = m["latency_ms"]["end_to_end"]
        for key, style in (("p50_ms", "-"), ("p95_ms", "--"), ("p99_ms", ":")):
            ax.axvline(e2e[key], color="tab:red", ls=style, lw=1, label="%s %.1f ms" % (key[:3], e2e[key]))
        ax.legend()
    ax.set_xlabel("end-to-end latency per frame (ms)")
    ax.set_ylabel("frames")
    ax.set_title(("%s: " % title if title else "") + "latency histogram")
    ax.grid(alpha=0.3)
    write_png_atomic(fig, hist_path)
    plt.close(fig)


__all__ = ["MAX_BINS", "MAX_SAMPLES", "PipelineMetrics", "STAGES", "Samples", "WARMUP_FRAMES", "format_metrics",
           "plot_metrics"]
