"""NVDEC beside a model on the same GPU, for ``benchmarks/gpu_pipeline/pipeline_gpu.py --decode-beside``: how much
the two engines slow each other, and whether the host's side of running the model is what slows NVDEC.

Why two forms: on H100s NVDEC of 16 streams fell from ~9,700 FPS alone to ~8,600 beside MobileNetV2 (results of
2026-12-07), which holds the pipeline at 0.89x of min(model alone, NVDEC alone).  Two causes fit that number: the
GPU (the decoders' own kernels and copies queue behind the model's on the SMs and copy engines) or the host (the
model's launch thread takes the GIL and a core hundreds of times a second, beside 16 decoder threads and the thread
reading them).  :func:`decode_beside_model` runs the model as the app does, one batch a call;
:func:`decode_beside_model_graph` runs the same GPU work from one CUDA graph of ``repeats`` batches, replayed and
waited for a few dozen times a second, so that the host is all but idle.  NVDEC as slow beside both: the GPU; NVDEC
back near its rate alone beside the graph: the host, which code can change.

The same code runs on the CPU for ``--dry-run`` (no streams, no graphs).
"""

import contextlib
import threading
import time
from typing import Any, Callable, Dict

from benchmarks.common.pipeline_gpu_ops import back_to_back, sync_device

GRAPH_REPEATS = 16  # batches per graph replay: ~40 ms of MobileNetV2 at batch 32 on an H100, ~25 host calls a second


def decode_beside_model(torch: Any, session: Any, contract: Any, batch: int, device: str,
                        decode: Callable[[], Dict[str, Any]]) -> Dict[str, Any]:
    """``decode()`` (NVDEC alone, timed by itself) while a thread runs the model back to back at ``batch`` on device
    tensors, as :func:`model_only` does, until it returns: both engines' rates when they share the GPU.

    The model runs on a non-blocking stream of its own and waits on that stream only, as the app's launch thread
    does.  On the legacy default stream with a device-wide wait (the first form, run once on an H100 on 2026-12-07:
    NVDEC 2590 FPS beside MobileNetV2 against 9558 alone) every decoder's work on the default stream queued behind
    each batch: that measured the harness's stream coupling, not the engines."""
    x = torch.randn(batch, 3, contract.height, contract.width, device=device)
    feeds = {session.inputs[0].name: x}
    side = torch.cuda.Stream(device) if device.startswith("cuda") else None
    sync_device(torch, device)
    stop, counts = threading.Event(), {"n": 0, "wall": 0.0}

    def run_model() -> None:
        context = torch.cuda.stream(side) if side is not None else contextlib.nullcontext()
        with context:
            session.infer_tensors(feeds)  # warm on this stream
            if side is not None:
                side.synchronize()
            counts["n"], counts["wall"] = back_to_back(session, feeds, lambda _elapsed: stop.is_set(),
                                                        side.synchronize if side is not None else lambda: None)

    r = beside(run_model, decode, stop, "model-beside-decode")
    model_fps = batch * counts["n"] / counts["wall"] if counts["wall"] else 0.0
    return dict(r, batch=batch, model_fps=model_fps, model_stream="non-blocking, its own")


def decode_beside_model_graph(torch: Any, module: Any, contract: Any, batch: int, device: str,
                              decode: Callable[[], Dict[str, Any]], repeats: int = GRAPH_REPEATS) -> Dict[str, Any]:
    """``decode()`` while a thread replays one CUDA graph of ``repeats`` forward passes of ``module`` at ``batch``
    (the session's module on the device, in its dtype) on a non-blocking stream of its own and waits for each
    replay: the model's GPU work of :func:`decode_beside_model` with the host all but idle (module docstring).

    The graph is captured before ``decode()`` starts (thread-local capture: no decoder runs yet) and freed after."""
    on_gpu = device.startswith("cuda")
    dtype = next(module.parameters()).dtype
    x = torch.randn(batch, 3, contract.height, contract.width, device=device, dtype=dtype)
    side = torch.cuda.Stream(device) if on_gpu else None
    graph = None
    with torch.no_grad():
        if on_gpu:
            with torch.cuda.stream(side):
                for _ in range(3):  # warm-up on the capture stream, as torch asks before a capture
                    module(x)
            side.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=side, capture_error_mode="thread_local"):
                for _ in range(repeats):
                    module(x)
            side.synchronize()
    stop, counts = threading.Event(), {"replays": 0, "wall": 0.0}

    def run_model() -> None:
        t0 = time.perf_counter()
        with torch.no_grad(), (torch.cuda.stream(side) if on_gpu else contextlib.nullcontext()):
            while not stop.is_set():
                if graph is not None:
                    graph.replay()
                    side.synchronize()
                else:  # the dry run: the same passes, one call each
                    for _ in range(repeats):
                        module(x)
                counts["replays"] += 1
        counts["wall"] = time.perf_counter() - t0

    try:
        r = beside(run_model, decode, stop, "model-graph-beside-decode")
    finally:
        del graph
    model_fps = batch * repeats * counts["replays"] / counts["wall"] if counts["wall"] else 0.0
    return dict(r, batch=batch, model_fps=model_fps, repeats=repeats, replays=counts["replays"],
                model_stream="one CUDA graph of %d batches a replay, on a non-blocking stream of its own" % repeats)


def beside(run_model: Callable[[], None], decode: Callable[[], Dict[str, Any]], stop: threading.Event,
           name: str) -> Dict[str, Any]:
    """``decode()`` while ``run_model`` runs in a thread until ``stop`` is set; the thread's own failure is raised
    here, after decode's record is lost with it (a model that failed would otherwise read as one at 0 FPS)."""
    failed: Dict[str, BaseException] = {}

    def guarded() -> None:
        try:
            run_model()
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller
            failed["error"] = err

    worker = threading.Thread(target=guarded, name=name)
    worker.start()
    try:
        r = decode()
    finally:
        stop.set()
        worker.join()
    if failed:
        raise RuntimeError("the model beside NVDEC failed: %r" % failed["error"]) from failed["error"]
    return r


__all__ = ["GRAPH_REPEATS", "decode_beside_model", "decode_beside_model_graph"]
