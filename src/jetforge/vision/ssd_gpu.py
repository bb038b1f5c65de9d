"""The SSD decoder with its decoding on the GPU: the kernel's candidates, finished on the host by the decoder's NMS.

:class:`GpuSsdDecoder` is :class:`jetforge.runtime.cuda.kernels.ssd.GpuSsdKernel` (box decoding, scores and candidate
compaction in one CUDA kernel; only the anchors above the threshold come back) plus the host half here:
:func:`finish` puts the candidates back in anchor order and runs the per-class NMS of all frames of the batch at
once (:func:`jetforge.vision.ssd_batch.select_detections_batch`).  The result equals
:func:`jetforge.vision.ssd.postprocess` on the same outputs.  :func:`candidates_reference` is the numpy model of what
the kernel writes (CPU-testable).  Torch-free; cuda-python is loaded when a kernel is first made.
"""

from typing import Any, Callable, List, Mapping, Optional, Sequence

import numpy as np

from jetforge.runtime.cuda.in_flight import EventSlots
from jetforge.runtime.cuda.kernels.ssd import GpuSsdKernel, effective_threshold, kernel_threshold, record_width
from jetforge.vision.ssd import SSDSpec, SsdOutput, convert_scores, decode_boxes
from jetforge.vision.ssd_batch import select_detections_batch


def candidates_reference(box_encodings: np.ndarray, class_logits: np.ndarray, spec: SSDSpec,
                         threshold: float) -> np.ndarray:
    """What the kernel returns, computed with the host's numpy code: ``(K, width)`` float32 records (any order)."""
    boxes = decode_boxes(box_encodings, spec.anchors(), spec.scale_factors)
    scores = convert_scores(class_logits, spec.score_converter, spec.logit_scale)[..., 1:]
    frame, anchor = np.nonzero(scores.max(axis=-1) > threshold)
    out = np.zeros((len(frame), record_width(spec)), np.float32)
    ids = out.view(np.int32)
    ids[:, 0], ids[:, 1] = anchor, frame
    out[:, 2:6] = boxes[frame, anchor]
    out[:, 6:] = scores[frame, anchor]
    return out


def finish(records: np.ndarray, frames: int, spec: SSDSpec, threshold: float) -> List[SsdOutput]:
    """Candidate records -> one :class:`~jetforge.vision.ssd.SsdOutput` per frame (per-class NMS etc. on the host,
    as postprocess).

    Candidates are put back in anchor order first: NMS breaks score ties by the lower anchor index, and the
    kernel appends them in whatever order its threads ran.  Then every frame of the batch is selected at once
    (:func:`~jetforge.vision.ssd_batch.select_detections_batch`, which groups them by frame keeping that
    order; equal to ``select_detections`` frame by frame).
    """
    records = records[np.argsort(records.view(np.int32)[:, 0], kind="stable")]
    frame_of = records.view(np.int32)[:, 1]
    return select_detections_batch(records[:, 2:6], records[:, 6:], frame_of, frames, spec, threshold)


class GpuSsdDecoder(GpuSsdKernel):
    """SSD outputs on the GPU -> the decoder's output per frame, with only the candidates copied back.

    ``batch`` is the most frames one :meth:`run` takes.  One thread at a time (see :class:`GpuSsdKernel`).
    """

    def run(self, enc_ptr: int, logits_ptr: int, frames: int, stream: Any = None,
            score_threshold: Optional[float] = None) -> List[SsdOutput]:
        """The outputs of ``frames`` frames from the session's device outputs ``(n, A, 4)`` and ``(n, A, classes)``.

        Equal to ``vision.ssd.postprocess(enc, logits, spec, score_threshold)`` on the same outputs;
        synchronises ``stream`` (it must read how many candidates there are).
        """
        threshold = effective_threshold(self.spec, score_threshold)
        self.launch(enc_ptr, logits_ptr, frames, stream, kernel_threshold(threshold))
        return finish(self.fetch(stream), frames, self.spec, threshold)

    def __enter__(self) -> "GpuSsdDecoder":
        return self


