"""Benchmark one session: latency percentiles, throughput, the H2D/compute/D2H split, memory, energy.

>>> from jetforge.runtime.session import open_session
>>> with open_session("model.onnx") as s:                    # doctest: +SKIP
...     result = run_benchmark(s, batch=1, iterations=200, warmup=20)
>>> result.to_dict()["latency_ms"]["p99_ms"]                 # doctest: +SKIP

Like trtexec, a run has three parts: warm-up calls (the first includes lazy
initialisation and, with CUDA graphs, the capture), a steady-state pass of
``iterations`` blocking ``infer`` calls timed one by one with the host clock
(latency, throughput, energy), and a pass with stage timing on (CUDA events where
the backend records them: host-to-device, compute, device-to-host; the host clock
around the backend call otherwise), from which the host overhead per call is the
wall time minus the timed stages.  Statistics come from :mod:`jetforge.runtime.measure`.

Memory: process RSS and its peak; GPU memory through NVML (pynvml) on desktop GPUs;
on a Jetson with ``tegrastats``, its RAM/GPU-load/power summary and energy per
inference from the board's power rails.  NVML's energy counter gives energy on
desktop GPUs (Volta and later).  Torch-free; matplotlib only for :func:`plot_histogram`.
"""

import importlib
import logging
import shutil
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from jetforge.config import Bound
from jetforge.errors import ConfigError
from jetforge.fileio import PathLike, write_png_atomic
from jetforge.optional import require
from jetforge.runtime.measure import (available_memory, latency_stats, memory_info, memory_shortfall,
                                      reset_peak_rss)
from jetforge.runtime.nvml import NvmlDevice
from jetforge.runtime.sidecar import static_shape

log = logging.getLogger(__name__)


