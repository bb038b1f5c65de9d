"""Export a QAT model to an explicit-quantization (Q/DQ) ONNX, and run such a model in ONNX Runtime.

:func:`export_qdq_onnx` freezes the weight ranges, exports with :func:`jetforge.compress.export.export_onnx`
(TorchScript exporter, opset 17, sidecar), where every fake-quantizer becomes a
``QuantizeLinear``/``DequantizeLinear`` pair, then normalises the pairs: scales and zero points
become initializers (constant, positive float32 scales; int8 zero points, all 0), per-channel
weight pairs carry ``axis=0``.  The file keeps TensorRT's placement: Q/DQ on the inputs of Conv,
Gemm and the residual Add.

ONNX Runtime's CPU provider only turns ``DQ -> Conv -> Q`` into an INT8 ``QLinearConv``: a Conv
whose output goes through a ReLU before the next Q/DQ runs in float on dequantized values.
:func:`qdq_for_ort` rewrites the model for ORT without changing a single output value: before a
ReLU that sits between a Conv/Add and a Q/DQ pair it inserts a copy of that pair (same scale).
Symmetric quantization with zero point 0 commutes with ReLU (``q(relu(x)) == relu(q(x))``) and
quantizing twice with one scale equals quantizing once, so the outputs are identical.
"""

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from jetforge.calibrate.ortrun import INT8_KERNELS  # noqa: F401  (re-exported)
from jetforge.errors import ModelError
from jetforge.fileio import PathLike, atomic_output
from jetforge.optional import require
from jetforge.runtime.qdq_scales import scale_problem

log = logging.getLogger(__name__)

MIN_OPSET = 13


@dataclass
class QdqExport:
    """What :func:`export_qdq_onnx` wrote."""

    path: Path
    quantize_nodes: int = 0
    per_channel_weights: int = 0
    per_tensor_activations: int = 0
    opset: int = 0
    sidecar: Any = None
    scales: Dict[str, float] = field(default_factory=dict)  # activation tensor -> scale

    def to_dict(self) -> Dict[str, Any]:
        return {"path": str(self.path), "quantize_nodes": self.quantize_nodes, "opset": self.opset,
                "per_channel_weights": self.per_channel_weights,
                "per_tensor_activations": self.per_tensor_activations}


def _constants_to_initializers(model) -> None:
    """Constant nodes feeding Q/DQ scale/zero-point inputs become initializers (constant, visible to parsers)."""
    g = model.graph
    qdq_params = {i for n in g.node if n.op_type in ("QuantizeLinear", "DequantizeLinear") for i in n.input[1:]}
    for n in list(g.node):
        if n.op_type == "Constant" and n.output[0] in qdq_params and n.attribute and n.attribute[0].name == "value":
            t = n.attribute[0].t
            t.name = n.output[0]
            g.initializer.append(t)
            g.node.remove(n)


def _inline_identity_constants(model) -> int:
    """Readers of ``Identity(initializer)`` read the initializer itself; returns how many Identity nodes went.

    The exporter shares equal initializers through Identity nodes (every all-zero bias of a BN-folded
    convolution of a network with fresh BatchNorm statistics is one tensor), which would make the bias look
    like an activation to TensorRT's Q/DQ rules, the DLA translation and the INT8 simulation."""
    g = model.graph
    inits = {i.name for i in g.initializer}
    outputs = {o.name for o in g.output}
    alias = {n.output[0]: n.input[0] for n in g.node
             if n.op_type == "Identity" and n.input and n.input[0] in inits and n.output[0] not in outputs}
    if not alias:
        return 0
    for n in g.node:
        for k, name in enumerate(n.input):
            if name in alias:
                n.input[k] = alias[name]
    kept = [n for n in g.node if not (n.op_type == "Identity" and n.output[0] in alias)]
    del g.node[:]
    g.node.extend(kept)
    return len(alias)