def rows_of(records: np.ndarray, rows: Sequence[int], total: int) -> np.ndarray:
    """The candidate records of the output rows ``rows`` (of ``total`` decoded), their frame field renumbered to the
    row's place in ``rows``: what :func:`finish` of ``len(rows)`` frames reads.  Why: a padded batch (a bucket) and
    its tile blocks put the real frames at rows that are not ``0..n-1``; the kernel decodes all rows in one launch
    and the host keeps the ones that are frames (the padding repeats the last frame and is dropped here)."""
    place = np.full(total, -1, np.int32)
    place[np.asarray(rows, dtype=np.int64)] = np.arange(len(rows), dtype=np.int32)
    frame = place[records.view(np.int32)[:, 1]]
    kept = records[frame >= 0].copy()
    kept.view(np.int32)[:, 1] = frame[frame >= 0]
    return kept


class QueuedSsdDecoder:
    """The SSD decoder for batches in flight: each batch's kernel and the copy of its candidates are queued on the
    stream that produced its outputs (the engine's), right behind them, and read back later by another thread.

    Why: on the app's GPU path (``jetforge app people --decode gpu`` with a TensorRT engine) the launch thread queues
    batch k+1 while the result thread still finishes batch k.  Decoding on the host needs every raw output copied
    back (1917 x 6 floats a frame) and costs the result thread ~14x the CPU of the kernel's host half at batch 32
    (``benchmarks/gpu_pipeline/ssd_host_cost.py``).  Queued behind the engine, the kernel reads the outputs before
    the next batch's engine rewrites them (stream order), and only the candidates come back.

    ``rows``: the most output rows a launch decodes (the padded batch times its tile blocks); ``slots``: batches
    that may be launched and not yet collected -- a launch with every slot taken waits until one is collected (the
    pipeline holds at most ``in_flight + 2``).  ``launch`` is called by one thread, ``collect`` by one (each
    ticket once).  Equal to ``vision.ssd.postprocess`` of the same rows.
    """

    def __init__(self, spec: SSDSpec, rows: int, slots: int = 4, score_threshold: Optional[float] = None,
                 output_names: Sequence[str] = ("box_encodings", "class_logits"), prefetch_per_frame: int = 64) -> None:
        from jetforge.runtime.cuda import Stream

        self.spec, self.threshold = spec, effective_threshold(spec, score_threshold)
        self.output_names = tuple(output_names)
        self.kernel = GpuSsdKernel(spec, batch=rows, slots=slots, prefetch_per_frame=prefetch_per_frame)
        self.slots = EventSlots(slots)
        self._side = Stream()  # the rare second copy (more candidates than prefetched): not behind later batches

    def launch(self, enc_ptr: int, logits_ptr: int, total_rows: int, rows: Sequence[int],
               stream: Any) -> Callable[[], List[SsdOutput]]:
        """Queue the decoding of ``total_rows`` output rows (box encodings and logits at the two device pointers,
        float32) on ``stream``; the returned function waits for it and gives one output per row of ``rows``."""
        def decode(slot: int) -> None:
            self.kernel.launch(enc_ptr, logits_ptr, total_rows, stream, kernel_threshold(self.threshold), slot)
            self.kernel.queue_copy_back(stream, slot)

        slot, wanted = self.slots.queue(decode, stream), list(rows)
        return lambda: self._collect(slot, wanted, total_rows)

    def launch_outputs(self, outputs: Mapping[str, Any], rows: Sequence[int],
                       stream: Any) -> Callable[[], List[SsdOutput]]:
        """:meth:`launch` on a session's device outputs (``DeviceTensor`` by name, ``output_names``: box encodings,
        logits), e.g. as ``TrtSession.submit_device(on_device_outputs=)`` hands them over."""
        enc, logits = outputs[self.output_names[0]], outputs[self.output_names[1]]
        return self.launch(enc.ptr, logits.ptr, int(enc.shape[0]), rows, stream)

    def _collect(self, slot: int, rows: List[int], total: int) -> List[SsdOutput]:
        records = self.slots.read(slot, lambda s: self.kernel.read_back(self._side, s))
        return finish(rows_of(records, rows, total), len(rows), self.spec, self.threshold)

    def close(self) -> None:
        """Free the buffers once every batch launched into them is done (one never collected, as when a run is
        stopped, included: its kernel and copy may still be queued behind the engine)."""
        self.slots.wait_all()
        self.kernel.close()
        self.slots.close()
        self._side.close()


def takes_device_outputs(dtypes: Sequence[Any]) -> bool:
    """Whether the kernel can read outputs of these dtypes in place: float32 only (an engine with FP16 outputs is
    decoded on the host)."""
    return all(np.dtype(d) == np.float32 for d in dtypes)


__all__ = ["GpuSsdDecoder", "QueuedSsdDecoder", "candidates_reference", "finish", "rows_of", "takes_device_outputs"]
