"""GPU postprocessing for the SSD person detector: box decoding, scores and candidate compaction in one kernel.

The detector's body outputs 1917 anchors x (4 box encodings + 2 logits) per frame; the host
postprocess (:func:`jetforge.vision.ssd.postprocess`) decodes all of them and then keeps
the few above the score threshold.  Here the GPU decodes boxes and scores for the whole batch
and appends only the anchors whose best class score is above the threshold to one compact list
(an atomic counter), so a few hundred floats come back to the host instead of 1917 x 6 per frame.
The arithmetic is that of ``vision.ssd.decode_boxes`` / ``convert_scores`` in float32 (compiled with
``--fmad=false`` so each product is rounded as numpy rounds it; ``expf`` is within 2 ulp of numpy's ``exp``).

This module is the device half, :class:`GpuSsdKernel` (launch, fetch the candidate records); it reads the SSD
parameters from any object shaped like :class:`jetforge.vision.ssd.SSDSpec` and imports nothing of the decoder.
The host half -- the candidates back in anchor order and the numpy NMS on them, all frames of the batch at once --
is the decoder's: :class:`jetforge.vision.ssd_gpu.GpuSsdDecoder` (this kernel plus that half) and
:func:`jetforge.vision.ssd_gpu.candidates_reference` (the numpy model of the kernel's output, CPU-testable).
"""

import ctypes
from typing import Any, List, Optional

import numpy as np

from jetforge.errors import ConfigError, ModelError
from jetforge.runtime.cuda.kernels.sources import SSD_KERNEL, ssd_source
from jetforge.runtime.cuda.memory import DeviceBuffer, PinnedBuffer

CONVERTERS = ("sigmoid", "softmax", "identity")
HEADER_WORDS = 4
BLOCK = 128


class SsdArgs(ctypes.Structure):
    """Mirror of the kernel's ``struct SsdArgs`` (:data:`.sources.SSD_SOURCE`)."""

    _fields_ = ([(n, ctypes.c_uint64) for n in ("enc", "logits", "anchors", "out")]
                + [(n, ctypes.c_int32) for n in ("count", "num_anchors", "classes", "capacity", "converter")]
                + [(n, ctypes.c_float) for n in ("sf0", "sf1", "sf2", "sf3", "logit_scale", "threshold")])


def anchor_centres(spec: Any, anchors: Optional[np.ndarray] = None) -> np.ndarray:
    """``(A, 4)`` float32 ``[yc, xc, h, w]`` of each anchor, computed as ``vision.ssd.decode_boxes`` does."""
    a = (spec.anchors() if anchors is None else anchors).astype(np.float32)
    ha, wa = a[:, 2] - a[:, 0], a[:, 3] - a[:, 1]
    yca, xca = a[:, 0] + ha / np.float32(2), a[:, 1] + wa / np.float32(2)
    return np.ascontiguousarray(np.stack([yca, xca, ha, wa], axis=1), dtype=np.float32)


def record_width(spec: Any) -> int:
    """Words per candidate: anchor, frame, 4 box corners, one score per class (background excluded)."""
    return 6 + spec.num_classes - 1


def effective_threshold(spec: Any, score_threshold: Optional[float]) -> float:
    """The threshold ``vision.ssd.postprocess`` applies: the caller's, never below the exported model's."""
    return spec.score_threshold if score_threshold is None else max(float(score_threshold), spec.score_threshold)


def kernel_threshold(threshold: float) -> float:
    """The largest float32 not above ``threshold``: the kernel compares float32 scores, the host compares them
    with the float64 threshold, so the kernel's candidates always include every anchor the host keeps."""
    t = np.float32(threshold)
    return float(np.nextafter(t, np.float32(-np.inf)) if float(t) > threshold else t)