def normalize_qdq(model) -> Tuple[int, int, int]:
    """Make every Q/DQ pair follow TensorRT's rules, in place; returns (Q nodes, per-channel, per-tensor).

    Raises ModelError for a pair it cannot make valid (non-constant or non-positive scale, non-zero zero
    point): those would be refused by TensorRT's parser.
    """
    onnx = require("onnx", "Q/DQ export")
    from onnx import numpy_helper

    _constants_to_initializers(model)
    _inline_identity_constants(model)
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    n_q = per_channel = per_tensor = 0
    for node in g.node:
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        if len(node.input) < 2 or node.input[1] not in inits:
            raise ModelError("%s %s has a non-constant scale" % (node.op_type, node.name),
                             hint="export the QAT model with frozen ranges (export_qdq_onnx does)")
        scale = numpy_helper.to_array(inits[node.input[1]])
        problem = scale_problem(scale) or (None if scale.dtype == np.float32 else "has a %s scale, not float32"
                                           % scale.dtype)  # the rules bundle create and qat --translate apply
        if problem:
            raise ModelError("%s %s %s" % (node.op_type, node.name, problem),
                             hint="recalibrate: an activation range is 0 or not finite")
        if len(node.input) < 3 or not node.input[2]:
            zp_name = node.input[1] + "_zero_point"
            if zp_name not in inits:
                inits[zp_name] = numpy_helper.from_array(np.zeros(scale.shape, dtype=np.int8), zp_name)
                g.initializer.append(inits[zp_name])
            if len(node.input) < 3:
                node.input.append(zp_name)
            else:
                node.input[2] = zp_name
        zp = numpy_helper.to_array(inits[node.input[2]])
        if zp.any():
            raise ModelError("%s %s has a non-zero zero point; TensorRT is symmetric only" % (node.op_type, node.name))
        if zp.dtype != np.int8:
            fixed = numpy_helper.from_array(zp.astype(np.int8), node.input[2])
            inits[node.input[2]].CopyFrom(fixed)
        if node.op_type == "QuantizeLinear":
            n_q += 1
            if scale.size > 1:
                per_channel += 1
            else:
                per_tensor += 1
    merged = _merge_duplicate_pairs(model)
    if merged:
        n_q -= merged
        per_tensor -= merged
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx") and o.version < MIN_OPSET:
            raise ModelError("opset %d has no per-axis Q/DQ; export with opset >= 13" % o.version)
    onnx.checker.check_model(model)
    return n_q, per_channel, per_tensor


def _merge_duplicate_pairs(model) -> int:
    """One Q/DQ pair per (tensor, scale): a tensor quantized by a shared quantizer for two consumers is
    exported twice; ORT fuses a Conv only when its output has one Q, and TensorRT needs one range per tensor."""
    from onnx import numpy_helper

    g = model.graph
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    users: Dict[str, List[Any]] = {}
    for n in g.node:
        for i in n.input:
            users.setdefault(i, []).append(n)
    first: Dict[Tuple[str, bytes, bytes], str] = {}
    drop = []
    for q in list(g.node):
        if q.op_type != "QuantizeLinear" or q.input[0] in inits:
            continue
        dqs = users.get(q.output[0], [])
        if len(dqs) != 1 or dqs[0].op_type != "DequantizeLinear":
            continue
        dq = dqs[0]
        key = (q.input[0], inits[q.input[1]].tobytes(), inits[q.input[2]].tobytes())
        if key not in first:
            first[key] = dq.output[0]
            continue
        for u in users.get(dq.output[0], []):
            for k, name in enumerate(u.input):
                if name == dq.output[0]:
                    u.input[k] = first[key]
        for out in g.output:
            if out.name == dq.output[0]:  # pragma: no cover - a graph output straight from a DQ
                continue
        drop.extend([q, dq])
    for n in drop:
        g.node.remove(n)
    return len(drop) // 2


def activation_scales(model) -> Dict[str, float]:
    """``{tensor: scale}`` of every per-tensor Q whose input is not an initializer (the activations)."""
    from onnx import numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    out = {}
    for n in model.graph.node:
        if n.op_type == "QuantizeLinear" and n.input[0] not in inits and n.input[1] in inits:
            s = numpy_helper.to_array(inits[n.input[1]])
            if s.size == 1:
                out[n.input[0]] = float(s.reshape(-1)[0])
    return out


