"""INT8 accuracy before deployment: the Q/DQ ONNX run with ONNX Runtime's INT8 kernels against FP32.

:class:`Evaluator` holds a fixed set of preprocessed inputs and the FP32 model's outputs on them;
:meth:`Evaluator.evaluate` runs any candidate (a Q/DQ model, a mixed-precision variant, another
tool's quantized model) over the same inputs and compares:

* **top-1 agreement** with FP32, over all samples and over the *confident* ones (FP32 top-1
  probability > ``confidence``, 0.5 by default: real frames are not ImageNet-like, and a low-confidence
  FP32 answer flips under any perturbation), and **top-5 agreement** (FP32's top-1 is in the candidate's
  top 5);
* the **mean KL** divergence KL(P_fp32 || P_int8) of the softmax outputs, and the output SQNR (dB);
* with labels: top-1/top-5 **accuracy** of both, and the drop.

Sessions use ``ORT_ENABLE_ALL``, so ONNX Runtime fuses the Q/DQ pairs into its integer kernels
(QLinearConv, QGemm, QLinearAdd, ...): the numbers are those of INT8 arithmetic, not of a float
simulation.  ORT's integer kernels are not TensorRT's (rounding of the requantisation, the choice of
fused layers), so treat small differences with care; the Q/DQ placement and the scales are the same.

:func:`layer_sensitivity` ranks the quantized layers (nodes fed by DequantizeLinear) by how much
INT8 hurts them, by either method:

* ``"sqnr"`` -- one pass: every layer is also computed a second time from *FP32* inputs through its
  own Q/DQ pairs (activation and weight), and the SQNR of that output against the FP32 output is the
  layer's own quantization error, free of what earlier layers did;
* ``"kl"`` -- quantize one layer at a time (every other layer FP32) and measure the mean KL and
  agreement of the network output on a subset of the samples.
"""

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from jetforge.errors import CalibrationError, InputFileError, ModelError
from jetforge.optional import require

log = logging.getLogger(__name__)

CONFIDENCE = 0.5
SENSITIVITY_METHODS = ("sqnr", "kl")
_SUFFIX = "__jf_sens"


def _onnx():
    return require("onnx", "INT8 accuracy evaluation")


def load(model):
    from jetforge.calibrate.stats import load_model

    return load_model(model)


def session(model, optimize: bool = True, threads: int = 0):
    """An ONNX Runtime CPU session; ``optimize`` fuses Q/DQ into ORT's INT8 kernels (ORT_ENABLE_ALL)."""
    ort = require("onnxruntime", "INT8 accuracy evaluation")
    opts = ort.SessionOptions()
    opts.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                     else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    if threads:
        opts.intra_op_num_threads = int(threads)
    opts.log_severity_level = 3
    model = load(model)
    try:
        return ort.InferenceSession(model.SerializeToString(), sess_options=opts,
                                    providers=["CPUExecutionProvider"])
    except Exception as err:
        raise ModelError("ONNX Runtime cannot load the model for evaluation: %s" % " ".join(str(err).split())[:400],
                         hint="check the model with `python -m onnx.checker`") from err


def run_model(model, batches: Sequence[np.ndarray], threads: int = 0, output: int = 0) -> np.ndarray:
    """Output ``output`` of ``model`` over ``batches``, concatenated along axis 0."""
    sess = session(model, threads=threads)
    name = sess.get_inputs()[0].name
    out_name = sess.get_outputs()[output].name
    return np.concatenate([np.asarray(sess.run([out_name], {name: b})[0]) for b in batches], axis=0)