def make_inputs(session: Any, batch: int = 1, seed: int = 0, shapes: Optional[Dict[str, List[int]]] = None,
                given: Optional[Dict[str, np.ndarray]] = None) -> Dict[str, np.ndarray]:
    """Random inputs fitting ``session.inputs``: axis 0 = ``batch`` where dynamic; floats uniform in [0, 1).

    ``shapes`` (checked by :func:`jetforge.runtime.bench_inputs.resolve_shapes`) gives an input's whole shape;
    ``given`` arrays (``--load-inputs``) are used as they are, never drawn."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ConfigError("batch must be a positive integer, got %r" % (batch,))
    SEED.check(seed, "--seed")
    given = dict(given or {})
    shapes = dict(shapes or {})
    for spec in session.inputs:
        if spec.name in shapes:
            continue
        fixed = spec.shape[0] if spec.shape else None
        if isinstance(fixed, int) and fixed > 0 and fixed != batch:
            raise ConfigError("input %r of %s has a fixed batch of %d; --batch %d does not fit"
                              % (spec.name, session.path.name, fixed, batch),
                              hint="use --batch %d, or export/build the model with a dynamic batch" % fixed)
        shapes[spec.name] = static_shape(spec, batch, "the benchmark")
    # The batch's upper bound is memory: every input at that batch, plus the float64 draw a float input is made
    # from, must fit in what the machine has free, or NumPy's MemoryError (an internal error) or the OOM killer
    # ends the run (`--batch 1000000000` asked for 22 TiB).
    total = sum(_bytes_made(spec, shapes[spec.name]) for spec in session.inputs if spec.name not in given)
    short = memory_shortfall(total)
    if short:
        fits = int(available_memory() or 0) * batch // max(1, total)
        raise ConfigError("--batch %d: the random inputs of %s take %s" % (batch, session.path.name, short),
                          hint="use --batch %d or less" % fits if fits >= 1 else "free memory, or bench a smaller "
                               "input")
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in session.inputs:
        if spec.name in given:
            feeds[spec.name] = given[spec.name]
            continue
        shape = shapes[spec.name]
        dtype = np.dtype(spec.dtype)
        if dtype.kind == "f":
            feeds[spec.name] = rng.random(shape, dtype=np.float64).astype(dtype)
        elif dtype.kind == "b":
            feeds[spec.name] = np.zeros(shape, dtype)
        else:
            feeds[spec.name] = rng.integers(0, 2, size=shape).astype(dtype)
    return feeds


#: ``--seed``: NumPy's generators take any non-negative integer, so 0 is the only limit (no upper one is needed:
#: the seed only picks the random input values, whatever its size).
SEED = Bound(int, 0, why="NumPy's random generators take no negative seed")


def _bytes_made(spec: Any, shape: Any) -> int:
    """Bytes input ``spec`` of ``shape`` takes while made: its own, plus 8 a value for a float's float64 draw
    (Python ints: a product of huge dims must not wrap around as NumPy's int64 would)."""
    dtype = np.dtype(spec.dtype)
    elements = 1
    for d in shape:
        elements *= int(d)
    return elements * (dtype.itemsize + (8 if dtype.kind == "f" else 0))


class BenchResult:
    """The numbers of one run; :meth:`to_dict` is the JSON written by ``jetforge bench --json``."""

    def __init__(self, data: Dict[str, Any], samples_s: List[float]) -> None:
        self.data = data
        self.samples_s = samples_s
        #: (start, end) of each timed call, seconds from the start of the steady state (``--export-times``)
        self.times_s: List[Tuple[float, float]] = []

    def to_dict(self) -> Dict[str, Any]:
        return dict(self.data)


def run_benchmark(session: Any, feeds: Optional[Dict[str, np.ndarray]] = None, batch: int = 1,
                  iterations: int = 200, warmup: int = 20, split_iterations: Optional[int] = None,
                  seed: int = 0, progress: bool = False, duration_s: float = 0.0,
                  warmup_ms: float = 0.0) -> BenchResult:
    """Benchmark ``session`` (any jetforge Session) on ``feeds`` (default: random inputs of ``batch``).

    As trtexec: warm-up runs ``warmup`` calls and at least ``warmup_ms`` milliseconds (``--warmUp``); the steady
    state runs ``iterations`` calls and at least ``duration_s`` seconds (``--duration``), so ``iterations`` in the
    result is the number of calls actually timed."""
    for name, value in (("iterations", iterations), ("warmup", warmup)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "iterations" else 0):
            raise ConfigError("%s must be a %s integer, got %r" % (name, "positive" if name == "iterations"
                                                                     else "non-negative", value))
    DURATION_S.check(duration_s, "--duration")
    WARMUP_MS.check(warmup_ms, "--warmup-ms")
    if feeds is None:
        feeds = make_inputs(session, batch, seed)
    else:
        batch = int(next(iter(feeds.values())).shape[0]) if feeds else batch
    split_n = split_iterations if split_iterations is not None else max(10, min(iterations, 100))
    reset_peak_rss()
    rss_before = memory_info()
    nvml = NvmlDevice(purpose="GPU memory in benchmarks")
    gpu_before = nvml.memory()

    # 1. warm-up (the first call pays for lazy initialisation and graph capture)
    session.set_timing(False)
    warm_times = _timed_calls(session, feeds, max(1, warmup), warmup_ms / 1000.0, progress, "warm-up")
    warm = [end - start for start, end in warm_times]

    # 2. steady state: blocking calls, host clock, no stage timing
    tegra = _tegrastats_monitor()
    energy_start = nvml.energy_mj()
    t_start_mono = time.monotonic()
    loop_start = time.perf_counter()
    times = _timed_calls(session, feeds, iterations, duration_s, progress, "steady state")
    loop_s = time.perf_counter() - loop_start
    t_end_mono = time.monotonic()
    samples = [end - start for start, end in times]
    iterations = len(samples)
    energy_end = nvml.energy_mj()
    energy = _energy(nvml, energy_start, energy_end, iterations, tegra, t_start_mono, t_end_mono)
    tegra_summary = _stop_tegrastats(tegra)

    # 3. stage split (CUDA events where the backend records them)
    stages = _stage_split(session, feeds, split_n, progress)

    stats = latency_stats(samples)
    half = len(samples) // 2
    first = latency_stats(samples[:half]) if half else stats
    second = latency_stats(samples[half:]) if half else stats
    gpu_after = nvml.memory()
    nvml.close()
    data: Dict[str, Any] = {
        "model": str(session.path),
        "backend": session.info(),
        "batch": batch,
        "inputs": {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in feeds.items()},
        "iterations": iterations,
        "warmup_iterations": len(warm),
        "latency_ms": stats.to_dict(),
        "throughput": {"inferences_per_s": iterations / loop_s if loop_s > 0 else 0.0,
                       "images_per_s": iterations * batch / loop_s if loop_s > 0 else 0.0},
        "warmup": {"first_call_ms": warm[0] * 1000.0, "mean_ms": 1000.0 * sum(warm) / len(warm),
                   "steady_mean_ms": stats.mean * 1000.0,
                   "first_call_over_steady": warm[0] / stats.mean if stats.mean > 0 else None},
        "steady_state": {"first_half_mean_ms": first.mean * 1000.0, "second_half_mean_ms": second.mean * 1000.0,
                         "drift_pct": 100.0 * (second.mean - first.mean) / first.mean if first.mean > 0 else 0.0},
        "stages_ms": stages,
        "host_overhead_ms_per_call": stages.get("host_overhead_ms_per_call"),
        "memory": {"process": memory_info().to_dict(), "process_before": rss_before.to_dict(),
                   "gpu": gpu_after if gpu_after is not None else {"available": False, "reason": nvml.reason},
                   "gpu_before": gpu_before},
        "energy": energy,
        "latency_samples_ms": [round(s * 1000.0, 6) for s in samples],
    }
    data["run"] = {"min_duration_s": duration_s, "min_warmup_ms": warmup_ms, "steady_wall_s": loop_s,
                   "warmup_wall_ms": 1000.0 * (warm_times[-1][1] - warm_times[0][0])}
    if tegra_summary is not None:
        data["memory"]["tegrastats"] = tegra_summary
    result = BenchResult(data, samples)
    result.times_s = [(start - loop_start, end - loop_start) for start, end in times]
    return result


def _timed_calls(session: Any, feeds: Dict[str, np.ndarray], count: int, min_s: float, progress: bool,
                 desc: str) -> List[Tuple[float, float]]:
    """(start, end) host-clock times of blocking calls: ``count`` of them, and more until ``min_s`` has passed."""
    times: List[Tuple[float, float]] = []
    for _ in _progress(range(count), progress, desc):
        t0 = time.perf_counter()
        session.infer(feeds)
        times.append((t0, time.perf_counter()))
    while times[-1][1] - times[0][0] < min_s:
        t0 = time.perf_counter()
        session.infer(feeds)
        times.append((t0, time.perf_counter()))
    return times


#: ``--duration``/``--warmup-ms``: a run of up to a day (a longer soak belongs in a loop of runs: the per-call
#: samples of one run are kept in memory and written to the JSON)
DURATION_S = Bound(float, 0.0, 86400.0, why="at most a day per run")
WARMUP_MS = Bound(float, 0.0, 3600000.0, why="at most an hour of warm-up")


def _stage_split(session: Any, feeds: Dict[str, np.ndarray], n: int, progress: bool) -> Dict[str, Any]:
    if not session.set_timing(True):
        return {"source": None, "reason": "the backend does not record stage times"}
    walls: List[float] = []
    parts: Dict[str, List[float]] = {}
    try:
        for _ in _progress(range(n), progress, "stage split"):
            t0 = time.perf_counter()
            session.infer(feeds)
            walls.append(time.perf_counter() - t0)
            timing = session.last_timing() or {}
            for key, ms in timing.items():
                parts.setdefault(key[:-3] if key.endswith("_ms") else key, []).append(ms / 1000.0)
    finally:
        session.set_timing(False)
    out: Dict[str, Any] = {"source": session.timing_source, "iterations": n}
    for key, values in parts.items():
        out[key] = latency_stats(values).to_dict()
    wall = latency_stats(walls)
    timed_mean = sum(latency_stats(v).mean for v in parts.values())
    out["wall"] = wall.to_dict()
    out["host_overhead_ms_per_call"] = max(0.0, (wall.mean - timed_mean) * 1000.0)
    return out


def _progress(iterable: Any, enabled: bool, desc: str) -> Any:
    if not enabled:
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, desc=desc, leave=False)


