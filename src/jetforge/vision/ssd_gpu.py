"""The SSD decoder with its decoding on the GPU: the kernel's candidates, finished on the host by the decoder's NMS.

:class:`GpuSsdDecoder` is :class:`jetforge.runtime.cuda.kernels.ssd.GpuSsdKernel` (box decoding, scores and candidate
compaction in one CUDA kernel; only the anchors above the threshold come back) plus the host half here:
:func:`finish` puts the candidates back in anchor order and runs the per-class NMS of all frames of the batch at
once (:func:`jetforge.vision.ssd_batch.select_detections_batch`).  The result equals
:func:`jetforge.vision.ssd.postprocess` on the same outputs.  :func:`candidates_reference` is the numpy model of what
the kernel writes (CPU-testable).  Torch-free; cuda-python is loaded when a kernel is first made.
"""

from typing import Any, List, Optional

import numpy as np

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


__all__ = ["GpuSsdDecoder", "candidates_reference", "finish"]
