"""Activation statistics: run the ONNX model in ONNX Runtime over the samples and histogram tensors.

The model runs in a session from :func:`jetforge.runtime.session.open_session` (an in-memory copy
with the observed tensors as outputs, ONNX Runtime's "basic" optimisation so no observed tensor is
fused away), and samples are prepared by the model's input contract (:mod:`jetforge.runtime.inputs`).

A copy of the model gets the tensors to observe added as graph outputs; it runs batch by
batch, and every batch updates one :class:`StreamingHistogram` per tensor, so memory is one
batch of activations plus ``O(bins)`` per tensor, whatever the number of samples.

Which tensors:

* ``"qdq"`` -- what explicit quantization needs: the graph input, input 0 of
  Conv/ConvTranspose/Gemm/MatMul (and a non-constant second input of Gemm/MatMul), both inputs of Add;
* ``"all"`` -- additionally every other floating-point tensor computed from the input, which is what
  an implicit-quantization cache holds (TensorRT wants a range for every tensor of the network,
  and DLA INT8 falls back to FP16 for a tensor without one).
"""

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from jetforge.calibrate.histogram import DEFAULT_BINS, StreamingHistogram
from jetforge.calibrate.quality import QualityTracker
from jetforge.errors import BackendError, CalibrationError, ModelError
from jetforge.optional import require

log = logging.getLogger(__name__)

WEIGHTED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
QUANTIZED_INPUTS = {"Conv": (0,), "ConvTranspose": (0,), "Gemm": (0, 1), "MatMul": (0, 1), "Add": (0, 1)}
_FLOAT_TYPES = None  # filled lazily: {FLOAT, FLOAT16, BFLOAT16, DOUBLE}


def _onnx():
    return require("onnx", "INT8 calibration")


def load_model(model: Union[str, Path, "object"]):
    """An ``onnx.ModelProto`` from a path (external data included) or as given."""
    if isinstance(model, (str, Path)):
        from jetforge.runtime.onnx_file import read_onnx

        return read_onnx(model, purpose="INT8 calibration")  # refuses empty, damaged and hollow models
    return model


def _float_types() -> set:
    global _FLOAT_TYPES
    if _FLOAT_TYPES is None:
        tp = _onnx().TensorProto
        _FLOAT_TYPES = {tp.FLOAT, tp.FLOAT16, tp.BFLOAT16, tp.DOUBLE}
    return _FLOAT_TYPES


def tensor_types(model) -> Dict[str, int]:
    """Element type of every tensor whose type ONNX shape inference can tell."""
    onnx = _onnx()
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception as err:  # inference fails on some custom ops; fall back to what is declared
        log.debug("shape inference failed: %s", err)
        inferred = model
    g = inferred.graph
    types: Dict[str, int] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if vi.type.HasField("tensor_type"):
            types[vi.name] = vi.type.tensor_type.elem_type
    for init in g.initializer:
        types[init.name] = init.data_type
    return types