def export_qdq_onnx(model: Any, path: PathLike, input_shape: Sequence[int] = (1, 1, 28, 28), *,
                    labels: Sequence[str] = (), model_name: str = "", preprocess: Any = None,
                    opset: int = 17, dynamic_batch: bool = True,
                    provenance: Optional[Dict[str, Any]] = None, task: str = "classify", input_name: str = "input",
                    output_name: str = "logits", extra: Optional[Dict[str, Any]] = None) -> QdqExport:
    """Write the QAT ``model`` as a Q/DQ ONNX at ``path`` (plus ``path.json`` sidecar).

    ``input_shape`` has the batch axis first: ``(1, C, H, W)`` for an image model, ``(1, C, T, H, W)`` for a
    3D / (2+1)D clip model, whose sidecar gets its clip contract through ``extra={"clip": contract.to_dict()}``
    with ``task="action"`` (as :func:`jetforge.compress.export.export_onnx` writes clip models).
    """
    onnx = require("onnx", "Q/DQ export")
    from jetforge.compress.export import export_onnx
    from jetforge.compress.qat.prepare import freeze_weight_ranges, unfreeze_weight_ranges

    if opset < MIN_OPSET:
        raise ModelError("opset %d is too old for per-channel Q/DQ; use 13 or newer" % opset)
    was_training = model.training
    model.eval()
    freeze_weight_ranges(model)
    import warnings

    import torch

    try:
        details = {"quantization": "qat", "qdq": True}
        details.update(provenance or {})
        with warnings.catch_warnings():  # the scales are traced as constants on purpose
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            sidecar = export_onnx(model, path, input_shape, task=task, model_name=model_name, labels=labels,
                                  preprocess=preprocess, input_name=input_name, output_name=output_name,
                                  opset=opset, dynamic_batch=dynamic_batch, provenance=details,
                                  extra=dict(extra or {}, precision="int8-qdq", quantization="qat"))
    finally:
        unfreeze_weight_ranges(model)
        model.train(was_training)
    proto = onnx.load(str(path))
    n_q, pc, pt = normalize_qdq(proto)
    if n_q == 0:
        raise ModelError("the exported model has no QuantizeLinear nodes; was the model prepared with prepare_qat?",
                         hint="export the model returned by prepare_qat/qat()")
    with atomic_output(path, suffix=".onnx") as tmp:
        onnx.save(proto, str(tmp))
    from jetforge.runtime.sidecar import write_sidecar

    write_sidecar(path, sidecar)  # the file changed: the sidecar's content hash must be the normalised file's
    opset_v = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    log.info("exported Q/DQ ONNX %s: %d Q nodes (%d per-channel weights, %d per-tensor activations)",
             path, n_q, pc, pt)
    return QdqExport(path=Path(path), quantize_nodes=n_q, per_channel_weights=pc, per_tensor_activations=pt,
                     opset=opset_v, sidecar=sidecar, scales=activation_scales(proto))


