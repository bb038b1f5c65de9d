"""Measurement: latency statistics, per-stage timers and process memory.

Everything jetforge reports about speed comes from here, so that a benchmark, the
demo and a deployed app compute p50/p95/p99 and FPS the same way.  Times are
collected in seconds (``time.perf_counter``) and reported in milliseconds.
Torch-free and Python 3.8.
"""

import contextlib
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence

PERCENTILES = (50, 90, 95, 99)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method) of already sorted values."""
    if not sorted_values:
        raise ValueError("percentile of an empty sequence")
    if not 0.0 <= q <= 100.0:
        raise ValueError("percentile must be in [0, 100], got %r" % q)
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


@dataclass(frozen=True)
class LatencyStats:
    """Summary of a list of durations, in seconds; :meth:`to_dict` reports milliseconds."""

    count: int
    total: float
    mean: float
    min: float
    max: float
    p50: float
    p90: float
    p95: float
    p99: float

    @property
    def fps(self) -> float:
        """Items per second if the items ran back to back (1 / mean latency)."""
        return 1.0 / self.mean if self.mean > 0 else float("inf")

    def to_dict(self) -> Dict[str, float]:
        ms = 1000.0
        return {"count": self.count, "mean_ms": self.mean * ms, "p50_ms": self.p50 * ms, "p90_ms": self.p90 * ms,
                "p95_ms": self.p95 * ms, "p99_ms": self.p99 * ms, "min_ms": self.min * ms, "max_ms": self.max * ms,
                "total_s": self.total, "fps": self.fps}


def latency_stats(samples_s: Sequence[float]) -> LatencyStats:
    """Statistics of durations given in seconds; an empty list is a ValueError (nothing was measured)."""
    values = sorted(float(v) for v in samples_s)
    if not values:
        raise ValueError("no latency samples to summarise")
    if values[0] < 0:
        raise ValueError("latency samples must not be negative, got %r" % values[0])
    total = math.fsum(values)
    return LatencyStats(count=len(values), total=total, mean=total / len(values), min=values[0], max=values[-1],
                        p50=percentile(values, 50), p90=percentile(values, 90), p95=percentile(values, 95),
                        p99=percentile(values, 99))


class Stopwatch:
    """Wall time since :meth:`start` (``time.perf_counter``); usable as a context manager."""

    def __init__(self) -> None:
        self._start: Optional[float] = None
        self._stop: Optional[float] = None

    def start(self) -> "Stopwatch":
        self._start = time.perf_counter()
        self._stop = None
        return self

    def stop(self) -> float:
        if self._start is None:
            raise RuntimeError("Stopwatch.stop() before start()")
        self._stop = time.perf_counter()
        return self.elapsed

    @property
    def elapsed(self) -> float:
        """Seconds from start to stop (or to now while running); 0.0 before start."""
        if self._start is None:
            return 0.0
        end = self._stop if self._stop is not None else time.perf_counter()
        return end - self._start

    def __enter__(self) -> "Stopwatch":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class StageTimer:
    """Per-stage durations of a pipeline: ``with timer.stage("infer"): ...`` appends one sample.

    Stages are reported in the order they were first timed.  :meth:`add` records a
    duration measured elsewhere (e.g. a decode call timed around ``next()``).
    """

    def __init__(self) -> None:
        self._samples: Dict[str, List[float]] = {}

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0)

    def add(self, name: str, seconds: float) -> None:
        self._samples.setdefault(name, []).append(float(seconds))

    def samples(self, name: str) -> List[float]:
        return list(self._samples.get(name, []))

    @property
    def names(self) -> List[str]:
        return list(self._samples)

    def stats(self) -> Dict[str, LatencyStats]:
        return {name: latency_stats(values) for name, values in self._samples.items() if values}

    def to_dict(self) -> Dict[str, Dict[str, float]]:
        return {name: s.to_dict() for name, s in self.stats().items()}


@dataclass(frozen=True)
class MemoryInfo:
    """Resident memory of this process in bytes: now, and the peak (high-water mark)."""

    rss: int
    peak_rss: int
    peak_source: str

    def to_dict(self) -> Dict[str, object]:
        mib = float(1 << 20)
        return {"rss_mib": self.rss / mib, "peak_rss_mib": self.peak_rss / mib, "peak_source": self.peak_source}


def current_rss() -> int:
    """Resident set size of this process now, in bytes (psutil, else /proc/self/statm)."""
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except ImportError:  # pragma: no cover - psutil is a core dependency
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss() -> "tuple[int, str]":
    """Peak resident set size of this process in bytes and where the number came from.

    Linux: ``VmHWM`` from /proc/self/status (which :func:`reset_peak_rss` can reset),
    else ``getrusage(RUSAGE_SELF).ru_maxrss`` (KiB on Linux, bytes on macOS), else
    psutil's ``peak_wset`` on Windows.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024, "VmHWM"
    except OSError:
        pass
    try:
        import resource

        maxrss = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        return (maxrss if sys.platform == "darwin" else maxrss * 1024), "ru_maxrss"
    except ImportError:  # Windows
        import psutil

        info = psutil.Process().memory_info()
        return int(getattr(info, "peak_wset", info.rss)), "peak_wset"


def reset_peak_rss() -> bool:
    """Reset the peak-RSS high-water mark to the current RSS (Linux >= 4.0); False where impossible.

    Lets a pipeline report its own peak rather than that of a one-off step before it
    (e.g. a model export in the same process).
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def memory_info() -> MemoryInfo:
    rss = current_rss()
    peak, source = peak_rss()
    return MemoryInfo(rss=rss, peak_rss=max(peak, rss), peak_source=source)


def available_memory() -> Optional[int]:
    """Bytes a new allocation can have now without swapping: the OS's available memory (psutil, else
    /proc/meminfo's MemAvailable), lowered to a cgroup v2 limit's headroom in a container; None if unknown."""
    found: Optional[int] = None
    try:
        import psutil

        found = int(psutil.virtual_memory().available)
    except (ImportError, OSError):  # pragma: no cover - psutil is a core dependency
        try:
            with open("/proc/meminfo") as f:
                for line in f:
                    if line.startswith("MemAvailable:"):
                        found = int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            pass
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current") as f:
            used = int(f.read().strip())
        if limit != "max":
            headroom = max(0, int(limit) - used)
            found = headroom if found is None else min(found, headroom)
    except (OSError, ValueError):
        pass
    return found


def format_bytes(n: float) -> str:
    """``1536`` -> ``1.5 KiB``; binary units up to EiB, for messages."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024.0:
            return ("%d %s" if unit == "B" else "%.1f %s") % (n, unit)
        n /= 1024.0
    return "%.1f EiB" % n


def memory_shortfall(nbytes: float) -> str:
    """"" when ``nbytes`` fit in :func:`available_memory` (or it is unknown), else the comparison for a message:
    ``"22.4 TiB, more than the 20.1 GiB of memory available"``.  Refusing up front is the only safe answer: an
    allocation past it swaps the machine to a halt or is killed by the OOM killer, and a C library (OpenCV, ONNX
    Runtime) allocating it ignores Ctrl-C and SIGTERM while it does."""
    free = available_memory()
    if free is None or nbytes <= free:
        return ""
    return "%s, more than the %s of memory available" % (format_bytes(nbytes), format_bytes(free))


def fps(frames: int, seconds: float) -> float:
    """Frames per second over a wall-clock interval (0 frames or 0 s gives 0.0)."""
    return frames / seconds if frames > 0 and seconds > 0 else 0.0
