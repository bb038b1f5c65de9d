"""The bound measurements of ``benchmarks/gpu_pipeline/pipeline_gpu.py``, each alone: NVDEC decoding N streams (one
thread a stream, or worker processes), the CPU encoder pool; and the sources both they and the pipeline points open.

Split out of the script (one job: measuring the hardware's parts alone); the dry run uses the fake decoder of
``tests/standins`` (injected, never selected by a production name).
"""

import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

def open_sources(paths: List[Path], n: int, codec: Any, keep: Any, gpu_id: int = 0,
                 threaded: bool = False, ring_slots: int = 16, defer_sync: bool = False,
                 batch_copy: Optional[bool] = None, decoder_buffer: Optional[int] = None,
                 copy_priority: str = "default", copy_ahead: bool = False,
                 decoder_priority: str = "default") -> List[Any]:
    """N looping NVDEC sources (stream files reused round robin), each primed: decoder start-up is not timed.
    ``keep``: one hook for all, or "ring" (a DeviceFrameRing per source, its ``defer_sync`` and ``batch_copy`` as
    given: None is the ring's default, one copy launch per fetch where it waits once per fetch); ``threaded``:
    NvThreadedSource, decoding ahead into ``decoder_buffer`` frames (None: the source's default); ``copy_priority``:
    the rings' copy stream ("high": the device's greatest stream priority); ``copy_ahead``: each NvThreadedSource
    copies a fetch ahead, its ring one fetch larger to hold it; ``decoder_priority``: each ThreadedDecoder's own
    stream ("high": the device's greatest priority)."""
    from jetforge.apps.video.sources.gpu.device_ring import DeviceFrameRing
    from jetforge.apps.video.sources.gpu.nvdec import NvDecSource
    from jetforge.apps.video.sources.gpu.nvdec_threaded import (NvThreadedSource, ThreadedDecodeOptions,
                                                                  ring_slots_for)

    kind = NvThreadedSource if threaded else NvDecSource
    extra: Dict[str, Any] = {}
    if threaded:  # None: the source's default
        buffer = {"buffer_size": int(decoder_buffer)} if decoder_buffer else {}
        extra["options"] = ThreadedDecodeOptions(copy_ahead=copy_ahead, decoder_priority=decoder_priority, **buffer)
    elif copy_ahead or decoder_priority != "default":
        raise ValueError("copy_ahead and decoder_priority are NvThreadedSource's (threaded=True)")
    ring_slots = ring_slots_for(ring_slots, copy_ahead)
    sources = [kind(paths[s % len(paths)], gpu_id=gpu_id, stream=s, codec_module=codec, loop=True,
                    keep=DeviceFrameRing(ring_slots, defer_sync, batch_copy, copy_priority) if keep == "ring" else keep,
                    **extra)
               for s in range(n)]
    for src in sources:
        src.prime()
        if hasattr(src, "reset_waits"):  # the decoders' start-up is not the feeder's steady-state wait
            src.reset_waits()
    return sources


def feeder_waits(sources: Any, frames: int) -> Dict[str, float]:
    """The feeder's waits per frame, summed over its sources (NvThreadedSource's counters): in get_batch_frames for
    decoded frames, and in the ring's once-a-fetch wait for the owned copies; {} for sources without them."""
    srcs = [src for src in sources if hasattr(src, "decode_wait_s")]
    if not srcs or frames <= 0:
        return {}
    return {"decode_wait_ms": 1000.0 * sum(src.decode_wait_s for src in srcs) / frames,
            "copy_wait_ms": 1000.0 * sum(src.copy_wait_s for src in srcs) / frames,
            "fetches_per_frame": sum(src.fetches for src in srcs) / frames}


def decode_rate(n: int, frames: int, wall: float, cpu: float) -> Dict[str, Any]:
    """One decode measurement's record: N streams, frames decoded, frames a second, process CPU ms a frame."""
    return {"streams": n, "frames": frames, "fps": frames / wall, "cpu_ms_per_frame": 1000.0 * cpu / max(1, frames)}


def decode_alone(paths: List[Path], n: int, codec: Any, seconds: float) -> Dict[str, Any]:
    """Hardware decode of N streams, one thread per stream, nothing else: frames per second of all streams."""
    from jetforge.apps.pipeline.streams import process_cpu_s

    sources = open_sources(paths, n, codec, keep=None)
    counts = [0] * n
    stop = time.perf_counter() + seconds

    def work(s: int) -> None:
        while time.perf_counter() < stop:
            if sources[s].read() is None:
                break
            counts[s] += 1

    threads = [threading.Thread(target=work, args=(s,)) for s in range(n)]
    c0, t0 = process_cpu_s(), time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall, cpu = time.perf_counter() - t0, process_cpu_s() - c0
    for src in sources:
        src.close()
    return decode_rate(n, sum(counts), wall, cpu)


