"""How the predicted DLA layers group into loadables, and the activation patterns worth a remark.

A DLA loadable is a connected group of DLA layers with no GPU work in between; TensorRT also splits
where the batch changes.  A board runs a limited number of loadables per core (16 by default), so the
count matters as much as the layers.  Layers here are :class:`~.analyze.LayerResult` objects (``index``,
``name``, ``kind``, ``device``, ``output_shape``, ``onnx_op``).
"""

from typing import Any, Dict, List, Optional, Sequence

from jetforge.runtime.tensorrt.dla.graph import prod

FOLDED = "folded"     # device of a layer TensorRT folds away
DLA = "DLA"
GPU_DEVICE = "GPU"


def dla_subgraphs(proto: Any, layers: Sequence[Any]) -> List[List[str]]:
    """Group DLA layers into loadables: connected, same stage (no GPU work in between), same batch."""
    by_index = {l.index: l for l in layers}
    producer: Dict[str, int] = {}
    nodes = list(proto.graph.node)
    # pass-through layers (Identity, Dropout, folded) forward their producer
    for i, node in enumerate(nodes):
        layer = by_index[i]
        if layer.device == FOLDED:
            src = next((producer[t] for t in node.input if t in producer), None)
            for o in node.output:
                if src is not None and layer.kind == "none":
                    producer[o] = src
            continue
        for o in node.output:
            producer[o] = i
    stage: Dict[int, int] = {}      # DLA layer -> stage index
    after: Dict[int, int] = {}      # GPU layer -> earliest DLA stage that may follow it
    parent: Dict[int, int] = {}

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    def batch(layer: Any) -> Optional[int]:
        s = layer.output_shape
        if not s or any(d is None for d in s):
            return None
        return prod(s[:-3]) if len(s) > 3 else 1

    for i, node in enumerate(nodes):
        layer = by_index[i]
        if layer.device == FOLDED:
            continue
        preds = sorted({producer[t] for t in node.input if t in producer})
        if layer.device == DLA:
            s = 0
            for p in preds:
                s = max(s, stage[p] if by_index[p].device == DLA else after.get(p, 0))
            stage[i] = s
            parent[i] = i
            for p in preds:
                if by_index[p].device == DLA and stage[p] == s and batch(by_index[p]) == batch(layer):
                    parent[find(p)] = find(i)
        else:
            a = 0
            for p in preds:
                a = max(a, stage[p] + 1 if by_index[p].device == DLA else after.get(p, 0))
            after[i] = a
    groups: Dict[int, List[str]] = {}
    for i in sorted(stage):
        groups.setdefault(find(i), []).append(by_index[i].name)
    return sorted(groups.values(), key=lambda names: min(by_index_name(layers, n) for n in names))


def by_index_name(layers: Sequence[Any], name: str) -> int:
    for l in layers:
        if l.name == name:
            return l.index
    return -1


def activation_patterns(proto: Any, layers: Sequence[Any]) -> List[str]:
    """Recognised activation patterns and what DLA does with them."""
    out: List[str] = []
    nodes = list(proto.graph.node)
    consumers: Dict[str, List[Any]] = {}
    for node in nodes:
        for t in node.input:
            consumers.setdefault(t, []).append(node)
    swish = hsig_mul = 0
    for node in nodes:
        if node.op_type in ("Sigmoid", "HardSigmoid") and node.input:
            for c in consumers.get(node.output[0], []):
                if c.op_type == "Mul" and node.input[0] in c.input:
                    if node.op_type == "Sigmoid":
                        swish += 1
                    else:
                        hsig_mul += 1
    if swish:
        out.append("Swish/SiLU (Sigmoid + Mul) x%d: both run on DLA (kSIGMOID + element-wise kPROD)" % swish)
    if hsig_mul:
        out.append("HardSwish as HardSigmoid + Mul x%d: HardSigmoid falls back to the GPU; write it as "
                   "Clip(x + 3, 0, 6) * (1/6)" % hsig_mul)
    hswish = sum(1 for l in layers if l.onnx_op == "HardSwish")
    if hswish:
        out.append("HardSwish x%d: not a DLA activation; write it as x * Clip(x + 3, 0, 6) * (1/6)" % hswish)
    relu6 = sum(1 for l in layers if l.onnx_op == "Clip" and l.device == DLA)
    if relu6:
        out.append("Clip (ReLU6) x%d: runs on DLA as kCLIP" % relu6)
    return out