def qdq_for_ort(model):
    """A copy of a Q/DQ model that ONNX Runtime runs with QLinearConv/QLinearAdd (outputs identical)."""
    onnx = require("onnx", "Q/DQ rewriting")
    from onnx import helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    _constants_to_initializers(m)
    g = m.graph
    inits = {i.name for i in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    users: Dict[str, List[Any]] = {}
    for n in g.node:
        for i in n.input:
            users.setdefault(i, []).append(n)
    plans = []
    done = set()
    for q in g.node:
        if q.op_type != "QuantizeLinear" or q.input[0] in inits:
            continue
        relu = producer.get(q.input[0])
        if relu is None or relu.name in done or not _zero_floor_activation(relu, inits, g):
            continue
        pre = producer.get(relu.input[0])
        if pre is None or pre.op_type not in ("Conv", "Add") or len(users.get(relu.input[0], [])) != 1:
            continue
        plans.append((relu, q))
        done.add(relu.name)
    for relu, q in plans:
        t = relu.input[0]
        qn = helper.make_node("QuantizeLinear", [t] + list(q.input[1:]), [t + "_ortq"], name=t + "_ortQ")
        dqn = helper.make_node("DequantizeLinear", [t + "_ortq"] + list(q.input[1:]), [t + "_ortdq"],
                               name=t + "_ortDQ")
        relu.input[0] = t + "_ortdq"
        idx = list(g.node).index(relu)
        g.node.insert(idx, dqn)
        g.node.insert(idx, qn)
    _unique_dq_per_consumer(g)
    _private_qparams(g)
    return m


def _private_qparams(g) -> None:
    """Each Q -> DQ pair gets its own scale/zero-point initializers (ORT's int8 -> uint8 conversion rewrites a
    pair's zero point and skips pairs whose parameters other pairs share)."""
    from onnx import numpy_helper

    inits = {i.name: i for i in g.initializer}
    users: Dict[str, List[Any]] = {}
    for n in g.node:
        for i in n.input:
            users.setdefault(i, []).append(n)
    seen = set()
    for q in [n for n in g.node if n.op_type == "QuantizeLinear" and n.input[0] not in inits]:
        dqs = [d for d in users.get(q.output[0], []) if d.op_type == "DequantizeLinear"]
        for slot in (1, 2):
            name = q.input[slot]
            if name not in inits:
                continue
            if name not in seen:
                seen.add(name)
                continue
            new = "%s_for_%s" % (name, q.name)
            t = numpy_helper.from_array(numpy_helper.to_array(inits[name]), new)
            g.initializer.append(t)
            inits[new] = t
            q.input[slot] = new
            for d in dqs:
                if d.input[slot] == name:
                    d.input[slot] = new


def _unique_dq_per_consumer(g) -> None:
    """ORT fuses a node unit only when its Q -> DQ input feeds that node alone: give each consumer its own pair."""
    from onnx import helper

    users: Dict[str, List[Any]] = {}
    for n in g.node:
        for i in n.input:
            users.setdefault(i, []).append(n)
    inits = {i.name for i in g.initializer}
    graph_outputs = {o.name for o in g.output}
    for q in [n for n in g.node if n.op_type == "QuantizeLinear" and n.input[0] not in inits]:
        dqs = users.get(q.output[0], [])
        if not dqs or any(d.op_type != "DequantizeLinear" or d.output[0] in graph_outputs for d in dqs):
            continue
        slots = [(dq, u) for dq in dqs for u in users.get(dq.output[0], [])]
        for k, (dq, u) in enumerate(slots[1:], start=1):
            qo, do = "%s_u%d" % (q.output[0], k), "%s_u%d" % (dq.output[0], k)
            attrs = {a.name: helper.get_attribute_value(a) for a in dq.attribute}
            q2 = helper.make_node("QuantizeLinear", list(q.input), [qo], name="%s_u%d" % (q.name, k), **attrs)
            dq2 = helper.make_node("DequantizeLinear", [qo] + list(dq.input[1:]), [do], name="%s_u%d" % (dq.name, k),
                                   **attrs)
            for j, inp in enumerate(u.input):
                if inp == dq.output[0]:
                    u.input[j] = do
            idx = list(g.node).index(u)
            g.node.insert(idx, dq2)
            g.node.insert(idx, q2)


def _zero_floor_activation(node, inits, g) -> bool:
    """Relu, or Clip with min 0 (ReLU6): monotone, 0 -> 0, so it commutes with zero-point-0 quantization."""
    if node.op_type == "Relu":
        return True
    if node.op_type != "Clip" or len(node.input) < 2 or not node.input[1]:
        return False
    from onnx import numpy_helper

    lo = node.input[1]
    if lo in inits:
        value = numpy_helper.to_array(next(i for i in g.initializer if i.name == lo))
    else:
        const = next((n for n in g.node if n.op_type == "Constant" and n.output[0] == lo), None)
        if const is None:
            return False
        value = numpy_helper.to_array(const.attribute[0].t)
    return value.size == 1 and float(value.reshape(-1)[0]) == 0.0


def ort_session(model: Union[PathLike, Any], threads: int = 0, arithmetic: str = "simulated"):
    """A CPU session (:class:`~jetforge.runtime.session.Session`) for a Q/DQ model: simulated TensorRT INT8
    arithmetic (default) or ``"ort-int8"`` kernels.

    Sessions are opened by :func:`jetforge.calibrate.ortrun.session` (through ``open_session``), as INT8
    evaluation opens them; ``"ort-int8"`` numbers depend on this CPU (see :mod:`jetforge.runtime.cpu_features`).
    """
    from jetforge.calibrate import ortrun

    return ortrun.session(model, arithmetic, threads)


def ort_kernels(model: Any, folder: Optional[PathLike] = None) -> Dict[str, int]:
    """Op counts of the graph ONNX Runtime runs with its INT8 kernels (after its optimisations).

    ``folder`` is kept for compatibility; the optimised graph goes to a temporary file.
    """
    from jetforge.calibrate import ortrun

    return ortrun.executed_ops(model, "ort-int8")


def onnx_logits(model: Any, x: np.ndarray, batch_size: int = 1000, threads: int = 0,
                arithmetic: str = "simulated") -> np.ndarray:
    """First output of a Q/DQ model (path, ModelProto or an open session) on ``x``, in batches."""
    from jetforge.runtime.session import Session

    own = not isinstance(model, Session)
    sess = ort_session(model, threads, arithmetic) if own else model
    try:
        name, first = sess.inputs[0].name, sess.outputs[0].name
        return np.concatenate([sess.infer({name: x[i:i + batch_size].astype(np.float32)}, outputs=[first])[first]
                               for i in range(0, len(x), batch_size)])
    finally:
        if own:
            sess.close()


def onnx_accuracy(model: Any, x: np.ndarray, y: np.ndarray, batch_size: int = 1000, threads: int = 0,
                  arithmetic: str = "simulated") -> float:
    """Top-1 accuracy of a Q/DQ ONNX model (path, ModelProto or session) in ONNX Runtime on the CPU.

    ``arithmetic="simulated"`` (default) gives TensorRT's INT8 arithmetic on any CPU; ``"ort-int8"``
    ONNX Runtime's INT8 kernels (CPU-dependent; give it :func:`qdq_for_ort`'s rewrite so they fuse).
    """
    logits = onnx_logits(model, x, batch_size, threads, arithmetic)
    return float((logits.argmax(1) == y).mean())


__all__ = ["INT8_KERNELS", "QdqExport", "activation_scales", "export_qdq_onnx", "normalize_qdq", "onnx_accuracy",
           "onnx_logits", "ort_kernels", "ort_session", "qdq_for_ort"]