def graph_inputs(model) -> List:
    """Graph inputs that are not initializers (older exporters list weights as inputs too)."""
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def constant_tensors(model) -> set:
    """Initializers, Constant outputs, and tensors computed only from those."""
    const = {i.name for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" or (node.input and all((not n) or n in const for n in node.input)):
            const.update(o for o in node.output if o)
    return const


def quantizable_tensors(model) -> List[str]:
    """Tensors explicit quantization puts Q/DQ on (see the module docstring), in graph order."""
    const = constant_tensors(model)
    types = tensor_types(model)
    floats = _float_types()
    out: List[str] = [i.name for i in graph_inputs(model) if types.get(i.name, 1) in floats]  # 1 = FLOAT
    for node in model.graph.node:
        for idx in QUANTIZED_INPUTS.get(node.op_type, ()):
            if idx < len(node.input):
                name = node.input[idx]
                if name and name not in const and types.get(name, 1) in floats and name not in out:
                    out.append(name)
    return out


def activation_tensors(model) -> List[str]:
    """Every floating-point tensor computed from the graph inputs (graph inputs first)."""
    const = constant_tensors(model)
    types = tensor_types(model)
    floats = _float_types()
    names: List[str] = []
    seen = set()
    for i in graph_inputs(model):
        if types.get(i.name) in floats:
            names.append(i.name)
            seen.add(i.name)
    for node in model.graph.node:
        for o in node.output:
            if o and o not in const and o not in seen and types.get(o) in floats:
                names.append(o)
                seen.add(o)
    # anything a weighted op or Add reads must be there even when its type could not be inferred
    for name in quantizable_tensors(model):
        if name not in seen:
            names.append(name)
            seen.add(name)
    return names


def select_tensors(model, which: Union[str, Sequence[str]] = "all") -> List[str]:
    if which == "all":
        return activation_tensors(model)
    if which == "qdq":
        return quantizable_tensors(model)
    if isinstance(which, str):
        raise CalibrationError("unknown tensor selection %r" % which, hint="use 'all', 'qdq' or a list of names")
    return list(which)


def with_outputs(model, names: Sequence[str]):
    """A copy of ``model`` with ``names`` added as graph outputs (graph inputs are left out)."""
    onnx = _onnx()
    m = onnx.ModelProto()
    m.CopyFrom(model)
    types = tensor_types(model)
    present = {o.name for o in m.graph.output}
    inputs = {i.name for i in m.graph.input}
    for name in names:
        if name in present or name in inputs:
            continue
        m.graph.output.append(onnx.helper.make_tensor_value_info(name, types.get(name, onnx.TensorProto.FLOAT), None))
        present.add(name)
    return m


def make_session(model, providers: Optional[Sequence[str]] = None, threads: int = 0):
    """A session (ONNX Runtime, "basic" optimisation) over an in-memory model; ``threads`` 0: ORT's default."""
    from jetforge.runtime.session import open_session

    return open_session(model, backend="onnxruntime", optimization="basic", threads=int(threads or 0),
                        providers=list(providers or ["CPUExecutionProvider"]), name="the model being calibrated")


@dataclass
class InputSpec:
    name: str
    shape: List[Union[int, str, None]]
    dtype: str

    @property
    def fixed_batch(self) -> Optional[int]:
        d = self.shape[0] if self.shape else None
        return d if isinstance(d, int) and d > 0 else None


def input_spec(session) -> InputSpec:
    """The one float input of a calibration session (:class:`~jetforge.runtime.session.Session`)."""
    inputs = session.inputs
    if len(inputs) != 1:
        raise CalibrationError("the model has %d inputs (%s); image calibration feeds exactly one"
                               % (len(inputs), ", ".join(i.name for i in inputs)),
                               hint="calibrate a single-input model, or feed tensors with collect_from_batches()")
    i = inputs[0]
    if i.dtype not in ("float32", "float16"):
        raise CalibrationError("model input %s has type %s; calibration feeds float images" % (i.name, i.dtype))
    return InputSpec(i.name, list(i.shape), i.dtype)


@dataclass
class ActivationStats:
    """Histograms of every observed tensor plus what the run saw."""

    histograms: Dict[str, StreamingHistogram]
    input_name: str
    samples: int = 0
    batches: int = 0
    dropped: int = 0
    quality: Optional[QualityTracker] = None
    names: List[str] = field(default_factory=list)

    def memory_bytes(self) -> int:
        return sum(h.nbytes() for h in self.histograms.values())


def fixed_batch(model) -> Optional[int]:
    """The static batch size of a single-input model (None when the batch axis is dynamic)."""
    inputs = graph_inputs(model)
    if len(inputs) != 1 or not inputs[0].type.HasField("tensor_type"):
        return None
    dims = inputs[0].type.tensor_type.shape.dim
    if not dims or not dims[0].HasField("dim_value") or dims[0].dim_value <= 0:
        return None
    return int(dims[0].dim_value)


def _check_shape(spec: InputSpec, batch: np.ndarray) -> None:
    want = spec.shape[1:]
    got = batch.shape[1:]
    if len(want) != len(got) or any(isinstance(w, int) and w > 0 and w != g for w, g in zip(want, got)):
        raise CalibrationError("the sidecar's preprocessing makes inputs of shape %s but model input %s expects %s"
                               % ("x".join(map(str, got)), spec.name,
                                  "x".join(str(w) if isinstance(w, int) and w > 0 else "?" for w in want)),
                               hint="fix height/width/layout in the model's sidecar (.onnx.json) preprocess block")


def thread_plan(threads: Optional[int] = None) -> Tuple[int, int]:
    """(ONNX Runtime intra-op threads, histogram threads) for the statistics pass on ``threads`` cores.

    ONNX Runtime runs batch ``i + 1`` in a background thread while batch ``i`` is histogrammed, so the
    two share the cores: histogramming costs about twice the inference of MobileNetV2 (every tensor
    of every sample goes through the bin search), hence one ORT thread per two cores and histogram
    threads on every core (``np.bincount`` and the ufuncs release the GIL).  A single-threaded ORT
    session runs in its caller's thread, so no ORT worker spins while histogram threads wait for it.
    """
    from jetforge.runtime.session.base import default_threads

    cores = int(threads) if threads else default_threads()
    return max(1, cores // 2), max(1, cores)


class _Prefetch:
    """Runs ``produce(batch)`` for each batch of ``batches`` in a background thread, at most ``depth`` ahead.

    Iterating yields ``(batch, produced)`` in order.  At most ``depth`` batches are read and produced
    at once (the one the caller holds counts until it asks for the next), which bounds memory to
    ``depth`` batches of activations.  An exception in the background thread is raised in the caller's; leaving the loop
    early (an error, Ctrl-C) stops the thread after the batch it is running.
    """

    _DONE = object()

    def __init__(self, batches: Iterable[np.ndarray], produce: Callable[[np.ndarray], object], depth: int = 2) -> None:
        import queue
        import threading

        self._batches, self._produce = batches, produce
        self._slots = threading.Semaphore(depth)
        self._queue: "queue.Queue" = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jetforge-calibration-prefetch", daemon=True)

    def _run(self) -> None:
        try:
            batches = iter(self._batches)
            while True:
                while not self._slots.acquire(timeout=0.2):  # a free slot before the next batch is even read
                    if self._stop.is_set():
                        return
                if self._stop.is_set():
                    return
                batch = next(batches, self._DONE)
                if batch is self._DONE:
                    break
                self._queue.put((batch, self._produce(batch)))
            self._queue.put(self._DONE)
        except BaseException as err:  # handed to the caller's thread, which raises it
            self._queue.put(err)

    def __iter__(self):
        self._thread.start()
        try:
            while True:
                item = self._queue.get()
                if item is self._DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
                self._slots.release()
        finally:
            self._stop.set()
            self._thread.join(timeout=60)


def collect_from_batches(model, batches: Iterable[np.ndarray], tensors: Union[str, Sequence[str]] = "all",
                         providers: Optional[Sequence[str]] = None, num_bins: int = DEFAULT_BINS,
                         progress: Optional[Callable[[int], None]] = None,
                         threads: Optional[int] = None) -> ActivationStats:
    """Histograms over already-preprocessed input batches (N, ...) of a single-input model.

    ``batches`` is consumed, and ONNX Runtime run, in a background thread one batch ahead of the
    histograms (see :func:`thread_plan`); the histograms are filled batch by batch in order, so the
    result is the same as a sequential pass.
    """
    model = load_model(model)
    names = select_tensors(model, tensors)
    ort_threads, hist_threads = thread_plan(threads)
    session = make_session(with_outputs(model, names), providers, threads=ort_threads)
    spec = input_spec(session)
    out_names = [o.name for o in session.outputs]
    observed = [n for n in names if n in out_names or n == spec.name]
    missing = [n for n in names if n not in observed]
    if missing:
        log.warning("%d tensors cannot be observed in ONNX Runtime and get no scale, e.g. %s", len(missing), missing[0])
    hists = {n: StreamingHistogram(num_bins) for n in observed}
    stats = ActivationStats(hists, spec.name, names=observed)
    fetch = [n for n in out_names if n in hists]

    def infer(batch: np.ndarray) -> List[Tuple[str, np.ndarray]]:
        batch = np.asarray(batch, dtype=np.dtype(spec.dtype))
        _check_shape(spec, batch)
        try:
            results = session.infer({spec.name: batch}, outputs=fetch)
        except (BackendError, ModelError) as err:
            raise ModelError("ONNX Runtime failed on a calibration batch of shape %s: %s"
                             % (batch.shape, " ".join(str(err.message).split())[:400]),
                             hint="check that the sidecar's preprocessing matches the model input") from err
        tensors_ = [(spec.name, batch)] if spec.name in hists else []
        tensors_ += [(n, np.asarray(results[n])) for n in fetch if np.asarray(results[n]).dtype.kind == "f"]
        # largest first, so that the histogram threads finish a batch at about the same time
        return sorted(tensors_, key=lambda t: -t[1].size)

    pool = None
    if hist_threads > 1:
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(max_workers=hist_threads, thread_name_prefix="jetforge-histogram")
    try:
        for batch, values in _Prefetch(batches, infer):
            if pool is None:
                for name, value in values:
                    hists[name].update(value)
            else:  # each tensor's histogram is updated by one task per batch, batches in order
                for done in [pool.submit(hists[name].update, value) for name, value in values]:
                    done.result()
            stats.samples += int(len(batch))
            stats.batches += 1
            if progress is not None:
                progress(int(len(batch)))
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
        session.close()
    # a tensor that turned out not to be floating point (type unknown up front) has no data
    for name in [n for n, h in hists.items() if h.empty]:
        del hists[name]
    stats.names = [n for n in stats.names if n in hists]
    return stats


def collect_statistics(model, samples: Iterable[Tuple[str, np.ndarray]], preprocess, batch_size: int = 8,
                       tensors: Union[str, Sequence[str]] = "all", providers: Optional[Sequence[str]] = None,
                       num_bins: int = DEFAULT_BINS, total: Optional[int] = None, progress: bool = True,
                       quality: Optional[QualityTracker] = None) -> ActivationStats:
    """Prepare ``(name, uint8 BGR image)`` samples with ``preprocess`` (the model's image input contract),
    run them in batches, histogram the tensors."""
    from jetforge.calibrate.sources import PreprocessedBatches

    model = load_model(model)
    if batch_size < 1:
        raise CalibrationError("batch size must be at least 1, got %d" % batch_size)
    quality = quality if quality is not None else QualityTracker()
    # the batch axis of a static-batch model decides the batch size
    batches = PreprocessedBatches(samples, preprocess, batch_size, fixed_batch(model), on_sample=quality.update)
    bar = None
    if progress:
        tqdm = require("tqdm").tqdm
        bar = tqdm(total=total, unit="img", desc="calibrating", leave=False)
    try:
        stats = collect_from_batches(model, (b for b, _ in batches), tensors, providers, num_bins,
                                     progress=bar.update if bar is not None else None)
    finally:
        if bar is not None:
            bar.close()
    stats.quality = quality
    stats.dropped = batches.dropped
    return stats