class GpuSsdKernel:
    """SSD outputs on the GPU -> the candidate records above a threshold, with only those copied back.

    ``spec`` is an :class:`~jetforge.vision.ssd.SSDSpec` (read by its attributes); ``batch`` is the most frames one
    launch takes.  The anchors are uploaded once.  ``slots``: candidate lists (each a device list and its pinned
    copy), so that that many batches can be in flight at once, each launched into its own slot and read back later
    (:class:`jetforge.vision.ssd_gpu.QueuedSsdDecoder`); a slot is used by one batch at a time, which its caller
    ensures.  :class:`jetforge.vision.ssd_gpu.GpuSsdDecoder` adds ``run`` (slot 0, waiting at once).
    """

    def __init__(self, spec: Any, batch: int, prefetch_per_frame: int = 64, slots: int = 1) -> None:
        from jetforge.runtime.cuda.kernels.launch import Kernel

        if spec.score_converter not in CONVERTERS:
            raise ModelError("unknown SSD score converter %r" % spec.score_converter)
        if int(batch) < 1 or int(slots) < 1:
            raise ConfigError("the SSD decoder batch and slots must be at least 1, got %s and %s" % (batch, slots))
        self.spec = spec
        self.batch = int(batch)
        self.width = record_width(spec)
        self.capacity = self.batch * spec.num_anchors  # every anchor of every frame: the list cannot overflow
        self.prefetch = min(self.capacity, self.batch * int(prefetch_per_frame))
        self.kernel = Kernel(ssd_source(spec.num_classes), SSD_KERNEL, ("--fmad=false",))
        centres = anchor_centres(spec)
        self._anchors = DeviceBuffer(centres.nbytes)
        self._outs: List[DeviceBuffer] = []
        self._hosts: List[PinnedBuffer] = []
        for _ in range(int(slots)):
            self._outs.append(DeviceBuffer(4 * (HEADER_WORDS + self.capacity * self.width)))
            self._hosts.append(PinnedBuffer(self._outs[-1].nbytes))
        staging = PinnedBuffer(centres.nbytes)
        try:
            staging.array(centres.shape, np.float32)[...] = centres
            self._anchors.copy_from_host(staging)
            from jetforge.runtime.cuda.bindings import synchronize_device

            synchronize_device()
        finally:
            staging.close()
        self.last_candidates = 0
        self.last_bytes_copied = 0

    def launch(self, enc_ptr: int, logits_ptr: int, frames: int, stream: Any, threshold: float, slot: int = 0) -> None:
        """Queue the counter reset and the decode kernel into ``slot``'s list (asynchronous)."""
        if not 1 <= frames <= self.batch:
            raise ConfigError("the SSD decoder got %d frames; it takes 1..%d" % (frames, self.batch))
        s, out = self.spec, self._outs[slot]
        out.fill_bytes(0, 4 * HEADER_WORDS, stream)
        args = SsdArgs(enc=int(enc_ptr), logits=int(logits_ptr), anchors=self._anchors.ptr, out=out.ptr,
                       count=frames, num_anchors=s.num_anchors, classes=s.num_classes, capacity=self.capacity,
                       converter=CONVERTERS.index(s.score_converter), sf0=s.scale_factors[0],
                       sf1=s.scale_factors[1], sf2=s.scale_factors[2], sf3=s.scale_factors[3],
                       logit_scale=s.logit_scale, threshold=threshold)
        grid = ((s.num_anchors + BLOCK - 1) // BLOCK, frames, 1)
        self.kernel.launch(grid, (BLOCK, 1, 1), args, stream)

    def queue_copy_back(self, stream: Any, slot: int = 0) -> None:
        """Queue the copy of ``slot``'s header and first ``prefetch`` records to its pinned buffer (asynchronous):
        enough for every candidate unless a batch has more than ``prefetch_per_frame`` a frame on average."""
        self._outs[slot].copy_to_host(self._hosts[slot], 4 * (HEADER_WORDS + self.prefetch * self.width), stream)

    def read_back(self, stream: Any, slot: int = 0) -> np.ndarray:
        """``slot``'s candidates, once its :meth:`queue_copy_back` has completed: the rest copied on ``stream`` (and
        waited for) only when there were more than ``prefetch``."""
        host = self._hosts[slot]
        count = int(host.array((1,), np.int32)[0])
        copied = 4 * (HEADER_WORDS + self.prefetch * self.width)
        if count > self.prefetch:
            whole = 4 * (HEADER_WORDS + count * self.width)
            self._outs[slot].copy_to_host(host, whole, stream)
            _sync(stream)
            copied += whole
        self.last_candidates, self.last_bytes_copied = count, copied
        flat = host.array((HEADER_WORDS + count * self.width,), np.float32)
        return flat[HEADER_WORDS:].reshape(count, self.width).copy()

    def fetch(self, stream: Any, slot: int = 0) -> np.ndarray:
        """Copy ``slot``'s candidates back now (one copy of the header + the first ``prefetch`` records, more only if
        needed)."""
        self.queue_copy_back(stream, slot)
        _sync(stream)
        return self.read_back(stream, slot)

    def close(self) -> None:
        for buf in [self._anchors] + self._outs + self._hosts:
            buf.close()

    def __enter__(self) -> "GpuSsdKernel":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _sync(stream: Any) -> None:
    if stream is None:
        from jetforge.runtime.cuda.bindings import synchronize_device

        synchronize_device()
    elif hasattr(stream, "synchronize"):
        stream.synchronize()
    else:
        from jetforge.runtime.cuda.bindings import check, runtime_api

        check(runtime_api().cudaStreamSynchronize(stream), "cudaStreamSynchronize")


__all__ = ["CONVERTERS", "GpuSsdKernel", "SsdArgs", "anchor_centres", "effective_threshold", "kernel_threshold",
           "record_width"]