# --------------------------------------------------------------------------- metrics
def softmax(x: np.ndarray) -> np.ndarray:
    """Row softmax in float64; rows that already are probabilities (>= 0, sum 1) are kept."""
    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    if x.size and x.min() >= 0 and np.allclose(x.sum(axis=1), 1.0, atol=1e-3):
        return x
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@dataclass
class EvalResult:
    """How a candidate model's outputs compare with FP32's on the same inputs."""

    samples: int
    agreement: float
    confident_samples: int
    agreement_confident: Optional[float]
    top5_agreement: float
    mean_kl: float
    output_sqnr_db: float
    fp32_mean_confidence: float
    confidence: float = CONFIDENCE
    labelled: int = 0
    accuracy_fp32: Optional[float] = None
    accuracy_int8: Optional[float] = None
    top5_fp32: Optional[float] = None
    top5_int8: Optional[float] = None
    seconds: float = 0.0

    @property
    def accuracy_drop(self) -> Optional[float]:
        if self.accuracy_fp32 is None or self.accuracy_int8 is None:
            return None
        return self.accuracy_fp32 - self.accuracy_int8

    def to_dict(self) -> Dict[str, object]:
        d: Dict[str, object] = {
            "samples": self.samples, "agreement": _r(self.agreement),
            "confident_samples": self.confident_samples, "agreement_confident": _r(self.agreement_confident),
            "confidence_threshold": self.confidence, "top5_agreement": _r(self.top5_agreement),
            "mean_kl": _r(self.mean_kl, 6), "output_sqnr_db": _r(self.output_sqnr_db, 2),
            "fp32_mean_confidence": _r(self.fp32_mean_confidence)}
        if self.labelled:
            d.update({"labelled": self.labelled, "accuracy_fp32": _r(self.accuracy_fp32),
                      "accuracy_int8": _r(self.accuracy_int8), "accuracy_drop": _r(self.accuracy_drop),
                      "top5_fp32": _r(self.top5_fp32), "top5_int8": _r(self.top5_int8)})
        return d


def _r(v: Optional[float], digits: int = 4) -> Optional[float]:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else round(float(v), digits)


def _topk(p: np.ndarray, k: int) -> np.ndarray:
    k = min(k, p.shape[1])
    return np.argpartition(-p, k - 1, axis=1)[:, :k]


