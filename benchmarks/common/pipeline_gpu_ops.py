"""The torch side of ``benchmarks/gpu_pipeline/pipeline_gpu.py``: models, the per-batch GPU ops, the model-only measurement.

Benchmark code (torch is on the H200 and here, not on JetPack): the apps' GPU path itself is torch-free
(``jetforge.apps.pipeline.streams`` + ``jetforge.runtime.cuda.kernels``); torch only hosts the model (the PyTorch
session with one CUDA graph per batch size stands in for a TensorRT engine) and, where F2's NVRTC kernel cannot be
made, a torch NV12 -> tensor conversion labelled ``preprocess: torch-fallback`` in the results.

The same code runs on the CPU for ``--dry-run`` (no CUDA events, no pinned memory, the fake decoder's host frames).
"""

import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from jetforge.apps.pipeline.streams import BatchOps

# YUV -> RGB (Kr, Kb) luma weights per matrix: R = Y + 2(1-Kr) Cr, B = Y + 2(1-Kb) Cb, G from Y = Kr R + Kg G + Kb B.
LUMA = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722)}


def load_models(assets: Any, names: Sequence[str]) -> Dict[str, Tuple[Any, Any, Any]]:
    """name -> (torch module, image contract, SSD spec or None), from the carried FP16 state dicts (see --prep)."""
    import json
    from pathlib import Path

    import torch

    out: Dict[str, Tuple[Any, Any, Any]] = {}
    assets = Path(assets)
    if "classify" in names:
        from jetforge.compress.models import build, get_pretrained_spec

        module = build("mobilenet_v2")
        module.load_state_dict(_float_state(torch, assets / "mobilenet_v2_fp16.pt"), strict=True)
        out["classify"] = (module.eval(), get_pretrained_spec("mobilenet_v2").preprocess, None)
    if "people" in names:
        from jetforge.compress.models.ssdlite_mobilenet_v2 import SSDLiteMobileNetV2
        from jetforge.vision.ssd import SSDSpec
        from jetforge.runtime.inputs import Preprocess

        meta = json.loads((assets / "ssdlite_person.json").read_text())
        spec = SSDSpec.from_dict(meta["spec"])
        module = SSDLiteMobileNetV2(num_classes=spec.num_classes, image_size=meta["image_size"],
                                    anchors_per_layer=meta["anchors_per_layer"])
        module.load_state_dict(_float_state(torch, assets / "ssdlite_person_fp16.pt"), strict=True)
        out["people"] = (module.eval(), Preprocess.from_dict(meta["preprocess"]), spec)
    return out


def _float_state(torch: Any, path: Any) -> Dict[str, Any]:
    state = torch.load(str(path), map_location="cpu", weights_only=True)
    return {k: v.float() if v.is_floating_point() else v for k, v in state.items()}


def open_torch_session(module: Any, contract: Any, device: str) -> Any:
    """A CUDA-graph session with a live graph for every batch size the pipeline pads to (``BUCKETS``): captured
    before a run (``capture_graphs``), none is evicted and re-captured in the middle of one."""
    from benchmarks.common.pipeline_gpu_env import BUCKETS
    from jetforge.runtime.session.torch_backend import TorchSession

    shape = ["batch", 3, contract.height, contract.width]
    return TorchSession.from_module(module, input_shapes={"input": shape}, device=device, cuda_graph=True,
                                    max_graphs=len(BUCKETS) + 1, warmup=2)


def model_only(torch: Any, session: Any, contract: Any, batch: int, seconds: float, device: str) -> Dict[str, Any]:
    """Back-to-back inference of one static batch on device tensors (no copies): the model's own throughput."""
    x = torch.randn(batch, 3, contract.height, contract.width, device=device)
    feeds = {session.inputs[0].name: x}
    for _ in range(3):
        session.infer_tensors(feeds)
    sync_device(torch, device)
    n, wall = back_to_back(session, feeds, lambda elapsed: elapsed >= seconds, lambda: sync_device(torch, device))
    return {"batch": batch, "iterations": n, "fps": batch * n / wall, "ms_per_batch": 1000.0 * wall / n}