def decode_alone_feed(paths: List[Path], n: int, codec: Any, seconds: float) -> Dict[str, Any]:
    """NVDEC of N streams decoded the way the app's feed layout decodes them (a ThreadedDecoder each, read by ONE
    thread round robin a fetch at a time), each frame dropped as soon as it is read: no owned copy, no batcher, no
    model.  Not a bound of the hardware: the ceiling of that decode layout, beside NVDEC alone."""
    from jetforge.apps.pipeline.streams import process_cpu_s

    sources = open_sources(paths, n, codec, keep=None, threaded=True)
    fetch = max(src.fetch for src in sources)
    frames = 0
    c0, t0 = process_cpu_s(), time.perf_counter()
    stop = t0 + seconds
    while time.perf_counter() < stop:
        for src in sources:
            for _ in range(fetch):
                if src.read() is None:
                    raise RuntimeError("a looping source ended (stream %d)" % src.stream)
                frames += 1
    wall, cpu = time.perf_counter() - t0, process_cpu_s() - c0
    for src in sources:
        src.close()
    return decode_rate(n, frames, wall, cpu)


def open_group(paths: List[Path], n: int, dry_run: bool, streams_per_worker: int, per_stream: int) -> Any:
    """N looping streams decoded by worker processes into CUDA IPC rings (host shared memory in the dry run);
    enough slots for the batcher's frames, the batches in flight and one fetch."""
    from jetforge.apps.video.sources.gpu.ipc_decode import NVDEC, IpcDecodeGroup

    codec: Any = NVDEC
    if dry_run:  # the CPU stand-in for PyNvVideoCodec, from the tests (the checkout's root is on sys.path)
        from tests.standins.fake_nvdec import FakeNvDecoder

        codec = FakeNvDecoder
    return IpcDecodeGroup([paths[s % len(paths)] for s in range(n)], streams_per_worker=streams_per_worker,
                          slots=max(16, 4 * per_stream + 8), fetch=4, loop=True, codec=codec, start_timeout_s=45.0)


def decode_alone_procs(paths: List[Path], n: int, dry_run: bool, seconds: float) -> Dict[str, Any]:
    """NVDEC decode of N streams in worker processes (4 streams each, the ipc variants' decoding), each frame
    released as soon as it is announced: the decode bound without this process's GIL in the way."""
    from jetforge.apps.pipeline.streams import process_cpu_s

    group = open_group(paths, n, dry_run, 4, 2)
    sink = _ReleasingSink(group, n, seconds)
    try:
        c0, w0, t0 = process_cpu_s(), group.worker_cpu_s(), time.perf_counter()
        group.feed(sink)
        wall, cpu = time.perf_counter() - t0, process_cpu_s() - c0 + group.worker_cpu_s() - w0
    finally:
        group.close()
    return dict(decode_rate(n, sink.frames, wall, cpu), workers=group.workers)


class _ReleasingSink:
    """A batcher stand-in for :func:`decode_alone_procs`: counts frames and gives their slots back at once."""

    def __init__(self, group: Any, n: int, seconds: float) -> None:
        self.group, self.frames, self.stop_at = group, 0, time.perf_counter() + seconds

    @property
    def stopped(self) -> bool:
        return time.perf_counter() > self.stop_at

    def put_many(self, stream: int, frames: List[Any]) -> bool:
        self.frames += len(frames)
        self.group.release(frames)
        return not self.stopped

    def close(self, stream: int) -> None:
        pass


def source_label(v: Dict[str, Any]) -> str:
    if v.get("source") == "ipc":
        return "worker processes (%d streams each, ThreadedDecoder) -> CUDA IPC rings" % v["workers"]
    if v.get("source") == "threaded":
        return "ThreadedDecoder, one thread per stream"
    if v.get("source") == "feed":
        return "ThreadedDecoder per stream, one feeder thread for all, one copy wait per fetch"
    return "core decoder, one thread per stream"


FRAME_ORDERS = ("per-stream", "shared")