def compare_outputs(reference: np.ndarray, candidate: np.ndarray, labels: Optional[np.ndarray] = None,
                    confidence: float = CONFIDENCE) -> EvalResult:
    """Metrics of ``candidate`` outputs (N, classes) against FP32 ``reference``; ``labels`` (N,), -1 = none."""
    ref = np.asarray(reference, dtype=np.float64).reshape(len(reference), -1)
    cand = np.asarray(candidate, dtype=np.float64).reshape(len(candidate), -1)
    if ref.shape != cand.shape:
        raise CalibrationError("the INT8 model's output has shape %s but FP32's has %s" % (cand.shape, ref.shape))
    n = len(ref)
    if n == 0:
        raise CalibrationError("no evaluation samples", hint="give --eval a folder of images or a video")
    p, q = softmax(ref), softmax(cand)
    top_p, top_q = p.argmax(axis=1), q.argmax(axis=1)
    agree = top_p == top_q
    conf = p.max(axis=1)
    confident = conf > confidence
    top5_q = _topk(q, 5)
    top5_agree = (top5_q == top_p[:, None]).any(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        kl = np.where(p > 0, p * (np.log(np.maximum(p, 1e-300)) - np.log(np.maximum(q, 1e-300))), 0.0).sum(axis=1)
    err = float(np.sum((ref - cand) ** 2))
    sqnr = 10.0 * math.log10(float(np.sum(ref ** 2)) / err) if err > 0 else float("inf")
    res = EvalResult(samples=n, agreement=float(agree.mean()), confident_samples=int(confident.sum()),
                     agreement_confident=float(agree[confident].mean()) if confident.any() else None,
                     top5_agreement=float(top5_agree.mean()), mean_kl=float(np.mean(kl)), output_sqnr_db=sqnr,
                     fp32_mean_confidence=float(conf.mean()), confidence=confidence)
    if labels is not None:
        y = np.asarray(labels).reshape(-1)
        if len(y) != n:
            raise CalibrationError("%d labels for %d evaluation samples" % (len(y), n))
        known = y >= 0
        if known.any():
            yk = y[known]
            res.labelled = int(known.sum())
            res.accuracy_fp32 = float((top_p[known] == yk).mean())
            res.accuracy_int8 = float((top_q[known] == yk).mean())
            res.top5_fp32 = float((_topk(p[known], 5) == yk[:, None]).any(axis=1).mean())
            res.top5_int8 = float((top5_q[known] == yk[:, None]).any(axis=1).mean())
    return res


# --------------------------------------------------------------------------- evaluator
class Evaluator:
    """FP32 reference outputs on fixed inputs, against which candidate models are compared.

    ``batches`` are preprocessed input batches (N, ...) of a single-input model; they are kept in
    memory (a 224x224 RGB image is 0.6 MB), so that every candidate sees exactly the same inputs.
    """

    def __init__(self, fp32_model, batches: Iterable[np.ndarray], labels: Optional[Sequence[int]] = None,
                 confidence: float = CONFIDENCE, threads: int = 0) -> None:
        import time

        self.fp32_model = load(fp32_model)
        self.batches = [np.ascontiguousarray(b) for b in batches]
        if not self.batches:
            raise CalibrationError("no evaluation samples", hint="give --eval a folder of images or a video")
        self.samples = int(sum(len(b) for b in self.batches))
        self.labels = None if labels is None else np.asarray(labels, dtype=np.int64).reshape(-1)
        if self.labels is not None and len(self.labels) != self.samples:
            raise CalibrationError("%d labels for %d evaluation samples" % (len(self.labels), self.samples))
        self.confidence = confidence
        self.threads = threads
        t0 = time.perf_counter()
        self.reference = run_model(self.fp32_model, self.batches, threads)
        self.fp32_seconds = time.perf_counter() - t0

    def outputs(self, model) -> np.ndarray:
        return run_model(model, self.batches, self.threads)

    def evaluate(self, model) -> EvalResult:
        import time

        t0 = time.perf_counter()
        out = self.outputs(model)
        res = compare_outputs(self.reference, out, self.labels, self.confidence)
        res.seconds = time.perf_counter() - t0
        return res

    def subset(self, max_samples: int) -> "Evaluator":
        """An evaluator over the first ``max_samples`` samples (the FP32 outputs are reused)."""
        if max_samples >= self.samples:
            return self
        sub = Evaluator.__new__(Evaluator)
        sub.fp32_model, sub.confidence, sub.threads, sub.fp32_seconds = (self.fp32_model, self.confidence,
                                                                         self.threads, 0.0)
        batches, left = [], max_samples
        for b in self.batches:
            if left <= 0:
                break
            batches.append(b[:left])
            left -= len(batches[-1])
        sub.batches, sub.samples = batches, max_samples
        sub.reference = self.reference[:max_samples]
        sub.labels = None if self.labels is None else self.labels[:max_samples]
        return sub


def preprocess_samples(samples: Iterable[Tuple[str, np.ndarray]], preprocess, batch_size: int = 16,
                       fixed_batch: Optional[int] = None) -> Tuple[List[np.ndarray], List[str]]:
    """(name, uint8 BGR image) pairs -> preprocessed batches and the sample names, in order."""
    if fixed_batch:
        batch_size = fixed_batch
    batches: List[np.ndarray] = []
    names: List[str] = []
    pending: List[np.ndarray] = []
    for name, image in samples:
        pending.append(preprocess.apply(image))
        names.append(name)
        if len(pending) == batch_size:
            batches.append(np.stack(pending))
            pending = []
    if pending:
        if fixed_batch and len(pending) != fixed_batch:
            log.warning("dropping the last %d evaluation samples: the model's batch is fixed at %d",
                        len(pending), fixed_batch)
            names = names[:len(names) - len(pending)]
        else:
            batches.append(np.stack(pending))
    return batches, names


# --------------------------------------------------------------------------- labels
def read_labels(path: Union[str, Path], names: Sequence[str], class_names: Sequence[str] = ()) -> np.ndarray:
    """Labels for ``names`` (sample names: image paths, ``clip.mp4#frame``) from a text file.

    One ``sample label`` per line (separated by a tab, a comma or spaces; ``#`` comments); ``sample``
    is a path (absolute, relative to the label file, or a bare file name when that is unambiguous) or
    ``clip.mp4#frame``; ``label`` is a class index or a class name of the model's sidecar.
    Samples without a line get -1 (not counted in accuracy).
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as err:
        raise InputFileError("cannot read label file %s: %s" % (p, err.strerror or err),
                             hint="give a text file with one `image label` per line") from err
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
            raise InputFileError("%s line %d is not `sample label`: %r" % (p, number, raw[:80]),
                                 hint="one `image_path<TAB>class` per line; class = index or name")
        if value.lstrip("-").isdigit():
            label = int(value)
        elif value in index:
            label = index[value]
        else:
            raise InputFileError("%s line %d: %r is neither a class index nor a class name of the model"
                                 % (p, number, value), hint="use class indices or the sidecar's label names")
        if class_names and not 0 <= label < len(class_names):
            raise InputFileError("%s line %d: class %d is outside 0..%d" % (p, number, label, len(class_names) - 1))
        table[key] = label
    if not table:
        raise InputFileError("label file %s has no labels" % p, hint="one `image_path<TAB>class` per line")
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


# --------------------------------------------------------------------------- Q/DQ graph surgery
@dataclass
class QuantizedLayer:
    """A node of a Q/DQ model that reads dequantized inputs: one INT8 layer for TensorRT."""

    name: str
    op: str
    output: str
    inputs: List[int]  # input positions fed by DequantizeLinear


def _producers(model) -> Dict[str, object]:
    return {o: n for n in model.graph.node for o in n.output if o}


def _layer_name(node, index: int) -> str:
    return node.name or "%s_%d" % (node.op_type, index)


def quantized_layers(model) -> List[QuantizedLayer]:
    """Nodes (other than Q/DQ) with at least one input produced by DequantizeLinear, in graph order."""
    prod = _producers(model)
    out: List[QuantizedLayer] = []
    for i, node in enumerate(model.graph.node):
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue
        idx = [k for k, t in enumerate(node.input) if t in prod and prod[t].op_type == "DequantizeLinear"]
        if idx:
            out.append(QuantizedLayer(_layer_name(node, i), node.op_type, node.output[0], idx))
    return out


def _qdq_source(prod: Dict[str, object], tensor: str) -> Optional[str]:
    """The float tensor a DequantizeLinear(QuantizeLinear(x)) chain starts from (None if not such a chain)."""
    dq = prod.get(tensor)
    if dq is None or dq.op_type != "DequantizeLinear":
        return None
    q = prod.get(dq.input[0])
    if q is None or q.op_type != "QuantizeLinear":
        return None
    return q.input[0]


def dequantize_layers(model, layers: Iterable[str]):
    """A copy of the Q/DQ ``model`` in which ``layers`` (node names) read float inputs again.

    Their activation and weight Q/DQ pairs are bypassed (a pair still feeding another INT8 layer stays);
    in TensorRT such a layer runs in FP16/FP32.  Q/DQ nodes and initializers left unused are removed.
    """
    onnx = _onnx()
    m = onnx.ModelProto()
    m.CopyFrom(load(model))
    wanted = set(layers)
    prod = _producers(m)
    known = set()
    for i, node in enumerate(m.graph.node):
        name = _layer_name(node, i)
        if name not in wanted:
            continue
        known.add(name)
        for k, t in enumerate(node.input):
            src = _qdq_source(prod, t)
            if src is not None:
                node.input[k] = src
    unknown = wanted - known
    if unknown:
        raise CalibrationError("%d layer names are not nodes of the model, e.g. %r" % (len(unknown), sorted(unknown)[0]),
                               hint="use node names of the Q/DQ ONNX (see the report's sensitivity table)")
    _prune(m)
    return m


def _prune(m) -> None:
    """Remove nodes whose outputs nobody reads (repeatedly) and initializers nobody reads."""
    outputs = {o.name for o in m.graph.output}
    changed = True
    while changed:
        used = set(outputs)
        for n in m.graph.node:
            used.update(n.input)
        keep = [n for n in m.graph.node if any(o in used for o in n.output) or not n.output]
        changed = len(keep) != len(m.graph.node)
        if changed:
            del m.graph.node[:]
            m.graph.node.extend(keep)
    used = set(outputs)
    for n in m.graph.node:
        used.update(n.input)
    inits = [i for i in m.graph.initializer if i.name in used]
    if len(inits) != len(m.graph.initializer):
        del m.graph.initializer[:]
        m.graph.initializer.extend(inits)


def only_layers(model, layers: Iterable[str]):
    """A copy of the Q/DQ ``model`` where only ``layers`` stay INT8."""
    keep = set(layers)
    return dequantize_layers(model, [q.name for q in quantized_layers(model) if q.name not in keep])


# --------------------------------------------------------------------------- sensitivity
@dataclass
class LayerSensitivity:
    name: str
    op: str
    sqnr_db: Optional[float] = None       # local: this layer alone, FP32 inputs
    kl: Optional[float] = None            # network output, only this layer INT8
    agreement: Optional[float] = None     # network output, only this layer INT8

    def to_dict(self) -> Dict[str, object]:
        return {"name": self.name, "op": self.op, "sqnr_db": _r(self.sqnr_db, 2), "kl": _r(self.kl, 6),
                "agreement": _r(self.agreement)}


def _sensitivity_model(fp32_model, qdq_model, layers: Sequence[QuantizedLayer]):
    """The FP32 model plus, for every layer, a copy fed through its own Q/DQ pairs from FP32 tensors."""
    onnx = _onnx()
    m = onnx.ModelProto()
    m.CopyFrom(fp32_model)
    qprod = _producers(qdq_model)
    qinits = {i.name: i for i in qdq_model.graph.initializer}
    have_inits = {i.name for i in m.graph.initializer}
    fp_tensors = set(_producers(m)) | {i.name for i in m.graph.input} | have_inits
    qnodes = {_layer_name(n, i): n for i, n in enumerate(qdq_model.graph.node)}
    made: Dict[str, str] = {}
    pairs: List[Tuple[str, str, str]] = []  # (layer name, fp32 output, int8 output)

    def need_init(name: str) -> None:
        if name and name not in have_inits and name in qinits:
            m.graph.initializer.append(qinits[name])
            have_inits.add(name)

    def requantize(tensor: str) -> Optional[str]:
        dq = qprod[tensor]
        q = qprod.get(dq.input[0])
        if q is None or q.op_type != "QuantizeLinear":
            return None
        src = q.input[0]
        if src in made:
            return made[src]
        need_init(src)
        if src not in fp_tensors and src not in have_inits:
            return None
        for t in list(q.input[1:]) + list(dq.input[1:]):
            need_init(t)
        qo, do = src + _SUFFIX + "_q", src + _SUFFIX + "_dq"
        m.graph.node.extend([
            onnx.helper.make_node("QuantizeLinear", [src] + list(q.input[1:]), [qo], name=qo, domain=q.domain),
            onnx.helper.make_node("DequantizeLinear", [qo] + list(dq.input[1:]), [do], name=do, domain=dq.domain)])
        for dst, srcn in ((m.graph.node[-2], q), (m.graph.node[-1], dq)):
            dst.attribute.extend(srcn.attribute)
        made[src] = do
        return do

    for layer in layers:
        node = qnodes.get(layer.name)
        if node is None or layer.output not in fp_tensors:
            continue
        inputs = list(node.input)
        ok = True
        for k, t in enumerate(inputs):
            if t in qprod and qprod[t].op_type == "DequantizeLinear":
                r = requantize(t)
                if r is None:
                    ok = False
                    break
                inputs[k] = r
            elif t:
                need_init(t)
                if t not in fp_tensors and t not in have_inits:
                    ok = False
                    break
        if not ok:
            continue
        out = layer.output + _SUFFIX
        dup = onnx.helper.make_node(node.op_type, inputs, [out] + [o + _SUFFIX for o in node.output[1:]],
                                    name=layer.name + _SUFFIX, domain=node.domain)
        dup.attribute.extend(node.attribute)
        m.graph.node.append(dup)
        pairs.append((layer.name, layer.output, out))
    from jetforge.calibrate.stats import with_outputs

    names = [t for _, a, b in pairs for t in (a, b)]
    m = with_outputs(m, [n for n in names if not n.endswith(_SUFFIX)])
    for _, _, b in pairs:
        m.graph.output.append(onnx.helper.make_tensor_value_info(b, onnx.TensorProto.FLOAT, None))
    return m, pairs


def layer_sensitivity(fp32_model, qdq_model, batches: Sequence[np.ndarray], method: str = "sqnr",
                      evaluator: Optional[Evaluator] = None, max_samples: int = 64, threads: int = 0,
                      progress: Optional[Callable[[int, int], None]] = None) -> List[LayerSensitivity]:
    """Per-layer sensitivity of the quantized layers of ``qdq_model``, most sensitive first (module doc)."""
    if method not in SENSITIVITY_METHODS:
        from jetforge.errors import UnknownNameError

        raise UnknownNameError("sensitivity method", method, SENSITIVITY_METHODS)
    fp32_model, qdq_model = load(fp32_model), load(qdq_model)
    layers = quantized_layers(qdq_model)
    if method == "kl":
        ev = evaluator if evaluator is not None else Evaluator(fp32_model, batches, threads=threads)
        ev = ev.subset(max_samples)
        out: List[LayerSensitivity] = []
        for i, layer in enumerate(layers):
            res = ev.evaluate(only_layers(qdq_model, [layer.name]))
            out.append(LayerSensitivity(layer.name, layer.op, kl=res.mean_kl, agreement=res.agreement))
            if progress is not None:
                progress(i + 1, len(layers))
        return sorted(out, key=lambda s: (-(s.kl or 0.0), s.agreement or 0.0))
    model, pairs = _sensitivity_model(fp32_model, qdq_model, layers)
    sess = session(model, threads=threads)
    in_name = sess.get_inputs()[0].name
    fetch = [t for _, a, b in pairs for t in (a, b)]
    signal = np.zeros(len(pairs))
    noise = np.zeros(len(pairs))
    seen = 0
    for b in batches:
        if seen >= max_samples:
            break
        b = b[:max_samples - seen]
        # small chunks: every layer's output is fetched twice
        for start in range(0, len(b), 4):
            res = sess.run(fetch, {in_name: b[start:start + 4]})
            for k in range(len(pairs)):
                ref = res[2 * k].astype(np.float64)
                signal[k] += float(np.sum(ref * ref))
                noise[k] += float(np.sum((ref - res[2 * k + 1]) ** 2))
        seen += len(b)
    ops = {q.name: q.op for q in layers}
    result = []
    for k, (name, _, _) in enumerate(pairs):
        sqnr = 10.0 * math.log10(signal[k] / noise[k]) if noise[k] > 0 and signal[k] > 0 else float("inf")
        result.append(LayerSensitivity(name, ops[name], sqnr_db=sqnr))
    skipped = [q.name for q in layers if q.name not in {p[0] for p in pairs}]
    if skipped:
        log.info("%d quantized layers could not be isolated for SQNR, e.g. %s", len(skipped), skipped[0])
    return sorted(result, key=lambda s: s.sqnr_db if s.sqnr_db is not None else float("inf"))
