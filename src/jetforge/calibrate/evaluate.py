"""INT8 accuracy before deployment: a Q/DQ ONNX against FP32, in simulated TensorRT INT8 arithmetic.

:class:`Evaluator` holds a fixed set of preprocessed inputs and the FP32 model's outputs on them;
:meth:`Evaluator.evaluate` runs any candidate (a Q/DQ model, a mixed-precision variant, another
tool's quantized model) over the same inputs and compares its raw outputs with FP32's through the
metrics registered in :mod:`jetforge.calibrate.metrics` (``classification`` by default):

* **top-1 agreement** with FP32, over all samples and over the *confident* ones (FP32 top-1
  probability > ``confidence``, 0.5 by default: real frames are not ImageNet-like, and a low-confidence
  FP32 answer flips under any perturbation), and **top-5 agreement** (FP32's top-1 is in the candidate's
  top 5);
* the **mean KL** divergence KL(P_fp32 || P_int8) of the softmax outputs, and the output SQNR (dB);
* with labels: top-1/top-5 **accuracy** of both, and the drop.

**Which arithmetic.**  By default (``arithmetic="simulated"``) the candidate runs as
:mod:`jetforge.calibrate.int8sim.simulate` rewrites it: TensorRT's documented INT8 arithmetic (symmetric,
round half to even, saturation only at Q nodes, exact integer accumulation, INT32 bias), computed
on float kernels in a way that gives the same numbers on any CPU.  Results carry the label
:data:`SIMULATED_LABEL`: *simulated INT8 arithmetic (TensorRT rules); TensorRT not run*.
``arithmetic="ort-int8"`` runs the Q/DQ model through ONNX Runtime's own INT8 kernels instead
(``ORT_ENABLE_ALL`` fuses Q/DQ into QLinearConv, QGemm, ...): a second measurement whose numbers
depend on this CPU (16-bit saturating sums on x86 without VNNI), labelled with the CPU's flags
(:func:`jetforge.runtime.cpu_features.ort_kernel_label`).  ``docs/int8_evaluation.md`` says how the
simulation is checked and where it can differ from a real TensorRT engine.

Per-layer sensitivity lives in :mod:`jetforge.calibrate.sensitivity`, the Q/DQ graph surgery in
:mod:`jetforge.calibrate.qdq.surgery`; both are re-exported here.
"""

import logging
import re
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from jetforge.calibrate import ortrun
from jetforge.calibrate.int8sim.simulate import SIMULATED_LABEL
from jetforge.calibrate.metrics import (CONFIDENCE, METRICS, ClassificationMetric, EvalResult, compare_outputs,
                                        make_metric, softmax)
from jetforge.calibrate.qdq.surgery import (QuantizedLayer, dequantize_layers, load, only_layers,
                                            quantized_layers)
from jetforge.errors import CalibrationError, InputFileError, UnknownNameError
from jetforge.jsonfile import read_text

log = logging.getLogger(__name__)

ARITHMETICS = ("simulated", "ort-int8")
DEFAULT_METRICS = ("classification",)


def arithmetic_label(arithmetic: str) -> str:
    """How reports name the numbers of ``arithmetic`` (``"ort-int8"`` names this CPU's flags)."""
    if arithmetic == "simulated":
        return SIMULATED_LABEL
    if arithmetic == "ort-int8":
        from jetforge.runtime.cpu_features import ort_kernel_label

        return ort_kernel_label()
    raise UnknownNameError("INT8 arithmetic", arithmetic, ARITHMETICS)


def session(model, optimize: bool = False, threads: int = 0):
    """An ONNX Runtime CPU session: simulated INT8 arithmetic, or ORT's INT8 kernels with ``optimize``."""
    return ortrun.session(model, "ort-int8" if optimize else "simulated", threads)


def run_model(model, batches: Sequence[np.ndarray], threads: int = 0, output: int = 0,
              arithmetic: str = "simulated") -> np.ndarray:
    """Output ``output`` of ``model`` over ``batches``, concatenated along axis 0."""
    return ortrun.run(model, batches, arithmetic, threads)[output]


