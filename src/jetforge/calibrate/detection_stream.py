"""calibrate's INT8 evaluation of a detector, one batch at a time: memory bounded by a batch, not by the label set.

Why not :class:`~jetforge.calibrate.evaluate.Evaluator`: it holds every preprocessed input and FP32's raw outputs
for the whole evaluation, because mixed precision and per-layer sensitivity rerun candidates over the same inputs.
A detector's evaluation does neither (calibrate refuses both for detectors), and its label set can be large: COCO
val2017's 5,000 images are about 25 GB decoded and more as float inputs and raw SSD outputs.
:class:`DetectionEvaluator` has the interface calibrate uses (``evaluate``, ``with_arithmetic``, ``label``,
``samples``) and, for each candidate, reads a batch of frames
(:class:`~jetforge.calibrate.detection_eval.DetectionFrames`), preprocesses it, runs it through FP32 and the
candidate, and reduces both to their decoded detections (at most 100 per frame and model) and the output-SQNR sums
before the next batch is read.

**The same numbers as the Evaluator.**  The batches are the same (``batch_size`` frames, or the model's fixed
batch; a last partial batch a fixed batch cannot take is dropped), run through the same sessions
(:func:`jetforge.calibrate.ortrun.session`, FP32 ``"float"`` and the candidate in the evaluator's arithmetic),
decoded frame by frame by the metric's decoder (decoding does not depend on batch boundaries) and scored by
:meth:`~jetforge.calibrate.metrics.DetectionAPMetric.score`: AP and its intervals are those of
:meth:`~jetforge.calibrate.metrics.DetectionAPMetric.compute` on the concatenated outputs.  The output SQNR adds up
each batch's two sums (:func:`~jetforge.calibrate.metrics.sqnr_sums`) with ``math.fsum``; the whole-array sums it
replaces round in another order, so the dB value may differ in its last digits (4e-15 dB on the 94 person frames).
FP32 runs again for each candidate (its raw outputs are not kept): the cost of bounded memory is one FP32 pass per
evaluation.
"""

import math
import time
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from jetforge.calibrate import ortrun, phash
from jetforge.calibrate.evaluate import ARITHMETICS, arithmetic_label, load, unclassified_result
from jetforge.calibrate.metrics import EvalResult, OutputSqnrMetric, sqnr_from_sums, sqnr_sums
from jetforge.errors import CalibrationError, UnknownNameError
from jetforge.progress import progress_bar


class DetectionEvaluator:
    """FP32 against candidates on a detector's labelled frames, streamed (module docstring).

    ``frames``: :class:`~jetforge.calibrate.detection_eval.DetectionFrames`; ``contract``: the image input contract;
    ``metric``: the :class:`~jetforge.calibrate.metrics.DetectionAPMetric` (its decoder and bootstrap settings);
    ``progress``: a bar per evaluation pass on stderr.  ``hashes`` fills with each frame's perceptual hash during the
    first pass (the list an :class:`~jetforge.calibrate.eval_data.EvaluationSet` may share).
    """

    metric_names = ("detection_ap", "output_sqnr")

    def __init__(self, fp32_model: Any, frames: Any, contract: Any, metric: Any, fixed_batch: Optional[int] = None,
                 batch_size: int = 8, threads: int = 0, arithmetic: str = "simulated", progress: bool = False) -> None:
        if arithmetic not in ARITHMETICS:
            raise UnknownNameError("INT8 arithmetic", arithmetic, ARITHMETICS)
        self.fp32_model = load(fp32_model)
        self.frames, self.contract, self.metric = frames, contract, metric
        self.fixed_batch, self.batch_size = fixed_batch, int(fixed_batch or batch_size)
        count = len(frames.names)
        self.samples = count - (count % fixed_batch if fixed_batch else 0)  # as PreprocessedBatches drops them
        if self.samples == 0:
            raise CalibrationError("no evaluation samples", hint="give --eval a folder of images or a video")
        self.targets = list(frames.targets[:self.samples])
        self.threads, self.arithmetic, self.progress = threads, arithmetic, progress
        self.hashes: List[Tuple[str, int]] = []

    @property
    def label(self) -> str:
        return arithmetic_label(self.arithmetic)

    def with_arithmetic(self, arithmetic: str) -> "DetectionEvaluator":
        """The same frames, measuring candidates with another arithmetic."""
        if arithmetic not in ARITHMETICS:
            raise UnknownNameError("INT8 arithmetic", arithmetic, ARITHMETICS)
        other = DetectionEvaluator.__new__(DetectionEvaluator)
        other.__dict__.update(self.__dict__)
        other.arithmetic = arithmetic
        return other

    def evaluate(self, model: Any) -> EvalResult:
        """``detection_ap`` and ``output_sqnr`` of ``model`` against FP32, one batch in memory at a time."""
        from jetforge.calibrate.sources import PreprocessedBatches

        t0 = time.perf_counter()
        found: List[Tuple[List[np.ndarray], ...]] = [([], [], []), ([], [], [])]  # FP32's, the candidate's
        sums: List[List[Tuple[float, float]]] = []  # per output, each batch's (signal, error)
        hashing = len(self.hashes) < self.samples  # the first pass (or one cut short)
        if hashing:
            del self.hashes[:]
        batches = PreprocessedBatches(self.frames.images(), self.contract, self.batch_size, self.fixed_batch,
                                      what="evaluation samples", on_sample=self._hash if hashing else None)
        with ortrun.session(self.fp32_model, "float", self.threads) as fp32, \
                ortrun.session(model, self.arithmetic, self.threads) as candidate:
            done = 0
            for batch, _ in progress_bar(batches, desc="INT8 evaluation", unit="batch",
                                         total=-(-self.samples // self.batch_size), enabled=self.progress):
                outputs = [_run(fp32, batch), _run(candidate, batch)]
                if len(outputs[1]) != len(outputs[0]):
                    raise CalibrationError("the candidate has %d outputs but FP32 has %d" % (len(outputs[1]),
                                                                                         len(outputs[0])))
                targets = self.targets[done:done + len(batch)]
                for kept, raw in zip(found, outputs):
                    for into, part in zip(kept, self.metric.detections(raw, targets)):
                        into.extend(part)
                sums = sums or [[] for _ in outputs[0]]
                for k, (ref, cand) in enumerate(zip(*outputs)):
                    sums[k].append(sqnr_sums(ref, cand))
                done += len(batch)
        res = unclassified_result(self.samples)
        res.metrics["detection_ap"] = self.metric.score(found[0], found[1], self.targets)
        res.metrics["output_sqnr"] = OutputSqnrMetric.block(
            [sqnr_from_sums(math.fsum(s for s, _ in parts), math.fsum(e for _, e in parts)) for parts in sums])
        res.arithmetic = self.label
        res.seconds = time.perf_counter() - t0
        return res

    def _hash(self, name: str, image: np.ndarray) -> None:
        if len(self.hashes) < self.samples:  # not the dropped last frames of a fixed batch
            self.hashes.append((name, phash.perceptual_hash(image)))


def _run(session: Any, batch: np.ndarray) -> Sequence[np.ndarray]:
    """Every output of ``session`` on one batch, in the session's output order."""
    out = session.infer({session.inputs[0].name: np.ascontiguousarray(batch)})
    return [np.asarray(out[t.name]) for t in session.outputs]


__all__ = ["DetectionEvaluator"]
