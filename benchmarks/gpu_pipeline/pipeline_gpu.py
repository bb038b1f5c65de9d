"""The GPU video path against the hardware bound (issue 15): NVDEC -> GPU preprocessing -> batched CUDA-graph
inference -> events (render off) or CPU encoder workers (render on), for 1/4/16/32 streams of 720p H.264.

Three steps, each one command:

    .venv/bin/python benchmarks/gpu_pipeline/pipeline_gpu.py --prep     # here: streams + wheel + weights -> build/gpu_pipeline/
    .venv/bin/python benchmarks/gpu_pipeline/pipeline_gpu.py --dry-run  # here: the whole script on the CPU (FakeNvDecoder)
    python3 benchmarks/gpu_pipeline/pipeline_gpu.py                     # the H200 (one device call, carry build/gpu_pipeline)

Measured in the same run, per model (MobileNetV2 classify; SSDLite person detector) and stream count N:
* model alone at the pipeline's batch (device tensors, CUDA graph, no copies), decode alone of the same N streams
  (NVDEC, one thread per stream), encode alone of the CPU encoder pool (8 workers);
* the pipeline, render off (events only) and on (annotated MP4 per stream through the encoder pool): aggregate FPS,
  per-stream p50/p99 latency (decode -> event), wall/CPU/GPU ms per stage per frame, CPU cores per 30-FPS stream
  (process CPU seconds from getrusage per frame x 30), CPU-ms per encoded frame;
* the bound: the slower of model-alone and decode-alone (render on: also encode-alone), and the goals' ratios.

Writes ``<device>_<date>_<tag>.json``, ``.txt`` (the table) and ``.png`` under $OUT (else this study's ``results/``;
a dry run: ``pipeline_gpu_dry_run.*`` in /tmp/jf_pipeline_gpu_dry_run).
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CARRY = ROOT / "build" / "gpu_pipeline"
WHEEL = "pynvvideocodec-2.2.4-cp312-cp312-manylinux_2_28_x86_64.whl"
STREAMS = {"classify": "people720.mp4", "people": "people720.mp4"}  # one file opened N times: a small carry
GOALS = {"render_off_ratio": 0.9, "render_on_ratio": 0.8, "cores_per_30fps_stream": 0.1}
SCHEMA = 1
# How the pipeline's host side runs, measured side by side (the first H200 runs: 0.88x at 1 stream, 0.22x at 16):
# nonblocking: decoded-frame copies and the launch path on non-blocking CUDA streams ordered by events (instead of
# torch's legacy default stream, which serialises with the decoders' streams); switch_ms: Python's GIL switch
# interval (default 5 ms: a thread waking from a GIL-releasing call may wait that long behind 16 decode threads);
# per_stream: frames of one stream a batch may take (1 stream: two frames per batch halve the per-batch host work).
# keep: how a decoded frame becomes an owned copy: "torch" (from_dlpack + clone, tens of microseconds of Python a
# frame) or "ring" (jetforge's DeviceFrameRing: two cudaMemcpy2DAsync into a ring slot, what `jetforge app` uses).
VARIANTS = {
    "legacy": {"nonblocking": False, "switch_ms": None, "per_stream": 1, "keep": "torch"},
    "nonblocking": {"nonblocking": True, "switch_ms": None, "per_stream": 1, "keep": "torch"},
    "nb-gil": {"nonblocking": True, "switch_ms": 0.5, "per_stream": 1, "keep": "torch"},
    "nb-gil-pairs": {"nonblocking": True, "switch_ms": 0.5, "per_stream": 2, "keep": "torch"},
    "ring-gil": {"nonblocking": True, "switch_ms": 0.5, "per_stream": 1, "keep": "ring"},
    "ring-gil-pairs": {"nonblocking": True, "switch_ms": 0.5, "per_stream": 2, "keep": "ring"},
    # demux + decode in PyNvVideoCodec's own native thread, frames fetched 4 at a time (NvThreadedSource)
    "threaded-pairs": {"nonblocking": True, "switch_ms": 0.5, "per_stream": 2, "keep": "ring", "source": "threaded"},
    # four frames of a stream per batch: batches up to 64 (a 64 CUDA graph), a quarter of the launch work per frame
    "ring-gil-quads": {"nonblocking": True, "switch_ms": 0.5, "per_stream": 4, "keep": "ring"},
    # decode in worker processes (ThreadedDecoder per stream, `workers` streams each), frames handed over through
    # CUDA IPC rings; this process keeps one feeder thread (IpcDecodeGroup): no per-frame decode work under its GIL
    "ipc-pairs": {"nonblocking": True, "switch_ms": 0.5, "per_stream": 2, "keep": "ring", "source": "ipc",
                  "workers": 4},
    "ipc2-pairs": {"nonblocking": True, "switch_ms": 0.5, "per_stream": 2, "keep": "ring", "source": "ipc",
                   "workers": 2},
    "ipc-quads": {"nonblocking": True, "switch_ms": 0.5, "per_stream": 4, "keep": "ring", "source": "ipc",
                  "workers": 4},
    # ThreadedDecoder sources as in threaded-pairs, but ONE feeder thread reads all of them (SourceFeedGroup), and
    # their rings wait for the copies once per fetch of 4 frames instead of once per frame
    "feed-pairs": {"nonblocking": True, "switch_ms": 0.5, "per_stream": 2, "keep": "ring", "source": "feed"},
    # what `jetforge app --decode gpu` does (gpu_app.decode_layout): ipc-pairs, feed-pairs or threaded-pairs
    "auto": {"nonblocking": True, "switch_ms": 0.5, "per_stream": 2, "keep": "ring", "source": "auto"},
}
MAX_BATCH = 64  # the largest batch (and CUDA graph) of a pipeline point
BUCKETS = (1, 2, 4, 8, 16, 32, 64)
# The H200 runs of 2026-12-01 (results/nvidia-h200_2026-12-01_host-variants{1,2,3}.json): torch's
# non-blocking streams did not help (0.19x at 16 streams vs 0.25x legacy: the launch thread waits for the GIL, not
# for the GPU); owned copies without torch + a 0.5 ms GIL switch interval + two frames a stream per batch did (1 stream
# 1.00x, 16: 0.47x); PyNvVideoCodec's ThreadedDecoder on top (no per-packet Python) took 16 streams to 0.68x and 4 to
# 0.98x, 1 stream staying at 1.00x.  The decode-layouts matrix (results/nvidia-h200_2026-12-01_decode-layouts.json): one feeder thread for all
# streams (feed-pairs) 0.83x at 16 streams; the app now does that from 2 streams, and so does the default here.
DEFAULT_VARIANT = "auto"

sys.path.insert(0, str(ROOT))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import result_name, use_checkout  # noqa: E402

use_checkout()


def log(*parts: Any) -> None:
    print(*parts, flush=True)


def install_wheel(carry: Path) -> None:
    """The device has no PyNvVideoCodec: install the carried wheel into /tmp/site (no index, no deps)."""
    try:
        import PyNvVideoCodec  # noqa: F401
        return
    except ImportError:
        pass
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--target", "/tmp/site", str(carry / WHEEL)], check=True)
    sys.path.insert(0, "/tmp/site")
    import importlib

    importlib.invalidate_caches()


def run_gpu_tests(args: argparse.Namespace, out: Path) -> Dict[str, Any]:
    """F2's kernel tests (marked gpu) first, with their own time limit; the log goes to $OUT."""
    if not args.gpu_tests:
        return {"skipped": True}
    t0 = time.perf_counter()
    env = dict(os.environ)
    probe = subprocess.run([sys.executable, "-P", "-c", "import jetforge.cli"], cwd="/tmp", capture_output=True)
    if probe.returncode != 0:  # a plain checkout: install it where the test process finds it (no deps, no index)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--target", "/tmp/jf", str(ROOT)], check=True, capture_output=True)
        env["PYTHONPATH"] = os.pathsep.join(["/tmp/jf", "/tmp/site", env.get("PYTHONPATH", "")])
    # -P: the checkout's root is not put on sys.path, so `jetforge` is the installed package, not its root folder
    cmd = [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu"] + args.gpu_tests.split()
    try:
        proc = subprocess.run(cmd, cwd=str(ROOT), capture_output=True, text=True, timeout=args.gpu_tests_timeout,
                              env=env)
        text, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as err:
        text, rc = "TIMEOUT after %ss\n%s" % (args.gpu_tests_timeout, err.stdout or ""), 124
    (out / "gpu_tests.log").write_text(text if isinstance(text, str) else text.decode("utf-8", "replace"))
    tail = text.strip().splitlines()[-1:] if isinstance(text, str) else []
    log("gpu tests: rc=%d, %s (%.0f s)" % (rc, tail[0] if tail else "", time.perf_counter() - t0))
    return {"returncode": rc, "summary": tail[0] if tail else "", "seconds": time.perf_counter() - t0}


# ------------------------------------------------------------------------------------------------- measurements
def open_sources(paths: List[Path], n: int, codec: Any, keep: Any, gpu_id: int = 0,
                 threaded: bool = False, ring_slots: int = 16, defer_sync: bool = False) -> List[Any]:
    """N looping NVDEC sources (stream files reused round robin), each primed: decoder start-up is not timed.
    ``keep``: one hook for all, or "ring" (a DeviceFrameRing per source); ``threaded``: NvThreadedSource."""
    from jetforge.apps.video.sources.gpu.device_ring import DeviceFrameRing
    from jetforge.apps.video.sources.gpu.nvdec import NvDecSource
    from jetforge.apps.video.sources.gpu.nvdec_threaded import NvThreadedSource

    kind = NvThreadedSource if threaded else NvDecSource
    sources = [kind(paths[s % len(paths)], gpu_id=gpu_id, stream=s, codec_module=codec, loop=True,
                    keep=DeviceFrameRing(ring_slots, defer_sync) if keep == "ring" else keep) for s in range(n)]
    for src in sources:
        src.prime()
    return sources


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
    frames = sum(counts)
    return {"streams": n, "frames": frames, "fps": frames / wall, "cpu_ms_per_frame": 1000.0 * cpu / max(1, frames)}


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
    return {"streams": n, "frames": sink.frames, "fps": sink.frames / wall, "workers": group.workers,
            "cpu_ms_per_frame": 1000.0 * cpu / max(1, sink.frames)}


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


def _source_label(v: Dict[str, Any]) -> str:
    if v.get("source") == "ipc":
        return "worker processes (%d streams each, ThreadedDecoder) -> CUDA IPC rings" % v["workers"]
    if v.get("source") == "threaded":
        return "ThreadedDecoder, one thread per stream"
    if v.get("source") == "feed":
        return "ThreadedDecoder per stream, one feeder thread for all, one copy wait per fetch"
    return "core decoder, one thread per stream"


def encode_alone(frames_nv12: List[Any], width: int, height: int, workers: int, streams: int, seconds: float,
                 out_dir: Path) -> Dict[str, Any]:
    """The CPU encoder pool alone: frames submitted round robin over ``streams`` for ``seconds``, then closed."""
    from jetforge.apps.video.sinks.encode_pool import EncoderPool

    pool = EncoderPool(out_dir, width, height, 30.0, workers=workers)
    pool.wait_ready()  # process start-up is not encoding time
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        pool.submit(n % streams, frames_nv12[n % len(frames_nv12)], {"label": "encode-alone %d" % n})
        n += 1
    results = pool.close()
    wall = time.perf_counter() - t0
    cpu = sum(r["cpu_s"] for r in results)
    return {"workers": workers, "streams": streams, "frames": n, "fps": n / wall,
            "cpu_ms_per_encoded_frame": 1000.0 * cpu / max(1, n)}


def pipeline_run(env: "Env", model: str, n: int, render: bool, variant: str) -> Dict[str, Any]:
    """The whole GPU path for N streams of ``model`` run the ``variant`` way (:data:`VARIANTS`); render on sends
    every frame to the encoder pool."""
    from jetforge.apps.pipeline.streams import StreamRunOptions, run_streams
    from jetforge.apps.video.sinks.encode_pool import EncoderPool
    from benchmarks.common.pipeline_gpu_ops import keep_hook

    v = VARIANTS[resolve_variant(variant, n)]
    ops = env.ops(model, n, v["nonblocking"], v["per_stream"])
    if v.get("source") == "ipc":
        sources: Any = open_group([env.streams[model]], n, env.args.dry_run, v["workers"], v["per_stream"])
        first = sources.infos[0]
    elif v.get("source") == "feed":
        from jetforge.apps.pipeline.gpu_app import FEED_DEPTH, FEED_RING_SLOTS
        from jetforge.apps.video.sources.gpu.feed_group import SourceFeedGroup

        # as `jetforge app` would: the ring holds the batcher's frames, the batches in flight and one fetch
        sources = SourceFeedGroup(open_sources([env.streams[model]], n, env.codec, keep="ring", threaded=True,
                                               ring_slots=FEED_RING_SLOTS, defer_sync=True), depth=FEED_DEPTH)
        first = vars(sources.sources[0])
    else:
        keep = "ring" if v["keep"] == "ring" else keep_hook(env.torch, env.device, nonblocking=v["nonblocking"])
        sources = open_sources([env.streams[model]], n, env.codec, keep=keep, threaded=v.get("source") == "threaded")
        first = vars(sources[0])
    pool, sink = None, None
    if render:
        pool = EncoderPool(env.scratch / ("%s_%d" % (model, n)), first["width"], first["height"], 30.0,
                           workers=env.args.encoders)
        pool.wait_ready()
        sink = (lambda s, f, e, host: pool.submit(s, host, e))  # noqa: E731
    else:
        sink = env.event_sink()
    batch = batch_of(n, v["per_stream"])
    opts = StreamRunOptions(max_batch=batch, batch_timeout_s=env.args.batch_timeout_ms / 1000.0, buckets=BUCKETS,
                            time_limit_s=env.args.seconds, per_stream=v["per_stream"], depth=max(2, v["per_stream"]))
    switch = sys.getswitchinterval()
    if v["switch_ms"]:
        sys.setswitchinterval(v["switch_ms"] / 1000.0)
    try:
        result = run_streams(sources, ops, opts, sink=sink, render=render)
    finally:
        sys.setswitchinterval(switch)
        t_drain = time.perf_counter()
        enc = pool.close() if pool is not None else []  # render on: the frames still queued get encoded here
        drain_s = time.perf_counter() - t_drain
        for src in ([sources] if hasattr(sources, "feed") else sources):
            src.close()
    row = result.summary()
    if render:  # end to end = until the last frame is encoded and the files are joined, not until it is queued
        row["fps_until_queued"], row["encoder_drain_s"] = row["fps"], drain_s
        row["fps"] = row["frames"] / (row["wall_s"] + drain_s)
    row.update({"model": model, "render": render, "preprocess": getattr(ops.pre, "kind", env.pre_kind[model]),
                "variant": _variant_label(variant, n), "max_batch": batch, "per_stream": v["per_stream"],
                "keep": v["keep"],
                "source": _source_label(v),
                "gil_switch_interval_ms": v["switch_ms"] or 1000.0 * switch,
                "cuda_streams": "non-blocking + events" if v["nonblocking"] else "legacy default stream",
                "launch_parts_ms_per_batch": ops.launch_parts(),
                "colour": "%s %s range" % (first["matrix"], "full" if first["full_range"] else "limited")})
    if enc:
        row["encoded_frames"] = sum(r["frames"] for r in enc)
        row["cpu_ms_per_encoded_frame"] = 1000.0 * sum(r["cpu_s"] for r in enc) / max(1, row["encoded_frames"])
    return row


class Env:
    """What every measurement of one run shares: torch, device, sessions, decoder module, stream files."""

    def __init__(self, args: argparse.Namespace, carry: Path) -> None:
        import torch

        from benchmarks.common.pipeline_gpu_ops import keep_hook, load_models, open_torch_session

        self.args, self.torch = args, torch
        self.device = "cpu" if args.dry_run else "cuda"
        if args.dry_run:
            torch.set_num_threads(1)  # the shared CI/dev CPU: no oversubscription
        if args.dry_run:
            from tests.standins.fake_nvdec import FakeNvDecoder

            self.codec: Any = FakeNvDecoder
        else:
            from jetforge.apps.video.sources.gpu.nvdec import load_pynvvideocodec

            self.codec = load_pynvvideocodec()
        self.streams = {m: carry / "streams" / STREAMS[m] for m in args.models}
        self.keep = keep_hook(torch, self.device, nonblocking=False)  # the device-pool stand-in's frames
        self.models = load_models(carry / "assets", args.models)
        self.sessions = {m: open_torch_session(mod, c, self.device) for m, (mod, c, _) in self.models.items()}
        self.pre_kind: Dict[str, str] = {}
        self.scratch = Path(args.scratch)
        self.scratch.mkdir(parents=True, exist_ok=True)
        self._sink_lock = threading.Lock()
        self.captured: Dict[int, Any] = {}  # session id -> buckets whose CUDA graphs exist

    def ops(self, model: str, n: int, nonblocking: bool, per_stream: int = 1) -> Any:
        from benchmarks.common.pipeline_gpu_ops import ClassifyHead, SsdHead, TorchStreamOps

        _, contract, spec = self.models[model]
        batch = batch_of(n, per_stream)
        pre = self._preprocessor(model, contract, batch)
        if model == "classify":
            from jetforge.apps.labels import load_labels

            head: Any = ClassifyHead(self.torch, load_labels("imagenet"))
        else:
            head = SsdHead(spec, contract, (720, 1280), threshold=0.5, gpu_decoder=self._ssd_decoder(spec, batch),
                           torch=self.torch)
        return TorchStreamOps(self.torch, self.sessions[model], pre, head, self.device, nonblocking=nonblocking)

    def _preprocessor(self, model: str, contract: Any, batch: int) -> Any:
        from benchmarks.common.pipeline_gpu_ops import F2Preprocess, TorchNv12Preprocess

        if not self.args.dry_run and not self.args.torch_preprocess:
            try:
                pre = F2Preprocess(self.torch, contract, MAX_BATCH, self.device)
                self.pre_kind[model] = "nvrtc-kernel"
                return pre
            except Exception as err:  # the kernel package missing or failing: measured with the fallback, said so
                log("F2 preprocessing kernel unavailable (%s: %s); torch fallback" % (type(err).__name__, err))
        self.pre_kind[model] = "torch-fallback"
        return TorchNv12Preprocess(self.torch, contract, MAX_BATCH, self.device)

    def _ssd_decoder(self, spec: Any, batch: int) -> Optional[Any]:
        if self.args.dry_run or self.args.host_ssd_decode:
            return None
        try:
            from jetforge.vision.ssd_gpu import GpuSsdDecoder

            return GpuSsdDecoder(spec, batch=MAX_BATCH)
        except Exception as err:
            log("GPU SSD decoder unavailable (%s: %s); host decode" % (type(err).__name__, err))
            return None

    def event_sink(self) -> Any:
        """Render off: events only, as JSON lines in the scratch folder (not returned: size)."""
        path = self.scratch / "events.jsonl"
        handle = open(str(path), "w", encoding="utf-8")

        def write(s: int, frame: Any, event: Dict[str, Any], host: Any) -> None:
            handle.write(json.dumps(event, default=_json_default) + "\n")

        return write


def _json_default(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else str(value)


# --------------------------------------------------------------------------------------------------- the matrix
def plan(args: argparse.Namespace) -> List[Tuple[str, Any, Any]]:
    """The points in priority order (the goals first: render off at 1 and 16 streams of MobileNetV2 with their
    bounds, every variant; then one render-on point, then the detector, then 32 streams), as (kind, model, arg)."""
    models, streams, variants = args.models, args.streams, args.variants
    ipc = any(VARIANTS[v].get("source") in ("ipc", "auto") for v in variants)
    steps: List[Tuple[str, Any, Any]] = []
    first = [n for n in (1, 16, 4, 32) if n in streams] + [n for n in streams if n not in (1, 16, 4, 32)]
    first_on = 16 if 16 in streams else max(streams)  # the one render-on point that comes early
    for model in models:
        core = [n for n in first if n != 32] or first[:1]
        steps.append(("model_only", model, sorted({bucket(batch_of(n, VARIANTS[v]["per_stream"]))
                                                   for n in core for v in variants})))
        if model == models[0]:
            steps += [("decode_alone", None, n) for n in core]
            if ipc:
                steps += [("decode_alone_procs", None, n) for n in core]
        steps += [("pipeline", model, (n, False, variants[0])) for n in core]
        if model == models[0] and True in args.render:
            steps.append(("encode_alone", None, max(streams)))
            steps.append(("pipeline", model, (first_on, True, variants[0])))
            steps += [("pipeline", model, (n, True, variants[0])) for n in first if n != first_on and n != 32]
        by_goal = sorted(core, key=lambda n: (n != 16, n))  # 16 streams (the missed goal) first
        steps += [("pipeline", model, (n, False, v)) for n in by_goal for v in variants[1:]]  # comparisons last
    if 32 in streams:  # every variant at 32 streams too (their batch's model-only bound comes with the point)
        steps += [("model_only", models[0], [32]), ("decode_alone", None, 32)]
        steps += [("decode_alone_procs", None, 32)] if ipc else []
        steps += [("pipeline", models[0], (32, False, v)) for v in variants]
    if True in args.render:
        for model in models:
            steps += [("pipeline", model, (n, True, variants[0])) for n in first
                      if model != models[0] or n == 32]
    if 32 in streams:
        steps += [("pipeline", m, (32, False, v)) for m in models[1:] for v in variants]
    if args.device_pool and "classify" in models:
        steps.append(("device_pool", "classify", max(streams)))
    return steps


def resolve_variant(variant: str, n: int) -> str:
    """``auto`` -> the variant `jetforge app --decode gpu` uses for N streams; any other name as it is."""
    if variant != "auto":
        return variant
    from jetforge.apps.pipeline.gpu_app import decode_layout

    return {"processes": "ipc-pairs", "feed": "feed-pairs", "threads": "threaded-pairs"}[decode_layout(n)]


def _variant_label(variant: str, n: int) -> str:
    used = resolve_variant(variant, n)
    return variant if used == variant else "%s=%s" % (variant, used)


def batch_of(n: int, per_stream: int = 1) -> int:
    """The pipeline's batch for N streams: N x frames per stream, at most 32 (64 with four frames a stream)."""
    return min(n * per_stream, 32 if per_stream < 4 else MAX_BATCH)


def bucket(n: int) -> int:
    from jetforge.apps.pipeline.batching import bucket_for

    return bucket_for(min(n, MAX_BATCH), BUCKETS)


def measure(env: Env, args: argparse.Namespace, checkpoint: Any, state: Dict[str, Any]) -> Dict[str, Any]:
    """Every point of :func:`plan` that fits the time budget (``--budget-s``: no point starts after it);
    ``checkpoint(res)`` after each keeps what a time-out would lose; ``state["current"]`` names the point running
    (the wall-limit watchdog records it if it has to cut the run)."""
    res: Dict[str, Any] = {"model_only": {m: {} for m in args.models}, "decode_alone": {}, "pipeline": [],
                           "errors": [], "skipped_for_time": [], "step_seconds": []}
    state["res"] = res
    t0 = time.perf_counter()
    for kind, model, arg in plan(args):
        what = "%s %s %s" % (kind, model or "", arg)
        if time.perf_counter() - t0 > args.budget_s:
            res["skipped_for_time"].append(what)
            continue
        state["current"] = what
        t_step = time.perf_counter()
        _guard(res, what, lambda: run_step(env, args, res, kind, model, arg))
        res["step_seconds"].append([what, round(time.perf_counter() - t_step, 2)])  # sizes the next device call
        state["current"] = None
        checkpoint(res)
    if res["skipped_for_time"]:
        log("skipped (time budget %.0f s): %s" % (args.budget_s, "; ".join(res["skipped_for_time"])))
    return res


def run_step(env: Env, args: argparse.Namespace, res: Dict[str, Any], kind: str, model: Any, arg: Any) -> None:
    from benchmarks.common.pipeline_gpu_ops import model_only

    if kind == "model_only":
        for b in arg:
            r = model_only(env.torch, env.sessions[model], env.models[model][1], b, args.model_seconds, env.device)
            res["model_only"][model][str(b)] = r
            log("model alone %-8s batch %2d: %8.1f FPS" % (model, b, r["fps"]))
    elif kind == "decode_alone":
        res["decode_alone"][str(arg)] = r = decode_alone(sorted(set(env.streams.values())), arg, env.codec,
                                                         args.decode_seconds)
        log("decode alone %2d streams: %.1f FPS" % (arg, r["fps"]))
    elif kind == "decode_alone_procs":
        res.setdefault("decode_alone_procs", {})[str(arg)] = r = decode_alone_procs(
            sorted(set(env.streams.values())), arg, args.dry_run, args.decode_seconds)
        log("decode alone %2d streams in %d worker processes: %.1f FPS" % (arg, r["workers"], r["fps"]))
    elif kind == "encode_alone":
        res["encode_alone"] = r = encode_alone(_host_frames(env), 1280, 720, args.encoders, arg, args.encode_seconds,
                                               env.scratch / "enc")
        log("encode alone, %d workers: %.1f FPS, %.2f CPU ms per frame" % (args.encoders, r["fps"],
                                                                           r["cpu_ms_per_encoded_frame"]))
    elif kind == "pipeline":
        n, render, variant = arg
        b = bucket(batch_of(n, VARIANTS[variant]["per_stream"]))
        if str(b) not in res["model_only"][model]:  # its graph and its bound first
            run_step(env, args, res, "model_only", model, [b])
        capture_graphs(env, env.sessions[model], env.models[model][1], b)
        row = pipeline_run(env, model, n, render, variant)
        res["pipeline"].append(row)
        log("pipeline %-8s %2d streams render %-3s %-12s: %8.1f FPS, p99 %s ms, %.3f cores/30fps stream, launch "
            "parts ms/batch %s" % (model, n, "on" if render else "off", variant, row["fps"],
                                   _r(row["latency_p99_ms"]["worst_stream"]), row["cores_per_30fps_stream"],
                                   json.dumps(row["launch_parts_ms_per_batch"])))
    elif kind == "device_pool":
        res["device_pool"] = row = device_pool_run(env, model, arg, args.device_pool)
        log("device pool: %d sessions, %d streams: %.1f FPS, batches per session %s, order kept %s"
            % (args.device_pool, arg, row["fps"], row["batches_per_device"], row["order_ok"]))


def capture_graphs(env: "Env", session: Any, contract: Any, upto: int) -> None:
    """Capture the CUDA graph of every bucket up to ``upto`` before a run: a partial batch (a batch timeout, the end
    of a stream) needs a smaller bucket, and capturing one while the decode threads make CUDA calls is unsafe
    (torch captures in the global mode: other threads' unsafe calls fail, NVDEC's among them).  The device-pool
    point, which hung in both H200 runs that reached it, captured its first session's missing buckets that way."""
    done = env.captured.setdefault(id(session), set())
    for b in BUCKETS:
        if b > upto or b in done:
            continue
        x = env.torch.zeros(b, 3, contract.height, contract.width, device=env.device)
        for _ in range(2):
            session.infer_tensors({session.inputs[0].name: x})
        done.add(b)
    if env.device == "cuda":
        env.torch.cuda.synchronize()


def device_pool_run(env: "Env", model: str, n: int, devices: int) -> Dict[str, Any]:
    """The GPU+DLA scheduler with ``devices`` CUDA sessions of one model standing in for a Jetson's engines."""
    from benchmarks.common.pipeline_gpu_ops import ClassifyHead, PooledTorchOps, TorchNv12Preprocess, open_torch_session

    from jetforge.apps.labels import load_labels
    from jetforge.apps.pipeline.streams import StreamRunOptions, run_streams

    module, contract, _ = env.models[model]
    sessions = [env.sessions[model]] + [open_torch_session(copy_module(module), contract, env.device)
                                        for _ in range(devices - 1)]
    for session in sessions:  # every session, the first too (it lacked buckets: the suspected cause of the hang)
        capture_graphs(env, session, contract, 32)
    pres = [TorchNv12Preprocess(env.torch, contract, 32, env.device) for _ in sessions]
    ops = PooledTorchOps(env.torch, sessions, pres, ClassifyHead(env.torch, load_labels("imagenet")), env.device)
    sources = open_sources([env.streams[model]], n, env.codec, keep=env.keep)
    try:
        result = run_streams(sources, ops, StreamRunOptions(max_batch=min(n, 32), in_flight=devices + 1,
                                                            batch_timeout_s=env.args.batch_timeout_ms / 1000.0,
                                                            time_limit_s=env.args.seconds))
    finally:
        ops.close()
        for src in sources:
            src.close()
    row = result.summary()
    row.update({"model": model, "devices": devices, "batches_per_device": ops.pool.share(),
                "preprocess": "torch-fallback (one per device)"})
    return row


def copy_module(module: Any) -> Any:
    import copy

    return copy.deepcopy(module)


def _guard(res: Dict[str, Any], what: str, fn: Any) -> Any:
    """One failing measurement is recorded and the matrix goes on (one device call must bring back the rest)."""
    try:
        return fn()
    except Exception as err:  # recorded with its type, printed, and counted in the exit status
        import traceback

        res["errors"].append({"what": what, "error": "%s: %s" % (type(err).__name__, err)})
        log("FAILED %s: %s" % (what, traceback.format_exc()))
        return None


def _r(v: Optional[float]) -> str:
    return "-" if v is None else "%.1f" % v


def _host_frames(env: Env) -> List[Any]:
    """30 NV12 720p frames in host memory for the encode-alone run (OpenCV decode: the encoder's input only)."""
    from tests.standins.fake_nvdec import FakeNvDecoder
    from jetforge.apps.video.sources.gpu.nvdec import NvDecSource

    path = next(iter(env.streams.values()))
    with NvDecSource(path, codec_module=FakeNvDecoder, max_frames=30) as src:
        return [f.host_nv12() for f in src]


def main(argv: Any = None) -> int:
    args = parse_args(argv)
    if args.prep:
        from benchmarks.common.pipeline_gpu_prep import prepare

        prepare(CARRY, args.ffmpeg, args.wheel_dir)
        return 0
    from benchmarks.common.pipeline_gpu_report import report, write_outputs

    carry = Path(args.carry)
    default_out = Path("/tmp/jf_pipeline_gpu_dry_run") if args.dry_run else HERE / "results"
    out = Path(os.environ.get("OUT") or default_out)
    out.mkdir(parents=True, exist_ok=True)
    name = "pipeline_gpu_dry_run" if args.dry_run else result_name(args.tag, gpu=True, suffix="")
    t0 = time.perf_counter()
    if not args.dry_run:
        install_wheel(carry)
    tests = run_gpu_tests(args, out) if not args.dry_run else {"skipped": "dry run"}
    state: Dict[str, Any] = {"res": None, "current": "start-up", "info": {}}

    def checkpoint(res: Dict[str, Any]) -> None:
        partial = {"partial": True, "machine": state["info"], "gpu_tests": tests, "results": res,
                   "variants": {v: VARIANTS[v] for v in args.variants}}
        (out / (name + ".json")).write_text(json.dumps(partial, indent=1, default=str))  # replaced at the end

    start_watchdog(args.wall_limit_s - (time.perf_counter() - t0), state, checkpoint)
    env = Env(args, carry)
    state["info"] = machine(env)
    res = measure(env, args, checkpoint, state)
    write_outputs(report(res, args, tests, state["info"], time.perf_counter() - t0), out, name)
    return 1 if res["errors"] else 0


def start_watchdog(seconds: float, state: Dict[str, Any], checkpoint: Any) -> None:
    """The script's own wall limit: after ``seconds`` the partial JSON records the point that was cut and the
    process exits at once (os._exit: a hung decoder, CUDA call or thread cannot keep a device call waiting)."""
    if seconds <= 0:
        return

    def fire() -> None:
        res = state.get("res") or {"pipeline": [], "errors": []}
        res.setdefault("errors", []).append({"what": state.get("current"), "error": "cut by the script's wall "
                                             "limit (--wall-limit-s)"})
        log("WALL LIMIT %.0f s reached during %s: partial results kept, exiting" % (seconds, state.get("current")))
        try:
            checkpoint(res)
        finally:
            os._exit(3)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()


def machine(env: Env) -> Dict[str, Any]:
    from jetforge.apps.pipeline import machine_info

    info = machine_info()
    info["torch"] = env.torch.__version__
    if env.device == "cuda":
        info["gpu"] = env.torch.cuda.get_device_name(0)
    info["decoder"] = getattr(env.codec, "__version__", "?")
    return info


def parse_args(argv: Any) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prep", action="store_true", help="make the carry folder here (streams, wheel, weights)")
    ap.add_argument("--dry-run", action="store_true", help="run everything on the CPU with the fake decoder")
    ap.add_argument("--carry", default=str(CARRY))
    ap.add_argument("--ffmpeg", default=None, help="ffmpeg with libx264 for --prep (default: imageio-ffmpeg's)")
    ap.add_argument("--wheel-dir", default="/tmp/whl", help="folder with the PyNvVideoCodec wheel for --prep")
    ap.add_argument("--models", default="classify,people", type=lambda s: s.split(","))
    ap.add_argument("--streams", default="1,4,16,32", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--render", default="off,on", type=lambda s: [x == "on" for x in s.split(",")])
    ap.add_argument("--seconds", type=float, default=3.0, help="timed seconds per pipeline point")
    ap.add_argument("--decode-seconds", type=float, default=3.0)
    ap.add_argument("--encode-seconds", type=float, default=4.0)
    ap.add_argument("--model-seconds", type=float, default=0.5)
    ap.add_argument("--budget-s", type=float, default=140.0, help="no new point starts after this many seconds "
                    "of measuring (the points run in priority order)")
    ap.add_argument("--encoders", type=int, default=8, help="CPU encoder worker processes (render on)")
    ap.add_argument("--batch-timeout-ms", type=float, default=4.0, help="batched-push-timeout")
    ap.add_argument("--nonblocking", action="store_true", help="same as --variants nonblocking")
    ap.add_argument("--variants", default=None, type=lambda s: s.split(","),
                    help="how the host side runs, each measured at every render-off point: %s (default: %s)"
                         % (", ".join("%s %s" % (k, v) for k, v in VARIANTS.items()), DEFAULT_VARIANT))
    ap.add_argument("--wall-limit-s", type=float, default=0.0,
                    help="exit (code 3) after this many seconds of the whole script, keeping the partial JSON")
    ap.add_argument("--torch-preprocess", action="store_true", help="use the torch fallback, not the NVRTC kernel")
    ap.add_argument("--host-ssd-decode", action="store_true", help="SSD decode + NMS on the host, not the GPU")
    ap.add_argument("--device-pool", type=int, default=0,
                    help="sessions of MobileNetV2 standing in for GPU + DLA engines in the scheduler run (0: skip; "
                         "it hung on the H200 in both runs that reached it: not in the default matrix)")
    ap.add_argument("--gpu-tests", default="", help="pytest paths of GPU tests to run first (F2's kernel tests run "
                    "from benchmarks/gpu_pipeline/gpu_kernels.py, before this script)")
    ap.add_argument("--gpu-tests-timeout", type=float, default=120.0)
    ap.add_argument("--scratch", default="/tmp/jf_pipeline_gpu")
    ap.add_argument("--tag", default="gpu-path", help="the variant part of the result name "
                                                       "(<device>_<date>_<tag>.{json,txt,png}; default gpu-path)")
    args = ap.parse_args(argv)
    args.variants = args.variants or (["nonblocking"] if args.nonblocking else [DEFAULT_VARIANT])
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        ap.error("unknown variant(s) %s; known: %s" % (", ".join(unknown), ", ".join(VARIANTS)))
    if args.dry_run:
        args.streams = [min(n, 3) for n in args.streams[:2]] if args.streams != [1, 4, 16, 32] else [1, 3]
    return args


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown: decoder/CUDA objects or a stray thread must not hold a device call