# --------------------------------------------------------------------------- evaluator
class Evaluator:
    """FP32 reference outputs on fixed inputs, against which candidate models are compared.

    ``batches`` are preprocessed input batches (N, ...) of a single-input model; they are kept in
    memory (a 224x224 RGB image is 0.6 MB), so that every candidate sees exactly the same inputs.
    ``labels`` (class indices, -1 = unknown) or, for other metrics, ``targets`` are the ground truth
    handed to the metrics; ``metrics`` names registered metrics, ``metric_options`` their options by name.
    """

    def __init__(self, fp32_model, batches: Iterable[np.ndarray], labels: Optional[Sequence[int]] = None,
                 confidence: float = CONFIDENCE, threads: int = 0, arithmetic: str = "simulated",
                 metrics: Sequence[str] = DEFAULT_METRICS, targets: Optional[Any] = None,
                 metric_options: Optional[Dict[str, Dict[str, Any]]] = None) -> None:
        if arithmetic not in ARITHMETICS:
            raise UnknownNameError("INT8 arithmetic", arithmetic, ARITHMETICS)
        self.fp32_model = load(fp32_model)
        self.batches = [np.ascontiguousarray(b) for b in batches]
        if not self.batches:
            raise CalibrationError("no evaluation samples", hint="give --eval a folder of images or a video")
        self.samples = int(sum(len(b) for b in self.batches))
        self.labels = None if labels is None else np.asarray(labels, dtype=np.int64).reshape(-1)
        if self.labels is not None and len(self.labels) != self.samples:
            raise CalibrationError("%d labels for %d evaluation samples" % (len(self.labels), self.samples))
        self.targets = targets
        self.confidence = confidence
        self.threads = threads
        self.arithmetic = arithmetic
        self.metric_names = tuple(metrics)
        self.metric_options = dict(metric_options or {})
        for name in self.metric_names:
            METRICS.get(name)  # an unknown name fails here, before any model runs
        t0 = time.perf_counter()
        self.references = ortrun.run(self.fp32_model, self.batches, "float", threads)
        self.fp32_seconds = time.perf_counter() - t0

    @property
    def reference(self) -> np.ndarray:
        """FP32's first output (the logits of a classifier)."""
        return self.references[0]

    @property
    def label(self) -> str:
        return arithmetic_label(self.arithmetic)

    def run(self, model) -> List[np.ndarray]:
        """Every raw output of ``model`` over the evaluation inputs, in this evaluator's arithmetic."""
        return ortrun.run(model, self.batches, self.arithmetic, self.threads)

    def outputs(self, model) -> np.ndarray:
        return self.run(model)[0]

    def measure(self, outputs: Sequence[np.ndarray]) -> EvalResult:
        """The metrics of raw ``outputs`` (as :meth:`run` returns them) against FP32's."""
        if len(outputs) != len(self.references):
            raise CalibrationError("the candidate has %d outputs but FP32 has %d" % (len(outputs),
                                                                                   len(self.references)))
        classify = ClassificationMetric(confidence=self.confidence,
                                        **self.metric_options.get("classification", {}))
        targets = self.labels if self.labels is not None else None
        if "classification" in self.metric_names:
            res = classify.result(self.references, outputs, targets)
        else:
            res = unclassified_result(self.samples, self.confidence)
        for name in self.metric_names:
            if name == "classification":
                res.metrics[name] = {k: v for k, v in res.to_dict().items() if k not in ("arithmetic", "metrics")}
                continue
            metric = make_metric(name, **self.metric_options.get(name, {}))
            res.metrics[name] = metric.compute(self.references, outputs,
                                               self.targets if self.targets is not None else targets)
        res.arithmetic = self.label
        return res

    def evaluate(self, model) -> EvalResult:
        t0 = time.perf_counter()
        res = self.measure(self.run(model))
        res.seconds = time.perf_counter() - t0
        return res

    def with_arithmetic(self, arithmetic: str) -> "Evaluator":
        """The same inputs and FP32 outputs, measuring candidates with another arithmetic."""
        if arithmetic not in ARITHMETICS:
            raise UnknownNameError("INT8 arithmetic", arithmetic, ARITHMETICS)
        other = self._copy()
        other.arithmetic = arithmetic
        return other

    def _copy(self) -> "Evaluator":
        other = Evaluator.__new__(Evaluator)
        other.__dict__.update(self.__dict__)
        return other

    def subset(self, max_samples: int) -> "Evaluator":
        """An evaluator over the first ``max_samples`` samples (the FP32 outputs are reused)."""
        if max_samples >= self.samples:
            return self
        sub = self._copy()
        sub.fp32_seconds = 0.0
        batches, left = [], max_samples
        for b in self.batches:
            if left <= 0:
                break
            batches.append(b[:left])
            left -= len(batches[-1])
        sub.batches, sub.samples = batches, max_samples
        sub.references = [r[:max_samples] for r in self.references]
        sub.labels = None if self.labels is None else self.labels[:max_samples]
        if self.targets is not None and hasattr(self.targets, "__getitem__"):
            sub.targets = self.targets[:max_samples]
        return sub


def unclassified_result(samples: int, confidence: float = CONFIDENCE) -> EvalResult:
    """An :class:`EvalResult` without the classification fields (NaN), for the other metrics to fill in."""
    nan = float("nan")
    return EvalResult(samples=samples, agreement=nan, confident_samples=0, agreement_confident=None,
                      top5_agreement=nan, mean_kl=nan, output_sqnr_db=nan, fp32_mean_confidence=nan,
                      confidence=confidence)


