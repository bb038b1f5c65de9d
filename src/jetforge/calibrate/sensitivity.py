"""Per-layer INT8 sensitivity of a Q/DQ model, in simulated INT8 arithmetic (TensorRT's rules).

:func:`layer_sensitivity` ranks the quantized layers (nodes fed by DequantizeLinear) by how much
INT8 hurts them, by either method:

* ``"sqnr"`` -- one pass: every layer is also computed a second time from *FP32* inputs through its
  own Q/DQ pairs (activation and weight), and the SQNR of that output against the FP32 output is the
  layer's own quantization error, free of what earlier layers did;
* ``"kl"`` -- quantize one layer at a time (every other layer FP32) and measure the mean KL and
  agreement of the network output on a subset of the samples.

Both run the simulated arithmetic of :mod:`jetforge.calibrate.int8sim.simulate` by default, so the ranking is
the same on any CPU; ``arithmetic="ort-int8"`` ranks with ONNX Runtime's INT8 kernels instead.
"""

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from jetforge.calibrate.metrics import _r
from jetforge.calibrate.qdq.surgery import (QuantizedLayer, _layer_name, _onnx, _producers, load, only_layers,
                                            quantized_layers)

if TYPE_CHECKING:  # pragma: no cover
    from jetforge.calibrate.evaluate import Evaluator

log = logging.getLogger(__name__)

SENSITIVITY_METHODS = ("sqnr", "kl")
_SUFFIX = "__jf_sens"


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
                      evaluator: Optional["Evaluator"] = None, max_samples: int = 64, threads: int = 0,
                      progress: Optional[Callable[[int, int], None]] = None,
                      arithmetic: Optional[str] = None) -> List[LayerSensitivity]:
    """Per-layer sensitivity of the quantized layers of ``qdq_model``, most sensitive first (module doc).

    ``arithmetic`` defaults to the evaluator's (``"simulated"`` without one).
    """
    from jetforge.calibrate import ortrun
    from jetforge.calibrate.evaluate import Evaluator

    if method not in SENSITIVITY_METHODS:
        from jetforge.errors import UnknownNameError

        raise UnknownNameError("sensitivity method", method, SENSITIVITY_METHODS)
    fp32_model, qdq_model = load(fp32_model), load(qdq_model)
    layers = quantized_layers(qdq_model)
    if method == "kl":
        ev = evaluator if evaluator is not None else Evaluator(fp32_model, batches, threads=threads,
                                                               arithmetic=arithmetic or "simulated")
        ev = ev.subset(max_samples)
        if arithmetic is not None and arithmetic != ev.arithmetic:
            ev = ev.with_arithmetic(arithmetic)
        out: List[LayerSensitivity] = []
        for i, layer in enumerate(layers):
            res = ev.evaluate(only_layers(qdq_model, [layer.name]))
            out.append(LayerSensitivity(layer.name, layer.op, kl=res.mean_kl, agreement=res.agreement))
            if progress is not None:
                progress(i + 1, len(layers))
        return sorted(out, key=lambda s: (-(s.kl or 0.0), s.agreement or 0.0))
    model, pairs = _sensitivity_model(fp32_model, qdq_model, layers)
    if arithmetic is None:
        arithmetic = evaluator.arithmetic if evaluator is not None else "simulated"
    sess = ortrun.session(model, arithmetic, threads=threads)
    in_name = sess.inputs[0].name
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
            out = sess.infer({in_name: b[start:start + 4]}, outputs=fetch)
            res = [out[t] for t in fetch]
            for k in range(len(pairs)):
                ref = res[2 * k].astype(np.float64)
                signal[k] += float(np.sum(ref * ref))
                noise[k] += float(np.sum((ref - res[2 * k + 1]) ** 2))
        seen += len(b)
    sess.close()
    ops = {q.name: q.op for q in layers}
    result = []
    for k, (name, _, _) in enumerate(pairs):
        sqnr = 10.0 * math.log10(signal[k] / noise[k]) if noise[k] > 0 and signal[k] > 0 else float("inf")
        result.append(LayerSensitivity(name, ops[name], sqnr_db=sqnr))
    skipped = [q.name for q in layers if q.name not in {p[0] for p in pairs}]
    if skipped:
        log.info("%d quantized layers could not be isolated for SQNR, e.g. %s", len(skipped), skipped[0])
    return sorted(result, key=lambda s: s.sqnr_db if s.sqnr_db is not None else float("inf"))


__all__ = ["LayerSensitivity", "SENSITIVITY_METHODS", "layer_sensitivity"]
