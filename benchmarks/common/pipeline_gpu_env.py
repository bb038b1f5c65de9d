"""What every measurement of one ``benchmarks/gpu_pipeline/pipeline_gpu.py`` run shares (:class:`Env`: torch, device,
sessions, decoder module, stream files), the batch sizes of a point, the CUDA-graph capture before a point, and the
device-pool stand-in run.  Split out of the script (it keeps the matrix and the report's inputs)."""

import json
import threading
from pathlib import Path
from typing import Any, Dict, List, Optional

from benchmarks.common.pipeline_gpu_plan import base_model, rows_per_frame
from jetforge.apps.pipeline.batching import DEFAULT_BUCKETS

MAX_BATCH = 64  # the largest batch (and CUDA graph) of a pipeline point
APP_BUCKETS = DEFAULT_BUCKETS + (64,)  # the app's batch sizes (a CUDA graph each), and 64 for --device-pool
FINE_BUCKETS = (1, 2, 4, 8, 12, 16, 20, 24, 28, 32, 64)  # every 4 from 8 to 32 (variant feed-pairs-fine4)
BUCKETS = tuple(sorted(set(APP_BUCKETS) | set(FINE_BUCKETS)))  # every size some variant pads to: captured first
STREAMS = {"classify": "people720.mp4", "people": "people720.mp4"}  # one file opened N times: a small carry
SSD_THRESHOLD = 0.5  # the SSD heads' score threshold (people and its tiles)


def log(*parts: Any) -> None:
    print(*parts, flush=True)


class Env:
    """What every measurement of one run shares: torch, device, sessions, decoder module, stream files."""

    def __init__(self, args: Any, carry: Path) -> None:
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
        # people-tilesN is the people model run with tiles: its module, contract, stream; a session of its own (its
        # CUDA graphs are of 1 + N^2 rows a frame)
        self.streams = {m: carry / "streams" / STREAMS[base_model(m)] for m in args.models}
        self.keep = keep_hook(torch, self.device, nonblocking=False)  # the device-pool stand-in's frames
        loaded = load_models(carry / "assets", sorted({base_model(m) for m in args.models}))
        self.models = {m: loaded[base_model(m)] for m in args.models}
        self.sessions = {m: open_torch_session(mod, c, self.device) for m, (mod, c, _) in self.models.items()}
        self.pre_kind: Dict[str, str] = {}
        self.scratch = Path(args.scratch)
        self.scratch.mkdir(parents=True, exist_ok=True)
        self._sink_lock = threading.Lock()
        self.captured: Dict[int, Any] = {}  # session id -> buckets whose CUDA graphs exist
        self.host: Dict[str, Any] = {}  # the host CPU (model, usable cores), next to every repetition
        self._decoders: Dict[Any, Any] = {}  # (SSD spec, rows) -> the app's queued GPU decoder, made once

    def ops(self, model: str, n: int, nonblocking: bool, per_stream: int = 1, host_decode: bool = False) -> Any:
        """The batch ops of one point: the SSD's boxes decoded as the app on a TensorRT engine decodes them (the kernel
        queued behind the model), or with ``host_decode`` on the host from the raw outputs (variants ending
        ``-hostdecode``)."""
        from benchmarks.common.pipeline_gpu_ops import ClassifyHead, SsdHead, TorchStreamOps

        _, contract, spec = self.models[model]
        rows = rows_per_frame(model)
        batch = batch_of(n, per_stream, rows)
        if rows > 1:
            from benchmarks.common.pipeline_gpu_tiles import tiled_ops

            decoder = self._ssd_decoder(spec, host_decode, bucket(batch) * rows)
            return tiled_ops(self, model, batch, nonblocking, SSD_THRESHOLD, decoder)
        pre = self._preprocessor(model, contract, batch)
        if model == "classify":
            from jetforge.apps.labels import load_labels

            head: Any = ClassifyHead(self.torch, load_labels("imagenet"))
        else:
            head = SsdHead(spec, contract, (720, 1280), threshold=SSD_THRESHOLD,
                           gpu_decoder=self._ssd_decoder(spec, host_decode, MAX_BATCH), torch=self.torch)
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

    def _ssd_decoder(self, spec: Any, host_decode: bool, rows: int) -> Optional[Any]:
        """The app's GPU decoding of the SSD's boxes (``QueuedSsdDecoder``, batches of up to ``rows`` output rows), or
        None: decoded on the host (``-hostdecode``, a dry run, or a decoder that cannot be made here: logged, and each
        point records which in ``ssd_decode``)."""
        if self.args.dry_run or host_decode:
            return None
        key = (id(spec), int(rows))  # one per size for the whole run: every batch of a point is collected by its end
        if key not in self._decoders:
            try:
                from jetforge.vision.ssd_gpu import QueuedSsdDecoder

                self._decoders[key] = QueuedSsdDecoder(spec, rows, score_threshold=SSD_THRESHOLD)
            except Exception as err:
                log("GPU SSD decoder unavailable (%s: %s); host decode" % (type(err).__name__, err))
                self._decoders[key] = None
        return self._decoders[key]

    def event_sink(self) -> Any:
        """Render off: events only, as JSON lines in the scratch folder (not returned: size)."""
        path = self.scratch / "events.jsonl"
        handle = open(str(path), "w", encoding="utf-8")

        def write(s: int, frame: Any, event: Dict[str, Any], host: Any) -> None:
            handle.write(json.dumps(event, default=_json_default) + "\n")

        return write