def back_to_back(session: Any, feeds: Dict[str, Any], done: Callable[[float], bool],
                  wait: Callable[[], None]) -> Tuple[int, float]:
    """Inferences of ``feeds`` back to back, ten between waits, until ``done(elapsed seconds)``: (count, wall s)."""
    n, t0 = 0, time.perf_counter()
    while True:
        for _ in range(10):
            session.infer_tensors(feeds)
        n += 10
        wait()
        elapsed = time.perf_counter() - t0
        if done(elapsed):
            return n, elapsed


def sync_device(torch: Any, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def keep_hook(torch: Any, device: str, nonblocking: bool = False) -> Any:
    """decoded frame -> an owned (H*3/2, W) uint8 tensor on ``device`` (the decoder may reuse its buffers).

    ``nonblocking``: the copy runs on a non-blocking stream of the decode thread and the tensor carries a CUDA event
    (``.ready``) the launch stream waits for, instead of everything on the legacy default stream, which synchronises
    with every decoder's own stream (the suspected limit of the first H200 run at 16 streams; not yet measured)."""
    import threading

    local = threading.local()

    def keep(decoded: Any, width: int, height: int) -> Any:
        if getattr(decoded, "on_host", False):  # the fake decoder (dry run)
            return torch.from_numpy(np.asarray(decoded))
        if not nonblocking:
            return _owned_nv12(torch, decoded, width, height)
        if getattr(local, "stream", None) is None:
            local.stream = torch.cuda.Stream()
        with torch.cuda.stream(local.stream):
            t = _owned_nv12(torch, decoded, width, height)
            t.ready = torch.cuda.Event()
            t.ready.record(local.stream)
        return t

    return keep


def _owned_nv12(torch: Any, decoded: Any, width: int, height: int) -> Any:
    t = torch.from_dlpack(decoded)
    if t.dim() == 3 and t.shape[-1] == 1:
        t = t[..., 0]
    if t.dim() != 2 or tuple(t.shape) != (height * 3 // 2, width):
        t = t.reshape(height * 3 // 2, width)  # NV12 as one (H*3/2, W) plane pair
    return t.clone(memory_format=torch.contiguous_format)


class TorchNv12Preprocess:
    """Fallback: NV12 frames (tensors) -> the contract's normalised NCHW float batch, with torch ops."""

    def __init__(self, torch: Any, contract: Any, max_batch: int, device: str) -> None:
        self.torch, self.c, self.device = torch, contract, device
        self.out = torch.zeros(max_batch, 3, contract.height, contract.width, device=device)
        mean = torch.tensor(contract.mean, dtype=torch.float32, device=device).reshape(1, -1, 1, 1)
        std = torch.tensor(contract.std, dtype=torch.float32, device=device).reshape(1, -1, 1, 1)
        self.a, self.b = contract.scale / std, -mean / std

    def __call__(self, frames: List[Any], padded: int) -> Any:
        self.out[:len(frames)] = self.fit(self.rgb(frames))
        return self.out[:padded]

    def rgb(self, frames: List[Any]) -> Any:
        """The frames' NV12 -> ``(n, 3, H, W)`` float RGB in [0, 255] (chroma nearest, the frames' colour)."""
        torch, F = self.torch, self.torch.nn.functional
        f0 = frames[0]
        h, w = f0.height, f0.width
        nv = torch.stack([_tensor(torch, f.data, self.device) for f in frames]).to(self.device,
                                                                                     non_blocking=True).float()
        y = nv[:, :h, :]
        uv = nv[:, h:, :].reshape(len(frames), h // 2, w // 2, 2).permute(0, 3, 1, 2)
        uv = F.interpolate(uv, size=(h, w), mode="nearest")
        return yuv_to_rgb(torch, y, uv[:, 0], uv[:, 1], f0.matrix, f0.full_range)

    def fit(self, rgb: Any) -> Any:
        """``(n, 3, h, w)`` RGB of any size (whole frames, or a tile cut out of them) -> the contract's normalised
        input: resized, cropped or letterboxed as the contract's geometry for ``(h, w)`` says."""
        torch, F = self.torch, self.torch.nn.functional
        plan = self.c.geometry(tuple(rgb.shape[2:]))
        rgb = F.interpolate(rgb, size=(plan.resized_wh[1], plan.resized_wh[0]), mode="bilinear", align_corners=False)
        if self.c.resize == "short_side_crop":
            y0, x0 = int(-plan.offset_y), int(-plan.offset_x)
            rgb = rgb[:, :, y0:y0 + self.c.height, x0:x0 + self.c.width]
        elif self.c.resize == "letterbox":
            canvas = torch.full((len(rgb), 3, self.c.height, self.c.width), 114.0, device=self.device)
            y0, x0 = int(plan.offset_y), int(plan.offset_x)
            canvas[:, :, y0:y0 + rgb.shape[2], x0:x0 + rgb.shape[3]] = rgb
            rgb = canvas
        if self.c.color == "bgr":
            rgb = rgb.flip(1)
        return rgb * self.a + self.b


def yuv_to_rgb(torch: Any, y: Any, u: Any, v: Any, matrix: str, full_range: bool) -> Any:
    kr, kb = LUMA.get(matrix, LUMA["bt601"])
    kg = 1.0 - kr - kb
    if full_range:
        yy, cb, cr = y, u - 128.0, v - 128.0
    else:
        yy, cb, cr = (y - 16.0) * (255.0 / 219.0), (u - 128.0) * (255.0 / 224.0), (v - 128.0) * (255.0 / 224.0)
    r = yy + 2.0 * (1.0 - kr) * cr
    b = yy + 2.0 * (1.0 - kb) * cb
    g = (yy - kr * r - kb * b) / kg
    return torch.stack([r, g, b], dim=1).clamp_(0.0, 255.0)


class F2Preprocess:
    """F2's fused NVRTC kernel (jetforge.runtime.cuda.kernels.GpuPreprocessor) writing into a torch buffer."""

    def __init__(self, torch: Any, contract: Any, max_batch: int, device: str, rows: Optional[int] = None,
                 fallback: Optional[Any] = None) -> None:
        """``max_batch``: frames a launch takes; ``rows``: the output buffer's rows (default ``max_batch``; more
        where a frame is several rows: tiles); ``fallback``: what runs if the kernel fails (default the torch
        conversion)."""
        from jetforge.runtime.cuda.kernels import GpuPreprocessor  # noqa: F401  (fails here if the package is absent)

        self.torch, self.contract, self.max_batch = torch, contract, max_batch
        self.out = torch.zeros(rows or max_batch, 3, contract.height, contract.width, device=device)
        self.pre: Any = None
        self.kind = "nvrtc-kernel"
        self._fallback = fallback if fallback is not None else TorchNv12Preprocess(torch, contract, max_batch, device)

    def _make(self, matrix: str, full_range: bool) -> Any:
        """The kernel for the streams' colour description (the frames carry it; one per pipeline run)."""
        from jetforge.runtime.cuda.kernels import ColorSpec, GpuPreprocessor

        return GpuPreprocessor(self.contract, batch=self.max_batch, out_dtype="float32", input_format="nv12",
                               color=ColorSpec(matrix, "full" if full_range else "limited"))

    def kernel(self, frames: List[Any]) -> Optional[Any]:
        """The kernel for the frames' colour (made on first use), or None once it failed (then the fallback runs)."""
        if self.kind != "nvrtc-kernel":
            return None
        if self.pre is None:
            try:
                self.pre = self._make(frames[0].matrix, frames[0].full_range)
            except Exception as err:  # NVRTC/driver trouble: measured with the fallback and labelled so
                print("NVRTC preprocessing kernel failed (%s: %s); torch fallback" % (type(err).__name__, err))
                self.kind = "torch-fallback (kernel failed)"
                return None
        return self.pre

    @staticmethod
    def table(frames: List[Any]) -> List[Any]:
        """The kernel's frame table (any keep: torch tensors, ring slots)."""
        from jetforge.runtime.cuda.kernels import Nv12Frame

        return [Nv12Frame(f.y_ptr, f.pitch, f.uv_ptr, f.pitch, f.width, f.height) for f in frames]

    def __call__(self, frames: List[Any], padded: int) -> Any:
        pre = self.kernel(frames)
        if pre is None:
            return self._fallback(frames, padded)
        pre.run(self.table(frames), self.torch.cuda.current_stream().cuda_stream, out_ptr=self.out.data_ptr())
        return self.out[:padded]


class TorchStreamOps(BatchOps):
    """One batch: preprocess (F2 kernel or fallback) -> session (CUDA graph per bucket) -> small D2H -> events."""

    def __init__(self, torch: Any, session: Any, preprocess: Any, head: "Head", device: str,
                 nonblocking: bool = False) -> None:
        self.torch, self.session, self.pre, self.head, self.device = torch, session, preprocess, head, device
        self.cuda = device.startswith("cuda")
        self.name = session.inputs[0].name
        self._gpu = {"preprocess": 0.0, "infer": 0.0, "copy": 0.0}
        # --nonblocking: the launch path on its own non-blocking stream, ordered after each frame's copy by events
        self.stream = torch.cuda.Stream() if nonblocking and self.cuda else None
        # host wall / thread-CPU seconds of each part of a launch: where the launch thread waits (GIL or GPU)
        self._parts = {k: [0.0, 0.0] for k in ("wait_events", "preprocess", "infer", "to_host")}
        self._launches = 0
        self.app_copy_back = True  # render on: the app's BatchCopyBack (see host_frames)
        self._copy_back: Any = None

    def _timed(self, part: str, fn: Any, *args: Any) -> Any:
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return fn(*args)
        finally:
            acc = self._parts[part]
            acc[0] += time.perf_counter() - t0
            acc[1] += time.thread_time() - c0

    def launch_parts(self) -> Dict[str, Dict[str, float]]:
        """Per batch, ms: {part: {"wall": .., "cpu": ..}} (wall much above CPU: the thread waited)."""
        n = max(1, self._launches)
        return {k: {"wall": round(1000.0 * w / n, 4), "cpu": round(1000.0 * c / n, 4)} for k, (w, c) in
                self._parts.items()}

    def _event(self) -> Any:
        if not self.cuda:
            return None
        e = self.torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def launch(self, frames: List[Any], padded: int) -> Any:
        self._launches += 1
        if self.stream is None:
            return self._launch(frames, padded)
        self._timed("wait_events", self._wait_frames, frames)
        with self.torch.cuda.stream(self.stream):
            return self._launch(frames, padded)

    def _wait_frames(self, frames: List[Any]) -> None:
        for f in frames:
            ready = getattr(f.data, "ready", None)
            if ready is not None:
                self.stream.wait_event(ready)

    def _launch(self, frames: List[Any], padded: int) -> Any:
        e0 = self._event()
        x = self._timed("preprocess", self.pre, frames, padded)
        e1 = self._event()
        outs = self._timed("infer", self.session.infer_tensors, {self.name: x})
        e2 = self._event()
        host = self._timed("to_host", self.head.to_host, outs, len(frames))
        e3 = self._event()
        return e0, e1, e2, e3, host

    def finish(self, handle: Any, frames: List[Any]) -> List[Dict[str, Any]]:
        e0, e1, e2, e3, host = handle
        if e3 is not None:
            e3.synchronize()
            self._gpu["preprocess"] += e0.elapsed_time(e1)
            self._gpu["infer"] += e1.elapsed_time(e2)
            self._gpu["copy"] += e2.elapsed_time(e3)
        return self.head.events(host, frames)

    def host_frames(self, handle: Any, frames: List[Any]) -> List[np.ndarray]:
        """Render on: the app's copy back (``BatchCopyBack``: one copy kernel launch and one copy to pinned memory
        a batch) for device NV12 frames of one size; else (``app_copy_back`` off, a torch keep, host frames) the
        batch stacked by torch and copied to pageable memory in one synchronous copy (the benchmark's way until
        2026-12-07, variant ``feed-pairs-stackcopy``)."""
        from jetforge.apps.pipeline.copy_back import BatchCopyBack

        if self.app_copy_back and self.cuda and BatchCopyBack.takes(frames):
            if self._copy_back is None:
                self._copy_back = BatchCopyBack(len(frames))
            return self._copy_back(frames)
        batch = self.torch.stack([_tensor(self.torch, f.data, self.device) for f in frames])
        return list(batch.cpu().numpy())  # one copy back per batch

    def gpu_ms(self) -> Dict[str, float]:
        return dict(self._gpu) if self.cuda else {}

    def close_copy_back(self) -> None:
        """Free the copy back's device and pinned buffers (after a run: the next run makes its own ops)."""
        if self._copy_back is not None:
            self._copy_back.close()
            self._copy_back = None


def _tensor(torch: Any, data: Any, device: str) -> Any:
    """A frame's pixels as a tensor: a torch keep's tensor as it is, a ring slot or host array through its array
    interface (no copy for a device slot)."""
    if isinstance(data, torch.Tensor):
        return data
    if isinstance(data, np.ndarray):
        return torch.from_numpy(data)
    return torch.as_tensor(data, device=device)


class Head:
    """Model-specific: what comes back to the host and the events made of it."""

    def to_host(self, outs: Dict[str, Any], n: int) -> Any:
        raise NotImplementedError

    def events(self, host: Any, frames: List[Any]) -> List[Dict[str, Any]]:
        raise NotImplementedError


class ClassifyHead(Head):
    """Top-1 on the GPU; n class ids and probabilities come back."""

    def __init__(self, torch: Any, labels: Sequence[str]) -> None:
        self.torch, self.labels = torch, list(labels)

    def to_host(self, outs: Dict[str, Any], n: int) -> Any:
        logits = next(iter(outs.values()))[:n].float()
        prob, idx = self.torch.softmax(logits, dim=1).max(dim=1)
        return prob.to("cpu", non_blocking=True), idx.to("cpu", non_blocking=True)

    def events(self, host: Any, frames: List[Any]) -> List[Dict[str, Any]]:
        prob, idx = host[0].numpy(), host[1].numpy()
        out = []
        for f, p, i in zip(frames, prob, idx):
            name = self.labels[int(i)] if 0 <= int(i) < len(self.labels) else "class %d" % int(i)
            out.append({"stream": f.stream, "frame": f.index, "class": int(i), "score": float(p),
                        "label": "%s %.2f" % (name, p)})
        return out


class SsdHead(Head):
    """Raw SSD outputs of n frames -> one SsdOutput per frame: as the app on a TensorRT engine, with ``gpu_decoder``
    (a :class:`~jetforge.vision.ssd_gpu.QueuedSsdDecoder`: the kernel queued behind the model on its stream in the
    launch thread, only the candidates copied back, read back in the result thread); without it the raw outputs come
    back and are decoded on the host (runtime.detection), as the app with a session that takes host arrays."""

    def __init__(self, spec: Any, contract: Any, frame_hw: Tuple[int, int], threshold: float = 0.5,
                 gpu_decoder: Optional[Any] = None, torch: Any = None) -> None:
        self.spec, self.contract, self.threshold, self.gpu, self.torch = spec, contract, threshold, gpu_decoder, torch
        self.plan = contract.geometry(frame_hw)
        self.anchors = spec.anchors()

    def to_host(self, outs: Dict[str, Any], n: int) -> Any:
        enc, logits = ssd_outputs(outs)
        if self.gpu is not None:
            return self.launch_decode(enc, logits, list(range(n)))
        return ("host", enc[:n].float().to("cpu", non_blocking=True), logits[:n].float().to("cpu", non_blocking=True))

    def launch_decode(self, enc: Any, logits: Any, rows: List[int]) -> Any:
        """Queue the decoding of every output row (the padded batch, as the app's engine outputs it) on the current
        stream; the result keeps ``rows``.  float32 (a TensorRT engine's outputs; the FP16 model's converted here):
        the new tensors go back to torch's allocator after the launch, reused only by work queued after it."""
        enc, logits = enc.float().contiguous(), logits.float().contiguous()
        stream = self.torch.cuda.current_stream().cuda_stream if enc.is_cuda else None  # None: the CPU tests' kernel
        return ("gpu", self.gpu.launch(enc.data_ptr(), logits.data_ptr(), len(enc), rows, stream))

    def decode(self, host: Any) -> List[Any]:
        """What :meth:`to_host` handed over -> one SsdOutput per row: the queued GPU decoding's result, or the host's
        batched decode."""
        from jetforge.vision.ssd_batch import postprocess_batch

        if host[0] == "gpu":
            return host[1]()
        return postprocess_batch(host[1].numpy(), host[2].numpy(), self.spec, score_threshold=self.threshold,
                                 anchors=self.anchors)

    def detections(self, host: Any, frames: List[Any]) -> List[Any]:
        """Each frame's detections in its own pixels (after the launch's copies finished): what the checks compare."""
        hw = (self.contract.height, self.contract.width)
        return [d.to_detections(self.contract.geometry((f.height, f.width)), hw)
                for f, d in zip(frames, self.decode(host))]

    def events(self, host: Any, frames: List[Any]) -> List[Dict[str, Any]]:
        dets = self.decode(host)
        out = []
        hw = (self.contract.height, self.contract.width)
        for f, d in zip(frames, dets):
            boxes = d.xyxy(self.plan, hw)
            out.append({"stream": f.stream, "frame": f.index, "people": len(d), "boxes_xyxy": boxes.round(1),
                        "scores": d.scores.round(3)})
        return out


def ssd_decode_label(head: Any) -> Optional[str]:
    """How a point decoded the SSD's boxes, as its JSON records it (None for a model without SSD outputs)."""
    if not isinstance(head, SsdHead):
        return None
    if head.gpu is not None:
        return "gpu kernel queued behind the model (as the app on a TensorRT engine)"
    return "host (as the app with a session that takes host arrays)"


def ssd_outputs(outs: Dict[str, Any]) -> Tuple[Any, Any]:
    """An SSD body's outputs as ``(box encodings (.., A, 4), class logits)``."""
    values = list(outs.values())
    enc = next(v for v in values if v.shape[-1] == 4)
    return enc, next(v for v in values if v is not enc)


__all__ = ["ClassifyHead", "F2Preprocess", "SsdHead", "TorchNv12Preprocess", "TorchStreamOps", "keep_hook",
           "load_models", "model_only", "open_torch_session", "ssd_outputs", "yuv_to_rgb"]


class PooledTorchOps(BatchOps):
    """The scheduler of ``jetforge.apps.pipeline.devices`` on the GPU: several sessions of one model stand in for
    a Jetson's GPU + DLA cores.  Each device has its own session, preprocessing buffer and CUDA stream; a batch is
    preprocessed, inferred and copied back on the device that takes it."""

    def __init__(self, torch: Any, sessions: List[Any], preprocessors: List[Any], head: "Head", device: str) -> None:
        from jetforge.apps.pipeline.devices import DevicePool

        self.torch, self.head, self.cuda = torch, head, device.startswith("cuda")
        streams = [torch.cuda.Stream() if self.cuda else None for _ in sessions]
        fns = [self._runner(s, p, st) for s, p, st in zip(sessions, preprocessors, streams)]
        self.pool = DevicePool(fns, ["session%d" % i for i in range(len(sessions))])

    def _runner(self, session: Any, pre: Any, stream: Any) -> Any:
        torch, name = self.torch, session.inputs[0].name

        def run(job: Tuple[List[Any], int]) -> Any:
            frames, padded = job
            if stream is None:
                return self.head.to_host(session.infer_tensors({name: pre(frames, padded)}), len(frames))
            stream.wait_stream(torch.cuda.default_stream())  # the decoded copies were made there,
            for f in frames:  # or on the decode threads' own streams (--nonblocking)
                if getattr(f.data, "ready", None) is not None:
                    stream.wait_event(f.data.ready)
            with torch.cuda.stream(stream):
                host = self.head.to_host(session.infer_tensors({name: pre(frames, padded)}), len(frames))
                done = torch.cuda.Event()
                done.record(stream)
            done.synchronize()
            return host

        return run

    def launch(self, frames: List[Any], padded: int) -> Any:
        return self.pool.submit((frames, padded))

    def finish(self, handle: Any, frames: List[Any]) -> List[Dict[str, Any]]:
        host, device = handle.result()
        events = self.head.events(host, frames)
        for e in events:
            e["device"] = device
        return events

    def close(self) -> None:
        self.pool.close()