def _tegrastats_monitor() -> Any:
    """A running :class:`jetforge.runtime.tegrastats.TegrastatsMonitor` on a Jetson, else None."""
    if shutil.which("tegrastats") is None:
        return None
    try:
        module = importlib.import_module("jetforge.runtime.tegrastats")
        return module.TegrastatsMonitor(interval_ms=100).start()
    except Exception as err:  # tegrastats is decoration for a benchmark: report why it is missing, go on
        log.warning("tegrastats not used: %s", err)
        return None


def _stop_tegrastats(monitor: Any) -> Optional[Dict[str, Any]]:
    if monitor is None:
        return None
    monitor.stop()
    return dict(monitor.summary())


def _energy(nvml: NvmlDevice, start: Optional[int], end: Optional[int], inferences: int, tegra: Any,
            t0: float, t1: float) -> Dict[str, Any]:
    if tegra is not None:
        report = tegra.energy_per_inference(inferences, t0, t1)
        if report is not None:
            data = report.to_dict()
            data["source"] = "tegrastats"
            return data
        return {"available": False, "reason": "tegrastats printed no power rails (run as root)"}
    if start is not None and end is not None and end >= start and inferences > 0:
        joules = (end - start) / 1000.0
        return {"available": True, "source": "NVML total energy counter (whole GPU board)", "energy_j": joules,
                "mj_per_inference": (end - start) / float(inferences),
                "note": "includes the idle share of the board during the run; coarse for short runs"}
    return {"available": False, "reason": nvml.reason or "no power counter (NVML energy or tegrastats rails)"}


def plot_histogram(result: BenchResult, path: PathLike, title: Optional[str] = None) -> Path:
    """Write a PNG histogram of the steady-state latencies with p50/p95/p99 marked."""
    matplotlib = require("matplotlib", "the latency histogram (--plot)")
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    data = result.to_dict()
    values = [s * 1000.0 for s in result.samples_s]
    lat = data["latency_ms"]
    fig, ax = plt.subplots(figsize=(7, 4))
    try:
        ax.hist(values, bins=min(60, max(10, len(values) // 5)), color="#4c72b0", alpha=0.85)
        for key, color in (("p50_ms", "#2ca02c"), ("p95_ms", "#ff7f0e"), ("p99_ms", "#d62728")):
            ax.axvline(lat[key], color=color, linestyle="--", linewidth=1.2,
                       label="%s %.3f ms" % (key[:-3], lat[key]))
        ax.set_xlabel("latency per call (ms)")
        ax.set_ylabel("calls")
        ax.set_title(title or "%s - %s, batch %d, %d calls" % (
            Path(data["model"]).name, data["backend"].get("description", data["backend"].get("backend")),
            data["batch"], data["iterations"]), fontsize=8)
        ax.legend(fontsize=8)
        return write_png_atomic(fig, path, dpi=110)
    finally:
        plt.close(fig)


__all__ = ["BenchResult", "make_inputs", "plot_histogram", "run_benchmark"]
