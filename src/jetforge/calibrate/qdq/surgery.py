"""Q/DQ graph surgery for INT8 evaluation: which nodes are INT8 layers, and taking layers back to float.

A *quantized layer* is a node (other than Q/DQ) with an input produced by DequantizeLinear: one INT8
layer for TensorRT.  :func:`dequantize_layers` bypasses a layer's Q/DQ pairs (TensorRT then runs it
in FP16/FP32), :func:`only_layers` keeps just some layers INT8; mixed precision and per-layer
sensitivity are built from these.
"""

from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Set

from jetforge.errors import CalibrationError
from jetforge.optional import require


def _onnx():
    return require("onnx", "INT8 accuracy evaluation")


def unique_name(base: str, taken: Set[str]) -> str:
    """``base``, or ``base_1``, ``base_2``... : the first name not in ``taken``, which is then added to it
    (graph rewrites add nodes and tensors whose names must not collide with the model's)."""
    name, k = base, 1
    while name in taken:
        name = "%s_%d" % (base, k)
        k += 1
    taken.add(name)
    return name


def load(model):
    from jetforge.calibrate.stats import load_model

    return load_model(model)


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


__all__ = ["QuantizedLayer", "dequantize_layers", "load", "only_layers", "quantized_layers"]