def _json_default(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else str(value)


def batch_of(n: int, per_stream: int = 1, rows_per_frame: int = 1) -> int:
    """The pipeline's batch for N streams: N x frames per stream, at most 32 (64 with four frames a stream); a frame
    of several input rows (tiles) as the app batches it: at most 32 rows once padded (2x2 tiles: 4 frames)."""
    if rows_per_frame > 1:
        from jetforge.apps.pipeline.gpu_app import default_max_batch

        return default_max_batch(n * per_stream, rows_per_frame)
    return min(n * per_stream, 32 if per_stream < 4 else MAX_BATCH)


def bucket(n: int) -> int:
    from jetforge.apps.pipeline.batching import bucket_for

    return bucket_for(min(n, MAX_BATCH), APP_BUCKETS)


def capture_graphs(env: "Env", session: Any, contract: Any, upto: int, rows_per_frame: int = 1) -> None:
    """Capture the CUDA graph of every bucket up to ``upto`` before a run: a partial batch (a batch timeout, the end
    of a stream) needs a smaller bucket, and capturing one while the decode threads make CUDA calls is unsafe
    (torch captures in the global mode: other threads' unsafe calls fail, NVDEC's among them).  The device-pool
    point, which hung in both H200 runs that reached it, captured its first session's missing buckets that way.
    ``rows_per_frame``: a bucket of frames is that many input rows (tiles)."""
    done = env.captured.setdefault(id(session), set())
    for b in BUCKETS:
        if b > upto or b in done:
            continue
        x = env.torch.zeros(b * rows_per_frame, 3, contract.height, contract.width, device=env.device)
        for _ in range(2):
            session.infer_tensors({session.inputs[0].name: x})
        done.add(b)
    if env.device == "cuda":
        env.torch.cuda.synchronize()
        live = {key[0][1][0] for key in session.policy.live_keys}  # shape_key: (("input", shape),)
        lost = sorted(b * rows_per_frame for b in done if b * rows_per_frame not in live)
        if lost or session.policy.status != "on":
            raise RuntimeError("the CUDA graphs of batches %s are not live (graphs %s, %d captures): a run would "
                               "capture mid-stream, next to NVDEC" % (lost, session.policy.status,
                                                                      session.policy.captures))


def device_pool_run(env: "Env", model: str, n: int, devices: int) -> Dict[str, Any]:
    """The GPU+DLA scheduler with ``devices`` CUDA sessions of one model standing in for a Jetson's engines."""
    from benchmarks.common.pipeline_gpu_ops import ClassifyHead, PooledTorchOps, TorchNv12Preprocess, open_torch_session

    from benchmarks.common.pipeline_gpu_measure import open_sources
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


__all__ = ["APP_BUCKETS", "BUCKETS", "FINE_BUCKETS", "Env", "MAX_BATCH", "SSD_THRESHOLD", "STREAMS", "batch_of", "bucket", "capture_graphs",
           "device_pool_run"]