def encode_frame(n: int, streams: int, frames: int, order: str = "per-stream") -> Tuple[int, int]:
    """The ``n``-th submission's (stream, frame index) in the encode-alone bound.  ``per-stream``: each stream gets
    the frames in order, as the pipeline's encoders get their stream's decoded frames; ``shared``: the n-th frame
    whichever stream it goes to (the bound until 2026-12-07), so each stream saw every ``streams``-th frame: more
    motion between its frames, 8-12 % more encoder time a frame on a 2-core VM (``encode_order.py``), and the
    pipeline then ran above its own bound (1.06-1.10x on an H100 host)."""
    if order not in FRAME_ORDERS:
        raise ValueError("frame order %r (known: %s)" % (order, ", ".join(FRAME_ORDERS)))
    stream = n % streams
    return stream, (n // streams if order == "per-stream" else n) % frames


def encode_alone(frames_nv12: List[Any], width: int, height: int, workers: int, streams: int, seconds: float,
                 out_dir: Path, order: str = "per-stream") -> Dict[str, Any]:
    """The CPU encoder pool alone: frames submitted round robin over ``streams`` for ``seconds``, then closed; each
    stream's frames in ``order`` (:func:`encode_frame`)."""
    from jetforge.apps.video.sinks.encode_pool import EncoderPool

    with EncoderPool(out_dir, width, height, 30.0, workers=workers) as pool:  # closed (workers stopped) on any exit
        pool.wait_ready()  # process start-up is not encoding time
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            stream, index = encode_frame(n, streams, len(frames_nv12), order)
            pool.submit(stream, frames_nv12[index], {"label": "encode-alone %d" % n})
            n += 1
        results = pool.close()
    wall = time.perf_counter() - t0
    cpu = sum(r["cpu_s"] for r in results)
    return {"workers": workers, "streams": streams, "frames": n, "fps": n / wall, "frame_order": order,
            "cpu_ms_per_encoded_frame": 1000.0 * cpu / max(1, n)}



def host_frames(path: Path) -> List[Any]:
    """The first 30 NV12 frames of ``path`` (the carried 720p stream) in host memory for the encode-alone run (OpenCV
    decode through the fake decoder: the encoder's input only, no decoding measured)."""
    from tests.standins.fake_nvdec import FakeNvDecoder
    from jetforge.apps.video.sources.gpu.nvdec import NvDecSource

    with NvDecSource(path, codec_module=FakeNvDecoder, max_frames=30) as src:
        return [f.host_nv12() for f in src]



class BenchTask:
    """The task the app's :class:`~jetforge.apps.pipeline.gpu_app.TaskOps` wraps in a benchmark point: its
    ``postprocess`` passes the head's event through (the model's own postprocessing - top-1, SSD decode and NMS -
    runs in the ``results`` stage, as the app's ``to_outputs`` does; no tracking or counting here)."""

    name = "bench"

    def postprocess(self, item: Any) -> Any:
        return item.output


def app_timed(ops: Any, warmup_frames: int) -> Any:
    """``ops`` inside the app's TaskOps and PipelineMetrics (the GPU path's stages: launch, results, postprocess,
    sink): a point's per-stage times are those of the app's metrics.json latency block."""
    from jetforge.apps.pipeline.gpu_app import GPU_STAGES, TaskOps
    from jetforge.apps.pipeline.metrics import PipelineMetrics

    class AppTimedOps(TaskOps):
        def gpu_ms(self) -> Dict[str, float]:
            return self.inner.gpu_ms()

    metrics = PipelineMetrics(GPU_STAGES, warmup_frames=warmup_frames, model_stages=("launch", "results"))
    return AppTimedOps(BenchTask(), None, ops, metrics)


def app_timed_sink(sink: Any, ops: Any) -> Any:
    """``sink`` timed as the app's output stage (``sink``), its frames recorded as done in the point's metrics the
    app's way (:class:`~jetforge.apps.pipeline.gpu_app.SinkTiming`: once per batch, ``run_streams`` calling
    ``end_batch``)."""
    from jetforge.apps.pipeline.gpu_app import SinkTiming

    class TimedSink:
        def __init__(self) -> None:
            self.timing = SinkTiming(ops)

        def __call__(self, stream: int, frame: Any, event: Any, host: Any) -> None:
            t0 = self.timing.begin()
            sink(stream, frame, event, host)
            self.timing.frame_done(stream, frame, t0)

        def end_batch(self) -> None:
            self.timing.end_batch()

    return TimedSink()


def stage_block(run: Dict[str, Any], app_metrics: Dict[str, Any], launch_parts: Dict[str, Any]) -> Dict[str, Any]:
    """A repetition's per-stage times, ms per frame: ``feeder`` (the decode/feeder thread: NVDEC + ring copies; its
    CPU is what the issue's lever names), the app's stages (mean, p50, p99 wall; CPU share per frame), the launch's
    parts per batch and the GPU's own times."""
    out: Dict[str, Any] = {"feeder": {"wall_ms": run["stage_wall_ms_per_frame"].get("decode"),
                                      "cpu_ms": run["stage_cpu_ms_per_frame"].get("decode")}}
    for name, d in (app_metrics.get("latency_ms", {}).get("stages") or {}).items():
        if d:
            out[name] = {"mean_ms": d["mean_ms"], "p50_ms": d["p50_ms"], "p99_ms": d["p99_ms"],
                         "cpu_ms": d["cpu_mean_ms"]}
    out["launch_parts_per_batch"] = launch_parts
    out["gpu_ms"] = dict(run.get("stage_gpu_ms_per_frame") or {})
    out["process_cpu_ms"] = run.get("process_cpu_ms_per_frame")
    return out


__all__ = ["BenchTask", "FRAME_ORDERS", "app_timed", "app_timed_sink", "decode_alone", "decode_alone_feed",
           "decode_alone_procs", "decode_rate", "encode_alone", "encode_frame", "feeder_waits", "host_frames",
           "open_group", "open_sources", "source_label", "stage_block"]