def preprocess_samples(samples: Iterable[Tuple[str, np.ndarray]], preprocess, batch_size: int = 16,
                       fixed_batch: Optional[int] = None) -> Tuple[List[np.ndarray], List[str]]:
    """(name, uint8 BGR image) pairs -> batches prepared by ``preprocess`` (the image input contract) and names."""
    from jetforge.calibrate.sources import PreprocessedBatches

    batches: List[np.ndarray] = []
    names: List[str] = []
    for batch, batch_names in PreprocessedBatches(samples, preprocess, batch_size, fixed_batch,
                                                  what="evaluation samples"):
        batches.append(batch)
        names.extend(batch_names)
    return batches, names


def read_labels(path: Union[str, Path], names: Sequence[str], class_names: Sequence[str] = ()) -> np.ndarray:
    """Labels for ``names`` (sample names: image paths, ``clip.mp4#frame``) from a text file.

    One ``sample label`` per line (separated by a tab, a comma or spaces; ``#`` comments); ``sample``
    is a path (absolute, relative to the label file, or a bare file name when that is unambiguous) or
    ``clip.mp4#frame``; ``label`` is a class index or a class name of the model's sidecar.
    Samples without a line get -1 (not counted in accuracy).
    """
    p = Path(path)
    table = label_table(p, class_names)
    by_base: Dict[str, List[int]] = {}
    for key, label in table.items():
        by_base.setdefault(Path(key.split("#")[0]).name + ("#" + key.split("#")[1] if "#" in key else ""),
                           []).append(label)
    resolved = {str((p.parent / k.split("#")[0]).resolve()) + ("#" + k.split("#")[1] if "#" in k else ""): v
                for k, v in table.items()}
    out = np.full(len(names), -1, dtype=np.int64)
    for i, name in enumerate(names):
        path_part, hash_, frame = name.partition("#")
        full = str(Path(path_part).resolve()) + (hash_ + frame)
        base = Path(path_part).name + (hash_ + frame)
        if name in table:
            out[i] = table[name]
        elif full in resolved:
            out[i] = resolved[full]
        elif len(by_base.get(base, ())) == 1:
            out[i] = by_base[base][0]
    if not (out >= 0).any():
        raise InputFileError("none of the %d evaluation samples is named in %s (first sample: %s)"
                             % (len(names), p, names[0] if names else "-"),
                             hint="name samples by path relative to the label file, or by file name")
    missing = int((out < 0).sum())
    if missing:
        log.warning("%d of %d evaluation samples have no label in %s; accuracy counts the labelled ones",
                    missing, len(names), p)
    return out


def label_table(path: Union[str, Path], class_names: Sequence[str] = ()) -> Dict[str, int]:
    """``{sample: class index}`` of a classification label file, as :func:`read_labels` reads it (its format); the
    samples as the file writes them (``bench --accuracy`` resolves them to images itself)."""
    p = Path(path)
    text = read_text(p, "label file", hint="give a text file with one `image label` per line")  # binary: one line
    index = {str(c): i for i, c in enumerate(class_names)}
    table: Dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        for sep in ("\t", ","):
            if sep in line:
                key, _, value = line.rpartition(sep)
                break
        else:
            key, _, value = line.rpartition(" ")
        key, value = key.strip(), value.strip()
        if not key or not value:
            # The line itself is never quoted: a file named by mistake (or by someone else) may hold a secret.
            raise InputFileError("%s line %d is not `sample label`" % (p, number),
                                 hint="one `image_path<TAB>class` per line; class = index or name")
        if re.fullmatch(r"-?[0-9]{1,9}", value):  # ASCII digits only: "\u00b2".isdigit() is True, int() refuses it
            label = int(value)
        elif value in index:
            label = index[value]
        else:
            raise InputFileError("%s line %d: the label is neither a class index nor a class name of the model"
                                 % (p, number), hint="use class indices or the sidecar's label names")
        if class_names and not 0 <= label < len(class_names):
            raise InputFileError("%s line %d: class %d is outside 0..%d" % (p, number, label, len(class_names) - 1))
        table[key] = label
    if not table:
        raise InputFileError("label file %s has no labels" % p, hint="one `image_path<TAB>class` per line")
    return table


__all__ = ["ARITHMETICS", "CONFIDENCE", "DEFAULT_METRICS", "EvalResult", "Evaluator",
           "QuantizedLayer", "SIMULATED_LABEL", "arithmetic_label", "compare_outputs",
           "dequantize_layers", "label_table", "load", "only_layers", "preprocess_samples", "quantized_layers",
           "read_labels", "run_model", "session", "softmax", "unclassified_result"]
